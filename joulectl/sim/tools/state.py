"""Node state files shared by the fake tools, the renderer and the tick loop (standard library only).

``state/nvml.json`` holds the NVIDIA GPUs' mutable state (limits in mW, clocks in MHz, energy in
mJ, locks, persistence mode, MIG). Every reader and writer takes an exclusive ``flock`` on
``state/nvml.lock`` and writes through a temp file + rename, so a concurrent ``nvidia-smi -pl``
and a tick never lose each other's update (use :func:`nvml_transaction` for read-modify-write).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

NVML_STATE = "state/nvml.json"
NVML_LOCK = "state/nvml.lock"
MANIFEST = "state/manifest.json"
NODE_META = "state/node.json"


def _path(node_dir: str, rel: str) -> str:
    return os.path.join(node_dir, rel)


@contextmanager
def _locked(node_dir: str) -> Iterator[None]:
    fd = os.open(_path(node_dir, NVML_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read(node_dir: str) -> dict[str, Any]:
    with open(_path(node_dir, NVML_STATE), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _write(node_dir: str, state: dict[str, Any]) -> None:
    path = _path(node_dir, NVML_STATE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, separators=(",", ":"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_nvml_state(node_dir: str) -> dict[str, Any]:
    """The NVIDIA state of a node (under the lock); raises FileNotFoundError without NVIDIA GPUs."""
    with _locked(node_dir):
        return _read(node_dir)


def write_nvml_state(node_dir: str, state: dict[str, Any]) -> None:
    """Replace the NVIDIA state atomically (under the lock)."""
    with _locked(node_dir):
        _write(node_dir, state)


@contextmanager
def nvml_transaction(node_dir: str) -> Iterator[dict[str, Any]]:
    """Read, let the caller modify, and write back the NVIDIA state under one lock.

    The state is written only when the block exits without an exception.
    """
    with _locked(node_dir):
        state = _read(node_dir)
        yield state
        _write(node_dir, state)


def load_manifest(node_dir: str) -> dict[str, Any]:
    """``state/manifest.json``: every agent-writable file with its rule, and every counter."""
    with open(_path(node_dir, MANIFEST), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def load_node_meta(node_dir: str) -> dict[str, Any]:
    """``state/node.json``: node, profile, profileHash, layoutVersion."""
    with open(_path(node_dir, NODE_META), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data
