"""Fake ``nvidia-smi`` over a node's ``state/nvml.json`` (standard library only).

Answers ``-L``, ``-q`` (text), ``-q -x`` (XML in the newer ``<gpu_power_readings>`` schema),
``-q -d SUPPORTED_CLOCKS`` (honouring ``smMaxByMem``), ``--query-gpu=... --format=csv[,noheader]
[,nounits]``, and the set commands ``-pl``, ``-lgc``, ``-lmc``, ``-rgc``, ``-rmc``, ``-pm``, ``-r``
with ``-i`` (index, bus id in either spelling, UUID, or a comma list) and ``-eow``. ``-ac``, ``-rac``
and ``--auto-boost-default`` are always refused as not supported.

It prints what real drivers print: the architecture as nvidia-smi spells it (``Ada Lovelace``,
``Hopper``), MIG ``N/A`` on a board without MIG, the board's whole supported-clocks table highest
first per memory clock, ``average_power_draw`` ``N/A`` on a board with instant draw only, the
enforced limit (``current_power_limit``) held below the requested one by a board's platform limit,
"... is not supported in current scope for GPU: <bus id>." from driver 535 on for a board whose
limit the host may not set, the persistence-mode warning before a clock lock with persistence off,
only "All done." for ``-rgc``/``-rmc``. ``HWEMU_UNPRIVILEGED=1`` makes every set command fail with
the unprivileged wording of its kind (exit 4). ``-r`` puts the GPU back as the profile started it.

Exit codes follow nvidia-smi: 0 success (warnings included), 2 invalid argument, 3 a warning
with ``-eow`` (operation not available), 4 insufficient permissions, 6 no device matched.
"""

from __future__ import annotations

import posix
import sys

from joulectl.sim.tools.state import TYPE_CHECKING, nvml_transaction, read_nvml_state, read_nvml_state_then

# Started at every nvidia-smi call: no typing (and its re, collections, functools) at run time.
if TYPE_CHECKING:
    from typing import Any

OK, INVALID, NOT_AVAILABLE, NO_PERMISSION, NOT_FOUND = 0, 2, 3, 4, 6

# option name -> (canonical, takes a value)
_SHORT = {
    "-L": ("list", False), "-q": ("query", False), "-x": ("xml", False), "-d": ("display", True),
    "-i": ("id", True), "-pl": ("power-limit", True), "-lgc": ("lock-gpu-clocks", True),
    "-lmc": ("lock-memory-clocks", True), "-rgc": ("reset-gpu-clocks", False),
    "-rmc": ("reset-memory-clocks", False), "-pm": ("persistence-mode", True),
    "-eow": ("error-on-warning", False), "-h": ("help", False), "-ac": ("applications-clocks", True),
    "-rac": ("reset-applications-clocks", False), "-sc": ("scope", True), "-u": ("unit", False),
    "-r": ("gpu-reset", False),
}
_LONG = {
    "list-gpus": False, "query": False, "xml-format": False, "display": True, "id": True, "query-gpu": True,
    "format": True, "power-limit": True, "lock-gpu-clocks": True, "lock-memory-clocks": True,
    "reset-gpu-clocks": False, "reset-memory-clocks": False, "persistence-mode": True, "error-on-warning": False,
    "help": False, "applications-clocks": True, "reset-applications-clocks": False, "auto-boost-default": True,
    "scope": True, "query-supported-clocks": True, "gpu-reset": False,
}
_ALIAS = {"list-gpus": "list", "xml-format": "xml"}
_SETTERS = ("power-limit", "lock-gpu-clocks", "lock-memory-clocks", "reset-gpu-clocks", "reset-memory-clocks",
            "persistence-mode", "applications-clocks", "reset-applications-clocks", "auto-boost-default", "gpu-reset")
#: ``-d`` sections: SUPPORTED_CLOCKS alone prints only the clock table; any other selection prints the
#: report without it (the emulator does not cut the report finer than that).
_DISPLAYS = {"MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
             "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "FBC_STATS", "ROW_REMAPPER",
             "VOLTAGE", "RESET_STATUS"}
_ARCH_ORDER = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "rubin")


class Usage(Exception):
    pass


def _out(text: str) -> None:
    sys.stdout.write(text)


def _unprivileged() -> bool:
    return posix.environ.get(b"HWEMU_UNPRIVILEGED", b"").strip().lower() in (b"1", b"true", b"yes")


