"""Kubernetes objects as joulectl reads them: quantities, GPU resources, pods and their templates,
workload classes, node GPU counts and products, and HAMi's GPU register annotation.

Shared by ``plan`` and ``schedule-check`` (and the simulator's ``render-nodes``) so that every
component reads GPU resources the same way (seed gpu-support-nvidia-amd-intel.txt, "Shared and
partitioned GPUs").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from joulectl.catalog import strip_gfd_suffix

# -- quantities -------------------------------------------------------------------------------

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9,
            "T": 1e12, "P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkKMGTPE]?)$")


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity (``500m``, ``2Ki``, ``256M``, ``1.5``, ``1e3``) as a float.

    Raises ValueError for anything else (including NaN and infinities).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _QUANTITY.match(str(value).strip())
        if not m:
            raise ValueError(f"not a quantity: {value!r}")
        base, suffix = m.groups()
        number = float(base) * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    if not math.isfinite(number):
        raise ValueError(f"not a finite quantity: {value!r}")
    return number


# -- GPU resources ----------------------------------------------------------------------------

#: Resources that belong to GPU device plugins but are not GPUs.
NOT_GPU_RESOURCES = frozenset(
    {
        "gpu.intel.com/i915_monitoring",
        "gpu.intel.com/xe_monitoring",
        "gpu.intel.com/millicores",
        "gpu.intel.com/memory.max",
        "gpu.intel.com/tiles",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "nvidia.com/priority",
    }
)
_MIG = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")


@dataclass(frozen=True)
class GpuResource:
    """How one extended resource counts as GPUs.

    ``kind`` is ``whole`` (one unit = one GPU), ``mig`` (one MIG device = ``slices``/7 of a GPU)
    or ``shared`` (a time-sliced replica, counted as one unit of its resource).
    """

    name: str
    vendor: str  # nvidia | amd | intel | other
    kind: str  # whole | mig | shared
    weight: float  # GPUs per unit, an estimate for MIG slices

    @property
    def is_whole(self) -> bool:
        return self.kind == "whole"


def gpu_resource(name: str) -> GpuResource | None:
    """Classify an extended resource name; None when it is not a GPU resource."""
    key = name.strip().lower()
    if key in NOT_GPU_RESOURCES:
        return None
    if key == "nvidia.com/gpu":
        return GpuResource(key, "nvidia", "whole", 1.0)
    if key == "nvidia.com/gpu.shared":
        return GpuResource(key, "nvidia", "shared", 1.0)
    m = _MIG.match(key)
    if m:
        return GpuResource(key, "nvidia", "mig", min(int(m.group(1)), 7) / 7.0)
    if key == "amd.com/gpu":
        return GpuResource(key, "amd", "whole", 1.0)
    if key in ("gpu.intel.com/i915", "gpu.intel.com/xe"):
        return GpuResource(key, "intel", "whole", 1.0)
    if key.endswith("/gpu"):
        return GpuResource(key, "other", "whole", 1.0)
    return None


def gpu_resources(resources: Mapping[str, Any] | None) -> dict[str, float]:
    """The GPU resources of a capacity/allocatable/requests map, as ``{name: units}``.

    Unparsable quantities are skipped (a node export is not ours to reject).
    """
    out: dict[str, float] = {}
    if not isinstance(resources, Mapping):
        return out
    for name, qty in resources.items():
        res = gpu_resource(str(name))
        if res is None:
            continue
        try:
            out[res.name] = parse_quantity(qty)
        except ValueError:
            continue
    return out


# -- nodes --------------------------------------------------------------------------------------

#: Label keys that name the GPU product, in Joulie's order (GPU_PRODUCT_LABEL_KEYS) plus Intel's.
GPU_PRODUCT_LABEL_KEYS = (
    "joulie.io/gpu.product",
    "joulie.io/hw.gpu-model",
    "nvidia.com/gpu.product",
    "amd.com/gpu.product",
    "amd.com/gpu.family",
    "gpu.intel.com/product",
)


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in (labels or {}).items()} if isinstance(labels, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in (ann or {}).items()} if isinstance(ann, Mapping) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def node_gpu_product(labels: Mapping[str, str]) -> str | None:
    """The node's GPU product from its labels, without GFD suffixes."""
    for key in GPU_PRODUCT_LABEL_KEYS:
        value = labels.get(key)
        if value:
            return strip_gfd_suffix(value)
    return None


