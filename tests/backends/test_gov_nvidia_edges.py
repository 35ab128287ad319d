"""The NVIDIA governor backend at its edges: a dry-run reset changes nothing, not even the journal."""

from __future__ import annotations

import json
from pathlib import Path

from joulectl.backends import gov_nvidia
from joulectl.host import Host
from joulectl.models import Control, CpuInventory, GpuDevice, HostInfo, NodeInventory, PowerRange, Status
from joulectl.ops.journal import Journal

BUS = "0000:10:00.0"


def _inventory() -> NodeInventory:
    g = GpuDevice(index=0, bus_id=BUS, vendor="nvidia", driver="nvidia", raw_model="NVIDIA H100 80GB HBM3",
                  model="NVIDIA H100 80GB HBM3", cap_range=PowerRange(200, 700, 700), current_cap_w=700,
                  control=Control(True), architecture="hopper")
    cpu = CpuInventory(
        vendor="GenuineIntel", raw_model="Xeon", model="Xeon", catalog_key=None, exactness="generic", sockets=1,
        cores=8, threads=16, driver=None, available_governors=[], governors=[], epp=[], available_epp=[],
        turbo=None, min_mhz=None, nominal_mhz=None, max_mhz=None, zones=[], policies=[],
        cap_range_per_socket=PowerRange(), control=Control(False), telemetry=Control(False),
        governor_control=Control(False), virtual=False)
    return NodeInventory(host=HostInfo("node-a", "6.8.0", False), cpu=cpu, gpus=[g])


def test_a_dry_run_reset_of_a_gpu_without_locks_leaves_the_journal(tmp_path: Path) -> None:
    # the journal names a preset joulectl applied but no clock lock of it is left: a reset drops the
    # preset from the journal, a dry run only says so (kills gov_nvidia.py:309 `has_original and
    # not dry_run` -> `or`)
    journal = Journal()
    journal.record(BUS, "governorPreset", None, {"preset": "efficient", "status": "applied"}, vendor="nvidia",
                   command="governor")
    before = json.dumps(journal.to_dict(), sort_keys=True)
    backend = gov_nvidia.NvidiaGovernor(Host(str(tmp_path)))
    (row,) = backend.undo(_inventory().gpus, journal, dry_run=True)
    assert (row.status, row.message) == (Status.UNCHANGED, "nothing set by joulectl")
    assert json.dumps(journal.to_dict(), sort_keys=True) == before
    backend.undo(_inventory().gpus, journal)
    assert journal.current(BUS, "governorPreset") is None


def test_show_keeps_the_status_the_journal_says_for_a_lock_of_joulectl(tmp_path: Path) -> None:
    # a graphics lock joulectl set and verified earlier ("applied" in the journal) is shown
    # applied, without sampling the clocks again; only an unverified one is checked (kills
    # gov_nvidia.py:351 `status or "applied-unverified"` -> `and`)
    journal = Journal()
    journal.record(BUS, "gpuLockedClocks", None, "1000,1755", vendor="nvidia", command="governor")
    journal.record(BUS, "governorPreset", None, {"preset": "efficient", "status": "applied"}, vendor="nvidia",
                   command="governor")
    backend = gov_nvidia.NvidiaGovernor(Host(str(tmp_path)))
    (row,) = backend.show(_inventory().gpus, journal)
    assert (row.set_by, row.preset, row.status, row.message) == ("joulectl", "efficient", "applied", "")


def test_a_gpu_1_percent_busy_is_busy() -> None:
    # nvidia-smi's utilization.gpu: the percent of time a kernel ran; any time at all is busy, and
    # an unknown utilization is unknown (written after the seed-9174 deciding sample: kills
    # nvidia_clocks.py:86 `> 0` -> `> 1`)
    from joulectl.backends.nvidia_clocks import ClockSample

    assert [ClockSample(1980, 2619, u).busy for u in (0, 1, 100, None)] == [False, True, True, None]


def test_presets_need_both_a_new_enough_gpu_and_its_clock_table() -> None:
    # the governor needs Ampere or newer (nvidia-smi(1): -lmc is "Ampere+") and the supported clocks
    # to choose from: a Hopper GPU whose SUPPORTED_CLOCKS is N/A, and a Turing GPU with a table,
    # get no preset; a Hopper GPU with its table gets the four (in the governor's order), an Ada
    # one no `low` (no -lmc on Ada) (kills gov_nvidia.py:80 `eligibility(...) or not table` -> `and`)
    table = {2619: [1980, 1410, 345], 1593: [1410, 345]}

    def gpu(arch: str, clocks: dict[int, list[int]] | None) -> GpuDevice:
        return GpuDevice(index=0, bus_id=BUS, vendor="nvidia", driver="nvidia", raw_model="NVIDIA GPU",
                         model="NVIDIA GPU", cap_range=PowerRange(200, 700, 700), current_cap_w=700,
                         control=Control(True), architecture=arch, supported_clocks=clocks)

    assert gov_nvidia.presets(gpu("hopper", None)) == ()
    assert gov_nvidia.presets(gpu("hopper", {})) == ()
    assert gov_nvidia.presets(gpu("turing", table)) == ()
    assert gov_nvidia.presets(gpu("hopper", table)) == ("auto", "efficient", "low", "peak")
    assert gov_nvidia.presets(gpu("ada", table)) == ("auto", "efficient", "peak")
