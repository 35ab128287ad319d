"""AMD GPUs through the amdgpu hwmon device (µW), never through rocm-smi or amd-smi.

Facts this module relies on, with their sources: docs/hardware.md §1.1-1.3 (amdgpu hwmon attributes,
µW, the Aldebaran secondary die).

Per PCI function ``/sys/bus/pci/devices/<bdf>/``: the hwmon whose ``name`` is ``amdgpu`` holds
``power1_cap`` (the limit in force), ``power1_cap_min``/``power1_cap_max`` (the range) and
``power1_average``/``power1_input`` (draw). Counting and limits (SPEC §3):

- A device without ``power1_cap`` (an APU's integrated GPU) is not counted.
- ``power1_cap`` of 0 is the secondary die of a two-die package (MI250X): it holds no limit, is
  never written, and names its primary. Primary rule: among the counted devices with the same PCI
  device id, sorted by bus id, a secondary pairs with the nearest *preceding* device that holds a
  limit and is not yet paired, else the nearest following one. The two GCDs of an MI250X sit on
  adjacent PCI buses (e.g. ``c1`` and ``c6``), with die 0 (the primary) first.
- ``power1_cap_default`` is the board's stock limit, independent of the cap in force (RX 6600:
  cap 120 W, default 100 W; Vega 56: default 260 W against a 390 W maximum). It is the default,
  and the target of ``cap --restore`` without a journal entry, when readable and non-zero; when it
  is missing or 0 the maximum stands in and a warning says so. Some swsmu ASICs rewrite it with
  the cap in force after a resume or GPU reset (``default_tracks_cap``): the journal's pre-change
  value stays the first choice of a restore, and discover notes a default equal to a cap joulectl
  set.
- ``power1_cap_min`` of 0 (Polaris, Vega, RDNA4) is an unknown minimum, not 0 W. A range can be
  pinned (min = max, as on the RX 7600S): only that value can be set.
- An empty read is unknown.
"""

from __future__ import annotations

from joulectl.backends.base import WriteOutcome
from joulectl.backends.pci import (
    VENDOR_AMD,
    find_hwmon,
    gpu_functions,
    write_uw_verified,
)
from joulectl.host import Host
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.units import MAX_POWER_UW, decimals_end, parse_sysfs_int, uw_to_w

vendor = "amd"

#: PCI device ids -> product names, for boards whose ``product_name`` (FRU) is empty or missing.
DEVICE_NAMES = {
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
    0x74A0: "AMD Instinct MI300A",
    0x740C: "AMD Instinct MI250X/MI250",
    0x740F: "AMD Instinct MI210",
    0x7448: "AMD Radeon PRO W7900",
    # pci.ids names (the board's product_name is empty on Radeon consumer cards)
    0x73FF: "AMD Radeon RX 6600/6600 XT/6600M",
    0x687F: "AMD Radeon RX Vega 56/64",
    0x7480: "AMD Radeon RX 7600/7600S/7700S",
    0x7550: "AMD Radeon RX 9070/9070 XT",
}

#: One DPM level line: read by :func:`_dpm_level` as this pattern reads it, without compiling it.
_LEVEL = r"^\s*(\d+)\s*:\s*(\d+)\s*[mM][hH][zZ]\s*(\*)?"

__all__ = ["discover", "is_available", "parse_dpm_levels", "set_caps", "vendor"]


def _amdgpu_functions(host: Host) -> list[tuple[str, str, int | None]]:
    """(PCI device path, hwmon path, device id) of every AMD function with an amdgpu hwmon."""
    out = []
    for dev in gpu_functions(host, VENDOR_AMD):
        hw = find_hwmon(host, dev.path, ("amdgpu",))
        if hw is not None:
            out.append((dev.path, hw[0], dev.device_id))
    return out


def is_available(host: Host) -> bool:
    """A cheap probe: an AMD PCI function of a GPU class exists (:func:`discover` then keeps the
    ones with an ``amdgpu`` hwmon and ``power1_cap``)."""
    return bool(gpu_functions(host, VENDOR_AMD))


