"""The contract every GPU backend implements, and the errno -> status table shared by all.

Facts this module relies on, with their sources: docs/hardware.md §7 (errno values) and SPEC §4-5
(the tables).

A backend module (``nvidia``, ``amd``, ``intel``) exposes:

- ``is_available(host) -> bool``: a cheap probe (PCI vendor ids, ``/dev/nvidiactl``, hwmon names).
- ``discover(host) -> list[GpuDevice]``: every device of that vendor, reads degrading to unknown
  with a reason; raises :class:`BackendUnavailable` when the vendor's devices cannot be listed
  at all (tool missing, failing or timing out), which discover reports per vendor.
- ``set_caps(host, requests) -> list[WriteOutcome]``: write each (device, watts) and read it back.
  A batch so that NVIDIA can make one call per distinct value. Ops has already resolved
  percentages, ranges, ``unchanged`` and ``skipped``; the backend only writes and verifies.

The CPU backend (``cpu``) has ``discover(host) -> CpuInventory`` and ``set_caps`` over package
zones. Backends never print and never import typer or rich.

The governor contract (:class:`GovernorBackend`, SPEC §5) has the same shape: a module
``gov_<vendor>`` (``gov_nvidia``, ``gov_amd``, ``gov_intel``) or ``gov_cpu`` exposes
``presets(device, model_presets, host)`` (the presets a device accepts, cheap enough for
discover) and ``governor(host, ...) -> GovernorBackend`` for one run, which plans a preset into
journal intents, applies it with readback, undoes only what joulectl set, and shows what is in
force with verification. :mod:`joulectl.ops.governor` only orchestrates (lock, journal,
selection, results, exit codes) and never branches on the vendor.
"""

from __future__ import annotations

import errno
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from joulectl.host import Host
from joulectl.models import DeviceResult, GpuDevice, Status
from joulectl.record import record

if TYPE_CHECKING:
    from joulectl.ops.journal import Intent, Journal


class BackendUnavailable(Exception):
    """The vendor's devices could not be listed (the message says why)."""


@record
class WriteOutcome:
    """What one write did: the status, a message, and the value read back (watts)."""

    device: str
    status: Status
    message: str = ""
    after_w: float | None = None


class GpuBackend(Protocol):
    vendor: str

    def is_available(self, host: Host) -> bool: ...

    def discover(self, host: Host, *, details: bool = True) -> list[GpuDevice]:
        """The vendor's GPUs; ``details=False``: what a cap needs may be all that is read (limits, identity)."""
        ...

    def set_caps(self, host: Host, requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]: ...


REFUSED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
UNSUPPORTED_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY, errno.ENOSYS})

PRIVILEGE_HINT = "run as root (sudo joulectl ...)"


def status_for_errno(err: int) -> Status:
    """The status a failed write gets (SPEC §4): no privilege -> refused, EINVAL and ENODATA ->
    blocked, EOPNOTSUPP/EBUSY -> unsupported, anything else -> error."""
    if err in REFUSED_ERRNOS:
        return Status.REFUSED
    if err in (errno.EINVAL, errno.ENODATA, errno.ERANGE):
        return Status.BLOCKED
    if err in UNSUPPORTED_ERRNOS:
        return Status.UNSUPPORTED
    return Status.ERROR


def governor_status_for_errno(err: int, unsupported: frozenset[int]) -> Status:
    """The status a failed governor write gets (SPEC §5): no privilege -> refused, the backend's
    ``unsupported`` errnos (EINVAL among them: unlike a cap, a refused level is not a range) ->
    unsupported, anything else -> error."""
    if err in REFUSED_ERRNOS:
        return Status.REFUSED
    if err in unsupported:
        return Status.UNSUPPORTED
    return Status.ERROR


def normalize_bus_id(bus_id: str) -> str:
    """A PCI bus id as sysfs spells it: ``0000:07:00.0``, lowercase, 4-digit domain.

    nvidia-smi prints ``00000000:07:00.0`` (8-digit domain, upper case).
    """
    text = bus_id.strip().lower()
    if text.count(":") == 2:
        domain, rest = text.split(":", 1)
        domain = domain[-4:].rjust(4, "0")
        return f"{domain}:{rest}"
    if text.count(":") == 1:
        return f"0000:{text}"
    return text


def nvml_bus_id(bus_id: str) -> str:
    """A PCI bus id as NVML, nvidia-smi and dcgm-exporter spell it: ``00000000:07:00.0``
    (8-digit domain, upper case); the inverse of :func:`normalize_bus_id`."""
    text = normalize_bus_id(bus_id)
    if text.count(":") != 2:
        return text.upper()
    domain, rest = text.split(":", 1)
    return f"{domain.rjust(8, '0')}:{rest}".upper()


#: NVIDIA architectures that have run-time graphics and memory clock locks (Ampere and newer).
NVIDIA_GOVERNOR_ARCHS = frozenset({"ampere", "ada", "ada_lovelace", "hopper", "blackwell", "rubin"})


# -- the governor contract (SPEC §5) -------------------------------------------------------------

#: The journal's ``command`` of what a governor run records, and the setting holding the preset
#: joulectl put in force (``{"preset": ..., "status": ...}``).
GOVERNOR_COMMAND = "governor"
PRESET_SETTING = "governorPreset"
OPERATOR = "locked by the operator, not by joulectl: left alone"


@record
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


