"""`joulectl simulate run` and `joulectl simulate status` (the simulator runtime)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from joulectl.cli.common import REPORT_FORMATS, NoHeaders, Output, Report, check_format, choices
from joulectl.cli.simulate import OVERLAY_HELP

_ROOT = "Directory holding one tree per node (DIR/<node>/)."
_TICKS = "Stop after N ticks."
_DURATION = "Stop after S seconds (of simulated time with --fast)."
_TICK = "Tick interval in seconds."
_FAST = "Run ticks back to back instead of in real time."
_WORKERS = "Worker processes (default: one per free CPU by the load average, 1 to 12)."
_PROFILES = "Directory of local hardware profiles, added to the builtin ones."
_LISTEN = ("Serve /metrics, /telemetry/<node>, /control/<node>, /exporters/<format>/<node>/metrics and /healthz "
           "on ADDR:PORT (PORT alone binds 127.0.0.1; port 0 picks a free one).")
_FUSE = "Serve every node live through one FUSE mount at DIR/fuse/<node>/ (needs joulectl[fuse])."
_OTLP = "Push metrics every tick and events as log records over OTLP/HTTP to this base URL."
_OTLP_PROTO = "OTLP encoding: http/protobuf or http/json."
_WATCH = "Redraw the table every SECONDS (from the run's /telemetry when it serves one, else from the trees)."
_TRACE = "Drive the nodes with this workload trace (.jsonl, .csv or Kubernetes manifests), as simulate compare does."


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
        listen: Annotated[str | None, typer.Option("--listen", metavar="ADDR:PORT", help=_LISTEN)] = None,
        otlp_endpoint: Annotated[
            str | None, typer.Option("--otlp-endpoint", metavar="URL", envvar="SIM_OTLP_ENDPOINT", help=_OTLP)
        ] = None,
        otlp_protocol: Annotated[
            str, typer.Option("--otlp-protocol", metavar="PROTOCOL", help=_OTLP_PROTO,
                              autocompletion=choices("http/protobuf", "http/json"))
        ] = "http/protobuf",
        fuse: Annotated[bool, typer.Option("--fuse", help=_FUSE)] = False,
        overlay: Annotated[bool, typer.Option("--overlay", help=OVERLAY_HELP)] = False,
        output: Output = "table",
        trace: Annotated[str | None, typer.Option("--trace", metavar="TRACE", help=_TRACE)] = None,
    ) -> None:
        """Render or resume the spec's nodes and advance them tick by tick (Ctrl-C stops after a tick)."""
        from joulectl.errors import ExitCode, InputError
        from joulectl.render import emit
        from joulectl.sim.runtime import run

        fmt = check_format(output, ("table", "json", "yaml"))
        if ticks is not None and duration is not None:
            raise InputError("give --ticks or --duration, not both", field="--duration")
        made: list[Any] = []
        make = None
        if trace is not None:
            from joulectl.sim.workload.drive import trace_workload

            make = trace_workload(trace, root, made)  # the trace is read whole before anything runs
        face = _network_face(root, listen, otlp_endpoint, otlp_protocol)
        try:
            with _Progress() as bar:
                summary = run(spec, root, ticks=ticks, duration_s=duration, tick_s=tick, fast=fast, workers=workers,
                              profiles_dir=profiles_dir, progress=bar.update, render_progress=bar.tree,
                              on_start=face.on_start if face else None, on_tick=face.on_tick if face else None,
                              fuse=fuse, workload=make, overlay=overlay)
        finally:
            if face is not None:
                face.close()
        data = summary.as_dict()
        if made:
            data["workload"] = made[0].summary()
        emit(data, fmt, lambda: _run_table(data))
        if summary.interrupted:
            raise typer.Exit(int(ExitCode.INTERRUPTED))

    @sim_app.command("status")
    def status_cmd(
        root: Annotated[str, typer.Option("--root", metavar="DIR", help=_ROOT)],
        watch: Annotated[float | None, typer.Option("--watch", metavar="SECONDS", help=_WATCH, min=0.1)] = None,
        count: Annotated[
            int | None, typer.Option("--count", metavar="N", help="With --watch: stop after N refreshes.", min=1)
        ] = None,
        output: Report = "table",
        no_headers: NoHeaders = False,
    ) -> None:
        """Per node: power, energy, caps and governors in force (from the trees and their ledgers)."""
        from joulectl.errors import InputError
        from joulectl.render import emit
        from joulectl.sim.runtime import status

        fmt = check_format(output, REPORT_FORMATS, no_headers)
        if count is not None and watch is None:
            raise InputError("needs --watch", field="--count")
        if watch is not None:
            if fmt not in ("table", "wide"):
                raise InputError(f"--watch prints a table and cannot be combined with -o {fmt}", field="--watch")
            _watch_status(root, watch, count, fmt)
            return
        data = status(root)
        emit(data, fmt, out=_status_view(data))


