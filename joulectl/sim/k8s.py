"""Kubernetes objects for the nodes of a cluster spec: Node (``render-nodes``) and NodeHardware.

``node_object`` builds the Node a KWOK cluster (or ``plan --nodes``) takes: the spec's labels and
annotations, NFD/GFD-style hardware labels, capacity and allocatable with the GPU resources of the
profile's exposure (emulate-mode and gpu-support seeds):

========================  ==========================================  =======================================
exposure                  resources                                   ``nvidia.com/gpu.product`` / ``.count``
========================  ==========================================  =======================================
whole                     ``nvidia.com/gpu: N``                       product, N
mig-single                ``nvidia.com/gpu: N*k`` (k MIG devices)     product ``-MIG-<profile>``, N*k
mig-mixed                 ``nvidia.com/mig-<profile>: ...``           product, N
timeslice-rename          ``nvidia.com/gpu.shared: N*replicas``       product, N
timeslice-norename        ``nvidia.com/gpu: N*replicas``              product ``-SHARED``, N
dra                       none (DRA advertises ResourceSlices)        product, N
========================  ==========================================  =======================================

AMD nodes get ``amd.com/gpu``; Intel nodes ``gpu.intel.com/i915`` or ``gpu.intel.com/xe`` with
``gpu.intel.com/product``, ``family`` and ``device.count``. NVIDIA nodes carry HAMi's
``hami.io/node-nvidia-register`` annotation (``UUID,count,memMiB,cores,NVIDIA-<model>,numa,health:``
per GPU). ``node_hardware`` derives the NodeHardware ``joulectl discover -o yaml`` prints for
the node's rendered tree, from the profile alone.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from joulectl.sim.clusterspec import SpecNode

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
HAMI_SPLIT_COUNT = 10  # HAMi's default deviceSplitCount
HAMI_CORES = 100  # deviceCoreScaling 1 x 100
_DROP = re.compile(r"\((?:r|tm)\)|®|™", re.IGNORECASE)
_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """A Kubernetes label value from free text: ``(R)``/``(TM)`` dropped, other runs of invalid
    characters turned into ``_``, trimmed to 63 characters starting and ending alphanumeric."""
    value = _BAD.sub("_", _DROP.sub("", text).strip())
    value = re.sub(r"_+", "_", value)[:63]
    return value.strip("._-")


def gfd_product(name: str) -> str:
    """GPU feature discovery's product spelling: spaces become dashes (``NVIDIA-H100-80GB-HBM3``)."""
    return label_value(name.replace(" ", "-"))


def _mig_count(g: dict[str, Any]) -> int:
    mig = g.get("mig") or {}
    return int((mig.get("profiles") or {}).get(mig.get("single"), 1))


