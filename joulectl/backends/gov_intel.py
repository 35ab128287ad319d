"""Intel GPU clock governor: the GT frequency limits of i915 and xe in sysfs, on every GT of every tile.

Facts this module relies on, with their sources: docs/hardware.md §2.3 (i915 and xe GT frequency
files).

Files (MHz, written as root, every write read back):

- xe: ``/sys/bus/pci/devices/<bdf>/tile<T>/gt<N>/freq0/{min_freq,max_freq}`` with the landmarks
  ``rp0_freq`` (highest), ``rpe_freq`` (efficient), ``rpn_freq`` (lowest) and ``act_freq``.
- i915: per GT ``.../drm/card<C>/gt/gt<N>/rps_{min,max}_freq_mhz`` with ``rps_RP0/RP1/RPn_freq_mhz``
  and ``rps_act_freq_mhz`` (Linux 6.2+); without per-GT files the card's ``gt_{min,max}_freq_mhz``
  and ``gt_RP0/RP1/RPn_freq_mhz``.

Presets (SPEC §5, docs/governor.md), per GT:

- ``efficient``: maximum = 75 % of RP0 rounded down to the driver's step (50 MHz: the DG2 and
  Battlemage frequency ladders are multiples of 50 MHz, which the drivers' 50/3 MHz units hold
  exactly), never below RP1 (i915) or RPe (xe); the minimum is lowered to it when above.
- ``low``: maximum = RPn (and so the minimum RPn).
- ``peak``: minimum = maximum = RP0.
- ``sustained``: minimum = maximum = the model's ``graphicsMHz`` from the model presets (snapped
  down to the step, within RPn..RP0); no model entry -> ``blocked``.
- ``auto``: the minimum and maximum in force before joulectl's first change.

The drivers refuse a minimum above the maximum and anything outside RPn..RP0 with EINVAL, so the
two writes of a GT are ordered to keep min <= max at every step. Errors as for amdgpu: EINVAL,
EOPNOTSUPP, EBUSY -> ``unsupported``; EACCES, EPERM, EROFS -> ``refused``; another errno, or a
readback that differs from the write, -> ``error``.
"""

from __future__ import annotations

import errno
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from joulectl.backends.base import (
    GOVERNOR_COMMAND,
    PRESET_SETTING,
    DeviceGovernor,
    ShowRow,
    governor_status_for_errno,
    gpu_result,
    model_preset_for,
    preset_of,
)
from joulectl.host import Host, HostIOError
from joulectl.models import GPU_PRESETS, OK_STATUSES, DeviceResult, GpuDevice, Status
from joulectl.record import record

if TYPE_CHECKING:  # the journal is imported by the runs that write, not by discover's presets
    from joulectl.ops.journal import Intent, Journal

EFFICIENT_FRACTION = 0.75
STEP_MHZ = 50
_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY})
_NUMBERED = re.compile(r"^(tile|gt|card)(\d+)$")

#: The file names of one GT under each layout: (min, max, RP0, floor (RP1/RPe), RPn, actual).
_XE = ("min_freq", "max_freq", "rp0_freq", "rpe_freq", "rpn_freq", "act_freq")
_I915_GT = ("rps_min_freq_mhz", "rps_max_freq_mhz", "rps_RP0_freq_mhz", "rps_RP1_freq_mhz", "rps_RPn_freq_mhz",
            "rps_act_freq_mhz")
_I915_CARD = ("gt_min_freq_mhz", "gt_max_freq_mhz", "gt_RP0_freq_mhz", "gt_RP1_freq_mhz", "gt_RPn_freq_mhz",
              "gt_act_freq_mhz")


class PresetBlocked(Exception):
    """The preset cannot be expressed on this GPU (the message says why)."""


@record(frozen=True)
class Gt:
    """One GT's frequency files and values as read (MHz; None when unreadable)."""

    name: str  # tile0/gt0 (xe), gt0 (i915), card0 (i915 card-level files)
    directory: str
    files: tuple[str, str, str, str, str, str]
    min_mhz: int | None
    max_mhz: int | None
    rp0: int | None
    floor: int | None  # RP1 (i915) or RPe (xe)
    rpn: int | None
    act: int | None

    def path(self, which: str) -> str:
        return f"{self.directory}/{self.files[0 if which == 'min' else 1]}"

    @property
    def usable(self) -> bool:
        return None not in (self.min_mhz, self.max_mhz, self.rp0, self.rpn)

    def describe(self, lo: int | None = None, hi: int | None = None) -> str:
        lo = self.min_mhz if lo is None else lo
        hi = self.max_mhz if hi is None else hi
        span = "unknown" if lo is None or hi is None else f"{lo} MHz" if lo == hi else f"{lo}-{hi} MHz"
        return f"{self.name} {span}"


