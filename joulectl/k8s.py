"""Kubernetes objects as joulectl reads them: quantities, GPU resources, pods and their templates,
workload classes, node GPU counts and products, and HAMi's GPU register annotation.

Shared by ``plan`` and ``schedule-check`` (and the simulator's ``render-nodes``) so that every
component reads GPU resources the same way (seed gpu-support-nvidia-amd-intel.txt, "Shared and
partitioned GPUs").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from joulectl.catalog import mig_instances_per_gpu, mig_profile_of, strip_gfd_suffix

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

#: Resources that belong to GPU device plugins but are not GPUs (HAMi's memory and core shares are
#: read by the card-level fit of :mod:`joulectl.scheduling.hami`, not counted as GPUs).
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
_MIG = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb(\+me)?$")
_RESOURCE_NAME = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9A-Z]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")
_LABEL_KEY = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")


@dataclass(frozen=True)
class GpuResource:
    """How one extended resource counts as GPUs.

    ``kind`` is ``whole`` (one unit = one GPU), ``mig`` (one MIG device = ``slices``/7 of a GPU),
    ``shared`` (a time-sliced replica, counted as one unit of its resource) or ``share`` (a
    configured share resource: ``weight`` GPUs per unit, 1/UNITS).
    """

    name: str
    vendor: str  # nvidia | amd | intel | other
    kind: str  # whole | mig | shared | share
    weight: float  # GPUs per unit, an estimate for MIG slices

    @property
    def is_whole(self) -> bool:
        return self.kind == "whole"


def _vendor_of(name: str) -> str:
    domain = name.partition("/")[0]
    if domain.endswith("nvidia.com"):
        return "nvidia"
    if domain.endswith("amd.com"):
        return "amd"
    if domain.endswith("intel.com"):
        return "intel"
    return "other"


#: The environment variables of the GPU configuration (used when the flag is not given).
ENV_GPU_RESOURCES = "JOULECTL_GPU_RESOURCES"
ENV_GPU_SHARE_RESOURCES = "JOULECTL_GPU_SHARE_RESOURCES"
ENV_GPU_PRODUCT_LABEL_KEYS = "JOULECTL_GPU_PRODUCT_LABEL_KEYS"


@dataclass(frozen=True)
class GpuConfig:
    """The GPU resources and product labels a fleet uses beyond the built-in ones.

    ``resources`` count whole GPUs (one unit, one GPU); ``share_resources`` map a resource to the
    units that make one GPU (1000 milli-GPUs, 100 cores); ``product_labels`` are label keys naming
    the GPU model, read after the built-in ones (:data:`GPU_PRODUCT_LABEL_KEYS`).
    """

    resources: frozenset[str] = frozenset()
    share_resources: tuple[tuple[str, float], ...] = ()
    product_labels: tuple[str, ...] = ()

    @property
    def label_keys(self) -> tuple[str, ...]:
        return GPU_PRODUCT_LABEL_KEYS + tuple(k for k in self.product_labels if k not in GPU_PRODUCT_LABEL_KEYS)

    @property
    def shares(self) -> dict[str, float]:
        return dict(self.share_resources)


def parse_gpu_config(
    resources: Iterable[str] | None = None,
    share_resources: Iterable[str] | None = None,
    product_labels: Iterable[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> GpuConfig:
    """The configuration of ``--gpu-resource``, ``--gpu-share-resource`` and ``--gpu-product-label``;
    a flag not given falls back to its environment variable (comma-separated).

    Raises ValueError naming the flag (``--gpu-resource: ...``) for an invalid name."""
    import os

    env = os.environ if env is None else env

    def values(given: Iterable[str] | None, var: str) -> list[str]:
        items = list(given or [])
        if not items and env.get(var):
            items = [env[var]]
        return [v.strip() for raw in items for v in str(raw).split(",") if v.strip()]

    whole: set[str] = set()
    for name in values(resources, ENV_GPU_RESOURCES):
        if not _RESOURCE_NAME.match(name):
            raise ValueError(f"--gpu-resource: {name!r} is not a resource name (like example.com/gpu)")
        whole.add(name.lower())
    shares: dict[str, float] = {}
    for item in values(share_resources, ENV_GPU_SHARE_RESOURCES):
        name, sep, units = item.partition("=")
        name = name.strip()
        if not sep or not _RESOURCE_NAME.match(name):
            raise ValueError(
                f"--gpu-share-resource: expected NAME=UNITS (like example.com/gpu-milli=1000), got {item!r}"
            )
        try:
            per_gpu = float(units)
        except ValueError:
            per_gpu = float("nan")
        if not math.isfinite(per_gpu) or per_gpu <= 0:
            raise ValueError(f"--gpu-share-resource: UNITS of {name} must be a number above 0, got {units.strip()!r}")
        shares[name.lower()] = per_gpu
    both = sorted(whole & set(shares))
    if both:
        raise ValueError(f"--gpu-share-resource: {both[0]} is also given as --gpu-resource")
    keys: list[str] = []
    for key in values(product_labels, ENV_GPU_PRODUCT_LABEL_KEYS):
        if not _LABEL_KEY.match(key) or len(key.partition("/")[2] or key) > 63:
            raise ValueError(f"--gpu-product-label: {key!r} is not a label key")
        if key not in keys:
            keys.append(key)
    return GpuConfig(frozenset(whole), tuple(sorted(shares.items())), tuple(keys))


_config = GpuConfig()


def gpu_config() -> GpuConfig:
    """The GPU configuration in force (set by the commands from their flags)."""
    return _config


def set_gpu_config(config: GpuConfig) -> GpuConfig:
    """Put ``config`` in force for the process; returns the one it replaces."""
    global _config
    previous, _config = _config, config
    _classify.cache_clear()
    return previous


@contextmanager
def using_gpu_config(config: GpuConfig) -> Iterator[GpuConfig]:
    previous = set_gpu_config(config)
    try:
        yield config
    finally:
        set_gpu_config(previous)


def gpu_resource(name: str) -> GpuResource | None:
    """Classify an extended resource name; None when it is not a GPU resource."""
    return _classify(name)


@lru_cache(maxsize=4096)
def _classify(name: str) -> GpuResource | None:
    key = name.strip().lower()
    config = _config
    if key in config.resources:
        return GpuResource(key, _vendor_of(key), "whole", 1.0)
    per_gpu = config.shares.get(key)
    if per_gpu is not None:
        return GpuResource(key, _vendor_of(key), "share", 1.0 / per_gpu)
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
    """The node's GPU product from its labels (built-in keys, then ``--gpu-product-label`` keys),
    without GFD suffixes."""
    for key in _config.label_keys:
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


def _mapping(value: Any) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the ABC check's cost
        return value
    return value if isinstance(value, Mapping) else {}


def _physical(devices: float, per_gpu: int) -> int:
    return math.ceil(devices / per_gpu - 1e-9)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _resource_gpus(resources: Mapping[str, Any], labels: Mapping[str, Any]) -> tuple[float, list[str]]:
    """Physical GPUs the node's GPU resources stand for, and how the ones that are not whole GPUs
    were counted: ``nvidia.com/gpu`` under the single MIG strategy (MIG devices of the product's
    profile) or time-slicing without renaming (``nvidia.com/gpu.replicas`` each), MIG resources
    (their instances per GPU), shared replicas (``gpu.replicas`` each) and share resources (UNITS
    each)."""
    product = str(labels.get("nvidia.com/gpu.product") or "")
    base = strip_gfd_suffix(product)
    single = mig_profile_of(product)
    replicas = _positive_int(labels.get("nvidia.com/gpu.replicas")) or 1
    total = 0.0
    how: list[str] = []
    for name, units in gpu_resources(resources).items():
        res = _classify(name)
        if res is None or units <= 0:
            continue
        if name == "nvidia.com/gpu" and single:
            per = mig_instances_per_gpu(base, single)
            total += _physical(units, per)
            how.append(f"{_fmt(units)} MIG devices {single}, {per} per GPU")
        elif res.kind == "mig":
            profile = name.removeprefix("nvidia.com/mig-")
            per = mig_instances_per_gpu(base, profile)
            total += units / per
            how.append(f"{_fmt(units)} {name}, {per} per GPU")
        elif res.kind == "shared" or (name == "nvidia.com/gpu" and product.upper().endswith("-SHARED")):
            total += units / replicas
            how.append(f"{_fmt(units)} {name}, {replicas} per GPU")
        elif res.kind == "share":
            total += units * res.weight
            how.append(f"{_fmt(units)} {name}, {_fmt(1.0 / res.weight)} per GPU")
        else:
            total += units
    return total, how


def node_gpu_count(node: Mapping[str, Any], hardware: Mapping[str, Any] | None = None) -> tuple[int, str]:
    """The node's physical GPU count and where it came from (seed precedence).

    1. its NodeHardware ``status.gpu.count``; 2. ``joulie.io/hw.gpu-count``; 3. GFD's
    ``nvidia.com/gpu.count``, which under the single MIG strategy (product suffixed
    ``-MIG-<profile>``) counts MIG devices: divided by the profile's instances per GPU (an H100's
    ``1g.10gb``: 7); 4. ``gpu.intel.com/device.count``; 5. the node's GPU resources (allocatable,
    else capacity), MIG devices, replicas and shares turned into the GPUs they stand for.
    A MIG device is never counted as a GPU.
    """
    if hardware:
        gpu = _mapping(_mapping(_mapping(hardware).get("status")).get("gpu"))
        n = _positive_int(gpu.get("count"))
        if n is not None:
            return n, "nodehardware"
        if gpu.get("count") == 0 and gpu.get("present") is False:
            return 0, "nodehardware"
    labels = labels_of(node)
    n = _positive_int(labels.get("joulie.io/hw.gpu-count"))
    if n is not None:
        return n, "joulie.io/hw.gpu-count"
    product = labels.get("nvidia.com/gpu.product", "")
    n = _positive_int(labels.get("nvidia.com/gpu.count"))
    if n is not None:
        profile = mig_profile_of(product)
        if profile is not None:
            per = mig_instances_per_gpu(strip_gfd_suffix(product), profile)
            return _physical(n, per), f"nvidia.com/gpu.count: {n} MIG devices {profile}, {per} per GPU"
        if "-MIG-" not in product.upper():  # -MIG-INVALID: the count says nothing physical
            return n, "nvidia.com/gpu.count"
    n = _positive_int(labels.get("gpu.intel.com/device.count"))
    if n is not None:
        return n, "gpu.intel.com/device.count"
    status = _mapping(node.get("status") if isinstance(node, Mapping) else None)
    resources = status.get("allocatable") or status.get("capacity") or {}
    gpus, how = _resource_gpus(_mapping(resources), labels)
    if gpus > 0:
        return _physical(gpus, 1), "resources" + (f": {'; '.join(how)}" if how else "")
    return 0, "none"


#: Label namespaces whose GPU-looking keys joulectl knows (GFD, NFD, the vendors', Joulie's, HAMi's).
KNOWN_LABEL_PREFIXES = (
    "nvidia.com/", "amd.com/", "beta.amd.com/", "gpu.intel.com/", "feature.node.kubernetes.io/", "joulie.io/",
    "sim.joulie.io/", "joulectl.io/", "hami.io/",
)


class UnreadGpuNames:
    """Capacity names and label keys that look like GPUs (``gpu`` in the name, any case) and that
    joulectl does not read, counted over nodes: each becomes one warning naming the flag that would
    read it."""

    def __init__(self) -> None:
        self.resources: dict[str, int] = {}
        self.labels: dict[str, int] = {}
        self._resource_seen: dict[str, bool] = {}
        self._label_seen: dict[str, bool] = {}
        self._label_keys = frozenset(_config.label_keys)
        #: (capacity names, allocatable names, label keys) -> the names and keys of them counted
        self._shapes: dict[tuple[tuple[Any, ...], ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def _unread_resource(self, name: str) -> bool:
        seen = self._resource_seen.get(name)
        if seen is None:
            key = name.strip().lower()
            seen = "gpu" in key and _classify(key) is None and key not in NOT_GPU_RESOURCES
            self._resource_seen[name] = seen
        return seen

    def _unread_label(self, key: str) -> bool:
        seen = self._label_seen.get(key)
        if seen is None:
            seen = ("gpu" in key.lower() and key not in self._label_keys
                    and not key.startswith(KNOWN_LABEL_PREFIXES))
            self._label_seen[key] = seen
        return seen

    def add(self, node: Mapping[str, Any]) -> None:
        status = _mapping(node.get("status"))
        capacity, allocatable = _mapping(status.get("capacity")), _mapping(status.get("allocatable"))
        labels = _mapping(_mapping(node.get("metadata")).get("labels"))
        # Nodes of one kind have the same names and keys (not values): each shape is judged once.
        shape = (tuple(capacity), tuple(allocatable), tuple(labels))
        try:
            hit = self._shapes.get(shape)
        except TypeError:  # an unhashable key (YAML allows them): judged on its own
            hit = self._unread(capacity, allocatable, labels)
        else:
            if hit is None:
                hit = self._shapes[shape] = self._unread(capacity, allocatable, labels)
        for name in hit[0]:
            self.resources[name] = self.resources.get(name, 0) + 1
        for key in hit[1]:
            self.labels[key] = self.labels.get(key, 0) + 1

    def _unread(self, capacity: Mapping[str, Any], allocatable: Mapping[str, Any],
                labels: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The unread resource names (each once) and label keys of one node."""
        counted: dict[str, None] = {}
        for resources in (capacity, allocatable):
            for name in resources:
                if name not in counted and self._unread_resource(name):
                    counted[name] = None
        return tuple(counted), tuple(key for key in labels if self._unread_label(key))

    def warnings(self) -> list[str]:
        out = []
        for name, n in sorted(self.resources.items()):
            nodes = f"{n} node advertises" if n == 1 else f"{n} nodes advertise"
            out.append(
                f"{nodes} {name}, which joulectl does not read as GPUs: give --gpu-resource {name} if one unit "
                f"is one GPU, or --gpu-share-resource {name}=UNITS if UNITS make one GPU"
            )
        for key, n in sorted(self.labels.items()):
            nodes = f"{n} node carries" if n == 1 else f"{n} nodes carry"
            out.append(
                f"{nodes} the label {key}, which joulectl does not read: give --gpu-product-label {key} if it "
                "names the GPU model"
            )
        return out


