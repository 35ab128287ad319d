"""Node state files shared by the fake tools, the renderer and the tick loop (standard library only).

``state/nvml.json`` holds the NVIDIA GPUs' mutable state (limits in mW, clocks in MHz, energy in
mJ, locks, persistence mode, MIG). Every reader and writer takes an exclusive ``flock`` on
``state/nvml.lock`` and writes through a temp file + rename, so a concurrent ``nvidia-smi -pl``
and a tick never lose each other's update (use :func:`nvml_transaction` for read-modify-write).
"""

from __future__ import annotations

import fcntl
import posix

# The fake tools import this module at every call: no typing, contextlib or collections at run time,
# and ``posix`` rather than ``os`` (whose ``_collections_abc`` costs more than the tool's own work).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NVML_STATE = "state/nvml.json"
NVML_LOCK = "state/nvml.lock"
MANIFEST = "state/manifest.json"
NODE_META = "state/node.json"


class _Context:
    """What ``_json``'s C scanner reads from a decoder: strict JSON, plain dicts, Python numbers."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def _decode_error(text: str, at: int) -> Exception:
    import json

    return json.JSONDecodeError("Expecting value", text, at)


def loads(text: str) -> Any:
    """JSON text -> value through ``_json``'s C scanner (the ``json`` package imports ``re`` and
    with it ``enum``, ``functools`` and ``collections``: twice the start-up of a fake tool call)."""
    try:
        import _json
    except ImportError:  # pragma: no cover - an interpreter without the C accelerator
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        # typeshed types the context as a scanner; the C scanner reads only the attributes above
        value, end = _json.make_scanner(_Context)(text, start)  # type: ignore[arg-type]
    except StopIteration as e:
        raise _decode_error(text, int(e.value)) from None
    if text[end:].strip(" \t\n\r"):
        raise _decode_error(text, end)
    return value


def _default(obj: object) -> object:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """Value -> compact JSON (``separators=(",", ":")``) through ``_json``'s C encoder."""
    try:
        import _json
    except ImportError:  # pragma: no cover
        import json

        return json.dumps(value, separators=(",", ":"))
    encode = _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    return "".join(encode(value, 0))


def _load(path: str) -> dict[str, Any]:
    return _load_stat(path)[0]


def _load_stat(path: str) -> tuple[dict[str, Any], Any]:
    """The file's content and the ``fstat`` of what was read (its inode and mtime)."""
    with open(path, encoding="utf-8") as fh:
        st = posix.fstat(fh.fileno())
        data: dict[str, Any] = loads(fh.read())
    return data, st


def _path(node_dir: str, rel: str) -> str:
    directory = posix.fspath(node_dir)  # os.path.join's result for a relative ``rel``, without os
    return f"{directory.rstrip('/')}/{rel}" if directory else rel


class _Locked:
    """``with _Locked(node_dir):`` holds the exclusive ``flock`` on ``state/nvml.lock``."""

    def __init__(self, node_dir: str) -> None:
        self.path = _path(node_dir, NVML_LOCK)
        self.fd = -1

    def __enter__(self) -> None:
        fd = posix.open(self.path, posix.O_RDWR | posix.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            posix.close(fd)
            raise
        self.fd = fd

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            posix.close(self.fd)


def _locked(node_dir: str) -> _Locked:
    return _Locked(node_dir)


def _read(node_dir: str) -> dict[str, Any]:
    return _load(_path(node_dir, NVML_STATE))


def _write(node_dir: str, state: dict[str, Any]) -> Any:
    """Replace the state file (temp file and rename); the ``fstat`` of the file written."""
    path = _path(node_dir, NVML_STATE)
    tmp = f"{path}.{posix.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(dumps(state))
        fh.flush()
        posix.fsync(fh.fileno())
        st = posix.fstat(fh.fileno())
    posix.replace(tmp, path)
    return st


def read_nvml_state(node_dir: str) -> dict[str, Any]:
    """The NVIDIA state of a node (under the lock); raises FileNotFoundError without NVIDIA GPUs."""
    with _locked(node_dir):
        return _read(node_dir)


def write_nvml_state(node_dir: str, state: dict[str, Any]) -> None:
    """Replace the NVIDIA state atomically (under the lock)."""
    with _locked(node_dir):
        _write(node_dir, state)


class _Transaction:
    def __init__(self, node_dir: str, after: Any = None) -> None:
        self.dir = node_dir
        self.lock = _Locked(node_dir)
        self.state: dict[str, Any] = {}
        self.after = after

    def __enter__(self) -> dict[str, Any]:
        self.lock.__enter__()
        try:
            self.state = _read(self.dir)
        except BaseException:
            self.lock.__exit__()
            raise
        return self.state

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if exc_type is None:
                st = _write(self.dir, self.state)
                if self.after is not None:
                    self.after(self.state, st)
        finally:
            self.lock.__exit__()


def nvml_transaction(node_dir: str, after: Any = None) -> _Transaction:
    """``with nvml_transaction(dir) as state:`` reads, lets the caller modify, and writes back the
    NVIDIA state under one lock. The state is written only when the block exits without an exception;
    then ``after(state, fstat of the file written)`` runs, the lock still held.
    """
    return _Transaction(node_dir, after)


def read_nvml_state_then(node_dir: str, then: Any) -> Any:
    """``then(state, fstat of what was read)``'s result, called with the lock held (raises
    FileNotFoundError without NVIDIA GPUs, before calling ``then``)."""
    with _locked(node_dir):
        state, st = _load_stat(_path(node_dir, NVML_STATE))
        return then(state, st)


def load_manifest(node_dir: str) -> dict[str, Any]:
    """``state/manifest.json``: every agent-writable file with its rule, and every counter."""
    return _load(_path(node_dir, MANIFEST))


def load_node_meta(node_dir: str) -> dict[str, Any]:
    """``state/node.json``: node, profile, profileHash, layoutVersion."""
    return _load(_path(node_dir, NODE_META))
