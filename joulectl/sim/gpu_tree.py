"""The GPU part of a node tree: PCI functions, drm cards and hwmon of AMD (amdgpu), Intel
(i915/xe) and NVIDIA GPUs, the NVML board state, and the fake vendor tools in ``bin/``, each added
to a :class:`~joulectl.sim.template.Template`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Any

from joulectl.sim import sysfs_abi as abi
from joulectl.sim.cpu_tree import cpu_order
from joulectl.sim.nvml_board import nvml_document
from joulectl.sim.profiles import Profile
from joulectl.sim.template import Template, W, uw

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AMD_PERF_LEVELS = (
    "auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
    "profile_peak", "perf_determinism",
)


def _gpu_pci(t: Template, prof: Profile, i: int, bdf: str, vendor_id: str, device_id: str, driver: str,
             subsystem: str | None = None) -> str:
    """The PCI function of GPU ``i``: ids, revision and subsystem from the profile, its NUMA
    node's CPUs, IRQ ``96 + 8 i`` (an assumption) and the vendor's BAR layout."""
    g = prof.gpus
    sockets = int(prof.cpu["sockets"])
    order = cpu_order(prof.cpu)
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


def amd(t: Template, prof: Profile, next_hwmon: list[int]) -> None:
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
        cap = uw(float(power.get("capW", power.get("maxW", 0))))
        cap_max = uw(float(power.get("maxW", 0)))
        cap_min = uw(float(power.get("minW", 0)))
        default = uw(float(power.get("defaultW", power.get("maxW", 0))))
        t.a(f"{h}/power1_cap", 0 if secondary else cap, W)
        t.a(f"{h}/power1_cap_max", cap_max)
        t.a(f"{h}/power1_cap_min", cap_min)
        t.a(f"{h}/power1_cap_default", 0 if secondary else default)
        t.a(f"{h}/power1_label", "PPT")
        idle = uw(float((g.get("physics") or {}).get("idleW", 0)))
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
            pinnedUw=uw(float(pinned)) if pinned else None, secondary=secondary,
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


def intel(t: Template, prof: Profile, next_hwmon: list[int]) -> None:
    g = prof.gpus
    it = g.get("intel") or {}
    driver = str(it.get("driver", "i915"))
    t.d(f"sys/bus/pci/drivers/{driver}")
    rated = uw(float(it["ratedMaxW"]))
    clamp = [uw(float(it.get("clampMinW", 40))), uw(float(it.get("clampMaxW", it["ratedMaxW"])))]
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


def nvidia(t: Template, prof: Profile) -> None:
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


@lru_cache(maxsize=1)
def awk_with_strftime() -> str | None:
    """The path of an ``awk`` that has ``strftime`` (mawk since 2012, gawk, busybox; not the one
    true awk), probed once a process, else None (the shell then runs ``date`` and ``cat``)."""
    awk = shutil.which("awk")
    if awk is None or "'" in awk or "\n" in awk:
        return None
    try:
        r = subprocess.run([awk, 'BEGIN { printf "%s", strftime("%Y", 0) }'], capture_output=True, timeout=10,
                           env={**os.environ, "LC_ALL": "C", "TZ": "UTC"}, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return awk if r.returncode == 0 and r.stdout == b"1970" else None


def tool_script(tool: str) -> bytes:
    if tool == "nvidia-smi":
        # a POSIX sh fast path for the read-only queries joulectl sends, then the Python tool
        from joulectl.sim.tools.nvfast import SET_TOOLS, launcher

        date, cat = shutil.which("date"), shutil.which("cat")
        found = {name: shutil.which(name) for name in SET_TOOLS}
        tools = {name: path for name, path in found.items() if path} if all(found.values()) else None
        if date and cat and os.path.isfile("/bin/sh"):
            try:
                return launcher(sys.executable, _PKG_PARENT, date, cat, tools, awk_with_strftime())
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
