"""`joulectl simulate compare`: replay a workload trace on a fleet under several plans and compare them."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from joulectl.cli.common import Output, check_format
from joulectl.cli.plan import GpuProductLabels, GpuResources, GpuShareResources

_SPEC = "ClusterSpec of the fleet (or give --nodes)."
_NODES = "Node objects (kubectl get nodes -o yaml): each node emulated from the catalog by its GPU or CPU model."
_TRACE = "Workload trace: Joulie .jsonl (or a directory of them), .csv, or Kubernetes manifests (.yaml)."
_PLAN = "uncapped, a NodeTwin file as `plan -o yaml` writes it (label = file stem), or LABEL=FILE; repeatable."
_REPORT = "Also write one self-contained HTML page with charts (needs joulectl[report])."
_PROFILES = "Directory of local hardware profiles, added to the builtin ones."


class _Bar:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Bar:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True)
            self.bar.__enter__()
        return self

    def update(self, what: str, done: int, total: int) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, description=what, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def register_compare(sim_app: typer.Typer) -> None:
    """Add `compare` to the `simulate` sub-app."""

    @sim_app.command("compare")
    def compare_cmd(
        spec: Annotated[str | None, typer.Argument(metavar="SPEC", help=_SPEC, show_default=False)] = None,
        nodes: Annotated[str | None, typer.Option("--nodes", metavar="NODES.yaml", help=_NODES)] = None,
        trace: Annotated[str | None, typer.Option("--trace", metavar="TRACE", help=_TRACE)] = None,
        plan: Annotated[list[str] | None, typer.Option("--plan", metavar="PLAN", help=_PLAN)] = None,
        report: Annotated[str | None, typer.Option("--report", metavar="FILE.html", help=_REPORT)] = None,
        profiles_dir: Annotated[
            str | None, typer.Option("--profiles-dir", metavar="DIR", envvar="SIM_PROFILES_DIR", help=_PROFILES)
        ] = None,
        gpu_resource: GpuResources = None,
        gpu_share_resource: GpuShareResources = None,
        gpu_product_label: GpuProductLabels = None,
        output: Output = "table",
    ) -> None:
        """Replay TRACE on the fleet under each plan: energy (per class, facility) against job speed.

        The GPU flags read --nodes and Kubernetes traces as `plan` reads them: GPUs counted in the
        fleet's own resources (--gpu-resource, --gpu-share-resource), models in its own labels."""
        from joulectl.cli.plan import apply_gpu_flags
        from joulectl.errors import InputError
        from joulectl.render import emit, warn
        from joulectl.sim.workload.compare import run_compare, table_text

        fmt = check_format(output, ("table", "json", "yaml"))
        apply_gpu_flags(gpu_resource, gpu_share_resource, gpu_product_label)
        if trace is None:
            raise InputError("the workload is missing: give --trace TRACE", field="--trace")
        if report is not None:
            from joulectl.sim.workload.report import require_matplotlib

            require_matplotlib()
        with _Bar() as bar:
            result = run_compare(spec=spec, nodes=nodes, trace=trace, plans=plan or [], profiles_dir=profiles_dir,
                                 progress=bar.update)
        doc = result.document
        text = table_text(doc)
        if report is not None:
            from joulectl.sim.workload.report import write_report

            write_report(report, doc, result.results, text)
            warn(f"report written to {report}") if fmt == "table" else None
        emit(doc, fmt, lambda: text)