def _gpu_labels_resources(node: SpecNode) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(labels, resources, annotations) of the node's GPUs."""
    prof = node.profile
    g = prof.gpus
    n = prof.gpu_count
    labels: dict[str, str] = {}
    res: dict[str, str] = {}
    ann: dict[str, str] = {}
    if not n:
        return labels, res, ann
    vendor = prof.gpu_vendor
    model = str(g.get("model", ""))
    from joulectl import catalog

    entry = catalog.load().gpu(model)
    labels["joulie.io/hw.gpu-model"] = entry.key if entry else label_value(model)
    labels["joulie.io/hw.gpu-count"] = str(n)
    labels["joulie.io/gpu.product"] = gfd_product(model)
    if vendor == "nvidia":
        exposure = str(g.get("exposure", "whole"))
        product = gfd_product(model)
        mig = g.get("mig") or {}
        replicas = int((g.get("timeslice") or {}).get("replicas", 1))
        count = n
        if exposure == "whole":
            res["nvidia.com/gpu"] = str(n)
        elif exposure == "mig-single":
            k = _mig_count(g)
            single = str(mig.get("single"))
            product = f"{product}-MIG-{single}"
            count = n * k
            res["nvidia.com/gpu"] = str(n * k)
        elif exposure == "mig-mixed":
            for pname, per in (mig.get("mixed") or {}).items():
                res[f"nvidia.com/mig-{pname}"] = str(n * int(per))
        elif exposure == "timeslice-rename":
            res["nvidia.com/gpu.shared"] = str(n * replicas)
        elif exposure == "timeslice-norename":
            product = f"{product}-SHARED"
            res["nvidia.com/gpu"] = str(n * replicas)
        labels["nvidia.com/gpu.product"] = product[:63]
        labels["nvidia.com/gpu.count"] = str(count)
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.memory"] = str(int(g.get("memoryMiB", 0)))
        labels["nvidia.com/mig.capable"] = "true" if mig.get("capable") else "false"
        labels["nvidia.com/mig.strategy"] = {"mig-single": "single", "mig-mixed": "mixed"}.get(exposure, "none")
        shared = exposure.startswith("timeslice")
        labels["nvidia.com/gpu.replicas"] = str(replicas if shared else 1)
        labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing" if shared else "none"
        if exposure == "dra":
            labels["nvidia.com/gpu.deploy.dra"] = "true"
        sockets = int(prof.cpu.get("sockets", 1))
        parts = []
        for i, board in enumerate(prof.boards):
            mem = int((board.get("memory") or {}).get("total_bytes", 0)) >> 20
            numa = min(sockets - 1, i * sockets // max(1, n))
            parts.append(f"{board['uuid']},{HAMI_SPLIT_COUNT},{mem},{HAMI_CORES},NVIDIA-{board.get('name', model)},"
                         f"{numa},true:")
        ann["hami.io/node-nvidia-register"] = "".join(parts)
    elif vendor == "amd":
        res["amd.com/gpu"] = str(n)
        labels["amd.com/gpu.product"] = label_value(model.replace(" ", "_"))
        labels["amd.com/gpu.product-name"] = label_value(model.replace(" ", "_"))
        labels["amd.com/gpu.device-id"] = str(g.get("pciDeviceId", "")).removeprefix("0x")
    elif vendor == "intel":
        it = g.get("intel") or {}
        driver = str(it.get("driver", "i915"))
        res[f"gpu.intel.com/{driver}"] = str(n)
        labels["gpu.intel.com/product"] = label_value(str(it.get("product", model)))
        if it.get("family"):
            labels["gpu.intel.com/family"] = label_value(str(it["family"]))
        labels["gpu.intel.com/device.count"] = str(n)
    return labels, res, ann


def node_object(node: SpecNode) -> dict[str, Any]:
    """The Kubernetes Node of one spec node (KWOK-ready when the spec says ``kwok``)."""
    prof = node.profile
    cpu = prof.cpu
    from joulectl import catalog

    cpu_entry = catalog.load().cpu(cpu.get("catalogKey") or cpu.get("model"))
    labels: dict[str, str] = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/cpu-model.name": label_value(str(cpu.get("model", ""))),
        "joulie.io/hw.cpu-model": cpu_entry.key if cpu_entry else label_value(str(cpu.get("model", ""))),
        "joulie.io/hw.cpu-sockets": str(cpu.get("sockets", 1)),
        "joulie.io/hw.cpu-cores": str(int(cpu.get("sockets", 1)) * int(cpu.get("coresPerSocket", 1))),
    }
    if cpu.get("virtual"):
        labels["feature.node.kubernetes.io/cpu-hardware_multithreading"] = "false"
        labels["feature.node.kubernetes.io/cpu-model.hypervisor"] = "true"
    if node.kwok:
        labels["type"] = "kwok"
    gpu_labels, gpu_res, gpu_ann = _gpu_labels_resources(node)
    # hardware labels first, then the spec's (profile, defaults, pool, rack, zone, cluster, pool)
    labels.update(gpu_labels)
    labels.update(node.labels)
    annotations = dict(node.annotations)
    annotations.update(gpu_ann)
    if node.kwok:
        annotations[KWOK_ANNOTATION] = "fake"
        annotations["node.alpha.kubernetes.io/ttl"] = "0"
    mem_gib = int((prof.data.get("node") or {}).get("memoryGiB", 64))
    capacity = {
        "cpu": str(prof.logical_cpus),
        "memory": f"{mem_gib * 1024 * 1024}Ki",
        "pods": str(int((prof.data.get("node") or {}).get("pods", 110))),
        "ephemeral-storage": "1Ti",
        **gpu_res,
    }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(sorted(labels.items())),
                     "annotations": dict(sorted(annotations.items()))},
        "spec": {"taints": [dict(KWOK_TAINT)]} if node.kwok else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": _node_info(node.name, str((prof.data.get("node") or {}).get("kernel", "")), node.kwok),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    }
    return obj


