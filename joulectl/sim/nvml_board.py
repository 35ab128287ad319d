"""The initial ``state/nvml.json`` of an NVIDIA node, from its profile and mock-NVML boards.

Board fields (the mock-NVML seed's format) and the extensions this emulator reads from a board's
``power`` block, each a fact real drivers show:

- ``platform_limit_mw``: a limiter outside the host (out-of-band, cloud platform) holds the
  enforced limit at most this (a real H100 host: ``-q -d POWER`` Current 500.00 W, Requested
  700.00 W). The enforced limit is ``min(requested, platform)``.
- ``settable_in_scope: false``: the host may not set the limit; drivers from 535 on answer ``-pl``
  with "Changing power management limit is not supported in current scope for GPU: <bus id>."
- ``average_draw: false``: the board reports instant draw only (GA100 and older: NVML's power
  usage is instantaneous there), so nvidia-smi prints ``average_power_draw`` ``N/A``.

``boot`` keeps what the profile started the GPU with (limit, locks, application clocks):
``nvidia-smi -r`` goes back to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joulectl.sim.profiles import Profile

#: mock-NVML architecture names -> the one key per architecture the fake tools use.
ARCH_ALIASES = {"ada_lovelace": "ada", "ada lovelace": "ada"}


def architecture_key(name: Any) -> str:
    """A board's architecture as one key: case and whitespace ignored, ``ada_lovelace`` -> ``ada``
    (the mock-NVML seed accepts it as a spelling of ``ada``)."""
    text = str(name or "unknown").strip().lower()
    return ARCH_ALIASES.get(text, text)


def smi_bus_id(bus_id: str) -> str:
    """``0008:01:00.0`` -> ``00000008:01:00.0``: the bus id as nvidia-smi and NVML print it."""
    text = str(bus_id).strip().upper()
    if text.count(":") == 1:
        text = "0000:" + text
    domain, rest = text.split(":", 1)
    return f"{domain.rjust(8, '0')}:{rest}"


def enforced_mw(power: dict[str, Any]) -> int:
    """The limit in force: the requested one, held below by the platform limit when there is one."""
    limit = int(power.get("limitMw", power.get("defaultLimitMw", 0)))
    platform = power.get("platformLimitMw")
    return min(limit, int(platform)) if platform is not None else limit


def _mhz_list(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The supported clocks, memory clocks and each one's graphics clocks highest first."""
    sc = (board.get("supported_clocks") or {}).get("memory_clocks") or []
    table = [{"memoryMhz": int(m["freq_mhz"]),
              "graphicsMhz": sorted((int(x) for x in m.get("graphics_clocks") or []), reverse=True)} for m in sc]
    return sorted(table, key=lambda e: -int(e["memoryMhz"]))


