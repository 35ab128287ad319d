"""AMD presets: power_dpm_force_performance_level and pp_dpm_sclk in hand-written sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from govkit import EACCES, EBUSY, EINVAL, EIO, EOPNOTSUPP, EPERM, EROFS, amd_gpu, amd_tree, bus, inventory
from hostdoubles import FaultyHost

from joulectl.backends import gov_amd
from joulectl.errors import ExitCode
from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal

LEVEL = "power_dpm_force_performance_level"


def _dev_dir(root: Path, i: int) -> Path:
    return root / "sys" / "bus" / "pci" / "devices" / bus(i)


def _level(root: Path, i: int) -> str:
    return (_dev_dir(root, i) / LEVEL).read_text().strip()


@pytest.mark.parametrize(("preset", "level"), [("auto", "auto"), ("peak", "profile_peak"), ("low", "low"),
                                                ("sustained", "profile_standard")])
def test_level_presets(tmp_path: Path, preset: str, level: str) -> None:
    amd_tree(tmp_path, 0, level="manual" if preset == "auto" else "auto")
    journal = Journal()
    r = gov.apply_preset(Host(str(tmp_path)), inventory([amd_gpu(0)]), journal, preset)[0]
    assert (r.status, r.after, r.message) == (Status.APPLIED, level, "")
    assert _level(tmp_path, 0) == level
    assert journal.current(bus(0), "perfLevel") == level
    assert journal.current(bus(0), "governorPreset") == {"preset": preset, "status": "applied"}


def test_efficient_writes_manual_and_the_levels_under_75_percent(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0, sclk_mhz=(500, 1100, 1700, 2100))
    host, journal = Host(str(tmp_path)), Journal()
    inv = inventory([amd_gpu(0)])
    r = gov.apply_preset(host, inv, journal, "efficient")[0]
    # 75 % of 2100 MHz is 1575 MHz: levels 0 and 1
    assert r.after == "manual (sclk levels 0 1 (500-1100 MHz), ceiling 1575 MHz)"
    assert _level(tmp_path, 0) == "manual"
    assert journal.current(bus(0), "sclkLevels") == "0 1"
    # a plain file holds the mask until the driver (the emulator) lists the levels again
    assert (_dev_dir(tmp_path, 0) / "pp_dpm_sclk").read_text() == "0 1"
    assert r.status == Status.APPLIED_UNVERIFIED
    assert gov.apply_preset(host, inv, journal, "efficient")[0].status == Status.UNCHANGED
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].status, changed) == ("applied-unverified", False)
    amd_tree(tmp_path, 0, level="manual", sclk_mhz=(500, 1100, 1700, 2100), current=1)
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].status, rows[0].set_by, rows[0].preset, changed) == ("applied", "joulectl", "efficient", True)
    assert rows[0].in_force == "manual (sclk levels 0 1)"
    assert rows[0].clocks == "sclk level 1 (1100 MHz)"
    assert journal.current(bus(0), "governorPreset") == {"preset": "efficient", "status": "applied"}
    # in force: nothing is written again
    again = gov.apply_preset(host, inv, journal, "efficient")[0]
    assert again.status == Status.UNCHANGED


def test_efficient_level_in_use_inside_mask_is_applied_at_once(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0, sclk_mhz=(500, 1100, 1700, 2100), current=0)

    class DriverHost(Host):
        """pp_dpm_sclk reads as the level table after a write, as the kernel's does."""

        def write(self, host_path: str, value: str) -> None:
            if host_path.endswith("pp_dpm_sclk"):
                return
            super().write(host_path, value)

    r = gov.apply_preset(DriverHost(str(tmp_path)), inventory([amd_gpu(0)]), Journal(), "efficient")[0]
    assert (r.status, r.message) == (Status.APPLIED, "")


def test_efficient_ceiling_whole_mhz_and_never_below_lowest() -> None:
    levels = gov_amd.parse_sclk("0: 500Mhz\n1: 1575Mhz *\n2: 2101Mhz\n")
    assert gov_amd.efficient_levels(levels) == ([0, 1], 1575)  # 1575.75 rounds down
    levels = gov_amd.parse_sclk("0: 1800Mhz *\n1: 2000Mhz\n")
    assert gov_amd.efficient_levels(levels) == ([0], 1800)  # 1500 < lowest level: the lowest


def test_no_perf_level_file_or_sclk_levels_blocks(tmp_path: Path) -> None:
    r = gov.apply_preset(Host(str(tmp_path)), inventory([amd_gpu(0)]), Journal(), "peak")[0]
    assert r.status == Status.BLOCKED
    assert r.message == f"no performance level control (/sys/bus/pci/devices/{bus(0)}/{LEVEL}: missing)"
    amd_tree(tmp_path, 0)
    (_dev_dir(tmp_path, 0) / "pp_dpm_sclk").unlink()
    r = gov.apply_preset(Host(str(tmp_path)), inventory([amd_gpu(0)]), Journal(), "efficient")[0]
    assert (r.status, r.message) == (Status.BLOCKED, f"no sclk levels in /sys/bus/pci/devices/{bus(0)}/pp_dpm_sclk")


@pytest.mark.parametrize(("err", "status"), [(EINVAL, Status.UNSUPPORTED), (EOPNOTSUPP, Status.UNSUPPORTED),
                                             (EBUSY, Status.UNSUPPORTED), (EACCES, Status.REFUSED),
                                             (EPERM, Status.REFUSED), (EROFS, Status.REFUSED),
                                             (EIO, Status.ERROR)])
