"""Physics: the upstream simulator numbers (joulie-reference.md §7 "Simulator") and model properties."""

from __future__ import annotations

import pytest

from joulectl import catalog
from joulectl.sim import physics as ph

# Joulie's default node: idle 80 W, Pmax 420 W, two sockets, FMin/FMax 1200/3200 MHz.
NODE = ph.CpuParams(idle_w=80.0, max_w=420.0, fmin=1200 / 3200, floor_w=ph.CPU_FLOOR_W)
PACKAGE = ph.CpuParams(idle_w=40.0, max_w=210.0, fmin=1200 / 3200)


def test_200w_node_cap_gives_100w_per_socket() -> None:
    node = ph.cpu_package_power(NODE, 1.0, 1.0, 200.0, cap_range_w=(80.0, 5000.0))
    assert node.power_w == pytest.approx(200.0)
    assert node.power_w / 2 == pytest.approx(100.0)
    # The same cap split over the emulated packages (one RAPL zone each) gives the same 100 W.
    per_socket = ph.cpu_package_power(PACKAGE, 1.0, 1.0, 100.0)
    assert per_socket.power_w == pytest.approx(100.0)
    assert per_socket.freq < 1.0


def test_cap_never_slows_below_fmin_and_holds_cap_plus_5() -> None:
    res = ph.cpu_package_power(PACKAGE, 1.0, 1.0, 45.0)
    assert res.freq == pytest.approx(PACKAGE.fmin)
    assert res.power_w <= 45.0 + ph.CAP_HEADROOM_W


def test_cap_clamped_to_rapl_range() -> None:
    capped = ph.cpu_package_power(NODE, 1.0, 1.0, 10.0, cap_range_w=(80.0, 5000.0))
    direct = ph.cpu_package_power(NODE, 1.0, 1.0, 80.0)
    assert capped == direct


def test_uncapped_full_load_is_pmax_and_floor_20() -> None:
    assert ph.cpu_package_power(NODE, 1.0, 1.0, None).power_w == pytest.approx(420.0)
    low = ph.CpuParams(idle_w=5.0, max_w=10.0, floor_w=ph.CPU_FLOOR_W)
    assert ph.cpu_natural_power(low, 0.0, 1.0) == ph.CPU_FLOOR_W


def test_memory_and_io_lower_activity() -> None:
    assert ph.cpu_activity(0.0, 0.0) == 1.0
    assert ph.cpu_activity(1.0, 1.0) == 0.35
    busy = ph.cpu_natural_power(NODE, 1.0, 1.0)
    stalled = ph.cpu_natural_power(NODE, 1.0, 1.0, memory_intensity=0.8)
    assert stalled < busy


def test_thermal_penalty_lowers_power_and_throughput() -> None:
    assert ph.cpu_natural_power(NODE, 1.0, 1.0, thermal=0.5) < ph.cpu_natural_power(NODE, 1.0, 1.0)
    assert ph.cpu_throughput(1.0, thermal=0.3) < ph.cpu_throughput(1.0)
    g = ph.GpuParams(idle_w=60, max_w=700, min_cap_w=200)
    wc, wm = ph.gpu_weights("gpu.compute_bound")
    assert ph.gpu_throughput(g, 1.0, 700, wc, wm, thermal=0.2) < ph.gpu_throughput(g, 1.0, 700, wc, wm)


def test_cstate_saving_only_when_throttled_at_low_load() -> None:
    assert ph.cstate_saving(100.0, 0.1, 0.0) == 100.0
    assert ph.cstate_saving(100.0, 0.1, 0.2) == pytest.approx(75.0)
    assert ph.cstate_saving(30.0, 0.0, 0.5) == ph.CPU_FLOOR_W
    assert ph.cstate_saving(100.0, 0.5, 0.5) == 100.0


def test_catalog_curve_split_monotone_and_capped() -> None:
    entry = catalog.load().cpu("AMD_EPYC_9654")
    assert entry is not None and entry.curve_w
    curve = ph.split_curve(entry.curve_w, 2)
    assert curve[0] == pytest.approx(entry.curve_w[0] / 2)
    assert curve[-1] == pytest.approx(entry.curve_w[-1] / 2)
    p = ph.CpuParams(curve_w=curve)
    powers = [ph.cpu_natural_power(p, u / 20, 1.0) for u in range(21)]
    assert powers == sorted(powers)
    assert ph.cpu_natural_power(p, 0.55, 1.0) == pytest.approx((410 + 442) / 4)
    capped = ph.cpu_package_power(p, 1.0, 1.0, 250.0)
    assert capped.power_w <= 255.0
    assert capped.freq < 1.0


