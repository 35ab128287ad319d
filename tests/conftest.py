"""Shared test fixtures: run the real CLI in-process, and build host trees under tmp_path."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from joulectl.cli import run

# tests/fixtures holds the kernel-ABI host trees (``import trees``) and the kill-after-write hook.
sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """Run ``joulectl ARGS...`` in-process; returns exit code, stdout and stderr."""
    monkeypatch.delenv("JOULECTL_ROOT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = run([str(a) for a in args])
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return invoke


@pytest.fixture
def write_tree(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """Write ``{host path: content}`` under ``tmp_path/root`` and return the root."""
    root = tmp_path / "root"

    def make(files: dict[str, str]) -> Path:
        for rel, content in files.items():
            p = root / rel.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content)
        root.mkdir(exist_ok=True)
        return root

    return make


#: Emulated trees are tens of thousands of small files: on a loaded ext4 disk their writes and
#: fsyncs dominate the suite (a 4-node render: 1.9 s on tmpfs, minutes on a busy disk). Tests run
#: on /dev/shm when it is a tmpfs with room, unless JOULECTL_TEST_TMP names another directory.
_MIN_TMPFS_FREE = 4 << 30
_MIN_TMPFS_INODES = 1_000_000


def _temp_root() -> str | None:
    chosen = os.environ.get("JOULECTL_TEST_TMP")
    if chosen:
        return chosen
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    # A whole run holds a few hundred thousand files at its peak; many runs at once (or old ones
    # left by killed runs) can exhaust the tmpfs' inodes long before its bytes.
    if (st.f_bavail * st.f_frsize < _MIN_TMPFS_FREE or st.f_favail < _MIN_TMPFS_INODES
            or not os.access(shm, os.W_OK | os.X_OK)):
        return None
    return shm


def pytest_configure(config: pytest.Config) -> None:
    # Tests never touch the real /sys, /proc or /dev: refuse a root of "/" from the environment.
    os.environ.pop("JOULECTL_ROOT", None)
    temp_root = _temp_root()
    if temp_root is not None and not os.environ.get("PYTEST_DEBUG_TEMPROOT") and config.option.basetemp is None:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = temp_root


@pytest.fixture(autouse=True)
def _default_gpu_config() -> Iterator[None]:
    """A command's GPU flags (--gpu-resource, ...) stay in force for the process: reset after each test."""
    yield
    from joulectl.k8s import GpuConfig, set_gpu_config

    set_gpu_config(GpuConfig())
