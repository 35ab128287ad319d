"""``joulectl governor``: clock governor presets for GPUs and CPUs, and undoing only what we set.

This module only orchestrates: the node lock, the journal (write-ahead save, final save),
which devices a command selects, one result per device and the exit code. What a vendor does
lives behind the governor contract of :mod:`joulectl.backends.base`
(:class:`~joulectl.backends.base.GovernorBackend`), implemented by ``backends/gov_nvidia.py``,
``gov_amd.py``, ``gov_intel.py`` and ``gov_cpu.py``; a GPU vendor without a ``gov_<vendor>``
module gets ``blocked`` rows.

``show`` reports per device the preset and locks or levels in force, whether joulectl set them,
and verifies what cannot be read back at once (recording it in the journal). ``set PRESET``
applies one preset to every selected GPU (or every cpufreq policy) through :func:`apply_preset`,
which ``cap --schedule`` calls too. ``reset`` restores what the journal recorded and never
touches a lock or level joulectl did not set.

Journal settings (per PCI bus id, or ``cpufreq:<policy>`` for CPUs) are the backends':
``gpuLockedClocks``/``memoryLockedClocks`` (NVIDIA), ``perfLevel``/``sclkLevels`` (AMD),
``gtMinMHz:<gt>``/``gtMaxMHz:<gt>`` (Intel), ``cpuGovernor``/``epp`` (CPU), and
``governorPreset`` (``{"preset": ..., "status": ...}``: the preset joulectl put in force and
whether it was verified).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from joulectl.backends.base import (
    PRIVILEGE_HINT,
    GovernorBackend,
    ShowRow,
    governor_module,
    governor_presets,
    gpu_result,
    mark_verified,
    no_governor,
)
from joulectl.errors import JoulectlError, NoDeviceError, RefusedError
from joulectl.host import Host
from joulectl.models import CPU_PRESETS, GPU_PRESETS, CpufreqPolicy, DeviceResult, GpuDevice, NodeInventory, Status
from joulectl.ops.govpresets import MODEL_PRESETS_ENV, load_model_presets, parse_model_presets, resolve_target
from joulectl.ops.govreport import API_VERSION, GovernorReport, exit_code_for, result_dict
from joulectl.ops.journal import Intent, Journal, save_ahead
from joulectl.ops.select import select_devices

__all__ = [
    "API_VERSION", "MODEL_PRESETS_ENV", "Context", "GovernorReport", "ShowRow", "accepted_presets",
    "apply_preset", "exit_code_for", "load_model_presets", "new_context", "parse_model_presets",
    "plan_intents", "reset", "resolve_target", "result_dict", "run_reset", "run_set", "run_show", "show", "watch_show",
]

COMMAND = "governor"


# -- the backends of one run ---------------------------------------------------------------------


class Context:
    """The governor backends of one run, built once per vendor and shared between the
    write-ahead planning pass and the apply (NVIDIA fetches its clock tables once)."""

    def __init__(self, host: Host, model_presets: dict[str, Any] | None = None) -> None:
        self.host = host
        self.model_presets = model_presets
        self._gpu: dict[str, GovernorBackend | None] = {}
        self._cpu: GovernorBackend | None = None

    def with_presets(self, model_presets: dict[str, Any] | None) -> Context:
        """This context for a run with ``model_presets`` (the backends are rebuilt when they differ)."""
        if model_presets != self.model_presets:
            self.model_presets = model_presets
            self._gpu = {}
        return self

    def gpu(self, vendor: str) -> GovernorBackend | None:
        if vendor not in self._gpu:
            module = governor_module(vendor)
            self._gpu[vendor] = module.governor(self.host, self.model_presets) if module is not None else None
        return self._gpu[vendor]

    def cpu(self, inventory: NodeInventory) -> GovernorBackend:
        if self._cpu is None:
            from joulectl.backends import gov_cpu

            self._cpu = gov_cpu.governor(self.host, inventory.cpu)
        return self._cpu


def new_context(host: Host) -> Context:
    """The backends to share between :func:`plan_intents` and :func:`apply_preset`."""
    return Context(host)


def _by_backend(ctx: Context, devices: Sequence[GpuDevice],
                step: Callable[[GovernorBackend, list[GpuDevice]], list[DeviceResult]],
                missing: Callable[[GpuDevice], DeviceResult]) -> list[DeviceResult]:
    """``step`` once per vendor over that vendor's devices; the results in device order."""
    groups: dict[str, list[GpuDevice]] = {}
    for dev in devices:
        groups.setdefault(dev.vendor, []).append(dev)
    out: dict[str, DeviceResult] = {}
    for vendor, devs in groups.items():
        backend = ctx.gpu(vendor)
        results = step(backend, devs) if backend is not None else [missing(d) for d in devs]
        out.update({d.bus_id: r for d, r in zip(devs, results, strict=True)})
    return [out[d.bus_id] for d in devices]


