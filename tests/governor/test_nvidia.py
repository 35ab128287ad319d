"""NVIDIA presets through the ops layer and a fake nvidia-smi in the tree's bin/ (a subprocess)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest
from govkit import (
    H100_TABLE,
    L40S_TABLE,
    bus,
    fake_smi,
    intel_gpu,
    inventory,
    nvidia_gpu,
    set_smi,
    smi_state,
    tick,
)
from pytest_mock import MockerFixture

from joulectl.backends.nvidia_clock_io import NvmlTransport, SmiTransport, transport
from joulectl.backends.nvidia_clocks import (
    ClockLock,
    ClockSample,
    LockPlan,
    PresetBlocked,
    parse_supported_clocks,
    plan_preset,
)
from joulectl.errors import ExitCode, InputError, NoDeviceError
from joulectl.host import Host, ToolResult
from joulectl.models import Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal
from tests.backends.test_nvml import Board, install

H100 = {"NVIDIA H100 80GB HBM3": {"graphicsMHz": 1755}}


def _root(tmp_path: Path, tables: list[dict[int, list[int]]], **kw: bool) -> Path:
    root = tmp_path / "node"
    root.mkdir()
    fake_smi(root, tables, **kw)
    return root


def smi(i: int) -> str:
    """GPU ``i``'s bus id as nvidia-smi prints it, the form ``-i`` is called with (``00000000:10:00.0``)."""
    return f"00000000:{0x10 + i:02X}:00.0"


def _calls(root: Path) -> list[list[str]]:
    return [c for c in smi_state(root)["calls"] if c[:1] == ["-i"]]


# -- clock tables and presets -------------------------------------------------------------------


def test_presets_from_the_h100_table() -> None:
    assert plan_preset(H100_TABLE, "peak") == LockPlan(ClockLock(1980, 1980), None)
    # 75 % of 1980 is 1485: the highest supported clock at or below it
    assert plan_preset(H100_TABLE, "efficient") == LockPlan(ClockLock(345, 1485), None)
    assert plan_preset(H100_TABLE, "auto") == LockPlan(None, None)
    assert plan_preset(H100_TABLE, "sustained", {"graphicsMHz": 1755}) == LockPlan(ClockLock(1755, 1755), None)
    # a clock between two supported ones snaps down
    assert plan_preset(H100_TABLE, "sustained", {"graphicsMHz": 1760}) == LockPlan(ClockLock(1755, 1755), None)


def test_low_memory_clock_bounds_graphics_on_l40s() -> None:
    plan = plan_preset(L40S_TABLE, "low")
    assert plan.memory == ClockLock(405, 405)
    # at 405 MHz memory the L40S offers only graphics clocks up to 645 MHz
    assert plan.graphics == ClockLock(210, 645)


def test_sustained_needs_a_model_entry() -> None:
    with pytest.raises(PresetBlocked, match="no sustained clock for NVIDIA L40S in the model presets"):
        plan_preset(L40S_TABLE, "sustained", None, model="NVIDIA L40S")
    with pytest.raises(PresetBlocked, match="below the lowest supported clock 345 MHz"):
        plan_preset(H100_TABLE, "sustained", {"graphicsMHz": 100})
    with pytest.raises(PresetBlocked, match="memoryMHz 1000 of the model preset is not a supported memory clock"):
        plan_preset(H100_TABLE, "sustained", {"graphicsMHz": 1755, "memoryMHz": 1000})
    assert plan_preset(H100_TABLE, "sustained", {"graphicsMHz": 1755, "memoryMHz": 1593}) == LockPlan(
        ClockLock(1755, 1755), ClockLock(1593, 1593))


def test_no_clock_table_blocks() -> None:
    with pytest.raises(PresetBlocked, match="no supported clocks listed"):
        plan_preset({}, "peak")


def test_supported_clocks_parser_reads_nvidia_smi_text(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE, H100_TABLE])
    tables = SmiTransport(Host(str(root))).supported_clocks([])
    assert tables == {bus(0): L40S_TABLE, bus(1): H100_TABLE}


