"""Unit conversions: the only place units convert.

joulectl speaks watts and MHz at its interface. NVML speaks milliwatts, sysfs hwmon and powercap
microwatts (and microjoules), cpufreq kilohertz.
"""

from __future__ import annotations

UW_PER_W = 1_000_000
MW_PER_W = 1_000
KHZ_PER_MHZ = 1_000

#: Largest integer a sysfs attribute holds (u64); past it a value is absurd, not a number.
MAX_SYSFS_INT = (1 << 64) - 1
#: Largest power (µW) one device's limit can sensibly be: 100 kW. A ``power1_cap_max`` of 2^62 µW
#: (4.6 TW) is unknown, not a range to cap 60 % of.
MAX_POWER_UW = 100_000 * UW_PER_W
#: Longest text read as a number: u64 has 20 digits (a 400-digit attribute is refused at once).
_MAX_DIGITS = 24


def parse_sysfs_int(text: str, *, base: int = 10, limit: int = MAX_SYSFS_INT) -> int:
    """The integer a sysfs attribute holds: its first word, ASCII digits only (no sign, no ``_``,
    no other script's digits; ``0x`` allowed in base 16), at most ``limit``.

    The one parser of sysfs numbers (``Host.read_int``/``read_uint``/``read_uw`` and every backend
    go through it). Raises ``ValueError`` with the reason, for the device's "unknown" row:
    ``not a number: '...'``, ``negative: ...``, ``absurdly large: ...``.
    """
    if base == 10 and text.isdigit() and text.isascii() and len(text) <= _MAX_DIGITS:
        value = int(text)  # the common case: one word of ASCII digits
        if value > limit:
            raise ValueError(f"absurdly large: {value}")
        return value
    words = text.split()
    word = words[0] if words else ""
    digits = word
    if base == 16 and digits[:2] in ("0x", "0X"):
        digits = digits[2:]
    allowed = "0123456789abcdefABCDEF" if base == 16 else "0123456789"
    negative = digits.startswith("-") and len(digits) > 1 and all(c in allowed for c in digits[1:])
    if negative:
        raise ValueError(f"negative: {word[:40]}")
    if not digits or not word.isascii() or any(c not in allowed for c in digits):
        raise ValueError(f"not a number: {word[:40]!r}")
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        raise ValueError(f"absurdly large: {len(digits)} digits")
    value = int(digits, base)
    if value > limit:
        raise ValueError(f"absurdly large: {value}")
    return value


def decimals_end(text: str, start: int = 0) -> int:
    """The end of the run of decimal digits (Unicode's, as a pattern's ``\\d`` reads them) that
    starts at ``start`` of ``text``: ``start`` itself when there is none. The backends read names
    and values with it where a compiled pattern would cost each run its compile."""
    end = start
    while end < len(text) and text[end].isdecimal():
        end += 1
    return end


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

    # ``floor(x + 0.5)`` is wrong where the addition rounds: 0.49999999999999994 + 0.5 is 1.0.
    # ``x - floor(x)`` is exact for every float, so the comparison with 0.5 is too.
    a = abs(x)
    whole = math.floor(a)
    n = whole + 1 if a - whole >= 0.5 else whole
    return n if x >= 0 else -n


def number_text(value: float) -> str:
    """A number as an operator wrote it, for messages: ``1000000`` (not ``:g``'s ``1e+06``),
    ``87.5``, ``-3``, ``0.1``; a float with no fraction as an integer (``--pct 150`` is ``150``);
    past 15 digits, or not finite, Python's shortest repr (``1e+16``, ``inf``)."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)