def _positive_int(value: Any) -> int | None:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def node_gpu_count(node: Mapping[str, Any], hardware: Mapping[str, Any] | None = None) -> tuple[int, str]:
    """The node's physical GPU count and where it came from (seed precedence).

    1. its NodeHardware ``status.gpu.count``; 2. ``joulie.io/hw.gpu-count``; 3. GFD's
    ``nvidia.com/gpu.count`` unless the product is suffixed ``-MIG-`` (the single MIG strategy then
    counts MIG devices); 4. ``gpu.intel.com/device.count``; 5. the units of the node's GPU resources
    (allocatable, else capacity), which count MIG devices, partitions and replicas.
    """
    if hardware:
        hw_status = hardware.get("status") if isinstance(hardware, Mapping) else None
        gpu = (hw_status.get("gpu") or {}) if isinstance(hw_status, Mapping) else {}
        n = _positive_int(gpu.get("count")) if isinstance(gpu, Mapping) else None
        if n is not None:
            return n, "nodehardware"
        if isinstance(gpu, Mapping) and gpu.get("count") == 0 and gpu.get("present") is False:
            return 0, "nodehardware"
    labels = labels_of(node)
    n = _positive_int(labels.get("joulie.io/hw.gpu-count"))
    if n is not None:
        return n, "joulie.io/hw.gpu-count"
    product = labels.get("nvidia.com/gpu.product", "")
    n = _positive_int(labels.get("nvidia.com/gpu.count"))
    if n is not None and "-MIG-" not in product.upper():
        return n, "nvidia.com/gpu.count"
    n = _positive_int(labels.get("gpu.intel.com/device.count"))
    if n is not None:
        return n, "gpu.intel.com/device.count"
    status = node.get("status") if isinstance(node, Mapping) else None
    if not isinstance(status, Mapping):
        status = {}
    resources = status.get("allocatable") or status.get("capacity") or {}
    units = sum(gpu_resources(resources).values())
    if units > 0:
        return math.ceil(units - 1e-9), "resources"
    return 0, "none"


# -- pods -----------------------------------------------------------------------------------------

POD_TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController")


@dataclass(frozen=True)
class PodRef:
    """A pod, or the pod template of a workload object, as found in a file."""

    kind: str  # Pod, Deployment, ... (the object the spec came from)
    name: str
    namespace: str
    annotations: dict[str, str]
    labels: dict[str, str]
    spec: dict[str, Any]
    replicas: int = 1
    #: ``status.phase`` of a Pod ("" for templates and pods without a status).
    phase: str = ""
    #: the Pod carries ``metadata.deletionTimestamp`` (it is terminating).
    deleting: bool = False


def iter_pods(doc: Any, label: str = "<input>") -> Iterator[PodRef]:
    """Pods and pod templates of a Kubernetes object (List and *List objects are walked).

    Raises ValueError for an object that is not a Kubernetes object carrying a pod spec.
    """
    if not isinstance(doc, Mapping) or "kind" not in doc:
        raise ValueError("not a Kubernetes object (no kind)")
    kind = str(doc.get("kind"))
    if kind == "List" or (kind.endswith("List") and isinstance(doc.get("items"), list)):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ValueError(f"{kind}: items is not a list")
        for item in items:
            yield from iter_pods(item, label)
        return
    meta = doc.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ValueError(f"{kind}: metadata is not a mapping")
    name = str(meta.get("name") or meta.get("generateName") or "")
    namespace = str(meta.get("namespace") or "default")
    spec = doc.get("spec")
    template: Any
    replicas = 1
    if kind == "Pod":
        template = {"metadata": meta, "spec": spec}
    elif kind == "PodTemplate":
        template = doc.get("template")
    elif kind in POD_TEMPLATE_KINDS:
        template = spec.get("template") if isinstance(spec, Mapping) else None
        if isinstance(spec, Mapping) and kind != "DaemonSet":
            r = spec.get("replicas", spec.get("parallelism", 1))
            replicas = r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else 1
    elif kind == "CronJob":
        job = spec.get("jobTemplate") if isinstance(spec, Mapping) else None
        jspec = job.get("spec") if isinstance(job, Mapping) else None
        template = jspec.get("template") if isinstance(jspec, Mapping) else None
    else:
        raise ValueError(f"kind {kind} carries no pod spec")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise ValueError(f"{kind} {name}: no pod template spec")
    tmeta = template.get("metadata") or {}
    annotations = dict(annotations_of({"metadata": tmeta}))
    if kind != "Pod":  # the workload's own annotations apply too; the template's win
        annotations = {**annotations_of(doc), **annotations}
    yield PodRef(
        kind=kind,
        name=name,
        namespace=namespace,
        annotations=annotations,
        labels=labels_of({"metadata": tmeta}),
        spec=dict(template["spec"]),
        replicas=replicas,
        phase=_pod_phase(doc) if kind == "Pod" else "",
        deleting=kind == "Pod" and bool(meta.get("deletionTimestamp")),
    )


