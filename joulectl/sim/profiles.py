"""Hardware profiles of the emulator: data files, ``extends``, overrides and mock-NVML boards.

A profile is a YAML data file (``joulectl/sim/profiles/<name>.yaml``, or one of a
``--profiles-dir`` / ``SIM_PROFILES_DIR`` directory) describing one node's hardware: its CPUs
(``cpu``: identity, topology, cpufreq, powercap zones, physics) and optionally its GPUs
(``gpus``). Every value names its source in ``sources`` (a map of dotted paths, each covering
everything below it). A GPU profile ``extends`` a CPU host profile: mappings merge key by key,
lists and scalars replace. NVIDIA boards come from a mock-NVML YAML (``gpus.nvmlConfig``, a
path relative to the file that names it): ``device_defaults`` merged field by field into each
``devices[]`` entry (``clocks_throttle_reasons`` replaced wholesale), as the mock-NVML seed says.

The schema is :data:`SCHEMA`; it also decides which override keys a cluster spec may use.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from joulectl.errors import InputError

BUILTIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")
BOARDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boards")
PROFILE_API_VERSION = "sim.joulie.io/v1alpha1"
PROFILE_KIND = "HardwareProfile"

NUM = (int, float)
_MAP = "map"  # a mapping of str to scalar
_ANY = "any"

_CONSTRAINT: dict[str, Any] = {
    "name": str,  # long_term | short_term | peak_power
    "limitW": NUM,
    "maxW": NUM,
    "minW": NUM,
    "timeWindowUs": int,
    "maxTimeWindowUs": int,
    "locked": bool,
    "limitBits": int,
}
_ZONE: dict[str, Any] = {
    "name": str,  # package | dram | psys | core | uncore
    "perSocket": bool,
    "energyOnly": bool,
    "enabled": bool,
    "constraints": [_CONSTRAINT],
    "children": [
        {
            "name": str,
            "energyOnly": bool,
            "enabled": bool,
            "constraints": [_CONSTRAINT],
        }
    ],
}

#: Every key a profile (and a pool's ``overrides``) may hold.
SCHEMA: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "name": str,
    "description": str,
    "extends": str,
    "sources": _MAP,
    "labels": _MAP,
    "node": {"kernel": str, "pods": int, "memoryGiB": int},
    "cpu": {
        "vendor": str,
        "model": str,
        "family": int,
        "modelId": int,
        "stepping": int,
        "microcode": str,
        "sockets": int,
        "coresPerSocket": int,
        "threadsPerCore": int,
        "cacheKB": int,
        "virtual": bool,
        "flags": [str],
        "catalogKey": str,
        "dataFabricPciDevice": str,
        "cpuidle": {
            "driver": str,
            "governor": str,
            "governors": [str],
            "states": [{"name": str, "desc": str, "latencyUs": int, "residencyUs": int}],
        },
        "cpufreq": {
            "driver": str,  # intel_pstate | intel_cpufreq | amd-pstate-epp | acpi-cpufreq | none
            "hwp": bool,
            "governors": [str],
            "governor": str,
            "eppAvailable": [str],
            "epp": str,
            "minKHz": int,
            "baseKHz": int,
            "maxKHz": int,
            "turboMaxKHz": int,
            "turbo": bool,
            "transitionLatencyNs": int,
        },
        "powercap": {
            "controlType": str,
            "interface": str,  # msr | tpmi
            "maxEnergyRangeUJ": int,
            "powerUnitUW": int,
            "zones": [_ZONE],
        },
        "physics": {"model": str, "idlePkgW": NUM, "maxPkgW": NUM, "catalogKey": str},
    },
    "gpus": {
        "vendor": str,
        "count": int,
        "model": str,
        "architecture": str,
        "pciDeviceId": str,
        "pciClass": str,
        "pciRevision": str,
        "pciSubsystem": str,
        "busIds": [str],
        "uuids": [str],
        "memoryMiB": int,
        "nvmlConfig": str,
        "power": {"minW": NUM, "maxW": NUM, "defaultW": NUM, "capW": NUM},
        "pinnedCapW": NUM,
        "secondaryDies": bool,
        "persistenceMode": str,
        "fieldSupport": _MAP,
        "exposure": str,
        "mig": {"capable": bool, "profiles": _MAP, "single": str, "mixed": _MAP},
        "timeslice": {"replicas": int},
        "clocks": {
            "supported": {"smMaxByMem": _MAP},
            "memoryLockSupported": bool,
        },
        "physics": {"idleW": NUM, "maxW": NUM},
        "temperatureC": NUM,
        "amd": {
            "marketName": str,
            "sku": str,
            "gfxVersion": str,
            "perfLevel": str,
            "sclkMhz": [int],
            "partition": str,
            "availablePartitions": str,
            "memoryPartition": str,
            "unprivilegedSetIsNoop": bool,
        },
        "intel": {
            "driver": str,  # i915 | xe
            "ratedMaxW": NUM,
            "clampMinW": NUM,
            "clampMaxW": NUM,
            "product": str,
            "family": str,
            "gt": {"rp0MHz": NUM, "rp1MHz": NUM, "rpnMHz": NUM},
        },
    },
}

EXPOSURES = ("whole", "mig-single", "mig-mixed", "timeslice-rename", "timeslice-norename", "dra")
GPU_VENDORS = ("nvidia", "amd", "intel")
#: limitBits defaults: the MSR interface's power-limit field widths (emulate-mode seed).
DEFAULT_LIMIT_BITS = {"long_term": 15, "short_term": 15, "peak_power": 13}
PSYS_LIMIT_BITS = 17
MAX_GPUS = 64


@dataclass
class Profile:
    """A resolved hardware profile: ``extends`` applied, boards loaded, validated.

    ``data`` is the merged profile document (camelCase keys as in the YAML); ``boards`` the
    merged mock-NVML devices of an NVIDIA profile, one mapping per GPU in index order.
    """

    name: str
    data: dict[str, Any]
    sources: dict[str, str]
    file: str
    chain: list[str] = field(default_factory=list)
    boards: list[dict[str, Any]] = field(default_factory=list)
    board_system: dict[str, Any] = field(default_factory=dict)
    builtin: bool = True
    _hash: str | None = field(default=None, repr=False, compare=False)

    @property
    def cpu(self) -> dict[str, Any]:
        cpu: dict[str, Any] = self.data.get("cpu", {})
        return cpu

    @property
    def gpus(self) -> dict[str, Any]:
        gpus: dict[str, Any] = self.data.get("gpus") or {}
        return gpus

    @property
    def gpu_vendor(self) -> str | None:
        return self.gpus.get("vendor") if self.gpus.get("count", 0) else None

    @property
    def gpu_count(self) -> int:
        return int(self.gpus.get("count", 0) or 0)

    @property
    def logical_cpus(self) -> int:
        c = self.cpu
        return int(c["sockets"]) * int(c["coresPerSocket"]) * int(c.get("threadsPerCore", 1))

    def profile_hash(self) -> str:
        """A stable hash of the resolved values (boards included): what a tree was rendered from.

        Values, never paths: the board file's path (``gpus.nvmlConfig``, absolute once resolved)
        differs between two installs of joulectl and across an upgrade that moves the package, while
        the board's values are hashed through ``boards``; so a tree rendered by one install is
        resumed by another."""
        if self._hash is not None:
            return self._hash
        data = self.data
        if isinstance(data.get("gpus"), dict) and "nvmlConfig" in data["gpus"]:
            data = {**data, "gpus": {k: v for k, v in data["gpus"].items() if k != "nvmlConfig"}}
        doc = {"data": data, "boards": self.boards, "system": self.board_system}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
        self._hash = hashlib.sha256(text.encode()).hexdigest()[:16]
        return self._hash

    def with_overrides(self, overrides: dict[str, Any], *, file: str, field_path: str) -> Profile:
        """A copy with a pool's ``overrides`` merged in (validated against :data:`SCHEMA`)."""
        if not overrides:
            return self
        check_schema(overrides, SCHEMA, field_path, file, allow_top={"cpu", "gpus", "labels", "node"})
        data = deep_merge(self.data, overrides)
        base_dir = os.path.dirname(os.path.abspath(file)) if file not in ("-", "<stdin>") else os.getcwd()
        boards, system = self.boards, self.board_system
        gpus_over = overrides.get("gpus") or {}
        if "nvmlConfig" in gpus_over:
            path = gpus_over["nvmlConfig"]
            resolved = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
            data["gpus"]["nvmlConfig"] = resolved
            for derived in ("model", "memoryMiB", "count"):  # re-derived from the new board file
                if derived not in gpus_over:
                    data["gpus"].pop(derived, None)
            boards, system = load_board(resolved, label=f"{file}: {field_path}.gpus.nvmlConfig")
        prof = Profile(
            name=self.name,
            data=data,
            sources=self.sources,
            file=self.file,
            chain=self.chain,
            boards=copy.deepcopy(boards),
            board_system=system,
            builtin=self.builtin,
        )
        _finish(prof, label=f"{file}: {field_path}")
        return prof


