"""`joulectl schedule-check`: would this pod be placed, on which node, and if not why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from joulectl.cli.common import REPORT_FORMATS, NoHeaders, Report, check_format
from joulectl.cli.plan import (
    AbsoluteCaps,
    CpuEcoCapOnUncappable,
    CpuEcoPct,
    CpuPerformancePct,
    GovernorModelPresets,
    GpuEcoPct,
    GpuGovernor,
    GpuPerformancePct,
    GpuProductLabels,
    GpuResources,
    GpuShareResources,
    Hardware,
    ModelCaps,
    PerformanceFraction,
    Pods,
    PodsPerPerformanceNode,
    Policy,
    ProfilesDir,
    QueueBaseFraction,
    QueueMax,
    QueueMin,
    Selector,
    Telemetry,
    apply_gpu_flags,
    options_from_flags,
)

if TYPE_CHECKING:
    from joulectl.scheduling.check import CheckReport, PodVerdict

_PODS = "Pod files (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob; multi-document; - = stdin)."
_SPEC = "Cluster spec (ClusterSpec), planned with the plan flags by the same code as `plan`."
_NODES = "Node objects (kubectl get nodes -o yaml); needs --twins."
_TWINS = "NodeTwin objects (kubectl get nodetwins -o yaml, or plan -o yaml)."
_NOW = "Judge twin staleness (5 min) at this time instead of now."


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("schedule-check")
    def schedule_check(
        pod_files: Annotated[list[str], typer.Argument(metavar="POD_FILE", help=_PODS, show_default=False)],
        spec: Annotated[str | None, typer.Option("--spec", metavar="SPEC", help=_SPEC)] = None,
        nodes: Annotated[str | None, typer.Option("--nodes", metavar="NODES.yaml", help=_NODES)] = None,
        twins: Annotated[str | None, typer.Option("--twins", metavar="TWINS.yaml", help=_TWINS)] = None,
        hardware: Hardware = None,
        now: Annotated[str | None, typer.Option("--now", metavar="ISO8601", help=_NOW)] = None,
        policy: Policy = "static",
        performance_fraction: PerformanceFraction = 0.5,
        queue_base_fraction: QueueBaseFraction = 0.6,
        queue_min: QueueMin = 1,
        queue_max: QueueMax = 1_000_000,
        pods_per_performance_node: PodsPerPerformanceNode = 10,
        pods: Pods = None,
        gpu_eco_pct: GpuEcoPct = 60.0,
        gpu_performance_pct: GpuPerformancePct = 100.0,
        cpu_eco_pct: CpuEcoPct = 60.0,
        cpu_performance_pct: CpuPerformancePct = 100.0,
        absolute_caps: AbsoluteCaps = False,
        model_caps: ModelCaps = None,
        gpu_governor: GpuGovernor = None,
        governor_model_presets: GovernorModelPresets = None,
        cpu_eco_cap_on_uncappable_gpu_nodes: CpuEcoCapOnUncappable = False,
        telemetry: Telemetry = None,
        selector: Selector = None,
        gpu_resource: GpuResources = None,
        gpu_share_resource: GpuShareResources = None,
        gpu_product_label: GpuProductLabels = None,
        profiles_dir: ProfilesDir = None,
        output: Report = "table",
        no_headers: NoHeaders = False,
    ) -> None:
        """Would these pods be placed, where, and if not why (exit 6 when a pod fits no node)."""
        from joulectl.errors import InputError
        from joulectl.render import emit, warn
        from joulectl.scheduling.check import cluster_from_nodes, cluster_from_spec, parse_now, run

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        apply_gpu_flags(gpu_resource, gpu_share_resource, gpu_product_label)
        if spec is not None and (nodes is not None or twins is not None):
            raise InputError("give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml, not both", field="--spec")
        if spec is None and nodes is None and twins is None:
            raise InputError("the cluster is missing: give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml")
        at = parse_now(now)
        if spec is not None:
            options = options_from_flags(
                policy=policy, performance_fraction=performance_fraction, queue_base_fraction=queue_base_fraction,
                queue_min=queue_min, queue_max=queue_max, pods_per_performance_node=pods_per_performance_node,
                gpu_eco_pct=gpu_eco_pct, gpu_performance_pct=gpu_performance_pct, cpu_eco_pct=cpu_eco_pct,
                cpu_performance_pct=cpu_performance_pct, absolute_caps=absolute_caps, model_caps=model_caps,
                gpu_governor=gpu_governor, governor_model_presets=governor_model_presets,
                cpu_eco_cap_on_uncappable_gpu_nodes=cpu_eco_cap_on_uncappable_gpu_nodes, selector=selector,
            )
            cluster = cluster_from_spec(spec, options, at, hardware=hardware or (), pods=pods, telemetry=telemetry,
                                        profiles_dir=profiles_dir)
        else:
            cluster = cluster_from_nodes(nodes, twins, hardware or (), pods)
        report = run(pod_files, cluster, at)
        for line in report.warnings:
            warn(line)
        if fmt == "json":
            import sys

            report.write_json(sys.stdout)
            sys.stdout.flush()
        else:
            emit(None, fmt, out=_view(report))
        err = report.error()
        if err is not None:
            raise err


#: the API group of each workload kind schedule-check reads (``-o name`` prints ``deployment.apps/x``)
_API_VERSIONS = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                 "Job": "batch/v1", "CronJob": "batch/v1"}
#: fitting nodes a pod's table lists (the JSON lists every node; -o wide too)
BEST_NODES = 5
#: example nodes named per grouped reason (-o wide names every node)
EXAMPLES = 3


def _view(report: CheckReport) -> Any:
    """schedule-check in every ``-o`` format: the ScheduleCheck document, its tables (``-o wide``
    lists every node), one csv row and one ``kind/name`` per pod, custom-columns over the pods."""
    from joulectl.render import Column, View, kind_name

    cols = [
        Column(None, lambda v: v.demand.namespace, "namespace"),
        Column(None, lambda v: v.demand.name, "name"),
        Column(None, lambda v: v.demand.pod.kind, "kind"),
        Column(None, lambda v: v.demand.workload_class, "class"),
        Column(None, lambda v: round(v.demand.gpus, 3), "gpus"),
        Column(None, lambda v: v.demand.pod.replicas, "replicas"),
        Column(None, lambda v: "yes" if v.feasible else "no", "fits"),
        Column(None, lambda v: v.best_node, "best_node"),
        Column(None, lambda v: sum(1 for n in v.nodes if n.fits), "nodes.fitting"),
        Column(None, lambda v: len(v.nodes), "nodes.checked"),
    ]
    # the document only for the formats that print it: a table of 10,000 pods x 10,000 nodes would
    # otherwise build 100 million node entries it never shows
    return View(lambda: report.document, table=lambda wide: _table(report, wide), csv=lambda: (cols, report.verdicts),
                names=lambda: [kind_name(v.demand.pod.kind, _API_VERSIONS.get(v.demand.pod.kind, "v1"), v.demand.name)
                               for v in report.verdicts],
                items=lambda: list(report.document["pods"]))


def _table(report: CheckReport, wide: bool = False) -> str:
    """Per pod shape: the pods, their best nodes, and the reasons the other nodes fail, grouped
    (``wide``: every fitting node and every failing one named)."""
    from joulectl.render import table

    best = None if wide else BEST_NODES
    examples = None if wide else EXAMPLES

    groups: dict[int, list[PodVerdict]] = {}
    for v in report.verdicts:
        groups.setdefault(id(v.nodes), []).append(v)
    blocks: list[str] = []
    for members in groups.values():
        v = members[0]
        d = v.demand
        gpus = ", ".join(f"{n} {k}" for k, n in sorted(d.gpu_requests.items())) or "no GPU"
        verdict = f"fits, best node {v.best_node}" if v.best_node else "FITS NO NODE"
        names = [m.demand.label + (f" ({m.demand.pod.replicas} replicas)" if m.demand.pod.replicas != 1 else "")
                 for m in members]
        who = names[0] if len(names) == 1 else f"{len(names)} pods of one shape: " + ", ".join(names[:8]) + (
            f" and {len(names) - 8} more" if len(names) > 8 else "")
        title = f"{who} ({d.workload_class}, {gpus}): {verdict}"
        fitting = sorted((n for n in v.nodes if n.fits), key=lambda n: (n.node != v.best_node, -(n.score or 0), n.node))
        rows: list[tuple[object, ...]] = [
            ("yes", n.node, "-" if n.score is None else n.score, n.reason) for n in fitting[:best]
        ]
        if best is not None and len(fitting) > best:
            rows.append(("yes", f"... {len(fitting) - BEST_NODES} more", "", "fit too (-o json lists every node)"))
        failing: dict[str, list[str]] = {}
        for n in v.nodes:
            if not n.fits:
                failing.setdefault(n.reason, []).append(n.node)
        for reason, nodes in sorted(failing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            more = f" and {len(nodes) - examples} more" if examples is not None and len(nodes) > examples else ""
            shown = ", ".join(nodes[:examples]) + more
            rows.append(("no", f"{len(nodes)} node" + ("s" if len(nodes) != 1 else "") + f": {shown}", "-", reason))
        blocks.append(table(("FITS", "NODES", "SCORE", "REASON"), rows, title=title))
    return "\n".join(blocks)
