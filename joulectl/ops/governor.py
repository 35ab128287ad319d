"""``joulectl governor``: clock governor presets for GPUs and CPUs, and undoing only what we set.

``show`` reports per device the preset and locks or levels in force, whether joulectl set them,
and verifies ``applied-unverified`` NVIDIA locks by sampling clocks (recording them as verified
in the journal). ``set PRESET`` applies one preset to every selected GPU (or every cpufreq
policy) through :func:`apply_preset`, which ``cap --schedule`` calls too. ``reset`` restores
what the journal recorded and never touches a lock or level joulectl did not set.

Journal settings (per PCI bus id, or ``cpufreq:<policy>`` for CPUs): ``gpuLockedClocks`` and
``memoryLockedClocks`` (``"min,max"`` MHz), ``perfLevel``, ``sclkLevels`` (``"0 1 2"``),
``cpuGovernor``, ``epp``, and ``governorPreset`` (``{"preset": ..., "status": ...}``: the preset
joulectl put in force and whether it was verified).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from joulectl.backends import gov_amd, gov_cpu, gov_nvidia
from joulectl.backends.base import PRIVILEGE_HINT
from joulectl.backends.gov_nvidia import ClockLock, ClockSample, PresetBlocked
from joulectl.errors import ExitCode, InputError, JoulectlError, NoDeviceError, PartialError, RefusedError
from joulectl.host import Host
from joulectl.models import (
    CPU_PRESETS,
    GPU_PRESETS,
    OK_STATUSES,
    CpufreqPolicy,
    DeviceResult,
    GpuDevice,
    NodeInventory,
    Status,
)
from joulectl.ops.journal import Intent, Journal, save_ahead
from joulectl.ops.select import select_devices

API_VERSION = "joulectl.io/v1alpha1"
COMMAND = "governor"
PRESET = "governorPreset"
NV_SETTINGS = {"graphics": "gpuLockedClocks", "memory": "memoryLockedClocks"}


MODEL_PRESETS_ENV = "GPU_GOVERNOR_MODEL_PRESETS_JSON"
OPERATOR = "locked by the operator, not by joulectl: left alone"
INTEL_BLOCKED = "no governor mapping for Intel GPUs"
#: nvidia-smi cannot list the locks in force: without one joulectl set (or discover read), say so.
NO_LOCK = "no lock set by joulectl"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
UNVERIFIED_HINT = "a lock cannot be read back: `joulectl governor show` verifies it"


# -- model presets -----------------------------------------------------------------------------


def parse_model_presets(data: Any, label: str) -> dict[str, dict[str, int]]:
    """Validate a model presets map: ``{"<product>": {"graphicsMHz": N[, "memoryMHz": M]}}``.

    Keys are GPU products without GFD suffixes (``NVIDIA H100 80GB HBM3``); a bare number is
    shorthand for ``{"graphicsMHz": N}``. Bad input is one :class:`InputError` naming the field.
    """
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", file=label)
    out: dict[str, dict[str, int]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key.strip():
            raise InputError("a model name must be a non-empty string", file=label, field=repr(key))
        entry = {"graphicsMHz": value} if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(entry, dict):
            raise InputError(
                f"expected an object like {{\"graphicsMHz\": 1755}}, found {type(value).__name__}",
                file=label, field=key,
            )
        unknown = sorted(set(entry) - {"graphicsMHz", "memoryMHz"})
        if unknown:
            raise InputError("unknown field (known: graphicsMHz, memoryMHz)", file=label,
                             field=f"{key}.{unknown[0]}")
        if "graphicsMHz" not in entry:
            raise InputError("missing (the sustained graphics clock in MHz)", file=label,
                             field=f"{key}.graphicsMHz")
        clean: dict[str, int] = {}
        for name in ("graphicsMHz", "memoryMHz"):
            if name not in entry:
                continue
            v = entry[name]
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InputError(f"must be a positive whole number of MHz, found {v!r}", file=label,
                                 field=f"{key}.{name}")
            clean[name] = v
        out[key] = clean
    return out


def load_model_presets(path: str | None) -> dict[str, dict[str, int]] | None:
    """The model presets from ``--model-presets FILE``, else ``$GPU_GOVERNOR_MODEL_PRESETS_JSON``
    (the map itself as JSON text), else None."""
    if path:
        from joulectl.yamlio import load_json_map

        label = "<stdin>" if path == "-" else path
        return parse_model_presets(load_json_map(path, what="model presets file"), label)
    text = os.environ.get(MODEL_PRESETS_ENV, "").strip()
    if not text:
        return None
    from joulectl.yamlio import parse_json_map

    return parse_model_presets(parse_json_map(text, f"${MODEL_PRESETS_ENV}"), f"${MODEL_PRESETS_ENV}")


# -- targets -----------------------------------------------------------------------------------


def resolve_target(preset: str, gpu: bool, cpu: bool) -> str:
    """``gpu`` or ``cpu``: the requested target whose presets include ``preset`` (exit 2 else)."""
    if gpu and preset in GPU_PRESETS:
        return "gpu"
    if cpu and preset in CPU_PRESETS:
        return "cpu"
    if gpu and not cpu:
        raise InputError(f"unknown GPU preset {preset!r} (GPU presets: {', '.join(GPU_PRESETS)})",
                         field="PRESET")
    if cpu and not gpu:
        raise InputError(f"unknown CPU preset {preset!r} (CPU presets: {', '.join(CPU_PRESETS)})",
                         field="PRESET")
    raise InputError(
        f"unknown preset {preset!r} (GPU presets: {', '.join(GPU_PRESETS)}; "
        f"CPU presets: {', '.join(CPU_PRESETS)})",
        field="PRESET",
    )


def _cpu_key(policy: CpufreqPolicy) -> str:
    return f"cpufreq:{policy.name}"


def _result(dev: GpuDevice, status: Status, message: str = "", **kw: Any) -> DeviceResult:
    return DeviceResult(device=dev.bus_id, vendor=dev.vendor, model=dev.model or dev.raw_model,
                        status=status, message=message, **kw)


def _nv_describe(graphics: Any, memory: Any) -> str:
    parts = []
    g = ClockLock.parse(graphics)
    m = ClockLock.parse(memory)
    if g:
        parts.append(f"graphics {g.describe()}")
    if m:
        parts.append(f"memory {m.describe()}")
    return ", ".join(parts) or NO_LOCK


def _operator_lock(dev: GpuDevice, domain: str) -> str | None:
    """A lock in force that discover could read (``clocks["lockedGraphicsMHz"]`` as ``"min,max"``)."""
    value = dev.clocks.get("locked_graphics" if domain == "graphics" else "locked_memory")
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return f"{int(value[0])},{int(value[1])}"
    lock = ClockLock.parse(value)
    return lock.text() if lock else None


# -- the GPU side ------------------------------------------------------------------------------


@dataclass
class _NvContext:
    host: Host
    devices: list[GpuDevice]
    _transport: gov_nvidia.Transport | None = None
    _tables: dict[str, dict[int, list[int]]] | None = None

    @property
    def transport(self) -> gov_nvidia.Transport:
        if self._transport is None:
            self._transport = gov_nvidia.transport(self.host)
        return self._transport

    def table(self, dev: GpuDevice) -> dict[int, list[int]]:
        if dev.supported_clocks:
            return gov_nvidia.normalize_table(dev.supported_clocks)
        if self._tables is None:
            missing = [d for d in self.devices if d.vendor == "nvidia" and not d.supported_clocks]
            self._tables = self.transport.supported_clocks(missing) if missing else {}
        return self._tables.get(dev.bus_id, {})


def accepted_presets(
    dev: GpuDevice, ctx: _NvContext | None, model_presets: dict[str, Any] | None
) -> tuple[str, ...]:
    """The GPU presets a device accepts (SPEC §5), with the clock table fetched when needed."""
    if dev.vendor == "nvidia" and ctx is not None:
        if gov_nvidia.eligibility(dev) or not ctx.table(dev):
            return ()
        presets = {"auto", "efficient", "low", "peak"}
        if gov_nvidia.model_preset_for(dev, model_presets):
            presets.add("sustained")
        return tuple(p for p in GPU_PRESETS if p in presets)
    if dev.vendor == "amd":
        from joulectl.backends.base import governor_presets

        return governor_presets(dev, model_presets)
    return ()


def _nv_restore(ctx: _NvContext, journal: Journal, dev: GpuDevice, domain: str) -> tuple[Status, str]:
    """Put one domain back to what the journal recorded before joulectl's first lock."""
    setting = NV_SETTINGS[domain]
    original = ClockLock.parse(journal.original(dev.bus_id, setting))
    if original:
        out = ctx.transport.lock(dev, domain, original)
    else:
        out = ctx.transport.reset(dev, domain)
    if out.status in OK_STATUSES:
        journal.restored(dev.bus_id, setting, command=COMMAND)
    return out.status, out.message


