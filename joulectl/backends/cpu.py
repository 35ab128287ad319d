"""CPUs: ``/proc/cpuinfo``, powercap (RAPL) zones and cpufreq policies, all read through Host.

Facts this module relies on, with their sources: docs/hardware.md §3 (powercap, intel-rapl, AMD
energy-only zones) and §4 (cpufreq).

- Identity and topology from ``/proc/cpuinfo`` (``vendor_id``, ``model name``, ``physical id``,
  ``core id``, ``siblings``, ``cpu cores``, ``flags`` with ``hypervisor`` on a virtual machine).
- Powercap zones from ``/sys/class/powercap/<type>:<id>[:<sub>]`` (ids are hex): the zone is what
  its ``name`` says (``package-N``, ``dram``, ``psys``, ``core``, ``uncore``), never what its id
  suggests; psys is a top-level zone. Constraints ``constraint_<i>_*`` are dense and named
  (``long_term`` = PL1). ``energy_uj`` is 0400: readable only by root ("energy needs root"). A
  PL1 locked by firmware stays visible; its limit reads (or writes) ENODATA and ``enabled`` reads 0.
  What real trees show: no ``constraint_*_min_power_uw`` anywhere (the minimum is unknown, never
  invented); ``max_power_uw`` 0 on PL2/PL4 (unknown, not a 0 W maximum) or an empty file; a PL1
  of 4090 W ("unlimited") above a 95 W maximum; core and uncore zones with ``enabled`` 0 and limit
  0 (off, not a 0 W limit); PL4 (``peak_power``) without a time window.
  Laptops show a package twice, through ``intel-rapl`` (MSR) and ``intel-rapl-mmio``: the package
  obeys the lower PL1 of the two (UX3402ZA: MSR 200 W, MMIO 15 W). Both are package zones, ``cap
  --cpu`` writes and reads back both, and ``binds`` marks the lower one.
- cpufreq from ``/sys/devices/system/cpu/cpufreq/policy*/`` (kHz), or on kernels without policies
  the per-CPU ``cpuN/cpufreq/`` directories; turbo from ``intel_pstate/no_turbo`` or
  ``cpufreq/boost``. acpi-cpufreq with AMD's CPB reports the highest non-boost clock as
  ``cpuinfo_max_freq``. The nominal clock is the kernel's: ``base_frequency`` (which can be far
  below the marketed clock), ``amd_pstate_nominal_freq``, ``acpi_cppc/nominal_freq``, or derived
  from amd-pstate's perf levels; else unknown.

``set_caps`` writes µW to the ``long_term`` constraint and reads it back.
"""

from __future__ import annotations

import errno
import re
from dataclasses import replace
from typing import Any, AnyStr

from joulectl.backends.base import WriteOutcome
from joulectl.backends.pci import fmt_w, write_uw_verified
from joulectl.errors import ConfinementError
from joulectl.host import Host, HostIOError
from joulectl.models import Control, CpufreqPolicy, CpuInventory, PowercapConstraint, PowercapZone, PowerRange, Status
from joulectl.record import maker
from joulectl.units import MAX_POWER_UW, decimals_end, khz_to_mhz, parse_sysfs_int, uw_to_w

POWERCAP = "/sys/class/powercap"
CPUFREQ = "/sys/devices/system/cpu/cpufreq"
CPU_DIR = "/sys/devices/system/cpu"

#: A powercap zone id, ``<type>:<hex>[:<hex>...]`` (``intel-rapl:0:1``): :func:`_zone_id` reads
#: it as this pattern does, without compiling it (the three patterns of these names were 0.3 ms
#: of every discover and cap; a test holds the functions to them).
_ZONE_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX_DIGITS = frozenset("0123456789abcdef")


def _zone_id(name: str) -> tuple[str, str] | None:
    """(type, ids) of a zone id, as ``^(?P<type>[a-z0-9_-]+):(?P<ids>[0-9a-f]+(?::[0-9a-f]+)*)$``
    matches it (``$`` allows one newline at the end), else None."""
    kind, sep, ids = (name[:-1] if name.endswith("\n") else name).partition(":")
    if not sep or not kind or not _ZONE_ID_CHARS.issuperset(kind):
        return None
    if any(not part or not _HEX_DIGITS.issuperset(part) for part in ids.split(":")):
        return None
    return kind, ids


