"""`joulectl simulate run` and `joulectl simulate status` (the simulator runtime)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from joulectl.cli.common import Output, check_format

_ROOT = "Directory holding one tree per node (DIR/<node>/)."
_TICKS = "Stop after N ticks."
_DURATION = "Stop after S seconds (of simulated time with --fast)."
_TICK = "Tick interval in seconds."
_FAST = "Run ticks back to back instead of in real time."
_WORKERS = "Worker processes (default: min(CPU count, 12))."
_PROFILES = "Directory of local hardware profiles, added to the builtin ones."


def register_run(sim_app: typer.Typer) -> None:
    """Add `run` and `status` to the `simulate` sub-app."""

    @sim_app.command("run")
    def run_cmd(
        spec: Annotated[str, typer.Argument(metavar="SPEC", help="ClusterSpec file (- = stdin).")],
        root: Annotated[str, typer.Option("--root", metavar="DIR", help=_ROOT)],
        ticks: Annotated[int | None, typer.Option("--ticks", metavar="N", help=_TICKS)] = None,
        duration: Annotated[float | None, typer.Option("--duration", metavar="S", help=_DURATION)] = None,
        tick: Annotated[float, typer.Option("--tick", metavar="S", help=_TICK)] = 1.0,
        fast: Annotated[bool, typer.Option("--fast", help=_FAST)] = False,
        workers: Annotated[int | None, typer.Option("--workers", metavar="N", help=_WORKERS)] = None,
        profiles_dir: Annotated[
            str | None, typer.Option("--profiles-dir", metavar="DIR", envvar="SIM_PROFILES_DIR", help=_PROFILES)
        ] = None,
        output: Output = "table",
    ) -> None:
        """Render or resume the spec's nodes and advance them tick by tick (Ctrl-C stops after a tick)."""
        from joulectl.errors import ExitCode, InputError
        from joulectl.render import emit
        from joulectl.sim.runtime import run

        fmt = check_format(output, ("table", "json", "yaml"))
        if ticks is not None and duration is not None:
            raise InputError("give --ticks or --duration, not both", field="--duration")
        with _Progress() as bar:
            summary = run(spec, root, ticks=ticks, duration_s=duration, tick_s=tick, fast=fast, workers=workers,
                          profiles_dir=profiles_dir, progress=bar.update, render_progress=bar.tree)
        data = summary.as_dict()
        emit(data, fmt, lambda: _run_table(data))
        if summary.interrupted:
            raise typer.Exit(int(ExitCode.INTERRUPTED))

    @sim_app.command("status")
    def status_cmd(
        root: Annotated[str, typer.Option("--root", metavar="DIR", help=_ROOT)],
        output: Output = "table",
    ) -> None:
        """Per node: power, energy, caps and governors in force (from the trees and their ledgers)."""
        from joulectl.render import emit
        from joulectl.sim.runtime import status

        fmt = check_format(output, ("table", "json", "yaml"))
        data = status(root)
        emit(data, fmt, lambda: _status_table(data))


class _Progress:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._trees: Any = None
        self._tree_count = 0

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[w]}"), TimeElapsedColumn(),
                                 console=Console(file=sys.stderr), transient=True)
            self._bar.__enter__()
        return self

    def tree(self, node: str, action: str) -> None:
        if self._bar is None:
            return
        self._tree_count += 1
        if self._trees is None:
            self._trees = self._bar.add_task("trees", total=None, w="")
        self._bar.update(self._trees, completed=self._tree_count, w=f"{node} {action}")

    def update(self, done: int, total: int | None, samples: list[Any]) -> None:
        if self._bar is None:
            return
        watts = f"{sum(s.power_w for s in samples):.0f} W"
        if self._task is None:
            self._task = self._bar.add_task("ticks", total=total, w=watts)
        self._bar.update(self._task, completed=done, w=watts)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _run_table(data: dict[str, Any]) -> str:
    from joulectl.render import table

    rows = [("nodes", data["nodes"]), ("rendered", data["rendered"]), ("resumed", data["resumed"]),
            ("ticks", data["ticks"]), ("workers", data["workers"]),
            ("median tick", f"{data['medianTickSeconds'] * 1000:.1f} ms"), ("overruns", data["overruns"]),
            ("events", data["events"]), ("power", f"{data['powerWatts']:.0f} W"),
            ("interrupted", "yes" if data["interrupted"] else "no")]
    return table(("RUN", "VALUE"), rows)


def _status_table(data: dict[str, Any]) -> str:
    from joulectl.render import fmt_num, table

    rows = []
    for n in data["nodes"]:
        caps = ", ".join(f"{k}={fmt_num(v, ' W')}" for k, v in n["capsWatts"].items()) or "-"
        gov = n["governors"]
        govs = "/".join(gov["cpu"]) or "-"
        if gov["epp"]:
            govs += f" epp={'/'.join(gov['epp'])}"
        if gov["gpuPerfLevels"]:
            govs += " gpu=" + "/".join(sorted(set(gov["gpuPerfLevels"].values())))
        kj = n["energyJoules"] / 1000 if n["energyJoules"] is not None else None
        rows.append((n["node"], n["profile"] or "-", n["ticks"], fmt_num(n["powerWatts"], " W"),
                     fmt_num(kj, " kJ", 1), caps, govs))
    return table(("NODE", "PROFILE", "TICKS", "POWER", "ENERGY", "CAPS", "GOVERNORS"), rows)