class GovernorBackend(Protocol):
    """One vendor's clock governor (or the CPU's) for one run.

    ``devices`` are the selected devices of that backend (``GpuDevice``, or ``CpufreqPolicy``
    for the CPU), in order; every method returns one result per device, in the same order.
    The caller holds the node lock for ``apply`` and ``undo`` and saves the journal after.
    """

    def accepted(self, device: Any) -> tuple[str, ...]:
        """The presets this device accepts (what ``apply`` can put in force)."""
        ...

    def plan(self, devices: Sequence[Any], preset: str, journal: Journal) -> tuple[list[DeviceResult], list[Intent]]:
        """The dry run: ``planned`` (or ``unchanged``/``blocked``) rows, and the settings ``apply``
        would journal, for the write-ahead save. Writes nothing."""
        ...

    def apply(self, devices: Sequence[Any], preset: str, journal: Journal) -> list[DeviceResult]:
        """Write the preset, read every write back, and record it in ``journal``."""
        ...

    def undo(self, devices: Sequence[Any], journal: Journal, *, dry_run: bool = False) -> list[DeviceResult]:
        """Put back what was in force before joulectl, only where joulectl set something."""
        ...

    def show(self, devices: Sequence[Any], journal: Journal) -> list[ShowRow]:
        """What is in force, who set it, and (``verified_now``) what this look verified."""
        ...


class DeviceGovernor:
    """The part of :class:`GovernorBackend` that is the same for governors deciding each GPU on its
    own (amdgpu, i915/xe): the contract's batch methods call ``_set``, ``_undo`` and ``_show`` per
    device, in order. A subclass gives those three and ``accepted``."""

    def __init__(self, host: Host, model_presets: dict[str, Any] | None = None) -> None:
        self.host = host
        self.model_presets = model_presets

    def plan(self, devices: Sequence[GpuDevice], preset: str,
             journal: Journal) -> tuple[list[DeviceResult], list[Intent]]:
        intents: list[Intent] = []
        return [self._set(journal, d, preset, True, intents) for d in devices], intents

    def apply(self, devices: Sequence[GpuDevice], preset: str, journal: Journal) -> list[DeviceResult]:
        return [self._set(journal, d, preset, False) for d in devices]

    def undo(self, devices: Sequence[GpuDevice], journal: Journal, *, dry_run: bool = False) -> list[DeviceResult]:
        return [self._undo_device(journal, d, dry_run) for d in devices]

    def show(self, devices: Sequence[GpuDevice], journal: Journal) -> list[ShowRow]:
        return [self._show(journal, d) for d in devices]

    def _set(self, journal: Journal, dev: GpuDevice, preset: str, dry_run: bool,
             intents: list[Intent] | None = None) -> DeviceResult:
        raise NotImplementedError

    def _undo_device(self, journal: Journal, dev: GpuDevice, dry_run: bool) -> DeviceResult:
        raise NotImplementedError

    def _show(self, journal: Journal, dev: GpuDevice) -> ShowRow:
        raise NotImplementedError


def gpu_result(dev: GpuDevice, status: Status, message: str = "", **kw: Any) -> DeviceResult:
    """A result row for a GPU (device = PCI bus id)."""
    return DeviceResult(device=dev.bus_id, vendor=dev.vendor, model=dev.model or dev.raw_model,
                        status=status, message=message, **kw)


def preset_of(journal: Journal, key: str) -> tuple[str | None, str | None]:
    """The preset joulectl put in force on ``key`` and its status, from the journal."""
    rec = journal.current(key, PRESET_SETTING)
    if isinstance(rec, dict):
        return rec.get("preset"), rec.get("status")
    return None, None


def mark_verified(journal: Journal, key: str, vendor: str, model: str | None, kind: str = "gpu") -> None:
    """Record that the preset in force on ``key`` was verified (``governor show``)."""
    rec = journal.current(key, PRESET_SETTING)
    value = dict(rec) if isinstance(rec, dict) else {}
    value["status"] = str(Status.APPLIED)
    journal.record(key, PRESET_SETTING, None, value, vendor=vendor, model=model, kind=kind, command="show")


def verified(row: ShowRow, journal: Journal, message: str) -> ShowRow:
    """``row`` verified by this look: ``applied``, and the journal records it when joulectl
    knows the preset."""
    row.status = str(Status.APPLIED)
    row.message = message
    if row.preset:
        mark_verified(journal, row.device, row.vendor, row.model, row.kind)
        row.verified_now = True
    return row


def model_preset_for(device: GpuDevice, model_presets: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model presets entry of this GPU's model (keys without GFD suffixes, matched as the
    catalog matches names)."""
    if not model_presets:
        return None
    from joulectl.catalog import normalize, strip_gfd_suffix

    names = {normalize(strip_gfd_suffix(n)) for n in (device.model, device.raw_model) if n}
    for key, value in model_presets.items():
        if normalize(strip_gfd_suffix(key)) in names and isinstance(value, dict):
            return value
    return None


def governor_module(vendor: str) -> ModuleType | None:
    """The governor backend module of a GPU vendor (``gov_<vendor>``), or None when joulectl has
    no governor for that vendor."""
    if not vendor.isidentifier():
        return None
    try:
        return importlib.import_module(f"joulectl.backends.gov_{vendor}")
    except ModuleNotFoundError:
        return None


def no_governor(vendor: str) -> str:
    """The ``blocked`` message of a GPU whose vendor has no governor backend."""
    return f"no governor mapping for {vendor.capitalize()} GPUs"


def governor_presets(device: GpuDevice, model_presets: dict[str, Any] | None = None,
                     host: Host | None = None) -> tuple[str, ...]:
    """The GPU governor presets a device accepts (SPEC §5), from its vendor's governor backend.

    ``model_presets`` (the GPU_GOVERNOR_MODEL_PRESETS_JSON map) adds ``sustained`` where the
    backend takes it from a model entry; ``host`` lets a backend look at files discover did not
    read (Intel GT frequencies). Without a backend: none.
    """
    module = governor_module(device.vendor)
    if module is None:
        return ()
    presets: tuple[str, ...] = module.presets(device, model_presets, host)
    return presets
