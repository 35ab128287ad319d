"""The plan: eligible nodes, how many stay at performance and which, their caps, and their NodeTwin.

One code path for every input (ClusterSpec or NodeList): :func:`plan` takes Node objects and
NodeHardware as plain data.
"""

from __future__ import annotations

import gc
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import attrgetter
from typing import Any

from joulectl.catalog import normalize, strip_gfd_suffix
from joulectl.errors import InputError
from joulectl.k8s import PodRef, pod_excludes_eco, sanitize_name, unread_gpu_names
from joulectl.planning import policy, twin
from joulectl.planning.caps import CapPlan, num, plan_caps
from joulectl.planning.hardware import COOLING_ZONE_LABEL, RACK_LABEL, RESERVED_LABEL, FactsCache, NodeFacts
from joulectl.planning.options import POLICY_NAMES, ClusterInput, PlanOptions
from joulectl.planning.selector import Requirement
from joulectl.planning.selector import miss as selector_miss

API_VERSION = "joulie.io/v1alpha1"
ANNOTATION_PREFIX = "joulectl.io/"
#: Phases of a pod that no longer (or not yet) runs on its node.
NOT_RUNNING = frozenset({"Succeeded", "Failed", "Pending"})


class PlanResult:
    """NodeTwin objects, one row per planned node, the nodes left out and why, and a fleet summary.

    The twins and rows are built when first asked for; :meth:`write_json` streams the twins without
    building them (twins of one kind of node, profile, rack and measurement differ only by name)."""

    def __init__(
        self,
        ineligible: list[tuple[str, str]],
        summary: dict[str, Any],
        warnings: list[str],
        render: _Render | None = None,
        twins: list[dict[str, Any]] | None = None,
        nodes: list[dict[str, Any]] | None = None,
    ) -> None:
        self.ineligible = ineligible
        self.summary = summary
        #: things the input leaves doubtful (for stderr): no pods for queue-aware, telemetry or
        #: NodeHardware naming no planned node, unread GPU names, uncatalogued models
        self.warnings = warnings
        self._render = render
        self._twins = twins
        self._nodes = nodes

    def _build(self) -> None:
        twins: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        if self._render is not None:
            for doc, row in self._render.docs():
                twins.append(doc)
                rows.append(row)
        self._twins, self._nodes = twins, rows

    @property
    def twins(self) -> list[dict[str, Any]]:
        if self._twins is None:
            self._build()
        assert self._twins is not None
        return self._twins

    @property
    def nodes(self) -> list[dict[str, Any]]:
        if self._nodes is None:
            self._build()
        assert self._nodes is not None
        return self._nodes

    def __len__(self) -> int:
        return len(self._render.planned) if self._render is not None else len(self.twins)

    def iter_twin_json(self) -> Iterator[str]:
        """Each twin as compact JSON (``json.dumps``), in the order of :attr:`twins`."""
        if self._render is None or self._twins is not None:
            yield from (json.dumps(t, ensure_ascii=False) for t in self.twins)
        else:
            yield from self._render.json_texts()


#: What :func:`joulectl.k8s.sanitize_name` leaves as it is.
_TWIN_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?").fullmatch