def _network_face(root: str, listen: str | None, otlp: str | None, protocol: str) -> Any:
    """The run's HTTP endpoints and OTLP pusher, or None when neither is asked for."""
    if listen is None and otlp is None:
        return None
    from joulectl.render import warn
    from joulectl.sim.serve.face import NetworkFace

    address = None
    if listen is not None:
        from joulectl.sim.serve.http import parse_listen

        address = parse_listen(listen)

    def announce(message: str) -> None:
        sys.stderr.write(f"joulectl: {message}\n")
        sys.stderr.flush()

    return NetworkFace(root, listen=address, otlp_url=otlp, otlp_protocol=protocol, warn=warn, announce=announce)


def _watch_status(root: str, interval_s: float, count: int | None, fmt: Any = "table") -> None:
    """``simulate status --watch``: the run's own snapshots when it serves them, else the trees."""
    import time

    from joulectl.sim.runtime import status
    from joulectl.sim.serve.face import serving_url

    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    n = 0
    while count is None or n < count:
        if n:
            time.sleep(interval_s)
        url = serving_url(root)
        data = _snapshot_status(url) if url else None
        if data is None:
            data = status(root)
        from joulectl.render import render

        sys.stdout.write(clear + render(_status_view(data), fmt) + ("" if clear else "\n"))
        sys.stdout.flush()
        n += 1


def _snapshot_status(url: str) -> dict[str, Any] | None:
    """``GET <url>/telemetry`` as :func:`joulectl.sim.runtime.status` shapes it (None if unreachable)."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/telemetry", timeout=2) as resp:
            doc = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    nodes = []
    for t in doc.get("nodes", []):
        caps = {p["id"]: p["capWatts"] for p in t["cpu"]["packages"]}
        caps.update({g["id"]: g["capWattsTarget"] for g in t["gpu"]["devices"]})
        energy = t["energyJoules"]
        host_j = energy.get("host", sum(v for k, v in energy.items() if k != "psys"))
        govs = t["cpu"]["governors"]
        nodes.append({"node": t["node"], "profile": t["hardwareModel"], "ticks": t["tick"],
                      "powerWatts": t["packagePowerWatts"], "energyJoules": host_j, "capsWatts": caps,
                      "governors": {"cpu": sorted(set(govs.values())), "epp": [], "gpuPerfLevels": {}}})
    return {"nodes": nodes}


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
            # shown from the first moment: the start renders or resumes every tree before a tick
            self._trees = self._bar.add_task("trees", total=None, w="starting: reading the spec and the trees")
        return self

    def tree(self, node: str, action: str) -> None:
        if self._bar is None:
            return
        if action == "prepared":
            self._bar.update(self._trees, w=f"profile {node} prepared")
            return
        self._tree_count += 1
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
    wl = data.get("workload")
    if wl:
        rows += [("tasks completed", f"{wl['completed']} of {wl['tasks']}"), ("tasks running", wl["running"]),
                 ("tasks waiting", wl["waiting"] + wl["notArrived"]), ("tasks unplaceable", wl["unplaceable"])]
        rows += [(f"energy {k}", f"{v:.3f} kWh") for k, v in wl["energyByClassKWh"].items()]
    return table(("RUN", "VALUE"), rows)


def _governors(n: dict[str, Any]) -> str:
    gov = n["governors"]
    govs = "/".join(gov["cpu"]) or "-"
    if gov["epp"]:
        govs += f" epp={'/'.join(gov['epp'])}"
    if gov["gpuPerfLevels"]:
        govs += " gpu=" + "/".join(sorted(set(gov["gpuPerfLevels"].values())))
    return govs


def _status_columns() -> list[Any]:
    from joulectl.render import Column, fmt_num

    def kj(n: dict[str, Any]) -> float | None:
        return n["energyJoules"] / 1000 if n["energyJoules"] is not None else None

    return [
        Column("NODE", lambda n: n["node"], "node"),
        Column("PROFILE", lambda n: n["profile"], "profile"),
        Column("TICKS", lambda n: n["ticks"], "ticks"),
        Column("POWER", lambda n: n["powerWatts"], "power.draw", "W"),
        Column("ENERGY", kj, "energy", "kJ", cell=lambda n: fmt_num(kj(n), " kJ", 1)),
        Column("CAPS", lambda n: " ".join(f"{k}={fmt_num(v, 'W')}" for k, v in n["capsWatts"].items()), "caps",
               cell=lambda n: ", ".join(f"{k}={fmt_num(v, ' W')}" for k, v in n["capsWatts"].items()) or "-"),
        Column("GOVERNORS", _governors, "governors", wide=True),
    ]


def _status_view(data: dict[str, Any]) -> Any:
    from joulectl.render import View, columns_table

    cols, rows = _status_columns(), data["nodes"]
    return View(data, table=lambda wide: columns_table(cols, rows, wide=wide), csv=lambda: (cols, rows),
                names=lambda: [f"node/{n['node']}" for n in rows], items=lambda: list(rows))

