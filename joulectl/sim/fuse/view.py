"""The file system of FUSE mode: ``/<node>/`` is the node's host root, served from its tree.

Per node, by top-level directory:

* ``sys/``: as sysfs shows it. Counters and writable attributes are served live by the node's
  :class:`~joulectl.sim.fuse.live.LiveNode`; every other file is read from the tree. A regular
  file stats as 4096 bytes with one link; opening an attribute without write permission for
  writing fails with ``EACCES``, for root too; a write to a writable file the emulator does not
  model is taken and changes nothing; the truncation of ``O_TRUNC`` is ignored (so
  ``echo V > attr`` works); nothing can be created, removed, renamed or re-permissioned.
* ``state/``, ``var/``, ``run/``: passed through read-write (the fake GPU tools' state, joulectl's
  journal with its atomic rename, its lock; ``flock`` is left to the kernel).
* anything else (``proc/``, ``bin/``, ``dev/``, ``etc/``): as on the tree, files writable as
  their modes say, nothing created or removed.

Every file is opened with ``direct_io``: the kernel caches no content, so each read is answered
here when it is made.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

from joulectl.sim.fuse.live import FdCache, LiveNode

#: Top-level directories of a node passed through read-write (create, rename, remove).
READ_WRITE = frozenset({"state", "var", "run"})
ATTR_SIZE = 4096
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR
_FD, _COUNTER, _WRITABLE, _SINK, _STATIC = 0, 1, 2, 3, 4


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class _Handle:
    __slots__ = ("buf", "fd", "index", "kind", "node", "path")

    def __init__(self, kind: int, node: LiveNode | None = None, index: int = -1, fd: int = -1,
                 path: str = "") -> None:
        self.kind = kind
        self.node = node
        self.index = index
        self.fd = fd
        self.path = path  # _STATIC: the tree's file, read through the FdCache
        self.buf: bytes | None = None


class View:
    """``mfusepy`` operations (path based, ``raw_fi``) over the trees under ``root``.

    ``on_init`` is called once the kernel has the mount; once ``stop_requested`` is set, the next
    request of any kind ends the FUSE loop (see :mod:`joulectl.sim.fuse.serve`).
    """

    use_ns = True

    def __init__(self, root: str, nodes: dict[str, LiveNode], binding: Any, on_init: Any = None) -> None:
        self.root = root
        self.nodes = nodes
        self.binding = binding
        self.on_init = on_init
        self.stop_requested = False
        self._handles: dict[int, _Handle] = {}
        #: How each sysfs file opened so far is served: :meth:`_sys_file`'s answer, its node, the tree's path.
        self._sys: dict[str, tuple[bool, int, int, int, int, LiveNode, str]] = {}
        self._next = 1
        self._root_st = os.lstat(root)
        self._fds = FdCache()

    # -- paths -----------------------------------------------------------------------------------

    def _resolve(self, path: str) -> tuple[LiveNode | None, str, str]:
        """(node, top-level dir, path relative to the node) of a mount path."""
        if self.stop_requested:
            self.binding.fuse_exit()
        parts = path[1:].split("/", 2)
        node = self.nodes.get(parts[0]) if parts[0] else None
        if node is None:
            if parts[0]:
                raise _err(errno.ENOENT)
            return None, "", ""
        if len(parts) == 1:
            return node, "", ""
        return node, parts[1], path[len(parts[0]) + 2:]

    def _disk(self, path: str) -> tuple[LiveNode | None, str, str]:
        node, top, rel = self._resolve(path)
        if node is None:
            return None, "", self.root
        return node, top, node.dir + "/" + rel if rel else node.dir

    # -- attributes ------------------------------------------------------------------------------

    @staticmethod
    def _attrs(st: os.stat_result, sysfs: bool) -> dict[str, Any]:
        size = st.st_size
        nlink = st.st_nlink
        if sysfs and stat.S_ISREG(st.st_mode):
            size, nlink = ATTR_SIZE, 1
        return {"st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": nlink, "st_uid": st.st_uid,
                "st_gid": st.st_gid, "st_size": size, "st_blocks": (size + 511) // 512, "st_blksize": 4096,
                "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        node, top, disk = self._disk(path)
        if node is None:
            return self._attrs(self._root_st, False)
        return self._attrs(os.lstat(disk), top == "sys")

    def attrs_constant(self, path: str) -> bool:
        """Whether ``path``'s attributes never change while mounted, so the binding may cache them:
        every entry of a node's ``sys/`` (nothing there is created, removed, re-permissioned or
        resized; the times stay as first seen, as sysfs's own do)."""
        parts = path.split("/", 3)
        return len(parts) > 2 and parts[2] == "sys" and parts[1] in self.nodes

    def access(self, path: str, amode: int) -> int:
        _node, top, disk = self._disk(path)
        st = os.lstat(disk)
        if amode & os.W_OK and top == "sys" and stat.S_ISREG(st.st_mode) and not st.st_mode & 0o222:
            raise _err(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: Any) -> list[str]:
        node, _top, disk = self._disk(path)
        names = sorted(self.nodes) if node is None else os.listdir(disk)
        return [".", "..", *names]

    def readlink(self, path: str) -> str:
        return os.readlink(self._disk(path)[2])

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.root)
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                            "f_ffree", "f_favail", "f_namemax")}

    # -- open, read, write -----------------------------------------------------------------------

    def _add(self, handle: _Handle, fi: Any) -> int:
        fh = self._next
        self._next += 1
        self._handles[fh] = handle
        fi.fh = fh
        fi.direct_io = 1
        return 0

    def open(self, path: str, fi: Any) -> int:
        flags = fi.flags
        hit = self._sys.get(path)
        if hit is None or self.stop_requested:
            node, top, disk = self._disk(path)
            if node is None or not top:
                raise _err(errno.EISDIR)
            if top != "sys":
                return self._add(_Handle(_FD, fd=os.open(disk, flags & ~(os.O_CREAT | os.O_EXCL))), fi)
            hit = self._sys[path] = (*self._sys_file(node, disk), node, disk)
        writable, read_kind, read_index, write_kind, write_index, node, disk = hit
        if flags & _WRITE_FLAGS:
            if not writable:
                raise _err(errno.EACCES)
            return self._add(_Handle(write_kind, node, write_index), fi)
        if read_kind == _STATIC:
            self._fds.get(disk)  # an error opening it is the open's
            return self._add(_Handle(_STATIC, path=disk), fi)
        return self._add(_Handle(read_kind, node, read_index), fi)

    @staticmethod
    def _sys_file(node: LiveNode, disk: str) -> tuple[bool, int, int, int, int]:
        """How a sysfs file is served (it never changes while mounted: nothing in sys/ can be
        created, removed or re-permissioned): (writable, read kind and index, write kind and index)."""
        st = os.stat(disk)
        if not stat.S_ISREG(st.st_mode):
            raise _err(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EACCES)
        rel = disk[len(node.dir) + 1:]
        entry = node.entry(rel)
        widx = node.writable_index(rel) if entry is not None else None
        # A counter that is also writable (pp_dpm_sclk) reads the tree, which a write rewrites at once.
        if entry is None:
            read = (_STATIC, -1)
        elif widx is not None:
            read = (_WRITABLE, widx)
        else:
            read = (_COUNTER, entry[1])
        write = (_WRITABLE, widx) if widx is not None else (_SINK, -1)
        return bool(st.st_mode & 0o222), read[0], read[1], write[0], write[1]

    def create(self, path: str, mode: int, fi: Any) -> int:
        _node, _top, disk = self._rw(path, errno.EACCES)
        fd = os.open(disk, fi.flags | os.O_CREAT, mode & 0o7777)
        return self._add(_Handle(_FD, fd=fd), fi)

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        h = self._handles[fi.fh]
        if h.kind == _FD:
            return os.pread(h.fd, size, offset)
        if h.kind == _STATIC:
            return os.pread(self._fds.get(h.path), size, offset)
        if offset == 0 or h.buf is None:  # sysfs: the content is made at the read from offset 0
            node = h.node
            assert node is not None
            if h.kind == _COUNTER:
                h.buf = node.read_counter(h.index)
            elif h.kind == _WRITABLE:
                h.buf = node.read_file(node.rt.model.writables[h.index].path, self._fds)
            else:
                h.buf = b""
        return h.buf[offset:offset + size]

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        h = self._handles[fi.fh]
        if h.kind == _FD:
            return os.pwrite(h.fd, data, offset)
        if h.kind == _WRITABLE:
            assert h.node is not None
            err = h.node.store(h.index, data)
            if err:
                raise _err(err)
        return len(data)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        _node, top, disk = self._disk(path)
        if top == "sys":
            if not os.stat(disk).st_mode & 0o222:
                raise _err(errno.EACCES)
            return 0  # sysfs ignores O_TRUNC: the store that follows is the value
        if fh is not None and fh.fh in self._handles and self._handles[fh.fh].kind == _FD:
            os.ftruncate(self._handles[fh.fh].fd, length)
        else:
            os.truncate(disk, length)
        return 0

    def fsync(self, path: str, datasync: int, fi: Any) -> int:
        h = self._handles.get(fi.fh)
        if h is not None and h.kind == _FD:
            (os.fdatasync if datasync else os.fsync)(h.fd)
        return 0

    def fsyncdir(self, path: str, datasync: int, fi: Any) -> int:
        return 0

    def release(self, path: str, fi: Any) -> int:
        h = self._handles.pop(fi.fh, None)
        if h is not None and h.kind == _FD:
            os.close(h.fd)
        return 0

    # -- the tree's structure --------------------------------------------------------------------

    def _rw(self, path: str, refusal: int = errno.EPERM) -> tuple[LiveNode, str, str]:
        """A path where entries may be created or removed (state/, var/, run/); elsewhere the errno
        the VFS gives where a file system has no such operation (``EACCES`` for a create, else
        ``EPERM``), as on sysfs."""
        node, top, disk = self._disk(path)
        if node is None or top not in READ_WRITE or disk == os.path.join(node.dir, top):
            raise _err(refusal)
        return node, top, disk

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._rw(path)[2], mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._rw(path)[2])
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._rw(path)[2])
        return 0

    def rename(self, old: str, new: str) -> int:
        src_node, src_top, src = self._rw(old)
        dst_node, dst_top, dst = self._rw(new)
        if src_node is not dst_node or src_top != dst_top:
            raise _err(errno.EXDEV)
        os.rename(src, dst)
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._rw(target)[2])
        return 0

    def link(self, target: str, source: str) -> int:
        raise _err(errno.EPERM)

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise _err(errno.EPERM)

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._rw(path)[2], mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._rw(path)[2], uid, gid)
        return 0

    def utimens(self, path: str, times: Any = None) -> int:
        _node, top, disk = self._disk(path)
        if top not in READ_WRITE:
            return 0  # sysfs takes a touch and keeps nothing of it
        os.utime(disk, ns=times) if times else os.utime(disk)
        return 0

    # -- life cycle ------------------------------------------------------------------------------

    def init(self, path: str) -> None:
        if self.on_init is not None:
            self.on_init()

    def destroy(self, path: str) -> None:
        for h in self._handles.values():
            if h.kind == _FD:
                os.close(h.fd)
        self._handles.clear()
        self._fds.close()
