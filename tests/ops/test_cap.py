"""ops.cap against test doubles of the backend contract: resolution, statuses, journal, exit codes.

The doubles implement ``set_caps`` the way the contract says (write, read back, map errnos);
end-to-end tests against rendered nodes and the real fake tools are in test_cap_e2e.py.
"""

from __future__ import annotations

import errno
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from joulectl.backends.base import WriteOutcome
from joulectl.errors import ExitCode, InputError, JoulectlError, LockBusyError, NoDeviceError
from joulectl.host import Host, HostIOError
from joulectl.models import (
    Control,
    CpuInventory,
    DeviceResult,
    GpuDevice,
    HostInfo,
    NodeInventory,
    PowercapConstraint,
    PowercapZone,
    PowerRange,
    Status,
)
from joulectl.ops import journal as journal_mod
from joulectl.ops.cap import CapSetting, Deps, build_request, execute, resolve_target
from joulectl.ops.lock import node_lock

# -- doubles ----------------------------------------------------------------------------------


def gpu(i: int, *, vendor: str = "nvidia", max_w: float = 700, min_w: float | None = 200,
        cap: float | None = 700, holds: bool = True, primary: str | None = None,
        control: Control | None = None, model: str = "H100-SXM5-80GB", default: float | None = None) -> GpuDevice:
    return GpuDevice(
        index=i, bus_id=f"0000:{0x10 + i:02x}:00.0", vendor=vendor,
        driver={"nvidia": "nvidia", "amd": "amdgpu", "intel": "i915"}[vendor], raw_model=model, model=model,
        cap_range=PowerRange(min_w, max_w, default if default is not None else max_w), current_cap_w=cap,
        holds_limit=holds, primary_bus_id=primary, control=control or Control(True),
    )


def zone(i: int, *, limit: float | None = 250, max_w: float | None = 350, min_w: float | None = 0,
         locked: bool = False, has_pl1: bool = True) -> PowercapZone:
    cons = []
    if has_pl1:
        cons.append(PowercapConstraint(0, "long_term", limit, min_w, max_w, 1000000,
                                       f"/sys/class/powercap/intel-rapl:{i}/constraint_0_power_limit_uw",
                                       "ENODATA" if locked else None))
    return PowercapZone(path=f"/sys/class/powercap/intel-rapl:{i}", zone_id=f"intel-rapl:{i}",
                        name=f"package-{i}", kind="package", socket=i, enabled=not locked,
                        energy_readable=True, energy_uj=0, max_energy_range_uj=None, constraints=cons)


def inventory(gpus: list[GpuDevice], zones: list[PowercapZone] | None = None, *, hostname: str = "node-a",
              virtual: bool = False) -> NodeInventory:
    cpu = CpuInventory(
        vendor="intel", raw_model="Xeon", model="Xeon Platinum 8480+", catalog_key=None, exactness="generic",
        sockets=2, cores=112, threads=224, driver=None, available_governors=[], governors=[], epp=[],
        available_epp=[], turbo=None, min_mhz=None, nominal_mhz=None, max_mhz=None, zones=zones or [],
        policies=[], cap_range_per_socket=PowerRange(), control=Control(bool(zones), None if zones else
                                                                           "no powercap zone"),
        telemetry=Control(False), governor_control=Control(False), virtual=virtual,
    )
    return NodeInventory(host=HostInfo(hostname, None, virtual), cpu=cpu, gpus=gpus)


#: SPEC §4 "Errors", written out here rather than taken from joulectl's status_for_errno (whose own
#: table is pinned by tests/backends/test_errno_status.py): no privilege -> refused, EINVAL (and
#: ENODATA, a constraint locked by firmware; ERANGE) -> blocked, not supported -> unsupported,
#: anything else -> error. An errno missing here fails the test that uses it.
ERRNO_STATUS = {
    errno.EACCES: Status.REFUSED, errno.EPERM: Status.REFUSED, errno.EROFS: Status.REFUSED,
    errno.EINVAL: Status.BLOCKED, errno.ENODATA: Status.BLOCKED, errno.ERANGE: Status.BLOCKED,
    errno.EOPNOTSUPP: Status.UNSUPPORTED, errno.EBUSY: Status.UNSUPPORTED, errno.ENOSYS: Status.UNSUPPORTED,
    errno.EIO: Status.ERROR, errno.ENXIO: Status.ERROR,
}
#: What the NVIDIA backend says of a GPU whose limits nvidia-smi prints as tokens (backends/nvidia.py).
NA_RANGE = "the power limit range is unknown (the driver reports N/A): no settable power limit"


@dataclass
class FakeWriter:
    """A backend double: keeps the limit per device, writes, reads back, maps errnos (ERRNO_STATUS)."""

    values: dict[str, float] = field(default_factory=dict)
    fail: dict[str, int] = field(default_factory=dict)  # device -> errno
    clamp: dict[str, float] = field(default_factory=dict)  # device -> value the hardware keeps
    calls: list[list[tuple[str, float]]] = field(default_factory=list)

    def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]:
        self.calls.append([(_key(o), w) for o, w in requests])
        out = []
        for obj, watts in requests:
            key = _key(obj)
            if key in self.fail:
                err = self.fail[key]
                out.append(WriteOutcome(key, ERRNO_STATUS[err], f"{key}: {errno.errorcode[err]}"))
                continue
            self.values[key] = self.clamp.get(key, watts)
            back = self.values[key]
            if back != watts:
                out.append(WriteOutcome(key, Status.ERROR, f"{key}: read back {back:g} W", back))
            else:
                out.append(WriteOutcome(key, Status.APPLIED, "", back))
        return out


def _key(obj: Any) -> str:
    return obj.bus_id if isinstance(obj, GpuDevice) else obj.zone_id


@dataclass
class Node:
    """A fake node: its inventory reflects what the writers hold, as a re-discovery would."""

    gpus: list[GpuDevice]
    zones: list[PowercapZone] = field(default_factory=list)
    hostname: str = "node-a"
    virtual: bool = False
    writer: FakeWriter = field(default_factory=FakeWriter)
    inventories: int = 0
    gpu_details_asked: list[bool] = field(default_factory=list)
    governor_calls: list[tuple[str, bool, bool]] = field(default_factory=list)
    governor_error: Exception | None = None

    def inventory(self, host: Host, *, gpus: bool = True, cpu: bool = True,
                  node_name: str | None = None, gpu_details: bool = True) -> NodeInventory:
        self.inventories += 1
        self.gpu_details_asked.append(gpu_details)
        devs = []
        for g in self.gpus:
            if g.bus_id in self.writer.values:
                g.current_cap_w = self.writer.values[g.bus_id]
            devs.append(g)
        zs = []
        for z in self.zones:
            lt = z.long_term
            if lt is not None and z.zone_id in self.writer.values:
                z.constraints = [PowercapConstraint(lt.index, lt.name, self.writer.values[z.zone_id], lt.min_w,
                                                    lt.max_w, lt.time_window_us, lt.limit_path, lt.limit_reason)]
            zs.append(z)
        inv = inventory(devs if gpus else [], zs, hostname=node_name or self.hostname, virtual=self.virtual)
        return inv

    def apply_preset(self, host: Host, inv: NodeInventory, journal: journal_mod.Journal, preset: str, *,
                     gpu: bool = True, cpu: bool = False, selectors: tuple[str, ...] = (),
                     dry_run: bool = False, model_presets: dict[str, Any] | None = None) -> list[DeviceResult]:
        self.governor_calls.append((preset, gpu, cpu))
        if self.governor_error is not None:
            raise self.governor_error
        return [DeviceResult(device=g.bus_id, vendor=g.vendor, model=g.model, status=Status.APPLIED_UNVERIFIED,
                             preset=preset, kind="gpu") for g in inv.gpus]

    def deps(self) -> Deps:
        w = self.writer
        return Deps(inventory=self.inventory, writers={"nvidia": w, "amd": w, "intel": w, "cpu": w},
                    apply_preset=self.apply_preset)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    root = tmp_path / "root"
    root.mkdir()
    return Host(str(root))