# -- set ------------------------------------------------------------------------------------------


def test_show_reports_the_sampled_clocks_not_the_inventorys(tmp_path: Path) -> None:
    # discover read 1980 MHz before the lock; show samples again (1485 MHz under the lock, busy):
    # the column is the sample's, with its utilization, not the inventory's older clocks
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    gpu = nvidia_gpu(0)
    gpu.clocks = {"graphics_mhz": 1980, "memory_mhz": 2619}
    inv = inventory([gpu])
    gov.apply_preset(host, inv, journal, "efficient")
    tick(root)
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert rows[0].clocks == "graphics 1485 MHz, memory 2619 MHz, 100 % busy"
    # nothing set by joulectl: no sample is taken, the inventory's clocks are shown
    rows, _ = gov.show(host, inv, Journal(), gpu=True, cpu=False)
    assert rows[0].clocks == "graphics 1980 MHz, memory 2619 MHz"


def test_efficient_locks_graphics_and_is_unverified_until_clocks_move(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE, H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0), nvidia_gpu(1)])
    results = gov.apply_preset(host, inv, journal, "efficient")
    assert [r.status for r in results] == [Status.APPLIED_UNVERIFIED] * 2
    assert results[0].after == "graphics 345-1485 MHz"
    assert results[0].before == "no lock set by joulectl"
    assert "governor show` verifies it" in results[0].message
    assert _calls(root) == [["-i", smi(0), "-lgc", "345,1485"], ["-i", smi(1), "-lgc", "345,1485"]]
    assert journal.current(bus(0), "gpuLockedClocks") == "345,1485"
    assert journal.original(bus(0), "gpuLockedClocks") is None
    assert journal.current(bus(0), "governorPreset") == {"preset": "efficient", "status": "applied-unverified"}
    assert gov.exit_code_for(results) == ExitCode.OK

    # the GPUs still run at 1980 MHz: show cannot verify yet
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert not changed
    assert [r.status for r in rows] == ["applied-unverified"] * 2
    assert rows[0].message == "clocks sampled outside the lock: not verified yet"
    tick(root)
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert changed
    assert [(r.status, r.set_by, r.preset) for r in rows] == [("applied", "joulectl", "efficient")] * 2
    assert rows[0].clocks == "graphics 1485 MHz, memory 2619 MHz, 100 % busy"
    assert journal.current(bus(0), "governorPreset") == {"preset": "efficient", "status": "applied"}


def test_same_preset_again_writes_nothing(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    gov.apply_preset(host, inv, journal, "peak")
    again = gov.apply_preset(host, inv, journal, "peak")
    assert again[0].status == Status.UNCHANGED
    assert len(_calls(root)) == 1


def test_peak_then_low_then_efficient_undoes_the_memory_lock(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0, L40S_TABLE, arch="ada_lovelace", model="NVIDIA L40S")])
    assert gov.apply_preset(host, inv, journal, "low")[0].after == "graphics 210-645 MHz, memory 405 MHz"
    assert smi_state(root)["gpus"][bus(0)]["lmc"] == [405, 405]
    r = gov.apply_preset(host, inv, journal, "efficient")[0]
    assert r.status == Status.APPLIED_UNVERIFIED
    assert r.before == "graphics 210-645 MHz, memory 405 MHz"
    assert _calls(root)[-2:] == [["-i", smi(0), "-lgc", "210,1890"], ["-i", smi(0), "-rmc"]]
    assert not journal.set_by_joulectl(bus(0), "memoryLockedClocks")
    assert smi_state(root)["gpus"][bus(0)]["lmc"] is None


def test_low_on_l40s_memory_clock_bounds_the_clocks_sampled(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0, L40S_TABLE, arch="ada", model="NVIDIA L40S")])
    gov.apply_preset(host, inv, journal, "low")
    tick(root)
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert rows[0].status == "applied"
    assert rows[0].clocks == "graphics 645 MHz, memory 405 MHz, 100 % busy"


