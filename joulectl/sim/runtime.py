"""``simulate run`` and ``simulate status``: the tick loop over every node of a cluster spec.

:func:`run` renders the nodes that have no tree yet and resumes the others (never rendering them
again; a tree of another profile or node stops the start with an error naming the node), then
steps every node each tick, in real time or, with ``fast``, as fast as it computes. Nodes are
sharded over worker processes that keep their nodes' state in memory between ticks; the main
process writes events, the OTLP and Prometheus files, and the facility figures. Ctrl-C stops
after the current tick.

:func:`status` reads what is in force from the trees and their ledgers.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from joulectl.errors import InputError, JoulectlError
from joulectl.render import warn
from joulectl.sim import layout, telemetry
from joulectl.sim import ledger as ledger_mod
from joulectl.sim import physics as ph
from joulectl.sim.tick import (
    BaseLoad,
    Event,
    NodeModel,
    NodeRuntime,
    ReadbackMarks,
    Sample,
    fd_budget,
    kept_files,
    model_fingerprint,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: Workers contend past about 12 (emulate-mode seed, "Tick cost").
MAX_WORKERS = 12
#: A shard reads its inotify events every this many nodes, or sooner after this many file writes
#: (see :meth:`Shard.tick`).
DRAIN_NODES = 64
DRAIN_WRITES = 1000
#: add_watch errnos that mean a limit, not a broken tree: no further node of the shard is tried.
_LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE, errno.ENOMEM)
ProgressFn = Callable[[int, int | None, list[Sample]], None]
#: Per-node loads for the next tick (node name -> load), from a workload driving the run.
Loads = dict[str, BaseLoad]


class Workload(Protocol):
    """What drives the nodes' load during a run (``simulate run --trace``, :mod:`joulectl.sim.workload`).

    ``loads(now, dt)`` is asked before the tick that ends at ``now`` for the nodes whose load changed
    (a load stays until changed); ``advance(now, dt, samples)`` is told what the tick produced (caps
    in force, energy), to move its jobs on."""

    def loads(self, now: float, dt_s: float) -> Loads: ...

    def advance(self, now: float, dt_s: float, samples: list[Sample]) -> None: ...


@dataclass(frozen=True)
class TickOutput:
    """What one tick produced, for the network face (snapshots, OTLP push): the tick's number,
    its samples, facility figures and events, and the texts of both metric files."""

    tick: int
    samples: list[Sample]
    facility: telemetry.Facility
    events: list[Event]
    otlp_lines: list[str]
    prometheus_text: str


TickFn = Callable[[TickOutput], None]
#: Called once the nodes are built, before the first tick, with the spec and the node models.
StartFn = Callable[[Any, list[NodeModel]], None]


@dataclass
class RunSummary:
    """What a run did."""

    nodes: int
    rendered: int
    resumed: int
    ticks: int
    workers: int
    seconds: float
    interrupted: bool = False
    events: int = 0
    overruns: int = 0
    tick_seconds: list[float] = field(default_factory=list)
    power_w: float = 0.0

    @property
    def median_tick_s(self) -> float:
        import statistics  # (not at import: a start pays for it only at its summary)

        return statistics.median(self.tick_seconds) if self.tick_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "SimulationRun", "nodes": self.nodes,
                "rendered": self.rendered, "resumed": self.resumed, "ticks": self.ticks,
                "workers": self.workers, "seconds": round(self.seconds, 3), "interrupted": self.interrupted,
                "events": self.events, "overruns": self.overruns,
                "medianTickSeconds": round(self.median_tick_s, 6), "powerWatts": round(self.power_w, 2)}


@dataclass
class NodeEntry:
    """What a worker needs to run one node."""

    dir: str
    model: NodeModel
    load: BaseLoad
    zone_offset_c: float
    facility: dict[str, float]


def default_workers() -> int:
    """One worker per CPU the machine has free: the CPU count less the one-minute load average,
    rounded, at least 1 and at most 12.

    Measured (docs/PERFORMANCE.md, issue 20): a second worker costs as much CPU per tick or more
    (the samples cross a pipe, each process has its own caches) and pays only on a CPU nobody else
    uses; at 1,000 and 10,000 nodes on the 2-core machine at load 4-11, one worker ticked faster in
    wall time."""
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average here
        load = 0.0
    return max(1, min(cpus, MAX_WORKERS, int(cpus - load + 0.5)))


# -- trees -----------------------------------------------------------------------------------------


def read_node_info(node_dir: str) -> dict[str, Any] | None:
    """``state/node.json`` of a rendered tree, or None when it has none."""
    path = os.path.join(node_dir, "state", "node.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable node state ({exc})", file=path) from None
    return doc if isinstance(doc, dict) else None


def _ensure_trees(spec: Any, root: str, progress: Callable[[str, str], None] | None = None, *,
                  overlay: bool = False) -> tuple[int, int]:
    """Render missing trees and resume existing ones (never rendered again); (rendered, resumed).

    A tree of another node, profile or profile values, or with an entry of the wrong kind, stops
    the start with the renderer's error naming the node.
    """
    from joulectl.sim import tree

    stats = tree.render_nodes(spec.nodes, root, progress=progress, overlay=overlay)
    return len(stats.rendered), len(stats.resumed)


# -- workers -------------------------------------------------------------------------------------


READBACK_MODES = ("auto", "inotify", "poll")


def readback_mode() -> str:
    """``SIM_READBACK`` (poll, inotify or auto; default auto)."""
    value = os.environ.get("SIM_READBACK", "").strip().lower() or "auto"
    if value not in READBACK_MODES:
        raise InputError(f"must be poll, inotify or auto (got {value!r})", field="SIM_READBACK")
    return value


def _open_watcher(mode: str) -> Any:
    """The shard's inotify watcher, or None for polling (``poll``, or ``auto`` where inotify is missing)."""
    if mode == "poll":
        return None
    from joulectl.sim import inotify

    try:
        return inotify.Watcher(inotify.Inotify())
    except inotify.Unavailable as exc:
        if exc.errno in _LIMIT_ERRNOS and sys.platform.startswith("linux"):
            raise JoulectlError(f"simulate run: inotify_init1: {exc.strerror}: the user's inotify instances "
                                "(fs.inotify.max_user_instances) are used up: raise it, use fewer --workers "
                                "or set SIM_READBACK=poll") from None
        if mode == "inotify":
            raise JoulectlError(f"SIM_READBACK=inotify: inotify is not available here ({exc.strerror})") from None
        if sys.platform.startswith("linux"):
            warn(f"simulate run: inotify unavailable ({exc.strerror}); polling every writable file each tick")
        return None


