"""Fake ``rocm-smi`` and ``amd-smi`` over a node's amdgpu sysfs files (standard library only).

Both tools read and write the same files the kernel driver exposes (``power1_cap``,
``power_dpm_force_performance_level``) and apply the driver's rules: a value outside
``power1_cap_min``..``power1_cap_max`` is refused (the W7900's range is 241..241 W), a secondary
die refuses every cap with EINVAL, and the cap is kept in whole watts. The card list and identity
come from ``state/amd.json``, written at render time.

``HWEMU_UNPRIVILEGED=1``: ``rocm-smi --setperflevel`` prints nothing, exits 0 and changes nothing
on a profile with ``unprivilegedSetIsNoop``; otherwise the rocm-smi set commands print
"Permission denied" and exit 4; ``amd-smi set`` prints "Command requires elevation" and exits 4.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

PERF_LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
               "profile_peak", "perf_determinism")
_HEAD = "============================ ROCm System Management Interface ============================\n"
_FOOT = ("==========================================================================================\n"
         "================================== End of ROCm SMI Log ===================================\n")


def _out(text: str) -> None:
    sys.stdout.write(text)


def _unprivileged() -> bool:
    return os.environ.get("HWEMU_UNPRIVILEGED", "").strip().lower() in ("1", "true", "yes")


def _load(root: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(root, "state", "amd.json"), encoding="utf-8") as fh:
            doc: dict[str, Any] = json.load(fh)
        return doc
    except (OSError, ValueError):
        return None


def _read(root: str, rel: str) -> str:
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _read_int(root: str, rel: str) -> int:
    text = _read(root, rel)
    try:
        return int(text.split()[0]) if text else 0
    except ValueError:
        return 0


def _write(root: str, rel: str, value: str) -> None:
    fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _watts(uw: int) -> float:
    return uw / 1_000_000


def _fmt_w(w: float) -> str:
    return f"{int(w)}" if float(w).is_integer() else f"{w:.1f}"


def _cap_check(root: str, card: dict[str, Any], watts: float) -> str | None:
    """Why the driver refuses ``watts`` on this card, or None when it takes it."""
    h = card["hwmon"]
    if card.get("secondary"):
        return "EINVAL"
    lo = _watts(_read_int(root, f"{h}/power1_cap_min"))
    hi = _watts(_read_int(root, f"{h}/power1_cap_max"))
    if watts < lo:
        return f"min:{_fmt_w(lo)}:{_fmt_w(hi)}"
    if watts > hi:
        return f"max:{_fmt_w(lo)}:{_fmt_w(hi)}"
    return None


# -- rocm-smi --------------------------------------------------------------------------------------

_ROCM_FLAGS = {"--showproductname", "--showpowercap", "--showpower", "--showperflevel", "--json", "-h", "--help",
               "--showmaxpower", "--autorespond", "--showallinfo", "-a", "--showbus", "-i", "--showid"}
_ROCM_VALUED = {"--setpoweroverdrive", "--setperflevel", "-d", "--device"}


def _rocm_usage(bad: str) -> int:
    sys.stderr.write("usage: rocm-smi [-h] [-d DEVICE [DEVICE ...]] [--showproductname] [--showpowercap] "
                     "[--showpower] [--showperflevel] [--setpoweroverdrive WATTS] [--setperflevel LEVEL] [--json]\n")
    sys.stderr.write(f"rocm-smi: error: unrecognized arguments: {bad}\n")
    return 2


def run_rocm(root: str, args: list[str]) -> int:
    """Run ``rocm-smi ARGS`` against the node tree at ``root``."""
    flags: set[str] = set()
    values: dict[str, str] = {}
    devices: list[int] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if name in _ROCM_VALUED:
            if not eq:
                i += 1
                if i >= len(args):
                    return _rocm_usage(a)
                val = args[i]
            if name in ("-d", "--device"):
                try:
                    devices.append(int(val))
                except ValueError:
                    return _rocm_usage(a)
                while i + 1 < len(args) and args[i + 1].isdigit():
                    i += 1
                    devices.append(int(args[i]))
            else:
                values[name] = val
        elif a in _ROCM_FLAGS:
            flags.add(a)
        else:
            return _rocm_usage(a)
        i += 1
    if flags & {"-h", "--help"}:
        _out("usage: rocm-smi [-h] [-d DEVICE] [--showproductname] [--showpowercap] [--showpower] "
             "[--showperflevel] [--setpoweroverdrive WATTS] [--setperflevel LEVEL] [--json]\n")
        return 0
    doc = _load(root)
    if doc is None:
        _out("ERROR:root:Driver not initialized (amdgpu not found in modules)\n")
        return 1
    cards = [c for c in doc["cards"] if not devices or c["card"] in devices]
    if devices and len(cards) != len(set(devices)):
        _out(_HEAD + f"ERROR: GPU[{devices[0]}]\t: No such device\n" + _FOOT)
        return 2
    as_json = "--json" in flags
    if "--setpoweroverdrive" in values or "--setperflevel" in values:
        return _rocm_set(root, doc, cards, values, as_json)
    result: dict[str, dict[str, str]] = {}
    sections: list[str] = []
    for c in cards:
        key = f"card{c['card']}"
        entry = result.setdefault(key, {})
        h, dev = c["hwmon"], c["device"]
        if flags & {"--showproductname", "--showallinfo", "-a"}:
            entry.update({
                "Card Series": doc.get("marketName", ""), "Card Model": doc.get("deviceId", ""),
                "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": doc.get("sku", ""),
                "Subsystem ID": doc.get("deviceId", ""), "Device Rev": "0x00", "Node ID": str(c["card"] + 2),
                "GUID": str(10000 + c["card"]), "GFX Version": doc.get("gfxVersion", ""),
            })
        if flags & {"--showpowercap", "--showallinfo", "-a"}:
            entry["Max Graphics Package Power (W)"] = f"{_watts(_read_int(root, f'{h}/power1_cap')):.1f}"
        if "--showmaxpower" in flags:
            entry["Max Graphics Package Power (W)"] = f"{_watts(_read_int(root, f'{h}/power1_cap_max')):.1f}"
        if flags & {"--showpower", "--showallinfo", "-a"}:
            entry["Average Graphics Package Power (W)"] = f"{_watts(_read_int(root, f'{h}/power1_average')):.3f}"
        if flags & {"--showperflevel", "--showallinfo", "-a"}:
            entry["Performance Level"] = _read(root, f"{dev}/power_dpm_force_performance_level")
        if flags & {"--showbus", "-i", "--showid"}:
            entry["PCI Bus"] = c["busId"].upper()
    if as_json:
        _out(json.dumps(result) + "\n")
        return 0
    sections.append(_HEAD)
    for key, entry in result.items():
        n = key[4:]
        for k, v in entry.items():
            sections.append(f"GPU[{n}]\t\t: {k}: {v}\n")
    sections.append(_FOOT)
    _out("".join(sections))
    return 0


def _rocm_set(root: str, doc: dict[str, Any], cards: list[dict[str, Any]], values: dict[str, str],
              as_json: bool) -> int:
    lines: list[str] = []
    code = 0
    if "--setperflevel" in values:
        level = values["--setperflevel"].lower()
        if level not in PERF_LEVELS:
            _out(_HEAD + f"ERROR: Invalid performance level: {values['--setperflevel']}\n" + _FOOT)
            return 2
        if _unprivileged():
            if doc.get("unprivilegedSetIsNoop"):
                return 0
            _out(_HEAD + "".join(f"GPU[{c['card']}]\t\t: Unable to set Performance Level: Permission denied\n"
                                 for c in cards) + _FOOT)
            return 4
        lines.append("=============================== Set Performance Level ===============================\n")
        for c in cards:
            _write(root, f"{c['device']}/power_dpm_force_performance_level", level)
            lines.append(f"GPU[{c['card']}]\t\t: Performance level set to {level}\n")
    if "--setpoweroverdrive" in values:
        text = values["--setpoweroverdrive"]
        try:
            watts = float(text)
        except ValueError:
            _out(_HEAD + f"ERROR: Invalid power value: {text}\n" + _FOOT)
            return 2
        if _unprivileged():
            _out(_HEAD + "".join(f"GPU[{c['card']}]\t\t: Unable to set power to {_fmt_w(watts)}W: Permission denied\n"
                                 for c in cards) + _FOOT)
            return 4
        lines.append("================================ Set GPU Power OverDrive =================================\n")
        for c in cards:
            why = _cap_check(root, c, watts)
            n = c["card"]
            if why == "EINVAL":
                lines.append(f"GPU[{n}]\t\t: Unable to set power to {_fmt_w(watts)}W: Invalid argument "
                             f"(power limit can be set only through the primary die {c.get('primaryBusId')})\n")
            elif why is not None:
                side, lo, hi = why.split(":")
                bound = f"is below the minimum of {lo}W" if side == "min" else f"is above the maximum of {hi}W"
                lines.append(f"GPU[{n}]\t\t: Unable to set power to {_fmt_w(watts)}W: requested power {bound}\n")
            else:
                _write(root, f"{c['hwmon']}/power1_cap", str(int(watts) * 1_000_000))
                lines.append(f"GPU[{n}]\t\t: Successfully set power to: {_fmt_w(float(int(watts)))}W\n")
    _out(_HEAD + "".join(lines) + _FOOT)
    return code


# -- amd-smi ---------------------------------------------------------------------------------------

_LEVEL_ENUM = {lv: f"AMDSMI_DEV_PERF_LEVEL_{lv.upper()}" for lv in PERF_LEVELS}


def _amd_usage(msg: str) -> int:
    sys.stderr.write("usage: amd-smi [-h] {version,list,static,metric,set} ...\n")
    sys.stderr.write(f"amd-smi: error: {msg}\n")
    return 2


def run_amd(root: str, args: list[str]) -> int:
    """Run ``amd-smi ARGS`` against the node tree at ``root``."""
    if not args or args[0] in ("-h", "--help"):
        _out("usage: amd-smi [-h] {version,list,static,metric,set} ...\n")
        return 0
    cmd, rest = args[0], args[1:]
    if cmd not in ("version", "list", "static", "metric", "set"):
        return _amd_usage(f"argument command: invalid choice: '{cmd}'")
    flags: set[str] = set()
    values: dict[str, str] = {}
    gpus: list[int] = []
    i = 0
    valued = {"-g", "--gpu", "-o", "--power-cap", "-l", "--perf-level"}
    known = {"--json", "-p", "--power", "--limit", "-l", "--asic", "-a", "--bus", "-b", "--perf-level", "-P"}
    while i < len(rest):
        a = rest[i]
        name, eq, val = a.partition("=")
        if name in valued and not (cmd == "metric" and name in ("-l", "--perf-level")):
            if not eq:
                i += 1
                if i >= len(rest):
                    return _amd_usage(f"argument {name}: expected one argument")
                val = rest[i]
            if name in ("-g", "--gpu"):
                try:
                    gpus.append(int(val))
                except ValueError:
                    return _amd_usage(f"argument {name}: invalid int value: '{val}'")
            elif name == "-o":
                if val != "ppt0" or i + 1 >= len(rest):
                    return _amd_usage("argument -o/--power-cap: expected ppt0 WATTS")
                i += 1
                values["power-cap"] = rest[i]
            elif name == "--power-cap":
                values["power-cap"] = val
            else:
                values["perf-level"] = val
        elif a in known:
            flags.add(a)
        else:
            return _amd_usage(f"unrecognized arguments: {a}")
        i += 1
    doc = _load(root)
    if doc is None:
        _out("AMDSMI_STATUS_DRIVER_NOT_LOADED: amdgpu driver not loaded\n")
        return 1
    cards = [c for c in doc["cards"] if not gpus or c["card"] in gpus]
    if gpus and len(cards) != len(set(gpus)):
        _out(f"GPU index {gpus[0]} is out of range\n")
        return 2
    as_json = "--json" in flags
    if cmd == "version":
        _out("AMDSMI Tool: 24.6.3+emulated | AMDSMI Library version: 24.6.3 | ROCm version: 6.2.4\n")
        return 0
    if cmd == "set":
        return _amd_set(root, doc, cards, values)
    out: list[dict[str, Any]] = []
    for c in cards:
        h, dev = c["hwmon"], c["device"]
        entry: dict[str, Any] = {"gpu": c["card"]}
        if cmd == "list":
            uuid = f"{c['card']:02x}ff74a1-0000-1000-80f3-{c['busId'][5:7]}000000000"
            entry.update({"bdf": c["busId"], "uuid": uuid})
        elif cmd == "static":
            show_all = not (flags & {"--asic", "-a", "--bus", "-b", "--limit", "-l"})
            if show_all or flags & {"--asic", "-a"}:
                entry["asic"] = {"market_name": doc.get("marketName", ""), "vendor_id": "0x1002",
                                 "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                                 "device_id": doc.get("deviceId", ""), "rev_id": "0x00"}
            if show_all or flags & {"--bus", "-b"}:
                entry["bus"] = {"bdf": c["busId"]}
            if show_all or flags & {"--limit", "-l"}:
                entry["limit"] = {
                    "max_power": {"value": int(_watts(_read_int(root, f"{h}/power1_cap_max"))), "unit": "W"},
                    "min_power": {"value": int(_watts(_read_int(root, f"{h}/power1_cap_min"))), "unit": "W"},
                    "socket_power": {"value": int(_watts(_read_int(root, f"{h}/power1_cap"))), "unit": "W"},
                }
        else:  # metric
            show_all = not (flags & {"-p", "--power", "-l", "--perf-level", "-P"})
            if show_all or flags & {"-p", "--power"}:
                entry["power"] = {"socket_power": {"value": int(_watts(_read_int(root, f"{h}/power1_average"))),
                                                   "unit": "W"},
                                  "power_management": "ENABLED"}
            if show_all or flags & {"-l", "--perf-level", "-P"}:
                level = _read(root, f"{dev}/power_dpm_force_performance_level")
                entry["perf_level"] = _LEVEL_ENUM.get(level, level)
        out.append(entry)
    if as_json:
        _out(json.dumps(out, indent=4) + "\n")
    else:
        text = []
        for entry in out:
            text.append(f"GPU: {entry['gpu']}\n")
            for k, v in entry.items():
                if k == "gpu":
                    continue
                if isinstance(v, dict):
                    text.append(f"    {k.upper()}:\n")
                    for k2, v2 in v.items():
                        shown = f"{v2['value']} {v2['unit']}" if isinstance(v2, dict) else v2
                        text.append(f"        {k2.upper()}: {shown}\n")
                else:
                    text.append(f"    {k.upper()}: {v}\n")
            text.append("\n")
        _out("".join(text))
    return 0


def _amd_set(root: str, doc: dict[str, Any], cards: list[dict[str, Any]], values: dict[str, str]) -> int:
    if not values:
        return _amd_usage("set: no option given (-o ppt0 WATTS or -l LEVEL)")
    if _unprivileged():
        _out("Command requires elevation\n")
        return 4
    code = 0
    lines: list[str] = []
    if "perf-level" in values:
        level = values["perf-level"].lower()
        if level not in PERF_LEVELS:
            _out(f"Invalid performance level: {values['perf-level']}\n")
            return 2
        for c in cards:
            _write(root, f"{c['device']}/power_dpm_force_performance_level", level)
            lines.append(f"GPU: {c['card']}\n    PERF_LEVEL: Successfully set performance level {level.upper()}\n")
    if "power-cap" in values:
        try:
            watts = float(values["power-cap"])
        except ValueError:
            _out(f"Invalid power cap: {values['power-cap']}\n")
            return 2
        for c in cards:
            why = _cap_check(root, c, watts)
            if why == "EINVAL":
                lines.append(f"GPU: {c['card']}\n    POWERCAP: Unable to set power cap: AMDSMI_STATUS_INVAL "
                             f"(set it through the primary die {c.get('primaryBusId')})\n")
                code = 1
            elif why is not None:
                _, lo, hi = why.split(":")
                lines.append(f"Power cap must be between {lo}W and {hi}W\n")
                code = 1
            else:
                _write(root, f"{c['hwmon']}/power1_cap", str(int(watts) * 1_000_000))
                lines.append(f"GPU: {c['card']}\n    POWERCAP: Successfully set power cap to {int(watts)}W\n")
    _out("".join(lines))
    return code
