"""`joulectl simulate run` and `simulate status` through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: cli}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.5}
  pools:
  - {name: vm, profile: vm-no-powercap, count: 2}
"""


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return str(path)


def test_run_json_then_status(cli: Callable[..., Any], spec: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    r = cli("simulate", "run", spec, "--root", str(root), "--ticks", "3", "--fast", "-o", "json")
    assert r.exit_code == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["kind"] == "SimulationRun"
    assert (run["nodes"], run["rendered"], run["ticks"], run["interrupted"]) == (2, 2, 3, False)
    assert run["powerWatts"] > 0
    r = cli("simulate", "status", "--root", str(root), "-o", "json")
    assert r.exit_code == 0, r.stderr
    status = json.loads(r.stdout)
    assert [n["node"] for n in status["nodes"]] == ["vm-0", "vm-1"]
    assert all(n["ticks"] == 3 and n["profile"] == "vm-no-powercap" for n in status["nodes"])
    assert status["powerWatts"] == pytest.approx(run["powerWatts"], abs=0.05)


def test_run_and_status_tables(cli: Callable[..., Any], spec: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    r = cli("simulate", "run", spec, "--root", str(root), "--duration", "2", "--tick", "0.5", "--fast")
    assert r.exit_code == 0, r.stderr
    assert "ticks" in r.stdout and "4" in r.stdout
    r = cli("simulate", "status", "--root", str(root))
    assert r.exit_code == 0
    header = r.stdout.splitlines()[0].split()
    assert header == ["NODE", "PROFILE", "TICKS", "POWER", "ENERGY", "CAPS"]
    assert r.stdout.splitlines()[1].split()[:3] == ["vm-0", "vm-no-powercap", "4"]
    r = cli("simulate", "status", "--root", str(root), "-o", "wide")
    assert r.stdout.splitlines()[0].split() == ["NODE", "PROFILE", "TICKS", "POWER", "ENERGY", "CAPS", "GOVERNORS"]
    r = cli("simulate", "status", "--root", str(root), "-o", "yaml")
    assert r.exit_code == 0
    assert "kind: SimulationStatus" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--ticks", "1", "--duration", "1"), "joulectl: error: --duration: give --ticks or --duration, not both"),
        (("--tick", "0"), "joulectl: error: --tick: must be a positive number of seconds"),
        (("--ticks", "-3"), "joulectl: error: --ticks: must not be negative"),
        (("--workers", "0"), "joulectl: error: --workers: must be at least 1"),
    ],
)
def test_run_usage_errors(cli: Callable[..., Any], spec: str, tmp_path: Path, args: tuple[str, ...],
                          message: str) -> None:
    r = cli("simulate", "run", spec, "--root", str(tmp_path / "root"), *args)
    assert r.exit_code == 2
    assert r.stderr.strip() == message


def test_run_bad_spec_is_exit_2(cli: Callable[..., Any], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("count: 2", "count: -1"))
    r = cli("simulate", "run", str(bad), "--root", str(tmp_path / "root"), "--ticks", "1")
    assert r.exit_code == 2
    assert r.stderr.startswith("joulectl: error: ")
    assert "count" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_status_errors(cli: Callable[..., Any], tmp_path: Path) -> None:
    r = cli("simulate", "status", "--root", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"joulectl: error: {tmp_path}: --root: no rendered node trees here "
                                "(run `joulectl simulate render` first)")
    r = cli("simulate", "status", "--root", str(tmp_path / "nope"))
    assert r.exit_code == 2
    assert r.stderr.strip() == f"joulectl: error: {tmp_path / 'nope'}: --root: not a directory"


def test_ctrl_c_ends_after_the_tick_with_exit_130(spec: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("JOULECTL_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "joulectl", "simulate", "run", spec, "--root", str(root), "--tick", "0.2",
         "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    ledger = root / "vm-1" / "state" / "ledger.json"
    for _ in range(300):
        if ledger.exists():
            break
        time.sleep(0.1)
    assert ledger.exists()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["interrupted"] is True
    assert summary["ticks"] >= 1
    saved = json.loads(ledger.read_text())
    assert saved["tick"] == summary["ticks"]


class _Tty:
    """A stderr that says it is a terminal, keeping what is written."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("not a real terminal")


def test_progress_bars_on_a_terminal(monkeypatch: pytest.MonkeyPatch, spec: str, tmp_path: Path) -> None:
    from joulectl.cli.simulate_run import _Progress
    from joulectl.sim import runtime

    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with _Progress() as bar:
        summary = runtime.run(spec, str(tmp_path / "root"), ticks=2, fast=True, progress=bar.update,
                              render_progress=bar.tree)
    assert summary.ticks == 2
    shown = "".join(tty.parts)
    assert "trees" in shown and "ticks" in shown
    assert "vm-1 rendered" in shown