def _limit_reached(exc: OSError, node: str) -> str:
    from joulectl.sim import inotify

    limit = inotify.watch_limit()
    return (f"simulate run: inotify_add_watch: {exc.strerror} at node {node}: the user's inotify watches "
            f"(fs.inotify.max_user_watches{f' = {limit}' if limit is not None else ''}) are used up: raise it "
            "or set SIM_READBACK=poll")


def check_watch_limits(entries: list[NodeEntry], n_workers: int, mode: str) -> None:
    """Stop the start, with one line naming the sysctl to raise, when the watches of every node
    (one per directory holding writable files) and one instance per worker do not fit under the
    user's inotify limits beside what the user holds already. Never a silent fallback to polling."""
    if mode == "poll" or not sys.platform.startswith("linux") or not entries:
        return
    from joulectl.sim import inotify

    per_layout: dict[str, int] = {}
    needed = 0
    for e in entries:
        fp = model_fingerprint(e.model)
        count = per_layout.get(fp)
        if count is None:
            count = per_layout[fp] = len(inotify.dir_groups([w.rel for w in e.model.writables]))
        needed += count
    if not needed:
        return
    try:
        inotify.check_limits(needed, n_workers)
    except inotify.LimitError as exc:
        raise JoulectlError(f"simulate run: {len(entries)} node(s): {exc}") from None


