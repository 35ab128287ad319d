"""The inotify limits a run needs are checked at its start: one line naming the sysctl, never a
silent fallback to polling.

The kernel's limits are read from ``/proc/sys/fs/inotify/`` and the watches the user holds from
``/proc/<pid>/fdinfo``; the tests put files of their own in their place (the module's seams), so
a low limit can be had without changing the machine's.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from joulectl.errors import JoulectlError
from joulectl.sim import inotify, runtime
from joulectl.sim.clusterspec import load_spec

#: One two-socket Intel node: 134 directories hold its 529 writable files (128 cpufreq policies,
#: the RAPL zones and their constraints, intel_pstate).
SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: t}
spec:
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 2}
"""


@pytest.fixture
def limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the user's watch and instance limits; no process holds any watch (an empty /proc)."""
    proc = tmp_path / "proc"
    proc.mkdir()
    monkeypatch.setattr(inotify, "PROC", str(proc))

    def set_limits(watches: int, instances: int = 128) -> None:
        (tmp_path / "max_user_watches").write_text(f"{watches}\n")
        (tmp_path / "max_user_instances").write_text(f"{instances}\n")
        monkeypatch.setattr(inotify, "WATCHES_FILE", str(tmp_path / "max_user_watches"))
        monkeypatch.setattr(inotify, "INSTANCES_FILE", str(tmp_path / "max_user_instances"))

    return set_limits


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def test_too_few_watches_stop_the_run_naming_the_sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        limits: Any, cli: Any) -> None:
    monkeypatch.setenv("SIM_READBACK", "auto")
    limits(200)
    root = tmp_path / "root"
    r = cli("simulate", "run", str(_spec(tmp_path)), "--root", str(root), "--ticks", "2", "--fast", "--workers", "1")
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        "joulectl: error: simulate run: 2 node(s): 268 inotify watches needed, 0 in use, "
        "fs.inotify.max_user_watches is 200: raise it (sysctl -w fs.inotify.max_user_watches=268) "
        "or set SIM_READBACK=poll"]
    # Stopped before the first tick: no node ticked, nothing was polled instead.
    assert not (root / "events.jsonl").exists() or (root / "events.jsonl").read_text() == ""
    assert "ticks" not in r.stdout


def test_watches_in_use_count_against_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                limits: Any, cli: Any) -> None:
    """Watches this user holds already (here: this test's own inotify instance) leave fewer."""
    monkeypatch.setenv("SIM_READBACK", "inotify")
    limits(270)
    proc = Path(inotify.PROC)
    (proc / str(os.getpid())).symlink_to(f"/proc/{os.getpid()}")
    ino = inotify.Inotify()
    try:
        for d in ("a", "b", "c"):
            (tmp_path / d).mkdir()
            ino.add_watch(str(tmp_path / d))
        assert inotify.in_use() == (1, 3)
        r = cli("simulate", "run", str(_spec(tmp_path)), "--root", str(tmp_path / "root"), "--ticks", "1",
                "--fast", "--workers", "1")
    finally:
        ino.close()
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        "joulectl: error: simulate run: 2 node(s): 268 inotify watches needed, 3 in use, "
        "fs.inotify.max_user_watches is 270: raise it (sysctl -w fs.inotify.max_user_watches=271) "
        "or set SIM_READBACK=poll"]


def test_too_few_instances_for_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: Any,
                                           cli: Any) -> None:
    monkeypatch.setenv("SIM_READBACK", "auto")
    limits(100_000, instances=1)
    r = cli("simulate", "run", str(_spec(tmp_path)), "--root", str(tmp_path / "root"), "--ticks", "1", "--fast",
            "--workers", "2")
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        "joulectl: error: simulate run: 2 node(s): 2 inotify instances needed, 0 in use, "
        "fs.inotify.max_user_instances is 1: raise it (sysctl -w fs.inotify.max_user_instances=2), "
        "use fewer --workers or set SIM_READBACK=poll"]


def test_polling_needs_no_watches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: Any, cli: Any) -> None:
    monkeypatch.setenv("SIM_READBACK", "poll")
    limits(0, instances=0)
    r = cli("simulate", "run", str(_spec(tmp_path)), "--root", str(tmp_path / "root"), "--ticks", "1", "--fast",
            "--workers", "1", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    assert '"ticks": 1' in r.stdout


def test_limit_reached_after_the_check_stops_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       limits: Any) -> None:
    """Another process took the watches between the check and the watching: an error, not polling."""
    monkeypatch.setenv("SIM_READBACK", "auto")
    limits(1_000)
    spec_path = _spec(tmp_path)
    spec = load_spec(str(spec_path))
    root = tmp_path / "root"
    runtime._ensure_trees(spec, str(root))
    entries = runtime.build_entries(spec, str(root))
    calls = {"n": 0}
    real = inotify.Inotify.add_watch

    def add_watch(self: inotify.Inotify, path: str | bytes, mask: int = inotify.DIR_MASK) -> int:
        calls["n"] += 1
        if calls["n"] > 150:  # the second node's watches hit the limit
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real(self, path, mask)

    monkeypatch.setattr(inotify.Inotify, "add_watch", add_watch)
    with pytest.raises(JoulectlError) as err:
        runtime.run_entries(entries, str(root), spec.facility, ticks=1, fast=True, workers=1)
    assert str(err.value) == (
        "simulate run: inotify_add_watch: No space left on device at node intel-1: the user's inotify watches "
        "(fs.inotify.max_user_watches = 1000) are used up: raise it or set SIM_READBACK=poll")
    assert err.value.exit_code == 1


def test_an_instance_a_forked_process_inherited_counts_once(tmp_path: Path, limits: Any) -> None:
    proc = Path(inotify.PROC)
    ino = inotify.Inotify()
    other = inotify.Inotify()
    for d in ("a", "b", "c", "d", "e"):
        (tmp_path / d).mkdir()
    for d in ("a", "b", "c"):
        ino.add_watch(str(tmp_path / d))
    for d in ("d", "e"):
        other.add_watch(str(tmp_path / d))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds both inherited instances until the parent has counted
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    try:
        os.close(r)
        for p in (os.getpid(), pid):
            (proc / str(p)).symlink_to(f"/proc/{p}")
        assert inotify.in_use() == (2, 5)
    finally:
        os.close(w)
        os.waitpid(pid, 0)
        ino.close()
        other.close()