def _nv_set(
    ctx: _NvContext, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
    model_presets: dict[str, Any] | None, intents: list[Intent] | None = None,
) -> DeviceResult:
    reason = gov_nvidia.eligibility(dev)
    if reason:
        return _result(dev, Status.BLOCKED, reason, preset=preset)
    bus = dev.bus_id
    before = _nv_describe(
        journal.current(bus, NV_SETTINGS["graphics"]) or _operator_lock(dev, "graphics"),
        journal.current(bus, NV_SETTINGS["memory"]) or _operator_lock(dev, "memory"),
    )
    try:
        plan = gov_nvidia.plan_preset(
            ctx.table(dev), preset, gov_nvidia.model_preset_for(dev, model_presets),
            model=dev.model or dev.raw_model or "",
        )
    except PresetBlocked as e:
        return _result(dev, Status.BLOCKED, str(e), preset=preset, before=before)
    wanted = {"graphics": plan.graphics, "memory": plan.memory}
    # A reboot or driver reload drops every lock: a journaled lock from another boot, or one the
    # clocks discover just read run above, is gone and is set again. (A clock below the lock's
    # minimum is an idle GPU, not a lost lock.)
    sampled = {"graphics": dev.clocks.get("graphics_mhz"), "memory": dev.clocks.get("memory_mhz")}
    lost = _lost_in_reboot(ctx.host, journal, bus)
    steps: list[tuple[str, ClockLock | None]] = []
    for domain in ("graphics", "memory"):  # -lgc before -lmc
        want = wanted[domain]
        have = journal.current(bus, NV_SETTINGS[domain])
        now = sampled[domain]
        if want is None:
            if journal.set_by_joulectl(bus, NV_SETTINGS[domain]):
                steps.append((domain, None))
        elif have != want.text() or lost or (isinstance(now, (int, float)) and now > want.max_mhz):
            steps.append((domain, want))
    target = _nv_describe(plan.graphics.text() if plan.graphics else None,
                          plan.memory.text() if plan.memory else None)
    if not steps:
        if preset == "auto":
            operator = [d for d in ("graphics", "memory") if _operator_lock(dev, d)]
            msg = f"{' and '.join(operator)} clocks {OPERATOR}" if operator else "no lock set by joulectl"
            return _result(dev, Status.UNCHANGED, msg, preset=preset, before=before, after=before)
        rec = journal.current(bus, PRESET) or {}
        msg = "already in force"
        if isinstance(rec, dict) and rec.get("status") == str(Status.APPLIED_UNVERIFIED):
            msg = "already set; " + UNVERIFIED_HINT
        return _result(dev, Status.UNCHANGED, msg, preset=preset, before=before, after=target)
    if dry_run:
        if intents is not None:  # the locks this run sets (an undo goes back to the journaled original)
            intents += [Intent(bus, NV_SETTINGS[d], _operator_lock(dev, d), w.text(), dev.vendor, dev.model)
                        for d, w in steps if w is not None]
        cmds = ", ".join(f"lock {d} {w.describe()}" if w else f"undo joulectl's {d} lock" for d, w in steps)
        return _result(dev, Status.PLANNED, f"would {cmds} via {ctx.transport.name}", preset=preset,
                       before=before, after=target)
    wrote = False
    for domain, want in steps:
        if want is None:
            status, msg = _nv_restore(ctx, journal, dev, domain)
            if status not in OK_STATUSES:
                return _result(dev, status, msg, preset=preset, before=before,
                               after=_nv_describe(journal.current(bus, NV_SETTINGS["graphics"]),
                                                  journal.current(bus, NV_SETTINGS["memory"])))
            continue
        out = ctx.transport.lock(dev, domain, want)
        if out.status in OK_STATUSES:
            journal.record(bus, NV_SETTINGS[domain], _operator_lock(dev, domain), want.text(),
                           vendor=dev.vendor, model=dev.model, command=COMMAND)
            wrote = True
            continue
        notes = [out.message]
        if out.status != Status.UNSUPPORTED and not wrote:
            # refused or failed before anything changed: what was in force stays in force
            return _result(dev, out.status, out.message, preset=preset, before=before, after=before)
        # The preset cannot be put in force: record no lock, and undo every lock joulectl holds
        # on this GPU (the -lgc of low when its -lmc is refused).
        for d in ("graphics", "memory"):
            if journal.set_by_joulectl(bus, NV_SETTINGS[d]):
                st, m = _nv_restore(ctx, journal, dev, d)
                notes.append(f"{d} lock set by joulectl undone" if st in OK_STATUSES
                             else f"undoing the {d} lock failed: {m}")
        if journal.has_original(bus, PRESET):
            journal.restored(bus, PRESET, command=COMMAND)
        after = _nv_describe(journal.current(bus, NV_SETTINGS["graphics"]) or _operator_lock(dev, "graphics"),
                             journal.current(bus, NV_SETTINGS["memory"]) or _operator_lock(dev, "memory"))
        return _result(dev, out.status, "; ".join(notes), preset=preset, before=before, after=after)
    if preset == "auto":
        if journal.has_original(bus, PRESET):
            journal.restored(bus, PRESET, command=COMMAND)
        return _result(dev, Status.APPLIED, "locks set by joulectl reset", preset=preset, before=before,
                       after=_nv_describe(_operator_lock(dev, "graphics"), _operator_lock(dev, "memory")))
    record: dict[str, Any] = {"preset": preset, "status": str(Status.APPLIED_UNVERIFIED)}
    boot = boot_id(ctx.host)
    if boot:
        record["bootId"] = boot
    journal.record(bus, PRESET, None, record, vendor=dev.vendor, model=dev.model, command=COMMAND)
    return _result(dev, Status.APPLIED_UNVERIFIED, UNVERIFIED_HINT, preset=preset, before=before, after=target)


