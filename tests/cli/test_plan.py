"""`joulectl plan` through the real CLI: outputs, and every bad-input error (message, exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "crds" / "joulie.io_nodetwins.yaml"
EPYC = {"joulie.io/hw.cpu-model": "AMD EPYC 9654", "joulie.io/hw.cpu-sockets": "2"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def _node(name: str, labels: dict[str, str], resources: dict[str, str] | None = None) -> dict[str, Any]:
    res = {"cpu": "192", **(resources or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": res, "allocatable": res}}


def _nodelist(tmp_path: Path, nodes: list[dict[str, Any]], name: str = "nodes.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return p


@pytest.fixture
def nodes_file(tmp_path: Path) -> Path:
    nodes = [_node(f"h100-{i}", {**EPYC, **H100}, {"nvidia.com/gpu": "8"}) for i in range(2)]
    nodes += [_node(f"cpu-{i}", EPYC) for i in range(2)]
    nodes.append(_node("reserved-0", {**EPYC, "joulie.io/reserved": "true"}))
    return _nodelist(tmp_path, nodes)


def _validator() -> jsonschema.Draft4Validator:
    crd = yaml.safe_load(CRD.read_text())
    return jsonschema.Draft4Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_yaml_is_multi_document_nodetwins(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan", "--nodes", nodes_file, "-o", "yaml", "--absolute-caps", "--gpu-governor", "eco=efficient")
    assert r.exit_code == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["spec"]["nodeName"] for d in docs] == ["cpu-0", "cpu-1", "h100-0", "h100-1"]
    validator = _validator()
    for d in docs:
        assert not list(validator.iter_errors(d))
    eco_gpu = next(d for d in docs if d["spec"]["nodeName"] == "h100-1")
    assert eco_gpu["spec"]["gpu"] == {
        "powerCap": {"scope": "perGpu", "capPctOfMax": 60, "capWattsPerGpu": 420}, "governor": "efficient"}
    assert r.stderr == ""


def test_json_is_a_list(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan", "--nodes", nodes_file, "-o", "json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["apiVersion"], data["kind"]) == ("v1", "List")
    assert {i["kind"] for i in data["items"]} == {"NodeTwin"} and len(data["items"]) == 4


def test_table_with_fleet_summary(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan", "--nodes", nodes_file)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["NODE", "PROFILE", "CLASS", "GPUS"]
    row = next(line.split() for line in lines if line.startswith("h100-1"))
    assert row[:5] == ["h100-1", "eco", "eco", "8", "60%"]
    assert any(line.split()[:2] == ["reserved-0", "reserved"] for line in lines)
    assert "policy static: 2 of 4 planned nodes at performance (sized 2, 2 hardware families), 0 draining;" in r.stdout
    # all-performance: 2 x (720 W CPU + 8 x 700 W GPU) + 2 x 720 W = 14080 W; eco saves 8 x 280 W on h100-1 and
    # 0.4 x 720 W on cpu-1 = 2528 W, 17.95 %
    assert "saving 2528 W (18.0%) against all-performance 14080 W" in r.stdout


def test_queue_aware_with_pods_and_draining(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    pods = [{"kind": "Pod", "metadata": {"name": f"p{i}", "annotations": {"joulie.io/workload-class": "performance"}},
             "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}} for i in range(25)]
    pods.append({"kind": "Pod", "metadata": {"name": "run", "annotations": {"joulie.io/workload-class": "performance"}},
                 "spec": {"nodeName": "cpu-1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    pod_file = tmp_path / "pods.yaml"
    pod_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": pods}))
    r = cli("plan", "--nodes", nodes_file, "--policy", "queue-aware", "--queue-base-fraction", "0",
            "--pods", pod_file, "-o", "json")
    assert r.exit_code == 0, r.stderr
    items = {i["spec"]["nodeName"]: i for i in json.loads(r.stdout)["items"]}
    # 26 performance pods / 10 per node -> 3 performance nodes of 4
    assert sorted(i["spec"]["profile"] for i in items.values()) == ["eco", "performance", "performance", "performance"]
    eco = next(i for i in items.values() if i["spec"]["profile"] == "eco")
    assert eco["spec"]["nodeName"] == "cpu-1" and eco["status"]["schedulableClass"] == "draining"


def test_telemetry_and_hardware_files(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    prom = tmp_path / "metrics.prom"
    prom.write_text('joulie_sim_node_power_watts{node="cpu-0"} 360\n')
    hw = tmp_path / "hw.yaml"
    hw.write_text(yaml.safe_dump({"apiVersion": "joulie.io/v1alpha1", "kind": "NodeHardware",
                                  "metadata": {"name": "cpu-0"}, "spec": {"nodeName": "cpu-0"},
                                  "status": {"cpu": {"sockets": 2, "totalCores": 192,
                                                     "capRange": {"minWattsPerSocket": 100,
                                                                  "maxWattsPerSocket": 400}}}}))
    r = cli("plan", "--nodes", nodes_file, "--telemetry", prom, "--hardware", hw, "-o", "json")
    assert r.exit_code == 0, r.stderr
    items = {i["spec"]["nodeName"]: i for i in json.loads(r.stdout)["items"]}
    pm = items["cpu-0"]["status"]["powerMeasurement"]
    assert (pm["source"], pm["measuredNodePowerW"], pm["cpuTdpW"]) == ("prometheus", 360, 800)
    assert items["cpu-1"]["status"]["powerMeasurement"]["source"] == "prometheus-no-data"


def test_model_caps_file(cli: Callable[..., Any], tmp_path: Path) -> None:
    nodes = _nodelist(tmp_path, [_node(f"g{i}", {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000"},
                                       {"nvidia.com/gpu": "2"}) for i in range(2)])
    caps = tmp_path / "caps.json"
    caps.write_text('{"NVIDIA-RTX-PRO-6000": {"minCapWatts": 200, "maxCapWatts": 350}}')
    r = cli("plan", "--nodes", nodes, "--absolute-caps", "--model-caps", caps, "-o", "json")
    assert r.exit_code == 0, r.stderr
    eco = [i for i in json.loads(r.stdout)["items"] if i["spec"]["profile"] == "eco"]
    assert eco[0]["spec"]["gpu"]["powerCap"]["capWattsPerGpu"] == 210
    assert eco[0]["metadata"]["annotations"]["joulectl.io/gpu-cap-source"] == "model-caps"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "rule-swap"], "--policy: unknown policy 'rule-swap' (expected static or queue-aware)"),
        (["--performance-fraction", "1.5"], "--performance-fraction: must be between 0 and 1, got 1.5"),
        (["--performance-fraction", "-0.1"], "--performance-fraction: must be between 0 and 1, got -0.1"),
        (["--queue-base-fraction", "2"], "--queue-base-fraction: must be between 0 and 1, got 2.0"),
        (["--gpu-eco-pct", "101"], "--gpu-eco-pct: must be between 0 and 100, got 101.0"),
        (["--cpu-eco-pct", "-5"], "--cpu-eco-pct: must be between 0 and 100, got -5.0"),
        (["--pods-per-performance-node", "0"], "--pods-per-performance-node: must be 1 or more, got 0"),
        (["--queue-min", "-1"], "--queue-min: must be 0 or more, got -1"),
        (["--gpu-governor", "eco"], "--gpu-governor: expected PROFILE=PRESET (like eco=efficient), got 'eco'"),
        (["--gpu-governor", "idle=low"], "--gpu-governor: unknown profile 'idle' (expected performance or eco)"),
        (["--gpu-governor", "eco=turbo"], "--gpu-governor: unknown GPU governor preset 'turbo'"),
        (["--selector", "=x"], "--selector: a requirement has no key in '=x'"),
    ],
)
def test_bad_flags(cli: Callable[..., Any], nodes_file: Path, args: list[str], message: str) -> None:
    r = cli("plan", "--nodes", nodes_file, *args)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0].startswith(f"joulectl: error: {message}")
    assert r.stdout == ""


def test_invalid_json_model_caps(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    caps = _write(tmp_path, "caps.json", '{"NVIDIA-L40S": {"maxCapWatts": 350,}}')
    r = cli("plan", "--nodes", nodes_file, "--model-caps", caps)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"joulectl: error: {caps}: invalid JSON: ")
    bad = _write(tmp_path, "caps2.json", '{"NVIDIA-L40S": {"minCapWatts": 400, "maxCapWatts": 350}}')
    r = cli("plan", "--nodes", nodes_file, "--model-caps", bad)
    assert r.exit_code == 2
    assert r.stderr == (f"joulectl: error: {bad}: NVIDIA-L40S: minCapWatts must be a number between 0 and "
                        "maxCapWatts, got 400\n")


def test_invalid_governor_model_presets(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    presets = _write(tmp_path, "presets.json", "[1, 2]")
    r = cli("plan", "--nodes", nodes_file, "--governor-model-presets", presets)
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {presets}: expected a JSON object, found list\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: List\nitems: []\n", "no nodes (expected a NodeList with items, or Node objects)"),
        ("apiVersion: v1\nkind: NodeList\n", "no nodes (expected a NodeList with items, or Node objects)"),
        ("", "no nodes (expected a NodeList with items, or Node objects)"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
         "document 1.kind: kind 'Pod' is not a Node, NodeList or NodeHardware"),
        ("kind: List\nitems:\n- kind: Service\n  metadata: {name: s}\n",
         "document 1.items[0].kind: kind 'Service' is not a Node, NodeList or NodeHardware"),
        ("kind: List\nitems:\n- kind: Node\n  metadata: {labels: {}}\n", "document 1.items[0].metadata.name: missing"),
        ("kind: List\nitems:\n- kind: Node\n  metadata: {name: a}\n- kind: Node\n  metadata: {name: a}\n",
         "document 1.items[1].metadata.name: node 'a' is listed twice"),
        ("- just\n- a list\n", "document 1 is not a Kubernetes object"),
        ("kind: List\nitems: {a: 1}\n", "document 1.items: items is not a list"),
        ("kind: [unclosed\n", "invalid YAML"),
    ],
)
def test_bad_node_lists(cli: Callable[..., Any], tmp_path: Path, text: str, message: str) -> None:
    p = _write(tmp_path, "nodes.yaml", text)
    r = cli("plan", "--nodes", p)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0].startswith(f"joulectl: error: {p}: {message}"), r.stderr


def test_bad_hardware_file(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan", "--nodes", nodes_file, "--hardware", nodes_file)
    assert r.exit_code == 2
    assert r.stderr == (f"joulectl: error: {nodes_file}: document 1.items[0].kind: kind 'Node' is not a "
                        "NodeHardware (give Nodes with --nodes)\n")


def test_bad_pods_file(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    p = _write(tmp_path, "pods.yaml", "kind: Service\nmetadata: {name: s}\n")
    r = cli("plan", "--nodes", nodes_file, "--pods", p)
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {p}: document 1: kind Service carries no pod spec\n")


def test_bad_telemetry_file(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    p = _write(tmp_path, "t.prom", "up 1\n")
    r = cli("plan", "--nodes", nodes_file, "--telemetry", p)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"joulectl: error: {p}: no node power found")


def test_missing_files(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    r = cli("plan", "--nodes", tmp_path / "nope.yaml")
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {tmp_path / 'nope.yaml'}: node list not found\n")
    r = cli("plan", "--nodes", nodes_file, "--model-caps", tmp_path / "caps.json")
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {tmp_path / 'caps.json'}: model caps file not found\n")


def test_input_is_required_and_exclusive(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: give a cluster spec or --nodes NODES.yaml\n")
    r = cli("plan", str(nodes_file), "--nodes", nodes_file)
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: give a cluster spec or --nodes, not both\n")


def test_bad_output_format(cli: Callable[..., Any], nodes_file: Path) -> None:
    r = cli("plan", "--nodes", nodes_file, "-o", "xml")
    assert (r.exit_code, r.stderr) == (
        2, "joulectl: error: -o: 'xml' is not one of table, wide, json, yaml, name, csv, jsonpath=..., "
           "custom-columns=...\n")


def test_nodes_from_stdin(cli: Callable[..., Any], nodes_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(nodes_file.read_bytes())))
    r = cli("plan", "--nodes", "-", "-o", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["items"]) == 4


def test_cap_applies_the_plan_json(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    """The DaemonSet example mounts `plan -o json`: cap --from-twin reads it and picks this node's item."""
    from joulectl.ops.cap import load_twins

    r = cli("plan", "--nodes", nodes_file, "-o", "json", "--absolute-caps", "--gpu-governor", "eco=efficient")
    twin_file = _write(tmp_path, "twin.yaml", r.stdout)
    intents = {t.node_name: t for t in load_twins(str(twin_file))}
    assert sorted(intents) == ["cpu-0", "cpu-1", "h100-0", "h100-1"]
    assert intents["h100-1"].governor == "efficient"


