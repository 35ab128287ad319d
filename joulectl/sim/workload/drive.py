"""``simulate run --trace``: the what-if workload model driving the emulator's tick loop in time.

Each tick (emulate-mode seed, "Workload runs"): the tasks that have arrived by the tick's start are
placed by the same placement code as ``simulate compare`` (no twins: the caps are whatever is in force
on the trees, set by ``joulectl cap`` or an agent), each node's load is the load of the tasks on it
(each task holds its requested CPUs and GPUs), the tick steps the nodes, and each task advances at
the speed the limits the tick read back leave it (:func:`joulectl.sim.workload.speed.node_power`).
The node's energy of the tick is attributed per class (performance, standard, idle) in the
proportions of the same model. While a run is active the spec's baseLoad does not apply.

What it writes under the root: events ``joulie.sim.job.started``, ``joulie.sim.job.completed`` and
``joulie.sim.job.unplaceable`` in ``events.jsonl``; ``workload.prom`` (Prometheus text: energy per
class, jobs by state) and ``workload.json`` (the same as a document) after every tick.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Sequence
from typing import Any

from joulectl.sim.clusterspec import ClusterSpec
from joulectl.sim.tick import BaseLoad, Event, Sample
from joulectl.sim.workload.fleet import Fleet, FleetNode, Limits, shape_of_model
from joulectl.sim.workload.placement import Placer
from joulectl.sim.workload.speed import Running, node_power
from joulectl.sim.workload.traces import Task

CLASSES = ("performance", "standard", "idle")


class TraceWorkload:
    """A trace run on the spec's emulated nodes, one tick at a time (a :class:`runtime.Workload`)."""

    def __init__(self, spec: ClusterSpec, tasks: Sequence[Task], root: str) -> None:
        from joulectl.sim import layout
        from joulectl.sim.k8s import node_hardware, node_object

        self.root = root
        nodes = [FleetNode(n.name, node_object(n), node_hardware(n), n, n.profile.profile_hash()) for n in spec.nodes]
        self.fleet = Fleet(nodes, {}, spec.facility, spec.file)
        for n in nodes:
            if n.shape not in self.fleet.shapes:
                model = layout.model_for(os.path.join(root, n.name), n.name, n.spec_node.profile)
                self.fleet.shapes[n.shape] = shape_of_model(n.shape, n.spec_node, model)
        self.shapes = [self.fleet.shapes[n.shape] for n in nodes]
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.placer = Placer(nodes, {}, [len(s.gpus) for s in self.shapes])
        self.tasks = list(tasks)
        self.pending = deque(range(len(self.tasks)))  # not arrived yet, in arrival order
        self.queue: deque[int] = deque()
        self.running: list[list[Running]] = [[] for _ in nodes]
        self.remaining = [t.duration_s for t in self.tasks]
        self.started = [0.0] * len(self.tasks)
        self.limits: list[Limits] = [Limits(tuple(None for _ in s.packages), tuple(g.max_w for g in s.gpus),
                                            tuple(1.0 for _ in s.gpus)) for s in self.shapes]
        self.changed: set[int] = set(range(len(nodes)))
        self.t0: float | None = None
        self.energy_j = dict.fromkeys(CLASSES, 0.0)
        self.completed = 0
        self.unplaceable: dict[str, int] = {}
        self.slowdowns: list[float] = []
        self.events: list[Event] = []

    # -- the hook ------------------------------------------------------------------------------------

    def _load(self, i: int) -> BaseLoad:
        running = self.running[i]
        shape = self.shapes[i]
        cores = max(1, self.placer.cores_milli[i])
        if not running:
            return BaseLoad(cpu_util=0.0, gpu_util=0.0, memory_intensity=0.0, io_intensity=0.0)
        cpu = sum(min(r.task.cpu_milli, cores) for r in running)
        util = min(1.0, sum(min(r.task.cpu_milli, cores) * r.task.cpu_util for r in running) / cores)
        mem = sum(min(r.task.cpu_milli, cores) * r.task.memory_intensity for r in running) / cpu if cpu else \
            sum(r.task.memory_intensity for r in running) / len(running)
        io = sum(min(r.task.cpu_milli, cores) * r.task.io_intensity for r in running) / cpu if cpu else 0.0
        gpu_busy = sum(r.task.gpu_util * r.milli / 1000.0 * len(r.gpus) for r in running)
        n = len(shape.gpus)
        top = max(running, key=lambda r: (len(r.gpus) * r.milli, -r.index))
        return BaseLoad(cpu_util=util, gpu_util=min(1.0, gpu_busy / n) if n else 0.0, memory_intensity=mem,
                        io_intensity=io, cpu_class="cpu.mixed", gpu_class=top.task.gpu_class)

    def _event(self, now: float, node: str, name: str, **attrs: Any) -> None:
        self.events.append(Event(now, node, name, attrs))

    def _place(self, k: int, now: float, wall: float) -> bool:
        """Place task k at trace time ``now`` (``wall``: the run's clock, for events); False: no room now."""
        task = self.tasks[k]
        cands = self.placer.candidates(task)
        if isinstance(cands, str) or not self.placer.ever_fits(task, cands):
            why = cands if isinstance(cands, str) else "larger than every node that passes the filters"
            self.unplaceable[why] = self.unplaceable.get(why, 0) + 1
            self._event(wall, "", "joulie.sim.job.unplaceable", job=task.name, reason=why)
            return True
        got = self.placer.best(task, cands)
        if got is None:
            return False
        i, gpus = got
        self.placer.take(i, task, gpus)
        self.running[i].append(Running(task, k, gpus, 1000 if task.gpu_milli >= 1000 else task.gpu_milli))
        self.started[k] = now
        self.changed.add(i)
        self._event(wall, self.fleet.nodes[i].name, "joulie.sim.job.started", job=task.name,
                    **{"class": task.workload_class, "gpus": list(gpus), "wait_s": round(now - task.arrival_s, 3)})
        return True

    def loads(self, now: float, dt_s: float) -> dict[str, BaseLoad]:
        """Place what has arrived by the tick's start; the loads of the nodes that changed."""
        if self.t0 is None:
            self.t0 = now - dt_s
        t = now - dt_s - self.t0
        kept: deque[int] = deque()
        while self.queue:
            k = self.queue.popleft()
            if not self._place(k, t, now - dt_s):
                kept.append(k)
        self.queue = kept
        while self.pending and self.tasks[self.pending[0]].arrival_s <= t + 1e-9:
            k = self.pending.popleft()
            if not self._place(k, t, now - dt_s):
                self.queue.append(k)
        out = {self.fleet.nodes[i].name: self._load(i) for i in sorted(self.changed)}
        self.changed.clear()
        return out

    def advance(self, now: float, dt_s: float, samples: list[Sample]) -> None:
        """Attribute each node's tick energy per class, move its tasks on, end the finished ones."""
        assert self.t0 is not None
        t_end = now - self.t0
        for s in samples:
            i = self.index.get(s.node)
            if i is None:
                continue
            shape = self.shapes[i]
            cpu_caps = tuple(s.caps_w.get(f"pkg{k}") for k in range(len(shape.packages)))
            gpu_caps = tuple(float(s.caps_w.get(f"gpu{g}") or shape.gpus[g].max_w) for g in range(len(shape.gpus)))
            lim = Limits(cpu_caps, gpu_caps, tuple(1.0 for _ in shape.gpus))
            if lim != self.limits[i]:
                self.limits[i] = lim
            running = self.running[i]
            p = node_power(shape, lim, self.placer.cores_milli[i], running)
            energy = s.power_w * dt_s
            if p.total_w > 0:
                self.energy_j["performance"] += energy * p.performance_w / p.total_w
                self.energy_j["standard"] += energy * p.standard_w / p.total_w
                self.energy_j["idle"] += energy * p.idle_w / p.total_w
            else:
                self.energy_j["idle"] += energy
            finished = []
            for r, speed in zip(running, p.speeds, strict=True):
                self.remaining[r.index] -= speed * dt_s
                if self.remaining[r.index] <= 1e-9:
                    finished.append((r, t_end + self.remaining[r.index] / speed))
            for r, end in finished:
                running.remove(r)
                self.placer.release(i, r.task, r.gpus)
                self.completed += 1
                slowdown = (end - self.started[r.index]) / r.task.duration_s
                self.slowdowns.append(slowdown)
                self.changed.add(i)
                self._event(now, s.node, "joulie.sim.job.completed", job=r.task.name,
                            **{"class": r.task.workload_class, "run_s": round(end - self.started[r.index], 3),
                               "slowdown": round(slowdown, 6)})
        self._publish(now)

    # -- output ---------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        running = sum(len(r) for r in self.running)
        return {
            "tasks": len(self.tasks), "completed": self.completed, "running": running, "waiting": len(self.queue),
            "notArrived": len(self.pending), "unplaceable": sum(self.unplaceable.values()),
            "unplaceableReasons": [{"reason": k, "count": v} for k, v in sorted(self.unplaceable.items())],
            "energyByClassKWh": {k: round(v / 3.6e6, 6) for k, v in self.energy_j.items()},
            "energyKWh": round(sum(self.energy_j.values()) / 3.6e6, 6),
        }

    def _publish(self, now: float) -> None:
        from joulectl.sim.telemetry import append_events, write_atomic

        if self.events:
            append_events(self.root, self.events)
            self.events = []
        doc = self.summary()
        write_atomic(os.path.join(self.root, "workload.json"), json.dumps(doc, indent=2) + "\n")
        lines = ["# HELP joulie_sim_workload_energy_joules Energy of the nodes attributed per workload class.",
                 "# TYPE joulie_sim_workload_energy_joules counter"]
        lines += [f'joulie_sim_workload_energy_joules{{class="{k}"}} {v:.3f}' for k, v in self.energy_j.items()]
        lines += ["# HELP joulie_sim_workload_jobs Trace jobs by state.", "# TYPE joulie_sim_workload_jobs gauge"]
        for state in ("completed", "running", "waiting", "notArrived", "unplaceable"):
            lines.append(f'joulie_sim_workload_jobs{{state="{state}"}} {doc[state]}')
        write_atomic(os.path.join(self.root, "workload.prom"), "\n".join(lines) + "\n")


def trace_workload(trace: str, root: str, made: list[Any]) -> Any:
    """Read the trace now (exit 2 on a bad row, nothing run); a factory the runtime calls with the spec."""
    from joulectl.sim.workload.traces import load_trace

    tasks = load_trace(trace)

    def make(spec: ClusterSpec) -> TraceWorkload:
        wl = TraceWorkload(spec, tasks, os.path.abspath(root))
        made.append(wl)
        return wl

    return make
