"""FUSE-mode fixtures: a `simulate run --fuse` serving a rendered root, started and stopped per test module.

The FUSE tests run for real wherever ``/dev/fuse`` and the ``fuse`` extra are there, and always in CI
(``CI`` set), where a missing piece fails them instead of skipping them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def missing() -> str | None:
    """Why FUSE mode cannot run here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is absent (no FUSE on this machine)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"the fuse extra is not usable here (pip install 'joulectl[fuse]', apt-get install fuse3): {exc}"
    return None


_REASON = missing()
#: Skip only outside CI; in CI a missing FUSE fails the tests.
requires_fuse = pytest.mark.skipif(_REASON is not None and not os.environ.get("CI"), reason=_REASON or "")

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: fuse}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.6, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
"""


def joulectl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@dataclass
class Served:
    """A running `simulate run --fuse`."""

    root: Path
    spec: Path
    proc: subprocess.Popen[str]

    @property
    def mnt(self) -> Path:
        return self.root / "fuse"

    def node(self, name: str) -> Path:
        return self.mnt / name

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def _is_dir(path: Path) -> bool:
    try:
        return os.path.isdir(path)
    except OSError:  # a stale mount (ENOTCONN) until the new run has cleaned it
        return False


def start(root: Path, spec: Path, *extra: str, nodes: tuple[str, ...] = ("intel-0",),
          timeout: float = 180) -> Served:
    """Start `simulate run --fuse` and wait until every node in ``nodes`` is served."""
    proc = subprocess.Popen([sys.executable, "-m", "joulectl", "simulate", "run", str(spec), "--root", str(root),
                             "--fuse", "--tick", "0.5", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    served = Served(root, spec, proc)
    deadline = time.monotonic() + timeout
    while not all(_is_dir(served.node(n) / "sys") for n in nodes):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"simulate run --fuse exited {proc.returncode}: {err.strip()} {out.strip()}")
        if time.monotonic() > deadline:
            served.stop(signal.SIGKILL)
            pytest.fail("the FUSE mount did not come up")
        time.sleep(0.05)
    return served


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Both nodes of SPEC served through FUSE for the whole module."""
    base = tmp_path_factory.mktemp("fuse")
    spec = base / "spec.yaml"
    spec.write_text(SPEC)
    nodes = ("intel-0", "flex-0", "w7900-0", "h100-0")
    s = start(base / "root", spec, nodes=nodes)
    # Served is not yet ticked: a node's ledger is written by its first tick, and tests that read
    # the ledger (or wait for the next tick) must not run before it. Bounded by the run's own
    # liveness, not by a time: a run that exits fails the fixture at once.
    while not all((s.root / n / "state/ledger.json").exists() for n in nodes):
        if s.proc.poll() is not None:
            _out, err = s.proc.communicate()
            pytest.fail(f"simulate run --fuse exited {s.proc.returncode} before its first tick: {err.strip()}")
        time.sleep(0.05)
    try:
        yield s
    finally:
        s.stop()
