"""CPUs: ``/proc/cpuinfo``, powercap (RAPL) zones and cpufreq policies, all read through Host.

- Identity and topology from ``/proc/cpuinfo`` (``vendor_id``, ``model name``, ``physical id``,
  ``core id``, ``siblings``, ``cpu cores``, ``flags`` with ``hypervisor`` on a virtual machine).
- Powercap zones from ``/sys/class/powercap/<type>:<id>[:<sub>]`` (ids are hex): the zone is what
  its ``name`` says (``package-N``, ``dram``, ``psys``, ``core``, ``uncore``), never what its id
  suggests; psys is a top-level zone. Constraints ``constraint_<i>_*`` are dense and named
  (``long_term`` = PL1). ``energy_uj`` is readable only by root. A PL1 locked by firmware stays
  visible; its limit reads (or writes) ENODATA and ``enabled`` reads 0.
  Zones of ``intel-rapl-mmio`` duplicate the MSR package zones: they count as packages only
  when no other interface shows that package.
- cpufreq from ``/sys/devices/system/cpu/cpufreq/policy*/`` (kHz), turbo from
  ``intel_pstate/no_turbo`` or ``cpufreq/boost``.

``set_caps`` writes µW to the ``long_term`` constraint and reads it back.
"""

from __future__ import annotations

import errno
import re

from joulectl.backends.base import WriteOutcome
from joulectl.backends.pci import write_uw_verified
from joulectl.host import Host
from joulectl.models import Control, CpufreqPolicy, CpuInventory, PowercapConstraint, PowercapZone, PowerRange, Status
from joulectl.units import MAX_POWER_UW, khz_to_mhz, parse_sysfs_int, uw_to_w

POWERCAP = "/sys/class/powercap"
CPUFREQ = "/sys/devices/system/cpu/cpufreq"
CPU_DIR = "/sys/devices/system/cpu"

_ZONE_ID = re.compile(r"^(?P<type>[a-z0-9_-]+):(?P<ids>[0-9a-f]+(?::[0-9a-f]+)*)$")
_PACKAGE = re.compile(r"^package-(\d+)")
_POLICY = re.compile(r"^policy(\d+)$")

LOCKED_MESSAGE = "limit locked by firmware"

__all__ = ["LOCKED_MESSAGE", "discover", "parse_cpuinfo", "read_zones", "set_caps"]


