"""Immutable per-tick snapshots of a simulator run, and the hub the tick loop publishes them to.

The tick loop builds one :class:`Snapshot` after each tick and publishes it with one reference
assignment (:meth:`Hub.publish`). A reader takes :attr:`Hub.current` once and reads only that
object, so it never mixes two ticks; nothing a reader does steps a node or touches the trees.
Renders of a snapshot (a node's telemetry JSON, the OpenMetrics text, an exporter page) are made
on first request and kept on the snapshot: the same bytes for every reader of that tick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from joulectl.sim.identity import NodeMeta
from joulectl.sim.telemetry import Facility, iso
from joulectl.sim.tick import Sample


@dataclass
class Snapshot:
    """One tick of every node, never changed after :meth:`Hub.publish` (the render cache aside)."""

    tick: int
    time_s: float
    samples: Mapping[str, Sample]
    facility: Facility | None
    prometheus_text: str
    #: Per node and energy component: the part of the cumulative energy (J) spent at idle power,
    #: for the exporters that split energy into idle and dynamic (Kepler).
    idle_j: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: Per node and energy component: the average power of the last tick (ΔE / Δt, W).
    rate_w: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    _cache: dict[Any, bytes] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rendered(self, key: Any, make: Callable[[], bytes]) -> bytes:
        """``make()`` once per key for this snapshot (the same bytes for every reader)."""
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        out = make()
        with self._lock:
            return self._cache.setdefault(key, out)


class Hub:
    """Holds the latest snapshot and the node metadata; published from the tick loop."""

    def __init__(self, metas: Mapping[str, NodeMeta], *, run_id: str = "") -> None:
        self.metas = dict(metas)
        self.run_id = run_id
        self._current: Snapshot | None = None
        self._idle: dict[str, dict[str, float]] = {}
        self._rate: dict[str, dict[str, float]] = {}
        self._last: dict[str, dict[str, float]] = {}
        self._idle_w: dict[str, dict[str, float]] = {}
        self._cond = threading.Condition()
        self._listeners: list[Callable[[Snapshot], None]] = []

    @property
    def current(self) -> Snapshot | None:
        """The latest snapshot (None before the first tick)."""
        return self._current

    def subscribe(self, fn: Callable[[Snapshot], None]) -> None:
        """Call ``fn(snapshot)`` after every publish (it must not block: the tick loop calls it)."""
        self._listeners.append(fn)

    def publish(self, tick: int, samples: Iterable[Sample], facility: Facility | None,
                prometheus_text: str) -> Snapshot:
        """Build and publish the snapshot of one tick; the listeners are told after the swap."""
        by_node = {s.node: s for s in samples}
        self._account_idle(by_node)
        # The per-node dicts are made anew each tick and never changed after: the snapshot can
        # share them (only the outer dicts are copied).
        time_s = max((s.time_s for s in by_node.values()), default=0.0)
        return self.install(Snapshot(tick, time_s, by_node, facility, prometheus_text, dict(self._idle),
                                     dict(self._rate)))

    def install(self, snap: Snapshot) -> Snapshot:
        """Make ``snap`` the current snapshot (one swap); the listeners are told after it."""
        with self._cond:
            self._current = snap
            self._cond.notify_all()
        for fn in self._listeners:
            fn(snap)
        return snap

    def wait(self, after_tick: int, timeout: float) -> Snapshot | None:
        """The first snapshot with a tick above ``after_tick``, waiting at most ``timeout`` s."""
        with self._cond:
            self._cond.wait_for(lambda: self._current is not None and self._current.tick > after_tick, timeout)
            return self._current

    def _account_idle(self, by_node: Mapping[str, Sample]) -> None:
        """Add each component's idle share of this tick's energy (``min(idle W · dt, ΔE)``) and
        note its average power over the tick (``ΔE / dt``), in new dicts per node."""
        idle_ws = self._idle_w
        for node, s in by_node.items():
            meta = self.metas.get(node)
            if meta is None:
                continue
            last = self._last.setdefault(node, {})
            idle = dict(self._idle.get(node, ()))
            rate = dict(self._rate.get(node, ()))
            seen = "t" in last
            dt = max(0.0, s.time_s - last.get("t", s.start_s or s.time_s))
            idle_w = idle_ws.get(node)
            if idle_w is None:
                idle_w = idle_ws[node] = {g.key: g.idle_w for g in meta.gpus}
            package_w = meta.package_idle_w
            for cid, (_hw_type, total) in s.energy_j.items():
                delta = max(0.0, total - last.get(cid, total if seen else 0.0))
                w = idle_w.get(cid, package_w if cid.startswith("pkg") else 0.0)
                idle[cid] = idle.get(cid, 0.0) + min(w * dt, delta)
                rate[cid] = delta / dt if dt > 0 else 0.0
                last[cid] = total
            last["t"] = s.time_s
            self._idle[node] = idle
            self._rate[node] = rate


# -- the telemetry document ------------------------------------------------------------------------------


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def telemetry_doc(snap: Snapshot, meta: NodeMeta) -> dict[str, Any]:
    """``GET /telemetry/<node>``: the node's latest tick, with the fields of Joulie's HTTP API
    (joulie-reference.md §5: ``packagePowerWatts``, ``cpu``, ``gpu{...}``, ``hardwareModel``,
    ``pods``, ``ts``) and the energy counters."""
    s = snap.samples[meta.node]
    rd = s.readings
    packages = []
    for key in meta.packages:
        packages.append({"id": key, "capWatts": _r(s.caps_w.get(key)), "temperatureC": _r(rd.get(f"T.{key}")),
                         "frequencyScale": _r(rd.get(f"f.{key}"), 4),
                         "energyJoules": _r(s.energy_j.get(key, ("", None))[1], 6)})
    gpus = []
    applied: list[float | None] = []
    target: list[float | None] = []
    utils: list[float] = []
    avg_total = 0.0
    for g in meta.gpus:
        util = rd.get(f"u.{g.key}", 0.0)
        utils.append(util)
        avg = rd.get(f"P.{g.key}", s.gpu_power_w.get(g.key, 0.0))
        avg_total += avg
        applied.append(_r(rd.get(f"cap.{g.key}")))
        target.append(_r(s.caps_w.get(g.key)))
        gpus.append({"id": g.key, "busId": g.bus_id, "uuid": g.uuid or None, "product": g.product,
                     "powerWatts": _r(s.gpu_power_w.get(g.key)), "avgPowerWatts": _r(avg),
                     "capWattsApplied": applied[-1], "capWattsTarget": target[-1],
                     "utilization": _r(util, 4), "temperatureC": _r(rd.get(f"T.{g.key}")),
                     "energyJoules": _r(s.energy_j.get(g.key, ("", None))[1], 6)})
    first = meta.gpus[0] if meta.gpus else None
    return {
        "node": meta.node,
        "tick": snap.tick,
        "ts": iso(s.time_s),
        "hardwareModel": meta.profile,
        "packagePowerWatts": s.power_w,
        "cpu": {"model": meta.cpu_model, "powerWatts": s.cpu_w, "packages": packages,
                "governors": dict(sorted(s.governors.items()))},
        "gpu": {"present": bool(meta.gpus), "vendor": first.vendor if first else None,
                "product": first.product if first else None, "count": len(meta.gpus),
                "powerWattsTotal": s.gpu_w, "avgPowerWattsTotal": round(avg_total, 2),
                "capWattsPerGpuApplied": applied, "capWattsPerGpuTarget": target,
                "utilization": round(sum(utils) / len(utils), 4) if utils else 0.0, "devices": gpus},
        "energyJoules": {cid: round(j, 6) for cid, (_t, j) in sorted(s.energy_j.items())},
        "pods": [],
        "virtual": meta.virtual,
    }
