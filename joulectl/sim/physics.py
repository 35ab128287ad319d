"""Power, throughput, thermal and facility models of the emulated nodes (pure functions).

The formulas are Joulie's simulator physics (joulie-reference.md §5), restated per CPU package
and per GPU because an emulated node exposes one RAPL zone per package and one board per GPU:

* CPU power, analytic: ``idle + (Pmax-idle)·(u·act)^α·f^β``, ``act = clamp(1-0.30·mem-0.45·io,
  0.35, 1)``, times ``1-0.35·thermal``, floored at 20 W (node level; per package the floor is
  divided by the package count so a node still never reads under 20 W).
* CPU power, catalog curve: the node curve of the CPU's catalog entry (0..100 % load in steps of
  10 %) split evenly over the packages, at load ``clamp01(u·throughputMul(f))``.
* C-state saving under throttling at low load, cap handling with ``solveFreq`` (closed form for
  the analytic model, 22-step bisection for curves), result ``min(P, cap+5)``.
* GPU capped board: compute and memory power mixed by class weights, ``min(Pnat, cap)`` with the
  managed idle floor (0.10·idle while capped and idle).
* First-order dynamics ``x += (target-x)·min(1, dt/τ)``, throttle fractions, and the facility
  PUE model ``1.08+0.006ΔT+0.04L+0.015LΔT/15``.

All powers are watts, frequencies are fractions of the maximum frequency, times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Joulie's node power floor, W.
CPU_FLOOR_W = 20.0
#: RAPL enforcement overshoot allowed above the cap, W (``min(P, cap+5)``).
CAP_HEADROOM_W = 5.0
#: Bisection steps of ``solveFreq`` for curve models.
SOLVE_STEPS = 22


def clamp(x: float, lo: float, hi: float) -> float:
    """``x`` limited to ``[lo, hi]``."""
    return lo if x < lo else hi if x > hi else x


def clamp01(x: float) -> float:
    """``x`` limited to ``[0, 1]``."""
    return clamp(x, 0.0, 1.0)


# -- CPU ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuParams:
    """The power model of ONE CPU package.

    ``idle_w``/``max_w`` drive the analytic model; ``curve_w`` (11 points, 0..100 % load, this
    package's share of the node curve) replaces it when set. ``fmin`` and ``knee`` are fractions
    of the maximum frequency (Joulie: FMin/FMax, lowestNonlinear/FMax; 0.35 and 0.7 unset).
    """

    idle_w: float = 40.0
    max_w: float = 210.0
    alpha: float = 1.15
    beta: float = 1.35
    fmin: float = 0.35
    knee: float = 0.7
    curve_w: tuple[float, ...] | None = None
    floor_w: float = CPU_FLOOR_W / 2


def split_curve(node_curve_w: Sequence[float], packages: int) -> tuple[float, ...]:
    """A node power curve (W at 0, 10, ... 100 % load) divided evenly over ``packages``."""
    n = max(1, packages)
    return tuple(float(w) / n for w in node_curve_w)


def interp_curve(curve_w: Sequence[float], load_pct: float) -> float:
    """Linear interpolation of a curve sampled at equal steps over 0..100 % load."""
    if not curve_w:
        return 0.0
    if len(curve_w) == 1:
        return float(curve_w[0])
    pos = clamp(load_pct, 0.0, 100.0) / 100.0 * (len(curve_w) - 1)
    i = min(int(pos), len(curve_w) - 2)
    frac = pos - i
    return float(curve_w[i]) + (float(curve_w[i + 1]) - float(curve_w[i])) * frac


def cpu_activity(memory_intensity: float, io_intensity: float = 0.0) -> float:
    """``act = clamp(1 - 0.30·mem - 0.45·io, 0.35, 1)``: memory and I/O stalls lower CPU power."""
    return clamp(1.0 - 0.30 * memory_intensity - 0.45 * io_intensity, 0.35, 1.0)


_CPU_CLASS_WEIGHTS: dict[str, tuple[float, float, float]] = {
    "cpu.compute_bound": (0.75, 0.20, 0.05),
    "cpu.memory_bound": (0.20, 0.75, 0.05),
    "cpu.io_bound": (0.10, 0.10, 0.80),
}
_CPU_MIXED = (0.45, 0.35, 0.20)


def cpu_throughput(
    freq: float,
    *,
    knee: float = 0.7,
    cpu_class: str = "cpu.mixed",
    memory_intensity: float = 0.0,
    io_intensity: float = 0.0,
    thermal: float = 0.0,
) -> float:
    """Relative CPU throughput (1 = unthrottled) at frequency fraction ``freq``.

    Compute scales with ``f``; memory loses 12 % of the gap above the knee and 45 % per knee below
    it; I/O loses 5 %. The class weights are blended with the job's memory and I/O intensity.
    """
    f = clamp01(freq)
    compute = f
    if f >= knee:
        memory = 1.0 - 0.12 * (1.0 - f)
    else:
        memory = 1.0 - 0.12 * (1.0 - knee) - 0.45 * (knee - f) / max(0.1, knee)
    io = 1.0 - 0.05 * (1.0 - f)
    wc, wm, wi = _CPU_CLASS_WEIGHTS.get(cpu_class, _CPU_MIXED)
    mem, ioi = clamp01(memory_intensity), clamp01(io_intensity)
    wc = 0.55 * wc + 0.45 * (1.0 - max(mem, ioi))
    wm = 0.55 * wm + 0.45 * mem
    wi = 0.55 * wi + 0.45 * ioi
    total = wc + wm + wi
    value = (wc * compute + wm * memory + wi * io) / total if total > 0 else compute
    return max(0.0, value) * (1.0 - clamp01(thermal))


def cpu_natural_power(
    p: CpuParams,
    util: float,
    freq: float,
    *,
    memory_intensity: float = 0.0,
    io_intensity: float = 0.0,
    thermal: float = 0.0,
    cpu_class: str = "cpu.mixed",
) -> float:
    """One package's power at utilisation ``util`` and frequency fraction ``freq``, uncapped."""
    u = clamp01(util)
    f = clamp01(freq)
    if p.curve_w:
        mul = cpu_throughput(
            f, knee=p.knee, cpu_class=cpu_class, memory_intensity=memory_intensity, io_intensity=io_intensity
        )
        return interp_curve(p.curve_w, clamp01(u * mul) * 100.0)
    act = cpu_activity(memory_intensity, io_intensity)
    power = p.idle_w + (p.max_w - p.idle_w) * math.pow(u * act, p.alpha) * math.pow(f, p.beta)
    power *= 1.0 - 0.35 * clamp01(thermal)
    return max(p.floor_w, power)


def cstate_saving(power_w: float, util: float, throttle: float, floor_w: float = CPU_FLOOR_W) -> float:
    """Idle C-states under throttling: below 20 % load, ``P·(1-0.5·(1-u/0.2))``, floored."""
    if throttle > 0 and util < 0.2:
        power_w *= 1.0 - 0.5 * (1.0 - max(0.0, util) / 0.2)
        return max(floor_w, power_w)
    return power_w


def solve_freq_analytic(cap_w: float, idle_w: float, max_w: float, util_act: float, alpha: float,
                        beta: float) -> float:
    """The frequency fraction at which the analytic model draws ``cap_w``: closed form.

    ``((cap-idle)/((Pmax-idle)·(u·act)^α))^(1/β)``; 0 when the cap is at or under idle, 1 at no load.
    """
    if util_act <= 0 or max_w <= idle_w:
        return 1.0
    if cap_w <= idle_w:
        return 0.0
    return float(((cap_w - idle_w) / ((max_w - idle_w) * util_act**alpha)) ** (1.0 / beta))


def solve_freq_bisect(power_at: Callable[[float], float], cap_w: float, lo: float = 0.0, hi: float = 1.0,
                      steps: int = SOLVE_STEPS) -> float:
    """The highest frequency fraction in ``[lo, hi]`` whose power is within ``cap_w`` (bisection)."""
    if power_at(hi) <= cap_w:
        return hi
    for _ in range(steps):
        mid = (lo + hi) / 2.0
        if power_at(mid) > cap_w:
            hi = mid
        else:
            lo = mid
    return lo


@dataclass(frozen=True)
class CpuResult:
    """A package's power and the frequency fraction it ran at."""

    power_w: float
    freq: float


def cpu_package_power(
    p: CpuParams,
    util: float,
    freq: float,
    cap_w: float | None,
    *,
    cap_range_w: tuple[float, float] | None = None,
    memory_intensity: float = 0.0,
    io_intensity: float = 0.0,
    thermal: float = 0.0,
    throttle: float = 0.0,
    cpu_class: str = "cpu.mixed",
) -> CpuResult:
    """One package under a RAPL cap (``None``: no limit in force).

    The cap is clamped to the RAPL range; above it the frequency drops to ``solveFreq`` (never
    under ``fmin``), power is recomputed, and the result is ``min(P, cap+5)``.
    """
    def natural(x: float) -> float:
        return cpu_natural_power(p, util, x, memory_intensity=memory_intensity, io_intensity=io_intensity,
                                 thermal=thermal, cpu_class=cpu_class)

    f = clamp01(freq)
    power = cstate_saving(natural(f), util, throttle, p.floor_w)
    if cap_w is None:
        return CpuResult(power, f)
    cap = clamp(cap_w, *cap_range_w) if cap_range_w else cap_w
    if power <= cap:
        return CpuResult(power, f)
    if p.curve_w:
        solved = solve_freq_bisect(natural, cap)
    else:
        ua = clamp01(util) * cpu_activity(memory_intensity, io_intensity)
        derate = 1.0 - 0.35 * clamp01(thermal)
        solved = solve_freq_analytic(cap / derate, p.idle_w, p.max_w, ua, p.alpha, p.beta)
    f = max(p.fmin, min(f, solved))
    power = cstate_saving(natural(f), util, throttle, p.floor_w)
    return CpuResult(min(power, cap + CAP_HEADROOM_W), f)


# -- GPU ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuParams:
    """The capped-board model of one GPU (W); τ of the cap in seconds (MI300X: 0.35)."""

    idle_w: float = 30.0
    max_w: float = 300.0
    min_cap_w: float = 80.0
    cap_tau_s: float = 0.150
    gamma_c: float = 1.0
    epsilon: float = 0.2
    gamma_m: float = 1.2


def gpu_weights(gpu_class: str, memory_intensity: float = 0.0, feed: float = 0.0) -> tuple[float, float]:
    """Compute and memory weights of a GPU workload class, blended with its memory intensity."""
    if gpu_class == "gpu.compute_bound":
        c, m = 0.8, 0.2
    elif gpu_class in ("gpu.memory_bound", "gpu.bandwidth_bound"):
        c, m = 0.2, 0.8
    else:
        c, m = 0.5, 0.5
    mem = clamp01(memory_intensity)
    c = clamp01(c + 0.1 * feed)
    c, m = 0.6 * c + 0.4 * (1.0 - mem), 0.6 * m + 0.4 * mem
    total = c + m
    return (c / total, m / total) if total > 0 else (0.5, 0.5)


def gpu_natural_power(g: GpuParams, util: float, wc: float, wm: float, clock_frac: float = 1.0) -> float:
    """Board power at ``util`` without a cap: ``wc·compute + wm·memory``.

    ``clock_frac`` < 1 (a graphics clock lock or an AMD performance level) scales the dynamic
    part by ``clock_frac^1.35``, the CPU model's β: an assumption, Joulie has no clock model.
    """
    u = clamp01(util)
    dyn = (g.max_w - g.idle_w) * math.pow(clamp01(clock_frac), 1.35)
    compute = g.idle_w + dyn * math.pow(u, 1.02)
    memory = g.idle_w + dyn * (0.35 * math.sqrt(u) + 0.3 * u)
    return wc * compute + wm * memory


#: Share of the dynamic range an idle GPU draws with its graphics clock held at the SM maximum
#: by a clock lock (scaled by the lock floor's clock fraction^1.35): an assumption.
LOCKED_IDLE_SHARE = 0.12


def gpu_locked_floor_w(g: GpuParams, floor_frac: float) -> float:
    """Idle board power with the graphics clock held at ``floor_frac`` of its maximum by a lock."""
    return g.idle_w + LOCKED_IDLE_SHARE * (g.max_w - g.idle_w) * math.pow(clamp01(floor_frac), 1.35)


def gpu_power(g: GpuParams, util: float, cap_w: float, wc: float, wm: float, clock_frac: float = 1.0) -> float:
    """``min(Pnat, cap)`` floored at idle, or at 0.10·idle while capped (< 0.99·max) and idle."""
    natural = gpu_natural_power(g, util, wc, wm, clock_frac)
    floor = g.idle_w
    if cap_w < 0.99 * g.max_w and util < 0.01:
        floor = 0.10 * g.idle_w
    return max(floor, min(natural, cap_w))


def gpu_throughput(g: GpuParams, util: float, cap_w: float, wc: float, wm: float, thermal: float = 0.0,
                   clock_frac: float = 1.0) -> float:
    """Relative GPU throughput: 1 uncapped, else ``(wc·r^γc + wm·(1-ε(1-r)^γm))·(1-thermal)``."""
    natural = gpu_natural_power(g, util, wc, wm)
    r = clamp01(cap_w / natural) if natural > 0 else 1.0
    r = min(r, clamp01(clock_frac))
    if r >= 1.0:
        return 1.0 - clamp01(thermal)
    value = wc * math.pow(r, g.gamma_c) + wm * (1.0 - g.epsilon * math.pow(1.0 - r, g.gamma_m))
    return value * (1.0 - clamp01(thermal))


def spread_load(util: float, devices: int) -> list[float]:
    """A node's GPU utilisation over its devices: ``ceil(u·n)`` run at ``u·n/active``, the rest idle."""
    if devices <= 0:
        return []
    total = clamp01(util) * devices
    active = math.ceil(total - 1e-12)
    if active <= 0:
        return [0.0] * devices
    each = total / active
    return [each] * active + [0.0] * (devices - active)


# -- dynamics and thermal ---------------------------------------------------------------------


def first_order(current: float, target: float, dt_s: float, tau_s: float) -> float:
    """One first-order step towards ``target``: ``step = min(1, dt/τ)``."""
    if tau_s <= 0:
        return target
    return current + (target - current) * min(1.0, dt_s / tau_s)


def throttle_fraction(temp_c: float, start_c: float, full_c: float) -> float:
    """``clamp01((T-start)/(full-start))``: 0 below the throttle start, 1 at full throttle."""
    if full_c <= start_c:
        return 1.0 if temp_c >= full_c else 0.0
    return clamp01((temp_c - start_c) / (full_c - start_c))


def steady_temp_c(ambient_c: float, power_w: float, w_per_c: float) -> float:
    """The temperature a part settles at: ``ambient + P/(W/°C)``."""
    return ambient_c + power_w / w_per_c if w_per_c > 0 else ambient_c


@dataclass(frozen=True)
class Thermal:
    """A part's thermal constants: τ in seconds, W per °C, throttle start and full in °C."""

    tau_s: float
    w_per_c: float
    throttle_start_c: float
    throttle_full_c: float


CPU_THERMAL = Thermal(tau_s=4.0, w_per_c=8.0, throttle_start_c=85.0, throttle_full_c=97.0)
GPU_THERMAL = Thermal(tau_s=2.5, w_per_c=12.0, throttle_start_c=82.0, throttle_full_c=92.0)
#: CPU DVFS ramp, CPU cap τ and telemetry window (s); GPU telemetry window (s).
CPU_RAMP_S = 0.5
CPU_CAP_TAU_S = 0.25
CPU_TELEMETRY_S = 0.25
GPU_TELEMETRY_S = 1.0
MI300X_CAP_TAU_S = 0.35


# -- facility ----------------------------------------------------------------------------------


def ambient_c(t_s: float, base_c: float = 20.0, amplitude_c: float = 5.0, period_h: float = 24.0,
              offset_c: float = 0.0) -> float:
    """``base + amplitude·sin(2πt/period) + zone offset``; ``t`` in seconds of the day cycle."""
    period_s = max(1.0, period_h * 3600.0)
    return base_c + amplitude_c * math.sin(2.0 * math.pi * t_s / period_s) + offset_c


def pue(ambient_temp_c: float, load: float) -> float:
    """Facility PUE: ``1.08+0.006(T-15)+0.04L+0.015L(T-15)/15``, clamped to [1,3], 3 decimals."""
    dt = ambient_temp_c - 15.0
    value = 1.08 + 0.006 * dt + 0.04 * load + 0.015 * load * dt / 15.0
    return round(clamp(value, 1.0, 3.0), 3)


def cooling_w(it_power_w: float, pue_value: float) -> float:
    """Cooling power: ``IT·(PUE-1)``."""
    return it_power_w * (pue_value - 1.0)
