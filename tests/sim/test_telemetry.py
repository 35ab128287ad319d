"""Telemetry of a run: OTLP JSON lines, the Prometheus text file and events.jsonl."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import runtime, telemetry
from joulectl.sim.tick import Event, Sample

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: t}
spec:
  facility: {ambientC: 20, amplitudeC: 5, periodH: 24}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
"""


def _attrs(point: dict[str, Any]) -> dict[str, str]:
    return {a["key"]: a["value"]["stringValue"] for a in point["attributes"]}


def _otlp(root: Path) -> dict[str, dict[str, Any]]:
    """host.name -> {metric name: metric}."""
    out: dict[str, dict[str, Any]] = {}
    for line in (root / "telemetry" / "otlp.jsonl").read_text().splitlines():
        req = json.loads(line)
        [rm] = req["resourceMetrics"]
        res = _attrs(rm["resource"])
        host = res.get("host.name") or res["sim.joulie.io/scope"]  # the facility is no host
        [sm] = rm["scopeMetrics"]
        out[host] = {m["name"]: m for m in sm["metrics"]}
    return out


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, dict[str, Any]]]]:
    tmp = tmp_path_factory.mktemp("tel")
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC)
    root = tmp / "root"
    snapshots = []
    for _ in range(2):
        runtime.run(str(spec), str(root), ticks=2, fast=True, workers=1)
        snapshots.append(_otlp(root))
    return root, snapshots


def test_otlp_per_node_metrics_and_none_for_a_vm(run_root: tuple[Path, list[Any]]) -> None:
    root, snaps = run_root
    metrics = snaps[-1]
    assert set(metrics) == {"intel-0", "flex-0", "facility"}  # vm-0 exports nothing
    intel = metrics["intel-0"]
    assert intel["hw.host.energy"]["unit"] == "J"
    assert intel["hw.host.energy"]["sum"]["isMonotonic"] is True
    assert intel["hw.host.energy"]["sum"]["aggregationTemporality"] == 2
    parts = {_attrs(p)["hw.id"]: _attrs(p)["hw.type"] for p in intel["hw.energy"]["sum"]["dataPoints"]}
    assert parts["pkg0"] == "cpu" and parts["pkg1"] == "cpu"
    assert parts["dram0"] == "memory" and parts["dram1"] == "memory"
    assert "hw.power" not in intel
    flex = metrics["flex-0"]
    gpu_parts = {_attrs(p)["hw.id"]: _attrs(p)["hw.type"] for p in flex["hw.energy"]["sum"]["dataPoints"]}
    assert {k: v for k, v in gpu_parts.items() if k.startswith("gpu")} == {f"gpu{i}": "gpu" for i in range(4)}
    power = flex["hw.power"]
    assert power["unit"] == "W"
    assert {_attrs(p)["hw.type"] for p in power["gauge"]["dataPoints"]} == {"gpu"}
    assert len(power["gauge"]["dataPoints"]) == 4
    fac = metrics["facility"]
    assert 1.0 <= fac["joulie.sim.facility.pue"]["gauge"]["dataPoints"][0]["asDouble"] <= 3.0
    assert not list((root / "telemetry").glob("*.tmp*"))


def test_otlp_counters_continue_across_a_restart(run_root: tuple[Path, list[Any]]) -> None:
    _, (first, second) = run_root
    p1 = first["intel-0"]["hw.host.energy"]["sum"]["dataPoints"][0]
    p2 = second["intel-0"]["hw.host.energy"]["sum"]["dataPoints"][0]
    assert p2["asDouble"] == pytest.approx(2 * p1["asDouble"], rel=0.01)
    assert p2["startTimeUnixNano"] == p1["startTimeUnixNano"]  # no counter reset
    assert int(p2["timeUnixNano"]) > int(p1["timeUnixNano"])


def test_prometheus_text_file(run_root: tuple[Path, list[Any]]) -> None:
    root, snaps = run_root
    text = (root / "metrics.prom").read_text()
    assert "# TYPE hw_host_energy_joules_total counter" in text
    assert "# TYPE hw_power_watts gauge" in text
    host = re.search(r'^hw_host_energy_joules_total\{node="intel-0"\} ([0-9.]+)$', text, re.MULTILINE)
    assert host is not None
    otlp = snaps[-1]["intel-0"]["hw.host.energy"]["sum"]["dataPoints"][0]["asDouble"]
    assert float(host.group(1)) == pytest.approx(otlp)
    assert re.search(r'^hw_energy_joules_total\{node="intel-0",hw_id="pkg0",hw_type="cpu"\} [0-9.]+$', text,
                     re.MULTILINE)
    assert len(re.findall(r'^hw_power_watts\{node="flex-0",hw_id="gpu\d",hw_type="gpu",', text, re.MULTILINE)) == 4
    # dcgm-exporter's identity labels, so GPU series join with DCGM_FI_* on pci_bus_id (or UUID, gpu).
    assert ('hw_power_watts{node="flex-0",hw_id="gpu0",hw_type="gpu",gpu="0",pci_bus_id="00000000:4D:00.0",'
            'vendor="intel",model="Intel(R) Data Center GPU Flex 170"} ') in text
    assert 'hw_host_energy_joules_total{node="vm-0"}' not in text
    assert re.search(r'^joulie_sim_node_power_watts\{node="vm-0"\} [0-9.]+$', text, re.MULTILINE)
    assert re.search(r"^joulie_sim_facility_pue [0-9.]+$", text, re.MULTILINE)
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r"^[a-z_]+(\{[^}]*\})? -?[0-9.]+(e[-+]?\d+)?$", line), line


