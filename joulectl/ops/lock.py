"""The node lock: mutating commands serialize on an exclusive ``flock`` (SPEC §2).

The lock file is ``<root>/run/joulectl/lock``. A run waits up to ``--wait`` seconds for it and
then fails with exit 7. The kernel releases a ``flock`` when its holder dies, so a killed run
never leaves the node locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from joulectl.errors import ConfinementError, InputError, LockBusyError, RefusedError
from joulectl.host import Host, NotRegularError, open_regular

LOCK_PATH = "/run/joulectl/lock"
POLL_S = 0.05


@contextmanager
def node_lock(host: Host, wait_s: float = 10.0) -> Iterator[None]:
    """Hold the node lock for the duration of the block; :class:`LockBusyError` past ``wait_s``."""
    try:
        host.makedirs(os.path.dirname(LOCK_PATH))
        fd = open_regular(host.path(LOCK_PATH), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), LOCK_PATH)
    except NotRegularError as e:
        raise InputError(f"the node lock is {e.strerror}; remove it", file=LOCK_PATH) from None
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW: the lock file is a symlink
            raise ConfinementError("the node lock is a symlink; refusing to follow it", file=LOCK_PATH) from None
        if e.errno == errno.EISDIR:
            raise InputError("the node lock is not a regular file (a directory); remove it",
                             file=LOCK_PATH) from None
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RefusedError(
                f"cannot open the node lock {LOCK_PATH}: {os.strerror(e.errno)}",
                hint="run as root (sudo joulectl ...)",
            ) from None
        raise
    deadline = time.monotonic() + max(0.0, wait_s)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise LockBusyError(
                        f"the node lock {LOCK_PATH} is held by another joulectl run "
                        f"(waited {wait_s:g} s)",
                        hint="raise --wait, or find the other run with: fuser -v " + host.path(LOCK_PATH),
                    ) from None
                time.sleep(POLL_S)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
