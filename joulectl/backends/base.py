"""The contract every GPU backend implements, and the errno -> status table shared by all.

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
"""

from __future__ import annotations

import errno
from typing import Protocol

from joulectl.host import Host
from joulectl.models import GpuDevice, Status
from joulectl.record import record


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

    def discover(self, host: Host) -> list[GpuDevice]: ...

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


#: NVIDIA architectures that have run-time graphics and memory clock locks (Ampere and newer).
NVIDIA_GOVERNOR_ARCHS = frozenset({"ampere", "ada", "ada_lovelace", "hopper", "blackwell", "rubin"})


def governor_presets(device: GpuDevice, model_presets: dict[str, object] | None = None) -> tuple[str, ...]:
    """The GPU governor presets a device accepts (SPEC §5).

    NVIDIA: Ampere or newer with a known clock table; ``sustained`` only when ``model_presets``
    (the GPU_GOVERNOR_MODEL_PRESETS_JSON map, keyed by product without GFD suffixes) names the
    model. AMD: the five presets when ``power_dpm_force_performance_level`` is present
    (``efficient`` also needs ``pp_dpm_sclk`` levels). Intel: none yet.
    """
    if device.vendor == "nvidia":
        arch = (device.architecture or "").strip().lower()
        if arch not in NVIDIA_GOVERNOR_ARCHS or not device.supported_clocks:
            return ()
        presets = ["auto", "efficient", "low", "peak"]
        if model_presets and _model_in(device, model_presets):
            presets.append("sustained")
        return tuple(p for p in ("auto", "sustained", "efficient", "low", "peak") if p in presets)
    if device.vendor == "amd":
        if device.perf_level is None:
            return ()
        presets = ["auto", "sustained", "low", "peak"]
        if device.sclk_levels_mhz:
            presets.append("efficient")
        return tuple(p for p in ("auto", "sustained", "efficient", "low", "peak") if p in presets)
    return ()


def _model_in(device: GpuDevice, model_presets: dict[str, object]) -> bool:
    from joulectl.catalog import normalize, strip_gfd_suffix

    names = {normalize(strip_gfd_suffix(n)) for n in (device.model, device.raw_model) if n}
    return any(normalize(strip_gfd_suffix(k)) in names for k in model_presets)
