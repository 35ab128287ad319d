"""schedule-check: read pods and cluster state, filter and score every node, pick the best.

Pure over plain data (Kubernetes objects as dicts); the file readers raise
:class:`~joulectl.errors.InputError` naming the file, the document and the problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from joulectl.errors import InputError, UnschedulableError
from joulectl.k8s import POD_TEMPLATE_KINDS, iter_pods, name_of, sanitize_name
from joulectl.scheduling.demand import PodDemand, pod_demand
from joulectl.scheduling.filters import NodeView, filter_reasons, node_view
from joulectl.scheduling.score import (
    ClusterAggregates,
    PodPowerDemand,
    TwinView,
    aggregates,
    marginal_watts,
    score,
    twin_number_problem,
)

API_VERSION = "joulectl.io/v1alpha1"
KIND = "ScheduleCheck"
POD_KINDS = frozenset({"Pod", "PodTemplate", "CronJob", *POD_TEMPLATE_KINDS})


# -- reading ------------------------------------------------------------------------------------


def _label(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _items(doc: Any) -> Iterable[Any]:
    """A document, or the items of a List / *List."""
    if isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _items(item)
    else:
        yield doc


def pods_from_documents(docs: Sequence[Any], label: str) -> tuple[list[PodDemand], list[str]]:
    """Pods and pod templates of a file's documents, and warnings for objects that carry none."""
    demands: list[PodDemand] = []
    skipped: list[str] = []
    for i, doc in enumerate(docs, start=1):
        where = f"document {i}" if len(docs) > 1 else "document"
        for obj in _items(doc):
            if not isinstance(obj, Mapping) or not obj.get("kind") or "apiVersion" not in obj:
                raise InputError("not a Kubernetes object (no apiVersion and kind)", file=label, field=where)
            kind = str(obj["kind"])
            if kind not in POD_KINDS:
                skipped.append(f"{label}: {where}: {kind} {name_of(obj) or '<unnamed>'} carries no pod; skipped")
                continue
            try:
                refs = list(iter_pods(obj, label))
            except ValueError as e:
                raise InputError(str(e), file=label, field=where) from None
            demands.extend(pod_demand(ref, label) for ref in refs)
    return demands, skipped


def load_pods(paths: Sequence[str]) -> tuple[list[PodDemand], list[str]]:
    """Every pod of every file; a file set with no pod at all is an error."""
    from joulectl.yamlio import load_documents

    demands: list[PodDemand] = []
    warnings: list[str] = []
    for path in paths:
        found, skipped = pods_from_documents(load_documents(path, what="pod file"), _label(path))
        demands += found
        warnings += skipped
    if not demands:
        raise InputError(
            "no Pod or pod template (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob) found",
            file=", ".join(_label(p) for p in paths),
        )
    return demands, warnings


def _objects(path: str, kind: str, what: str) -> list[dict[str, Any]]:
    from joulectl.yamlio import load_documents

    label = _label(path)
    docs = load_documents(path, what=what)
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs, start=1):
        where = f"document {i}" if len(docs) > 1 else "document"
        for obj in _items(doc):
            if not isinstance(obj, Mapping) or not obj.get("kind"):
                raise InputError("not a Kubernetes object (no kind)", file=label, field=where)
            if obj["kind"] != kind:
                raise InputError(f"expected {kind} objects, found {obj['kind']}", file=label, field=where)
            if not name_of(obj) and not (kind == "NodeTwin" and _twin_node_name(obj)):
                raise InputError(f"{kind} without metadata.name", file=label, field=where)
            out.append(dict(obj))
    return out


def load_nodes(path: str) -> list[dict[str, Any]]:
    """Node objects of a ``kubectl get nodes -o yaml`` export (a NodeList, a List or Node documents)."""
    nodes = _objects(path, "Node", "nodes file")
    if not nodes:
        raise InputError("no Node objects found", file=_label(path))
    return nodes


def load_twins(path: str) -> list[dict[str, Any]]:
    """NodeTwin objects (``kubectl get nodetwins -o yaml``, or ``joulectl plan -o yaml``).

    A score field that is not a finite number (``.nan``, ``.inf``, a string, a list) is bad input,
    named by file, twin and field: it would otherwise turn into a NaN score."""
    twins = _objects(path, "NodeTwin", "twins file")
    for twin in twins:
        problem = twin_number_problem(twin)
        if problem is not None:
            dotted, message = problem
            name = name_of(twin) or _twin_node_name(twin)
            raise InputError(message, file=_label(path), field=f"NodeTwin {name}: {dotted}")
    return twins


