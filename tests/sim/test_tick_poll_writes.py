"""The polled readback (``SIM_READBACK=poll``) sees every kind of write between two ticks: one of
the same size as before (only the mtime moves), one of another size, an atomic replace (a new
inode). Expected caps are the values written, read off the node's samples.

Written for mutants of the signature check in sim/tick.py that survived (docs/TESTING.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: poll}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.9, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
"""
ZONE = "intel-0/sys/devices/virtual/powercap/intel-rapl/intel-rapl:{}/constraint_0_power_limit_uw"


def _same_size(path: Path) -> None:
    path.write_text("150000000\n")  # "270000000\n" before: 10 bytes both


def _other_size(path: Path) -> None:
    path.write_text("95000000\n")


def _replaced(path: Path) -> None:
    tmp = path.with_name(".limit.tmp")
    tmp.write_text("200000000\n")
    os.replace(tmp, path)


def _keep_mtime(write: Any) -> Any:
    """``write``, then the file's old mtime put back: two writes within one tick of the kernel's
    coarse clock leave the mtime as it was, so the size and the inode must tell."""
    def run(path: Path) -> None:
        before = path.stat()
        write(path)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return run


def _replaced_same_size(path: Path) -> None:
    tmp = path.with_name(".limit.tmp")
    tmp.write_text("210000000\n")
    os.replace(tmp, path)


def _polled_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path, list[Any]]:
    """SPEC's node rendered under ``tmp_path/root`` with the polled readback: (spec, root, entries)."""
    monkeypatch.setenv("SIM_READBACK", "poll")
    (tmp_path / "spec.yaml").write_text(SPEC)
    spec = load_spec(str(tmp_path / "spec.yaml"))
    root = tmp_path / "root"
    runtime._ensure_trees(spec, str(root))
    return spec, root, runtime.build_entries(spec, str(root))


@pytest.mark.parametrize(("write", "expected"), [
    (_same_size, 150.0), (_other_size, 95.0), (_replaced, 200.0),
    (_keep_mtime(_other_size), 95.0), (_keep_mtime(_replaced_same_size), 210.0),
])
def test_polled_readback_sees_the_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Any,
                                        expected: float) -> None:
    spec, root, entries = _polled_node(tmp_path, monkeypatch)
    caps: list[dict[str, float | None]] = []

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        caps.append(dict(samples[0].caps_w))
        if done == 1:
            write(root / ZONE.format(0))
        if done == 3:
            write(root / ZONE.format(1))

    runtime.run_entries(entries, str(root), spec.facility, ticks=4, fast=True, workers=1, progress=progress,
                        clock=lambda: 1_800_000_000.0)
    assert caps == [{"pkg0": 270.0, "pkg1": 270.0}, {"pkg0": expected, "pkg1": 270.0},
                    {"pkg0": expected, "pkg1": 270.0}, {"pkg0": expected, "pkg1": expected}]


def test_a_refused_write_puts_back_the_value_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``turbo`` is no governor (cpufreq answers EINVAL): the file reads what was in force before
    the write, ``performance`` (set by an earlier write), not the profile's ``powersave``."""
    spec, root, entries = _polled_node(tmp_path, monkeypatch)
    gov = root / "intel-0/sys/devices/system/cpu/cpufreq/policy3/scaling_governor"
    seen: list[str] = []

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        seen.append(gov.read_text().strip())
        if done == 1:
            gov.write_text("performance\n")
        if done == 2:
            gov.write_text("turbo\n")

    runtime.run_entries(entries, str(root), spec.facility, ticks=4, fast=True, workers=1, progress=progress,
                        clock=lambda: 1_800_000_000.0)
    assert seen == ["powersave", "performance", "performance", "performance"]
