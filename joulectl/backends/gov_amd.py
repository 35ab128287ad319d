"""AMD clock governor: ``power_dpm_force_performance_level`` and ``pp_dpm_sclk`` in sysfs.

Both files live on the PCI device directory, ``/sys/bus/pci/devices/<bdf>/``, are written as
root and read back. rocm-smi and amd-smi are never used to set a governor.

Presets (SPEC §5): ``auto`` -> ``auto``, ``peak`` -> ``profile_peak``, ``low`` -> ``low``,
``sustained`` -> ``profile_standard``, ``efficient`` -> ``manual`` and then the ``pp_dpm_sclk``
level indices at or below a ceiling of 75 % of the top level (a whole number of MHz, never below
the lowest level).

Errors: EINVAL, EOPNOTSUPP and EBUSY are ``unsupported``; EACCES, EPERM and EROFS ``refused``;
any other errno, or a readback that differs from the write, ``error``.

MI250X secondary dies: the performance level is per device (each GCD has its own
``power_dpm_force_performance_level``), unlike the power cap, so every die, primary or
secondary, gets the preset itself.
"""

from __future__ import annotations

import errno
import math
import re
from dataclasses import dataclass

from joulectl.backends.base import governor_status_for_errno
from joulectl.host import Host, HostIOError
from joulectl.models import GpuDevice, Status

PERF_LEVELS = {
    "auto": "auto",
    "peak": "profile_peak",
    "low": "low",
    "sustained": "profile_standard",
    "efficient": "manual",
}
EFFICIENT_FRACTION = 0.75

_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY})
_LEVEL = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*[Mm][Hh]z\s*(\*)?\s*$")


@dataclass(frozen=True)
class SclkLevel:
    index: int
    mhz: int
    current: bool


@dataclass(frozen=True)
class WriteResult:
    status: Status
    message: str = ""
    after: str | None = None


def perf_level_path(device: GpuDevice) -> str:
    return f"/sys/bus/pci/devices/{device.bus_id}/power_dpm_force_performance_level"


def sclk_path(device: GpuDevice) -> str:
    return f"/sys/bus/pci/devices/{device.bus_id}/pp_dpm_sclk"


def status_for_errno(err: int) -> Status:
    """The governor's errno table for amdgpu (SPEC §5)."""
    return governor_status_for_errno(err, _UNSUPPORTED)


def parse_sclk(text: str) -> list[SclkLevel]:
    """``pp_dpm_sclk`` (``"0: 500Mhz *"`` per line) -> levels; empty when not a level table."""
    levels = []
    for line in text.splitlines():
        m = _LEVEL.match(line)
        if m:
            levels.append(SclkLevel(int(m.group(1)), int(m.group(2)), bool(m.group(3))))
    return levels


def read_perf_level(host: Host, device: GpuDevice) -> str | None:
    attr = host.read_attr(perf_level_path(device))
    return attr.value or None


def read_sclk(host: Host, device: GpuDevice) -> list[SclkLevel]:
    attr = host.read_attr(sclk_path(device))
    return parse_sclk(attr.value or "")


def efficient_levels(levels: list[SclkLevel]) -> tuple[list[int], int]:
    """The level indices at or below the efficient ceiling, and the ceiling in MHz.

    The ceiling is 75 % of the top level rounded down to whole MHz, and never below the lowest
    level, so at least the lowest level is always selected.
    """
    top = max(lv.mhz for lv in levels)
    lowest = min(lv.mhz for lv in levels)
    ceiling = max(math.floor(EFFICIENT_FRACTION * top), lowest)
    chosen = sorted(lv.index for lv in levels if lv.mhz <= ceiling)
    return chosen, ceiling


def describe_levels(levels: list[SclkLevel], indices: list[int]) -> str:
    mhz = sorted(lv.mhz for lv in levels if lv.index in indices)
    if not mhz:
        return "sclk levels " + " ".join(str(i) for i in indices)
    span = f"{mhz[0]}" if mhz[0] == mhz[-1] else f"{mhz[0]}-{mhz[-1]}"
    return f"sclk levels {' '.join(str(i) for i in indices)} ({span} MHz)"


def write_perf_level(host: Host, device: GpuDevice, level: str) -> WriteResult:
    """Write the performance level and read it back."""
    path = perf_level_path(device)
    try:
        host.write(path, level)
    except HostIOError as e:
        return WriteResult(status_for_errno(e.errno),
                           f"writing {level} to {path}: {e.errno_name}: {e.strerror}")
    back = read_perf_level(host, device)
    if back != level:
        return WriteResult(Status.ERROR, f"{path} reads back {back or 'nothing'} after writing {level}", back)
    return WriteResult(Status.APPLIED, "", back)


def write_sclk_levels(host: Host, device: GpuDevice, indices: list[int]) -> WriteResult:
    """Write the ``pp_dpm_sclk`` level mask and read it back.

    The file lists every level whatever the mask, so the readback confirms the write landed and
    checks the level in use (``*``): inside the mask -> ``applied``; outside it, or no level
    table to read (the clock has not moved yet) -> ``applied-unverified``.
    """
    path = sclk_path(device)
    text = " ".join(str(i) for i in indices)
    try:
        host.write(path, text)
    except HostIOError as e:
        return WriteResult(status_for_errno(e.errno),
                           f"writing levels {text} to {path}: {e.errno_name}: {e.strerror}")
    return verify_sclk(host, device, indices)


def verify_sclk(host: Host, device: GpuDevice, indices: list[int]) -> WriteResult:
    """Whether the sclk level in use lies inside the mask joulectl set."""
    levels = read_sclk(host, device)
    current = [lv for lv in levels if lv.current]
    if not current:
        return WriteResult(Status.APPLIED_UNVERIFIED, "sclk level in use not readable yet")
    if current[0].index in indices:
        return WriteResult(Status.APPLIED, "", f"sclk level {current[0].index} ({current[0].mhz} MHz)")
    return WriteResult(
        Status.APPLIED_UNVERIFIED,
        f"sclk level {current[0].index} ({current[0].mhz} MHz) still in use, outside the mask",
    )
