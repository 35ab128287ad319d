"""The metrics pages of real exporters, computed from one snapshot of an emulated node.

Dashboards, alerts and Joulie inputs written for a real exporter read these pages unchanged
(emulate-mode seed: SIM_EXPORTERS). Each format keeps its exporter's metric names, label names,
types and units, as the exporter's own documentation lists them (docs/simulate.md puts them side by
side with their sources); a metric the emulator has no model for is left out rather than invented.

* ``dcgm-exporter``: NVIDIA DCGM exporter, ``etc/default-counters.csv`` fields.
* ``rocm-device-metrics``: AMD ROCm device-metrics-exporter, ``docs/configuration/metricslist``.
* ``kepler-0.7``: Kepler 0.7 node metrics (``kepler_node_*_joules_total`` with ``mode`` idle or
  dynamic).
* ``kepler-0.12``: Kepler 0.12 (the rewrite): ``kepler_node_cpu_*`` per RAPL zone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from joulectl.backends.base import nvml_bus_id
from joulectl.sim.identity import GpuMeta, NodeMeta
from joulectl.sim.serve.snapshot import Snapshot
from joulectl.sim.telemetry import _label

FORMATS = ("dcgm-exporter", "kepler-0.7", "kepler-0.12", "rocm-device-metrics")


@dataclass(frozen=True)
class MetricDoc:
    """One metric a format exports: name, Prometheus type, unit and help text as the exporter has it."""

    name: str
    type: str
    unit: str
    help: str


#: dcgm-exporter ``etc/default-counters.csv`` (name, type, help); the units are in the help text.
DCGM: tuple[MetricDoc, ...] = (
    MetricDoc("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz", "SM clock frequency (in MHz)."),
    MetricDoc("DCGM_FI_DEV_GPU_TEMP", "gauge", "C", "GPU temperature (in C)."),
    MetricDoc("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", "Power draw (in W)."),
    MetricDoc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "mJ",
              "Total energy consumption since boot (in mJ)."),
    MetricDoc("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", "GPU utilization (in %)."),
)

#: ROCm device-metrics-exporter metric list (field GPU_POWER_USAGE -> gpu_power_usage, ...).
ROCM: tuple[MetricDoc, ...] = (
    MetricDoc("gpu_power_usage", "gauge", "W", "Current socket power usage in watts"),
    MetricDoc("gpu_energy_consumed", "counter", "uJ", "Accumulated energy consumed by the GPU in microjoules"),
    MetricDoc("gpu_edge_temperature", "gauge", "C", "Current edge temperature in celsius"),
    MetricDoc("gpu_junction_temperature", "gauge", "C", "Current junction/hotspot temperature in celsius"),
    MetricDoc("gpu_gfx_activity", "gauge", "%", "Graphics engine usage percentage"),
    MetricDoc("gpu_clock", "gauge", "MHz", "Current clock frequency in MHz, by clock type"),
)

#: Kepler 0.7 node-level energy counters (``mode`` = dynamic or idle).
KEPLER_07: tuple[MetricDoc, ...] = (
    MetricDoc("kepler_node_package_joules_total", "counter", "J",
              "Aggregated RAPL value in package (socket) in joules"),
    MetricDoc("kepler_node_dram_joules_total", "counter", "J", "Aggregated RAPL value in dram in joules"),
    MetricDoc("kepler_node_platform_joules_total", "counter", "J",
              "Aggregated value in platform (entire node) in joules"),
    MetricDoc("kepler_node_gpu_joules_total", "counter", "J", "Aggregated GPU value in joules"),
    MetricDoc("kepler_node_info", "gauge", "", "Labeled node information"),
)

#: Kepler 0.12 node CPU metrics per RAPL zone (``zone``, ``path``).
KEPLER_012: tuple[MetricDoc, ...] = (
    MetricDoc("kepler_node_cpu_joules_total", "counter", "J", "Energy consumption of cpu at node level in joules"),
    MetricDoc("kepler_node_cpu_watts", "gauge", "W", "Power consumption of cpu at node level in watts"),
    MetricDoc("kepler_node_cpu_active_joules_total", "counter", "J",
              "Energy consumption of cpu in active state at node level in joules"),
    MetricDoc("kepler_node_cpu_idle_joules_total", "counter", "J",
              "Energy consumption of cpu in idle state at node level in joules"),
    MetricDoc("kepler_node_cpu_active_watts", "gauge", "W",
              "Power consumption of cpu in active state at node level in watts"),
    MetricDoc("kepler_node_cpu_idle_watts", "gauge", "W",
              "Power consumption of cpu in idle state at node level in watts"),
)

METRICS: dict[str, tuple[MetricDoc, ...]] = {
    "dcgm-exporter": DCGM, "rocm-device-metrics": ROCM, "kepler-0.7": KEPLER_07, "kepler-0.12": KEPLER_012,
}

Line = tuple[str, dict[str, str], float]


def _page(docs: Sequence[MetricDoc], lines: Sequence[Line]) -> bytes:
    """The Prometheus text exposition (0.0.4) of ``lines``, grouped under each metric's HELP and TYPE."""
    by_name: dict[str, list[str]] = {}
    for name, labels, value in lines:
        lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        by_name.setdefault(name, []).append(f"{name}{{{lab}}} {_value(value)}" if lab else f"{name} {_value(value)}")
    out: list[str] = []
    for d in docs:
        rows = by_name.get(d.name)
        if not rows:
            continue
        out += [f"# HELP {d.name} {d.help}", f"# TYPE {d.name} {d.type}", *rows]
    return ("\n".join(out) + "\n").encode() if out else b""


