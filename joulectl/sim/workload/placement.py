"""Placing tasks with schedule-check's own filter and score code, minus what is already in use.

The verdict of :func:`joulectl.scheduling.filters.filter_reasons` (class, node selection, GPU kind,
count and type, CPU and memory against allocatable) and the extender's
:func:`joulectl.scheduling.score.score` do not change while a replay runs (the plan's twins are
fixed), so they are computed once per task shape and group of identical nodes (same labels but the
host name, allocatable, twin); what changes is what is free on each node: CPU, memory, whole GPUs
and shares of GPUs. The best node is the highest score among the nodes that pass and have room,
ties by name, as schedule-check picks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from joulectl.k8s import PodRef, gpu_resource
from joulectl.scheduling.check import build_views
from joulectl.scheduling.demand import PodDemand, pod_demand
from joulectl.scheduling.filters import USE_GPUTYPE, GpuSelection, NodeView, filter_reasons
from joulectl.scheduling.score import PodPowerDemand, TwinView, aggregates, marginal_watts, score
from joulectl.sim.workload.fleet import FleetNode
from joulectl.sim.workload.traces import Task

_HOST_LABELS = ("kubernetes.io/hostname",)


def twins_now(twins: Sequence[Mapping[str, Any]]) -> datetime:
    """The time the plan's twins are judged at: their newest ``lastUpdated`` (so they are fresh)."""
    from datetime import timezone

    latest = None
    for t in twins:
        v = TwinView.from_twin(t).last_updated
        if v is not None and (latest is None or v > latest):
            latest = v
    return latest or datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Group:
    """Nodes that every filter and the score treat alike (indices into the node list, by name)."""

    key: Any
    view: NodeView
    members: list[int]
    gpu_resource: str | None
    gpu_product: str


def _node_gpu_resource(view: NodeView) -> str | None:
    for name in sorted(view.allocatable):
        res = gpu_resource(name)
        if res is not None and view.allocatable[name] > 0:
            return res.name
    return None


