"""NVIDIA clock governor: graphics and memory clock locks through nvidia-smi or NVML.

Facts this module relies on, with their sources: docs/hardware.md §5.1 and §5.3 (locked clocks:
Volta+ graphics, Ampere+ memory).

Every command addresses one GPU by PCI bus id: ``nvidia-smi -i <bus id> -lgc <min>,<max>``,
``-lmc <min>,<max>``, ``-rgc``, ``-rmc``; with NVML (root ``/`` and the library loads) the same
calls are ``nvmlDeviceSetGpuLockedClocks``, ``nvmlDeviceSetMemoryLockedClocks``,
``nvmlDeviceResetGpuLockedClocks`` and ``nvmlDeviceResetMemoryLockedClocks``. Application clocks
(``-ac``, ``-rac``) and ``--auto-boost-default`` are never used.

Clock tables come from SUPPORTED_CLOCKS: memory MHz -> graphics MHz, highest first. At a lower
memory clock a GPU offers only the lower graphics clocks, so a memory lock bounds graphics too.

Presets (SPEC §5), all in MHz of that table:

- ``peak``: graphics locked at the highest supported clock (``max,max``).
- ``efficient``: graphics ``<min>,<ceiling>``, the ceiling the highest clock <= 75 % of the max.
- ``low``: memory locked at its lowest clock (``-lmc m,m``) and graphics ``<min>,<max>`` of the
  clocks that memory clock offers; ``-lgc`` first, then ``-lmc``.
- ``sustained``: graphics ``<clock>,<clock>`` from the model presets map (value format
  ``{"graphicsMHz": 1755}``), the highest supported clock at or below it; no entry -> blocked.
- ``auto``: no lock (the locks joulectl set are undone by :mod:`joulectl.ops.governor`).

A lock cannot be read back: a lock the tool accepted is ``applied-unverified`` until sampled
clocks fall inside it. nvidia-smi's messages map to statuses through the one table of
:mod:`joulectl.backends.nvidia_messages` (shared with the cap backend): "... is not supported for
GPU <bus id>." with "Treating as warning and moving on." and exit 0 is ``unsupported``; "The
current user does not have permission to change clocks for GPU <bus id>." (exit 4) and NVML
``NoPermission`` are ``refused``. ``-i`` names the GPU by its bus id as nvidia-smi prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from joulectl.backends.base import (
    GOVERNOR_COMMAND,
    OPERATOR,
    PRESET_SETTING,
    ShowRow,
    gpu_result,
    model_preset_for,
    preset_of,
    verified,
)
from joulectl.backends.nvidia_clocks import (
    ClockLock,
    ClockSample,
    PresetBlocked,
    architecture_key,
    eligibility,
    normalize_table,
    plan_preset,
)
from joulectl.host import Host
from joulectl.models import GPU_PRESETS, OK_STATUSES, DeviceResult, GpuDevice, Status

if TYPE_CHECKING:  # the journal and the clock I/O are imported by the runs that use them, not by discover's presets
    from joulectl.backends.nvidia_clock_io import Transport
    from joulectl.ops.journal import Intent, Journal

# -- the governor contract ------------------------------------------------------------------------

NV_SETTINGS = {"graphics": "gpuLockedClocks", "memory": "memoryLockedClocks"}
#: nvidia-smi cannot list the locks in force: without one joulectl set (or discover read), say so.
NO_LOCK = "no lock set by joulectl"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
UNVERIFIED_HINT = "a lock cannot be read back: `joulectl governor show` verifies it"
#: Architectures without a run-time memory clock lock (``-lmc`` is "not supported"): no ``low``.
NO_MEMORY_LOCK_ARCHS = frozenset({"ada", "ada_lovelace"})


def presets(device: GpuDevice, model_presets: dict[str, Any] | None = None,
            host: Host | None = None, table: dict[int, list[int]] | None = None) -> tuple[str, ...]:
    """The presets an NVIDIA GPU accepts: Ampere or newer with a known clock table (``table``, or
    the one discover read); ``low`` only where memory clocks can be locked (not Ada);
    ``sustained`` only when ``model_presets`` names the model."""
    if eligibility(device) or not (table if table is not None else device.supported_clocks):
        return ()
    names = {"auto", "efficient", "peak"}
    if architecture_key(device) not in NO_MEMORY_LOCK_ARCHS:
        names.add("low")
    if model_preset_for(device, model_presets):
        names.add("sustained")
    return tuple(p for p in GPU_PRESETS if p in names)


def describe_locks(graphics: Any, memory: Any) -> str:
    parts = []
    g = ClockLock.parse(graphics)
    m = ClockLock.parse(memory)
    if g:
        parts.append(f"graphics {g.describe()}")
    if m:
        parts.append(f"memory {m.describe()}")
    return ", ".join(parts) or NO_LOCK


def operator_lock(dev: GpuDevice, domain: str) -> str | None:
    """A lock in force that discover could read (``clocks["lockedGraphicsMHz"]`` as ``"min,max"``)."""
    value = dev.clocks.get("locked_graphics" if domain == "graphics" else "locked_memory")
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return f"{int(value[0])},{int(value[1])}"
    lock = ClockLock.parse(value)
    return lock.text() if lock else None


def boot_id(host: Host) -> str | None:
    """``/proc/sys/kernel/random/boot_id``: clock locks do not survive past it."""
    return host.read_attr(BOOT_ID).value or None


def lost_in_reboot(host: Host, journal: Journal, bus: str) -> bool:
    """Whether the locks joulectl journaled for ``bus`` were set in an earlier boot."""
    rec = journal.current(bus, PRESET_SETTING)
    then = rec.get("bootId") if isinstance(rec, dict) else None
    now = boot_id(host) if then else None
    return bool(then and now and then != now)


class NvidiaGovernor:
    """The governor contract (:class:`~joulectl.backends.base.GovernorBackend`) on NVIDIA clock
    locks, through one transport (nvidia-smi or NVML) and one clock-table fetch per run."""

    def __init__(self, host: Host, model_presets: dict[str, Any] | None = None) -> None:
        self.host = host
        self.model_presets = model_presets
        self.devices: list[GpuDevice] = []
        self._transport: Transport | None = None
        self._tables: dict[str, dict[int, list[int]]] | None = None

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            from joulectl.backends.nvidia_clock_io import transport

            self._transport = transport(self.host)
        return self._transport

    def table(self, dev: GpuDevice) -> dict[int, list[int]]:
        if dev.supported_clocks:
            return normalize_table(dev.supported_clocks)
        if self._tables is None:
            missing = [d for d in self.devices if not d.supported_clocks] or [dev]
            self._tables = self.transport.supported_clocks(missing)
        return self._tables.get(dev.bus_id, {})

    def _use(self, devices: Sequence[GpuDevice]) -> None:
        known = {d.bus_id for d in self.devices}
        self.devices += [d for d in devices if d.bus_id not in known]

    def accepted(self, device: GpuDevice) -> tuple[str, ...]:
        if eligibility(device):
            return ()
        self._use([device])
        return presets(device, self.model_presets, table=self.table(device))

    def plan(self, devices: Sequence[GpuDevice], preset: str,
             journal: Journal) -> tuple[list[DeviceResult], list[Intent]]:
        self._use(devices)
        intents: list[Intent] = []
        return [self._set(journal, d, preset, True, intents) for d in devices], intents

    def apply(self, devices: Sequence[GpuDevice], preset: str, journal: Journal) -> list[DeviceResult]:
        self._use(devices)
        return self._each(devices, lambda d: self._set(journal, d, preset, False))

    def undo(self, devices: Sequence[GpuDevice], journal: Journal, *, dry_run: bool = False) -> list[DeviceResult]:
        self._use(devices)
        return self._each(devices, lambda d: self._undo(journal, d, dry_run))

    def _each(self, devices: Sequence[GpuDevice], step: Callable[[GpuDevice], DeviceResult]) -> list[DeviceResult]:
        """One step per GPU; after a tool timeout the remaining GPUs are not tried: a hanging
        nvidia-smi would cost one timeout per GPU while the node lock is held."""
        out: list[DeviceResult] = []
        for dev in devices:
            hung = getattr(self._transport, "timed_out", None)
            if hung:
                out.append(gpu_result(dev, Status.ERROR, f"not tried: {hung}"))
                continue
            out.append(step(dev))
        return out

    def show(self, devices: Sequence[GpuDevice], journal: Journal) -> list[ShowRow]:
        self._use(devices)
        samples: dict[str, ClockSample] = {}
        if any(journal.set_by_joulectl(d.bus_id, s) for d in devices for s in NV_SETTINGS.values()):
            samples = self.transport.sample_clocks(devices)
        return [self._show(journal, d, samples) for d in devices]

    def _restore(self, journal: Journal, dev: GpuDevice, domain: str) -> tuple[Status, str]:
        """Put one domain back to what the journal recorded before joulectl's first lock."""
        setting = NV_SETTINGS[domain]
        original = ClockLock.parse(journal.original(dev.bus_id, setting))
        if original:
            out = self.transport.lock(dev, domain, original)
        else:
            out = self.transport.reset(dev, domain)
        if out.status in OK_STATUSES:
            journal.restored(dev.bus_id, setting, command=GOVERNOR_COMMAND)
        return out.status, out.message

    def _set(self, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
             intents: list[Intent] | None = None) -> DeviceResult:
        from joulectl.ops.journal import Intent

        model_presets = self.model_presets
        reason = eligibility(dev)
        if reason:
            return gpu_result(dev, Status.BLOCKED, reason, preset=preset)
        bus = dev.bus_id
        before = describe_locks(
            journal.current(bus, NV_SETTINGS["graphics"]) or operator_lock(dev, "graphics"),
            journal.current(bus, NV_SETTINGS["memory"]) or operator_lock(dev, "memory"),
        )
        try:
            plan = plan_preset(
                self.table(dev), preset, model_preset_for(dev, model_presets),
                model=dev.model or dev.raw_model or "",
            )
        except PresetBlocked as e:
            return gpu_result(dev, Status.BLOCKED, str(e), preset=preset, before=before)
        wanted = {"graphics": plan.graphics, "memory": plan.memory}
        # A reboot or driver reload drops every lock: a journaled lock from another boot, or one the
        # clocks discover just read run above, is gone and is set again. (A clock below the lock's
        # minimum is an idle GPU, not a lost lock.)
        sampled = {"graphics": dev.clocks.get("graphics_mhz"), "memory": dev.clocks.get("memory_mhz")}
        lost = lost_in_reboot(self.host, journal, bus)
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
        target = describe_locks(plan.graphics.text() if plan.graphics else None,
                              plan.memory.text() if plan.memory else None)
        if not steps:
            if preset == "auto":
                operator = [d for d in ("graphics", "memory") if operator_lock(dev, d)]
                msg = f"{' and '.join(operator)} clocks {OPERATOR}" if operator else "no lock set by joulectl"
                return gpu_result(dev, Status.UNCHANGED, msg, preset=preset, before=before, after=before)
            rec = journal.current(bus, PRESET_SETTING) or {}
            msg = "already in force"
            if isinstance(rec, dict) and rec.get("status") == str(Status.APPLIED_UNVERIFIED):
                msg = "already set; " + UNVERIFIED_HINT
            return gpu_result(dev, Status.UNCHANGED, msg, preset=preset, before=before, after=target)
        if dry_run:
            if intents is not None:  # the locks this run sets (an undo goes back to the journaled original)
                intents += [Intent(bus, NV_SETTINGS[d], operator_lock(dev, d), w.text(), dev.vendor, dev.model)
                            for d, w in steps if w is not None]
            cmds = ", ".join(f"lock {d} {w.describe()}" if w else f"undo joulectl's {d} lock" for d, w in steps)
            return gpu_result(dev, Status.PLANNED, f"would {cmds} via {self.transport.name}", preset=preset,
                           before=before, after=target)
        wrote = False
        for domain, want in steps:
            if want is None:
                status, msg = self._restore(journal, dev, domain)
                if status not in OK_STATUSES:
                    return gpu_result(dev, status, msg, preset=preset, before=before,
                                   after=describe_locks(journal.current(bus, NV_SETTINGS["graphics"]),
                                                      journal.current(bus, NV_SETTINGS["memory"])))
                continue
            out = self.transport.lock(dev, domain, want)
            if out.status in OK_STATUSES:
                journal.record(bus, NV_SETTINGS[domain], operator_lock(dev, domain), want.text(),
                               vendor=dev.vendor, model=dev.model, command=GOVERNOR_COMMAND)
                wrote = True
                continue
            notes = [out.message]
            if out.status != Status.UNSUPPORTED and not wrote:
                # refused or failed before anything changed: what was in force stays in force
                return gpu_result(dev, out.status, out.message, preset=preset, before=before, after=before)
            # The preset cannot be put in force: record no lock, and undo every lock joulectl holds
            # on this GPU (the -lgc of low when its -lmc is refused).
            for d in ("graphics", "memory"):
                if journal.set_by_joulectl(bus, NV_SETTINGS[d]):
                    st, m = self._restore(journal, dev, d)
                    notes.append(f"{d} lock set by joulectl undone" if st in OK_STATUSES
                                 else f"undoing the {d} lock failed: {m}")
            if journal.has_original(bus, PRESET_SETTING):
                journal.restored(bus, PRESET_SETTING, command=GOVERNOR_COMMAND)
            after = describe_locks(journal.current(bus, NV_SETTINGS["graphics"]) or operator_lock(dev, "graphics"),
                                 journal.current(bus, NV_SETTINGS["memory"]) or operator_lock(dev, "memory"))
            return gpu_result(dev, out.status, "; ".join(notes), preset=preset, before=before, after=after)
        if preset == "auto":
            if journal.has_original(bus, PRESET_SETTING):
                journal.restored(bus, PRESET_SETTING, command=GOVERNOR_COMMAND)
            return gpu_result(dev, Status.APPLIED, "locks set by joulectl reset", preset=preset, before=before,
                           after=describe_locks(operator_lock(dev, "graphics"), operator_lock(dev, "memory")))
        record: dict[str, Any] = {"preset": preset, "status": str(Status.APPLIED_UNVERIFIED)}
        boot = boot_id(self.host)
        if boot:
            record["bootId"] = boot
        journal.record(bus, PRESET_SETTING, None, record, vendor=dev.vendor, model=dev.model, command=GOVERNOR_COMMAND)
        return gpu_result(dev, Status.APPLIED_UNVERIFIED, UNVERIFIED_HINT, preset=preset, before=before, after=target)

    def _undo(self, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
        bus = dev.bus_id
        ours = [d for d in ("memory", "graphics") if journal.set_by_joulectl(bus, NV_SETTINGS[d])]
        before = describe_locks(journal.current(bus, NV_SETTINGS["graphics"]) or operator_lock(dev, "graphics"),
                              journal.current(bus, NV_SETTINGS["memory"]) or operator_lock(dev, "memory"))
        if not ours:
            operator = [d for d in ("graphics", "memory") if operator_lock(dev, d)]
            msg = f"{' and '.join(operator)} clocks {OPERATOR}" if operator else "nothing set by joulectl"
            if journal.has_original(bus, PRESET_SETTING) and not dry_run:
                journal.restored(bus, PRESET_SETTING, command=GOVERNOR_COMMAND)
            return gpu_result(dev, Status.UNCHANGED, msg, before=before, after=before)
        target = describe_locks(*(journal.original(bus, NV_SETTINGS[d]) if d in ours else
                                operator_lock(dev, d) for d in ("graphics", "memory")))
        if dry_run:
            return gpu_result(dev, Status.PLANNED, f"would undo joulectl's {' and '.join(ours)} locks",
                           before=before, after=target)
        for d in ours:
            status, msg = self._restore(journal, dev, d)
            if status not in OK_STATUSES:
                return gpu_result(dev, status, msg, before=before)
        journal.restored(bus, PRESET_SETTING, command=GOVERNOR_COMMAND)
        return gpu_result(dev, Status.APPLIED, f"{' and '.join(ours)} locks set by joulectl undone", before=before,
                       after=target)

    def _show(self, journal: Journal, dev: GpuDevice, samples: dict[str, ClockSample]) -> ShowRow:
        bus = dev.bus_id
        g = ClockLock.parse(journal.current(bus, NV_SETTINGS["graphics"]))
        m = ClockLock.parse(journal.current(bus, NV_SETTINGS["memory"]))
        preset, status = preset_of(journal, bus)
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
                      clocks, self.accepted(dev))
        reason = eligibility(dev)
        if (g or m) and lost_in_reboot(self.host, journal, bus):
            row.preset = None
            row.message = "the lock joulectl set was lost in a reboot: run `joulectl governor set` again"
            return row
        if g or m:
            row.set_by = "joulectl"
            row.in_force = describe_locks(g.text() if g else None, m.text() if m else None)
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
                    return verified(row, journal, "clocks sampled inside the lock: verified")
            return row
        op = [d for d in ("graphics", "memory") if operator_lock(dev, d)]
        if op:
            row.set_by = "operator"
            row.in_force = describe_locks(operator_lock(dev, "graphics"), operator_lock(dev, "memory"))
            row.message = "locked by the operator, not by joulectl"
        elif reason:
            row.in_force = "no governor"
            row.message = reason
        return row


def governor(host: Host, model_presets: dict[str, Any] | None = None) -> NvidiaGovernor:
    return NvidiaGovernor(host, model_presets)
