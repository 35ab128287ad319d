"""Issue 15 item 1: GPU resources, share resources and product labels by configuration, the
warnings for GPU-looking names joulectl does not read, and the catalog's generic assumption.

The fleet is tests/fixtures/fleet_export.py: 1,200 nodes whose plugins advertise
``aliyun.com/gpu-count``, ``aliyun.com/gpu-mem`` and ``example.com/vgpu-milli``, and whose model is in
``cloud.example.com/gpu-model``. Every expected figure is worked out by hand in the comments.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fleet_export
import pytest

from joulectl import catalog
from joulectl.k8s import GpuConfig, node_gpu_count, parse_gpu_config, unread_gpu_names, using_gpu_config

FLAGS = ["--gpu-resource", "aliyun.com/gpu-count", "--gpu-share-resource", "example.com/vgpu-milli=1000",
         "--gpu-product-label", "cloud.example.com/gpu-model"]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fleet_export.write(tmp_path_factory.mktemp("fleet") / "nodes.json")


def _plan(cli: Callable[..., Any], export: Path, *args: str) -> tuple[Any, dict[str, Any], list[str]]:
    r = cli("plan", "--nodes", str(export), "--performance-fraction", "0", "-o", "json", *args)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    return r, {t["spec"]["nodeName"]: t for t in doc["items"]}, r.stderr.splitlines()


def test_without_the_flags_the_gpus_are_invisible_but_named(cli: Callable[..., Any], export: Path) -> None:
    _, twins, warnings = _plan(cli, export)
    assert len(twins) == 1200
    assert not any("gpu" in t["spec"] for t in twins.values())  # planned as all-CPU, as the issue reports
    assert warnings == [
        "joulectl: warning: 800 nodes advertise aliyun.com/gpu-count, which joulectl does not read as GPUs: give "
        "--gpu-resource aliyun.com/gpu-count if one unit is one GPU, or --gpu-share-resource "
        "aliyun.com/gpu-count=UNITS if UNITS make one GPU",
        "joulectl: warning: 800 nodes advertise aliyun.com/gpu-mem, which joulectl does not read as GPUs: give "
        "--gpu-resource aliyun.com/gpu-mem if one unit is one GPU, or --gpu-share-resource "
        "aliyun.com/gpu-mem=UNITS if UNITS make one GPU",
        "joulectl: warning: 200 nodes advertise example.com/vgpu-milli, which joulectl does not read as GPUs: give "
        "--gpu-resource example.com/vgpu-milli if one unit is one GPU, or --gpu-share-resource "
        "example.com/vgpu-milli=UNITS if UNITS make one GPU",
        "joulectl: warning: 1000 nodes carry the label cloud.example.com/gpu-model, which joulectl does not read: "
        "give --gpu-product-label cloud.example.com/gpu-model if it names the GPU model",
    ]
    # 1,200 EPYC 9654 nodes: 2 x 360 W (catalog TDP) = 720 W each
    v100 = twins["v100-0000.prod.example.com"]["status"]["powerMeasurement"]
    assert (v100["gpuTdpW"], v100["nodeTdpW"]) == (0, 720)


def _summary(cli: Callable[..., Any], export: Path, *args: str) -> str:
    r = cli("plan", "--nodes", str(export), "--performance-fraction", "0", *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_with_the_flags_every_gpu_is_counted(cli: Callable[..., Any], export: Path) -> None:
    _, twins, warnings = _plan(cli, export, *FLAGS)
    # gpushare's memory resource stays unread (it is neither whole GPUs nor a fixed share of one)
    assert [w for w in warnings if "gpu" in w] == [
        "joulectl: warning: 800 nodes advertise aliyun.com/gpu-mem, which joulectl does not read as GPUs: give "
        "--gpu-resource aliyun.com/gpu-mem if one unit is one GPU, or --gpu-share-resource "
        "aliyun.com/gpu-mem=UNITS if UNITS make one GPU",
    ]
    v100 = twins["v100-0000.prod.example.com"]
    assert v100["metadata"]["annotations"]["joulectl.io/family"] == "gpu:NVIDIA_TESLA_V100_SXM2_32GB"
    assert v100["metadata"]["annotations"]["joulectl.io/gpu-count"] == "8 (resources)"
    # 8 x 300 W (V100 SXM2 datasheet) + 720 W of CPU
    assert (v100["status"]["powerMeasurement"]["gpuTdpW"], v100["status"]["powerMeasurement"]["nodeTdpW"]) == (
        2400, 3120)
    l4 = twins["l4-0000.prod.example.com"]
    # 4000 milli-GPUs at 1000 per GPU: 4 L4 of 72 W
    assert l4["metadata"]["annotations"]["joulectl.io/gpu-count"] == (
        "4 (resources: 4000 example.com/vgpu-milli, 1000 per GPU)")
    assert l4["status"]["powerMeasurement"]["gpuTdpW"] == 288
    a100 = twins["a100-0000.prod.example.com"]
    assert a100["status"]["powerMeasurement"]["gpuTdpW"] == 3200  # 8 x 400 W
    eco = [t for t in twins.values() if t["spec"]["profile"] == "eco" and t["spec"]["nodeName"].startswith("a100")]
    assert eco[0]["spec"]["gpu"]["powerCap"] == {"scope": "perGpu", "capPctOfMax": 60}
    assert eco[0]["spec"]["cpu"] == {}


def test_fleet_summary_with_and_without_the_flags(cli: Callable[..., Any], export: Path) -> None:
    # Without: one family (cpu:AMD_EPYC_9654), so one performance node: 720 W + 1199 x 0.6 x 720 W = 518,688 W.
    assert _summary(cli, export) == (
        "policy static: 1 of 1200 planned nodes at performance (sized 0, 1 hardware families), 0 draining; "
        "saving 345312 W (40.0%) against all-performance 864000 W")
    # With: four families, one performance node each. TDP 400 x 3120 + 400 x 3920 + 200 x 1008 + 200 x 720
    # = 3,161,600 W. Eco budgets: V100 720 + 0.6 x 2400 = 2160, A100 720 + 0.6 x 3200 = 2640,
    # L4 720 + 0.6 x 288 = 892.8, CPU 0.6 x 720 = 432; planned 399 x 2160 + 3120 + 399 x 2640 + 3920
    # + 199 x 892.8 + 1008 + 199 x 432 + 720 = 2,187,603.2 W; saving 973,996.8 W (30.8 %).
    assert _summary(cli, export, *FLAGS) == (
        "policy static: 4 of 1200 planned nodes at performance (sized 0, 4 hardware families), 0 draining; "
        "saving 973996.8 W (30.8%) against all-performance 3161600 W")


def test_the_environment_variables_stand_for_the_flags(cli: Callable[..., Any], export: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULECTL_GPU_RESOURCES", "aliyun.com/gpu-count")
    monkeypatch.setenv("JOULECTL_GPU_SHARE_RESOURCES", "example.com/vgpu-milli=1000")
    monkeypatch.setenv("JOULECTL_GPU_PRODUCT_LABEL_KEYS", "cloud.example.com/gpu-model")
    assert _summary(cli, export).startswith("policy static: 4 of 1200 planned nodes at performance")


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu-resource", "not a name"], "--gpu-resource: 'not a name' is not a resource name (like example.com/gpu)"),
    (["--gpu-share-resource", "example.com/milli"],
     "--gpu-share-resource: expected NAME=UNITS (like example.com/gpu-milli=1000), got 'example.com/milli'"),
    (["--gpu-share-resource", "example.com/milli=0"],
     "--gpu-share-resource: UNITS of example.com/milli must be a number above 0, got '0'"),
    (["--gpu-share-resource", "example.com/milli=nan"],
     "--gpu-share-resource: UNITS of example.com/milli must be a number above 0, got 'nan'"),
    (["--gpu-resource", "x.io/g", "--gpu-share-resource", "x.io/g=10"],
     "--gpu-share-resource: x.io/g is also given as --gpu-resource"),
    (["--gpu-product-label", "bad key!"], "--gpu-product-label: 'bad key!' is not a label key"),
])
@pytest.mark.parametrize("command", ["plan", "schedule-check"])
def test_bad_flags_exit_2(cli: Callable[..., Any], export: Path, args: list[str], message: str,
                          command: str) -> None:
    argv = ["plan", "--nodes", str(export)] if command == "plan" else [
        "schedule-check", str(export), "--nodes", str(export), "--twins", str(export)]
    r = cli(*argv, *args)
    assert (r.exit_code, r.stderr.strip()) == (2, f"joulectl: error: {message}")
    assert r.stdout == ""


def test_custom_names_join_the_builtins_in_the_counting_order() -> None:
    config = parse_gpu_config(["example.com/accel"], ["example.com/accel-milli=1000"], ["example.com/gpu-model"],
                              env={})
    node = {"metadata": {"labels": {"nvidia.com/gpu.count": "2"}},
            "status": {"allocatable": {"example.com/accel": "6", "nvidia.com/gpu": "2"}}}
    with using_gpu_config(config):
        # GFD's gpu.count comes before the units of any resource (seed order)
        assert node_gpu_count(node) == (2, "nvidia.com/gpu.count")
        del node["metadata"]["labels"]["nvidia.com/gpu.count"]
        assert node_gpu_count(node) == (8, "resources")  # 6 + 2 whole GPUs
        node["status"]["allocatable"] = {"example.com/accel-milli": "2500"}
        assert node_gpu_count(node) == (3, "resources: 2500 example.com/accel-milli, 1000 per GPU")  # ceil(2.5)
        assert config.label_keys[-1] == "example.com/gpu-model"
    assert node_gpu_count(node) == (0, "none")  # the built-in configuration reads none of them


def test_known_namespaces_and_read_names_give_no_warning() -> None:
    node = {"metadata": {"labels": {"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.family": "hopper",
                                    "gpu.intel.com/family": "Flex_Series", "example.com/has-gpu": "yes"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "gpu.intel.com/millicores": "1000",
                                       "nvidia.com/gpumem": "80000", "vendor.example/gpu": "2"}}}
    assert unread_gpu_names([node]) == [
        "1 node carries the label example.com/has-gpu, which joulectl does not read: give --gpu-product-label "
        "example.com/has-gpu if it names the GPU model"]
    with using_gpu_config(GpuConfig(product_labels=("example.com/has-gpu",))):
        assert unread_gpu_names([node]) == []


def test_unknown_model_is_planned_generic_and_named(cli: Callable[..., Any], tmp_path: Path) -> None:
    def gpu_node(name: str, product: str | None, resource: str) -> dict[str, Any]:
        labels = {"nvidia.com/gpu.product": product} if product else {}
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "64", resource: "4"}}}

    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        gpu_node("x-0", "NVIDIA-Mystery-9000", "nvidia.com/gpu"), gpu_node("x-1", "NVIDIA-Mystery-9000",
                                                                           "nvidia.com/gpu"),
        gpu_node("y-0", None, "amd.com/gpu")]}))
    r = cli("plan", "--nodes", str(path), "-o", "json", "--absolute-caps")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "joulectl: warning: GPU model 'NVIDIA-Mystery-9000' is not in the catalog (2 nodes: x-0, x-1): planned with "
        "the generic assumption of 350 W per GPU (min 175 W), GPU caps in percent only; give the model's range "
        "with --model-caps FILE",
        "joulectl: warning: GPU nodes name no GPU model (1 node: y-0): planned with the generic assumption of 400 W "
        "per GPU (min 200 W), GPU caps in percent only; give the model's range with --model-caps FILE and its "
        "label with --gpu-product-label KEY",
    ]
    twins = {t["spec"]["nodeName"]: t for t in json.loads(r.stdout)["items"]}
    assert twins["x-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 1400  # 4 x 350 W, generic NVIDIA
    assert twins["y-0"]["status"]["powerMeasurement"]["gpuTdpW"] == 1600  # 4 x 400 W, generic AMD
    assert "capWattsPerGpu" not in twins["x-0"]["spec"]["gpu"]["powerCap"]  # never watts from an assumption


@pytest.mark.parametrize(("product", "watts"), [
    ("Tesla-P100-PCIE-16GB", 250), ("Tesla-P100-SXM2-16GB", 300), ("Tesla-V100-PCIE-16GB", 250),
    ("Tesla-V100-PCIE-32GB", 250), ("Tesla-V100-SXM2-16GB", 300), ("Tesla-V100-SXM2-32GB", 300),
    ("Tesla-T4", 70), ("NVIDIA-A10", 150), ("NVIDIA-A30", 165), ("NVIDIA-A40", 300),
    ("NVIDIA-A100-SXM4-80GB", 400), ("NVIDIA-A100-PCIE-40GB", 250), ("NVIDIA-H100-80GB-HBM3", 700),
    ("NVIDIA-H100-PCIe", 350), ("NVIDIA-H200", 700), ("NVIDIA-L4", 72), ("NVIDIA-L40", 300), ("NVIDIA-L40S", 350),
    ("NVIDIA-B200", 1000), ("AMD_Instinct_MI100", 300), ("AMD_Instinct_MI210", 300), ("AMD_Instinct_MI250", 560),
    ("AMD_Instinct_MI250X", 560), ("AMD_Instinct_MI300X", 750), ("AMD_Instinct_MI325X", 1000),
    ("Flex_140", 75), ("Flex_170", 150), ("Max_1100", 300), ("Max_1550", 600),
])
def test_the_catalog_knows_a_real_fleet_back_to_pascal(product: str, watts: float) -> None:
    entry = catalog.load().gpu(product)
    assert entry is not None and entry.max_board_power_w == watts
    assert entry.source  # every value with its source


def test_every_catalog_entry_has_a_source() -> None:
    assert all(g.source for g in catalog.load().gpus.values())
    assert all(c.source for c in catalog.load().cpus.values())


def test_simulate_render_nodes_emulates_a_fleet_with_its_own_names(cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: own}\nspec:\n"
                    "  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 2}\n")
    r = cli("simulate", "render-nodes", str(spec), "-o", "json", "--gpu-resource", "example.com/gpu-count",
            "--gpu-product-label", "example.com/gpu-model")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for item in doc["items"]:  # what a real export of such a fleet carries: no joulie.io/ or GFD labels
        assert item["status"]["allocatable"]["example.com/gpu-count"] == "8"
        assert "nvidia.com/gpu" not in item["status"]["allocatable"]
        labels = item["metadata"]["labels"]
        assert labels["example.com/gpu-model"] == "NVIDIA-H100-80GB-HBM3"
        item["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith(("joulie.io/", "nvidia"))}
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(doc))
    plain = cli("plan", "--nodes", str(nodes), "-o", "json")
    assert {t["status"]["powerMeasurement"]["gpuTdpW"] for t in json.loads(plain.stdout)["items"]} == {0}
    read = cli("plan", "--nodes", str(nodes), "-o", "json", "--gpu-resource", "example.com/gpu-count",
               "--gpu-product-label", "example.com/gpu-model")
    assert {t["status"]["powerMeasurement"]["gpuTdpW"] for t in json.loads(read.stdout)["items"]} == {5600}


def test_unread_names_are_counted_per_node_over_nodes_of_one_and_of_other_shapes() -> None:
    """Nodes with the same names and keys are judged once (the 100,000-node plan); each still counts."""
    def node(labels: dict[str, str], capacity: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"labels": labels}, "status": {"capacity": capacity, "allocatable": allocatable}}

    same = [node({"example.com/gpu-kind": f"k{i}", "kubernetes.io/hostname": f"n{i}"},
                 {"example.com/vgpu": str(i)}, {"example.com/vgpu": str(i)}) for i in range(3)]
    other = node({"example.com/gpu-kind": "k"}, {}, {"example.com/vgpu": "1", "example.com/gpu-mem": "5"})
    bare = node({}, {"cpu": "8"}, {"cpu": "8"})
    assert unread_gpu_names([*same, bare, other, bare]) == [
        "1 node advertises example.com/gpu-mem, which joulectl does not read as GPUs: give --gpu-resource "
        "example.com/gpu-mem if one unit is one GPU, or --gpu-share-resource example.com/gpu-mem=UNITS if UNITS "
        "make one GPU",
        "4 nodes advertise example.com/vgpu, which joulectl does not read as GPUs: give --gpu-resource "
        "example.com/vgpu if one unit is one GPU, or --gpu-share-resource example.com/vgpu=UNITS if UNITS make "
        "one GPU",
        "4 nodes carry the label example.com/gpu-kind, which joulectl does not read: give --gpu-product-label "
        "example.com/gpu-kind if it names the GPU model",
    ]