def _parse(args: list[str]) -> dict[str, str | bool]:
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            if name not in _LONG:
                raise Usage(a)
            key, takes = _ALIAS.get(name, name), _LONG[name]
        elif a.startswith("-"):
            name, eq, val = a.partition("=")
            if name not in _SHORT:
                raise Usage(a)
            key, takes = _SHORT[name]
        else:
            raise Usage(a)
        if takes:
            if not eq:
                i += 1
                if i >= len(args):
                    raise Usage(a)
                val = args[i]
            opts[key] = val
        elif eq:
            raise Usage(a)
        else:
            opts[key] = True
        i += 1
    return opts


def _norm_bus(text: str) -> str:
    t = text.strip().lower()
    if t.count(":") == 2:
        dom, rest = t.split(":", 1)
        return dom[-4:].rjust(4, "0") + ":" + rest
    if t.count(":") == 1:
        return "0000:" + t
    return t


def _select(gpus: list[dict[str, Any]], spec: str | bool | None) -> list[dict[str, Any]] | None:
    if spec is None or spec is True:
        return list(gpus)
    out: list[dict[str, Any]] = []
    for tok in str(spec).split(","):
        tok = tok.strip()
        found = None
        if tok.isdigit():
            found = next((g for g in gpus if int(g["index"]) == int(tok)), None)
        else:
            nb = _norm_bus(tok)
            found = next((g for g in gpus if _norm_bus(g["busId"]) == nb or g["uuid"].lower() == tok.lower()), None)
        if found is None:
            return None
        if found not in out:
            out.append(found)
    return out


def _w(mw: float) -> str:
    return f"{mw / 1000:.2f} W"


def _token(g: dict[str, Any], field: str) -> str | None:
    tok = (g.get("fieldSupport") or {}).get(field)
    return str(tok) if tok is not None else None


def _arch(g: dict[str, Any]) -> str:
    """The architecture key (``ada_lovelace`` and ``Ada Lovelace`` are ``ada``, as mock-NVML reads them)."""
    a = str(g.get("architecture", "")).strip().lower()
    return "ada" if a in ("ada_lovelace", "ada lovelace") else a


def _arch_at_least(g: dict[str, Any], arch: str) -> bool:
    a = _arch(g)
    if a not in _ARCH_ORDER:
        return False
    return _ARCH_ORDER.index(a) >= _ARCH_ORDER.index(arch)


# -- queries ----------------------------------------------------------------------------------------