def _value(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(round(float(v), 6))


def dcgm_exporter(snap: Snapshot, meta: NodeMeta) -> bytes:
    """dcgm-exporter's page: one series per NVIDIA GPU and field, labels ``gpu``, ``UUID``,
    ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``."""
    s = snap.samples[meta.node]
    rd = s.readings
    lines: list[Line] = []
    for g in _gpus(meta, "nvidia"):
        labels = {"gpu": str(g.index), "UUID": g.uuid, "pci_bus_id": nvml_bus_id(g.bus_id),
                  "device": f"nvidia{g.index}", "modelName": g.product, "Hostname": meta.node}
        if g.driver_version:
            labels["DCGM_FI_DRIVER_VERSION"] = g.driver_version
        if g.max_sm_clock_mhz:
            lines.append(("DCGM_FI_DEV_SM_CLOCK", labels, round(g.max_sm_clock_mhz * rd.get(f"c.{g.key}", 1.0))))
        lines.append(("DCGM_FI_DEV_GPU_TEMP", labels, round(rd.get(f"T.{g.key}", 0.0))))
        lines.append(("DCGM_FI_DEV_POWER_USAGE", labels, round(s.gpu_power_w.get(g.key, 0.0), 3)))
        lines.append(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, round(_energy(s.energy_j, g.key) * 1000)))
        lines.append(("DCGM_FI_DEV_GPU_UTIL", labels, round(100 * rd.get(f"u.{g.key}", 0.0))))
    return _page(DCGM, lines)


def rocm_device_metrics(snap: Snapshot, meta: NodeMeta) -> bytes:
    """ROCm device-metrics-exporter's page: one series per AMD GPU, labels ``gpu_id``,
    ``serial_number``, ``card_series``, ``card_model``, ``card_vendor``, ``hostname``, the partition
    labels and ``gpu_clock``'s ``clock_type``."""
    s = snap.samples[meta.node]
    rd = s.readings
    lines: list[Line] = []
    for g in _gpus(meta, "amd"):
        labels = {"gpu_id": str(g.index), "serial_number": g.serial, "card_series": g.product,
                  "card_model": g.product, "card_vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
                  "driver_version": g.driver_version, "vbios_version": g.vbios_version, "hostname": meta.node,
                  "gpu_partition_id": "0", "gpu_compute_partition_type": "spx", "gpu_memory_partition_type": "nps1"}
        temp = rd.get(f"T.{g.key}", 0.0)
        lines.append(("gpu_power_usage", labels, round(s.gpu_power_w.get(g.key, 0.0), 3)))
        lines.append(("gpu_energy_consumed", labels, round(_energy(s.energy_j, g.key) * 1e6)))
        lines.append(("gpu_edge_temperature", labels, round(temp, 1)))
        lines.append(("gpu_junction_temperature", labels, round(temp + 10.0, 1)))
        lines.append(("gpu_gfx_activity", labels, round(100 * rd.get(f"u.{g.key}", 0.0))))
        if g.max_sm_clock_mhz:
            lines.append(("gpu_clock", {**labels, "clock_type": "GPU_CLOCK_TYPE_SYSTEM"},
                          round(g.max_sm_clock_mhz * rd.get(f"c.{g.key}", 1.0))))
    return _page(ROCM, lines)


