"""The Intel GPU governor (i915 and xe GT frequency files) at its edges: a GT with one bound
unreadable, values the kernel never prints, a reset and a show that name what they see.

The files are the drivers' (docs/hardware.md 2.3): xe ``tile<T>/gt<N>/freq0/{min,max,rp0,rpe,rpn,act}_freq``,
i915 ``drm/card<C>/gt/gt<N>/rps_{min,max,RP0,RP1,RPn,act}_freq_mhz``, each holding one decimal number
of MHz and a newline (``"%d\\n"``). The values are the Flex 170's (RPn 300, RPe/RP1 1300, RP0 2050 MHz);
every expected value is written out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulectl.backends import gov_intel
from joulectl.host import Host
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.ops.journal import Journal

BUS = "0000:4d:00.0"
FLEX = "Intel Data Center GPU Flex 170"
XE = {"min": 300, "max": 2050, "rp0": 2050, "rpe": 1300, "rpn": 300, "act": 0}


def _gpu(model: str | None = FLEX, raw: str = FLEX) -> GpuDevice:
    return GpuDevice(index=0, bus_id=BUS, vendor="intel", driver="xe", raw_model=raw, model=model,
                     cap_range=PowerRange(None, 150, 150), current_cap_w=150, control=Control(True))


def _xe(root: Path, gt: str = "gt0", tile: str = "tile0", **values: int | str) -> Path:
    """One xe GT: every value as ``"%d\\n"`` (a str is written as it is: an odd file)."""
    d = root / "sys/bus/pci/devices" / BUS / tile / gt / "freq0"
    d.mkdir(parents=True, exist_ok=True)
    for name, v in {**XE, **values}.items():
        (d / f"{name}_freq").write_text(v if isinstance(v, str) else f"{v}\n")
    return d


def _read(d: Path, name: str) -> str:
    return (d / f"{name}_freq").read_text()


def test_a_gt_with_one_bound_unreadable_is_named_unknown_and_blocked(tmp_path: Path) -> None:
    """A GT whose minimum (or maximum) file reads empty has no known range: before names it
    ``unknown``, not half a range, and no preset is set on it."""
    for which in ("min", "max"):
        root = tmp_path / which
        d = _xe(root, **{which: ""})
        gv = gov_intel.governor(Host(str(root)))
        r = gv.apply([_gpu()], "peak", Journal())[0]
        assert (r.status, r.before, r.message) == (
            Status.BLOCKED, "tile0/gt0 unknown",
            f"tile0/gt0: frequency limits or RP0/RPn unreadable in /sys/bus/pci/devices/{BUS}/tile0/gt0/freq0")
        assert (_read(d, "min"), _read(d, "max")) == (("", "2050\n") if which == "min" else ("300\n", ""))
        assert gv.accepted(_gpu()) == ()


@pytest.mark.parametrize(("text", "mhz"), [
    ("2050\n", 2050),
    ("999999\n", 999999),  # six digits: still a number of MHz
    ("1000000\n", None),  # seven digits, a million MHz or more: no GT clock, unknown
    ("", None),  # empty (a file a killed write truncated)
    ("-1\n", None),  # no negative clock
    ("\u0663\u0660\u0660\n", None),  # "300" in Arabic-Indic digits: str.isdigit takes it, "%d" never prints it
    ("N/A\n", None),
])
def test_a_gt_value_is_a_decimal_number_of_at_most_six_digits(tmp_path: Path, text: str, mhz: int | None) -> None:
    _xe(tmp_path, rp0=text)
    (gt,) = gov_intel.read_gts(Host(str(tmp_path)), _gpu())
    assert (gt.rp0, gt.min_mhz, gt.max_mhz, gt.rpn) == (mhz, 300, 2050, 300)
    assert gt.usable is (mhz is not None)


def test_a_landmark_reading_0_mhz_is_0_mhz(tmp_path: Path) -> None:
    """"0" is a reading (act_freq reads 0 on an idle GT), not a missing value: a GT whose RPn
    (or RP0) reads 0 is taken at its word, low (peak) writes 0."""
    for name, preset in (("rpn", "low"), ("rp0", "peak")):
        root = tmp_path / name
        d = _xe(root, **{name: 0, "min": 300, "max": 2050})
        r = gov_intel.governor(Host(str(root))).apply([_gpu()], preset, Journal())[0]
        assert (r.status, r.after) == (Status.APPLIED, "tile0/gt0 0 MHz")
        assert (_read(d, "min"), _read(d, "max")) == ("0", "0")
    # efficient keeps a minimum in force of 0 MHz (it only lowers a minimum above its ceiling)
    d = _xe(tmp_path / "min0", min=0, rpn=0)
    r = gov_intel.governor(Host(str(tmp_path / "min0"))).apply([_gpu()], "efficient", Journal())[0]
    assert (r.status, r.before, r.after) == (Status.APPLIED, "tile0/gt0 0-2050 MHz", "tile0/gt0 0-1500 MHz")
    assert (_read(d, "min"), _read(d, "max")) == ("0\n", "1500")


def test_a_maximum_lowered_to_the_minimum_in_force_is_written_first() -> None:
    """The writes' order rule: the maximum first unless it goes *below* the minimum in force. A
    maximum lowered exactly onto the minimum in force (1500 MHz) goes first, then the minimum
    (1500 -> 300); both orders keep min <= max, the rule picks one."""
    gt = gov_intel.Gt("tile0/gt0", "/d", gov_intel._XE, 1500, 2050, 2050, 1300, 300, 0)
    assert [(w.which, w.before, w.value) for w in gov_intel._ordered(gt, 300, 1500)] == [
        ("max", 2050, 1500), ("min", 1500, 300)]
    assert [(w.which, w.value) for w in gov_intel._ordered(gt, 300, 1450)] == [("min", 300), ("max", 1450)]
    # a minimum in force that reads nothing (a reset putting both bounds back) is in no maximum's
    # way: the maximum goes first, down to 0 MHz too
    unread = gov_intel.Gt("tile0/gt0", "/d", gov_intel._XE, None, 2050, 2050, 1300, 0, 0)
    assert [(w.which, w.before, w.value) for w in gov_intel._ordered(unread, 0, 0)] == [
        ("max", 2050, 0), ("min", None, 0)]


def test_auto_notes_the_limits_put_back_and_no_preset_of_its_own(tmp_path: Path) -> None:
    """``auto`` puts back what joulectl changed; the journal's history (what the operator reads
    of joulectl's changes) says so, and never that a preset ``auto`` was put in force."""
    _xe(tmp_path)
    gv, journal = gov_intel.governor(Host(str(tmp_path))), Journal()
    assert gv.apply([_gpu()], "efficient", journal)[0].after == "tile0/gt0 300-1500 MHz"
    r = gv.apply([_gpu()], "auto", journal)[0]
    assert (r.status, r.preset, r.after) == (Status.APPLIED, "auto", "tile0/gt0 300-2050 MHz")
    assert [(h["command"], h["setting"], h["value"]) for h in journal.devices[BUS].history] == [
        ("governor", "gtMaxMHz:tile0/gt0", 1500),
        ("governor", "governorPreset", {"preset": "efficient", "status": "applied"}),
        ("governor", "gtMaxMHz:tile0/gt0", 2050),
        ("governor", "governorPreset", None),
        ("governor", "gtMaxMHz:tile0/gt0", 2050),
        ("governor", "*", "restored"),
    ]


