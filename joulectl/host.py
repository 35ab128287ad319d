"""The host: every read, write and tool run joulectl makes goes through one :class:`Host`.

``Host(root)`` maps host paths (``/sys/...``, ``/proc/cpuinfo``, ``/var/lib/joulectl``) under a
root directory, keeps the errno of every failed read or write, and runs vendor tools with an
argument list (never a shell) and a timeout. A root other than ``/`` is a confinement boundary:
a ``..`` component or a symlink that resolves outside it is refused, and tools are looked up in
``<root>/bin`` only, so nothing of the real host leaks into an emulated node.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from joulectl.errors import ConfinementError, InputError
from joulectl.record import record

DEFAULT_TOOL_TIMEOUT_S = 3.0
#: Largest attribute or tool output read, in bytes; sysfs attributes are at most a page, but
#: ``/proc/cpuinfo`` of a large host is hundreds of kilobytes.
MAX_ATTR_BYTES = 1 << 20
#: First read of a file: a page, which holds every sysfs attribute. Asking for MAX_ATTR_BYTES at
#: once would allocate a megabyte per read (~35 µs, most of a discover's sysfs time).
_FIRST_READ = 4096
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
#: A file opened for reading (Host.read).
_READ_FLAGS = os.O_RDONLY | _OPEN_FLAGS
#: A leaf read relative to its directory (Host._read_at).
_LEAF_FLAGS = _READ_FLAGS | _NOFOLLOW
#: Most a tool may print: ``nvidia-smi -q -x`` of eight GPUs is ~0.5 MiB; past these the tool is
#: killed and its run fails (a tool that prints for ever would take all the memory).
MAX_TOOL_STDOUT = MAX_ATTR_BYTES * 8
MAX_TOOL_STDERR = MAX_ATTR_BYTES
OUTSIDE = "resolves outside the host root"


class HostIOError(Exception):
    """A read or write of a host file failed; ``errno`` is the kernel's error number."""

    def __init__(self, err: int, path: str, strerror: str | None = None) -> None:
        self.errno = err
        self.path = path
        self.strerror = strerror or os.strerror(err)
        super().__init__(f"{path}: {self.errno_name}: {self.strerror}")

    @property
    def errno_name(self) -> str:
        """Symbolic name such as ``EACCES``."""
        return errno_mod.errorcode.get(self.errno, f"errno {self.errno}")


class EscapeError(HostIOError):
    """A host path that resolves outside the host root (a symlink out of it): never followed."""

    def __init__(self, path: str, target: str) -> None:
        self.target = target
        # EXDEV, not EACCES: the backends' errno tables must not call it "no privilege"
        super().__init__(errno_mod.EXDEV, path, f"{OUTSIDE} (to {target})" if target else OUTSIDE)