def test_ada_lmc_refusal_is_unsupported_and_resets_the_lgc(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE], lmc_unsupported=True)
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0, L40S_TABLE, arch="ada_lovelace", model="NVIDIA L40S")])
    r = gov.apply_preset(host, inv, journal, "low")[0]
    assert r.status == Status.UNSUPPORTED
    assert r.message == (
        f"memory clock lock: Setting locked memory clocks is not supported for GPU 0000{bus(0).upper()}; "
        "graphics lock set by joulectl undone"
    )
    assert _calls(root) == [["-i", smi(0), "-lgc", "210,645"], ["-i", smi(0), "-lmc", "405,405"],
                            ["-i", smi(0), "-rgc"]]
    assert smi_state(root)["gpus"][bus(0)]["lgc"] is None
    assert journal.devices[bus(0)].current == {}
    assert gov.exit_code_for([r]) == ExitCode.PARTIAL


def test_unprivileged_nvidia_smi_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, [H100_TABLE, H100_TABLE])
    monkeypatch.setenv("HWEMU_UNPRIVILEGED", "1")
    journal = Journal()
    results = gov.apply_preset(Host(str(root)), inventory([nvidia_gpu(0), nvidia_gpu(1)]), journal, "peak")
    assert [r.status for r in results] == [Status.REFUSED] * 2
    assert results[0].message == "graphics clock lock: insufficient permissions"
    assert journal.devices == {}
    assert gov.exit_code_for(results) == ExitCode.REFUSED
    report = gov.GovernorReport("set", "node-a", "peak", results=results)
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.REFUSED
    assert str(err) == "no privilege to write: every write was refused (2 devices)"


def test_tool_failure_is_an_error(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    set_smi(root, bus(0), table={"2619": [1980]})
    dev = nvidia_gpu(0)
    dev.bus_id = "0000:99:00.0"  # a GPU the tool does not know
    r = gov.apply_preset(Host(str(root)), inventory([dev]), Journal(), "peak")[0]
    assert r.status == Status.ERROR
    assert r.message == "graphics clock lock: nvidia-smi failed (exit 6): No devices were found"


def test_missing_tool_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    root.mkdir()
    r = gov.apply_preset(Host(str(root)), inventory([nvidia_gpu(0)]), Journal(), "peak")[0]
    assert r.status == Status.ERROR
    assert r.message.startswith("graphics clock lock: nvidia-smi not found in ")


def test_pre_ampere_and_unknown_architecture_are_blocked(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE, H100_TABLE])
    t4 = nvidia_gpu(0, arch="turing", model="Tesla T4")
    mystery = nvidia_gpu(1, arch=None, model="NVIDIA Mystery 9000")
    results = gov.apply_preset(Host(str(root)), inventory([t4, mystery]), Journal(), "efficient")
    assert [r.status for r in results] == [Status.BLOCKED, Status.BLOCKED]
    assert results[0].message == "no governor for Turing GPUs: clock locks need Ampere or newer"
    assert results[1].message == "GPU architecture unknown: clock locks need Ampere or newer"
    assert _calls(root) == []
    assert gov.exit_code_for(results) == ExitCode.PARTIAL


