"""Fuzzing of the Kubernetes readers shared by plan, schedule-check and the simulator
(joulectl/k8s.py): with arbitrary JSON-like data they return a result or raise ValueError, which
the commands turn into a one-line InputError; never another exception."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl import k8s

FUZZ = settings(max_examples=examples(2000), deadline=None)
STRUCT = settings(max_examples=examples(600), deadline=None)

KEYS = [
    "kind", "metadata", "name", "namespace", "generateName", "labels", "annotations", "spec", "status",
    "template", "jobTemplate", "items", "replicas", "parallelism", "containers", "resources", "requests",
    "limits", "nodeSelector", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms", "matchExpressions", "key", "operator", "values", "allocatable", "capacity", "gpu",
    "count", "present", "nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "nvidia.com/mig-3g.40gb",
    "nvidia.com/gpu.shared", "joulie.io/hw.gpu-count", "nvidia.com/gpu.count", "nvidia.com/gpu.product",
    "gpu.intel.com/device.count", "joulie.io/workload-class", "joulie.io/power-profile",
]
KINDS = ["Pod", "List", "PodList", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob",
         "PodTemplate", "ReplicationController", "Node", "NodeList", "Service", ""]
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
    | st.sampled_from(["In", "NotIn", "eco", "performance", "standard", "1", "0", "-1", "2Ki", "500m", "1e400",
                       "nan", "inf", "A100-SXM4-80GB-MIG-1g.10gb", "true", "", " 8 ", *KINDS])
)
json_like: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=6),
    max_leaves=20,
)
k8s_object = st.fixed_dictionaries(
    {"kind": st.sampled_from(KINDS)},
    optional={"metadata": json_like, "spec": json_like, "items": st.lists(json_like, max_size=3) | SCALARS,
              "template": json_like, "status": json_like},
)
quantity_text = st.from_regex(
    r"\A[+-]?(\d{1,20}(\.\d{0,5})?|\.\d{1,5})([eE][+-]?\d{1,4})?(Ki|Mi|Gi|Ti|Pi|Ei|[numkKMGTPE])?\Z"
)


@FUZZ
@given(SCALARS | quantity_text)
def test_parse_quantity_is_a_finite_float_or_value_error(value: Any) -> None:
    try:
        q = k8s.parse_quantity(value)
    except ValueError:
        return
    assert isinstance(q, float)
    assert math.isfinite(q)


@FUZZ
@given(st.integers(0, 10**6), st.sampled_from(sorted(k8s._BINARY)))
def test_binary_suffixes_scale_exactly(n: int, suffix: str) -> None:
    assert k8s.parse_quantity(f"{n}{suffix}") == n * k8s._BINARY[suffix]


@STRUCT
@given(json_like)
def test_gpu_resources_of_anything(resources: Any) -> None:
    try:
        out = k8s.gpu_resources(resources)
    except ValueError:
        return
    assert all(isinstance(k, str) and math.isfinite(v) for k, v in out.items())


@STRUCT
@given(k8s_object | json_like, st.none() | json_like)
def test_node_gpu_count_of_anything(node: Any, hardware: Any) -> None:
    if not isinstance(node, dict):
        node = {"status": node}
    try:
        count, source = k8s.node_gpu_count(node, hardware)
    except ValueError:
        return
    assert isinstance(count, int) and count >= 0
    # MIG devices, replicas and shares say how they were counted after the source ("resources: ...")
    assert source.split(":")[0] in ("nodehardware", "joulie.io/hw.gpu-count", "nvidia.com/gpu.count",
                                    "gpu.intel.com/device.count", "resources", "none")


@STRUCT
@given(k8s_object | json_like)
def test_iter_pods_and_pod_classification_of_anything(doc: Any) -> None:
    try:
        pods = list(k8s.iter_pods(doc, "fuzz.yaml"))
    except ValueError:
        return
    for pod in pods:
        assert isinstance(pod.spec, dict)
        assert pod.replicas >= 0
        assert isinstance(k8s.pod_excludes_eco(pod), bool)
        assert k8s.workload_class(pod.annotations)[0] in ("performance", "standard")
        containers = pod.spec.get("containers")
        for c in containers if isinstance(containers, list) else []:
            if isinstance(c, dict) and isinstance(c.get("resources"), dict):
                assert isinstance(k8s.gpu_resources(c["resources"].get("requests")), dict)


affinity = st.fixed_dictionaries({}, optional={"nodeAffinity": st.fixed_dictionaries({}, optional={
    "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries({}, optional={
        "nodeSelectorTerms": st.lists(st.fixed_dictionaries({}, optional={
            "matchExpressions": st.lists(st.fixed_dictionaries({}, optional={
                "key": st.sampled_from(["joulie.io/power-profile", "other"]) | SCALARS,
                "operator": st.sampled_from(["In", "NotIn", "Exists"]) | SCALARS,
                "values": st.lists(st.sampled_from(["eco", "performance"]) | SCALARS, max_size=3) | SCALARS,
            }) | SCALARS, max_size=3) | SCALARS,
        }) | SCALARS, max_size=3) | SCALARS,
    }) | SCALARS,
}) | SCALARS}) | SCALARS


@STRUCT
@given(st.dictionaries(st.sampled_from(["joulie.io/workload-class", "x"]), st.text(max_size=12), max_size=2),
       st.fixed_dictionaries({}, optional={"affinity": affinity, "nodeSelector": json_like}))
def test_pod_excludes_eco_of_any_spec(annotations: dict[str, str], spec: dict[str, Any]) -> None:
    pod = k8s.PodRef(kind="Pod", name="p", namespace="default", annotations=annotations, labels={}, spec=spec)
    assert isinstance(k8s.pod_excludes_eco(pod), bool)


hami_field = st.text(alphabet="0123456789abcdefGPU-,: trueTRUEfalse", max_size=12)


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(hami_field, max_size=10).map(",".join) | st.text(max_size=200))
def test_parse_hami_register_of_any_text(value: str) -> None:
    gpus = k8s.parse_hami_register(value)
    for g in gpus:
        assert g.uuid and ":" not in g.uuid and "," not in g.uuid
    assert k8s.parse_hami_register(k8s.format_hami_register(gpus)) == gpus


@FUZZ
@given(st.text(max_size=40))
def test_sanitize_name_is_a_dns_label_shape(name: str) -> None:
    out = k8s.sanitize_name(name)
    assert all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in out)
    assert not out.startswith("-") and not out.endswith("-")


def test_regressions_found_by_fuzzing() -> None:
    """Shapes that raised AttributeError/TypeError before (now: empty results or ValueError)."""
    assert k8s.gpu_resources(True) == {}  # type: ignore[arg-type]
    assert k8s.node_gpu_count({"status": 1}) == (0, "none")
    assert k8s.node_gpu_count({}, {"status": ["gpu"]}) == (0, "none")
    pod = k8s.PodRef(kind="Pod", name="p", namespace="default", annotations={}, labels={},
                     spec={"affinity": True})
    assert k8s.pod_excludes_eco(pod) is False
    pod = k8s.PodRef(kind="Pod", name="p", namespace="default", annotations={}, labels={}, spec={
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "joulie.io/power-profile", "operator": "NotIn", "values": 5}]}]}}}})
    assert k8s.pod_excludes_eco(pod) is False
    with pytest.raises(ValueError, match=r"^List: items is not a list$"):
        list(k8s.iter_pods({"kind": "List", "items": 5}))