def parse_dpm_levels(text: str) -> tuple[list[int], int | None]:
    """``pp_dpm_*`` text (``"%d: %uMhz %s\\n"``, ``*`` on the current level): (MHz per level, current MHz)."""
    levels: list[int] = []
    current = None
    for line in text.splitlines():
        level = _dpm_level(line)
        if level is None:
            continue
        mhz, star = level
        levels.append(mhz)
        if star:
            current = mhz
    return levels, current


def _dpm_level(line: str) -> tuple[int, bool] | None:
    """(MHz, current) of one ``pp_dpm_*`` line as :data:`_LEVEL` matches it (its second and third
    groups), else None, without compiling the pattern (0.2 ms of every AMD discover; a test holds
    the two equal): blanks (Unicode's, as ``\\s``), decimal digits (Unicode's, as ``\\d``), blanks,
    ``:``, blanks, digits, blanks, ``MHz`` in any case, blanks, an optional ``*``; anything after."""
    text = line.lstrip()
    at = decimals_end(text)
    if at == 0:
        return None
    rest = text[at:].lstrip()
    if rest[:1] != ":":
        return None
    rest = rest[1:].lstrip()
    at = decimals_end(rest)
    if at == 0:
        return None
    unit = rest[at:].lstrip()
    if unit[:1] not in ("m", "M") or unit[1:2] not in ("h", "H") or unit[2:3] not in ("z", "Z"):
        return None
    return int(rest[:at]), unit[3:].lstrip()[:1] == "*"


#: What discover reads of each GPU, by directory, in one batch each (``Host.read_values``).
_HWMON_LEAVES = ("power1_cap", "power1_cap_min", "power1_cap_max", "power1_cap_default", "power1_average",
                 "power1_input")
_DEVICE_LEAVES = ("product_name", "unique_id", "current_compute_partition", "power_dpm_force_performance_level",
                  "pp_dpm_sclk", "pp_dpm_mclk")


def _uw(host: Host, path: str, value: str | None = None) -> tuple[float | None, str | None]:
    """A µW attribute in watts, or (None, reason); ``value``: the attribute as already read (its
    reason, when it could not be, is asked of :meth:`Host.read_attr`)."""
    if value is None:
        attr = host.read_attr(path)
        if attr.value is None:
            return None, attr.reason
        value = attr.value
    if value == "":
        return None, "empty"
    try:
        return uw_to_w(parse_sysfs_int(value, limit=MAX_POWER_UW)), None
    except ValueError as e:
        return None, str(e)