def test_write_atomic_swaps_the_new_file_in_and_removes_the_old(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The metric files are rewritten every tick: swapped in (renameat2 RENAME_EXCHANGE) and the old
    # one removed, not renamed over it (ext4 writes a file renamed over another to disk in the
    # rename: issue 20). A reader holding the old file keeps reading it whole; a new reader sees
    # the new one; no temporary file stays; the first write (nothing to swap with) renames.
    swaps: list[tuple[str, str]] = []
    exchange = telemetry._exchange

    def counting(a: str, b: str) -> bool:
        swaps.append((a, b))
        return exchange(a, b)

    monkeypatch.setattr(telemetry, "_exchange", counting)
    path = tmp_path / "telemetry" / "otlp.jsonl"
    telemetry.write_atomic(str(path), "first\n")
    assert path.read_text() == "first\n" and swaps == []
    with open(path, encoding="utf-8") as old:
        telemetry.write_atomic(str(path), "second\n" * 1000)
        assert old.read() == "first\n"
    assert path.read_text() == "second\n" * 1000
    assert len(swaps) == 1 and swaps[0][1] == str(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["otlp.jsonl"]


def test_write_atomic_without_an_exchange_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A C library without renameat2, or a filesystem that refuses RENAME_EXCHANGE: a rename, as before.
    monkeypatch.setattr(telemetry, "_RENAMEAT2", False)
    path = tmp_path / "metrics.prom"
    path.write_text("old\n")
    telemetry.write_atomic(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.prom"]
    monkeypatch.setattr(telemetry, "_RENAMEAT2", lambda *args: -1)  # the call fails: nothing swapped
    telemetry.write_atomic(str(path), "newer\n")
    assert path.read_text() == "newer\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.prom"]


def test_write_atomic_leaves_a_directory_in_the_way_and_no_temporary_file(tmp_path: Path) -> None:
    # Not a regular file where the metric file goes: never swapped with it; the rename fails with
    # the system's error and the temporary file is removed.
    (tmp_path / "metrics.prom").mkdir()
    (tmp_path / "metrics.prom" / "keep").write_text("x")
    with pytest.raises(IsADirectoryError):
        telemetry.write_atomic(str(tmp_path / "metrics.prom"), "text\n")
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.prom"]
    assert (tmp_path / "metrics.prom" / "keep").read_text() == "x"


def test_a_sample_pickles_every_field() -> None:
    # Samples go from the workers to the main process every tick, pickled as their field values in
    # order (Sample.__reduce__): each field, set apart from its default, comes back.
    import dataclasses
    import pickle

    values: dict[str, Any] = {
        "node": "n1", "time_s": 1.8e9, "power_w": 512.5, "cpu_w": 300.25, "gpu_w": 212.25,
        "energy_j": {"pkg0": ("cpu", 12.5), "gpu0": ("gpu", 3.0)}, "gpu_power_w": {"gpu0": 212.25},
        "caps_w": {"pkg0": 270.0, "gpu0": None}, "governors": {"pkg0": "powersave"}, "virtual": True,
        "start_s": 1.7e9, "readings": {"T.gpu0": 41.5},
    }
    assert sorted(values) == sorted(f.name for f in dataclasses.fields(Sample))
    sample = Sample(**values)
    back = pickle.loads(pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is Sample and back == sample
    assert {f.name: getattr(back, f.name) for f in dataclasses.fields(Sample)} == values


def test_append_events_format(tmp_path: Path) -> None:
    n = telemetry.append_events(str(tmp_path), [
        Event(1_800_000_000.25, "n1", "joulie.sim.write.rejected", {"errno": 22, "error.type": "einval"}),
        Event(1_800_000_001.0, "n2", "joulie.sim.cap.reset", {"gpu": 1}),
    ])
    assert n == 2
    assert telemetry.append_events(str(tmp_path), []) == 0
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert lines[0] == {"time": "2027-01-15T08:00:00.250Z", "node": "n1", "name": "joulie.sim.write.rejected",
                        "attributes": {"errno": 22, "error.type": "einval"}}
    assert lines[1]["node"] == "n2"


def test_label_values_are_escaped() -> None:
    s = Sample('we"ird', 1.0, 10.0, 10.0, 0.0, {"host": ("host", 5.0)}, {}, {}, {}, start_s=0.5)
    text = telemetry.prometheus([s], None)
    assert 'hw_host_energy_joules_total{node="we\\"ird"} 5.000000' in text


def test_otlp_start_time_is_the_start_of_the_first_tick(tmp_path: Path) -> None:
    """After 3 fast one-second ticks the host energy over start-to-sample is the node power (not 1.5x)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    root = tmp_path / "root"
    runtime.run(str(spec), str(root), ticks=3, fast=True, workers=1)
    point = _otlp(root)["intel-0"]["hw.host.energy"]["sum"]["dataPoints"][0]
    seconds = (int(point["timeUnixNano"]) - int(point["startTimeUnixNano"])) / 1e9
    assert seconds == pytest.approx(3.0, abs=0.01)
    prom = (root / "metrics.prom").read_text()
    match = re.search(r'joulie_sim_node_power_watts\{node="intel-0"\} ([0-9.]+)', prom)
    assert match is not None
    power = float(match.group(1))
    assert point["asDouble"] / seconds == pytest.approx(power, rel=0.02)


@pytest.mark.parametrize("virtual", [False, True])
def test_otlp_line_is_the_json_of_the_request(virtual: bool) -> None:
    """The per-node line filled into a cached shape is byte for byte ``json.dumps`` of the request."""
    energy = {"host": ("host", 1234.5678901), "pkg0": ("cpu", 1e-7), "dram0": ("memory", 3.0),
              "gpu0": ("gpu", 12345678.123456789), "psys": ("host", 0.0)}
    for k in range(3):  # the shape is built once, then refilled
        s = Sample("n-\"1", 1_800_000_000.25 + k, 700.0, 300.0, 400.0,
                   {key: (t, j * (k + 1)) for key, (t, j) in energy.items()},
                   {"gpu0": 400.123456789 + k, "gpu1": 0.5}, {}, {}, virtual, 1_800_000_000.0)
        doc = telemetry.otlp_node(s, s.start_s, "intel")
        line = telemetry.otlp_line(s, s.start_s, "intel")
        if virtual:
            assert doc is None and line is None
        else:
            assert line == json.dumps(doc, separators=(",", ":"))


def test_cached_templates_follow_a_changed_node() -> None:
    """A node's cached OTLP and Prometheus templates are remade when its components, profile or
    identity labels change; a ``%`` in a name or label is text, not a format slot."""
    ids = {"gpu0": {"gpu": "0", "pci_bus_id": "00000000:18:00.0", "model": "A 100% GPU"}}
    steps: list[tuple[dict[str, tuple[str, float]], dict[str, float], str, Any]] = [
        ({"host": ("host", 1.5), "pkg0": ("cpu", 0.25)}, {}, "p", None),
        ({"host": ("host", 2.5), "pkg0": ("cpu", 0.5), "gpu0": ("gpu", 1.0)}, {"gpu0": 90.5}, "p", ids),
        ({"host": ("host", 3.5), "pkg0": ("cpu", 0.75), "gpu0": ("gpu", 2.0)}, {"gpu0": 91.5}, "q%s", ids),
        ({"host": ("host", 4.5), "pkg0": ("cpu", 1.0)}, {}, "q%s", None),
    ]
    for k, (energy, gpus, profile, gids) in enumerate(steps):
        s = Sample("n%d-%s", 100.0 + k, 10.0 + k, 10.0, 0.0, energy, gpus, {}, {}, start_s=99.0)
        line = telemetry.otlp_line(s, 99.0, profile, gids)
        assert line == json.dumps(telemetry.otlp_node(s, 99.0, profile, gids), separators=(",", ":"))
        prom = telemetry.prometheus([s], None, gpu_ids={"n%d-%s": gids} if gids else None)
        assert f'joulie_sim_node_power_watts{{node="n%d-%s"}} {10.0 + k:.2f}\n' in prom
        assert f'hw_host_energy_joules_total{{node="n%d-%s"}} {energy["host"][1]:.6f}\n' in prom
        assert f'hw_energy_joules_total{{node="n%d-%s",hw_id="pkg0",hw_type="cpu"}} {energy["pkg0"][1]:.6f}\n' in prom
        gpu_lines = [x for x in prom.splitlines() if x.startswith("hw_power_watts{")]
        if gpus:
            assert gpu_lines == [f'hw_power_watts{{node="n%d-%s",hw_id="gpu0",hw_type="gpu",gpu="0",'
                                 f'pci_bus_id="00000000:18:00.0",model="A 100% GPU"}} {gpus["gpu0"]:.3f}']
        else:
            assert gpu_lines == []