def test_architecture_from_the_catalog_when_discover_has_none(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    r = gov.apply_preset(Host(str(root)), inventory([nvidia_gpu(0, arch=None)]), Journal(), "peak")[0]
    assert r.status == Status.APPLIED_UNVERIFIED


def test_sustained_blocked_without_model_presets_applied_with(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    r = gov.apply_preset(host, inv, journal, "sustained")[0]
    assert (r.status, r.message) == (
        Status.BLOCKED, "no sustained clock for NVIDIA H100 80GB HBM3 in the model presets (--model-presets FILE)")
    # keys match without GFD suffixes and case
    r = gov.apply_preset(host, inv, journal, "sustained",
                         model_presets={"nvidia h100 80GB HBM3-MIG-1g.10gb": {"graphicsMHz": 1755}})[0]
    assert (r.status, r.after) == (Status.APPLIED_UNVERIFIED, "graphics 1755 MHz")
    assert _calls(root) == [["-i", smi(0), "-lgc", "1755,1755"]]


def test_clock_table_fetched_when_discover_has_none(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE])
    inv = inventory([nvidia_gpu(0, arch="ada", model="NVIDIA L40S", with_table=False)])
    r = gov.apply_preset(Host(str(root)), inv, Journal(), "low")[0]
    assert r.after == "graphics 210-645 MHz, memory 405 MHz"
    assert ["-q", "-d", "SUPPORTED_CLOCKS"] in smi_state(root)["calls"]


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    root = _root(tmp_path, [L40S_TABLE])
    journal = Journal()
    inv = inventory([nvidia_gpu(0, L40S_TABLE, arch="ada", model="NVIDIA L40S")])
    r = gov.apply_preset(Host(str(root)), inv, journal, "low", dry_run=True)[0]
    assert r.status == Status.PLANNED
    assert r.message == "would lock graphics 210-645 MHz, lock memory 405 MHz via nvidia-smi"
    assert r.after == "graphics 210-645 MHz, memory 405 MHz"
    assert _calls(root) == []
    assert journal.devices == {}


def test_application_clocks_are_never_used(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    for preset in ("peak", "efficient", "low", "auto"):
        gov.apply_preset(host, inv, journal, preset)
    gov.apply_preset(host, inv, journal, "sustained", model_presets=H100)
    gov.reset(host, inv, journal, cpu=False)
    flags = {a for call in smi_state(root)["calls"] for a in call}
    assert not flags & {"-ac", "-rac", "--auto-boost-default", "--applications-clocks"}


# -- auto and reset ---------------------------------------------------------------------------------


def test_auto_resets_only_joulectl_locks(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE, H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0), nvidia_gpu(1)])
    gov.apply_preset(host, inv, journal, "low", selectors=["0"])
    results = gov.apply_preset(host, inv, journal, "auto")
    assert [r.status for r in results] == [Status.APPLIED, Status.UNCHANGED]
    assert results[0].message == "locks set by joulectl reset"
    assert results[1].message == "no lock set by joulectl"
    assert _calls(root)[-2:] == [["-i", smi(0), "-rgc"], ["-i", smi(0), "-rmc"]]
    assert journal.devices[bus(0)].current == {}


def test_a_hand_set_lock_survives_reset(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE, H100_TABLE])
    host, journal = Host(str(root)), Journal()
    set_smi(root, bus(0), lgc=[1000, 1200])  # the operator's own nvidia-smi -lgc
    inv = inventory([nvidia_gpu(0), nvidia_gpu(1)])
    gov.apply_preset(host, inv, journal, "peak", selectors=["1"])
    results = gov.reset(host, inv, journal, cpu=False)
    assert [(r.device, r.status, r.message) for r in results] == [
        (bus(0), Status.UNCHANGED, "nothing set by joulectl"),
        (bus(1), Status.APPLIED, "graphics locks set by joulectl undone"),
    ]
    assert smi_state(root)["gpus"][bus(0)]["lgc"] == [1000, 1200]
    assert smi_state(root)["gpus"][bus(1)]["lgc"] is None
    assert [c for c in _calls(root) if c[1] == bus(0)] == []


def test_an_operator_lock_discover_reads_is_reported_and_restored(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    set_smi(root, bus(0), lgc=[1000, 1200])
    dev = nvidia_gpu(0)
    dev.clocks["locked_graphics"] = [1000, 1200]
    inv = inventory([dev])
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert (r.status, r.message) == (Status.UNCHANGED, "graphics clocks locked by the operator, not by joulectl: "
                                                       "left alone")
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].set_by, rows[0].in_force) == ("operator", "graphics 1000-1200 MHz")
    # joulectl overrides it on request, and reset puts the operator's lock back
    gov.apply_preset(host, inv, journal, "peak")
    assert journal.original(bus(0), "gpuLockedClocks") == "1000,1200"
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert r.status == Status.APPLIED
    assert _calls(root)[-1] == ["-i", smi(0), "-lgc", "1000,1200"]
    assert smi_state(root)["gpus"][bus(0)]["lgc"] == [1000, 1200]


