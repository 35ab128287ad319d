"""The kernel's write semantics (joulectl.sim.sysfs_rules): literal stores and what the kernel does.

Expected values are the kernel's, from the driver code named in the module (kstrto*, sscanf,
strncmp, amdgpu_read_mask, the RAPL wrap and time-window rounding), never computed by the code.
"""

from __future__ import annotations

import errno

import pytest

from joulectl.sim import sysfs_rules as sr

RAPL = sr.Rule(limit_bits=15, unit_uw=125_000)
FREQ = sr.Rule(min_khz=800_000, max_khz=4_000_000, base_khz=2_100_000)
GOV = sr.Rule(allowed=("performance", "powersave"))
SCLK = sr.Rule(allowed=("500", "1200", "1700"))
AMDCAP = sr.Rule(min_uw=0, max_uw=500_000_000)


@pytest.mark.parametrize(
    ("kind", "rule", "store", "text", "err"),
    [
        # powercap-set writes the number and NULs: the driver's C string ends at the first NUL
        ("rapl_limit", RAPL, b"200000000\0\0\0\0\0\0\0\0\0\0\0\0\0\0", "200000000\n", 0),
        ("rapl_limit", RAPL, b"200000000\n", "200000000\n", 0),
        ("rapl_limit", RAPL, b"+150000000", "150000000\n", 0),
        ("rapl_limit", RAPL, b" 150000000", None, errno.EINVAL),  # kstrtoull: no leading space
        ("rapl_limit", RAPL, b"150000000\n\n", None, errno.EINVAL),  # one newline at most
        ("rapl_limit", RAPL, b"-5", None, errno.EINVAL),
        ("rapl_limit", RAPL, b"4196000000", "100000000\n", 0),  # 15 bits of 1/8 W: wraps
        ("rapl_limit", sr.Rule(locked=True), b"100000000", None, errno.ENODATA),
        ("rapl_time_window", sr.Rule(), b"1000000", "999424\n", 0),  # 2^10 units of 976 us
        ("rapl_time_window", sr.Rule(), b"28000000", "27983872\n", 0),  # 28688 units: 2^14*(1+3/4)*976
        ("cpufreq_governor", GOV, b"powersave", "powersave\n", 0),
        ("cpufreq_governor", GOV, b"PowerSave\n", "powersave\n", 0),  # strncasecmp
        ("cpufreq_governor", GOV, b"  performance  \n", "performance\n", 0),  # sscanf %15s
        ("cpufreq_governor", GOV, b"powersavece\n", None, errno.EINVAL),
        ("cpufreq_max", FREQ, b"800000", "800000\n", 0),
        ("cpufreq_max", FREQ, b"8000000\n", "4000000\n", 0),  # clamped to cpuinfo_max_freq
        ("cpufreq_max", FREQ, b"3000000abc", "3000000\n", 0),  # sscanf %u stops at the letter
        ("cpufreq_max", FREQ, b"abc", None, errno.EINVAL),
        ("cpufreq_min", FREQ, b"100", "800000\n", 0),
        ("no_turbo", sr.Rule(), b"7\n", "1\n", 0),  # any non-zero value is 1
        ("no_turbo", sr.Rule(), b"x", None, errno.EINVAL),
        ("boost", sr.Rule(), b"2", None, errno.EINVAL),
        ("boost", sr.Rule(), b"0\n", "0\n", 0),
        ("epp", sr.Rule(allowed=sr.EPP_STRINGS), b"power\0", "power\n", 0),
        ("epp", sr.Rule(allowed=sr.EPP_STRINGS), b"128\n", "128\n", 0),
        ("epp", sr.Rule(allowed=sr.EPP_STRINGS), b"256", None, errno.EINVAL),
        ("epp", sr.Rule(allowed=sr.EPP_STRINGS), b"turbo", None, errno.EINVAL),
        ("amdgpu_cap", AMDCAP, b"250500000\n", "250000000\n", 0),  # whole watts
        ("amdgpu_cap", AMDCAP, b"600000000", None, errno.EINVAL),
        ("amdgpu_cap", AMDCAP, b"4294967296", None, errno.EINVAL),  # kstrtou32: past 32 bits
        ("amdgpu_cap", sr.Rule(secondary=True), b"100000000", None, errno.EINVAL),
        ("intel_pl1", sr.Rule(clamp_uw=(40_000_000, 150_000_000)), b"30000000\n", "40000000\n", 0),
        ("intel_pl1", sr.Rule(clamp_uw=(40_000_000, 150_000_000)), b"0\n", "0\n", 0),  # disables
        ("intel_pl1_interval", sr.Rule(max_ms=256_000), b"0x10", "16\n", 0),  # kstrtoull base 0
        ("intel_pl1_interval", sr.Rule(max_ms=256_000), b"300000", None, errno.EINVAL),
        ("amd_perf_level", sr.Rule(allowed=sr.AMD_PERF_LEVELS), b"manual\n", "manual\n", 0),
        ("amd_perf_level", sr.Rule(allowed=sr.AMD_PERF_LEVELS), b"lowest", "low\n", 0),  # strncmp prefix
        ("amd_perf_level", sr.Rule(allowed=sr.AMD_PERF_LEVELS), b"turbo", None, errno.EINVAL),
        ("amd_sclk", SCLK, b"0 1\n", "0 1", 0),
        ("amd_sclk", SCLK, b"2 0", "0 2", 0),
        ("amd_sclk", SCLK, b"0 3", None, errno.EINVAL),  # beyond the table
        ("amd_sclk", SCLK, b"32", None, errno.EINVAL),  # above 31
        ("amd_sclk", SCLK, b"0 x", None, errno.EINVAL),
        ("amd_partition", sr.Rule(allowed=("SPX", "CPX")), b"cpx\n", "CPX\n", 0),
        ("amd_partition", sr.Rule(allowed=("SPX", "CPX")), b"DPX", None, errno.EINVAL),
        ("intel_pstate_status", sr.Rule(), b"passive", "passive", 0),  # unmodelled: taken, no effect
    ],
)
def test_store(kind: str, rule: sr.Rule, store: bytes, text: str | None, err: int) -> None:
    verdict = sr.apply(kind, rule, store)
    assert verdict.text == text
    assert verdict.errno == err