def test_daemonset_example_runs_cap_from_the_mounted_twin() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "k8s" / "joulectl-daemonset.yaml"
    docs = {d["kind"]: d for d in yaml.safe_load_all(path.read_text())}
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "joulectl cap --from-twin /etc/joulectl/twin.yaml --all" in container["args"][0]
    assert container["securityContext"]["privileged"] is True
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["twins"] == "/etc/joulectl" and mounts["sys"] == "/sys"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["sys"]["hostPath"]["path"] == "/sys"


def test_large_json_list_is_one_twin_per_line(tmp_path: Path) -> None:
    from joulectl.cli.plan import JSON_INDENT_MAX_ITEMS, json_list

    items = [{"kind": "NodeTwin", "metadata": {"name": f"n{i}"}} for i in range(JSON_INDENT_MAX_ITEMS + 1)]
    text = json_list(items)
    assert json.loads(text) == {"apiVersion": "v1", "kind": "List", "items": items}
    assert len(text.splitlines()) == len(items) + 6
    small = json_list(items[:2])
    assert json.loads(small)["items"] == items[:2] and '\n      "kind": "NodeTwin",' in small


def test_identical_nodes_share_no_objects_in_yaml(cli: Callable[..., Any], tmp_path: Path) -> None:
    nodes = _nodelist(tmp_path, [_node(f"h{i}", {**EPYC, **H100}, {"nvidia.com/gpu": "8"}) for i in range(4)])
    r = cli("plan", "--nodes", nodes, "-o", "yaml", "--absolute-caps", "--gpu-governor", "eco=efficient")
    assert r.exit_code == 0, r.stderr
    assert "&id" not in r.stdout and "*id" not in r.stdout  # PyYAML prints anchors for shared dicts
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["spec"]["profile"] for d in docs] == ["performance", "performance", "eco", "eco"]


