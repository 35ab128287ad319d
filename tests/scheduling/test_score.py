"""The extender score with Joulie's upstream test numbers (joulie-reference §7 "Scheduler")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulectl.scheduling.score import (
    ClusterAggregates,
    PodPowerDemand,
    TwinView,
    aggregates,
    marginal_watts,
    parse_time,
    score,
)

NOW = datetime(2026, 3, 13, 12, 0, tzinfo=timezone.utc)
CALM = ClusterAggregates(0.0, 0.0)


def twin(
    *,
    cls: str = "performance",
    headroom: float | None = None,
    cooling: float = 0.0,
    measured: float | None = None,
    capped: float | None = None,
    trend: float | None = None,
    age: timedelta | None = timedelta(seconds=30),
) -> TwinView:
    status: dict[str, Any] = {"schedulableClass": cls, "predictedCoolingStressScore": cooling}
    if headroom is not None:
        status["predictedPowerHeadroomScore"] = headroom
    pm: dict[str, Any] = {}
    if measured is not None:
        pm["measuredNodePowerW"] = measured
    if capped is not None:
        pm["nodeCappedPowerW"] = capped
    if trend is not None:
        pm["powerTrendWPerMin"] = trend
    if pm:
        status["powerMeasurement"] = pm
    if age is not None:
        status["lastUpdated"] = (NOW - age).isoformat().replace("+00:00", "Z")
    return TwinView.from_twin({"kind": "NodeTwin", "status": status})


@pytest.mark.parametrize(
    ("headroom", "cooling", "expected"),
    [(100, 0, 85), (0, 100, 0), (80, 10, 69)],  # 80/10 is 69.5, truncated
)
def test_upstream_headroom_cooling(headroom: float, cooling: float, expected: int) -> None:
    assert score("performance", twin(headroom=headroom, cooling=cooling), CALM, NOW).value == expected


def test_measured_of_capped() -> None:
    # 300 W measured of 1000 W capped -> headroom 70; cooling 20 -> 49 + 12 = 61
    t = twin(measured=300, capped=1000, cooling=20, headroom=5)
    s = score("performance", t, CALM, NOW)
    assert s.value == 61
    assert s.headroom == pytest.approx(70.0)


def test_marginal_power_lowers_the_score() -> None:
    t = twin(measured=300, capped=1000, cooling=20)
    assert score("performance", t, CALM, NOW, marginal_w=100).value == 54  # 0.7*60 + 12
    assert score("performance", t, CALM, NOW, marginal_w=100).value < score("performance", t, CALM, NOW).value


def test_headroom_capped_at_100_and_score_clamped() -> None:
    t = twin(measured=-500, capped=1000, cooling=0)  # bogus negative power: headroom still at most 100
    assert score("performance", t, CALM, NOW).value == 85
    assert score("performance", twin(headroom=-200, cooling=100), CALM, NOW).value == 0


def test_no_twin_and_stale_twin_are_neutral() -> None:
    assert score("standard", None, CALM, NOW).value == 50
    assert score("standard", twin(headroom=100, age=timedelta(minutes=10)), CALM, NOW).value == 50
    assert score("standard", twin(headroom=100, age=None), CALM, NOW).value == 50  # zero timestamp
    fresh = score("performance", twin(headroom=100, age=timedelta(minutes=1)), CALM, NOW)
    assert fresh.value == 85


def test_perf_pressure_over_performance_headrooms() -> None:
    twins = [twin(headroom=40), twin(headroom=20), twin(cls="eco", headroom=0)]  # eco ignored
    assert aggregates(twins, NOW).perf_pressure == pytest.approx(70.0)
    # stale performance twins are ignored too
    assert aggregates([*twins, twin(headroom=0, age=timedelta(hours=1))], NOW).perf_pressure == pytest.approx(70.0)
    assert aggregates([twin(cls="eco", headroom=3)], NOW).perf_pressure == 0.0


def test_standard_pod_on_eco_and_performance_nodes() -> None:
    agg = ClusterAggregates(0.0, 70.0)
    eco = twin(cls="eco", headroom=50, cooling=20)  # 35 + 12 = 47
    perf = twin(cls="performance", headroom=50, cooling=20)
    assert score("standard", eco, agg, NOW).value == 57  # + 10
    assert score("standard", perf, agg, NOW).value == 26  # - 0.3 * 70 = 47 - 21
    assert score("performance", eco, agg, NOW).value == 47
    assert score("performance", perf, agg, NOW).value == 47


def test_trend_puts_the_falling_node_first() -> None:
    rising = twin(headroom=50, trend=120)
    falling = twin(headroom=50, trend=-120)
    agg = aggregates([rising, falling], NOW)
    assert agg.cluster_trend_w_per_min == 0.0
    up, down = score("performance", rising, agg, NOW), score("performance", falling, agg, NOW)
    assert up.trend_bonus == pytest.approx(-20.0) and down.trend_bonus == pytest.approx(20.0)
    assert down.value > up.value


def test_trend_divisor_when_cluster_trend_is_large() -> None:
    agg = ClusterAggregates(600.0, 0.0)  # |clusterTrend| > 500: divide by 2, clamp 25
    assert score("performance", twin(headroom=50, trend=30), agg, NOW).trend_bonus == pytest.approx(-15.0)
    assert score("performance", twin(headroom=50, trend=300), agg, NOW).trend_bonus == pytest.approx(-25.0)


def _pod(cls: str = "standard", cores: float = 0, mem: float = 0, gpus: float = 0) -> PodPowerDemand:
    return PodPowerDemand(cls, cores, mem, gpus, "nvidia" if gpus else None)


def test_marginal_estimate_upstream_numbers() -> None:
    hw = {"status": {"cpu": {"totalCores": 96, "sockets": 2, "capRange": {"maxWattsPerSocket": 360}}}}
    assert marginal_watts(_pod(cores=8), hw) == pytest.approx(42.0)  # 720 * 0.7 * 8/96
    gpu_hw = {"status": {"cpu": {"totalCores": 96}, "gpu": {"present": True, "count": 8,
                                                              "capRangePerGpu": {"maxWatts": 700}}}}
    d = marginal_watts(_pod(cores=96, gpus=2), gpu_hw)
    assert d == pytest.approx(max(150, 96 * 3.5) * 0.7 + 2 * 700 * 0.65)
    assert marginal_watts(_pod("performance", cores=96, gpus=2), gpu_hw) > d
    # fallbacks: 150 W CPU with no cores known; 350 W NVIDIA GPUs without a range
    assert marginal_watts(_pod(cores=1), {"status": {}}) == pytest.approx(150 * 0.7)
    nv = {"status": {"gpu": {"count": 4, "vendor": "nvidia"}}}
    assert marginal_watts(_pod(cores=1, gpus=1), nv) == pytest.approx(150 * 0.7 + 350 * 0.65)
    amd = {"status": {"gpu": {"count": 4, "vendor": "amd"}}}
    assert marginal_watts(_pod(cores=1, gpus=1), amd) == pytest.approx(150 * 0.7 + 400 * 0.65)


def test_marginal_estimate_details() -> None:
    hw = {"status": {"cpu": {"totalCores": 100}}}  # cpuMax = max(150, 350) = 350
    assert marginal_watts(_pod(), hw) == pytest.approx(350 * 0.7 * 0.25 / 100)  # no request: 0.25 cores
    assert marginal_watts(_pod("performance"), hw) == pytest.approx(350 * 0.7 * 0.5 / 100)
    more_mem = marginal_watts(_pod(cores=10, mem=10 * 2**30), hw)
    assert more_mem == pytest.approx(350 * 0.7 * 0.1 * 1.1)
    assert marginal_watts(_pod(cores=10, mem=100 * 2**30), hw) == pytest.approx(350 * 0.7 * 0.1 * 1.3)
    assert marginal_watts(_pod(cores=1, gpus=2), {"status": {"cpu": {"totalCores": 1}}}) == pytest.approx(
        150 * 0.7)  # a GPU pod on a CPU node: no GPU power
    assert marginal_watts(_pod(cores=8), None) == 0.0  # no NodeHardware: no estimate
    # MI250X: 8 GCDs, 4 power domains, 560 W per package -> 280 W per amd.com/gpu
    mi = {"status": {"cpu": {"totalCores": 1}, "gpu": {"count": 8, "powerDomains": 4, "vendor": "amd",
                                                       "capRangePerGpu": {"maxWatts": 560}}}}
    assert marginal_watts(_pod(cores=1, gpus=2), mi) == pytest.approx(150 * 0.7 + 2 * 280 * 0.65)


def test_parse_time() -> None:
    assert parse_time("2026-03-13T12:00:00Z") == NOW
    assert parse_time("2026-03-13T12:00:00") == NOW
    assert parse_time("yesterday") is None
    assert parse_time("") is None


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(headroom=_finite, cooling=_finite, measured=_finite, capped=_finite, trend=_finite, pressure=_finite,
       cluster=_finite, cls=st.sampled_from(["eco", "performance", "draining", "unknown"]),
       pod_class=st.sampled_from(["standard", "performance"]))
def test_score_is_always_an_int_in_0_100(headroom: float, cooling: float, measured: float, capped: float,
                                          trend: float, pressure: float, cluster: float, cls: str,
                                          pod_class: str) -> None:
    t = twin(cls=cls, headroom=headroom, cooling=cooling, measured=measured, capped=capped, trend=trend)
    s = score(pod_class, t, ClusterAggregates(cluster, pressure), NOW)
    assert isinstance(s.value, int) and 0 <= s.value <= 100


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), "nan", "-inf"])
def test_a_non_finite_twin_number_reads_as_absent(bad: Any) -> None:
    """The file reader refuses these (exit 2); a twin built elsewhere still scores, never int(nan)."""
    t = twin(headroom=bad, cooling=bad, measured=bad, capped=bad, trend=bad)
    assert (t.headroom_score, t.cooling_score, t.measured_w, t.capped_w, t.trend_w_per_min) == (0, 0, 0, 0, 0)
    assert score("performance", t, CALM, NOW).value == 15  # 0.7 * 0 + 0.15 * (100 - 0)
