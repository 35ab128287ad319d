"""Would a pod pass a node's filters, and if not, why (SPEC §8, joulie-reference §3 "Filter").

Checks, each rejection with its reason:

- a cordoned node (``spec.unschedulable``) takes no pod;
- ``spec.nodeName``, the pod's ``nodeSelector`` and its required node affinity must match the node;
- performance pods never go to eco or draining nodes: the NodeTwin's ``status.schedulableClass``
  decides (staleness ignored, as Joulie's extender does), else the ``joulie.io/power-profile``
  label; a node with neither passes;
- every GPU resource the pod asks for must be allocatable in that count on the node, the exact
  resource (``nvidia.com/gpu`` needs ``nvidia.com/gpu``, a MIG resource that MIG resource); a pod
  with no GPU fits a GPU node;
- CPU and memory against allocatable;
- on a node with HAMi's ``hami.io/node-nvidia-register``, HAMi's card-level fit of every container
  (:mod:`joulectl.scheduling.hami`: vGPUs on distinct cards, ``nvidia.com/gpumem``,
  ``gpumem-percentage``, ``gpucores``, split count, type and UUID annotations, cards used by running
  pods); a pod asking for HAMi's memory or core shares fits no node without the register;
- on a node without the register, ``nvidia.com/use-gputype``, ``nouse-gputype`` (comma lists,
  case-insensitive substrings) are checked against the labelled product, one card per GPU, and the
  UUID annotations cannot be met.

Allocatable is the node's allocatable less what the pods running there (``--pods``) request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from joulectl.catalog import mig_profile_of
from joulectl.k8s import (
    HAMI_REGISTER_ANNOTATION,
    POWER_PROFILE_LABEL,
    HamiGpu,
    PodRef,
    annotations_of,
    gpu_resource,
    labels_of,
    name_of,
    node_gpu_count,
    node_gpu_product,
    parse_hami_register,
    parse_quantity,
)
from joulectl.scheduling import hami
from joulectl.scheduling.demand import PodDemand, pod_requests

USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
GPU_SELECTION_ANNOTATIONS = (USE_GPUTYPE, NOUSE_GPUTYPE, USE_GPUUUID, NOUSE_GPUUUID)


@dataclass(frozen=True)
class NodeView:
    """A Kubernetes Node as the filters and the score read it, with its twin and hardware."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, float]
    unschedulable: bool
    gpus: tuple[HamiGpu, ...]  # from HAMi's register annotation; empty when not published
    gpu_types_from: str  # where per-GPU types come from: "hami", "label" or "none"
    twin: Mapping[str, Any] | None = None
    hardware: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())
    #: HAMi's cards (from the register, usage of the running pods added); empty without HAMi
    cards: tuple[hami.Card, ...] = field(default=())
    #: the node's GFD product is suffixed -MIG-<profile>: nvidia.com/gpu counts MIG devices, which
    #: the NVIDIA device plugin hands out (HAMi's card fit does not apply)
    mig_single: bool = False
    #: what the running pods request, per resource (already taken off ``allocatable``)
    used: dict[str, float] = field(default_factory=dict)

    @property
    def hami(self) -> bool:
        return bool(self.cards) and not self.mig_single

    @property
    def hami_node_score(self) -> float:
        cached: float | None = self.__dict__.get("_hami_score")
        if cached is None:
            cached = hami.node_score(self.cards) if self.cards else 0.0
            object.__setattr__(self, "_hami_score", cached)
        return cached


def _allocatable(node: Mapping[str, Any]) -> dict[str, float]:
    status = node.get("status") or {}
    if not isinstance(status, Mapping):
        return {}
    resources = status.get("allocatable") or status.get("capacity") or {}
    out: dict[str, float] = {}
    if not isinstance(resources, Mapping):
        return out
    for name, qty in resources.items():
        try:
            out[str(name).strip().lower()] = parse_quantity(qty)
        except ValueError:
            continue  # a node export is not ours to reject; the resource counts as absent
    return out