# -- /proc/cpuinfo ----------------------------------------------------------------------------------


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """One dict per ``processor`` block (keys as printed, values stripped)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return [b for b in blocks if "processor" in b]


# -- powercap ----------------------------------------------------------------------------------------


def _sort_key(zone_id: str) -> tuple[str, tuple[int, ...]]:
    m = _ZONE_ID.match(zone_id)
    if not m:
        return zone_id, ()
    return m.group("type"), tuple(int(x, 16) for x in m.group("ids").split(":"))


def _kind(name: str) -> str:
    for kind in ("package", "dram", "psys", "uncore", "core"):
        if name == kind or name.startswith(kind + "-"):
            return kind
    return "other"


def _uw_w(host: Host, path: str) -> float | None:
    value, _ = host.read_uw(path)
    return uw_to_w(value) if value is not None else None


def _constraints(host: Host, zone_path: str) -> list[PowercapConstraint]:
    out = []
    for i in range(32):
        prefix = f"{zone_path}/constraint_{i}_"
        if not (host.exists(prefix + "name") or host.exists(prefix + "power_limit_uw")):
            break
        limit_attr = host.read_attr(prefix + "power_limit_uw")
        limit_w = None
        reason = limit_attr.reason
        if limit_attr.value:
            try:
                limit_w = uw_to_w(parse_sysfs_int(limit_attr.value, limit=MAX_POWER_UW))
            except ValueError as e:
                reason = str(e)
        out.append(
            PowercapConstraint(
                index=i,
                name=host.read_attr(prefix + "name").value or None,
                limit_w=limit_w,
                min_w=_uw_w(host, prefix + "min_power_uw"),
                max_w=_uw_w(host, prefix + "max_power_uw"),
                time_window_us=host.read_int(prefix + "time_window_us"),
                limit_path=prefix + "power_limit_uw",
                limit_reason=reason,
            )
        )
    return out


def read_zones(host: Host) -> list[PowercapZone]:
    """Every powercap zone (top level and subzones), in id order."""
    entries = [e for e in host.listdir(POWERCAP) if _ZONE_ID.match(e)]
    entries.sort(key=_sort_key)
    zones: list[PowercapZone] = []
    by_id: dict[str, PowercapZone] = {}
    for entry in entries:
        path = f"{POWERCAP}/{entry}"
        name_attr = host.read_attr(f"{path}/name")
        name = name_attr.value
        if not name:
            if name_attr.errno == errno.EXDEV and entry.count(":") == 1:
                # a zone symlinked out of the host root: a row saying so, never read nor written
                zones.append(PowercapZone(path=path, zone_id=entry, name=entry, kind="package", socket=None,
                                          enabled=None, energy_readable=False, energy_uj=None,
                                          max_energy_range_uj=None, energy_reason=name_attr.reason))
            continue
        kind = _kind(name)
        socket = None
        if pm := _PACKAGE.match(name):
            socket = int(pm.group(1))
        parent_id = entry.rsplit(":", 1)[0]
        if socket is None and parent_id in by_id:
            socket = by_id[parent_id].socket
        energy = host.read_attr(f"{path}/energy_uj")
        energy_uj = None
        energy_reason = None
        if energy.value:
            try:
                energy_uj = parse_sysfs_int(energy.value)
            except ValueError as e:
                energy_reason = str(e)
        elif energy.errno is not None and energy.reason in ("EACCES", "EPERM"):
            energy_reason = f"{energy.reason}: readable only by root"
        else:
            energy_reason = energy.reason or "missing"
        enabled_int = host.read_int(f"{path}/enabled")
        zone = PowercapZone(
            path=path,
            zone_id=entry,
            name=name,
            kind=kind,
            socket=socket,
            enabled=None if enabled_int is None else bool(enabled_int),
            energy_readable=energy_uj is not None,
            energy_uj=energy_uj,
            max_energy_range_uj=host.read_int(f"{path}/max_energy_range_uj"),
            constraints=_constraints(host, path),
            energy_reason=energy_reason,
        )
        by_id[entry] = zone
        zones.append(zone)
    # MMIO zones duplicate MSR package zones: keep them as packages only when unduplicated.
    names_elsewhere = {z.name for z in zones if not z.zone_id.startswith("intel-rapl-mmio:")}
    for z in zones:
        if z.zone_id.startswith("intel-rapl-mmio:") and z.name in names_elsewhere:
            z.kind = "other"
    return zones


# -- cpufreq ----------------------------------------------------------------------------------------


def _cpus(text: str | None) -> list[int]:
    out: list[int] = []
    for part in (text or "").replace(",", " ").split():
        if "-" in part:
            a, _, b = part.partition("-")
            if a.isdigit() and b.isdigit():
                out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out


def read_policies(host: Host) -> list[CpufreqPolicy]:
    """Every ``policy<N>`` directory, in N order.

    ``scaling_driver`` and ``scaling_available_governors`` are system-wide (one cpufreq driver,
    one governor registry), so they are read from the first policy only; the available EPP list
    depends on the policy's governor (only ``performance`` under the performance governor), so
    it is read once per governor. A node has hundreds of policies; this saves a third of the reads.
    """
    names = [n for n in host.listdir(CPUFREQ) if _POLICY.match(n)]
    names.sort(key=lambda n: int(n[6:]))
    out = []
    driver: str | None = None
    governors: list[str] = []
    epps_by_governor: dict[str | None, list[str]] = {}
    # The driver defines which attributes a policy has: files missing from the first policy
    # (base_frequency on amd-pstate, EPP without HWP) are not looked for in the others.
    leaves = set(host.listdir(f"{CPUFREQ}/{names[0]}")) if names else set()
    for i, name in enumerate(names):
        p = f"{CPUFREQ}/{name}"

        def attr(leaf: str, base: str = p) -> str | None:
            if leaves and leaf not in leaves:
                return None
            return host.read_attr(f"{base}/{leaf}").value or None

        def num(leaf: str, base: str = p) -> int | None:
            if leaves and leaf not in leaves:
                return None
            return host.read_int(f"{base}/{leaf}")

        if i == 0:
            driver = attr("scaling_driver")
            governors = (attr("scaling_available_governors") or "").split()
        governor = attr("scaling_governor")
        if governor not in epps_by_governor:
            epps_by_governor[governor] = (attr("energy_performance_available_preferences") or "").split()
        out.append(
            CpufreqPolicy(
                name=name,
                path=p,
                cpus=_cpus(attr("affected_cpus") or attr("related_cpus")),
                driver=driver,
                governor=governor,
                available_governors=list(governors),
                epp=attr("energy_performance_preference"),
                available_epp=list(epps_by_governor[governor]),
                min_khz=num("cpuinfo_min_freq"),
                max_khz=num("cpuinfo_max_freq"),
                base_khz=num("base_frequency"),
                cur_khz=num("scaling_cur_freq"),
            )
        )
    return out


def _unique(values: list[str | None]) -> list[str]:
    out: list[str] = []
    for v in values:
        if v and v not in out:
            out.append(v)
    return out


def _turbo(host: Host, policies: list[CpufreqPolicy]) -> bool | None:
    no_turbo = host.read_int(f"{CPU_DIR}/intel_pstate/no_turbo")
    if no_turbo is not None:
        return no_turbo == 0
    boost = host.read_int(f"{CPUFREQ}/boost")
    if boost is not None:
        return boost == 1
    per = [host.read_int(f"{p.path}/boost") for p in policies]
    known = [b for b in per if b is not None]
    if known:
        return any(b == 1 for b in known)
    return None


# -- discover ---------------------------------------------------------------------------------------


def discover(host: Host) -> CpuInventory:
    """The node's CPUs; every unreadable value is unknown and the reasons say why."""
    from joulectl.catalog import load

    warnings: list[str] = []
    cpuinfo = host.read_attr("/proc/cpuinfo")
    if cpuinfo.value is None:
        warnings.append(f"/proc/cpuinfo unreadable ({cpuinfo.reason})")
    blocks = parse_cpuinfo(cpuinfo.value or "")
    first = blocks[0] if blocks else {}
    vendor = first.get("vendor_id") or None
    raw_model = first.get("model name") or None
    virtual = "hypervisor" in first.get("flags", "").split()
    sockets_set = {b["physical id"] for b in blocks if "physical id" in b}
    sockets = len(sockets_set) or (1 if blocks else 0)
    core_ids = {(b.get("physical id"), b["core id"]) for b in blocks if "core id" in b}
    if core_ids:
        cores = len(core_ids)
    elif first.get("cpu cores", "").isdigit():
        cores = int(first["cpu cores"]) * sockets
    else:
        cores = len(blocks)
    threads = len(blocks)

    entry = load().cpu(raw_model)
    catalog_key = entry.key if entry else None
    exactness = "exact" if entry else ("proxy" if raw_model else "generic")

    zones = read_zones(host)
    policies = read_policies(host)
    packages = [z for z in zones if z.kind == "package"]

    lts = [z.long_term for z in packages if z.long_term is not None]
    mins = [c.min_w for c in lts if c and c.min_w is not None]
    maxs = [c.max_w for c in lts if c and c.max_w is not None]
    cap_range = PowerRange(min(mins) if mins else None, max(maxs) if maxs else None, max(maxs) if maxs else None)
    for z in packages:
        if z.locked:
            warnings.append(f"{z.name} ({z.zone_id}): PL1 {LOCKED_MESSAGE}")
    control = _cpu_control(zones, packages, policies, virtual)
    readable = [z for z in zones if z.energy_readable]
    if readable:
        telemetry = Control(True)
    elif zones:
        reason = next((z.energy_reason for z in zones if z.energy_reason), "unreadable")
        telemetry = Control(False, f"energy_uj is not readable ({reason})")
    else:
        telemetry = Control(False, "no powercap (RAPL) zones to read energy from")
    if any(p.available_governors for p in policies):
        governor_control = Control(True)
    elif policies:
        governor_control = Control(False, "the cpufreq policies list no governors")
    else:
        governor_control = Control(False, f"no cpufreq policies under {CPUFREQ}")

    mins_khz = [p.min_khz for p in policies if p.min_khz]
    maxs_khz = [p.max_khz for p in policies if p.max_khz]
    base_khz = [p.base_khz for p in policies if p.base_khz]
    nominal = khz_to_mhz(max(base_khz)) if base_khz else None
    amd_nominal = host.read_int(f"{CPUFREQ}/policy0/amd_pstate_nominal_freq") if policies else None
    if nominal is None and amd_nominal:
        nominal = khz_to_mhz(amd_nominal)
    if nominal is None and entry is not None:
        nominal = entry.base_ghz * 1000
    lnl = host.read_int(f"{CPUFREQ}/policy0/amd_pstate_lowest_nonlinear_freq") if policies else None

    return CpuInventory(
        vendor=vendor,
        raw_model=raw_model,
        model=catalog_key or raw_model,
        catalog_key=catalog_key,
        exactness=exactness,
        sockets=sockets,
        cores=cores,
        threads=threads,
        driver=_unique([p.driver for p in policies])[0] if any(p.driver for p in policies) else None,
        available_governors=_unique([g for p in policies for g in p.available_governors]),
        governors=_unique([p.governor for p in policies]),
        epp=_unique([p.epp for p in policies]),
        available_epp=_unique([e for p in policies for e in p.available_epp]),
        turbo=_turbo(host, policies),
        min_mhz=khz_to_mhz(min(mins_khz)) if mins_khz else None,
        nominal_mhz=nominal,
        max_mhz=khz_to_mhz(max(maxs_khz)) if maxs_khz else None,
        zones=zones,
        policies=policies,
        cap_range_per_socket=cap_range,
        control=control,
        telemetry=telemetry,
        governor_control=governor_control,
        virtual=virtual,
        warnings=warnings,
        lowest_nonlinear_mhz=khz_to_mhz(lnl) if lnl else None,
    )


