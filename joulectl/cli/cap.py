"""`joulectl cap`: set or restore GPU and CPU power caps, in watts or % of max, with readback."""

import sys
from typing import Annotated, Any

import typer

from joulectl.cli.common import REPORT_FORMATS, STATE, Devices, DryRun, NoHeaders, Report, Wait, check_format

_TWIN = "Apply a NodeTwin's caps and governor (- = stdin)."
_SCHED = "Apply the eco schedule window in force now."
_AT = "With --schedule: evaluate the schedule at this time."
_NODE = "This node's name (default: its hostname)."
_ANY = "Apply a twin written for another node."
_PRESETS = "JSON map of per-model governor presets (for sustained)."


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("cap")
    def cap(
        watts: Annotated[float | None, typer.Option("--watts", metavar="W", help="Cap at W watts per device.")] = None,
        pct: Annotated[float | None, typer.Option("--pct", metavar="P", help="Cap at P % of each device's max.")
                       ] = None,
        restore: Annotated[bool, typer.Option("--restore", help="Back to what was in force before.")] = False,
        from_twin: Annotated[str | None, typer.Option("--from-twin", metavar="FILE", help=_TWIN)] = None,
        schedule: Annotated[str | None, typer.Option("--schedule", metavar="FILE", help=_SCHED)] = None,
        at: Annotated[str | None, typer.Option("--at", metavar="ISO8601", help=_AT)] = None,
        gpu: Annotated[bool, typer.Option("--gpu", help="Cap the GPUs (the default).")] = False,
        cpu: Annotated[bool, typer.Option("--cpu", help="Cap the CPU packages (RAPL PL1).")] = False,
        all_: Annotated[bool, typer.Option("--all", help="Cap GPUs and CPU packages.")] = False,
        device: Devices = None,
        dry_run: DryRun = False,
        wait: Wait = 10.0,
        node_name: Annotated[str | None, typer.Option("--node-name", metavar="NAME", help=_NODE)] = None,
        any_node: Annotated[bool, typer.Option("--any-node", help=_ANY)] = False,
        model_presets: Annotated[
            str | None, typer.Option("--governor-model-presets", metavar="FILE", help=_PRESETS)
        ] = None,
        output: Report = "table",
        no_headers: NoHeaders = False,
    ) -> None:
        """Set or restore power caps, read back and journaled (exit 4 refused, 5 partial, 7 lock busy)."""
        from joulectl.ops.cap import build_request, execute
        from joulectl.render import emit, warn

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        req = build_request(
            watts=watts, pct=pct, restore=restore, from_twin=from_twin, schedule=schedule, at=at,
            any_node=any_node, gpu=gpu, cpu=cpu, all_=all_, selectors=device or (), dry_run=dry_run,
            wait_s=wait, node_name=node_name, model_presets_file=model_presets,
        )
        report = execute(STATE.host(), req)
        for line in report.warnings:
            warn(line)
        if report.schedule is not None:
            from joulectl.ops.schedule import describe_dict

            sys.stderr.write(f"joulectl: schedule: {describe_dict(report.schedule)}\n")
        emit(None, fmt, out=_view(report))
        err = report.error()
        if err is not None:
            raise err


def _columns() -> list[Any]:
    """The cap table's columns, and ``-o csv``'s (nvidia-smi's ``power.limit`` naming)."""
    from joulectl.render import Column

    return [
        Column("DEVICE", lambda r: r.device, "device"),
        Column(None, lambda r: r.vendor, "vendor"),
        Column("MODEL", lambda r: r.model or "-", "name"),
        Column("BEFORE", lambda r: r.before_w, "power.limit.before", "W"),
        Column("TARGET", lambda r: r.target_w, "power.limit.target", "W"),
        Column("AFTER", lambda r: r.after_w, "power.limit.after", "W"),
        Column("STATUS", lambda r: r.status.value, "status"),
        Column("MESSAGE", lambda r: r.message, "message"),
    ]


def _view(report: Any) -> Any:
    """cap in every ``-o`` format: one csv row and one ``device/<id>`` name per capped device."""
    from joulectl.render import View

    return View(report.to_dict(), table=lambda wide: _table(report), csv=lambda: (_columns(), report.results),
                names=lambda: [f"device/{r.device}" for r in report.results],
                items=lambda: report.to_dict()["results"])


def _table(report: object) -> str:
    from joulectl.ops.cap import CapReport
    from joulectl.render import columns_table, table

    assert isinstance(report, CapReport)
    text = columns_table(_columns(), report.results) if report.results else ""
    if report.governor_results:
        text += table(
            ("DEVICE", "MODEL", "PRESET", "BEFORE", "AFTER", "STATUS", "MESSAGE"),
            [(r.device, r.model or "-", r.preset or "-", r.before or "-", r.after or "-", r.status.value,
              r.message) for r in report.governor_results],
            title="governor",
        )
    return text