def boot_id(host: Host) -> str | None:
    """``/proc/sys/kernel/random/boot_id``: clock locks do not survive past it."""
    return host.read_attr(BOOT_ID).value or None


def _lost_in_reboot(host: Host, journal: Journal, bus: str) -> bool:
    """Whether the locks joulectl journaled for ``bus`` were set in an earlier boot."""
    rec = journal.current(bus, PRESET)
    then = rec.get("bootId") if isinstance(rec, dict) else None
    now = boot_id(host) if then else None
    return bool(then and now and then != now)


def _amd_describe(level: str | None, sclk: Any) -> str:
    if level is None:
        return "unknown"
    if level == "manual" and isinstance(sclk, str) and sclk:
        return f"manual (sclk levels {sclk})"
    return level


def _amd_set(host: Host, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
             intents: list[Intent] | None = None) -> DeviceResult:
    bus = dev.bus_id
    path = gov_amd.perf_level_path(dev)
    attr = host.read_attr(path)
    level_now = attr.value or None
    if level_now is None:
        why = "missing" if attr.errno == 2 else (attr.reason or "empty")
        return _result(dev, Status.BLOCKED, f"no performance level control ({path}: {why})", preset=preset)
    sclk_now = journal.current(bus, "sclkLevels") if level_now == "manual" else None
    before = _amd_describe(level_now, sclk_now)
    target_level = gov_amd.PERF_LEVELS[preset]
    indices: list[int] = []
    after = target_level
    if preset == "efficient":
        levels = gov_amd.read_sclk(host, dev)
        if not levels and level_now == "manual" and journal.current(bus, "sclkLevels"):
            # the mask joulectl wrote, not yet listed again as levels (before the driver's next update)
            return _result(dev, Status.UNCHANGED, "already in force", preset=preset, before=before, after=before)
        if not levels:
            return _result(dev, Status.BLOCKED, f"no sclk levels in {gov_amd.sclk_path(dev)}", preset=preset,
                           before=before)
        indices, ceiling = gov_amd.efficient_levels(levels)
        after = f"manual ({gov_amd.describe_levels(levels, indices)}, ceiling {ceiling} MHz)"
    mask = " ".join(str(i) for i in indices)
    if level_now == target_level and (not indices or journal.current(bus, "sclkLevels") == mask):
        return _result(dev, Status.UNCHANGED, "already in force", preset=preset, before=before, after=before)
    if dry_run:
        if intents is not None:
            if level_now != target_level:
                intents.append(Intent(bus, "perfLevel", level_now, target_level, dev.vendor, dev.model))
            if indices:
                intents.append(Intent(bus, "sclkLevels", None, mask, dev.vendor, dev.model))
        return _result(dev, Status.PLANNED, f"would write {target_level} to {path}"
                       + (f" and levels {mask} to pp_dpm_sclk" if indices else ""),
                       preset=preset, before=before, after=after)
    had_level_entry = journal.has_original(bus, "perfLevel")
    if level_now != target_level:
        w = gov_amd.write_perf_level(host, dev, target_level)
        if w.status not in OK_STATUSES:
            return _result(dev, w.status, w.message, preset=preset, before=before,
                           after=gov_amd.read_perf_level(host, dev))
        journal.record(bus, "perfLevel", level_now, target_level, vendor=dev.vendor, model=dev.model,
                       command=COMMAND)
    status = Status.APPLIED
    message = ""
    if indices:
        w = gov_amd.write_sclk_levels(host, dev, indices)
        if w.status not in OK_STATUSES:
            notes = [w.message]
            if level_now != target_level:
                back = gov_amd.write_perf_level(host, dev, level_now)
                if back.status in OK_STATUSES:
                    notes.append(f"performance level put back to {level_now}")
                    if had_level_entry:
                        journal.record(bus, "perfLevel", level_now, level_now, command=COMMAND)
                    else:
                        journal.restored(bus, "perfLevel", command=COMMAND)
                else:
                    notes.append(f"putting the performance level back to {level_now} failed: {back.message}")
            return _result(dev, w.status, "; ".join(notes), preset=preset, before=before,
                           after=_amd_describe(gov_amd.read_perf_level(host, dev), None))
        journal.record(bus, "sclkLevels", None, mask, vendor=dev.vendor, model=dev.model, command=COMMAND)
        status, message = w.status, w.message
    elif journal.has_original(bus, "sclkLevels"):
        journal.restored(bus, "sclkLevels", command=COMMAND)  # leaving manual drops the mask
    journal.record(bus, PRESET, None, {"preset": preset, "status": str(status)}, vendor=dev.vendor,
                   model=dev.model, command=COMMAND)
    return _result(dev, status, message, preset=preset, before=before, after=after)


def _gpu_devices(inventory: NodeInventory, selectors: Sequence[str]) -> list[GpuDevice]:
    return select_devices(inventory.gpus, list(selectors) or None)


def _set_gpus(
    host: Host, inventory: NodeInventory, journal: Journal, preset: str, selectors: Sequence[str],
    dry_run: bool, model_presets: dict[str, Any] | None, intents: list[Intent] | None = None,
    ctx: _NvContext | None = None,
) -> list[DeviceResult]:
    devices = _gpu_devices(inventory, selectors)
    if ctx is None:
        ctx = _NvContext(host, devices)
    else:  # shared with the write-ahead planning pass: the clock tables are fetched once
        ctx.devices = devices
    results = []
    for dev in devices:
        if dev.vendor == "nvidia":
            results.append(_nv_set(ctx, journal, dev, preset, dry_run, model_presets, intents))
        elif dev.vendor == "amd":
            results.append(_amd_set(host, journal, dev, preset, dry_run, intents))
        else:
            results.append(_result(dev, Status.BLOCKED, INTEL_BLOCKED if dev.vendor == "intel"
                                   else f"no governor mapping for {dev.vendor} GPUs", preset=preset))
    return results


# -- the CPU side ------------------------------------------------------------------------------


