"""Render (or resume) the node trees of a cluster spec under ``DIR/<node>/``.

A node tree is a host root joulectl runs against unmodified (``--root DIR/<node>``), and real
tools too when its ``sys/`` is bound over ``/sys``: ``sys/`` (powercap, cpufreq, cpu topology and
cpuidle, NUMA nodes, PCI functions with their config header, ids, irq and resources, hwmon, drm),
``proc/`` (cpuinfo, hostname, osrelease), ``etc/hostname``, ``dev/`` markers, ``bin/`` (the fake
vendor tools) and ``state/`` (node.json, manifest.json, nvml.json). File modes are those sysfs
shows (0444 read-only, 0644 writable, 0400 ``energy_uj``). Every attribute is its own file, never
a hard link: a write to one attribute changes no other (:mod:`joulectl.sim.sysfs_abi` holds the
formats real tools read).

Speed: the layout of a profile is computed once (:func:`template`) as flat lists of directories,
files and symlinks; a node is then a loop of plain ``os`` calls. Symlinks, which cannot be
written, are hard links to one shared copy per profile (a directory entry instead of an inode).
Trees are rendered into ``DIR/.<node>.rendering`` and renamed into place, so a half-rendered tree
is never taken for a node.

Resume: an existing ``DIR/<node>`` is never rendered again. Its ``state/node.json`` must name
the same node, profile, profile hash and layout version, and every entry of the layout must be
of the right kind; missing entries are created, and nothing present is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.sim import sysfs_abi as abi
from joulectl.sim.clusterspec import SpecNode
from joulectl.sim.nvml_board import nvml_document
from joulectl.sim.profiles import DEFAULT_LIMIT_BITS, PSYS_LIMIT_BITS, Profile
from joulectl.sim.tools.state import load_manifest, read_nvml_state, write_nvml_state

__all__ = [
    "LAYOUT_VERSION",
    "RenderError",
    "RenderStats",
    "load_manifest",
    "read_nvml_state",
    "render_nodes",
    "template",
    "write_nvml_state",
]

LAYOUT_VERSION = 2
R, W, E = 0o444, 0o644, 0o400  # read-only attribute, writable attribute, energy_uj (PLATYPUS)
AMD_PERF_LEVELS = (
    "auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
    "profile_peak", "perf_determinism",
)
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class RenderError(InputError):
    """A tree that cannot be resumed (another node or profile, or an entry of the wrong kind)."""


@dataclass
class Template:
    """The layout of one resolved profile, relative to a node root."""

    dirs: list[str] = field(default_factory=list)
    files: list[tuple[str, bytes, int]] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (path, relative target)
    writable: list[dict[str, Any]] = field(default_factory=list)
    counters: list[dict[str, Any]] = field(default_factory=list)
    nvml: dict[str, Any] | None = None
    #: directory -> {entry name: kind} ("d", "f", "l"), for resume checks
    expected: dict[str, dict[str, str]] = field(default_factory=dict)
    _lookup: tuple[dict[str, tuple[bytes, int]], dict[str, str]] | None = None

    def d(self, path: str) -> None:
        self.dirs.append(path)

    def f(self, path: str, content: str | bytes, mode: int = R) -> None:
        data = content if isinstance(content, bytes) else content.encode()
        self.files.append((path, data, mode))

    def a(self, path: str, value: Any, mode: int = R) -> None:
        """A sysfs attribute: the value and a newline."""
        self.f(path, f"{value}\n", mode)

    def link(self, path: str, target: str) -> None:
        self.symlinks.append((path, target))

    def w(self, path: str, kind: str, component: str, **rule: Any) -> None:
        self.writable.append({"path": path, "kind": kind, "component": component,
                              "rule": {k: v for k, v in rule.items() if v is not None}})

    def c(self, path: str, kind: str, component: str, **extra: Any) -> None:
        self.counters.append({"path": path, "kind": kind, "component": component, **extra})

    def lookup(self) -> tuple[dict[str, tuple[bytes, int]], dict[str, str]]:
        """(files, symlinks) by path, built once."""
        if self._lookup is None:
            self._lookup = ({rel: (data, mode) for rel, data, mode in self.files}, dict(self.symlinks))
        return self._lookup

    def finish(self) -> None:
        exp: dict[str, dict[str, str]] = {"": {}}
        for d in self.dirs:
            exp.setdefault(d, {})
            parent, _, name = d.rpartition("/")
            exp.setdefault(parent, {})[name] = "d"
        for path, kind in [(p, "f") for p, _, _ in self.files] + [(p, "l") for p, _ in self.symlinks]:
            parent, _, name = path.rpartition("/")
            exp.setdefault(parent, {})[name] = kind
        self.expected = exp


def _uw(w: float) -> int:
    from joulectl.units import w_to_uw

    return w_to_uw(w)


def _range_text(n: int) -> str:
    return f"0-{n - 1}" if n > 1 else "0"


# -- CPU ---------------------------------------------------------------------------------------


def _cpu_order(cpu: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(socket, core, thread) of each logical CPU in Linux numbering: thread 0 of every core first."""
    sockets, cores, threads = int(cpu["sockets"]), int(cpu["coresPerSocket"]), int(cpu.get("threadsPerCore", 1))
    return [(s, c, t) for t in range(threads) for s in range(sockets) for c in range(cores)]


def cpu_flags(cpu: dict[str, Any]) -> list[str]:
    """The cpuinfo flags: the profile's ``flags`` (those a real CPU of that model shows), then the
    ones its facts imply (emulate-mode seed) where the list lacks them: ``hwp`` (and ``hwp_epp``
    under intel_pstate) where cpufreq.hwp is true, ``hypervisor`` on a virtual machine."""
    out: list[str] = [str(f) for f in cpu.get("flags") or []]
    have = set(out)
    freq = cpu.get("cpufreq") or {}
    implied: list[str] = []
    if freq.get("hwp"):
        implied.append("hwp")
        if freq.get("driver") in ("intel_pstate", "intel_cpufreq"):
            implied.append("hwp_epp")
    if cpu.get("virtual"):
        implied.append("hypervisor")
    out += [f for f in implied if f not in have]
    return out


