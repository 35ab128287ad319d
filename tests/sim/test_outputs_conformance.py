"""Every Prometheus and OTLP output, judged by the ecosystem's own tools: promtool (Debian's
prometheus, installed by .ci/run), prometheus_client's parser, and opentelemetry-proto's messages
checked against the OpenTelemetry hardware semantic conventions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from joulectl.sim import runtime

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"),
                                    reason="Debian's prometheus (promtool) is not installed; .ci/run installs it")

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: conformance}
spec:
  pools:
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
"""

#: The hardware conventions' component types (semantic-conventions, hardware/common.md, ``hw.type``).
HW_TYPES = {"battery", "cpu", "disk_controller", "enclosure", "fan", "gpu", "logical_disk", "memory", "network",
            "physical_disk", "power_supply", "tape_drive", "temperature", "voltage"}


def promtool_check(text: str) -> str:
    assert PROMTOOL is not None, "promtool is missing in CI: .ci/run must install Debian's prometheus"
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (proc.stdout + proc.stderr).strip() if proc.returncode else ""


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("conformance")
    (tmp / "spec.yaml").write_text(SPEC)
    runtime.run(str(tmp / "spec.yaml"), str(tmp / "root"), ticks=2, fast=True, workers=1)
    return tmp / "root"


@needs_promtool
def test_discover_prometheus_is_promtool_clean_on_every_builtin_profile(
        cli: Callable[..., Any], all_trees: dict[str, Path]) -> None:
    for profile, tree in all_trees.items():
        r = cli("--root", tree, "discover", "-o", "prometheus")
        assert r.exit_code == 0, (profile, r.stderr)
        assert promtool_check(r.stdout) == "", profile
        list(text_string_to_metric_families(r.stdout))


@needs_promtool
def test_simulator_metrics_file_is_promtool_clean(run_root: Path) -> None:
    text = (run_root / "metrics.prom").read_text()
    assert promtool_check(text) == ""
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    types = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert helps == types


def test_gpu_series_join_dcgm_exporter_on_pci_bus_id_and_uuid(cli: Callable[..., Any], run_root: Path) -> None:
    """discover, the simulator's metrics and its dcgm-exporter page name a GPU the same way."""
    prom = (run_root / "metrics.prom").read_text()
    sim = {s.labels["pci_bus_id"]: s.labels for f in text_string_to_metric_families(prom) if f.name == "hw_power_watts"
           for s in f.samples if s.labels["node"] == "h100-0"}
    disc = cli("--root", run_root / "h100-0", "discover", "-o", "prometheus")
    assert disc.exit_code == 0
    found = {s.labels["pci_bus_id"]: s.labels for f in text_string_to_metric_families(disc.stdout)
             if f.name == "joulectl_gpu_power_cap_watts" for s in f.samples}
    assert sorted(sim) == sorted(found)
    assert len(sim) == 8
    first = "00000000:18:00.0"
    assert sim[first]["UUID"] == found[first]["UUID"] == "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00"
    assert sim[first]["gpu"] == found[first]["gpu"] == "0"


def _requests(root: Path) -> list[ExportMetricsServiceRequest]:
    out = []
    for line in (root / "telemetry" / "otlp.jsonl").read_text().splitlines():
        # Strict: a field the OTLP schema does not have fails the parse.
        out.append(json_format.Parse(line, ExportMetricsServiceRequest()))
    return out


def _attrs(kvs: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in kvs}


def test_otlp_lines_follow_the_hardware_conventions(run_root: Path) -> None:
    reqs = _requests(run_root)
    assert len(reqs) == 5  # four nodes (the VM exports nothing) and the facility
    for req in reqs:
        for rm in req.resource_metrics:
            res = _attrs(rm.resource.attributes)
            assert res["service.name"] == "joulectl-sim"
            facility = res.get("sim.joulie.io/scope") == "facility"
            assert ("host.name" in res) is not facility
            assert res.get("host.name") != "facility"
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    assert m.description, m.name
                    assert m.unit, m.name
                    if m.name in ("hw.energy", "hw.power"):
                        points = m.sum.data_points if m.name == "hw.energy" else m.gauge.data_points
                        for p in points:
                            a = _attrs(p.attributes)
                            assert a["hw.id"]
                            assert a["hw.type"] in HW_TYPES, (m.name, a)
                    elif m.name.startswith("hw.host."):
                        for p in m.sum.data_points:
                            assert "hw.type" not in _attrs(p.attributes)
                    elif m.name.startswith("hw."):
                        pytest.fail(f"{m.name} is not a metric of the hardware conventions")
                    if m.name.endswith("energy"):
                        assert m.unit == "J" and m.sum.is_monotonic and m.sum.aggregation_temporality == 2