def node_view(
    node: Mapping[str, Any],
    twin: Mapping[str, Any] | None = None,
    hardware: Mapping[str, Any] | None = None,
    running: Sequence[PodRef] = (),
) -> NodeView:
    """Build the view of one Node object (GPU types and UUIDs from HAMi's register annotation),
    with what ``running`` (the pods bound to it and not finished) already use."""
    labels = labels_of(node)
    register = annotations_of(node).get(HAMI_REGISTER_ANNOTATION, "")
    gpus = tuple(parse_hami_register(register)) if register else ()
    cards = hami.cards_of(gpus)
    notes: list[str] = []
    used: dict[str, float] = {}
    for pod in running:
        for k, v in pod_requests(pod, "--pods").items():
            used[k] = used.get(k, 0.0) + v
        if cards:
            note = _add_card_usage(cards, pod)
            if note:
                notes.append(note)
    allocatable = _allocatable(node)
    for k, v in used.items():
        if k in allocatable:
            allocatable[k] -= v
    types_from = "hami" if gpus else "none"
    if not gpus:
        product = node_gpu_product(labels)
        count, _ = node_gpu_count(node, hardware)
        if product and count > 0:
            # No register: every GPU is the labelled product, in HAMi's "NVIDIA-<model>" form; no UUIDs.
            card = product if product.upper().startswith("NVIDIA") else f"NVIDIA-{product}"
            gpus = tuple(HamiGpu("", 1, 0, 100, card, 0, True) for _ in range(count))
            types_from = "label"
    spec = node.get("spec") or {}
    return NodeView(
        name=name_of(node),
        labels=labels,
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")) if isinstance(spec, Mapping) else False,
        gpus=gpus,
        gpu_types_from=types_from,
        twin=twin,
        hardware=hardware,
        notes=tuple(notes),
        cards=tuple(cards),
        mig_single=mig_profile_of(labels.get("nvidia.com/gpu.product", "")) is not None,
        used=used,
    )


def _add_card_usage(cards: list[hami.Card], pod: PodRef) -> str | None:
    """Add what a running pod uses of the node's cards: its ``hami.io/vgpu-devices-allocated``
    annotation, else its requests placed as HAMi would place them. A note when neither works."""
    allocated = pod.annotations.get(hami.ALLOCATED_ANNOTATION)
    if allocated:
        by_uuid = {c.uuid: c for c in cards}
        unknown = []
        for container in hami.decode_allocated(allocated):
            for uuid, mem, cores in container:
                card = by_uuid.get(uuid)
                if card is None:
                    unknown.append(uuid)
                    continue
                card.used += 1
                card.used_mem += mem
                card.used_cores += cores
        if unknown:
            return (f"pod {pod.namespace}/{pod.name}: {hami.ALLOCATED_ANNOTATION} names cards the node does not "
                    f"register ({', '.join(unknown)}): their use is not counted")
        return None
    requests, _ = hami.pod_requests(pod.spec)
    if not any(r is not None for r in requests):
        return None
    sel = hami.Selection.from_annotations(pod.annotations)
    policy = hami.policy_of(pod.annotations, hami.GPU_POLICY_ANNOTATION, hami.DEFAULT_GPU_POLICY)
    trial = hami.copy_cards(cards)
    fit = hami.fit_pod(trial, requests, sel, policy)
    if not fit.ok:
        return (f"pod {pod.namespace}/{pod.name} has no {hami.ALLOCATED_ANNOTATION} and its requests do not fit "
                f"the node's cards ({fit.reason}): its use is not counted")
    cards[:] = trial
    return None


# -- node selection (nodeSelector, required node affinity) ---------------------------------------


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str], node_name: str, fields: bool) -> bool:
    key = str(expr.get("key", ""))
    op = str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    if fields:
        present, value = key == "metadata.name", node_name
    else:
        present, value = key in labels, labels.get(key, "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _selector_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    spec = demand.pod.spec
    reasons: list[str] = []
    pinned = spec.get("nodeName")
    if pinned and str(pinned) != node.name:
        reasons.append(f"spec.nodeName binds the pod to {pinned}")
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping):
        missing = [f"{k}={v}" for k, v in selector.items() if node.labels.get(str(k)) != str(v)]
        if missing:
            reasons.append(f"nodeSelector {', '.join(missing)} does not match the node's labels")
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if isinstance(terms, list) and terms:

        def term_matches(term: Any) -> bool:
            if not isinstance(term, Mapping):
                return False
            exprs = [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping)]
            field_exprs = [e for e in term.get("matchFields") or [] if isinstance(e, Mapping)]
            if not exprs and not field_exprs:
                return False  # an empty term matches no node
            return all(_expression_matches(e, node.labels, node.name, False) for e in exprs) and all(
                _expression_matches(e, node.labels, node.name, True) for e in field_exprs
            )

        if not any(term_matches(t) for t in terms):
            reasons.append("required node affinity does not match the node")
    return reasons


