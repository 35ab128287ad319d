"""Intel discrete GPUs through the i915 or xe hwmon device (µW); no Intel tool is run.

Facts this module relies on, with their sources: docs/hardware.md §2.1-2.2 (i915 and xe hwmon, PL1
clamped on read).

The cap is the sustained limit PL1: ``power1_max`` under i915; under xe the first of
``power1_max`` (card) and ``power2_max`` (package: DG2, Flex and Max show only ``power2_*``). The
maximum, and default, is ``power<N>_rated_max``; there is no known minimum. Without ``rated_max``,
or when it reads 0 (i915 on some Arc boards: unknown, not 0 W), the range is unknown and control
is blocked with "the power limit range of the Intel GPUs is unknown".

Other limits are reported, never set: ``power<N>_cap`` (PL2 under xe) and ``power<N>_crit``
(critical). Battlemage under xe shows only ``power1_cap`` and ``power1_crit``: PL1 is unknown and
control is blocked with a reason naming the missing files.
Only discrete GPUs register such a hwmon, so integrated GPUs are not counted; a two-tile Max 1550
is one PCI function with one hwmon, so it is one GPU.

The hardware clamps a limit to bounds sysfs does not show: a write is read back at once and a
readback that differs is an ``error`` naming the bus id.
"""

from __future__ import annotations

from joulectl.backends.base import WriteOutcome
from joulectl.backends.pci import VENDOR_INTEL, find_hwmon, gpu_functions, write_uw_verified
from joulectl.host import Host
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.units import MAX_POWER_UW, parse_sysfs_int, uw_to_w

vendor = "intel"

RANGE_UNKNOWN = "the power limit range of the Intel GPUs is unknown"

#: PCI device ids -> product names (Intel exposes no product name in sysfs).
DEVICE_NAMES = {
    0x56C0: "Intel Data Center GPU Flex 170",
    0x56C1: "Intel Data Center GPU Flex 140",
    0x0BD5: "Intel Data Center GPU Max 1550",
    0x0BDA: "Intel Data Center GPU Max 1100",
    0x56A0: "Intel Arc A770",
    0x56A1: "Intel Arc A750",
    0xE20B: "Intel Arc B580",
    0xE20C: "Intel Arc B570",
}

#: hwmon power files that are limits but not PL1: file suffix -> name in ``other_limits_w``.
OTHER_LIMITS = (("cap", "pl2"), ("crit", "critical"))

__all__ = ["RANGE_UNKNOWN", "discover", "is_available", "set_caps", "vendor"]


def _functions(host: Host) -> list[tuple[str, int | None, str, str]]:
    """(PCI device path, device id, hwmon path, driver) of every Intel GPU with an i915/xe hwmon."""
    out = []
    for dev in gpu_functions(host, VENDOR_INTEL):
        hw = find_hwmon(host, dev.path, ("i915", "xe"))
        if hw is not None:
            out.append((dev.path, dev.device_id, hw[0], hw[1]))
    return out


def is_available(host: Host) -> bool:
    """A cheap probe: an Intel PCI function of a GPU class exists (:func:`discover` then keeps the
    discrete ones, which have an ``i915`` or ``xe`` hwmon)."""
    return bool(gpu_functions(host, VENDOR_INTEL))


def _uw(host: Host, path: str) -> tuple[int | None, str | None]:
    attr = host.read_attr(path)
    if not attr.value:
        return None, attr.reason or "missing"
    try:
        return parse_sysfs_int(attr.value, limit=MAX_POWER_UW), None
    except ValueError as e:
        return None, str(e)


def _channels(driver: str) -> tuple[int, ...]:
    return (1,) if driver == "i915" else (1, 2)


def pl1_channel(host: Host, hwmon: str, driver: str) -> int | None:
    """The hwmon channel N of the PL1 file ``power<N>_max`` (see the module docstring)."""
    for n in _channels(driver):
        if host.exists(f"{hwmon}/power{n}_max"):
            return n
    return None


