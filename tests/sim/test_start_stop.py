"""The start and stop of a run at scale (issues 14 and 20): the start-up cache rewritten in place at a
clean stop, never found half-written."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from joulectl.sim import ledger as lg
from joulectl.sim import tick
from joulectl.sim.tick import BaseLoad, NodeRuntime, rewrite_document
from tests.sim.test_tick import T0, _Profile, build_node


def _model(node: Path) -> object:
    from joulectl.sim import layout

    return layout.scan(str(node), node.name, _Profile())


def _runtime(node: Path) -> NodeRuntime:
    return NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6))  # type: ignore[arg-type]


def test_rewrite_document_keeps_the_inode_and_cuts_a_longer_old_text(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    rewrite_document(str(path), b'{"a":[1,2,3,4,5,6,7,8,9]}')
    ino = path.stat().st_ino
    rewrite_document(str(path), b'{"a":[1]}')
    assert path.read_bytes() == b'{"a":[1]}'
    rewrite_document(str(path), b'{"a":[1,2,3]}')
    assert path.read_bytes() == b'{"a":[1,2,3]}'
    assert path.stat().st_ino == ino
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_document_being_rewritten_never_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a reader or a kill finds between the writes: the first byte is '!' until the end."""
    path = tmp_path / "doc.json"
    rewrite_document(str(path), b'{"t":1234,"s":[1,2,3]}')
    seen: list[bytes] = []
    pwrite = os.pwrite

    def spy(fd: int, data: bytes, off: int) -> int:
        seen.append(path.read_bytes())
        return pwrite(fd, data, off)

    monkeypatch.setattr(os, "pwrite", spy)
    rewrite_document(str(path), b'{"t":1235,"s":[1,2]}')
    monkeypatch.undo()
    # Before the first write the old document; before the second and the third (the first byte
    # back, after the cut) a text starting with '!'.
    assert seen == [b'{"t":1234,"s":[1,2,3]}', b'!"t":1234,"s":[1,2,3]}', b'!"t":1235,"s":[1,2]}']
    for text in seen[1:]:
        with pytest.raises(ValueError):
            json.loads(text)
    assert path.read_bytes() == b'{"t":1235,"s":[1,2]}'


def _ticked_once(tmp_path: Path) -> Path:
    """A node ticked once by a runtime that then stopped cleanly (its start-up cache written)."""
    node = build_node(tmp_path, "n1")
    rt = _runtime(node)
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    rt.save_cache()
    return node


def test_a_clean_stop_rewrites_the_start_up_cache_in_place(tmp_path: Path) -> None:
    node = _ticked_once(tmp_path)
    cache = node / "state" / tick.CACHE_NAME
    ino = cache.stat().st_ino
    again = _runtime(node)
    assert again.ledger.tick == 1
    again.readback(T0 + 2)
    again.step(T0 + 2, 1.0)
    again.save_cache()
    assert cache.stat().st_ino == ino
    assert not [p.name for p in (node / "state").iterdir() if p.name.endswith(".tmp")]
    doc = json.loads(cache.read_text())
    assert (doc["u"], doc["t"]) == (0, 2)
    assert _runtime(node).ledger.tick == 2