def test_driver_errnos(tmp_path: Path, err: int, status: Status) -> None:
    amd_tree(tmp_path, 0)
    journal = Journal()
    r = gov.apply_preset(FaultyHost(str(tmp_path), {LEVEL: err}), inventory([amd_gpu(0)]), journal, "peak")[0]
    assert r.status == status
    import errno as errno_mod
    name = errno_mod.errorcode[err]
    assert r.message.startswith(f"writing profile_peak to /sys/bus/pci/devices/{bus(0)}/{LEVEL}: {name}: ")
    assert journal.devices == {}
    assert _level(tmp_path, 0) == "auto"


def test_refused_everywhere_is_exit_4(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0)
    amd_tree(tmp_path, 1)
    results = gov.apply_preset(FaultyHost(str(tmp_path), {LEVEL: EACCES}),
                               inventory([amd_gpu(0), amd_gpu(1)]), Journal(), "low")
    assert gov.exit_code_for(results) == ExitCode.REFUSED


def test_sclk_refusal_puts_the_level_back(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0, level="auto")
    journal = Journal()
    r = gov.apply_preset(FaultyHost(str(tmp_path), {"pp_dpm_sclk": EINVAL}), inventory([amd_gpu(0)]), journal,
                         "efficient")[0]
    assert r.status == Status.UNSUPPORTED
    assert r.message == (f"writing levels 0 1 to /sys/bus/pci/devices/{bus(0)}/pp_dpm_sclk: EINVAL: Invalid "
                         "argument; performance level put back to auto")
    assert _level(tmp_path, 0) == "auto"
    assert not journal.set_by_joulectl(bus(0), "perfLevel")


def test_readback_mismatch_is_an_error(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0)

    class StubbornHost(Host):
        def write(self, host_path: str, value: str) -> None:
            super().write(host_path, "auto\n")

    r = gov.apply_preset(StubbornHost(str(tmp_path)), inventory([amd_gpu(0)]), Journal(), "low")[0]
    assert (r.status, r.message) == (
        Status.ERROR, f"/sys/bus/pci/devices/{bus(0)}/{LEVEL} reads back auto after writing low")


def test_mi250x_secondary_die_gets_its_own_level(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0)
    amd_tree(tmp_path, 1)
    primary = amd_gpu(0, model="AMD Instinct MI250X")
    secondary = amd_gpu(1, model="AMD Instinct MI250X")
    secondary.holds_limit, secondary.primary_bus_id = False, primary.bus_id
    results = gov.apply_preset(Host(str(tmp_path)), inventory([primary, secondary]), Journal(), "low")
    assert [r.status for r in results] == [Status.APPLIED, Status.APPLIED]
    assert _level(tmp_path, 1) == "low"


def test_reset_restores_joulectl_levels_and_leaves_the_operators(tmp_path: Path) -> None:
    amd_tree(tmp_path, 0, level="auto")
    amd_tree(tmp_path, 1, level="profile_min_sclk")  # set by hand before joulectl ran
    amd_tree(tmp_path, 2, level="auto")
    host, journal = Host(str(tmp_path)), Journal()
    inv = inventory([amd_gpu(0), amd_gpu(1), amd_gpu(2)])
    gov.apply_preset(host, inv, journal, "efficient", selectors=["0"])
    gov.apply_preset(host, inv, journal, "peak", selectors=["2"])
    (_dev_dir(tmp_path, 2) / LEVEL).write_text("high\n")  # the operator changed it since
    dry = gov.reset(host, inv, journal, cpu=False, dry_run=True)
    assert dry[0].status == Status.PLANNED
    assert _level(tmp_path, 0) == "manual"
    results = gov.reset(host, inv, journal, cpu=False)
    assert [(r.status, r.message) for r in results] == [
        (Status.APPLIED, "performance level set by joulectl restored"),
        (Status.UNCHANGED, "performance level profile_min_sclk locked by the operator, not by joulectl: left alone"),
        (Status.UNCHANGED, "performance level changed to high since joulectl set profile_peak: left alone"),
    ]
    assert [_level(tmp_path, i) for i in range(3)] == ["auto", "profile_min_sclk", "high"]
    assert all(not rec.current for rec in journal.devices.values())
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert [r.set_by for r in rows] == [None, "operator", "operator"]


def test_accepted_presets_amd() -> None:
    assert gov.accepted_presets(amd_gpu(0, sclk=[500, 2100]), None, None) == (
        "auto", "sustained", "efficient", "low", "peak")
    assert gov.accepted_presets(amd_gpu(0, level=None), None, None) == ()


def test_reset_restores_a_level_a_killed_write_left_empty(tmp_path: Path) -> None:
    """A plain file truncated by a run killed inside its write reads empty: that is no operator's
    level, so reset writes the original back (the kill -9 reliability test hit it)."""
    amd_tree(tmp_path, 0, level="high")
    host, journal = Host(str(tmp_path)), Journal()
    inv = inventory([amd_gpu(0)])
    gov.apply_preset(host, inv, journal, "peak")
    (_dev_dir(tmp_path, 0) / LEVEL).write_text("")
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert (r.status, r.message, r.after) == (Status.APPLIED, "performance level set by joulectl restored", "high")
    assert _level(tmp_path, 0) == "high"
