"""What the planner knows about one node's hardware: from its NodeHardware when there is one, else
from its labels and resources, enriched from the catalog (joulie-reference §2.2, §2.6; SPEC §7).

Every fact carries where it came from, so a plan can say why a node got the numbers it got.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from joulectl import catalog
from joulectl.backends.base import NVIDIA_GOVERNOR_ARCHS
from joulectl.catalog import CpuEntry, GpuEntry, normalize, strip_gfd_suffix
from joulectl.k8s import GPU_PRODUCT_LABEL_KEYS, gpu_config, gpu_resource, node_gpu_count, parse_quantity
from joulectl.models import GPU_PRESETS
from joulectl.planning.options import ModelCap

RESERVED_LABEL = "joulie.io/reserved"
RACK_LABEL = "joulie.io/rack"
COOLING_ZONE_LABEL = "joulie.io/cooling-zone"
CPU_MODEL_LABELS = ("joulie.io/hw.cpu-model", "feature.node.kubernetes.io/cpu-model.name")
CPU_SOCKET_LABELS = ("joulie.io/hw.cpu-sockets", "feature.node.kubernetes.io/cpu-sockets")
#: Joulie's CPU TDP fallback when neither the hardware nor the catalog knows it: W per core.
WATTS_PER_CORE_FALLBACK = 5.0
#: The generic GPU of a model neither the hardware, the catalog nor the model caps know: per-GPU
#: maximum by vendor (Joulie's extender fallbacks, joulie-reference §3 "Marginal estimate"), and a
#: minimum of half of it (Joulie's catalog default).
GENERIC_GPU_MAX_W = {"nvidia": 350.0, "amd": 400.0}
GENERIC_GPU_OTHER_MAX_W = 350.0
GENERIC_GPU_MIN_FRACTION = 0.5


@dataclass(slots=True)
class _Facts:
    """The fields of :class:`NodeFacts`.

    Slots, not an instance dict: the 31 fields are past the 30 keys CPython shares between instance
    dicts, so each node's facts took a dict of its own, 1.6 KB (of 100,000 nodes 160 MB); slotted
    they take 0.3 KB."""

    name: str
    #: the node's labels as found (values are normally strings; use :meth:`label`)
    labels: Mapping[str, Any]
    unschedulable: bool
    has_hardware: bool
    # CPU
    cpu_model: str | None
    cpu_key: str | None
    sockets: int
    total_cores: int
    cpu_max_w_per_socket: float
    cpu_min_w_per_socket: float
    cpu_range_source: str  # nodehardware | catalog | cores | none
    cpu_density: float
    #: why the CPU cannot be capped (NodeHardware ``cpu.controlAvailable: false``), else None
    cpu_cap_note: str | None
    # GPU
    gpu_count: int
    gpu_count_source: str
    power_domains: int
    gpu_model: str | None
    gpu_key: str | None
    gpu_vendor: str | None
    gpu_max_w: float
    gpu_min_w: float
    #: the lowest enforced limit of the node's GPUs (NodeHardware ``enforcedCapWatts``), W; None unknown
    gpu_enforced_w: float | None
    gpu_range_source: str  # nodehardware | catalog | model-caps | none
    gpu_cappable: bool
    gpu_cap_note: str | None
    governor_presets: tuple[str, ...]
    governor_source: str  # nodehardware | catalog | none
    gpu_density: float
    model_cap: ModelCap | None
    model_cap_key: str | None
    #: the hardware signature the facts were computed for (shared by identical nodes), or None
    key: Any = None


class NodeFacts(_Facts):
    """The hardware facts of one node that planning and the twin need."""

    __slots__ = ("_family",)  # :attr:`family` once computed: a slot, not a field
    _family: str

    def label(self, key: str) -> str | None:
        value = self.labels.get(key)
        return None if value is None else str(value)

    @property
    def is_gpu_node(self) -> bool:
        return self.gpu_count > 0

    @property
    def density(self) -> float:
        return self.cpu_density + self.gpu_density

    @property
    def family(self) -> str:
        """Joulie's family key, with the catalog key when the model is catalogued."""
        try:
            return self._family
        except AttributeError:
            pass
        if self.is_gpu_node:
            family = f"gpu:{self.gpu_key or _family_name(self.gpu_model) or 'unknown-gpu'}"
        else:
            family = f"cpu:{self.cpu_key or _family_name(self.cpu_model) or 'unknown-cpu'}"
        self._family = family
        return family

    @property
    def cpu_tdp_w(self) -> float:
        return self.cpu_max_w_per_socket * self.sockets

    @property
    def gpu_tdp_w(self) -> float:
        """Per-GPU maximum times the power domains (not the count: an MI250X package is two GPUs)."""
        return self.gpu_max_w * self.power_domains if self.is_gpu_node else 0.0


