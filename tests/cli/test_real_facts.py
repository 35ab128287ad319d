"""Issue 13's behaviours that no real capture shows, on hand-written trees (tests/fixtures/facts.py,
one per fact, each citing it), through the real CLI: discover's table and JSON, `cap --pct`,
`cap --restore` without a journal. The captured cases are in test_real_captures.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import facts
import pytest
from realcaps import UserHost, kernel_modes

from joulectl.cli import common

Cli = Callable[..., Any]


@pytest.fixture(autouse=True)
def _no_nvidia(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULECTL_NVIDIA_TRANSPORT", "smi")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


def _json(cli: Cli, root: Path, *args: str, code: int = 0) -> Any:
    r = cli("--root", root, *args, "-o", "json")
    assert r.exit_code == code, r.stderr
    return json.loads(r.stdout)


def _rows(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["device"], r["status"], r["beforeWatts"], r["targetWatts"], r["afterWatts"]) for r in obj["results"]]


def _read(root: Path, host_path: str) -> str:
    return (root / host_path.lstrip("/")).read_text()


# -- AMD ---------------------------------------------------------------------------------------------


def test_rx9070_defaults_are_power1_cap_default_and_restore_goes_to_them(cli: Cli, root: Path) -> None:
    facts.rx9070_pair(root)
    devs = _json(cli, root, "discover")["status"]["gpu"]["devices"]
    assert [(d["currentCapWatts"], d["capRange"]) for d in devs] == [
        (200, {"maxWatts": 242, "defaultWatts": 220}), (120, {"maxWatts": 334, "defaultWatts": 304})]
    table = cli("--root", root, "discover").stdout
    assert "AMD Radeon RX 9070/9070 XT  200 W  ?–242 W  220 W" in table
    assert "AMD Radeon RX 9070/9070 XT  120 W  ?–334 W  304 W" in table
    # no journal: the stock limits, not the maxima (which would set the cards above stock)
    assert _rows(_json(cli, root, "cap", "--restore")) == [
        ("0000:03:00.0", "applied", 200, 220, 220), ("0000:08:00.0", "applied", 120, 304, 304)]
    assert _read(root, "/sys/bus/pci/devices/0000:08:00.0/hwmon/hwmon2/power1_cap") == "304000000"


def test_rx9070_pct_with_an_unknown_minimum(cli: Cli, root: Path) -> None:
    facts.rx9070_pair(root)
    # power1_cap_min 0 is unknown: the target is 50 % of the maximum, with no minimum to check
    assert _rows(_json(cli, root, "cap", "--pct", "50")) == [
        ("0000:03:00.0", "applied", 200, 121, 121), ("0000:08:00.0", "applied", 120, 167, 167)]


def test_default_missing_or_0_falls_back_to_the_maximum_and_says_so(cli: Cli, root: Path) -> None:
    facts.radeon_without_default(root)
    devs = _json(cli, root, "discover")["status"]["gpu"]["devices"]
    assert [(d["capRange"]["defaultWatts"], d["warnings"]) for d in devs] == [
        (120, ["power1_cap_default is missing: the maximum 120 W stands in as the default"]),
        (120, ["power1_cap_default reads 0: the maximum 120 W stands in as the default"])]
    table = cli("--root", root, "discover").stdout
    assert "  0000:03:00.0: power1_cap_default is missing: the maximum 120 W stands in as the default\n" in table
    assert _rows(_json(cli, root, "cap", "--restore")) == [
        ("0000:03:00.0", "applied", 100, 120, 120), ("0000:08:00.0", "applied", 100, 120, 120)]


def test_pinned_range_blocks_every_other_value_with_the_range(cli: Cli, root: Path) -> None:
    facts.rx7600s_pinned(root)
    (dev,) = _json(cli, root, "discover")["status"]["gpu"]["devices"]
    note = "the power limit range is pinned at 75 W (power1_cap_min = power1_cap_max): no other value can be set"
    assert (dev["capRange"], dev["warnings"]) == ({"minWatts": 75, "maxWatts": 75, "defaultWatts": 75}, [note])
    assert f"  0000:03:00.0: {note}\n" in cli("--root", root, "discover").stdout
    r = cli("--root", root, "cap", "--watts", "60", "-o", "json")
    assert (r.exit_code, r.stderr) == (5, "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n")
    (row,) = json.loads(r.stdout)["results"]
    assert (row["status"], row["message"]) == ("blocked", "60 W is below the minimum 75 W (range 75–75 W)")
    (row,) = _json(cli, root, "cap", "--watts", "90", code=5)["results"]
    assert (row["status"], row["message"]) == ("blocked", "90 W is above the maximum 75 W (range 75–75 W)")
    (row,) = _json(cli, root, "cap", "--pct", "50")["results"]  # 37.5 W raised to the pinned 75 W
    assert (row["status"], row["targetWatts"]) == ("unchanged", 75)
    assert _read(root, "/sys/bus/pci/devices/0000:03:00.0/hwmon/hwmon1/power1_cap") == "75000000\n"


# -- Intel -------------------------------------------------------------------------------------------


def test_i915_rated_max_0_is_unknown_and_blocks_control(cli: Cli, root: Path) -> None:
    facts.arc_i915_rated_max_0(root)
    (dev,) = _json(cli, root, "discover")["status"]["gpu"]["devices"]
    assert (dev["rawModel"], dev["currentCapWatts"], dev["capRange"]) == ("Intel Arc A770", 190, {})
    assert dev["control"] == {"available": False, "reason": "the power limit range of the Intel GPUs is unknown"}
    assert dev["warnings"] == ["power1_rated_max reads 0: the maximum is unknown (not 0 W)"]
    assert "190 W  unknown  -" in cli("--root", root, "discover").stdout
    (row,) = _json(cli, root, "cap", "--pct", "50", code=5)["results"]
    assert (row["status"], row["message"]) == ("blocked", "the power limit range of the Intel GPUs is unknown")
    (row,) = _json(cli, root, "cap", "--restore")["results"]
    assert row["status"] == "skipped"
    assert _read(root, "/sys/bus/pci/devices/0000:03:00.0/hwmon/hwmon1/power1_max") == "190000000\n"


def test_dg2_under_xe_caps_through_power2(cli: Cli, root: Path) -> None:
    facts.arc_dg2_xe(root)
    (dev,) = _json(cli, root, "discover")["status"]["gpu"]["devices"]
    assert (dev["driver"], dev["rawModel"], dev["currentCapWatts"]) == ("xe", "Intel Arc A750", 190)
    assert (dev["capRange"], dev["otherLimitsWatts"]) == ({"maxWatts": 225, "defaultWatts": 225}, {"critical": 400})
    assert "  0000:03:00.0: reports critical 400 W (not the cap joulectl sets)\n" in cli("--root", root,
                                                                                         "discover").stdout
    assert _rows(_json(cli, root, "cap", "--pct", "50")) == [("0000:03:00.0", "applied", 190, 113, 113)]
    assert _read(root, "/sys/bus/pci/devices/0000:03:00.0/hwmon/hwmon1/power2_max") == "113000000"
    assert _rows(_json(cli, root, "cap", "--restore")) == [("0000:03:00.0", "applied", 113, 190, 190)]


# -- RAPL --------------------------------------------------------------------------------------------

PL1 = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"


def test_pl1_4090_w_above_a_95_w_maximum(cli: Cli, root: Path) -> None:
    facts.rapl_desktop_unlimited_pl1(root)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    (zone,) = cpu["zones"]
    assert zone["constraints"] == [
        {"index": 0, "name": "long_term", "limitWatts": 4090, "maxWatts": 95, "timeWindowUs": 27983872},
        {"index": 1, "name": "short_term", "limitWatts": 4090, "timeWindowUs": 2440}]  # max 0: unknown
    assert cpu["capRange"] == {"type": "package", "maxWattsPerSocket": 95}  # no minimum is invented
    note = ("package-0 (intel-rapl:0): PL1 4090 W is above its maximum 95 W (an 'unlimited' setting, not a limit "
            "the package reaches)")
    assert cpu["warnings"] == [note]
    assert f"  {note}\n" in cli("--root", root, "discover").stdout
    assert _rows(_json(cli, root, "cap", "--cpu", "--pct", "50")) == [("intel-rapl:0", "applied", 4090, 48, 48)]
    assert _rows(_json(cli, root, "cap", "--cpu", "--restore")) == [("intel-rapl:0", "applied", 48, 4090, 4090)]
    assert _read(root, PL1) == "4090000000"


def test_empty_max_power_file_is_an_unknown_maximum(cli: Cli, root: Path) -> None:
    facts.rapl_empty_max(root)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert cpu["zones"][0]["constraints"] == [{"index": 0, "name": "long_term", "limitWatts": 65,
                                               "timeWindowUs": 976}]
    assert "capRange" not in cpu
    assert "cap range per socket       unknown\n" in cli("--root", root, "discover").stdout
    (row,) = _json(cli, root, "cap", "--cpu", "--pct", "50", code=5)["results"]
    assert (row["status"], row["message"]) == (
        "blocked", "the maximum power limit is unknown; a percentage cannot be resolved")
    assert _rows(_json(cli, root, "cap", "--cpu", "--watts", "45")) == [("intel-rapl:0", "applied", 65, 45, 45)]


def test_energy_uj_0400_as_a_user_says_energy_needs_root(cli: Cli, root: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    facts.rapl_desktop_unlimited_pl1(root)
    kernel_modes(root)
    monkeypatch.setattr(common.GlobalState, "host", lambda self: UserHost(self.root))
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert (cpu["telemetryAvailable"], cpu["telemetryReason"]) == (
        False, "energy_uj is not readable (EACCES: energy needs root)")
    assert (cpu["zones"][0]["energyReadable"], cpu["zones"][0]["energyReason"]) == (
        False, "EACCES: energy needs root")
    table = cli("--root", root, "discover").stdout
    assert "energy telemetry           no: energy_uj is not readable (EACCES: energy needs root)\n" in table
    assert "intel-rapl:0  package-0  yes        no (EACCES: energy needs root)  long_term" in table


# -- cpufreq -----------------------------------------------------------------------------------------


def test_acpi_cpufreq_with_cpb_reports_max_non_boost(cli: Cli, root: Path) -> None:
    facts.acpi_cpufreq_cpb(root)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert cpu["landmarks"] == {"minFreqMHz": 1550, "maxNonBoostMHz": 3000}  # no maxBoostMHz: not shown
    assert (cpu["turbo"], cpu["driverFamily"]) == (True, "acpi-cpufreq")
    table = cli("--root", root, "discover").stdout
    assert "min / nominal / max                    1550 MHz / - / -\n" in table
    assert "max non-boost (boost clock not shown)  3000 MHz\n" in table
    assert "turbo                                  on\n" in table


def test_amd_pstate_nominal_derived_from_perf_levels(cli: Cli, root: Path) -> None:
    facts.amd_pstate_without_nominal(root, perf=True)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert cpu["landmarks"] == {"minFreqMHz": 400, "nominalFreqMHz": 2413, "maxBoostMHz": 3709,
                                "lowestNonlinearFreqMHz": 1400}  # 3709 x 108 / 166
    note = ("nominal clock 2413 MHz derived from amd_pstate_max_freq x acpi_cppc/nominal_perf / "
            "amd_pstate_highest_perf (no amd_pstate_nominal_freq)")
    assert cpu["warnings"] == [note]
    table = cli("--root", root, "discover").stdout
    assert "min / nominal / max        400 MHz / 2413 MHz / 3709 MHz\n" in table
    assert f"  {note}\n" in table


def test_amd_pstate_without_nominal_or_perf_says_unknown(cli: Cli, root: Path) -> None:
    facts.amd_pstate_without_nominal(root, perf=False)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    # the catalog knows an EPYC 9654 base clock, but the kernel does not say it: unknown
    assert "nominalFreqMHz" not in cpu["landmarks"]
    assert cpu["warnings"] == [
        "nominal clock unknown: no amd_pstate_nominal_freq and no amd-pstate perf levels to derive it from"]
    assert "min / nominal / max        400 MHz / - / 3709 MHz\n" in cli("--root", root, "discover").stdout


def test_base_frequency_is_the_kernels_not_the_marketed_clock(cli: Cli, root: Path) -> None:
    facts.i7_1165g7(root)
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert cpu["landmarks"] == {"minFreqMHz": 400, "nominalFreqMHz": 1200, "maxBoostMHz": 4700}
    assert "min / nominal / max        400 MHz / 1200 MHz / 4700 MHz\n" in cli("--root", root, "discover").stdout


def test_trailing_space_in_governor_and_epp_lists(cli: Cli, root: Path) -> None:
    facts.i7_1165g7(root)
    gov = _json(cli, root, "discover")["status"]["cpu"]["governor"]
    assert gov == {"available": True, "current": ["powersave"], "availableGovernors": ["performance", "powersave"],
                   "epp": ["balance_performance"],
                   "availableEpp": ["default", "performance", "balance_performance", "balance_power", "power"]}
    r = cli("--root", root, "governor", "set", "efficiency", "--cpu", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert {(x["status"], x["after"]) for x in rows} == {("applied", "powersave/power")}
    assert _read(root, "/sys/devices/system/cpu/cpufreq/policy3/energy_performance_preference") == "power"