def node_list(nodes: list[SpecNode]) -> dict[str, Any]:
    """A ``List`` of the Node objects (what ``kubectl apply -f -`` and ``plan --nodes`` take)."""
    return {"apiVersion": "v1", "kind": "List", "items": [node_object(n) for n in nodes]}


def _cap_range_gpu(node: SpecNode) -> tuple[float | None, float | None, float | None, float | None]:
    """(min, max, default, current) per-GPU cap in watts, as discover reads them."""
    prof = node.profile
    g = prof.gpus
    vendor = prof.gpu_vendor
    if vendor == "nvidia" and prof.boards:
        p = prof.boards[0].get("power") or {}
        tok = g.get("fieldSupport") or {}
        lo = None if "power.min_limit" in tok else p.get("min_limit_mw", 0) / 1000
        hi = None if "power.max_limit" in tok else p.get("max_limit_mw", 0) / 1000
        default = p.get("default_limit_mw", p.get("max_limit_mw", 0)) / 1000
        cur = p.get("enforced_limit_mw", p.get("default_limit_mw", 0)) / 1000
        return lo, hi, default, cur
    if vendor == "amd":
        pw = g.get("power") or {}
        hi = float(pw["maxW"])
        return float(pw.get("minW", 0)), hi, hi, float(pw.get("capW", hi))
    if vendor == "intel":
        rated = float((g.get("intel") or {})["ratedMaxW"])
        return None, rated, rated, rated
    return None, None, None, None


def node_hardware(node: SpecNode) -> dict[str, Any]:
    """The NodeHardware ``joulectl --root DIR/<node> discover -o yaml`` reports for the node's tree."""
    from joulectl import catalog

    prof = node.profile
    cpu = prof.cpu
    freq = cpu.get("cpufreq") or {}
    cat = catalog.load()
    cpu_entry = cat.cpu(cpu.get("model"))
    zones = (cpu.get("powercap") or {}).get("zones") or []
    pkg = next((z for z in zones if z.get("name") == "package"), None)
    pkg_lt = next((c for c in (pkg or {}).get("constraints") or [] if c.get("name") == "long_term"), None)
    driver = freq.get("driver") if freq.get("driver") not in (None, "none") else None
    cpu_status: dict[str, Any] = {
        "rawModel": cpu.get("model"),
        "model": cpu_entry.key if cpu_entry else None,
        "vendor": cpu.get("vendor"),
        "sockets": int(cpu["sockets"]),
        "totalCores": int(cpu["sockets"]) * int(cpu["coresPerSocket"]),
        "coresPerSocket": int(cpu["coresPerSocket"]),
        "threads": prof.logical_cpus,
        "driverFamily": driver,
        "controlAvailable": pkg_lt is not None and not pkg_lt.get("locked"),
        "telemetryAvailable": pkg is not None,
    }
    if pkg_lt is not None and "maxW" in pkg_lt:
        cpu_status["capRange"] = {"type": "package", "maxWattsPerSocket": float(pkg_lt["maxW"])}
    if driver:
        max_khz = int(freq.get("turboMaxKHz") or freq.get("maxKHz", 0))
        cpu_status["landmarks"] = {"minFreqMHz": int(freq.get("minKHz", 0)) / 1000,
                                   "nominalFreqMHz": int(freq.get("baseKHz") or max_khz) / 1000,
                                   "maxBoostMHz": max_khz / 1000}
    status: dict[str, Any] = {"host": {"hostname": node.name,
                                       "kernel": (prof.data.get("node") or {}).get("kernel"),
                                       "virtual": bool(cpu.get("virtual"))},
                              "cpu": {k: v for k, v in cpu_status.items() if v is not None}}
    n = prof.gpu_count
    gpu_key = None
    if n:
        g = prof.gpus
        lo, hi, default, cur = _cap_range_gpu(node)
        entry = cat.gpu(str(g.get("model", "")))
        gpu_key = entry.key if entry else None
        domains = n // 2 if g.get("secondaryDies") else n
        cap: dict[str, Any] = {}
        if lo:  # a minimum of 0 (amdgpu power1_cap_min on MI250X/MI300X) is unknown, as discover says
            cap["minWatts"] = lo
        if hi is not None:
            cap["maxWatts"] = hi
            cap["defaultWatts"] = default
        status["gpu"] = {
            "present": True, "rawModel": g.get("model"), "model": gpu_key, "vendor": prof.gpu_vendor,
            "count": n, "powerDomains": domains, "capRangePerGpu": cap, "currentCapWatts": cur,
            "controlAvailable": hi is not None,
        }
        if prof.gpu_vendor == "nvidia" and prof.boards and cur is not None:
            # the enforced limit, as discover reads it: held at the board's platform limit when lower
            platform = (prof.boards[0].get("power") or {}).get("platform_limit_mw")
            status["gpu"]["enforcedCapWatts"] = min(cur, platform / 1000) if platform is not None else cur
    else:
        status["gpu"] = {"present": False, "count": 0, "powerDomains": 0, "controlAvailable": False}
    status["inventoryResolution"] = {
        "hardwareCatalogKey": {k: v for k, v in (("cpu", cpu_entry.key if cpu_entry else None), ("gpu", gpu_key))
                               if v},
    }
    status["capabilities"] = {
        "cpuControl": status["cpu"]["controlAvailable"],
        "gpuControl": status["gpu"]["controlAvailable"],
        "cpuTelemetry": status["cpu"]["telemetryAvailable"],
    }
    return {"apiVersion": "joulie.io/v1alpha1", "kind": "NodeHardware", "metadata": {"name": node.name},
            "spec": {"nodeName": node.name}, "status": status}