def _numbered(host: Host, directory: str, prefix: str) -> list[str]:
    names = [n for n in host.listdir(directory) if (m := _NUMBERED.match(n)) and m.group(1) == prefix]
    return sorted(names, key=lambda n: int(n[len(prefix):]))


def _mhz(host: Host, path: str) -> int | None:
    attr = host.read_attr(path)
    text = (attr.value or "").split()
    return int(text[0]) if text and text[0].isascii() and text[0].isdigit() and len(text[0]) < 7 else None


def _gt(host: Host, name: str, directory: str, files: tuple[str, str, str, str, str, str]) -> Gt:
    values = [_mhz(host, f"{directory}/{f}") for f in files]
    return Gt(name, directory, files, *values)


def device_dir(device: GpuDevice) -> str:
    return f"/sys/bus/pci/devices/{device.bus_id}"


def read_gts(host: Host, device: GpuDevice) -> list[Gt]:
    """Every GT of every tile of an Intel GPU, as the driver lays them out (empty: no frequency files)."""
    base = device_dir(device)
    gts: list[Gt] = []
    for tile in _numbered(host, base, "tile"):
        for gt in _numbered(host, f"{base}/{tile}", "gt"):
            freq = f"{base}/{tile}/{gt}/freq0"
            if host.exists(f"{freq}/max_freq"):
                gts.append(_gt(host, f"{tile}/{gt}", freq, _XE))
    if gts:
        return gts
    for card in _numbered(host, f"{base}/drm", "card"):
        per_gt = [g for g in _numbered(host, f"{base}/drm/{card}/gt", "gt")
                  if host.exists(f"{base}/drm/{card}/gt/{g}/rps_max_freq_mhz")]
        if per_gt:
            gts += [_gt(host, g, f"{base}/drm/{card}/gt/{g}", _I915_GT) for g in per_gt]
        elif host.exists(f"{base}/drm/{card}/gt_max_freq_mhz"):
            gts.append(_gt(host, card, f"{base}/drm/{card}", _I915_CARD))
    return gts


def status_for_errno(err: int) -> Status:
    """The governor's errno table for i915 and xe (as for amdgpu, SPEC §5)."""
    return governor_status_for_errno(err, _UNSUPPORTED)


def setting(gt: Gt, which: str) -> str:
    """The journal setting of one bound of one GT: ``gtMinMHz:tile0/gt0``."""
    return f"gt{which.capitalize()}MHz:{gt.name}"


def _step_down(mhz: float) -> int:
    return int(math.floor(mhz / STEP_MHZ) * STEP_MHZ)


def limits_for(gt: Gt, preset: str, model_entry: dict[str, Any] | None, original_min: int) -> tuple[int, int]:
    """(min, max) MHz ``preset`` wants on ``gt``; ``original_min`` is the minimum in force before
    joulectl (kept where the preset allows it). :class:`PresetBlocked` when it cannot be said."""
    if not gt.usable:
        raise PresetBlocked(f"{gt.name}: frequency limits or RP0/RPn unreadable in {gt.directory}")
    rp0, rpn = int(gt.rp0 or 0), int(gt.rpn or 0)
    if preset == "peak":
        return rp0, rp0
    if preset == "low":
        return rpn, rpn
    if preset == "efficient":
        top = max(_step_down(EFFICIENT_FRACTION * rp0), gt.floor or rpn, rpn)
        top = min(top, rp0)
        return min(original_min, top), top
    if preset == "sustained":
        if model_entry is None:
            raise PresetBlocked("no sustained clock for this model in the model presets (--model-presets FILE)")
        clock = min(max(_step_down(int(model_entry["graphicsMHz"])), rpn), rp0)
        return clock, clock
    raise PresetBlocked(f"unknown GPU preset {preset!r}")


def presets(device: GpuDevice, model_presets: dict[str, Any] | None = None,
            host: Host | None = None) -> tuple[str, ...]:
    """The presets an Intel GPU accepts: ``auto efficient low peak`` when every GT's limits and
    landmarks are readable, ``sustained`` too with a model entry. Without ``host`` (nothing to
    read the GTs with) none."""
    if host is None:
        return ()
    gts = read_gts(host, device)
    if not gts or not all(g.usable for g in gts):
        return ()
    names = {"auto", "efficient", "low", "peak"}
    if model_preset_for(device, model_presets):
        names.add("sustained")
    return tuple(p for p in GPU_PRESETS if p in names)


@record(frozen=True)
class _Write:
    gt: Gt
    which: str  # min | max
    before: int | None
    value: int


