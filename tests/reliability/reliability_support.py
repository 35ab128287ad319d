"""Helpers shared by the reliability tests (imported by name: conftest puts this directory on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

NIGHTLY = os.environ.get("JOULECTL_NIGHTLY") == "1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: Multiplies every CI budget (for a one-off deep run: JOULECTL_FUZZ_SCALE=10).
SCALE = float(os.environ.get("JOULECTL_FUZZ_SCALE", "1"))


def examples(ci: int, nightly: int | None = None) -> int:
    """Hypothesis examples for one property: ``ci`` in CI, ``nightly`` (default 10x) nightly."""
    return (nightly if nightly is not None else ci * 10) if NIGHTLY else max(1, int(ci * SCALE))


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


# -- a fake of the kernel: a Host that fails chosen reads and writes ------------------------------

import fnmatch  # noqa: E402
from collections.abc import Callable  # noqa: E402

from joulectl.host import Host, HostIOError  # noqa: E402


@dataclass
class Fault:
    """Fail reads and/or writes of host files whose resolved path matches the glob ``pattern``."""

    pattern: str
    errno: int | None = None
    on_read: bool = False
    on_write: bool = False
    #: instead of an errno: what a read returns after a write (a readback that differs)
    readback: Callable[[str], str] | None = None
    #: delete the file when it is first written (hot unplug between discovery and write)
    vanish: bool = False
    hits: int = 0


class FaultHost(Host):
    """A Host whose kernel fails chosen attribute reads/writes with an errno (see :class:`Fault`)."""

    faults: list[Fault]

    def _fault(self, host_path: str) -> Fault | None:
        try:
            real = os.path.realpath(self.path(host_path))
        except Exception:
            return None
        faults: list[Fault] = getattr(self, "faults", [])
        for fault in faults:
            if fnmatch.fnmatchcase(real, fault.pattern):
                return fault
        return None

    def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
        fault = self._fault(host_path)
        if fault is not None and fault.on_read and fault.errno is not None:
            fault.hits += 1
            raise HostIOError(fault.errno, host_path)
        text = super().read(host_path, limit=limit)
        if fault is not None and fault.readback is not None and fault.hits:
            return fault.readback(text)
        return text

    def write(self, host_path: str, value: str) -> None:
        fault = self._fault(host_path)
        if fault is not None and fault.on_write:
            fault.hits += 1
            if fault.vanish:
                os.unlink(os.path.realpath(self.path(host_path)))
            elif fault.errno is not None:
                raise HostIOError(fault.errno, host_path)
        super().write(host_path, value)
        if fault is not None and fault.readback is not None:
            fault.hits += 1