# -- workload class --------------------------------------------------------------------------


def twin_class(twin: Mapping[str, Any] | None) -> str | None:
    """The twin's schedulable class (``eco``, ``performance``, ``draining``), None when unknown."""
    if not isinstance(twin, Mapping):
        return None
    spec = twin.get("spec") or {}
    sched = spec.get("scheduling") if isinstance(spec, Mapping) else None
    if isinstance(sched, Mapping) and sched.get("draining") is True:
        return "draining"
    status = twin.get("status") or {}
    value = status.get("schedulableClass") if isinstance(status, Mapping) else None
    cls = str(value).strip().lower() if value else ""
    return cls if cls in ("eco", "performance", "draining") else None


def _class_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    if demand.workload_class != "performance":
        return []
    cls = twin_class(node.twin)
    if cls in ("eco", "draining"):
        return [f"performance pod rejected from {cls} node (NodeTwin class {cls})"]
    if cls is None and node.labels.get(POWER_PROFILE_LABEL, "").strip().lower() == "eco":
        return [f"performance pod rejected from eco node (label {POWER_PROFILE_LABEL}=eco)"]
    return []


# -- resources ---------------------------------------------------------------------------------


def _fmt_count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}".rstrip("0").rstrip(".")


def _fmt_bytes(value: float) -> str:
    gib = value / 2**30
    if gib >= 1:
        return f"{gib:.1f}".rstrip("0").rstrip(".") + "Gi"
    return f"{value / 2**20:.0f}Mi"


def _free(node: NodeView, name: str, have: float, fmt: Any = None) -> str:
    """``8 allocatable``, or with running pods ``2 free (6 used by running pods)``."""
    show = fmt or _fmt_count
    used = node.used.get(name, 0.0)
    if used > 0:
        return f"{show(max(have, 0.0))} free ({show(used)} used by running pods)"
    return f"{show(have)} allocatable"


def _gpu_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    reasons: list[str] = []
    for name, units in sorted(demand.gpu_requests.items()):
        have = node.allocatable.get(name, 0.0)
        if have >= units:
            continue
        if have > 0 or node.used.get(name, 0.0) > 0:
            reasons.append(f"needs {units} {name}, node has {_free(node, name, have)}")
            continue
        offered = sorted(k for k, v in node.allocatable.items() if v > 0 and gpu_resource(k) is not None)
        if offered:
            listing = ", ".join(f"{k}: {_fmt_count(node.allocatable[k])}" for k in offered)
            reasons.append(f"needs {units} {name}, node offers none (it has {listing})")
        else:
            reasons.append(f"needs {units} {name}, node has no GPU resources")
    return reasons


def _cpu_memory_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    reasons: list[str] = []
    cpu = node.allocatable.get("cpu")
    if demand.cpu_cores > 0 and cpu is not None and demand.cpu_cores > cpu + 1e-9:
        reasons.append(f"needs {_fmt_count(demand.cpu_cores)} CPU, node has {_free(node, 'cpu', cpu)}")
    mem = node.allocatable.get("memory")
    if demand.memory_bytes > 0 and mem is not None and demand.memory_bytes > mem:
        reasons.append(
            f"needs {_fmt_bytes(demand.memory_bytes)} memory, node has {_free(node, 'memory', mem, _fmt_bytes)}"
        )
    return reasons


# -- HAMi GPU type and UUID --------------------------------------------------------------------


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