def _package_number(name: str) -> int | None:
    """N of a zone name ``package-N...``, as ``^package-(\\d+)`` reads it (Unicode digits too), else None."""
    if not name.startswith("package-"):
        return None
    end = decimals_end(name, 8)
    return int(name[8:end]) if end > 8 else None


def _is_policy(name: str) -> bool:
    """Whether a cpufreq entry is ``policyN``, as ``^policy(\\d+)$`` matches it."""
    number = name[6:-1] if name.endswith("\n") else name[6:]
    return name.startswith("policy") and number.isdecimal()


#: The attributes read from every policy (discover, cap), and with the details (the governor).
_PER_POLICY = ("scaling_governor", "energy_performance_preference", "cpuinfo_min_freq", "cpuinfo_max_freq",
               "base_frequency")
_PER_POLICY_DETAILS = (*_PER_POLICY, "affected_cpus", "scaling_cur_freq")

LOCKED_MESSAGE = "limit locked by firmware"

__all__ = ["LOCKED_MESSAGE", "cpuinfo_summary", "discover", "parse_cpuinfo", "read_zones", "set_caps"]


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


#: What splits or strips a line of /proc/cpuinfo besides ``\n``, space and tab (ASCII): a text
#: with none of them, no line starting with a blank and ASCII only takes :func:`cpuinfo_summary`'s
#: fast path.
_ODD_SPACE = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")
_ODD_SPACE_BYTES = tuple(c.encode() for c in _ODD_SPACE)


#: In a text of the kernel's layout: a line of one of the keys discover counts (key, value, ""), the
#: end of a block (an empty line next: ("", "", "")), or a line that starts with a blank, which the
#: kernel never prints (("", "", " ")): the text is then read line by line. (Compiled at its first
#: use, for text or for bytes.)
_TOPOLOGY_LINE = r"\n(?:(processor|physical id|core id)[ \t]*:([^\n]*)|(?=\n)|([ \t]))"


def _topology_lines(text: AnyStr) -> list[tuple[AnyStr, AnyStr, AnyStr]]:
    """``re.findall(_TOPOLOGY_LINE, "\\n" + text + "\\n\\n")`` without those two copies of the
    text (650 KB on a 384-thread host, each copy ~160 page faults, about 1 ms here): the first line
    matched on its own, then every line after a newline, then the block ends the two newlines add
    (a test holds the two equal). For bytes, the pattern's bytes."""
    if isinstance(text, bytes):
        pattern, nl, none = re.compile(_TOPOLOGY_LINE.encode()), b"\n", b""
    else:
        pattern, nl, none = re.compile(_TOPOLOGY_LINE), "\n", ""
    cut = text.find(nl)
    first = pattern.match(nl + (text if cut < 0 else text[:cut + 1]))
    lines: list[tuple[AnyStr, AnyStr, AnyStr]] = [] if first is None else [
        (first.group(1) or none, first.group(2) or none, first.group(3) or none)]
    lines += pattern.findall(text)
    lines += [(none, none, none)] * (2 if text.endswith(nl) or not text else 1)
    return lines


def cpuinfo_summary(text: str | bytes) -> tuple[dict[str, str], int, set[str], set[tuple[str | None, str]]]:
    """What discover takes from ``/proc/cpuinfo``: the first processor block (every key), the
    number of processor blocks, the ``physical id`` values and the (``physical id``, ``core id``)
    pairs; the same as from :func:`parse_cpuinfo`. A 384-thread host prints 650 KB: in the
    kernel's own layout (ASCII, blocks split by an empty line, every key at the start of its line)
    one regular expression picks the three keys and the block ends out of it; any other text is
    read line by line. ``text`` may be the file's bytes (as read, not decoded: the fast path reads
    them as they are; anything else is decoded as :meth:`Host.read` decodes)."""
    if isinstance(text, bytes):
        if not text.isascii() or any(c in text for c in _ODD_SPACE_BYTES):
            return cpuinfo_summary(text.decode("utf-8", errors="replace"))
        return _summary(text, _topology_lines(text), b"processor", b"physical id")
    lines = _topology_lines(text) if text.isascii() and not any(c in text for c in _ODD_SPACE) else [("", "", "?")]
    return _summary(text, lines, "processor", "physical id")