def _state(journal: Journal) -> dict[str, object]:
    rec = journal.devices.get(BUS)
    return {} if rec is None else {"original": dict(rec.original), "current": dict(rec.current),
                                   "pending": {k: list(v) for k, v in rec.pending.items()}}


def test_a_reset_puts_back_the_maximum_when_the_minimum_reads_nothing(tmp_path: Path) -> None:
    """efficient lowered the maximum (2050 -> 1500 MHz); the minimum, which joulectl never
    wrote, now reads nothing. The reset still puts the maximum back (the minimum is left as it
    is) instead of calling a 1500 MHz maximum in force and forgetting it."""
    d = _xe(tmp_path)
    gv, journal = gov_intel.governor(Host(str(tmp_path))), Journal()
    assert gv.apply([_gpu()], "efficient", journal)[0].after == "tile0/gt0 300-1500 MHz"
    (d / "min_freq").write_text("")
    dry = gv.undo([_gpu()], journal, dry_run=True)[0]
    assert (dry.status, dry.message, dry.before, dry.after, dry.preset) == (
        Status.PLANNED, "would write 2050 to tile0/gt0 max", "tile0/gt0 unknown", "tile0/gt0 unknown", None)
    r = gv.undo([_gpu()], journal)[0]
    assert (r.status, r.message, r.preset) == (Status.APPLIED, "frequency limits set by joulectl restored", None)
    assert (_read(d, "min"), _read(d, "max")) == ("", "2050")
    assert _state(journal) == {"original": {}, "current": {}, "pending": {}}