def test_reset_dry_run_and_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    gov.apply_preset(host, inv, journal, "low")
    r = gov.reset(host, inv, journal, cpu=False, dry_run=True)[0]
    assert (r.status, r.message) == (Status.PLANNED, "would undo joulectl's memory and graphics locks")
    monkeypatch.setenv("HWEMU_UNPRIVILEGED", "1")
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert (r.status, r.message) == (Status.REFUSED, "memory clock reset: insufficient permissions")
    assert journal.set_by_joulectl(bus(0), "memoryLockedClocks")


def test_no_gpu_and_unmatched_device(tmp_path: Path) -> None:
    with pytest.raises(NoDeviceError, match="no GPU found on this node"):
        gov.apply_preset(Host(str(tmp_path)), inventory([]), Journal(), "peak")
    with pytest.raises(NoDeviceError, match="--device 7 matched no GPU"):
        gov.apply_preset(Host(str(tmp_path)), inventory([nvidia_gpu(0)]), Journal(), "peak", selectors=["7"])


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(InputError) as e:
        gov.apply_preset(Host("/tmp"), inventory([]), Journal(), "turbo")
    assert str(e.value) == "PRESET: unknown GPU preset 'turbo' (GPU presets: auto, sustained, efficient, low, peak)"
    with pytest.raises(InputError, match="unknown CPU preset 'peak' \\(CPU presets: performance, balanced, "
                                         "efficiency\\)"):
        gov.apply_preset(Host("/tmp"), inventory([]), Journal(), "peak", gpu=False, cpu=True)