def _summary(text: AnyStr, lines: list[tuple[AnyStr, AnyStr, AnyStr]], processor_key: AnyStr,
             socket_key: AnyStr) -> tuple[dict[str, str], int, set[str], set[tuple[str | None, str]]]:
    """:func:`cpuinfo_summary` of the lines :func:`_topology_lines` found in ``text`` (str or
    ASCII bytes: the ids it collects are decoded at the end, the first block before it is parsed)."""
    if any(blank for _, _, blank in lines):
        blocks = parse_cpuinfo(text if isinstance(text, str) else text.decode())
        return (blocks[0] if blocks else {}, len(blocks), {b["physical id"] for b in blocks if "physical id" in b},
                {(b.get("physical id"), b["core id"]) for b in blocks if "core id" in b})
    threads = 0
    sockets: set[AnyStr] = set()
    cores: set[tuple[AnyStr | None, AnyStr]] = set()
    processor, socket, core = False, None, None
    for key, value, _ in lines:
        if not key:  # a block ends: count it if it was a processor's
            if processor:
                threads += 1
                if socket is not None:
                    sockets.add(socket)
                if core is not None:
                    cores.add((socket, core))
            processor, socket, core = False, None, None
        elif key == processor_key:
            processor = True
        elif key == socket_key:
            socket = value.strip()
        else:
            core = value.strip()
    first: dict[str, str] = {}
    at = 0
    blank: Any = "\n\n" if isinstance(text, str) else b"\n\n"
    while threads and not first:  # the first processor block, read in full
        end = text.find(blank, at)
        block = text[at:] if end < 0 else text[at:end]
        found = parse_cpuinfo(block if isinstance(block, str) else block.decode())
        first = found[0] if found else {}
        if end < 0:
            break
        at = end + 2
    if isinstance(text, str):
        return first, threads, sockets, cores  # type: ignore[return-value]
    return (first, threads, {s.decode() for s in sockets},  # type: ignore[union-attr]
            {(None if s is None else s.decode(), c.decode()) for s, c in cores})  # type: ignore[union-attr]


# -- powercap ----------------------------------------------------------------------------------------


def _sort_key(zone_id: str) -> tuple[str, tuple[int, ...]]:
    parsed = _zone_id(zone_id)
    if parsed is None:
        return zone_id, ()
    return parsed[0], tuple(int(x, 16) for x in parsed[1].split(":"))


def _kind(name: str) -> str:
    for kind in ("package", "dram", "psys", "uncore", "core"):
        if name == kind or name.startswith(kind + "-"):
            return kind
    return "other"


def _uw_w(host: Host, path: str) -> float | None:
    value, _ = host.read_uw(path)
    return uw_to_w(value) if value is not None else None


def _max_w(host: Host, path: str) -> float | None:
    """A constraint's ``max_power_uw``: 0 (PL2/PL4 on real trees) and an empty file are unknown."""
    value = host.read_int(path)
    return uw_to_w(value) if value else None


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
                max_w=_max_w(host, prefix + "max_power_uw"),
                time_window_us=host.read_int(prefix + "time_window_us"),
                limit_path=prefix + "power_limit_uw",
                limit_reason=reason,
            )
        )
    return out


def read_zones(host: Host) -> list[PowercapZone]:
    """Every powercap zone (top level and subzones), in id order."""
    entries = [e for e in host.listdir(POWERCAP) if _zone_id(e)]
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
        socket = _package_number(name)
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
            energy_reason = f"{energy.reason}: energy needs root"
        else:
            energy_reason = energy.reason or "missing"
        enabled_int = host.read_int(f"{path}/enabled")
        constraints = _constraints(host, path)
        if enabled_int == 0 and kind in ("core", "uncore"):
            # core/uncore read enabled 0 with a limit of 0: no limit, not a 0 W limit
            constraints = [replace(c, limit_w=None, limit_reason="off (enabled 0)") if c.limit_w == 0 else c
                           for c in constraints]
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
            constraints=constraints,
            energy_reason=energy_reason,
            interface=_INTERFACES.get(entry.split(":", 1)[0], entry.split(":", 1)[0]),
        )
        by_id[entry] = zone
        zones.append(zone)
    _mark_binding(zones)
    return zones


_INTERFACES = {"intel-rapl": "msr", "intel-rapl-mmio": "mmio"}


