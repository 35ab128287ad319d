"""The event-driven replay of a trace on a fleet under one plan, in simulated time.

Events (a heap, ordered by time, then a sequence number: deterministic) are task arrivals and task
ends. A task that arrives is placed on the best node with room (:mod:`.placement`), or waits in a
queue (first come, first served) when none has room; one that no node can ever take is
unplaceable, with the filters' reason. When a task ends, the waiting tasks are offered the node it
left, in arrival order. A gang (Joulie ``gang``) is placed whole once all its members have arrived.

Between two events nothing changes, so each node's power is constant there: energy is power times
time, per node and per class, added up when the node changes. The facility's energy integrates
``IT·PUE(t)`` exactly over each interval (PUE is linear in the ambient temperature, a sine; unrounded).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from joulectl.sim.clusterspec import Facility
from joulectl.sim.workload.fleet import Fleet, Limits
from joulectl.sim.workload.placement import Placer
from joulectl.sim.workload.speed import NodePower, Running, node_power, peak_w
from joulectl.sim.workload.traces import Task

ARRIVE, END = 0, 1
#: Points kept of the power-over-time series (for the report), at most.
SERIES_POINTS = 2000


@dataclass
class PlanResult:
    """What one plan's replay measured (joules and seconds; the document converts)."""

    name: str
    energy_j: float = 0.0
    energy_by_class_j: dict[str, float] = field(default_factory=lambda: {"performance": 0.0, "standard": 0.0,
                                                                         "idle": 0.0})
    facility_j: float = 0.0
    peak_w: float = 0.0
    start_s: float = 0.0
    end_s: float = 0.0
    completed: int = 0
    unplaceable: dict[str, int] = field(default_factory=dict)
    slowdown: dict[str, list[float]] = field(default_factory=lambda: {"performance": [], "standard": []})
    wait_s: dict[str, list[float]] = field(default_factory=lambda: {"performance": [], "standard": []})
    series: list[tuple[float, float]] = field(default_factory=list)
    node_energy_j: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Node:
    __slots__ = ("energy", "last", "power", "running", "version")

    def __init__(self) -> None:
        self.running: list[Running] = []
        self.power: NodePower | None = None
        self.last = 0.0
        self.energy = [0.0, 0.0, 0.0, 0.0]  # total, performance, standard, idle
        self.version = 0


class _Task:
    __slots__ = ("done", "node", "rate", "remaining", "since", "start", "version")

    def __init__(self, duration: float) -> None:
        self.remaining = duration  # seconds of work at full speed
        self.rate = 1.0
        self.since = 0.0
        self.start = -1.0
        self.node = -1
        self.version = 0
        self.done = False


def _facility_integral(fac: Facility, t0: float, t1: float) -> float:
    """∫ (T(t) - 15) dt over [t0, t1], T = base + amplitude·sin(2πt/period)."""
    period = max(1.0, fac.period_h * 3600.0)
    w = 2.0 * math.pi / period
    return (fac.ambient_c - 15.0) * (t1 - t0) + fac.amplitude_c / w * (math.cos(w * t0) - math.cos(w * t1))


