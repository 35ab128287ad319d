"""A node served live through FUSE, and the pool the tick loop steps in FUSE mode.

A :class:`LiveNode` wraps the node's :class:`~joulectl.sim.tick.NodeRuntime` (the same one plain
mode ticks) behind a lock shared by the FUSE thread and the tick thread:

* **Reads are computed when made.** An energy counter accrues, at the power of the last step, up
  to the read's time on a 1 ms grid (:meth:`NodeRuntime.advance_energy`), and the ledger holding
  it is on disk before the read returns, so a restart never resumes below a value a reader saw;
  the next tick accrues only the rest of its interval, so at a tick's time the counter is what the
  tick computes. Power, frequency and temperature read what the last tick computed. A writable
  attribute reads the value in force (clamped, wrapped or put back as the write left it).
* **Writes are answered when made.** Each ``write`` call is one store: the bytes up to the first
  NUL are handed to the tick's own readback of that attribute (the same kernel rules plain mode
  applies at the next tick), at once: a refused value fails with the rule's errno and the value
  in force is put back, a taken one is in force (normalised as the kernel reads it back) before
  the write returns. Every write is an event of the next tick.

The tree on disk stays the simulator's own copy (every value in force is written to it), so a
run killed at any point resumes from it.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from joulectl.sim import ledger as ledger_mod
from joulectl.sim import sysfs_rules as rules
from joulectl.sim.tick import REJECTED, CounterFile, Event, NodeRuntime, Sample, write_in_place

#: A read steps the energy counters on this grid (s).
READ_GRID_S = 0.001


class LiveNode:
    """One node's runtime and the lock that serialises its reads, writes and ticks."""

    def __init__(self, rt: NodeRuntime, clock: Callable[[], float] = time.time) -> None:
        self.rt = rt
        self.lock = threading.Lock()
        self.clock = clock
        led_time = rt.ledger.time_s
        #: The time of the last step (the start when there was none yet).
        self.t_step = led_time if led_time else clock()
        self._files: dict[str, tuple[str, int]] | None = None
        #: The node's root through the mount (set when served): see :meth:`nvml_lock`.
        self.view_dir: str | None = None

    def nvml_lock(self) -> int | None:
        """The fake GPU tools' lock (``state/nvml.lock``) taken through the mount, as the tools take
        it, before the tick's read-modify-write of ``state/nvml.json``; its descriptor (closing it
        unlocks), or None for a node without NVML state.

        ``flock`` on the mount is the kernel's own, on the mount's inode, not the tree's that the
        tick's session locks: without this the tick and a tool would not exclude each other. It is
        taken before the node's lock, so a tool holding it while its reads wait for the FUSE loop
        never waits for a tick that waits for it.
        """
        if self.view_dir is None or not self.rt.model.nvml:
            return None
        import fcntl

        from joulectl.sim.tools.state import NVML_LOCK

        try:
            fd = os.open(os.path.join(self.view_dir, NVML_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        return fd

    @property
    def dir(self) -> str:
        return self.rt.dir

    def entry(self, rel: str) -> tuple[str, int] | None:
        """``("c", i)`` for a counter file, ``("w", i)`` for a writable one, None for any other file.

        A path that is both (``pp_dpm_sclk``) reads as its counter and writes as its writable:
        :meth:`writable_index` finds the latter.
        """
        files = self._files
        if files is None:
            files = {}
            m = self.rt.model
            for i, w in enumerate(m.writables):
                files.setdefault(w.rel, ("w", i))
            for i, c in enumerate(m.counters):
                files[c.rel] = ("c", i)
            self._files = files
        return files.get(rel)

    def writable_index(self, rel: str) -> int | None:
        for i, w in enumerate(self.rt.model.writables):
            if w.rel == rel:
                return i
        return None

    # -- reads -----------------------------------------------------------------------------------

    def read_counter(self, index: int) -> bytes:
        c = self.rt.model.counters[index]
        if c.kind != "energy_uj":
            return c.text.encode()
        with self.lock:
            return self._energy(c).encode()

    def _energy(self, c: CounterFile) -> str:
        rt = self.rt
        now = math.floor(self.clock() / READ_GRID_S) * READ_GRID_S
        ahead = round(now - self.t_step, 3)
        if ahead > rt.energy_ahead.get(c.component, 0.0) and rt.power_w:
            rt.advance_energy((c.component,), ahead)
            ledger_mod.write(rt.dir, rt.ledger)
        total = rt.ledger.energy.get(c.component, 0)
        return f"{total % c.max_range if c.max_range else total}\n"

    def read_file(self, path: str, fds: FdCache) -> bytes:
        """A writable attribute's content, read under the lock (the tick rewrites it in place)."""
        with self.lock:
            return os.pread(fds.get(path), 65536, 0)

    # -- writes ----------------------------------------------------------------------------------

    def store(self, index: int, data: bytes) -> int:
        """One store to writable ``index``: 0 when taken, else the errno the kernel fails it with.

        The store (up to its NUL) goes to the tree, then the tick's own readback judges it by the
        rules of :mod:`joulectl.sim.sysfs_rules`, knowing what the file held before, and puts back
        or normalises the tree's copy.
        """
        rt = self.rt
        w = rt.model.writables[index]
        text = rules.store_text(data)
        with self.lock:
            before = len(rt.events)
            old = rt._disk_text(w).encode()
            sig = write_in_place(w.path, text)
            if sig is None:
                return 0
            rt._take(w, text.encode(), old, self.clock(), sig)
            for ev in rt.events[before:]:
                if ev.name == REJECTED:
                    return int(ev.attributes.get("errno") or 0)
        return 0


class FdCache:
    """Read-only descriptors of the tree's sysfs files, the last :attr:`size` used kept open.

    Every value is written to these files in place (same inode: :func:`write_in_place`), and nothing
    in ``sys/`` is created, removed or renamed while mounted, so a kept descriptor always reads what
    the file holds now; a read through it is one ``pread`` instead of ``open``, ``pread``, ``close``.
    Used by the FUSE thread only. A path is looked up at each read (never a descriptor kept
    elsewhere), so closing the least recently used one is safe.
    """

    def __init__(self, size: int = 512) -> None:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.size = max(1, min(size, soft // 4)) if soft != resource.RLIM_INFINITY else size
        self._fds: dict[str, int] = {}

    def get(self, path: str) -> int:
        fds = self._fds
        fd = fds.pop(path, -1)
        if fd < 0:
            fd = os.open(path, os.O_RDONLY)
            if len(fds) >= self.size:
                oldest = next(iter(fds))
                os.close(fds.pop(oldest))
        fds[path] = fd  # most recently used last
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class FusePool:
    """The tick loop's pool in FUSE mode: every node in this process, no readback (each write reached
    its node through the mount when it was made)."""

    def __init__(self, nodes: list[LiveNode]) -> None:
        self.nodes = nodes
        self.local: Any = None
        self.procs: list[Any] = []
        self.startup: list[Event] = []
        self.closed = False
        for n in nodes:
            self.startup.extend(n.rt.events)
            n.rt.events = []

    def tick(self, now: float, dt_s: float) -> tuple[list[Sample], list[Event]]:
        samples: list[Sample] = []
        events: list[Event] = []
        for n in self.nodes:
            tools = n.nvml_lock()
            try:
                with n.lock:
                    samples.append(n.rt.step(now, dt_s))
                    n.t_step = now
                    if n.rt.events:
                        events.extend(n.rt.events)
                        n.rt.events = []
            finally:
                if tools is not None:
                    os.close(tools)
        return samples, events

    def close(self) -> None:
        """Write every node's start-up cache (a clean stop), once: the tick loop closes the pool at
        its end, and the run once more in case the loop never started."""
        if self.closed:
            return
        self.closed = True
        for n in self.nodes:
            with n.lock:
                n.rt.save_cache()


def ensure_host_dirs(node_dir: str) -> None:
    """``var/`` and ``run/`` of a node, where joulectl keeps its journal and its lock."""
    for sub in ("var", "run"):
        os.makedirs(os.path.join(node_dir, sub), exist_ok=True)