def unread_gpu_names(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The warnings of :class:`UnreadGpuNames` over ``nodes``."""
    names = UnreadGpuNames()
    for node in nodes:
        names.add(node)
    return names.warnings()


#: The resources a vendor's device plugin advertises whole GPUs under.
VENDOR_WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe")


def expose_gpus_as(node: dict[str, Any], config: GpuConfig) -> dict[str, Any]:
    """``node`` as a fleet with its own device plugin shows it (``simulate render-nodes`` with the GPU
    flags): the vendor's whole-GPU resource renamed to the first ``--gpu-resource``, each
    ``--gpu-share-resource`` advertised as UNITS per GPU, the product copied to each
    ``--gpu-product-label``. Changed in place and returned."""
    meta = node.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    product = node_gpu_product(labels)
    count = _positive_int(labels.get("joulie.io/hw.gpu-count")) or 0
    status = node.get("status") or {}
    for section in ("capacity", "allocatable"):
        resources = status.get(section)
        if not isinstance(resources, dict):
            continue
        if config.resources:
            target = sorted(config.resources)[0]
            for name in VENDOR_WHOLE_GPU_RESOURCES:
                if name in resources:
                    resources[target] = resources.pop(name)
        for name, per_gpu in config.share_resources:
            if count:
                resources[name] = _fmt(count * per_gpu)
    if product:
        for key in config.product_labels:
            labels[key] = product
    return node


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


_NOT_NAME = re.compile(r"[^a-z0-9-]")


def sanitize_name(name: str) -> str:
    """Joulie's NodeTwin object name: lowercase, ``[^a-z0-9-]`` -> ``-``, ``-`` trimmed."""
    return _NOT_NAME.sub("-", name.lower()).strip("-")