def _family_name(model: str | None) -> str:
    """An uncatalogued model as a family name: ``Intel Xeon Processor (Icelake)`` and the label
    spelling ``Intel_Xeon_Processor_Icelake`` are one family, ``intel_xeon_processor_icelake``."""
    return _norm_product(model).replace(" ", "_") if model else ""


#: GPUs (as devices and resources count them) per power limit when NodeHardware does not say:
#: an MI250X or MI250 package is two GCDs under one limit (seed, "Agent host backends").
GPUS_PER_POWER_DOMAIN = {"AMD_INSTINCT_MI250X": 2, "AMD_INSTINCT_MI250": 2}


@lru_cache(maxsize=4096)
def _gpu_entry(name: str) -> GpuEntry | None:
    return catalog.load().gpu(name)


@lru_cache(maxsize=4096)
def _cpu_entry(name: str) -> CpuEntry | None:
    return catalog.load().cpu(name)


@lru_cache(maxsize=4096)
def _norm_product(name: str) -> str:
    return normalize(strip_gfd_suffix(name))


def _mapping(value: Any) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the ABC check's cost
        return value
    return value if isinstance(value, Mapping) else {}


def _pos_number(value: Any) -> float:
    if isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def _pos_int(value: Any) -> int:
    number = _pos_number(value)
    return int(number) if number >= 1 else 0


def _first_text(*values: Any) -> str | None:
    for v in values:
        if isinstance(v, str) and v.strip():
            return v.strip()
    return None


