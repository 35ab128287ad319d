"""Filters: workload class vs eco/draining nodes, GPU kind and count, CPU/memory, HAMi type/UUID."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from joulectl.errors import InputError
from joulectl.k8s import HamiGpu, format_hami_register, iter_pods
from joulectl.scheduling.demand import PodDemand, pod_demand
from joulectl.scheduling.filters import filter_reasons, node_view, twin_class


def node(name: str, *, labels: dict[str, str] | None = None, alloc: dict[str, Any] | None = None,
         gpus: list[HamiGpu] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if gpus:
        meta["annotations"] = {"hami.io/node-nvidia-register": format_hami_register(gpus)}
    allocatable = {"cpu": "64", "memory": "512Gi", **(alloc or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": allocatable}}


def cards(model: str, n: int, prefix: str) -> list[HamiGpu]:
    return [HamiGpu(f"GPU-{prefix}-{i}", 10, 81920, 100, f"NVIDIA-NVIDIA {model}", 0, True) for i in range(n)]


def pod(resources: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        **spec: Any) -> PodDemand:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations or {}},
           "spec": {"containers": [{"name": "c", "resources": {"limits": resources or {}}}], **spec}}
    (ref,) = iter_pods(doc)
    return pod_demand(ref, "pod.yaml")


def twin(cls: str, draining: bool = False) -> dict[str, Any]:
    return {"kind": "NodeTwin", "spec": {"nodeName": "n", "profile": "eco", "scheduling": {"draining": draining}},
            "status": {"schedulableClass": cls}}


PERF = {"joulie.io/workload-class": "performance"}


def test_performance_pods_rejected_on_eco_and_draining_nodes() -> None:
    perf, std = pod(annotations=PERF), pod()
    eco = node_view(node("eco-0"), twin("eco"))
    draining = node_view(node("dr-0", labels={"joulie.io/power-profile": "eco"}), twin("draining"))
    performance = node_view(node("perf-0"), twin("performance"))
    unknown = node_view(node("new-0"))
    assert filter_reasons(perf, eco) == ["performance pod rejected from eco node (NodeTwin class eco)"]
    assert filter_reasons(perf, draining) == ["performance pod rejected from draining node (NodeTwin class draining)"]
    assert filter_reasons(perf, performance) == []
    assert filter_reasons(perf, unknown) == []
    for view in (eco, draining, performance, unknown):
        assert filter_reasons(std, view) == []


def test_label_fallback_and_twin_precedence() -> None:
    perf = pod(annotations=PERF)
    labelled = node("eco-1", labels={"joulie.io/power-profile": "eco"})
    assert filter_reasons(perf, node_view(labelled)) == [
        "performance pod rejected from eco node (label joulie.io/power-profile=eco)"]
    # the twin's class comes first: a twin that says performance wins over a stale label
    assert filter_reasons(perf, node_view(labelled, twin("performance"))) == []
    assert filter_reasons(perf, node_view(labelled, twin("unknown"))) != []
    assert twin_class(twin("performance", draining=True)) == "draining"


def test_gpu_kind_and_count_against_allocatable() -> None:
    h100 = node_view(node("h100-0", alloc={"nvidia.com/gpu": "8"}))
    cpu = node_view(node("cpu-0"))
    assert filter_reasons(pod({"nvidia.com/gpu": 8}), h100) == []
    assert filter_reasons(pod({"nvidia.com/gpu": 9}), h100) == ["needs 9 nvidia.com/gpu, node has 8 allocatable"]
    assert filter_reasons(pod({"nvidia.com/gpu": 1}), cpu) == ["needs 1 nvidia.com/gpu, node has no GPU resources"]
    assert filter_reasons(pod({"amd.com/gpu": 1}), h100) == [
        "needs 1 amd.com/gpu, node offers none (it has nvidia.com/gpu: 8)"]
    # a pod with no GPU fits a GPU node
    assert filter_reasons(pod({"cpu": "2"}), h100) == []


def test_mig_requests_against_mig_nodes() -> None:
    mixed = node_view(node("a100-mig", alloc={"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}))
    whole = node_view(node("a100", alloc={"nvidia.com/gpu": "8"}))
    assert filter_reasons(pod({"nvidia.com/mig-3g.40gb": 2}), mixed) == []
    assert filter_reasons(pod({"nvidia.com/mig-3g.40gb": 5}), mixed) == [
        "needs 5 nvidia.com/mig-3g.40gb, node has 4 allocatable"]
    assert filter_reasons(pod({"nvidia.com/mig-2g.20gb": 1}), mixed) == [
        "needs 1 nvidia.com/mig-2g.20gb, node offers none (it has nvidia.com/mig-1g.10gb: 14, "
        "nvidia.com/mig-3g.40gb: 4)"]
    assert filter_reasons(pod({"nvidia.com/mig-1g.10gb": 1}), whole) == [
        "needs 1 nvidia.com/mig-1g.10gb, node offers none (it has nvidia.com/gpu: 8)"]
    assert filter_reasons(pod({"nvidia.com/gpu": 1}), mixed)[0].startswith("needs 1 nvidia.com/gpu, node offers none")


def test_cpu_and_memory_against_allocatable() -> None:
    small = node_view(node("small", alloc={"cpu": "4", "memory": "8Gi"}))
    assert filter_reasons(pod({"cpu": "4", "memory": "8Gi"}), small) == []
    assert filter_reasons(pod({"cpu": "4500m", "memory": "16Gi"}), small) == [
        "needs 4.5 CPU, node has 4 allocatable", "needs 16Gi memory, node has 8Gi allocatable"]


@pytest.fixture
def mixed_cluster() -> dict[str, Any]:
    a100 = cards("A100-SXM4-80GB", 8, "a")
    h100 = cards("H100 80GB HBM3", 8, "h")
    half = cards("A100-SXM4-80GB", 4, "m") + cards("H100 80GB HBM3", 4, "n")
    return {
        "a100": node_view(node("a100-0", alloc={"nvidia.com/gpu": 8}, gpus=a100)),
        "h100": node_view(node("h100-0", alloc={"nvidia.com/gpu": 8}, gpus=h100)),
        "half": node_view(node("mixed-0", alloc={"nvidia.com/gpu": 8}, gpus=half)),
        "a100_uuids": [g.uuid for g in a100],
    }


def test_gpu_type_annotations_per_gpu(mixed_cluster: dict[str, Any]) -> None:
    want_h100 = pod({"nvidia.com/gpu": 2}, {"nvidia.com/use-gputype": "h100"})  # case-insensitive substring
    assert filter_reasons(want_h100, mixed_cluster["h100"]) == []
    assert filter_reasons(want_h100, mixed_cluster["a100"]) == [
        "HAMi: no card of type h100 (the node's cards: NVIDIA-NVIDIA A100-SXM4-80GB)"]
    assert filter_reasons(want_h100, mixed_cluster["half"]) == []  # 4 of its 8 GPUs match
    eight = pod({"nvidia.com/gpu": 8}, {"nvidia.com/use-gputype": "H100"})
    assert filter_reasons(eight, mixed_cluster["half"]) == [
        "HAMi: needs 8 cards for 8 vGPUs, 4 fit: 4 cards not of type H100 (NVIDIA-NVIDIA A100-SXM4-80GB)"]
    no_a100 = pod({"nvidia.com/gpu": 2}, {"nvidia.com/nouse-gputype": "A100"})
    assert filter_reasons(no_a100, mixed_cluster["a100"]) == [
        "HAMi: no card not of type A100 (the node's cards: NVIDIA-NVIDIA A100-SXM4-80GB)"]
    assert filter_reasons(no_a100, mixed_cluster["h100"]) == []
    either = pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "A40, A100"})
    assert filter_reasons(either, mixed_cluster["a100"]) == []
    assert filter_reasons(either, mixed_cluster["h100"]) != []


def test_gpu_uuid_annotations_exact(mixed_cluster: dict[str, Any]) -> None:
    uuids = mixed_cluster["a100_uuids"]
    one = pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gpuuuid": f"{uuids[3]},GPU-elsewhere"})
    assert filter_reasons(one, mixed_cluster["a100"]) == []
    assert filter_reasons(one, mixed_cluster["h100"]) == [
        f"HAMi: no card allowed by use-gpuuuid {uuids[3]},GPU-elsewhere"]
    prefix = pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gpuuuid": uuids[3][:-1]})  # exact, not a substring
    assert filter_reasons(prefix, mixed_cluster["a100"]) != []
    avoid = pod({"nvidia.com/gpu": 8}, {"nvidia.com/nouse-gpuuuid": uuids[0]})
    assert filter_reasons(avoid, mixed_cluster["a100"]) == [
        f"HAMi: needs 8 cards for 8 vGPUs, 7 fit: 1 card excluded by nouse-gpuuuid {uuids[0]}"]
    assert filter_reasons(avoid, mixed_cluster["h100"]) == []


def test_gpu_selection_without_register(mixed_cluster: dict[str, Any]) -> None:
    labelled = node_view(node("l40s", labels={"nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.count": "4"},
                              alloc={"nvidia.com/gpu": 4}))
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "L40S"}), labelled) == []
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "H100"}), labelled) == [
        "needs 1 nvidia.com/gpu of type H100, node has 0 matching of 4"]
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gpuuuid": "GPU-x"}), labelled) == [
        "needs 1 nvidia.com/gpu with UUID GPU-x, node publishes no GPU UUIDs (hami.io/node-nvidia-register)"]
    bare = node_view(node("bare", alloc={"nvidia.com/gpu": 4}))
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "H100"}), bare) == [
        "needs 1 nvidia.com/gpu of type H100, node publishes no GPU types or UUIDs (hami.io/node-nvidia-register)"]
    # the annotations only concern NVIDIA device requests (HAMi reads them in its NVIDIA device
    # plugin only, pkg/device/nvidia): not a CPU pod, not an AMD GPU pod on a node with AMD GPUs
    assert filter_reasons(pod({"cpu": "1"}, {"nvidia.com/use-gputype": "H100"}), bare) == []
    amd = node_view(node("mi300x", alloc={"amd.com/gpu": 8}))
    assert filter_reasons(pod({"amd.com/gpu": 2}, {"nvidia.com/use-gputype": "H100"}), amd) == []


def test_mig_request_with_type_needs_one_matching_gpu(mixed_cluster: dict[str, Any]) -> None:
    gpus = cards("A100-SXM4-40GB", 2, "q")
    mig = node_view(node("mig-0", alloc={"nvidia.com/mig-1g.5gb": 14}, gpus=gpus))
    assert filter_reasons(pod({"nvidia.com/mig-1g.5gb": 3}, {"nvidia.com/use-gputype": "A100"}), mig) == []
    assert filter_reasons(pod({"nvidia.com/mig-1g.5gb": 3}, {"nvidia.com/use-gputype": "H100"}), mig) == [
        "needs 1 nvidia.com/mig-1g.5gb of type H100, node has 0 matching of 2"]


def test_cordon_node_selector_and_affinity() -> None:
    gpu = node("g-0", labels={"zone": "a", "tier": "3"})
    assert filter_reasons(pod(), node_view(node("c-0", unschedulable=True))) == [
        "node is cordoned (spec.unschedulable)"]
    assert filter_reasons(pod(nodeSelector={"zone": "a"}), node_view(gpu)) == []
    assert filter_reasons(pod(nodeSelector={"zone": "b"}), node_view(gpu)) == [
        "nodeSelector zone=b does not match the node's labels"]

    def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}

    ok = affinity({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"key": "tier", "operator": "Gt",
                                                                            "values": ["2"]})
    assert filter_reasons(pod(affinity=ok), node_view(gpu)) == []
    no = affinity({"key": "joulie.io/power-profile", "operator": "Exists"})
    assert filter_reasons(pod(affinity=no), node_view(gpu)) == ["required node affinity does not match the node"]
    notin = affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})
    assert filter_reasons(pod(affinity=notin), node_view(gpu)) != []
    # "A null or empty node selector term matches no objects" (NodeSelectorTerm, Kubernetes API)
    assert filter_reasons(pod(affinity=affinity()), node_view(gpu)) == [
        "required node affinity does not match the node"]


def test_running_pods_past_allocatable_leave_none_free() -> None:
    # running pods may ask for more than the node offers (a stale export): free is 0, not negative
    running = [pod({"nvidia.com/gpu": 6}, nodeName="g-0").pod, pod({"nvidia.com/gpu": 4}, nodeName="g-0").pod]
    view = node_view(node("g-0", alloc={"nvidia.com/gpu": 8}), running=running)
    assert filter_reasons(pod({"nvidia.com/gpu": 1}), view) == [
        "needs 1 nvidia.com/gpu, node has 0 free (10 used by running pods)"]


def test_node_name_binds_the_pod() -> None:
    assert filter_reasons(pod(nodeName="g-0"), node_view(node("g-0"))) == []
    assert filter_reasons(pod(nodeName="g-0"), node_view(node("g-1"))) == ["spec.nodeName binds the pod to g-0"]


def test_a_node_without_allocatable_offers_its_capacity() -> None:
    # the Node API: status.allocatable "defaults to Capacity" (k8s.io/api/core/v1 NodeStatus)
    doc = node("old")
    doc["status"] = {"capacity": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}}
    view = node_view(doc)
    assert filter_reasons(pod({"cpu": "8", "nvidia.com/gpu": 2}), view) == []
    assert filter_reasons(pod({"nvidia.com/gpu": 3}), view) == ["needs 3 nvidia.com/gpu, node has 2 allocatable"]


def test_a_one_gpu_node_by_label_has_its_gpu_typed() -> None:
    # GFD labels a one-GPU node nvidia.com/gpu.count=1: that GPU is of the labelled product
    one = node_view(node("a40", labels={"nvidia.com/gpu.product": "NVIDIA-A40", "nvidia.com/gpu.count": "1"},
                         alloc={"nvidia.com/gpu": 1}))
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "A40"}), one) == []
    assert filter_reasons(pod({"nvidia.com/gpu": 1}, {"nvidia.com/use-gputype": "H100"}), one) == [
        "needs 1 nvidia.com/gpu of type H100, node has 0 matching of 1"]


def test_a_node_whose_spec_is_no_mapping_is_not_taken_for_cordoned() -> None:
    # spec.unschedulable defaults to false (k8s.io/api/core/v1 NodeSpec); a spec that is no
    # object carries no such field
    doc = node("odd")
    doc["spec"] = ["unschedulable"]
    view = node_view(doc)
    assert view.unschedulable is False
    assert filter_reasons(pod({"cpu": "1"}), view) == []


def test_reasons_on_a_one_gpu_node_and_memory_under_2_gib() -> None:
    one = node_view(node("g1", alloc={"nvidia.com/gpu": 1, "memory": "1Gi"}))
    assert filter_reasons(pod({"nvidia.com/gpu": 2, "memory": "1536Mi"}), one) == [
        "needs 2 nvidia.com/gpu, node has 1 allocatable", "needs 1.5Gi memory, node has 1Gi allocatable"]
    running = [pod({"nvidia.com/gpu": 1}, nodeName="g1").pod]
    used = node_view(node("g1", alloc={"nvidia.com/gpu": 1}), running=running)
    assert filter_reasons(pod({"nvidia.com/gpu": 1}), used) == [
        "needs 1 nvidia.com/gpu, node has 0 free (1 used by running pods)"]


def test_a_labelled_product_with_no_gpus_gives_no_gpu_types() -> None:
    # GFD's product label left on a node whose GPU resources are gone (0 allocatable, no count
    # label): no GPU, and the view's per-GPU types come from nowhere ("none"), not from the label
    view = node_view(node("gone", labels={"nvidia.com/gpu.product": "NVIDIA-A40"}, alloc={"nvidia.com/gpu": 0}))
    assert (view.gpus, view.gpu_types_from) == ((), "none")


def _required(terms: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def test_required_terms_are_ored_and_a_null_term_matches_no_node() -> None:
    # NodeSelector (Kubernetes API): "The terms are ORed"; NodeSelectorTerm: "A null or empty node
    # selector term matches no objects"; matchFields selects by metadata.name
    n1 = node_view(node("n1", labels={"zone": "a"}))
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    no = ["required node affinity does not match the node"]
    assert filter_reasons(pod(affinity=_required([None])), n1) == no
    assert filter_reasons(pod(affinity=_required([None, by_name])), n1) == []
    assert filter_reasons(pod(affinity=_required([by_name])), node_view(node("n2", labels={"zone": "a"}))) == no


def test_node_selector_terms_that_are_no_list_are_ignored_by_the_filter() -> None:
    # the pod's reader refuses a requirement without a list of terms (tests/scheduling/
    # test_demand.py: the API server's "must have at least one node selector term"); the filter,
    # given one anyway, takes it as no affinity, as every malformed part of a pod's affinity
    # (docs/RELIABILITY.md, "Bugs found": `_required_terms`), and never iterates a mapping's keys
    valid = pod(affinity=_required([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]))
    terms = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    malformed = dataclasses.replace(valid, pod=dataclasses.replace(valid.pod, spec={
        **valid.pod.spec, "affinity": _required(terms)}))
    assert filter_reasons(malformed, node_view(node("n1", labels={"zone": "a"}))) == []
    with pytest.raises(InputError, match=r"got a mapping$"):
        pod(affinity=_required(terms))


def test_memory_under_1_gib_is_given_in_mebibytes() -> None:
    # quantities below 1Gi are shown in Mi (Kubernetes binary suffixes: 1Mi = 2^20 bytes):
    # 768Mi asked against 512Mi allocatable
    small = node_view(node("s1", alloc={"memory": "512Mi"}))
    assert filter_reasons(pod({"memory": "768Mi"}), small) == ["needs 768Mi memory, node has 512Mi allocatable"]


def test_which_gpu_resources_a_node_offers_instead() -> None:
    # the resources listed as offered are those with devices allocatable: 1 counts, 0 does not
    ask = pod({"amd.com/gpu": 1})
    assert filter_reasons(ask, node_view(node("one", alloc={"nvidia.com/gpu": 1}))) == [
        "needs 1 amd.com/gpu, node offers none (it has nvidia.com/gpu: 1)"]
    assert filter_reasons(ask, node_view(node("zero", alloc={"nvidia.com/gpu": 0}))) == [
        "needs 1 amd.com/gpu, node has no GPU resources"]


def test_cpu_and_memory_against_little_or_overcommitted_allocatable() -> None:
    # Kubernetes' NodeResourcesFit: a pod fits when its request is at most what is free, and a
    # pod that requests no CPU or memory is not checked for it, even on a node its running pods
    # overcommitted (a stale export: 70 CPU and 600Gi used of 64 and 512Gi)
    running = [pod({"cpu": "70", "memory": "600Gi"}, nodeName="full").pod]
    full = node_view(node("full"), running=running)
    assert filter_reasons(pod({"nvidia.com/gpu": 0}), full) == []
    assert filter_reasons(pod({"cpu": "500m"}), node_view(node("q", alloc={"cpu": "250m"}))) == [
        "needs 0.5 CPU, node has 0.25 allocatable"]
    assert filter_reasons(pod({"memory": "1"}), node_view(node("m0", alloc={"memory": "0"}))) == [
        "needs 0Mi memory, node has 0Mi allocatable"]


def test_gpu_type_reasons_name_the_largest_whole_gpu_request() -> None:
    # whole GPUs need that many cards of the type, a MIG device one; the reason names the request
    # that needs the most cards, the first by name among equals
    a40 = node_view(node("a40", labels={"nvidia.com/gpu.product": "NVIDIA-A40", "nvidia.com/gpu.count": "2"},
                         alloc={"nvidia.com/gpu": 2}))
    h100 = {"nvidia.com/use-gputype": "H100"}
    assert filter_reasons(pod({"nvidia.com/gpu": 2}, h100), a40) == [
        "needs 2 nvidia.com/gpu of type H100, node has 0 matching of 2"]
    mixed = node_view(node("mixed", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                            "nvidia.com/gpu.count": "1"},
                           alloc={"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7}))
    assert filter_reasons(pod({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}, h100), mixed) == [
        "needs 1 nvidia.com/gpu of type H100, node has 0 matching of 1"]