def _cpuinfo(cpu: dict[str, Any]) -> str:
    order = _cpu_order(cpu)
    cores = int(cpu["coresPerSocket"])
    threads = int(cpu.get("threadsPerCore", 1))
    freq = cpu.get("cpufreq") or {}
    mhz = (freq.get("baseKHz") or freq.get("maxKHz") or 2_000_000) / 1000
    flags = cpu_flags(cpu)
    amd = cpu["vendor"] == "AuthenticAMD"
    blocks = []
    for n, (s, c, t) in enumerate(order):
        apic = (s * cores + c) * (2 if threads > 1 else 1) + t
        lines = [
            f"processor\t: {n}",
            f"vendor_id\t: {cpu['vendor']}",
            f"cpu family\t: {cpu.get('family', 6)}",
            f"model\t\t: {cpu.get('modelId', 0)}",
            f"model name\t: {cpu['model']}",
            f"stepping\t: {cpu.get('stepping', 0)}",
            f"microcode\t: {cpu.get('microcode', '0x1')}",
            f"cpu MHz\t\t: {mhz:.3f}",
            f"cache size\t: {cpu.get('cacheKB', 0)} KB",
            f"physical id\t: {s}",
            f"siblings\t: {cores * threads}",
            f"core id\t\t: {c}",
            f"cpu cores\t: {cores}",
            f"apicid\t\t: {apic}",
            f"initial apicid\t: {apic}",
            "fpu\t\t: yes",
            "fpu_exception\t: yes",
            f"cpuid level\t: {16 if amd else 32}",
            "wp\t\t: yes",
        ]
        if flags:
            lines.append(f"flags\t\t: {' '.join(flags)}")
        lines += [
            f"bogomips\t: {2 * mhz:.2f}",
            "clflush size\t: 64",
            "cache_alignment\t: 64",
            "address sizes\t: 52 bits physical, 57 bits virtual",
            "power management:" + (" ts ttp tm hwpstate cpb eff_freq_ro" if amd and not cpu.get("virtual") else ""),
        ]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


