"""`joulectl schedule-check`: would this pod be placed, on which node, and if not why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from joulectl.cli.common import check_format

if TYPE_CHECKING:
    from joulectl.scheduling.check import CheckReport

# common.Output passes its default positionally, which typer 0.29 reads as a second name.
_Output = Annotated[
    str, typer.Option("-o", "--output", help="Output format: table, json, yaml.", metavar="TABLE|JSON|YAML")
]
_PODS = "Pod files (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob; multi-document; - = stdin)."
_SPEC = "Cluster spec (ClusterSpec): nodes and twins come from the same planning code as `plan`."
_NODES = "Node objects (`kubectl get nodes -o yaml`); needs --twins."
_TWINS = "NodeTwin objects (`kubectl get nodetwins -o yaml`, or `plan -o yaml`)."
_HW = "With --nodes: NodeHardware objects (`discover -o yaml`), for the pod's marginal power."
_NOW = "Judge twin staleness (5 min) at this time instead of now."


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("schedule-check")
    def schedule_check(
        pod_files: Annotated[list[str], typer.Argument(metavar="POD_FILE...", help=_PODS)],
        spec: Annotated[str | None, typer.Option("--spec", metavar="SPEC", help=_SPEC)] = None,
        nodes: Annotated[str | None, typer.Option("--nodes", metavar="NODES.yaml", help=_NODES)] = None,
        twins: Annotated[str | None, typer.Option("--twins", metavar="TWINS.yaml", help=_TWINS)] = None,
        hardware: Annotated[str | None, typer.Option("--hardware", metavar="FILE", help=_HW)] = None,
        now: Annotated[str | None, typer.Option("--now", metavar="ISO8601", help=_NOW)] = None,
        output: _Output = "table",
    ) -> None:
        """Would these pods be placed, where, and if not why (exit 6 when a pod fits no node)."""
        from joulectl.errors import InputError
        from joulectl.render import emit, warn
        from joulectl.scheduling.check import cluster_from_files, parse_now, run

        fmt = check_format(output, ("table", "json", "yaml"))
        if spec is not None and (nodes is not None or twins is not None):
            raise InputError("give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml, not both", field="--spec")
        if spec is None and nodes is None and twins is None:
            raise InputError("the cluster is missing: give --spec SPEC or --nodes NODES.yaml --twins TWINS.yaml")
        at = parse_now(now)
        if spec is not None:
            raise InputError("--spec needs the planning engine, which is not available yet", field="--spec")
        cluster = cluster_from_files(nodes, twins, hardware)
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
        title = f"{d.label} ({d.workload_class}, {gpus}): {verdict}"
        rows = sorted(v.nodes, key=lambda n: (not n.fits, -(n.score or 0), n.node))
        blocks.append(
            table(
                ("NODE", "FITS", "SCORE", "REASON"),
                [(n.node, "yes" if n.fits else "no", "-" if n.score is None else n.score, n.reason) for n in rows],
                title=title,
            )
        )
    return "\n".join(blocks)