# -- generic helpers --------------------------------------------------------------------------


def deep_merge(
    base: dict[str, Any], over: dict[str, Any], *, wholesale: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``over`` merged into a deep copy of ``base``: mappings key by key, everything else replaced.

    Keys in ``wholesale`` replace the base mapping instead of merging into it.
    """
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in wholesale:
            out[key] = deep_merge(out[key], value, wholesale=wholesale)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _type_name(spec: Any) -> str:
    if spec is NUM:
        return "a number"
    if spec is int:
        return "an integer"
    if spec is bool:
        return "true or false"
    if spec is str:
        return "a string"
    if spec == _MAP:
        return "a mapping"
    if isinstance(spec, list):
        return "a list"
    if isinstance(spec, dict):
        return "a mapping"
    return "a value"


def check_schema(
    value: Any, spec: Any, path: str, file: str, *, allow_top: set[str] | None = None
) -> None:
    """Raise :class:`InputError` naming ``file`` and the YAML ``path`` when ``value`` breaks ``spec``."""
    if spec == _ANY:
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise InputError(f"must be a mapping, found {type(value).__name__}", file=file, field=path)
        for key, sub in value.items():
            if not isinstance(key, str):
                raise InputError(f"key {key!r} must be a string", file=file, field=path)
            if key not in spec or (allow_top is not None and key not in allow_top):
                allowed = sorted(allow_top if allow_top is not None else spec)
                raise InputError(
                    f"unknown key {key!r} (allowed: {', '.join(allowed)})", file=file, field=f"{path}.{key}"
                )
            check_schema(sub, spec[key], f"{path}.{key}", file)
        return
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise InputError(f"must be a list, found {type(value).__name__}", file=file, field=path)
        for i, item in enumerate(value):
            check_schema(item, spec[0], f"{path}[{i}]", file)
        return
    if spec == _MAP:
        if not isinstance(value, dict):
            raise InputError(f"must be a mapping, found {type(value).__name__}", file=file, field=path)
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                raise InputError("must be a scalar", file=file, field=f"{path}.{k}")
        return
    ok: bool
    if spec is NUM:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif spec is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, spec)
    if not ok:
        raise InputError(f"must be {_type_name(spec)}, found {value!r}", file=file, field=path)


def leaf_paths(value: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every scalar leaf (list indices dropped)."""
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            out.extend(leaf_paths(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        if value and all(isinstance(v, (dict, list)) for v in value):
            out = []
            for v in value:
                out.extend(leaf_paths(v, prefix))
            return sorted(set(out))
        return [prefix]
    return [prefix]


def source_of(sources: dict[str, str], path: str) -> str | None:
    """The source covering ``path``: the longest ``sources`` key that is ``path`` or a prefix of it."""
    best: str | None = None
    for key in sources:
        if (path == key or path.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    return sources[best] if best is not None else None


# -- loading ----------------------------------------------------------------------------------


def _read_yaml(path: str, label: str | None = None) -> Any:
    from joulectl.yamlio import load_one

    try:
        return load_one(path, what="profile")
    except InputError as e:
        if label:
            raise InputError(e.problem, file=label if not e.file else e.file) from None
        raise


def _profile_files(profiles_dir: str | None) -> dict[str, tuple[str, bool]]:
    """``{name: (file, builtin)}``: builtin profiles, then local ones (a local file shadows)."""
    files: dict[str, tuple[str, bool]] = {}
    for entry in sorted(os.listdir(BUILTIN_DIR)):
        if entry.endswith((".yaml", ".yml")):
            files[entry.rsplit(".", 1)[0]] = (os.path.join(BUILTIN_DIR, entry), True)
    local = profiles_dir if profiles_dir is not None else os.environ.get("SIM_PROFILES_DIR") or None
    if local:
        if not os.path.isdir(local):
            raise InputError("profiles directory not found", file=local, field="--profiles-dir")
        for entry in sorted(os.listdir(local)):
            if entry.endswith((".yaml", ".yml")):
                files[entry.rsplit(".", 1)[0]] = (os.path.join(local, entry), False)
    return files


class ProfileSet:
    """The profiles available to a spec: builtin plus local, loaded and resolved on demand."""

    def __init__(self, profiles_dir: str | None = None) -> None:
        self.files = _profile_files(profiles_dir)
        self._raw: dict[str, dict[str, Any]] = {}
        self._resolved: dict[str, Profile] = {}

    def names(self) -> list[str]:
        return sorted(self.files)

    def _load_raw(self, name: str) -> dict[str, Any]:
        if name not in self._raw:
            file, _ = self.files[name]
            doc = _read_yaml(file)
            check_schema(doc, SCHEMA, "profile", file)
            if doc.get("kind", PROFILE_KIND) != PROFILE_KIND:
                raise InputError(f"kind must be {PROFILE_KIND}", file=file, field="kind")
            declared = doc.get("name", name)
            if declared != name:
                raise InputError(f"name {declared!r} differs from the file name {name!r}", file=file, field="name")
            if "nvmlConfig" in (doc.get("gpus") or {}):
                rel = doc["gpus"]["nvmlConfig"]
                doc["gpus"]["nvmlConfig"] = (
                    rel if os.path.isabs(rel) else os.path.normpath(os.path.join(os.path.dirname(file), rel))
                )
            self._raw[name] = doc
        return self._raw[name]

    def get(self, name: str) -> Profile:
        """The resolved profile ``name``; KeyError when there is none."""
        if name in self._resolved:
            return self._resolved[name]
        if name not in self.files:
            raise KeyError(name)
        chain: list[str] = []
        current: str | None = name
        docs: list[dict[str, Any]] = []
        while current is not None:
            if current in chain:
                raise InputError(
                    f"extends loop: {' -> '.join([*chain, current])}", file=self.files[name][0], field="extends"
                )
            if current not in self.files:
                file = self.files[chain[-1]][0]
                raise InputError(f"extends unknown profile {current!r}", file=file, field="extends")
            chain.append(current)
            doc = self._load_raw(current)
            docs.append(doc)
            current = doc.get("extends")
        data: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for doc in reversed(docs):
            body = {k: v for k, v in doc.items() if k not in ("sources", "extends", "apiVersion", "kind")}
            data = deep_merge(data, body)
            sources.update(doc.get("sources") or {})
        data["name"] = name
        file, builtin = self.files[name]
        prof = Profile(name=name, data=data, sources=sources, file=file, chain=chain, builtin=builtin)
        nvml = prof.gpus.get("nvmlConfig")
        if nvml:
            prof.boards, prof.board_system = load_board(nvml, label=f"{file}: gpus.nvmlConfig")
        _finish(prof, label=file)
        self._resolved[name] = prof
        return prof


@lru_cache(maxsize=32)
def _board_doc(path: str) -> str:
    from joulectl.yamlio import read_text

    return read_text(path, what="mock-NVML board file")


def load_board(path: str, *, label: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The devices of a mock-NVML YAML: ``device_defaults`` merged into each ``devices[]`` entry."""
    from joulectl.yamlio import parse_documents

    if not os.path.isfile(path):
        raise InputError(f"mock-NVML board file {path} not found", file=label.split(": ")[0],
                         field=label.split(": ", 1)[1] if ": " in label else None)
    docs = parse_documents(_board_doc(path), path)
    if not docs or not isinstance(docs[0], dict):
        raise InputError("expected a mapping", file=path)
    doc = docs[0]
    if "version" not in doc:
        raise InputError("version is required", file=path, field="version")
    system = doc.get("system") or {}
    if not isinstance(system, dict) or "driver_version" not in system:
        raise InputError("system.driver_version is required", file=path, field="system.driver_version")
    defaults = doc.get("device_defaults") or {}
    devices = doc.get("devices") or []
    if not isinstance(defaults, dict) or not isinstance(devices, list):
        raise InputError("device_defaults must be a mapping and devices a list", file=path)
    if not devices:
        raise InputError("a board file lists at least one device", file=path, field="devices")
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict) or not isinstance(dev.get("index"), int):
            raise InputError("each device needs an integer index", file=path, field=f"devices[{i}].index")
        if dev["index"] in seen:
            raise InputError(f"duplicate device index {dev['index']}", file=path, field=f"devices[{i}].index")
        seen.add(dev["index"])
        merged = deep_merge(defaults, dev, wholesale=frozenset({"clocks_throttle_reasons"}))
        merged.setdefault("minor_number", dev["index"])
        out.append(merged)
    out.sort(key=lambda d: int(d["index"]))
    for i, d in enumerate(out):
        _check_board_device(d, f"devices[{i}]", path)
    minors = [int(d["minor_number"]) for d in out]
    if len(set(minors)) != len(minors) or any(m < 0 or m > 254 for m in minors):
        raise InputError("minor numbers must be distinct and within 0-254", file=path, field="devices")
    for i, d in enumerate(out):
        for key in ("uuid",):
            if not d.get(key):
                raise InputError(f"{key} is required", file=path, field=f"devices[{i}].{key}")
        bus_id = (d.get("pci") or {}).get("bus_id")
        if not isinstance(bus_id, str) or not bus_id:
            raise InputError("pci.bus_id is required (a string)", file=path, field=f"devices[{i}].pci.bus_id")
    return out, dict(system)


#: Typed fields of a mock-NVML device that the renderer reads: section -> integer keys.
_BOARD_INT_FIELDS: dict[str, tuple[str, ...]] = {
    "pci": ("device_id", "subsystem_id"),
    "power": ("default_limit_mw", "enforced_limit_mw", "min_limit_mw", "max_limit_mw", "current_draw_mw"),
    "clocks": ("graphics_current", "graphics_max", "graphics_app", "sm_current", "sm_max", "memory_current",
               "memory_max", "memory_app", "video_current", "video_max"),
    "memory": ("total_bytes", "reserved_bytes", "free_bytes", "used_bytes"),
    "compute_capability": ("major", "minor"),
    "thermal": ("temperature_gpu_c", "temperature_memory_c"),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_board_device(d: dict[str, Any], path: str, file: str) -> None:
    """Type-check the fields of one merged mock-NVML device that rendering reads (exit 2, named)."""
    if not _is_int(d.get("minor_number")):
        raise InputError(f"must be an integer, found {d.get('minor_number')!r}", file=file,
                         field=f"{path}.minor_number")
    for section, keys in _BOARD_INT_FIELDS.items():
        value = d.get(section)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InputError(f"must be a mapping, found {type(value).__name__}", file=file, field=f"{path}.{section}")
        for key in keys:
            if key in value and value[key] is not None and not (_is_int(value[key]) and value[key] >= 0):
                raise InputError(f"must be a whole number >= 0, found {value[key]!r}", file=file,
                                 field=f"{path}.{section}.{key}")
    for lock in ("locked_graphics", "locked_memory"):
        value = (d.get("clocks") or {}).get(lock)
        if value is not None and not (isinstance(value, dict) and all(
                _is_int(value.get(k)) for k in ("min_mhz", "max_mhz"))):
            raise InputError("must be a mapping of integer min_mhz and max_mhz", file=file,
                             field=f"{path}.clocks.{lock}")
    sc = d.get("supported_clocks")
    if sc is not None:
        clocks = sc.get("memory_clocks") if isinstance(sc, dict) else None
        if not isinstance(clocks, list):
            raise InputError("must be a mapping with a memory_clocks list", file=file,
                             field=f"{path}.supported_clocks")
        for j, m in enumerate(clocks):
            where = f"{path}.supported_clocks.memory_clocks[{j}]"
            if not isinstance(m, dict) or not _is_int(m.get("freq_mhz")):
                raise InputError("must be a mapping with an integer freq_mhz", file=file, field=where)
            graphics = m.get("graphics_clocks") or []
            if not isinstance(graphics, list) or not all(_is_int(x) for x in graphics):
                raise InputError("must be a list of integers", file=file, field=f"{where}.graphics_clocks")
    for key in ("uuid", "name", "architecture"):
        if key in d and d[key] is not None and not isinstance(d[key], str):
            raise InputError(f"must be a string, found {d[key]!r}", file=file, field=f"{path}.{key}")


def _require(data: dict[str, Any], path: str, label: str) -> Any:
    cur: Any = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise InputError("is required", file=label, field=path)
        cur = cur[part]
    return cur


def _finish(prof: Profile, *, label: str) -> None:
    """Validate the merged profile and fill derived GPU fields (count, ids) from the boards."""
    d = prof.data
    for path in ("cpu.vendor", "cpu.model", "cpu.sockets", "cpu.coresPerSocket"):
        _require(d, path, label)
    for path, top in (("cpu.sockets", 16), ("cpu.coresPerSocket", 1024), ("cpu.threadsPerCore", 8)):
        value = int(_require(d, path, label)) if path != "cpu.threadsPerCore" else int(
            d["cpu"].get("threadsPerCore", 1))
        if not 1 <= value <= top:
            raise InputError(f"must be between 1 and {top}, found {value}", file=label, field=path)
    for i, zone in enumerate((d["cpu"].get("powercap") or {}).get("zones") or []):
        if zone.get("name") not in ("package", "dram", "psys", "core", "uncore"):
            raise InputError(
                f"unknown zone {zone.get('name')!r} (package, dram, psys, core, uncore)",
                file=label, field=f"cpu.powercap.zones[{i}].name",
            )
    phys = (d["cpu"].get("physics") or {}).get("model", "analytic")
    if phys not in ("analytic", "catalog-curve"):
        raise InputError(f"unknown physics model {phys!r} (analytic, catalog-curve)", file=label,
                         field="cpu.physics.model")
    g = d.get("gpus")
    if not g:
        return
    vendor = g.get("vendor")
    if vendor not in GPU_VENDORS:
        raise InputError(f"unknown GPU vendor {vendor!r} ({', '.join(GPU_VENDORS)})", file=label,
                         field="gpus.vendor")
    exposure = g.get("exposure", "whole")
    if exposure not in EXPOSURES:
        raise InputError(f"unknown exposure {exposure!r} ({', '.join(EXPOSURES)})", file=label,
                         field="gpus.exposure")
    if exposure.startswith("mig") and not (g.get("mig") or {}).get("capable"):
        raise InputError(f"exposure {exposure} needs a MIG-capable GPU", file=label, field="gpus.exposure")
    if exposure != "whole" and vendor != "nvidia" and exposure != "dra":
        raise InputError(f"exposure {exposure} is NVIDIA-only", file=label, field="gpus.exposure")
    pm = g.get("persistenceMode")
    if pm is not None and pm not in ("enabled", "disabled"):
        raise InputError("must be enabled or disabled", file=label, field="gpus.persistenceMode")
    if vendor == "nvidia":
        if not prof.boards:
            raise InputError("an NVIDIA profile needs gpus.nvmlConfig", file=label, field="gpus.nvmlConfig")
        count = int(g.get("count", len(prof.boards)))
        if count < 1:
            raise InputError(f"must be at least 1, found {count}", file=label, field="gpus.count")
        if count > len(prof.boards):
            raise InputError(
                f"count {count} exceeds the {len(prof.boards)} devices of the board file",
                file=label, field="gpus.count",
            )
        prof.boards = prof.boards[:count]
        g["count"] = count
        first = prof.boards[0]
        g.setdefault("model", first.get("name", "NVIDIA GPU"))
        g["architecture"] = str(first.get("architecture", g.get("architecture", "unknown"))).lower()
        g["busIds"] = [str(b["pci"]["bus_id"]).lower() for b in prof.boards]
        g["uuids"] = [str(b["uuid"]) for b in prof.boards]
        mem = (first.get("memory") or {}).get("total_bytes")
        if mem and "memoryMiB" not in g:
            g["memoryMiB"] = int(mem) // (1 << 20)
    else:
        count = int(_require(d, "gpus.count", label))
        if not 0 <= count <= MAX_GPUS:
            raise InputError(f"must be between 0 and {MAX_GPUS}, found {count}", file=label, field="gpus.count")
        bus = g.get("busIds") or []
        if len(bus) < count:
            raise InputError(f"needs {count} bus ids, found {len(bus)}", file=label, field="gpus.busIds")
        g["busIds"] = [str(b).lower() for b in bus[:count]]
        _require(d, "gpus.model", label)
        if vendor == "amd":
            _require(d, "gpus.power.maxW", label)
        if vendor == "intel":
            drv = (g.get("intel") or {}).get("driver", "i915")
            if drv not in ("i915", "xe"):
                raise InputError(f"unknown Intel driver {drv!r} (i915, xe)", file=label, field="gpus.intel.driver")
            _require(d, "gpus.intel.ratedMaxW", label)


def builtin_profile_names() -> list[str]:
    return sorted(e.rsplit(".", 1)[0] for e in os.listdir(BUILTIN_DIR) if e.endswith((".yaml", ".yml")))


def profile_summary(prof: Profile) -> dict[str, Any]:
    """One row of ``simulate profiles``: identity, what it renders, and the sources."""
    g = prof.gpus
    cpu = prof.cpu
    zones = [z["name"] for z in (cpu.get("powercap") or {}).get("zones") or []]
    return {
        "name": prof.name,
        "extends": prof.chain[1] if len(prof.chain) > 1 else None,
        "builtin": prof.builtin,
        "description": prof.data.get("description", ""),
        "cpu": {
            "model": cpu.get("model"),
            "sockets": cpu.get("sockets"),
            "threads": prof.logical_cpus,
            "driver": (cpu.get("cpufreq") or {}).get("driver", "none"),
            "powercapZones": zones,
            "virtual": bool(cpu.get("virtual")),
        },
        "gpu": (
            {
                "vendor": g.get("vendor"),
                "model": g.get("model"),
                "count": prof.gpu_count,
                "exposure": g.get("exposure", "whole"),
            }
            if prof.gpu_count
            else None
        ),
        "file": prof.file,
        "sources": dict(sorted(prof.sources.items())),
    }
