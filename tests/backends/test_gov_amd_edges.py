"""The AMD governor backend at its edges: what ``describe`` names, an unreadable level file, a
preset already in force, a reset after a killed run, the MODEL of a ``governor show`` row.

The sysfs files are the amdgpu ones (docs/hardware.md 1.4-1.5: ``power_dpm_force_performance_level``,
``pp_dpm_sclk`` with ``*`` on the level in use); every expected value is written out.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from joulectl.backends import gov_amd
from joulectl.host import Host
from joulectl.models import Control, CpuInventory, GpuDevice, HostInfo, NodeInventory, PowerRange, Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal

BUS = "0000:10:00.0"
LEVEL = f"/sys/bus/pci/devices/{BUS}/power_dpm_force_performance_level"


def _gpu(model: str | None = "AMD Instinct MI300X", raw: str = "AMD Instinct MI300X OAM") -> GpuDevice:
    return GpuDevice(index=0, bus_id=BUS, vendor="amd", driver="amdgpu", raw_model=raw, model=model,
                     cap_range=PowerRange(0, 750, 750), current_cap_w=750, control=Control(True), perf_level="auto")


def _inventory(g: GpuDevice) -> NodeInventory:
    cpu = CpuInventory(
        vendor="AuthenticAMD", raw_model="AMD EPYC 9654", model="AMD EPYC 9654", catalog_key=None,
        exactness="generic", sockets=1, cores=96, threads=192, driver=None, available_governors=[], governors=[],
        epp=[], available_epp=[], turbo=None, min_mhz=None, nominal_mhz=None, max_mhz=None, zones=[], policies=[],
        cap_range_per_socket=PowerRange(), control=Control(False), telemetry=Control(False),
        governor_control=Control(False), virtual=False)
    return NodeInventory(host=HostInfo("node-a", "6.8.0", False), cpu=cpu, gpus=[g])


def _tree(root: Path, level: str = "auto") -> None:
    d = root / LEVEL.lstrip("/")
    d.parent.mkdir(parents=True, exist_ok=True)
    d.write_text(level + "\n")
    (d.parent / "pp_dpm_sclk").write_text("0: 500Mhz *\n1: 1100Mhz\n2: 1700Mhz\n3: 2100Mhz\n")


@pytest.mark.parametrize(("level", "sclk", "text"), [
    ("manual", "0 1", "manual (sclk levels 0 1)"),
    ("manual", "", "manual"),
    ("manual", None, "manual"),
    ("auto", "0 1", "auto"),  # a mask names levels only under manual (kills gov_amd.py:187 `and` -> `or`)
    ("profile_peak", "0 1", "profile_peak"),
    (None, "0 1", "unknown"),
])
def test_describe(level: str | None, sclk: str | None, text: str) -> None:
    assert gov_amd.describe(level, sclk) == text


def test_a_level_file_that_cannot_be_read_names_why(tmp_path: Path) -> None:
    # a level file that is a directory (not a regular file) names that; an empty one says "empty"
    # (kills gov_amd.py:211 `attr.reason or "empty"` -> `and`)
    _tree(tmp_path)
    level = tmp_path / LEVEL.lstrip("/")
    level.write_text("")
    host = Host(str(tmp_path))
    r = gov.apply_preset(host, _inventory(_gpu()), Journal(), "peak")[0]
    assert (r.status, r.message) == (Status.BLOCKED, f"no performance level control ({LEVEL}: empty)")
    level.unlink()
    level.mkdir()
    r = gov.apply_preset(host, _inventory(_gpu()), Journal(), "peak")[0]
    assert (r.status, r.message) == (Status.BLOCKED, f"no performance level control ({LEVEL}: EISDIR)")


def test_a_level_preset_already_in_force_is_not_written_again(tmp_path: Path) -> None:
    # peak is profile_peak (no sclk mask): the second run finds it in force (kills gov_amd.py:229
    # `not indices or ...` -> `indices or ...`)
    _tree(tmp_path)
    host, journal, inv = Host(str(tmp_path)), Journal(), _inventory(_gpu())
    assert gov.apply_preset(host, inv, journal, "peak")[0].status is Status.APPLIED
    again = gov.apply_preset(host, inv, journal, "peak")[0]
    assert (again.status, again.message, again.before, again.after) == (
        Status.UNCHANGED, "already in force", "profile_peak", "profile_peak")


def test_a_reset_after_a_killed_run_names_the_level_joulectl_set(tmp_path: Path) -> None:
    # joulectl set profile_peak; a later run was killed while setting low (pending); the operator
    # has since set high: a reset leaves it and names profile_peak, what joulectl had set (kills
    # gov_amd.py:290 `ours is not None` -> `is`)
    _tree(tmp_path, level="high")
    journal = Journal()
    journal.record(BUS, "perfLevel", "auto", "profile_peak", vendor="amd", command="governor")
    journal.intend(BUS, "perfLevel", "profile_peak", "low", vendor="amd")
    r = gov.reset(Host(str(tmp_path)), _inventory(_gpu()), journal, cpu=False)[0]
    assert (r.status, r.message) == (
        Status.UNCHANGED, "performance level changed to high since joulectl set profile_peak: left alone")
    assert (tmp_path / LEVEL.lstrip("/")).read_text() == "high\n"


@pytest.mark.parametrize(("model", "shown"), [("AMD Instinct MI300X", "AMD Instinct MI300X"),
                                              (None, "AMD Instinct MI300X OAM")])
def test_a_show_row_names_the_catalog_model_and_the_raw_one_without_it(tmp_path: Path, model: str | None,
                                                                       shown: str) -> None:
    # (kills gov_amd.py:322 `dev.model or dev.raw_model` -> `and`)
    _tree(tmp_path)
    rows, _ = gov.show(Host(str(tmp_path)), _inventory(_gpu(model)), Journal(), gpu=True, cpu=False)
    assert [(r.device, r.model) for r in rows] == [(BUS, shown)]


def test_sclk_levels_are_frozen_values() -> None:
    # pp_dpm_sclk's "N: MHz *" lines (docs/hardware.md 1.5) as values compared and hashed (kills
    # gov_amd.py:60 `@record(frozen=True)` -> `False`)
    levels = gov_amd.parse_sclk("0: 500Mhz\n1: 1100Mhz *\n2: 2100Mhz\n")
    assert [(lv.index, lv.mhz, lv.current) for lv in levels] == [(0, 500, False), (1, 1100, True), (2, 2100, False)]
    assert len(set(levels + gov_amd.parse_sclk("1: 1100Mhz *\n"))) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        levels[0].mhz = 600  # type: ignore[misc]


@pytest.mark.parametrize(("indices", "text"), [
    ([0, 1], "sclk levels 0 1 (500-1100 MHz)"),
    ([0], "sclk levels 0 (500 MHz)"),  # one level: one clock (kills gov_amd.py:124 `mhz[0]` -> `mhz[1]`)
    ([2, 3], "sclk levels 2 3 (2100 MHz)"),  # two levels at one clock
    ([7], "sclk levels 7"),  # a level the table does not list
])
def test_describe_levels(indices: list[int], text: str) -> None:
    levels = gov_amd.parse_sclk("0: 500Mhz *\n1: 1100Mhz\n2: 2100Mhz\n3: 2100Mhz\n")
    assert gov_amd.describe_levels(levels, indices) == text


def test_a_preset_over_efficient_names_the_mask_it_replaces(tmp_path: Path) -> None:
    # efficient leaves manual with levels 0 1 (75 % of 2100 MHz is 1575 MHz); peak over it names that
    # as what was in force (kills gov_amd.py:213 `level_now == "manual"` -> `!=`)
    _tree(tmp_path)
    host, journal, inv = Host(str(tmp_path)), Journal(), _inventory(_gpu())
    gov.apply_preset(host, inv, journal, "efficient")
    peak = gov.apply_preset(host, inv, journal, "peak")[0]
    assert (peak.status, peak.before, peak.after) == (Status.APPLIED, "manual (sclk levels 0 1)", "profile_peak")


def test_efficient_again_after_the_operator_left_manual_is_written_again(tmp_path: Path) -> None:
    # efficient wrote manual with levels 0 1; the operator set auto since and the driver lists the
    # levels: efficient again writes manual and the mask again (kills gov_amd.py:220 the second
    # `and` -> `or`, which took the journaled mask for one in force)
    _tree(tmp_path)
    host, journal, inv = Host(str(tmp_path)), Journal(), _inventory(_gpu())
    gov.apply_preset(host, inv, journal, "efficient")
    _tree(tmp_path, level="auto")
    again = gov.apply_preset(host, inv, journal, "efficient")[0]
    assert again.status in (Status.APPLIED, Status.APPLIED_UNVERIFIED)
    assert (tmp_path / LEVEL.lstrip("/")).read_text().strip() == "manual"


def test_a_reset_after_a_first_run_was_killed_names_the_level_it_was_setting(tmp_path: Path) -> None:
    # the only run of joulectl was killed while setting low (pending, nothing current); the operator
    # has since set high: a reset leaves it and names low (kills gov_amd.py:290 `pending[-1]` ->
    # `pending[-2]`, found after the deciding sample was drawn)
    _tree(tmp_path, level="high")
    journal = Journal()
    journal.intend(BUS, "perfLevel", "auto", "low", vendor="amd")
    r = gov.reset(Host(str(tmp_path)), _inventory(_gpu()), journal, cpu=False)[0]
    assert (r.status, r.message) == (
        Status.UNCHANGED, "performance level changed to high since joulectl set low: left alone")


@pytest.mark.parametrize(("model", "shown"), [("AMD Instinct MI300X", "AMD Instinct MI300X"),
                                              (None, "AMD Instinct MI300X OAM"), ("", "AMD Instinct MI300X OAM")])
def test_a_result_row_names_the_catalog_model_and_the_raw_one_without_it(tmp_path: Path, model: str | None,
                                                                         shown: str) -> None:
    # every governor result row (backends/base.py gpu_result) names the catalog's model, or the
    # raw name the driver gave when the catalog has none (kills base.py:227 `or` -> `and`)
    _tree(tmp_path)
    (row,) = gov_amd.AmdGovernor(Host(str(tmp_path))).apply([_gpu(model)], "peak", Journal())
    assert (row.device, row.model, row.status) == (BUS, shown, Status.APPLIED)


def test_an_undo_is_no_dry_run_unless_asked(tmp_path: Path) -> None:
    # the governor contract (backends/base.py GovernorBackend.undo): `dry_run` defaults to False,
    # so a caller that leaves it out puts back what joulectl changed (kills base.py:208, the
    # DeviceGovernor default `False` -> `True`)
    _tree(tmp_path)
    host, journal = Host(str(tmp_path)), Journal()
    backend = gov_amd.AmdGovernor(host)
    backend.apply([_gpu()], "peak", journal)
    assert (tmp_path / LEVEL.lstrip("/")).read_text() == "profile_peak"
    (row,) = backend.undo([_gpu()], journal)
    assert row.status is Status.APPLIED
    assert (tmp_path / LEVEL.lstrip("/")).read_text() == "auto"


def test_a_plan_journals_ahead_only_what_it_will_write(tmp_path: Path) -> None:
    # the write-ahead intents of a dry run (the plan): from auto, efficient writes the level and
    # the mask (75 % of 2100 MHz is 1575 MHz: levels 0 1); already under manual with another mask,
    # only the mask (kills gov_amd.py:232 `intents is not None` -> `is`, :233 `!=` -> `==`,
    # unreached before: no test planned an AMD preset)
    _tree(tmp_path)
    backend = gov_amd.AmdGovernor(Host(str(tmp_path)))
    (row,), intents = backend.plan([_gpu()], "efficient", Journal())
    assert (row.status, row.message, row.after) == (
        Status.PLANNED, f"would write manual to {LEVEL} and levels 0 1 to pp_dpm_sclk",
        "manual (sclk levels 0 1 (500-1100 MHz), ceiling 1575 MHz)")
    assert [(i.device, i.setting, i.before, i.value) for i in intents] == [
        (BUS, "perfLevel", "auto", "manual"), (BUS, "sclkLevels", None, "0 1")]
    _tree(tmp_path, level="manual")
    journal = Journal()
    journal.record(BUS, "perfLevel", "auto", "manual", vendor="amd", command="governor")
    journal.record(BUS, "sclkLevels", None, "0", vendor="amd", command="governor")
    (row,), intents = backend.plan([_gpu()], "efficient", journal)
    assert (row.status, row.before) == (Status.PLANNED, "manual (sclk levels 0)")
    assert [(i.setting, i.before, i.value) for i in intents] == [("sclkLevels", None, "0 1")]


def test_show_tells_the_operators_level_from_one_changed_since_joulectl(tmp_path: Path) -> None:
    # a level joulectl never set is the operator's; one joulectl set and the operator changed
    # since names what joulectl had set (kills gov_amd.py:329 `and` -> `or`, :342 the dropped `not`)
    _tree(tmp_path, level="high")
    backend = gov_amd.AmdGovernor(Host(str(tmp_path)))
    (row,) = backend.show([_gpu()], Journal())
    assert (row.in_force, row.set_by, row.preset, row.message) == (
        "high", "operator", None, "set by the operator, not by joulectl")
    journal = Journal()
    journal.record(BUS, "perfLevel", "auto", "profile_peak", vendor="amd", command="governor")
    journal.record(BUS, "governorPreset", None, {"preset": "peak", "status": "applied"}, vendor="amd",
                   command="governor")
    (row,) = backend.show([_gpu()], journal)
    assert (row.in_force, row.set_by, row.preset, row.status, row.message) == (
        "high", "operator", None, None, "changed since joulectl set profile_peak")


def test_show_checks_the_sclk_level_only_of_a_mask_left_unverified(tmp_path: Path) -> None:
    # efficient applied and verified (level 0, 500 MHz, in use inside the mask 0 1): show has
    # nothing to verify and says nothing more; a preset without a mask is never checked against
    # one (kills gov_amd.py:332 `and` -> `or`)
    _tree(tmp_path, level="manual")
    journal = Journal()
    journal.record(BUS, "perfLevel", "auto", "manual", vendor="amd", command="governor")
    journal.record(BUS, "sclkLevels", None, "0 1", vendor="amd", command="governor")
    journal.record(BUS, "governorPreset", None, {"preset": "efficient", "status": "applied"}, vendor="amd",
                   command="governor")
    backend = gov_amd.AmdGovernor(Host(str(tmp_path)))
    (row,) = backend.show([_gpu()], journal)
    assert (row.in_force, row.set_by, row.preset, row.status, row.message, row.clocks) == (
        "manual (sclk levels 0 1)", "joulectl", "efficient", "applied", "", "sclk level 0 (500 MHz)")
    journal = Journal()
    journal.record(BUS, "perfLevel", "auto", "profile_peak", vendor="amd", command="governor")
    journal.record(BUS, "governorPreset", None, {"preset": "peak", "status": "applied-unverified"}, vendor="amd",
                   command="governor")
    _tree(tmp_path, level="profile_peak")
    (row,) = backend.show([_gpu()], journal)
    assert (row.set_by, row.preset, row.status, row.message) == ("joulectl", "peak", "applied-unverified", "")