def run(host: Host, node: Node, **flags: Any) -> Any:
    return execute(host, build_request(**flags), node.deps())


def journal_of(host: Host) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(host.path(journal_mod.JOURNAL_PATH)).read_text())
    return data


# -- resolution -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "min_w", "max_w", "expect"),
    [
        (CapSetting(pct=60), 200, 700, 420),
        (CapSetting(pct=10), 200, 700, 200),  # max(pct × max, min)
        (CapSetting(pct=60), 100, 350, 210),
        (CapSetting(pct=33.3), None, 150, 50),  # 49.95 rounds half away from zero to 50
        (CapSetting(pct=100), 0, 560, 560),
        (CapSetting(pct=10), 100.4, 300, 101),  # never below a fractional minimum
        (CapSetting(watts=300.5), 100, 700, 301),
    ],
)
def test_resolve_target(setting: CapSetting, min_w: float | None, max_w: float, expect: float) -> None:
    assert resolve_target(setting, min_w, max_w) == (expect, None)


def test_resolve_target_out_of_range_names_the_range() -> None:
    assert resolve_target(CapSetting(watts=800), 200, 700) == (
        800, "800 W is above the maximum 700 W (range 200–700 W)")
    assert resolve_target(CapSetting(watts=150), 200, 700) == (
        150, "150 W is below the minimum 200 W (range 200–700 W)")
    assert resolve_target(CapSetting(pct=50), 1, None)[1] == (
        "the maximum power limit is unknown; a percentage cannot be resolved")


