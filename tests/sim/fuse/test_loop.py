"""The FUSE request loop (joulectl.sim.fuse.loop): its arguments, its polling time, and both ways it ends."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from joulectl.sim.fuse import colocate, loop
from tests.sim.fuse.conftest import SPEC, requires_fuse, start

RAPL0 = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
GOV = "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"


def test_fuse_main_arguments_are_split_for_fuse_new() -> None:
    args, mnt = loop._split([b"fuse", b"-f", b"-s", b"-o", b"fsname=joulectl-sim,subtype=joulectl", b"/r/fuse"])
    assert args == [b"fuse", b"-o", b"fsname=joulectl-sim,subtype=joulectl"]
    assert mnt == b"/r/fuse"
    assert loop._split([b"fuse", b"-d", b"/m"]) == ([b"fuse", b"-d"], b"/m")


@pytest.mark.parametrize(("raw", "expected"), [("", loop.SPIN_S), ("0", 0.0), (" 250 ", 0.00025), ("100000", 0.1)])
def test_spin_time_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, expected: float) -> None:
    monkeypatch.setenv(loop.SPIN_ENV, raw)
    assert loop.spin_s() == expected


@pytest.mark.parametrize(("raw", "expected"), [(None, True), ("", True), ("1", True), (" 0 ", False)])
def test_colocation_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: bool) -> None:
    if raw is None:
        monkeypatch.delenv(colocate.ENV, raising=False)
    else:
        monkeypatch.setenv(colocate.ENV, raw)
    assert colocate.enabled() is expected


@requires_fuse
@pytest.mark.parametrize(("name", "raw", "problem"), [
    (loop.SPIN_ENV, "abc", "is not a whole number of µs from 0 to 100000"),
    (loop.SPIN_ENV, "100001", "is not a whole number of µs from 0 to 100000"),
    (colocate.ENV, "yes", "is neither 0 nor 1"),
])
def test_bad_environment_is_one_line_before_anything_is_rendered(tmp_path: Path, name: str, raw: str,
                                                                 problem: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: flex")[0])
    r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "run", str(spec), "--root",
                        str(tmp_path / "root"), "--fuse", "--ticks", "1"], capture_output=True, text=True,
                       env={**os.environ, name: raw}, check=False, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == f"joulectl: error: {name}: {raw!r} {problem}"
    assert not (tmp_path / "root").exists()


def test_load_from_loadavg(tmp_path: Path) -> None:
    avg = tmp_path / "loadavg"
    avg.write_text("0.52 0.58 0.59 3/127 40213\n")
    assert colocate.load(str(avg)) == (0.52, 3)


def test_cpu_of_a_task() -> None:
    assert colocate.cpu_of(os.getpid()) in os.sched_getaffinity(0)
    assert colocate.cpu_of(2**22 + 12345) is None  # above pid_max: no such task


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or os.geteuid() != 0,
                    reason="needs two CPUs and root (leaving SCHED_IDLE)")
def test_colocator_follows_the_sender_only_on_a_quiet_machine(tmp_path: Path) -> None:
    """In a thread of its own (policy and affinity are per thread): the header's pid is this process,
    so the loop moves to this process's CPU as SCHED_IDLE, and back at release or when load appears."""
    avg = tmp_path / "loadavg"
    header = (ctypes.c_uint8 * 40)()
    ctypes.c_uint32.from_address(ctypes.addressof(header) + 32).value = os.getpid()
    seen: dict[str, object] = {}

    def body() -> None:
        col = colocate.Colocator(str(avg))
        avg.write_text("0.1 0.1 0.1 1/100 1\n")
        col.follow(ctypes.addressof(header), 0)
        seen["policy"], seen["cpus"] = os.sched_getscheduler(0), os.sched_getaffinity(0)
        col.release()
        seen["policy after"], seen["cpus after"] = os.sched_getscheduler(0), os.sched_getaffinity(0)
        avg.write_text("9.0 9.0 9.0 7/100 1\n")
        col.follow(ctypes.addressof(header), 10**12)  # the next check: not quiet
        seen["busy"] = (col.active, os.sched_getscheduler(0))
        avg.write_text("3.0 3.0 3.0 1/100 1\n")  # one runnable task now, but a loaded minute
        col.follow(ctypes.addressof(header), 2 * 10**12)
        seen["loaded"] = (col.active, os.sched_getscheduler(0))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["policy"] == os.SCHED_IDLE
    cpus = seen["cpus"]
    assert isinstance(cpus, set) and len(cpus) == 1 and cpus <= os.sched_getaffinity(0)  # the sender's CPU
    assert (seen["policy after"], seen["cpus after"]) == (os.SCHED_OTHER, os.sched_getaffinity(0))
    assert seen["busy"] == seen["loaded"] == (False, os.SCHED_OTHER)


@requires_fuse
def test_without_polling_it_serves_and_ends_with_its_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JOULECTL_FUSE_SPIN_US=0 sleeps in poll() after every request (libfuse's own loop does the same);
    the run's end (--ticks) wakes it with one lookup and it unmounts. The attributes of a sys/ file
    are answered as first seen (the tree's copy is rewritten by every store; sysfs's times stay)."""
    monkeypatch.setenv(loop.SPIN_ENV, "0")
    monkeypatch.setenv(colocate.ENV, "1")  # every request a burst's first: it follows each sender
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: flex")[0])
    root = tmp_path / "root"
    s = start(root, spec, "--ticks", "4")
    node = s.node("intel-0")
    first = int((node / RAPL0 / "energy_uj").read_text())
    tree_gov = root / "intel-0" / GOV
    os.utime(tree_gov, ns=(1_000_000_000, 1_000_000_000))  # before the mount first looks at it
    seen = os.stat(node / GOV)
    (node / GOV).write_text("powersave\n")  # rewrites the tree's copy
    assert (node / GOV).read_text() == "powersave\n"
    again = os.stat(node / GOV)  # the write and the read made the kernel ask again: the cache answers
    assert (again.st_size, again.st_nlink, again.st_mode & 0o777) == (4096, 1, 0o644)
    assert again.st_mtime_ns == seen.st_mtime_ns == 1_000_000_000
    assert os.stat(tree_gov).st_mtime_ns > 1_000_000_000
    assert int((node / RAPL0 / "energy_uj").read_text()) >= first
    out, err = s.proc.communicate(timeout=120)
    assert s.proc.returncode == 0, err
    assert "ticks" in out
    assert not (root / "fuse").exists()


def test_fd_cache_keeps_the_last_used_and_reads_what_the_file_holds_now(tmp_path: Path) -> None:
    from joulectl.sim.fuse.live import FdCache
    from joulectl.sim.tick import write_in_place

    paths = [tmp_path / f"a{i}" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_text(f"{i}\n")
    fds = FdCache(size=2)
    first = fds.get(str(paths[0]))
    assert os.pread(first, 4096, 0) == b"0\n"
    write_in_place(str(paths[0]), "1000000\n")  # as a store or a tick rewrites an attribute
    assert os.pread(fds.get(str(paths[0])), 4096, 0) == b"1000000\n"
    fds.get(str(paths[1]))
    fds.get(str(paths[0]))  # used again: now paths[1] is the oldest
    fds.get(str(paths[2]))  # evicts paths[1]
    assert sorted(fds._fds) == sorted([str(paths[0]), str(paths[2])])
    with pytest.raises(FileNotFoundError):
        fds.get(str(tmp_path / "missing"))
    fds.close()
    assert fds._fds == {}
