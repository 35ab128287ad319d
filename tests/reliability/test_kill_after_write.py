"""A kill at the worst moment: right after a sysfs write, before anything else (the journal save
in particular). The original value must survive it: ``cap --restore`` returns to the operator's
own cap and ``governor reset`` undoes the level joulectl set. The kill is hooked into Host.write
in the child, so it lands deterministically."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_support import REPO, run_joulectl

KILL_AFTER_WRITE = r"""
import os, signal, sys
from joulectl.host import Host
names = sys.argv[1].split(",")
real_write = Host.write
def write(self, host_path, value):
    real_write(self, host_path, value)
    if os.path.basename(host_path) in names:
        os.kill(os.getpid(), signal.SIGKILL)
Host.write = write
from joulectl.cli import main
main(sys.argv[2:])
"""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("kill-after-write")
    (base / "spec.yaml").write_text(
        "apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: k}\nspec:\n  pools:\n"
        "  - {name: mi250, profile: amd-instinct-mi250x-4gpu, count: 1}\n"
        "  - {name: cpu, profile: intel-xeon-2s-rapl, count: 1}\n"
    )
    r = run_joulectl("simulate", "render", str(base / "spec.yaml"), "--root", str(base / "tree"))
    assert r.returncode == 0, r.stderr
    return base / "tree"


@pytest.fixture
def node(pristine: Path, tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        shutil.copytree(pristine / name, tmp_path / name, symlinks=True)
        return tmp_path / name

    return copy


def _files(root: Path, name: str) -> list[Path]:
    return sorted(Path(d) / name for d, _, fs in os.walk(root / "sys" / "devices") if name in fs)


def _killed_after_write(attr: str, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1"}
    p = subprocess.run([sys.executable, "-c", KILL_AFTER_WRITE, attr, *args], capture_output=True, text=True,
                       env=env, timeout=300, check=False)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr)


@pytest.mark.parametrize(
    ("name", "attr", "operator_uw", "args"),
    [("cpu-0", "constraint_0_power_limit_uw", "240000000", ["cap", "--cpu", "--watts", "200"]),
     ("mi250-0", "power1_cap", "450000000", ["cap", "--watts", "300"])],
)
def test_cap_restore_after_a_kill_right_after_the_write(node: Callable[[str], Path], name: str, attr: str,
                                                        operator_uw: str, args: list[str]) -> None:
    root = node(name)
    targets = [p for p in _files(root, attr) if p.read_text().strip() not in ("", "0")]
    if attr == "constraint_0_power_limit_uw":
        targets = [p for p in targets if p.parent.name.count(":") == 1]  # the package zones
    assert targets
    for p in targets:  # the operator's own cap, in force before joulectl ever ran
        p.write_text(operator_uw + "\n")
    _killed_after_write(attr, "--root", str(root), *args)
    assert sum(p.read_text().strip() != operator_uw for p in targets) == 1  # exactly one write landed
    restore = ["cap", "--cpu", "--restore"] if "--cpu" in args else ["cap", "--restore"]
    r = run_joulectl("--root", str(root), *restore)
    assert r.returncode == 0, r.stderr
    assert [p.read_text().strip() for p in targets] == [operator_uw] * len(targets)


def test_governor_reset_after_a_kill_right_after_the_write(node: Callable[[str], Path]) -> None:
    root = node("mi250-0")
    levels = _files(root, "power_dpm_force_performance_level")
    before = [p.read_text().strip() for p in levels]
    _killed_after_write("power_dpm_force_performance_level", "--root", str(root), "governor", "set", "peak")
    assert [p.read_text().strip() for p in levels] != before
    r = run_joulectl("--root", str(root), "governor", "reset")
    assert r.returncode == 0, r.stderr
    assert [p.read_text().strip() for p in levels] == before
