"""A ClusterSpec and the NodeList `simulate render-nodes` exports from it plan alike (one code path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: exposures}
spec:
  facility: {ambientC: 20, coolingZones: [{name: cold, offsetC: 0}]}
  pools:
  - {name: whole, profile: nvidia-h100-sxm-8gpu, count: 1, coolingZone: cold}
  - {name: migs, profile: nvidia-h100-sxm-8gpu, count: 1, overrides: {gpus: {exposure: mig-single}}}
  - {name: migm, profile: nvidia-h100-sxm-8gpu, count: 1, overrides: {gpus: {exposure: mig-mixed}}}
  - {name: tsr, profile: nvidia-l40s-4gpu, count: 1, overrides: {gpus: {exposure: timeslice-rename}}}
  - {name: tsn, profile: nvidia-l40s-4gpu, count: 1, overrides: {gpus: {exposure: timeslice-norename}}}
  - {name: dra, profile: nvidia-h100-sxm-8gpu, count: 1, overrides: {gpus: {exposure: dra}}}
  - {name: i915, profile: intel-flex-170-4gpu, count: 1}
  - {name: xe, profile: intel-flex-170-4gpu, count: 1, overrides: {gpus: {intel: {driver: xe}}}}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 2}
  - {name: vm, profile: vm-no-powercap, count: 1}
"""
#: physical GPUs per node, and power domains (four MI250X packages hold eight GCDs)
GPUS = {"whole-0": (8, 8), "migs-0": (8, 8), "migm-0": (8, 8), "tsr-0": (4, 4), "tsn-0": (4, 4), "dra-0": (8, 8),
        "i915-0": (4, 4), "xe-0": (4, 4), "mi300x-0": (8, 8), "mi250x-0": (8, 4), "w7900-0": (1, 1)}


def _plan(cli: Callable[..., Any], *args: Any) -> dict[str, dict[str, Any]]:
    r = cli("plan", *args, "-o", "json")
    assert r.exit_code == 0, r.stderr
    return {t["spec"]["nodeName"]: t for t in json.loads(r.stdout)["items"]}


def _gpus(twin: dict[str, Any]) -> tuple[int, int]:
    ann = twin["metadata"]["annotations"]
    if "joulectl.io/gpu-count" not in ann:
        return (0, 0)
    return int(ann["joulectl.io/gpu-count"].split()[0]), int(ann["joulectl.io/gpu-power-domains"])


@pytest.fixture
def spec_and_export(cli: Callable[..., Any], tmp_path: Path) -> tuple[Path, Path]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    r = cli("simulate", "render-nodes", spec)
    assert r.exit_code == 0, r.stderr
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(r.stdout)
    return spec, nodes


