"""Shared test fixtures: run the real CLI in-process, and build host trees under tmp_path."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
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


def pytest_configure(config: pytest.Config) -> None:
    # Tests never touch the real /sys, /proc or /dev: refuse a root of "/" from the environment.
    os.environ.pop("JOULECTL_ROOT", None)
