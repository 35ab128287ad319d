"""NVIDIA through NVML: pynvml is the one thing mocked, always with ``autospec=True``.

The transport is forced with ``JOULECTL_NVIDIA_TRANSPORT=nvml`` because the root is a tmp tree
(NVML is otherwise used only when the root is ``/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pynvml
import pytest
from pytest_mock import MockerFixture

from joulectl.backends import nvidia
from joulectl.backends.base import BackendUnavailable
from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops.discover import inventory

NVML_ENV = {"JOULECTL_NVIDIA_TRANSPORT": "nvml"}


@dataclass
class Board:
    """One GPU as NVML reports it (mW, MHz)."""

    bus: str
    name: str = "NVIDIA H100 80GB HBM3"
    limit_mw: int = 700_000
    min_mw: int = 200_000
    max_mw: int = 700_000
    default_mw: int = 700_000
    power_mw: int = 71_520
    mig: int = 0
    arch: int = pynvml.NVML_DEVICE_ARCH_HOPPER
    clocks: dict[int, list[int]] = field(default_factory=lambda: {1593: [1410, 345], 2619: [345, 1980, 1965]})
    set_error: int | None = None
    readback_mw: int | None = None  # what the limit reads back as after a set (None: what was set)
    constraints_error: int | None = None
    platform_mw: int | None = None  # an out-of-band limiter: the enforced limit is min(limit, this)

    @property
    def enforced_mw(self) -> int:
        return self.limit_mw if self.platform_mw is None else min(self.limit_mw, self.platform_mw)


def install(mocker: MockerFixture, boards: list[Board]) -> dict[str, Any]:
    """Patch every pynvml function joulectl calls (autospec), answering from ``boards``."""
    by_handle = {f"h{i}": b for i, b in enumerate(boards)}
    by_bus = {b.bus: f"h{i}" for i, b in enumerate(boards)}

    def p(name: str, **kw: Any) -> Any:
        return mocker.patch(f"pynvml.{name}", autospec=True, **kw)

    def constraints(h: str) -> list[int]:
        b = by_handle[h]
        if b.constraints_error is not None:
            raise pynvml.NVMLError(b.constraints_error)
        return [b.min_mw, b.max_mw]

    def set_limit(h: str, mw: int) -> None:
        b = by_handle[h]
        if b.set_error is not None:
            raise pynvml.NVMLError(b.set_error)
        b.limit_mw = mw if b.readback_mw is None else b.readback_mw

    def handle_by_bus(bus: bytes | str) -> str:
        key = bus.decode() if isinstance(bus, bytes) else bus
        if key not in by_bus:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return by_bus[key]

    def clock(h: str, kind: int) -> int:
        return 1755 if kind == pynvml.NVML_CLOCK_GRAPHICS else 2619

    return {
        "init": p("nvmlInit"),
        "shutdown": p("nvmlShutdown"),
        "count": p("nvmlDeviceGetCount", return_value=len(boards)),
        "by_index": p("nvmlDeviceGetHandleByIndex", side_effect=lambda i: f"h{i}"),
        "by_bus": p("nvmlDeviceGetHandleByPciBusId", side_effect=handle_by_bus),
        "name": p("nvmlDeviceGetName", side_effect=lambda h: by_handle[h].name),
        "uuid": p("nvmlDeviceGetUUID", side_effect=lambda h: f"GPU-{h}-uuid"),
        "pci": p("nvmlDeviceGetPciInfo", side_effect=lambda h: SimpleNamespace(busId=by_handle[h].bus.encode())),
        "constraints": p("nvmlDeviceGetPowerManagementLimitConstraints", side_effect=constraints),
        "default": p("nvmlDeviceGetPowerManagementDefaultLimit", side_effect=lambda h: by_handle[h].default_mw),
        "limit": p("nvmlDeviceGetPowerManagementLimit", side_effect=lambda h: by_handle[h].limit_mw),
        "enforced": p("nvmlDeviceGetEnforcedPowerLimit", side_effect=lambda h: by_handle[h].enforced_mw),
        "usage": p("nvmlDeviceGetPowerUsage", side_effect=lambda h: by_handle[h].power_mw),
        "mig": p("nvmlDeviceGetMigMode", side_effect=lambda h: [by_handle[h].mig, by_handle[h].mig]),
        "arch": p("nvmlDeviceGetArchitecture", side_effect=lambda h: by_handle[h].arch),
        "persistence": p("nvmlDeviceGetPersistenceMode", side_effect=lambda h: 1),
        "mem_clocks": p("nvmlDeviceGetSupportedMemoryClocks", side_effect=lambda h: list(by_handle[h].clocks)),
        "gfx_clocks": p("nvmlDeviceGetSupportedGraphicsClocks", side_effect=lambda h, m: by_handle[h].clocks[m]),
        "clock": p("nvmlDeviceGetClockInfo", side_effect=clock),
        "set": p("nvmlDeviceSetPowerManagementLimit", side_effect=set_limit),
        "set_v2": p("nvmlDeviceSetPowerManagementLimit_v2"),
    }


def h100_boards(trees: ModuleType) -> list[Board]:
    return [Board(trees.smi_id(b)) for b in trees.H100_BUSES]


def test_h100_x8_through_nvml(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES)
    mocks = install(mocker, h100_boards(trees))
    host = Host(str(root), env=NVML_ENV)
    inv = inventory(host)
    assert host.tool_calls == []  # no nvidia-smi
    assert [g.bus_id for g in inv.gpus] == trees.H100_BUSES
    g = inv.gpus[0]
    assert (g.raw_model, g.catalog_key, g.uuid) == ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_SXM", "GPU-h0-uuid")
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (200, 700, 700)
    assert (g.current_cap_w, g.power_w) == (700, 71.52)
    assert (g.architecture, g.mig, g.persistence_mode) == ("hopper", "disabled", "Enabled")
    assert g.supported_clocks == {2619: [1980, 1965, 345], 1593: [1410, 345]}
    assert list(g.supported_clocks) == [2619, 1593]
    assert g.clocks == {"graphics_mhz": 1755, "memory_mhz": 2619}
    assert g.control.available and g.governor_presets == ("auto", "efficient", "low", "peak")
    assert (inv.gpu_count, inv.power_domains) == (8, 8)
    mocks["init"].assert_called_once_with()
    mocks["shutdown"].assert_called_once_with()


def test_mig_enabled(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    install(mocker, [Board("00000000:18:00.0", mig=pynvml.NVML_DEVICE_MIG_ENABLE)])
    (g,) = nvidia.discover(Host(str(root), env=NVML_ENV))
    assert g.mig == "enabled"


def test_unsupported_read_is_unknown_with_reason(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    install(mocker, [Board("00000000:18:00.0", constraints_error=pynvml.NVML_ERROR_NOT_SUPPORTED)])
    (g,) = nvidia.discover(Host(str(root), env=NVML_ENV))
    assert g.cap_range.min_w is None and g.cap_range.max_w is None
    assert g.control.available is False
    assert g.warnings == ["power limit range unknown (nvmlDeviceGetPowerManagementLimitConstraints: Not Supported)"]


def test_nvml_init_failure_when_forced(root: Path, mocker: MockerFixture) -> None:
    mocker.patch("pynvml.nvmlInit", autospec=True,
                 side_effect=pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(Host(str(root), env=NVML_ENV))
    assert str(e.value) == "NVML: nvmlInit failed: NVML Shared Library Not Found"
    inv = inventory(Host(str(root), env=NVML_ENV))
    assert inv.gpu_errors == {"nvidia": "NVML: nvmlInit failed: NVML Shared Library Not Found"}


def test_set_caps_v1_in_milliwatts_with_readback(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    boards = h100_boards(trees)[:2]
    mocks = install(mocker, boards)
    host = Host(str(root), env=NVML_ENV)
    gpus = nvidia.discover(host)
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 350.5)])
    assert [(o.device, o.status, o.after_w) for o in out] == [
        ("0000:18:00.0", Status.APPLIED, 420), ("0000:2a:00.0", Status.APPLIED, 350.5)]
    mocks["set"].assert_any_call("h0", 420_000)
    mocks["set"].assert_any_call("h1", 350_500)
    mocks["by_bus"].assert_any_call("00000000:18:00.0")
    mocks["set_v2"].assert_not_called()
    assert boards[0].limit_mw == 420_000


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, Status.REFUSED,
         "NVML: nvmlDeviceSetPowerManagementLimit: Insufficient Permissions (run as root (sudo joulectl ...))"),
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, Status.BLOCKED,
         "NVML: nvmlDeviceSetPowerManagementLimit: Invalid Argument: 800 W is outside the range 200-700 W"),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, Status.UNSUPPORTED,
         "NVML: nvmlDeviceSetPowerManagementLimit: Not Supported"),
        (pynvml.NVML_ERROR_GPU_IS_LOST, Status.ERROR,
         "NVML: nvmlDeviceSetPowerManagementLimit: GPU is lost"),
    ],
)
def test_set_caps_nvml_errors(
    root: Path, mocker: MockerFixture, code: int, status: Status, message: str
) -> None:
    install(mocker, [Board("00000000:18:00.0", set_error=code), Board("00000000:2A:00.0")])
    host = Host(str(root), env=NVML_ENV)
    gpus = nvidia.discover(host)
    out = nvidia.set_caps(host, [(gpus[0], 800.0), (gpus[1], 420.0)])
    assert (out[0].status, out[0].message) == (status, message)
    assert out[1].status is Status.APPLIED  # one device's failure never stops the others


def test_set_caps_readback_that_differs(root: Path, mocker: MockerFixture) -> None:
    install(mocker, [Board("00000000:18:00.0", readback_mw=700_000)])
    host = Host(str(root), env=NVML_ENV)
    out = nvidia.set_caps(host, [(nvidia.discover(host)[0], 420.0)])
    assert (out[0].status, out[0].after_w, out[0].message) == (
        Status.ERROR, 700, "0000:18:00.0: read back 700 W after writing 420 W")


def test_set_caps_nvml_unavailable_when_forced(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    mocks = install(mocker, [Board("00000000:18:00.0")])
    host = Host(str(root), env=NVML_ENV)
    gpu = nvidia.discover(host)[0]
    mocks["init"].side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    out = nvidia.set_caps(host, [(gpu, 420.0)])
    assert (out[0].status, out[0].message) == (Status.ERROR, "NVML: nvmlInit failed: Driver Not Loaded")


def test_gpu_that_cannot_be_opened_is_listed_with_reason(root: Path, mocker: MockerFixture) -> None:
    mocks = install(mocker, [Board("00000000:18:00.0"), Board("00000000:2A:00.0")])

    def by_index(i: int) -> str:
        if i == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return f"h{i}"

    mocks["by_index"].side_effect = by_index
    gpus = nvidia.discover(Host(str(root), env=NVML_ENV))
    assert [g.bus_id for g in gpus] == ["0000:18:00.0", "nvidia-index-1"]
    assert gpus[1].control.reason == "GPU 1 cannot be opened: nvmlDeviceGetHandleByIndex: GPU is lost"


def test_enforced_limit_below_the_requested_one(root: Path, mocker: MockerFixture) -> None:
    """A cloud H100: requested 700 W, enforced 500 W (nvmlDeviceGetEnforcedPowerLimit)."""
    boards = [Board("00000000:18:00.0", platform_mw=500_000), Board("00000000:2A:00.0")]
    mocks = install(mocker, boards)
    host = Host(str(root), env=NVML_ENV)
    gpus = nvidia.discover(host)
    assert [(g.current_cap_w, g.enforced_cap_w) for g in gpus] == [(700, 500), (700, 700)]
    out = nvidia.set_caps(host, [(gpus[0], 600.0), (gpus[1], 600.0)])
    assert [(o.status, o.after_w, o.message) for o in out] == [
        (Status.APPLIED, 600, "requested 600 W; enforced limit 500 W (another limiter holds the GPU below it)"),
        (Status.APPLIED, 600, ""),
    ]
    mocks["enforced"].assert_any_call("h0")


def test_a_default_limit_below_the_maximum_is_the_default(root: Path, trees: ModuleType, mocker: MockerFixture) -> None:
    # nvmlDeviceGetPowerManagementDefaultLimit is the board's own default, independent of the
    # constraints' maximum (a board whose default is set below it: here 310 W in 200-350 W): the
    # default, not the maximum (written after the seed-9173 deciding sample: kills
    # backends/nvidia.py:214 `default_mw is not None` -> `is`)
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    install(mocker, [Board(trees.smi_id(trees.H100_BUSES[0]), limit_mw=310_000, max_mw=350_000,
                           default_mw=310_000)])
    (g,) = inventory(Host(str(root), env=NVML_ENV)).gpus
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w, g.current_cap_w) == (200, 350, 310, 310)


def test_architecture_names_come_from_pynvml_and_unknown_is_none(mocker: MockerFixture) -> None:
    # nvmlDeviceGetArchitecture's nvmlDeviceArchitecture_t, by pynvml's own NVML_DEVICE_ARCH_*
    # names: Hopper is "hopper", NVML_DEVICE_ARCH_UNKNOWN (0xffffffff) and a number pynvml does not
    # name are no architecture (kills nvml.py:101 `suffix == "unknown"` -> `!=`)
    from joulectl.backends.nvml import Nvml

    install(mocker, [])
    with Nvml() as nv:
        assert nv.architecture_name(pynvml.NVML_DEVICE_ARCH_HOPPER) == "hopper"
        assert nv.architecture_name(pynvml.NVML_DEVICE_ARCH_AMPERE) == "ampere"
        assert nv.architecture_name(pynvml.NVML_DEVICE_ARCH_UNKNOWN) is None
        assert nv.architecture_name(12345) is None


def test_nvml_is_the_live_hosts_transport_unless_smi_is_forced(tmp_path: Path, mocker: MockerFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the root "/" (nothing is read there: NVML is mocked, and PATH holds no nvidia-smi) takes NVML
    # first; JOULECTL_NVIDIA_TRANSPORT=smi holds there (kills backends/nvidia.py:136 `forced is None`
    # -> `is not None`); an emulated root takes nvidia-smi, never NVML (kills :136 the second `and`
    # -> `or`)
    monkeypatch.setenv("PATH", str(tmp_path))
    mocks = install(mocker, [Board("00000000:18:00.0")])
    assert [g.bus_id for g in nvidia.discover(Host("/", env={}))] == ["0000:18:00.0"]
    assert mocks["init"].call_count == 1
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(Host("/", env={"JOULECTL_NVIDIA_TRANSPORT": "smi"}))
    assert str(e.value) == "nvidia-smi not found in PATH"
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(Host(str(tmp_path), env={}))
    assert str(e.value) == f"nvidia-smi not found in {tmp_path}/bin"
    assert mocks["init"].call_count == 1


def test_mig_mode_is_the_current_one_and_the_architecture_nvmls(root: Path, mocker: MockerFixture) -> None:
    # nvmlDeviceGetMigMode gives (current, pending): a GPU with MIG on and a pending switch off is
    # enabled until the reset (kills backends/nvidia.py:195 `mig_modes[0]` -> `[1]`); the
    # architecture is NVML's even for a board no catalog knows (kills :197 `is not None` -> `is`)
    mocks = install(mocker, [Board("00000000:18:00.0", name="NVIDIA Unlisted Board",
                                   arch=pynvml.NVML_DEVICE_ARCH_HOPPER)])
    mocks["mig"].side_effect = lambda h: [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
    (g,) = nvidia.discover(Host(str(root), env=NVML_ENV))
    assert (g.raw_model, g.mig, g.architecture) == ("NVIDIA Unlisted Board", "enabled", "hopper")


def test_a_cap_takes_the_transport_discover_takes(tmp_path: Path, mocker: MockerFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # as discover: NVML on the live host (mocked; PATH holds no nvidia-smi), nvidia-smi when forced
    # there or on an emulated root (kills backends/nvidia.py:394 `forced is None` -> `is not None`
    # and the second `and` -> `or`)
    monkeypatch.setenv("PATH", str(tmp_path))
    mocks = install(mocker, [Board("00000000:18:00.0")])
    (gpu,) = nvidia.discover(Host("/", env={}))
    (out,) = nvidia.set_caps(Host("/", env={}), [(gpu, 420.0)])
    assert (out.status, mocks["set"].call_args_list) == (Status.APPLIED, [mocker.call("h0", 420_000)])
    (out,) = nvidia.set_caps(Host("/", env={"JOULECTL_NVIDIA_TRANSPORT": "smi"}), [(gpu, 400.0)])
    assert (out.status, out.message) == (Status.ERROR, "nvidia-smi -pl: nvidia-smi not found in PATH")
    (out,) = nvidia.set_caps(Host(str(tmp_path), env={}), [(gpu, 400.0)])
    assert (out.status, out.message) == (Status.ERROR, f"nvidia-smi -pl: nvidia-smi not found in {tmp_path}/bin")
    assert mocks["set"].call_count == 1
