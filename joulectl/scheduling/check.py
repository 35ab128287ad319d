"""schedule-check: read pods and cluster state, filter and score every node, pick the best.

Pure over plain data (Kubernetes objects as dicts); the file readers raise
:class:`~joulectl.errors.InputError` naming the file, the document and the problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from joulectl.errors import InputError, UnschedulableError
from joulectl.k8s import POD_TEMPLATE_KINDS, PodRef, iter_pods, name_of, sanitize_name, unread_gpu_names
from joulectl.scheduling import hami
from joulectl.scheduling.demand import PodDemand, pod_demand
from joulectl.scheduling.filters import NodeView, filter_reasons, hami_fit, node_view
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
    #: HAMi's cards for the pod, per container (UUIDs), when HAMi places it on the node
    devices: tuple[tuple[str, ...], ...] | None = None


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


NOT_RUNNING = frozenset({"Succeeded", "Failed"})


def running_pods_by_node(pods: Iterable[PodRef]) -> dict[str, list[PodRef]]:
    """Pods bound to a node (``spec.nodeName``, else HAMi's ``hami.io/vgpu-node``) that still hold
    its resources: not finished, not terminating. Templates hold nothing."""
    out: dict[str, list[PodRef]] = {}
    for pod in pods:
        if pod.kind != "Pod" or pod.deleting or pod.phase in NOT_RUNNING:
            continue
        node = pod.spec.get("nodeName") or pod.annotations.get("hami.io/vgpu-node")
        if isinstance(node, str) and node:
            out.setdefault(node, []).append(pod)
    return out


def build_views(
    nodes: Sequence[Mapping[str, Any]],
    twins: Sequence[Mapping[str, Any]],
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
    running: Iterable[PodRef] = (),
) -> list[NodeView]:
    """One :class:`NodeView` per node, sorted by name, with its twin, NodeHardware and what the
    ``running`` pods bound to it use."""
    matched = match_twins(nodes, twins)
    hw = hardware or {}
    bound = running_pods_by_node(running)
    views = [node_view(n, matched.get(name_of(n)), hw.get(name_of(n)), bound.get(name_of(n), ())) for n in nodes]
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
    node_policy = hami.policy_of(demand.annotations, hami.NODE_POLICY_ANNOTATION, hami.DEFAULT_NODE_POLICY)
    binpack = node_policy == hami.BINPACK
    rank: dict[str, float] = {}
    for view in views:
        reasons = filter_reasons(demand, view)
        if reasons:
            verdicts.append(NodeVerdict(view.name, False, "; ".join(reasons), None))
            continue
        marginal = marginal_watts(power, view.hardware, _node_cores(view))
        s = score(demand.workload_class, twin_views.get(view.name), agg, now, marginal)
        devices = None
        reason = s.reason
        if demand.hami_requests and view.hami:
            fit = hami_fit(demand, view)
            if fit is not None and fit.ok:
                devices = tuple(tuple(p.uuid for p in ctr) for ctr in fit.placed)
            node_score = view.hami_node_score
            rank[view.name] = -node_score if binpack else node_score
            if node_score:
                reason = f"{reason}; HAMi {'binpack' if binpack else 'spread'} node score {round(node_score, 2):g}"
        verdicts.append(NodeVerdict(view.name, True, reason, s.value, devices))
    fitting = [v for v in verdicts if v.fits and v.score is not None]
    # HAMi's node policy first (binpack prefers the most used node), then Joulie's score, then the name
    best = min(fitting, key=lambda v: (rank.get(v.node, 0.0), -(v.score or 0), v.node)).node if fitting else None
    return PodVerdict(demand, tuple(verdicts), best)


#: annotation prefixes the filters read (HAMi's type, UUID, numa and policy annotations)
_SHAPE_ANNOTATIONS = ("nvidia.com/", "hami.io/")


def shape_of(demand: PodDemand) -> tuple[Any, ...]:
    """Everything of a pod the filters and the score read: pods of one shape get one verdict."""
    spec = demand.pod.spec
    placement = json.dumps(
        [spec.get("nodeName"), spec.get("nodeSelector"), spec.get("affinity")], sort_keys=True, default=str
    )
    annotations = tuple(sorted((k, v) for k, v in demand.annotations.items() if k.startswith(_SHAPE_ANNOTATIONS)))
    return (
        demand.workload_class,
        tuple(sorted(demand.gpu_requests.items())),
        demand.cpu_cores,
        demand.memory_bytes,
        demand.hami_requests,
        demand.hami_only,
        annotations,
        placement,
    )


def check(
    demands: Sequence[PodDemand],
    nodes: Sequence[Mapping[str, Any]],
    twins: Sequence[Mapping[str, Any]],
    now: datetime,
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
    running: Iterable[PodRef] = (),
) -> list[PodVerdict]:
    """Filter and score every node for every pod; pods of one shape (:func:`shape_of`) share one
    evaluation (1,000 pods of a few shapes cost a few pods)."""
    return check_views(demands, build_views(nodes, twins, hardware, running), twins, now)


def check_views(
    demands: Sequence[PodDemand], views: Sequence[NodeView], twins: Sequence[Mapping[str, Any]], now: datetime
) -> list[PodVerdict]:
    """:func:`check` over node views already built."""
    read = {id(t): TwinView.from_twin(t) for t in twins}
    twin_views = {v.name: read.get(id(v.twin)) or TwinView.from_twin(v.twin) for v in views if v.twin is not None}
    agg = aggregates(read.values(), now)
    done: dict[tuple[Any, ...], PodVerdict] = {}
    out: list[PodVerdict] = []
    for d in demands:
        key = shape_of(d)
        first = done.get(key)
        if first is None:
            first = done[key] = check_pod(d, views, twin_views, agg, now)
            out.append(first)
        else:
            out.append(PodVerdict(d, first.nodes, first.best_node))
    return out


def node_warnings(views: Iterable[NodeView]) -> list[str]:
    return [f"node {v.name}: {n}" for v in views for n in v.notes]


# -- output -------------------------------------------------------------------------------------


def _qty(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def _node_entry(n: NodeVerdict) -> dict[str, Any]:
    entry: dict[str, Any] = {"node": n.node, "fits": n.fits, "reason": n.reason, "score": n.score}
    if n.devices is not None:
        entry["devices"] = [list(ctr) for ctr in n.devices]
    return entry


def _pod_entry(v: PodVerdict, with_nodes: bool = True) -> dict[str, Any]:
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
    }
    if with_nodes:
        entry["nodes"] = [_node_entry(n) for n in v.nodes]
    if d.notes:
        entry["notes"] = list(d.notes)
    return entry


def _head(verdicts: Sequence[PodVerdict], now: datetime) -> dict[str, Any]:
    infeasible = sum(1 for v in verdicts if not v.feasible)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generatedAt": now.isoformat().replace("+00:00", "Z")},
        "summary": {"pods": len(verdicts), "feasible": len(verdicts) - infeasible, "unschedulable": infeasible},
    }


def to_document(verdicts: Sequence[PodVerdict], now: datetime) -> dict[str, Any]:
    """The ``ScheduleCheck`` object printed by ``-o yaml`` (``-o json`` streams the same object)."""
    return {**_head(verdicts, now), "pods": [_pod_entry(v) for v in verdicts]}


def write_json(verdicts: Sequence[PodVerdict], now: datetime, out: IO[str]) -> None:
    """The ``ScheduleCheck`` object as JSON, written pod by pod: one line per node verdict, and the
    node list of a pod shape encoded once for every pod of that shape (as UTF-8 bytes, written to
    the stream's buffer when it has one: a million node verdicts are 140 MB)."""
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()

    def write(text: str, encoded: bytes | None = None) -> None:
        if buffer is not None:
            buffer.write(encoded if encoded is not None else text.encode("utf-8"))
        else:
            out.write(text)

    head = json.dumps(_head(verdicts, now), indent=2, ensure_ascii=False)
    write(head[:-2] + ',\n  "pods": [')
    encoded: dict[int, tuple[str, bytes]] = {}
    dumps = json.dumps
    for i, v in enumerate(verdicts):
        nodes = encoded.get(id(v.nodes))
        if nodes is None:
            text = ",\n".join("        " + dumps(_node_entry(n), ensure_ascii=False) for n in v.nodes)
            text = ',\n      "nodes": [\n' + text + "\n      ]\n    }"
            nodes = encoded[id(v.nodes)] = (text, text.encode("utf-8"))
        pod = dumps(_pod_entry(v, with_nodes=False), indent=2, ensure_ascii=False)
        write(("," if i else "") + "\n" + "\n".join("    " + line for line in pod[:-2].splitlines()))
        write(*nodes)
    write("\n  ]\n}\n" if verdicts else "]\n}\n")
    if buffer is not None:
        buffer.flush()


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
    #: pods of ``--pods``: those bound to a node use its resources and HAMi cards
    pods: list[PodRef] = field(default_factory=list)


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
    return Cluster(list(cluster.nodes), list(result.twins), dict(cluster.hardware), list(cluster.pods))


def cluster_from_nodes(
    nodes: str | None, twins: str | None, hardware: Sequence[str] = (), pods: str | None = None
) -> Cluster:
    """``--nodes NODES.yaml --twins TWINS.yaml [--hardware FILE]... [--pods PODS.yaml]``."""
    found: dict[str, dict[str, Any]] = {}
    for path in hardware:
        found.update(load_hardware(path))
    base = cluster_from_files(nodes, twins)
    running: list[PodRef] = []
    if pods is not None:
        from joulectl.planning.inputs import read_pods
        from joulectl.yamlio import load_documents

        running = read_pods(load_documents(pods, what="pods file"), _label(pods))
    return Cluster(base.nodes, base.twins, found, running)


@dataclass
class CheckReport:
    verdicts: list[PodVerdict]
    now: datetime
    warnings: list[str]
    _document: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def document(self) -> dict[str, Any]:
        """The whole ``ScheduleCheck`` object (``-o yaml``; ``-o json`` streams it instead)."""
        if self._document is None:
            self._document = to_document(self.verdicts, self.now)
        return self._document

    def write_json(self, out: IO[str]) -> None:
        write_json(self.verdicts, self.now, out)

    def error(self) -> UnschedulableError | None:
        """Exit 6 when a pod fits no node."""
        missing = unschedulable(self.verdicts)
        if not missing:
            return None
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        return UnschedulableError(
            f"{len(missing)} of {len(self.verdicts)} pods fit no node: {shown}",
            hint="the reason of every node is in the output",
        )


def run(pod_files: Sequence[str], cluster: Cluster, now: datetime) -> CheckReport:
    """Read the pods, check them against the cluster, build the report."""
    demands, warnings = load_pods(pod_files)
    warnings += unread_gpu_names(cluster.nodes)
    views = build_views(cluster.nodes, cluster.twins, cluster.hardware, cluster.pods)
    warnings += node_warnings(views)
    verdicts = check_views(demands, views, cluster.twins, now)
    seen: set[tuple[str, str]] = set()
    for v in verdicts:
        for n in v.demand.notes:
            if (v.demand.label, n) not in seen:
                seen.add((v.demand.label, n))
                warnings.append(f"{v.demand.label}: {n}")
    return CheckReport(verdicts, now, warnings)