# -- flags ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"pct": 0}, "--pct: must be in (0, 100], got 0"),
        ({"pct": 100.5}, "--pct: must be in (0, 100], got 100.5"),
        ({"pct": -5}, "--pct: must be in (0, 100], got -5"),
        # the value as given, not :g's rounding (1e+06) nor its 6 digits ("got 100" for 100.0000001)
        ({"pct": 1000000}, "--pct: must be in (0, 100], got 1000000"),
        ({"pct": 1000000.0}, "--pct: must be in (0, 100], got 1000000"),
        ({"pct": 100.0000001}, "--pct: must be in (0, 100], got 100.0000001"),
        ({"pct": 1e20}, "--pct: must be in (0, 100], got 1e+20"),
        ({"watts": 0.5}, "--watts: must be at least 1 W, got 0.5"),
        ({}, "cap: give exactly one of --watts, --pct, --restore, --from-twin, --schedule (got none)"),
        ({"pct": 50, "watts": 300},
         "cap: give exactly one of --watts, --pct, --restore, --from-twin, --schedule (got --watts --pct)"),
        ({"pct": 50, "at": "2026-01-01T00:00"}, "--at: only applies with --schedule"),
        ({"pct": 50, "any_node": True}, "--any-node: only applies with --from-twin"),
        ({"pct": 50, "cpu": True, "gpu": True}, "target: give at most one of --gpu, --cpu, --all (got --gpu --cpu)"),
        ({"pct": 50, "cpu": True, "selectors": ["0"]}, "--device: selects GPUs and cannot be combined with --cpu"),
    ],
)
def test_bad_flags_are_input_errors(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as exc:
        build_request(**flags)
    assert str(exc.value) == message
    assert exc.value.exit_code == ExitCode.USAGE


# -- GPU caps ---------------------------------------------------------------------------------


def test_pct_caps_every_gpu_in_one_batch_and_journals(host: Host) -> None:
    node = Node([gpu(i) for i in range(8)])
    report = run(host, node, pct=60)
    assert [r.status for r in report.results] == [Status.APPLIED] * 8
    assert {(r.before_w, r.target_w, r.after_w) for r in report.results} == {(700, 420, 420)}
    assert node.inventories == 1
    assert len(node.writer.calls) == 1 and len(node.writer.calls[0]) == 8
    assert report.exit_code == ExitCode.OK
    j = journal_of(host)
    rec = j["devices"]["0000:10:00.0"]
    assert rec["original"] == {"capWatts": 700} and rec["current"] == {"capWatts": 420}
    assert report.to_dict()["summary"]["applied"] == 8


def test_pct_resolves_per_device_on_a_mixed_node(host: Host) -> None:
    node = Node([gpu(0), gpu(1, max_w=350, min_w=100, cap=350, model="L40S")])
    report = run(host, node, pct=60)
    assert [r.target_w for r in report.results] == [420, 210]


def test_out_of_range_blocks_only_that_device(host: Host) -> None:
    node = Node([gpu(0), gpu(1, max_w=350, min_w=100, cap=350, model="L40S")])
    report = run(host, node, watts=500)
    assert [r.status for r in report.results] == [Status.APPLIED, Status.BLOCKED]
    assert report.results[1].message == "500 W is above the maximum 350 W (range 100–350 W)"
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.PARTIAL
    assert str(err) == "1 of 2 targets done; 1 blocked (see MESSAGE)"


def test_below_min_is_blocked(host: Host) -> None:
    node = Node([gpu(0)])
    report = run(host, node, watts=150)
    assert report.results[0].status is Status.BLOCKED
    assert report.results[0].message == "150 W is below the minimum 200 W (range 200–700 W)"
    assert node.writer.calls == []
    assert report.exit_code == ExitCode.PARTIAL  # all blocked is partial too


def test_already_at_target_is_unchanged_and_not_written(host: Host) -> None:
    node = Node([gpu(0, cap=420), gpu(1)])
    report = run(host, node, pct=60)
    assert [r.status for r in report.results] == [Status.UNCHANGED, Status.APPLIED]
    assert node.writer.calls == [[("0000:11:00.0", 420.0)]]
    assert report.exit_code == ExitCode.OK


def test_second_identical_run_writes_nothing(host: Host) -> None:
    node = Node([gpu(i) for i in range(2)])
    run(host, node, pct=60)
    mtime = Path(host.path(journal_mod.JOURNAL_PATH)).stat().st_mtime_ns
    report = run(host, node, pct=60)
    assert {r.status for r in report.results} == {Status.UNCHANGED}
    assert len(node.writer.calls) == 1
    assert Path(host.path(journal_mod.JOURNAL_PATH)).stat().st_mtime_ns == mtime


def test_secondary_die_is_skipped(host: Host) -> None:
    node = Node([gpu(0, vendor="amd", max_w=560, min_w=0, cap=560, model="MI250X"),
                 gpu(1, vendor="amd", max_w=560, min_w=0, cap=0, holds=False, primary="0000:10:00.0",
                     model="MI250X")])
    report = run(host, node, pct=60)
    assert report.results[0].status is Status.APPLIED and report.results[0].target_w == 336
    assert report.results[1].status is Status.SKIPPED
    assert report.results[1].message == "limited through primary 0000:10:00.0"
    assert node.writer.calls == [[("0000:10:00.0", 336.0)]]
    assert report.exit_code == ExitCode.OK


def test_token_limits_and_unknown_intel_range_are_blocked_with_the_backend_reason(host: Host) -> None:
    node = Node([
        gpu(0),
        gpu(1, max_w=None, min_w=None, cap=None,  # type: ignore[arg-type]
            control=Control(False, NA_RANGE)),
        gpu(2, vendor="intel", max_w=None, min_w=None, cap=150, model="Flex 170",  # type: ignore[arg-type]
            control=Control(False, "the power limit range of the Intel GPUs is unknown")),
    ])
    report = run(host, node, pct=60)
    assert [r.status for r in report.results] == [Status.APPLIED, Status.BLOCKED, Status.BLOCKED]
    assert report.results[1].message == (
        "the power limit range is unknown (the driver reports N/A): no settable power limit")
    assert report.results[2].message == "the power limit range of the Intel GPUs is unknown"
    assert report.exit_code == ExitCode.PARTIAL


def test_every_write_refused_is_exit_4_with_a_hint(host: Host) -> None:
    node = Node([gpu(0), gpu(1), gpu(2, cap=0, holds=False, primary="0000:10:00.0")])
    node.writer.fail = {"0000:10:00.0": errno.EACCES, "0000:11:00.0": errno.EPERM}
    report = run(host, node, pct=60)
    assert [r.status for r in report.results] == [Status.REFUSED, Status.REFUSED, Status.SKIPPED]
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.REFUSED
    assert str(err) == "no privilege to write: every write was refused (2 devices)"
    assert err.hint == "run as root (sudo joulectl cap ...)"
    assert not Path(host.path(journal_mod.JOURNAL_PATH)).exists()


def test_some_refused_is_partial(host: Host) -> None:
    node = Node([gpu(0), gpu(1)])
    node.writer.fail = {"0000:10:00.0": errno.EACCES}
    report = run(host, node, pct=60)
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.PARTIAL
    assert str(err) == "1 of 2 targets done; 1 refused (see MESSAGE)"


def test_clamped_readback_is_an_error_and_journaled(host: Host) -> None:
    node = Node([gpu(0, vendor="intel", max_w=150, min_w=None, cap=150, model="Flex 170")])
    node.writer.clamp = {"0000:10:00.0": 95}
    report = run(host, node, watts=60)
    r = report.results[0]
    assert r.status is Status.ERROR and r.after_w == 95 and "0000:10:00.0" in r.message
    # the hardware changed: the journal keeps what was in force before
    assert journal_of(host)["devices"]["0000:10:00.0"]["original"] == {"capWatts": 150}


def test_a_readback_10_mw_from_the_cap_before_is_a_change_and_journaled(host: Host) -> None:
    # SAME_W: two caps *closer* than 10 mW are the same value. A device that read 10 mW (sysfs
    # 10000 uW) and holds 20 mW after a refused write has changed by exactly 10 mW (0.02 - 0.01 is
    # exactly 0.01 in binary floating point): the change is journaled, 10 mW as the original
    # (kills ops/cap.py:620 `_same`: `abs(a - b) < SAME_W` -> `<=`)
    node = Node([gpu(0, vendor="amd", max_w=300, min_w=None, cap=0.01, model="MI210")])
    node.writer.clamp = {"0000:10:00.0": 0.02}
    report = run(host, node, watts=100)
    r = report.results[0]
    assert (r.status, r.before_w, r.target_w, r.after_w) == (Status.ERROR, 0.01, 100, 0.02)
    rec = journal_of(host)["devices"]["0000:10:00.0"]
    assert rec["original"] == {"capWatts": 0.01} and rec["current"] == {"capWatts": 0.02}


def test_backend_exception_fails_its_rows_only(host: Host) -> None:
    class Broken:
        def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]:
            raise OSError("tool vanished")

    node = Node([gpu(0), gpu(1, vendor="amd", max_w=750, min_w=0, cap=750, model="MI300X")])
    deps = node.deps()
    deps.writers = {"nvidia": Broken(), "amd": node.writer}
    report = execute(host, build_request(pct=60), deps)
    assert [r.status for r in report.results] == [Status.ERROR, Status.APPLIED]
    assert report.results[0].message == "nvidia backend failed: tool vanished"


class OwnNames:
    """A backend double whose outcomes name the devices its own way (``gpu0``, ``gpu1``): ``keep``
    of them, in the order of the requests."""

    def __init__(self, keep: int) -> None:
        self.keep = keep

    def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]:
        return [WriteOutcome(f"gpu{i}", Status.APPLIED, "", w) for i, (_, w) in enumerate(requests)][:self.keep]


def test_outcomes_under_other_names_are_taken_in_order_only_when_there_is_one_per_write(host: Host) -> None:
    # one outcome per request, named otherwise: the i-th is the i-th device's; fewer than the
    # requests: a device no outcome names got none and is an error, never another's (kills
    # ops/cap.py:723 `len(outcomes) == len(batch)` -> `!=`)
    node = Node([gpu(0), gpu(1)])
    deps = node.deps()
    deps.writers = {"nvidia": OwnNames(keep=2)}
    report = execute(host, build_request(watts=300), deps)
    assert [(r.device, r.status, r.after_w) for r in report.results] == [
        ("0000:10:00.0", Status.APPLIED, 300), ("0000:11:00.0", Status.APPLIED, 300)]
    deps.writers = {"nvidia": OwnNames(keep=1)}
    report = execute(host, build_request(watts=250), deps)
    assert [(r.device, r.status, r.message) for r in report.results] == [
        ("0000:10:00.0", Status.ERROR, "nvidia backend reported nothing for 0000:10:00.0"),
        ("0000:11:00.0", Status.ERROR, "nvidia backend reported nothing for 0000:11:00.0")]


def test_dry_run_writes_nothing_not_even_the_journal_or_the_lock(host: Host) -> None:
    node = Node([gpu(0), gpu(1, cap=420)])
    report = run(host, node, pct=60, dry_run=True)
    assert [r.status for r in report.results] == [Status.PLANNED, Status.UNCHANGED]
    assert report.results[0].message == "would set 420 W"
    assert report.results[0].before_w == 700 and report.results[0].target_w == 420
    assert node.writer.calls == []
    assert not Path(host.path("/var/lib/joulectl")).exists()
    assert not Path(host.path("/run/joulectl")).exists()
    assert report.exit_code == ExitCode.OK and report.to_dict()["dryRun"] is True
    assert report.warnings == []  # no journal yet is no problem


