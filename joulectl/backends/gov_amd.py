"""AMD clock governor: ``power_dpm_force_performance_level`` and ``pp_dpm_sclk`` in sysfs.

Facts this module relies on, with their sources: docs/hardware.md §1.4-1.5 (performance levels,
``pp_dpm_sclk`` format and errors).

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
from typing import TYPE_CHECKING, Any

from joulectl.backends.base import (
    GOVERNOR_COMMAND,
    OPERATOR,
    PRESET_SETTING,
    DeviceGovernor,
    ShowRow,
    governor_status_for_errno,
    gpu_result,
    preset_of,
    verified,
)
from joulectl.host import Host, HostIOError
from joulectl.models import GPU_PRESETS, OK_STATUSES, DeviceResult, GpuDevice, Status
from joulectl.record import record

if TYPE_CHECKING:  # the journal is imported by the runs that write, not by discover's presets
    from joulectl.ops.journal import Intent, Journal

PERF_LEVELS = {
    "auto": "auto",
    "peak": "profile_peak",
    "low": "low",
    "sustained": "profile_standard",
    "efficient": "manual",
}
EFFICIENT_FRACTION = 0.75

_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY})
#: Compiled at its first use (``re``'s cache), not by discover, which loads this module for the presets.
_LEVEL = r"^\s*(\d+)\s*:\s*(\d+)\s*[Mm][Hh]z\s*(\*)?\s*$"


@record(frozen=True)
class SclkLevel:
    index: int
    mhz: int
    current: bool


@record(frozen=True)
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
        m = re.match(_LEVEL, line)
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


def presets(device: GpuDevice, model_presets: dict[str, Any] | None = None,
            host: Host | None = None) -> tuple[str, ...]:
    """The presets an AMD GPU accepts: all five when ``power_dpm_force_performance_level`` is
    present (``efficient`` also needs ``pp_dpm_sclk`` levels). ``sustained`` is
    ``profile_standard``, so it needs no model entry."""
    if device.perf_level is None:
        return ()
    names = {"auto", "sustained", "low", "peak"} | ({"efficient"} if device.sclk_levels_mhz else set())
    return tuple(p for p in GPU_PRESETS if p in names)


def describe(level: str | None, sclk: Any) -> str:
    if level is None:
        return "unknown"
    if level == "manual" and isinstance(sclk, str) and sclk:
        return f"manual (sclk levels {sclk})"
    return level


class AmdGovernor(DeviceGovernor):
    """The governor contract (:class:`~joulectl.backends.base.GovernorBackend`) on amdgpu sysfs."""

    def accepted(self, device: GpuDevice) -> tuple[str, ...]:
        return presets(device, self.model_presets)

    def _undo_device(self, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
        return self._undo(journal, dev, dry_run)

    def _set(self, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
             intents: list[Intent] | None = None) -> DeviceResult:
        from joulectl.ops.journal import Intent

        host = self.host
        bus = dev.bus_id
        path = perf_level_path(dev)
        attr = host.read_attr(path)
        level_now = attr.value or None
        if level_now is None:
            why = "missing" if attr.errno == 2 else (attr.reason or "empty")
            return gpu_result(dev, Status.BLOCKED, f"no performance level control ({path}: {why})", preset=preset)
        sclk_now = journal.current(bus, "sclkLevels") if level_now == "manual" else None
        before = describe(level_now, sclk_now)
        target_level = PERF_LEVELS[preset]
        indices: list[int] = []
        after = target_level
        if preset == "efficient":
            levels = read_sclk(host, dev)
            if not levels and level_now == "manual" and journal.current(bus, "sclkLevels"):
                # the mask joulectl wrote, not yet listed again as levels (before the driver's next update)
                return gpu_result(dev, Status.UNCHANGED, "already in force", preset=preset, before=before, after=before)
            if not levels:
                return gpu_result(dev, Status.BLOCKED, f"no sclk levels in {sclk_path(dev)}", preset=preset,
                               before=before)
            indices, ceiling = efficient_levels(levels)
            after = f"manual ({describe_levels(levels, indices)}, ceiling {ceiling} MHz)"
        mask = " ".join(str(i) for i in indices)
        if level_now == target_level and (not indices or journal.current(bus, "sclkLevels") == mask):
            return gpu_result(dev, Status.UNCHANGED, "already in force", preset=preset, before=before, after=before)
        if dry_run:
            if intents is not None:
                if level_now != target_level:
                    intents.append(Intent(bus, "perfLevel", level_now, target_level, dev.vendor, dev.model))
                if indices:
                    intents.append(Intent(bus, "sclkLevels", None, mask, dev.vendor, dev.model))
            return gpu_result(dev, Status.PLANNED, f"would write {target_level} to {path}"
                           + (f" and levels {mask} to pp_dpm_sclk" if indices else ""),
                           preset=preset, before=before, after=after)
        had_level_entry = journal.has_original(bus, "perfLevel")
        if level_now != target_level:
            w = write_perf_level(host, dev, target_level)
            if w.status not in OK_STATUSES:
                return gpu_result(dev, w.status, w.message, preset=preset, before=before,
                               after=read_perf_level(host, dev))
            journal.record(bus, "perfLevel", level_now, target_level, vendor=dev.vendor, model=dev.model,
                           command=GOVERNOR_COMMAND)
        status = Status.APPLIED
        message = ""
        if indices:
            w = write_sclk_levels(host, dev, indices)
            if w.status not in OK_STATUSES:
                notes = [w.message]
                if level_now != target_level:
                    back = write_perf_level(host, dev, level_now)
                    if back.status in OK_STATUSES:
                        notes.append(f"performance level put back to {level_now}")
                        if had_level_entry:
                            journal.record(bus, "perfLevel", level_now, level_now, command=GOVERNOR_COMMAND)
                        else:
                            journal.restored(bus, "perfLevel", command=GOVERNOR_COMMAND)
                    else:
                        notes.append(f"putting the performance level back to {level_now} failed: {back.message}")
                return gpu_result(dev, w.status, "; ".join(notes), preset=preset, before=before,
                               after=describe(read_perf_level(host, dev), None))
            journal.record(bus, "sclkLevels", None, mask, vendor=dev.vendor, model=dev.model, command=GOVERNOR_COMMAND)
            status, message = w.status, w.message
        elif journal.has_original(bus, "sclkLevels"):
            journal.restored(bus, "sclkLevels", command=GOVERNOR_COMMAND)  # leaving manual drops the mask
        journal.record(bus, PRESET_SETTING, None, {"preset": preset, "status": str(status)}, vendor=dev.vendor,
                       model=dev.model, command=GOVERNOR_COMMAND)
        return gpu_result(dev, status, message, preset=preset, before=before, after=after)

    def _undo(self, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
        host = self.host
        bus = dev.bus_id
        level_now = read_perf_level(host, dev)
        before = describe(level_now, journal.current(bus, "sclkLevels"))
        if not journal.set_by_joulectl(bus, "perfLevel"):
            if level_now not in (None, "auto"):
                return gpu_result(dev, Status.UNCHANGED, f"performance level {level_now} {OPERATOR}", before=before,
                               after=before)
            return gpu_result(dev, Status.UNCHANGED, "nothing set by joulectl", before=before, after=before)
        ours = journal.current(bus, "perfLevel")
        original = journal.original(bus, "perfLevel")
        # a run killed around its write leaves the level it was about to set pending: in force or not
        pending = journal.pending(bus, "perfLevel")
        # an empty or unreadable level is no operator's choice (a plain file a killed write truncated)
        if level_now is not None and level_now != ours and level_now not in pending:
            ours = ours if ours is not None or not pending else pending[-1]
            if not dry_run:
                for s in ("perfLevel", "sclkLevels", PRESET_SETTING):
                    if journal.has_original(bus, s):
                        journal.restored(bus, s, command=GOVERNOR_COMMAND)
            return gpu_result(dev, Status.UNCHANGED,
                           f"performance level changed to {level_now} since joulectl set {ours}: "
                           f"{OPERATOR.split(': ')[-1]}", before=before, after=before)
        target = str(original or "auto")
        if dry_run:
            return gpu_result(dev, Status.PLANNED, f"would write {target} to {perf_level_path(dev)}",
                           before=before, after=target)
        if level_now != target or journal.set_by_joulectl(bus, "sclkLevels"):
            w = write_perf_level(host, dev, target)
            if w.status not in OK_STATUSES:
                return gpu_result(dev, w.status, w.message, before=before, after=level_now)
        for s in ("perfLevel", "sclkLevels", PRESET_SETTING):
            if journal.has_original(bus, s):
                journal.restored(bus, s, command=GOVERNOR_COMMAND)
        return gpu_result(dev, Status.APPLIED, "performance level set by joulectl restored", before=before,
                       after=target)

    def _show(self, journal: Journal, dev: GpuDevice) -> ShowRow:
        host = self.host
        bus = dev.bus_id
        level = read_perf_level(host, dev)
        preset, status = preset_of(journal, bus)
        ours = journal.current(bus, "perfLevel")
        mask = journal.current(bus, "sclkLevels")
        levels = read_sclk(host, dev)
        current = next((lv for lv in levels if lv.current), None)
        clocks = f"sclk level {current.index} ({current.mhz} MHz)" if current else None
        row = ShowRow(bus, dev.vendor, dev.model or dev.raw_model, "gpu", None, None,
                      describe(level, mask if ours == level else None), None, clocks,
                      self.accepted(dev))
        if level is None:
            row.in_force = "unknown"
            row.message = "no performance level control"
            return row
        if journal.set_by_joulectl(bus, "perfLevel") and ours == level:
            row.set_by, row.preset = "joulectl", preset
            row.status = status or str(Status.APPLIED)
            if row.status == str(Status.APPLIED_UNVERIFIED) and isinstance(mask, str):
                indices = [int(i) for i in mask.split()]
                v = verify_sclk(host, dev, indices)
                if v.status == Status.APPLIED:
                    return verified(row, journal, "sclk level in use inside the mask: verified")
                else:
                    row.message = v.message
            return row
        if level != "auto":
            row.set_by = "operator"
            row.message = "set by the operator, not by joulectl" if not journal.set_by_joulectl(bus, "perfLevel") \
                else f"changed since joulectl set {ours}"
        return row


def governor(host: Host, model_presets: dict[str, Any] | None = None) -> AmdGovernor:
    return AmdGovernor(host, model_presets)
