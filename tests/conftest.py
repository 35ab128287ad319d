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
#: A whole run peaks at about 1.7 million files (2 December 2026): less free than this goes to disk,
#: so that a run never starts beside a failed run's leftovers and runs out of inodes half-way.
_MIN_TMPFS_INODES = 2_000_000


def _another_run_on(shm: str) -> bool:
    """Whether a live pytest run of this user has its temporary directory on ``shm`` (its
    numbered directory's ``.lock`` names a running process): two whole runs hold about 3.4 million
    files at their peak (session-wide rendered trees), the 3 million inodes of a 24 GiB tmpfs."""
    import getpass

    try:
        base = os.path.join(shm, f"pytest-of-{getpass.getuser()}")
        entries = os.listdir(base)
    except (OSError, KeyError):
        return False
    for name in entries:
        try:
            with open(os.path.join(base, name, ".lock"), encoding="ascii") as fh:
                pid = int(fh.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if pid > 0 and pid != os.getpid():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            return True
    return False


def _temp_root() -> str | None:
    chosen = os.environ.get("JOULECTL_TEST_TMP")
    if chosen:
        return chosen
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    # A whole run holds about 1.7 million files at its peak; two runs at once (or old ones left by
    # killed runs) exhaust the tmpfs' inodes long before its bytes: the second run goes to disk.
    if (st.f_bavail * st.f_frsize < _MIN_TMPFS_FREE or st.f_favail < _MIN_TMPFS_INODES
            or not os.access(shm, os.W_OK | os.X_OK) or _another_run_on(shm)):
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
