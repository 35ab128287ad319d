"""Telemetry of a simulator run: OTLP JSON lines, a Prometheus text file, and events.jsonl.

Both metric files are written atomically each tick (a temporary file swapped in), so a reader
never sees half of one:

* ``<root>/telemetry/otlp.jsonl``: the latest export, one OTLP ``ExportMetricsServiceRequest``
  (JSON encoding) per line, one line per node plus one for the facility. Metric names follow the
  OpenTelemetry hardware semantic conventions: ``hw.host.energy`` (whole host, J, the only host
  total), ``hw.energy`` per CPU package (``hw.type=cpu``), DRAM zone (``hw.type=memory``) and GPU
  (``hw.type=gpu``), cumulative and monotonic; ``hw.power`` (W, gauge) per GPU; RAPL's psys zone
  as ``joulie.sim.rapl.psys.energy``. Every metric has a description. A virtual-machine node
  exports none: no real collector could measure it.
* ``<root>/metrics.prom``: the same counters in the Prometheus text format
  (``hw_host_energy_joules_total``, ``hw_energy_joules_total``, ``hw_power_watts``,
  ``joulie_sim_rapl_psys_energy_joules_total``; GPU series with dcgm-exporter's ``gpu``,
  ``pci_bus_id`` and ``UUID`` labels) and the simulator's own gauges (node power, facility PUE,
  cooling, ambient, tick duration, overruns), each with HELP and TYPE (promtool-clean).
* ``<root>/events.jsonl``: one JSON object per line, ``{time, node, name, attributes}``, appended.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import re
import stat
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


#: GPU identity labels of one node, by component (``gpu0`` -> ``{"gpu": "0", "pci_bus_id":
#: "00000000:18:00.0", "UUID": "GPU-...", "vendor": "nvidia", "model": "..."}``): the labels that
#: join the simulator's GPU series with dcgm-exporter's (``pci_bus_id``, ``gpu``, ``UUID``).
GpuIds = dict[str, dict[str, str]]

#: Metric descriptions (OTLP ``description``, Prometheus ``HELP``), one place for both.
DESCRIPTIONS = {
    "hw.host.energy": "Energy consumed by the whole host (CPU packages, DRAM and GPUs), since its counters started.",
    "hw.energy": "Energy consumed by a CPU package, DRAM zone or GPU, since its counters started.",
    "hw.power": "Power drawn by a GPU over the last tick.",
    "joulie.sim.rapl.psys.energy": "RAPL psys (platform) zone energy; it includes the packages, DRAM and GPUs, "
                                   "so it is not summed with hw.energy.",
    "joulie.sim.facility.ambient_temperature": "Facility ambient temperature.",
    "joulie.sim.facility.it_power": "Facility IT power (every node).",
    "joulie.sim.facility.pue": "Facility power usage effectiveness.",
    "joulie.sim.facility.cooling_power": "Facility cooling power.",
}


def gpu_identities(spec: Any, models: Iterable[Any]) -> dict[str, GpuIds]:
    """The GPU identity labels of every node of ``spec`` (see :data:`GpuIds`)."""
    from joulectl.backends.base import nvml_bus_id
    from joulectl.sim.identity import node_metas

    out: dict[str, GpuIds] = {}
    for node, meta in node_metas(spec, models).items():
        ids: GpuIds = {}
        for g in meta.gpus:
            labels = {"gpu": str(g.index), "pci_bus_id": nvml_bus_id(g.bus_id) if g.bus_id else ""}
            if g.uuid:
                labels["UUID"] = g.uuid
            labels["vendor"] = g.vendor
            labels["model"] = g.product
            ids[g.key] = labels
        if ids:
            out[node] = ids
    return out


#: OTLP attribute names of the GPU identity labels (OpenTelemetry ``hw.*`` where one exists; the
#: others become the same labels as dcgm-exporter's in Prometheus' OTLP translation: ``pci.bus_id``
#: -> ``pci_bus_id``).
_OTLP_GPU_KEYS = {"gpu": "gpu.index", "pci_bus_id": "pci.bus_id", "UUID": "gpu.uuid", "vendor": "hw.vendor",
                  "model": "hw.model"}


def otlp_node(sample: Sample, start_s: float, profile: str = "", gpu_ids: GpuIds | None = None
              ) -> dict[str, Any] | None:
    """One node's OTLP metrics request, or None for a virtual machine.

    Follows the OpenTelemetry hardware conventions: the host total only as ``hw.host.energy``;
    ``hw.energy`` per CPU package (``hw.type=cpu``), DRAM zone (``memory``) and GPU (``gpu``);
    RAPL's psys zone, which already holds the whole platform, under its own name so that no sum
    counts it twice.
    """
    if sample.virtual:
        return None
    now, start = _ns(sample.time_s), _ns(start_s)
    ids = gpu_ids or {}

    def point(value: float, attrs: dict[str, str]) -> dict[str, Any]:
        return {"attributes": [_attr(k, v) for k, v in attrs.items()],
                "startTimeUnixNano": start, "timeUnixNano": now, "asDouble": round(value, 6)}

    def hw(cid: str, hw_type: str) -> dict[str, str]:
        attrs = {"hw.id": cid, "hw.type": hw_type}
        for key, value in ids.get(cid, {}).items():
            if value:
                attrs[_OTLP_GPU_KEYS[key]] = value
        return attrs

    def counter(name: str, points: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "description": DESCRIPTIONS[name], "unit": "J",
                "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": points}}

    host_j = sample.energy_j.get("host", ("host", 0.0))[1]
    parts = [(cid, hw_type, j) for cid, (hw_type, j) in sorted(sample.energy_j.items())
             if cid not in ("host", "psys")]
    metrics: list[dict[str, Any]] = [counter("hw.host.energy", [point(host_j, {"hw.id": sample.node})])]
    if parts:
        metrics.append(counter("hw.energy", [point(j, hw(cid, t)) for cid, t, j in parts]))
    if sample.gpu_power_w:
        metrics.append({"name": "hw.power", "description": DESCRIPTIONS["hw.power"], "unit": "W", "gauge": {
            "dataPoints": [point(w, hw(cid, "gpu")) for cid, w in sorted(sample.gpu_power_w.items())]}})
    if "psys" in sample.energy_j:
        metrics.append(counter("joulie.sim.rapl.psys.energy",
                               [point(sample.energy_j["psys"][1], {"hw.id": "psys"})]))
    resource = [_attr("host.name", sample.node), _attr("service.name", "joulectl-sim")]
    if profile:
        resource.append(_attr("sim.joulie.io/profile", profile))
    return {"resourceMetrics": [{"resource": {"attributes": resource},
                                 "scopeMetrics": [{"scope": SCOPE, "metrics": metrics}]}]}


def otlp_facility(fac: Facility, time_s: float, cluster: str = "") -> dict[str, Any]:
    """The facility's OTLP request: ambient temperature, IT power, PUE and cooling power gauges.

    The facility is no host: its resource has no ``host.name``, only ``service.name`` and
    ``sim.joulie.io/scope=facility`` (and the cluster's name when known).
    """
    def gauge(name: str, unit: str, value: float) -> dict[str, Any]:
        return {"name": name, "description": DESCRIPTIONS[name], "unit": unit, "gauge": {"dataPoints": [
            {"attributes": [], "timeUnixNano": _ns(time_s), "asDouble": round(value, 6)}]}}

    metrics = [gauge("joulie.sim.facility.ambient_temperature", "Cel", fac.ambient_c),
               gauge("joulie.sim.facility.it_power", "W", fac.it_power_w),
               gauge("joulie.sim.facility.pue", "1", fac.pue),
               gauge("joulie.sim.facility.cooling_power", "W", fac.cooling_w)]
    resource = [_attr("service.name", "joulectl-sim"), _attr("sim.joulie.io/scope", "facility")]
    if cluster:
        resource.append(_attr("sim.joulie.io/cluster", cluster))
    return {"resourceMetrics": [{"resource": {"attributes": resource},
                                 "scopeMetrics": [{"scope": SCOPE, "metrics": metrics}]}]}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _prom_labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_label(v)}"' for k, v in labels.items() if v)


#: node -> its Prometheus series' prefixes and what they were made from (see _prom_shape).
_PROM_SHAPES: dict[str, tuple[Any, ...]] = {}


def _prom_shape(s: Sample, ids: dict[str, dict[str, str]] | None) -> tuple[Any, ...]:
    """The text before the value of each of a node's series, in :func:`prometheus`' order, keyed
    by the node's energy and GPU components (in the sample's order) and its identity labels."""
    n = _label(s.node)
    gids = ids or {}
    energy = [(cid, "hw_energy_joules_total{"
               + _prom_labels({"node": s.node, "hw_id": cid, "hw_type": hw_type, **gids.get(cid, {})}) + "} ")
              for cid, (hw_type, _j) in sorted(s.energy_j.items()) if cid not in ("host", "psys")]
    psys = f'joulie_sim_rapl_psys_energy_joules_total{{node="{n}"}} ' if "psys" in s.energy_j else ""
    power = [(cid, "hw_power_watts{" + _prom_labels({"node": s.node, "hw_id": cid, "hw_type": "gpu",
                                                     **gids.get(cid, {})}) + "} ")
             for cid in sorted(s.gpu_power_w)]
    shape = (tuple(s.energy_j), tuple(s.gpu_power_w), ids, f'joulie_sim_node_power_watts{{node="{n}"}} ',
             f'hw_host_energy_joules_total{{node="{n}"}} ', energy, psys, power)
    if len(_PROM_SHAPES) >= 100_000:
        _PROM_SHAPES.clear()
    _PROM_SHAPES[s.node] = shape
    return shape


#: A node's Prometheus lines by family, one entry per sample in the samples' order: host energy,
#: component energy, GPU power, node power, psys energy (a family's lines of one node joined by
#: newlines; ``""`` where the node has none). See :func:`prom_blocks`.
PromBlocks = tuple[list[str], list[str], list[str], list[str], list[str]]
#: What :func:`render_nodes` makes of a tick's samples: each one's OTLP line (None for a virtual
#: node) and its Prometheus lines.
Rendered = tuple[list[str | None], PromBlocks]


def prom_blocks(samples: Sequence[Sample], gpu_ids: dict[str, GpuIds] | None = None) -> PromBlocks:
    """Each sample's Prometheus series (the text of :func:`prometheus` but the headers and the
    run's and facility's lines), by family."""
    ids_by_node = gpu_ids or {}
    host: list[str] = []
    energy: list[str] = []
    power: list[str] = []
    node_power: list[str] = []
    psys: list[str] = []
    for s in samples:
        ids = ids_by_node.get(s.node)
        ej = s.energy_j
        # A node's series names and labels are the same every tick: made once per shape.
        shape = _PROM_SHAPES.get(s.node)
        if shape is None or shape[0] != tuple(ej) or shape[1] != tuple(s.gpu_power_w) or shape[2] is not ids:
            shape = _prom_shape(s, ids)
        node_power.append(f"{shape[3]}{s.power_w:.2f}")
        if s.virtual:
            host.append("")
            energy.append("")
            psys.append("")
            power.append("")
            continue
        host.append(f"{shape[4]}{ej['host'][1] if 'host' in ej else 0.0:.6f}")
        energy.append("\n".join([f"{pre}{ej[cid][1]:.6f}" for cid, pre in shape[5]]))
        psys.append(f"{shape[6]}{ej['psys'][1]:.6f}" if shape[6] else "")
        gp = s.gpu_power_w
        power.append("\n".join([f"{pre}{gp[cid]:.3f}" for cid, pre in shape[7]]))
    return host, energy, power, node_power, psys


def render_nodes(samples: Sequence[Sample], profiles: dict[str, str], gpu_ids: dict[str, GpuIds] | None = None,
                 ) -> Rendered:
    """Each sample's OTLP line and Prometheus series: what :func:`write_tick` writes of the nodes,
    made where the samples are (a simulator worker renders its own shard's, in parallel)."""
    ids = gpu_ids or {}
    lines = [otlp_line(s, s.start_s or s.time_s, profiles.get(s.node, ""), ids.get(s.node)) for s in samples]
    return lines, prom_blocks(samples, gpu_ids)


def prometheus(samples: Sequence[Sample], fac: Facility | None, *, tick_seconds: float = 0.0,
               overruns: int = 0, gpu_ids: dict[str, GpuIds] | None = None) -> str:
    """The Prometheus text exposition of one tick.

    GPU series carry dcgm-exporter's identity labels (``gpu``, ``pci_bus_id``, ``UUID``) beside
    ``hw_id``, so ``on(pci_bus_id)`` or ``on(UUID)`` joins them with DCGM_FI_* series.
    """
    return prometheus_text(prom_blocks(samples, gpu_ids), fac, tick_seconds=tick_seconds, overruns=overruns)


def prometheus_text(blocks: PromBlocks, fac: Facility | None, *, tick_seconds: float = 0.0,
                    overruns: int = 0) -> str:
    """:func:`prometheus` of the nodes' series already made (:func:`prom_blocks`)."""
    host, energy, power, node_power, psys = ([b for b in family if b] for family in blocks)
    d = DESCRIPTIONS
    out = [
        f"# HELP hw_host_energy_joules_total {d['hw.host.energy']}",
        "# TYPE hw_host_energy_joules_total counter", *host,
        f"# HELP hw_energy_joules_total {d['hw.energy']}",
        "# TYPE hw_energy_joules_total counter", *energy,
        f"# HELP hw_power_watts {d['hw.power']}",
        "# TYPE hw_power_watts gauge", *power,
    ]
    if psys:
        out += [f"# HELP joulie_sim_rapl_psys_energy_joules_total {d['joulie.sim.rapl.psys.energy']}",
                "# TYPE joulie_sim_rapl_psys_energy_joules_total counter", *psys]
    out += [
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
            f"# HELP joulie_sim_facility_pue {d['joulie.sim.facility.pue']}",
            "# TYPE joulie_sim_facility_pue gauge", f"joulie_sim_facility_pue {fac.pue:.3f}",
            f"# HELP joulie_sim_facility_cooling_watts {d['joulie.sim.facility.cooling_power']}",
            "# TYPE joulie_sim_facility_cooling_watts gauge", f"joulie_sim_facility_cooling_watts {fac.cooling_w:.2f}",
            f"# HELP joulie_sim_facility_it_watts {d['joulie.sim.facility.it_power']}",
            "# TYPE joulie_sim_facility_it_watts gauge", f"joulie_sim_facility_it_watts {fac.it_power_w:.2f}",
            f"# HELP joulie_sim_facility_ambient_celsius {d['joulie.sim.facility.ambient_temperature']}",
            "# TYPE joulie_sim_facility_ambient_celsius gauge",
            f"joulie_sim_facility_ambient_celsius {fac.ambient_c:.2f}",
        ]
    return "\n".join(out) + "\n"


#: libc's ``renameat2`` (None: not looked up yet; False: this C library has none).
_RENAMEAT2: Any = None
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Swap the files at ``a`` and ``b`` in one step (``renameat2`` with ``RENAME_EXCHANGE``);
    False where the C library, the kernel or the filesystem cannot (nothing is changed then)."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        import ctypes

        from joulectl.sim.libc import libc

        try:
            fn = libc().renameat2
            fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
            fn.restype = ctypes.c_int
            _RENAMEAT2 = fn
        except (AttributeError, OSError):
            _RENAMEAT2 = False
    if _RENAMEAT2 is False:
        return False
    return bool(_RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0)


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file swapped in at once: a reader sees the
    whole old file or the whole new one.

    Where ``path`` is a regular file already, the new file takes its place by an exchange
    (``renameat2`` ``RENAME_EXCHANGE``) and the old one, now under the temporary name, is removed;
    elsewhere (no file yet, no ``renameat2``) by a rename. Not a rename over the old file: ext4
    (``auto_da_alloc``) starts writing a file renamed over another to disk in the renaming call,
    10 ms a tick for the 17 MB of 10,000 nodes' OTLP lines, and 20-40 MB/s of disk writes for
    files replaced every second; removed within a tick or two, the old file's pages are dropped
    before they reach the disk (docs/PERFORMANCE.md)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            regular = stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            regular = False
        if regular and _exchange(tmp, path):
            os.unlink(tmp)  # the previous content
            return
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # nothing half-written left behind (a full disk, a directory in the way)
        raise


_START, _NOW, _VALUE = "\x01start\x01", "\x01now\x01", "\x01value\x01"


def _num(value: float) -> str:
    """``value`` rounded to 6 decimals as ``json.dumps`` writes it."""
    r = round(value, 6)
    return float.__repr__(r) if isinstance(r, float) and math.isfinite(r) else json.dumps(r)


def otlp_line(sample: Sample, start_s: float, profile: str = "", gpu_ids: GpuIds | None = None) -> str | None:
    """:func:`otlp_node` as one compact JSON line (the same text as ``json.dumps`` of it).

    A node's request has the same shape every tick: it is encoded once, as a ``%`` template with a
    slot for every time and value, and each tick fills it in (encoding was most of the telemetry's
    cost per tick). The template is kept per node, with the components (in the sample's order),
    profile and identity labels it was made for; a sample that differs in any gets a new one.
    """
    if sample.virtual:
        return None
    ej = sample.energy_j
    gp = sample.gpu_power_w
    fast = _OTLP_FAST.get(sample.node)
    if fast is None or fast[0] != tuple(ej) or fast[1] != tuple(gp) or fast[2] != profile or fast[3] is not gpu_ids:
        fast = _otlp_template(sample, profile, gpu_ids)
    template, pick, parts, gpus, has_psys = fast[4:]
    values = [_ns(start_s), _ns(sample.time_s), _num(ej["host"][1] if "host" in ej else 0.0)]
    values += [_num(ej[cid][1]) for cid in parts]
    values += [_num(gp[g]) for g in gpus]
    if has_psys:
        values.append(_num(ej["psys"][1]))
    line: str = template % pick(values)
    return line


#: node -> (energy components, GPUs, profile, identity labels, template, slot picker, parts, GPUs
#: sorted, psys): see :func:`otlp_line`.
_OTLP_FAST: dict[str, tuple[Any, ...]] = {}
_SLOT = re.compile("\x01(start|now|value)\x01")


def _otlp_template(sample: Sample, profile: str, gpu_ids: GpuIds | None) -> tuple[Any, ...]:
    parts = tuple((cid, hw_type) for cid, (hw_type, _j) in sorted(sample.energy_j.items())
                  if cid not in ("host", "psys"))
    gpus = tuple(sorted(sample.gpu_power_w))
    has_psys = "psys" in sample.energy_j
    # The request with placeholders in every time and value slot, in the order otlp_node emits them.
    energy = {cid: (t, 0.0) for cid, t in parts} | ({"host": ("host", 0.0)} if "host" in sample.energy_j else {})
    if has_psys:
        energy["psys"] = ("host", 0.0)
    holder = Sample(sample.node, 0.0, 0.0, 0.0, 0.0, energy, {g: 0.0 for g in gpus}, {}, {}, sample.virtual)
    doc = otlp_node(holder, 0.0, profile, gpu_ids)
    assert doc is not None
    text = json.dumps(_placeholders(doc), separators=(",", ":")).replace("%", "%%")
    enc = json.dumps
    for mark in (_START, _NOW, _VALUE):
        text = text.replace(enc(mark), mark if mark == _VALUE else f'"{mark}"')
    # values of a tick: [start, now, value 0, value 1, ...]; a slot takes one of them
    slots: list[int] = []
    counter = [2]

    def slot(m: re.Match[str]) -> str:
        kind = m.group(1)
        if kind == "value":
            slots.append(counter[0])
            counter[0] += 1
        else:
            slots.append(0 if kind == "start" else 1)
        return "%s"

    template = _SLOT.sub(slot, text)
    fast = (tuple(sample.energy_j), tuple(sample.gpu_power_w), profile, gpu_ids, template,
            operator.itemgetter(*slots) if len(slots) > 1 else (lambda v: (v[slots[0]],)),
            tuple(cid for cid, _t in parts), gpus, has_psys)
    if len(_OTLP_FAST) >= 100_000:
        _OTLP_FAST.clear()
    _OTLP_FAST[sample.node] = fast
    return fast


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
               tick_seconds: float = 0.0, overruns: int = 0, gpu_ids: dict[str, GpuIds] | None = None,
               cluster: str = "", rendered: Rendered | None = None) -> tuple[list[str], str]:
    """Write both metric files of one tick; their contents: (OTLP JSON lines, Prometheus text).
    ``rendered``: :func:`render_nodes` of ``samples``, when the workers made it."""
    if rendered is None:
        rendered = render_nodes(samples, profiles, gpu_ids)
    lines = [line for line in rendered[0] if line is not None]
    if fac is not None and samples:
        lines.append(json.dumps(otlp_facility(fac, samples[0].time_s, cluster), separators=(",", ":")))
    write_atomic(os.path.join(root, "telemetry", "otlp.jsonl"), "\n".join(lines) + "\n" if lines else "")
    prom = prometheus_text(rendered[1], fac, tick_seconds=tick_seconds, overruns=overruns)
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