class Placer:
    """Filter, score and capacity of a fleet under one plan's twins."""

    def __init__(self, nodes: Sequence[FleetNode], twins: Mapping[str, Mapping[str, Any]],
                 gpu_counts: Sequence[int]) -> None:
        self.nodes = list(nodes)
        order = {n.name: i for i, n in enumerate(self.nodes)}
        twin_list = list(twins.values())
        self.now = twins_now(twin_list)
        views = build_views([n.node for n in self.nodes], twin_list, {n.name: n.hardware for n in self.nodes})
        read = {v.name: TwinView.from_twin(v.twin) for v in views if v.twin is not None}
        self.agg = aggregates(read.values(), self.now)
        self.twin_views = read
        groups: dict[Any, Group] = {}
        for v in views:  # sorted by name
            i = order[v.name]
            labels = tuple(sorted((k, val) for k, val in v.labels.items() if k not in _HOST_LABELS))
            key = (self.nodes[i].shape, labels, tuple(sorted(v.allocatable.items())), v.unschedulable,
                   read.get(v.name), tuple((g.type, g.count) for g in v.gpus))
            g = groups.get(key)
            if g is None:
                from joulectl.k8s import node_gpu_product

                groups[key] = Group(key, v, [i], _node_gpu_resource(v), node_gpu_product(v.labels) or "")
            else:
                g.members.append(i)
        self.groups = list(groups.values())
        self.group_of: dict[int, Group] = {i: g for g in self.groups for i in g.members}
        by_node = sorted(views, key=lambda x: order[x.name])
        self.free_cpu = [round(v.allocatable.get("cpu", 0.0) * 1000) for v in by_node]
        self.free_mem = [v.allocatable.get("memory", 0.0) / 2**20 for v in by_node]
        self.cores_milli = list(self.free_cpu)
        self.gpu_free = [[1000] * c for c in gpu_counts]
        self._verdicts: dict[Any, list[tuple[int, Group]] | str] = {}
        self.names = [n.name for n in self.nodes]

    # -- demand and verdicts ---------------------------------------------------------------------

    def _pod(self, task: Task, resource: str | None) -> PodDemand:
        if task.pod is not None:
            return pod_demand(task.pod, task.source)
        requests: dict[str, Any] = {"cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}
        if task.gpus:
            requests[resource or task.gpu_resource or "nvidia.com/gpu"] = str(task.gpus)
        ann = {"joulie.io/workload-class": task.workload_class}
        if task.gpu_types:
            ann[USE_GPUTYPE] = ",".join(task.gpu_types)
        ref = PodRef(kind="Pod", name=task.name, namespace="default", annotations=ann, labels={},
                     spec={"containers": [{"name": "task", "resources": {"requests": requests}}]})
        return pod_demand(ref, task.source)

    def _shape_key(self, task: Task) -> Any:
        return (id(task.pod) if task.pod is not None else 0, task.workload_class, task.cpu_milli, task.memory_mib,
                task.gpus, task.gpu_resource, task.gpu_types)

    def candidates(self, task: Task) -> list[tuple[int, Group]] | str:
        """Groups that pass the filters for the task, as (score, group) best first; or the reason
        none does (the reasons of each group, joined), when the task can never be placed."""
        key = self._shape_key(task)
        found = self._verdicts.get(key)
        if found is not None:
            return found
        passing: list[tuple[int, Group]] = []
        reasons: dict[str, int] = {}
        for g in self.groups:
            resource = task.gpu_resource if task.gpu_resource else g.gpu_resource
            demand = self._pod(task, resource)
            why = filter_reasons(demand, g.view)
            if not why and task.gpu_types and task.pod is None and (resource is None or not
                                                                     resource.startswith("nvidia.com/")):
                sel = GpuSelection(list(task.gpu_types), None, None, None)
                if not sel.type_passes(g.gpu_product):
                    why = [f"needs a GPU of type {'|'.join(task.gpu_types)}, node has {g.gpu_product or 'none'}"]
            if why:
                text = "; ".join(why)
                reasons[text] = reasons.get(text, 0) + len(g.members)
                continue
            power = PodPowerDemand(demand.workload_class, demand.cpu_cores, demand.memory_bytes, demand.gpus,
                                   demand.gpu_vendor)
            marginal = marginal_watts(power, g.view.hardware, g.view.allocatable.get("cpu", 0.0))
            s = score(demand.workload_class, self.twin_views.get(g.view.name), self.agg, self.now, marginal)
            passing.append((s.value, g))
        result: list[tuple[int, Group]] | str
        if passing:
            passing.sort(key=lambda x: (-x[0], self.names[x[1].members[0]]))
            result = passing
        else:
            result = max(sorted(reasons.items()), key=lambda kv: kv[1])[0] if reasons else "no node"
        self._verdicts[key] = result
        return result

    # -- capacity ----------------------------------------------------------------------------------

    def fits(self, i: int, task: Task) -> tuple[int, ...] | None:
        """The GPUs of node ``i`` the task would hold if it fits there now (``()`` for no GPU), else None."""
        if self.free_cpu[i] < task.cpu_milli or self.free_mem[i] < task.memory_mib - 1e-9:
            return None
        if not task.gpus:
            return ()
        free = self.gpu_free[i]
        if task.gpu_milli >= 1000:
            whole = [g for g, f in enumerate(free) if f >= 1000]
            return tuple(whole[: task.gpus]) if len(whole) >= task.gpus else None
        best = None
        for g, f in enumerate(free):  # the fullest GPU the share fits on (HAMi's binpack), first on ties
            if f >= task.gpu_milli and (best is None or f < free[best]):
                best = g
        return None if best is None else (best,)

    def ever_fits(self, task: Task, groups: Sequence[tuple[int, Group]]) -> bool:
        """Whether some passing node could take the task when empty (else it can never run)."""
        for _s, g in groups:
            i = g.members[0]
            n_gpu = len(self.gpu_free[i])
            if self.cores_milli[i] >= task.cpu_milli and (not task.gpus or n_gpu >= task.gpus):
                return True
        return False

    def take(self, i: int, task: Task, gpus: tuple[int, ...]) -> None:
        self.free_cpu[i] -= task.cpu_milli
        self.free_mem[i] -= task.memory_mib
        share = 1000 if task.gpu_milli >= 1000 else task.gpu_milli
        for g in gpus:
            self.gpu_free[i][g] -= share

    def release(self, i: int, task: Task, gpus: tuple[int, ...]) -> None:
        self.free_cpu[i] += task.cpu_milli
        self.free_mem[i] += task.memory_mib
        share = 1000 if task.gpu_milli >= 1000 else task.gpu_milli
        for g in gpus:
            self.gpu_free[i][g] += share

    def best(self, task: Task, groups: Sequence[tuple[int, Group]],
             only: int | None = None) -> tuple[int, tuple[int, ...]] | None:
        """The best node with room for the task now (highest score, ties by name), or None.

        ``only``: consider that node alone (after a task ended there, the one node that changed)."""
        level: int | None = None
        choice: tuple[int, tuple[int, ...]] | None = None
        for s, g in groups:
            if level is not None and s < level:
                break
            if only is not None:
                if self.group_of[only] is g:
                    got = self.fits(only, task)
                    if got is not None:
                        return only, got
                continue
            for i in g.members:
                got = self.fits(i, task)
                if got is not None:
                    if choice is None or self.names[i] < self.names[choice[0]]:
                        choice = (i, got)
                    level = s
                    break
        return choice
