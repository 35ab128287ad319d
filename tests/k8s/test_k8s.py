"""joulectl.k8s: quantities, GPU resources, node GPU counts, pod templates, HAMi records."""

from __future__ import annotations

import pytest

from joulectl import k8s


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("256M", 256e6), ("2Ki", 2048), ("1", 1.0), ("1.5", 1.5), ("1e3", 1000.0), (4, 4.0)],
)
def test_parse_quantity(text: object, value: float) -> None:
    assert k8s.parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "nan", True])
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        k8s.parse_quantity(text)


def test_gpu_resources_classification() -> None:
    res = k8s.gpu_resources(
        {
            "cpu": "64",
            "nvidia.com/gpu": "8",
            "nvidia.com/mig-3g.20gb": "2",
            "gpu.intel.com/i915": "4",
            "gpu.intel.com/i915_monitoring": "1",
            "gpu.intel.com/millicores": "4000",
            "nvidia.com/gpumem": "81920",
            "nvidia.com/gpucores": "100",
            "vendor.example/gpu": "3",
        }
    )
    assert res == {"nvidia.com/gpu": 8, "nvidia.com/mig-3g.20gb": 2, "gpu.intel.com/i915": 4, "vendor.example/gpu": 3}
    mig = k8s.gpu_resource("nvidia.com/mig-3g.20gb")
    assert mig is not None and mig.kind == "mig" and mig.weight == pytest.approx(3 / 7)


def _node(labels: dict[str, str], allocatable: dict[str, str] | None = None) -> dict[str, object]:
    return {"kind": "Node", "metadata": {"name": "n", "labels": labels}, "status": {"allocatable": allocatable or {}}}


def test_node_gpu_count_precedence() -> None:
    hw = {"status": {"gpu": {"count": 8}}}
    assert k8s.node_gpu_count(_node({"joulie.io/hw.gpu-count": "4"}), hw) == (8, "nodehardware")
    assert k8s.node_gpu_count(_node({"joulie.io/hw.gpu-count": "4", "nvidia.com/gpu.count": "2"})) == (
        4, "joulie.io/hw.gpu-count")
    h100 = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert k8s.node_gpu_count(_node(h100)) == (8, "nvidia.com/gpu.count")
    # the single MIG strategy makes gpu.count count MIG devices: 56 of 1g.5gb, 7 per A100 (issue 15)
    mig = _node({"nvidia.com/gpu.count": "56", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
                {"nvidia.com/gpu": "56"})
    assert k8s.node_gpu_count(mig) == (8, "nvidia.com/gpu.count: 56 MIG devices 1g.5gb, 7 per GPU")
    assert k8s.node_gpu_count(_node({"gpu.intel.com/device.count": "4"}, {"gpu.intel.com/i915": "16"})) == (
        4, "gpu.intel.com/device.count")
    assert k8s.node_gpu_count(_node({}, {"vendor.example/gpu": "3"})) == (3, "resources")
    assert k8s.node_gpu_count(_node({}, {"cpu": "8"})) == (0, "none")


def test_node_gpu_product_strips_gfd_suffix() -> None:
    mig = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}
    assert k8s.node_gpu_product(mig) == "NVIDIA-A100-SXM4-40GB"
    assert k8s.node_gpu_product({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}) == "NVIDIA-H100-80GB-HBM3"


def test_iter_pods_templates() -> None:
    deploy = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "annotations": {"a": "1"}},
        "spec": {"replicas": 3, "template": {"metadata": {"annotations": {"joulie.io/workload-class": "performance"}},
                                             "spec": {"containers": [{"name": "c"}]}}},
    }
    cron = {"kind": "CronJob", "metadata": {"name": "cj"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}
    pods = [*k8s.iter_pods(deploy), *k8s.iter_pods({"kind": "List", "items": [cron]})]
    assert [(p.kind, p.name, p.namespace, p.replicas) for p in pods] == [
        ("Deployment", "web", "prod", 3), ("CronJob", "cj", "default", 1)]
    assert pods[0].annotations == {"a": "1", "joulie.io/workload-class": "performance"}
    with pytest.raises(ValueError, match="no kind"):
        list(k8s.iter_pods({"foo": 1}))
    with pytest.raises(ValueError, match="carries no pod spec"):
        list(k8s.iter_pods({"kind": "ConfigMap", "metadata": {"name": "x"}}))


def test_workload_class_and_eco_exclusion() -> None:
    assert k8s.workload_class({}) == ("standard", None)
    assert k8s.workload_class({"joulie.io/workload-class": "Performance"}) == ("performance", None)
    cls, note = k8s.workload_class({"joulie.io/workload-class": "batch"})
    assert cls == "standard" and note is not None and "batch" in note

    def pod(spec: dict[str, object], ann: dict[str, str] | None = None) -> k8s.PodRef:
        return k8s.PodRef("Pod", "p", "default", ann or {}, {}, spec)

    def affinity(op: str, values: list[str]) -> dict[str, object]:
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "joulie.io/power-profile", "operator": op, "values": values}]}]}}}}

    assert k8s.pod_excludes_eco(pod({}, {"joulie.io/workload-class": "performance"}))
    assert k8s.pod_excludes_eco(pod({"nodeSelector": {"joulie.io/power-profile": "performance"}}))
    assert k8s.pod_excludes_eco(pod(affinity("NotIn", ["eco"])))
    assert k8s.pod_excludes_eco(pod(affinity("In", ["performance"])))
    assert not k8s.pod_excludes_eco(pod(affinity("In", ["eco", "performance"])))
    assert not k8s.pod_excludes_eco(pod(affinity("NotIn", ["performance"])))
    assert not k8s.pod_excludes_eco(pod({}))


def test_hami_register_round_trip() -> None:
    text = ("GPU-03f69c50-207a-2038-9b45-23cac89cb67d,10,46068,100,NVIDIA-NVIDIA A40,0,true:"
            "GPU-1afede84-4e70-2174-49af-f07ebb94d1ae,10,46068,100,NVIDIA-NVIDIA A40,0,true:")
    gpus = k8s.parse_hami_register(text)
    assert [g.uuid[:12] for g in gpus] == ["GPU-03f69c50", "GPU-1afede84"]
    assert gpus[0].type == "NVIDIA-NVIDIA A40" and gpus[0].memory_mib == 46068 and gpus[0].healthy
    assert k8s.format_hami_register(gpus) == text
    assert k8s.parse_hami_register("garbage,1:") == []


def test_sanitize_name() -> None:
    assert k8s.sanitize_name("Node_A/1") == "node-a-1"