def test_warnings_on_stderr(cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    prom = _write(tmp_path, "t.prom", 'joulie_sim_node_power_watts{node="elsewhere-1"} 10\n')
    hw = _write(tmp_path, "hw.yaml", "kind: NodeHardware\nmetadata: {name: ghost}\nspec: {nodeName: ghost}\n")
    r = cli("plan", "--nodes", nodes_file, "--policy", "queue-aware", "--telemetry", prom, "--hardware", hw,
            "-o", "json")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "joulectl: warning: queue-aware without pods (--pods): the demand is 0, so the base fraction sizes the plan",
        "joulectl: warning: NodeHardware for 1 node(s) not in the node list ignored: ghost",
        "joulectl: warning: the telemetry names none of the planned nodes (it names elsewhere-1)",
    ]
    assert len(json.loads(r.stdout)["items"]) == 4


def test_enforced_limit_below_the_requested_one_is_budgeted(cli: Callable[..., Any], nodes_file: Path,
                                                             tmp_path: Path) -> None:
    """A cloud H100 whose platform enforces 500 W of the 700 W requested: the budget uses 500 W."""
    hw = tmp_path / "hw.yaml"
    gpu = {"present": True, "vendor": "nvidia", "count": 8, "powerDomains": 8,
           "capRangePerGpu": {"minWatts": 200, "maxWatts": 700, "defaultWatts": 700},
           "currentCapWatts": 700, "enforcedCapWatts": 500, "controlAvailable": True}
    hw.write_text(yaml.safe_dump_all([
        {"apiVersion": "joulie.io/v1alpha1", "kind": "NodeHardware", "metadata": {"name": n},
         "spec": {"nodeName": n}, "status": {"gpu": gpu}} for n in ("h100-0", "h100-1")]))
    r = cli("plan", "--nodes", nodes_file, "--hardware", hw, "-o", "json")
    assert r.exit_code == 0, r.stderr
    items = {i["spec"]["nodeName"]: i for i in json.loads(r.stdout)["items"]}
    perf, eco = items["h100-0"]["status"], items["h100-1"]["status"]
    assert (perf["powerMeasurement"]["gpuTdpW"], perf["powerMeasurement"]["gpuCappedPowerW"]) == (5600, 4000)
    assert items["h100-0"]["metadata"]["annotations"]["joulectl.io/notes"] == (
        "GPUs budgeted at their enforced limit 500 W (requested limits above it)")
    # eco caps at 60 % of 700 W = 420 W, below the enforced limit: the cap decides
    assert eco["powerMeasurement"]["gpuCappedPowerW"] == 3360