class NotRegularError(HostIOError):
    """A host file that is not a regular file (a FIFO, a socket, a device): never opened for
    reading or writing, since a FIFO would block for ever."""

    def __init__(self, path: str, what: str) -> None:
        # ENXIO, as the kernel says for a FIFO without a reader; not EINVAL, which means "range"
        super().__init__(errno_mod.ENXIO, path, f"not a regular file ({what})")


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(real: str, flags: int, label: str, mode: int = 0o644) -> int:
    """``os.open`` that never blocks on a FIFO and refuses every non-regular file: opened with
    ``O_NONBLOCK`` (a FIFO without a writer would block for ever), then checked with ``fstat``.
    Raises ``OSError`` as ``os.open`` does, or :class:`NotRegularError`."""
    try:
        fd = os.open(real, flags | _OPEN_FLAGS, mode)
    except OSError as e:
        if e.errno == errno_mod.ENXIO:  # a FIFO (or socket) opened for writing without a reader
            st_mode = os.stat(real).st_mode
            if not stat.S_ISREG(st_mode):
                raise NotRegularError(label, file_kind(st_mode)) from None
        raise
    try:
        _check_regular(fd, label, real)
        if flags & (os.O_WRONLY | os.O_RDWR) == 0:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_regular(fd: int, label: str, path: str | None = None) -> int:
    """Raise :class:`NotRegularError` (or ``OSError(EISDIR)`` naming ``path``, what reading it
    says) unless ``fd`` is a regular file; return its size (0 for a procfs or sysfs file, whose
    size is not known before it is read). :meth:`Host.read` asks only when a read left it in
    doubt: through FUSE every ``fstat`` after a ``direct_io`` read is a ``GETATTR`` request (the
    read marks the access time stale)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise OSError(errno_mod.EISDIR, os.strerror(errno_mod.EISDIR), path)
        raise NotRegularError(label, file_kind(st.st_mode))
    return st.st_size


class _LinkLoop(Exception):
    """A symlink met again while :meth:`Host._follow` resolves it (a loop: ``realpath`` answers)."""


class ToolError(Exception):
    """A vendor tool could not be run to completion."""

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        super().__init__(message)


class ToolNotFound(ToolError):
    """The tool is not installed (not in ``<root>/bin``, or not on ``PATH`` for the live host)."""


class ToolTimeout(ToolError):
    """The tool did not finish within the timeout and was killed."""


class ToolOutputTooLarge(ToolError):
    """The tool printed more than joulectl reads (:data:`MAX_TOOL_STDOUT`) and was killed."""


class ToolOutside(ToolNotFound):
    """``<root>/bin/<tool>`` resolves outside the host root: never run."""


@record(frozen=True)
class Attr:
    """The result of reading one attribute: its stripped text, or the errno that failed it."""

    value: str | None
    errno: int | None = None
    #: Why, when more than an errno says it (a path outside the root, a FIFO).
    why: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None

    @property
    def reason(self) -> str | None:
        """Why the value is unknown: what was wrong with the file, an errno name, or ``empty``
        for an empty read."""
        if self.why is not None:
            return self.why
        if self.errno is not None:
            return errno_mod.errorcode.get(self.errno, f"errno {self.errno}")
        if self.value == "":
            return "empty"
        return None


@record(frozen=True)
class ToolResult:
    """A finished tool run."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@record
