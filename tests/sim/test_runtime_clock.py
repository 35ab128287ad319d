"""The simulator's run loop under a clock that steps backwards (an NTP step, a VM resumed).

``runtime.run_entries`` takes its wall clock as ``clock``: the clocks here are lists of readings,
so the expected tick lengths are written out, not computed by the loop under test. A tick whose
clock reading is earlier than the previous one lasts 0 s: nothing is integrated backwards and no
energy counter goes down; the next tick lasts from the earlier reading.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: clock}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.6, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
"""
ENERGY = "intel-0/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj"


def readings(values: list[float]) -> Callable[[], float]:
    """A clock that returns ``values`` in turn (and fails the test when the loop asks for more)."""
    it = iter(values)

    def clock() -> float:
        return next(it)

    return clock


#: run_entries reads the clock once at the start, then per tick once for the wait and once for
#: ``now`` (no second wait reading: each wait reading is already at or past the tick's deadline).
#: The third tick's ``now`` is 6 s before the second's.
CLOCK = [
    1000.0,            # start
    1001.0, 1001.0,    # tick 1: dt 1
    1002.0, 1002.0,    # tick 2: dt 1
    1003.0, 996.0,     # tick 3: the clock stepped back 6 s: dt 0
    1004.0, 1004.0,    # tick 4: dt 8 (from 996)
    1005.0, 1005.0,    # tick 5: dt 1
]
EXPECTED = [(1001.0, 1.0), (1002.0, 1.0), (996.0, 0.0), (1004.0, 8.0), (1005.0, 1.0)]


class RecordingPool:
    """A pool with no nodes that records what the loop hands each tick."""

    def __init__(self) -> None:
        self.startup: list[Any] = []
        self.ticks: list[tuple[float, float]] = []

    def tick(self, now: float, dt_s: float, loads: Any = None) -> tuple[list[Any], list[Any]]:
        self.ticks.append((now, dt_s))
        return [], []

    def close(self) -> None:
        pass


def _spec(tmp_path: Path) -> Any:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return load_spec(str(path))


def test_a_backward_clock_step_is_a_tick_of_zero_seconds(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    pool = RecordingPool()
    summary = runtime.run_entries([], str(tmp_path), spec.facility, ticks=5, tick_s=1.0, workers=1,
                                  clock=readings(CLOCK), pool=pool)
    assert pool.ticks == EXPECTED
    assert summary.ticks == 5 and not summary.interrupted


def test_a_late_tick_drops_the_slots_it_overran_and_duration_counts_wall_time(tmp_path: Path) -> None:
    """``--duration 6`` at 1 s: the second tick starts 4.5 s late (a slow disk). It takes the last
    slot already due (the one ending at 1005) and drops the three it overran, as Go's time.Ticker
    drops ticks for a slow receiver: no catch-up ticks follow. The next tick is the next boundary
    still ahead, 1006, the end of the run's 6 s: 3 ticks, not 6."""
    spec = _spec(tmp_path)
    pool = RecordingPool()
    clock = readings([
        1000.0,            # start
        1001.0, 1001.0,    # tick 1 (slot 1)
        1005.5, 1005.5,    # tick 2, due at 1002, starts at 1005.5: slots 2-4 dropped
        1006.0, 1006.0,    # tick 3, due at 1006 (slot 6 of 6): the last
    ])
    summary = runtime.run_entries([], str(tmp_path), spec.facility, duration_s=6.0, tick_s=1.0, workers=1,
                                  clock=clock, pool=pool)
    assert pool.ticks == [(1001.0, 1.0), (1005.5, 4.5), (1006.0, 0.5)]
    assert summary.ticks == 3 and not summary.interrupted


def test_ticks_count_ticks_even_when_slots_are_dropped(tmp_path: Path) -> None:
    """``--ticks 3`` runs three ticks whatever was dropped (slots bound only a ``--duration``):
    the same late second tick as above, then a third at the next boundary ahead, 1006 (its first
    reading, 1005.9, is before it: the loop waits and reads again)."""
    spec = _spec(tmp_path)
    pool = RecordingPool()
    clock = readings([1000.0, 1001.0, 1001.0, 1005.5, 1005.5, 1005.9, 1006.0, 1006.0])
    runtime.run_entries([], str(tmp_path), spec.facility, ticks=3, tick_s=1.0, workers=1, clock=clock, pool=pool)
    assert pool.ticks == [(1001.0, 1.0), (1005.5, 4.5), (1006.0, 0.5)]


def test_fast_mode_ignores_the_clock_after_the_start(tmp_path: Path) -> None:
    """``fast``: each tick is ``tick_s`` after the previous one, whatever the clock says."""
    spec = _spec(tmp_path)
    pool = RecordingPool()
    runtime.run_entries([], str(tmp_path), spec.facility, ticks=3, tick_s=2.5, fast=True, workers=1,
                        clock=readings([500.0]), pool=pool)
    assert pool.ticks == [(502.5, 2.5), (505.0, 2.5), (507.5, 2.5)]


def test_energy_counters_never_run_backwards_on_a_real_node(tmp_path: Path) -> None:
    """The same clock on a rendered Intel node: the package's energy_uj does not move during the
    0 s tick, and moves forward on every other one."""
    spec = _spec(tmp_path)
    root = tmp_path / "root"
    runtime._ensure_trees(spec, str(root))
    entries = runtime.build_entries(spec, str(root))
    energy: list[int] = [int((root / ENERGY).read_text())]

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        energy.append(int((root / ENERGY).read_text()))

    runtime.run_entries(entries, str(root), spec.facility, ticks=5, tick_s=1.0, workers=1, progress=progress,
                        clock=readings(CLOCK))
    steps = [b - a for a, b in itertools.pairwise(energy)]
    assert len(steps) == 5
    assert steps[2] == 0, steps
    assert all(s > 0 for s in (steps[0], steps[1], steps[3], steps[4])), steps
    # the 8 s tick after the step integrates 8 s of power: more than any 1 s tick's energy
    assert steps[3] > max(steps[0], steps[1], steps[4]), steps