def test_otlp_energy_parts_never_double_count_the_host(run_root: Path) -> None:
    """sum(hw.energy) by node equals hw.host.energy: psys, which holds the whole platform, is not
    among the parts."""
    for req in _requests(run_root):
        rm = req.resource_metrics[0]
        res = _attrs(rm.resource.attributes)
        if "host.name" not in res:
            continue
        metrics = {m.name: m for m in rm.scope_metrics[0].metrics}
        host = metrics["hw.host.energy"].sum.data_points[0].as_double
        parts = sum(p.as_double for p in metrics["hw.energy"].sum.data_points) if "hw.energy" in metrics else 0.0
        assert parts == pytest.approx(host, rel=1e-6), res["host.name"]
    xeon = next(r for r in _requests(run_root)
                if _attrs(r.resource_metrics[0].resource.attributes).get("host.name") == "xeon-0")
    names = {m.name for m in xeon.resource_metrics[0].scope_metrics[0].metrics}
    assert "joulie.sim.rapl.psys.energy" in names


def test_otlp_gpu_points_carry_identity_attributes(run_root: Path) -> None:
    h100 = next(r for r in _requests(run_root)
                if _attrs(r.resource_metrics[0].resource.attributes).get("host.name") == "h100-0")
    power = next(m for m in h100.resource_metrics[0].scope_metrics[0].metrics if m.name == "hw.power")
    a = _attrs(power.gauge.data_points[0].attributes)
    assert a == {"hw.id": "gpu0", "hw.type": "gpu", "gpu.index": "0", "pci.bus_id": "00000000:18:00.0",
                 "gpu.uuid": "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00", "hw.vendor": "nvidia",
                 "hw.model": "NVIDIA H100 80GB HBM3"}


def test_discover_output_file_is_written_atomically(cli: Callable[..., Any], run_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "joulectl.prom"
    out.write_text("old\n")
    r = cli("--root", run_root / "xeon-0", "discover", "-o", "prometheus", "--output-file", out)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    direct = cli("--root", run_root / "xeon-0", "discover", "-o", "prometheus")
    assert out.read_text() == direct.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joulectl.prom"]


def test_a_failed_output_file_write_keeps_the_old_file(cli: Callable[..., Any], run_root: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "joulectl.prom"
    out.write_text("old\n")

    def no_rename(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    r = cli("--root", run_root / "xeon-0", "discover", "-o", "prometheus", "--output-file", out)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"joulectl: error: {out}: --output-file: cannot be written (No space left on device)"
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joulectl.prom"]


@pytest.mark.parametrize(("kind", "message"), [
    ("fifo", "is not a regular file"),
    ("dir", "is not a regular file"),
    ("nodir", "its directory does not exist"),
])
def test_output_file_refusals(cli: Callable[..., Any], run_root: Path, tmp_path: Path, kind: str,
                              message: str) -> None:
    target = tmp_path / "out.prom"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dir":
        target.mkdir()
    else:
        target = tmp_path / "missing" / "out.prom"
    r = cli("--root", run_root / "xeon-0", "discover", "-o", "prometheus", "--output-file", target)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"joulectl: error: {target}: --output-file: {message}"


def test_output_file_and_watch_are_exclusive(cli: Callable[..., Any], run_root: Path, tmp_path: Path) -> None:
    r = cli("--root", run_root / "xeon-0", "discover", "--watch", "1", "--output-file", tmp_path / "x")
    assert r.exit_code == 2
    assert "--watch: --watch redraws a terminal and cannot be combined with --output-file" in r.stderr


def test_otlp_json_is_what_json_dumps_writes(run_root: Path) -> None:
    for line in (run_root / "telemetry" / "otlp.jsonl").read_text().splitlines():
        assert json.dumps(json.loads(line), separators=(",", ":")) == line