def _pod_phase(doc: Mapping[str, Any]) -> str:
    status = doc.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return str(phase) if phase else ""


WORKLOAD_CLASS_ANNOTATION = "joulie.io/workload-class"
POWER_PROFILE_LABEL = "joulie.io/power-profile"


def workload_class(annotations: Mapping[str, str]) -> tuple[str, str | None]:
    """``performance`` or ``standard`` (default), and a note when another value was given."""
    raw = annotations.get(WORKLOAD_CLASS_ANNOTATION)
    if raw is None or raw == "":
        return "standard", None
    value = raw.strip().lower()
    if value in ("performance", "standard"):
        return value, None
    return "standard", f"{WORKLOAD_CLASS_ANNOTATION}={raw!r} is not performance or standard: treated as standard"


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    def sub(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else None

    terms = sub(sub(sub(spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution")
    terms = sub(terms, "nodeSelectorTerms")
    return [t for t in terms if isinstance(t, Mapping)] if isinstance(terms, list) else []


def pod_excludes_eco(pod: PodRef, profile_label: str = POWER_PROFILE_LABEL) -> bool:
    """Joulie's PodExcludesEco: the pod must not run on an eco node (joulie-reference §2.4)."""
    if pod.annotations.get(WORKLOAD_CLASS_ANNOTATION, "").strip().lower() == "performance":
        return True
    selector = pod.spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and str(selector.get(profile_label, "")) == "performance":
        return True
    for term in _required_terms(pod.spec):
        exprs = term.get("matchExpressions")
        for expr in exprs if isinstance(exprs, list) else []:
            if not isinstance(expr, Mapping) or expr.get("key") != profile_label:
                continue
            raw_values = expr.get("values")
            values = [str(v) for v in raw_values] if isinstance(raw_values, list) else []
            op = expr.get("operator")
            if op == "NotIn" and "eco" in values:
                return True
            if op == "In" and values and "eco" not in values:
                return True
    return False


# -- HAMi -----------------------------------------------------------------------------------------

HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"


@dataclass(frozen=True)
class HamiGpu:
    """One GPU of HAMi's ``hami.io/node-nvidia-register`` annotation."""

    uuid: str
    count: int
    memory_mib: int
    cores: int
    type: str  # e.g. "NVIDIA-NVIDIA A40"
    numa: int
    healthy: bool


def parse_hami_register(value: str) -> list[HamiGpu]:
    """Parse ``UUID,count,mem,cores,type,numa,health:`` records; malformed records are skipped."""
    gpus: list[HamiGpu] = []
    for record in value.split(":"):
        fields = [f.strip() for f in record.split(",")]
        if len(fields) < 7 or not fields[0]:
            continue
        try:
            gpus.append(
                HamiGpu(
                    uuid=fields[0],
                    count=int(fields[1]),
                    memory_mib=int(fields[2]),
                    cores=int(fields[3]),
                    type=fields[4],
                    numa=int(fields[5]),
                    healthy=fields[6].lower() == "true",
                )
            )
        except ValueError:
            continue
    return gpus


def format_hami_register(gpus: list[HamiGpu]) -> str:
    """The annotation value for ``gpus`` (each record ends with ``:``, as HAMi writes it)."""
    return "".join(
        f"{g.uuid},{g.count},{g.memory_mib},{g.cores},{g.type},{g.numa},{'true' if g.healthy else 'false'}:"
        for g in gpus
    )


def sanitize_name(name: str) -> str:
    """Joulie's NodeTwin object name: lowercase, ``[^a-z0-9-]`` -> ``-``, ``-`` trimmed."""
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
