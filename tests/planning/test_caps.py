"""Caps per profile (SPEC §7): GPU cap and no CPU cap on GPU nodes, CPU cap on CPU-only nodes,
uncappable GPU nodes, absolute caps from hardware, catalog and model caps, governors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from joulectl.catalog import normalize
from joulectl.planning.caps import plan_caps
from joulectl.planning.hardware import NodeFacts, node_facts
from joulectl.planning.options import ModelCap, PlanOptions, parse_model_caps


def facts(
    obj: dict[str, Any],
    hw: dict[str, Any] | None = None,
    caps: dict[str, ModelCap] | None = None,
    sustained: frozenset[str] = frozenset(),
) -> NodeFacts:
    return node_facts(obj, hw, caps or {}, sustained)


def test_gpu_node_gets_gpu_cap_and_no_cpu_cap(kube: SimpleNamespace) -> None:
    f = facts(kube.gpu_node("g", kube.H100, "nvidia.com/gpu", 8))
    eco = plan_caps(f, "eco", PlanOptions())
    assert eco.cpu == {}
    assert eco.gpu == {"powerCap": {"scope": "perGpu", "capPctOfMax": 60}}
    assert (eco.cpu_pct, eco.gpu_pct) == (100.0, 60.0)
    perf = plan_caps(f, "performance", PlanOptions())
    assert perf.cpu == {} and perf.gpu == {"powerCap": {"scope": "perGpu", "capPctOfMax": 100}}


def test_cpu_only_node_gets_cpu_cap(kube: SimpleNamespace) -> None:
    f = facts(kube.node("c", kube.EPYC))
    assert plan_caps(f, "eco", PlanOptions()).cpu == {"packagePowerCapPctOfMax": 60}
    assert plan_caps(f, "performance", PlanOptions()).cpu == {"packagePowerCapPctOfMax": 100}
    assert plan_caps(f, "eco", PlanOptions(cpu_eco_pct=45)).cpu == {"packagePowerCapPctOfMax": 45}
    assert plan_caps(f, "eco", PlanOptions()).gpu is None


def test_cpu_absolute_from_catalog_tdp_times_sockets(kube: SimpleNamespace) -> None:
    f = facts(kube.node("c", kube.EPYC))  # EPYC 9654: TDP 360 W, 2 sockets -> max 720, min 396
    opts = PlanOptions(absolute_caps=True)
    assert plan_caps(f, "eco", opts).cpu == {"packagePowerCapWatts": 432}
    assert plan_caps(f, "eco", PlanOptions(absolute_caps=True, cpu_eco_pct=30)).cpu == {"packagePowerCapWatts": 396}


def test_cpu_absolute_from_hardware_range(kube: SimpleNamespace) -> None:
    hw = kube.nodehardware("c", cpu_model="x", cpu_max_w=300, cpu_min_w=120)
    p = plan_caps(facts(kube.node("c"), hw), "eco", PlanOptions(absolute_caps=True))
    assert p.cpu == {"packagePowerCapWatts": 360}  # 0.6 x 600
    low = plan_caps(facts(kube.node("c"), hw), "eco", PlanOptions(absolute_caps=True, cpu_eco_pct=10))
    assert low.cpu == {"packagePowerCapWatts": 240}  # clamped to 2 x 120


def test_cpu_absolute_unknown_range_stays_pct(kube: SimpleNamespace) -> None:
    f = facts(kube.node("c", {"joulie.io/hw.cpu-model": "Mystery CPU"}))
    p = plan_caps(f, "eco", PlanOptions(absolute_caps=True))
    assert p.cpu == {"packagePowerCapPctOfMax": 60}
    assert "cap left in percent" in p.notes[0]


def test_l40s_through_model_caps_at_60_pct(kube: SimpleNamespace) -> None:
    caps = parse_model_caps({"NVIDIA-L40S": {"minCapWatts": 200, "maxCapWatts": 350}}, "caps.json")
    f = facts(kube.gpu_node("g", kube.L40S, "nvidia.com/gpu", 4), None, caps)
    assert f.model_cap == ModelCap(200.0, 350.0)
    p = plan_caps(f, "eco", PlanOptions(absolute_caps=True))
    assert p.gpu is not None and p.gpu["powerCap"]["capWattsPerGpu"] == 210
    # the catalog knows the L40S too and comes first, with the same answer
    assert p.gpu_cap_source == "catalog"


def test_model_caps_resolve_an_uncatalogued_product(kube: SimpleNamespace) -> None:
    caps = parse_model_caps({"NVIDIA-RTX-PRO-6000": {"minCapWatts": 200, "maxCapWatts": 350}}, "caps.json")
    labels = {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-SHARED", "nvidia.com/gpu.count": "2"}
    f = facts(kube.gpu_node("g", labels, "nvidia.com/gpu.shared", 8), None, caps)
    p = plan_caps(f, "eco", PlanOptions(absolute_caps=True))
    assert p.gpu == {"powerCap": {"scope": "perGpu", "capPctOfMax": 60, "capWattsPerGpu": 210}}
    assert p.gpu_cap_source == "model-caps"
    # min defaults to 1 W when the map gives none
    caps = parse_model_caps({"NVIDIA-RTX-PRO-6000": {"maxCapWatts": 300}}, "caps.json")
    f = facts(kube.gpu_node("g", labels, "nvidia.com/gpu", 2), None, caps)
    p = plan_caps(f, "eco", PlanOptions(absolute_caps=True, gpu_eco_pct=0.1))
    assert p.gpu is not None and p.gpu["powerCap"]["capWattsPerGpu"] == 1


def test_devices_of_200_to_350_w_at_60_pct(kube: SimpleNamespace) -> None:
    hw = kube.nodehardware("g", count=2, model="Some GPU", min_w=200, max_w=350)
    f = facts(kube.gpu_node("g", {}, "nvidia.com/gpu", 2), hw)
    p = plan_caps(f, "eco", PlanOptions(absolute_caps=True))
    assert p.gpu is not None and p.gpu["powerCap"]["capWattsPerGpu"] == 210
    assert p.gpu_cap_source == "nodehardware"


def test_catalog_value_lies_in_the_board_range(kube: SimpleNamespace) -> None:
    f = facts(kube.gpu_node("g", kube.L40S, "nvidia.com/gpu", 4))
    for pct in (1, 30, 60, 100):
        p = plan_caps(f, "eco", PlanOptions(absolute_caps=True, gpu_eco_pct=pct))
        assert p.gpu is not None and 200 <= p.gpu["powerCap"]["capWattsPerGpu"] <= 350


def test_unknown_model_gives_pct_only(kube: SimpleNamespace) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-Unknown-Board", "nvidia.com/gpu.count": "2"}
    p = plan_caps(facts(kube.gpu_node("g", labels, "nvidia.com/gpu", 2)), "eco", PlanOptions(absolute_caps=True))
    assert p.gpu == {"powerCap": {"scope": "perGpu", "capPctOfMax": 60}}
    assert p.notes[0] == ("GPU model NVIDIA-Unknown-Board is not in the catalog: budgets assume a generic 350 W GPU"
                          " (min 175 W)")
    assert "no cap range" in p.notes[1]


def test_zero_pct_means_no_gpu_intent(kube: SimpleNamespace) -> None:
    p = plan_caps(facts(kube.gpu_node("g", kube.H100, "nvidia.com/gpu", 8)), "eco", PlanOptions(gpu_eco_pct=0))
    assert p.gpu is None and p.cpu == {}


def test_pct_below_the_board_minimum_budgets_at_the_minimum(kube: SimpleNamespace) -> None:
    # H100 SXM: 350..700 W, so 40 % (280 W) resolves to 350 W per GPU, 50 % of max
    p = plan_caps(facts(kube.gpu_node("g", kube.H100, "nvidia.com/gpu", 8)), "eco", PlanOptions(gpu_eco_pct=40))
    assert p.gpu == {"powerCap": {"scope": "perGpu", "capPctOfMax": 40}}
    assert p.gpu_pct == pytest.approx(50.0)


def test_uncappable_gpu_node_gets_neither_cap(kube: SimpleNamespace) -> None:
    hw = kube.nodehardware("g", count=4, model="NVIDIA_L40S", control=False)
    f = facts(kube.gpu_node("g", kube.L40S, "nvidia.com/gpu", 4), hw)
    assert not f.gpu_cappable
    p = plan_caps(f, "eco", PlanOptions())
    assert p.gpu is None and p.cpu == {}
    assert "GPUs cannot be capped (GPU power control unavailable: power limit reads [N/A])" in p.notes


def test_uncappable_gpu_node_with_cpu_eco_cap_flag(kube: SimpleNamespace) -> None:
    hw = kube.nodehardware("g", count=4, model="NVIDIA_L40S", control=False)
    f = facts(kube.gpu_node("g", kube.L40S, "nvidia.com/gpu", 4), hw)
    p = plan_caps(f, "eco", PlanOptions(cpu_eco_cap_on_uncappable_gpu_nodes=True))
    assert p.gpu is None and p.cpu == {"packagePowerCapPctOfMax": 60}
    assert p.cpu_pct == 60


def test_gpu_without_a_settable_range_is_uncappable(kube: SimpleNamespace) -> None:
    # an Intel Flex under the out-of-tree i915: no rated_max, so no range
    hw = kube.nodehardware("f", count=4, model="INTEL_DATA_CENTER_GPU_FLEX_170")
    f = facts(kube.gpu_node("f", {"gpu.intel.com/product": "Flex_170"}, "gpu.intel.com/i915", 4), hw)
    assert not f.gpu_cappable and f.gpu_cap_note == "no settable GPU power limit range in NodeHardware"
    # the twin still budgets the GPUs from the catalog
    assert f.gpu_tdp_w == 4 * 150


def test_governor_when_the_gpus_accept_it(kube: SimpleNamespace) -> None:
    hw = kube.nodehardware("g", count=8, model="NVIDIA_H100_SXM", min_w=350, max_w=700,
                           presets=["auto", "efficient", "low", "peak"])
    f = facts(kube.gpu_node("g", kube.H100, "nvidia.com/gpu", 8), hw)
    opts = PlanOptions(gpu_governor={"eco": "efficient", "performance": "sustained"})
    eco = plan_caps(f, "eco", opts)
    assert eco.gpu is not None and eco.gpu["governor"] == "efficient"
    perf = plan_caps(f, "performance", opts)
    assert perf.gpu is not None and "governor" not in perf.gpu
    assert "not in the governor model presets" in perf.notes[0]
    # opted in through the governor model presets
    opted = facts(kube.gpu_node("g", kube.H100, "nvidia.com/gpu", 8), hw,
                  sustained=frozenset({normalize("NVIDIA_H100_SXM")}))
    perf = plan_caps(opted, "performance", opts)
    assert perf.gpu is not None and perf.gpu["governor"] == "sustained"


def test_governor_not_accepted(kube: SimpleNamespace) -> None:
    f = facts(kube.gpu_node("f", {"gpu.intel.com/product": "Flex_170"}, "gpu.intel.com/i915", 4))
    p = plan_caps(f, "eco", PlanOptions(gpu_governor={"eco": "low"}))
    assert p.gpu is not None and "governor" not in p.gpu
    assert p.notes == ["GPU governor low not set: the node's GPUs accept none"]


def test_governor_inferred_without_nodehardware(kube: SimpleNamespace) -> None:
    f = facts(kube.gpu_node("g", kube.L40S, "nvidia.com/gpu", 4))
    assert f.governor_presets == ("auto", "efficient", "low", "peak") and f.governor_source == "catalog"
    m = facts(kube.gpu_node("m", kube.MI300X, "amd.com/gpu", 8))
    assert "sustained" not in m.governor_presets
    opted_in = frozenset({normalize("AMD_Instinct_MI300X")})
    m = facts(kube.gpu_node("m", kube.MI300X, "amd.com/gpu", 8), sustained=opted_in)
    assert "sustained" in m.governor_presets


def test_a_devices_field_that_is_not_a_list_is_read_as_no_device_list(kube: SimpleNamespace) -> None:
    # A NodeHardware edited by hand (or by a fuzzer) with `devices: 1`: plan reads the GPU's own
    # fields and ignores the list, as it ignores any other field of the wrong type; it was a
    # TypeError ('int' object is not iterable), an internal error of `plan --hardware`.
    hw = kube.nodehardware("g", count=2, model="Some GPU", min_w=200, max_w=350)
    for bad in (1, 2.5, True, "abc"):
        hw["status"]["gpu"]["devices"] = bad
        f = facts(kube.gpu_node("g", {}, "nvidia.com/gpu", 2), hw)
        p = plan_caps(f, "eco", PlanOptions(absolute_caps=True))
        assert p.gpu is not None and p.gpu["powerCap"]["capWattsPerGpu"] == 210, bad