def _cpu_result(inventory: NodeInventory, policy: CpufreqPolicy, status: Status, message: str = "",
                **kw: Any) -> DeviceResult:
    cpu = inventory.cpu
    return DeviceResult(device=_cpu_key(policy), vendor=(cpu.vendor or "cpu").lower(),
                        model=cpu.raw_model or cpu.model, status=status, message=message, kind="cpu", **kw)


def _policies(inventory: NodeInventory) -> list[CpufreqPolicy]:
    if not inventory.cpu.policies:
        raise NoDeviceError("no cpufreq policy found on this node (no CPU governor control)")
    return list(inventory.cpu.policies)


def _cpu_write(host: Host, journal: Journal, inventory: NodeInventory, policy: CpufreqPolicy,
               state: gov_cpu.PolicyState, governor: str | None, epp: str | None) -> gov_cpu.WriteResult:
    """Write governor and EPP in the order that avoids EBUSY, journaling each write."""
    key = _cpu_key(policy)
    vendor = (inventory.cpu.vendor or "cpu").lower()
    model = inventory.cpu.model

    def do_gov() -> gov_cpu.WriteResult:
        if governor is None or governor == state.governor:
            return gov_cpu.WriteResult(Status.UNCHANGED)
        w = gov_cpu.write_governor(host, policy, governor)
        if w.status in OK_STATUSES:
            journal.record(key, "cpuGovernor", state.governor, governor, vendor=vendor, model=model,
                           kind="cpu", command=COMMAND)
            if governor == "performance" and state.epp not in (None, "performance") and epp is None:
                # the driver pins EPP to performance: journal it so reset brings the EPP back
                journal.record(key, "epp", state.epp, "performance", vendor=vendor, model=model, kind="cpu",
                               command=COMMAND)
        return w

    def do_epp() -> gov_cpu.WriteResult:
        if epp is None or epp == state.epp:
            return gov_cpu.WriteResult(Status.UNCHANGED)
        w = gov_cpu.write_epp(host, policy, epp)
        if w.status in OK_STATUSES:
            journal.record(key, "epp", state.epp, epp, vendor=vendor, model=model, kind="cpu",
                           command=COMMAND)
        return w

    order = (do_epp, do_gov) if governor is not None and gov_cpu.epp_first(governor) else (do_gov, do_epp)
    for step in order:
        w = step()
        if w.status not in OK_STATUSES:
            return w
    return gov_cpu.WriteResult(Status.APPLIED)


def _cpu_intents(inventory: NodeInventory, policy: CpufreqPolicy, state: gov_cpu.PolicyState,
                 governor: str | None, epp: str | None) -> list[Intent]:
    """What :func:`_cpu_write` journals for these targets, for the write-ahead save."""
    key = _cpu_key(policy)
    vendor = (inventory.cpu.vendor or "cpu").lower()
    model = inventory.cpu.model
    out = []
    if governor is not None and governor != state.governor:
        out.append(Intent(key, "cpuGovernor", state.governor, governor, vendor, model, "cpu"))
        if governor == "performance" and state.epp not in (None, "performance") and epp is None:
            out.append(Intent(key, "epp", state.epp, "performance", vendor, model, "cpu"))
    if epp is not None and epp != state.epp:
        out.append(Intent(key, "epp", state.epp, epp, vendor, model, "cpu"))
    return out


def _set_cpu(host: Host, inventory: NodeInventory, journal: Journal, preset: str,
             dry_run: bool, intents: list[Intent] | None = None) -> list[DeviceResult]:
    results = []
    for policy in _policies(inventory):
        state = gov_cpu.read_state(host, policy)
        if state.governor is None:
            results.append(_cpu_result(inventory, policy, Status.BLOCKED,
                                       f"{policy.path}/scaling_governor not readable", preset=preset))
            continue
        before = gov_cpu.describe(state.governor, state.epp)
        try:
            target = gov_cpu.target_for(preset, state)
        except gov_cpu.PresetBlocked as e:
            results.append(_cpu_result(inventory, policy, Status.BLOCKED, str(e), preset=preset, before=before))
            continue
        want_epp = target.epp if target.epp != state.epp else None
        after = gov_cpu.describe(target.governor, target.epp or (None if target.governor == "performance"
                                                                 else state.epp))
        if target.governor == state.governor and want_epp is None:
            results.append(_cpu_result(inventory, policy, Status.UNCHANGED, "already in force", preset=preset,
                                       before=before, after=before))
            continue
        if dry_run:
            if intents is not None:
                intents.extend(_cpu_intents(inventory, policy, state, target.governor, target.epp))
            results.append(_cpu_result(inventory, policy, Status.PLANNED, "", preset=preset, before=before,
                                       after=after))
            continue
        w = _cpu_write(host, journal, inventory, policy, state, target.governor, target.epp)
        now = gov_cpu.read_state(host, policy)
        if w.status in OK_STATUSES:
            journal.record(_cpu_key(policy), PRESET, None, {"preset": preset, "status": "applied"},
                           vendor=(inventory.cpu.vendor or "cpu").lower(), model=inventory.cpu.model,
                           kind="cpu", command=COMMAND)
        results.append(_cpu_result(inventory, policy, w.status if w.status not in OK_STATUSES
                                   else Status.APPLIED, w.message, preset=preset, before=before,
                                   after=gov_cpu.describe(now.governor, now.epp)))
    return results


# -- entry points ------------------------------------------------------------------------------


def _target_and_presets(
    preset: str, gpu: bool, cpu: bool, model_presets: dict[str, Any] | None
) -> tuple[str, dict[str, Any] | None]:
    """The target (``gpu`` or ``cpu``) ``preset`` applies to, and the model presets validated: a
    raw map (cap loads the file itself) is checked here, exit 2 naming the field."""
    target = resolve_target(preset, gpu, cpu)
    if model_presets is not None:
        model_presets = parse_model_presets(model_presets, "model presets")
    return target, model_presets


def apply_preset(
    host: Host,
    inventory: NodeInventory,
    journal: Journal,
    preset: str,
    *,
    gpu: bool = True,
    cpu: bool = False,
    selectors: Sequence[str] = (),
    dry_run: bool = False,
    model_presets: dict[str, Any] | None = None,
    ctx: _NvContext | None = None,
) -> list[DeviceResult]:
    """Put ``preset`` in force on every selected GPU, or on every cpufreq policy.

    The caller holds :func:`~joulectl.ops.lock.node_lock` and saves ``journal`` afterwards; before
    a real run it saves :func:`plan_intents` ahead (:func:`save_ahead`), in one save for the batch.
    ``gpu``/``cpu`` name the targets; the preset applies to the one whose presets include it
    (``InputError`` listing the presets otherwise). ``selectors`` (``--device``) pick GPUs;
    ``NoDeviceError`` when none match or the node has none.
    """
    target, model_presets = _target_and_presets(preset, gpu, cpu, model_presets)
    if target == "gpu":
        return _set_gpus(host, inventory, journal, preset, selectors, dry_run, model_presets, ctx=ctx)
    return _set_cpu(host, inventory, journal, preset, dry_run)