def _other_limits(host: Host, hwmon: str, channels: tuple[int, ...]) -> tuple[dict[str, float], list[str]]:
    """PL2 and critical limits in watts (first channel that has each), and the files read."""
    limits: dict[str, float] = {}
    files: list[str] = []
    for suffix, name in OTHER_LIMITS:
        for n in channels:
            uw, _ = _uw(host, f"{hwmon}/power{n}_{suffix}")
            if uw:  # 0 is unknown, not a 0 W limit
                limits[name] = uw_to_w(uw)
                files.append(f"power{n}_{suffix} ({'PL2' if suffix == 'cap' else 'critical'})")
                break
    return limits, files


def discover(host: Host, *, details: bool = True) -> list[GpuDevice]:
    """Every discrete Intel GPU with an i915 or xe hwmon, sorted by bus id (``details`` changes
    nothing: sysfs reads are cheap)."""
    gpus = []
    for dev_path, device_id, hwmon, driver in _functions(host):
        bus_id = dev_path.rsplit("/", 1)[1].lower()
        warnings: list[str] = []
        raw_model = DEVICE_NAMES.get(device_id, f"Intel GPU {device_id:#06x}") if device_id else None
        channel = pl1_channel(host, hwmon, driver)
        other, other_files = _other_limits(host, hwmon, (channel,) if channel else _channels(driver))
        cap_file = None
        cap_w = max_w = power_w = None
        if channel is None:
            missing = "/".join(f"power{n}_max" for n in _channels(driver))
            shown = f": {driver} shows only {' and '.join(other_files)}; PL1 is unknown" if other_files else ""
            control = Control(False, f"no PL1 file ({missing}){shown}")
        else:
            cap_file = f"{hwmon}/power{channel}_max"
            cap_uw, cap_reason = _uw(host, cap_file)
            if cap_uw == 0:
                warnings.append("PL1 is disabled (power_max reads 0)")
            elif cap_uw is not None:
                cap_w = uw_to_w(cap_uw)
            else:
                warnings.append(f"power{channel}_max unreadable ({cap_reason})")
            rated_uw, _ = _uw(host, f"{hwmon}/power{channel}_rated_max")
            if rated_uw:
                max_w = uw_to_w(rated_uw)
                control = Control(True)
            else:
                if rated_uw == 0:
                    warnings.append(f"power{channel}_rated_max reads 0: the maximum is unknown (not 0 W)")
                control = Control(False, RANGE_UNKNOWN)
            input_uw, _ = _uw(host, f"{hwmon}/power{channel}_input")
            power_w = uw_to_w(input_uw) if input_uw is not None else None
        energy_uj = None
        for n in ((channel,) if channel else ()) + (1, 2):
            energy_uj, _ = _uw(host, f"{hwmon}/energy{n}_input")  # µJ
            if energy_uj is not None:
                break
        gpus.append(
            GpuDevice(
                index=-1,
                bus_id=bus_id,
                vendor=vendor,
                driver=driver,
                raw_model=raw_model,
                model=None,
                cap_range=PowerRange(None, max_w, max_w),
                current_cap_w=cap_w,
                power_w=power_w,
                control=control,
                hwmon=hwmon,
                cap_file=cap_file,
                warnings=warnings,
                energy_uj=energy_uj,
                other_limits_w=other,
            )
        )
    gpus.sort(key=lambda g: g.bus_id)
    return gpus


def set_caps(host: Host, requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]:
    """Write each cap as µW to the PL1 file and read it back (a clamp is an ``error``)."""
    out: list[WriteOutcome] = []
    for gpu, watts in requests:
        if not gpu.cap_file:
            out.append(WriteOutcome(gpu.bus_id, Status.BLOCKED, gpu.control.reason or "no PL1 file"))
            continue
        if gpu.cap_range.max_w is None:
            out.append(WriteOutcome(gpu.bus_id, Status.BLOCKED, RANGE_UNKNOWN))
            continue
        out.append(write_uw_verified(host, gpu.bus_id, gpu.cap_file, watts, min_w=None, max_w=gpu.cap_range.max_w))
    return out