def _mark_binding(zones: list[PowercapZone]) -> None:
    """For a package shown by more than one interface (MSR and MMIO), mark the zone whose PL1 is
    the lower: the package obeys it. A zone without a readable PL1 never binds."""
    by_package: dict[str, list[PowercapZone]] = {}
    for z in zones:
        if z.kind == "package":
            by_package.setdefault(z.name, []).append(z)
    for group in by_package.values():
        if len(group) < 2:
            continue
        limits = [z.long_term.limit_w for z in group if z.long_term is not None and z.long_term.limit_w is not None]
        lowest = min(limits) if limits else None
        for z in group:  # equal limits bind alike
            z.binds = lowest is not None and z.long_term is not None and z.long_term.limit_w == lowest


def binding_notes(zones: list[PowercapZone]) -> list[str]:
    """One line per package shown by two interfaces: which PL1 binds, and the other's."""
    notes = []
    for z in zones:
        if not z.binds or z.long_term is None or z.long_term.limit_w is None:
            continue
        others = [o for o in zones if o is not z and o.kind == "package" and o.name == z.name and not o.binds]
        if not others:
            continue  # all at one limit: nothing to say
        other_text = ", ".join(
            f"{o.zone_id} ({o.interface}) PL1 {fmt_w(o.long_term.limit_w if o.long_term else None)}" for o in others
        )
        notes.append(
            f"{z.name}: PL1 {fmt_w(z.long_term.limit_w)} of {z.zone_id} ({z.interface}) binds, the lower beside "
            f"{other_text}; cap --cpu writes both"
        )
    return notes


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


def read_policies(host: Host, *, details: bool = True) -> list[CpufreqPolicy]:
    """Every ``policy<N>`` directory, in N order.

    Without ``details`` (discover and cap, which report the node's aggregates), a policy's
    ``scaling_cur_freq`` is not read (``cur_khz`` None) and its CPUs only for the first policy
    (the others' ``cpus`` empty): two reads fewer per policy, 768 on a 384-thread host.

    ``scaling_driver`` and ``scaling_available_governors`` are system-wide (one cpufreq driver,
    one governor registry), so they are read from the first policy only; the available EPP list
    depends on the policy's governor (only ``performance`` under the performance governor), so
    it is read once per governor. A node has hundreds of policies; this saves a third of the reads.
    """
    names = [n for n in host.listdir(CPUFREQ) if _is_policy(n)]
    names.sort(key=lambda n: int(n[6:]))
    dirs = [f"{CPUFREQ}/{n}" for n in names]
    layout = "policy"
    if not names:
        names, dirs = _legacy_dirs(host)
        layout = "legacy"
    out = []
    driver: str | None = None
    governors: list[str] = []
    epps_by_governor: dict[str | None, list[str]] = {}
    # The driver defines which attributes a policy has: files missing from the first policy
    # (base_frequency on amd-pstate, EPP without HWP) are not looked for in the others.
    leaves = set(host.listdir(dirs[0])) if dirs else set()
    # What every policy is read for, in one pass over its directory (Host.read_values).
    wanted = [leaf for leaf in (_PER_POLICY_DETAILS if details else _PER_POLICY) if not leaves or leaf in leaves]
    if layout == "policy":  # every policy<N> read relative to cpufreq/, opened once (Host.read_dirs)
        by_name = host.read_dirs(CPUFREQ, names, wanted)
        values = [by_name[n] for n in names]
    else:
        values = [host.read_values(p, wanted) for p in dirs]
    ints: dict[str | None, int | None] = {None: None, "": None}  # policies repeat their clocks: each text parsed once

    def num(text: str | None) -> int | None:
        try:
            return ints[text]
        except KeyError:
            pass
        try:
            value: int | None = parse_sysfs_int(text)  # type: ignore[arg-type]  # (None and "" are in ints)
        except ValueError:
            value = None
        ints[text] = value
        return value

    def attr(leaf: str, base: str, got: dict[str, str | None]) -> str | None:
        """A leaf not read with the others (the first policy's, one per governor), or read."""
        if leaves and leaf not in leaves:
            return None
        if leaf in got:
            return got[leaf] or None
        return host.read_attr(f"{base}/{leaf}").value or None

    make = maker(CpufreqPolicy)
    for i, (name, p, got) in enumerate(zip(names, dirs, values, strict=True)):
        # The leaves read for every policy are in ``got`` (or not in the first policy: None).
        get = got.get
        if i == 0:
            driver = attr("scaling_driver", p, got)
            governors = (attr("scaling_available_governors", p, got) or "").split()
        governor = get("scaling_governor") or None
        epps = epps_by_governor.get(governor)
        if epps is None:
            epps = epps_by_governor[governor] = \
                (attr("energy_performance_available_preferences", p, got) or "").split()
        out.append(make({  # every field, in field order (record.maker: hundreds of policies)
            "name": name,
            "path": p,
            "cpus": _cpus(attr("affected_cpus", p, got) or attr("related_cpus", p, got))
            if details or i == 0 else [],
            "driver": driver,
            "governor": governor,
            "available_governors": governors[:],
            "epp": get("energy_performance_preference") or None,
            "available_epp": epps[:],
            "min_khz": num(get("cpuinfo_min_freq")),
            "max_khz": num(get("cpuinfo_max_freq")),
            "base_khz": num(get("base_frequency")),
            "cur_khz": num(get("scaling_cur_freq")) if details else None,
            "layout": layout,
        }))
    return out