def test_dry_run_reports_a_journal_it_cannot_read(host: Host) -> None:
    path = Path(host.path(journal_mod.JOURNAL_PATH))
    path.mkdir(parents=True)  # reading it fails with EISDIR
    report = run(host, Node([gpu(0)]), pct=60, dry_run=True)
    assert report.warnings == ["cannot read the journal /var/lib/joulectl/state.json: Is a directory"]
    assert report.results[0].status is Status.PLANNED


def test_device_selection(host: Host) -> None:
    node = Node([gpu(0), gpu(1), gpu(2)])
    report = run(host, node, pct=60, selectors=["1", "0000:12:00.0"])
    assert [r.device for r in report.results] == ["0000:11:00.0", "0000:12:00.0"]
    with pytest.raises(NoDeviceError) as exc:
        run(host, node, pct=60, selectors=["A100"])
    assert str(exc.value) == "--device A100 matched no GPU (this node has 3 GPUs)"


def _inventory_recorded(node: Node) -> tuple[Any, list[tuple[bool, bool]]]:
    """``node``'s deps whose inventory records what each call asked for: (GPUs, CPU)."""
    calls: list[tuple[bool, bool]] = []

    def inventory(host: Host, *, gpus: bool = True, cpu: bool = True, node_name: str | None = None,
                  gpu_details: bool = True) -> NodeInventory:
        calls.append((gpus, cpu))
        return node.inventory(host, gpus=gpus, cpu=cpu, node_name=node_name, gpu_details=gpu_details)

    deps = node.deps()
    deps.inventory = inventory
    return deps, calls


@pytest.mark.parametrize(("flags", "asked"), [
    ({"pct": 60}, (True, False)),  # SPEC §4: the target defaults to the GPUs
    ({"pct": 60, "gpu": True}, (True, False)),
    ({"watts": 200, "cpu": True}, (False, True)),
    ({"watts": 200, "all_": True}, (True, True)),
    ({"restore": True, "cpu": True}, (False, True)),
])
def test_the_inventory_is_asked_for_the_targets_of_the_run_only(host: Host, flags: dict[str, Any],
                                                                asked: tuple[bool, bool]) -> None:
    # one inventory, of the GPUs, the CPU or both as the flags say: a CPU cap does not query
    # nvidia-smi, a GPU cap does not read powercap (kills ops/cap.py:115 `wants_cpu`'s `or` -> `and`)
    deps, calls = _inventory_recorded(Node([gpu(0)], [zone(0)]))
    execute(host, build_request(dry_run=True, **flags), deps)
    assert calls == [asked]


def test_no_gpu_is_exit_3(host: Host) -> None:
    node = Node([], [zone(0)])
    with pytest.raises(NoDeviceError) as exc:
        run(host, node, pct=60)
    assert str(exc.value) == "no GPU found on this node"
    assert exc.value.exit_code == ExitCode.NO_DEVICE


# -- CPU caps ---------------------------------------------------------------------------------


def test_cpu_pct_of_constraint_max(host: Host) -> None:
    node = Node([], [zone(0), zone(1)])
    report = run(host, node, pct=60, cpu=True)
    assert [(r.device, r.target_w, r.status) for r in report.results] == [
        ("intel-rapl:0", 210, Status.APPLIED), ("intel-rapl:1", 210, Status.APPLIED)]
    assert report.results[0].kind == "cpu"


def test_a_cpu_row_names_the_cpu_model_and_the_zone_only_without_one(host: Host) -> None:
    # the row's MODEL is the CPU's (the raw /proc/cpuinfo "model name" first), and the zone's name
    # ("package-0") only when the node reports no CPU model; its VENDOR the CPU's, "cpu" when unknown
    # (kills ops/cap.py:656 `model or zone.name` -> `and`, `vendor or "cpu"` -> `and`)
    named = Node([], [zone(0)])
    report = run(host, named, watts=200, cpu=True, dry_run=True)
    assert [(r.device, r.vendor, r.model) for r in report.results] == [("intel-rapl:0", "intel", "Xeon")]

    def unnamed_inventory(host: Host, **kw: Any) -> NodeInventory:
        inv = Node.inventory(unnamed, host, **kw)
        inv.cpu.vendor = inv.cpu.raw_model = inv.cpu.model = None
        return inv

    unnamed = Node([], [zone(0)])
    deps = unnamed.deps()
    deps.inventory = unnamed_inventory
    report = execute(host, build_request(watts=200, cpu=True, dry_run=True), deps)
    assert [(r.device, r.vendor, r.model) for r in report.results] == [("intel-rapl:0", "cpu", "package-0")]

    def catalog_only_inventory(host: Host, **kw: Any) -> NodeInventory:
        inv = Node.inventory(unnamed, host, **kw)
        inv.cpu.raw_model = None
        return inv

    deps.inventory = catalog_only_inventory  # no raw model: the catalog's name (ops/cap.py:891 `or`)
    report = execute(host, build_request(watts=200, cpu=True, dry_run=True), deps)
    assert [r.model for r in report.results] == ["Xeon Platinum 8480+"]


def test_cpu_locked_constraint_is_blocked(host: Host) -> None:
    node = Node([], [zone(0, locked=True), zone(1)])
    report = run(host, node, watts=200, cpu=True)
    assert report.results[0].status is Status.BLOCKED
    assert report.results[0].message == "limit locked by firmware"
    assert report.results[1].status is Status.APPLIED
    assert report.exit_code == ExitCode.PARTIAL


def test_cpu_energy_only_zone_is_blocked(host: Host) -> None:
    node = Node([], [zone(0, has_pl1=False)])
    report = run(host, node, pct=60, cpu=True)
    assert report.results[0].status is Status.BLOCKED
    assert report.results[0].message == "package-0 has no long_term (PL1) constraint: the zone reports energy only"


def test_cpu_on_a_vm_is_exit_3(host: Host) -> None:
    node = Node([], [], virtual=True)
    with pytest.raises(NoDeviceError) as exc:
        run(host, node, pct=60, cpu=True)
    assert str(exc.value) == ("no powercap package zone (RAPL) on this node: a virtual machine (the hypervisor "
                              "exposes no RAPL)")
    with pytest.raises(NoDeviceError) as exc2:
        run(host, Node([], []), pct=60, cpu=True)
    assert str(exc2.value) == "no powercap package zone (RAPL) on this node (no powercap zone)"
    assert exc.value.hint == "CPU power caps need the intel-rapl powercap driver"


def test_all_caps_both_and_warns_about_a_missing_half(host: Host) -> None:
    node = Node([gpu(0)], [zone(0)])
    report = run(host, node, pct=60, all_=True)
    assert [r.kind for r in report.results] == ["gpu", "cpu"]
    node2 = Node([], [zone(0)])
    report2 = run(host, node2, pct=60, all_=True)
    assert [r.kind for r in report2.results] == ["cpu"]
    assert report2.warnings == ["no GPU found on this node: capping the CPU only"]
    with pytest.raises(NoDeviceError) as exc:
        run(host, Node([], []), pct=60, all_=True)
    assert str(exc.value) == "no GPU and no powercap package zone (RAPL) on this node: nothing to cap"


