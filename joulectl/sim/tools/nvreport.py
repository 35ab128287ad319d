"""The fake ``nvidia-smi``'s reports (:mod:`joulectl.sim.tools.nvsmi`): ``-q -x`` (XML in the newer
``<gpu_power_readings>`` schema), ``-q`` (text), ``-q -d SUPPORTED_CLOCKS``, ``-L`` and the summary
table. A module of its own: the set commands and the CSV queries a cap sends load none of it.
Standard library only (see :mod:`joulectl.sim.tools.fakesmi`)."""

from __future__ import annotations

import time

from joulectl.sim.tools.nvsmi import OK, _arch, _out, _token, _w
from joulectl.sim.tools.state import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


_ARCH_NAME = {"ada": "Ada Lovelace", "hopper": "Hopper", "ampere": "Ampere", "blackwell": "Blackwell",
              "turing": "Turing", "volta": "Volta", "pascal": "Pascal", "maxwell": "Maxwell", "kepler": "Kepler",
              "rubin": "Rubin"}


def escape(text: str) -> str:
    """XML character data (xml.sax.saxutils.escape without its urllib import: the tool starts fast)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _arch_name(g: dict[str, Any]) -> str:
    """``<product_architecture>`` as nvidia-smi spells it (``Ada Lovelace``, ``Hopper``...)."""
    return _ARCH_NAME.get(_arch(g), "Unknown")


def _mig_mode(g: dict[str, Any]) -> str:
    """``current_mig``: ``N/A`` on a board without MIG (L40S, T4), else Enabled/Disabled."""
    mig = g.get("mig") or {}
    return str(mig.get("mode", "N/A")) if mig.get("capable") else "N/A"


def _average_draw(g: dict[str, Any]) -> str:
    """``average_power_draw``: ``N/A`` on a board that reports instant draw only (A100, T4)."""
    if not g["power"].get("averageDraw", True):
        return "N/A"
    return _xml_tok(g, "power.draw", _w(g["power"]["drawMw"]))


def _supported(g: dict[str, Any]) -> list[tuple[int, list[int]]]:
    """Supported clocks with the graphics clocks of each memory clock capped by smMaxByMem."""
    caps = {int(k): int(v) for k, v in (g.get("smMaxByMem") or {}).items()}
    out = []
    for entry in g.get("supportedClocks") or []:
        mem = int(entry["memoryMhz"])
        graphics = sorted((int(x) for x in entry.get("graphicsMhz") or []), reverse=True)
        if mem in caps:
            graphics = [x for x in graphics if x <= caps[mem]]
        out.append((mem, graphics))
    return sorted(out, key=lambda e: -e[0])  # highest first, as nvidia-smi prints them


def _list(gpus: list[dict[str, Any]]) -> int:
    for g in gpus:
        _out(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n")
        mig = g.get("mig") or {}
        if mig.get("mode") == "Enabled":
            for j, dev in enumerate(mig.get("devices") or []):
                uuid = "MIG-" + g["uuid"][4:-4] + f"{j:04d}"
                _out(f"  MIG {dev['profile']:<12}Device {j:>2}: (UUID: {uuid})\n")
    return OK


def _x(tag: str, value: Any, pad: str) -> str:
    return f"{pad}<{tag}>{escape(str(value))}</{tag}>\n"


def _xml_tok(g: dict[str, Any], field: str, value: str) -> str:
    tok = _token(g, field)
    return tok.strip("[]") if tok is not None else value


def _xml(state: dict[str, Any], gpus: list[dict[str, Any]], display: set[str]) -> str:
    ts = time.strftime("%a %b %d %H:%M:%S %Y")
    out = ['<?xml version="1.0" ?>\n', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n',
           "<nvidia_smi_log>\n", _x("timestamp", ts, "\t"), _x("driver_version", state.get("driverVersion"), "\t"),
           _x("cuda_version", state.get("cudaVersion"), "\t"), _x("attached_gpus", len(state.get("gpus") or []), "\t")]
    for g in gpus:
        out.append(f'\t<gpu id="{g["busId"]}">\n')
        pad = "\t\t"
        only_clocks = display == {"SUPPORTED_CLOCKS"}
        if not only_clocks:
            p = g["power"]
            c = g["clocks"]
            bus = g["busId"]
            out += [
                _x("product_name", g["name"], pad), _x("product_brand", "NVIDIA", pad),
                _x("product_architecture", _arch_name(g), pad),
                _x("display_mode", "Disabled", pad), _x("display_active", "Disabled", pad),
                _x("persistence_mode", g.get("persistenceMode", "Enabled"), pad),
                f"{pad}<mig_mode>\n", _x("current_mig", _mig_mode(g), pad + "\t"),
                _x("pending_mig", _mig_mode(g), pad + "\t"), f"{pad}</mig_mode>\n",
                _x("serial", g.get("serial", ""), pad), _x("uuid", g["uuid"], pad),
                _x("minor_number", g.get("minorNumber", g["index"]), pad),
                _x("vbios_version", g.get("vbiosVersion", ""), pad),
                _x("board_part_number", g.get("boardPartNumber", ""), pad),
                f"{pad}<pci>\n", _x("pci_bus", bus[9:11], pad + "\t"), _x("pci_device", bus[12:14], pad + "\t"),
                _x("pci_domain", bus[4:8], pad + "\t"),
                _x("pci_device_id", str(g.get("pciDeviceId", ""))[2:], pad + "\t"),
                _x("pci_bus_id", bus, pad + "\t"), f"{pad}</pci>\n",
                f"{pad}<fb_memory_usage>\n", _x("total", f"{g.get('memoryTotalMiB', 0)} MiB", pad + "\t"),
                _x("reserved", f"{g.get('memoryReservedMiB', 0)} MiB", pad + "\t"), _x("used", "0 MiB", pad + "\t"),
                _x("free", f"{int(g.get('memoryTotalMiB', 0)) - int(g.get('memoryReservedMiB', 0))} MiB", pad + "\t"),
                f"{pad}</fb_memory_usage>\n",
                _x("compute_mode", str(g.get("computeMode", "default")).capitalize(), pad),
                f"{pad}<utilization>\n", _x("gpu_util", f"{g.get('utilizationGpu', 0)} %", pad + "\t"),
                _x("memory_util", f"{g.get('utilizationMemory', 0)} %", pad + "\t"), f"{pad}</utilization>\n",
                f"{pad}<temperature>\n", _x("gpu_temp", f"{g.get('temperatureC', 0)} C", pad + "\t"),
                f"{pad}</temperature>\n",
                _x("performance_state", g.get("pstate", "P0"), pad),
                f"{pad}<gpu_power_readings>\n",
                _x("power_state", g.get("pstate", "P0"), pad + "\t"),
                _x("average_power_draw", _average_draw(g), pad + "\t"),
                _x("instant_power_draw", _xml_tok(g, "power.draw", _w(p["drawMw"])), pad + "\t"),
                _x("current_power_limit", _xml_tok(g, "enforced.power.limit", _w(p["enforcedLimitMw"])), pad + "\t"),
                _x("requested_power_limit", _xml_tok(g, "power.limit", _w(p["limitMw"])), pad + "\t"),
                _x("default_power_limit", _xml_tok(g, "power.default_limit", _w(p["defaultLimitMw"])), pad + "\t"),
                _x("min_power_limit", _xml_tok(g, "power.min_limit", _w(p["minLimitMw"])), pad + "\t"),
                _x("max_power_limit", _xml_tok(g, "power.max_limit", _w(p["maxLimitMw"])), pad + "\t"),
                f"{pad}</gpu_power_readings>\n",
                f"{pad}<gpu_memory_power_readings>\n", _x("average_power_draw", "N/A", pad + "\t"),
                _x("instant_power_draw", "N/A", pad + "\t"), f"{pad}</gpu_memory_power_readings>\n",
                f"{pad}<module_power_readings>\n", _x("power_state", g.get("pstate", "P0"), pad + "\t"),
                _x("average_power_draw", "N/A", pad + "\t"), _x("current_power_limit", "N/A", pad + "\t"),
                _x("requested_power_limit", "N/A", pad + "\t"), _x("default_power_limit", "N/A", pad + "\t"),
                _x("min_power_limit", "N/A", pad + "\t"), _x("max_power_limit", "N/A", pad + "\t"),
                f"{pad}</module_power_readings>\n",
                f"{pad}<clocks>\n", _x("graphics_clock", f"{c['graphicsMhz']} MHz", pad + "\t"),
                _x("sm_clock", f"{c['smMhz']} MHz", pad + "\t"), _x("mem_clock", f"{c['memoryMhz']} MHz", pad + "\t"),
                _x("video_clock", f"{c.get('videoMhz', 0)} MHz", pad + "\t"), f"{pad}</clocks>\n",
                f"{pad}<applications_clocks>\n", _x("graphics_clock", f"{c.get('graphicsAppMhz', 0)} MHz", pad + "\t"),
                _x("mem_clock", f"{c.get('memoryAppMhz', 0)} MHz", pad + "\t"), f"{pad}</applications_clocks>\n",
                f"{pad}<max_clocks>\n", _x("graphics_clock", f"{c['graphicsMaxMhz']} MHz", pad + "\t"),
                _x("sm_clock", f"{c['smMaxMhz']} MHz", pad + "\t"),
                _x("mem_clock", f"{c['memoryMaxMhz']} MHz", pad + "\t"),
                _x("video_clock", f"{c.get('videoMaxMhz', 0)} MHz", pad + "\t"), f"{pad}</max_clocks>\n",
                f"{pad}<clock_policy>\n", _x("auto_boost", "N/A", pad + "\t"),
                _x("auto_boost_default", "N/A", pad + "\t"), f"{pad}</clock_policy>\n",
            ]
        sup = _supported(g)
        show_supported = not display or "SUPPORTED_CLOCKS" in display
        if show_supported and sup:
            out.append(f"{pad}<supported_clocks>\n")
            for mem, graphics in sup:
                out.append(f"{pad}\t<supported_mem_clock>\n")
                out.append(_x("value", f"{mem} MHz", pad + "\t\t"))
                # integers: nothing to escape (2,000 elements on eight H100s)
                out += [f"{pad}\t\t<supported_graphics_clock>{int(x)} MHz</supported_graphics_clock>\n"
                        for x in graphics]
                out.append(f"{pad}\t</supported_mem_clock>\n")
            out.append(f"{pad}</supported_clocks>\n")
        elif show_supported:
            out.append(_x("supported_clocks", "N/A", pad))
        if not only_clocks:
            out.append(f"{pad}<processes>\n{pad}</processes>\n")
        out.append("\t</gpu>\n")
    out.append("</nvidia_smi_log>\n")
    return "".join(out)


def _row(label: str, value: Any, indent: int) -> str:
    pad = " " * indent
    return f"{pad}{label:<{42 - indent}}: {value}\n"


def _text(state: dict[str, Any], gpus: list[dict[str, Any]], display: set[str]) -> str:
    out = ["\n==============NVSMI LOG==============\n\n", _row("Timestamp", time.strftime("%a %b %d %H:%M:%S %Y"), 0),
           _row("Driver Version", state.get("driverVersion"), 0), _row("CUDA Version", state.get("cudaVersion"), 0),
           "\n", _row("Attached GPUs", len(state.get("gpus") or []), 0)]
    for g in gpus:
        out.append(f"GPU {g['busId']}\n")
        if display != {"SUPPORTED_CLOCKS"}:
            p = g["power"]
            c = g["clocks"]
            out += [
                _row("Product Name", g["name"], 4),
                _row("Product Architecture", _arch_name(g), 4),
                _row("Persistence Mode", g.get("persistenceMode", "Enabled"), 4),
                "    MIG Mode\n", _row("Current", _mig_mode(g), 8),
                _row("Pending", _mig_mode(g), 8),
                _row("Serial Number", g.get("serial", ""), 4), _row("GPU UUID", g["uuid"], 4),
                _row("Minor Number", g.get("minorNumber", g["index"]), 4),
                "    PCI\n", _row("Bus Id", g["busId"], 8),
                _row("Performance State", g.get("pstate", "P0"), 4),
                "    GPU Power Readings\n",
                _row("Average Power Draw", _average_draw(g), 8),
                _row("Instant Power Draw", _xml_tok(g, "power.draw", _w(p["drawMw"])), 8),
                _row("Current Power Limit", _xml_tok(g, "enforced.power.limit", _w(p["enforcedLimitMw"])), 8),
                _row("Requested Power Limit", _xml_tok(g, "power.limit", _w(p["limitMw"])), 8),
                _row("Default Power Limit", _xml_tok(g, "power.default_limit", _w(p["defaultLimitMw"])), 8),
                _row("Min Power Limit", _xml_tok(g, "power.min_limit", _w(p["minLimitMw"])), 8),
                _row("Max Power Limit", _xml_tok(g, "power.max_limit", _w(p["maxLimitMw"])), 8),
                "    Clocks\n", _row("Graphics", f"{c['graphicsMhz']} MHz", 8), _row("SM", f"{c['smMhz']} MHz", 8),
                _row("Memory", f"{c['memoryMhz']} MHz", 8),
                "    Max Clocks\n", _row("Graphics", f"{c['graphicsMaxMhz']} MHz", 8),
                _row("SM", f"{c['smMaxMhz']} MHz", 8), _row("Memory", f"{c['memoryMaxMhz']} MHz", 8),
                "    Temperature\n", _row("GPU Current Temp", f"{g.get('temperatureC', 0)} C", 8),
            ]
        if not display or "SUPPORTED_CLOCKS" in display:
            out.append("    Supported Clocks\n")
            sup = _supported(g)
            if not sup:
                out[-1] = _row("Supported Clocks", "N/A", 4)
            for mem, graphics in sup:
                out.append(_row("Memory", f"{mem} MHz", 8))
                out += [_row("Graphics", f"{x} MHz", 12) for x in graphics]
        out.append("\n")
    return "".join(out)


def _summary(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    lines = [time.strftime("%a %b %d %H:%M:%S %Y"),
             "+-----------------------------------------------------------------------------------------+",
             f"| NVIDIA-SMI {state.get('driverVersion')}    Driver Version: {state.get('driverVersion')}    "
             f"CUDA Version: {state.get('cudaVersion')}     |",
             "|-----------------------------------------+------------------------+----------------------+"]
    for g in gpus:
        p = g["power"]
        lines.append(f"| {g['index']:>3}  {g['name'][:28]:<28} {g.get('persistenceMode', 'On')[:3]:>3} | "
                     f"{g['busId']:>16} Off | {p['drawMw'] / 1000:>5.0f}W / {p['enforcedLimitMw'] / 1000:>4.0f}W |")
    lines.append("+-----------------------------------------------------------------------------------------+")
    return "\n".join(lines) + "\n"
