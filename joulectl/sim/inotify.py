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
#: created or removed (a file swapped for a directory shows as IN_DELETE + IN_CREATE); the
#: directory itself removed or moved (its watch then follows the old inode: the node is polled).
DIR_MASK = (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE
            | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
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

    def add_watch(self, path: str | bytes, mask: int = DIR_MASK) -> int:
        """The watch descriptor of ``path`` (the same one again for a directory already watched).

        Raises :class:`OSError` with the errno: ``ENOSPC`` when ``max_user_watches`` is reached.
        """
        wd = self._libc.inotify_add_watch(self.fd, path if isinstance(path, bytes) else os.fsencode(path), mask)
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


#: The kernel's per-user limits (``sysctl fs.inotify.max_user_watches`` and ``max_user_instances``);
#: module attributes so that a test can put a low limit in their place.
WATCHES_FILE = "/proc/sys/fs/inotify/max_user_watches"
INSTANCES_FILE = "/proc/sys/fs/inotify/max_user_instances"
#: Where the watches and instances the user already holds are counted (``<proc>/<pid>/fdinfo``).
PROC = "/proc"


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def watch_limit() -> int | None:
    """``fs.inotify.max_user_watches`` (:data:`WATCHES_FILE`), or None when unreadable."""
    return _read_int(WATCHES_FILE)


def instance_limit() -> int | None:
    """``fs.inotify.max_user_instances`` (:data:`INSTANCES_FILE`), or None when unreadable."""
    return _read_int(INSTANCES_FILE)


def in_use(uid: int | None = None) -> tuple[int, int]:
    """(instances, watches) the user ``uid`` (default: this process's) holds now, as far as its
    processes under :data:`PROC` can be read: the limits are per user, and every other inotify user
    of the account (editors, file managers, other simulator runs) counts against them."""
    uid = os.getuid() if uid is None else uid
    # An instance a forked process inherited shows in both processes' fd tables with the same
    # watches: counted once (by its watch lines: descriptor, inode, device and mask of each).
    seen: set[bytes] = set()
    instances = watches = 0
    try:
        pids = [p for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return 0, 0
    for pid in pids:
        base = f"{PROC}/{pid}"
        try:
            if os.stat(base).st_uid != uid:
                continue
            fds = os.listdir(base + "/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{base}/fd/{fd}") != "anon_inode:inotify":
                    continue
                with open(f"{base}/fdinfo/{fd}", "rb") as fh:
                    info = fh.read()
            except OSError:
                continue
            lines = b"\n".join(sorted(x for x in info.splitlines() if x.startswith(b"inotify wd:")))
            if lines:
                if lines in seen:
                    continue
                seen.add(lines)
            instances += 1
            watches += lines.count(b"inotify wd:")
    return instances, watches


class LimitError(Exception):
    """The user's inotify limits leave too few watches or instances: ``str()`` is the one line that
    says which sysctl to raise, and to what."""


def check_limits(watches: int, instances: int) -> None:
    """Raise :class:`LimitError` unless ``watches`` more watches in ``instances`` more instances fit
    under the user's limits beside what the user holds already (an unreadable limit is no limit)."""
    w_limit, i_limit = watch_limit(), instance_limit()
    if w_limit is None and i_limit is None:
        return
    have_i, have_w = in_use()
    if w_limit is not None and have_w + watches > w_limit:
        raise LimitError(
            f"{watches} inotify watches needed, {have_w} in use, fs.inotify.max_user_watches is {w_limit}: "
            f"raise it (sysctl -w fs.inotify.max_user_watches={have_w + watches}) or set SIM_READBACK=poll")
    if i_limit is not None and have_i + instances > i_limit:
        raise LimitError(
            f"{instances} inotify instances needed, {have_i} in use, fs.inotify.max_user_instances is {i_limit}: "
            f"raise it (sysctl -w fs.inotify.max_user_instances={have_i + instances}), use fewer --workers "
            "or set SIM_READBACK=poll")


class Target(Protocol):
    """What the watcher marks: a node runtime's dirty writable indices and its poll flags."""

    dirty: set[int]
    full_poll: bool
    polled: bool


def dir_groups(rels: list[str]) -> list[tuple[bytes, dict[bytes, list[int]]]]:
    """``rels[i]`` (writable ``i``) grouped by parent directory: ``[(dir, {name: [i, ...]})]``.

    The same for every node of a layout: computed once per profile, not once per node.
    """
    by_dir: dict[bytes, dict[bytes, list[int]]] = {}
    for i, rel in enumerate(rels):
        head, tail = os.path.split(os.fsencode(rel))
        by_dir.setdefault(head, {}).setdefault(tail, []).append(i)
    return list(by_dir.items())


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
        # wd -> [(target, {name: [writable index]})]: one entry, unless two watched paths are the
        # same directory (a symlink), whose events then count for each.
        self._tables: dict[int, list[tuple[Target, dict[bytes, list[int]]]]] = {}

    def watch(self, target: Target, prefix: bytes, groups: list[tuple[bytes, dict[bytes, list[int]]]]) -> None:
        """Watch ``prefix + dir`` of every group (see :func:`dir_groups`) for ``target``.

        Raises :class:`OSError` (the node is then polled): ``ENOSPC`` at the watch limit.
        """
        self.targets.append(target)
        add = self.ino.add_watch
        tables = self._tables
        for head, names in groups:
            wd = add(prefix + head)
            entry = tables.get(wd)
            if entry is None:
                tables[wd] = [(target, names)]
            else:
                entry.append((target, names))

    def drain(self) -> None:
        tables = self._tables
        for wd, mask, name in self.ino.events():
            if mask & IN_Q_OVERFLOW:
                for target in self.targets:
                    target.full_poll = True
                continue
            entry = tables.get(wd)
            if entry is None:
                continue
            if not name and mask & GONE:
                for target, _names in tables.pop(wd):
                    target.polled = True
                continue
            for target, names in entry:
                hits = names.get(name)
                if hits is not None:
                    target.dirty.update(hits)
