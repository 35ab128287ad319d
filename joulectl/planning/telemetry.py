"""Measured node power from a telemetry file: Prometheus text, OTLP JSON lines, or a JSON map.

Tolerant by design: it reads what it recognises and ignores the rest.

- Metrics, by OpenTelemetry name or its Prometheus spelling: ``hw.host.power`` / ``hw_host_power_watts``
  and ``hw.host.energy`` / ``hw_host_energy_joules_total`` (the whole host), ``hw.power`` /
  ``hw_power_watts`` and ``hw.energy`` / ``hw_energy_joules_total`` with ``hw.type`` ``gpu`` or ``cpu``,
  and dcgm-exporter's ``DCGM_FI_DEV_POWER_USAGE`` (W) and ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ).
- Node: the ``k8s.node.name``, ``host.name``, ``node``, ``nodename``, ``Hostname`` or ``instance``
  attribute or label (resource attributes first for OTLP).
- Node power: the host power gauge; else the rate of the host energy counter between its last two
  samples; else the sum of the GPU and CPU power gauges (or energy rates). DRAM and other
  components are not added (Joulie's node power is CPU + GPU).
- Trend (W/min): over the samples of the last 5 minutes when they span at least 0.1 min.
- A JSON object of ``{node: watts}`` is taken as is.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.units import mj_to_j, mw_to_w, uj_to_j

NODE_KEYS = (
    "k8s.node.name",
    "k8s_node_name",
    "node",
    "node_name",
    "node.name",
    "nodename",
    "host.name",
    "host_name",
    "hostname",
    "Hostname",
    "exported_instance",
    "instance",
)
TYPE_KEYS = ("hw.type", "hw_type")
TREND_WINDOW_S = 300.0
TREND_MIN_SPAN_S = 6.0

_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:.]*)\s*(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class _Series:
    kind: str  # power | energy
    component: str  # host | gpu | cpu
    points: list[tuple[float | None, float]] = field(default_factory=list)  # (seconds, W or J)
    #: start of a cumulative counter (OTLP ``startTimeUnixNano``), seconds
    start: float | None = None


@dataclass
class Telemetry:
    """Per node: measured power (W) and trend (W/min)."""

    power_w: dict[str, float]
    trend_w_per_min: dict[str, float]


def classify(name: str, attrs: Mapping[str, str]) -> tuple[str, str, float] | None:
    """``(kind, component, scale)`` of a metric, or None when it is not one we read.

    ``scale`` converts the raw value to W or J for names whose unit is fixed by convention.
    """
    low = name.lower().replace(".", "_")
    if low == "dcgm_fi_dev_power_usage":
        return "power", "gpu", 1.0
    if low == "dcgm_fi_dev_total_energy_consumption":
        return "energy", "gpu", mj_to_j(1.0)
    for suffix in ("_total", "_watts", "_joules", "_w", "_j"):
        if low.endswith(suffix):
            low = low[: -len(suffix)]
    if low in ("hw_host_power", "node_power") or low.endswith("_node_power"):
        return "power", "host", 1.0
    if low in ("hw_host_energy", "node_energy") or low.endswith("_node_energy"):
        return "energy", "host", 1.0
    hw_type = next((attrs[k].lower() for k in TYPE_KEYS if attrs.get(k)), "")
    if low in ("hw_gpu_power",):
        return "power", "gpu", 1.0
    if low in ("hw_gpu_energy",):
        return "energy", "gpu", 1.0
    if low in ("hw_power", "hw_energy") and hw_type in ("gpu", "cpu"):
        return ("power" if low == "hw_power" else "energy"), hw_type, 1.0
    return None


def _unit_scale(unit: str) -> float | None:
    u = unit.strip()
    if u in ("", "W", "J", "1"):
        return 1.0
    if u == "mW":
        return mw_to_w(1.0)
    if u == "mJ":
        return mj_to_j(1.0)
    if u in ("uJ", "µJ"):
        return uj_to_j(1.0)
    return None


class _Store:
    def __init__(self) -> None:
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = {}
        self.nodes: dict[str, list[_Series]] = {}

    def add(
        self,
        name: str,
        attrs: Mapping[str, str],
        value: float,
        t: float | None,
        unit_scale: float = 1.0,
        start: float | None = None,
    ) -> None:
        if not math.isfinite(value):
            return
        kind_comp = classify(name, attrs)
        if kind_comp is None:
            return
        node = next((attrs[k] for k in NODE_KEYS if attrs.get(k)), None)
        if node is None:
            return
        kind, comp, scale = kind_comp
        key = (name, tuple(sorted(attrs.items())))
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _Series(kind, comp)
            self.nodes.setdefault(node, []).append(s)
        s.points.append((t, value * scale * unit_scale))
        if start is not None:
            s.start = start

    def result(self) -> Telemetry:
        power: dict[str, float] = {}
        trend: dict[str, float] = {}
        for node, series in self.nodes.items():
            points = _node_points(series)
            if not points:
                continue
            power[node] = points[-1][1]
            trend[node] = _trend(points)
        return Telemetry(power, trend)


def _watts_points(s: _Series, average: bool = False) -> list[tuple[float | None, float]]:
    """A series as (t, W): power as is (by time), energy as the rate between consecutive samples,
    or, with ``average`` and a single sample of a counter with a start time, the mean since then."""
    if s.kind == "power":
        timed = [p for p in s.points if p[0] is not None]
        if len(timed) == len(s.points):
            return sorted(s.points, key=lambda p: p[0] or 0.0)
        return [s.points[-1]]  # no timestamps: the last value in the file
    pts = sorted((p for p in s.points if p[0] is not None), key=lambda p: p[0] or 0.0)
    out: list[tuple[float | None, float]] = []
    for (t0, e0), (t1, e1) in itertools.pairwise(pts):
        if t0 is not None and t1 is not None and t1 > t0 and e1 >= e0:
            out.append((t1, (e1 - e0) / (t1 - t0)))
    if not out and average and len(pts) == 1 and s.start is not None:
        t, e = pts[0]
        if t is not None and t > s.start:
            out.append((t, e / (t - s.start)))
    return out


def _node_points(series: list[_Series]) -> list[tuple[float | None, float]]:
    """Node power over time from the best available group of series: the host power gauge, the
    host energy rate, the GPU + CPU components, then the host energy averaged since its start."""
    host_power = _sum_series([_watts_points(s) for s in series if s.component == "host" and s.kind == "power"])
    if host_power:
        return host_power
    host_energy = [s for s in series if s.component == "host" and s.kind == "energy"]
    pts = _sum_series([_watts_points(s) for s in host_energy])
    if pts:
        return pts
    components: list[list[tuple[float | None, float]]] = []
    for comp in ("gpu", "cpu"):
        # the component's power gauges when it has any, else its energy rates (or averages)
        powers = [_watts_points(s) for s in series if s.component == comp and s.kind == "power"]
        energies = [_watts_points(s, True) for s in series if s.component == comp and s.kind == "energy"]
        components.extend([p for p in powers if p] or [p for p in energies if p])
    pts = _sum_series(components)
    if pts:
        return pts
    return _sum_series([_watts_points(s, True) for s in host_energy])


def _sum_series(series: list[list[tuple[float | None, float]]]) -> list[tuple[float | None, float]]:
    """Sum series at each timestamp where all of them have a value (last known value at or before)."""
    series = [s for s in series if s]
    if not series:
        return []
    if any(p[0] is None for s in series for p in s):
        return [(None, sum(s[-1][1] for s in series))]
    times = sorted({p[0] for s in series for p in s if p[0] is not None})
    out: list[tuple[float | None, float]] = []
    idx = [0] * len(series)
    for t in times:
        total, complete = 0.0, True
        for i, s in enumerate(series):
            while idx[i] + 1 < len(s) and (s[idx[i] + 1][0] or 0.0) <= t:
                idx[i] += 1
            if (s[idx[i]][0] or 0.0) > t:
                complete = False
                break
            total += s[idx[i]][1]
        if complete:
            out.append((t, total))
    return out


def _trend(points: list[tuple[float | None, float]]) -> float:
    if len(points) < 2 or points[-1][0] is None:
        return 0.0
    newest_t = points[-1][0]
    window = [p for p in points if p[0] is not None and newest_t - p[0] <= TREND_WINDOW_S]
    if len(window) < 2:
        return 0.0
    span = (window[-1][0] or 0.0) - (window[0][0] or 0.0)
    if span < TREND_MIN_SPAN_S:
        return 0.0
    return (window[-1][1] - window[0][1]) / (span / 60.0)


# -- formats ---------------------------------------------------------------------------------------


def _prometheus(text: str, store: _Store) -> None:
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            continue
        name, labels, value, ts = m.groups()
        attrs = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _PROM_LABEL.findall(labels or "")}
        try:
            number = float(value)
        except ValueError:
            continue
        store.add(name, attrs, number, int(ts) / 1000.0 if ts else None)


def _otlp_attrs(items: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping) or "key" not in item:
            continue
        value = item.get("value")
        if isinstance(value, Mapping):
            for k in ("stringValue", "intValue", "doubleValue", "boolValue"):
                if k in value:
                    out[str(item["key"])] = str(value[k])
                    break
    return out


def _otlp(doc: Mapping[str, Any], store: _Store) -> None:
    for rm in doc.get("resourceMetrics") or []:
        if not isinstance(rm, Mapping):
            continue
        resource = _otlp_attrs((rm.get("resource") or {}).get("attributes"))
        for sm in rm.get("scopeMetrics") or rm.get("instrumentationLibraryMetrics") or []:
            if not isinstance(sm, Mapping):
                continue
            for metric in sm.get("metrics") or []:
                if not isinstance(metric, Mapping) or not metric.get("name"):
                    continue
                scale = _unit_scale(str(metric.get("unit") or ""))
                if scale is None:
                    continue
                data = metric.get("gauge") or metric.get("sum") or {}
                for dp in data.get("dataPoints") or [] if isinstance(data, Mapping) else []:
                    if not isinstance(dp, Mapping):
                        continue
                    raw = dp.get("asDouble", dp.get("asInt"))
                    try:
                        value = float(raw)  # type: ignore[arg-type]
                        t = int(dp["timeUnixNano"]) / 1e9 if dp.get("timeUnixNano") else None
                        start = int(dp["startTimeUnixNano"]) / 1e9 if dp.get("startTimeUnixNano") else None
                    except (TypeError, ValueError):
                        continue
                    attrs = {**resource, **_otlp_attrs(dp.get("attributes"))}
                    store.add(str(metric["name"]), attrs, value, t, scale, start)


def _json_doc(doc: Any, store: _Store, plain: dict[str, float]) -> None:
    if not isinstance(doc, Mapping):
        return
    if "resourceMetrics" in doc:
        _otlp(doc, store)
    elif doc and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in doc.values()):
        plain.update({str(k): float(v) for k, v in doc.items() if math.isfinite(float(v)) and v >= 0})


def parse_telemetry(text: str, label: str) -> Telemetry:
    """Parse a telemetry file's text; a file with no node power in it is an :class:`InputError`."""
    store = _Store()
    stripped = text.lstrip()
    plain: dict[str, float] = {}
    if stripped.startswith("{"):
        try:
            _json_doc(json.loads(text), store, plain)
        except ValueError:  # JSON lines
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    raise InputError(f"line {number}: invalid JSON", file=label) from None
                _json_doc(doc, store, plain)
    else:
        _prometheus(text, store)
    result = store.result()
    result.power_w.update(plain)
    if not result.power_w:
        raise InputError(
            "no node power found (expected Prometheus text or OTLP JSON lines with hw.host.power, "
            "hw.host.energy, hw.power or hw.energy per node)",
            file=label,
        )
    return result