def _fields(g: dict[str, Any], state: dict[str, Any], units: bool) -> dict[str, Any]:
    """The --query-gpu fields of a GPU: name -> a function of no argument giving its value (a
    field's token, when the GPU has one, is :func:`_token`'s)."""
    p = g["power"]
    c = g["clocks"]

    def w(mw: float) -> str:
        return f"{mw / 1000:.2f} W" if units else f"{mw / 1000:.2f}"

    def mhz(v: Any) -> str:
        return f"{int(v)} MHz" if units else f"{int(v)}"

    def mib(v: Any) -> str:
        return f"{int(v)} MiB" if units else f"{int(v)}"

    def pct(v: Any) -> str:
        return f"{int(v)} %" if units else f"{int(v)}"

    mig = g.get("mig") or {}
    table: dict[str, Any] = {
        "index": lambda: str(g["index"]),
        "name": lambda: g["name"],
        "gpu_name": lambda: g["name"],
        "uuid": lambda: g["uuid"],
        "gpu_uuid": lambda: g["uuid"],
        "serial": lambda: g.get("serial", ""),
        "pci.bus_id": lambda: g["busId"],
        "gpu_bus_id": lambda: g["busId"],
        "pci.device_id": lambda: g.get("pciDeviceId", ""),
        "driver_version": lambda: state.get("driverVersion", ""),
        "vbios_version": lambda: g.get("vbiosVersion", ""),
        "count": lambda: str(len(state.get("gpus") or [])),
        "compute_cap": lambda: g.get("computeCapability", ""),
        "pstate": lambda: g.get("pstate", "P0"),
        "persistence_mode": lambda: g.get("persistenceMode", "Enabled"),
        "compute_mode": lambda: str(g.get("computeMode", "default")).capitalize(),
        "power.management": lambda: "Supported" if p.get("managementSupported", True) else "[Not Supported]",
        "power.limit": lambda: w(p["limitMw"]),
        "enforced.power.limit": lambda: w(p["enforcedLimitMw"]),
        "power.default_limit": lambda: w(p["defaultLimitMw"]),
        "power.min_limit": lambda: w(p["minLimitMw"]),
        "power.max_limit": lambda: w(p["maxLimitMw"]),
        "power.draw": lambda: w(p["drawMw"]),
        "power.draw.average": lambda: w(p["drawMw"]) if p.get("averageDraw", True) else "[N/A]",
        "power.draw.instant": lambda: w(p["drawMw"]),
        "total_energy_consumption": lambda: f"{int(p.get('energyMj', 0))}{' mJ' if units else ''}",
        "clocks.gr": lambda: mhz(c["graphicsMhz"]),
        "clocks.current.graphics": lambda: mhz(c["graphicsMhz"]),
        "clocks.sm": lambda: mhz(c["smMhz"]),
        "clocks.current.sm": lambda: mhz(c["smMhz"]),
        "clocks.mem": lambda: mhz(c["memoryMhz"]),
        "clocks.current.memory": lambda: mhz(c["memoryMhz"]),
        "clocks.video": lambda: mhz(c.get("videoMhz", 0)),
        "clocks.current.video": lambda: mhz(c.get("videoMhz", 0)),
        "clocks.max.gr": lambda: mhz(c["graphicsMaxMhz"]),
        "clocks.max.graphics": lambda: mhz(c["graphicsMaxMhz"]),
        "clocks.max.sm": lambda: mhz(c["smMaxMhz"]),
        "clocks.max.mem": lambda: mhz(c["memoryMaxMhz"]),
        "clocks.max.memory": lambda: mhz(c["memoryMaxMhz"]),
        "clocks.applications.graphics": lambda: mhz(c.get("graphicsAppMhz", 0)),
        "clocks.applications.memory": lambda: mhz(c.get("memoryAppMhz", 0)),
        "mig.mode.current": lambda: mig.get("mode", "[N/A]") if mig.get("capable") else "[N/A]",
        "mig.mode.pending": lambda: mig.get("mode", "[N/A]") if mig.get("capable") else "[N/A]",
        "temperature.gpu": lambda: str(int(g.get("temperatureC", 0))),
        "temperature.memory": lambda: str(g["temperatureMemoryC"]) if g.get("temperatureMemoryC") is not None
        else "N/A",
        "utilization.gpu": lambda: pct(g.get("utilizationGpu", 0)),
        "utilization.memory": lambda: pct(g.get("utilizationMemory", 0)),
        "memory.total": lambda: mib(g.get("memoryTotalMiB", 0)),
        "memory.reserved": lambda: mib(g.get("memoryReservedMiB", 0)),
        "memory.used": lambda: mib(0),
        "memory.free": lambda: mib(int(g.get("memoryTotalMiB", 0)) - int(g.get("memoryReservedMiB", 0))),
        "fan.speed": lambda: "[N/A]",
    }
    return table


_UNITS = {"W": ("power.limit", "enforced.power.limit", "power.default_limit", "power.min_limit", "power.max_limit",
                "power.draw", "power.draw.average", "power.draw.instant"),
          "MHz": ("clocks.gr", "clocks.current.graphics", "clocks.sm", "clocks.current.sm", "clocks.mem",
                  "clocks.current.memory", "clocks.video", "clocks.current.video", "clocks.max.gr",
                  "clocks.max.graphics", "clocks.max.sm", "clocks.max.mem", "clocks.max.memory",
                  "clocks.applications.graphics", "clocks.applications.memory"),
          "MiB": ("memory.total", "memory.reserved", "memory.used", "memory.free"),
          "%": ("utilization.gpu", "utilization.memory", "fan.speed"),
          "mJ": ("total_energy_consumption",)}


def _header(name: str, units: bool) -> str:
    if units:
        for unit, names in _UNITS.items():
            if name in names:
                return f"{name} [{unit}]"
    return name


def _query_gpu(state: dict[str, Any], gpus: list[dict[str, Any]], fields_text: str, fmt: str | None) -> int:
    code, text = _query_gpu_text(state, gpus, fields_text, fmt)
    _out(text)
    return code


