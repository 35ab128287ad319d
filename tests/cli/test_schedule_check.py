"""`joulectl schedule-check`: verdicts, best node, output formats, exit 6, and every bad-input error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulectl.k8s import HamiGpu, format_hami_register

NOW = "2026-03-13T12:01:00Z"
FRESH = "2026-03-13T12:00:00Z"


def _cards(model: str, prefix: str, n: int = 8) -> str:
    return format_hami_register(
        [HamiGpu(f"GPU-{prefix}{i}", 10, 81920, 100, f"NVIDIA-NVIDIA {model}", 0, True) for i in range(n)])


def _node(name: str, profile: str, register: str | None, alloc: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"joulie.io/power-profile": profile}}
    if register:
        meta["annotations"] = {"hami.io/node-nvidia-register": register}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", **alloc}}}


def _twin(node: str, cls: str, headroom: float, cooling: float, updated: str = FRESH,
          **pm: float) -> dict[str, Any]:
    status: dict[str, Any] = {"schedulableClass": cls, "predictedPowerHeadroomScore": headroom,
                              "predictedCoolingStressScore": cooling, "lastUpdated": updated}
    if pm:
        status["powerMeasurement"] = pm
    return {"apiVersion": "joulie.io/v1alpha1", "kind": "NodeTwin", "metadata": {"name": node},
            "spec": {"nodeName": node, "profile": "eco" if cls in ("eco", "draining") else "performance"},
            "status": status}


NODES = [
    _node("a100-0", "performance", _cards("A100-SXM4-80GB", "a"), {"nvidia.com/gpu": "8"}),
    _node("h100-0", "performance", _cards("H100 80GB HBM3", "h"), {"nvidia.com/gpu": "8"}),
    _node("h100-1", "eco", _cards("H100 80GB HBM3", "k"), {"nvidia.com/gpu": "8"}),
    _node("mig-0", "eco", _cards("A100-SXM4-40GB", "m", 2), {"nvidia.com/mig-1g.5gb": "14"}),
    _node("cpu-0", "eco", None, {}),
]
TWINS = [
    _twin("a100-0", "performance", 90, 10),
    _twin("h100-0", "performance", 100, 0),  # 85
    _twin("h100-1", "eco", 50, 20),
    _twin("mig-0", "draining", 40, 20),
    _twin("cpu-0", "eco", 100, 0),
]


def _pod(name: str, limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


PERF = {"joulie.io/workload-class": "performance"}


@pytest.fixture
def files(tmp_path: Path) -> Callable[..., list[str]]:
    def write(pods: list[Any] | str, nodes: list[Any] | None = None, twins: list[Any] | None = None) -> list[str]:
        p = tmp_path / "pods.yaml"
        p.write_text(pods if isinstance(pods, str) else yaml.safe_dump_all(pods))
        n = tmp_path / "nodes.yaml"
        node_list = NODES if nodes is None else nodes
        n.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "NodeList", "items": node_list}))
        t = tmp_path / "twins.yaml"
        t.write_text(yaml.safe_dump_all(TWINS if twins is None else twins))
        return [str(p), "--nodes", str(n), "--twins", str(t), "--now", NOW]

    return write


def _doc(cli: Callable[..., Any], args: list[str], fmt: str = "json") -> tuple[int, dict[str, Any]]:
    r = cli("schedule-check", *args, "-o", fmt)
    return r.exit_code, (json.loads(r.stdout) if fmt == "json" else yaml.safe_load(r.stdout))


def _by_node(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in pod["nodes"]}


def test_performance_pod_with_gpu_type(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    code, doc = _doc(cli, files([_pod("train", {"nvidia.com/gpu": 8}, {**PERF, "nvidia.com/use-gputype": "H100"})]))
    assert code == 0
    assert (doc["apiVersion"], doc["kind"]) == ("joulectl.io/v1alpha1", "ScheduleCheck")
    (pod,) = doc["pods"]
    assert (pod["name"], pod["namespace"], pod["class"], pod["gpuRequest"]) == (
        "train", "ml", "performance", {"nvidia.com/gpu": 8})
    assert pod["feasible"] is True and pod["bestNode"] == "h100-0"
    nodes = _by_node(pod)
    # HAMi places the 8 vGPUs on the 8 free cards, walking them from the last (spread, equal scores)
    assert nodes["h100-0"] == {"node": "h100-0", "fits": True, "reason": "headroom 100.0, cooling 0.0", "score": 85,
                               "devices": [[f"GPU-h{i}" for i in range(7, -1, -1)]]}
    assert nodes["a100-0"]["reason"] == (
        "HAMi: no card of type H100 (the node's cards: NVIDIA-NVIDIA A100-SXM4-80GB)")
    assert nodes["h100-1"]["reason"] == "performance pod rejected from eco node (NodeTwin class eco)"
    assert nodes["mig-0"]["fits"] is False and "draining node" in nodes["mig-0"]["reason"]
    assert nodes["cpu-0"]["score"] is None


def test_standard_pod_prefers_eco_and_uuid_pinning(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    pods = [_pod("infer", {"nvidia.com/gpu": 1}), _pod("pinned", {"nvidia.com/gpu": 1},
                                                       {"nvidia.com/use-gpuuuid": "GPU-a3"})]
    code, doc = _doc(cli, files(pods))
    assert code == 0
    infer, pinned = doc["pods"]
    # perfPressure = mean(100-90, 100-100) = 5: a100-0 = 63+13.5-1.5 = 75, h100-0 = 85-1.5 = 83, h100-1 = 35+12+10 = 57
    assert {n["node"]: n["score"] for n in infer["nodes"] if n["fits"]} == {"a100-0": 75, "h100-0": 83, "h100-1": 57}
    assert infer["bestNode"] == "h100-0"
    assert pinned["bestNode"] == "a100-0"
    assert _by_node(pinned)["h100-0"]["reason"] == "HAMi: no card allowed by use-gpuuuid GPU-a3"
    assert _by_node(pinned)["a100-0"]["devices"] == [["GPU-a3"]]


def test_mig_pod_and_no_gpu_pod(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    code, doc = _doc(cli, files([_pod("slice", {"nvidia.com/mig-1g.5gb": 2}), _pod("web", {"cpu": "2"})]))
    assert code == 0
    mig, web = doc["pods"]
    assert [n["node"] for n in mig["nodes"] if n["fits"]] == ["mig-0"]
    assert mig["gpuRequest"] == {"nvidia.com/mig-1g.5gb": 2}
    assert _by_node(mig)["a100-0"]["reason"] == (
        "needs 2 nvidia.com/mig-1g.5gb, node offers none (it has nvidia.com/gpu: 8)")
    assert all(n["fits"] for n in web["nodes"])  # a pod with no GPU fits GPU nodes too
    assert web["gpuRequest"] == {}


def test_deployment_template_and_class_note(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "web"},
           "spec": {"replicas": 3, "template": {
               "metadata": {"annotations": {"joulie.io/workload-class": "eco"}},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"}}
    r = cli("schedule-check", *files([dep, svc]), "-o", "yaml")
    assert r.exit_code == 0
    (pod,) = yaml.safe_load(r.stdout)["pods"]
    assert (pod["kind"], pod["name"], pod["namespace"], pod["replicas"], pod["class"]) == (
        "Deployment", "api", "web", 3, "standard")
    assert pod["notes"] == ["joulie.io/workload-class='eco' is not performance or standard: treated as standard"]
    assert "document 2: Service api carries no pod; skipped" in r.stderr
    assert "treated as standard" in r.stderr


def test_stale_twin_and_trend(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    nodes = [_node("n-up", "performance", None, {}), _node("n-down", "performance", None, {}),
             _node("n-old", "performance", None, {}), _node("n-none", "performance", None, {})]
    twins = [_twin("n-up", "performance", 50, 0, powerTrendWPerMin=120),
             _twin("n-down", "performance", 50, 0, powerTrendWPerMin=-120),
             _twin("n-old", "performance", 100, 0, updated="2026-03-13T11:50:00Z")]
    code, doc = _doc(cli, files([_pod("p", {}, PERF)], nodes, twins))
    assert code == 0
    scores = {n["node"]: n["score"] for n in doc["pods"][0]["nodes"]}
    assert scores == {"n-down": 70, "n-up": 30, "n-old": 50, "n-none": 50}
    assert doc["pods"][0]["bestNode"] == "n-down"
    assert "no NodeTwin" in _by_node(doc["pods"][0])["n-none"]["reason"]
    assert "stale" in _by_node(doc["pods"][0])["n-old"]["reason"]


def test_ties_go_to_the_first_name(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    nodes = [_node("b", "performance", None, {}), _node("a", "performance", None, {})]
    code, doc = _doc(cli, files([_pod("p", {})], nodes, []))
    assert code == 0 and doc["pods"][0]["bestNode"] == "a"


def test_pod_that_fits_nowhere_exits_6(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    args = files([_pod("ok", {}), _pod("big", {"amd.com/gpu": 1}, PERF)])
    r = cli("schedule-check", *args)
    assert r.exit_code == 6
    assert "Pod ml/big (performance, 1 amd.com/gpu): FITS NO NODE" in r.stdout
    assert "Pod ml/ok (standard, no GPU): fits, best node cpu-0" in r.stdout
    assert "needs 1 amd.com/gpu, node offers none (it has nvidia.com/gpu: 8)" in r.stdout
    assert r.stderr.strip().splitlines()[0] == "joulectl: error: 1 of 2 pods fit no node: ml/big"
    code, doc = _doc(cli, args)
    assert code == 6 and doc["summary"] == {"pods": 2, "feasible": 1, "unschedulable": 1}
    assert doc["pods"][1]["bestNode"] is None and doc["pods"][1]["feasible"] is False


def test_hardware_adds_marginal_power(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path) -> None:
    nodes = [_node("h", "performance", None, {"nvidia.com/gpu": "8"})]
    twins = [_twin("h", "performance", 0, 20, measuredNodePowerW=300, nodeCappedPowerW=1000)]
    args = files([_pod("p", {"cpu": "1"}, PERF)], nodes, twins)  # performance: no pressure term
    assert _doc(cli, args)[1]["pods"][0]["nodes"][0]["score"] == 61
    hw = tmp_path / "hw.yaml"
    hw.write_text(yaml.safe_dump({"apiVersion": "joulie.io/v1alpha1", "kind": "NodeHardware",
                                  "metadata": {"name": "h"}, "spec": {"nodeName": "h"},
                                  "status": {"cpu": {"totalCores": 100}}}))
    code, doc = _doc(cli, [*args, "--hardware", str(hw)])
    # marginal = max(150, 350) * 0.7 * 1/100 = 2.45 W: headroom (1000-302.45)/10 = 69.755 -> 48.8 + 12 = 60
    assert code == 0 and doc["pods"][0]["nodes"][0]["score"] == 60


def _err(cli: Callable[..., Any], *args: str) -> tuple[int, str]:
    r = cli("schedule-check", *args)
    return r.exit_code, r.stderr.strip()


def test_bad_input_not_yaml(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path) -> None:
    args = files("kind: Pod\n  metadata: [\n")
    code, err = _err(cli, *args)
    assert code == 2 and err.startswith(f"joulectl: error: {tmp_path / 'pods.yaml'}: invalid YAML: line ")


def test_bad_input_not_kubernetes(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path) -> None:
    code, err = _err(cli, *files("- just\n- a list\n"))
    assert (code, err) == (2, f"joulectl: error: {tmp_path / 'pods.yaml'}: document: "
                              "not a Kubernetes object (no apiVersion and kind)")
    code, err = _err(cli, *files([_pod("p", {}), {"name": "x"}]))
    assert (code, err) == (2, f"joulectl: error: {tmp_path / 'pods.yaml'}: document 2: "
                              "not a Kubernetes object (no apiVersion and kind)")


def test_bad_input_no_pods(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path) -> None:
    code, err = _err(cli, *files([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]))
    assert code == 2
    assert err.splitlines()[-1] == (
        f"joulectl: error: {tmp_path / 'pods.yaml'}: no Pod or pod template (Deployment, ReplicaSet, StatefulSet, "
        "DaemonSet, Job, CronJob) found")
    code, err = _err(cli, *files(""))
    assert code == 2 and "no Pod or pod template" in err


@pytest.mark.parametrize(
    ("qty", "problem"),
    [(-1, "a request cannot be negative, got -1"), (0.5, "a GPU resource is counted in whole devices, got 0.5"),
     ("2x", "not a valid quantity: '2x'")],
)
def test_bad_input_gpu_request(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path,
                               qty: Any, problem: str) -> None:
    code, err = _err(cli, *files([_pod("train", {"nvidia.com/gpu": qty})]))
    assert (code, err) == (2, f"joulectl: error: {tmp_path / 'pods.yaml'}: Pod ml/train: "
                              f"spec.containers[0].resources.limits[nvidia.com/gpu]: {problem}")


def test_bad_input_empty_node_selector_terms(cli: Callable[..., Any], files: Callable[..., list[str]],
                                            tmp_path: Path) -> None:
    # `kubectl apply` refuses it ("must have at least one node selector term") and kube-scheduler
    # would place the pod nowhere: not a pod that fits every node; the other pod is not printed either
    bad = _pod("pinned", {"nvidia.com/gpu": 1})
    bad["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": []}}}
    r = cli("schedule-check", *files([_pod("ok", {"nvidia.com/gpu": 1}), bad]))
    assert (r.exit_code, r.stderr.strip(), r.stdout) == (
        2, f"joulectl: error: {tmp_path / 'pods.yaml'}: Pod ml/pinned: spec.affinity.nodeAffinity."
           "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: must be a list of at least one "
           "node selector term, got an empty list", "")


def test_bad_input_cluster_flags(cli: Callable[..., Any], files: Callable[..., list[str]], tmp_path: Path) -> None:
    pods, _, nodes, _, twins, _, _ = files([_pod("p", {})])
    assert _err(cli, pods, "--nodes", nodes) == (
        2, f"joulectl: error: --twins: --nodes {nodes} needs --twins TWINS.yaml "
           "(the NodeTwin objects, `kubectl get nodetwins -o yaml`)")
    assert _err(cli, pods, "--twins", twins) == (2, "joulectl: error: --twins: --twins goes with --nodes NODES.yaml")
    assert _err(cli, pods, "--spec", "cluster.yaml", "--nodes", nodes, "--twins", twins) == (
        2, "joulectl: error: --spec: give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml, not both")
    assert _err(cli, pods) == (
        2, "joulectl: error: the cluster is missing: give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml")
    assert _err(cli, pods, "--nodes", nodes, "--twins", twins, "--now", "soon") == (
        2, "joulectl: error: --now: not an ISO 8601 time: 'soon'")
    # the files must hold the right kinds
    assert _err(cli, pods, "--nodes", pods, "--twins", twins) == (
        2, f"joulectl: error: {pods}: document: expected Node objects, found Pod")
    assert _err(cli, pods, "--nodes", nodes, "--twins", nodes) == (
        2, f"joulectl: error: {nodes}: document: expected NodeTwin objects, found Node")
    missing = str(tmp_path / "nope.yaml")
    assert _err(cli, pods, "--nodes", missing, "--twins", twins) == (
        2, f"joulectl: error: {missing}: nodes file not found")
    r = cli("schedule-check", pods, "--nodes", nodes, "--twins", twins, "-o", "xml")
    assert (r.exit_code, r.stderr) == (
        2, "joulectl: error: -o: 'xml' is not one of table, wide, json, yaml, name, csv, jsonpath=..., "
           "custom-columns=...\n")


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [(("predictedPowerHeadroomScore",), float("nan"), "must be a finite number, got nan"),
     (("predictedCoolingStressScore",), float("-inf"), "must be a finite number, got -inf"),
     (("powerMeasurement", "nodeCappedPowerW"), float("inf"), "must be a finite number, got inf"),
     (("powerMeasurement", "measuredNodePowerW"), "2100", "must be a number, got '2100'"),
     (("powerMeasurement", "powerTrendWPerMin"), True, "must be a number, got a bool"),
     (("predictedPowerHeadroomScore",), [1, 2], "must be a number, got a list")],
)
def test_bad_input_twin_score_not_a_finite_number(cli: Callable[..., Any], files: Callable[..., list[str]],
                                                  tmp_path: Path, path: tuple[str, ...], value: Any,
                                                  problem: str) -> None:
    """A NaN/inf/non-number score field is bad input named by file, twin and field (was exit 1,
    ``ValueError: cannot convert float NaN to integer``)."""
    bad = _twin("h100-1", "eco", 50, 20, measuredNodePowerW=2100, nodeCappedPowerW=5520, powerTrendWPerMin=15)
    parent = bad["status"]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    twins = [t for t in TWINS if t["metadata"]["name"] != "h100-1"] + [bad]
    code, err = _err(cli, *files([_pod("p", {"nvidia.com/gpu": 1})], twins=twins))
    assert (code, err) == (2, f"joulectl: error: {tmp_path / 'twins.yaml'}: NodeTwin h100-1: "
                              f"status.{'.'.join(path)}: {problem}")


def test_twin_score_null_is_absent_and_twin_named_by_node(cli: Callable[..., Any], files: Callable[..., list[str]],
                                                          tmp_path: Path) -> None:
    unnamed = _twin("h100-1", "eco", 50, 20)
    del unnamed["metadata"]["name"]
    unnamed["status"]["predictedCoolingStressScore"] = float("nan")
    twins = [t for t in TWINS if t["metadata"]["name"] != "h100-1"] + [unnamed]
    code, err = _err(cli, *files([_pod("p", {"nvidia.com/gpu": 1})], twins=twins))
    assert (code, err) == (2, f"joulectl: error: {tmp_path / 'twins.yaml'}: NodeTwin h100-1: "
                              "status.predictedCoolingStressScore: must be a finite number, got nan")
    unnamed["status"]["predictedCoolingStressScore"] = None  # null: as if absent (cooling 0)
    code, doc = _doc(cli, files([_pod("p", {"nvidia.com/gpu": 1})], twins=twins))
    assert code == 0 and _by_node(doc["pods"][0])["h100-1"]["score"] is not None


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pods"


def test_examples_against_the_example_cluster(cli: Callable[..., Any]) -> None:
    pods = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    code, doc = _doc(cli, [*pods, "--nodes", str(EXAMPLES / "cluster" / "nodes.yaml"),
                           "--twins", str(EXAMPLES / "cluster" / "twins.yaml"), "--now", NOW])
    assert code == 0
    best = {p["name"]: p["bestNode"] for p in doc["pods"]}
    assert best == {"embeddings": "h100-1", "notebook": "a100-mig-0", "nightly-eval": "a100-mig-0",
                    "llm-train": "h100-0"}
    train = next(p for p in doc["pods"] if p["name"] == "llm-train")
    assert train["class"] == "performance" and train["gpuRequest"] == {"nvidia.com/gpu": 8}
    assert [n["node"] for n in train["nodes"] if n["fits"]] == ["h100-0"]
    assert _by_node(train)["h100-1"]["reason"] == "performance pod rejected from eco node (NodeTwin class eco)"
    assert _by_node(train)["a100-0"]["reason"].startswith("HAMi: no card of type H100 (the node's cards: ")
    # the init container (8 CPU) runs alone: the trainer's 64 CPU is the pod's CPU request
    assert train["cpuRequest"] == 64


def test_plan_flags_are_validated_like_plan(cli: Callable[..., Any], files: Callable[..., list[str]],
                                            tmp_path: Path) -> None:
    pods = files([_pod("p", {})])[0]
    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\npools: []\n")
    assert _err(cli, pods, "--spec", str(spec), "--performance-fraction", "2") == (
        2, "joulectl: error: --performance-fraction: must be between 0 and 1, got 2.0")
    assert _err(cli, pods, "--spec", str(spec), "--policy", "weird") == (
        2, "joulectl: error: --policy: unknown policy 'weird' (expected static or queue-aware)")


SMOKE = Path(__file__).resolve().parents[2] / "examples" / "sim" / "smoke.yaml"


def test_spec_path_on_the_smoke_example(cli: Callable[..., Any], files: Callable[..., list[str]]) -> None:
    pods = [_pod("h100", {"nvidia.com/gpu": 8}, {**PERF, "nvidia.com/use-gputype": "H100"}),
            _pod("a100", {"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "A100"}),
            _pod("web", {"cpu": "1"})]
    path = files(pods)[0]
    code, doc = _doc(cli, [path, "--spec", str(SMOKE), "--now", NOW])
    assert code == 6
    h100, a100, web = doc["pods"]
    # the spec's H100 node carries HAMi's register with its eight "NVIDIA-NVIDIA H100 80GB HBM3" GPUs
    assert h100["bestNode"] == "sxm-nopm-0" and [n["node"] for n in h100["nodes"] if n["fits"]] == ["sxm-nopm-0"]
    assert _by_node(h100)["intel-0"]["reason"] == "needs 8 nvidia.com/gpu, node has no GPU resources"
    assert _by_node(a100)["sxm-nopm-0"]["reason"] == (
        "HAMi: no card of type A100 (the node's cards: NVIDIA-NVIDIA H100 80GB HBM3)")
    assert a100["feasible"] is False
    # planned twins are fresh at --now: scores come from the plan's budgets, not the neutral 50
    assert web["feasible"] is True
    assert all(n["fits"] and n["score"] != 50 for n in web["nodes"])


def test_spec_path_uses_the_plan_flags(cli: Callable[..., Any], files: Callable[..., list[str]],
                                       tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: two}\nspec:\n  pools:\n"
                    "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 2}\n")
    path = files([_pod("train", {"nvidia.com/gpu": 8}, PERF), _pod("web", {"cpu": "1"})])[0]
    # fraction 0: the family floor keeps h100-0 at performance, h100-1 goes eco
    code, doc = _doc(cli, [path, "--spec", str(spec), "--performance-fraction", "0"])
    assert code == 0
    train, web = doc["pods"]
    assert train["bestNode"] == "h100-0"
    assert _by_node(train)["h100-1"]["reason"] == "performance pod rejected from eco node (NodeTwin class eco)"
    assert web["bestNode"] == "h100-1" and "standard on eco +10" in _by_node(web)["h100-1"]["reason"]
    # every node at performance: the performance pod fits both
    code, doc = _doc(cli, [path, "--spec", str(spec), "--performance-fraction", "1"])
    assert code == 0 and all(n["fits"] for n in doc["pods"][0]["nodes"])


def test_table_groups_pods_of_one_shape_and_the_reasons_nodes_fail(cli: Callable[..., Any],
                                                                    files: Callable[..., list[str]]) -> None:
    pods = [_pod(f"infer-{i}", {"nvidia.com/gpu": 1}) for i in range(3)] + [_pod("cpu", {"cpu": "1"})]
    r = cli("schedule-check", *files(pods))
    assert r.exit_code == 0
    blocks = r.stdout.split("\n\n")
    # one block for the three identical pods, one for the CPU pod
    assert blocks[0].splitlines()[0] == ("3 pods of one shape: Pod ml/infer-0, Pod ml/infer-1, Pod ml/infer-2 "
                                         "(standard, 1 nvidia.com/gpu): fits, best node h100-0")
    rows = [line.split() for line in blocks[0].splitlines()[2:]]
    # the best node first, then by score (a100-0 75, h100-1 57, as in the scoring test above)
    assert [row[:3] for row in rows[:3]] == [["yes", "h100-0", "83"], ["yes", "a100-0", "75"],
                                             ["yes", "h100-1", "57"]]
    assert " ".join(rows[3]) == "no 1 node: cpu-0 - needs 1 nvidia.com/gpu, node has no GPU resources"
    assert " ".join(rows[4]) == ("no 1 node: mig-0 - needs 1 nvidia.com/gpu, node offers none "
                                 "(it has nvidia.com/mig-1g.5gb: 14)")
    # cpu-0: eco twin, headroom 100, cooling 0: 70 + 15 + 10 (standard on eco) = 95
    assert blocks[1].splitlines()[0] == "Pod ml/cpu (standard, no GPU): fits, best node cpu-0"


@pytest.mark.parametrize("fmt", ["table", "wide", "csv", "name"])
def test_formats_that_do_not_print_the_document_never_build_it(cli: Callable[..., Any],
                                                               files: Callable[..., list[str]],
                                                               monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """A table of 10,000 pods x 10,000 nodes built the whole ScheduleCheck document first (100
    million node entries, 21 GB, 120 s, measured 5 December 2026) and printed none of it."""
    from joulectl.scheduling import check

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the ScheduleCheck document was built for -o " + fmt)

    monkeypatch.setattr(check, "to_document", refuse)
    r = cli("schedule-check", *files([_pod("train", {"nvidia.com/gpu": 8}, PERF)]), "-o", fmt)
    assert r.exit_code == 0, r.stderr
    assert ("h100-0" in r.stdout) if fmt in ("table", "wide", "csv") else r.stdout == "pod/train\n"
    # and the formats that print it still do
    monkeypatch.undo()
    code, doc = _doc(cli, files([_pod("train", {"nvidia.com/gpu": 8}, PERF)]), "yaml")
    assert code == 0 and doc["pods"][0]["bestNode"] == "h100-0"