def _lock(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {"minMhz": int(value["min_mhz"]), "maxMhz": int(value["max_mhz"])}


def nvml_document(prof: Profile) -> dict[str, Any]:
    """The initial ``state/nvml.json`` of an NVIDIA profile (limits mW, clocks MHz, energy mJ)."""
    g = prof.gpus
    system = prof.board_system
    exposure = str(g.get("exposure", "whole"))
    mig_on = exposure.startswith("mig")
    pm = g.get("persistenceMode")
    gpus = []
    for i, b in enumerate(prof.boards):
        p = b.get("power") or {}
        c = b.get("clocks") or {}
        mem = b.get("memory") or {}
        cc = b.get("compute_capability") or {}
        mig_cfg = g.get("mig") or {}
        raw_mig = b.get("mig")
        board_mig: dict[str, Any] = raw_mig if isinstance(raw_mig, dict) else {}
        # The board says whether it has MIG (an L40S or T4 has none, whatever the profile says).
        capable = bool(board_mig["capable"]) if "capable" in board_mig else bool(mig_cfg.get("capable", False))
        persistence = pm if pm else str(b.get("persistence_mode", "enabled"))
        mig_devices: list[dict[str, Any]] = []
        if capable and exposure == "mig-single":
            mig_devices = [{"profile": mig_cfg.get("single")} for _ in range(int((mig_cfg.get("profiles") or {}).get(
                mig_cfg.get("single"), 1)))]
        elif capable and exposure == "mig-mixed":
            for name, n in (mig_cfg.get("mixed") or {}).items():
                mig_devices += [{"profile": name} for _ in range(int(n))]
        default_mw = int(p.get("default_limit_mw", p.get("max_limit_mw", 0)))
        limit_mw = int(p.get("enforced_limit_mw", default_mw))
        power: dict[str, Any] = {
            "managementSupported": bool(p.get("management_supported", True)),
            "limitMw": limit_mw,
            "defaultLimitMw": default_mw,
            "minLimitMw": int(p.get("min_limit_mw", 0)),
            "maxLimitMw": int(p.get("max_limit_mw", default_mw)),
            "drawMw": int(p.get("current_draw_mw", 0)),
            "energyMj": 0,
            "platformLimitMw": int(p["platform_limit_mw"]) if p.get("platform_limit_mw") is not None else None,
            "settableInScope": bool(p.get("settable_in_scope", True)),
            "averageDraw": bool(p.get("average_draw", True)),
        }
        power["enforcedLimitMw"] = enforced_mw(power)
        clocks = {
            "graphicsMhz": int(c.get("graphics_current", 0)),
            "smMhz": int(c.get("sm_current", c.get("graphics_current", 0))),
            "memoryMhz": int(c.get("memory_current", 0)),
            "videoMhz": int(c.get("video_current", 0)),
            "graphicsMaxMhz": int(c.get("graphics_max", 0)),
            "smMaxMhz": int(c.get("sm_max", c.get("graphics_max", 0))),
            "memoryMaxMhz": int(c.get("memory_max", 0)),
            "videoMaxMhz": int(c.get("video_max", 0)),
            "graphicsAppMhz": int(c.get("graphics_app", 0)),
            "memoryAppMhz": int(c.get("memory_app", 0)),
            "lockedGraphics": _lock(c.get("locked_graphics")),
            "lockedMemory": _lock(c.get("locked_memory")),
        }
        gpus.append({
            "index": int(b["index"]),
            "minorNumber": int(b.get("minor_number", i)),
            "busId": smi_bus_id(str(b["pci"]["bus_id"])),
            "uuid": str(b["uuid"]),
            "serial": str(b.get("serial", "")),
            "name": str(b.get("name", g.get("model", "NVIDIA GPU"))),
            "brand": str(b.get("brand", "nvidia")),
            "architecture": architecture_key(b.get("architecture")),
            "computeCapability": f"{cc.get('major', 0)}.{cc.get('minor', 0)}",
            "vbiosVersion": str(b.get("vbios_version", "")),
            "boardPartNumber": str(b.get("board_part_number", "")),
            "pciDeviceId": f"0x{int((b.get('pci') or {}).get('device_id', 0)):08X}",
            "memoryTotalMiB": int(mem.get("total_bytes", 0)) >> 20,
            "memoryReservedMiB": int(mem.get("reserved_bytes", 0)) >> 20,
            "power": power,
            "pstate": str(b.get("performance_state", p.get("power_state", "P0"))),
            "clocks": clocks,
            "boot": {
                "limitMw": limit_mw,
                "lockedGraphics": clocks["lockedGraphics"],
                "lockedMemory": clocks["lockedMemory"],
                "graphicsAppMhz": int(c.get("graphics_app_default", c.get("graphics_app", 0))),
                "memoryAppMhz": int(c.get("memory_app_default", c.get("memory_app", 0))),
            },
            "supportedClocks": _mhz_list(b),
            "smMaxByMem": {str(k): int(v) for k, v in ((g.get("clocks") or {}).get("supported") or {}).get(
                "smMaxByMem", {}).items()},
            "memoryLockSupported": bool((g.get("clocks") or {}).get("memoryLockSupported", True)),
            "persistenceMode": "Enabled" if persistence.lower() == "enabled" else "Disabled",
            "fieldSupport": {str(k): str(v) for k, v in (g.get("fieldSupport") or {}).items()},
            "mig": {
                "capable": capable,
                "mode": ("Enabled" if mig_on else "Disabled") if capable else "N/A",
                "devices": mig_devices,
            },
            "temperatureC": int((b.get("thermal") or {}).get("temperature_gpu_c", 30)),
            "temperatureMemoryC": (b.get("thermal") or {}).get("temperature_memory_c"),
            "utilizationGpu": 0,
            "utilizationMemory": 0,
            "computeMode": str(b.get("compute_mode", "default")),
        })
    return {
        "version": 1,
        "driverVersion": str(system.get("driver_version", "550.163.01")),
        "cudaVersion": str(system.get("cuda_version", "12.4")),
        "nvmlVersion": str(system.get("nvml_version", "")),
        "gpus": gpus,
    }
