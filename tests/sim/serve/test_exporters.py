"""The exporter formats, checked against those exporters' documented metric lists.

The lists below are written out from the exporters' own documentation (not from joulectl's table
of them): dcgm-exporter ``etc/default-counters.csv``, ROCm device-metrics-exporter
``docs/configuration/metricslist.md``, Kepler 0.7 ``docs/design/metrics.md`` and Kepler 0.12
``docs/user/metrics.md``. A format may export fewer metrics than its exporter (what the emulator
does not model is left out), never a name its exporter does not have.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Served

#: dcgm-exporter default counters: (name, type).
DCGM_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge", "DCGM_FI_DEV_MEM_CLOCK": "gauge", "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge", "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge", "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge", "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge", "DCGM_FI_DEV_XID_ERRORS": "gauge", "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
}
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}

#: ROCm device-metrics-exporter metric names (lower-case field names).
ROCM_METRICS = {
    "gpu_power_usage": "gauge", "gpu_energy_consumed": "counter", "gpu_edge_temperature": "gauge",
    "gpu_junction_temperature": "gauge", "gpu_memory_temperature": "gauge", "gpu_gfx_activity": "gauge",
    "gpu_umc_activity": "gauge", "gpu_clock": "gauge", "gpu_total_vram": "gauge", "gpu_used_vram": "gauge",
}
ROCM_LABELS = {"gpu_id", "serial_number", "card_series", "card_model", "card_vendor", "hostname",
               "gpu_partition_id", "gpu_compute_partition_type", "gpu_memory_partition_type"}

KEPLER_07_METRICS = {
    "kepler_node_core_joules_total": "counter", "kepler_node_uncore_joules_total": "counter",
    "kepler_node_dram_joules_total": "counter", "kepler_node_package_joules_total": "counter",
    "kepler_node_other_joules_total": "counter", "kepler_node_gpu_joules_total": "counter",
    "kepler_node_platform_joules_total": "counter", "kepler_node_info": "gauge",
}
KEPLER_012_METRICS = {
    "kepler_node_cpu_joules_total": "counter", "kepler_node_cpu_watts": "gauge",
    "kepler_node_cpu_active_joules_total": "counter", "kepler_node_cpu_idle_joules_total": "counter",
    "kepler_node_cpu_active_watts": "gauge", "kepler_node_cpu_idle_watts": "gauge",
    "kepler_node_cpu_usage_ratio": "gauge", "kepler_node_cpu_info": "gauge",
}


def _page(served: Served, fmt: str, node: str) -> str:
    status, headers, body = served.request("GET", f"/exporters/{fmt}/{node}/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return body.decode()


def _series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name as the page spells it -> [(labels, value)], read with the Prometheus text parser
    (which names a counter's samples ``<family>_total`` even where the exporter, like DCGM, does not)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    spelled = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name if s.name in spelled else fam.name
            out.setdefault(name, []).append((s.labels, s.value))
    return out


def _types(text: str) -> dict[str, str]:
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}


def _telemetry(served: Served, node: str) -> dict[str, object]:
    status, doc = served.get_json(f"/telemetry/{node}")
    assert status == 200
    return doc  # type: ignore[no-any-return]


def test_dcgm_exporter(served: Served) -> None:
    text = _page(served, "dcgm-exporter", "h100-0")
    types = _types(text)
    assert set(types) <= set(DCGM_DEFAULT_COUNTERS)
    assert {n: DCGM_DEFAULT_COUNTERS[n] for n in types} == types
    assert {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_TEMP"} <= set(types)
    series = _series(text)
    power = series["DCGM_FI_DEV_POWER_USAGE"]
    assert len(power) == 8
    labels, _v = power[0]
    assert set(labels) >= DCGM_LABELS
    assert labels["gpu"] == "0"
    assert labels["device"] == "nvidia0"
    assert labels["pci_bus_id"] == "00000000:18:00.0"  # NVML's spelling: 8-digit domain, upper case
    assert labels["UUID"] == "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert labels["Hostname"] == "h100-0"
    tel = _telemetry(served, "h100-0")
    devices = tel["gpu"]["devices"]  # type: ignore[index]
    by_gpu = {lab["gpu"]: v for lab, v in power}
    for i, dev in enumerate(devices):
        assert by_gpu[str(i)] == pytest.approx(dev["powerWatts"], abs=0.01)
    energy = {lab["gpu"]: v for lab, v in series["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]}
    # mJ, as DCGM counts it.
    assert energy["0"] == pytest.approx(devices[0]["energyJoules"] * 1000, abs=1)


def test_dcgm_exporter_on_a_node_without_nvidia_gpus_is_empty(served: Served) -> None:
    assert _page(served, "dcgm-exporter", "xeon-0") == ""


def test_rocm_device_metrics(served: Served) -> None:
    text = _page(served, "rocm-device-metrics", "mi300x-0")
    types = _types(text)
    assert set(types) <= set(ROCM_METRICS)
    assert {n: ROCM_METRICS[n] for n in types} == types
    series = _series(text)
    power = series["gpu_power_usage"]
    assert len(power) == 8
    assert set(power[0][0]) >= ROCM_LABELS
    assert power[0][0]["card_model"] == "AMD Instinct MI300X"
    assert power[0][0]["hostname"] == "mi300x-0"
    tel = _telemetry(served, "mi300x-0")
    dev0 = tel["gpu"]["devices"][0]  # type: ignore[index]
    assert power[0][1] == pytest.approx(dev0["powerWatts"], abs=0.01)
    # µJ.
    assert series["gpu_energy_consumed"][0][1] == pytest.approx(dev0["energyJoules"] * 1e6, rel=1e-6)
    clocks = series["gpu_clock"]
    assert clocks[0][0]["clock_type"] == "GPU_CLOCK_TYPE_SYSTEM"
    assert 500 <= clocks[0][1] <= 2100


def test_kepler_07(served: Served) -> None:
    text = _page(served, "kepler-0.7", "xeon-0")
    types = _types(text)
    assert set(types) <= set(KEPLER_07_METRICS)
    series = _series(text)
    pkg = series["kepler_node_package_joules_total"]
    assert {(lab["package"], lab["mode"]) for lab, _v in pkg} == {("0", "dynamic"), ("0", "idle"),
                                                                   ("1", "dynamic"), ("1", "idle")}
    # dynamic + idle = the package counter.
    tel = _telemetry(served, "xeon-0")
    pkg0 = next(p for p in tel["cpu"]["packages"] if p["id"] == "pkg0")  # type: ignore[index]
    total = sum(v for lab, v in pkg if lab["package"] == "0")
    assert total == pytest.approx(pkg0["energyJoules"], abs=1e-3)
    idle = next(v for lab, v in pkg if lab["package"] == "0" and lab["mode"] == "idle")
    assert 0 < idle < total
    assert all(lab["instance"] == "xeon-0" for lab, _v in pkg)


def test_kepler_07_splits_gpu_energy_too(served: Served) -> None:
    series = _series(_page(served, "kepler-0.7", "h100-0"))
    gpu = series["kepler_node_gpu_joules_total"]
    assert {lab["index"] for lab, _v in gpu} == {str(i) for i in range(8)}
    assert {lab["source"] for lab, _v in gpu} == {"nvml"}


def test_kepler_012(served: Served) -> None:
    text = _page(served, "kepler-0.12", "xeon-0")
    types = _types(text)
    assert set(types) <= set(KEPLER_012_METRICS)
    assert {n: KEPLER_012_METRICS[n] for n in types} == types
    series = _series(text)
    joules = {lab["zone"]: v for lab, v in series["kepler_node_cpu_joules_total"]}
    assert set(joules) == {"package-0", "package-1", "dram-0", "dram-1"}
    active = {lab["zone"]: v for lab, v in series["kepler_node_cpu_active_joules_total"]}
    idle = {lab["zone"]: v for lab, v in series["kepler_node_cpu_idle_joules_total"]}
    for zone, total in joules.items():
        assert active[zone] + idle[zone] == pytest.approx(total, abs=1e-5)
    paths = {lab["zone"]: lab["path"] for lab, _v in series["kepler_node_cpu_joules_total"]}
    assert paths["package-1"] == "/sys/class/powercap/intel-rapl:1"


def test_every_format_parses_and_has_help_and_type_for_every_metric(served: Served) -> None:
    for fmt, node in [("dcgm-exporter", "h100-0"), ("rocm-device-metrics", "mi300x-0"),
                      ("kepler-0.7", "xeon-0"), ("kepler-0.12", "xeon-0"), ("kepler-0.7", "vm-0")]:
        text = _page(served, fmt, node)
        helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
        assert helps == set(_types(text)), fmt
        list(text_string_to_metric_families(text))  # parses


def test_exporter_pages_are_one_tick(served: Served) -> None:
    a = _page(served, "kepler-0.12", "xeon-0")
    b = _page(served, "kepler-0.12", "xeon-0")
    assert a == b
    assert json.loads(served.request("GET", "/healthz")[2])["tick"] == 3