# -- restore ----------------------------------------------------------------------------------


def test_restore_after_one_cap(host: Host) -> None:
    node = Node([gpu(0, cap=650), gpu(1, cap=650)])
    run(host, node, pct=60)
    report = run(host, node, restore=True)
    assert [(r.target_w, r.status) for r in report.results] == [(650, Status.APPLIED)] * 2
    j = journal_of(host)
    assert j["devices"]["0000:10:00.0"]["original"] == {} and j["devices"]["0000:10:00.0"]["current"] == {}


def test_a_restore_with_the_cap_unreadable_goes_to_the_operators_last_cap(host: Host) -> None:
    # joulectl caps 700 -> 420 W; the operator sets 500 W by hand; a restore leaves it (the cap in
    # force is the operator's). When the cap in force is then unreadable, a restore goes to the
    # operator's 500 W, the last value known in force, not to the 700 W default (kills
    # ops/cap.py:606 `last is not None` -> `is`, which no fast test reached)
    node = Node([gpu(0)])
    run(host, node, pct=60)
    node.writer.values["0000:10:00.0"] = 500
    left = run(host, node, restore=True)
    assert [(r.target_w, r.status) for r in left.results] == [(500, Status.UNCHANGED)]
    del node.writer.values["0000:10:00.0"]
    node.gpus[0].current_cap_w = None
    report = run(host, node, restore=True)
    assert [(r.before_w, r.target_w, r.status) for r in report.results] == [(None, 500, Status.APPLIED)]
    assert node.writer.values == {"0000:10:00.0": 500}


def test_restore_after_two_caps_goes_to_the_first_before_value(host: Host) -> None:
    node = Node([gpu(0, cap=650)])
    run(host, node, pct=60)
    run(host, node, watts=300)
    assert journal_of(host)["devices"]["0000:10:00.0"]["original"] == {"capWatts": 650}
    report = run(host, node, restore=True)
    assert report.results[0].target_w == 650 and report.results[0].before_w == 300
    # a second restore stays where the first went (idempotent under cron), nothing written
    again = run(host, node, restore=True)
    assert again.results[0].status is Status.UNCHANGED and again.results[0].target_w == 650


def test_restore_without_a_journal_uses_the_vendor_defaults(host: Host) -> None:
    node = Node(
        [gpu(0, cap=300, default=690), gpu(1, vendor="amd", max_w=750, min_w=0, cap=300, model="MI300X"),
         gpu(2, vendor="intel", max_w=150, min_w=None, cap=100, model="Flex 170")],
        [zone(0, limit=200, max_w=350)],
    )
    report = run(host, node, restore=True, all_=True)
    assert [(r.device, r.target_w) for r in report.results] == [
        ("0000:10:00.0", 690), ("0000:11:00.0", 750), ("0000:12:00.0", 150), ("intel-rapl:0", 350)]
    assert {r.status for r in report.results} == {Status.APPLIED}


def test_restore_dry_run_reads_the_journal(host: Host) -> None:
    node = Node([gpu(0, cap=650)])
    run(host, node, pct=60)
    report = run(host, node, restore=True, dry_run=True)
    assert report.results[0].status is Status.PLANNED and report.results[0].target_w == 650


def test_corrupt_journal_is_set_aside_and_reported(host: Host) -> None:
    path = Path(host.path(journal_mod.JOURNAL_PATH))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    node = Node([gpu(0)])
    dry = run(host, node, pct=60, dry_run=True)
    assert dry.warnings == [
        "the journal /var/lib/joulectl/state.json is corrupt; a real run will move it aside and start a new one"]
    assert path.read_text() == "{not json"
    report = run(host, node, pct=60)
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("the journal /var/lib/joulectl/state.json was corrupt: kept aside as "
                                         "/var/lib/joulectl/state.json.corrupt-")
    aside = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == "{not json"
    assert journal_of(host)["kind"] == "Journal"


# -- lock -------------------------------------------------------------------------------------


def test_lock_busy_is_exit_7(host: Host) -> None:
    node = Node([gpu(0)])
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with node_lock(host, 1):
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(5)
        with pytest.raises(LockBusyError) as exc:
            run(host, node, pct=60, wait_s=0.2)
        assert str(exc.value) == "the node lock /run/joulectl/lock is held by another joulectl run (waited 0.2 s)"
        assert exc.value.exit_code == ExitCode.LOCK_BUSY
        assert node.writer.calls == []
    finally:
        release.set()
        t.join()


# -- NodeTwin ---------------------------------------------------------------------------------


def _twin(tmp_path: Path, text: str) -> str:
    p = tmp_path / "twin.yaml"
    p.write_text(text)
    return str(p)


TWIN = """\
apiVersion: joulie.io/v1alpha1
kind: NodeTwin
metadata: {name: node-a}
spec:
  nodeName: node-a
  profile: eco
  cpu: {packagePowerCapPctOfMax: 60, packagePowerCapWatts: 120}
  gpu:
    powerCap: {scope: perGpu, capPctOfMax: 60, capWattsPerGpu: 300}
"""


def test_twin_watts_win_over_pct(host: Host, tmp_path: Path) -> None:
    node = Node([gpu(0)], [zone(0)])
    report = run(host, node, from_twin=_twin(tmp_path, TWIN))
    assert [(r.kind, r.target_w) for r in report.results] == [("gpu", 300), ("cpu", 120)]
    assert report.mode == "twin"


def test_twin_pct_only_and_explicit_target_narrows(host: Host, tmp_path: Path) -> None:
    text = TWIN.replace(", capWattsPerGpu: 300", "").replace(", packagePowerCapWatts: 120", "")
    node = Node([gpu(0)], [zone(0)])
    report = run(host, node, from_twin=_twin(tmp_path, text), gpu=True)
    assert [(r.kind, r.target_w) for r in report.results] == [("gpu", 420)]


@pytest.mark.parametrize("flags", [{"pct": 60}, {"watts": 300}, {"restore": True}])
def test_a_cap_in_watts_or_percent_asks_no_gpu_details(host: Host, flags: dict[str, Any]) -> None:
    # no catalog entry and no governor presets: a cap in watts, percent or a restore reads neither
    node = Node([gpu(0)])
    run(host, node, **flags)
    assert node.gpu_details_asked == [False]


def test_a_twin_asks_the_gpu_details_its_governor_needs(host: Host, tmp_path: Path) -> None:
    node = Node([gpu(0)])
    run(host, node, from_twin=_twin(tmp_path, TWIN), gpu=True)
    assert node.gpu_details_asked == [True]


def test_twin_governor_goes_through_apply_preset(host: Host, tmp_path: Path) -> None:
    node = Node([gpu(0)])
    text = TWIN.replace("capWattsPerGpu: 300}", "capWattsPerGpu: 300}\n    governor: efficient")
    report = run(host, node, from_twin=_twin(tmp_path, text), gpu=True)
    assert node.governor_calls == [("efficient", True, False)]
    assert report.governor_results[0].preset == "efficient"
    assert report.to_dict()["governorResults"][0]["status"] == "applied-unverified"