def test_export_plans_to_the_same_counts_as_the_spec(
    cli: Callable[..., Any], spec_and_export: tuple[Path, Path], nodetwin_schema: dict[str, Any]
) -> None:
    spec, nodes = spec_and_export
    from_spec = _plan(cli, spec, "--gpu-governor", "eco=efficient")
    from_nodes = _plan(cli, "--nodes", nodes, "--gpu-governor", "eco=efficient")
    assert sorted(from_spec) == sorted(from_nodes)
    for name, twin in from_spec.items():
        other = from_nodes[name]
        assert _gpus(twin) == _gpus(other) == GPUS.get(name, (0, 0)), name
        assert twin["spec"]["profile"] == other["spec"]["profile"], name
        assert twin["spec"]["cpu"] == other["spec"]["cpu"], name
        assert twin["metadata"]["annotations"]["joulectl.io/family"] == other["metadata"]["annotations"][
            "joulectl.io/family"], name
        pm, opm = twin["status"]["powerMeasurement"], other["status"]["powerMeasurement"]
        assert pm["cpuTdpW"] == opm["cpuTdpW"], name
        if name != "w7900-0":
            assert pm["gpuTdpW"] == opm["gpuTdpW"], name
    # the spec path knows the NodeHardware: the W7900's cap pinned at 241 W, not the catalog's 295 W
    assert from_spec["w7900-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 241
    assert from_nodes["w7900-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 295
    assert from_spec["mi250x-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 4 * 560
    validator = jsonschema.Draft4Validator(nodetwin_schema)
    for twin in [*from_spec.values(), *from_nodes.values()]:
        assert not list(validator.iter_errors(twin))


def test_export_without_joulie_count_labels_uses_the_seed_precedence(
    cli: Callable[..., Any], spec_and_export: tuple[Path, Path], tmp_path: Path
) -> None:
    _, nodes = spec_and_export
    doc = yaml.safe_load(nodes.read_text())
    for node in doc["items"]:
        node["metadata"]["labels"].pop("joulie.io/hw.gpu-count", None)
    stripped = tmp_path / "stripped.yaml"
    stripped.write_text(yaml.safe_dump(doc))
    twins = _plan(cli, "--nodes", stripped)
    counts = {n: t["metadata"]["annotations"].get("joulectl.io/gpu-count") for n, t in twins.items()}
    assert counts == {
        "whole-0": "8 (nvidia.com/gpu.count)",
        "migs-0": "8 (nvidia.com/gpu.count: 56 MIG devices 1g.10gb, 7 per GPU)",  # 7 MIG devices per H100
        "migm-0": "8 (nvidia.com/gpu.count)",
        "tsr-0": "4 (nvidia.com/gpu.count)",
        "tsn-0": "4 (nvidia.com/gpu.count)",
        "dra-0": "8 (nvidia.com/gpu.count)",
        "i915-0": "4 (gpu.intel.com/device.count)",
        "xe-0": "4 (gpu.intel.com/device.count)",
        "mi300x-0": "8 (resources)",
        "mi250x-0": "8 (resources)",
        "w7900-0": "1 (resources)",
        "cpu-0": None,
        "cpu-1": None,
        "vm-0": None,
    }


def test_example_cluster(cli: Callable[..., Any], nodetwin_schema: dict[str, Any]) -> None:
    r = cli("plan", ROOT / "examples" / "cluster.yaml", "-o", "yaml")
    assert r.exit_code == 0, r.stderr
    twins = list(yaml.safe_load_all(r.stdout))
    names = {t["spec"]["nodeName"] for t in twins}
    assert "reserved-0" not in names and len(names) == 16
    validator = jsonschema.Draft4Validator(nodetwin_schema)
    for t in twins:
        assert not list(validator.iter_errors(t))
    families = {t["metadata"]["annotations"]["joulectl.io/family"] for t in twins}
    perf = {t["metadata"]["annotations"]["joulectl.io/family"] for t in twins if t["spec"]["profile"] == "performance"}
    assert perf == families  # every family keeps a performance node
    table = cli("plan", ROOT / "examples" / "cluster.yaml")
    assert "reserved-0  reserved (joulie.io/reserved=true)" in table.stdout


def test_bad_spec_is_exit_2(cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("intel-xeon-2s-rapl", "no-such-profile"))
    r = cli("plan", spec)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"joulectl: error: {spec}: ") and "no-such-profile" in r.stderr
    missing = cli("plan", tmp_path / "missing.yaml")
    assert missing.exit_code == 2 and str(tmp_path / "missing.yaml") in missing.stderr


def test_ambient_from_the_spec_facility(cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: zones}
spec:
  facility: {ambientC: 20, coolingZones: [{name: cold, offsetC: 0}, {name: hot, offsetC: 25}]}
  pools:
  - {name: cold, profile: intel-xeon-2s-rapl, count: 1, coolingZone: cold}
  - {name: hot, profile: intel-xeon-2s-rapl, count: 1, coolingZone: hot}
""")
    prom = tmp_path / "metrics.prom"
    prom.write_text('joulie_sim_node_power_watts{node="cold-0"} 270\njoulie_sim_node_power_watts{node="hot-0"} 270\n')
    twins = _plan(cli, spec, "--telemetry", prom)
    # 270 W of a 540 W TDP: 50 at 20 °C, doubled (capped at 100) at 45 °C
    assert twins["cold-0"]["status"]["predictedCoolingStressScore"] == 50
    assert twins["hot-0"]["status"]["predictedCoolingStressScore"] == 100


def test_telemetry_of_a_simulator_run(cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: run}
spec:
  defaults: {baseLoad: {cpuUtil: 0.8, gpuUtil: 0.9}}
  pools:
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
""")
    root = tmp_path / "sim"
    r = cli("simulate", "run", spec, "--root", root, "--ticks", "5", "--fast")
    assert r.exit_code == 0, r.stderr
    prom_text = (root / "metrics.prom").read_text()
    key = 'joulie_sim_node_power_watts{node="h100-0"}'
    gauge = next(line for line in prom_text.splitlines() if line.startswith(key))
    prom = _plan(cli, spec, "--telemetry", root / "metrics.prom")
    pm = prom["h100-0"]["status"]["powerMeasurement"]
    assert (pm["source"], pm["measuredNodePowerW"]) == ("prometheus", pytest.approx(float(gauge.split()[-1])))
    otlp = _plan(cli, spec, "--telemetry", root / "telemetry" / "otlp.jsonl")
    pm = otlp["h100-0"]["status"]["powerMeasurement"]
    # one export per node: the eight GPU gauges plus the CPU packages' energy averaged over the run
    assert pm["source"] == "prometheus" and 0.8 * pm["gpuTdpW"] < pm["measuredNodePowerW"] < pm["nodeTdpW"]
    # a virtual machine exports nothing a real collector could measure
    assert otlp["vm-0"]["status"]["powerMeasurement"]["source"] == "prometheus-no-data"


@pytest.mark.slow
def test_nodelist_with_discovered_hardware_plans_like_the_spec(cli: Callable[..., Any], tmp_path: Path) -> None:
    """render the spec's nodes, run the real `discover -o yaml` on each tree, and plan the exported
    NodeList with those NodeHardware files: the same twins as planning the spec."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: discovered}
spec:
  pools:
  - {name: whole, profile: nvidia-h100-sxm-8gpu, count: 2}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: xe, profile: intel-flex-170-4gpu, count: 1, overrides: {gpus: {intel: {driver: xe}}}}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 2}
""")
    root = tmp_path / "sim"
    assert cli("simulate", "render", spec, "--root", root).exit_code == 0
    exported = cli("simulate", "render-nodes", spec)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(exported.stdout)
    hardware: list[Any] = []
    for node in ("whole-0", "whole-1", "mi250x-0", "w7900-0", "xe-0", "cpu-0", "cpu-1"):
        r = cli("--root", root / node, "discover", "-o", "yaml")
        assert r.exit_code == 0, r.stderr
        path = tmp_path / f"{node}.nhw.yaml"
        path.write_text(r.stdout)
        hardware += ["--hardware", path]
    flags = ("--absolute-caps", "--gpu-governor", "eco=efficient", "--performance-fraction", "0")
    from_spec = _plan(cli, spec, *flags)
    from_nodes = _plan(cli, "--nodes", nodes, *hardware, *flags)
    assert sorted(from_spec) == sorted(from_nodes)
    for name, twin in from_spec.items():
        assert twin["spec"] == from_nodes[name]["spec"], name
        assert twin["status"]["powerMeasurement"] == from_nodes[name]["status"]["powerMeasurement"], name
        assert twin["metadata"]["annotations"] == from_nodes[name]["metadata"]["annotations"], name
    # what the discovered hardware decides: the MI250X's four power domains, the W7900's pinned 241 W,
    # the H100's governor presets
    assert from_nodes["mi250x-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 4 * 560
    assert from_nodes["w7900-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 241
    assert from_nodes["whole-1"]["spec"]["gpu"]["governor"] == "efficient"


def test_a_pools_nodes_are_its_first_renamed_with_their_own_ids(tmp_path: Path) -> None:
    """The pool template holds (its check on the second node passes), so a 100,000-node ClusterSpec
    computes each pool's facts once; every node still has the Node a full build gives it."""
    from joulectl.planning.inputs import _PoolTemplate
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.k8s import node_hardware, node_object

    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: t}\nspec:\n"
                    "  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 3}\n")
    nodes = load_spec(str(spec), profiles_dir=None).nodes
    template = _PoolTemplate(nodes[0], node_object, node_hardware)
    built = [template.build(n, node_object, node_hardware) for n in nodes]
    assert template.ok
    assert [b[0] for b in built] == [node_object(n) for n in nodes]
    assert [b[1] for b in built] == [node_hardware(n) for n in nodes]
    ids = {b[0]["status"]["nodeInfo"]["systemUUID"] for b in built}
    assert len(ids) == 3