def load_hardware(path: str) -> dict[str, dict[str, Any]]:
    """NodeHardware objects keyed by node name (``spec.nodeName``, else ``metadata.name``)."""
    out: dict[str, dict[str, Any]] = {}
    for obj in _objects(path, "NodeHardware", "hardware file"):
        spec = obj.get("spec")
        node = str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""
        out[node or name_of(obj)] = obj
    return out


# -- checking ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    fits: bool
    reason: str
    score: int | None  # None when the node filters the pod out (the extender scores only what passes)


@dataclass(frozen=True)
class PodVerdict:
    demand: PodDemand
    nodes: tuple[NodeVerdict, ...]
    best_node: str | None

    @property
    def feasible(self) -> bool:
        return self.best_node is not None


def _twin_node_name(twin: Mapping[str, Any]) -> str:
    spec = twin.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def match_twins(nodes: Sequence[Mapping[str, Any]], twins: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Node name -> its twin: by ``spec.nodeName``, else by object name ``sanitizeName(node)``."""
    by_node = {n: t for t in twins if (n := _twin_node_name(t))}
    by_name = {name_of(t): t for t in twins if name_of(t)}
    out: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        name = name_of(node)
        twin = by_node.get(name) or by_name.get(sanitize_name(name))
        if twin is not None:
            out[name] = twin
    return out


def _node_cores(node: NodeView) -> float:
    return node.allocatable.get("cpu", 0.0)


def build_views(
    nodes: Sequence[Mapping[str, Any]],
    twins: Sequence[Mapping[str, Any]],
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[NodeView]:
    """One :class:`NodeView` per node, sorted by name, with its twin and NodeHardware."""
    matched = match_twins(nodes, twins)
    hw = hardware or {}
    views = [node_view(n, matched.get(name_of(n)), hw.get(name_of(n))) for n in nodes]
    return sorted(views, key=lambda v: v.name)


def check_pod(
    demand: PodDemand,
    views: Sequence[NodeView],
    twin_views: Mapping[str, TwinView],
    agg: ClusterAggregates,
    now: datetime,
) -> PodVerdict:
    """Filter and score every node for one pod; the best node is the highest score, ties by name."""
    power = PodPowerDemand(
        demand.workload_class, demand.cpu_cores, demand.memory_bytes, demand.gpus, demand.gpu_vendor
    )
    verdicts: list[NodeVerdict] = []
    for view in views:
        reasons = filter_reasons(demand, view)
        if reasons:
            verdicts.append(NodeVerdict(view.name, False, "; ".join(reasons), None))
            continue
        marginal = marginal_watts(power, view.hardware, _node_cores(view))
        s = score(demand.workload_class, twin_views.get(view.name), agg, now, marginal)
        verdicts.append(NodeVerdict(view.name, True, s.reason, s.value))
    fitting = [v for v in verdicts if v.fits and v.score is not None]
    best = min(fitting, key=lambda v: (-(v.score or 0), v.node)).node if fitting else None
    return PodVerdict(demand, tuple(verdicts), best)


def check(
    demands: Sequence[PodDemand],
    nodes: Sequence[Mapping[str, Any]],
    twins: Sequence[Mapping[str, Any]],
    now: datetime,
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[PodVerdict]:
    """Filter and score every node for every pod."""
    views = build_views(nodes, twins, hardware)
    read = {id(t): TwinView.from_twin(t) for t in twins}
    twin_views = {v.name: read.get(id(v.twin)) or TwinView.from_twin(v.twin) for v in views if v.twin is not None}
    agg = aggregates(read.values(), now)
    return [check_pod(d, views, twin_views, agg, now) for d in demands]


# -- output -------------------------------------------------------------------------------------


def _qty(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def to_document(verdicts: Sequence[PodVerdict], now: datetime) -> dict[str, Any]:
    """The ``ScheduleCheck`` object printed by ``-o json|yaml``."""
    pods: list[dict[str, Any]] = []
    for v in verdicts:
        d = v.demand
        entry: dict[str, Any] = {
            "name": d.name,
            "namespace": d.namespace,
            "kind": d.pod.kind,
            "source": d.source,
            "class": d.workload_class,
            "gpuRequest": {k: _qty(n) for k, n in sorted(d.gpu_requests.items())},
            "gpus": _qty(round(d.gpus, 3)),
            "cpuRequest": _qty(d.cpu_cores),
            "memoryRequestBytes": _qty(d.memory_bytes),
            "replicas": d.pod.replicas,
            "feasible": v.feasible,
            "bestNode": v.best_node,
            "nodes": [{"node": n.node, "fits": n.fits, "reason": n.reason, "score": n.score} for n in v.nodes],
        }
        if d.notes:
            entry["notes"] = list(d.notes)
        pods.append(entry)
    infeasible = sum(1 for v in verdicts if not v.feasible)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generatedAt": now.isoformat().replace("+00:00", "Z")},
        "summary": {"pods": len(verdicts), "feasible": len(verdicts) - infeasible, "unschedulable": infeasible},
        "pods": pods,
    }


def unschedulable(verdicts: Sequence[PodVerdict]) -> list[str]:
    """``namespace/name`` of every pod that fits no node."""
    return [f"{v.demand.namespace}/{v.demand.name}" for v in verdicts if not v.feasible]




# -- the command's work ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The cluster state a check runs against."""

    nodes: list[dict[str, Any]]
    twins: list[dict[str, Any]]
    hardware: dict[str, dict[str, Any]]


def parse_now(value: str | None) -> datetime:
    """``--now`` (ISO 8601; naive means UTC), or the current time."""
    from datetime import timezone

    from joulectl.scheduling.score import parse_time

    if value is None:
        return datetime.now(timezone.utc)
    t = parse_time(value)
    if t is None:
        raise InputError(f"not an ISO 8601 time: {value!r}", field="--now")
    return t


def cluster_from_files(nodes: str | None, twins: str | None, hardware: str | None = None) -> Cluster:
    """``--nodes NODES.yaml --twins TWINS.yaml [--hardware FILE]``."""
    if nodes is None:
        raise InputError("--twins goes with --nodes NODES.yaml", field="--twins")
    if twins is None:
        raise InputError(
            f"--nodes {nodes} needs --twins TWINS.yaml (the NodeTwin objects, `kubectl get nodetwins -o yaml`)",
            field="--twins",
        )
    return Cluster(load_nodes(nodes), load_twins(twins), load_hardware(hardware) if hardware else {})


def cluster_from_spec(
    spec: str,
    options: Any,
    now: datetime,
    *,
    hardware: Sequence[str] = (),
    pods: str | None = None,
    telemetry: str | None = None,
    profiles_dir: str | None = None,
) -> Cluster:
    """``--spec SPEC [plan flags]``: the spec's nodes, and the NodeTwins ``plan`` makes of them at ``now``."""
    from joulectl.planning import load_cluster, plan

    cluster = load_cluster(
        spec=spec, hardware=hardware, pods=pods, telemetry=telemetry, profiles_dir=profiles_dir
    )
    result = plan(cluster, options, now=now)
    return Cluster(list(cluster.nodes), list(result.twins), dict(cluster.hardware))


def cluster_from_nodes(nodes: str | None, twins: str | None, hardware: Sequence[str] = ()) -> Cluster:
    """``--nodes NODES.yaml --twins TWINS.yaml [--hardware FILE]...``."""
    found: dict[str, dict[str, Any]] = {}
    for path in hardware:
        found.update(load_hardware(path))
    base = cluster_from_files(nodes, twins)
    return Cluster(base.nodes, base.twins, found)


@dataclass(frozen=True)
class CheckReport:
    verdicts: list[PodVerdict]
    document: dict[str, Any]
    warnings: list[str]

    def error(self) -> UnschedulableError | None:
        """Exit 6 when a pod fits no node."""
        missing = unschedulable(self.verdicts)
        if not missing:
            return None
        return UnschedulableError(
            f"{len(missing)} of {len(self.verdicts)} pods fit no node: {', '.join(missing)}",
            hint="the reason of every node is in the output",
        )


def run(pod_files: Sequence[str], cluster: Cluster, now: datetime) -> CheckReport:
    """Read the pods, check them against the cluster, build the report."""
    demands, warnings = load_pods(pod_files)
    verdicts = check(demands, cluster.nodes, cluster.twins, now, cluster.hardware)
    for v in verdicts:
        warnings += [f"{v.demand.label}: {n}" for n in v.demand.notes]
    return CheckReport(verdicts, to_document(verdicts, now), warnings)