def check_fd_budget(shards: list[list[NodeEntry]]) -> None:
    """One warning line when a worker's nodes rewrite more files every tick than ``RLIMIT_NOFILE``
    lets it keep open (:func:`~joulectl.sim.tick.fd_budget`): the rest are opened and closed at
    every write, which is slower and nothing else."""
    per_layout: dict[str, int] = {}
    worst = 0
    for entries in shards:
        wanted = 0
        for e in entries:
            fp = model_fingerprint(e.model)
            n = per_layout.get(fp)
            if n is None:
                n = per_layout[fp] = kept_files(e.model)
            wanted += n
        worst = max(worst, wanted)
    budget = fd_budget().size
    if worst > budget:
        warn(f"simulate run: {worst} files rewritten every tick in a worker, {budget} can stay open under "
             f"RLIMIT_NOFILE: the other {worst - budget} are opened at every write (slower); raise the hard "
             "limit (ulimit -Hn) or use more --workers")


class Shard:
    """A set of nodes stepped together (in this process or in a worker process).

    With a watcher (SIM_READBACK auto or inotify), the parent directories of every node's
    writable files are watched before the node reads its tree. The start checked that the user's
    inotify limits leave room for every watch (:func:`check_watch_limits`); a limit reached all the
    same (another process took watches since) stops the start with the same kind of message. A node
    whose watches cannot be added for another reason (a directory missing) is polled, with one
    warning line for the shard.
    """

    def __init__(self, entries: list[NodeEntry], nvml_io: Any, mode: str = "poll") -> None:
        self.watcher = _open_watcher(mode)
        self.nodes: list[NodeRuntime] = []
        # The files every node rewrites each tick stay open as far as RLIMIT_NOFILE allows
        # (check_fd_budget said at the start what does not fit).
        fds = fd_budget()
        failed: list[tuple[str, OSError]] = []
        groups: dict[str, list[tuple[bytes, dict[bytes, list[int]]]]] = {}
        try:
            for e in entries:
                marks = ReadbackMarks(polled=True)
                if self.watcher is not None:
                    from joulectl.sim import inotify

                    fp = model_fingerprint(e.model)
                    if fp not in groups:
                        groups[fp] = inotify.dir_groups([w.rel for w in e.model.writables])
                    try:
                        self.watcher.watch(marks, os.fsencode(os.path.join(e.dir, "")), groups[fp])
                        marks.polled = False
                    except OSError as exc:
                        if exc.errno in _LIMIT_ERRNOS:
                            raise JoulectlError(_limit_reached(exc, e.model.node)) from None
                        failed.append((e.model.node, exc))
                self.nodes.append(NodeRuntime(e.dir, e.model, e.load, zone_offset_c=e.zone_offset_c,
                                              facility=e.facility, nvml_io=nvml_io if e.model.nvml else None,
                                              marks=marks, fds=fds))
        except BaseException:
            self.close()
            raise
        if failed:
            node, first = failed[0]
            warn(f"simulate run: inotify_add_watch: {first.strerror}: {len(failed)} node(s) from {node} on are "
                 "polled instead")

    def tick(self, now: float, dt_s: float, loads: Loads | None = None) -> tuple[list[Sample], list[Event]]:
        samples: list[Sample] = []
        events: list[Event] = []
        watcher = self.watcher
        # The events are read before the first node and again every DRAIN_NODES nodes or
        # DRAIN_WRITES file writes (each write queues up to a few events, its own counter rewrites
        # included): a read per node cost more than its events, and the queue (16,384 events by
        # default) must not overflow. A write an agent makes after its node's readback this tick
        # is taken at the next tick, as it would be with a read per node.
        since = DRAIN_NODES
        written = 0
        for rt in self.nodes:
            if loads:
                rt.load = loads.get(rt.model.node, rt.load)
            if watcher is not None and (since >= DRAIN_NODES or written >= DRAIN_WRITES):
                watcher.drain()
                since = written = 0
            since += 1
            before = rt.writes
            rt.readback(now)
            samples.append(rt.step(now, dt_s))
            written += rt.writes - before
            if rt.events:
                events.extend(rt.events)
                rt.events = []
        return samples, events

    def save_caches(self) -> None:
        for rt in self.nodes:
            rt.save_cache()

    def close(self) -> None:
        for rt in self.nodes:
            rt.close_files()
        if self.watcher is not None:
            self.watcher.ino.close()
            self.watcher = None

    def startup_events(self) -> list[Event]:
        events: list[Event] = []
        for rt in self.nodes:
            events.extend(rt.events)
            rt.events = []
        return events


