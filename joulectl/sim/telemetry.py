"""Telemetry of a simulator run: OTLP JSON lines, a Prometheus text file, and events.jsonl.

Both metric files are written atomically each tick (temporary file, rename), so a reader never
sees half of one:

* ``<root>/telemetry/otlp.jsonl``: the latest export, one OTLP ``ExportMetricsServiceRequest``
  (JSON encoding) per line, one line per node plus one for the facility. Metric names follow the
  OpenTelemetry hardware semantic conventions: ``hw.host.energy`` (whole host, J),
  ``hw.energy`` per CPU package (``hw.type=cpu``), DRAM zone (``hw.type=memory``) and GPU
  (``hw.type=gpu``), cumulative and monotonic; ``hw.power`` (W, gauge) per GPU. A virtual-machine
  node exports none: no real collector could measure it.
* ``<root>/metrics.prom``: the same counters in the Prometheus text format
  (``hw_host_energy_joules_total``, ``hw_energy_joules_total``, ``hw_power_watts``) and the
  simulator's own gauges (node power, facility PUE, cooling, ambient, tick duration, overruns).
* ``<root>/events.jsonl``: one JSON object per line, ``{time, node, name, attributes}``, appended.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from joulectl.sim.tick import Event, Sample

SCOPE = {"name": "joulectl.sim", "version": "1"}


@dataclass(frozen=True)
class Facility:
    """The facility figures of one tick: ambient °C, IT power W, PUE, cooling W."""

    ambient_c: float
    it_power_w: float
    pue: float
    cooling_w: float


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _ns(t: float) -> str:
    return str(int(t * 1e9))


def otlp_node(sample: Sample, start_s: float, profile: str = "") -> dict[str, Any] | None:
    """One node's OTLP metrics request, or None for a virtual machine."""
    if sample.virtual:
        return None
    now, start = _ns(sample.time_s), _ns(start_s)

    def point(value: float, **attrs: str) -> dict[str, Any]:
        return {"attributes": [_attr(k.replace("_", "."), v) for k, v in attrs.items()],
                "startTimeUnixNano": start, "timeUnixNano": now, "asDouble": round(value, 6)}

    host_j = sample.energy_j.get("host", ("host", 0.0))[1]
    parts = [(cid, hw_type, j) for cid, (hw_type, j) in sorted(sample.energy_j.items()) if cid != "host"]
    metrics: list[dict[str, Any]] = [
        {"name": "hw.host.energy", "unit": "J", "sum": {"aggregationTemporality": 2, "isMonotonic": True,
                                                        "dataPoints": [point(host_j, hw_id=sample.node)]}},
    ]
    if parts:
        metrics.append({"name": "hw.energy", "unit": "J", "sum": {
            "aggregationTemporality": 2, "isMonotonic": True,
            "dataPoints": [point(j, hw_id=cid, hw_type=t) for cid, t, j in parts]}})
    if sample.gpu_power_w:
        metrics.append({"name": "hw.power", "unit": "W", "gauge": {
            "dataPoints": [point(w, hw_id=cid, hw_type="gpu") for cid, w in sorted(sample.gpu_power_w.items())]}})
    resource = [_attr("host.name", sample.node), _attr("service.name", "joulectl-sim")]
    if profile:
        resource.append(_attr("sim.joulie.io/profile", profile))
    return {"resourceMetrics": [{"resource": {"attributes": resource},
                                 "scopeMetrics": [{"scope": SCOPE, "metrics": metrics}]}]}