#: The namespace of the ids a rendered Node reports (uuid5 of the node name: stable across renders).
_ID_NAMESPACE = uuid.UUID("6a1e3b52-4c3f-4f0e-9d7e-2f1b0c9a8d11")
#: SHA-1 fed with the namespace's bytes: each id continues a copy of it (what uuid.uuid5 hashes first).
_ID_SHA1 = hashlib.sha1(_ID_NAMESPACE.bytes, usedforsecurity=False)


def uuid5_hex(name: str) -> str:
    """``uuid.uuid5(_ID_NAMESPACE, name).hex``, bit for bit, from :mod:`hashlib` directly: the
    digest's first 16 bytes with the version (5) and the RFC 4122 variant set, without building a
    :class:`uuid.UUID` (which took three quarters of the time of a 100,000-node ClusterSpec's ids)."""
    h = _ID_SHA1.copy()
    h.update(name.encode("utf-8"))
    d = bytearray(h.digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x50
    d[8] = (d[8] & 0x3F) | 0x80
    return d.hex()


def _dashed(hex32: str) -> str:
    """A UUID's 32 hex digits in the 8-4-4-4-12 form ``str(uuid.UUID)`` prints."""
    return f"{hex32[:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:]}"


def node_ids(name: str) -> dict[str, str]:
    """The ids of ``status.nodeInfo`` that differ from node to node: derived from the node name
    (each is ``uuid.uuid5`` of the name and a suffix in :data:`_ID_NAMESPACE`)."""
    return {
        "bootID": _dashed(uuid5_hex(f"{name}/boot")),
        "machineID": uuid5_hex(f"{name}/machine"),
        "systemUUID": _dashed(uuid5_hex(f"{name}/system")),
    }


def _node_info(name: str, kernel: str, kwok: bool) -> dict[str, str]:
    """``status.nodeInfo`` with every field the Node schema requires (strict validation): ids
    derived from the node name (the same every render), KWOK's fake versions on a KWOK node."""
    version = "fake" if kwok else "v1.31.0"
    info = {
        "architecture": "amd64",
        "containerRuntimeVersion": "fake://1.0" if kwok else "containerd://1.7.22",
        "kernelVersion": kernel,
        "kubeProxyVersion": version,
        "kubeletVersion": version,
        "operatingSystem": "linux",
        "osImage": "joulectl simulate",
        **node_ids(name),
    }
    return dict(sorted(info.items()))  # the keys in the order they always had
