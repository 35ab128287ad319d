"""The FUSE binding and the mount point: what must hold before a mount, and a stale mount's cleanup.

The binding is ``mfusepy`` (ctypes over Debian's ``libfuse3``; the choice and its measurements are
in docs/simulate.md). It is an optional extra, ``joulectl[fuse]``: without it, or without
libfuse3 or ``/dev/fuse``, ``--fuse`` stops with one line naming what is missing.

A run killed with SIGKILL leaves its mount behind: every access to it fails with ``ENOTCONN``
("Transport endpoint is not connected"). :func:`prepare` finds it in ``/proc/self/mountinfo``
and detaches it (``umount2(MNT_DETACH)`` as root, else ``fusermount3 -u -z``) before mounting
again; a mount that still answers belongs to a running simulator and stops the start.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from typing import Any

from joulectl.errors import InputError, JoulectlError
from joulectl.sim import libc

FIELD = "--fuse"
DEV_FUSE = "/dev/fuse"


def load_binding() -> Any:
    """The ``mfusepy`` module, or an :class:`InputError` naming what is missing."""
    if not os.path.exists(DEV_FUSE):
        raise InputError(f"{DEV_FUSE} is missing (FUSE needs Linux with the fuse module)", field=FIELD)
    try:
        import mfusepy
    except ImportError:
        raise InputError("needs the mfusepy package: pip install 'joulectl[fuse]'", field=FIELD) from None
    except OSError as exc:  # mfusepy raises EnvironmentError when it finds no libfuse
        raise InputError(f"needs libfuse3 (apt-get install fuse3): {exc}", field=FIELD) from None
    if getattr(mfusepy, "fuse_version_major", 3) != 3:
        raise InputError("needs libfuse3 (apt-get install fuse3); only libfuse 2 was found", field=FIELD)
    return mfusepy


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    out = field
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        out = out.replace(code, char)
    return out


def mounted(path: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether ``path`` (absolute) is a mount point in this mount namespace."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    target = os.path.normpath(path)
    return any(len(parts) > 4 and _unescape(parts[4]) == target for parts in (line.split() for line in lines))


def detach(path: str) -> None:
    """Unmount ``path`` lazily (it goes once nothing uses it); an error names the mount point."""
    if os.geteuid() == 0:
        try:
            libc.detach(path)
            return
        except OSError as e:
            if e.errno == errno.EINVAL and not mounted(path):  # gone meanwhile
                return
            raise JoulectlError(f"{path}: cannot unmount the stale FUSE mount: {e.strerror}") from None
    tool = shutil.which("fusermount3")
    if tool is None:
        raise JoulectlError(f"{path}: cannot unmount the stale FUSE mount: fusermount3 is missing "
                            "(apt-get install fuse3)")
    res = subprocess.run([tool, "-u", "-z", path], capture_output=True, text=True, check=False)
    if res.returncode != 0 and mounted(path):
        reason = (res.stderr.strip().splitlines() or ["failed"])[-1]
        raise JoulectlError(f"{path}: cannot unmount the stale FUSE mount: {reason}")


def _stale(path: str) -> bool | None:
    """None when nothing is mounted at ``path``; else whether the mount is stale (its server gone)."""
    if not mounted(path):
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO):
            raise JoulectlError(f"{path}: cannot inspect the mount point: {exc.strerror}") from None
        return True
    return False


def refuse_live(path: str) -> None:
    """A mount at ``path`` that still answers belongs to another running simulator: stop the start."""
    if _stale(path) is False:
        raise InputError("is served by another running simulator (stop it first)", file=path, field=FIELD)


def prepare(path: str) -> bool:
    """Make ``path`` a free, existing directory to mount on; True when a stale mount was cleaned.

    A mount that still answers (another simulator serving this root) stops the start.
    """
    refuse_live(path)
    stale = bool(_stale(path))
    if stale:
        detach(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError("the mount point is not a directory", file=path, field=FIELD)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the mount point: {exc.strerror}", file=path, field=FIELD) from None
    return stale
