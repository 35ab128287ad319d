"""The C library, for the system calls ``os`` has no function for (``mount``, ``umount2``,
``renameat2``): loaded once per process from the symbols the interpreter already has
(``ctypes.util.find_library`` would start ``ldconfig`` at each lookup)."""

from __future__ import annotations

import errno
import os
from typing import Any

__all__ = ["MNT_DETACH", "detach", "libc", "mount"]

#: ``umount2`` flag: detach now, let the mount go once nothing uses it.
MNT_DETACH = 2

_LIBC: Any = None


def libc() -> Any:
    """The C library (``ctypes.CDLL``, with ``errno`` kept for ``ctypes.get_errno``)."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def mount(source: str, target: str, fstype: str, options: str) -> int:
    """``mount(source, target, fstype, 0, options)``: 0, or the kernel's errno when refused (the
    caller tells its cases apart: a retry without an option, a message per errno)."""
    if libc().mount(os.fsencode(source), os.fsencode(target), os.fsencode(fstype), 0, os.fsencode(options)) == 0:
        return 0
    return _errno() or errno.EIO  # (a failure that left no errno is still one)


def detach(path: str) -> None:
    """``umount2(path, MNT_DETACH)``; an :class:`OSError` with the kernel's errno when refused."""
    if libc().umount2(os.fsencode(path), MNT_DETACH) != 0:
        err = _errno()
        raise OSError(err, os.strerror(err), path)
