"""Helpers shared by the reliability tests (imported by name: conftest puts this directory on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

NIGHTLY = os.environ.get("JOULECTL_NIGHTLY") == "1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def examples(ci: int, nightly: int | None = None) -> int:
    """Hypothesis examples for one property: ``ci`` in CI, ``nightly`` (default 10x) nightly."""
    return (nightly if nightly is not None else ci * 10) if NIGHTLY else ci


@dataclass
class Proc:
    returncode: int
    stdout: str
    stderr: str


def run_python(code: str, *, env: dict[str, str] | None = None, stdin: str | None = None,
               timeout: float = 120.0) -> Proc:
    """Run ``python -c code`` with the repository importable; a hang fails with TimeoutExpired."""
    full_env = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1", **(env or {})}
    full_env.pop("JOULECTL_ROOT", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                       input=stdin, timeout=timeout, check=False)
    return Proc(p.returncode, p.stdout, p.stderr)


def run_joulectl(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
                 timeout: float = 120.0) -> Proc:
    """Run ``python -m joulectl ARGS`` in a subprocess."""
    full_env = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1", **(env or {})}
    full_env.pop("JOULECTL_ROOT", None)
    p = subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True,
                       env=full_env, input=stdin, timeout=timeout, check=False)
    return Proc(p.returncode, p.stdout, p.stderr)


def assert_clean_exit(code: int, stderr: str, allowed: set[int]) -> None:
    """An exit code from ``allowed``; never a traceback or an internal error; errors are one line
    (plus at most one hint line)."""
    assert "Traceback" not in stderr, stderr
    assert "internal error" not in stderr, stderr
    assert code in allowed, (code, stderr)
    if code != 0:
        lines = [ln for ln in stderr.splitlines() if ln.startswith("joulectl: error:")]
        assert len(lines) == 1, stderr


def assert_input_error(code: int, stderr: str, *fragments: str) -> None:
    """Exit 2 with one ``joulectl: error:`` line containing every fragment."""
    assert_clean_exit(code, stderr, {2})
    line = next(ln for ln in stderr.splitlines() if ln.startswith("joulectl: error:"))
    for fragment in fragments:
        assert fragment in line, (fragment, line)
