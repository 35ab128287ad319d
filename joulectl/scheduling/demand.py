"""What a pod asks for: workload class, GPU requests per resource, CPU and memory.

Kubernetes' effective request rules (joulie-reference §3 "Pod demand", seed "Shared and partitioned
GPUs"): per resource a container's request is its ``requests`` entry, else its ``limits`` entry (the
API server defaults requests to limits); containers add up; an init container runs alone, so init
containers contribute their maximum, not a sum (sidecars, init containers with
``restartPolicy: Always``, keep running and add up); ``spec.overhead`` is added.

GPU resources are classified by :func:`joulectl.k8s.gpu_resource`: ``nvidia.com/gpu``, MIG devices
(weighted g/7 of a GPU), shared replicas, ``amd.com/gpu``, ``gpu.intel.com/i915``/``xe`` and any
``*/gpu``; monitoring and share resources (``gpu.intel.com/i915_monitoring``, ``millicores``,
HAMi's ``nvidia.com/gpumem``/``gpucores``) are never counted as GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.k8s import PodRef, gpu_resource, parse_quantity, workload_class
from joulectl.scheduling import hami
from joulectl.scheduling.hami import ContainerRequest


@dataclass(frozen=True)
class PodDemand:
    """One pod (or pod template) and what it asks for."""

    pod: PodRef
    source: str  # the file it came from
    workload_class: str  # performance | standard
    gpu_requests: dict[str, int]  # GPU resource name -> device count (whole numbers)
    cpu_cores: float
    memory_bytes: float
    notes: tuple[str, ...] = field(default=())
    #: HAMi's request per container (None for a container without ``nvidia.com/gpu``)
    hami_requests: tuple[ContainerRequest | None, ...] = field(default=())
    #: the pod asks for HAMi's memory or core shares (``nvidia.com/gpumem``, ``gpucores``, ...)
    hami_only: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.pod.name or "<unnamed>"

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def label(self) -> str:
        """``Kind namespace/name`` for messages."""
        return f"{self.pod.kind} {self.namespace}/{self.name}"

    @property
    def gpus(self) -> float:
        """GPUs asked for, an estimate: MIG devices weighted g/7, a shared replica as one unit."""
        total = 0.0
        for name, units in self.gpu_requests.items():
            res = gpu_resource(name)
            if res is not None:
                total += units * res.weight
        return total

    @property
    def gpu_vendor(self) -> str | None:
        """``nvidia``, ``amd``, ``intel`` or ``other`` of the first GPU resource asked for."""
        for name in sorted(self.gpu_requests):
            res = gpu_resource(name)
            if res is not None and self.gpu_requests[name] > 0:
                return res.vendor
        return None

    @property
    def annotations(self) -> dict[str, str]:
        return self.pod.annotations


def _container_requests(
    container: Mapping[str, Any], where: str, source: str, pod_label: str
) -> dict[str, float]:
    """The effective requests of one container: ``requests`` first, then ``limits``, per resource."""
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise InputError("resources is not a mapping", file=source, field=f"{pod_label}: {where}.resources")
    out: dict[str, float] = {}
    for section in ("limits", "requests"):  # requests override limits
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise InputError(f"{section} is not a mapping", file=source, field=f"{pod_label}: {where}.resources")
        for raw_name, raw in values.items():
            name = str(raw_name).strip().lower()
            fld = f"{pod_label}: {where}.resources.{section}[{raw_name}]"
            try:
                value = parse_quantity(raw)
            except ValueError:
                raise InputError(f"not a valid quantity: {raw!r}", file=source, field=fld) from None
            if value < 0:
                raise InputError(f"a request cannot be negative, got {raw!r}", file=source, field=fld)
            if gpu_resource(name) is not None and not float(value).is_integer():
                raise InputError(
                    f"a GPU resource is counted in whole devices, got {raw!r}", file=source, field=fld
                )
            out[name] = value
    return out


def _add(total: dict[str, float], more: Mapping[str, float]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0.0) + v


def _pod_label(pod: PodRef) -> str:
    """How an error names the pod: ``Pod ml/train``."""
    return f"{pod.kind} {pod.namespace}/{pod.name or '<unnamed>'}"


def pod_requests(pod: PodRef, source: str) -> dict[str, float]:
    """The pod's effective requests per resource (lowercased names)."""
    label = _pod_label(pod)
    spec = pod.spec
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise InputError("containers is not a list", file=source, field=f"{label}: spec")
    total: dict[str, float] = {}
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping):
            raise InputError("not a mapping", file=source, field=f"{label}: spec.containers[{i}]")
        _add(total, _container_requests(c, f"spec.containers[{i}]", source, label))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for i, c in enumerate(inits):
        if not isinstance(c, Mapping):
            raise InputError("not a mapping", file=source, field=f"{label}: spec.initContainers[{i}]")
        req = _container_requests(c, f"spec.initContainers[{i}]", source, label)
        if str(c.get("restartPolicy", "")) == "Always":  # a sidecar: keeps running beside the rest
            _add(sidecars, req)
            continue
        running = dict(sidecars)
        _add(running, req)
        for k, v in running.items():
            init_peak[k] = max(init_peak.get(k, 0.0), v)
    _add(total, sidecars)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0.0), v)
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        for raw_name, raw in overhead.items():
            try:
                value = parse_quantity(raw)
            except ValueError:
                raise InputError(
                    f"not a valid quantity: {raw!r}", file=source, field=f"{label}: spec.overhead[{raw_name}]"
                ) from None
            _add(total, {str(raw_name).lower(): value})
    return total


_KIND = {dict: "a mapping", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
_REQUIRED_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def check_required_affinity(pod: PodRef, source: str) -> None:
    """Refuse a required node affinity without node selector terms, as the API server does
    (``ValidateNodeSelector``: "must have at least one node selector term"; kube-scheduler's
    ``NodeSelector`` ORs its terms, so an empty list would match no node, not every node).

    Only a requirement that is there (a mapping) is checked; ``null`` is no requirement."""
    affinity = pod.spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, Mapping) else None
    if not isinstance(required, Mapping):
        return
    terms = required.get("nodeSelectorTerms")
    if isinstance(terms, list) and terms:
        return
    if isinstance(terms, list):
        got = "an empty list"
    else:
        got = "nothing" if terms is None else _KIND.get(type(terms), "a value")
    raise InputError(f"must be a list of at least one node selector term, got {got}", file=source,
                     field=f"{_pod_label(pod)}: {_REQUIRED_AFFINITY}.nodeSelectorTerms")


def pod_demand(pod: PodRef, source: str) -> PodDemand:
    """Read one pod's demand; invalid requests raise :class:`InputError` naming file, pod and field."""
    check_required_affinity(pod, source)
    requests = pod_requests(pod, source)
    wclass, note = workload_class(pod.annotations)
    gpus: dict[str, int] = {}
    for name, value in sorted(requests.items()):
        if gpu_resource(name) is not None and value > 0:
            gpus[name] = round(value)
    per_container, hami_notes = hami.pod_requests(pod.spec)
    notes = ((note,) if note else ()) + tuple(hami_notes)
    return PodDemand(
        pod=pod,
        source=source,
        workload_class=wclass,
        gpu_requests=gpus,
        cpu_cores=requests.get("cpu", 0.0),
        memory_bytes=requests.get("memory", 0.0),
        notes=notes,
        hami_requests=per_container if any(r is not None for r in per_container) else (),
        hami_only=tuple(r for r in hami.HAMI_ONLY_RESOURCES if requests.get(r, 0.0) > 0),
    )