def replay(fleet: Fleet, tasks: Sequence[Task], limits: dict[str, Limits], twins: dict[str, Any], name: str,
           progress: Callable[[int], None] | None = None) -> PlanResult:
    """Run ``tasks`` on the fleet under one plan's limits and twins."""
    nodes = fleet.nodes
    shapes = [fleet.shapes[n.shape] for n in nodes]
    lim = [limits[n.name] for n in nodes]
    placer = Placer(nodes, twins, [len(s.gpus) for s in shapes])
    state = [_Node() for _ in nodes]
    run = [_Task(t.duration_s) for t in tasks]
    res = PlanResult(name)
    for notes in dict.fromkeys(lm.notes for lm in lim):  # each shape's notes once, in node order
        res.notes.extend(notes)
    peak = sum(peak_w(s) for s in shapes)
    fac = fleet.facility
    it_w = 0.0
    clock = [tasks[0].arrival_s if tasks else 0.0]
    res.start_s = clock[0]

    # idle power of every node from the start
    for i, st in enumerate(state):
        st.power = node_power(shapes[i], lim[i], placer.cores_milli[i], ())
        st.last = clock[0]
        it_w += st.power.total_w
    res.peak_w = it_w
    series: list[tuple[float, float]] = [(clock[0], it_w)]

    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0
    for k, t in enumerate(tasks):
        heap.append((t.arrival_s, seq, ARRIVE, k, 0))
        seq += 1
    heapq.heapify(heap)
    gangs: dict[str, list[int]] = {}
    gang_size: dict[str, int] = {}
    for t in tasks:
        if t.gang:
            gang_size[t.gang] = gang_size.get(t.gang, 0) + 1
    queue: deque[list[int]] = deque()  # units: a task, or a whole gang
    last_event = clock[0]

    def settle(i: int, now: float) -> None:
        """Add node i's energy up to now and move its tasks' work on."""
        st = state[i]
        dt = now - st.last
        if dt > 0 and st.power is not None:
            p = st.power
            e = st.energy
            e[0] += p.total_w * dt
            e[1] += p.performance_w * dt
            e[2] += p.standard_w * dt
            e[3] += p.idle_w * dt
        for r in st.running:
            tr = run[r.index]
            tr.remaining -= tr.rate * (now - tr.since)
            tr.since = now
        st.last = now

    def refresh(i: int, now: float) -> None:
        """Node i changed: new power and speeds, new end events for its tasks."""
        nonlocal it_w, seq
        st = state[i]
        old = st.power.total_w if st.power is not None else 0.0
        st.power = node_power(shapes[i], lim[i], placer.cores_milli[i], st.running)
        it_w += st.power.total_w - old
        for r, speed in zip(st.running, st.power.speeds, strict=True):
            tr = run[r.index]
            if speed == tr.rate and tr.version:
                continue  # its end event still holds (settle moved its work on at the same rate)
            tr.rate = speed
            tr.since = now
            tr.version += 1
            heapq.heappush(heap, (now + max(0.0, tr.remaining) / speed, seq, END, r.index, tr.version))
            seq += 1

    def start(unit: list[int], now: float, only: int | None = None) -> bool:
        """Place every task of the unit (all or none); False when it does not fit now."""
        placed: list[tuple[int, int, tuple[int, ...]]] = []
        for k in unit:
            cands = placer.candidates(tasks[k])
            assert not isinstance(cands, str)
            got = placer.best(tasks[k], cands, only if len(unit) == 1 else None)
            if got is None:
                for k2, i2, g2 in placed:
                    placer.release(i2, tasks[k2], g2)
                return False
            placer.take(got[0], tasks[k], got[1])
            placed.append((k, got[0], got[1]))
        touched: list[int] = []
        for k, i, g in placed:
            if i not in touched:
                settle(i, now)
                touched.append(i)
            t = tasks[k]
            state[i].running.append(Running(t, k, g, 1000 if t.gpu_milli >= 1000 else t.gpu_milli))
            run[k].start = now
            run[k].node = i
            res.wait_s[t.workload_class].append(now - t.arrival_s)
        for i in touched:
            refresh(i, now)
        return True

    def unplaceable(unit: list[int]) -> str | None:
        for k in unit:
            cands = placer.candidates(tasks[k])
            if isinstance(cands, str):
                return cands
            if not placer.ever_fits(tasks[k], cands):
                return "larger than every node that passes the filters (CPU or GPU count)"
        return None

    done = 0
    while heap:
        now, _s, kind, k, version = heapq.heappop(heap)
        if now > last_event:
            fac_coef = 0.006 + 0.001 * (it_w / peak if peak > 0 else 0.0)
            base = 1.08 + 0.04 * (it_w / peak if peak > 0 else 0.0)
            res.facility_j += it_w * (base * (now - last_event) + fac_coef * _facility_integral(fac, last_event, now))
            last_event = now
        if kind == ARRIVE:
            t = tasks[k]
            if t.gang:
                members = gangs.setdefault(t.gang, [])
                members.append(k)
                if len(members) < gang_size[t.gang]:
                    continue
                unit = members
            else:
                unit = [k]
            why = unplaceable(unit)
            if why is not None:
                for _k in unit:
                    res.unplaceable[why] = res.unplaceable.get(why, 0) + 1
                done += len(unit)
                continue
            if not start(unit, now):
                queue.append(unit)
        else:
            tr = run[k]
            if tr.version != version or tr.done:
                continue
            i = tr.node
            settle(i, now)
            tr.done = True
            st = state[i]
            for j, r in enumerate(st.running):
                if r.index == k:
                    placer.release(i, tasks[k], r.gpus)
                    del st.running[j]
                    break
            t = tasks[k]
            res.slowdown[t.workload_class].append((now - tr.start) / t.duration_s)
            res.completed += 1
            res.end_s = max(res.end_s, now)
            done += 1
            refresh(i, now)
            # the waiting tasks, in arrival order, are offered the node that changed
            kept: deque[list[int]] = deque()
            while queue:
                unit = queue.popleft()
                if not start(unit, now, i):
                    kept.append(unit)
            queue = kept
            if progress is not None and done % 256 == 0:
                progress(done)
        if it_w > res.peak_w:
            res.peak_w = it_w
        series.append((now, it_w))
    end = max(res.end_s, last_event)
    for i, st in enumerate(state):
        settle(i, end)
        res.energy_j += st.energy[0]
        res.energy_by_class_j["performance"] += st.energy[1]
        res.energy_by_class_j["standard"] += st.energy[2]
        res.energy_by_class_j["idle"] += st.energy[3]
        res.node_energy_j[nodes[i].name] = st.energy[0]
    stalled = "stalled: waiting when the trace ended (a gang that never runs whole)"
    for unit in queue:  # a unit whose members each fit somewhere but never all at once
        res.unplaceable[stalled] = res.unplaceable.get(stalled, 0) + len(unit)
    res.end_s = end
    res.series = _thin(series)
    if progress is not None:
        progress(len(tasks))
    return res


def _thin(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most :data:`SERIES_POINTS` points, each the last power of its time bucket (a step series)."""
    if len(series) <= SERIES_POINTS:
        return series
    t0, t1 = series[0][0], series[-1][0]
    width = (t1 - t0) / SERIES_POINTS or 1.0
    out: list[tuple[float, float]] = []
    bucket = -1
    for t, w in series:
        b = int((t - t0) / width)
        if b != bucket:
            out.append((t, w))
            bucket = b
        else:
            out[-1] = (out[-1][0], max(out[-1][1], w))
    return out