def _cpufreq(t: Template, cpu: dict[str, Any]) -> None:
    base = "sys/devices/system/cpu"
    n = len(_cpu_order(cpu))
    t.d("sys/devices/system/cpu")
    for name in ("online", "possible", "present"):
        t.a(f"{base}/{name}", _range_text(n))
    t.a(f"{base}/offline", "")
    # CONFIG_NR_CPUS - 1 of Ubuntu's and Debian's generic kernels (8192): lscpu sizes its CPU sets by it
    t.a(f"{base}/kernel_max", 8191)
    freq = cpu.get("cpufreq") or {}
    driver = freq.get("driver", "none")
    for i in range(n):
        t.d(f"{base}/cpu{i}")
    if driver in (None, "none"):
        return
    t.d(f"{base}/cpufreq")
    turbo = bool(freq.get("turbo", True))
    min_khz = int(freq.get("minKHz", 800_000))
    max_khz = int(freq.get("turboMaxKHz") or freq.get("maxKHz", 3_000_000))
    base_khz = int(freq.get("baseKHz") or max_khz)
    shown_max = max_khz if turbo else base_khz
    governors = list(freq.get("governors") or ["performance", "powersave"])
    governor = str(freq.get("governor", governors[0]))
    epp_avail = list(freq.get("eppAvailable") or [])
    epp = freq.get("epp")
    intel = driver in ("intel_pstate", "intel_cpufreq")
    amd = driver.startswith("amd-pstate")
    for i in range(n):
        p = f"{base}/cpufreq/policy{i}"
        comp = f"policy{i}"
        t.d(p)
        t.a(f"{p}/affected_cpus", i)
        t.a(f"{p}/related_cpus", i)
        t.a(f"{p}/scaling_cur_freq", base_khz)
        t.a(f"{p}/scaling_governor", governor, W)
        t.a(f"{p}/scaling_max_freq", shown_max, W)
        t.a(f"{p}/scaling_min_freq", min_khz, W)
        t.w(f"{p}/scaling_governor", "cpufreq_governor", comp, allowed=governors, default=governor)
        t.w(f"{p}/scaling_max_freq", "cpufreq_max", comp, minKhz=min_khz, maxKhz=max_khz, baseKhz=base_khz,
            default=str(shown_max))
        t.w(f"{p}/scaling_min_freq", "cpufreq_min", comp, minKhz=min_khz, maxKhz=max_khz, default=str(min_khz))
        t.c(f"{p}/scaling_cur_freq", "freq_khz", comp)
        if epp_avail:
            t.a(f"{p}/energy_performance_preference", epp or "default", W)
            t.w(f"{p}/energy_performance_preference", "epp", comp, allowed=epp_avail, default=epp,
                busyUnderPerformance=True, governorFile=f"{p}/scaling_governor")
        # every attribute its own file: a write to one policy's file changes no other
        t.a(f"{p}/cpuinfo_min_freq", min_khz)
        t.a(f"{p}/cpuinfo_max_freq", shown_max)
        t.a(f"{p}/cpuinfo_transition_latency", int(freq.get("transitionLatencyNs", 0)))
        t.a(f"{p}/scaling_driver", driver)
        t.a(f"{p}/scaling_available_governors", " ".join(governors))
        t.a(f"{p}/scaling_setspeed", "<unsupported>", W)
        if intel and freq.get("hwp"):
            t.a(f"{p}/base_frequency", base_khz)
        if epp_avail:
            t.a(f"{p}/energy_performance_available_preferences", " ".join(epp_avail) + " ")
        if amd:
            t.a(f"{p}/amd_pstate_lowest_nonlinear_freq", min_khz)
            t.a(f"{p}/amd_pstate_max_freq", max_khz)
        t.link(f"{base}/cpu{i}/cpufreq", f"../cpufreq/policy{i}")
    if intel:
        ip = f"{base}/intel_pstate"
        t.d(ip)
        t.a(f"{ip}/status", "active" if driver == "intel_pstate" else "passive", W)
        t.a(f"{ip}/no_turbo", 0 if turbo else 1, W)
        t.a(f"{ip}/max_perf_pct", 100, W)
        t.a(f"{ip}/min_perf_pct", max(1, round(100 * min_khz / max_khz)), W)
        t.a(f"{ip}/num_pstates", (max_khz - min_khz) // 100_000 + 1)
        t.a(f"{ip}/turbo_pct", round(100 * (max_khz - base_khz) / max(1, max_khz - min_khz)))
        if freq.get("hwp"):
            t.a(f"{ip}/hwp_dynamic_boost", 0, W)
        t.w(f"{ip}/no_turbo", "no_turbo", "cpu", allowed=["0", "1"], default="0" if turbo else "1",
            baseKhz=base_khz, maxKhz=max_khz)
    else:
        t.a(f"{base}/cpufreq/boost", 1 if turbo else 0, W)
        t.w(f"{base}/cpufreq/boost", "boost", "cpu", allowed=["0", "1"], default="1" if turbo else "0",
            baseKhz=base_khz, maxKhz=max_khz)
        if amd:
            t.d(f"{base}/amd_pstate")
            t.a(f"{base}/amd_pstate/status", "active" if driver == "amd-pstate-epp" else "passive", W)


def _zone_files(t: Template, path: str, comp: str, zone: dict[str, Any], name: str, pc: dict[str, Any]) -> None:
    t.d(path)
    t.a(f"{path}/name", name)
    cons = zone.get("constraints") or []
    locked = any(c.get("locked") and c.get("name") == "long_term" for c in cons)
    enabled = bool(zone.get("enabled", not zone.get("energyOnly", False))) and not locked
    t.a(f"{path}/enabled", 1 if enabled else 0, W)
    t.a(f"{path}/energy_uj", 0, E)
    max_range = int(pc.get("maxEnergyRangeUJ", 262143328850))
    t.a(f"{path}/max_energy_range_uj", max_range)
    t.c(f"{path}/energy_uj", "energy_uj", comp, maxRange=max_range)
    unit = int(pc.get("powerUnitUW", 125_000))
    for i, con in enumerate(cons):
        cname = str(con["name"])
        limit = _uw(float(con.get("limitW", 0)))
        t.a(f"{path}/constraint_{i}_name", cname)
        t.a(f"{path}/constraint_{i}_power_limit_uw", limit, W)
        t.a(f"{path}/constraint_{i}_time_window_us", int(con.get("timeWindowUs", 999424)), W)
        if "maxW" in con:
            t.a(f"{path}/constraint_{i}_max_power_uw", _uw(float(con["maxW"])))
        if "minW" in con:
            t.a(f"{path}/constraint_{i}_min_power_uw", _uw(float(con["minW"])))
        if "maxTimeWindowUs" in con:
            t.a(f"{path}/constraint_{i}_max_time_window_us", int(con["maxTimeWindowUs"]))
        bits = con.get("limitBits") or (
            PSYS_LIMIT_BITS if zone.get("name") == "psys" else DEFAULT_LIMIT_BITS.get(cname, 15)
        )
        wcomp = comp if cname == "long_term" else f"{comp}.{cname}"
        t.w(f"{path}/constraint_{i}_power_limit_uw", "rapl_limit", wcomp, constraint=cname,
            minUw=_uw(float(con.get("minW", 0))), maxUw=_uw(float(con["maxW"])) if "maxW" in con else None,
            limitBits=int(bits), unitUw=unit, locked=bool(con.get("locked", False)), default=str(limit))
        t.w(f"{path}/constraint_{i}_time_window_us", "rapl_time_window", wcomp,
            default=str(int(con.get("timeWindowUs", 999424))))


def _powercap(t: Template, cpu: dict[str, Any]) -> None:
    pc = cpu.get("powercap") or {}
    zones = pc.get("zones") or []
    if not zones:
        return
    ctype = str(pc.get("controlType", "intel-rapl"))
    root = f"sys/devices/virtual/powercap/{ctype}"
    t.d("sys/devices/virtual/powercap")
    t.d(root)
    t.a(f"{root}/enabled", 1, W)
    t.d("sys/class/powercap")
    t.link(f"sys/class/powercap/{ctype}", f"../../devices/virtual/powercap/{ctype}")
    sockets = int(cpu["sockets"])
    top: list[tuple[dict[str, Any], int | None]] = []
    for z in zones:
        if z.get("name") == "package" or z.get("perSocket"):
            top += [(z, s) for s in range(sockets)]
    top += [(z, None) for z in zones if not (z.get("name") == "package" or z.get("perSocket"))]
    for zid, (z, s) in enumerate(top):
        zname = f"{ctype}:{zid:x}"
        path = f"{root}/{zname}"
        if z["name"] == "package":
            name, comp = f"package-{s}", f"pkg{s}"
        elif z["name"] == "psys":
            name, comp = ("psys" if not s else f"psys-{s}"), "psys"
        else:
            name, comp = str(z["name"]), f"{z['name']}{s or 0}"
        _zone_files(t, path, comp, z, name, pc)
        t.link(f"sys/class/powercap/{zname}", f"../../devices/virtual/powercap/{ctype}/{zname}")
        for ci, child in enumerate(z.get("children") or []):
            cid = f"{zname}:{ci:x}"
            cpath = f"{path}/{cid}"
            _zone_files(t, cpath, f"{child['name']}{s or 0}", child, str(child["name"]), pc)
            t.link(f"sys/class/powercap/{cid}", f"../../devices/virtual/powercap/{ctype}/{zname}/{cid}")


def _cpu_hwmon(t: Template, cpu: dict[str, Any], next_hwmon: list[int]) -> None:
    if cpu.get("virtual"):
        return
    amd = cpu["vendor"] == "AuthenticAMD"
    order = _cpu_order(cpu)
    for s in range(int(cpu["sockets"])):
        if amd:
            # k10temp binds to function 3 of each socket's data fabric, all on bus 0 of domain 0
            # at devices 18h.. (arch/x86/kernel/amd_nb.c); ids from the profile.
            bdf = f"0000:00:{0x18 + s:02x}.3"
            if bdf.endswith(".3") and s == 0:
                t.d("sys/bus/pci/drivers/k10temp")
            pid = abi.ids("0x1022", cpu.get("dataFabricPciDevice", "0x14b3"), "0x060000", "0x00", "0x0000:0x0000")
            dev = abi.pci_function(t, bdf, pid, "k10temp", numa=0, nr_cpus=len(order), irq=0,
                                   local_cpus=[n for n, (ps, _c, _t) in enumerate(order) if ps == 0])
        else:
            dev = f"sys/devices/platform/coretemp.{s}"
            t.d("sys/devices/platform")
            t.d(dev)
        n = next_hwmon[0]
        next_hwmon[0] += 1
        h = f"{dev}/hwmon/hwmon{n}"
        t.d(f"{dev}/hwmon")
        t.d(h)
        t.a(f"{h}/name", "k10temp" if amd else "coretemp")
        t.a(f"{h}/temp1_input", 40000)
        t.a(f"{h}/temp1_label", "Tctl" if amd else f"Package id {s}")
        t.link(f"{h}/device", "../..")
        t.link(f"sys/class/hwmon/hwmon{n}", "../../" + h[len("sys/"):])
        t.c(f"{h}/temp1_input", "temp_mc", f"pkg{s}")


# -- GPUs --------------------------------------------------------------------------------------


def _gpu_pci(t: Template, prof: Profile, i: int, bdf: str, vendor_id: str, device_id: str, driver: str,
             subsystem: str | None = None) -> str:
    """The PCI function of GPU ``i``: ids, revision and subsystem from the profile, its NUMA
    node's CPUs, IRQ ``96 + 8 i`` (an assumption) and the vendor's BAR layout."""
    g = prof.gpus
    sockets = int(prof.cpu["sockets"])
    order = _cpu_order(prof.cpu)
    numa = _numa(i, prof.gpu_count, sockets)
    sub = subsystem or str(g.get("pciSubsystem") or f"{vendor_id}:0x0000")
    pid = abi.ids(vendor_id, device_id, str(g.get("pciClass", "0x038000")), str(g.get("pciRevision", "0x00")), sub)
    vendor = {"0x10de": "nvidia", "0x1002": "amd"}.get(vendor_id, "intel")
    bars = abi.bar_addresses(i, abi.gpu_bars(vendor, int(g.get("memoryMiB", 0) or 0)))
    return abi.pci_function(t, bdf, pid, driver, numa=numa, nr_cpus=len(order), irq=96 + 8 * i, bars=bars,
                            local_cpus=[n for n, (s, _c, _t) in enumerate(order) if s == numa])


def _drm(t: Template, dev: str, card: int) -> None:
    t.d(f"{dev}/drm")
    t.d(f"{dev}/drm/card{card}")
    t.link(f"{dev}/drm/card{card}/device", "../..")
    t.d(f"{dev}/drm/renderD{128 + card}")
    t.link(f"{dev}/drm/renderD{128 + card}/device", "../..")
    t.link(f"sys/class/drm/card{card}", "../../" + dev[len("sys/"):] + f"/drm/card{card}")
    t.link(f"sys/class/drm/renderD{128 + card}", "../../" + dev[len("sys/"):] + f"/drm/renderD{128 + card}")
    t.f(f"dev/dri/card{card}", b"", 0o666)
    t.f(f"dev/dri/renderD{128 + card}", b"", 0o666)


def _hwmon_dir(t: Template, dev: str, next_hwmon: list[int], name: str) -> str:
    n = next_hwmon[0]
    next_hwmon[0] += 1
    h = f"{dev}/hwmon/hwmon{n}"
    t.d(f"{dev}/hwmon")
    t.d(h)
    t.a(f"{h}/name", name)
    t.link(f"{h}/device", "../..")
    t.link(f"sys/class/hwmon/hwmon{n}", "../../" + h[len("sys/"):])
    return h


def _numa(i: int, count: int, sockets: int) -> int:
    return min(sockets - 1, i * sockets // max(1, count))


def _amd(t: Template, prof: Profile, next_hwmon: list[int]) -> None:
    g = prof.gpus
    amd = g.get("amd") or {}
    power = g.get("power") or {}
    t.d("sys/bus/pci/drivers/amdgpu")
    t.f("dev/kfd", b"", 0o666)
    pinned = g.get("pinnedCapW")
    levels = [int(x) for x in amd.get("sclkMhz") or []]
    cards: list[dict[str, Any]] = []
    for i, bdf in enumerate(g["busIds"]):
        comp = f"gpu{i}"
        dev = _gpu_pci(t, prof, i, bdf, "0x1002", str(g.get("pciDeviceId", "0x0000")), "amdgpu")
        secondary = bool(g.get("secondaryDies")) and i % 2 == 1
        primary = g["busIds"][i - 1] if secondary else None
        h = _hwmon_dir(t, dev, next_hwmon, "amdgpu")
        cap = _uw(float(power.get("capW", power.get("maxW", 0))))
        cap_max = _uw(float(power.get("maxW", 0)))
        cap_min = _uw(float(power.get("minW", 0)))
        default = _uw(float(power.get("defaultW", power.get("maxW", 0))))
        t.a(f"{h}/power1_cap", 0 if secondary else cap, W)
        t.a(f"{h}/power1_cap_max", cap_max)
        t.a(f"{h}/power1_cap_min", cap_min)
        t.a(f"{h}/power1_cap_default", 0 if secondary else default)
        t.a(f"{h}/power1_label", "PPT")
        idle = _uw(float((g.get("physics") or {}).get("idleW", 0)))
        t.a(f"{h}/power1_average", 0 if secondary else idle)
        temp = int(float(g.get("temperatureC", 35)) * 1000)
        if g.get("architecture") == "cdna3":  # GC 9.4.3 hides temp1 (edge): hotspot and memory only
            t.a(f"{h}/temp2_input", temp)
            t.a(f"{h}/temp2_label", "junction")
            t.a(f"{h}/temp3_input", temp)
            t.a(f"{h}/temp3_label", "mem")
            t.c(f"{h}/temp2_input", "temp_mc", comp)
            t.c(f"{h}/temp3_input", "temp_mc", comp)
        else:
            t.a(f"{h}/temp1_input", temp)
            t.a(f"{h}/temp1_label", "edge")
            t.c(f"{h}/temp1_input", "temp_mc", comp)
        t.c(f"{h}/power1_average", "power_uw", comp, secondary=secondary)
        t.w(f"{h}/power1_cap", "amdgpu_cap", comp, minUw=cap_min, maxUw=cap_max,
            pinnedUw=_uw(float(pinned)) if pinned else None, secondary=secondary,
            primaryBusId=primary, default=str(0 if secondary else cap),
            errno="EINVAL")
        level = str(amd.get("perfLevel", "auto"))
        t.a(f"{dev}/power_dpm_force_performance_level", level, W)
        t.w(f"{dev}/power_dpm_force_performance_level", "amd_perf_level", comp, allowed=list(AMD_PERF_LEVELS),
            default=level)
        if levels:
            top = len(levels) - 1
            text = "".join(f"{j}: {mhz}Mhz{' *' if j == top else ''}\n" for j, mhz in enumerate(levels))
            t.f(f"{dev}/pp_dpm_sclk", text, W)
            t.w(f"{dev}/pp_dpm_sclk", "amd_sclk", comp, allowed=[str(x) for x in levels], levels=len(levels),
                default=text)
            t.c(f"{dev}/pp_dpm_sclk", "sclk", comp)
        if amd.get("partition"):
            avail = str(amd.get("availablePartitions", amd["partition"]))
            t.a(f"{dev}/current_compute_partition", amd["partition"], W)
            t.a(f"{dev}/available_compute_partition", avail)
            t.w(f"{dev}/current_compute_partition", "amd_partition", comp,
                allowed=[p.strip() for p in avail.split(",")], default=str(amd["partition"]))
        if amd.get("memoryPartition"):
            t.a(f"{dev}/current_memory_partition", amd["memoryPartition"])
            t.a(f"{dev}/available_memory_partition", "NPS1, NPS4")
        t.a(f"{dev}/mem_info_vram_total", int(g.get("memoryMiB", 0)) << 20)
        t.a(f"{dev}/gpu_busy_percent", 0)
        t.a(f"{dev}/product_name", amd.get("marketName", g.get("model", "")))
        _drm(t, dev, i)
        cards.append({"card": i, "busId": bdf, "device": dev, "hwmon": h, "secondary": secondary,
                      "primaryBusId": primary, "pinnedW": pinned})
    doc = {
        "version": 1, "marketName": amd.get("marketName", g.get("model", "")), "sku": amd.get("sku", ""),
        "gfxVersion": amd.get("gfxVersion", ""), "deviceId": g.get("pciDeviceId", ""),
        "unprivilegedSetIsNoop": bool(amd.get("unprivilegedSetIsNoop", False)), "cards": cards,
    }
    t.f("state/amd.json", json.dumps(doc, indent=1) + "\n", 0o444)


def _intel(t: Template, prof: Profile, next_hwmon: list[int]) -> None:
    g = prof.gpus
    it = g.get("intel") or {}
    driver = str(it.get("driver", "i915"))
    t.d(f"sys/bus/pci/drivers/{driver}")
    rated = _uw(float(it["ratedMaxW"]))
    clamp = [_uw(float(it.get("clampMinW", 40))), _uw(float(it.get("clampMaxW", it["ratedMaxW"])))]
    ch = "power1" if driver == "i915" else "power2"
    en = "energy1" if driver == "i915" else "energy2"
    for i, bdf in enumerate(g["busIds"]):
        comp = f"gpu{i}"
        dev = _gpu_pci(t, prof, i, bdf, "0x8086", str(g.get("pciDeviceId", "0x0000")), driver)
        h = _hwmon_dir(t, dev, next_hwmon, driver)
        t.a(f"{h}/{ch}_max", rated, 0o664)
        t.a(f"{h}/{ch}_rated_max", rated)
        t.a(f"{h}/{ch}_max_interval", 1000, 0o664)
        t.a(f"{h}/{en}_input", 0)
        if driver == "xe":
            t.a(f"{h}/{ch}_label", "pkg")
            t.a(f"{h}/{en}_label", "pkg")
        temp_file = f"{h}/temp1_input" if driver == "i915" else f"{h}/temp2_input"
        t.a(temp_file, int(float(g.get("temperatureC", 35)) * 1000))
        t.c(temp_file, "temp_mc", comp)
        t.w(f"{h}/{ch}_max", "intel_pl1", comp, clampUw=clamp, ratedMaxUw=rated, zeroDisables=True,
            default=str(rated))
        t.w(f"{h}/{ch}_max_interval", "intel_pl1_interval", comp, maxMs=256_000, default="1000")
        t.c(f"{h}/{en}_input", "energy_uj", comp)
        _drm(t, dev, i)
        _intel_gt_freq(t, dev, i, driver, it.get("gt") or {}, comp)


#: The GT frequency landmarks (MHz) a profile without ``gpus.intel.gt`` gets: Flex 170 (DG2).
INTEL_GT_DEFAULT = {"rp0MHz": 2050, "rp1MHz": 1300, "rpnMHz": 300}


def _intel_gt_freq(t: Template, dev: str, card: int, driver: str, gt: dict[str, Any], comp: str) -> None:
    """The GT frequency files of one GPU (one GT on tile 0): i915 ``drm/card<N>/gt/gt0/rps_*_freq_mhz``
    (the per-GT files of Linux 6.2+; the card-level ``gt_*_freq_mhz`` aliases of GT 0 are not
    rendered: a second writable name for one value would need a hard link to a writable file),
    xe ``tile0/gt0/freq0/*_freq``. ``min``/``max`` are written as root and follow the
    driver's rules (:func:`joulectl.sim.sysfs_rules.apply`: RPn <= min <= max <= RP0, EINVAL otherwise)."""
    rp0 = int(gt.get("rp0MHz", INTEL_GT_DEFAULT["rp0MHz"]))
    rpn = int(gt.get("rpnMHz", INTEL_GT_DEFAULT["rpnMHz"]))
    rp1 = int(gt.get("rp1MHz", INTEL_GT_DEFAULT["rp1MHz"]))
    rule = {"rpnMhz": rpn, "rp0Mhz": rp0}
    if driver == "xe":
        base = f"{dev}/tile0/gt0/freq0"
        t.d(f"{dev}/tile0")
        t.d(f"{dev}/tile0/gt0")
        t.d(base)
        names = {"min": "min_freq", "max": "max_freq"}
        values = {"rp0_freq": rp0, "rpe_freq": rp1, "rpn_freq": rpn, "act_freq": 0, "cur_freq": rpn}
    else:
        base = f"{dev}/drm/card{card}/gt/gt0"
        t.d(f"{dev}/drm/card{card}/gt")
        t.d(base)
        names = {"min": "rps_min_freq_mhz", "max": "rps_max_freq_mhz"}
        values = {"rps_RP0_freq_mhz": rp0, "rps_RP1_freq_mhz": rp1, "rps_RPn_freq_mhz": rpn,
                  "rps_boost_freq_mhz": rp0, "rps_act_freq_mhz": 0, "rps_cur_freq_mhz": rpn}
    for name, value in values.items():
        t.a(f"{base}/{name}", value)
    for which, start in (("min", rpn), ("max", rp0)):
        t.a(f"{base}/{names[which]}", start, W)
        t.w(f"{base}/{names[which]}", f"intel_gt_{which}", comp, default=str(start), **rule)


def _nvidia(t: Template, prof: Profile) -> None:
    t.d("sys/bus/pci/drivers/nvidia")
    t.f("dev/nvidiactl", b"", 0o666)
    t.f("dev/nvidia-uvm", b"", 0o666)
    t.f("dev/nvidia-uvm-tools", b"", 0o666)
    for i, board in enumerate(prof.boards):
        bdf = str(board["pci"]["bus_id"]).lower()
        pci = board.get("pci") or {}
        dev_id = int(pci.get("device_id", 0))
        sub = int(pci.get("subsystem_id", 0))
        # NVML's subsystem id is the device in the high half, the vendor in the low half
        _gpu_pci(t, prof, i, bdf, "0x10de", f"0x{dev_id >> 16:04x}", "nvidia",
                 f"0x{sub & 0xFFFF:04x}:0x{sub >> 16:04x}" if sub else None)
        t.f(f"dev/nvidia{int(board.get('minor_number', i))}", b"", 0o666)
    t.nvml = nvml_document(prof)


def _tool_script(tool: str) -> bytes:
    if tool == "nvidia-smi":
        # a POSIX sh fast path for the read-only queries joulectl sends, then the Python tool
        from joulectl.sim.tools.nvfast import launcher

        date, cat = shutil.which("date"), shutil.which("cat")
        if date and cat and os.path.isfile("/bin/sh"):
            try:
                return launcher(sys.executable, _PKG_PARENT, date, cat)
            except ValueError:  # a path the script cannot quote: the Python tool alone
                pass
    return (
        f"#!{sys.executable} -S\n"
        f"# fake {tool} rendered by joulectl simulate: reads and writes this node's sys/ and state/\n"
        "import sys\n"
        f"sys.path.insert(0, {_PKG_PARENT!r})\n"
        "from joulectl.sim.tools.fakesmi import main\n"
        f"main({tool!r}, __file__)\n"
    ).encode()


# -- the template --------------------------------------------------------------------------------

_TEMPLATES: dict[str, Template] = {}


def template(prof: Profile) -> Template:
    """The node layout of a resolved profile, computed once per profile hash."""
    key = prof.profile_hash()
    if key in _TEMPLATES:
        return _TEMPLATES[key]
    t = Template()
    for d in ("bin", "dev", "dev/dri", "etc", "proc", "proc/sys", "proc/sys/kernel", "state", "state/.tmp", "sys",
              "sys/bus", "sys/bus/pci", "sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/class", "sys/class/drm",
              "sys/class/hwmon", "sys/devices", "sys/devices/system", "sys/devices/virtual"):
        t.d(d)
    cpu = prof.cpu
    t.f("proc/cpuinfo", _cpuinfo(cpu))
    mem_kib = int((prof.data.get("node") or {}).get("memoryGiB", 64)) * 1024 * 1024
    t.f("proc/meminfo", f"MemTotal:       {mem_kib} kB\nMemFree:        {mem_kib - mem_kib // 50} kB\n")
    t.a("proc/sys/kernel/osrelease", (prof.data.get("node") or {}).get("kernel", "6.8.0-57-generic"))
    _cpufreq(t, cpu)
    order = _cpu_order(cpu)
    abi.topology(t, order)
    abi.numa_nodes(t, order)
    abi.cpuidle(t, len(order), cpu.get("cpuidle") or {})
    _powercap(t, cpu)
    next_hwmon = [0]
    _cpu_hwmon(t, cpu, next_hwmon)
    vendor = prof.gpu_vendor
    if vendor == "amd":
        _amd(t, prof, next_hwmon)
        t.f("bin/rocm-smi", _tool_script("rocm-smi"), 0o755)
        t.f("bin/amd-smi", _tool_script("amd-smi"), 0o755)
    elif vendor == "intel":
        _intel(t, prof, next_hwmon)
    elif vendor == "nvidia":
        _nvidia(t, prof)
        t.f("bin/nvidia-smi", _tool_script("nvidia-smi"), 0o755)
    # parents of every directory first (sorted by depth keeps the creation order valid)
    seen: set[str] = set()
    ordered: list[str] = []
    for d in t.dirs:
        parts = d.split("/")
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if sub not in seen:
                seen.add(sub)
                ordered.append(sub)
    for path, _ in t.symlinks:
        parts = path.split("/")[:-1]
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if sub not in seen:
                seen.add(sub)
                ordered.append(sub)
    t.dirs = ordered
    t.finish()
    _node_files_expected(t)
    if len(_TEMPLATES) >= 32:  # a long-lived process (tests, a planner) sees many profiles
        _TEMPLATES.pop(next(iter(_TEMPLATES)))
    _TEMPLATES[key] = t
    return t


def _node_files(node: SpecNode, t: Template) -> list[tuple[str, bytes, int]]:
    prof = node.profile
    meta = {"node": node.name, "profile": prof.name, "profileHash": prof.profile_hash(),
            "layoutVersion": LAYOUT_VERSION, "pool": node.pool, "cluster": node.cluster,
            "baseLoad": node.base_load, "rack": node.rack, "coolingZone": node.cooling_zone}
    manifest = {"layoutVersion": LAYOUT_VERSION, "node": node.name, "profile": prof.name,
                "writable": t.writable, "counters": t.counters}
    files = [
        ("etc/hostname", f"{node.name}\n".encode(), 0o644),
        ("proc/sys/kernel/hostname", f"{node.name}\n".encode(), 0o644),
        ("state/node.json", (json.dumps(meta, indent=1) + "\n").encode(), 0o644),
        ("state/manifest.json", json.dumps(manifest, separators=(",", ":")).encode(), 0o444),
    ]
    if t.nvml is not None:
        files.append(("state/nvml.json", json.dumps(t.nvml, separators=(",", ":")).encode(), 0o644))
    return files


# -- render / resume -----------------------------------------------------------------------------


@dataclass
class RenderStats:
    rendered: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    created_entries: int = 0


def _write_file(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


SIG_FILE = "state/layout-sig.json"


def _dir_sigs(target: str, t: Template) -> dict[str, int]:
    """``{dir: mtime_ns}`` of the tree's root (key ``""``) and of every layout directory but
    ``state`` and those under it (which change at every run)."""
    st = os.lstat
    out: dict[str, int] = {"": st(target).st_mtime_ns}
    for d in t.dirs:
        if d == "state" or d.startswith("state/"):
            continue
        out[d] = st(target + "/" + d).st_mtime_ns
    return out


def _read_json(dir_fd: int, rel: str) -> Any:
    """The JSON document of ``rel`` under ``dir_fd`` (one open and read, the C decoder)."""
    fd = os.open(rel, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = [os.read(fd, 1 << 16)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 16))
    finally:
        os.close(fd)
    return json.loads(b"".join(chunks).decode("utf-8"))


SHARED_DIR = ".joulectl-shared"


def _ensure_store(root: str, t: Template, key: str) -> str | None:
    """``root/.joulectl-shared/<profile hash>``: one copy of the profile's symlinks.

    Node trees hard-link their symlinks to it, which costs a directory entry instead of an inode
    each. Only symlinks are shared: a symlink cannot be written (a write through it reaches its
    target, relative, inside the node), while every attribute is its own file, so a write to one
    node's (or one policy's) attribute changes no other. Removing the store leaves every tree
    intact. Returns None when the store cannot be made (the nodes then get their own symlinks).
    """
    base = os.path.join(root, SHARED_DIR)
    store = os.path.join(base, key)
    if os.path.exists(os.path.join(store, ".complete")):
        return store
    tmp = f"{store}.{os.getpid()}.tmp"
    old = os.umask(0)
    try:
        os.makedirs(base, exist_ok=True)
        if os.path.lexists(tmp):
            shutil.rmtree(tmp)
        os.mkdir(tmp, 0o755)
        made: set[str] = set()
        for rel in [r for r, _ in t.symlinks]:
            parent = rel.rpartition("/")[0]
            if parent and parent not in made:
                os.makedirs(os.path.join(tmp, parent), 0o755, exist_ok=True)
                made.add(parent)
        for rel, target_rel in t.symlinks:
            os.symlink(target_rel, tmp + "/" + rel)
        _write_file(tmp + "/.complete", b"", 0o444)
        try:
            os.rename(tmp, store)
        except OSError:  # another render made it first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return store if os.path.exists(os.path.join(store, ".complete")) else None
    finally:
        os.umask(old)
    return store


def _render_fresh(node: SpecNode, t: Template, target: str, store: str | None = None) -> None:
    parent = os.path.dirname(target)
    tmp = os.path.join(parent, f".{node.name}.rendering")
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    old = os.umask(0)
    try:
        os.mkdir(tmp, 0o755)
        pre = tmp + "/"
        mkdir = os.mkdir
        for d in t.dirs:
            mkdir(pre + d, 0o755)
        op, wr, cl = os.open, os.write, os.close
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        ln = os.link
        for rel, data, mode in t.files:
            fd = op(pre + rel, flags, mode)
            if data:
                wr(fd, data)
            cl(fd)
        if store:
            spre = store + "/"
            for rel, target_rel in t.symlinks:
                try:
                    ln(spre + rel, pre + rel, follow_symlinks=False)
                except OSError:
                    os.symlink(target_rel, pre + rel)
        for rel, data, mode in _node_files(node, t):
            _write_file(pre + rel, data, mode)
        if not store:
            sl = os.symlink
            for rel, target_rel in t.symlinks:
                sl(target_rel, pre + rel)
    finally:
        os.umask(old)
    os.rename(tmp, target)
    _write_sigs(target, t, node)


def _write_sigs(target: str, t: Template, node: SpecNode) -> None:
    path = target + "/" + SIG_FILE
    tmp = path + ".tmp"
    sigs: dict[str, Any] = dict(_dir_sigs(target, t))
    st = os.lstat(target + "/" + META_SIG)
    sigs[META_SIG] = [st.st_mtime_ns, st.st_size, st.st_ino, *_meta_identity(node)]
    text = json.dumps(sigs, separators=(",", ":"))  # the C encoder (json.dump is the Python one)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "l"
    if entry.is_dir(follow_symlinks=False):
        return "d"
    return "f"


_KIND_NAME = {"d": "a directory", "f": "a file", "l": "a symlink"}


def _resume(node: SpecNode, t: Template, target: str) -> int:
    """Check an existing tree and create what is missing; returns the number of entries created.

    A directory whose mtime is the one ``state/layout-sig.json`` recorded had no entry added,
    removed or renamed since (the kernel sets a directory's mtime at each), so only the others are
    listed and compared with the layout. Every path is taken relative to the tree's directory."""
    label = f"{target}"
    try:
        root_fd = os.open(target, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise RenderError(f"node {node.name}: {target} exists and is not a directory ({e.strerror})",
                          file=target) from None
    try:
        return _resume_at(node, t, target, label, root_fd)
    finally:
        os.close(root_fd)


#: The key of ``state/node.json``'s signature in :data:`SIG_FILE`: (mtime_ns, size, inode) and the
#: node, profile, profile hash and layout version it was checked to hold (no directory has the name).
META_SIG = "state/node.json"


def _meta_identity(node: SpecNode) -> list[Any]:
    prof = node.profile
    return [node.name, prof.name, prof.profile_hash(), LAYOUT_VERSION]


def _resume_at(node: SpecNode, t: Template, target: str, label: str, root_fd: int) -> int:
    try:
        sigs: dict[str, Any] = _read_json(root_fd, SIG_FILE)
        if not isinstance(sigs, dict):
            sigs = {}
    except (OSError, ValueError):
        sigs = {}
    # node.json unchanged since it was checked to name this node, profile and layout (the same
    # mtime, size and inode): not read again.
    meta_sig = sigs.get(META_SIG)
    meta_ok = False
    if isinstance(meta_sig, list) and meta_sig[3:] == _meta_identity(node):
        try:
            st = os.lstat(META_SIG, dir_fd=root_fd)
            meta_ok = meta_sig[:3] == [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            pass
    if not meta_ok:
        _check_meta(node, target, label, root_fd)
    node_files: dict[str, tuple[bytes, int]] | None = None  # built only when one is missing
    files, links = t.lookup()
    created = 0
    old = os.umask(0)
    changed = False
    lstat = os.lstat
    expected = t.expected
    try:
        for d in ["", *t.dirs]:
            sig = sigs.get(d)
            if sig is not None:
                try:
                    if lstat(d or ".", dir_fd=root_fd).st_mtime_ns == sig:
                        continue  # no entry was added, removed or replaced since the tree was checked
                except OSError:
                    pass
            changed = changed or not (d == "state" or d.startswith("state/"))
            want = expected.get(d)
            if not want:
                continue  # nothing to find in it (state/.tmp): its parent's listing checked its kind
            full = target + "/" + d if d else target
            try:
                present = {e.name: _kind(e) for e in os.scandir(full)}
            except FileNotFoundError:
                present = {}  # created just now by the loop below for its parent
            except NotADirectoryError:
                raise RenderError(f"node {node.name}: /{d} should be a directory", file=label) from None
            for name, kind in want.items():
                have = present.get(name)
                rel = f"{d}/{name}" if d else name
                if have is None:
                    path = os.path.join(target, rel)
                    if kind == "d":
                        os.mkdir(path, 0o755)
                    elif rel in links:
                        os.symlink(links[rel], path)
                    elif rel in files:
                        data, mode = files[rel]
                        _write_file(path, data, mode)
                    else:
                        if node_files is None:
                            node_files = {r: (dt, md) for r, dt, md in _node_files(node, t)}
                        data, mode = node_files[rel]
                        _write_file(path, data, mode)
                    created += 1
                elif have != kind:
                    raise RenderError(
                        f"node {node.name}: /{rel} is {_KIND_NAME[have]} where the layout has "
                        f"{_KIND_NAME[kind]}; remove {target} to render the node fresh", file=label,
                    )
        tmpdir = os.path.join(target, "state", ".tmp")
        for entry in os.scandir(tmpdir):
            if entry.name.startswith("ensure-") and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    finally:
        os.umask(old)
    if changed or not meta_ok:
        _write_sigs(target, t, node)
    return created


def _check_meta(node: SpecNode, target: str, label: str, root_fd: int) -> None:
    """``state/node.json`` names the node, profile, profile values and layout of ``node``."""
    try:
        meta = _read_json(root_fd, META_SIG)
    except FileNotFoundError:
        raise RenderError(
            f"node {node.name}: the tree exists but has no state/node.json (not rendered by joulectl "
            "simulate); remove it to render the node fresh", file=label,
        ) from None
    except (OSError, ValueError) as e:
        raise RenderError(f"node {node.name}: state/node.json is unreadable ({e})", file=label) from None
    keys = ("node", "profile", "profileHash", "layoutVersion")
    for key, expect in zip(keys, _meta_identity(node), strict=True):
        if not isinstance(meta, dict) or meta.get(key) != expect:
            got = meta.get(key) if isinstance(meta, dict) else None
            raise RenderError(
                f"node {node.name}: the tree was rendered for {key} {got!r}, the spec says {expect!r}; "
                f"remove {target} to render the node fresh (its counters restart at zero)", file=label,
            )


def _node_files_expected(t: Template) -> None:
    for rel in ("etc/hostname", "proc/sys/kernel/hostname", "state/node.json", "state/manifest.json"):
        parent, _, name = rel.rpartition("/")
        t.expected.setdefault(parent, {})[name] = "f"
    if t.nvml is not None:
        t.expected.setdefault("state", {})["nvml.json"] = "f"


_POOL_NODES: list[SpecNode] = []
_POOL_ROOT = ""
_POOL_STORES: dict[str, str | None] = {}


def _pool_render(i: int) -> tuple[str, str]:
    node = _POOL_NODES[i]
    store = _POOL_STORES.get(node.profile.profile_hash())
    _render_fresh(node, template(node.profile), os.path.join(_POOL_ROOT, node.name), store)
    return node.name, "rendered"


def _pool_init() -> None:
    """A render worker leaves Ctrl-C to the parent (which stops the pool): no traceback per worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: A resume check is split over forked processes when the trees to check hold at least this many
#: directories per process (one ``lstat`` each, 3-5 µs here; a fork of the run costs about 10 ms).
CHECK_SPLIT_DIRS = 20_000
_CHECK_ITEMS: list[tuple[SpecNode, Template, str]] = []


def _check_workers(existing: list[tuple[SpecNode, Template, str]]) -> int:
    """Processes for the resume check: one per CPU (at most 8) while each has
    :data:`CHECK_SPLIT_DIRS` directories or more to stat, whatever the load: the split costs only
    the forks, and each process takes its share of the CPU time the check needs anyway."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    dirs = sum(len(t.dirs) + 1 for _node, t, _target in existing)
    return max(1, min(cpus, 8, dirs // CHECK_SPLIT_DIRS))


def _check_one(item: tuple[SpecNode, Template, str]) -> int:
    node, t, target = item
    try:
        st_mode: int | None = os.lstat(target).st_mode
    except FileNotFoundError:
        st_mode = None
    if st_mode is None or not stat.S_ISDIR(st_mode):
        raise RenderError(f"node {node.name}: {target} exists and is not a directory", file=target)
    return _resume(node, t, target)


def _check_share(k: int, n: int) -> tuple[str, Any]:
    """The trees ``k::n`` of :data:`_CHECK_ITEMS`: the entries created per tree, or (``render`` or
    ``other``) the index and error of the first tree that failed (no further tree checked)."""
    done: list[int] = []
    try:
        for i in range(k, len(_CHECK_ITEMS), n):
            done.append(_check_one(_CHECK_ITEMS[i]))
    except RenderError as exc:
        return "render", (k + n * len(done), done, exc.problem, exc.file, exc.field, exc.hint)
    except Exception as exc:  # raised in the parent as it is (an OSError the check does not expect)
        return "other", (k + n * len(done), done, exc)
    return "ok", done


def _fork_share(k: int, n: int) -> tuple[int, int]:
    """A forked process checking share ``k`` of ``n``; (pid, read end of its result pipe).

    The child writes its pickled result and leaves by ``os._exit``: no buffer, lock or handler of
    the parent (a thread's, in a test or a served run) is touched."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its result is what the tests check)
        code = 0
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's
            result = _check_share(k, n)
            try:
                data = pickle.dumps(result)
            except Exception as exc:  # an error that does not pickle
                data = pickle.dumps(("other", (result[1][0], result[1][1], RuntimeError(repr(exc)))))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _read_share(pid: int, r: int) -> tuple[str, Any]:
    import pickle

    chunks = []
    try:
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not chunks:
        return "other", (0, [], RenderError("a resume check process ended unexpectedly"))
    result: tuple[str, Any] = pickle.loads(b"".join(chunks))
    return result


def _resume_all(items: list[tuple[SpecNode, Template, str]], progress: Callable[[str, str], None] | None,
                n: int) -> int:
    """Check and complete the existing trees ``items`` on ``n`` processes (this one and ``n - 1``
    forked, each taking every ``n``-th tree); the entries created. The first tree in order that
    fails raises its error, as one by one: the others' checks stop at their first failure too."""
    n = max(1, min(n, len(items)))
    if n == 1:
        created = 0
        for item in items:
            created += _check_one(item)
            if progress:
                progress(item[0].name, "resumed")
        return created
    global _CHECK_ITEMS
    _CHECK_ITEMS = items
    children: list[tuple[int, int]] = []
    results: list[tuple[str, Any]] = []
    try:
        for k in range(1, n):
            children.append(_fork_share(k, n))
        results.append(_check_share(0, n))
        while children:
            results.append(_read_share(*children[0]))
            children.pop(0)
    finally:
        _CHECK_ITEMS = []
        for pid, r in children:  # an interrupt while the others ran: they are stopped
            os.close(r)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    created = 0
    first: tuple[int, BaseException] | None = None
    for k, (kind, payload) in enumerate(results):
        done: list[int] = payload if kind == "ok" else payload[1]
        created += sum(done)
        if progress:
            for j in range(len(done)):
                progress(items[k + n * j][0].name, "resumed")
        if kind == "ok":
            continue
        exc: BaseException
        if kind == "render":
            _i, _done, problem, file, fld, hint = payload
            exc = RenderError(problem, file=file, field=fld, hint=hint)
        else:
            exc = payload[2]
        if first is None or payload[0] < first[0]:
            first = (payload[0], exc)
    if first is not None:
        raise first[1]
    return created


def _auto_workers(fresh: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8)) if fresh >= 16 else 1


def render_nodes(
    nodes: Iterable[SpecNode],
    root: str,
    *,
    progress: Callable[[str, str], None] | None = None,
    workers: int | None = None,
    check_workers: int | None = None,
) -> RenderStats:
    """Render every node under ``root/<node>`` (resuming the trees that exist).

    Existing trees are checked and completed first, on ``check_workers`` forked processes
    (default: :func:`_check_workers`), the error of the first damaged tree in node order raised as
    a check one by one raises it; then the fresh trees are rendered,
    on ``workers`` forked processes (default: one per CPU when there are 16 or more).
    ``progress(name, what)`` is called with ``what`` ``"resumed"`` or ``"rendered"`` after every
    tree, and ``"prepared"`` (``name`` the profile) after each profile's shared store, which the
    fresh trees of that profile wait for.
    """
    global _POOL_NODES, _POOL_ROOT, _POOL_STORES
    if os.path.exists(root) and not os.path.isdir(root):
        raise RenderError("is not a directory", file=root, field="--root")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise RenderError(f"cannot create the directory: {e.strerror}", file=root, field="--root") from None
    stats = RenderStats()
    fresh: list[SpecNode] = []
    existing: list[tuple[SpecNode, Template, str]] = []
    for node in nodes:
        t = template(node.profile)
        target = os.path.join(root, node.name)
        try:
            st_mode = os.lstat(target).st_mode
        except FileNotFoundError:
            st_mode = None
        if st_mode is not None:
            if not stat.S_ISDIR(st_mode):
                if not existing:
                    raise RenderError(f"node {node.name}: {target} exists and is not a directory", file=target)
                # the trees before it are checked first, as they would have been one by one
                existing.append((node, t, target))
                break
            existing.append((node, t, target))
        else:
            fresh.append(node)
    if existing:
        n_check = check_workers if check_workers is not None else _check_workers(existing)
        stats.created_entries += _resume_all(existing, progress, n_check)
        stats.resumed.extend(node.name for node, _t, _target in existing)
    per_profile: dict[str, int] = {}
    for node in fresh:
        key = node.profile.profile_hash()
        per_profile[key] = per_profile.get(key, 0) + 1
    stores: dict[str, str | None] = {}
    for node in fresh:
        key = node.profile.profile_hash()
        if key not in stores:
            stores[key] = _ensure_store(root, template(node.profile), key) if per_profile[key] > 1 else None
            if progress:
                progress(node.profile.name, "prepared")
    n_workers = _auto_workers(len(fresh)) if workers is None else max(1, workers)
    if n_workers > 1 and len(fresh) > 1:
        import multiprocessing

        _POOL_NODES, _POOL_ROOT, _POOL_STORES = fresh, root, stores
        ctx = multiprocessing.get_context("fork")
        try:
            with ctx.Pool(n_workers, initializer=_pool_init) as pool:
                # one node per task: the progress moves with every tree, not every fourth
                for name, what in pool.imap_unordered(_pool_render, range(len(fresh)), chunksize=1):
                    stats.rendered.append(name)
                    if progress:
                        progress(name, what)
        finally:
            _POOL_NODES, _POOL_ROOT, _POOL_STORES = [], "", {}
        order = {n.name: i for i, n in enumerate(fresh)}
        stats.rendered.sort(key=order.__getitem__)
    else:
        for node in fresh:
            _render_fresh(node, template(node.profile), os.path.join(root, node.name),
                          stores.get(node.profile.profile_hash()))
            stats.rendered.append(node.name)
            if progress:
                progress(node.name, "rendered")
    return stats