class Host:
    """A host filesystem root and the vendor tools that belong to it.

    ``root`` is ``/`` on a real node, or a tree such as one ``joulectl simulate render`` made.
    """

    root: str = "/"
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT_S
    env: Mapping[str, str] | None = None
    tool_calls: list[tuple[str, ...]] = field(default_factory=list)
    #: Host paths this run refused because they resolve outside the root (for the exit code).
    escapes: list[str] = field(default_factory=list)
    _dir_cache: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The symlinks :meth:`_follow` is resolving (a loop among them is found, not followed forever).
    _following: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root = os.path.abspath(os.fspath(self.root))
        if not os.path.isdir(root):
            raise InputError(
                "host root does not exist or is not a directory" if not os.path.exists(root)
                else "host root is not a directory",
                file=root,
                field="--root",
            )
        import math

        if not (isinstance(self.tool_timeout, (int, float)) and math.isfinite(self.tool_timeout)
                and self.tool_timeout > 0):
            raise InputError(f"must be a finite number of seconds above 0, got {self.tool_timeout!r}",
                             field="--tool-timeout")
        self.root = root
        self._real_root = os.path.realpath(root)
        self.is_live = self._real_root == "/"
        self._escaped_to = ""

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once for ``key`` until :meth:`forget`: a fact several readers
        of one inventory need (every GPU backend's scan of the PCI functions' vendors)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def forget(self) -> None:
        """Drop what :meth:`memo` kept (each inventory starts from the hardware as it is now)."""
        self._memo.clear()

    # -- paths -----------------------------------------------------------------------------

    def path(self, host_path: str) -> str:
        """The real filesystem path of ``host_path`` (an absolute path as the node sees it)."""
        if not host_path.startswith("/"):
            raise ConfinementError("not an absolute host path", file=host_path)
        parts = host_path.split("/")
        if ".." in parts or "\x00" in host_path:
            raise ConfinementError("path leaves the host root", file=host_path)
        if self.is_live:
            return host_path
        return self._real_root + host_path if host_path != "/" else self._real_root

    def _resolved_dir(self, real_dir: str) -> str:
        """``realpath`` of a directory, cached for the life of this Host (one command run).

        sysfs puts its symlinks on directories (``bus/pci/devices/<bdf>``, ``class/powercap/<zone>``);
        resolving each directory once instead of every component of every attribute read is most of
        the cost of confinement.
        """
        resolved = self._dir_cache.get(real_dir)
        if resolved is None:
            resolved = self._dir_cache[real_dir] = self._resolve_dir(real_dir)
        return resolved

    def _resolve_dir(self, real_dir: str) -> str:
        """``realpath(real_dir)`` from its parent's cached resolution and one ``lstat`` of its last
        component (``realpath`` itself stats every component of every directory: 384 policy
        directories ten levels deep cost thousands of calls)."""
        root = self._real_root
        if real_dir == root:
            return root
        head, tail = os.path.split(real_dir)
        if not tail or tail in (".", "..") or not real_dir.startswith(root + os.sep):
            return os.path.realpath(real_dir)
        parent = self._resolved_dir(head)
        candidate = parent + tail if parent.endswith(os.sep) else parent + os.sep + tail
        try:
            link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            return candidate  # missing: realpath keeps such a component as it is
        return self._follow(candidate) if link else candidate

    def _follow(self, link: str) -> str:
        """``realpath(link)`` of a symlink whose directory is resolved, from the cache.

        A relative target whose ``..`` all lead (sysfs's ``../../devices/...``) is resolved from the
        link's directory, which holds no symlink, so those ``..`` are lexical; its other components
        go through :meth:`_resolved_dir`, one ``lstat`` each where not cached already. ``realpath``
        stats every component from ``/`` again, ten for each PCI device and powercap zone of a
        node (50 us a link). An absolute target, a ``..`` after a name (the name may be a link),
        a target outside the root, a loop: ``realpath`` itself answers."""
        if link in self._following:
            raise _LinkLoop(link)
        try:
            target = os.readlink(link)
        except OSError:
            return os.path.realpath(link)
        parts = [part for part in target.split("/") if part and part != "."]
        up = 0
        while up < len(parts) and parts[up] == "..":
            up += 1
        rest = parts[up:]
        if target.startswith("/") or ".." in rest:
            return os.path.realpath(link)
        base = os.path.dirname(link)
        for _ in range(up):
            base = os.path.dirname(base)
        joined = (base.rstrip(os.sep) + os.sep + os.sep.join(rest)) if rest else base
        root = self._real_root
        if joined != root and not joined.startswith(root + os.sep):
            return os.path.realpath(link)
        outermost = not self._following
        self._following.add(link)
        try:
            return self._resolved_dir(joined)
        except _LinkLoop:
            if outermost:  # nothing of the loop was cached (an exception leaves no entry)
                return os.path.realpath(link)
            raise
        finally:
            self._following.discard(link)

    def _checked(self, host_path: str) -> str:
        """``path()``, refusing a symlink that resolves outside the root."""
        self._escaped_to = ""
        real = self.path(host_path)
        if self.is_live:
            return real
        head, tail = os.path.split(real)
        resolved = os.path.join(self._resolved_dir(head), tail) if tail else self._resolved_dir(head)
        if tail and os.path.islink(resolved):
            resolved = self._follow(resolved)
        if resolved != self._real_root and not resolved.startswith(self._real_root + os.sep):
            if host_path not in self.escapes:
                self.escapes.append(host_path)
            self._escaped_to = resolved
            raise ConfinementError(f"{OUTSIDE} (a symlink to {resolved})", file=host_path)
        return resolved

    def escapes_root(self, host_path: str) -> bool:
        """Whether ``host_path`` exists (as a link, at least) but resolves outside the root."""
        if self.is_live:
            return False
        try:
            self._checked(host_path)
        except ConfinementError:
            return os.path.lexists(self.path(host_path))
        return False

    def exists(self, host_path: str) -> bool:
        """Whether ``host_path`` exists. A path that resolves outside the root exists too (its
        reads then fail with "resolves outside the host root"), so a device whose attribute
        escapes gets a row saying so instead of vanishing."""
        try:
            return os.path.exists(self._checked(host_path))
        except ConfinementError:
            try:
                return os.path.lexists(self.path(host_path))
            except ConfinementError:
                return False

    def is_dir(self, host_path: str) -> bool:
        try:
            return os.path.isdir(self._checked(host_path))
        except ConfinementError:
            return False

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entries of a directory; empty when it is missing or unreadable."""
        try:
            return sorted(os.listdir(self._checked(host_path)))
        except (OSError, ConfinementError):
            return []

    def realpath(self, host_path: str) -> str:
        """The host path ``host_path`` resolves to, following symlinks inside the root."""
        resolved = self._checked(host_path)
        if self.is_live:
            return os.path.realpath(resolved)
        rel = resolved[len(self._real_root):]
        return rel or "/"

    # -- reads and writes -----------------------------------------------------------------

    def read(self, host_path: str, *, limit: int = MAX_ATTR_BYTES) -> str:
        """Read a file as text (invalid UTF-8 replaced): :meth:`_read_bytes`, decoded."""
        return self._read_bytes(host_path, limit=limit).decode("utf-8", errors="replace")

    def read_bytes(self, host_path: str) -> bytes:
        """A file's bytes as :meth:`read` reads them (its errors too), not decoded: a large text
        read without a decoded copy (a 384-thread host's 650 KB /proc/cpuinfo, ~160 page faults
        a copy). Through a replaced :meth:`read` where a test double has one (its faults apply)."""
        if type(self).read is not Host.read:
            return self.read(host_path).encode()
        return self._read_bytes(host_path)

    def _read_bytes(self, host_path: str, *, limit: int = MAX_ATTR_BYTES, truncate: bool = False) -> bytes:
        """Read a file; raise :class:`HostIOError` with the errno (:class:`EscapeError` outside the
        root, :class:`NotRegularError` for a FIFO and the like).

        The file is opened ``O_NONBLOCK`` (a FIFO never blocks the open) and read at once: a
        non-empty first read shorter than a page is a regular file's whole content (a FIFO without
        a writer reads empty, with a writer and no data fails with ``EAGAIN``; a directory fails
        with ``EISDIR``), so only an empty or failed read, or a page-long one that is read on, asks
        ``fstat`` what the file is. A sysfs attribute costs ``open``, ``read``, ``close``: on a
        FUSE-served node an ``fstat`` would be a request of its own (see :func:`_check_regular`).
        Under ``/proc`` a short read is not the end: procfs serves a page of whole records a read
        (``/proc/cpuinfo`` two or three CPUs at a time), so such a file is read on to its end (or,
        on disk, to its size). A file of known size larger than a page is read whole at once.
        ``truncate``: the first ``limit`` bytes of a longer file instead of :data:`errno.EFBIG`."""
        fd = -1
        if not self.is_live and host_path.startswith("/") and "\x00" not in host_path:
            # The usual case in one system call less: the directory resolved (cached) and inside the
            # root, the file itself opened with O_NOFOLLOW; a symlink (ELOOP) takes the full check.
            head, _, tail = (self._real_root + host_path).rpartition("/")
            if tail and ".." not in host_path.split("/"):
                parent = self._resolved_dir(head)
                root = self._real_root
                if parent == root or parent.startswith(root + os.sep):
                    try:
                        fd = os.open(parent + "/" + tail, _READ_FLAGS | _NOFOLLOW)
                    except OSError as e:
                        if e.errno != errno_mod.ELOOP or not _NOFOLLOW:
                            raise HostIOError(e.errno or errno_mod.EIO, host_path) from e
        if fd < 0:
            try:
                real = self._checked(host_path)
            except ConfinementError as e:
                raise EscapeError(host_path, self._escaped_to) from e
            try:
                fd = os.open(real, _READ_FLAGS)
            except OSError as e:
                raise HostIOError(e.errno or errno_mod.EIO, host_path) from e
        read = os.read
        try:
            try:
                data = read(fd, min(_FIRST_READ, limit + 1))
            except OSError:
                _check_regular(fd, host_path)
                raise
            # A procfs file is served a page of whole records at a time (seq_file): a read shorter
            # than a page is not its end there (a host's /proc/cpuinfo past its second CPU).
            procfs = 0 < len(data) < _FIRST_READ and host_path.startswith("/proc/")
            known = _check_regular(fd, host_path) if not data or len(data) == _FIRST_READ or procfs else 0
            if len(data) == _FIRST_READ or (procfs and len(data) != known):  # read on up to the limit
                if _FIRST_READ < known <= limit:
                    # Its size known (a file on disk): read whole into one buffer from its start, no
                    # joining of pieces (each copy of a 650 KB /proc/cpuinfo costs ~160 page faults).
                    data = os.pread(fd, known + 1, 0)
                    os.lseek(fd, len(data), os.SEEK_SET)
                parts, size = [data], len(data)
                while size <= limit and (len(data) != known or known == 0):  # (a file that grew: on)
                    chunk = read(fd, min(1 << 16, limit + 1 - size))
                    if not chunk:
                        break
                    parts.append(chunk)
                    size += len(chunk)
                data = parts[0] if len(parts) == 1 else b"".join(parts)
        except OSError as e:
            raise HostIOError(e.errno or errno_mod.EIO, host_path) from e
        finally:
            os.close(fd)
        if len(data) > limit:
            if not truncate:
                raise HostIOError(errno_mod.EFBIG, host_path, f"larger than {limit} bytes")
            data = data[:limit]  # ``truncate``: the start of a longer file
        return data

    def read_head(self, host_path: str, size: int) -> str:
        """The first ``size`` bytes of a file at most, as text ("" when it cannot be read): the
        start of a file too long to read for one line (a 384-thread host's /proc/cpuinfo is 650 KB,
        its first CPU's block 2 KB). :meth:`read`'s checks (a FIFO, the root) apply."""
        try:
            if type(self).read is not Host.read:  # a test double's read (faults, counting): as it reads
                return self.read(host_path)[:size]
            return self._read_bytes(host_path, limit=size, truncate=True).decode("utf-8", errors="replace")
        except HostIOError:
            return ""

    def read_attr(self, host_path: str) -> Attr:
        """Read one sysfs-style attribute, stripped; never raises."""
        try:
            return Attr(self.read(host_path).strip())
        except (EscapeError, NotRegularError) as e:
            return Attr(None, e.errno, e.strerror)
        except HostIOError as e:
            return Attr(None, e.errno)

    def read_values(self, host_dir: str, leaves: Sequence[str]) -> dict[str, str | None]:
        """``read_attr(host_dir/<leaf>).value`` for each of ``leaves`` (None where unreadable: ask
        :meth:`read_attr` for the reason), opened relative to the
        directory (``dir_fd``): its path is resolved and checked once, each leaf opened with
        ``O_NOFOLLOW`` (half the cost of one :meth:`read_attr` per file on a 384-policy host). A
        leaf that is a symlink, not a regular file or larger than a page goes through
        :meth:`read_attr`, as does every leaf of a Host whose :meth:`read` is replaced (test doubles).
        """
        dfd = self._open_dir(host_dir)
        if dfd < 0:
            return {leaf: self.read_attr(f"{host_dir}/{leaf}").value for leaf in leaves}
        try:
            return self._read_at(dfd, "", host_dir, leaves)
        finally:
            os.close(dfd)

    def read_dirs(self, host_dir: str, names: Sequence[str],
                  leaves: Sequence[str]) -> dict[str, dict[str, str | None]]:
        """``read_values(host_dir/<name>, leaves)`` for each of ``names`` (the hundreds of
        ``cpufreq/policy<N>`` of a large host), each file opened as ``<name>/<leaf>`` relative to
        ``host_dir``, opened once: a ``<name>`` that the directory lists as a directory, not a
        symlink (its ``d_type``: no system call), is inside the root wherever ``host_dir`` is, so it
        costs no ``lstat``, no ``open`` and no ``close`` of its own. Any other name (a symlink, a
        missing one, a name with a ``/``) goes through :meth:`read_values`, and each leaf answers
        what :meth:`read_attr` would (a symlinked leaf takes the full check)."""
        dfd = self._open_dir(host_dir)
        if dfd < 0:
            return {name: self.read_values(f"{host_dir}/{name}", leaves) for name in names}
        try:
            try:
                with os.scandir(dfd) as entries:
                    plain = {e.name for e in entries if e.is_dir(follow_symlinks=False)}
            except OSError:
                plain = set()
            out: dict[str, dict[str, str | None]] = {}
            for name in names:
                if name not in plain or "/" in name or name in (".", ".."):
                    out[name] = self.read_values(f"{host_dir}/{name}", leaves)
                    continue
                out[name] = self._read_at(dfd, f"{name}/", f"{host_dir}/{name}", leaves)
            return out
        finally:
            os.close(dfd)

    def _open_dir(self, host_dir: str) -> int:
        """A directory fd of ``host_dir`` for the relative reads of :meth:`read_values` and
        :meth:`read_dirs` (resolved and checked once), or -1 where they must go file by file: a
        path that is not plain, a directory outside the root or unopenable, or a Host whose
        :meth:`read` is replaced (a test double counting reads)."""
        if type(self).read is not Host.read or not host_dir.startswith("/") \
                or ".." in host_dir.split("/") or "\x00" in host_dir:
            return -1
        if self.is_live:
            resolved = host_dir
        else:
            resolved = self._resolved_dir(self._real_root + host_dir.rstrip("/"))
            root = self._real_root
            if resolved != root and not resolved.startswith(root + os.sep):
                return -1
        try:
            return os.open(resolved, os.O_RDONLY | _DIR_FLAGS)
        except OSError:
            return -1

    def _read_at(self, dfd: int, prefix: str, host_dir: str, leaves: Sequence[str]) -> dict[str, str | None]:
        """``read_attr(host_dir/leaf).value`` of each leaf, the file opened as ``prefix + leaf``
        relative to ``dfd``.

        Opened ``O_NONBLOCK`` (a FIFO never blocks the open) and ``O_NOFOLLOW`` (a symlink, ELOOP,
        takes :meth:`read_attr`'s full check) and read at once, without an ``fstat``: a non-empty
        read shorter than a page is a regular file's content (``O_NONBLOCK`` does not apply to
        regular files); anything else (empty, failed, a page long) goes through
        :meth:`read_attr`, which tells a FIFO, a directory or a large file apart. (One loop for
        all the leaves, the system calls bound to locals: 1,536 reads on a 384-thread host.)"""
        out: dict[str, str | None] = {}
        open_, read, close, flags, page = os.open, os.read, os.close, _LEAF_FLAGS, _FIRST_READ
        for leaf in leaves:
            if "/" in leaf or leaf in ("", ".", ".."):
                out[leaf] = self.read_attr(f"{host_dir}/{leaf}").value
                continue
            try:
                fd = open_(prefix + leaf, flags, dir_fd=dfd)
            except OSError as e:
                out[leaf] = self.read_attr(f"{host_dir}/{leaf}").value if e.errno == errno_mod.ELOOP else None
                continue
            try:
                data = read(fd, page)
            except OSError:
                data = b""  # a directory (EISDIR), a FIFO with a writer (EAGAIN), an error: the full path says
            finally:
                close(fd)
            if not data or len(data) >= page:
                # Empty (an empty file, or a FIFO without a writer), failed or a page long: not a plain
                # attribute, or not one this read can tell apart: the full path (with its fstat) answers.
                out[leaf] = self.read_attr(f"{host_dir}/{leaf}").value
            else:
                out[leaf] = data.decode("utf-8", errors="replace").strip()
        return out

    def read_int(self, host_path: str, *, base: int = 10, limit: int | None = None) -> int | None:
        """An integer attribute (its first word, in ``base``: 16 for PCI ids, ``0x`` allowed), or
        None when missing, empty, unreadable, not a plain non-negative integer or above ``limit``
        (default :data:`joulectl.units.MAX_SYSFS_INT`): :func:`joulectl.units.parse_sysfs_int`."""
        value, _ = self.read_uint(host_path, base=base, limit=limit)
        return value

    def read_uint(self, host_path: str, *, base: int = 10,
                  limit: int | None = None) -> tuple[int | None, str | None]:
        """:meth:`read_int` with the reason when it is None (errno, ``empty``, ``not a number``,
        ``negative``, ``absurdly large``)."""
        from joulectl.units import MAX_SYSFS_INT, parse_sysfs_int

        try:
            text = self.read(host_path).strip()
        except (EscapeError, NotRegularError) as e:
            return None, Attr(None, e.errno, e.strerror).reason
        except HostIOError as e:
            return None, Attr(None, e.errno).reason
        if not text:
            return None, "empty"
        try:
            return parse_sysfs_int(text, base=base, limit=MAX_SYSFS_INT if limit is None else limit), None
        except ValueError as e:
            return None, str(e)

    def read_uw(self, host_path: str) -> tuple[int | None, str | None]:
        """A power attribute in µW (:data:`joulectl.units.MAX_POWER_UW` at most), or (None, reason)."""
        from joulectl.units import MAX_POWER_UW

        return self.read_uint(host_path, limit=MAX_POWER_UW)

    def write(self, host_path: str, value: str) -> None:
        """Write an attribute as sysfs takes it: one store, no create; raise :class:`HostIOError`."""
        try:
            real = self._checked(host_path)
        except ConfinementError as e:
            raise EscapeError(host_path, self._escaped_to) from e
        data = value.encode()
        try:
            fd = open_regular(real, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), host_path)
        except OSError as e:
            raise HostIOError(e.errno or errno_mod.EIO, host_path) from e
        try:
            os.write(fd, data)
        except OSError as e:
            raise HostIOError(e.errno or errno_mod.EIO, host_path) from e
        finally:
            os.close(fd)

    def write_atomic(self, host_path: str, data: str, *, mode: int = 0o644, durable: bool = True) -> None:
        """Replace a regular file atomically: temp file, fsync, rename, fsync of the directory.

        A reader sees the old or the new content, never a mix, whatever kills the writer. With
        ``durable=False`` the two fsyncs are skipped: still atomic against a killed process (the
        page cache outlives it), only not against a power loss.
        """
        real = self.path(host_path)
        directory = os.path.dirname(real)
        self.makedirs(os.path.dirname(host_path))
        self._checked(os.path.dirname(host_path))
        tmp = os.path.join(directory, f".{os.path.basename(real)}.{os.getpid()}.{time.monotonic_ns()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(data)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, real)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if not durable:
            return
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def makedirs(self, host_path: str, mode: int = 0o755) -> None:
        """Create a directory (and parents) under the root."""
        self._dir_cache.clear()
        real = self.path(host_path)
        if not self.is_live:
            # Refuse before creating anything: os.makedirs follows a symlinked ancestor, so check
            # that the deepest existing ancestor resolves inside the root first.
            existing = host_path
            while not os.path.lexists(self.path(existing)) and os.path.dirname(existing) != existing:
                existing = os.path.dirname(existing)
            self._checked(existing)
        os.makedirs(real, mode=mode, exist_ok=True)
        self._checked(host_path)

    # -- tools -----------------------------------------------------------------------------

    def which(self, tool: str) -> str | None:
        """Where ``tool`` lives: ``<root>/bin`` for an emulated root (its resolved path, only
        when that is inside the root), ``PATH`` on the live host; None when it is not there."""
        if "/" in tool or not tool or "\x00" in tool:
            return None
        if not self.is_live:
            try:
                candidate = self._checked(f"/bin/{tool}")
            except ConfinementError:
                return None
            return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
        import shutil

        return shutil.which(tool)

    def run(self, argv: Sequence[str], *, timeout: float | None = None) -> ToolResult:
        """Run a vendor tool with an argument list (never a shell) and a timeout.

        Raises :class:`ToolNotFound` or :class:`ToolTimeout`; a non-zero exit is a result, not
        an exception, because vendor tools report warnings through it.
        """
        if not argv:
            raise ValueError("empty argv")
        for arg in argv:
            if not isinstance(arg, str) or "\x00" in arg:
                raise ValueError(f"invalid tool argument {arg!r}")
        tool = argv[0]
        exe = self.which(tool)
        if exe is None and not self.is_live and "/" not in tool and self.escapes_root(f"/bin/{tool}"):
            raise ToolOutside(tool, f"{self.root}/bin/{tool} {OUTSIDE} (to {self._escaped_to or '?'}); "
                                    "refusing to run it")
        if exe is None:
            where = f"{self.root}/bin" if not self.is_live else "PATH"
            raise ToolNotFound(tool, f"{tool} not found in {where}")
        limit = self.tool_timeout if timeout is None else timeout
        env = dict(os.environ if self.env is None else self.env)
        self.tool_calls.append(tuple(argv))
        start = time.monotonic()
        returncode, out, err = _run_bounded(tool, [exe, *argv[1:]], env, limit)
        return ToolResult(
            argv=tuple(argv),
            returncode=returncode,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            seconds=time.monotonic() - start,
        )


def _kill_group(proc: Any) -> None:
    """SIGKILL the tool and everything it started (it leads its own session), and reap it."""
    import signal
    import subprocess

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot stop
        pass


def _run_bounded(tool: str, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, bytes, bytes]:
    """Run ``argv``, reading its stdout and stderr as they come, at most :data:`MAX_TOOL_STDOUT`
    and :data:`MAX_TOOL_STDERR` bytes: past a limit, or past ``timeout`` seconds, the tool (its
    whole process group) is killed and :class:`ToolOutputTooLarge` or :class:`ToolTimeout` raised.
    Memory stays bounded by the limits whatever the tool prints, and the time by the timeout."""
    import selectors
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
    except OSError as e:
        raise ToolError(tool, f"{tool} could not be run: {e.strerror or e}") from e
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): ("stdout", MAX_TOOL_STDOUT), proc.stderr.fileno(): ("stderr", MAX_TOOL_STDERR)}
    chunks: dict[int, list[bytes]] = {fd: [] for fd in streams}
    sizes = dict.fromkeys(streams, 0)
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            for fd in streams:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ToolTimeout(tool, f"{tool} timed out after {timeout:g} s")
                for key, _ in sel.select(min(left, 1.0)):
                    fd = int(key.fd)
                    data = os.read(fd, 1 << 16)
                    if not data:
                        sel.unregister(fd)
                        continue
                    name, cap = streams[fd]
                    sizes[fd] += len(data)
                    if sizes[fd] > cap:
                        raise ToolOutputTooLarge(
                            tool, f"{tool} printed more than {cap >> 20} MiB on {name}; killed")
                    chunks[fd].append(data)
        left = deadline - time.monotonic()
        try:
            returncode = proc.wait(timeout=max(left, 0.001))
        except subprocess.TimeoutExpired:
            raise ToolTimeout(tool, f"{tool} timed out after {timeout:g} s") from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    out_fd, err_fd = streams
    return returncode, b"".join(chunks[out_fd]), b"".join(chunks[err_fd])