@dataclass
class _Render:
    """What the twins of a plan are made of."""

    planned: list[_Planned]
    names: list[str]  # NodeTwin object names, parallel to planned
    policy_name: str
    cluster: ClusterInput
    rack_w: Mapping[str, float]
    cluster_it_w: float
    updated: str
    psu_scores: dict[str | None, float | int] = field(default_factory=dict)

    def doc(self, p: _Planned, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return _twin(p, name, self.policy_name, self.cluster, self.rack_w, self.cluster_it_w, self.updated,
                     self.psu_scores)

    def docs(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for p, name in zip(self.planned, self.names, strict=True):
            yield self.doc(p, name)

    def _kind(self, p: _Planned) -> tuple[Any, ...]:
        """Everything of a twin but its names and its rack's PSU score: twins of one kind print the
        same JSON but for those (label values as found: two spellings of one only make two kinds)."""
        f, cluster = p.facts, self.cluster
        measured = p.measured_w
        return (id(p.sized), p.draining, f.name in cluster.telemetry, cluster.trends.get(f.name), measured,
                f.labels.get(COOLING_ZONE_LABEL) if measured else None)

    def json_texts(self) -> Iterator[str]:
        from json.encoder import encode_basestring  # json.dumps(str, ensure_ascii=False), in C

        # a kind's text split around the object name, the node name and the PSU score: each twin
        # is one concatenation (a fleet's racks would otherwise make thousands of kinds)
        templates: dict[tuple[Any, ...], tuple[str, str, str, str] | None] = {}
        psu_texts: dict[str | None, str] = {}
        kind_of = self._kind
        for p, name in zip(self.planned, self.names, strict=True):
            rack = p.facts.label(RACK_LABEL)
            psu = psu_texts.get(rack)
            if psu is None:
                psu = psu_texts[rack] = json.dumps(
                    _psu_score(self.psu_scores, rack, self.rack_w, self.cluster_it_w))
            kind = kind_of(p)
            node_name = p.facts.name
            node = encode_basestring(node_name)
            obj = node if name == node_name else encode_basestring(name)
            if kind not in templates:
                text = json.dumps(self.doc(p, name)[0], ensure_ascii=False)
                templates[kind] = _split_twin(text, obj, node, psu)
                yield text
                continue
            template = templates[kind]
            if template is None:  # a text the names or the score cannot be found in: each in full
                yield json.dumps(self.doc(p, name)[0], ensure_ascii=False)
                continue
            head, middle, scored, tail = template
            yield f"{head}{obj}{middle}{node}{scored}{psu}{tail}"


_OBJ_AT, _NODE_AT, _PSU_AT = '"metadata": {"name": ', '"spec": {"nodeName": ', '"predictedPsuStressScore": '


def _split_twin(text: str, obj: str, node: str, psu: str) -> tuple[str, str, str, str] | None:
    """A twin's JSON text cut where its object name, node name and PSU score go (in that order),
    or None when one is not where it should be."""
    head, found, rest = text.partition(_OBJ_AT + obj + ", ")
    if not found:
        return None
    middle, found, rest = rest.partition(_NODE_AT + node + ", ")
    if not found:
        return None
    scored, found, tail = rest.partition(_PSU_AT + psu + ", ")
    if not found:
        return None
    return head + _OBJ_AT, ", " + middle + _NODE_AT, ", " + scored + _PSU_AT, ", " + tail


def _psu_score(psu_scores: dict[str | None, float | int], rack: str | None, rack_w: Mapping[str, float],
               cluster_it_w: float) -> float | int:
    """A rack's PSU stress score (computed once per rack)."""
    score = psu_scores.get(rack)
    if score is None:
        score = psu_scores[rack] = _score(twin.psu_stress(rack_w.get(rack, 0.0) if rack else 0.0, cluster_it_w))
    return score


def ineligibility(facts: NodeFacts, selector: Iterable[Requirement] = ()) -> str | None:
    """Why a node is not planned (reserved, unschedulable, selector), or None."""
    if facts.label(RESERVED_LABEL) == "true":
        return f"reserved ({RESERVED_LABEL}=true)"
    if facts.unschedulable:
        return "unschedulable (cordoned)"
    return selector_miss(selector, facts.labels)


def _running(pod: PodRef) -> bool:
    return not pod.deleting and pod.phase not in NOT_RUNNING


def performance_pod_demand(pods: list[PodRef]) -> int:
    """Performance-sensitive pods (and template replicas) not finished: the queue-aware demand."""
    return sum(
        pod.replicas if pod.kind != "Pod" else 1
        for pod in pods
        if pod_excludes_eco(pod) and not pod.deleting and pod.phase not in ("Succeeded", "Failed")
    )


def performance_pods_by_node(pods: list[PodRef]) -> dict[str, int]:
    """Running performance-sensitive pods per node (``spec.nodeName``): the draining guard's input."""
    out: dict[str, int] = defaultdict(int)
    for pod in pods:
        node = pod.spec.get("nodeName")
        if pod.kind == "Pod" and isinstance(node, str) and node and _running(pod) and pod_excludes_eco(pod):
            out[node] += 1
    return out


def _ambient(facts: NodeFacts, facility: Mapping[str, Any] | None) -> float | None:
    if not facility or facility.get("ambientC") is None:
        return None
    ambient = float(facility["ambientC"])
    zone = facts.label(COOLING_ZONE_LABEL)
    for z in facility.get("coolingZones") or []:
        if zone and z.get("name") == zone:
            ambient += float(z.get("offsetC") or 0.0)
    return ambient


def _iso(now: datetime) -> str:
    return now.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _score(value: float) -> float | int:
    rounded = round(value, 4)
    return int(rounded) if rounded == int(rounded) else rounded


@dataclass
class _Sized:
    """A profile's caps and budgets for one kind of hardware, with the numbers a twin prints."""

    caps: CapPlan
    budget: twin.Budget
    measurement: dict[str, float | int]  # powerMeasurement's budget fields
    cap_state: dict[str, float | int]
    density_score: float | int


@dataclass
class _Planned:
    facts: NodeFacts
    profile: str
    draining: bool
    sized: _Sized
    measured_w: float
    baseline_w: float


class _Sizer:
    """Caps and budgets per (hardware signature, profile), computed once."""

    def __init__(self, options: PlanOptions) -> None:
        self.options = options
        self._cache: dict[tuple[Any, str], _Sized] = {}

    def __call__(self, facts: NodeFacts, profile: str) -> _Sized:
        key = (facts.key if facts.key is not None else id(facts), profile)
        sized = self._cache.get(key)
        if sized is None:
            caps = plan_caps(facts, profile, self.options)
            b = twin.budget(facts.cpu_tdp_w, facts.gpu_tdp_w, caps.cpu_pct, caps.gpu_pct)
            sized = _Sized(
                caps=caps,
                budget=b,
                measurement={
                    "cpuCappedPowerW": num(b.cpu_capped_w),
                    "gpuCappedPowerW": num(b.gpu_capped_w),
                    "nodeCappedPowerW": num(b.node_capped_w),
                    "cpuTdpW": num(b.cpu_tdp_w),
                    "gpuTdpW": num(b.gpu_tdp_w),
                    "nodeTdpW": num(b.node_tdp_w),
                },
                cap_state={"cpuPct": _score(caps.cpu_pct), "gpuPct": _score(caps.gpu_pct)},
                density_score=_score(twin.density_score(facts.total_cores, facts.gpu_count)),
            )
            self._cache[key] = sized
        return sized


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: planning builds only acyclic dicts, and collections
    triggered by them rescan the whole input again and again (half the time of a 10,000-node plan)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def plan(cluster: ClusterInput, options: PlanOptions, *, now: datetime | None = None) -> PlanResult:
    """Plan ``cluster`` with ``options``: NodeTwin objects for every eligible node."""
    with no_gc():
        return _plan(cluster, options, now)


def _plan(cluster: ClusterInput, options: PlanOptions, now: datetime | None) -> PlanResult:
    options.validate()
    model_caps = options.model_cap_table()
    governor_models = frozenset(normalize(strip_gfd_suffix(str(k))) for k in options.governor_model_presets)
    now = now or datetime.now(timezone.utc)
    facts_cache = FactsCache(model_caps, governor_models)
    requirements = options.selector_requirements()

    eligible: list[NodeFacts] = []
    ineligible: list[tuple[str, str]] = []
    facts_of, hardware_of = facts_cache.facts, cluster.hardware.get
    for node in cluster.nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            raise InputError("a node has no metadata.name", file=cluster.source)
        facts = facts_of(node, hardware_of(name))
        reason = ineligibility(facts, requirements)
        if reason:
            ineligible.append((facts.name, reason))
        else:
            eligible.append(facts)

    n = len(eligible)
    if options.policy == "queue-aware":
        demand = performance_pod_demand(cluster.pods)
        hp = policy.queue_aware_count(
            n,
            options.queue_base_fraction,
            options.queue_min,
            options.queue_max,
            options.pods_per_performance_node,
            demand,
        )
    else:
        demand = 0
        hp = policy.static_count(n, options.performance_fraction)
    sized_count = hp
    hp = policy.family_floor(hp, (f.family for f in eligible), n)
    by_name = sorted(eligible, key=attrgetter("name"))
    ordered = policy.density_order(by_name, attrgetter("density"))
    performance = policy.select_performance([(f.name, f.family) for f in ordered], hp)
    perf_pods = performance_pods_by_node(cluster.pods)

    # one pass in name order: each node's profile, caps and budget, its rack's budget, its NodeTwin name
    sizer = _Sizer(options)
    planned: list[_Planned] = []
    telemetry = cluster.telemetry
    rack_w: dict[str, float] = defaultdict(float)
    object_names: dict[str, str] = {}
    names: list[str] = []
    for facts in by_name:
        name = facts.name
        profile = "performance" if name in performance else "eco"
        draining = profile == "eco" and perf_pods.get(name, 0) > 0
        sized = sizer(facts, profile)
        capped_w = sized.budget.node_capped_w
        baseline_w = capped_w if profile == "performance" else sizer(facts, "performance").budget.node_capped_w
        measured = float(telemetry.get(name, 0.0)) if telemetry else 0.0
        planned.append(_Planned(facts, profile, draining, sized, measured, baseline_w))
        rack = facts.labels.get(RACK_LABEL)  # NodeFacts.label, inline
        if rack is not None and (rack := str(rack)):
            rack_w[rack] += capped_w
        # a name already of [a-z0-9-], starting and ending alphanumeric, is its own NodeTwin name
        obj_name = name if _TWIN_NAME(name) else sanitize_name(name)
        if not obj_name:
            raise InputError(f"node name {name!r} gives an empty NodeTwin name", file=cluster.source)
        if obj_name in object_names:
            raise InputError(
                f"nodes {object_names[obj_name]!r} and {name!r} share the NodeTwin name {obj_name!r}",
                file=cluster.source,
            )
        object_names[obj_name] = name
        names.append(obj_name)
    cluster_it_w = sum(p.measured_w for p in planned)
    render = _Render(planned, names, POLICY_NAMES[options.policy], cluster, rack_w, cluster_it_w, _iso(now))
    summary = _summary(planned, ineligible, options, sized_count, hp, demand, len(cluster.nodes))
    return PlanResult(ineligible, summary, _warnings(cluster, options, planned), render)


def _some(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _model_warnings(planned: list[_Planned]) -> list[str]:
    """One warning per GPU model planned with the generic assumption (and for nodes naming none)."""
    models: dict[str | None, list[NodeFacts]] = {}
    for p in planned:
        if p.facts.is_gpu_node and p.facts.gpu_range_source == "generic":
            models.setdefault(p.facts.gpu_model, []).append(p.facts)
    out = []
    for model, nodes in sorted(models.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        f = nodes[0]
        n = f"{len(nodes)} node" + ("s" if len(nodes) != 1 else "")
        what = f"GPU model {model!r} is not in the catalog" if model else "GPU nodes name no GPU model"
        out.append(
            f"{what} ({n}: {_some([x.name for x in nodes])}): planned with the generic assumption of "
            f"{num(f.gpu_max_w)} W per GPU (min {num(f.gpu_min_w)} W), GPU caps in percent only; give the "
            "model's range with --model-caps FILE"
            + ("" if model else " and its label with --gpu-product-label KEY")
        )
    return out


def _warnings(cluster: ClusterInput, options: PlanOptions, planned: list[_Planned]) -> list[str]:
    out: list[str] = unread_gpu_names(cluster.nodes)
    out += _model_warnings(planned)
    if options.policy == "queue-aware" and not cluster.pods:
        out.append("queue-aware without pods (--pods): the demand is 0, so the base fraction sizes the plan")
    unknown_hw: list[str] = []
    if cluster.hardware:
        node_names = {str((n.get("metadata") or {}).get("name") or "") for n in cluster.nodes}
        unknown_hw = sorted(set(cluster.hardware) - node_names)
    if unknown_hw:
        out.append(f"NodeHardware for {len(unknown_hw)} node(s) not in the node list ignored: {_some(unknown_hw)}")
    if cluster.telemetry_given and planned:
        planned_names = {p.facts.name for p in planned}
        if not planned_names & set(cluster.telemetry):
            out.append(f"the telemetry names none of the planned nodes (it names {_some(sorted(cluster.telemetry))})")
    return out


def _copy_gpu(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh ``spec.gpu`` (the cached one is shared: YAML would print anchors for shared dicts)."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in gpu.items()}


def _twin(
    p: _Planned,
    obj_name: str,
    policy_name: str,
    cluster: ClusterInput,
    rack_w: Mapping[str, float],
    cluster_it_w: float,
    updated: str,
    psu_scores: dict[str | None, float | int],
) -> tuple[dict[str, Any], dict[str, Any]]:
    facts, sized = p.facts, p.sized
    b, caps = sized.budget, sized.caps
    measured = p.measured_w
    if measured:
        ambient = _ambient(facts, cluster.facility)
        cooling = twin.cooling_stress(measured, b.node_tdp_w, ambient)
        headroom_out: float | int = _score(twin.headroom_score(b.node_capped_w, measured))
        cooling_out: float | int = _score(cooling)
        pue_out: float | int = _score(twin.estimated_pue(cooling))
    else:  # nothing measured: full headroom, no cooling stress
        headroom_out, cooling_out, pue_out = 100, 0, _score(twin.estimated_pue(0.0))
    rack = facts.label(RACK_LABEL)
    psu_out = _psu_score(psu_scores, rack, rack_w, cluster_it_w)
    if not cluster.telemetry_given:
        source = "static"
    elif facts.name in cluster.telemetry:
        source = "prometheus"
    else:
        source = "prometheus-no-data"

    spec: dict[str, Any] = {"nodeName": facts.name, "profile": p.profile, "cpu": dict(caps.cpu)}
    if caps.gpu is not None:
        spec["gpu"] = _copy_gpu(caps.gpu)
    spec["policy"] = {"name": policy_name}
    spec["scheduling"] = {"draining": p.draining}

    annotations = {ANNOTATION_PREFIX + "family": facts.family}
    if facts.is_gpu_node:
        annotations[ANNOTATION_PREFIX + "gpu-count"] = f"{facts.gpu_count} ({facts.gpu_count_source})"
        annotations[ANNOTATION_PREFIX + "gpu-power-domains"] = str(facts.power_domains)
    if caps.gpu_cap_source:
        annotations[ANNOTATION_PREFIX + "gpu-cap-source"] = caps.gpu_cap_source
    if caps.notes:
        annotations[ANNOTATION_PREFIX + "notes"] = "; ".join(caps.notes)

    cls = "draining" if p.draining else p.profile
    measured_out = num(measured) if measured else 0
    status: dict[str, Any] = {
        "schedulableClass": cls,
        "powerMeasurement": {
            "source": source,
            "measuredNodePowerW": measured_out,
            **sized.measurement,
            "powerTrendWPerMin": num(cluster.trends[facts.name]) if facts.name in cluster.trends else 0,
        },
        "predictedPowerHeadroomScore": headroom_out,
        "predictedCoolingStressScore": cooling_out,
        "predictedPsuStressScore": psu_out,
        "effectiveCapState": dict(sized.cap_state),
        "hardwareDensityScore": sized.density_score,
        "estimatedPUE": pue_out,
        "lastUpdated": updated,
    }
    doc = {
        "apiVersion": API_VERSION,
        "kind": "NodeTwin",
        "metadata": {"name": obj_name, "annotations": annotations},
        "spec": spec,
        "status": status,
    }
    gpu = caps.gpu or {}
    power_cap = gpu.get("powerCap") or {}
    row = {
        "node": facts.name,
        "profile": p.profile,
        "class": cls,
        "family": facts.family,
        "density": round(facts.density, 2),
        "gpuCount": facts.gpu_count,
        "gpuCountSource": facts.gpu_count_source,
        "powerDomains": facts.power_domains,
        "gpuCapPct": power_cap.get("capPctOfMax"),
        "gpuCapWattsPerGpu": power_cap.get("capWattsPerGpu"),
        "gpuGovernor": gpu.get("governor"),
        "cpuCapPct": caps.cpu.get("packagePowerCapPctOfMax"),
        "cpuCapWatts": caps.cpu.get("packagePowerCapWatts"),
        "nodeTdpW": sized.measurement["nodeTdpW"],
        "plannedW": sized.measurement["nodeCappedPowerW"],
        "measuredW": measured_out,
        "headroom": headroom_out,
        "cooling": cooling_out,
        "notes": list(caps.notes),
    }
    return doc, row


def _summary(
    planned: list[_Planned],
    ineligible: list[tuple[str, str]],
    options: PlanOptions,
    sized: int,
    hp: int,
    demand: int,
    total: int,
) -> dict[str, Any]:
    profiles: dict[str, dict[str, float]] = {
        name: {"nodes": 0, "tdpW": 0.0, "plannedW": 0.0} for name in ("performance", "eco")
    }
    draining = 0
    tdp: float = 0
    planned_w: float = 0
    baseline: float = 0
    families: set[str] = set()
    for p in planned:  # one pass; each sum in the order of planned, as sum() added them
        agg = profiles[p.profile]
        budget = p.sized.budget
        tdp_w, capped_w = budget.node_tdp_w, budget.node_capped_w
        agg["nodes"] += 1
        agg["tdpW"] += tdp_w
        agg["plannedW"] += capped_w
        draining += p.draining
        tdp += tdp_w
        planned_w += capped_w
        baseline += p.baseline_w
        families.add(p.facts.family)
    saving = baseline - planned_w
    return {
        "policy": options.policy,
        "nodes": total,
        "planned": len(planned),
        "ineligible": len(ineligible),
        "performanceTarget": sized,
        "performance": hp,
        "eco": len(planned) - hp,
        "draining": draining,
        "performancePods": demand,
        "families": len(families),
        "profiles": {
            name: {"nodes": int(agg["nodes"]), "tdpW": num(agg["tdpW"]), "plannedW": num(agg["plannedW"])}
            for name, agg in profiles.items()
        },
        "tdpW": num(tdp),
        "allPerformanceW": num(baseline),
        "plannedW": num(planned_w),
        "savingW": num(saving),
        "savingPct": _score(saving / baseline * 100.0 if baseline > 0 else 0.0),
    }