def plan_intents(
    host: Host,
    inventory: NodeInventory,
    journal: Journal,
    preset: str,
    *,
    gpu: bool = True,
    cpu: bool = False,
    selectors: Sequence[str] = (),
    model_presets: dict[str, Any] | None = None,
    ctx: _NvContext | None = None,
) -> list[Intent]:
    """The settings :func:`apply_preset` would write (its dry run, collected), to journal ahead.
    Raises what ``apply_preset`` raises (an unknown preset, no device)."""
    target, model_presets = _target_and_presets(preset, gpu, cpu, model_presets)
    intents: list[Intent] = []
    if target == "gpu":
        _set_gpus(host, inventory, journal, preset, selectors, True, model_presets, intents, ctx)
    else:
        _set_cpu(host, inventory, journal, preset, True, intents)
    return intents


def new_context(host: Host) -> _NvContext:
    """A clock-table cache to share between :func:`plan_intents` and :func:`apply_preset`."""
    return _NvContext(host, [])


def _reset_nvidia(ctx: _NvContext, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
    bus = dev.bus_id
    ours = [d for d in ("memory", "graphics") if journal.set_by_joulectl(bus, NV_SETTINGS[d])]
    before = _nv_describe(journal.current(bus, NV_SETTINGS["graphics"]) or _operator_lock(dev, "graphics"),
                          journal.current(bus, NV_SETTINGS["memory"]) or _operator_lock(dev, "memory"))
    if not ours:
        operator = [d for d in ("graphics", "memory") if _operator_lock(dev, d)]
        msg = f"{' and '.join(operator)} clocks {OPERATOR}" if operator else "nothing set by joulectl"
        if journal.has_original(bus, PRESET) and not dry_run:
            journal.restored(bus, PRESET, command=COMMAND)
        return _result(dev, Status.UNCHANGED, msg, before=before, after=before)
    target = _nv_describe(*(journal.original(bus, NV_SETTINGS[d]) if d in ours else
                            _operator_lock(dev, d) for d in ("graphics", "memory")))
    if dry_run:
        return _result(dev, Status.PLANNED, f"would undo joulectl's {' and '.join(ours)} locks",
                       before=before, after=target)
    for d in ours:
        status, msg = _nv_restore(ctx, journal, dev, d)
        if status not in OK_STATUSES:
            return _result(dev, status, msg, before=before)
    journal.restored(bus, PRESET, command=COMMAND)
    return _result(dev, Status.APPLIED, f"{' and '.join(ours)} locks set by joulectl undone", before=before,
                   after=target)


def _reset_amd(host: Host, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
    bus = dev.bus_id
    level_now = gov_amd.read_perf_level(host, dev)
    before = _amd_describe(level_now, journal.current(bus, "sclkLevels"))
    if not journal.set_by_joulectl(bus, "perfLevel"):
        if level_now not in (None, "auto"):
            return _result(dev, Status.UNCHANGED, f"performance level {level_now} {OPERATOR}", before=before,
                           after=before)
        return _result(dev, Status.UNCHANGED, "nothing set by joulectl", before=before, after=before)
    ours = journal.current(bus, "perfLevel")
    original = journal.original(bus, "perfLevel")
    # a run killed around its write leaves the level it was about to set pending: in force or not
    pending = journal.pending(bus, "perfLevel")
    # an empty or unreadable level is no operator's choice (a plain file a killed write truncated)
    if level_now is not None and level_now != ours and level_now not in pending:
        ours = ours if ours is not None or not pending else pending[-1]
        if not dry_run:
            for s in ("perfLevel", "sclkLevels", PRESET):
                if journal.has_original(bus, s):
                    journal.restored(bus, s, command=COMMAND)
        return _result(dev, Status.UNCHANGED,
                       f"performance level changed to {level_now} since joulectl set {ours}: "
                       f"{OPERATOR.split(': ')[-1]}", before=before, after=before)
    target = str(original or "auto")
    if dry_run:
        return _result(dev, Status.PLANNED, f"would write {target} to {gov_amd.perf_level_path(dev)}",
                       before=before, after=target)
    if level_now != target or journal.set_by_joulectl(bus, "sclkLevels"):
        w = gov_amd.write_perf_level(host, dev, target)
        if w.status not in OK_STATUSES:
            return _result(dev, w.status, w.message, before=before, after=level_now)
    for s in ("perfLevel", "sclkLevels", PRESET):
        if journal.has_original(bus, s):
            journal.restored(bus, s, command=COMMAND)
    return _result(dev, Status.APPLIED, "performance level set by joulectl restored", before=before,
                   after=target)


def _reset_cpu(host: Host, inventory: NodeInventory, journal: Journal, dry_run: bool) -> list[DeviceResult]:
    results = []
    for policy in inventory.cpu.policies:
        key = _cpu_key(policy)
        state = gov_cpu.read_state(host, policy)
        before = gov_cpu.describe(state.governor, state.epp)
        # what joulectl set, and what a run killed around its write was about to set
        ours_gov = {v for v in (journal.current(key, "cpuGovernor"), *journal.pending(key, "cpuGovernor"))
                    if v is not None} if journal.set_by_joulectl(key, "cpuGovernor") else set()
        ours_epp = {v for v in (journal.current(key, "epp"), *journal.pending(key, "epp"))
                    if v is not None} if journal.set_by_joulectl(key, "epp") else set()
        if not ours_gov and not ours_epp:
            results.append(_cpu_result(inventory, policy, Status.UNCHANGED,
                                       "nothing set by joulectl", before=before, after=before))
            continue
        # an empty or unreadable value is no operator's choice (a plain file a killed write truncated)
        changed = (bool(ours_gov) and state.governor is not None and state.governor not in ours_gov) or (
            bool(ours_epp) and state.governor != "performance" and state.epp is not None
            and state.epp not in ours_epp)
        if changed:
            if not dry_run:
                for s in ("cpuGovernor", "epp", PRESET):
                    if journal.has_original(key, s):
                        journal.restored(key, s, command=COMMAND)
            results.append(_cpu_result(inventory, policy, Status.UNCHANGED,
                                       f"changed to {before} since joulectl set it: left alone",
                                       before=before, after=before))
            continue
        gov = journal.original(key, "cpuGovernor") if ours_gov else None
        epp = journal.original(key, "epp") if ours_epp else None
        if gov is not None and gov == "performance":
            # the driver pins EPP under performance; restoring the governor restores it
            epp = None
        after = gov_cpu.describe(gov or state.governor, epp or state.epp)
        if dry_run:
            results.append(_cpu_result(inventory, policy, Status.PLANNED, "", before=before, after=after))
            continue
        w = _cpu_write(host, journal, inventory, policy, state, gov, epp)
        if w.status not in OK_STATUSES:
            results.append(_cpu_result(inventory, policy, w.status, w.message, before=before))
            continue
        for s in ("cpuGovernor", "epp", PRESET):
            if journal.has_original(key, s):
                journal.restored(key, s, command=COMMAND)
        now = gov_cpu.read_state(host, policy)
        results.append(_cpu_result(inventory, policy, Status.APPLIED, "governor set by joulectl restored",
                                   before=before, after=gov_cpu.describe(now.governor, now.epp)))
    return results


def reset(
    host: Host,
    inventory: NodeInventory,
    journal: Journal,
    *,
    gpu: bool = True,
    cpu: bool = True,
    selectors: Sequence[str] = (),
    dry_run: bool = False,
) -> list[DeviceResult]:
    """Restore every lock and level joulectl set (per the journal); leave everything else alone."""
    results: list[DeviceResult] = []
    if gpu:
        devices = _gpu_devices(inventory, selectors)
        ctx = _NvContext(host, devices)
        for dev in devices:
            if dev.vendor == "nvidia":
                results.append(_reset_nvidia(ctx, journal, dev, dry_run))
            elif dev.vendor == "amd":
                results.append(_reset_amd(host, journal, dev, dry_run))
            else:
                results.append(_result(dev, Status.UNCHANGED, "nothing set by joulectl"))
    if cpu:
        results.extend(_reset_cpu(host, inventory, journal, dry_run))
    return results


# -- show --------------------------------------------------------------------------------------


@dataclass
class ShowRow:
    """One device in ``governor show``."""

    device: str
    vendor: str
    model: str | None
    kind: str
    preset: str | None  # the preset joulectl put in force
    set_by: str | None  # joulectl | operator | None
    in_force: str
    status: str | None  # applied | applied-unverified for what joulectl set
    clocks: str | None = None
    presets: tuple[str, ...] = ()
    message: str = ""
    #: verified by this show (the journal gets the verification)
    verified_now: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "vendor": self.vendor, "model": self.model, "kind": self.kind,
            "preset": self.preset, "setBy": self.set_by, "inForce": self.in_force, "status": self.status,
            "clocks": self.clocks, "presets": list(self.presets), "message": self.message,
        }


def _preset_of(journal: Journal, key: str) -> tuple[str | None, str | None]:
    rec = journal.current(key, PRESET)
    if isinstance(rec, dict):
        return rec.get("preset"), rec.get("status")
    return None, None


def _mark_verified(journal: Journal, key: str, dev_vendor: str, model: str | None, kind: str = "gpu") -> None:
    rec = journal.current(key, PRESET)
    value = dict(rec) if isinstance(rec, dict) else {}
    value["status"] = str(Status.APPLIED)
    journal.record(key, PRESET, None, value, vendor=dev_vendor, model=model, kind=kind, command="show")


def _show_nvidia(ctx: _NvContext, journal: Journal, dev: GpuDevice, samples: dict[str, ClockSample],
                 model_presets: dict[str, Any] | None) -> tuple[ShowRow, bool]:
    bus = dev.bus_id
    g = ClockLock.parse(journal.current(bus, NV_SETTINGS["graphics"]))
    m = ClockLock.parse(journal.current(bus, NV_SETTINGS["memory"]))
    preset, status = _preset_of(journal, bus)
    sample = samples.get(bus)
    if sample is None and dev.clocks.get("graphics_mhz") is not None:
        sample = ClockSample(dev.clocks.get("graphics_mhz"), dev.clocks.get("memory_mhz"))
    clocks = None
    if sample is not None:
        def mhz(v: int | None) -> str:
            return "?" if v is None else str(v)

        clocks = f"graphics {mhz(sample.graphics_mhz)} MHz, memory {mhz(sample.memory_mhz)} MHz"
        if sample.utilization_pct is not None:
            clocks += f", {sample.utilization_pct} % busy"
    row = ShowRow(bus, dev.vendor, dev.model or dev.raw_model, "gpu", preset, None, NO_LOCK, None,
                  clocks, accepted_presets(dev, ctx, model_presets))
    reason = gov_nvidia.eligibility(dev)
    if (g or m) and _lost_in_reboot(ctx.host, journal, bus):
        row.preset = None
        row.message = "the lock joulectl set was lost in a reboot: run `joulectl governor set` again"
        return row, False
    if g or m:
        row.set_by = "joulectl"
        row.in_force = _nv_describe(g.text() if g else None, m.text() if m else None)
        row.status = status or str(Status.APPLIED_UNVERIFIED)
        if row.status == str(Status.APPLIED_UNVERIFIED):
            inside = sample is not None and sample.graphics_mhz is not None and (
                g is None or g.contains(sample.graphics_mhz)) and (
                m is None or (sample.memory_mhz is not None and m.contains(sample.memory_mhz)))
            if sample is None or sample.graphics_mhz is None:
                row.message = "clocks not readable: lock not verified"
            elif not inside:
                row.message = "clocks sampled outside the lock: not verified yet"
            elif sample.busy is False:
                # an idle GPU sits at its lowest clock whatever the lock: only busy samples tell
                row.message = "GPU idle: the lock is verified by a sample under load"
            else:
                row.status = str(Status.APPLIED)
                row.message = "clocks sampled inside the lock: verified"
                if preset:
                    _mark_verified(journal, bus, dev.vendor, dev.model)
                    row.verified_now = True
                    return row, True
        return row, False
    op = [d for d in ("graphics", "memory") if _operator_lock(dev, d)]
    if op:
        row.set_by = "operator"
        row.in_force = _nv_describe(_operator_lock(dev, "graphics"), _operator_lock(dev, "memory"))
        row.message = "locked by the operator, not by joulectl"
    elif reason:
        row.in_force = "no governor"
        row.message = reason
    return row, False


def _show_amd(host: Host, journal: Journal, dev: GpuDevice,
              model_presets: dict[str, Any] | None) -> tuple[ShowRow, bool]:
    bus = dev.bus_id
    level = gov_amd.read_perf_level(host, dev)
    preset, status = _preset_of(journal, bus)
    ours = journal.current(bus, "perfLevel")
    mask = journal.current(bus, "sclkLevels")
    levels = gov_amd.read_sclk(host, dev)
    current = next((lv for lv in levels if lv.current), None)
    clocks = f"sclk level {current.index} ({current.mhz} MHz)" if current else None
    row = ShowRow(bus, dev.vendor, dev.model or dev.raw_model, "gpu", None, None,
                  _amd_describe(level, mask if ours == level else None), None, clocks,
                  accepted_presets(dev, None, model_presets))
    if level is None:
        row.in_force = "unknown"
        row.message = "no performance level control"
        return row, False
    if journal.set_by_joulectl(bus, "perfLevel") and ours == level:
        row.set_by, row.preset = "joulectl", preset
        row.status = status or str(Status.APPLIED)
        if row.status == str(Status.APPLIED_UNVERIFIED) and isinstance(mask, str):
            indices = [int(i) for i in mask.split()]
            v = gov_amd.verify_sclk(host, dev, indices)
            if v.status == Status.APPLIED:
                row.status = str(Status.APPLIED)
                row.message = "sclk level in use inside the mask: verified"
                if preset:
                    _mark_verified(journal, bus, dev.vendor, dev.model)
                    row.verified_now = True
                    return row, True
            else:
                row.message = v.message
        return row, False
    if level != "auto":
        row.set_by = "operator"
        row.message = "set by the operator, not by joulectl" if not journal.set_by_joulectl(bus, "perfLevel") \
            else f"changed since joulectl set {ours}"
    return row, False


def _show_cpu(host: Host, inventory: NodeInventory, journal: Journal) -> list[ShowRow]:
    rows = []
    for policy in inventory.cpu.policies:
        key = _cpu_key(policy)
        state = gov_cpu.read_state(host, policy)
        preset, status = _preset_of(journal, key)
        ours_gov = journal.current(key, "cpuGovernor")
        ours = journal.set_by_joulectl(key, "cpuGovernor") or journal.set_by_joulectl(key, "epp")
        row = ShowRow(key, (inventory.cpu.vendor or "cpu").lower(), inventory.cpu.raw_model or inventory.cpu.model,
                      "cpu", None, None,
                      gov_cpu.describe(state.governor, state.epp), None,
                      f"{policy.cur_khz // 1000} MHz" if policy.cur_khz else None, CPU_PRESETS)
        if ours and (ours_gov is None or ours_gov == state.governor):
            row.set_by, row.preset, row.status = "joulectl", preset, status or str(Status.APPLIED)
        elif ours:
            row.set_by = "operator"
            row.message = f"changed since joulectl set {ours_gov}"
        rows.append(row)
    return rows


def show(
    host: Host,
    inventory: NodeInventory,
    journal: Journal,
    *,
    gpu: bool = True,
    cpu: bool = True,
    selectors: Sequence[str] = (),
    model_presets: dict[str, Any] | None = None,
) -> tuple[list[ShowRow], bool]:
    """Rows for every selected device, and whether the journal changed (locks now verified)."""
    rows: list[ShowRow] = []
    changed = False
    if gpu:
        devices = _gpu_devices(inventory, selectors)
        ctx = _NvContext(host, devices)
        nvidia = [d for d in devices if d.vendor == "nvidia"]
        samples: dict[str, ClockSample] = {}
        if nvidia and any(journal.set_by_joulectl(d.bus_id, s) for d in nvidia for s in NV_SETTINGS.values()):
            samples = ctx.transport.sample_clocks(nvidia)
        for dev in devices:
            if dev.vendor == "nvidia":
                row, ch = _show_nvidia(ctx, journal, dev, samples, model_presets)
            elif dev.vendor == "amd":
                row, ch = _show_amd(host, journal, dev, model_presets)
            else:
                row, ch = ShowRow(dev.bus_id, dev.vendor, dev.model or dev.raw_model, "gpu", None, None,
                                  "no governor", None, message=INTEL_BLOCKED if dev.vendor == "intel"
                                  else f"no governor mapping for {dev.vendor} GPUs"), False
            rows.append(row)
            changed = changed or ch
    if cpu:
        rows.extend(_show_cpu(host, inventory, journal))
    return rows, changed


# -- reports -----------------------------------------------------------------------------------


@dataclass
class GovernorReport:
    """What a ``governor`` command did, ready to render."""

    action: str  # show | set | reset
    node: str
    preset: str | None = None
    dry_run: bool = False
    results: list[DeviceResult] = field(default_factory=list)
    rows: list[ShowRow] = field(default_factory=list)
    presets: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return exit_code_for(self.results)

    def error(self) -> JoulectlError | None:
        """The error the run ends with (exit 4 or 5), or None for exit 0 (SPEC §2)."""
        code = self.exit_code
        if code == ExitCode.OK:
            return None
        if code == ExitCode.REFUSED:
            n = len([r for r in self.results if r.status == Status.REFUSED])
            return RefusedError(f"no privilege to write: every write was refused ({n} "
                                f"device{'s' if n != 1 else ''})", hint=PRIVILEGE_HINT)
        failed = [r for r in self.results if r.status not in OK_STATUSES]
        counts: dict[str, int] = {}
        for r in failed:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        return PartialError(
            f"{len(self.results) - len(failed)} of {len(self.results)} targets done; "
            + ", ".join(f"{n} {s}" for s, n in counts.items()) + " (see MESSAGE)",
            hint=PRIVILEGE_HINT if "refused" in counts else None,
        )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "GovernorResult", "action": self.action,
                               "node": self.node}
        if self.action == "show":
            doc["gpu"] = {"presets": list(self.presets)}
            doc["results"] = [r.to_dict() for r in self.rows]
            return doc
        doc["preset"] = self.preset
        doc["dryRun"] = self.dry_run
        doc["results"] = [result_dict(r) for r in self.results]
        summary: dict[str, int] = {}
        for r in self.results:
            summary[str(r.status)] = summary.get(str(r.status), 0) + 1
        doc["summary"] = summary
        return doc

    def table_text(self) -> str:
        from joulectl.render import table

        if self.action == "show":
            rows = [[r.device, r.model, r.preset, r.set_by, r.in_force, r.clocks, r.status,
                     ",".join(r.presets), r.message] for r in self.rows]
            title = f"node {self.node}: GPU presets every GPU accepts: {', '.join(self.presets) or 'none'}"
            return table(["DEVICE", "MODEL", "PRESET", "SET BY", "IN FORCE", "CLOCKS", "STATUS", "PRESETS",
                          "MESSAGE"], rows, title=title)
        rows = [[r.device, r.model, r.preset, r.before, r.after, str(r.status), r.message] for r in self.results]
        return table(["DEVICE", "MODEL", "PRESET", "BEFORE", "AFTER", "STATUS", "MESSAGE"], rows)


