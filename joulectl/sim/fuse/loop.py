"""The FUSE request loop of ``simulate run --fuse``: libfuse's own single-threaded loop, made to poll
for a moment before it sleeps.

libfuse's ``fuse_session_loop`` blocks in ``read(/dev/fuse)`` as soon as the queue is empty. A read
of an attribute is two synchronous requests (``OPEN``, ``READ``; ``RELEASE`` is sent after
``close`` returns), and between them the reader runs for a few µs. On this 2-CPU VM the guest never
polls when it goes idle (``/sys/module/haltpoll/parameters/guest_halt_poll_ns`` is 0), so when the
reader runs on the other CPU, every request wakes a halted virtual CPU to run the loop: a VM exit and
an interrupt between CPUs, 50-100 µs where one on the same CPU costs a few (docs/simulate.md,
"Speed of a read"). This loop runs the same libfuse session with ``/dev/fuse`` non-blocking: after
a request it keeps asking for the next one for :data:`SPIN_S`, yielding the CPU at each empty try
(a reader on the same CPU runs at once), and only then sleeps in ``poll``. The next request of the
same reader arrives while the loop still polls, so only the reader's own wake-up is left. An idle
mount costs nothing: the loop polls only within :data:`SPIN_S` of a request.

It replaces ``fuse_main_real`` for the one :class:`mfusepy.FUSE` call of :func:`run` (mfusepy builds
the operations table, this module runs it): ``fuse_new`` with the options mfusepy gives,
``fuse_mount``, libfuse's signal handlers (SIGINT, SIGTERM and SIGHUP end the loop), the loop,
``fuse_unmount`` and ``fuse_destroy``. It returns 0 when the loop ended by a signal or
``fuse_exit``, as a clean stop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import time
from typing import Any

from joulectl.sim.fuse.colocate import Colocator

#: How long the loop keeps polling after a request before it sleeps (s).
SPIN_S = 0.0003
#: The environment variable that sets another polling time, in µs (0: sleep at once, as libfuse's
#: own loop; for measurements, see benchmarks/bench_fuse.py).
SPIN_ENV = "JOULECTL_FUSE_SPIN_US"
_POLLIN = 1
#: ``fuse_main_real`` options that are ``fuse_parse_cmdline``'s, not ``fuse_new``'s.
_CMDLINE_ONLY = frozenset({b"-f", b"-s"})


class _FuseBuf(ctypes.Structure):
    """``struct fuse_buf`` of libfuse 3 (fuse_common.h)."""

    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p),
                ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


class _FuseArgs(ctypes.Structure):
    _fields_ = [("argc", ctypes.c_int), ("argv", ctypes.POINTER(ctypes.c_char_p)), ("allocated", ctypes.c_int)]


def _split(argv: list[bytes]) -> tuple[list[bytes], bytes]:
    """(``fuse_new``'s arguments, the mount point) of mfusepy's ``fuse_main_real`` arguments."""
    out, mountpoint = argv[:1], b""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == b"-o" and i + 1 < len(argv):
            out.extend(argv[i:i + 2])
            i += 2
            continue
        if arg.startswith(b"-"):
            if arg not in _CMDLINE_ONLY:
                out.append(arg)
        else:
            mountpoint = arg
        i += 1
    return out, mountpoint


class Loop:
    """One session's loop over libfuse's own functions (``lib``: the ``CDLL`` mfusepy loaded)."""

    def __init__(self, lib: Any, spin_s: float = SPIN_S, colocator: Colocator | None = None) -> None:
        self.lib = lib
        self.spin_ns = int(spin_s * 1e9)
        self.colocator = colocator
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        lib.fuse_new.restype = ctypes.c_void_p
        lib.fuse_new.argtypes = [ctypes.POINTER(_FuseArgs), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.fuse_get_session.restype = ctypes.c_void_p
        lib.fuse_get_session.argtypes = [ctypes.c_void_p]
        lib.fuse_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        for name in ("fuse_unmount", "fuse_destroy"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = None
        for name in ("fuse_set_signal_handlers", "fuse_session_fd", "fuse_session_exited"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        lib.fuse_remove_signal_handlers.argtypes = [ctypes.c_void_p]
        lib.fuse_remove_signal_handlers.restype = None
        lib.fuse_session_receive_buf.argtypes = [ctypes.c_void_p, ctypes.POINTER(_FuseBuf)]
        lib.fuse_session_process_buf.argtypes = [ctypes.c_void_p, ctypes.POINTER(_FuseBuf)]
        lib.fuse_session_process_buf.restype = None
        self.libc.poll.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int]
        self.libc.free.argtypes = [ctypes.c_void_p]
        self.libc.free.restype = None

    def main(self, argc: int, argv: Any, ops: Any, size: int, user_data: Any) -> int:
        """What ``fuse_main_real`` does for a foreground, single-threaded mount: 0 on a clean stop."""
        lib = self.lib
        args, mountpoint = _split([argv[i] for i in range(argc)])
        arr = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        fargs = _FuseArgs(len(args), ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), 0)
        fuse = lib.fuse_new(ctypes.byref(fargs), ctypes.cast(ops, ctypes.c_void_p), size, None)
        if not fuse:
            return 1
        try:
            if lib.fuse_mount(fuse, mountpoint) != 0:
                return 2
            se = lib.fuse_get_session(fuse)
            try:
                if lib.fuse_set_signal_handlers(se) != 0:
                    return 3
                try:
                    return self.serve(se)
                finally:
                    lib.fuse_remove_signal_handlers(se)
            finally:
                lib.fuse_unmount(fuse)
        finally:
            lib.fuse_destroy(fuse)

    def serve(self, se: int) -> int:
        """Receive and process requests until the session exits; the polling is described above."""
        lib, libc = self.lib, self.libc
        receive, process, exited = lib.fuse_session_receive_buf, lib.fuse_session_process_buf, lib.fuse_session_exited
        fd = lib.fuse_session_fd(se)
        os.set_blocking(fd, False)
        buf = _FuseBuf()
        ref = ctypes.byref(buf)
        pfd = _PollFd(fd, _POLLIN, 0)
        pref = ctypes.byref(pfd)
        spin, clock, yield_cpu = self.spin_ns, time.perf_counter_ns, os.sched_yield
        again, intr = -errno.EAGAIN, -errno.EINTR
        col = self.colocator if self.colocator is not None and self.colocator.enabled else None
        woke = True
        res = 0
        last = clock()
        try:
            while not exited(se):
                res = receive(se, ref)
                if res > 0:
                    if col is not None:
                        if woke:
                            col.follow(buf.mem, last)
                        else:
                            col.check(last)
                    woke = False
                    process(se, ref)
                    last = clock()
                elif res == again:
                    if clock() - last < spin:
                        yield_cpu()
                    else:
                        if col is not None:
                            col.release()
                        libc.poll(pref, 1, -1)  # a signal (EINTR) ends it too: the loop checks exited
                        last = clock()
                        woke = True
                elif res != intr:
                    break  # 0: unmounted or exited; below 0: the device failed
        finally:
            if col is not None:
                col.release()
            if buf.mem:
                libc.free(buf.mem)
        return 0 if res >= 0 or res in (again, intr) else -res


def spin_s() -> float:
    """The polling time: :data:`SPIN_S`, or :data:`SPIN_ENV`'s value (µs, 0 to 100000)."""
    raw = os.environ.get(SPIN_ENV, "").strip()
    if not raw:
        return SPIN_S
    try:
        us = int(raw)
    except ValueError:
        us = -1
    if not 0 <= us <= 100_000:
        from joulectl.errors import InputError

        raise InputError(f"{raw!r} is not a whole number of µs from 0 to 100000", field=SPIN_ENV)
    return us / 1e6


def _fuse_class(binding: Any) -> Any:
    """mfusepy's ``FUSE`` with ``getattr`` answered from a cache of the ``struct stat`` it filled
    for a path the operations call constant (``attrs_constant``): a cached path costs one copy
    instead of mfusepy's field-by-field conversion of a dict and the operations' ``lstat``."""

    class Fuse(binding.FUSE):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._stat_cache: dict[bytes, bytes] = {}
            super().__init__(*args, **kwargs)  # serves until the loop ends

        def fgetattr(self, path: bytes | None, buf: Any, fip: Any) -> int:
            cache = self._stat_cache
            if path is not None:
                blob = cache.get(path)
                if blob is not None:
                    ctypes.memmove(buf, blob, len(blob))
                    return 0
            rc: int = super().fgetattr(path, buf, fip)
            if path is not None and self.operations.attrs_constant(path.decode(self.encoding, self.errors)):
                cache[path] = ctypes.string_at(buf, ctypes.sizeof(binding.c_stat))
            return rc

    return Fuse


def run(binding: Any, operations: Any, mountpoint: str, spin_s: float = SPIN_S, colocate: bool = False,
        **kwargs: Any) -> None:
    """``binding.FUSE(operations, mountpoint, raw_fi=True, foreground=True, nothreads=True, **kwargs)``
    served by :class:`Loop` (with a :class:`~joulectl.sim.fuse.colocate.Colocator` when ``colocate``);
    a RuntimeError carries libfuse's error as mfusepy's does."""
    loop = Loop(binding._libfuse, spin_s, Colocator() if colocate else None)
    saved = binding.fuse_main_real
    binding.fuse_main_real = loop.main
    try:
        _fuse_class(binding)(operations, mountpoint, raw_fi=True, foreground=True, nothreads=True, **kwargs)
    finally:
        binding.fuse_main_real = saved