def _query_gpu_text(state: dict[str, Any], gpus: list[dict[str, Any]], fields_text: str,
                    fmt: str | None) -> tuple[int, str]:
    """(exit code, what ``--query-gpu`` prints)."""
    if fmt is None:
        return INVALID, "Option --format is required for --query-gpu. Please run 'nvidia-smi -h' for help.\n"
    parts = [p.strip() for p in fmt.split(",")]
    if not parts or parts[0] != "csv" or any(p not in ("csv", "noheader", "nounits") for p in parts):
        return INVALID, f'"{fmt}" is not a valid format. Please run \'nvidia-smi -h\' for help.\n'
    units = "nounits" not in parts
    names = [f.strip() for f in fields_text.split(",") if f.strip()]
    if not names:
        return INVALID, "No query fields given. Please run 'nvidia-smi --help-query-gpu' for help.\n"
    probe = gpus[0] if gpus else (state.get("gpus") or [{}])[0]
    known = _fields(probe, state, units) if probe else {}
    for name in names:
        if probe and name not in known:
            return INVALID, f'Field "{name}" is not a valid field to query.\n\n'
    lines = []
    if "noheader" not in parts:
        lines.append(", ".join(_header(n, units) for n in names))
    for g in gpus:
        table = _fields(g, state, units)
        values = []
        for name in names:
            tok = _token(g, name)
            values.append(tok if tok is not None else str(table[name]()))
        lines.append(", ".join(values))
    return OK, "".join(line + "\n" for line in lines)


# -- set commands ----------------------------------------------------------------------------------


def _range(text: str) -> tuple[int, int] | None:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    lo, hi = int(parts[0]), int(parts[1])
    return (lo, hi) if 0 < lo <= hi else None


def _apply_mem_lock(g: dict[str, Any], lo: int, hi: int) -> None:
    c = g["clocks"]
    mems = sorted({int(e["memoryMhz"]) for e in g.get("supportedClocks") or []}, reverse=True)
    pick = next((m for m in mems if lo <= m <= hi), None)
    if pick is None:
        pick = min(mems, key=lambda m: min(abs(m - lo), abs(m - hi))) if mems else c["memoryMhz"]
    c["memoryMhz"] = pick
    ceiling = (g.get("smMaxByMem") or {}).get(str(pick))
    if ceiling is not None:
        c["graphicsMhz"] = min(c["graphicsMhz"], int(ceiling))
        c["smMhz"] = min(c["smMhz"], int(ceiling))


#: What an unprivileged set command prints for its first GPU, then "Terminating early due to
#: previous errors." and exit 4: the wordings of real drivers (R470-R580 transcripts; -pm and -r
#: follow the -pl form: an assumption).
_UNPRIVILEGED = {
    "power-limit": "Failed to set power management limit for GPU {bus}: Insufficient Permissions",
    "lock-gpu-clocks": "The current user does not have permission to change clocks for GPU {bus}.",
    "lock-memory-clocks": "The current user does not have permission to change clocks for GPU {bus}.",
    "reset-gpu-clocks": "The current user does not have permission to change clocks for GPU {bus}.",
    "reset-memory-clocks": "The current user does not have permission to change clocks for GPU {bus}.",
    "persistence-mode": "Failed to set persistence mode for GPU {bus}: Insufficient Permissions",
    "gpu-reset": "Failed to reset GPU {bus}: Insufficient Permissions",
}

#: With persistence mode off a clock lock is lost when the driver unloads: real drivers say so first.
_PERSISTENCE_WARNING = ("Warning: persistence mode is disabled on device {bus}. See the Known Issues section of the "
                        "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
                        "information on how to enable persistence mode.")


def _driver_major(state: dict[str, Any]) -> int:
    head = str(state.get("driverVersion", "")).split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _power_warning(state: dict[str, Any], g: dict[str, Any]) -> str | None:
    """Why ``-pl`` is not supported on this GPU (None: it is): unsupported fields, or a limit the
    host may not set (drivers from 535 on say "in current scope")."""
    bus = g["busId"]
    toks = [_token(g, f) for f in ("power.limit", "power.min_limit", "power.max_limit", "power.management")]
    p = g["power"]
    if any(t is not None for t in toks) or not p.get("managementSupported", True):
        return f"Changing power management limit is not supported for GPU: {bus}."
    if not p.get("settableInScope", True):
        if _driver_major(state) >= 535:
            return f"Changing power management limit is not supported in current scope for GPU: {bus}."
        return f"Changing power management limit is not supported for GPU: {bus}."
    return None