def result_dict(r: DeviceResult) -> dict[str, Any]:
    return {"device": r.device, "vendor": r.vendor, "model": r.model, "kind": r.kind, "preset": r.preset,
            "status": str(r.status), "message": r.message, "before": r.before, "after": r.after}


def exit_code_for(results: Sequence[DeviceResult]) -> ExitCode:
    """SPEC §2: 0 when every device is fine; 4 when every write needed was refused; 5 otherwise."""
    bad = [r for r in results if r.status not in OK_STATUSES]
    if not bad:
        return ExitCode.OK
    needed = [r for r in results if r.status not in (Status.UNCHANGED, Status.SKIPPED)]
    if needed and all(r.status == Status.REFUSED for r in needed):
        return ExitCode.REFUSED
    return ExitCode.PARTIAL


# -- commands (lock, journal, inventory) ----------------------------------------------------


def _inventory(host: Host, gpu: bool, cpu: bool) -> NodeInventory:
    from joulectl.ops.discover import inventory

    return inventory(host, gpus=gpu or not cpu, cpu=cpu or not gpu)


def _targets(gpu: bool, cpu: bool, selectors: Sequence[str], inv: NodeInventory) -> tuple[bool, bool]:
    """Neither flag: the GPUs ``--device`` names; without ``--device`` every GPU (when the node has
    any) and the CPUs."""
    if gpu or cpu:
        return gpu, cpu
    if selectors:
        return True, False
    return bool(inv.gpus), True