def test_a_dry_run_of_a_twin_governor_asks_the_same_governor(host: Host, tmp_path: Path) -> None:
    # a dry run takes Deps.governor(), not governor_pair (written for ops/cap.py:491, unreached in
    # the seed-6151 deciding sample): the injected governor answers, nothing is written
    node = Node([gpu(0)])
    text = TWIN.replace("capWattsPerGpu: 300}", "capWattsPerGpu: 300}\n    governor: efficient")
    report = run(host, node, from_twin=_twin(tmp_path, text), gpu=True, dry_run=True)
    assert node.governor_calls == [("efficient", True, False)]
    assert report.governor_results[0].preset == "efficient"
    assert node.writer.values == {}
    assert not Path(host.path(journal_mod.JOURNAL_PATH)).exists()


def test_a_gpu_row_names_the_catalog_model_and_the_raw_one_only_without_it(host: Host) -> None:
    # written for ops/cap.py:638 (`dev.model or dev.raw_model` -> `and`) of the seed-6151 sample
    named, unnamed = gpu(0), gpu(1)
    named.raw_model = "NVIDIA H100 80GB HBM3"
    unnamed.model, unnamed.raw_model = "", "NVIDIA Graphics Device"
    report = run(host, Node([named, unnamed]), pct=60, gpu=True, dry_run=True)
    assert [(r.device, r.model) for r in report.results] == [
        ("0000:10:00.0", "H100-SXM5-80GB"), ("0000:11:00.0", "NVIDIA Graphics Device")]


def test_twin_for_another_node_is_refused(host: Host, tmp_path: Path) -> None:
    node = Node([gpu(0)], hostname="node-b")
    path = _twin(tmp_path, TWIN)
    with pytest.raises(InputError) as exc:
        run(host, node, from_twin=path)
    assert str(exc.value) == (f"{path}: spec.nodeName: the twin is for node 'node-a', this node is 'node-b'; "
                              "refusing to apply it")
    assert node.writer.calls == []
    assert run(host, node, from_twin=path, any_node=True).results[0].status is Status.APPLIED


def test_twin_list_picks_this_node(host: Host, tmp_path: Path) -> None:
    b = TWIN.replace("node-a", "node-b").replace("capWattsPerGpu: 300", "capWattsPerGpu: 350")
    items = "\n".join("  - " + line[0:] if i == 0 else "    " + line
                      for doc in (TWIN, b) for i, line in enumerate(doc.splitlines()))
    path = _twin(tmp_path, "apiVersion: v1\nkind: List\nitems:\n" + items + "\n")
    node = Node([gpu(0)], hostname="node-b")
    report = run(host, node, from_twin=path, gpu=True)
    assert report.results[0].target_w == 350
    with pytest.raises(InputError) as exc:
        run(host, Node([gpu(0)], hostname="node-c"), from_twin=path)
    assert str(exc.value) == f"{path}: items: no NodeTwin for node 'node-c' among 2 items"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TWIN.replace("capPctOfMax: 60", "capPctOfMax: 150"),
         "spec.gpu.powerCap.capPctOfMax: must be in (0, 100], got 150"),
        (TWIN.replace("capWattsPerGpu: 300", "capWattsPerGpu: 0"),
         "spec.gpu.powerCap.capWattsPerGpu: must be at least 1 W, got 0"),
        (TWIN.replace("packagePowerCapWatts: 120", "packagePowerCapWatts: abc"),
         "spec.cpu.packagePowerCapWatts: must be a number, got 'abc'"),
        (TWIN.replace("kind: NodeTwin", "kind: NodeHardware"), "kind: expected kind NodeTwin, found 'NodeHardware'"),
        (TWIN.replace("scope: perGpu", "scope: perNode"), "spec.gpu.powerCap.scope: must be perGpu, got 'perNode'"),
        (TWIN + "    governor: turbo\n", "spec.gpu.governor: must be one of auto, sustained, efficient, low, peak, "
         "got 'turbo'"),
        ("kind: NodeTwin\n", "spec: missing or not an object"),
    ],
)
def test_bad_twin_is_exit_2_naming_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = _twin(tmp_path, text)
    with pytest.raises(InputError) as exc:
        build_request(from_twin=path)
    assert str(exc.value) == f"{path}: {message}"
    assert exc.value.exit_code == ExitCode.USAGE


# -- schedule ---------------------------------------------------------------------------------


SCHEDULE = """\
timezone: Europe/Berlin
windows:
  - name: night
    days: [mon-fri]
    start: "22:00"
    end: "06:00"
    cap: {pct: 60}
    governor: efficient
  - name: weekend
    days: [weekend]
    start: "00:00"
    end: "00:00"
    cap: {watts: 300}
    target: all
default:
  cap: {restore: true}
"""


def test_schedule_window_applies_cap_and_governor(host: Host, tmp_path: Path) -> None:
    path = tmp_path / "eco.yaml"
    path.write_text(SCHEDULE)
    node = Node([gpu(0)], [zone(0, max_w=350)])
    report = run(host, node, schedule=str(path), at="2026-01-06T23:30:00+01:00")
    assert report.schedule["window"] == "night"
    assert report.schedule["at"] == "2026-01-06T23:30:00+01:00"
    assert [(r.kind, r.target_w) for r in report.results] == [("gpu", 420)]
    assert node.governor_calls == [("efficient", True, False)]
    weekend = run(host, node, schedule=str(path), at="2026-01-10T12:00:00Z")
    assert weekend.schedule["window"] == "weekend"
    assert [(r.kind, r.target_w) for r in weekend.results] == [("gpu", 300), ("cpu", 300)]
    day = run(host, node, schedule=str(path), at="2026-01-07T12:00:00+01:00")
    assert day.schedule["window"] == "default"
    assert [(r.kind, r.target_w, r.status) for r in day.results] == [("gpu", 700, Status.APPLIED)]
    again = run(host, node, schedule=str(path), at="2026-01-07T12:05:00+01:00")
    assert [r.status for r in again.results] == [Status.UNCHANGED]


@pytest.mark.parametrize(("flags", "calls"), [
    ({}, [("efficient", True, False), ("balanced", False, True)]),
    ({"gpu": True}, [("efficient", True, False)]),
    ({"cpu": True}, [("balanced", False, True)]),
    ({"all_": True}, [("efficient", True, False), ("balanced", False, True)]),
])
def test_a_schedule_governor_pair_is_narrowed_by_the_target_flag(host: Host, tmp_path: Path,
                                                                  flags: dict[str, Any],
                                                                  calls: list[tuple[str, bool, bool]]) -> None:
    # a window's `governor: {gpu: efficient, cpu: balanced}`: both presets without a target flag,
    # only the GPU's with --gpu, only the CPU's with --cpu (kills ops/cap.py:838 `target == "gpu"`
    # -> `!=`)
    path = tmp_path / "eco.yaml"
    path.write_text("windows: []\ndefault:\n  governor: {gpu: efficient, cpu: balanced}\n")
    node = Node([gpu(0)], [zone(0)])
    run(host, node, schedule=str(path), at="2026-01-07T12:00:00Z", dry_run=True, **flags)
    assert node.governor_calls == calls