#: Compiled at its first use (``re``'s cache): only kernels without cpufreq policies need it.
_CPU = r"^cpu(\d+)$"


def _legacy_dirs(host: Host) -> tuple[list[str], list[str]]:
    """Kernels without ``cpufreq/policyN`` (before 4.x): one ``cpuN/cpufreq`` per CPU, in N order.
    Where such a directory is a symlink to another CPU's (CPUs sharing a policy), it is listed once,
    under the CPU that owns it."""
    cpus = sorted((int(m.group(1)), e) for e in host.listdir(CPU_DIR) if (m := re.match(_CPU, e)))
    names: list[str] = []
    dirs: list[str] = []
    seen: set[str] = set()
    for _, entry in cpus:
        d = f"{CPU_DIR}/{entry}/cpufreq"
        if not host.is_dir(d):
            continue  # offline, or no cpufreq driver for it
        try:
            real = host.realpath(d)
        except ConfinementError:
            continue
        if real in seen:
            continue
        seen.add(real)
        owner = real.rsplit("/", 2)[-2] if real.endswith("/cpufreq") else entry
        names.append(owner if re.match(_CPU, owner) else entry)
        dirs.append(d if real == d else real)
    return names, dirs


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


def discover(host: Host, *, details: bool = True) -> CpuInventory:
    """The node's CPUs; every unreadable value is unknown and the reasons say why. ``details``:
    see :func:`read_policies` (the governor commands need every policy's CPUs and clock)."""
    from joulectl.catalog import load

    warnings: list[str] = []
    try:  # its bytes as read (not decoded, not stripped): the same summary without a copy of 650 KB
        cpuinfo_text: bytes = host.read_bytes("/proc/cpuinfo")
    except HostIOError:
        cpuinfo_text = b""
        warnings.append(f"/proc/cpuinfo unreadable ({host.read_attr('/proc/cpuinfo').reason})")
    first, threads, sockets_set, core_ids = cpuinfo_summary(cpuinfo_text)
    vendor = first.get("vendor_id") or None
    raw_model = first.get("model name") or None
    virtual = "hypervisor" in first.get("flags", "").split()
    sockets = len(sockets_set) or (1 if threads else 0)
    if core_ids:
        cores = len(core_ids)
    elif first.get("cpu cores", "").isdigit():
        cores = int(first["cpu cores"]) * sockets
    else:
        cores = threads

    entry = load().cpu(raw_model)
    catalog_key = entry.key if entry else None
    exactness = "exact" if entry else ("proxy" if raw_model else "generic")

    zones = read_zones(host)
    policies = read_policies(host, details=details)
    packages = [z for z in zones if z.kind == "package"]

    lts = [z.long_term for z in packages if z.long_term is not None]
    mins = [c.min_w for c in lts if c and c.min_w is not None]
    maxs = [c.max_w for c in lts if c and c.max_w is not None]
    cap_range = PowerRange(min(mins) if mins else None, max(maxs) if maxs else None, max(maxs) if maxs else None)
    for z in packages:
        if z.locked:
            warnings.append(f"{z.name} ({z.zone_id}): PL1 {LOCKED_MESSAGE}")
        lt = z.long_term
        if lt is not None and lt.limit_w is not None and lt.max_w is not None and lt.limit_w > lt.max_w:
            warnings.append(f"{z.name} ({z.zone_id}): PL1 {lt.limit_w:g} W is above its maximum {lt.max_w:g} W "
                            "(an 'unlimited' setting, not a limit the package reaches)")
    warnings.extend(binding_notes(zones))
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
    driver = next((p.driver for p in policies if p.driver), None)
    nominal, nominal_note = _nominal_mhz(host, policies, driver)
    if nominal_note:
        warnings.append(nominal_note)
    max_mhz = khz_to_mhz(max(maxs_khz)) if maxs_khz else None
    max_nonboost = None
    if driver == "acpi-cpufreq" and _has_cpb(host, first, vendor, policies):
        # CPB: cpuinfo_max_freq is the highest non-boost P-state; the boost clock is not shown
        max_nonboost, max_mhz = max_mhz, None
    lnl = host.read_int(f"{policies[0].path}/amd_pstate_lowest_nonlinear_freq") if policies else None

    return CpuInventory(
        vendor=vendor,
        raw_model=raw_model,
        model=catalog_key or raw_model,
        catalog_key=catalog_key,
        exactness=exactness,
        sockets=sockets,
        cores=cores,
        threads=threads,
        driver=driver,
        available_governors=_unique([g for p in policies for g in p.available_governors]),
        governors=_unique([p.governor for p in policies]),
        epp=_unique([p.epp for p in policies]),
        available_epp=_unique([e for p in policies for e in p.available_epp]),
        turbo=_turbo(host, policies),
        min_mhz=khz_to_mhz(min(mins_khz)) if mins_khz else None,
        nominal_mhz=nominal,
        max_mhz=max_mhz,
        zones=zones,
        policies=policies,
        cap_range_per_socket=cap_range,
        control=control,
        telemetry=telemetry,
        governor_control=governor_control,
        virtual=virtual,
        warnings=warnings,
        lowest_nonlinear_mhz=khz_to_mhz(lnl) if lnl else None,
        max_nonboost_mhz=max_nonboost,
    )


