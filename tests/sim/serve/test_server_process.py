"""The HTTP server's own process: it dies with the run, a crash of it is reported and it comes back,
and a stopped (stuck) server process never stalls the tick loop. Real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from joulectl.sim.serve.face import NetworkFace
from joulectl.sim.serve.proc import ServerProcess, exit_text

from .conftest import Served, run_in_thread, wait_for_tick, write_spec

ONE_NODE = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: one}
spec:
  pools:
  - {name: vm, profile: vm-no-powercap, count: 1}
"""


def _gone(pid: int) -> bool:
    """The process has ended (a zombie counts: nothing runs and its sockets are closed)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _children(parent: int, server: bool = True) -> list[int]:
    """The server processes (or the other processes) whose parent is ``parent``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                ppid = int(fh.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if ppid == parent and (b"joulectl.sim.serve.child" in cmd) == server:
            out.append(int(entry))
    return out


def _wait(predicate: object, checks: int = 3000) -> bool:
    assert callable(predicate)
    for _ in range(checks):
        if predicate():
            return True
        time.sleep(0.01)
    return False


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_the_server_process_dies_with_the_run(tmp_path: Path) -> None:
    """SIGTERM, SIGINT and kill -9 of ``simulate run --listen``: no server process is left, the
    port is closed; Ctrl-C's exit code is the documented 130. With two workers the run's forked
    worker processes hold the server's pipe too: the server then notices its parent is gone, and
    the workers end too (each closes the main process's end of its own pipe)."""
    spec = write_spec(tmp_path, ONE_NODE.replace("count: 1", "count: 2"))
    runs = {}
    for sig, workers in ((signal.SIGTERM, "1"), (signal.SIGINT, "2"), (signal.SIGKILL, "2")):
        root = tmp_path / sig.name
        proc = subprocess.Popen(
            [sys.executable, "-m", "joulectl", "simulate", "run", spec, "--root", str(root), "--tick", "0.05",
             "--workers", workers, "--listen", "127.0.0.1:0", "-o", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
        runs[sig] = (proc, root)
    try:
        targets = {}
        for sig, (proc, root) in runs.items():
            # Once the run has ticked (its workers are forked by then): kill it.
            assert _wait(lambda r=root, p=proc.pid: (r / "metrics.prom").exists() and bool(_children(p))), sig
            port = int(json.loads((root / "serve.json").read_text())["url"].rsplit(":", 1)[1])
            targets[sig] = (_children(proc.pid)[0], port, _children(proc.pid, server=False))
            os.kill(proc.pid, sig)
        for sig, (proc, _root) in runs.items():
            _out, err = proc.communicate(timeout=60)
            code, stderr = proc.returncode, err.decode()
            assert "Traceback" not in stderr, stderr
            if sig == signal.SIGINT:
                assert code == 130, stderr
            else:
                assert code == -sig
            child, port, workers = targets[sig]
            assert len(workers) == (0 if sig == signal.SIGTERM else 2)
            for pid in [child, *workers]:
                assert _wait(lambda c=pid: _gone(c)), f"process {pid} outlived the run after {sig.name}"
            assert _refused(port)
    finally:
        for proc, _root in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@contextmanager
def _served_run(tmp_path: Path, warnings: list[str]) -> Iterator[tuple[NetworkFace, Served, threading.Thread]]:
    """A real-time run of one node serving on a free port, its server up and at tick 2; at the end
    the run is stopped and joined, the face closed, and the run must have ended without an error."""
    spec = write_spec(tmp_path, ONE_NODE)
    root = tmp_path / "root"
    face = NetworkFace(str(root), listen=("127.0.0.1", 0), warn=warnings.append)
    stop = threading.Event()
    thread, result = run_in_thread(spec, root, face, ticks=1_000_000, tick_s=0.05, stop=stop)
    try:
        assert _wait(lambda: face.server is not None or not thread.is_alive()), result.get("error")
        assert face.server is not None, result.get("error")
        served = Served(root, spec, face, face.server.host, face.server.port)
        wait_for_tick(served, 2)
        yield face, served, thread
    finally:
        stop.set()
        thread.join(60)
        face.close()
    assert "error" not in result, result.get("error")


def _tick(face: NetworkFace) -> int:
    assert face.hub is not None and face.hub.current is not None
    return face.hub.current.tick


def test_a_crashed_server_process_is_reported_and_restarted_on_the_same_port(tmp_path: Path) -> None:
    warnings: list[str] = []
    with _served_run(tmp_path, warnings) as (face, served, thread):
        old = face.server.pid
        os.kill(old, signal.SIGKILL)
        assert _wait(lambda: bool(warnings)), "the crash was not reported"
        new = face.server.pid
        assert warnings == [f"simulate run: the HTTP server process (pid {old}) died (killed by SIGKILL); "
                            f"restarted it on http://127.0.0.1:{served.port} (pid {new})"]
        assert new != old
        after = _tick(face)
        wait_for_tick(served, after + 1)  # the new process serves the ticks after the crash
        status, doc = served.get_json("/telemetry/vm-0")
        assert status == 200 and doc["tick"] > after - 1
        assert thread.is_alive()


def test_after_its_restarts_the_run_stops_serving_and_goes_on(tmp_path: Path) -> None:
    warnings: list[str] = []
    with _served_run(tmp_path, warnings) as (face, served, _thread):
        face.server.max_restarts = 0
        old = face.server.pid
        os.kill(old, signal.SIGKILL)
        assert _wait(lambda: bool(warnings)), "the crash was not reported"
        assert warnings == [f"simulate run: the HTTP server process (pid {old}) died (killed by SIGKILL) after "
                            f"0 restart(s); http://127.0.0.1:{served.port} is no longer served, the run goes on"]
        assert face.server.pid is None
        assert _refused(served.port)
        ticks = _tick(face)
        assert _wait(lambda: _tick(face) >= ticks + 3)  # the tick loop keeps going


def test_a_stopped_server_process_does_not_stall_the_tick_loop(tmp_path: Path) -> None:
    """SIGSTOP the server process: the run ticks on (its writer keeps only the newest snapshot);
    after SIGCONT the server serves a tick made while it was stopped, whole."""
    warnings: list[str] = []
    with _served_run(tmp_path, warnings) as (face, served, _thread):
        pid = face.server.pid
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped_at = _tick(face)
            assert _wait(lambda: _tick(face) >= stopped_at + 20), "the tick loop stalled behind a stopped server"
            os.kill(pid, signal.SIGCONT)
            wait_for_tick(served, stopped_at + 20)
            status, doc = served.get_json("/telemetry")
            assert status == 200
            assert {n["tick"] for n in doc["nodes"]} == {doc["tick"]}
            assert warnings == []
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize(("code", "text"), [(-9, "killed by SIGKILL"), (-15, "killed by SIGTERM"), (1, "exit code 1"),
                                            (-99, "killed by signal 99")])
def test_exit_text(code: int, text: str) -> None:
    assert exit_text(code) == text


def test_a_server_process_ends_when_the_run_closes_it(tmp_path: Path) -> None:
    server = ServerProcess({}, "127.0.0.1", 0).start()
    pid = server.pid
    assert pid is not None
    server.close()
    assert _gone(pid)
    assert _refused(server.port)