def test_a_twin_or_a_schedule_asks_the_inventory_for_both_targets(host: Host, tmp_path: Path) -> None:
    # what a twin or a schedule sets is known only after the inventory (the node's name picks the
    # twin, the time the window): it asks for the GPUs and the CPU alike, whatever it then sets
    # (kills ops/cap.py:818, :819 `mode in ("twin", "schedule")` -> `not in`)
    deps, calls = _inventory_recorded(Node([gpu(0)], [zone(0)]))
    gpu_only_twin = TWIN.replace("  cpu: {packagePowerCapPctOfMax: 60, packagePowerCapWatts: 120}\n", "")
    execute(host, build_request(from_twin=_twin(tmp_path, gpu_only_twin), dry_run=True), deps)
    sched = tmp_path / "eco.yaml"
    sched.write_text("windows: []\ndefault:\n  cap: {pct: 60}\n")
    execute(host, build_request(schedule=str(sched), at="2026-01-07T12:00:00Z", dry_run=True), deps)
    assert calls == [(True, True), (True, True)]


def test_a_restore_of_a_device_never_changed_and_at_its_default_journals_nothing(host: Host) -> None:
    # joulectl never changed the GPU and it is at its 700 W default: --restore leaves it
    # (unchanged) and writes no journal; the operator then sets 500 W and a restore puts the
    # default back, as for any device joulectl never changed (kills ops/cap.py:743 `is not
    # UNCHANGED and ...` -> `or`)
    node = Node([gpu(0, cap=700)])
    first = run(host, node, restore=True)
    assert [(r.status, r.target_w) for r in first.results] == [(Status.UNCHANGED, 700)]
    assert not Path(host.path(journal_mod.JOURNAL_PATH)).exists()
    node.writer.values["0000:10:00.0"] = 500
    again = run(host, node, restore=True)
    assert [(r.before_w, r.status, r.target_w) for r in again.results] == [(500, Status.APPLIED, 700)]


def test_schedule_without_default_outside_windows_does_nothing(host: Host, tmp_path: Path) -> None:
    path = tmp_path / "eco.yaml"
    path.write_text(SCHEDULE.split("default:")[0])
    node = Node([gpu(0)])
    report = run(host, node, schedule=str(path), at="2026-01-07T12:00:00+01:00")
    assert report.results == [] and report.schedule["window"] is None
    assert report.exit_code == ExitCode.OK and node.writer.calls == []


def test_schedule_bad_at_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "eco.yaml"
    path.write_text(SCHEDULE)
    with pytest.raises(InputError) as exc:
        build_request(schedule=str(path), at="yesterday")
    assert str(exc.value) == "--at: not an ISO 8601 time such as 2026-01-05T23:30:00+01:00: 'yesterday'"


def test_governor_the_node_cannot_take_blocks_only_the_governor(host: Host, tmp_path: Path) -> None:
    node = Node([gpu(0)])
    node.governor_error = InputError("preset 'efficient' is not available on this node (available: auto)")
    text = TWIN.replace("capWattsPerGpu: 300}", "capWattsPerGpu: 300}\n    governor: efficient")
    report = run(host, node, from_twin=_twin(tmp_path, text), gpu=True)
    assert report.results[0].status is Status.APPLIED
    g = report.governor_results[0]
    assert (g.device, g.status, g.preset) == ("gpu", Status.BLOCKED, "efficient")
    assert g.message == "preset 'efficient' is not available on this node (available: auto)"
    assert report.exit_code == ExitCode.PARTIAL
    assert journal_of(host)["devices"]["0000:10:00.0"]["current"] == {"capWatts": 300}


def test_journal_that_cannot_be_saved_is_partial_and_says_so(tmp_path: Path) -> None:
    class FullDisk(Host):
        def write_atomic(self, host_path: str, data: str, *, mode: int = 0o644, durable: bool = True) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    root = tmp_path / "root"
    root.mkdir()
    host = FullDisk(str(root))
    node = Node([gpu(0)])
    report = run(host, node, pct=60)
    assert report.results[0].status is Status.APPLIED  # the cap is in force ...
    err = report.error()  # ... but not journaled, and the run says so
    assert err is not None and err.exit_code == ExitCode.PARTIAL
    assert str(err) == ("1 of 1 targets done; journal not saved: /var/lib/joulectl/state.json: "
                        "No space left on device")


def test_a_write_ahead_save_that_fails_is_said_even_when_the_final_save_works(tmp_path: Path) -> None:
    # the disk is full for the write-ahead save only: the caps go on, the final save journals them,
    # and the run still says the write-ahead journal was not saved, with the kernel's text (written
    # after the seed-9174 deciding sample: kills ops/cap.py:960 `e.strerror or e` -> `and`)
    class FullOnce(Host):
        failed = False

        def write_atomic(self, host_path: str, data: str, *, mode: int = 0o644, durable: bool = True) -> None:
            if not self.failed:
                self.failed = True
                raise OSError(errno.ENOSPC, "No space left on device")
            super().write_atomic(host_path, data, mode=mode, durable=durable)

    root = tmp_path / "root"
    root.mkdir()
    host = FullOnce(str(root))
    report = run(host, Node([gpu(0)]), pct=60)
    assert report.results[0].status is Status.APPLIED
    assert report.journal_error == "/var/lib/joulectl/state.json: No space left on device"
    assert journal_of(host)["devices"]["0000:10:00.0"]["current"] == {"capWatts": 420}


def test_unreadable_journal_stops_before_any_write(host: Host) -> None:
    Path(host.path(journal_mod.JOURNAL_PATH)).mkdir(parents=True)  # a directory where the file belongs
    node = Node([gpu(0)])
    with pytest.raises(JoulectlError) as exc:
        run(host, node, pct=60)
    assert str(exc.value) == ("/var/lib/joulectl/state.json: the journal is not a regular file (a directory); "
                              "move it away")
    assert exc.value.exit_code == ExitCode.USAGE  # bad input on the node (issue 12, item 9)
    assert node.writer.calls == []


class UnreadableJournalHost(Host):
    """A host whose journal read fails the way ``read`` fails: ``exc`` is raised for it."""

    def __init__(self, root: str, exc: Exception) -> None:
        super().__init__(root)
        self.exc = exc

    def read(self, host_path: str, **kw: Any) -> str:
        if host_path == journal_mod.JOURNAL_PATH:
            raise self.exc
        return super().read(host_path, **kw)