def _enforced(p: dict[str, Any]) -> int:
    platform = p.get("platformLimitMw")
    return min(int(p["limitMw"]), int(platform)) if platform is not None else int(p["limitMw"])


def _reset(g: dict[str, Any]) -> None:
    """``nvidia-smi -r``: the GPU comes back as the profile started it (limit, locks, application
    clocks); every run-time write is gone."""
    boot = g.get("boot") or {}
    p = g["power"]
    c = g["clocks"]
    p["limitMw"] = int(boot.get("limitMw", p["defaultLimitMw"]))
    p["enforcedLimitMw"] = _enforced(p)
    c["lockedGraphics"] = boot.get("lockedGraphics")
    c["lockedMemory"] = boot.get("lockedMemory")
    c["graphicsAppMhz"] = int(boot.get("graphicsAppMhz", c.get("graphicsAppMhz", 0)))
    c["memoryAppMhz"] = int(boot.get("memoryAppMhz", c.get("memoryAppMhz", 0)))
    if c["lockedMemory"] is None:
        c["memoryMhz"] = c.get("memoryMaxMhz", c["memoryMhz"])


def _set(root: str, opts: dict[str, str | bool], action: str, ids: str | bool | None) -> int:
    eow = bool(opts.get("error-on-warning"))
    value = opts.get(action)
    try:
        state = read_nvml_state(root)
    except FileNotFoundError:
        _out("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
        return 9
    targets = _select(state.get("gpus") or [], ids)
    if not targets:
        _out("No devices were found\n")
        return NOT_FOUND
    # argument checks first (nothing written on a bad argument)
    watts: float | None = None
    rng: tuple[int, int] | None = None
    if action == "power-limit":
        try:
            watts = float(str(value))
        except ValueError:
            _out(f'Invalid power limit value "{value}". Please run \'nvidia-smi -h\' for help.\n')
            return INVALID
        if watts <= 0:
            _out(f'Invalid power limit value "{value}". Please run \'nvidia-smi -h\' for help.\n')
            return INVALID
    elif action in ("lock-gpu-clocks", "lock-memory-clocks"):
        rng = _range(str(value))
        if rng is None:
            _out(f'Invalid clock values "{value}". Please run \'nvidia-smi -h\' for help.\n')
            return INVALID
    elif action == "persistence-mode" and str(value) not in ("0", "1"):
        _out(f'Invalid persistence mode value "{value}". Please run \'nvidia-smi -h\' for help.\n')
        return INVALID
    if _unprivileged() and action in _UNPRIVILEGED:
        _out(_UNPRIVILEGED[action].format(bus=targets[0]["busId"]) + "\n")
        _out("Terminating early due to previous errors.\n")
        return NO_PERMISSION
    # warnings (fieldSupport tokens, unsupported operations), checked for every GPU before any write
    warnings: dict[str, str] = {}
    moving_on = True  # "Treating as warning and moving on." follows the warning
    for g in targets:
        bus = g["busId"]
        warning: str | None = None
        if action == "power-limit":
            warning = _power_warning(state, g)
            if warning is not None and "current scope" in warning:
                moving_on = False  # R535+: the scope answer, then "All done." (issue 22, item 1)
        elif action == "lock-gpu-clocks" and not _arch_at_least(g, "volta"):
            warning = f"Setting locked GPU clocks is not supported for GPU {bus}."
        elif action == "lock-memory-clocks" and (
            not _arch_at_least(g, "ampere") or not g.get("memoryLockSupported", True)
        ):
            warning = f"Setting locked memory clocks is not supported for GPU {bus}."
        elif action == "applications-clocks":
            warning = f"Setting applications clocks is not supported for GPU {bus}."
        elif action == "reset-applications-clocks":
            warning = f"Resetting applications clocks is not supported for GPU {bus}."
        elif action == "auto-boost-default":
            warning = f"Setting auto boosted clocks default state is not supported for GPU {bus}."
        if warning is not None:
            warnings[bus] = warning
    if warnings and eow:
        for g in targets:
            if g["busId"] in warnings:
                _out(warnings[g["busId"]] + "\n")
        _out("Terminating early due to previous errors.\n")
        return NOT_AVAILABLE
    code = OK
    with nvml_transaction(root, lambda written, st: _publish(root, written, st, _AFTER_SET)) as st:
        by_bus = {g["busId"]: g for g in st.get("gpus") or []}
        for target in targets:
            g = by_bus[target["busId"]]
            bus = g["busId"]
            if bus in warnings:
                _out(warnings[bus] + "\n")
                if moving_on:
                    _out("Treating as warning and moving on.\n")
                continue
            p = g["power"]
            c = g["clocks"]
            if action in ("lock-gpu-clocks", "lock-memory-clocks") and g.get("persistenceMode") != "Enabled":
                _out(_PERSISTENCE_WARNING.format(bus=bus) + "\n")
            if action == "power-limit" and watts is not None:
                mw = round(watts * 1000)
                if not p["minLimitMw"] <= mw <= p["maxLimitMw"]:
                    _out(f"Provided power limit {watts:.2f} W is not a valid power limit which should be between "
                         f"{p['minLimitMw'] / 1000:.2f} W and {p['maxLimitMw'] / 1000:.2f} W for GPU {bus}\n")
                    _out("Terminating early due to previous errors.\n")
                    code = INVALID
                    break
                before = p["limitMw"]
                p["limitMw"] = mw
                p["enforcedLimitMw"] = _enforced(p)
                _out(f"Power limit for GPU {bus} was set to {mw / 1000:.2f} W from {before / 1000:.2f} W.\n")
            elif action == "lock-gpu-clocks" and rng is not None:
                lo, hi = rng
                c["lockedGraphics"] = {"minMhz": lo, "maxMhz": hi}
                for k in ("graphicsMhz", "smMhz"):
                    c[k] = max(lo, min(hi, int(c[k])))
                ceiling = (g.get("smMaxByMem") or {}).get(str(c["memoryMhz"]))
                if ceiling is not None and c.get("lockedMemory"):
                    c["graphicsMhz"] = min(c["graphicsMhz"], int(ceiling))
                    c["smMhz"] = min(c["smMhz"], int(ceiling))
                _out(f'GPU clocks set to "(gpuClkMin {lo}, gpuClkMax {hi})" for GPU {bus}\n')
            elif action == "lock-memory-clocks" and rng is not None:
                lo, hi = rng
                c["lockedMemory"] = {"minMhz": lo, "maxMhz": hi}
                _apply_mem_lock(g, lo, hi)
                _out(f'Memory clocks set to "(memClkMin {lo}, memClkMax {hi})" for GPU {bus}\n')
            elif action == "reset-gpu-clocks":
                c["lockedGraphics"] = None  # real drivers print only "All done."
            elif action == "reset-memory-clocks":
                c["lockedMemory"] = None
                c["memoryMhz"] = c.get("memoryMaxMhz", c["memoryMhz"])
            elif action == "gpu-reset":
                _reset(g)
                _out(f"GPU {bus} was successfully reset.\n")
            elif action == "persistence-mode":
                on = str(value) == "1"
                g["persistenceMode"] = "Enabled" if on else "Disabled"
                _out(f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {bus}.\n")
    if code == OK:
        _out("All done.\n")
    return code


_HELP = """NVIDIA System Management Interface -- emulated by joulectl simulate

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -q,   --query               Display GPU or Unit info.
    -x,   --xml-format          Produce XML output.
    -d,   --display=            Display only selected information: SUPPORTED_CLOCKS, POWER, CLOCK, ...
    -i,   --id=                 Target a specific GPU (index, PCI bus id or UUID; comma list).
    --query-gpu=                Information about GPU (see --help-query-gpu).
    --format=                   csv[,noheader][,nounits]
    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    -pl,  --power-limit=        Specifies maximum power management limit in watts.
    -lgc, --lock-gpu-clocks=    Specifies <minGpuClock,maxGpuClock> clocks as a pair (MHz).
    -rgc, --reset-gpu-clocks    Resets the Gpu clocks to the default values.
    -lmc, --lock-memory-clocks= Specifies <minMemClock,maxMemClock> clocks as a pair (MHz).
    -rmc, --reset-memory-clocks Resets the memory clocks to the default values.
    -r,   --gpu-reset           Trigger reset of the GPU (clocks and limits back to default).
    -eow, --error-on-warning    Return a non-zero error for warnings.
"""


#: The answers prepared after a set command: the cap's inventory and readback, not the ``-q -x``
#: document (140 KB on eight H100s, a third of the tool's own work), which the next ``-q -x``
#: answered here prepares.
_AFTER_SET = ("inv", "rb")
#: Every prepared answer (:data:`joulectl.sim.tools.nvfast.FORMS`'s names).
_ALL_ANSWERS = ("qx", "inv", "rb")


def _answers(state: dict[str, Any], names: tuple[str, ...], plan: bool = True) -> dict[str, str] | None:
    """What ``-q -x``, the cap's inventory and its readback query print for ``state`` by
    :mod:`joulectl.sim.tools.nvfast` answer name, for ``names`` (None: a query would not exit 0)."""
    from joulectl.sim.tools.nvfast import FORMS

    gpus = state.get("gpus") or []
    answers = {}
    for name in names:
        if name == "qx":
            from joulectl.sim.tools.nvreport import _xml

            answers[name] = _xml(state, gpus, set())
            continue
        opts = _parse(list(FORMS[name]))  # the form's argument list, read as the tool reads it
        code, answers[name] = _query_gpu_text(state, gpus, str(opts["query-gpu"]), str(opts["format"]))
        if code != OK:
            return None
    if plan and "inv" in names:  # the shell's -pl beside the cap's inventory (valid while that answer is)
        from joulectl.sim.tools import nvplan
        from joulectl.sim.tools.state import dumps

        prepared = nvplan.plan(state, lambda g: _power_warning(state, g) is None, dumps,
                               lambda twin: _answers(twin, ("inv", "rb"), plan=False))
        if prepared is not None:
            answers.update(prepared)
    return answers


def _publish(root: str, state: dict[str, Any], st: Any,
             names: tuple[str, ...] = _ALL_ANSWERS) -> dict[str, str] | None:
    """The answers ``names`` for ``state``, prepared for the shell too (the lock held; ``st``: the
    fstat of the state file ``state`` was read from or written to). None on a state they cannot
    be made of (the ordinary path then answers, or fails, as it would without them)."""
    try:
        answers = _answers(state, names)
    except Exception:  # a hand-edited state the queries fail on: no answers, nothing prepared
        return None
    if answers is not None:
        from joulectl.sim.tools.nvfast import publish

        publish(root, answers, st)
    return answers


def run(root: str, args: list[str]) -> int:
    """Run ``nvidia-smi ARGS`` against the node tree at ``root``; returns the exit code."""
    from joulectl.sim.tools.nvfast import form_of

    form = form_of(args)
    if form is not None:
        # a query the shell answers when its prepared answer is valid: it was not, so answer it
        # here and prepare the answers for the next call
        try:
            answers = read_nvml_state_then(root, lambda state, st: _publish(root, state, st))
        except FileNotFoundError:
            answers = None
        if answers is not None:
            _out(answers[form])
            return OK
    try:
        opts = _parse(args)
    except Usage as e:
        _out(f'Invalid combination of input arguments: unknown option "{e.args[0]}". '
             "Please run 'nvidia-smi -h' for help.\n")
        return INVALID
    if opts.get("help"):
        _out(_HELP)
        return OK
    setters = [s for s in _SETTERS if s in opts]
    if len(setters) > 1:
        _out("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
        return INVALID
    if setters:
        return _set(root, opts, setters[0], opts.get("id"))
    try:
        state = read_nvml_state(root)
    except FileNotFoundError:
        _out("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")
        return 9
    gpus = _select(state.get("gpus") or [], opts.get("id"))
    if gpus is None or (not gpus and opts.get("id")):
        _out("No devices were found\n")
        return NOT_FOUND
    # the reports (nvreport) are loaded by a report only: not by a set command or a CSV query
    if opts.get("list"):
        from joulectl.sim.tools.nvreport import _list

        return _list(gpus)
    if "query-gpu" in opts:
        fmt = opts.get("format")
        return _query_gpu(state, gpus, str(opts["query-gpu"]), None if fmt is None else str(fmt))
    from joulectl.sim.tools import nvreport
    if opts.get("query"):
        display = {d.strip().upper() for d in str(opts.get("display", "")).split(",") if d.strip()}
        unknown = sorted(display - _DISPLAYS)
        if unknown:
            _out(f'Invalid display option "{unknown[0]}". Please run \'nvidia-smi -h\' for help.\n')
            return INVALID
        if opts.get("xml"):
            _out(nvreport._xml(state, gpus, display))
        else:
            _out(nvreport._text(state, gpus, display))
        return OK
    if opts.get("xml") or "display" in opts or "format" in opts:
        _out("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
        return INVALID
    _out(nvreport._summary(state, gpus))
    return OK
