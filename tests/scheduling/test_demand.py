"""Pod demand: class, GPU requests per resource, CPU and memory; invalid requests named."""

from __future__ import annotations

from typing import Any

import pytest

from joulectl.errors import ExitCode, InputError
from joulectl.k8s import iter_pods
from joulectl.scheduling.demand import pod_demand


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations or {}}, "spec": spec}


def ctr(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "resources": res, **extra}


def demand_of(doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    (ref,) = iter_pods(doc)
    return pod_demand(ref, "pods.yaml")


def test_requests_before_limits_and_containers_add_up() -> None:
    d = demand_of(pod([ctr({"cpu": "500m"}, {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 2}),
                       ctr(limits={"cpu": "1", "nvidia.com/gpu": "1"})]))
    assert d.cpu_cores == pytest.approx(1.5)
    assert d.memory_bytes == 2**30
    assert d.gpu_requests == {"nvidia.com/gpu": 3}
    assert d.gpus == 3 and d.gpu_vendor == "nvidia"
    assert d.workload_class == "standard" and d.notes == ()


def test_init_containers_count_as_a_maximum() -> None:
    d = demand_of(pod([ctr({"cpu": "1", "nvidia.com/gpu": 1})],
                      init=[ctr({"cpu": "4", "memory": "2Gi"}), ctr({"cpu": "2", "nvidia.com/gpu": 2})]))
    assert d.cpu_cores == 4
    assert d.memory_bytes == 2 * 2**30
    assert d.gpu_requests == {"nvidia.com/gpu": 2}


def test_sidecar_init_containers_add_up() -> None:
    d = demand_of(pod([ctr({"cpu": "1"})], init=[ctr({"cpu": "500m"}, restartPolicy="Always")]))
    assert d.cpu_cores == pytest.approx(1.5)


def test_mig_shared_and_non_gpu_resources() -> None:
    d = demand_of(pod([ctr(limits={"nvidia.com/mig-3g.20gb": 2, "nvidia.com/gpumem": 20000,
                                   "nvidia.com/gpucores": 30, "gpu.intel.com/millicores": 500,
                                   "gpu.intel.com/i915_monitoring": 1})]))
    assert d.gpu_requests == {"nvidia.com/mig-3g.20gb": 2}
    assert d.gpus == pytest.approx(6 / 7)
    shared = demand_of(pod([ctr(limits={"nvidia.com/gpu.shared": 1})]))
    assert shared.gpu_requests == {"nvidia.com/gpu.shared": 1}
    intel = demand_of(pod([ctr(limits={"gpu.intel.com/xe": 1})]))
    assert intel.gpu_vendor == "intel"


def test_workload_class_and_note() -> None:
    assert demand_of(pod([ctr()], annotations={"joulie.io/workload-class": "performance"})).workload_class == (
        "performance")
    d = demand_of(pod([ctr()], annotations={"joulie.io/workload-class": "batch"}))
    assert d.workload_class == "standard"
    assert d.notes and "treated as standard" in d.notes[0]


def test_deployment_and_cronjob_templates() -> None:
    template = {"metadata": {"annotations": {"joulie.io/workload-class": "performance"}},
                "spec": {"containers": [ctr({"amd.com/gpu": 1})]}}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 3, "template": template}}
    d = demand_of(dep)
    assert (d.pod.kind, d.name, d.namespace, d.pod.replicas) == ("Deployment", "web", "default", 3)
    assert d.workload_class == "performance" and d.gpu_requests == {"amd.com/gpu": 1}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [ctr({"cpu": "2"})]}}}}}}
    assert demand_of(cron).cpu_cores == 2


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"requests": {"nvidia.com/gpu": "-1"}},
         "pods.yaml: Pod ml/p: spec.containers[0].resources.requests[nvidia.com/gpu]: "
         "a request cannot be negative, got '-1'"),
        ({"limits": {"nvidia.com/gpu": 0.5}},
         "pods.yaml: Pod ml/p: spec.containers[0].resources.limits[nvidia.com/gpu]: "
         "a GPU resource is counted in whole devices, got 0.5"),
        ({"limits": {"nvidia.com/mig-1g.5gb": "1500m"}},
         "pods.yaml: Pod ml/p: spec.containers[0].resources.limits[nvidia.com/mig-1g.5gb]: "
         "a GPU resource is counted in whole devices, got '1500m'"),
        ({"requests": {"memory": "lots"}},
         "pods.yaml: Pod ml/p: spec.containers[0].resources.requests[memory]: not a valid quantity: 'lots'"),
        ({"requests": {"cpu": "-2"}},
         "pods.yaml: Pod ml/p: spec.containers[0].resources.requests[cpu]: a request cannot be negative, got '-2'"),
    ],
)
def test_invalid_requests_are_named(resources: dict[str, Any], message: str) -> None:
    doc = pod([{"name": "c", "resources": resources}])
    with pytest.raises(InputError) as err:
        demand_of(doc)
    assert str(err.value) == message
    assert err.value.exit_code == ExitCode.USAGE


def test_fractional_non_gpu_resources_are_fine() -> None:
    assert demand_of(pod([ctr({"cpu": "0.5", "example.com/foo": "0.5"})])).cpu_cores == 0.5


_TERMS_FIELD = ("pods.yaml: Pod ml/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms: must be a list of at least one node selector term, got ")


@pytest.mark.parametrize(
    ("required", "got"),
    [({"nodeSelectorTerms": []}, "an empty list"),
     ({"nodeSelectorTerms": {"matchExpressions": []}}, "a mapping"),
     ({"nodeSelectorTerms": "zone=a"}, "a string"),
     ({"nodeSelectorTerms": None}, "nothing"),
     ({}, "nothing")],
)
def test_a_required_node_affinity_without_terms_is_refused(required: dict[str, Any], got: str) -> None:
    # The API server refuses it (pkg/apis/core/validation ValidateNodeSelector: "must have at least
    # one node selector term"), and kube-scheduler's NodeSelector ORs its terms: an empty list would
    # match no node, where ignoring it let the pod fit every node.
    doc = pod([ctr({"cpu": "1"})])
    doc["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    with pytest.raises(InputError) as err:
        demand_of(doc)
    assert str(err.value) == _TERMS_FIELD + got
    assert err.value.exit_code == ExitCode.USAGE


def test_a_null_required_node_affinity_is_no_requirement() -> None:
    # YAML null is the field left out; one term (even one matching nothing) is a valid requirement
    doc = pod([ctr({"cpu": "1"})])
    doc["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}
    assert demand_of(doc).cpu_cores == 1
    doc["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    assert demand_of(doc).cpu_cores == 1
