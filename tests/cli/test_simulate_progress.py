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


def _trees(root: Path) -> int:
    return sum(1 for e in os.listdir(root) if e.startswith(("h100-", "cpu-"))) if root.is_dir() else 0


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is gone: the render ended
        pass


def test_ctrl_c_during_a_two_worker_render_is_one_line(tmp_path: Path) -> None:
    # The render is stopped (SIGSTOP) once two trees are done, and the Ctrl-C is sent only if some
    # of the 40 are still to do, then the render continues: the interrupt always lands mid-render,
    # however fast the machine (on a quiet one the whole render can finish between a poll of its
    # progress and a plain SIGINT). A render that finished before it was stopped is tried again,
    # three times at most (a fixed count, not a time bound).
    spec = tmp_path / "forty.yaml"
    spec.write_text(SPEC)
    for attempt in range(3):
        root = tmp_path / f"sim{attempt}"
        proc = subprocess.Popen([sys.executable, "-m", "joulectl", "simulate", "render", str(spec), "--root",
                                 str(root), "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                # SIGINT back to its default in the child: a pytest started with it
                                # ignored (a background job of a non-interactive shell, as a CI
                                # job may be) passes SIG_IGN on, and Python then keeps it
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            for _ in range(6000):  # up to 300 s for the workers to start rendering
                if proc.poll() is not None or _trees(root) >= 2:
                    break
                time.sleep(0.05)
            _signal(proc.pid, signal.SIGSTOP)
            if proc.poll() is None and _trees(root) < 40:
                _signal(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the parent and both workers
                _signal(proc.pid, signal.SIGCONT)
                out, err = proc.communicate(timeout=120)
                break
            _signal(proc.pid, signal.SIGCONT)
            proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                _signal(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    else:
        pytest.fail("the render ended before it could be interrupted, three times")
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