def test_analytic_power_monotone_in_util_and_freq() -> None:
    by_u = [ph.cpu_natural_power(PACKAGE, u / 10, 1.0) for u in range(11)]
    by_f = [ph.cpu_natural_power(PACKAGE, 1.0, f / 10) for f in range(11)]
    assert by_u == sorted(by_u) and by_f == sorted(by_f)


def test_solvers() -> None:
    f = ph.solve_freq_analytic(200, 80, 420, 1.0, 1.15, 1.35)
    assert 80 + 340 * f**1.35 == pytest.approx(200)
    assert ph.solve_freq_analytic(50, 80, 420, 1.0, 1.15, 1.35) == 0.0
    assert ph.solve_freq_bisect(lambda x: 100 * x, 40.0) == pytest.approx(0.4, abs=1e-5)
    assert ph.solve_freq_bisect(lambda x: 100 * x, 400.0) == 1.0


def test_cpu_throughput_classes() -> None:
    # io-bound work degrades less than compute-bound work when the frequency drops.
    assert ph.cpu_throughput(0.5, cpu_class="cpu.io_bound") > ph.cpu_throughput(0.5, cpu_class="cpu.compute_bound")
    assert ph.cpu_throughput(1.0, cpu_class="cpu.compute_bound") == pytest.approx(1.0)


def test_gpu_target_220_settles_within_220_350() -> None:
    g = ph.GpuParams(idle_w=30, max_w=350, min_cap_w=200)
    cap = 350.0
    for _ in range(40):
        cap = ph.first_order(cap, 220.0, 0.05, g.cap_tau_s)
        assert 220.0 <= cap <= 350.0
    assert cap == pytest.approx(220.0, abs=0.5)
    wc, wm = ph.gpu_weights("gpu.compute_bound")
    assert ph.gpu_power(g, 1.0, cap, wc, wm) == pytest.approx(cap)


def test_memory_bound_gpu_power_lower_and_degrades_less() -> None:
    g = ph.GpuParams(idle_w=60, max_w=700)
    cw = ph.gpu_weights("gpu.compute_bound")
    mw = ph.gpu_weights("gpu.memory_bound", memory_intensity=0.8)
    assert ph.gpu_natural_power(g, 0.7, *mw) < ph.gpu_natural_power(g, 0.7, *cw)
    assert ph.gpu_throughput(g, 1.0, 350, *mw) > ph.gpu_throughput(g, 1.0, 350, *cw)
    assert sum(cw) == pytest.approx(1.0)


def test_gpu_managed_idle_floor() -> None:
    g = ph.GpuParams(idle_w=60, max_w=700)
    wc, wm = ph.gpu_weights("gpu.mixed")
    assert ph.gpu_power(g, 0.0, 700, wc, wm) == pytest.approx(60)
    assert ph.gpu_power(g, 0.0, 400, wc, wm) == pytest.approx(60)  # natural idle still 60
    assert ph.gpu_power(g, 0.0, 5, wc, wm) == pytest.approx(6.0)  # floor 0.10·idle under a cap
    assert ph.gpu_power(g, 1.0, 400, wc, wm) == pytest.approx(400)


def test_gpu_clock_fraction_lowers_power() -> None:
    g = ph.GpuParams(idle_w=60, max_w=700)
    wc, wm = ph.gpu_weights("gpu.compute_bound")
    assert ph.gpu_natural_power(g, 1.0, wc, wm, 0.5) < ph.gpu_natural_power(g, 1.0, wc, wm)


def test_spread_load() -> None:
    assert ph.spread_load(0.5, 8) == [1.0] * 4 + [0.0] * 4
    assert ph.spread_load(0.3, 4) == pytest.approx([0.6, 0.6, 0.0, 0.0])
    assert ph.spread_load(0.0, 2) == [0.0, 0.0]
    assert ph.spread_load(1.0, 0) == []


def test_first_order_and_throttle() -> None:
    assert ph.first_order(0.0, 10.0, 0.5, 1.0) == 5.0
    assert ph.first_order(0.0, 10.0, 2.0, 1.0) == 10.0
    assert ph.first_order(0.0, 10.0, 1.0, 0.0) == 10.0
    assert ph.throttle_fraction(80, 85, 97) == 0.0
    assert ph.throttle_fraction(91, 85, 97) == pytest.approx(0.5)
    assert ph.throttle_fraction(100, 85, 97) == 1.0
    assert ph.steady_temp_c(24, 80, 8) == 34.0


def test_pue_at_25c_full_load() -> None:
    value = ph.pue(25.0, 1.0)
    assert value == pytest.approx(1.19)
    assert ph.cooling_w(800.0, value) == pytest.approx(152.0)
    assert ph.pue(-400.0, 0.0) == 1.0
    assert ph.ambient_c(6 * 3600.0) == pytest.approx(25.0)
    assert ph.ambient_c(0.0, offset_c=3.0) == pytest.approx(23.0)
