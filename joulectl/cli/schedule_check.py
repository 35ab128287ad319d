"""`joulectl schedule-check`: would this pod be placed, on which node, and if not why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from joulectl.cli.common import Output, check_format
from joulectl.cli.plan import (
    AbsoluteCaps,
    CpuEcoCapOnUncappable,
    CpuEcoPct,
    CpuPerformancePct,
    GovernorModelPresets,
    GpuEcoPct,
    GpuGovernor,
    GpuPerformancePct,
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
    options_from_flags,
)

if TYPE_CHECKING:
    from joulectl.scheduling.check import CheckReport

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
        profiles_dir: ProfilesDir = None,
        output: Output = "table",
    ) -> None:
        """Would these pods be placed, where, and if not why (exit 6 when a pod fits no node)."""
        from joulectl.errors import InputError
        from joulectl.render import emit, warn
        from joulectl.scheduling.check import cluster_from_nodes, cluster_from_spec, parse_now, run

        fmt = check_format(output, ("table", "json", "yaml"))
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
            cluster = cluster_from_nodes(nodes, twins, hardware or ())
        report = run(pod_files, cluster, at)
        for line in report.warnings:
            warn(line)
        emit(report.document, fmt, lambda: _table(report))
        err = report.error()
        if err is not None:
            raise err


def _table(report: CheckReport) -> str:
    from joulectl.render import table

    blocks: list[str] = []
    for v in report.verdicts:
        d = v.demand
        gpus = ", ".join(f"{n} {k}" for k, n in sorted(d.gpu_requests.items())) or "no GPU"
        verdict = f"fits, best node {v.best_node}" if v.best_node else "FITS NO NODE"
        replicas = f", {d.pod.replicas} replicas" if d.pod.replicas != 1 else ""
        title = f"{d.label} ({d.workload_class}, {gpus}{replicas}): {verdict}"
        rows = sorted(v.nodes, key=lambda n: (not n.fits, -(n.score or 0), n.node))
        blocks.append(
            table(
                ("NODE", "FITS", "SCORE", "REASON"),
                [(n.node, "yes" if n.fits else "no", "-" if n.score is None else n.score, n.reason) for n in rows],
                title=title,
            )
        )
    return "\n".join(blocks)