def _warn_journal(journal: Journal, warnings: list[str]) -> None:
    if journal.set_aside:
        warnings.append(f"the journal was unreadable and was set aside as {journal.set_aside}")


def _load_journal(host: Host, warnings: list[str]) -> Journal:
    """The journal for a run that writes (under the node lock): a corrupt one is set aside."""
    import errno

    from joulectl.host import HostIOError
    from joulectl.ops.journal import JOURNAL_PATH, load

    try:
        journal = load(host)
    except (HostIOError, OSError) as e:
        text = getattr(e, "strerror", None) or str(e)
        if getattr(e, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RefusedError(f"cannot read the journal {JOURNAL_PATH}: {text}", hint=PRIVILEGE_HINT) from None
        raise JoulectlError(f"cannot read the journal {JOURNAL_PATH}: {text}") from None
    _warn_journal(journal, warnings)
    return journal


def _peek_journal(host: Host, warnings: list[str]) -> Journal:
    """The journal for ``show`` and dry runs: read only; unreadable or corrupt is reported, not moved."""
    import errno

    from joulectl.host import HostIOError
    from joulectl.ops.journal import JOURNAL_PATH

    try:
        text = host.read(JOURNAL_PATH)
    except HostIOError as e:
        if e.errno != errno.ENOENT:
            warnings.append(f"cannot read the journal {JOURNAL_PATH}: {e.strerror}: what joulectl set is unknown")
        return Journal()
    try:
        return Journal.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError, RecursionError):
        warnings.append(f"the journal {JOURNAL_PATH} is corrupt: what joulectl set is unknown "
                        "(the next set or reset moves it aside)")
        return Journal()


