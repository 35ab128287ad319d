"""Twin budgets and scores: the upstream twin numbers (joulie-reference §7, twin_test.go)."""

from __future__ import annotations

import pytest

from joulectl.planning import twin


def test_budgets_of_the_upstream_node() -> None:
    # 2x350 W CPU + 8x700 W GPU at 60/40 % with 1500 W measured
    b = twin.budget(2 * 350.0, 8 * 700.0, 60.0, 40.0)
    assert (b.cpu_tdp_w, b.gpu_tdp_w, b.node_tdp_w) == (700, 5600, 6300)
    assert (b.cpu_capped_w, b.gpu_capped_w, b.node_capped_w) == pytest.approx((420, 2240, 2660))
    assert twin.headroom_score(b.node_capped_w, 1500.0) == pytest.approx(43.6, abs=0.05)


def test_headroom_negative_over_budget_and_full_at_zero() -> None:
    assert twin.headroom_score(2660.0, 4000.0) < 0
    assert twin.headroom_score(2660.0, 0.0) == 100.0
    assert twin.headroom_score(0.0, 500.0) == 100.0


@pytest.mark.parametrize(("ambient", "expected"), [(20.0, 50.0), (None, 50.0), (0.0, 50.0), (45.0, 100.0)])
def test_cooling_at_350_of_700(ambient: float | None, expected: float) -> None:
    assert twin.cooling_stress(350.0, 700.0, ambient) == pytest.approx(expected)


def test_cooling_multiplier_and_bounds() -> None:
    assert twin.temperature_multiplier(30.0) == pytest.approx(1 / 0.8)
    assert twin.temperature_multiplier(80.0) == 2.0  # floor of 0.5 on the divisor
    assert twin.cooling_stress(100.0, 0.0, 20.0) == 0.0


def test_psu_pue_density() -> None:
    assert twin.psu_stress(30_000.0, 0.0) == pytest.approx(60.0)
    assert twin.psu_stress(0.0, 10_000.0) == pytest.approx(20.0)
    assert twin.psu_stress(0.0, 0.0) == 0.0
    assert twin.psu_stress(10_000.0, 40_000.0) < twin.psu_stress(0.0, 40_000.0)
    assert twin.estimated_pue(36.0577) == pytest.approx(1.1762, abs=1e-4)
    assert twin.density_score(192, 8) == 100.0
    assert twin.density_score(96, 0) == 50.0
    assert twin.density_score(96, 4) == 50.0
    assert twin.density_score(1000, 0) == 100.0


def test_caps_at_or_below_zero_are_uncapped() -> None:
    b = twin.budget(700.0, 5600.0, 0.0, None)
    assert b.node_capped_w == 6300.0
