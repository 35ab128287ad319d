"""The CPU part of a node tree: ``/proc/cpuinfo``, cpufreq policies, powercap (RAPL) zones and
the CPU temperature hwmon, each added to a :class:`~joulectl.sim.template.Template`."""

from __future__ import annotations

from typing import Any

from joulectl.sim import sysfs_abi as abi
from joulectl.sim.profiles import DEFAULT_LIMIT_BITS, PSYS_LIMIT_BITS
from joulectl.sim.template import E, Template, W, range_text, uw


def cpu_order(cpu: dict[str, Any]) -> list[tuple[int, int, int]]:
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


def cpuinfo(cpu: dict[str, Any]) -> str:
    order = cpu_order(cpu)
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


def cpufreq(t: Template, cpu: dict[str, Any]) -> None:
    base = "sys/devices/system/cpu"
    n = len(cpu_order(cpu))
    t.d("sys/devices/system/cpu")
    for name in ("online", "possible", "present"):
        t.a(f"{base}/{name}", range_text(n))
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
        limit = uw(float(con.get("limitW", 0)))
        t.a(f"{path}/constraint_{i}_name", cname)
        t.a(f"{path}/constraint_{i}_power_limit_uw", limit, W)
        t.a(f"{path}/constraint_{i}_time_window_us", int(con.get("timeWindowUs", 999424)), W)
        if "maxW" in con:
            t.a(f"{path}/constraint_{i}_max_power_uw", uw(float(con["maxW"])))
        if "minW" in con:
            t.a(f"{path}/constraint_{i}_min_power_uw", uw(float(con["minW"])))
        if "maxTimeWindowUs" in con:
            t.a(f"{path}/constraint_{i}_max_time_window_us", int(con["maxTimeWindowUs"]))
        bits = con.get("limitBits") or (
            PSYS_LIMIT_BITS if zone.get("name") == "psys" else DEFAULT_LIMIT_BITS.get(cname, 15)
        )
        wcomp = comp if cname == "long_term" else f"{comp}.{cname}"
        t.w(f"{path}/constraint_{i}_power_limit_uw", "rapl_limit", wcomp, constraint=cname,
            minUw=uw(float(con.get("minW", 0))), maxUw=uw(float(con["maxW"])) if "maxW" in con else None,
            limitBits=int(bits), unitUw=unit, locked=bool(con.get("locked", False)), default=str(limit))
        t.w(f"{path}/constraint_{i}_time_window_us", "rapl_time_window", wcomp,
            default=str(int(con.get("timeWindowUs", 999424))))


def powercap(t: Template, cpu: dict[str, Any]) -> None:
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


def cpu_hwmon(t: Template, cpu: dict[str, Any], next_hwmon: list[int]) -> None:
    if cpu.get("virtual"):
        return
    amd = cpu["vendor"] == "AuthenticAMD"
    order = cpu_order(cpu)
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
