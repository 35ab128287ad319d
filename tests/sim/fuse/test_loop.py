"""The FUSE request loop (joulectl.sim.fuse.loop): its arguments, its polling time, and both ways it ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from joulectl.sim.fuse import loop
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


@requires_fuse
@pytest.mark.parametrize("raw", ["abc", "100001"])
def test_bad_spin_time_is_one_line_before_anything_is_rendered(tmp_path: Path, raw: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: flex")[0])
    r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "run", str(spec), "--root",
                        str(tmp_path / "root"), "--fuse", "--ticks", "1"], capture_output=True, text=True,
                       env={**os.environ, loop.SPIN_ENV: raw}, check=False, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"joulectl: error: {loop.SPIN_ENV}: {raw!r} is not a whole number of µs "
                                "from 0 to 100000")
    assert not (tmp_path / "root").exists()


@requires_fuse
def test_without_polling_it_serves_and_ends_with_its_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JOULECTL_FUSE_SPIN_US=0 sleeps in poll() after every request (libfuse's own loop does the same);
    the run's end (--ticks) wakes it with one lookup and it unmounts. The attributes of a sys/ file
    are answered as first seen (the tree's copy is rewritten by every store; sysfs's times stay)."""
    monkeypatch.setenv(loop.SPIN_ENV, "0")
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