def kepler_07(snap: Snapshot, meta: NodeMeta) -> bytes:
    """Kepler 0.7's node page: package, DRAM, platform and GPU joules, each split into ``mode``
    idle and dynamic (idle = the idle power's share of each interval, as Kepler attributes it)."""
    s = snap.samples[meta.node]
    idle = snap.idle_j.get(meta.node, {})
    lines: list[Line] = []
    base = {"instance": meta.node}

    def split(name: str, cid: str, **labels: str) -> None:
        total = _energy(s.energy_j, cid)
        idle_j = min(idle.get(cid, 0.0), total)
        for mode, value in (("dynamic", total - idle_j), ("idle", idle_j)):
            lines.append((name, {**base, **labels, "mode": mode}, round(value, 6)))

    for cid in meta.packages:
        split("kepler_node_package_joules_total", cid, package=cid[3:], source="rapl-sysfs")
        if f"dram{cid[3:]}" in s.energy_j:
            split("kepler_node_dram_joules_total", f"dram{cid[3:]}", package=cid[3:], source="rapl-sysfs")
    if "psys" in s.energy_j:
        split("kepler_node_platform_joules_total", "psys", source="acpi")
    for g in meta.gpus:
        split("kepler_node_gpu_joules_total", g.key, index=str(g.index), source=_gpu_source(g))
    lines.append(("kepler_node_info", {**base, "cpu_architecture": meta.cpu_model}, 1))
    return _page(KEPLER_07, lines)


def kepler_012(snap: Snapshot, meta: NodeMeta) -> bytes:
    """Kepler 0.12's node page: ``kepler_node_cpu_*`` per RAPL zone (``zone`` package or dram, with
    the socket index, and the zone's sysfs ``path``), totals, active and idle, in joules and watts."""
    s = snap.samples[meta.node]
    idle = snap.idle_j.get(meta.node, {})
    rate = snap.rate_w.get(meta.node, {})
    lines: list[Line] = []
    for i, cid in enumerate(meta.packages):
        zones = [(cid, "package", f"/sys/class/powercap/intel-rapl:{i}")]
        if f"dram{i}" in s.energy_j:
            zones.append((f"dram{i}", "dram", f"/sys/class/powercap/intel-rapl:{i}:0"))
        for comp, zone, path in zones:
            labels = {"zone": f"{zone}-{i}", "path": path, "node_name": meta.node}
            total = _energy(s.energy_j, comp)
            idle_j = min(idle.get(comp, 0.0), total)
            watts = rate.get(comp, 0.0)
            idle_w = min(meta.package_idle_w, watts) if zone == "package" else 0.0
            lines += [("kepler_node_cpu_joules_total", labels, round(total, 6)),
                      ("kepler_node_cpu_active_joules_total", labels, round(total - idle_j, 6)),
                      ("kepler_node_cpu_idle_joules_total", labels, round(idle_j, 6)),
                      ("kepler_node_cpu_watts", labels, round(watts, 3)),
                      ("kepler_node_cpu_active_watts", labels, round(watts - idle_w, 3)),
                      ("kepler_node_cpu_idle_watts", labels, round(idle_w, 3))]
    return _page(KEPLER_012, lines)


def _gpus(meta: NodeMeta, vendor: str) -> list[GpuMeta]:
    return [g for g in meta.gpus if g.vendor == vendor]


def _gpu_source(g: GpuMeta) -> str:
    return {"nvidia": "nvml", "amd": "rocm-smi", "intel": "xpu-smi"}.get(g.vendor, g.vendor)


def _energy(energy: dict[str, tuple[str, float]], cid: str) -> float:
    item = energy.get(cid)
    return float(item[1]) if item else 0.0


RENDERERS: dict[str, Callable[[Snapshot, NodeMeta], bytes]] = {
    "dcgm-exporter": dcgm_exporter, "rocm-device-metrics": rocm_device_metrics,
    "kepler-0.7": kepler_07, "kepler-0.12": kepler_012,
}