def test_a_renamed_node_shares_what_its_name_is_not_on_and_leaves_the_first_as_built(tmp_path: Path) -> None:
    """Only the dicts on the name's paths (and the nodeInfo ids') are copied: the rest is the first
    node's own objects (so the planner's facts are computed once per pool), and building the others
    never changes the first node."""
    import copy

    from joulectl.planning.inputs import _PoolTemplate
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.k8s import node_hardware, node_object

    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: t}\nspec:\n"
                    "  pools:\n  - {name: mi, profile: amd-instinct-mi300x-8gpu, count: 4}\n")
    nodes = load_spec(str(spec), profiles_dir=None).nodes
    template = _PoolTemplate(nodes[0], node_object, node_hardware)
    first = template.build(nodes[0], node_object, node_hardware)
    before = copy.deepcopy(first)
    node, hw = template.build(nodes[3], node_object, node_hardware)
    template.build(nodes[2], node_object, node_hardware)
    assert first == before and template.ok
    assert node["metadata"]["name"] == node["metadata"]["labels"]["kubernetes.io/hostname"] == "mi-3"
    assert hw["metadata"]["name"] == hw["spec"]["nodeName"] == hw["status"]["host"]["hostname"] == "mi-3"
    assert node["status"]["nodeInfo"]["machineID"] == "b3c93bad9d8c5270b5f16185ca9bf237"
    assert node["status"]["capacity"] is first[0]["status"]["capacity"]
    assert node["metadata"]["annotations"] is first[0]["metadata"]["annotations"]
    assert hw["status"]["cpu"] is first[1]["status"]["cpu"] and hw["status"]["gpu"] is first[1]["status"]["gpu"]


