"""On by default (``JOULECTL_FUSE_COLOCATE=0`` turns it off): keep the FUSE loop on the CPU of the
process it serves while the machine is quiet.

Why (docs/simulate.md, "Speed of a read"): on an idle machine the scheduler wakes each side of a
request on an idle CPU when there is one (``select_idle_sibling``), so a reader and the FUSE loop
keep to different CPUs and every request wakes a halted CPU. A CPU whose only runnable task is
``SCHED_IDLE`` counts as idle there (``sched_idle_cpu``), and any normal task preempts such a task
at once. So during a burst of requests on a quiet machine the loop moves itself to the CPU of the
request's sender (``/proc/<tid>/stat``, field 39), runs ``SCHED_IDLE`` there, and the sender, woken
by the reply, stays on that CPU and runs at once; its next request finds the loop on its own CPU.

The risk is starvation: a ``SCHED_IDLE`` thread gets almost nothing next to a busy normal one. So
it is used only while the machine looks quiet (a one-minute load average under
:data:`QUIET_LOAD` and at most :data:`QUIET_RUNNING` runnable tasks in ``/proc/loadavg``, checked
every :data:`CHECK_S`), only during a burst (the loop returns to its
policy and CPUs before it sleeps), and only where the thread may return to ``SCHED_OTHER`` (root,
or ``RLIMIT_NICE`` allowing it). Measured by ``benchmarks/bench_fuse.py``'s polling A/B: on the
quiet machine it halves a read's time next to polling alone (docs/PERFORMANCE.md, FUSE section).
"""

from __future__ import annotations

import ctypes
import os
import resource

ENV = "JOULECTL_FUSE_COLOCATE"
#: Runnable tasks (the loop itself and one other) at or below which the machine counts as quiet,
#: when the one-minute load average is also below QUIET_LOAD.
QUIET_RUNNING = 2
QUIET_LOAD = 1.5
CHECK_S = 0.05
_PID_OFFSET = 32  # struct fuse_in_header: len, opcode, unique, nodeid, uid, gid, then pid


def enabled() -> bool:
    """Whether the loop colocates: ``JOULECTL_FUSE_COLOCATE`` unset or ``1``: yes; ``0``: no."""
    raw = os.environ.get(ENV, "").strip()
    if raw not in ("", "0", "1"):
        from joulectl.errors import InputError

        raise InputError(f"{raw!r} is neither 0 nor 1", field=ENV)
    return raw != "0"


def _may_leave_idle() -> bool:
    if os.geteuid() == 0:
        return True
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return soft == resource.RLIM_INFINITY or soft >= 20 - os.getpriority(os.PRIO_PROCESS, 0)


def cpu_of(tid: int) -> int | None:
    """The CPU task ``tid`` last ran on, or None when it is gone."""
    try:
        with open(f"/proc/{tid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


def load(path: str = "/proc/loadavg") -> tuple[float, int]:
    """The one-minute load average and the runnable tasks now (``/proc/loadavg``'s first and fourth
    fields)."""
    with open(path, encoding="ascii") as fh:
        fields = fh.read().split()
    return float(fields[0]), int(fields[3].split("/")[0])


class Colocator:
    """The loop's placement during a burst; :meth:`follow` at a burst's first request,
    :meth:`check` now and then, :meth:`release` before the loop sleeps."""

    def __init__(self, loadavg: str = "/proc/loadavg") -> None:
        self.loadavg = loadavg
        self.cpus = os.sched_getaffinity(0)
        self.enabled = len(self.cpus) > 1 and _may_leave_idle()
        self.active = False
        self.on_cpu = -1
        self._next = 0
        self._quiet = False

    def quiet(self, now_ns: int) -> bool:
        if now_ns >= self._next:
            self._next = now_ns + int(CHECK_S * 1e9)
            try:
                avg, running = load(self.loadavg)
                self._quiet = avg < QUIET_LOAD and running <= QUIET_RUNNING
            except (OSError, IndexError, ValueError):
                self._quiet = False
        return self._quiet

    def follow(self, header: int, now_ns: int) -> None:
        """Move to the CPU of the sender of the request at address ``header``, as SCHED_IDLE."""
        if not self.quiet(now_ns):
            self.release()
            return
        cpu = cpu_of(ctypes.c_uint32.from_address(header + _PID_OFFSET).value)
        if cpu is None or cpu not in self.cpus:
            return
        if not self.active:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            self.active = True
        if cpu != self.on_cpu:
            os.sched_setaffinity(0, {cpu})
            self.on_cpu = cpu

    def check(self, now_ns: int) -> None:
        if self.active and not self.quiet(now_ns):
            self.release()

    def release(self) -> None:
        if self.active:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setaffinity(0, self.cpus)
            self.active = False
            self.on_cpu = -1