def test_accepted_presets_per_gpu(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    ctx = gov.new_context(Host(str(root)))
    assert gov.accepted_presets(nvidia_gpu(0), ctx, None) == ("auto", "efficient", "low", "peak")
    assert gov.accepted_presets(nvidia_gpu(0), ctx, H100) == ("auto", "sustained", "efficient", "low", "peak")
    assert gov.accepted_presets(nvidia_gpu(0, arch="volta"), ctx, H100) == ()
    assert gov.accepted_presets(intel_gpu(1), ctx, H100) == ()


def test_a_lock_lost_in_a_reboot_is_set_again(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    gov.apply_preset(host, inventory([nvidia_gpu(0)]), journal, "efficient")
    # the next cron run: discover reads the clocks inside the lock -> nothing written
    dev = nvidia_gpu(0)
    dev.clocks.update(graphics_mhz=1485, memory_mhz=2619)
    r = gov.apply_preset(host, inventory([dev]), journal, "efficient")[0]
    assert (r.status, r.message) == (
        Status.UNCHANGED, "already set; a lock cannot be read back: `joulectl governor show` verifies it")
    assert len(_calls(root)) == 1
    # after a reboot the GPU boosts to 1980 MHz again: the journal's lock is gone and is set again
    dev.clocks.update(graphics_mhz=1980)
    r = gov.apply_preset(host, inventory([dev]), journal, "efficient")[0]
    assert r.status == Status.APPLIED_UNVERIFIED
    assert _calls(root)[-1] == ["-i", smi(0), "-lgc", "345,1485"]
    assert journal.original(bus(0), "gpuLockedClocks") is None


def test_locks_from_an_earlier_boot_are_set_again(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    boot = root / "proc/sys/kernel/random/boot_id"
    boot.parent.mkdir(parents=True)
    boot.write_text("11111111-2222-3333-4444-555555555555\n")
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    gov.apply_preset(host, inv, journal, "peak")
    assert journal.current(bus(0), "governorPreset")["bootId"] == "11111111-2222-3333-4444-555555555555"
    assert gov.apply_preset(host, inv, journal, "peak")[0].status == Status.UNCHANGED
    boot.write_text("99999999-2222-3333-4444-555555555555\n")  # rebooted: every lock is gone
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].in_force, rows[0].message) == (
        "no lock set by joulectl", "the lock joulectl set was lost in a reboot: run `joulectl governor set` again")
    r = gov.apply_preset(host, inv, journal, "peak")[0]
    assert r.status == Status.APPLIED_UNVERIFIED
    assert _calls(root) == [["-i", smi(0), "-lgc", "1980,1980"]] * 2
    assert journal.current(bus(0), "governorPreset")["bootId"] == "99999999-2222-3333-4444-555555555555"


def test_refused_leaves_joulectl_locks_in_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    gov.apply_preset(host, inv, journal, "efficient")
    monkeypatch.setenv("HWEMU_UNPRIVILEGED", "1")
    r = gov.apply_preset(host, inv, journal, "peak")[0]
    assert (r.status, r.message, r.after) == (Status.REFUSED, "graphics clock lock: insufficient permissions",
                                              "graphics 345-1485 MHz")
    assert _calls(root)[-1] == ["-i", smi(0), "-lgc", "1980,1980"]  # no reset attempted
    assert journal.current(bus(0), "gpuLockedClocks") == "345,1485"
    assert journal.current(bus(0), "governorPreset")["preset"] == "efficient"


def test_an_idle_gpu_does_not_verify_a_lock(tmp_path: Path) -> None:
    root = _root(tmp_path, [H100_TABLE])
    host, journal = Host(str(root)), Journal()
    inv = inventory([nvidia_gpu(0)])
    gov.apply_preset(host, inv, journal, "efficient")
    set_smi(root, bus(0), sm=345, util=0)  # idle at its lowest clock: inside any lock, proving nothing
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].status, rows[0].message, changed) == (
        "applied-unverified", "GPU idle: the lock is verified by a sample under load", False)
    assert rows[0].clocks == "graphics 345 MHz, memory 2619 MHz, 0 % busy"
    set_smi(root, bus(0), sm=1485, util=87)
    rows, changed = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].status, changed) == ("applied", True)