def _worker(conn: Connection, entries: list[NodeEntry], nvml_io: Any, mode: str,
            main_end: Connection | None = None, gpu_ids: dict[str, telemetry.GpuIds] | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if main_end is not None:
        # The fork copied the main process's end of this worker's pipe: closed, so that the
        # worker sees EOF (and ends) when the main process dies, even by kill -9.
        main_end.close()
    try:
        shard = Shard(entries, nvml_io, mode)
        profiles = {e.model.node: e.model.profile for e in entries}
        # The shard's nodes live as long as the worker: frozen out of the collector's view, so that
        # a full collection no longer walks every node's objects mid-tick (0.1-0.17 s of CPU for
        # 5,000 cut-down nodes here; docs/PERFORMANCE.md).
        gc.freeze()
        gc.enable()  # off in the parent while it forked (see run_entries)
        conn.send(("ready", shard.startup_events()))
        while True:
            msg = conn.recv()
            if msg[0] != "tick":
                shard.save_caches()
                shard.close()
                conn.send(("ok", None))
                break
            samples, events = shard.tick(msg[1], msg[2], msg[3] if len(msg) > 3 else None)
            # The shard's telemetry text too, here in parallel: in the main process, after the
            # workers, it was a quarter of a 10,000-node tick (docs/PERFORMANCE.md).
            conn.send(("ok", (samples, events, telemetry.render_nodes(samples, profiles, gpu_ids))))
    except (EOFError, KeyboardInterrupt):
        pass
    except JoulectlError as exc:  # an expected error: raised in the main process as it is
        try:
            conn.send(("fail", (type(exc).__name__, str(exc))))
        except OSError:
            pass
    except Exception as exc:  # reported to the main process, which raises it there
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        conn.close()


class _Pool:
    """Shards in worker processes (fork), or one shard in this process for one worker.

    Workers also render their nodes' telemetry (:func:`telemetry.render_nodes`): after a
    :meth:`tick`, :attr:`rendered` holds it in the samples' order (None with one worker: the
    caller renders)."""

    def __init__(self, shards: list[list[NodeEntry]], nvml_io: Any, mode: str = "poll",
                 gpu_ids: dict[str, telemetry.GpuIds] | None = None) -> None:
        self.local: Shard | None = None
        self.rendered: telemetry.Rendered | None = None
        self.procs: list[tuple[Any, Connection]] = []
        self.startup: list[Event] = []
        if len(shards) == 1:
            self.local = Shard(shards[0], nvml_io, mode)
            self.startup = self.local.startup_events()
            return
        import multiprocessing  # only for two workers or more: a FUSE or one-worker start skips it

        ctx = multiprocessing.get_context("fork")
        for entries in shards:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, entries, nvml_io, mode, parent, gpu_ids), daemon=True)
            proc.start()
            child.close()
            self.procs.append((proc, parent))
        for _proc, conn in self.procs:
            self.startup.extend(self._recv(conn))

    @staticmethod
    def _recv(conn: Connection) -> Any:
        try:
            kind, payload = conn.recv()
        except EOFError:
            raise JoulectlError("a simulator worker stopped unexpectedly") from None
        if kind == "error":
            raise JoulectlError(f"a simulator worker failed: {payload}")
        if kind == "fail":
            raise JoulectlError(payload[1])
        return payload

    def tick(self, now: float, dt_s: float, loads: Loads | None = None) -> tuple[list[Sample], list[Event]]:
        if self.local is not None:
            return self.local.tick(now, dt_s, loads)
        for _proc, conn in self.procs:
            conn.send(("tick", now, dt_s, loads))
        # Each shard's answer is taken (and unpickled) as soon as it is there, while another worker
        # may still compute; they are put together in shard order, so the events keep their order.
        from multiprocessing.connection import wait

        pending: dict[Any, int] = {conn: k for k, (_proc, conn) in enumerate(self.procs)}
        answers: list[Any] = [None] * len(self.procs)
        while pending:
            for ready in wait(list(pending)):
                answers[pending[ready]] = self._recv(ready)  # type: ignore[arg-type]
                del pending[ready]
        shard_samples: list[Sample] = []
        events: list[Event] = []
        lines: list[str | None] = []
        blocks: telemetry.PromBlocks = ([], [], [], [], [])
        for s, e, (shard_lines, shard_blocks) in answers:
            shard_samples.extend(s)
            events.extend(e)
            lines.extend(shard_lines)
            for family, part in zip(blocks, shard_blocks, strict=True):
                family.extend(part)
        order = sorted(range(len(shard_samples)), key=lambda j: shard_samples[j].node)
        self.rendered = ([lines[j] for j in order], (
            [blocks[0][j] for j in order], [blocks[1][j] for j in order], [blocks[2][j] for j in order],
            [blocks[3][j] for j in order], [blocks[4][j] for j in order]))
        return [shard_samples[j] for j in order], events

    def close(self) -> None:
        if self.local is not None:
            self.local.save_caches()
            self.local.close()
        for _proc, conn in self.procs:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for proc, conn in self.procs:
            try:
                if conn.poll(10):
                    conn.recv()
            except (OSError, EOFError):
                pass
            conn.close()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        self.procs = []


