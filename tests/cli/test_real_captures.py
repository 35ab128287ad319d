"""Each real capture (tests/fixtures/real, copied from shared/real-captures with its SOURCES.md) reads
as the captures' README says, through the real CLI: discover's table and JSON, and the cap runs the
case is about. Expected values are the captured files' values, literally."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from realcaps import UserHost, capture

from joulectl.cli import common

Cli = Callable[..., Any]


@pytest.fixture(autouse=True)
def _no_nvidia(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULECTL_NVIDIA_TRANSPORT", "smi")


def _json(cli: Cli, root: Path, *args: str) -> Any:
    r = cli("--root", root, *args, "-o", "json")
    assert r.exit_code in (0, 5), r.stderr
    return json.loads(r.stdout)


def _gpu(obj: dict[str, Any]) -> dict[str, Any]:
    (dev,) = obj["status"]["gpu"]["devices"]
    return dev  # type: ignore[no-any-return]


def _read(root: Path, host_path: str) -> str:
    return (root / host_path.lstrip("/")).read_text()


# -- amd-rx6600: power1_cap 120 W above power1_cap_default 100 W (the stock limit), max 120 W ---------------

RX6600_HWMON = "/sys/class/hwmon/hwmon4"


def test_rx6600_default_is_power1_cap_default_below_the_cap(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-rx6600", tmp_path / "rx6600")
    dev = _gpu(_json(cli, root, "discover"))
    assert (dev["busId"], dev["driver"], dev["rawModel"]) == (
        "0000:12:00.0", "amdgpu", "AMD Radeon RX 6600/6600 XT/6600M")
    assert dev["capRange"] == {"minWatts": 94, "maxWatts": 120, "defaultWatts": 100}
    assert (dev["currentCapWatts"], dev["powerWatts"], dev["control"]) == (120, 3, {"available": True})
    assert "warnings" not in dev
    table = cli("--root", root, "discover").stdout
    assert ("0      0000:12:00.0  amd       amdgpu    AMD Radeon RX 6600/6600 XT/6600M  120 W  94–120 W  100 W      "
            "3 W      -       holds    yes\n") in table


def test_rx6600_restore_without_a_journal_goes_to_the_stock_100_w(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-rx6600", tmp_path / "rx6600")
    (row,) = _json(cli, root, "cap", "--restore")["results"]
    assert (row["status"], row["beforeWatts"], row["targetWatts"], row["afterWatts"]) == ("applied", 120, 100, 100)
    assert _read(root, f"{RX6600_HWMON}/power1_cap") == "100000000"


def test_rx6600_pct_resolves_against_the_max_and_never_below_the_minimum(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-rx6600", tmp_path / "rx6600")
    (row,) = _json(cli, root, "cap", "--pct", "50")["results"]  # 60 W is under the 94 W minimum
    assert (row["status"], row["targetWatts"], row["afterWatts"]) == ("applied", 94, 94)
    (row,) = _json(cli, root, "cap", "--restore")["results"]  # the journal's 120 W comes first
    assert (row["status"], row["targetWatts"], row["afterWatts"]) == ("applied", 120, 120)


# -- amd-vega56: power1_cap_min reads 0; default 260 W well below max 390 W ---------------------------------

VEGA_HWMON = "/sys/class/hwmon/hwmon4"


def test_vega56_min_0_is_unknown_and_default_is_260_w(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-vega56", tmp_path / "vega")
    dev = _gpu(_json(cli, root, "discover"))
    assert dev["capRange"] == {"maxWatts": 390, "defaultWatts": 260}  # no minWatts: unknown, not 0 W
    assert (dev["currentCapWatts"], dev["rawModel"]) == (260, "AMD Radeon RX Vega 56/64")
    table = cli("--root", root, "discover").stdout
    assert "AMD Radeon RX Vega 56/64  260 W  ?–390 W  260 W" in table


def test_vega56_pct_and_restore(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-vega56", tmp_path / "vega")
    (row,) = _json(cli, root, "cap", "--restore")["results"]  # nothing changed yet: at stock already
    assert (row["status"], row["targetWatts"], row["message"]) == ("unchanged", 260, "already at target")
    (row,) = _json(cli, root, "cap", "--pct", "50")["results"]
    assert (row["status"], row["beforeWatts"], row["targetWatts"], row["afterWatts"]) == ("applied", 260, 195, 195)
    assert _read(root, f"{VEGA_HWMON}/power1_cap") == "195000000"


def test_vega56_default_rewritten_to_the_cap_is_noted_and_the_journal_wins(cli: Cli, tmp_path: Path) -> None:
    # issue 13: some swsmu ASICs rewrite power1_cap_default with the cap in force after a resume or reset
    root = capture("amd-vega56", tmp_path / "vega")
    assert _json(cli, root, "cap", "--watts", "200")["results"][0]["status"] == "applied"
    assert "warnings" not in _gpu(_json(cli, root, "discover"))  # default 260 W still differs from the cap
    (root / VEGA_HWMON.lstrip("/") / "power1_cap_default").write_text("200000000\n")  # the driver's rewrite
    note = ("the default limit reads 200 W, the cap joulectl set: the driver may have rewritten it; "
            "cap --restore goes back to the journal's 260 W")
    dev = _gpu(_json(cli, root, "discover"))
    assert (dev["capRange"]["defaultWatts"], dev["warnings"]) == (200, [note])
    assert f"  0000:0b:00.0: {note}\n" in cli("--root", root, "discover").stdout
    (row,) = _json(cli, root, "cap", "--restore")["results"]
    assert (row["status"], row["targetWatts"], row["afterWatts"]) == ("applied", 260, 260)
    assert _read(root, f"{VEGA_HWMON}/power1_cap") == "260000000"


# -- amd-phoenix-apu: an integrated GPU without power1_cap is not a GPU to count or cap ---------------------


def test_phoenix_apu_is_not_counted_nor_capped(cli: Cli, tmp_path: Path) -> None:
    root = capture("amd-phoenix-apu", tmp_path / "apu")
    gpu = _json(cli, root, "discover")["status"]["gpu"]
    assert (gpu["present"], gpu["count"], gpu["powerDomains"]) == (False, 0, 0)
    assert "GPUs: none found\n" in cli("--root", root, "discover").stdout
    r = cli("--root", root, "cap", "--pct", "50")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "", "joulectl: error: no GPU found on this node\n")


# -- intel-b580-xe: no power1_max; power1_cap (PL2) and power1_crit only: PL1 unknown -----------------------

B580_REASON = ("no PL1 file (power1_max/power2_max): xe shows only power1_cap (PL2) and power1_crit (critical); "
               "PL1 is unknown")


def test_b580_reports_pl2_and_critical_and_blocks_control(cli: Cli, tmp_path: Path) -> None:
    root = capture("intel-b580-xe", tmp_path / "b580")
    dev = _gpu(_json(cli, root, "discover"))
    assert (dev["busId"], dev["driver"], dev["rawModel"]) == ("0000:09:00.0", "xe", "Intel Arc B580")
    assert dev["otherLimitsWatts"] == {"pl2": 190, "critical": 380}
    assert (dev["capRange"], dev["control"]) == ({}, {"available": False, "reason": B580_REASON})
    assert "currentCapWatts" not in dev
    table = cli("--root", root, "discover").stdout
    assert f"Intel Arc B580  -      unknown  -          -        -       holds    no: {B580_REASON}\n" in table
    assert "  0000:09:00.0: reports PL2 190 W, critical 380 W (not the cap joulectl sets)\n" in table


def test_b580_cap_is_blocked_with_the_reason_and_restore_skips(cli: Cli, tmp_path: Path) -> None:
    root = capture("intel-b580-xe", tmp_path / "b580")
    r = cli("--root", root, "cap", "--pct", "50", "-o", "json")
    assert (r.exit_code, r.stderr) == (5, "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n")
    (row,) = json.loads(r.stdout)["results"]
    assert (row["status"], row["message"]) == ("blocked", B580_REASON)
    (row,) = _json(cli, root, "cap", "--restore")["results"]
    assert (row["status"], row["message"]) == ("skipped", f"{B580_REASON}; nothing to restore")
    assert _read(root, "/sys/class/hwmon/hwmon2/power1_cap") == "190000000\n"  # never written


# -- rapl-ux3402za-msr-and-mmio: intel-rapl (MSR, PL1 200 W) and intel-rapl-mmio (PL1 15 W, enforced) ------

MSR_PL1 = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
MMIO_PL1 = "/sys/class/powercap/intel-rapl-mmio:0/constraint_0_power_limit_uw"
BINDS_NOTE = ("package-0: PL1 15 W of intel-rapl-mmio:0 (mmio) binds, the lower beside intel-rapl:0 (msr) PL1 200 W; "
              "cap --cpu writes both")


def test_ux3402za_discover_shows_both_package_zones_and_which_binds(cli: Cli, tmp_path: Path) -> None:
    root = capture("rapl-ux3402za-msr-and-mmio", tmp_path / "ux")
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    zones = {z["id"]: z for z in cpu["zones"]}
    assert list(zones) == ["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl-mmio:0"]
    msr, core, uncore, mmio = zones.values()
    assert [(z["kind"], z["interface"], z.get("binds")) for z in (msr, core, uncore, mmio)] == [
        ("package", "msr", False), ("core", "msr", None), ("uncore", "msr", None), ("package", "mmio", True)]
    # no min_power_uw anywhere (minimum unknown); PL2/PL4 max 0 is unknown; PL4 has no time window
    assert msr["constraints"] == [
        {"index": 0, "name": "long_term", "limitWatts": 200, "maxWatts": 28, "timeWindowUs": 27983872},
        {"index": 1, "name": "short_term", "limitWatts": 44, "timeWindowUs": 2440},
        {"index": 2, "name": "peak_power", "limitWatts": 126}]
    assert mmio["constraints"][0] == {"index": 0, "name": "long_term", "limitWatts": 15, "maxWatts": 28,
                                      "timeWindowUs": 27983872}
    # core and uncore: enabled 0 with limit 0 is off, not a 0 W limit
    assert (core["enabled"], core["constraints"]) == (
        False, [{"index": 0, "name": "long_term", "timeWindowUs": 976, "limitReason": "off (enabled 0)"}])
    assert uncore["constraints"] == [{"index": 0, "name": "long_term", "limitReason": "off (enabled 0)"}]
    assert cpu["capRange"] == {"type": "package", "maxWattsPerSocket": 28}
    assert cpu["warnings"] == [
        "/proc/cpuinfo unreadable (ENOENT)",
        "package-0 (intel-rapl:0): PL1 200 W is above its maximum 28 W (an 'unlimited' setting, not a limit the "
        "package reaches)",
        BINDS_NOTE]
    table = cli("--root", root, "discover").stdout
    assert "intel-rapl:0       package-0  yes          no (ENOENT)  long_term     200 W" in table
    assert "intel-rapl:0:0     core       no           no (ENOENT)  long_term     off (enabled 0)" in table
    assert "intel-rapl-mmio:0  package-0  yes (binds)  no (ENOENT)  long_term     15 W" in table
    assert f"  {BINDS_NOTE}\n" in table
    assert "cap range per socket       ?–28 W\n" in table


def test_ux3402za_cap_cpu_writes_both_pl1_and_reads_both_back(cli: Cli, tmp_path: Path) -> None:
    root = capture("rapl-ux3402za-msr-and-mmio", tmp_path / "ux")
    rows = _json(cli, root, "cap", "--cpu", "--watts", "20")["results"]
    assert [(r["device"], r["status"], r["beforeWatts"], r["targetWatts"], r["afterWatts"]) for r in rows] == [
        ("intel-rapl:0", "applied", 200, 20, 20), ("intel-rapl-mmio:0", "applied", 15, 20, 20)]
    assert (_read(root, MSR_PL1), _read(root, MMIO_PL1)) == ("20000000", "20000000")
    rows = _json(cli, root, "cap", "--cpu", "--pct", "50")["results"]  # 50 % of the 28 W maximum
    assert [(r["device"], r["targetWatts"], r["afterWatts"]) for r in rows] == [
        ("intel-rapl:0", 14, 14), ("intel-rapl-mmio:0", 14, 14)]
    # the restore puts the MSR's 200 W back although it is above the 28 W maximum: it was in force
    rows = _json(cli, root, "cap", "--cpu", "--restore")["results"]
    assert [(r["device"], r["status"], r["targetWatts"], r["afterWatts"]) for r in rows] == [
        ("intel-rapl:0", "applied", 200, 200), ("intel-rapl-mmio:0", "applied", 15, 15)]
    assert (_read(root, MSR_PL1), _read(root, MMIO_PL1)) == ("200000000", "15000000")


def test_ux3402za_a_readback_that_differs_on_one_interface_is_an_error_for_that_zone(
        cli: Cli, tmp_path: Path) -> None:
    root = capture("rapl-ux3402za-msr-and-mmio", tmp_path / "ux")
    mmio = root / MMIO_PL1.lstrip("/")
    mmio.unlink()
    mmio.mkdir()  # a write that cannot land: the MMIO row fails, the MSR row is applied
    r = cli("--root", root, "cap", "--cpu", "--watts", "20", "-o", "json")
    rows = json.loads(r.stdout)["results"]
    assert r.exit_code == 5
    assert [(x["device"], x["status"]) for x in rows] == [("intel-rapl:0", "applied"), ("intel-rapl-mmio:0", "error")]
    assert rows[1]["message"].startswith("EISDIR writing /sys/class/powercap/intel-rapl-mmio:0/constraint_0_power")


# -- cpu-xeon-x7550-4s-legacy: no cpufreq/policyN, per-CPU cpuN/cpufreq (acpi-cpufreq, ondemand) -----------


def test_x7550_legacy_cpufreq_is_read_per_cpu(cli: Cli, tmp_path: Path) -> None:
    root = capture("cpu-xeon-x7550-4s-legacy", tmp_path / "x7550")
    cpu = _json(cli, root, "discover")["status"]["cpu"]
    assert (cpu["sockets"], cpu["totalCores"], cpu["threads"], cpu["driverFamily"]) == (4, 32, 64, "acpi-cpufreq")
    # the lists end with a trailing space in the capture ("ondemand userspace performance \n")
    assert cpu["governor"] == {"available": True, "current": ["ondemand"],
                               "availableGovernors": ["ondemand", "userspace", "performance"], "epp": [],
                               "availableEpp": []}
    assert cpu["landmarks"] == {"minFreqMHz": 1064, "maxBoostMHz": 1996}
    table = cli("--root", root, "discover").stdout
    assert "cpufreq driver             acpi-cpufreq\n" in table
    assert "governor (available)       ondemand (ondemand, userspace, performance)\n" in table
    assert "min / nominal / max        1064 MHz / - / 1996 MHz\n" in table
    assert "governor control           yes\n" in table


def test_x7550_policies_carry_their_per_cpu_directory(tmp_path: Path) -> None:
    from joulectl.backends import cpu
    from joulectl.host import Host

    root = capture("cpu-xeon-x7550-4s-legacy", tmp_path / "x7550")
    policies = cpu.read_policies(Host(str(root)))
    assert [p.name for p in policies] == [f"cpu{i}" for i in range(64)]
    p6 = policies[6]
    assert (p6.path, p6.cpus, p6.layout, p6.governor, p6.cur_khz) == (
        "/sys/devices/system/cpu/cpu6/cpufreq", [6], "legacy", "ondemand", 1064000)


def test_x7550_governor_set_and_reset_write_the_per_cpu_directories(cli: Cli, tmp_path: Path) -> None:
    root = capture("cpu-xeon-x7550-4s-legacy", tmp_path / "x7550")
    gov = "sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor"
    r = cli("--root", root, "governor", "set", "performance", "--cpu", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert len(rows) == 64 and {(x["status"], x["before"], x["after"]) for x in rows} == {
        ("applied", "ondemand", "performance")}
    assert rows[63]["device"] == "cpufreq:cpu63"
    assert {(root / gov.format(i)).read_text() for i in range(64)} == {"performance"}
    assert cli("--root", root, "governor", "reset", "--cpu").exit_code == 0
    assert {(root / gov.format(i)).read_text() for i in range(64)} == {"ondemand"}


def test_x7550_as_a_user_discover_reads_the_same_cpufreq(cli: Cli, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # cpuinfo_cur_freq is 0400: discover reads scaling_cur_freq and needs nothing a user cannot read
    root = capture("cpu-xeon-x7550-4s-legacy", tmp_path / "x7550")
    assert oct((root / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_cur_freq").stat().st_mode & 0o777) == "0o400"
    as_root = _json(cli, root, "discover")["status"]["cpu"]
    monkeypatch.setattr(common.GlobalState, "host", lambda self: UserHost(self.root))
    assert _json(cli, root, "discover")["status"]["cpu"] == as_root