@pytest.mark.parametrize(("exc", "message", "code"), [
    (HostIOError(errno.EACCES, journal_mod.JOURNAL_PATH),
     "cannot read the journal /var/lib/joulectl/state.json: Permission denied", ExitCode.REFUSED),
    (HostIOError(errno.EROFS, journal_mod.JOURNAL_PATH),
     "cannot read the journal /var/lib/joulectl/state.json: Read-only file system", ExitCode.REFUSED),
    (HostIOError(errno.EIO, journal_mod.JOURNAL_PATH),
     "cannot read the journal /var/lib/joulectl/state.json: Input/output error", ExitCode.INTERNAL),
    (OSError("the disk went away"),
     "cannot read the journal /var/lib/joulectl/state.json: the disk went away", ExitCode.INTERNAL),
])
def test_a_journal_read_error_stops_before_any_write_naming_the_error(tmp_path: Path, exc: Exception, message: str,
                                                                     code: ExitCode) -> None:
    # no privilege to read the journal is exit 4 with the sudo hint, any other error exit 1 with
    # the kernel's text (os.strerror), or the exception's own without one (kills ops/cap.py:792
    # `strerror or str(e)` -> `and` and :793 `err in (EACCES, EPERM, EROFS)` -> `not in`, which
    # no fast test reached)
    (tmp_path / "root").mkdir()
    host = UnreadableJournalHost(str(tmp_path / "root"), exc)
    node = Node([gpu(0)])
    with pytest.raises(JoulectlError) as err:
        run(host, node, pct=60)
    assert (str(err.value), err.value.exit_code) == (message, code)
    assert err.value.hint == ("run as root (sudo joulectl cap ...)" if code == ExitCode.REFUSED else None)
    assert node.writer.calls == []


def test_bad_model_presets_file_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "presets.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError) as exc:
        build_request(pct=60, model_presets_file=str(bad))
    assert str(exc.value) == f"{bad}: expected a JSON object, found list"


def test_restore_skips_what_joulectl_could_never_have_changed(host: Host) -> None:
    node = Node([gpu(0), gpu(1, max_w=None, min_w=None, cap=None,  # type: ignore[arg-type]
                            control=Control(False, NA_RANGE))],
                [zone(0, has_pl1=False), zone(1, locked=True)])
    report = run(host, node, restore=True, all_=True)
    assert [(r.device, r.status, r.message) for r in report.results] == [
        ("0000:10:00.0", Status.UNCHANGED, "already at target"),
        ("0000:11:00.0", Status.SKIPPED,
         "the power limit range is unknown (the driver reports N/A): no settable power limit; nothing to restore"),
        ("intel-rapl:0", Status.SKIPPED,
         "package-0 has no long_term (PL1) constraint: the zone reports energy only; nothing to restore"),
        ("intel-rapl:1", Status.SKIPPED, "limit locked by firmware; nothing to restore"),
    ]
    assert report.exit_code == ExitCode.OK


def test_interrupt_between_vendor_batches_journals_what_was_written(host: Host) -> None:
    class Interrupted:
        def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]:
            raise KeyboardInterrupt

    node = Node([gpu(0), gpu(1, vendor="amd", max_w=750, min_w=0, cap=750, model="MI300X")])
    deps = node.deps()
    deps.writers = {"nvidia": node.writer, "amd": Interrupted()}
    with pytest.raises(KeyboardInterrupt):
        execute(host, build_request(pct=60), deps)
    devices = journal_of(host)["devices"]
    assert devices["0000:10:00.0"]["current"] == {"capWatts": 420}
    assert "0000:11:00.0" not in devices


# -- write-ahead journal --------------------------------------------------------------------------


@dataclass
class PeekingWriter(FakeWriter):
    """Also keeps the journal on disk as it is when the backend is handed the writes."""

    host: Host | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)

    def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]:
        self.seen.append(journal_of(host))
        return super().set_caps(host, requests)


def test_the_original_is_journaled_before_the_write(host: Host) -> None:
    """A kill between a write and the final save must leave the original journaled: it is saved,
    with the target, in one save before the batch of writes; the final save then replaces it."""
    node = Node([gpu(0, cap=600), gpu(1, cap=650), gpu(2, cap=420)], writer=PeekingWriter())
    run(host, node, watts=420)
    assert isinstance(node.writer, PeekingWriter)
    (ahead,) = node.writer.seen
    assert {k: (d["original"], d["current"], d["pending"]) for k, d in ahead["devices"].items()} == {
        "0000:10:00.0": ({"capWatts": 600}, {}, {"capWatts": [420]}),
        "0000:11:00.0": ({"capWatts": 650}, {}, {"capWatts": [420]}),  # 0000:12:00.0 is unchanged: not written
    }
    final = journal_of(host)["devices"]
    assert {k: (d["original"], d["current"], d.get("pending")) for k, d in final.items()} == {
        "0000:10:00.0": ({"capWatts": 600}, {"capWatts": 420}, None),
        "0000:11:00.0": ({"capWatts": 650}, {"capWatts": 420}, None),
    }
    # a second cap keeps the first originals ahead of its writes too
    run(host, node, watts=300)
    assert {k: d["original"] for k, d in node.writer.seen[-1]["devices"].items()} == {
        "0000:10:00.0": {"capWatts": 600}, "0000:11:00.0": {"capWatts": 650}, "0000:12:00.0": {"capWatts": 420}}


def test_a_restore_and_a_dry_run_journal_nothing_ahead(host: Host) -> None:
    node = Node([gpu(0, cap=600)], writer=PeekingWriter())
    run(host, node, watts=420, dry_run=True)
    assert not Path(host.path(journal_mod.JOURNAL_PATH)).exists()
    run(host, node, watts=420)
    run(host, node, restore=True)
    assert isinstance(node.writer, PeekingWriter)
    assert node.writer.seen[-1]["devices"]["0000:10:00.0"]["current"] == {"capWatts": 420}  # as before the run
    assert node.writer.values["0000:10:00.0"] == 600


def test_a_failed_write_leaves_the_journal_as_it_was(host: Host) -> None:
    node = Node([gpu(0, cap=600), gpu(1, cap=600)])
    run(host, node, watts=500)
    before = journal_of(host)["devices"]
    node.writer.fail = {"0000:10:00.0": errno.EIO, "0000:11:00.0": errno.EIO}
    report = run(host, node, watts=300)
    assert [r.status for r in report.results] == [Status.ERROR, Status.ERROR]
    assert journal_of(host)["devices"] == before  # the write-ahead entries are replaced by the final save


def test_journal_intend_keeps_every_pending_value_until_recorded() -> None:
    j = journal_mod.Journal()
    j.record("d", "perfLevel", "high", "low", vendor="amd")
    j.intend("d", "perfLevel", "low", "profile_peak", vendor="amd")  # a run killed around its write
    j.intend("d", "perfLevel", "low", "profile_standard", vendor="amd")  # and the next one too
    j.intend("d", "perfLevel", "low", "profile_peak", vendor="amd")
    assert (j.original("d", "perfLevel"), j.current("d", "perfLevel"), j.pending("d", "perfLevel")) == (
        "high", "low", ["profile_peak", "profile_standard"])
    j.intend("e", "epp", "balance_power", "power", kind="cpu")
    assert j.set_by_joulectl("e", "epp") and j.current("e", "epp") is None
    again = journal_mod.Journal.from_dict(json.loads(json.dumps(j.to_dict())))
    assert again.pending("d", "perfLevel") == ["profile_peak", "profile_standard"]
    j.record("d", "perfLevel", "low", "profile_peak")
    j.restored("e", "epp")
    assert j.pending("d", "perfLevel") == [] and j.pending("e", "epp") == [] and not j.set_by_joulectl("e", "epp")
    assert "pending" not in j.to_dict()["devices"]["d"]  # the final save has the same shape as before
