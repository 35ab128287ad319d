"""Unit conversions: the only place units convert.

joulectl speaks watts and MHz at its interface. NVML speaks milliwatts, sysfs hwmon and powercap
microwatts (and microjoules), cpufreq kilohertz.
"""

from __future__ import annotations

UW_PER_W = 1_000_000
MW_PER_W = 1_000
KHZ_PER_MHZ = 1_000


def uw_to_w(uw: float) -> float:
    """Microwatts (sysfs hwmon, powercap) to watts."""
    return uw / UW_PER_W


def w_to_uw(w: float) -> int:
    """Watts to whole microwatts, as sysfs takes them."""
    return round(w * UW_PER_W)


def mw_to_w(mw: float) -> float:
    """Milliwatts (NVML) to watts."""
    return mw / MW_PER_W


def w_to_mw(w: float) -> int:
    """Watts to whole milliwatts, as NVML takes them."""
    return round(w * MW_PER_W)


def khz_to_mhz(khz: float) -> float:
    """Kilohertz (cpufreq) to MHz."""
    return khz / KHZ_PER_MHZ


def mhz_to_khz(mhz: float) -> int:
    """MHz to whole kilohertz, as cpufreq takes them."""
    return round(mhz * KHZ_PER_MHZ)


def uj_to_j(uj: float) -> float:
    """Microjoules (powercap ``energy_uj``, hwmon ``energy1_input``) to joules."""
    return uj / UW_PER_W


def j_to_uj(j: float) -> int:
    """Joules to whole microjoules."""
    return int(j * UW_PER_W)


def mj_to_j(mj: float) -> float:
    """Millijoules (NVML total energy) to joules."""
    return mj / MW_PER_W


def round_half_away(x: float) -> int:
    """Round halves away from zero, as Go's ``math.Round`` does (Python's ``round`` rounds to even)."""
    import math

    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)