@pytest.mark.parametrize(
    ("level", "store", "text", "note"),
    [
        # amdgpu_smu.c smu_force_ppclk_levels: "force clock level is for dpm manual mode only"
        ("manual", b"0 1\n", "0 1", ""),
        ("auto", b"0 1\n", None, "force clock level is for dpm manual mode only"),
        ("profile_peak", b"2", None, "force clock level is for dpm manual mode only"),
        ("high", b"0", None, "force clock level is for dpm manual mode only"),
        # amdgpu_read_mask parses before the level is looked at: a bad mask is refused as such
        ("auto", b"x", None, "no clock level"),
        ("manual", b"0 3", None, "clock level specified is over max allowed"),
        (None, b"0 1", "0 1", ""),  # level unknown (no power_dpm_force_performance_level): taken
    ],
)
def test_an_sclk_mask_is_taken_in_manual_only(level: str | None, store: bytes, text: str | None, note: str) -> None:
    verdict = sr.apply("amd_sclk", SCLK, store, sr.Context(perf_level=level))
    assert (verdict.text, verdict.note) == (text, note)
    assert verdict.errno == (0 if text is not None else errno.EINVAL)


def test_epp_busy_under_performance_policy() -> None:
    rule = sr.Rule(allowed=sr.EPP_STRINGS)
    ctx = sr.Context(governor="performance")
    assert sr.apply("epp", rule, b"balance_power", ctx).errno == errno.EBUSY
    assert sr.apply("epp", rule, b"performance", ctx).text == "performance\n"
    assert sr.apply("epp", rule, b"0", ctx).text == "0\n"