def test_a_cache_left_torn_by_a_kill_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed while its stop rewrote the cache: the next start reads the ledger and the tree."""
    node = _ticked_once(tmp_path)
    cache = node / "state" / tick.CACHE_NAME
    torn = bytearray(cache.read_bytes())
    torn[0:1] = tick.TORN
    cache.write_bytes(bytes(torn))
    reads: list[str] = []
    load = lg.load
    monkeypatch.setattr(lg, "load", lambda node_dir: reads.append(node_dir) or load(node_dir))
    again = _runtime(node)
    assert reads == [str(node)]  # the ledger file, not the cache's copy
    assert again.ledger.tick == 1
    assert again.marks.full_poll is False  # no cache: the tree was read at the start


def _vm_spec(count: int) -> object:
    from joulectl.sim.clusterspec import parse_spec
    from tests.sim.conftest import spec_doc

    return parse_spec(spec_doc([{"name": "v", "profile": "vm-no-powercap", "count": count}]), "x")


@pytest.mark.parametrize("workers", [2, 3])
def test_a_check_split_over_processes_completes_what_one_process_completes(tmp_path: Path, workers: int) -> None:
    from joulectl.sim.tree import render_nodes

    spec = _vm_spec(5)
    render_nodes(spec.nodes, str(tmp_path))  # type: ignore[attr-defined]
    for i in (0, 1, 4):  # in the shares of different processes
        (tmp_path / f"v-{i}/etc/hostname").unlink()
    shutil.rmtree(tmp_path / "v-3/proc")
    seen: list[tuple[str, str]] = []
    stats = render_nodes(spec.nodes, str(tmp_path), check_workers=workers,  # type: ignore[attr-defined]
                         progress=lambda name, what: seen.append((name, what)))
    proc_entries = len([p for p in (tmp_path / "v-2/proc").rglob("*")]) + 1
    assert stats.created_entries == 3 + proc_entries
    assert stats.resumed == [f"v-{i}" for i in range(5)] and stats.rendered == []
    assert sorted(seen) == [(f"v-{i}", "resumed") for i in range(5)]
    assert [(tmp_path / f"v-{i}/etc/hostname").read_text() for i in range(5)] == [f"v-{i}\n" for i in range(5)]
    assert render_nodes(spec.nodes, str(tmp_path), check_workers=workers).created_entries == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_split_check_raises_the_first_damaged_tree_in_node_order(tmp_path: Path, workers: int) -> None:
    from joulectl.sim.tree import RenderError, render_nodes

    spec = _vm_spec(5)
    render_nodes(spec.nodes, str(tmp_path))  # type: ignore[attr-defined]
    for i in (4, 2):  # v-2 is the first in node order whatever process checks it
        (tmp_path / f"v-{i}/etc/hostname").unlink()
        (tmp_path / f"v-{i}/etc/hostname").mkdir()
    with pytest.raises(RenderError) as err:
        render_nodes(spec.nodes, str(tmp_path), check_workers=workers)  # type: ignore[attr-defined]
    assert str(err.value) == (f"{tmp_path / 'v-2'}: node v-2: /etc/hostname is a directory where the layout has "
                              f"a file; remove {tmp_path / 'v-2'} to render the node fresh")
    assert err.value.file == str(tmp_path / "v-2")


def test_a_tree_that_is_a_file_stops_after_the_trees_before_it_are_checked(tmp_path: Path) -> None:
    from joulectl.sim.tree import RenderError, render_nodes

    spec = _vm_spec(4)
    render_nodes(spec.nodes, str(tmp_path))  # type: ignore[attr-defined]
    (tmp_path / "v-0/etc/hostname").unlink()
    shutil.rmtree(tmp_path / "v-2")
    (tmp_path / "v-2").write_text("")
    with pytest.raises(RenderError, match=r"node v-2: .*/v-2 exists and is not a directory"):
        render_nodes(spec.nodes, str(tmp_path), check_workers=2)  # type: ignore[attr-defined]
    assert (tmp_path / "v-0/etc/hostname").read_text() == "v-0\n"


def test_the_check_is_split_by_the_directories_to_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    from joulectl.sim import resume_check

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)

    class T:
        def __init__(self, dirs: int) -> None:
            self.dirs = ["d"] * (dirs - 1)

    full = [(None, T(1067), "x")] * 200  # 200 two-socket Intel nodes: 213,400 directories
    assert resume_check.check_workers(full) == 2  # type: ignore[arg-type]
    assert resume_check.check_workers(full[:18]) == 1  # type: ignore[arg-type]  # 19,206: one process
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert resume_check.check_workers(full) == 8  # type: ignore[arg-type]
    assert resume_check.check_workers(full[:40]) == 2  # type: ignore[arg-type]


class _StopOnWait(threading.Event):
    """A stop event the loop's first wait sets (as the main thread does when SIGTERM ends the mount)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout if timeout is not None else -1.0)
        self.set()
        return True


def _waiting_run(tmp_path: Path, stop: _StopOnWait) -> object:
    from joulectl.sim import runtime
    from tests.sim.test_runtime_clock import RecordingPool, _spec, readings

    spec = _spec(tmp_path)
    return runtime.run_entries([], str(tmp_path), spec.facility, ticks=3, tick_s=5.0, workers=1,  # type: ignore[attr-defined]
                               clock=readings([1000.0, 1000.0, 1000.0]), pool=RecordingPool(), stop_event=stop)


def test_a_tick_loop_in_a_thread_waits_on_its_stop_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FUSE mode's tick thread: between ticks it waits on the stop event, so the stop ends the wait
    at once (no sleep to finish first)."""
    import time

    slept: list[float] = []
    stop = _StopOnWait()

    def sleep(s: float) -> None:  # what the loop did before: the stop seen only after the sleep
        slept.append(s)
        stop.set()

    monkeypatch.setattr(time, "sleep", sleep)
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_waiting_run(tmp_path, stop)))
    thread.start()
    thread.join()
    summary = out[0]
    assert stop.waits == [0.1] and slept == []
    assert (summary.ticks, summary.interrupted) == (0, True)  # type: ignore[attr-defined]


def test_a_tick_loop_in_the_main_thread_sleeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the main thread (Ctrl-C's handler sets the stop there) the loop sleeps instead."""
    import time

    stop = _StopOnWait()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        stop.set()

    monkeypatch.setattr(time, "sleep", sleep)
    summary = _waiting_run(tmp_path, stop)
    assert slept == [0.1] and stop.waits == []
    assert (summary.ticks, summary.interrupted) == (0, True)  # type: ignore[attr-defined]