def test_streamed_json_of_a_large_plan_is_the_twins_json() -> None:
    """Above JSON_INDENT_MAX_ITEMS the twins are written from one JSON text per kind of twin with the
    names put in: the text must be what json.dumps gives for every twin (telemetry, racks, draining
    nodes and node names that need escaping included)."""
    import io

    from joulectl.cli.plan import JSON_INDENT_MAX_ITEMS, json_list, write_json_list
    from joulectl.k8s import iter_pods
    from joulectl.planning import ClusterInput, PlanOptions, plan

    def node(i: int) -> dict[str, Any]:
        gpu = i % 3 == 0
        labels = {"joulie.io/rack": f"rack-{i % 7}", "joulie.io/cooling-zone": f"z{i % 2}",
                  "feature.node.kubernetes.io/cpu-model.name": "AMD EPYC 9654 96-Core Processor",
                  "feature.node.kubernetes.io/cpu-sockets": "2"}
        res = {"cpu": "384", "memory": "1Ti"}
        if gpu:
            labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
            res["nvidia.com/gpu"] = "8"
        name = f"node-{i:04d}" + ('"q' if i == 5 else "")
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"capacity": res, "allocatable": res}}

    nodes = [node(i) for i in range(JSON_INDENT_MAX_ITEMS + 500)]
    telemetry = {f"node-{i:04d}": 500.0 + i for i in range(0, 1500, 11)}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
        "joulie.io/workload-class": "performance"}}, "spec": {"nodeName": "node-0004", "containers": [{"name": "c"}]}}
    pods = list(iter_pods(pod))

    def cluster() -> ClusterInput:
        return ClusterInput(nodes=nodes, telemetry=telemetry, telemetry_given=True, pods=pods,
                            facility={"ambientC": 25.0, "coolingZones": [{"name": "z1", "offsetC": 5.0}]})

    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    streamed = io.StringIO()
    write_json_list(plan(cluster(), PlanOptions(performance_fraction=0.3), now=now), streamed)
    reference = plan(cluster(), PlanOptions(performance_fraction=0.3), now=now)
    assert any(t["status"]["schedulableClass"] == "draining" for t in reference.twins)
    assert streamed.getvalue() == json_list(reference.twins)
    assert len(json.loads(streamed.getvalue())["items"]) == 1500


