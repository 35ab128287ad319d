"""Long simulator commands: Ctrl-C during a two-worker render is one line and exit 130 (no worker
tracebacks); the progress shows what the start does from its first moment."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

SPEC = """apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: forty}
spec:
  pools:
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 30}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 10}
"""


def test_ctrl_c_during_a_two_worker_render_is_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "forty.yaml"
    spec.write_text(SPEC)
    root = tmp_path / "sim"
    proc = subprocess.Popen([sys.executable, "-m", "joulectl", "simulate", "render", str(spec), "--root", str(root),
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            done = [e for e in os.listdir(root) if not e.startswith(".")] if root.is_dir() else []
            if len(done) >= 2:  # the workers are rendering
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the render ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the parent and both workers
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out, err) == (130, "", "joulectl: interrupted\n")


def test_render_reports_each_profile_store_before_the_trees(tmp_path: Path) -> None:
    """The fresh trees wait for their profile's shared store: the progress says so first."""
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.tree import render_nodes

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace("count: 30", "count: 3").replace("count: 10", "count: 2"))
    events: list[tuple[str, str]] = []
    render_nodes(load_spec(str(spec), None).nodes, str(tmp_path / "sim"), progress=lambda n, w: events.append((n, w)),
                 workers=2)
    assert events[:2] == [("nvidia-h100-sxm-8gpu", "prepared"), ("intel-xeon-2s-rapl", "prepared")]
    assert sorted(events[2:]) == [(f"cpu-{i}", "rendered") for i in range(2)] + [
        (f"h100-{i}", "rendered") for i in range(3)]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_simulate_run_shows_its_start_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the first tree is rendered, the bar already says what the start is doing."""
    from joulectl.cli.simulate_run import _Progress

    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    bar: Any = _Progress()
    with bar:
        bar._bar.refresh()
        first = err.getvalue()
        bar.tree("nvidia-h100-sxm-8gpu", "prepared")
        bar._bar.refresh()
        prepared = err.getvalue()[len(first):]
        bar.tree("h100-0", "rendered")
        bar._bar.refresh()
        rendered = err.getvalue()[len(first) + len(prepared):]
    assert "trees" in first and "starting: reading the spec and the trees" in first
    assert "profile nvidia-h100-sxm-8gpu prepared" in prepared
    assert "h100-0 rendered" in rendered and "1/" not in rendered.split("h100-0")[0][-4:]