# -- building the models -------------------------------------------------------------------------


def build_entries(spec: Any, root: str) -> list[NodeEntry]:
    """One :class:`NodeEntry` per spec node; the layout is scanned once per resolved profile."""
    templates: dict[str, NodeModel] = {}
    fac = spec.facility
    facility = {"ambientC": fac.ambient_c, "amplitudeC": fac.amplitude_c, "periodH": fac.period_h}
    entries: list[NodeEntry] = []
    for node in spec.nodes:
        node_dir = os.path.join(root, node.name)
        key = node.profile.profile_hash()
        template = templates.get(key)
        if template is None:
            template = layout.model_for(node_dir, node.name, node.profile)
            model_fingerprint(template)  # once per profile: the copies share it
            templates[key] = template
        model = layout.instantiate(template, node.name)
        offset = fac.cooling_zones.get(node.cooling_zone, 0.0) if node.cooling_zone else 0.0
        entries.append(NodeEntry(node_dir, model, BaseLoad.from_mapping(node.base_load), offset, facility))
    return entries


def peak_it_w(models: list[NodeModel]) -> float:
    """The facility's peak IT power: every package at its maximum, DRAM at 15 W, every GPU at max."""
    total = 0.0
    for m in models:
        for pkg in m.packages:
            total += max(pkg.params.curve_w) if pkg.params.curve_w else pkg.params.max_w
            total += 15.0 if m.dram else 0.0
        total += sum(g.params.max_w for g in m.gpus)
    return total


def facility_figures(spec_facility: Any, now: float, it_w: float, peak_w: float) -> telemetry.Facility:
    amb = ph.ambient_c(now, spec_facility.ambient_c, spec_facility.amplitude_c, spec_facility.period_h)
    load = ph.clamp01(it_w / peak_w) if peak_w > 0 else 0.0
    value = ph.pue(amb, load)
    return telemetry.Facility(amb, it_w, value, ph.cooling_w(it_w, value))


# -- run -------------------------------------------------------------------------------------------


