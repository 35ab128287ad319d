"""``simulate run --fuse``: one process serves every node through one mount at ``DIR/fuse``.

The FUSE loop runs in the main thread (libfuse's own loop, single-threaded, so it installs its
SIGINT/SIGTERM/SIGHUP handlers, which end the loop and unmount); the tick loop of
:func:`joulectl.sim.runtime.run_entries` runs in a second thread over a
:class:`~joulectl.sim.fuse.live.FusePool`, with those signals blocked. Each side ends the other:
a signal ends the FUSE loop, which stops the tick loop after its current tick; the tick loop's
end (``--ticks``, ``--duration``) asks the FUSE loop to exit and wakes it with one lookup.

A stale mount of a run killed with SIGKILL is detached at the next start
(:func:`joulectl.sim.fuse.mount.prepare`), which then resumes the trees as plain mode does.
"""

from __future__ import annotations

import errno
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from joulectl.errors import JoulectlError
from joulectl.sim.fuse import colocate, loop, mount
from joulectl.sim.fuse.live import FusePool, LiveNode, ensure_host_dirs
from joulectl.sim.fuse.view import View

if TYPE_CHECKING:
    from joulectl.sim.runtime import RunSummary

MOUNT_DIR = "fuse"
#: Kernel caches of names and attributes (s): the trees' structure changes only through the mount.
ENTRY_TIMEOUT_S = 60.0
ATTR_TIMEOUT_S = 1.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: A name no node has: looking it up wakes the FUSE loop so that it sees a stop request.
_WAKE = ".joulectl-stop"


def check(root: str) -> Any:
    """Before anything is rendered: the binding is there and no other run serves ``root/fuse``
    (node names, ``<pool>-<i>``, never collide with the mount's)."""
    binding = mount.load_binding()
    loop.spin_s()  # a bad JOULECTL_FUSE_SPIN_US or JOULECTL_FUSE_COLOCATE stops the start here
    colocate.enabled()
    mount.refuse_live(os.path.join(root, MOUNT_DIR))
    return binding


def live_nodes(entries: list[Any], nvml_io: Any) -> list[LiveNode]:
    """One :class:`LiveNode` per prepared node (its runtime built as plain mode builds it)."""
    from joulectl.sim.tick import NodeRuntime, ReadbackMarks

    nodes = []
    for e in entries:
        ensure_host_dirs(e.dir)
        rt = NodeRuntime(e.dir, e.model, e.load, zone_offset_c=e.zone_offset_c, facility=e.facility,
                         nvml_io=nvml_io if e.model.nvml else None, marks=ReadbackMarks())
        nodes.append(LiveNode(rt))
    return nodes


def serve(entries: list[Any], root: str, spec_facility: Any, binding: Any, *, ticks: int | None = None,
          duration_s: float | None = None, tick_s: float = 1.0, fast: bool = False,
          progress: Callable[..., None] | None = None, rendered: int = 0, resumed: int = 0,
          on_tick: Callable[..., None] | None = None, stop_event: threading.Event | None = None,
          gpu_ids: dict[str, Any] | None = None, cluster: str = "") -> RunSummary:
    """Mount ``root/fuse``, run the tick loop until it ends or a signal (or ``stop_event``) stops it,
    unmount. ``on_tick`` is :func:`~joulectl.sim.runtime.run_entries`'s."""
    from joulectl.sim import runtime

    mnt = os.path.join(root, MOUNT_DIR)
    mount.prepare(mnt)
    gc.disable()  # the nodes' objects are built: collecting would only rescan them (see runtime.run)
    try:
        nodes = live_nodes(entries, runtime._nvml_io())
    finally:
        gc.enable()
    for n in nodes:
        n.view_dir = os.path.join(mnt, n.rt.model.node)
    pool = FusePool(nodes)
    view = View(root, {n.rt.model.node: n for n in nodes}, binding)
    mounted = threading.Event()
    view.on_init = mounted.set
    stop = stop_event if stop_event is not None else threading.Event()
    out: dict[str, Any] = {}

    def ticker() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            mounted.wait()
            if not stop.is_set():
                out["summary"] = runtime.run_entries(
                    entries, root, spec_facility, ticks=ticks, duration_s=duration_s, tick_s=tick_s, fast=fast,
                    progress=progress, rendered=rendered, resumed=resumed, on_tick=on_tick, stop_event=stop,
                    pool=pool, gpu_ids=gpu_ids, cluster=cluster)
        except BaseException as exc:  # reported by the main thread
            out["error"] = exc
        finally:
            view.stop_requested = True
            _wake(mnt)

    thread = threading.Thread(target=ticker, name="joulectl-tick", daemon=True)
    old = {s: signal.signal(s, signal.SIG_DFL) for s in _SIGNALS}  # libfuse installs its handlers over SIG_DFL
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # a read waits for the tick thread's GIL slice at most this long
    thread.start()
    try:
        loop.run(binding, view, mnt, loop.spin_s(), colocate.enabled(), fsname="joulectl-sim", subtype="joulectl",
                 entry_timeout=ENTRY_TIMEOUT_S, attr_timeout=ATTR_TIMEOUT_S, negative_timeout=0.0)
    except RuntimeError as exc:
        # The loop returns 0 when a signal or fuse_exit ended it; anything else failed.
        out.setdefault("error", JoulectlError(f"{mnt}: the FUSE mount failed (libfuse error {exc})"))
    finally:
        stop.set()
        mounted.set()
        thread.join()
        for s, handler in old.items():
            signal.signal(s, handler)
        sys.setswitchinterval(switch)
        if mount.mounted(mnt):
            mount.detach(mnt)
        pool.close()
        _rmdir(mnt)
    if "error" in out:
        raise out["error"]
    if "summary" not in out:
        raise JoulectlError(f"{mnt}: the FUSE loop ended before the mount was up")
    summary: RunSummary = out["summary"]
    summary.workers = 1
    return summary


def _wake(mnt: str) -> None:
    """One request to the FUSE loop (a lookup of a name no node has)."""
    for _ in range(50):
        try:
            os.stat(os.path.join(mnt, _WAKE))
        except FileNotFoundError:
            return
        except OSError as exc:  # not mounted (any more), or the loop is gone
            if exc.errno in (errno.ENOTCONN, errno.ENOENT, errno.EINVAL):
                return
        time.sleep(0.01)


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