def otlp_facility(fac: Facility, time_s: float) -> dict[str, Any]:
    """The facility's OTLP request: ambient temperature, IT power, PUE and cooling power gauges."""
    def gauge(name: str, unit: str, value: float) -> dict[str, Any]:
        return {"name": name, "unit": unit, "gauge": {"dataPoints": [
            {"attributes": [], "timeUnixNano": _ns(time_s), "asDouble": round(value, 6)}]}}

    metrics = [gauge("joulie.sim.facility.ambient_temperature", "Cel", fac.ambient_c),
               gauge("joulie.sim.facility.it_power", "W", fac.it_power_w),
               gauge("joulie.sim.facility.pue", "1", fac.pue),
               gauge("joulie.sim.facility.cooling_power", "W", fac.cooling_w)]
    return {"resourceMetrics": [{"resource": {"attributes": [_attr("service.name", "joulectl-sim"),
                                                             _attr("host.name", "facility")]},
                                 "scopeMetrics": [{"scope": SCOPE, "metrics": metrics}]}]}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(samples: Sequence[Sample], fac: Facility | None, *, tick_seconds: float = 0.0,
               overruns: int = 0) -> str:
    """The Prometheus text exposition of one tick."""
    host, energy, power, node_power = [], [], [], []
    for s in samples:
        n = _label(s.node)
        node_power.append(f'joulie_sim_node_power_watts{{node="{n}"}} {s.power_w:.2f}')
        if s.virtual:
            continue
        host.append(f'hw_host_energy_joules_total{{node="{n}"}} {s.energy_j.get("host", ("", 0.0))[1]:.6f}')
        for cid, (hw_type, j) in sorted(s.energy_j.items()):
            if cid != "host":
                energy.append(f'hw_energy_joules_total{{node="{n}",hw_id="{cid}",hw_type="{hw_type}"}} {j:.6f}')
        for cid, w in sorted(s.gpu_power_w.items()):
            power.append(f'hw_power_watts{{node="{n}",hw_id="{cid}",hw_type="gpu"}} {w:.3f}')
    out = [
        "# HELP hw_host_energy_joules_total Energy consumed by the whole host.",
        "# TYPE hw_host_energy_joules_total counter", *host,
        "# HELP hw_energy_joules_total Energy consumed per CPU package, DRAM zone and GPU.",
        "# TYPE hw_energy_joules_total counter", *energy,
        "# HELP hw_power_watts Average power of each GPU.",
        "# TYPE hw_power_watts gauge", *power,
        "# HELP joulie_sim_node_power_watts Emulated node power (CPU packages, DRAM and GPUs).",
        "# TYPE joulie_sim_node_power_watts gauge", *node_power,
        "# HELP joulie_sim_emulate_tick_duration_seconds Wall time of the last tick.",
        "# TYPE joulie_sim_emulate_tick_duration_seconds gauge",
        f"joulie_sim_emulate_tick_duration_seconds {tick_seconds:.6f}",
        "# HELP joulie_sim_emulate_tick_overruns_total Ticks that took longer than the tick interval.",
        "# TYPE joulie_sim_emulate_tick_overruns_total counter",
        f"joulie_sim_emulate_tick_overruns_total {overruns}",
    ]
    if fac is not None:
        out += [
            "# TYPE joulie_sim_facility_pue gauge", f"joulie_sim_facility_pue {fac.pue:.3f}",
            "# TYPE joulie_sim_facility_cooling_watts gauge", f"joulie_sim_facility_cooling_watts {fac.cooling_w:.2f}",
            "# TYPE joulie_sim_facility_it_watts gauge", f"joulie_sim_facility_it_watts {fac.it_power_w:.2f}",
            "# TYPE joulie_sim_facility_ambient_celsius gauge",
            f"joulie_sim_facility_ambient_celsius {fac.ambient_c:.2f}",
        ]
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


_START, _NOW, _VALUE = "\x01start\x01", "\x01now\x01", "\x01value\x01"
#: (node, profile, energy parts, GPUs) -> the node's OTLP line cut at its values (see otlp_line).
_SHAPES: dict[tuple[Any, ...], list[str]] = {}


def _num(value: float) -> str:
    """``value`` rounded to 6 decimals as ``json.dumps`` writes it."""
    r = round(value, 6)
    return float.__repr__(r) if isinstance(r, float) and math.isfinite(r) else json.dumps(r)