def _cpu_control(
    zones: list[PowercapZone], packages: list[PowercapZone], policies: list[CpufreqPolicy], virtual: bool
) -> Control:
    """Whether the CPU package power can be capped, and when not, why."""
    vm = " (a virtual machine: the hypervisor exposes no RAPL)" if virtual else ""
    if not zones and not policies:
        return Control(
            False,
            f"nothing can be capped: no powercap (RAPL) zones under {POWERCAP} and no cpufreq policies "
            f"under {CPUFREQ}{vm}",
        )
    if not zones:
        return Control(False, f"no powercap (RAPL) zones under {POWERCAP}{vm}")
    if not packages:
        return Control(False, "no package powercap zone")
    with_pl1 = [z for z in packages if z.long_term is not None]
    if not with_pl1:
        return Control(False, "the package zones are energy-only (no long_term power limit constraint)")
    if all(z.locked for z in with_pl1):
        return Control(False, f"the long_term (PL1) {LOCKED_MESSAGE} on every package")
    return Control(True)


# -- set_caps ---------------------------------------------------------------------------------------


def set_caps(host: Host, requests: list[tuple[PowercapZone, float]]) -> list[WriteOutcome]:
    """Write each cap as µW to the zone's ``long_term`` ``constraint_<i>_power_limit_uw``, read back.

    ``WriteOutcome.device`` is the zone id (``intel-rapl:0``). ENODATA is a firmware lock.
    """
    out: list[WriteOutcome] = []
    for zone, watts in requests:
        lt = zone.long_term
        if lt is None:
            out.append(WriteOutcome(zone.zone_id, Status.BLOCKED, "no long_term constraint"))
            continue
        out.append(
            write_uw_verified(
                host, zone.zone_id, lt.limit_path, watts, min_w=lt.min_w, max_w=lt.max_w,
                enodata_message=LOCKED_MESSAGE,
            )
        )
    return out