def run(
    spec_path: str,
    root: str,
    *,
    ticks: int | None = None,
    duration_s: float | None = None,
    tick_s: float = 1.0,
    fast: bool = False,
    workers: int | None = None,
    profiles_dir: str | None = None,
    progress: ProgressFn | None = None,
    render_progress: Callable[[str, str], None] | None = None,
    on_start: StartFn | None = None,
    on_tick: TickFn | None = None,
    stop_event: threading.Event | None = None,
    fuse: bool = False,
    workload: Callable[[Any], Workload] | None = None,
    overlay: bool = False,
) -> RunSummary:
    """Render or resume every node of the spec, then run the tick loop.

    ``workload(spec)``, when given, makes the :class:`Workload` that drives the nodes' load
    (the spec's baseLoad then does not apply).

    ``progress(done, total, samples)`` is called after every tick; ``render_progress(node,
    "rendered"|"resumed")`` after every tree the start renders or resumes; ``on_start(spec,
    models)`` once before the first tick and ``on_tick(output)`` after every tick's files are
    written (both in the tick loop's thread: they must not block). Setting ``stop_event`` stops
    the run after the current tick, as Ctrl-C does (for a run in another thread). With ``fuse``,
    one process serves every node through a FUSE mount at ``root/fuse`` (:mod:`joulectl.sim.fuse`).
    ``overlay``: fresh trees are overlay mounts (:mod:`joulectl.sim.overlay`).
    """
    from joulectl.sim.clusterspec import load_spec

    if tick_s <= 0 or not math.isfinite(tick_s):
        raise InputError("must be a positive number of seconds", field="--tick")
    if ticks is not None and ticks < 0:
        raise InputError("must not be negative", field="--ticks")
    if duration_s is not None and (duration_s < 0 or not math.isfinite(duration_s)):
        raise InputError("must be a non-negative number of seconds", field="--duration")
    if workers is not None and workers < 1:
        raise InputError("must be at least 1", field="--workers")
    readback_mode()  # a bad SIM_READBACK stops the start before anything is rendered
    spec = load_spec(spec_path, profiles_dir)
    root = os.path.abspath(root)
    binding = None
    if fuse and workload is not None:
        raise InputError("a workload trace does not drive FUSE mode yet: run it without --fuse", field="--trace")
    if fuse:
        from joulectl.sim.fuse import serve

        # A missing binding, or a root another run serves, stops the start before anything is rendered.
        binding = serve.check(root)
    if os.path.exists(root) and not os.path.isdir(root):
        raise InputError("not a directory", file=root, field="--root")
    os.makedirs(root, exist_ok=True)
    # The start allocates a few objects per file of every tree and frees almost none: collecting
    # during it only rescans them (a third of the start's CPU time).
    gc.disable()
    try:
        rendered, resumed = _ensure_trees(spec, root, render_progress, overlay=overlay)
        entries = build_entries(spec, root)
        models = [e.model for e in entries]
        if on_start is not None:
            on_start(spec, models)
        gpu_ids = telemetry.gpu_identities(spec, models)
        if fuse:
            return serve.serve(entries, root, spec.facility, binding, ticks=ticks, duration_s=duration_s,
                               tick_s=tick_s, fast=fast, progress=progress, rendered=rendered, resumed=resumed,
                               on_tick=on_tick, stop_event=stop_event, gpu_ids=gpu_ids, cluster=spec.name)
        return run_entries(entries, root, spec.facility, ticks=ticks, duration_s=duration_s, tick_s=tick_s,
                           fast=fast, workers=workers, progress=progress, rendered=rendered, resumed=resumed,
                           on_tick=on_tick, stop_event=stop_event, gpu_ids=gpu_ids, cluster=spec.name,
                           workload=workload(spec) if workload is not None else None)
    finally:
        gc.enable()  # (run_entries turns it back on once the nodes are built, before the first tick)


def _nvml_io() -> Any:
    try:
        from joulectl.sim.nvml_io import NvmlIO
    except ImportError:
        return None
    return NvmlIO()