def test_the_cyclic_collector_is_back_after_a_plan_and_after_a_refused_one(
        cli: Callable[..., Any], nodes_file: Path, tmp_path: Path) -> None:
    """The command pauses the collector while it plans (benchmarks/bench_plan.py: a 100,000-node
    plan rescanned its input once more at the end); an in-process caller gets it back either way."""
    import gc

    assert gc.isenabled()
    assert cli("plan", "--nodes", str(nodes_file), "-o", "json").exit_code == 0
    assert gc.isenabled()
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: p}\n")
    res = cli("plan", "--nodes", str(bad))
    assert res.exit_code == 2
    assert "bad.yaml: document 1.kind: kind 'Pod' is not a Node, NodeList or NodeHardware" in res.stderr
    assert gc.isenabled()


def test_streamed_json_puts_each_racks_psu_score_in_its_kinds_text() -> None:
    """Twins differing only by rack share one text with the PSU score put in: 1,200 nodes over 400
    racks of different budgets (five scores; some nodes without a rack, some racks spelled as numbers) give the
    twins json.dumps gives."""
    import io

    from joulectl.cli.plan import json_list, write_json_list
    from joulectl.planning import ClusterInput, PlanOptions, plan

    def node(i: int) -> dict[str, Any]:
        labels: dict[str, Any] = {"feature.node.kubernetes.io/cpu-model.name": "AMD EPYC 9654 96-Core Processor"}
        if i % 9:
            labels["joulie.io/rack"] = i % 400 if i % 5 == 0 else f"r{i % 400}"
        res = {"cpu": str(64 * (1 + i % 3)), "memory": "1Ti"}
        return {"kind": "Node", "metadata": {"name": f"n{i}", "labels": labels},
                "status": {"capacity": res, "allocatable": res}}

    nodes = [node(i) for i in range(1200)]
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    streamed = io.StringIO()
    write_json_list(plan(ClusterInput(nodes=nodes), PlanOptions(), now=now), streamed)
    reference = plan(ClusterInput(nodes=nodes), PlanOptions(), now=now).twins
    assert len({t["status"]["predictedPsuStressScore"] for t in reference}) >= 4
    assert streamed.getvalue() == json_list(reference)
