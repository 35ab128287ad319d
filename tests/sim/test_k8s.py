"""render-nodes: Kubernetes Nodes for every GPU exposure, Intel i915/xe, AMD, HAMi; NodeHardware."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from joulectl.sim.clusterspec import parse_spec
from joulectl.sim.k8s import label_value, node_hardware, node_list, node_object
from tests.sim.conftest import spec_doc


def _node(profile: str, overrides: dict[str, Any] | None = None, **pool: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"name": "n", "profile": profile, **pool}
    if overrides:
        p["overrides"] = overrides
    return node_object(parse_spec(spec_doc([p]), "x").nodes[0])


def _gpu(exposure: str) -> dict[str, Any]:
    return _node("nvidia-h100-sxm-8gpu", {"gpus": {"exposure": exposure}})


GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb",
                 "nvidia.com/mig-3g.40gb")


@pytest.mark.parametrize(("exposure", "resources", "product", "count", "strategy"), [
    ("whole", {"nvidia.com/gpu": "8"}, "NVIDIA-H100-80GB-HBM3", "8", "none"),
    ("mig-single", {"nvidia.com/gpu": "56"}, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "56", "single"),
    ("mig-mixed", {"nvidia.com/mig-3g.40gb": "8", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-1g.10gb": "16"},
     "NVIDIA-H100-80GB-HBM3", "8", "mixed"),
    ("timeslice-rename", {"nvidia.com/gpu.shared": "32"}, "NVIDIA-H100-80GB-HBM3", "8", "none"),
    ("timeslice-norename", {"nvidia.com/gpu": "32"}, "NVIDIA-H100-80GB-HBM3-SHARED", "8", "none"),
    ("dra", {}, "NVIDIA-H100-80GB-HBM3", "8", "none"),
])
def test_every_nvidia_exposure(exposure: str, resources: dict[str, str], product: str, count: str,
                               strategy: str) -> None:
    node = _gpu(exposure)
    cap = node["status"]["capacity"]
    assert {k: v for k, v in cap.items() if k in GPU_RESOURCES} == resources
    assert node["status"]["allocatable"] == cap
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.count"] == count
    assert labels["nvidia.com/mig.strategy"] == strategy
    assert labels["joulie.io/hw.gpu-count"] == "8" and labels["joulie.io/hw.gpu-model"] == "NVIDIA_H100_SXM"
    if exposure.startswith("timeslice"):
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_hami_register_annotation() -> None:
    ann = _gpu("whole")["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    parts = ann.split(":")
    assert parts[-1] == "" and len(parts) == 9
    assert parts[0] == "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,0,true"
    assert parts[7].endswith(",NVIDIA-NVIDIA H100 80GB HBM3,1,true")


def test_intel_i915_and_xe_nodes() -> None:
    i915 = _node("intel-flex-170-4gpu")
    assert i915["status"]["capacity"]["gpu.intel.com/i915"] == "4"
    labels = i915["metadata"]["labels"]
    assert labels["gpu.intel.com/product"] == "Flex_170"
    assert labels["gpu.intel.com/family"] == "Flex_Series"
    assert labels["gpu.intel.com/device.count"] == "4"
    xe = _node("intel-flex-170-4gpu", {"gpus": {"intel": {"driver": "xe"}}})
    assert xe["status"]["capacity"]["gpu.intel.com/xe"] == "4"
    assert "gpu.intel.com/i915" not in xe["status"]["capacity"]


def test_amd_and_cpu_nodes() -> None:
    mi = _node("amd-instinct-mi250x-4gpu")
    assert mi["status"]["capacity"]["amd.com/gpu"] == "8"
    assert mi["metadata"]["labels"]["amd.com/gpu.product"] == "AMD_Instinct_MI250X"
    assert "hami.io/node-nvidia-register" not in mi["metadata"]["annotations"]
    vm = _node("vm-no-powercap", kwok=False)
    assert vm["status"]["capacity"]["cpu"] == "8" and vm["status"]["capacity"]["memory"] == "33554432Ki"
    assert vm["spec"] == {} and "kwok.x-k8s.io/node" not in vm["metadata"]["annotations"]
    assert vm["metadata"]["labels"]["feature.node.kubernetes.io/cpu-model.name"] == "Intel_Xeon_Processor_Icelake"


def test_kwok_annotation_taint_and_spec_labels() -> None:
    node = _node("intel-xeon-2s-rapl", rack="r1")
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["annotations"]["sim.joulie.io/profile"] == "intel-xeon-2s-rapl"
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    labels = node["metadata"]["labels"]
    assert labels["joulie.io/rack"] == "r1" and labels["sim.joulie.io/pool"] == "n"
    assert labels["feature.node.kubernetes.io/cpu-model.name"] == "INTEL_XEON_GOLD_6530"
    assert labels["joulie.io/hw.cpu-model"] == "INTEL_XEON_GOLD_6530"


def test_label_value_sanitising() -> None:
    assert label_value("AMD EPYC 9654 96-Core Processor") == "AMD_EPYC_9654_96-Core_Processor"
    assert label_value("Intel(R) Xeon(R) 6960P") == "Intel_Xeon_6960P"
    assert len(label_value("x" * 100)) == 63


def test_render_nodes_cli_yaml_and_json(cli, write_spec: Callable[..., str]) -> None:
    path = write_spec(spec_doc(
        [{"name": exp.replace("timeslice-", "ts-"), "profile": "nvidia-h100-sxm-8gpu",
          "overrides": {"gpus": {"exposure": exp}}}
         for exp in ("whole", "mig-single", "mig-mixed", "timeslice-rename", "timeslice-norename", "dra")]
        + [{"name": "i915", "profile": "intel-flex-170-4gpu"},
           {"name": "xe", "profile": "intel-flex-170-4gpu", "overrides": {"gpus": {"intel": {"driver": "xe"}}}}]))
    r = cli("simulate", "render-nodes", path)
    assert r.exit_code == 0
    doc = yaml.safe_load(r.stdout)
    assert doc["kind"] == "List" and len(doc["items"]) == 8
    assert [i["metadata"]["name"] for i in doc["items"]] == ["whole-0", "mig-single-0", "mig-mixed-0", "ts-rename-0",
                                                             "ts-norename-0", "dra-0", "i915-0", "xe-0"]
    j = cli("simulate", "render-nodes", path, "-o", "json")
    assert j.exit_code == 0 and json.loads(j.stdout) == doc
    bad = cli("simulate", "render-nodes", path, "-o", "table")
    assert bad.exit_code == 2


def test_node_list_of_the_smoke_spec() -> None:
    from joulectl.sim.clusterspec import load_spec

    lst = node_list(load_spec("examples/sim/smoke.yaml").nodes)
    assert [n["metadata"]["labels"]["sim.joulie.io/cluster"] for n in lst["items"]] == ["smoke"] * 3


def test_node_hardware_object() -> None:
    spec = parse_spec(spec_doc([{"name": "a", "profile": "amd-instinct-mi250x-4gpu"}]), "x")
    nhw = node_hardware(spec.nodes[0])
    assert nhw["kind"] == "NodeHardware" and nhw["spec"] == {"nodeName": "a-0"}
    gpu = nhw["status"]["gpu"]
    assert (gpu["count"], gpu["powerDomains"]) == (8, 4)
    # power1_cap_min 0 is an unknown minimum (issue 13), as discover reports it
    assert gpu["capRangePerGpu"] == {"maxWatts": 560.0, "defaultWatts": 560.0}
    assert nhw["status"]["cpu"]["controlAvailable"] is False  # energy-only zones
    assert nhw["status"]["inventoryResolution"]["hardwareCatalogKey"] == {"cpu": "AMD_EPYC_9654",
                                                                          "gpu": "AMD_INSTINCT_MI250X"}


def test_node_ids_are_the_uuid5_of_the_name_they_always_were() -> None:
    """The ids are made from hashlib directly (issue 20): the values main printed with uuid.uuid5
    before that change, literally, and uuid.uuid5 itself on names of every shape."""
    import random
    import uuid

    from joulectl.sim.k8s import _ID_NAMESPACE, node_ids, uuid5_hex

    assert node_ids("h100-0") == {"bootID": "a6cf95ee-f595-5655-bcea-ef09511d33ec",
                                  "machineID": "21bcd4c6cf6356aeadf408b058475f71",
                                  "systemUUID": "e244d376-1569-56a2-a5f3-f218c821d61a"}
    assert node_ids("gpu-node.rack-7.example.com") == {"bootID": "e919c61c-0e49-530f-85b1-06b2f76ed1ad",
                                                       "machineID": "e324232e52bb500f828400119dcc756d",
                                                       "systemUUID": "035c5c8d-2d33-505a-9a02-28a1924fc0aa"}
    rng = random.Random(20)
    alphabet = "abcz09-./_ é€😀\x00"
    names = ["", "a", "x" * 253, *(f"node-{i}" for i in range(300)),
             *("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80))) for _ in range(700))]
    for name in names:
        assert uuid5_hex(name) == uuid.uuid5(_ID_NAMESPACE, name).hex, name
        ids = node_ids(name)
        assert ids["bootID"] == str(uuid.uuid5(_ID_NAMESPACE, f"{name}/boot")), name
        assert ids["systemUUID"] == str(uuid.uuid5(_ID_NAMESPACE, f"{name}/system")), name
