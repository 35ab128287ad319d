"""Linux inotify through ``ctypes`` (libc ``inotify_init1``, ``inotify_add_watch``, non-blocking ``read``).

The tick's readback (:mod:`joulectl.sim.tick`) uses it to learn which agent-writable files were
written since the last tick without an ``lstat`` per file: each worker process watches the parent
directories of its nodes' writable files and reads the events of a tick, so a tick's readback costs
what was written, not the size of the trees. No dependency beyond the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import os
import struct
import sys
from collections.abc import Iterator
from typing import Protocol

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK if hasattr(os, "O_NONBLOCK") else 0o4000
IN_CLOEXEC = os.O_CLOEXEC if hasattr(os, "O_CLOEXEC") else 0o2000000

#: What a watched directory reports: a child written (in place, or its times set), or replaced,
#: created or removed (a file swapped for a directory shows as IN_DELETE + IN_CREATE).
DIR_MASK = (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE
            | IN_ONLYDIR)
#: The watched directory itself went away (its watch is gone): its node must be polled.
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED

_HEADER = struct.Struct("iIII")
_BUF = 65536


class Unavailable(OSError):
    """inotify cannot be used here (not Linux, no libc symbol, or ``inotify_init1`` failed)."""


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise Unavailable(errno_mod.ENOSYS, "inotify is Linux only")
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        init = libc.inotify_init1
        add = libc.inotify_add_watch
    except (OSError, AttributeError) as exc:
        raise Unavailable(errno_mod.ENOSYS, f"no inotify in the C library ({exc})") from None
    init.argtypes = [ctypes.c_int]
    init.restype = ctypes.c_int
    add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    add.restype = ctypes.c_int
    return libc


class Inotify:
    """One non-blocking inotify instance."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise Unavailable(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def add_watch(self, path: str, mask: int = DIR_MASK) -> int:
        """The watch descriptor of ``path`` (the same one again for a directory already watched).

        Raises :class:`OSError` with the errno: ``ENOSPC`` when ``max_user_watches`` is reached.
        """
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(wd)

    def events(self) -> Iterator[tuple[int, int, bytes]]:
        """Every queued event as ``(wd, mask, name)`` (name as bytes, b"" for the directory itself)."""
        read = os.read
        unpack = _HEADER.unpack_from
        size = _HEADER.size
        while True:
            try:
                buf = read(self.fd, _BUF)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not buf:
                return
            off = 0
            end = len(buf)
            while off < end:
                wd, mask, _cookie, length = unpack(buf, off)
                off += size
                name = buf[off:off + length].rstrip(b"\0") if length else b""
                off += length
                yield wd, mask, name

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def watch_limit() -> int | None:
    """``/proc/sys/fs/inotify/max_user_watches``, or None when unreadable."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


class Target(Protocol):
    """What the watcher marks: a node runtime's dirty writable indices and its poll flags."""

    dirty: set[int]
    full_poll: bool
    polled: bool


class Watcher:
    """The watches of one shard: directory -> the writable files of its nodes named in it.

    :meth:`watch` adds a node's directories (before the node reads its tree, so nothing written
    in between is missed); :meth:`drain` reads the queued events and marks the writables they name
    dirty. A queue overflow marks every node for a full poll; a watched directory that went away
    switches its node to polling for good. Events for any other name (the tick's own counter
    rewrites in the same directories) are dropped.
    """

    def __init__(self, ino: Inotify) -> None:
        self.ino = ino
        self.targets: list[Target] = []
        self._names: dict[int, dict[bytes, list[tuple[int, int]]]] = {}
        self._owners: dict[int, set[int]] = {}

    def watch(self, target: Target, paths: list[str]) -> None:
        """Watch the parent directory of every path (``paths[i]`` is writable ``i`` of ``target``).

        Raises :class:`OSError` (the node is then polled): ``ENOSPC`` at the watch limit.
        """
        t = len(self.targets)
        self.targets.append(target)
        by_dir: dict[str, list[tuple[bytes, int]]] = {}
        for i, path in enumerate(paths):
            head, tail = os.path.split(path)
            by_dir.setdefault(head, []).append((os.fsencode(tail), i))
        for head, names in by_dir.items():
            wd = self.ino.add_watch(head)
            table = self._names.setdefault(wd, {})
            self._owners.setdefault(wd, set()).add(t)
            for name, i in names:
                table.setdefault(name, []).append((t, i))

    def drain(self) -> None:
        names = self._names
        targets = self.targets
        for wd, mask, name in self.ino.events():
            if mask & IN_Q_OVERFLOW:
                for target in targets:
                    target.full_poll = True
                continue
            table = names.get(wd)
            if table is None:
                continue
            if not name and mask & GONE:
                for t in self._owners.pop(wd, ()):
                    targets[t].polled = True
                names.pop(wd, None)
                continue
            hits = table.get(name)
            if hits is not None:
                for t, i in hits:
                    targets[t].dirty.add(i)