@dataclass(frozen=True)
class GpuSelection:
    """The pod's HAMi GPU type/UUID annotations, parsed."""

    use_types: list[str] | None
    nouse_types: list[str] | None
    use_uuids: list[str] | None
    nouse_uuids: list[str] | None

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> GpuSelection:
        return cls(
            _split(annotations.get(USE_GPUTYPE)),
            _split(annotations.get(NOUSE_GPUTYPE)),
            _split(annotations.get(USE_GPUUUID)),
            _split(annotations.get(NOUSE_GPUUUID)),
        )

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.use_types, self.nouse_types, self.use_uuids, self.nouse_uuids))

    @property
    def needs_uuids(self) -> bool:
        return self.use_uuids is not None or self.nouse_uuids is not None

    def type_passes(self, card_type: str) -> bool:
        return hami.type_matches(card_type, self.use_types, self.nouse_types)

    def uuid_passes(self, uuid: str) -> bool:
        return hami.uuid_matches(uuid, self.use_uuids, self.nouse_uuids)

    def passes(self, gpu: HamiGpu) -> bool:
        return self.type_passes(gpu.type) and self.uuid_passes(gpu.uuid)

    def describe(self) -> str:
        parts: list[str] = []
        if self.use_types is not None:
            parts.append(f"of type {'|'.join(self.use_types)}")
        if self.nouse_types is not None:
            parts.append(f"not of type {'|'.join(self.nouse_types)}")
        if self.use_uuids is not None:
            parts.append(f"with UUID {'|'.join(self.use_uuids)}")
        elif self.nouse_uuids is not None:
            parts.append(f"not UUID {'|'.join(self.nouse_uuids)}")
        return " and ".join(parts)


def _gpu_selection_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    sel = GpuSelection.from_annotations(demand.annotations)
    nvidia = {k: v for k, v in demand.gpu_requests.items() if (r := gpu_resource(k)) and r.vendor == "nvidia"}
    if not sel.active or not nvidia:
        return []  # HAMi reads these annotations only for NVIDIA device requests
    # Whole GPUs need that many distinct cards; MIG devices and shared replicas need one matching card.
    need = 0
    resource = sorted(nvidia)[0]
    for name, units in sorted(nvidia.items()):
        res = gpu_resource(name)
        n = units if res is not None and res.is_whole else 1
        if n > need:
            need, resource = n, name
    if not node.gpus:
        return [f"needs {need} {resource} {sel.describe()}, node publishes no GPU types or UUIDs "
                f"({HAMI_REGISTER_ANNOTATION})"]
    if sel.needs_uuids and node.gpu_types_from != "hami":
        return [f"needs {need} {resource} {sel.describe()}, node publishes no GPU UUIDs ({HAMI_REGISTER_ANNOTATION})"]
    matching = sum(1 for g in node.gpus if sel.passes(g))
    if matching >= need:
        return []
    return [f"needs {need} {resource} {sel.describe()}, node has {matching} matching of {len(node.gpus)}"]


def hami_fit(demand: PodDemand, node: NodeView) -> hami.PodFit | None:
    """HAMi's card-level fit of the pod on the node, or None when HAMi does not place it there (no
    register, or no container asks for ``nvidia.com/gpu``)."""
    if not node.hami or not demand.hami_requests:
        return None
    ann = demand.annotations
    policy = hami.policy_of(ann, hami.GPU_POLICY_ANNOTATION, hami.DEFAULT_GPU_POLICY)
    return hami.fit_pod(hami.copy_cards(node.cards), demand.hami_requests, hami.Selection.from_annotations(ann),
                        policy)


def _hami_reasons(demand: PodDemand, node: NodeView) -> list[str] | None:
    """HAMi's reasons, or None when the node is not HAMi's to judge."""
    if demand.hami_only and not node.hami:
        why = "node is under the single MIG strategy" if node.mig_single else f"node has no {HAMI_REGISTER_ANNOTATION}"
        return [f"asks for HAMi's {', '.join(demand.hami_only)}, {why} (HAMi does not manage its GPUs)"]
    fit = hami_fit(demand, node)
    if fit is None:
        return None
    return [] if fit.ok else [f"HAMi: {fit.reason}"]


def filter_reasons(demand: PodDemand, node: NodeView) -> list[str]:
    """Every reason the node rejects the pod; empty when the pod fits."""
    reasons: list[str] = []
    if node.unschedulable:
        reasons.append("node is cordoned (spec.unschedulable)")
    reasons += _selector_reasons(demand, node)
    reasons += _class_reasons(demand, node)
    gpu = _gpu_reasons(demand, node)
    reasons += gpu
    reasons += _cpu_memory_reasons(demand, node)
    if not gpu:  # which of its GPUs: only asked once the node has the GPUs at all
        card_level = _hami_reasons(demand, node)
        reasons += card_level if card_level is not None else _gpu_selection_reasons(demand, node)
    return reasons

