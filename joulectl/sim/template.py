"""The layout of a node tree: what files, directories and symlinks a resolved profile gives.

:class:`Template` is the layout of one resolved profile relative to a node root, as flat lists
(directories, files with their bytes and modes, symlinks), plus the agent-writable files and the
counters the tick advances (``state/manifest.json``). :func:`template` builds it once per profile
hash from the CPU part (:mod:`joulectl.sim.cpu_tree`), the GPU part (:mod:`joulectl.sim.gpu_tree`)
and the ABI pieces real tools read (:mod:`joulectl.sim.sysfs_abi`); :mod:`joulectl.sim.tree`
writes it to disk (render) or checks it there (resume).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from joulectl.sim.clusterspec import SpecNode
from joulectl.sim.profiles import Profile

LAYOUT_VERSION = 2
R, W, E = 0o444, 0o644, 0o400  # read-only attribute, writable attribute, energy_uj (PLATYPUS)


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
    _manifest_tail: bytes | None = field(default=None, repr=False, compare=False)

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


def uw(w: float) -> int:
    from joulectl.units import w_to_uw

    return w_to_uw(w)


def range_text(n: int) -> str:
    return f"0-{n - 1}" if n > 1 else "0"

# -- the template --------------------------------------------------------------------------------

_TEMPLATES: dict[str, Template] = {}


def template(prof: Profile) -> Template:
    """The node layout of a resolved profile, computed once per profile hash."""
    key = prof.profile_hash()
    if key in _TEMPLATES:
        return _TEMPLATES[key]
    from joulectl.sim import cpu_tree, gpu_tree
    from joulectl.sim import sysfs_abi as abi

    t = Template()
    for d in ("bin", "dev", "dev/dri", "etc", "proc", "proc/sys", "proc/sys/kernel", "state", "state/.tmp", "sys",
              "sys/bus", "sys/bus/pci", "sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/class", "sys/class/drm",
              "sys/class/hwmon", "sys/devices", "sys/devices/system", "sys/devices/virtual"):
        t.d(d)
    cpu = prof.cpu
    t.f("proc/cpuinfo", cpu_tree.cpuinfo(cpu))
    mem_kib = int((prof.data.get("node") or {}).get("memoryGiB", 64)) * 1024 * 1024
    t.f("proc/meminfo", f"MemTotal:       {mem_kib} kB\nMemFree:        {mem_kib - mem_kib // 50} kB\n")
    t.a("proc/sys/kernel/osrelease", (prof.data.get("node") or {}).get("kernel", "6.8.0-57-generic"))
    cpu_tree.cpufreq(t, cpu)
    order = cpu_tree.cpu_order(cpu)
    abi.topology(t, order)
    abi.numa_nodes(t, order)
    abi.cpuidle(t, len(order), cpu.get("cpuidle") or {})
    cpu_tree.powercap(t, cpu)
    next_hwmon = [0]
    cpu_tree.cpu_hwmon(t, cpu, next_hwmon)
    vendor = prof.gpu_vendor
    if vendor == "amd":
        gpu_tree.amd(t, prof, next_hwmon)
        t.f("bin/rocm-smi", gpu_tree.tool_script("rocm-smi"), 0o755)
        t.f("bin/amd-smi", gpu_tree.tool_script("amd-smi"), 0o755)
    elif vendor == "intel":
        gpu_tree.intel(t, prof, next_hwmon)
    elif vendor == "nvidia":
        gpu_tree.nvidia(t, prof)
        t.f("bin/nvidia-smi", gpu_tree.tool_script("nvidia-smi"), 0o755)
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


def node_files(node: SpecNode, t: Template) -> list[tuple[str, bytes, int]]:
    """The files that differ from node to node (hostname, ``state/``): (path, bytes, mode)."""
    prof = node.profile
    meta = {"node": node.name, "profile": prof.name, "profileHash": prof.profile_hash(),
            "layoutVersion": LAYOUT_VERSION, "pool": node.pool, "cluster": node.cluster,
            "baseLoad": node.base_load, "rack": node.rack, "coolingZone": node.cooling_zone}
    head = {"layoutVersion": LAYOUT_VERSION, "node": node.name, "profile": prof.name}
    if t._manifest_tail is None:  # the profile's part (133 KB on a full Intel node), encoded once
        t._manifest_tail = json.dumps({"writable": t.writable, "counters": t.counters},
                                      separators=(",", ":")).encode()
    # json.dumps(head | {"writable": ..., "counters": ...}) without encoding the lists per node
    manifest = json.dumps(head, separators=(",", ":")).encode()[:-1] + b"," + t._manifest_tail[1:]
    files = [
        ("etc/hostname", f"{node.name}\n".encode(), 0o644),
        ("proc/sys/kernel/hostname", f"{node.name}\n".encode(), 0o644),
        ("state/node.json", (json.dumps(meta, indent=1) + "\n").encode(), 0o644),
        ("state/manifest.json", manifest, 0o444),
    ]
    if t.nvml is not None:
        files.append(("state/nvml.json", json.dumps(t.nvml, separators=(",", ":")).encode(), 0o644))
    return files


def _node_files_expected(t: Template) -> None:
    """Add :func:`node_files`' paths to the template's ``expected`` entries (for resume checks)."""
    for rel in ("etc/hostname", "proc/sys/kernel/hostname", "state/node.json", "state/manifest.json"):
        parent, _, name = rel.rpartition("/")
        t.expected.setdefault(parent, {})[name] = "f"
    if t.nvml is not None:
        t.expected.setdefault("state", {})["nvml.json"] = "f"