def test_a_spec_cluster_without_node_ids_differs_only_there_and_plans_the_same(tmp_path: Path) -> None:
    """``node_ids=False`` (what ``plan`` asks for) leaves bootID, machineID and systemUUID out of
    each Node's nodeInfo and nothing else: the plan is the same."""
    from datetime import datetime, timezone

    from joulectl.planning import PlanOptions, load_cluster, plan

    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: t}\nspec:\n"
                    "  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 3}\n"
                    "  - {name: cpu, profile: intel-xeon-2s-rapl, count: 2}\n")
    full = load_cluster(spec=str(spec))
    lean = load_cluster(spec=str(spec), node_ids=False)
    assert lean.hardware == full.hardware
    ids = ("bootID", "machineID", "systemUUID")
    for a, b in zip(full.nodes, lean.nodes, strict=True):
        info = a["status"]["nodeInfo"]
        assert len({info[k] for k in ids}) == 3
        assert b["status"]["nodeInfo"] == {k: v for k, v in info.items() if k not in ids}
        assert {**b, "status": {**b["status"], "nodeInfo": info}} == a
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    assert plan(lean, PlanOptions(), now=now).twins == plan(full, PlanOptions(), now=now).twins


def _export_node(name: Any, cpu: Any = "8", **extra: Any) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name}, "status": {"capacity": {"cpu": cpu}}, **extra}


@pytest.mark.parametrize(("items", "field", "message"), [
    # every item is checked a mapping before any is read, as before the export's fast path
    ([_export_node("a"), _export_node("a"), "x"], "document 1.items[2]", "not a Kubernetes object"),
    ([_export_node("a"), _export_node("a")], "document 1.items[1].metadata.name", "node 'a' is listed twice"),
    ([_export_node("a"), _export_node(" ")], "document 1.items[1].metadata.name", "missing or empty"),
    ([_export_node("a"), _export_node(7)], "document 1.items[1].metadata.name", "missing or empty"),
    ([_export_node("a"), {"kind": "Service", "metadata": {"name": "s"}}], "document 1.items[1].kind",
     "kind 'Service' is not a Node, NodeList or NodeHardware"),
    ([_export_node("a"), _export_node("b", "2e6")], "document 1.items[1].status.capacity.cpu",
     "'2e6' is not a CPU count (more than 1,000,000 CPUs)"),
    ([_export_node("a"), _export_node("b", 2000000)], "document 1.items[1].status.capacity.cpu",
     "2000000 is not a CPU count (more than 1,000,000 CPUs)"),
])
def test_an_exports_bad_item_is_named_by_its_place(items: list[Any], field: str, message: str) -> None:
    from joulectl.errors import InputError
    from joulectl.planning.inputs import read_nodes

    with pytest.raises(InputError) as err:
        read_nodes([{"apiVersion": "v1", "kind": "List", "items": items}], "n.json")
    assert (err.value.field, str(err.value)) == (field, f"n.json: {field}: {message}")


def test_an_export_reads_nodes_of_every_shape_it_allows() -> None:
    """Plain Nodes, a Node whose kind the NodeList gives, odd but valid ones (no status, an
    unparsable CPU count, a capacity that is not a mapping) and a NodeHardware in one list."""
    from joulectl.planning.inputs import read_nodes

    hw = {"kind": "NodeHardware", "metadata": {"name": "hw-a"}, "spec": {"nodeName": "a"}}
    items = [_export_node("a"), {"metadata": {"name": "b"}}, _export_node("c", "lots"),
             {"kind": "Node", "metadata": {"name": "d"}, "status": {"capacity": "none"}}, hw]
    nodes, hardware = read_nodes([{"kind": "NodeList", "items": items}], "n.json")
    assert [n["metadata"]["name"] for n in nodes] == ["a", "b", "c", "d"]
    assert nodes[0] == items[0] and nodes[0] is not items[0]
    assert hardware == {"a": hw}
