"""`joulectl governor show | set PRESET | reset`: clock governor presets for GPUs and CPUs."""

from typing import Annotated, Any

import typer

from joulectl.cli.common import (
    REPORT_FORMATS,
    STATE,
    Devices,
    DryRun,
    NoHeaders,
    Report,
    Wait,
    check_format,
    complete_presets,
)

_PRESETS = "JSON map of per-model sustained clocks, e.g. {\"NVIDIA H100 80GB HBM3\": {\"graphicsMHz\": 1755}}."
Gpu = Annotated[bool, typer.Option("--gpu", help="GPUs only.")]
Cpu = Annotated[bool, typer.Option("--cpu", help="CPU cpufreq policies only.")]
ModelPresets = Annotated[
    str | None, typer.Option("--model-presets", "--governor-model-presets", metavar="FILE", help=_PRESETS)
]


Watch = Annotated[float | None, typer.Option("--watch", metavar="SECONDS", min=0.1,
                                             help="Redraw the table every SECONDS (verifying locks each time).")]
Count = Annotated[int | None, typer.Option("--count", metavar="N", min=1, help="With --watch: stop after N tables.")]


def _watch(fmt: str, watch: float | None, count: int | None, **kw: object) -> None:
    import sys

    from joulectl.errors import InputError
    from joulectl.ops.governor import watch_show
    from joulectl.render import warn

    if watch is None:
        raise InputError("needs --watch", field="--count")
    if fmt != "table":
        raise InputError(f"--watch prints a table and cannot be combined with -o {fmt}", field="--watch")
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    for frame, warnings in watch_show(STATE.host(), interval_s=watch, count=count, **kw):  # type: ignore[arg-type]
        for line in warnings:
            warn(line)
        sys.stdout.write(clear + frame + ("" if clear else "\n"))
        sys.stdout.flush()


def report_view(report: Any) -> Any:
    """The report in every ``-o`` format (render.View): one record per device (``device/<id>`` names)."""
    from joulectl.render import View

    return View(report.to_dict(), table=report.table_text, csv=lambda: (report.columns(), report.records()),
                names=lambda: [f"device/{r.device}" for r in report.records()],
                items=lambda: report.to_dict()["results"])


def _finish(report: object, fmt: str, warnings: list[str]) -> None:
    from joulectl.ops.governor import GovernorReport
    from joulectl.render import emit, warn

    assert isinstance(report, GovernorReport)
    for line in warnings:
        warn(line)
    emit(report.to_dict(), fmt, out=report_view(report))
    err = report.error()
    if err is not None:
        raise err


def register(app: typer.Typer) -> None:
    """Add the command group to the app."""
    sub = typer.Typer(help="Clock governor presets for GPUs and CPUs.", no_args_is_help=True)
    app.add_typer(sub, name="governor")

    @sub.command("show")
    def show(gpu: Gpu = False, cpu: Cpu = False, device: Devices = None, wait: Wait = 10.0,
             model_presets: ModelPresets = None, output: Report = "table", no_headers: NoHeaders = False,
             watch: Watch = None,
             count: Count = None) -> None:
        """Presets, locks and levels in force, who set them; verifies unverified locks."""
        from joulectl.ops.governor import run_show

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        if watch is not None or count is not None:
            _watch(fmt, watch, count, gpu=gpu, cpu=cpu, selectors=device or (), wait_s=wait,
                   model_presets_path=model_presets)
            return
        warnings: list[str] = []
        report = run_show(STATE.host(), gpu=gpu, cpu=cpu, selectors=device or (), wait_s=wait,
                          model_presets_path=model_presets, warnings=warnings)
        _finish(report, fmt, warnings)

    @sub.command("set")
    def set_(preset: Annotated[str, typer.Argument(metavar="PRESET", autocompletion=complete_presets,
                                                   help="GPU: auto sustained efficient low peak; "
                                                        "CPU: performance balanced efficiency.")],
             gpu: Gpu = False, cpu: Cpu = False, device: Devices = None, dry_run: DryRun = False,
             wait: Wait = 10.0, model_presets: ModelPresets = None, output: Report = "table",
             no_headers: NoHeaders = False) -> None:
        """Put a preset in force on every selected GPU, or every cpufreq policy."""
        from joulectl.ops.governor import run_set

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        warnings: list[str] = []
        report = run_set(STATE.host(), preset, gpu=gpu, cpu=cpu, selectors=device or (), dry_run=dry_run,
                         wait_s=wait, model_presets_path=model_presets, warnings=warnings)
        _finish(report, fmt, warnings)

    @sub.command("reset")
    def reset(gpu: Gpu = False, cpu: Cpu = False, device: Devices = None, dry_run: DryRun = False,
              wait: Wait = 10.0, output: Report = "table", no_headers: NoHeaders = False) -> None:
        """Undo the locks and levels joulectl set; leave the operator's own alone."""
        from joulectl.ops.governor import run_reset

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        warnings: list[str] = []
        report = run_reset(STATE.host(), gpu=gpu, cpu=cpu, selectors=device or (), dry_run=dry_run,
                           wait_s=wait, warnings=warnings)
        _finish(report, fmt, warnings)
