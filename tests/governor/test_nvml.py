"""NVIDIA presets through the NVML transport, pynvml mocked (autospec) over an in-memory board set.

``JOULECTL_NVIDIA_TRANSPORT=nvml`` makes the governor use NVML on a tree root as it does on a live
host; no nvidia-smi runs.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from govkit import H100_TABLE, L40S_TABLE, inventory, nvidia_gpu
from pytest_mock import MockerFixture

from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal


class Boards:
    """What the mocked NVML holds per GPU: clock table, locks and the clocks in use."""

    def __init__(self, tables: list[dict[int, list[int]]]) -> None:
        self.tables = tables
        self.lgc: dict[int, tuple[int, int] | None] = {i: None for i in range(len(tables))}
        self.lmc: dict[int, tuple[int, int] | None] = {i: None for i in range(len(tables))}
        self.clocks = {i: (max(t[max(t)]), max(t)) for i, t in enumerate(tables)}
        self.refuse: dict[str, Exception] = {}
        self.util = {i: 100 for i in range(len(tables))}

    def by_bus(self, bus: Any) -> int:
        text = bus.decode() if isinstance(bus, bytes) else str(bus)
        return int(text.split(":")[1], 16) - 0x10

    def _check(self, name: str) -> None:
        if name in self.refuse:
            raise self.refuse[name]

    def set_gpu(self, h: int, lo: int, hi: int) -> None:
        self._check("gpu")
        self.lgc[h] = (lo, hi)

    def set_mem(self, h: int, lo: int, hi: int) -> None:
        self._check("mem")
        self.lmc[h] = (lo, hi)

    def reset_gpu(self, h: int) -> None:
        self._check("reset")
        self.lgc[h] = None

    def reset_mem(self, h: int) -> None:
        self._check("reset")
        self.lmc[h] = None

    def clock(self, h: int, kind: int) -> int:
        return self.clocks[h][0] if kind == pynvml.NVML_CLOCK_SM else self.clocks[h][1]


@pytest.fixture
def boards(mocker: MockerFixture) -> Boards:
    b = Boards([H100_TABLE, L40S_TABLE])
    patches: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByPciBusId": b.by_bus,
        "nvmlDeviceSetGpuLockedClocks": b.set_gpu,
        "nvmlDeviceSetMemoryLockedClocks": b.set_mem,
        "nvmlDeviceResetGpuLockedClocks": b.reset_gpu,
        "nvmlDeviceResetMemoryLockedClocks": b.reset_mem,
        "nvmlDeviceGetClockInfo": b.clock,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=b.util[h], memory=10),
        "nvmlDeviceGetSupportedMemoryClocks": lambda h: sorted(b.tables[h], reverse=True),
        "nvmlDeviceGetSupportedGraphicsClocks": lambda h, m: b.tables[h][m],
    }
    for name, fn in patches.items():
        mocker.patch(f"pynvml.{name}", autospec=True, side_effect=fn)
    return b


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(str(tmp_path), env={"JOULECTL_NVIDIA_TRANSPORT": "nvml", "PATH": "/usr/bin:/bin"})


def _inv() -> Any:
    return inventory([nvidia_gpu(0), nvidia_gpu(1, L40S_TABLE, arch="ada_lovelace", model="NVIDIA L40S",
                                                with_table=False)])


def test_low_locks_through_nvml_and_show_verifies(host: Host, boards: Boards) -> None:
    journal = Journal()
    results = gov.apply_preset(host, _inv(), journal, "low")
    assert [(r.status, r.after) for r in results] == [
        (Status.APPLIED_UNVERIFIED, "graphics 345-1980 MHz, memory 1593 MHz"),
        # the L40S table came from nvmlDeviceGetSupported*Clocks: 405 MHz memory bounds graphics at 645
        (Status.APPLIED_UNVERIFIED, "graphics 210-645 MHz, memory 405 MHz"),
    ]
    assert boards.lgc == {0: (345, 1980), 1: (210, 645)}
    assert boards.lmc == {0: (1593, 1593), 1: (405, 405)}
    assert host.tool_calls == []
    rows, changed = gov.show(host, _inv(), journal, gpu=True, cpu=False)
    assert [r.status for r in rows] == ["applied-unverified"] * 2 and not changed
    boards.clocks = {0: (1980, 1593), 1: (645, 405)}
    rows, changed = gov.show(host, _inv(), journal, gpu=True, cpu=False)
    assert [r.status for r in rows] == ["applied"] * 2 and changed
    results = gov.reset(host, _inv(), journal, cpu=False)
    assert [r.status for r in results] == [Status.APPLIED] * 2
    assert boards.lgc == {0: None, 1: None} and boards.lmc == {0: None, 1: None}


def test_memory_lock_not_supported_resets_the_graphics_lock(host: Host, boards: Boards) -> None:
    boards.refuse["mem"] = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    journal = Journal()
    r = gov.apply_preset(host, _inv(), journal, "low", selectors=["1"])[0]
    assert r.status == Status.UNSUPPORTED
    assert r.message == ("memory clock lock: not supported for GPU 0000:11:00.0 (NVML: "
                         "nvmlDeviceSetMemoryLockedClocks: Not Supported); graphics lock set by joulectl undone")
    assert boards.lgc[1] is None
    reset_gpu: Any = pynvml.nvmlDeviceResetGpuLockedClocks
    assert reset_gpu.call_count == 1


def test_no_permission_is_refused(host: Host, boards: Boards) -> None:
    boards.refuse["gpu"] = pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    results = gov.apply_preset(host, _inv(), Journal(), "peak")
    assert {r.status for r in results} == {Status.REFUSED}
    assert results[0].message == ("graphics clock lock: insufficient permissions (NVML: "
                                  "nvmlDeviceSetGpuLockedClocks: Insufficient Permissions)")