def discover(host: Host, *, details: bool = True) -> list[GpuDevice]:
    """Every amdgpu device with ``power1_cap``, sorted by bus id (index assigned by ops); sysfs
    reads are cheap, so ``details`` changes nothing."""
    found: list[tuple[GpuDevice, int | None]] = []
    for dev_path, hwmon, device_id in _amdgpu_functions(host):
        cap_file = f"{hwmon}/power1_cap"
        hw = host.read_values(hwmon, _HWMON_LEAVES)
        if hw["power1_cap"] is None and not host.exists(cap_file):
            continue  # APU integrated GPU (or SR-IOV VF): no cap, not counted
        bus_id = dev_path.rsplit("/", 1)[1].lower()
        warnings: list[str] = []
        cap_w, cap_reason = _uw(host, cap_file, hw["power1_cap"])
        min_w, min_reason = _uw(host, f"{hwmon}/power1_cap_min", hw["power1_cap_min"])
        max_w, max_reason = _uw(host, f"{hwmon}/power1_cap_max", hw["power1_cap_max"])
        if min_w == 0:
            min_w = None  # Polaris, Vega, RDNA4: 0 means the minimum is unknown, not 0 W
        default_w, default_reason = _uw(host, f"{hwmon}/power1_cap_default", hw["power1_cap_default"])
        power_w, _ = _uw(host, f"{hwmon}/power1_average", hw["power1_average"])
        if power_w is None:
            power_w, _ = _uw(host, f"{hwmon}/power1_input", hw["power1_input"])
        if cap_reason:
            warnings.append(f"power1_cap unreadable ({cap_reason})")
        if min_reason and host.exists(f"{hwmon}/power1_cap_min"):
            warnings.append(f"power1_cap_min unreadable ({min_reason})")
        dev = host.read_values(dev_path, _DEVICE_LEAVES)
        raw_model = dev["product_name"] or None
        if raw_model is None and device_id is not None:
            raw_model = DEVICE_NAMES.get(device_id, f"AMD GPU {device_id:#06x}")
        uuid = dev["unique_id"] or None
        partition = dev["current_compute_partition"] or None
        perf_level = dev["power_dpm_force_performance_level"] or None
        sclk_levels, sclk_now = parse_dpm_levels(dev["pp_dpm_sclk"] or "")
        _, mclk_now = parse_dpm_levels(dev["pp_dpm_mclk"] or "")
        clocks: dict[str, object] = {}
        if sclk_now is not None:
            clocks["graphics_mhz"] = sclk_now
        if mclk_now is not None:
            clocks["memory_mhz"] = mclk_now
        holds = cap_w != 0
        if max_w is None:
            control = Control(False, f"power1_cap_max unreadable ({max_reason})")
        else:
            control = Control(True)
        if holds and not default_w:
            why = "reads 0" if default_w == 0 else ("is missing" if default_reason == "ENOENT" else
                                                   f"is unreadable ({default_reason})")
            if max_w is not None:
                warnings.append(f"power1_cap_default {why}: the maximum {max_w:g} W stands in as the default")
            default_w = max_w
        elif not holds:
            default_w = max_w  # a secondary die reads 0 there; its limit is the primary's
        if holds and min_w is not None and min_w == max_w:
            warnings.append(f"the power limit range is pinned at {max_w:g} W (power1_cap_min = power1_cap_max): "
                            "no other value can be set")
        gpu = GpuDevice(
            index=-1,
            bus_id=bus_id,
            vendor=vendor,
            driver="amdgpu",
            raw_model=raw_model,
            model=None,
            uuid=uuid,
            cap_range=PowerRange(min_w, max_w, default_w),
            current_cap_w=cap_w if holds else None,
            power_w=power_w,
            holds_limit=holds,
            partition=partition,
            control=control,
            hwmon=hwmon,
            cap_file=cap_file,
            perf_level=perf_level,
            sclk_levels_mhz=sclk_levels or None,
            clocks=clocks,
            warnings=warnings,
            default_tracks_cap=True,
        )
        found.append((gpu, device_id))
    _pair_secondaries(found)
    return sorted((g for g, _ in found), key=lambda g: g.bus_id)


def _pair_secondaries(found: list[tuple[GpuDevice, int | None]]) -> None:
    """Give every secondary die (cap 0) its primary, by the rule in the module docstring."""
    paired: set[str] = set()
    for pos, (gpu, dev_id) in enumerate(found):
        if gpu.holds_limit:
            continue
        same = [(i, g) for i, (g, d) in enumerate(found) if d == dev_id and g.holds_limit]
        before = [g for i, g in reversed(same) if i < pos and g.bus_id not in paired]
        after = [g for i, g in same if i > pos and g.bus_id not in paired]
        candidates = before or after
        if not candidates:
            gpu.control = Control(False, "secondary die (power1_cap reads 0) and no primary die found")
            gpu.warnings.append("secondary die without a primary die on this node")
            continue
        primary = candidates[0]
        paired.add(primary.bus_id)
        gpu.primary_bus_id = primary.bus_id
        gpu.control = Control(False, f"limited through primary {primary.bus_id}")


def set_caps(host: Host, requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]:
    """Write each cap as µW to ``power1_cap`` and read it back at once.

    A secondary die is never written (``skipped``); ops normally filters it out first.
    """
    out: list[WriteOutcome] = []
    for gpu, watts in requests:
        if not gpu.holds_limit:
            out.append(WriteOutcome(gpu.bus_id, Status.SKIPPED, f"limited through primary {gpu.primary_bus_id}"))
            continue
        if not gpu.cap_file:
            out.append(WriteOutcome(gpu.bus_id, Status.BLOCKED, "no power1_cap file"))
            continue
        out.append(
            write_uw_verified(
                host, gpu.bus_id, gpu.cap_file, watts, min_w=gpu.cap_range.min_w, max_w=gpu.cap_range.max_w
            )
        )
    return out