def test_cpufreq_max_stops_at_base_while_turbo_is_off_and_min_at_max() -> None:
    assert sr.apply("cpufreq_max", FREQ, b"4000000", sr.Context(turbo=False)).text == "2100000\n"
    assert sr.apply("cpufreq_min", FREQ, b"3000000", sr.Context(other_khz=2_000_000)).text == "2000000\n"


def test_clamped_and_wrapped_are_noted() -> None:
    assert sr.apply("cpufreq_max", FREQ, b"9999999").note == "clamped"
    assert sr.apply("rapl_limit", RAPL, b"4196000000").note == "wrapped"
    assert sr.apply("rapl_limit", RAPL, b"100000000").note == ""


def test_read_only_attributes_refuse_with_eacces() -> None:
    assert sr.access_errno(0o444) == errno.EACCES
    assert sr.access_errno(0o400) == errno.EACCES
    assert sr.access_errno(0o644) == 0
    assert sr.access_errno(0o664) == 0


def test_sclk_command_reads_back_the_table() -> None:
    assert sr.command_readback("amd_sclk", SCLK, "0 1") == "0: 500Mhz\n1: 1200Mhz *\n2: 1700Mhz\n"
    assert sr.command_readback("amd_sclk", SCLK, "0 1", active=0) == "0: 500Mhz *\n1: 1200Mhz\n2: 1700Mhz\n"
    assert sr.sclk_levels("0: 500Mhz\n1: 1200Mhz *\n2: 1700Mhz\n") == (500, 1200, 1700)
    assert sr.sclk_levels("0 1") == ()


@pytest.mark.parametrize(
    ("kind", "rule", "content", "old", "store", "text"),
    [
        # cpupower -u 800MHz over 4000000 (no O_TRUNC): 800000 + "0\n"
        ("cpufreq_max", FREQ, b"8000000\n", b"4000000\n", b"800000", "800000\n"),
        # cpupower -g powersave over performance: powersave + "ce\n"
        ("cpufreq_governor", GOV, b"powersavece\n", b"performance\n", b"powersave", "powersave\n"),
        # a governor mask over the level table
        ("amd_sclk", SCLK, b"0 1500Mhz\n1: 1200Mhz\n2: 1700Mhz *\n", b"0: 500Mhz\n1: 1200Mhz\n2: 1700Mhz *\n",
         b"0 1", "0 1"),
        # a truncating write of a refused number stays refused (not re-read as 60 W)
        ("amdgpu_cap", AMDCAP, b"600000000\n", b"500000000\n", b"600000000\n", None),
        # echo 450000 > scaling_min_freq over 800000: truncated, taken as it is (clamped)
        ("cpufreq_min", FREQ, b"450000\n", b"800000\n", b"450000\n", "800000\n"),
        # a 500 W Flex 170 cap written whole over 150 W: clamped, never read as the 50 W prefix
        ("intel_pl1", sr.Rule(clamp_uw=(40_000_000, 150_000_000)), b"500000000\n", b"150000000\n",
         b"500000000\n", "150000000\n"),
        # a 5000 W PL1 over 270 W wraps in the 15-bit field (904 W), never read as a prefix
        ("rapl_limit", RAPL, b"5000000000\n", b"270000000\n", b"5000000000\n", "904000000\n"),
        # powercap-set: longer than the old content, the whole store
        ("rapl_limit", RAPL, b"200000000" + b"\0" * 15, b"270000000\n", b"200000000" + b"\0" * 15, "200000000\n"),
    ],
)
def test_resolve_overlay(kind: str, rule: sr.Rule, content: bytes, old: bytes, store: bytes, text: str | None) -> None:
    got_store, verdict = sr.resolve(kind, rule, content, old)
    assert got_store == store
    assert verdict.text == text