def _has_cpb(host: Host, cpuinfo: dict[str, str], vendor: str | None, policies: list[CpufreqPolicy]) -> bool:
    """AMD Core Performance Boost under acpi-cpufreq: the ``cpb`` flag, or an AMD CPU with a
    ``cpufreq/boost`` switch."""
    if "cpb" in cpuinfo.get("flags", "").split():
        return True
    return vendor in ("AuthenticAMD", "HygonGenuine") and (
        host.exists(f"{CPUFREQ}/boost") or any(host.exists(f"{p.path}/boost") for p in policies)
    )


def _nominal_mhz(host: Host, policies: list[CpufreqPolicy], driver: str | None) -> tuple[float | None, str | None]:
    """The nominal (base) clock as the kernel states it, and a note when it is derived or unknown.

    ``base_frequency`` (intel_pstate; it can be far below the marketed clock: 1.2 GHz on a 2.8 GHz
    i7-1165G7), else ``amd_pstate_nominal_freq``, else ``acpi_cppc/nominal_freq`` (MHz), else on
    amd-pstate ``amd_pstate_max_freq × nominal_perf / amd_pstate_highest_perf`` (the driver's own
    relation), else unknown: no catalog or marketing value stands in.
    """
    if not policies:
        return None, None
    base = [p.base_khz for p in policies if p.base_khz]
    if base:
        return khz_to_mhz(max(base)), None
    p0 = policies[0].path
    amd_nominal = host.read_int(f"{p0}/amd_pstate_nominal_freq")
    if amd_nominal:
        return khz_to_mhz(amd_nominal), None
    cpu = policies[0].cpus[0] if policies[0].cpus else 0
    cppc = f"{CPU_DIR}/cpu{cpu}/acpi_cppc"
    cppc_mhz = host.read_int(f"{cppc}/nominal_freq")
    if cppc_mhz:
        return float(cppc_mhz), None
    if not (driver or "").startswith("amd-pstate"):
        return None, None
    highest = host.read_int(f"{p0}/amd_pstate_highest_perf") or host.read_int(f"{cppc}/highest_perf")
    nominal_perf = host.read_int(f"{cppc}/nominal_perf")
    max_khz = host.read_int(f"{p0}/amd_pstate_max_freq")
    if highest and nominal_perf and max_khz and nominal_perf <= highest:
        mhz = round(khz_to_mhz(max_khz) * nominal_perf / highest)
        return float(mhz), (f"nominal clock {mhz} MHz derived from amd_pstate_max_freq x acpi_cppc/nominal_perf / "
                            "amd_pstate_highest_perf (no amd_pstate_nominal_freq)")
    return None, "nominal clock unknown: no amd_pstate_nominal_freq and no amd-pstate perf levels to derive it from"


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
