"""Rendered nodes for the cron-safety tests (issue 12): one render per test session, a private copy
per test. Imported by name (conftest puts this directory on sys.path)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from reliability_support import Proc, run_joulectl

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: cron-safety}
spec:
  pools:
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
"""

_RENDERED: list[Path] = []


def rendered(base: Path) -> Path:
    """The rendered cluster (once per session; ``base`` is a session temp dir)."""
    if not _RENDERED:
        (base / "spec.yaml").write_text(SPEC)
        r = run_joulectl("simulate", "render", str(base / "spec.yaml"), "--root", str(base / "root"),
                         timeout=300)
        assert r.returncode == 0, r.stderr
        _RENDERED.append(base / "root")
    return _RENDERED[0]


def node_copy(rendered_root: Path, name: str, dest: Path) -> Path:
    """A private copy of one node (the fake tools find their node from their own path)."""
    node = dest / name
    if not node.exists():
        shutil.copytree(rendered_root / name, node, symlinks=True)
    return node


def jl(node: Path, *args: str, timeout: float = 120.0) -> Proc:
    """``joulectl --root NODE ARGS`` in a subprocess."""
    return run_joulectl("--root", str(node), *args, timeout=timeout)


def rows(p: Proc) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(p.stdout)["results"]
    return out


def hwmon(node: Path, bus: str, name: str) -> Path:
    base = node / "sys/bus/pci/devices" / bus / "hwmon"
    return next(base.iterdir()) / name


def read_w(path: Path) -> float:
    return int(path.read_text().split()[0]) / 1e6


def write_w(path: Path, watts: float) -> None:
    path.write_text(f"{round(watts * 1e6)}\n")


def smi_limits(node: Path) -> list[float]:
    """power.limit of every GPU, asked of the node's fake nvidia-smi."""
    out = subprocess.run([str(node / "bin/nvidia-smi"), "--query-gpu=power.limit",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


def smi_set(node: Path, bus: str, watts: float) -> None:
    """The operator's own ``nvidia-smi -pl`` on one GPU."""
    subprocess.run([str(node / "bin/nvidia-smi"), "-i", bus, "-pl", f"{watts:g}"], capture_output=True,
                   check=True)


def journal_path(node: Path) -> Path:
    return node / "var/lib/joulectl/state.json"


def python() -> str:
    return sys.executable