def test_an_overflowing_clock_sample_reads_as_unknown(tmp_path: Path) -> None:
    """A 400-digit clock in the ``--query-gpu`` sample is unknown (was OverflowError, float inf)."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\necho '00000000:1A:00.0, {'9' * 400}, 2619 MHz, 37'\n")
    tool.chmod(0o755)
    out = SmiTransport(Host(str(tmp_path))).sample_clocks([])
    assert out == {"0000:1a:00.0": ClockSample(None, 2619, 37)}


# -- the transports against nvidia-smi's own words and NVML's errors (written for the survivors of
# the 2 December backends/ mutation sample, docs/TESTING.md; each seen failing on its mutant)


class _CannedSmi(Host):
    """A host whose nvidia-smi prints ``out`` and exits ``code``."""

    def __init__(self, root: str, out: str, code: int = 0) -> None:
        super().__init__(root)
        self.out, self.code = out, code

    def run(self, argv: Any, *, timeout: float | None = None) -> ToolResult:
        self.tool_calls.append(tuple(argv))
        return ToolResult(tuple(argv), self.code, self.out, "", 0.0)


def test_a_clock_lock_nvidia_smi_says_it_set_is_applied_unverified(tmp_path: Path) -> None:
    # nvidia-smi -lgc prints 'GPU clocks set to "(gpuClkMin MIN, gpuClkMax MAX)" for GPU <bus id>'
    # and 'All done.', exit 0 (public -lgc transcripts, the message table's gpu-clocks-set row): the
    # lock is set, to be verified by a read-back (mutant backends/nvidia_clock_io.py:73, `verdict.
    # status is not Status.APPLIED` -> `is`: reported as failed with exit 0)
    host = _CannedSmi(str(tmp_path), 'GPU clocks set to "(gpuClkMin 1980, gpuClkMax 1980)" for GPU 00000000:10:00.0\n'
                      "All done.\n")
    out = SmiTransport(host).lock(nvidia_gpu(0), "graphics", ClockLock(1980, 1980))
    assert (out.status, out.message) == (Status.APPLIED_UNVERIFIED, "")
    assert host.tool_calls == [("nvidia-smi", "-i", "00000000:10:00.0", "-lgc", "1980,1980")]


def test_a_clock_sample_without_the_utilization_column_is_kept(tmp_path: Path) -> None:
    # three cells (bus id, SM and memory clock): the clocks are read, the utilization unknown
    # (mutant backends/nvidia_clock_io.py:105, `len(cells) < 3` -> `<= 3`: the line dropped)
    host = _CannedSmi(str(tmp_path), "00000000:1A:00.0, 1980, 2619\n")
    assert SmiTransport(host).sample_clocks([]) == {"0000:1a:00.0": ClockSample(1980, 2619, None)}


def test_a_clock_table_line_ahead_of_every_gpu_belongs_to_none() -> None:
    # `nvidia-smi -q -d SUPPORTED_CLOCKS` starts with a log header (Timestamp, Driver Version,
    # Attached GPUs: "key : value" lines) before the first "GPU <bus id>" section: a line there that
    # reads like a clock belongs to no GPU (mutant backends/nvidia_clocks.py:147, `or` -> `and`:
    # it was taken, and raised)
    text = ("==============NVSMI LOG==============\n\nTimestamp : Wed Dec  2 00:00:00 2026\n"
            "Driver Version : 550.54.15\nMemory : 2619 MHz\nAttached GPUs : 1\nGPU 00000000:1A:00.0\n"
            "    Supported Clocks\n        Memory : 2619 MHz\n            Graphics : 1980 MHz\n"
            "            Graphics : 345 MHz\n")
    assert parse_supported_clocks(text) == {"0000:1a:00.0": {2619: [1980, 345]}}


@pytest.mark.parametrize(("code", "status"), [
    ("NVML_ERROR_INVALID_ARGUMENT", Status.BLOCKED),   # nvml.ERROR_STATUS: a lock outside the range
    ("NVML_ERROR_UNKNOWN", Status.ERROR),              # anything else: an error
])
def test_an_nvml_clock_lock_that_fails_keeps_its_status(mocker: MockerFixture, code: str, status: Status) -> None:
    # mutant backends/nvidia_clock_io.py:145 (`e.status != Status.BLOCKED` -> `==`: the two swapped)
    install(mocker, [Board("00000000:10:00.0")])
    mocker.patch("pynvml.nvmlDeviceSetGpuLockedClocks", autospec=True,
                 side_effect=pynvml.NVMLError(getattr(pynvml, code)))
    out = NvmlTransport().lock(nvidia_gpu(0), "graphics", ClockLock(1980, 1980))
    assert out.status is status
    assert out.message.startswith("graphics clock lock: NVML: nvmlDeviceSetGpuLockedClocks: ")


@pytest.mark.parametrize(("env", "kind"), [
    ({"JOULECTL_NVIDIA_TRANSPORT": "smi"}, SmiTransport),  # forced: NVML is never tried
    ({}, NvmlTransport),                                  # a live host where NVML initialises
])
def test_the_forced_smi_transport_holds_on_a_live_host(mocker: MockerFixture, env: dict[str, str],
                                                       kind: type) -> None:
    # the root "/" (nothing is read or written there: only the choice is made); mutant
    # backends/nvidia_clock_io.py:212 (`forced is None and host.is_live` -> `or`: NVML despite smi)
    mocks = install(mocker, [Board("00000000:10:00.0")])
    host = Host("/", env=env)
    assert host.is_live
    assert type(transport(host)) is kind
    assert mocks["init"].call_count == (kind is NvmlTransport)
