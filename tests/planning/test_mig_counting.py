"""Issue 15 item 3: MIG devices are never counted as GPUs, nor multiplied by the GPU TDP.

Figures from the NVIDIA MIG user guide's profile tables (instances per GPU) and the catalog's
700 W per H100 SXM, 400 W per A100 SXM4, 165 W per A30."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from joulectl.catalog import mig_instances_per_gpu, mig_profile_of
from joulectl.k8s import node_gpu_count
from joulectl.planning import ClusterInput, PlanOptions, plan


@pytest.mark.parametrize(("product", "profile", "per_gpu"), [
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb", 7), ("NVIDIA-H100-80GB-HBM3", "1g.20gb", 4),
    ("NVIDIA-H100-80GB-HBM3", "2g.20gb", 3), ("NVIDIA-H100-80GB-HBM3", "3g.40gb", 2),
    ("NVIDIA-H100-80GB-HBM3", "4g.40gb", 1), ("NVIDIA-H100-80GB-HBM3", "7g.80gb", 1),
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", 1), ("NVIDIA-A100-SXM4-40GB", "1g.5gb", 7),
    ("NVIDIA-A100-SXM4-40GB", "2g.10gb", 3), ("NVIDIA-A100-SXM4-40GB", "3g.20gb", 2),
    ("NVIDIA-A30", "1g.6gb", 4), ("NVIDIA-A30", "2g.12gb", 2), ("NVIDIA-A30", "4g.24gb", 1),
    ("NVIDIA-H200", "1g.18gb", 7), ("NVIDIA-H200", "1g.35gb", 4), ("NVIDIA-H200", "3g.71gb", 2),
    ("Vendor-Unknown", "1g.5gb", 7), ("Vendor-Unknown", "3g.20gb", 2),
])
def test_instances_per_gpu(product: str, profile: str, per_gpu: int) -> None:
    assert mig_instances_per_gpu(product, profile) == per_gpu


def test_mig_profile_of_gfd_products() -> None:
    assert mig_profile_of("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb") == "1g.10gb"
    assert mig_profile_of("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb-SHARED") == "3g.20gb"
    assert mig_profile_of("NVIDIA-A100-SXM4-40GB-MIG-INVALID") is None
    assert mig_profile_of("NVIDIA-H100-80GB-HBM3") is None


def _node(labels: dict[str, str], resources: dict[str, str]) -> dict[str, Any]:
    res = {"cpu": "128", **resources}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels},
            "status": {"capacity": dict(res), "allocatable": dict(res)}}


SINGLE = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.count": "56",
          "nvidia.com/mig.strategy": "single"}
MIXED = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
         "nvidia.com/mig.strategy": "mixed"}


def test_counts_without_nodehardware() -> None:
    # mig-single: 56 MIG devices of 1g.10gb at 7 per H100 are 8 GPUs, from the label or the resource
    assert node_gpu_count(_node(SINGLE, {"nvidia.com/gpu": "56"})) == (
        8, "nvidia.com/gpu.count: 56 MIG devices 1g.10gb, 7 per GPU")
    no_count = {k: v for k, v in SINGLE.items() if k != "nvidia.com/gpu.count"}
    assert node_gpu_count(_node(no_count, {"nvidia.com/gpu": "56"})) == (
        8, "resources: 56 MIG devices 1g.10gb, 7 per GPU")
    # mig-mixed: gpu.count counts physical GPUs
    assert node_gpu_count(_node(MIXED, {"nvidia.com/mig-1g.10gb": "28", "nvidia.com/mig-3g.40gb": "8"})) == (
        8, "nvidia.com/gpu.count")
    # mig-mixed without gpu.count: 28 / 7 + 8 / 2 = 4 + 4 GPUs
    bare = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert node_gpu_count(_node(bare, {"nvidia.com/mig-1g.10gb": "28", "nvidia.com/mig-3g.40gb": "8"})) == (
        8, "resources: 28 nvidia.com/mig-1g.10gb, 7 per GPU; 8 nvidia.com/mig-3g.40gb, 2 per GPU")
    # an A30 under mig-single: 16 x 1g.6gb at 4 per GPU
    a30 = {"nvidia.com/gpu.product": "NVIDIA-A30-MIG-1g.6gb", "nvidia.com/gpu.count": "16"}
    assert node_gpu_count(_node(a30, {"nvidia.com/gpu": "16"})) == (
        4, "nvidia.com/gpu.count: 16 MIG devices 1g.6gb, 4 per GPU")
    # whole GPUs, and time-slicing without renaming (gpu.replicas per GPU)
    whole = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert node_gpu_count(_node(whole, {"nvidia.com/gpu": "8"})) == (8, "resources")
    shared = {"nvidia.com/gpu.product": "NVIDIA-L40S-SHARED", "nvidia.com/gpu.replicas": "4"}
    assert node_gpu_count(_node(shared, {"nvidia.com/gpu": "16"})) == (
        4, "resources: 16 nvidia.com/gpu, 4 per GPU")


def test_nodehardware_counts_physical_gpus_first() -> None:
    hw = {"status": {"gpu": {"count": 8}}}
    assert node_gpu_count(_node(SINGLE, {"nvidia.com/gpu": "56"}), hw) == (8, "nodehardware")


@pytest.mark.parametrize("with_hardware", [False, True])
@pytest.mark.parametrize("labels", [SINGLE, MIXED, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                     "nvidia.com/gpu.count": "8"}],
                         ids=["mig-single", "mig-mixed", "whole"])
def test_plan_never_multiplies_tdp_by_mig_devices(kube: SimpleNamespace, labels: dict[str, str],
                                                  with_hardware: bool) -> None:
    resources = ({"nvidia.com/gpu": "56"} if labels is SINGLE else
                 {"nvidia.com/mig-1g.10gb": "56"} if labels is MIXED else {"nvidia.com/gpu": "8"})
    node = kube.node("h100-0", labels, resources)
    hardware = {"h100-0": kube.nodehardware("h100-0", count=8, model="NVIDIA_H100_SXM", min_w=200, max_w=700)} \
        if with_hardware else {}
    result = plan(ClusterInput(nodes=[node], hardware=hardware), PlanOptions(performance_fraction=1.0))
    (row,) = result.nodes
    assert row["gpuCount"] == 8
    pm = result.twins[0]["status"]["powerMeasurement"]
    assert pm["gpuTdpW"] == 5600  # 8 x 700 W, not 56 x 700 = 39,200 W