def _ordered(gt: Gt, lo: int | None, hi: int | None) -> list[_Write]:
    """The writes taking ``gt`` to ``lo..hi`` in an order that keeps min <= max at every step
    (the maximum first unless it goes below the minimum in force). A bound without a target
    (None: unreadable, and not one joulectl set) is not written; the other one is."""
    writes = []
    if gt.min_mhz != lo and lo is not None:
        writes.append(_Write(gt, "min", gt.min_mhz, lo))
    if gt.max_mhz != hi and hi is not None:
        writes.append(_Write(gt, "max", gt.max_mhz, hi))
    if len(writes) == 2 and writes[1].value >= int(gt.min_mhz or 0):
        writes.reverse()
    return writes


class IntelGovernor(DeviceGovernor):
    """The governor contract (:class:`~joulectl.backends.base.GovernorBackend`) on i915 and xe."""

    def accepted(self, device: GpuDevice) -> tuple[str, ...]:
        return presets(device, self.model_presets, self.host)

    def _undo_device(self, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
        return self._undo(journal, dev, None, dry_run)

    # -- internals ---------------------------------------------------------------------------

    def _gts(self, dev: GpuDevice) -> tuple[list[Gt], str | None]:
        gts = read_gts(self.host, dev)
        if not gts:
            return gts, (f"no GT frequency files under {device_dir(dev)} (tile*/gt*/freq0 for xe, "
                         "drm/card*/gt/gt*/rps_*_freq_mhz or drm/card*/gt_*_freq_mhz for i915)")
        return gts, None

    @staticmethod
    def _in_force(gts: Sequence[Gt]) -> str:
        return ", ".join(g.describe() for g in gts)

    @staticmethod
    def _original(journal: Journal, bus: str, gt: Gt, which: str) -> int | None:
        key = setting(gt, which)
        value = journal.original(bus, key) if journal.set_by_joulectl(bus, key) else None
        now = gt.min_mhz if which == "min" else gt.max_mhz
        return value if isinstance(value, int) else now

    def _write(self, journal: Journal, dev: GpuDevice, w: _Write) -> tuple[Status, str]:
        path = w.gt.path(w.which)
        try:
            self.host.write(path, str(w.value))
        except HostIOError as e:
            return status_for_errno(e.errno), f"writing {w.value} to {path}: {e.errno_name}: {e.strerror}"
        back = _mhz(self.host, path)
        if back != w.value:
            return Status.ERROR, f"{path} reads back {back if back is not None else 'nothing'} after writing {w.value}"
        journal.record(dev.bus_id, setting(w.gt, w.which), w.before, w.value, vendor=dev.vendor, model=dev.model,
                       command=GOVERNOR_COMMAND)
        return Status.APPLIED, ""

    def _set(self, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
             intents: list[Intent] | None = None) -> DeviceResult:
        if preset == "auto":
            return self._undo(journal, dev, preset, dry_run, intents)
        gts, missing = self._gts(dev)
        if missing:
            return gpu_result(dev, Status.BLOCKED, missing, preset=preset)
        before = self._in_force(gts)
        entry = model_preset_for(dev, self.model_presets)
        writes: list[_Write] = []
        targets = []
        try:
            for gt in gts:
                lo, hi = limits_for(gt, preset, entry, int(self._original(journal, dev.bus_id, gt, "min") or 0))
                targets.append(gt.describe(lo, hi))
                writes += _ordered(gt, lo, hi)
        except PresetBlocked as e:
            return gpu_result(dev, Status.BLOCKED, str(e), preset=preset, before=before)
        after = ", ".join(targets)
        return self._run(journal, dev, preset, writes, dry_run, intents, before, after,
                         f"frequency limits of {len(gts)} GT{'s' if len(gts) != 1 else ''} set")

    def _run(self, journal: Journal, dev: GpuDevice, preset: str | None, writes: list[_Write], dry_run: bool,
             intents: list[Intent] | None, before: str, after: str, done: str) -> DeviceResult:
        from joulectl.ops.journal import Intent

        if not writes:
            return gpu_result(dev, Status.UNCHANGED, "already in force", preset=preset, before=before, after=before)
        if dry_run:
            if intents is not None:
                intents += [Intent(dev.bus_id, setting(w.gt, w.which), w.before, w.value, dev.vendor, dev.model)
                            for w in writes]
            plan = ", ".join(f"{w.value} to {w.gt.name} {w.which}" for w in writes)
            return gpu_result(dev, Status.PLANNED, f"would write {plan}", preset=preset, before=before, after=after)
        for w in writes:
            status, message = self._write(journal, dev, w)
            if status not in OK_STATUSES:
                now = self._in_force(read_gts(self.host, dev))
                return gpu_result(dev, status, message, preset=preset, before=before, after=now)
        if preset is not None and preset != "auto":
            journal.record(dev.bus_id, PRESET_SETTING, None, {"preset": preset, "status": str(Status.APPLIED)},
                           vendor=dev.vendor, model=dev.model, command=GOVERNOR_COMMAND)
        elif journal.has_original(dev.bus_id, PRESET_SETTING):
            journal.restored(dev.bus_id, PRESET_SETTING, command=GOVERNOR_COMMAND)
        return gpu_result(dev, Status.APPLIED, done, preset=preset, before=before,
                          after=self._in_force(read_gts(self.host, dev)))

    def _undo(self, journal: Journal, dev: GpuDevice, preset: str | None, dry_run: bool,
              intents: list[Intent] | None = None) -> DeviceResult:
        """Put back the limits in force before joulectl, where joulectl set them and nobody
        changed them since (a limit changed since is the operator's: left alone, dropped)."""
        bus = dev.bus_id
        gts, _ = self._gts(dev)
        before = self._in_force(gts) if gts else "no GT frequency files"
        writes: list[_Write] = []
        targets = []
        changed = []
        ours_any = False
        for gt in gts:
            want: dict[str, int | None] = {"min": gt.min_mhz, "max": gt.max_mhz}
            for which in ("min", "max"):
                key = setting(gt, which)
                if not journal.set_by_joulectl(bus, key):
                    continue
                ours_any = True
                now = gt.min_mhz if which == "min" else gt.max_mhz
                ours = {v for v in (journal.current(bus, key), *journal.pending(bus, key)) if v is not None}
                if now is not None and now not in ours:
                    changed.append(f"{gt.name} {which}")
                    if not dry_run:
                        journal.restored(bus, key, command=GOVERNOR_COMMAND)
                    continue
                original = journal.original(bus, key)
                if isinstance(original, int):
                    want[which] = original
                elif not dry_run:
                    journal.restored(bus, key, command=GOVERNOR_COMMAND)
            lo, hi = want["min"], want["max"]
            targets.append(gt.describe(lo, hi))
            writes += _ordered(gt, lo, hi)
        if not ours_any:
            return gpu_result(dev, Status.UNCHANGED, "nothing set by joulectl", preset=preset, before=before,
                              after=before)
        if not writes:
            if not dry_run:
                self._forget(journal, dev, gts)
            msg = (f"{' and '.join(changed)} changed since joulectl set it: left alone" if changed
                   else "already in force")
            return gpu_result(dev, Status.UNCHANGED, msg, preset=preset, before=before, after=before)
        result = self._run(journal, dev, preset, writes, dry_run, intents, before, ", ".join(targets),
                           "frequency limits set by joulectl restored")
        if dry_run or result.status not in OK_STATUSES:
            return result
        self._forget(journal, dev, gts)
        if changed:
            result.message += f"; {' and '.join(changed)} changed since joulectl set it: left alone"
        return result

    @staticmethod
    def _forget(journal: Journal, dev: GpuDevice, gts: Sequence[Gt]) -> None:
        for key in [*(setting(g, w) for g in gts for w in ("min", "max")), PRESET_SETTING]:
            if journal.has_original(dev.bus_id, key):
                journal.restored(dev.bus_id, key, command=GOVERNOR_COMMAND)

    def _show(self, journal: Journal, dev: GpuDevice) -> ShowRow:
        bus = dev.bus_id
        gts, missing = self._gts(dev)
        preset, status = preset_of(journal, bus)
        acts = [f"{g.name} {g.act} MHz" for g in gts if g.act is not None]
        row = ShowRow(bus, dev.vendor, dev.model or dev.raw_model, "gpu", None, None,
                      self._in_force(gts) if gts else "no governor", None, ", ".join(acts) or None,
                      self.accepted(dev))
        if missing:
            row.message = missing
            return row
        ours = [(g, w) for g in gts for w in ("min", "max") if journal.set_by_joulectl(bus, setting(g, w))]
        if not ours:
            return row
        moved = [f"{g.name} {w}" for g, w in ours
                 if journal.current(bus, setting(g, w)) != (g.min_mhz if w == "min" else g.max_mhz)]
        if moved:
            row.set_by = "operator"
            row.message = f"{' and '.join(moved)} changed since joulectl set it"
            return row
        row.set_by, row.preset, row.status = "joulectl", preset, status or str(Status.APPLIED)
        return row


def governor(host: Host, model_presets: dict[str, Any] | None = None) -> IntelGovernor:
    return IntelGovernor(host, model_presets)