def run_entries(
    entries: list[NodeEntry],
    root: str,
    spec_facility: Any,
    *,
    ticks: int | None = None,
    duration_s: float | None = None,
    tick_s: float = 1.0,
    fast: bool = False,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    rendered: int = 0,
    resumed: int = 0,
    clock: Callable[[], float] = time.time,
    on_tick: TickFn | None = None,
    stop_event: threading.Event | None = None,
    pool: Any = None,
    workload: Workload | None = None,
    gpu_ids: dict[str, telemetry.GpuIds] | None = None,
    cluster: str = "",
) -> RunSummary:
    """The tick loop over prepared nodes (what :func:`run` does after the trees exist).

    ``pool`` replaces the worker pool (FUSE mode's, with its nodes in this process). With a
    ``workload``, each tick's node loads come from it and it is told what the tick did.
    """
    mode = readback_mode()
    n_workers = max(1, min(workers or default_workers(), len(entries) or 1))
    shards = [entries[i::n_workers] for i in range(n_workers)]
    total = ticks
    if total is None and duration_s is not None:
        total = math.ceil(duration_s / tick_s - 1e-9)
    stop = stop_event if stop_event is not None else threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        stop.set()

    old_handler = None
    try:
        old_handler = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread
        old_handler = None
    summary = RunSummary(nodes=len(entries), rendered=rendered, resumed=resumed, ticks=0, workers=n_workers,
                         seconds=0.0)
    wall0 = time.monotonic()
    # No collection while the nodes' objects are built (see run): it would only rescan them.
    if pool is None:
        check_watch_limits(entries, n_workers, mode)
        check_fd_budget(shards)
        gc.disable()
        try:
            pool = _Pool(shards, _nvml_io(), mode, gpu_ids)
            gc.freeze()  # the nodes' models live as long as the run: out of every full collection
        finally:
            gc.enable()
    try:
        summary.events += telemetry.append_events(root, pool.startup)
        pending: list[Event] = list(pool.startup)  # the start's events go out with the first tick
        models = [e.model for e in entries]
        peak = peak_it_w(models)
        profiles = {e.model.node: e.model.profile for e in entries}
        start = clock()
        prev = start
        k = 0
        # The schedule's slot: the next tick is due at start + (slot + 1) * tick_s. A tick that
        # starts late takes the last slot already due and drops the ones it overran (as Go's
        # time.Ticker drops ticks for a slow receiver): no burst of catch-up ticks, the late
        # tick's dt covers the gap. --ticks counts ticks; --duration in real time counts slots.
        slot = 0
        by_slot = not fast and ticks is None
        last_s = 0.0
        # Between ticks: in the main thread a sleep (Ctrl-C's handler sets ``stop`` in this thread,
        # where Event.set could wait on the lock Event.wait holds); in another thread (FUSE mode,
        # a served run) on ``stop`` itself, so a stop is seen at once, not up to 0.1 s later.
        pause: Callable[[float], Any] = (time.sleep if threading.current_thread() is threading.main_thread()
                                         else stop.wait)
        while (total is None or (slot if by_slot else k) < total) and not stop.is_set():
            if fast:
                now = prev + tick_s
            else:
                wait = start + (slot + 1) * tick_s - clock()
                while wait > 0 and not stop.is_set():
                    pause(min(wait, 0.1))
                    wait = start + (slot + 1) * tick_s - clock()
                if stop.is_set():
                    break
                now = clock()
                slot = max(slot, int((now - start) // tick_s) - 1)
            dt = max(0.0, now - prev)
            t0 = time.monotonic()
            if workload is None:
                samples, events = pool.tick(now, dt)
            else:
                samples, events = pool.tick(now, dt, workload.loads(now, dt))
            if workload is not None:
                workload.advance(now, dt, samples)
            prev = now
            it_w = sum(s.power_w for s in samples)
            fac = facility_figures(spec_facility, now, it_w, peak)
            summary.events += telemetry.append_events(root, events)
            # The exported tick duration is the previous tick's whole cost (telemetry included).
            lines, prom = telemetry.write_tick(root, samples, fac, profiles, tick_seconds=last_s,
                                               overruns=summary.overruns, gpu_ids=gpu_ids, cluster=cluster,
                                               rendered=getattr(pool, "rendered", None))
            if on_tick is not None:
                on_tick(TickOutput(k + 1, samples, fac, pending + events if pending else events, lines, prom))
                pending = []
            last_s = time.monotonic() - t0
            if last_s > tick_s:
                summary.overruns += 1
            summary.tick_seconds.append(last_s)
            summary.power_w = it_w
            k += 1
            slot += 1
            summary.ticks = k
            if progress is not None:
                progress(k, total, samples)
    finally:
        gc.unfreeze()  # a caller that lives on (tests, the what-if twin) collects as before
        pool.close()
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
    summary.interrupted = stop.is_set()
    summary.seconds = time.monotonic() - wall0
    return summary


# -- status --------------------------------------------------------------------------------------


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def node_status(node_dir: str, info: dict[str, Any]) -> dict[str, Any]:
    """One node's figures from its tree and ledger."""
    name = str(info.get("node") or os.path.basename(node_dir))
    led = ledger_mod.load(node_dir)
    model = layout.model_for(node_dir, name, None)
    nvml = os.path.exists(os.path.join(node_dir, "state", "nvml.json"))
    rt_values: dict[str, str] = {}
    cached = _start_cache(node_dir, model)
    for i, w in enumerate(model.writables):
        path = os.path.join(node_dir, w.rel)
        try:
            st = os.lstat(path)
            hit = cached[i] if i < len(cached) else None
            if isinstance(hit, list) and len(hit) == 4 and tuple(hit[:3]) == (st.st_mtime_ns, st.st_size, st.st_ino):
                text = str(hit[3]).strip()  # unchanged since the last clean stop: no read
            else:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(4096).strip()
        except OSError:
            continue
        if w.kind == "amd_sclk" and ":" in text:
            continue
        rt_values.setdefault(f"{w.component}/{w.kind}", text)
    caps: dict[str, float | None] = {}
    for pkg in model.packages:
        raw = rt_values.get(f"pkg{pkg.index}/rapl_limit")
        caps[f"pkg{pkg.index}"] = int(raw) / 1e6 if raw and raw.isdigit() else None
    for gpu in model.gpus:
        key = f"gpu{gpu.index}"
        raw = rt_values.get(f"{key}/amdgpu_cap") or rt_values.get(f"{key}/intel_pl1")
        caps[key] = int(raw) / 1e6 if raw and raw.isdigit() else None
    nvml_caps = _nvml_caps(node_dir)
    caps.update(nvml_caps)
    governors = sorted({v for k, v in rt_values.items() if k.endswith("/cpufreq_governor")})
    epp = sorted({v for k, v in rt_values.items() if k.endswith("/epp")})
    perf = {k.split("/")[0]: v for k, v in rt_values.items() if k.endswith("/amd_perf_level")}
    energy_j: dict[str, float] = {}
    power: float | None = None
    tick = 0
    updated = None
    if led is not None:
        tick = led.tick
        updated = telemetry.iso(led.time_s) if led.time_s else None
        power = led.state.get("P")
        for cid, total in sorted(led.energy.items()):
            unit = 1000.0 if (cid.startswith("gpu") and nvml) else 1e6
            energy_j[cid] = round(total / unit, 3)
    return {
        "node": name,
        "profile": info.get("profile"),
        "ticks": tick,
        "updated": updated,
        "powerWatts": _rounded(power),
        "energyJoules": energy_j.get("host", round(sum(v for k, v in energy_j.items() if k != "psys"), 3)),
        "energy": {k: v for k, v in energy_j.items() if k != "host"},
        "capsWatts": caps,
        "governors": {"cpu": governors, "epp": epp, "gpuPerfLevels": perf},
    }


def _start_cache(node_dir: str, model: NodeModel) -> list[Any]:
    """The writable files of ``state/tick-cache.json``, in model order, when it is of this layout
    (see :meth:`NodeRuntime.save_cache`); each is checked against its file's signature before use."""
    from joulectl.sim.tick import CACHE_NAME

    try:
        with open(os.path.join(node_dir, "state", CACHE_NAME), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return []
    if not isinstance(doc, dict) or doc.get("v") != 2 or doc.get("f") != model_fingerprint(model):
        return []
    w = doc.get("w")
    return w if isinstance(w, list) else []


def _nvml_caps(node_dir: str) -> dict[str, float | None]:
    io = _nvml_io()
    if io is None or not os.path.exists(os.path.join(node_dir, "state", "nvml.json")):
        return {}
    try:
        state = io.read(node_dir)
    except (OSError, ValueError):
        return {}
    caps: dict[str, float | None] = {}
    for i, dev in enumerate(io.devices(state)):
        caps[f"gpu{i}"] = io.limit_w(dev)
    return caps


def status(root: str) -> dict[str, Any]:
    """Per node under ``root``: power, energy, caps and governors in force."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise InputError("not a directory", file=root, field="--root")
    nodes = []
    for name in sorted(os.listdir(root)):
        node_dir = os.path.join(root, name)
        info = read_node_info(node_dir) if os.path.isdir(node_dir) else None
        if info is None:
            continue
        nodes.append(node_status(node_dir, info))
    if not nodes:
        from joulectl.sim import overlay

        if overlay.node_layers(root):
            raise InputError("its overlay node trees are not mounted (after a reboot, or in another mount "
                             "namespace): `joulectl simulate render SPEC --root DIR` mounts them", file=root,
                             field="--root")
        raise InputError("no rendered node trees here (run `joulectl simulate render` first)", file=root,
                         field="--root")
    return {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "SimulationStatus", "root": root,
            "powerWatts": round(sum(n["powerWatts"] or 0.0 for n in nodes), 2),
            "nodes": nodes}