def accepted_presets(dev: GpuDevice, ctx: Context | None = None,
                     model_presets: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The GPU presets a device accepts (SPEC §5). With a context its backend may fetch what it
    needs (an NVIDIA clock table discover did not read); without one, only what discover read."""
    if ctx is None:
        return governor_presets(dev, model_presets)
    backend = ctx.with_presets(model_presets).gpu(dev.vendor)
    return backend.accepted(dev) if backend is not None else ()


def node_presets(ctx: Context, gpus: Sequence[GpuDevice]) -> tuple[str, ...]:
    """The presets a node lists: those every GPU accepts (none without GPUs)."""
    if not gpus:
        return ()
    common = set(GPU_PRESETS)
    for dev in gpus:
        backend = ctx.gpu(dev.vendor)
        common &= set(backend.accepted(dev) if backend is not None else ())
    return tuple(p for p in GPU_PRESETS if p in common)


# -- set -----------------------------------------------------------------------------------------


def _gpu_devices(inventory: NodeInventory, selectors: Sequence[str]) -> list[GpuDevice]:
    return select_devices(inventory.gpus, list(selectors) or None)


def _policies(inventory: NodeInventory) -> list[CpufreqPolicy]:
    if not inventory.cpu.policies:
        raise NoDeviceError("no cpufreq policy found on this node (no CPU governor control)")
    return list(inventory.cpu.policies)


def _blocked(preset: str | None) -> Callable[[GpuDevice], DeviceResult]:
    def row(dev: GpuDevice) -> DeviceResult:
        return gpu_result(dev, Status.BLOCKED, no_governor(dev.vendor), preset=preset)
    return row


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
    ctx: Context | None = None,
) -> list[DeviceResult]:
    """Put ``preset`` in force on every selected GPU, or on every cpufreq policy.

    The caller holds :func:`~joulectl.ops.lock.node_lock` and saves ``journal`` afterwards; before
    a real run it saves :func:`plan_intents` ahead (:func:`save_ahead`), in one save for the batch.
    ``gpu``/``cpu`` name the targets; the preset applies to the one whose presets include it
    (``InputError`` listing the presets otherwise). ``selectors`` (``--device``) pick GPUs;
    ``NoDeviceError`` when none match or the node has none.
    """
    target, model_presets = _target_and_presets(preset, gpu, cpu, model_presets)
    ctx = (ctx or Context(host)).with_presets(model_presets)
    if target == "cpu":
        backend, policies = ctx.cpu(inventory), _policies(inventory)
        return backend.plan(policies, preset, journal)[0] if dry_run else backend.apply(policies, preset, journal)
    devices = _gpu_devices(inventory, selectors)
    if dry_run:
        return _by_backend(ctx, devices, lambda b, d: b.plan(d, preset, journal)[0], _blocked(preset))
    return _by_backend(ctx, devices, lambda b, d: b.apply(d, preset, journal), _blocked(preset))


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
    ctx: Context | None = None,
) -> list[Intent]:
    """The settings :func:`apply_preset` would write (its dry run, collected), to journal ahead.
    Raises what ``apply_preset`` raises (an unknown preset, no device)."""
    target, model_presets = _target_and_presets(preset, gpu, cpu, model_presets)
    ctx = (ctx or Context(host)).with_presets(model_presets)
    if target == "cpu":
        return ctx.cpu(inventory).plan(_policies(inventory), preset, journal)[1]
    intents: list[Intent] = []

    def step(backend: GovernorBackend, devs: list[GpuDevice]) -> list[DeviceResult]:
        results, more = backend.plan(devs, preset, journal)
        intents.extend(more)
        return results

    _by_backend(ctx, _gpu_devices(inventory, selectors), step, _blocked(preset))
    return intents


# -- reset and show ------------------------------------------------------------------------------


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
    ctx = Context(host)
    results: list[DeviceResult] = []
    if gpu:
        def nothing(dev: GpuDevice) -> DeviceResult:
            return gpu_result(dev, Status.UNCHANGED, "nothing set by joulectl")

        results += _by_backend(ctx, _gpu_devices(inventory, selectors),
                               lambda b, d: b.undo(d, journal, dry_run=dry_run), nothing)
    if cpu:
        results += ctx.cpu(inventory).undo(list(inventory.cpu.policies), journal, dry_run=dry_run)
    return results


def show(
    host: Host,
    inventory: NodeInventory,
    journal: Journal,
    *,
    gpu: bool = True,
    cpu: bool = True,
    selectors: Sequence[str] = (),
    model_presets: dict[str, Any] | None = None,
    ctx: Context | None = None,
) -> tuple[list[ShowRow], bool]:
    """Rows for every selected device, and whether the journal changed (locks now verified)."""
    ctx = (ctx or Context(host)).with_presets(model_presets)
    rows: list[ShowRow] = []
    if gpu:
        devices = _gpu_devices(inventory, selectors)
        groups: dict[str, list[GpuDevice]] = {}
        for dev in devices:
            groups.setdefault(dev.vendor, []).append(dev)
        by_bus: dict[str, ShowRow] = {}
        for vendor, devs in groups.items():
            backend = ctx.gpu(vendor)
            if backend is None:
                for d in devs:
                    by_bus[d.bus_id] = ShowRow(d.bus_id, d.vendor, d.model or d.raw_model, "gpu", None, None,
                                               "no governor", None, message=no_governor(d.vendor))
                continue
            by_bus.update({d.bus_id: r for d, r in zip(devs, backend.show(devs, journal), strict=True)})
        rows += [by_bus[d.bus_id] for d in devices]
    if cpu:
        rows += ctx.cpu(inventory).show(list(inventory.cpu.policies), journal)
    return rows, any(r.verified_now for r in rows)


# -- commands (lock, journal, inventory) -----------------------------------------------------------


def _inventory(host: Host, gpu: bool, cpu: bool) -> NodeInventory:
    from joulectl.ops.inventory import inventory

    return inventory(host, gpus=gpu or not cpu, cpu=cpu or not gpu, policy_details=True)


def _targets(gpu: bool, cpu: bool, selectors: Sequence[str], inv: NodeInventory) -> tuple[bool, bool]:
    """``show`` without a flag: the GPUs ``--device`` names; without ``--device`` every GPU (when
    the node has any) and the CPUs."""
    if gpu or cpu:
        return gpu, cpu
    if selectors:
        return True, False
    return bool(inv.gpus), True


def _reset_targets(gpu: bool, cpu: bool, inv: NodeInventory) -> tuple[bool, bool]:
    """``reset`` takes the default scope of ``set``: without a flag the GPUs (as ``set`` with a
    GPU preset), the CPUs only with ``--cpu``, or on a node without GPUs."""
    if gpu or cpu:
        return gpu, cpu
    return (True, False) if inv.gpus else (False, True)


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


def run_reset(host: Host, *, gpu: bool, cpu: bool, selectors: Sequence[str], dry_run: bool, wait_s: float,
              warnings: list[str]) -> GovernorReport:
    """``governor reset``: restore what joulectl set, leave the rest alone."""
    from joulectl.ops.journal import save
    from joulectl.ops.lock import node_lock

    if dry_run:
        journal = _peek_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        g, c = _reset_targets(gpu, cpu, inv)
        results = reset(host, inv, journal, gpu=g, cpu=c, selectors=selectors, dry_run=True)
        return GovernorReport("reset", inv.host.hostname, None, True, results)
    with node_lock(host, wait_s):
        journal = _load_journal(host, warnings)
        inv = _inventory(host, gpu, cpu)
        g, c = _reset_targets(gpu, cpu, inv)
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
    ctx = Context(host, model_presets)
    rows, changed = show(host, inv, journal, gpu=g, cpu=c, selectors=selectors, model_presets=model_presets,
                         ctx=ctx)
    presets = node_presets(ctx, inv.gpus)
    if changed:
        try:
            with node_lock(host, wait_s):
                fresh = load(host)
                for row in rows:
                    if row.verified_now:
                        mark_verified(fresh, row.device, row.vendor, row.model, row.kind)
                save(host, fresh)
        except (JoulectlError, OSError) as e:
            warnings.append(f"could not record the verified locks in the journal: {e}")
    return GovernorReport("show", inv.host.hostname, rows=rows, presets=presets)


def watch_show(host: Host, *, gpu: bool, cpu: bool, selectors: Sequence[str], wait_s: float,
               model_presets_path: str | None, interval_s: float, count: int | None,
               sleep: Callable[[float], None] | None = None) -> Iterator[tuple[str, list[str]]]:
    """``governor show --watch``: one table (and its warnings) per refresh, ``count`` times or for
    ever; each refresh samples again and records what it verified, as one ``show`` does."""
    import time

    pause = sleep or time.sleep
    n = 0
    while count is None or n < count:
        if n:
            pause(interval_s)
        warnings: list[str] = []
        report = run_show(host, gpu=gpu, cpu=cpu, selectors=selectors, wait_s=wait_s,
                          model_presets_path=model_presets_path, warnings=warnings)
        n += 1
        yield report.table_text(), warnings