def otlp_line(sample: Sample, start_s: float, profile: str = "") -> str | None:
    """:func:`otlp_node` as one compact JSON line (the same text as ``json.dumps`` of it).

    A node's request has the same shape every tick: it is encoded once, with placeholders, and
    each tick fills in the times and values (encoding was most of the telemetry's cost per tick).
    """
    if sample.virtual:
        return None
    parts = tuple((cid, hw_type) for cid, (hw_type, _j) in sorted(sample.energy_j.items()) if cid != "host")
    gpus = tuple(sorted(sample.gpu_power_w))
    key = (sample.node, profile, parts, gpus, "host" in sample.energy_j)
    shape = _SHAPES.get(key)
    if shape is None:
        # The request with placeholders in every value slot, in the order otlp_node emits them.
        holder = Sample(sample.node, 0.0, 0.0, 0.0, 0.0,
                        {cid: (t, 0.0) for cid, t in parts} | ({"host": ("host", 0.0)} if key[4] else {}),
                        {g: 0.0 for g in gpus}, {}, {}, sample.virtual)
        doc = otlp_node(holder, 0.0, profile)
        assert doc is not None
        text = json.dumps(_placeholders(doc), separators=(",", ":"))
        enc = json.dumps
        text = text.replace(enc(_START), f'"{_START}"').replace(enc(_NOW), f'"{_NOW}"')
        shape = text.split(enc(_VALUE))
        if len(_SHAPES) >= 100_000:
            _SHAPES.clear()
        _SHAPES[key] = shape
    chunks = shape
    values = [sample.energy_j.get("host", ("host", 0.0))[1]]
    values += [sample.energy_j[cid][1] for cid, _t in parts]
    values += [sample.gpu_power_w[g] for g in gpus]
    out = [chunks[0]]
    for value, chunk in zip(values, chunks[1:], strict=True):
        out.append(_num(value))
        out.append(chunk)
    return "".join(out).replace(_START, _ns(start_s)).replace(_NOW, _ns(sample.time_s))


def _placeholders(doc: Any) -> Any:
    """``doc`` with every data point's times and value replaced by placeholders."""
    if isinstance(doc, dict):
        if "asDouble" in doc and "timeUnixNano" in doc:
            out = dict(doc)
            out["startTimeUnixNano"], out["timeUnixNano"], out["asDouble"] = _START, _NOW, _VALUE
            return out
        return {k: _placeholders(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_placeholders(v) for v in doc]
    return doc


def write_tick(root: str, samples: Sequence[Sample], fac: Facility | None, profiles: dict[str, str], *,
               tick_seconds: float = 0.0, overruns: int = 0) -> tuple[list[str], str]:
    """Write both metric files of one tick; their contents: (OTLP JSON lines, Prometheus text)."""
    lines = []
    for s in samples:
        line = otlp_line(s, s.start_s or s.time_s, profiles.get(s.node, ""))
        if line is not None:
            lines.append(line)
    if fac is not None and samples:
        lines.append(json.dumps(otlp_facility(fac, samples[0].time_s), separators=(",", ":")))
    write_atomic(os.path.join(root, "telemetry", "otlp.jsonl"), "".join(line + "\n" for line in lines))
    prom = prometheus(samples, fac, tick_seconds=tick_seconds, overruns=overruns)
    write_atomic(os.path.join(root, "metrics.prom"), prom)
    return lines, prom


def iso(t: float) -> str:
    """RFC 3339 UTC time with milliseconds."""
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def append_events(root: str, events: Iterable[Event]) -> int:
    """Append events to ``<root>/events.jsonl``; the number written."""
    lines = [json.dumps({"time": iso(e.time_s), "node": e.node, "name": e.name, "attributes": e.attributes},
                        separators=(",", ":"), sort_keys=False) for e in events]
    if not lines:
        return 0
    with open(os.path.join(root, "events.jsonl"), "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return len(lines)
