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


class _Calc:
    """The physics of one node shape under one set of limits, memoised per operating point."""

    __slots__ = ("board_cache", "board_of", "boards", "cpu_cache", "dram", "gpu_idle_sum", "idle", "knee", "pkgs")

    def __init__(self, shape: Shape, limits: Limits) -> None:
        self.pkgs = list(zip(shape.packages, shape.cap_ranges, limits.cpu_caps_w, strict=True))
        self.dram = shape.dram
        self.knee = shape.packages[0].knee if shape.packages else 0.7
        self.cpu_cache: dict[tuple[float, float, float], tuple[float, float, float]] = {}
        index: dict[tuple[ph.GpuParams, float, float], int] = {}
        self.boards: list[tuple[ph.GpuParams, float, float, float]] = []
        self.board_of: list[int] = []
        for params, cap, clock in zip(shape.gpus, limits.gpu_caps_w, limits.gpu_clock, strict=True):
            key = (params, cap, clock)
            if key not in index:
                index[key] = len(self.boards)
                frac = min(1.0, cap / params.max_w) if params.max_w > 0 else 1.0
                self.boards.append((params, cap, clock, frac))
            self.board_of.append(index[key])
        self.board_cache: list[dict[tuple[float, float, float], tuple[float, float]]] = [{} for _ in self.boards]
        self.idle = [ph.gpu_power(b[0], 0.0, b[1], 0.5, 0.5, b[2]) for b in self.boards]
        self.gpu_idle_sum = sum(self.idle[b] for b in self.board_of)

    def cpu(self, util: float, mem: float, io: float) -> tuple[float, float, float]:
        """(power with DRAM, lowest frequency fraction, power at no load with DRAM) of the packages."""
        key = (util, mem, io)
        got = self.cpu_cache.get(key)
        if got is None:
            busy = idle = 0.0
            freq = 1.0
            for pkg, rng, cap in self.pkgs:
                res = ph.cpu_package_power(pkg, util, 1.0, cap, cap_range_w=rng, memory_intensity=mem,
                                           io_intensity=io)
                busy += res.power_w
                idle += ph.cpu_package_power(pkg, 0.0, 1.0, cap, cap_range_w=rng).power_w
                freq = min(freq, res.freq)
                if self.dram:
                    busy += 3.0 + 12.0 * util * (0.3 + 0.7 * mem)
                    idle += 3.0
            got = self.cpu_cache[key] = (busy, freq, idle)
        return got

    def board(self, b: int, util: float, wc: float, wm: float) -> tuple[float, float]:
        """(power, throughput) of board kind ``b`` at an operating point."""
        cache = self.board_cache[b]
        key = (util, wc, wm)
        got = cache.get(key)
        if got is None:
            params, cap, clock, _frac = self.boards[b]
            got = cache[key] = (ph.gpu_power(params, util, cap, wc, wm, clock),
                                ph.gpu_throughput(params, util, cap, wc, wm, 0.0, clock))
        return got


_CALCS: dict[tuple[str, Limits], _Calc] = {}


def _calc(shape: Shape, limits: Limits) -> _Calc:
    key = (shape.key, limits)
    calc = _CALCS.get(key)
    if calc is None:
        if len(_CALCS) > 4096:
            _CALCS.clear()
        calc = _CALCS[key] = _Calc(shape, limits)
    return calc


@lru_cache(maxsize=1 << 14)
def _cpu_mul(freq: float, knee: float, cpu_class: str, mem: float, io: float) -> float:
    return ph.cpu_throughput(freq, knee=knee, cpu_class=cpu_class, memory_intensity=mem, io_intensity=io)


def node_power(shape: Shape, limits: Limits, cores_milli: int, running: Sequence[Running]) -> NodePower:
    """Power, per-class split and task speeds of one node with ``running`` tasks (see module doc)."""
    calc = _calc(shape, limits)
    perf = std = 0.0
    # -- CPU packages and DRAM: shared by the tasks in proportion to their cores
    cores = max(1, cores_milli)
    w = 0
    util = mem = io = 0.0
    for r in running:
        t = r.task
        c = t.cpu_milli if t.cpu_milli < cores else cores
        w += c
        util += c * t.cpu_util
        mem += c * t.memory_intensity
        io += c * t.io_intensity
    used = min(1.0, w / cores)
    util = min(1.0, util / cores)
    if w:
        mem, io = mem / w, io / w
    cpu_busy, freq, cpu_idle = calc.cpu(util, mem, io)
    total = cpu_busy
    idle_share = cpu_idle * (1.0 - used)
    idle_total = idle_share
    if w:
        for r in running:
            t = r.task
            share = (cpu_busy - idle_share) * (t.cpu_milli if t.cpu_milli < cores else cores) / w
            if t.workload_class == "performance":
                perf += share
            else:
                std += share
    else:
        idle_total += cpu_busy - idle_share
    # -- GPUs: every board idle, then the busy ones at the utilisation of the tasks on them
    total += calc.gpu_idle_sum
    idle_total += calc.gpu_idle_sum
    busy: dict[int, list[Any]] = {}  # gpu -> [util, [(task position, milli)]]
    for i, r in enumerate(running):
        for g in r.gpus:
            slot = busy.get(g)
            if slot is None:
                slot = busy[g] = [0.0, []]
            slot[0] += r.task.gpu_util * r.milli / 1000.0
            slot[1].append((i, r.milli))
    gpu_speed: dict[int, float] = {}
    for g, (u, holders) in busy.items():
        b = calc.board_of[g]
        if len(holders) == 1:
            t = running[holders[0][0]].task
            wc, wm = _weights(t.gpu_class, t.memory_intensity)
        else:
            tot = sum(m for _, m in holders)
            wc = sum(_weights(running[i].task.gpu_class, running[i].task.memory_intensity)[0] * m
                     for i, m in holders) / tot
            wm = sum(_weights(running[i].task.gpu_class, running[i].task.memory_intensity)[1] * m
                     for i, m in holders) / tot
        p, gpu_speed[g] = calc.board(b, min(1.0, u), wc, wm)
        idle_g = calc.idle[b]
        held = min(1000, sum(m for _, m in holders))
        free_idle = idle_g * (1000 - held) / 1000.0
        total += p - idle_g
        idle_total += free_idle - idle_g
        for i, m in holders:
            share = (p - free_idle) * m / held
            if running[i].task.workload_class == "performance":
                perf += share
            else:
                std += share
    speeds: list[float] = []
    for r in running:
        t = r.task
        if r.gpus:
            s = 1.0
            for g in r.gpus:
                frac = calc.boards[calc.board_of[g]][3]
                s = min(s, gpu_speed[g] * (1.0 - (1.0 - frac) * t.sensitivity_gpu))
        else:
            mul = _cpu_mul(freq, calc.knee, t.cpu_class, t.memory_intensity, t.io_intensity)
            impact = 0.6 * t.cpu_util + 0.25 * (1.0 - t.memory_intensity) + 0.15 * (1.0 - t.io_intensity)
            s = 1.0 - t.sensitivity_cpu * impact * (1.0 - mul)
        speeds.append(max(MIN_SPEED, min(1.0, s)))
    return NodePower(total, perf, std, idle_total, speeds)


def peak_w(shape: Shape) -> float:
    """The shape's peak IT power, as the facility model's load reference (the tick loop's ``peak_it_w``)."""
    total = 0.0
    for p in shape.packages:
        total += max(p.curve_w) if p.curve_w else p.max_w
        total += 15.0 if shape.dram else 0.0
    return total + sum(g.max_w for g in shape.gpus)
