"""Builders of Kubernetes Node and NodeHardware objects for the planning tests (fixture ``kube``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "crds" / "joulie.io_nodetwins.yaml"

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
MI300X = {"amd.com/gpu.product": "AMD_Instinct_MI300X"}
L40S = {"nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.count": "4"}
EPYC = {"joulie.io/hw.cpu-model": "AMD EPYC 9654", "joulie.io/hw.cpu-sockets": "2"}


def node(
    name: str,
    labels: dict[str, str] | None = None,
    resources: dict[str, str] | None = None,
    *,
    cpu: str = "192",
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node as ``kubectl get node -o yaml`` shows it (the parts planning reads)."""
    res = {"cpu": cpu, "memory": "1Ti", **(resources or {})}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj


def gpu_node(name: str, labels: dict[str, str], resource: str, count: int, **kw: Any) -> dict[str, Any]:
    return node(name, {**EPYC, **labels}, {resource: str(count)}, **kw)


def nodehardware(
    node_name: str,
    *,
    count: int = 0,
    model: str | None = None,
    raw_model: str | None = None,
    min_w: float | None = None,
    max_w: float | None = None,
    domains: int | None = None,
    control: bool = True,
    presets: list[str] | None = None,
    cpu_model: str | None = None,
    sockets: int = 2,
    cores: int = 192,
    cpu_max_w: float | None = None,
    cpu_min_w: float | None = None,
) -> dict[str, Any]:
    """A NodeHardware object in the layout ``discover -o yaml`` prints."""
    cpu: dict[str, Any] = {"model": cpu_model, "rawModel": cpu_model, "sockets": sockets, "totalCores": cores}
    if cpu_max_w is not None:
        cpu["capRange"] = {"type": "package", "minWattsPerSocket": cpu_min_w or 0, "maxWattsPerSocket": cpu_max_w}
    rng = {"minWatts": min_w, "maxWatts": max_w, "defaultWatts": max_w} if max_w is not None else None
    gpu: dict[str, Any] = {
        "present": count > 0,
        "model": model,
        "rawModel": raw_model or model,
        "count": count,
        "powerDomains": count if domains is None else domains,
        "capRangePerGpu": rng,
        "controlAvailable": control and count > 0,
        "governor": {"presets": list(presets or [])},
        "devices": [
            {
                "index": i,
                "busId": f"0000:{i + 1:02x}:00.0",
                "model": model,
                "rawModel": raw_model or model,
                "capRange": rng or {"minWatts": None, "maxWatts": None, "defaultWatts": None},
                "holdsLimit": True,
                "control": {"available": control, "reason": None if control else "power limit reads [N/A]"},
            }
            for i in range(count)
        ],
    }
    return {
        "apiVersion": "joulie.io/v1alpha1",
        "kind": "NodeHardware",
        "metadata": {"name": node_name},
        "spec": {"nodeName": node_name},
        "status": {"cpu": cpu, "gpu": gpu},
    }


@pytest.fixture(scope="session")
def nodetwin_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.fixture
def kube() -> SimpleNamespace:
    return SimpleNamespace(
        node=node, gpu_node=gpu_node, nodehardware=nodehardware, H100=H100, MI300X=MI300X, L40S=L40S, EPYC=EPYC
    )
