"""Node power and task speed under the limits in force (joulie-reference.md §5), at steady state.

Power is the emulator's (:mod:`joulectl.sim.physics`, the same functions the tick loop steps), at the
steady state a tick settles to with the caps in force and no thermal throttling:

- each CPU package: ``cpu_package_power`` at the node's CPU utilisation (requested cores times each
  task's CPU utilisation, over the node's cores), frequency fraction 1, under its RAPL limit; DRAM
  ``3 + 12·u·(0.3 + 0.7·mem)`` W per package where the node has a DRAM zone (the tick's DRAM model);
- each GPU: ``gpu_power`` (capped board, managed idle floor) at the utilisation of the tasks on it.

Speed, relative to full speed (1 = the task's duration), the job progress formulas of §5:

- a task with GPUs: ``gpuMul·(1 − (1 − cap/max)·sensGPU)`` on its slowest GPU, ``gpuMul`` the capped
  board's throughput ``(wc·r^γc + wm·(1 − ε(1−r)^γm))``, ``r = cap/Pnat`` (1 when the cap is above the
  board's natural power), times the governor's clock fraction when that is lower;
- a CPU-only task: ``1 − sens·impact·(1 − cpuMul)``, ``impact = .6u + .25(1−mem) + .15(1−io)``,
  ``cpuMul`` the CPU throughput at the frequency the package's cap leaves.

Energy attribution per class (emulate-mode seed, "Workload runs"): each component's power at no load
is its idle power; the share of it no task requested (free cores, free GPU share) is ``idle``, the rest
of the component's power goes to the tasks on it in proportion to what they requested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from joulectl.sim import physics as ph
from joulectl.sim.workload.fleet import Limits, Shape
from joulectl.sim.workload.traces import Task

#: Slowest speed a task is given, so that a task under a near-zero cap still ends (a fraction of 1).
MIN_SPEED = 0.01

#: Each coefficient of the model and where it comes from.
COEFFICIENTS: list[dict[str, Any]] = [
    {"name": "gammaC", "value": 1.0, "source": "joulie-reference.md §5 profile table, GPU throughput γc (Joulie "
                                                "simulator default, SIM_* env defaults)"},
    {"name": "epsilon", "value": 0.2, "source": "joulie-reference.md §5 profile table, GPU throughput ε"},
    {"name": "gammaM", "value": 1.2, "source": "joulie-reference.md §5 profile table, GPU throughput γm"},
    {"name": "gpuWeights", "value": "compute .8/.2, memory .2/.8, mixed .5/.5; blended .6/.4 with memory intensity",
     "source": "joulie-reference.md §5 GPU power, Weights"},
    {"name": "gpuPower", "value": "idle + (max-idle)·u^1.02 compute, idle + (max-idle)(.35√u + .3u) memory",
     "source": "joulie-reference.md §5 GPU power (CappedBoardGPUModel)"},
    {"name": "managedIdle", "value": 0.10, "source": "joulie-reference.md §5 GPU power, managed idle floor"},
    {"name": "cpuImpact", "value": ".6u + .25(1-mem) + .15(1-io)", "source": "joulie-reference.md §5 Job progress"},
    {"name": "dramW", "value": "3 + 12·u·(0.3 + 0.7·mem) per package", "source": "joulectl.sim.tick (the "
                                                                                 "emulator's DRAM model, assumption)"},
    {"name": "pue", "value": "1.08 + 0.006(T-15) + 0.04L + 0.015L(T-15)/15",
     "source": "joulie-reference.md §5 Facility model"},
    {"name": "classDefaults", "value": "CPU util .95/.60/.20/.65, GPU util .95/.70/.80, mem .85/.20/.45, io .85/.10",
     "source": "joulie-reference.md §5 Class-derived defaults"},
]


def gpu_coefficients(shape: Shape) -> list[dict[str, Any]]:
    """Per GPU model of a shape: idle, max and minimum cap (from its profile) and the throughput exponents."""
    out = []
    seen: set[str] = set()
    for model, g in zip(shape.gpu_models, shape.gpus, strict=True):
        if model in seen:
            continue
        seen.add(model)
        out.append({"gpuModel": model, "profile": shape.profile, "idleW": g.idle_w, "maxW": g.max_w,
                    "minCapW": g.min_cap_w, "gammaC": g.gamma_c, "epsilon": g.epsilon, "gammaM": g.gamma_m,
                    "source": f"hardware profile {shape.profile} (gpus.physics, with its sources: simulate profiles "
                              f"-o yaml) and the catalog's maximum board power; throughput exponents as above"})
    return out


@lru_cache(maxsize=256)
def _weights(gpu_class: str, memory_intensity: float) -> tuple[float, float]:
    return ph.gpu_weights(gpu_class, memory_intensity)


@dataclass
class Running:
    """A task running on a node: what it holds there."""

    task: Task
    index: int
    gpus: tuple[int, ...]  # the node's GPUs it holds
    milli: int  # share of each of those GPUs (1000 = whole)


@dataclass
class NodePower:
    """A node's power and its split by class, and each running task's speed."""

    total_w: float
    performance_w: float
    standard_w: float
    idle_w: float
    speeds: list[float]


def node_power(shape: Shape, limits: Limits, cores_milli: int, running: Sequence[Running]) -> NodePower:
    """Power, per-class split and task speeds of one node with ``running`` tasks (see module doc)."""
    by_class = {"performance": 0.0, "standard": 0.0}
    idle_total = 0.0
    total = 0.0
    # -- CPU packages and DRAM: shared by the tasks in proportion to their cores
    cores = max(1, cores_milli)
    req_cpu = [min(r.task.cpu_milli, cores) for r in running]
    used = min(1.0, sum(req_cpu) / cores)
    util = min(1.0, sum(c * r.task.cpu_util for c, r in zip(req_cpu, running, strict=True)) / cores)
    w = sum(req_cpu)
    mem = sum(c * r.task.memory_intensity for c, r in zip(req_cpu, running, strict=True)) / w if w else 0.0
    io = sum(c * r.task.io_intensity for c, r in zip(req_cpu, running, strict=True)) / w if w else 0.0
    freqs: list[float] = []
    cpu_busy = 0.0
    cpu_idle = 0.0
    for pkg, rng, cap in zip(shape.packages, shape.cap_ranges, limits.cpu_caps_w, strict=True):
        res = ph.cpu_package_power(pkg, util, 1.0, cap, cap_range_w=rng, memory_intensity=mem, io_intensity=io)
        idle = ph.cpu_package_power(pkg, 0.0, 1.0, cap, cap_range_w=rng).power_w
        freqs.append(res.freq)
        cpu_busy += res.power_w
        cpu_idle += idle
        if shape.dram:
            cpu_busy += 3.0 + 12.0 * util * (0.3 + 0.7 * mem)
            cpu_idle += 3.0
    total += cpu_busy
    idle_share = cpu_idle * (1.0 - used)
    idle_total += idle_share
    if w:
        for c, r in zip(req_cpu, running, strict=True):
            by_class[r.task.workload_class] += (cpu_busy - idle_share) * c / w
    else:
        idle_total += cpu_busy - idle_share
    freq = min(freqs) if freqs else 1.0
    # -- GPUs: each at the utilisation of the tasks on it
    n = len(shape.gpus)
    gpu_util = [0.0] * n
    gpu_tasks: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    wcm: list[tuple[float, float]] = [(0.5, 0.5)] * n
    for i, r in enumerate(running):
        for g in r.gpus:
            gpu_util[g] += r.task.gpu_util * r.milli / 1000.0
            gpu_tasks[g].append((i, r.milli))
    for g in range(n):
        if gpu_tasks[g]:
            ws = [(_weights(running[i].task.gpu_class, running[i].task.memory_intensity), m) for i, m in gpu_tasks[g]]
            tot = sum(m for _, m in ws)
            wcm[g] = (sum(x[0] * m for x, m in ws) / tot, sum(x[1] * m for x, m in ws) / tot)
    gpu_speed = [1.0] * n
    for g, params in enumerate(shape.gpus):
        cap, clock = limits.gpu_caps_w[g], limits.gpu_clock[g]
        u = min(1.0, gpu_util[g])
        wc, wm = wcm[g]
        p = ph.gpu_power(params, u, cap, wc, wm, clock)
        total += p
        held = min(1000, sum(m for _, m in gpu_tasks[g]))
        idle = ph.gpu_power(params, 0.0, cap, 0.5, 0.5, clock)
        free_idle = idle * (1000 - held) / 1000.0
        idle_total += free_idle
        for i, m in gpu_tasks[g]:
            by_class[running[i].task.workload_class] += (p - free_idle) * m / held
        if held:
            gpu_speed[g] = ph.gpu_throughput(params, u, cap, wc, wm, 0.0, clock)
    speeds: list[float] = []
    for r in running:
        t = r.task
        if r.gpus:
            s = 1.0
            for g in r.gpus:
                params = shape.gpus[g]
                cap = limits.gpu_caps_w[g]
                frac = min(1.0, cap / params.max_w) if params.max_w > 0 else 1.0
                s = min(s, gpu_speed[g] * (1.0 - (1.0 - frac) * t.sensitivity_gpu))
        else:
            mul = ph.cpu_throughput(freq, knee=shape.packages[0].knee if shape.packages else 0.7,
                                    cpu_class=t.cpu_class, memory_intensity=t.memory_intensity,
                                    io_intensity=t.io_intensity)
            impact = 0.6 * t.cpu_util + 0.25 * (1.0 - t.memory_intensity) + 0.15 * (1.0 - t.io_intensity)
            s = 1.0 - t.sensitivity_cpu * impact * (1.0 - mul)
        speeds.append(max(MIN_SPEED, min(1.0, s)))
    return NodePower(total, by_class["performance"], by_class["standard"], idle_total, speeds)


def peak_w(shape: Shape) -> float:
    """The shape's peak IT power, as the facility model's load reference (the tick loop's ``peak_it_w``)."""
    total = 0.0
    for p in shape.packages:
        total += max(p.curve_w) if p.curve_w else p.max_w
        total += 15.0 if shape.dram else 0.0
    return total + sum(g.max_w for g in shape.gpus)