def run_set(host: Host, preset: str, *, gpu: bool, cpu: bool, selectors: Sequence[str], dry_run: bool,
            wait_s: float, model_presets_path: str | None, warnings: list[str]) -> GovernorReport:
    """``governor set PRESET``: lock, journal, inventory, apply, save (nothing written on a dry run)."""
    from joulectl.ops.journal import save
    from joulectl.ops.lock import node_lock

    if not gpu and not cpu:
        gpu = preset in GPU_PRESETS or preset not in CPU_PRESETS
        cpu = preset in CPU_PRESETS or preset not in GPU_PRESETS
    target = resolve_target(preset, gpu, cpu)
    gpu, cpu = target == "gpu", target == "cpu"
    model_presets = load_model_presets(model_presets_path)
    if dry_run:
        journal = _peek_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        results = apply_preset(host, inv, journal, preset, gpu=gpu, cpu=cpu, selectors=selectors,
                               dry_run=True, model_presets=model_presets)
        return GovernorReport("set", inv.host.hostname, preset, True, results)
    with node_lock(host, wait_s):
        journal = _load_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        ctx = new_context(host)
        intents = plan_intents(host, inv, journal, preset, gpu=gpu, cpu=cpu, selectors=selectors,
                               model_presets=model_presets, ctx=ctx)
        _save_ahead_or_refuse(host, journal, intents)
        try:
            results = apply_preset(host, inv, journal, preset, gpu=gpu, cpu=cpu, selectors=selectors,
                                   model_presets=model_presets, ctx=ctx)
        finally:
            save(host, journal)
    return GovernorReport("set", inv.host.hostname, preset, False, results)


def _save_ahead_or_refuse(host: Host, journal: Journal, intents: Sequence[Intent]) -> None:
    """The write-ahead save; when the journal cannot be written nothing is written to a device."""
    import errno

    from joulectl.ops.journal import JOURNAL_PATH

    try:
        save_ahead(host, journal, intents)
    except OSError as e:
        text = f"cannot save the journal {JOURNAL_PATH} before writing: {e.strerror or e}; nothing changed"
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RefusedError(text, hint=PRIVILEGE_HINT) from None
        raise JoulectlError(text) from None


def run_reset(host: Host, *, gpu: bool, cpu: bool, selectors: Sequence[str], dry_run: bool, wait_s: float,
              warnings: list[str]) -> GovernorReport:
    """``governor reset``: restore what joulectl set, leave the rest alone."""
    from joulectl.ops.journal import save
    from joulectl.ops.lock import node_lock

    if dry_run:
        journal = _peek_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        g, c = _targets(gpu, cpu, selectors, inv)
        results = reset(host, inv, journal, gpu=g, cpu=c, selectors=selectors, dry_run=True)
        return GovernorReport("reset", inv.host.hostname, None, True, results)
    with node_lock(host, wait_s):
        journal = _load_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        g, c = _targets(gpu, cpu, selectors, inv)
        try:
            results = reset(host, inv, journal, gpu=g, cpu=c, selectors=selectors)
        finally:
            save(host, journal)
    return GovernorReport("reset", inv.host.hostname, None, False, results)


def run_show(host: Host, *, gpu: bool, cpu: bool, selectors: Sequence[str], wait_s: float,
             model_presets_path: str | None, warnings: list[str]) -> GovernorReport:
    """``governor show``; records newly verified locks in the journal when it can take the lock
    (a read-only user still gets the report, with a warning)."""
    from joulectl.ops.journal import load, save
    from joulectl.ops.lock import node_lock

    model_presets = load_model_presets(model_presets_path)
    journal = _peek_journal(host, warnings)
    inv = _inventory(host, gpu, cpu)
    g, c = _targets(gpu, cpu, selectors, inv)
    rows, changed = show(host, inv, journal, gpu=g, cpu=c, selectors=selectors, model_presets=model_presets)
    presets = _node_presets(host, inv, model_presets)
    if changed:
        try:
            with node_lock(host, wait_s):
                fresh = load(host)
                for row in rows:
                    if row.verified_now:
                        _mark_verified(fresh, row.device, row.vendor, row.model, row.kind)
                save(host, fresh)
        except (JoulectlError, OSError) as e:
            warnings.append(f"could not record the verified locks in the journal: {e}")
    return GovernorReport("show", inv.host.hostname, rows=rows, presets=presets)


def _node_presets(host: Host, inv: NodeInventory, model_presets: dict[str, Any] | None) -> tuple[str, ...]:
    """Presets every GPU of the node accepts."""
    if not inv.gpus:
        return ()
    ctx = _NvContext(host, inv.gpus)
    common = set(GPU_PRESETS)
    for dev in inv.gpus:
        common &= set(accepted_presets(dev, ctx, model_presets))
    return tuple(p for p in GPU_PRESETS if p in common)
