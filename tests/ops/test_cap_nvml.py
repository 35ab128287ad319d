"""``cap`` through the NVML transport, with pynvml mocked (autospec) over a small in-memory board set.

The host root is a tree under tmp_path; ``JOULECTL_NVIDIA_TRANSPORT=nvml`` makes the NVIDIA
backend use NVML there as it does on a live host. Functions not patched are pynvml's own, which
fail as uninitialised (the library is never loaded) and degrade to unknown.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from pytest_mock import MockerFixture

from joulectl.errors import ExitCode
from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops.cap import build_request, execute


class Boards:
    """What the mocked NVML holds: per GPU its limits in mW."""

    def __init__(self, count: int, *, max_mw: int = 700_000, min_mw: int = 200_000) -> None:
        self.limit = {i: max_mw for i in range(count)}
        self.range = (min_mw, max_mw)
        self.refuse: Exception | None = None
        self.sets: list[tuple[int, int]] = []

    def bus(self, i: int) -> str:
        return f"00000000:{0x18 + i:02X}:00.0"

    def by_bus(self, bus: Any) -> int:
        text = bus.decode() if isinstance(bus, bytes) else str(bus)
        return next(i for i in self.limit if self.bus(i) == text.upper())

    def set(self, handle: int, mw: int) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.sets.append((handle, mw))
        self.limit[handle] = mw


@pytest.fixture
def boards(mocker: MockerFixture) -> Boards:
    b = Boards(4)
    patches: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(b.limit),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetHandleByPciBusId": b.by_bus,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b.bus(h).encode()),
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: list(b.range),
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: b.range[1],
        "nvmlDeviceGetPowerManagementLimit": lambda h: b.limit[h],
        "nvmlDeviceSetPowerManagementLimit": b.set,
        "nvmlDeviceGetPowerUsage": lambda h: 150_000,
    }
    for name, fn in patches.items():
        mocker.patch(f"pynvml.{name}", autospec=True, side_effect=fn)
    return b


@pytest.fixture
def host(tmp_path: Path) -> Host:
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").write_text("dgx-1\n")
    return Host(str(root), env={"JOULECTL_NVIDIA_TRANSPORT": "nvml", "PATH": "/usr/bin:/bin"})


def test_pct_60_writes_milliwatts_and_reads_back(host: Host, boards: Boards) -> None:
    report = execute(host, build_request(pct=60))
    assert [(r.device, r.before_w, r.target_w, r.after_w, r.status) for r in report.results] == [
        (f"0000:{0x18 + i:02x}:00.0", 700.0, 420.0, 420.0, Status.APPLIED) for i in range(4)]
    assert boards.sets == [(i, 420_000) for i in range(4)]
    assert host.tool_calls == []  # no nvidia-smi on the NVML path
    set_limit: Any = pynvml.nvmlDeviceSetPowerManagementLimit
    assert set_limit.call_count == 4
    journal = json.loads(Path(host.path("/var/lib/joulectl/state.json")).read_text())
    assert journal["devices"]["0000:18:00.0"]["original"] == {"capWatts": 700.0}


def test_already_at_target_makes_no_nvml_write(host: Host, boards: Boards) -> None:
    boards.limit[1] = 420_000
    report = execute(host, build_request(pct=60))
    assert [r.status for r in report.results] == [Status.APPLIED, Status.UNCHANGED, Status.APPLIED,
                                                  Status.APPLIED]
    assert [h for h, _ in boards.sets] == [0, 2, 3]


def test_no_permission_everywhere_is_exit_4(host: Host, boards: Boards) -> None:
    boards.refuse = pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    report = execute(host, build_request(watts=500))
    assert {r.status for r in report.results} == {Status.REFUSED}
    assert "Insufficient Permissions" in report.results[0].message
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.REFUSED
    assert str(err) == "no privilege to write: every write was refused (4 devices)"
    assert not Path(host.path("/var/lib/joulectl/state.json")).exists()


def test_not_supported_is_partial(host: Host, boards: Boards) -> None:
    boards.refuse = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    report = execute(host, build_request(watts=500, selectors=["0"]))
    assert [r.status for r in report.results] == [Status.UNSUPPORTED]
    assert report.exit_code == ExitCode.PARTIAL


def test_restore_goes_back_through_nvml(host: Host, boards: Boards) -> None:
    boards.limit = {i: 650_000 for i in boards.limit}
    execute(host, build_request(pct=60))
    execute(host, build_request(watts=300))
    report = execute(host, build_request(restore=True))
    assert [(r.before_w, r.target_w, r.status) for r in report.results] == [(300, 650, Status.APPLIED)] * 4
    assert boards.limit == {i: 650_000 for i in range(4)}