def test_a_limit_joulectl_set_from_an_unknown_value_is_forgotten_and_a_dry_run_changes_nothing(
        tmp_path: Path) -> None:
    """A journal whose minimum was set from a value nobody could read (original null) has
    nothing to put back there: the reset leaves that minimum and forgets it, and restores the
    maximum. The dry run before it plans the same and leaves the journal as it was."""
    d = _xe(tmp_path, min=1500, max=1500)
    journal = Journal()
    journal.record(BUS, "gtMinMHz:tile0/gt0", None, 1500, vendor="intel", command="governor")
    journal.record(BUS, "gtMaxMHz:tile0/gt0", 2050, 1500, vendor="intel", command="governor")
    gv, before = gov_intel.governor(Host(str(tmp_path))), _state(journal)
    dry = gv.undo([_gpu()], journal, dry_run=True)[0]
    assert (dry.status, dry.message, dry.after, dry.preset) == (
        Status.PLANNED, "would write 2050 to tile0/gt0 max", "tile0/gt0 1500-2050 MHz", None)
    assert _state(journal) == before
    r = gv.undo([_gpu()], journal)[0]
    assert (r.status, r.after) == (Status.APPLIED, "tile0/gt0 1500-2050 MHz")
    assert (_read(d, "min"), _read(d, "max")) == ("1500\n", "2050")
    assert _state(journal) == {"original": {}, "current": {}, "pending": {}}


def test_a_reset_after_the_operator_moved_every_limit_leaves_them_and_forgets(tmp_path: Path) -> None:
    d = _xe(tmp_path)
    gv, journal = gov_intel.governor(Host(str(tmp_path))), Journal()
    assert gv.apply([_gpu()], "low", journal)[0].after == "tile0/gt0 300 MHz"  # max 2050 -> 300
    (d / "max_freq").write_text("1800\n")
    kept = _state(journal)
    msg = "tile0/gt0 max changed since joulectl set it: left alone"
    dry = gv.undo([_gpu()], journal, dry_run=True)[0]
    assert (dry.status, dry.message, dry.after) == (Status.UNCHANGED, msg, "tile0/gt0 300-1800 MHz")
    assert _state(journal) == kept
    r = gv.undo([_gpu()], journal)[0]
    assert (r.status, r.message, r.after) == (Status.UNCHANGED, msg, "tile0/gt0 300-1800 MHz")
    assert (_read(d, "min"), _read(d, "max")) == ("300\n", "1800\n")
    assert _state(journal) == {"original": {}, "current": {}, "pending": {}}


def test_show_names_the_catalog_model_and_a_preset_entry_lost_with_a_killed_run(tmp_path: Path) -> None:
    """The row's MODEL is the catalog's name (the raw name only without one). A run killed after
    its writes and before its preset entry leaves limits joulectl set and no preset: the row says
    joulectl set them, no preset, status applied (the writes were read back)."""
    _xe(tmp_path, max=1500)
    journal = Journal()
    journal.record(BUS, "gtMaxMHz:tile0/gt0", 2050, 1500, vendor="intel", command="governor")
    gv = gov_intel.governor(Host(str(tmp_path)))
    row = gv.show([_gpu(raw="Intel(R) Data Center GPU Flex 170 [0x56c0]")], journal)[0]
    assert (row.model, row.in_force, row.set_by, row.preset, row.status) == (
        FLEX, "tile0/gt0 300-1500 MHz", "joulectl", None, "applied")
    assert gv.show([_gpu(model=None, raw="Intel GPU 0x56c0")], journal)[0].model == "Intel GPU 0x56c0"