def node_facts(
    node: Mapping[str, Any],
    hardware: Mapping[str, Any] | None,
    model_caps: Mapping[str, ModelCap],
    governor_model_presets: frozenset[str],
) -> NodeFacts:
    """The facts of ``node`` (a Kubernetes Node) with its NodeHardware (or None).

    ``model_caps`` is keyed by normalised product; ``governor_model_presets`` holds normalised
    products opted in to ``sustained``.
    """
    meta = _mapping(node.get("metadata"))
    name = str(meta.get("name") or "")
    raw_labels = _mapping(meta.get("labels"))

    def label(key: str) -> str:
        value = raw_labels.get(key)
        return "" if value is None else str(value)
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    hw_status = _mapping(_mapping(hardware).get("status")) if hardware else {}
    hw_cpu = _mapping(hw_status.get("cpu"))
    hw_gpu = _mapping(hw_status.get("gpu"))

    # -- CPU ---------------------------------------------------------------------------------
    cpu_names = [
        n
        for n in (
            _first_text(hw_cpu.get("model")),
            _first_text(hw_cpu.get("rawModel")),
            *(_first_text(label(k)) for k in CPU_MODEL_LABELS),
        )
        if n
    ]
    cpu_entry = next((e for e in map(_cpu_entry, cpu_names) if e), None)
    sockets = _pos_int(hw_cpu.get("sockets")) or next(
        (s for s in (_pos_int(label(k)) for k in CPU_SOCKET_LABELS) if s), 0
    )
    sockets_known = sockets > 0
    sockets = sockets or 1
    cores = _pos_int(hw_cpu.get("totalCores"))
    if not cores:
        resources = _mapping(status.get("capacity")) or _mapping(status.get("allocatable"))
        try:
            cores = int(parse_quantity(resources.get("cpu", 0)))
        except ValueError:
            cores = 0
    cap_range = _mapping(hw_cpu.get("capRange"))
    cpu_max = _pos_number(cap_range.get("maxWattsPerSocket"))
    cpu_min = _pos_number(cap_range.get("minWattsPerSocket"))
    cpu_source = "nodehardware" if cpu_max else "none"
    if not cpu_max and cpu_entry:
        cpu_max = cpu_entry.tdp_w
        cpu_min = cpu_entry.ctdp_range_w[0] if cpu_entry.ctdp_range_w else 0.0
        cpu_source = "catalog"
    if not cpu_max and cores:
        cpu_max = (cores // sockets) * WATTS_PER_CORE_FALLBACK
        cpu_min = 0.0
        cpu_source = "cores" if cpu_max else "none"
    cpu_note = None
    if hw_cpu.get("controlAvailable") is False:
        reason = _first_text(hw_cpu.get("controlReason"))
        cpu_note = "CPU power control unavailable" + (f": {reason}" if reason else "")
    cpu_density = 0.0
    if cpu_entry:
        multiplier = cores or (sockets if sockets_known else 1)
        cpu_density = (cpu_entry.compute_density or cpu_entry.boost_ghz * cpu_entry.tdp_w) * multiplier

    # -- GPU ---------------------------------------------------------------------------------
    count, count_source = node_gpu_count(node, hardware)
    raw_devices = hw_gpu.get("devices") if hw_gpu else None
    devices = [d for d in raw_devices if isinstance(d, Mapping)] if isinstance(raw_devices, list) else []
    label_product = next(
        (strip_gfd_suffix(label(k)) for k in gpu_config().label_keys if label(k).strip()), None
    )
    dev0 = devices[0] if devices else {}
    gpu_names = [
        n
        for n in (
            _first_text(hw_gpu.get("model")),
            _first_text(hw_gpu.get("rawModel")),
            _first_text(dev0.get("model")),
            _first_text(dev0.get("rawModel")),
            label_product,
        )
        if n
    ]
    gpu_names = [strip_gfd_suffix(n) for n in gpu_names]
    gpu_entry = next((e for e in map(_gpu_entry, gpu_names) if e), None) if count else None
    gpu_model = gpu_names[0] if gpu_names else None
    model_cap_key = next((k for k in map(_norm_product, gpu_names) if k in model_caps), None) if count else None
    model_cap = model_caps[model_cap_key] if model_cap_key else None
    domains = _pos_int(hw_gpu.get("powerDomains"))
    if not domains:
        per_domain = GPUS_PER_POWER_DOMAIN.get(gpu_entry.key, 1) if gpu_entry else 1
        domains = -(-count // per_domain)

    range_per_gpu = _mapping(hw_gpu.get("capRangePerGpu"))
    gpu_max = _pos_number(range_per_gpu.get("maxWatts"))
    gpu_min = _pos_number(range_per_gpu.get("minWatts"))
    if not gpu_max:
        for d in devices:
            rng = _mapping(d.get("capRange"))
            if _pos_number(rng.get("maxWatts")):
                gpu_max = _pos_number(rng.get("maxWatts"))
                gpu_min = _pos_number(rng.get("minWatts"))
                break
    hw_range_known = gpu_max > 0
    enforced = [w for w in (_pos_number(hw_gpu.get("enforcedCapWatts")),
                            *(_pos_number(d.get("enforcedCapWatts")) for d in devices)) if w]
    gpu_source = "nodehardware" if gpu_max else "none"
    if count and not gpu_max and gpu_entry:
        gpu_max, gpu_min, gpu_source = gpu_entry.max_board_power_w, gpu_entry.min_w, "catalog"
    if count and not gpu_max and model_cap:
        gpu_max, gpu_min, gpu_source = model_cap.max_cap_w, model_cap.min_cap_w, "model-caps"
    vendor = (gpu_entry.vendor if gpu_entry else None) or _first_text(hw_gpu.get("vendor"))
    if count and not gpu_max:
        guess = (vendor or _resource_vendor(status) or "").lower()
        gpu_max = GENERIC_GPU_MAX_W.get(guess, GENERIC_GPU_OTHER_MAX_W)
        gpu_min, gpu_source = GENERIC_GPU_MIN_FRACTION * gpu_max, "generic"

    cappable, note = True, None
    if count and hw_gpu:
        if hw_gpu.get("controlAvailable") is False:
            reasons = [
                str(_mapping(d.get("control")).get("reason"))
                for d in devices
                if _mapping(d.get("control")).get("reason")
            ]
            cappable = False
            note = "GPU power control unavailable" + (f": {reasons[0]}" if reasons else "")
        elif (devices or "capRangePerGpu" in hw_gpu) and not hw_range_known:
            cappable, note = False, "no settable GPU power limit range in NodeHardware"

    presets, governor_source = _presets(hw_gpu, gpu_entry, count)
    if "sustained" not in presets and presets and any(_norm_product(n) in governor_model_presets for n in gpu_names):
        presets = tuple(p for p in GPU_PRESETS if p in {*presets, "sustained"})
    elif "sustained" in presets and not any(_norm_product(n) in governor_model_presets for n in gpu_names):
        presets = tuple(p for p in presets if p != "sustained")

    gpu_density = 0.0
    if count and gpu_entry:
        gpu_density = (gpu_entry.compute_density or gpu_entry.max_board_power_w) * max(count, 1)

    return NodeFacts(
        name=name,
        labels=raw_labels,
        unschedulable=spec.get("unschedulable") is True,
        has_hardware=bool(hardware),
        cpu_model=cpu_names[0] if cpu_names else None,
        cpu_key=cpu_entry.key if cpu_entry else None,
        sockets=sockets,
        total_cores=cores,
        cpu_max_w_per_socket=cpu_max,
        cpu_min_w_per_socket=cpu_min,
        cpu_range_source=cpu_source,
        cpu_density=cpu_density,
        cpu_cap_note=cpu_note,
        gpu_count=count,
        gpu_count_source=count_source,
        power_domains=domains if count else 0,
        gpu_model=gpu_model if count else None,
        gpu_key=gpu_entry.key if gpu_entry else None,
        gpu_vendor=vendor if count else None,
        gpu_max_w=gpu_max if count else 0.0,
        gpu_min_w=gpu_min if count else 0.0,
        gpu_enforced_w=min(enforced) if count and enforced else None,
        gpu_range_source=gpu_source if count else "none",
        gpu_cappable=cappable,
        gpu_cap_note=note,
        governor_presets=presets if count else (),
        governor_source=governor_source if count else "none",
        gpu_density=gpu_density,
        model_cap=model_cap,
        model_cap_key=model_cap_key,
    )


def _resource_vendor(status: Mapping[str, Any]) -> str | None:
    """The vendor of the node's first GPU resource (nvidia, amd, intel, other), None without one."""
    resources = _mapping(status.get("allocatable")) or _mapping(status.get("capacity"))
    for name in sorted(resources):
        res = gpu_resource(str(name))
        if res is not None:
            return res.vendor
    return None


def _presets(hw_gpu: Mapping[str, Any], entry: GpuEntry | None, count: int) -> tuple[tuple[str, ...], str]:
    """The governor presets every GPU of the node accepts: NodeHardware's list, else inferred from
    the catalog (NVIDIA Ampere or newer, AMD; Intel has none)."""
    governor = _mapping(hw_gpu.get("governor"))
    listed = governor.get("presets")
    if isinstance(listed, list):
        return tuple(p for p in GPU_PRESETS if p in {str(x) for x in listed}), "nodehardware"
    if not count or entry is None:
        return (), "none"
    if entry.vendor == "nvidia" and (entry.architecture or "").lower() in NVIDIA_GOVERNOR_ARCHS:
        return ("auto", "efficient", "low", "peak"), "catalog"
    if entry.vendor == "amd":
        return GPU_PRESETS, "catalog"
    return (), "catalog"


#: Every label :func:`node_facts` and :func:`joulectl.k8s.node_gpu_count` read: with the node's
#: capacity and allocatable, the signature of its hardware. Keep in step with both functions
#: (:func:`signature_labels` adds the ``--gpu-product-label`` keys).
SIGNATURE_LABELS = (
    *CPU_MODEL_LABELS,
    *CPU_SOCKET_LABELS,
    *GPU_PRODUCT_LABEL_KEYS,
    "joulie.io/hw.gpu-count",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.replicas",
    "gpu.intel.com/device.count",
)


def signature_labels() -> tuple[str, ...]:
    extra = tuple(k for k in gpu_config().product_labels if k not in SIGNATURE_LABELS)
    return SIGNATURE_LABELS + extra


def _resources_key(resources: Any) -> tuple[tuple[Any, Any], ...] | None:
    """The resources as a key, in their order (another order of the same resources only costs a
    second computation of the same facts)."""
    if type(resources) is dict:
        return tuple(resources.items())
    return tuple(resources.items()) if isinstance(resources, Mapping) else None


#: The fields of :class:`NodeFacts` a node shares with the others of its hardware signature.
#: (The first four, ``name``, ``labels``, ``unschedulable`` and ``has_hardware``, are each node's own.)
_SHARED_FIELDS = tuple(f.name for f in fields(NodeFacts))[4:]


class FactsCache:
    """:func:`node_facts` computed once per hardware signature: a fleet of 10,000 nodes has a few
    dozen kinds of node. Nodes with a NodeHardware object are computed one by one."""

    def __init__(self, model_caps: Mapping[str, ModelCap], governor_model_presets: frozenset[str]) -> None:
        self.model_caps = model_caps
        self.governor_model_presets = governor_model_presets
        #: by signature: the first node's _SHARED_FIELDS and family
        self._shared: dict[Any, tuple[tuple[Any, ...], str]] = {}
        self._labels = signature_labels()

    def facts(self, node: Mapping[str, Any], hardware: Mapping[str, Any] | None) -> NodeFacts:
        meta = node.get("metadata")
        meta = meta if type(meta) is dict else _mapping(meta)
        labels = meta.get("labels")
        labels = labels if type(labels) is dict else _mapping(labels)
        status = node.get("status")
        status = status if type(status) is dict else _mapping(status)
        hw_key: tuple[int, int] | None = None
        if hardware:
            # only status.cpu and status.gpu are read: nodes sharing those objects (the nodes of a
            # ClusterSpec pool) share their facts; other NodeHardware objects are computed one by one
            hw_status = _mapping(_mapping(hardware).get("status"))
            hw_key = (id(hw_status.get("cpu")), id(hw_status.get("gpu")))
        key = (
            tuple(map(labels.get, self._labels)),
            _resources_key(status.get("capacity")),
            _resources_key(status.get("allocatable")),
            hw_key,
        )
        try:
            shared = self._shared.get(key)
        except TypeError:  # an unhashable value somewhere: no sharing
            return node_facts(node, hardware, self.model_caps, self.governor_model_presets)
        if shared is None:
            template = node_facts(node, hardware, self.model_caps, self.governor_model_presets)
            template.key = key
            self._shared[key] = (tuple(getattr(template, f) for f in _SHARED_FIELDS), template.family)
            return template
        spec = node.get("spec")
        # the node's own name, labels, unschedulable and has_hardware (the first four fields), the
        # template's facts for the rest
        facts = NodeFacts(str(meta.get("name") or ""), labels,
                          (spec if type(spec) is dict else _mapping(spec)).get("unschedulable") is True,
                          bool(hardware), *shared[0])
        facts._family = shared[1]
        return facts
