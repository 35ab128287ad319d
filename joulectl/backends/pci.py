"""PCI and hwmon helpers shared by the sysfs GPU backends (amdgpu, i915, xe) and the NVIDIA probe.

Facts this module relies on, with their sources: docs/hardware.md §1.1 and §2.1 (hwmon under the PCI
device, matched by ``name``).

Everything is read through :class:`~joulectl.host.Host` under ``/sys/bus/pci/devices``: one
directory per PCI function, named by its bus id (``0000:07:00.0``), with ``vendor``, ``device``
and ``class`` attributes (hex), a ``driver`` symlink, and the hwmon devices the driver registered
under ``hwmon/hwmon<N>/`` (matched by their ``name`` file, never by N).
"""

from __future__ import annotations

import posixpath

from joulectl.backends.base import PRIVILEGE_HINT, WriteOutcome, normalize_bus_id, status_for_errno
from joulectl.host import Host, HostIOError
from joulectl.models import Status
from joulectl.record import record
from joulectl.units import MAX_POWER_UW, parse_sysfs_int, uw_to_w, w_to_uw

PCI_DEVICES = "/sys/bus/pci/devices"

VENDOR_NVIDIA = 0x10DE
VENDOR_AMD = 0x1002
VENDOR_INTEL = 0x8086

#: PCI base classes of GPUs: display controllers (0x03) and processing accelerators (0x12).
GPU_BASE_CLASSES = frozenset({0x03, 0x12})


@record(frozen=True)
class PciDevice:
    """One PCI function as sysfs shows it."""

    bus_id: str  # normalize_bus_id form
    path: str  # host path of the device directory
    vendor_id: int | None
    device_id: int | None
    class_code: int | None
    driver: str | None


def gpu_functions(host: Host, vendor_id: int) -> list[PciDevice]:
    """PCI functions of ``vendor_id`` with a GPU class (display or accelerator), sorted by bus id.

    Reads ``vendor`` first (once per inventory for every backend: :meth:`Host.memo`) and the rest
    only for that vendor's functions (a node has many PCI functions and every read under a
    non-``/`` root is checked for confinement). ``driver`` is
    left None here: each backend tells its driver by the function's hwmon name.
    """
    found = []
    for name, vendor in host.memo("pci-vendors", lambda: _vendors(host)):
        if vendor != vendor_id:
            continue
        path = f"{PCI_DEVICES}/{name}"
        class_code = host.read_int(f"{path}/class", base=16)
        if class_code is None or (class_code >> 16) not in GPU_BASE_CLASSES:
            continue
        found.append(
            PciDevice(
                bus_id=normalize_bus_id(name),
                path=path,
                vendor_id=vendor_id,
                device_id=host.read_int(f"{path}/device", base=16),
                class_code=class_code,
                driver=None,
            )
        )
    return sorted(found, key=lambda d: d.bus_id)


def _vendors(host: Host) -> list[tuple[str, int | None]]:
    """Every PCI function's vendor id, read once per inventory for all the GPU backends (a GPU
    server has a few hundred PCI functions, and each backend looks for its vendor's)."""
    return [(name, host.read_int(f"{PCI_DEVICES}/{name}/vendor", base=16)) for name in host.listdir(PCI_DEVICES)]


def find_hwmon(host: Host, device_path: str, names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first ``hwmon<N>`` under a device whose ``name`` is one of ``names``: (path, name)."""
    base = f"{device_path}/hwmon"
    entries = [e for e in host.listdir(base) if e.startswith("hwmon")]
    entries.sort(key=lambda e: int(e[5:]) if e[5:].isdigit() else 1 << 30)
    for entry in entries:
        name = host.read_attr(f"{base}/{entry}/name").value
        if name in names:
            return f"{base}/{entry}", name
    return None


def smi_bus_id(bus_id: str) -> str:
    """A bus id as nvidia-smi and NVML print it: ``00000000:07:00.0`` (8-digit domain, upper case)."""
    norm = normalize_bus_id(bus_id)
    domain, rest = norm.split(":", 1) if norm.count(":") == 2 else ("0000", norm)
    return f"{domain.rjust(8, '0')}:{rest}".upper()


def fmt_w(watts: float | None) -> str:
    """Watts for a message: ``420 W``, ``420.5 W`` or ``unknown``."""
    if watts is None:
        return "unknown"
    return f"{watts:g} W"


def range_text(min_w: float | None, max_w: float | None) -> str:
    """A power range for a message: ``100-300 W``, ``at most 150 W`` or ``unknown``."""
    if min_w is None and max_w is None:
        return "unknown"
    if min_w is None:
        return f"at most {fmt_w(max_w)}"
    if max_w is None:
        return f"at least {fmt_w(min_w)}"
    return f"{min_w:g}-{max_w:g} W"


def write_uw_verified(
    host: Host,
    device: str,
    path: str,
    watts: float,
    *,
    min_w: float | None,
    max_w: float | None,
    enodata_message: str | None = None,
) -> WriteOutcome:
    """Write ``watts`` as whole microwatts to a sysfs power-limit file and read it straight back.

    Serves hwmon caps (amdgpu, i915, xe) and powercap constraints alike. A failed store maps
    through :func:`status_for_errno` (EINVAL names the range; ENODATA, which powercap returns for a
    firmware-locked limit, says ``enodata_message`` when given); a readback that differs from the
    request is an ``error`` naming the device (hardware clamps, watt truncation, RAPL power units);
    an unreadable readback is ``applied-unverified``.
    """
    uw = w_to_uw(watts)
    try:
        host.write(path, str(uw))
    except HostIOError as e:
        status = status_for_errno(e.errno)
        if e.errno_name == "ENODATA" and enodata_message:
            msg = enodata_message
        elif status is Status.REFUSED:
            msg = f"{e.errno_name} writing {path}: no privilege ({PRIVILEGE_HINT})"
        elif e.errno_name == "EINVAL":
            msg = f"EINVAL: the driver refused {fmt_w(watts)} (range {range_text(min_w, max_w)})"
        else:
            msg = f"{e.errno_name} writing {path}: {e.strerror}"
        return WriteOutcome(device, status, msg)
    attr = host.read_attr(path)
    if not attr.value:
        return WriteOutcome(
            device,
            Status.APPLIED_UNVERIFIED,
            f"written, but {posixpath.basename(path)} reads back {attr.reason or 'nothing'}",
        )
    try:
        back_uw = parse_sysfs_int(attr.value, limit=MAX_POWER_UW)
    except ValueError:
        return WriteOutcome(
            device, Status.APPLIED_UNVERIFIED, f"written, but {posixpath.basename(path)} reads back {attr.value!r}"
        )
    after_w = uw_to_w(back_uw)
    if back_uw != uw:
        return WriteOutcome(
            device,
            Status.ERROR,
            f"{device}: read back {fmt_w(after_w)} after writing {fmt_w(watts)}",
            after_w,
        )
    return WriteOutcome(device, Status.APPLIED, "", after_w)
