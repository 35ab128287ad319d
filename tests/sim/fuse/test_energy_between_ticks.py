"""Energy read between ticks (FUSE mode): it moves, never goes back, and a tick accrues only the rest."""

from __future__ import annotations

from pathlib import Path

from joulectl.sim import layout
from joulectl.sim.tick import BaseLoad, NodeRuntime
from tests.sim.conftest import render_one

T0 = 1_800_000_000.0


def _runtime(root: Path) -> NodeRuntime:
    node = render_one(root, "intel-xeon-2s-rapl")
    model = layout.model_for(str(node), "n-0", None)
    return NodeRuntime(str(node), model, BaseLoad(cpu_util=0.5))


def test_a_read_accrues_at_the_last_power_and_the_tick_only_the_rest(tmp_path: Path) -> None:
    plain = _runtime(tmp_path / "plain")
    live = _runtime(tmp_path / "live")
    for rt in (plain, live):
        rt.step(T0 + 1, 1.0)
    e1 = live.ledger.energy["pkg0"]
    assert plain.ledger.energy == live.ledger.energy
    p1 = live.power_w["pkg0"]
    assert p1 > 0
    live.advance_energy(["pkg0"], 0.25)
    seen = live.ledger.energy["pkg0"]
    assert seen == e1 + round(p1 * 0.25 * 1e6)
    live.advance_energy(["pkg0"], 0.25)  # the same instant again: no change
    live.advance_energy(["pkg0"], 0.1)  # an earlier instant: never back
    assert live.ledger.energy["pkg0"] == seen
    plain.step(T0 + 2, 1.0)
    live.step(T0 + 2, 1.0)
    p2 = live.power_w["pkg0"]
    assert live.ledger.energy["pkg0"] == seen + round(p2 * 0.75 * 1e6)
    assert live.ledger.energy["pkg0"] >= seen
    # The physics does not see the read: the same power as the plain tick, and the other
    # components accrue the whole interval.
    assert live.power_w == plain.power_w
    assert live.ledger.energy["dram0"] == plain.ledger.energy["dram0"]
    assert live.energy_ahead == {}


def test_a_read_past_the_tick_carries_over(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    rt.step(T0 + 1, 1.0)
    rt.advance_energy(["pkg0"], 1.5)  # read after the tick's time, before the tick stepped the node
    seen = rt.ledger.energy["pkg0"]
    rt.step(T0 + 2, 1.0)
    assert rt.ledger.energy["pkg0"] == seen
    assert rt.energy_ahead == {"pkg0": 0.5}
    rt.step(T0 + 3, 1.0)
    assert rt.ledger.energy["pkg0"] == seen + round(rt.power_w["pkg0"] * 0.5 * 1e6)
