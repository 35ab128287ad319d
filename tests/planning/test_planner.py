"""plan(): eligibility, density order, family floor, draining guard, GPU counts and power domains,
twin status, and every NodeTwin valid against the CRD."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulectl.errors import InputError
from joulectl.k8s import iter_pods
from joulectl.planning import ClusterInput, PlanOptions, plan

NOW = datetime(2026, 3, 13, 12, 0, 0, tzinfo=timezone.utc)


def validate_all(twins: list[dict[str, Any]], schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft4Validator(schema)
    for doc in twins:
        errors = sorted(validator.iter_errors(doc), key=str)
        assert not errors, f"{doc['metadata']['name']}: {errors[0].message}"
        assert doc["apiVersion"] == "joulie.io/v1alpha1" and doc["kind"] == "NodeTwin"


def by_node(result: Any) -> dict[str, dict[str, Any]]:
    return {t["spec"]["nodeName"]: t for t in result.twins}


def profiles(result: Any) -> dict[str, str]:
    return {t["spec"]["nodeName"]: t["spec"]["profile"] for t in result.twins}


def pod(name: str, node: str | None, *, performance: bool = True, phase: str = "Running") -> Any:
    cls = "performance" if performance else "standard"
    doc: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"joulie.io/workload-class": cls}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": phase},
    }
    if node:
        doc["spec"]["nodeName"] = node
    return next(iter_pods(doc))


def test_four_identical_nodes_at_half(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    nodes = [kube.node(f"n{i}", kube.EPYC) for i in range(4)]
    result = plan(ClusterInput(nodes=nodes), PlanOptions(performance_fraction=0.5), now=NOW)
    assert sorted(profiles(result).values()) == ["eco", "eco", "performance", "performance"]
    assert result.summary["performance"] == 2
    # equal density: ties go by name
    assert profiles(result)["n0"] == profiles(result)["n1"] == "performance"
    validate_all(result.twins, nodetwin_schema)


def test_five_at_0_6(kube: SimpleNamespace) -> None:
    nodes = [kube.node(f"n{i}", kube.EPYC) for i in range(5)]
    result = plan(ClusterInput(nodes=nodes), PlanOptions(performance_fraction=0.6), now=NOW)
    assert result.summary["performance"] == 3


def test_single_node_at_zero_stays_performance(kube: SimpleNamespace) -> None:
    result = plan(ClusterInput(nodes=[kube.node("only")]), PlanOptions(performance_fraction=0.0), now=NOW)
    assert profiles(result) == {"only": "performance"}
    assert result.summary["performanceTarget"] == 0


def test_family_floor_keeps_one_performance_node_per_family(
    kube: SimpleNamespace, nodetwin_schema: dict[str, Any]
) -> None:
    nodes = (
        [kube.gpu_node(f"h100-{i}", kube.H100, "nvidia.com/gpu", 8) for i in range(3)]
        + [kube.gpu_node(f"mi300x-{i}", kube.MI300X, "amd.com/gpu", 8) for i in range(2)]
        + [kube.node(f"cpu-{i}", kube.EPYC) for i in range(4)]
    )
    result = plan(ClusterInput(nodes=nodes), PlanOptions(performance_fraction=0.0), now=NOW)
    perf = sorted(n for n, p in profiles(result).items() if p == "performance")
    assert perf == ["cpu-0", "h100-0", "mi300x-0"]
    assert result.summary["families"] == 3
    validate_all(result.twins, nodetwin_schema)


def test_density_order_picks_the_densest_node(kube: SimpleNamespace) -> None:
    small = kube.node("a-small", kube.EPYC, cpu="64")
    big = kube.node("z-big", kube.EPYC, cpu="192")
    result = plan(ClusterInput(nodes=[small, big]), PlanOptions(performance_fraction=0.5), now=NOW)
    assert profiles(result) == {"a-small": "eco", "z-big": "performance"}


def test_eligibility(kube: SimpleNamespace) -> None:
    nodes = [
        kube.node("a", {**kube.EPYC, "pool": "x"}),
        kube.node("b", {**kube.EPYC, "joulie.io/reserved": "true", "pool": "x"}),
        kube.node("c", {**kube.EPYC, "pool": "x"}, unschedulable=True),
        kube.node("d", {**kube.EPYC, "pool": "y"}),
        kube.node("e", {**kube.EPYC, "joulie.io/reserved": "false", "pool": "x"}),
    ]
    result = plan(ClusterInput(nodes=nodes), PlanOptions(selector={"pool": "x"}), now=NOW)
    assert sorted(profiles(result)) == ["a", "e"]
    assert result.ineligible == [
        ("b", "reserved (joulie.io/reserved=true)"),
        ("c", "unschedulable (cordoned)"),
        ("d", "does not match the selector pool=x"),
    ]
    # no selector: every node but the reserved and cordoned ones
    assert sorted(profiles(plan(ClusterInput(nodes=nodes), PlanOptions(), now=NOW))) == ["a", "d", "e"]
    exists = plan(ClusterInput(nodes=nodes), PlanOptions(selector={"pool": None, "nope": None}), now=NOW)
    assert exists.twins == [] and ("a", "does not match the selector (no label nope)") in exists.ineligible


def test_draining_guard(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    nodes = [kube.node(f"n{i}", kube.EPYC) for i in range(4)]
    pods = [
        pod("p1", "n3"),  # running performance pod on an eco node -> draining
        pod("p2", "n2", phase="Succeeded"),  # finished: ignored
        pod("p3", "n2", performance=False),  # standard: ignored
    ]
    result = plan(ClusterInput(nodes=nodes, pods=pods), PlanOptions(), now=NOW)
    twins = by_node(result)
    n3 = twins["n3"]
    assert n3["spec"]["profile"] == "eco" and n3["spec"]["scheduling"] == {"draining": True}
    assert n3["status"]["schedulableClass"] == "draining"
    assert n3["spec"]["cpu"] == {"packagePowerCapPctOfMax": 60}  # eco caps while draining
    assert twins["n2"]["status"]["schedulableClass"] == "eco"
    assert result.summary["draining"] == 1
    validate_all(result.twins, nodetwin_schema)


def test_queue_aware_from_pods(kube: SimpleNamespace) -> None:
    nodes = [kube.node(f"n{i}", kube.EPYC) for i in range(10)]
    opts = PlanOptions(policy="queue-aware", queue_base_fraction=0.1)
    pods = [pod(f"p{i}", None, phase="Pending") for i in range(45)]
    result = plan(ClusterInput(nodes=nodes, pods=pods), opts, now=NOW)
    assert result.summary["performancePods"] == 45 and result.summary["performance"] == 5
    assert by_node(result)["n0"]["spec"]["policy"] == {"name": "queue-aware-v1"}
    # a Deployment template counts its replicas; finished pods do not count
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "annotations": {"joulie.io/workload-class": "performance"}},
        "spec": {"replicas": 30, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    pods = [*iter_pods(deployment), pod("done", None, phase="Succeeded")]
    result = plan(ClusterInput(nodes=nodes, pods=pods), opts, now=NOW)
    assert result.summary["performance"] == 3


@pytest.mark.parametrize(
    ("labels", "resources", "count", "source"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
         {"nvidia.com/gpu": "8"}, 8, "nvidia.com/gpu.count"),
        # single MIG strategy: the resource counts MIG devices, the product carries -MIG-
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.count": "56"},
         {"nvidia.com/gpu": "56"}, 8, "nvidia.com/gpu.count: 56 MIG devices 1g.10gb, 7 per GPU"),
        # mixed MIG strategy
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
         {"nvidia.com/mig-3g.40gb": "16"}, 8, "nvidia.com/gpu.count"),
        # time-slicing with renaming
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.count": "8"},
         {"nvidia.com/gpu.shared": "32"}, 8, "nvidia.com/gpu.count"),
        # DRA: no resource at all
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}, {}, 8,
         "nvidia.com/gpu.count"),
        # Intel under the device plugin's shared-dev-num: the NFD count wins
        ({"gpu.intel.com/product": "Flex_170", "gpu.intel.com/device.count": "4"},
         {"gpu.intel.com/i915": "16", "gpu.intel.com/i915_monitoring": "1", "gpu.intel.com/millicores": "4000"},
         4, "gpu.intel.com/device.count"),
        ({"joulie.io/hw.gpu-count": "2"}, {"vendor.example/gpu": "3"}, 2, "joulie.io/hw.gpu-count"),
        ({}, {"vendor.example/gpu": "3"}, 3, "resources"),
    ],
)
def test_gpu_counts(
    kube: SimpleNamespace, labels: dict[str, str], resources: dict[str, str], count: int, source: str
) -> None:
    result = plan(ClusterInput(nodes=[kube.node("g", labels, resources)]), PlanOptions(), now=NOW)
    (row,) = result.nodes
    assert (row["gpuCount"], row["gpuCountSource"]) == (count, source)
    assert result.twins[0]["metadata"]["annotations"]["joulectl.io/gpu-count"] == f"{count} ({source})"


def test_gfd_suffix_is_stripped_for_family_and_catalog(kube: SimpleNamespace) -> None:
    a = kube.node("a", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}, {"nvidia.com/gpu": "56"})
    b = kube.node("b", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.count": "8"})
    result = plan(ClusterInput(nodes=[a, b]), PlanOptions(), now=NOW)
    assert {r["family"] for r in result.nodes} == {"gpu:NVIDIA_H100_SXM"}


def test_power_domains_multiply_the_per_gpu_maximum(kube: SimpleNamespace) -> None:
    # four MI250X packages, eight GCDs: the 560 W range holds a package
    hw = kube.nodehardware("m", count=8, domains=4, model="AMD_INSTINCT_MI250X", min_w=0, max_w=560)
    node = kube.gpu_node("m", {"amd.com/gpu.product": "AMD_Instinct_MI250X"}, "amd.com/gpu", 8)
    result = plan(ClusterInput(nodes=[node], hardware={"m": hw}), PlanOptions(), now=NOW)
    pm = result.twins[0]["status"]["powerMeasurement"]
    assert pm["gpuTdpW"] == 4 * 560
    assert result.nodes[0]["powerDomains"] == 4


def test_upstream_twin_example(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    """joulie-reference §1.1: an H100 NVL node in eco with 1500 W measured, CPU TDP from 5 W/core."""
    node = kube.node("kwok-h100-nvl-0", {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}, {"nvidia.com/gpu": "8"})
    hw = kube.nodehardware("kwok-h100-nvl-0", count=8, model="NVIDIA_H100_NVL", min_w=200, max_w=400,
                           cores=192, sockets=2)
    # a denser node of the same family takes the performance slot
    perf = kube.node("perf", {**kube.EPYC, "nvidia.com/gpu.product": "NVIDIA-H100-NVL"}, {"nvidia.com/gpu": "8"})
    cluster = ClusterInput(nodes=[node, perf], hardware={"kwok-h100-nvl-0": hw},
                           telemetry={"kwok-h100-nvl-0": 1500.0}, telemetry_given=True)
    result = plan(cluster, PlanOptions(absolute_caps=True), now=NOW)
    twin = by_node(result)["kwok-h100-nvl-0"]
    assert twin["spec"] == {
        "nodeName": "kwok-h100-nvl-0",
        "profile": "eco",
        "cpu": {},
        "gpu": {"powerCap": {"scope": "perGpu", "capPctOfMax": 60, "capWattsPerGpu": 240}},
        "policy": {"name": "static-partition-v1"},
        "scheduling": {"draining": False},
    }
    status = twin["status"]
    assert status["powerMeasurement"] == {
        "source": "prometheus", "measuredNodePowerW": 1500, "cpuCappedPowerW": 960, "gpuCappedPowerW": 1920,
        "nodeCappedPowerW": 2880, "cpuTdpW": 960, "gpuTdpW": 3200, "nodeTdpW": 4160, "powerTrendWPerMin": 0,
    }
    assert status["predictedPowerHeadroomScore"] == pytest.approx(47.9167)
    assert status["predictedCoolingStressScore"] == pytest.approx(36.0577)
    assert status["effectiveCapState"] == {"cpuPct": 100, "gpuPct": 60}
    assert status["hardwareDensityScore"] == 100
    assert status["estimatedPUE"] == pytest.approx(1.1762)
    assert status["lastUpdated"] == "2026-03-13T12:00:00Z"
    # the other node has no measurement in the telemetry
    assert by_node(result)["perf"]["status"]["powerMeasurement"]["source"] == "prometheus-no-data"
    validate_all(result.twins, nodetwin_schema)


def test_headroom_goes_negative_over_budget(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    node = kube.node("c", kube.EPYC)  # 720 W TDP; performance (single node) -> budget 720 W
    result = plan(ClusterInput(nodes=[node], telemetry={"c": 900.0}, telemetry_given=True), PlanOptions(), now=NOW)
    status = result.twins[0]["status"]
    assert status["predictedPowerHeadroomScore"] == pytest.approx(-25.0)
    assert status["predictedCoolingStressScore"] == 100
    validate_all(result.twins, nodetwin_schema)


def test_ambient_from_facility_and_cooling_zone(kube: SimpleNamespace) -> None:
    nodes = [
        kube.node("a", {**kube.EPYC, "joulie.io/cooling-zone": "cold"}),
        kube.node("b", {**kube.EPYC, "joulie.io/cooling-zone": "hot"}),
    ]
    facility = {"ambientC": 20.0, "coolingZones": [{"name": "cold", "offsetC": 0}, {"name": "hot", "offsetC": 25}]}
    cluster = ClusterInput(nodes=nodes, telemetry={"a": 360.0, "b": 360.0}, telemetry_given=True, facility=facility)
    twins = by_node(plan(cluster, PlanOptions(performance_fraction=1.0), now=NOW))
    assert twins["a"]["status"]["predictedCoolingStressScore"] == 50  # 360/720 at 20 °C
    assert twins["b"]["status"]["predictedCoolingStressScore"] == 100  # at 45 °C


def test_psu_from_rack_budget(kube: SimpleNamespace) -> None:
    nodes = [kube.gpu_node(f"g{i}", {**kube.H100, "joulie.io/rack": "r1"}, "nvidia.com/gpu", 8) for i in range(5)]
    twins = plan(ClusterInput(nodes=nodes), PlanOptions(performance_fraction=1.0), now=NOW).twins
    # 5 x (720 + 5600) W in the rack = 31.6 kW of 50 kW
    assert twins[0]["status"]["predictedPsuStressScore"] == pytest.approx(63.2)


def test_names_are_sanitised(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    result = plan(ClusterInput(nodes=[kube.node("Node_A/1")]), PlanOptions(), now=NOW)
    assert result.twins[0]["metadata"]["name"] == "node-a-1"
    assert result.twins[0]["spec"]["nodeName"] == "Node_A/1"
    validate_all(result.twins, nodetwin_schema)


def test_colliding_names_are_an_error(kube: SimpleNamespace) -> None:
    with pytest.raises(InputError, match="share the NodeTwin name 'node-a'"):
        plan(ClusterInput(nodes=[kube.node("node-a"), kube.node("Node_A")], source="n.yaml"), PlanOptions())


def test_invalid_options_are_input_errors(kube: SimpleNamespace) -> None:
    cluster = ClusterInput(nodes=[kube.node("a")])
    with pytest.raises(InputError, match="--policy: unknown policy 'rule-swap'"):
        plan(cluster, PlanOptions(policy="rule-swap"))
    with pytest.raises(InputError, match=r"--performance-fraction: must be between 0 and 1, got 1\.5"):
        plan(cluster, PlanOptions(performance_fraction=1.5))
    with pytest.raises(InputError, match="--gpu-eco-pct: must be between 0 and 100, got 120"):
        plan(cluster, PlanOptions(gpu_eco_pct=120))
    with pytest.raises(InputError, match="--gpu-governor: unknown GPU governor preset 'fast'"):
        plan(cluster, PlanOptions(gpu_governor={"eco": "fast"}))
    with pytest.raises(InputError, match="--model-caps: X: maxCapWatts must be a number above 0"):
        plan(cluster, PlanOptions(model_caps={"X": {"maxCapWatts": "350"}}))


def test_fleet_summary(kube: SimpleNamespace) -> None:
    nodes = [kube.gpu_node(f"h{i}", kube.H100, "nvidia.com/gpu", 8) for i in range(2)]
    nodes.append(kube.node("r", {**kube.EPYC, "joulie.io/reserved": "true"}))
    s = plan(ClusterInput(nodes=nodes), PlanOptions(), now=NOW).summary
    # each H100 node: 720 W CPU (EPYC 9654 x2) + 8 x 700 W GPU; eco GPUs at 60 % (420 W of 700)
    assert s["profiles"]["performance"] == {"nodes": 1, "tdpW": 6320, "plannedW": 6320}
    assert s["profiles"]["eco"] == {"nodes": 1, "tdpW": 6320, "plannedW": 720 + 8 * 420}
    assert (s["nodes"], s["planned"], s["ineligible"]) == (3, 2, 1)
    assert s["allPerformanceW"] == 12640 and s["savingW"] == 8 * 280
    assert s["savingPct"] == pytest.approx(2240 / 12640 * 100, abs=1e-4)


def test_every_twin_of_a_heterogeneous_fleet_validates(kube: SimpleNamespace, nodetwin_schema: dict[str, Any]) -> None:
    nodes = [
        kube.gpu_node("h100", kube.H100, "nvidia.com/gpu", 8),
        kube.gpu_node("mi300x", kube.MI300X, "amd.com/gpu", 8),
        kube.gpu_node("l40s", kube.L40S, "nvidia.com/gpu", 4),
        kube.gpu_node("flex", {"gpu.intel.com/product": "Flex_170"}, "gpu.intel.com/xe", 4),
        kube.node("cpu", kube.EPYC),
        kube.node("vm", {}, cpu="8"),
        kube.node("bare", {}, cpu="0"),
    ]
    hw = {"l40s": kube.nodehardware("l40s", count=4, model="NVIDIA_L40S", control=False)}
    for opts in (
        PlanOptions(),
        PlanOptions(absolute_caps=True, gpu_governor={"eco": "efficient", "performance": "auto"}),
        PlanOptions(policy="queue-aware", cpu_eco_cap_on_uncappable_gpu_nodes=True, absolute_caps=True),
        PlanOptions(gpu_eco_pct=0, cpu_eco_pct=0, performance_fraction=0),
    ):
        result = plan(ClusterInput(nodes=nodes, hardware=hw), opts, now=NOW)
        assert len(result.twins) == len(nodes)
        validate_all(result.twins, nodetwin_schema)


def test_garbage_collector_is_restored(kube: SimpleNamespace) -> None:
    import gc

    assert gc.isenabled()
    plan(ClusterInput(nodes=[kube.node("a")]), PlanOptions(), now=NOW)
    assert gc.isenabled()
    with pytest.raises(InputError):
        plan(ClusterInput(nodes=[kube.node("a")]), PlanOptions(policy="nope"))
    assert gc.isenabled()
    gc.disable()
    try:
        plan(ClusterInput(nodes=[kube.node("a")]), PlanOptions(), now=NOW)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()



KINDS = [
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "8"}),
    ({"amd.com/gpu.product": "AMD_Instinct_MI300X"}, {"amd.com/gpu": "8"}),
    ({"gpu.intel.com/product": "Flex_170"}, {"gpu.intel.com/xe": "4"}),
    ({"joulie.io/hw.cpu-model": "AMD EPYC 9654"}, {}),
    ({}, {}),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fleet=st.lists(st.tuples(st.integers(0, len(KINDS) - 1), st.booleans(), st.booleans()), min_size=1, max_size=25),
    fraction=st.floats(0, 1),
    absolute=st.booleans(),
)
def test_plan_invariants(
    kube: SimpleNamespace,
    nodetwin_schema: dict[str, Any],
    fleet: list[tuple[int, bool, bool]],
    fraction: float,
    absolute: bool,
) -> None:
    """Random fleets: the performance count is n·F rounded either way (the exact rule is pinned by
    the hand-worked table in test_partition_table.py) raised to the family count, every family
    keeps a performance node, reserved and cordoned nodes get no twin, every twin validates."""
    import math

    nodes = []
    for i, (kind, reserved, cordoned) in enumerate(fleet):
        labels, resources = KINDS[kind]
        extra = {"joulie.io/reserved": "true"} if reserved else {}
        nodes.append(kube.node(f"n{i:02d}", {**labels, **extra}, resources, unschedulable=cordoned))
    result = plan(ClusterInput(nodes=nodes), PlanOptions(performance_fraction=fraction, absolute_caps=absolute),
                  now=NOW)
    planned = [n for n, (_, reserved, cordoned) in zip(nodes, fleet, strict=True) if not reserved and not cordoned]
    assert len(result.twins) == len(planned) and len(result.ineligible) == len(nodes) - len(planned)
    families = {r["family"] for r in result.nodes}
    perf_families = {r["family"] for r in result.nodes if r["profile"] == "performance"}
    n = len(planned)
    low, high = (min(max(r, len(families)), n) for r in (math.floor(n * fraction), math.ceil(n * fraction)))
    assert low <= result.summary["performance"] <= high
    assert perf_families == families
    validate_all(result.twins, nodetwin_schema)


def test_twin_names_of_names_already_valid_and_of_names_at_the_edges(kube: SimpleNamespace) -> None:
    """A name of [a-z0-9-] starting and ending alphanumeric is its own NodeTwin name (the planner
    skips sanitising it); a dash at an end, a dot or a capital still goes through the sanitiser."""
    names = ["a", "x1-2", "-b-", "c-", "d.e", "Fg", "9"]
    result = plan(ClusterInput(nodes=[kube.node(n) for n in names]), PlanOptions(), now=NOW)
    assert {t["spec"]["nodeName"]: t["metadata"]["name"] for t in result.twins} == {
        "a": "a", "x1-2": "x1-2", "-b-": "b", "c-": "c", "d.e": "d-e", "Fg": "fg", "9": "9"}
