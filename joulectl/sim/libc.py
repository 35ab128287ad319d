"""The C library, for the system calls ``os`` has no function for (``mount``, ``umount2``,
``renameat2``): loaded once per process from the symbols the interpreter already has
(``ctypes.util.find_library`` would start ``ldconfig`` at each lookup)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["MNT_DETACH", "detach", "libc"]

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


def detach(path: str) -> None:
    """``umount2(path, MNT_DETACH)``; an :class:`OSError` with the kernel's errno when refused."""
    if libc().umount2(os.fsencode(path), MNT_DETACH) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
