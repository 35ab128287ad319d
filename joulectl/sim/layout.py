"""From a rendered node tree (and its profile) to the :class:`~joulectl.sim.tick.NodeModel` the tick runs.

The layout adapter between the renderer and the tick loop. It classifies the tree's files once per
profile (nodes rendered from the same resolved profile have the same relative layout), so a start
over many nodes reads one tree, not all of them:

* RAPL zones (``intel-rapl:N[:M]``): ``energy_uj`` counters wrapping at ``max_energy_range_uj``,
  ``constraint_N_power_limit_uw`` limits (locked and ``limitBits`` from the profile's zones), the
  zone named by its ``name`` file (``package-N``, ``dram``, ``core``, ``psys``).
* cpufreq policies: governor (allowed: ``scaling_available_governors``), EPP (allowed:
  ``energy_performance_available_preferences``), ``scaling_max_freq``/``scaling_min_freq``
  (clamped to ``cpuinfo_min/max_freq``), ``scaling_cur_freq`` advanced; ``intel_pstate/no_turbo``.
* PCI GPUs, indexed by bus id order: amdgpu ``power1_cap`` (range from ``power1_cap_min/max``;
  a secondary die, which reads 0, refuses every write), ``power_dpm_force_performance_level``,
  ``pp_dpm_sclk``; i915/xe ``power1_max``/``power2_max`` (clamped to 40..150 W or the profile's
  bounds); power, energy and temperature attributes advanced.
* CPU temperatures from a ``coretemp``/``k10temp`` hwmon, one ``temp*_input`` per package.

``state/manifest.json`` (the renderer's list of agent-writable files and counters) is read when
present: a file it lists that the scan did not classify is still watched, with its ``kind``.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import replace
from typing import Any

from joulectl import catalog
from joulectl.sim import physics as ph
from joulectl.sim.sysfs_rules import Rule, rule_from_manifest
from joulectl.sim.tick import CounterFile, GpuModel, NodeModel, PackageModel, Writable

_BDF = re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")
_ZONE_DIR = re.compile(r"intel-rapl:[0-9a-f]+(?::[0-9a-f]+)?$")
_CONSTRAINT = re.compile(r"constraint_(\d+)_power_limit_uw$")
_SCLK = re.compile(r"^\s*(\d+):\s*(\d+)\s*[Mm]hz", re.MULTILINE)
_TEMP = re.compile(r"temp(\d+)_input$")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(65536).strip()
    except OSError:
        return ""


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _cpu_params(profile: Any, packages: int) -> ph.CpuParams:
    """The per-package CPU model from the profile's ``cpu.physics`` (catalog curve or analytic)."""
    cpu: dict[str, Any] = getattr(profile, "cpu", {}) if profile is not None else {}
    phys = cpu.get("physics") or {}
    cpufreq = cpu.get("cpufreq") or {}
    fmin_khz = cpufreq.get("minKHz")
    fmax_khz = cpufreq.get("turboMaxKHz") or cpufreq.get("maxKHz")
    fmin = fmin_khz / fmax_khz if fmin_khz and fmax_khz else 0.35
    knee = 0.7
    floor = ph.CPU_FLOOR_W / max(1, packages)
    if phys.get("model") == "catalog-curve":
        entry = catalog.load().cpu(phys.get("catalogKey") or cpu.get("catalogKey") or cpu.get("model"))
        if entry is not None and entry.curve_w:
            return ph.CpuParams(curve_w=ph.split_curve(entry.curve_w, packages), fmin=fmin, knee=knee, floor_w=floor)
    idle = phys.get("idlePkgW")
    peak = phys.get("maxPkgW")
    if idle is None or peak is None:
        entry = catalog.load().cpu(cpu.get("catalogKey") or cpu.get("model"))
        tdp = entry.tdp_w if entry is not None else 200.0
        peak = float(peak if peak is not None else tdp)
        idle = float(idle if idle is not None else 0.2 * peak)
    return ph.CpuParams(idle_w=float(idle), max_w=float(peak), fmin=fmin, knee=knee, floor_w=floor)


def _gpu_params(profile: Any, index: int, cap_max_w: float | None) -> ph.GpuParams:
    gpus: dict[str, Any] = getattr(profile, "gpus", {}) if profile is not None else {}
    phys = gpus.get("physics") or {}
    power = gpus.get("power") or {}
    boards: list[dict[str, Any]] = getattr(profile, "boards", []) if profile is not None else []
    board_power = (boards[index].get("power") or {}) if index < len(boards) else {}
    max_w = phys.get("maxW") or power.get("maxW") or cap_max_w
    if max_w is None and board_power.get("max_limit_mw"):
        max_w = board_power["max_limit_mw"] / 1000.0
    max_w = float(max_w or 300.0)
    idle = float(phys.get("idleW") or 0.1 * max_w)
    min_cap = power.get("minW")
    if min_cap is None and board_power.get("min_limit_mw"):
        min_cap = board_power["min_limit_mw"] / 1000.0
    model = str(gpus.get("model", "")).upper()
    tau = ph.MI300X_CAP_TAU_S if "MI300X" in model else 0.150
    return ph.GpuParams(idle_w=idle, max_w=max_w, min_cap_w=float(min_cap or 0.5 * max_w), cap_tau_s=tau)



def _nvidia_gpus(profile: Any, boards: list[dict[str, Any]]) -> list[GpuModel]:
    """The GPU models of an NVIDIA node, one per mock-NVML board (default limit in watts)."""
    gpus = []
    for i, board in enumerate(boards):
        default = (board.get("power") or {}).get("default_limit_mw")
        gpus.append(GpuModel(i, "nvidia", _gpu_params(profile, i, None),
                             str((board.get("pci") or {}).get("bus_id", "")).lower(),
                             default / 1000.0 if default else None))
    return gpus

def _zone_rules(profile: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """(zone name, constraint name) -> the profile's constraint (locked, limitBits)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    cpu: dict[str, Any] = getattr(profile, "cpu", {}) if profile is not None else {}
    zones = (cpu.get("powercap") or {}).get("zones") or []
    for zone in zones:
        for con in zone.get("constraints") or []:
            out[(str(zone.get("name")), str(con.get("name")))] = con
        for child in zone.get("children") or []:
            for con in child.get("constraints") or []:
                out[(str(child.get("name")), str(con.get("name")))] = con
    return out


def scan(node_dir: str, node: str, profile: Any) -> NodeModel:
    """Classify the tree under ``node_dir`` into a :class:`NodeModel` (paths relative to it)."""
    writables: list[Writable] = []
    counters: list[CounterFile] = []
    zone_rules = _zone_rules(profile)
    policies: list[str] = []
    pkg_zones: set[int] = set()
    gpu_bdfs: set[str] = set()
    gpu_files: list[tuple[str, str, str, Any]] = []  # (bdf, rel, kind, extra)
    cpu_temps: list[str] = []
    fmin_khz = fmax_khz = None
    has_dram = has_psys = has_core = False
    unit_uw = 125_000
    cpu: dict[str, Any] = getattr(profile, "cpu", {}) if profile is not None else {}
    gcfg: dict[str, Any] = getattr(profile, "gpus", {}) if profile is not None else {}
    unit_uw = int((cpu.get("powercap") or {}).get("powerUnitUW") or unit_uw)
    sys_dir = os.path.join(node_dir, "sys")
    for dirpath, dirnames, filenames in os.walk(sys_dir):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, node_dir)
        base = os.path.basename(dirpath)
        if _ZONE_DIR.match(base) and "energy_uj" in filenames:
            zname = _read(os.path.join(dirpath, "name"))
            parent = os.path.basename(os.path.dirname(dirpath))
            if zname.startswith("package-"):
                idx = _int(zname.split("-")[1]) or 0
                comp, zkind = f"pkg{idx}", "package"
                pkg_zones.add(idx)
            elif zname.startswith("psys"):
                comp, zkind, has_psys = "psys", "psys", True
            else:
                pidx = 0
                if _ZONE_DIR.match(parent):
                    pidx = _int(_read(os.path.join(os.path.dirname(dirpath), "name")).split("-")[-1]) or 0
                zkind = zname
                comp = f"{zname}{pidx}"
                has_dram = has_dram or zname == "dram"
                has_core = has_core or zname == "core"
            max_range = _int(_read(os.path.join(dirpath, "max_energy_range_uj")))
            counters.append(CounterFile(os.path.join(rel_dir, "energy_uj"), "energy_uj", comp, max_range))
            for fname in filenames:
                m = _CONSTRAINT.match(fname)
                if not m:
                    continue
                cname = _read(os.path.join(dirpath, f"constraint_{m.group(1)}_name"))
                con = zone_rules.get((zkind, cname), {})
                bits = con.get("limitBits") or (17 if zkind == "psys" else {"long_term": 15, "short_term": 15,
                                                                           "peak_power": 13}.get(cname))
                rule = Rule(limit_bits=bits, unit_uw=unit_uw, locked=bool(con.get("locked")))
                # PL1 of a package is the cap the physics applies; other constraints are kept as written.
                wcomp = comp if cname == "long_term" else f"{comp}.{cname}"
                writables.append(Writable(os.path.join(rel_dir, fname), "rapl_limit", rule, wcomp))
            continue
        if re.match(r"policy\d+$", base) and os.path.basename(os.path.dirname(dirpath)) == "cpufreq":
            policies.append(base)
            files = set(filenames)
            lo = _int(_read(os.path.join(dirpath, "cpuinfo_min_freq")))
            hi = _int(_read(os.path.join(dirpath, "cpuinfo_max_freq")))
            fmin_khz = fmin_khz or lo
            fmax_khz = fmax_khz or hi
            if "scaling_governor" in files:
                allowed = tuple(_read(os.path.join(dirpath, "scaling_available_governors")).split())
                writables.append(Writable(os.path.join(rel_dir, "scaling_governor"), "cpufreq_governor",
                                          Rule(allowed=allowed), base))
            if "energy_performance_preference" in files:
                allowed = tuple(_read(os.path.join(dirpath, "energy_performance_available_preferences")).split())
                writables.append(Writable(os.path.join(rel_dir, "energy_performance_preference"), "epp",
                                          Rule(allowed=allowed), base))
            for fname, kind in (("scaling_max_freq", "cpufreq_max"), ("scaling_min_freq", "cpufreq_min")):
                if fname in files:
                    writables.append(Writable(os.path.join(rel_dir, fname), kind,
                                              Rule(min_khz=lo, max_khz=hi), base))
            for fname in ("scaling_cur_freq", "cpuinfo_cur_freq"):
                if fname in files:
                    counters.append(CounterFile(os.path.join(rel_dir, fname), "freq_khz", base))
            continue
        if base == "intel_pstate" and "no_turbo" in filenames:
            writables.append(Writable(os.path.join(rel_dir, "no_turbo"), "no_turbo", Rule(), "cpu"))
        if base == "cpufreq" and "boost" in filenames:
            writables.append(Writable(os.path.join(rel_dir, "boost"), "boost", Rule(), "cpu"))
        if "name" in filenames and re.match(r"hwmon\d+$", base):
            hname = _read(os.path.join(dirpath, "name"))
            m = _BDF.search(os.path.realpath(dirpath)) or _BDF.search(rel_dir)
            if hname in ("coretemp", "k10temp"):
                cpu_temps.extend(os.path.join(rel_dir, f) for f in sorted(filenames) if _TEMP.match(f))
            elif hname in ("amdgpu", "i915", "xe") and m:
                bdf = m.group(1)
                gpu_bdfs.add(bdf)
                for fname in sorted(filenames):
                    rel = os.path.join(rel_dir, fname)
                    if hname == "amdgpu" and fname == "power1_cap":
                        lo_uw = _int(_read(os.path.join(dirpath, "power1_cap_min")))
                        hi_uw = _int(_read(os.path.join(dirpath, "power1_cap_max")))
                        secondary = _read(os.path.join(dirpath, "power1_cap")) == "0" and bool(
                            gcfg.get("secondaryDies"))
                        pinned = gcfg.get("pinnedCapW")
                        gpu_files.append((bdf, rel, "amdgpu_cap", Rule(
                            min_uw=lo_uw, max_uw=hi_uw, secondary=secondary,
                            pinned_uw=int(pinned * 1_000_000) if pinned else None)))
                    elif hname in ("i915", "xe") and fname in ("power1_max", "power2_max"):
                        icfg = gcfg.get("intel") or {}
                        lo_w = float(icfg.get("clampMinW", 40))
                        hi_w = float(icfg.get("clampMaxW", 150))
                        gpu_files.append((bdf, rel, "intel_pl1", Rule(clamp_uw=(int(lo_w * 1e6), int(hi_w * 1e6)))))
                    elif fname in ("power1_average", "power1_input"):
                        gpu_files.append((bdf, rel, "power_uw", None))
                    elif fname in ("energy1_input", "energy2_input") and hname != "amdgpu":
                        if fname == "energy1_input" or "energy1_input" not in filenames:
                            gpu_files.append((bdf, rel, "energy_uj", None))
                    elif _TEMP.match(fname):
                        gpu_files.append((bdf, rel, "temp_mc", None))
            continue
        m = _BDF.search(base)
        if m and "power_dpm_force_performance_level" in filenames:
            bdf = m.group(1)
            gpu_bdfs.add(bdf)
            gpu_files.append((bdf, os.path.join(rel_dir, "power_dpm_force_performance_level"), "amd_perf_level",
                              Rule(allowed=("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk",
                                            "profile_min_mclk", "profile_peak", "perf_determinism"))))
            if "pp_dpm_sclk" in filenames:
                levels = tuple(mhz for _, mhz in _SCLK.findall(_read(os.path.join(dirpath, "pp_dpm_sclk"))))
                gpu_files.append((bdf, os.path.join(rel_dir, "pp_dpm_sclk"), "amd_sclk", Rule(allowed=levels)))
    sockets = int(cpu.get("sockets", 0) or 0) or max(1, len(pkg_zones))
    params = _cpu_params(profile, sockets)
    policies.sort(key=lambda p: int(p[6:]))
    packages = []
    for i in range(sockets):
        mine = [p for j, p in enumerate(policies) if j * sockets // max(1, len(policies)) == i]
        packages.append(PackageModel(i, params, None, mine))
    for j, pol in enumerate(policies):
        pkg = j * sockets // max(1, len(policies))
        for c in counters:
            if c.component == pol:
                c.component = f"pkg{pkg}"
    for i, rel in enumerate(cpu_temps[:sockets]):
        counters.append(CounterFile(rel, "temp_mc", f"pkg{i}"))
    bdf_order = sorted(gpu_bdfs)
    vendor = str(gcfg.get("vendor") or "")
    gpus: list[GpuModel] = []
    nvml = vendor == "nvidia" and os.path.exists(os.path.join(node_dir, "state", "nvml.json"))
    if nvml:
        gpus.extend(_nvidia_gpus(profile, getattr(profile, "boards", [])))
    else:
        for i, bdf in enumerate(bdf_order):
            cap_max = None
            for b, _rel, kind, extra in gpu_files:
                if b == bdf and kind == "amdgpu_cap" and extra.max_uw:
                    cap_max = extra.max_uw / 1e6
            sclk: tuple[int, ...] = ()
            for b, _rel, kind, extra in gpu_files:
                if b == bdf and kind == "amd_sclk":
                    sclk = tuple(int(x) for x in extra.allowed)
            gpus.append(GpuModel(i, vendor or "amd", _gpu_params(profile, i, cap_max), bdf, None, sclk))
        for bdf, rel, kind, extra in gpu_files:
            comp = f"gpu{bdf_order.index(bdf)}"
            if kind in ("power_uw", "energy_uj", "temp_mc"):
                counters.append(CounterFile(rel, kind, comp))
            else:
                writables.append(Writable(rel, kind, extra, comp))
    virtual = bool(cpu.get("virtual"))
    model = NodeModel(node=node, profile=str(getattr(profile, "name", "")), packages=packages, gpus=gpus,
                      writables=writables, counters=counters, fmax_khz=fmax_khz or 3_200_000,
                      fmin_khz=fmin_khz or 1_200_000, dram=has_dram, psys=has_psys, core=has_core, nvml=nvml,
                      virtual=virtual)
    _merge_manifest(node_dir, model)
    return model


def _socket_of(policy: str, j: int, n: int, sockets: int, cpu: dict[str, Any]) -> int:
    """The package of cpufreq ``policyN`` (one policy per logical CPU): Linux numbers thread 0 of
    every core of every socket first, then thread 1 (as the renderer lays out ``/proc/cpuinfo``)."""
    cores = int(cpu.get("coresPerSocket", 0) or 0)
    idx = int(policy[6:]) if policy[6:].isdigit() else j
    if cores > 0 and sockets > 0:
        return min(sockets - 1, (idx % (sockets * cores)) // cores)
    return min(sockets - 1, j * sockets // max(1, n))


def from_manifest(node_dir: str, node: str, profile: Any, manifest: dict[str, Any]) -> NodeModel:
    """The model of a rendered tree from its ``state/manifest.json`` (the renderer's contract)."""
    cpu: dict[str, Any] = getattr(profile, "cpu", {}) if profile is not None else {}
    gcfg: dict[str, Any] = getattr(profile, "gpus", {}) if profile is not None else {}
    writables: list[Writable] = []
    counters: list[CounterFile] = []
    policies: list[str] = []
    gpu_ids: set[int] = set()
    fmin_khz = fmax_khz = None
    for entry in manifest.get("writable") or []:
        rel = str(entry.get("path", "")).lstrip("/")
        if not rel or ".." in rel.split("/"):
            continue
        kind = str(entry.get("kind", "other"))
        comp = str(entry.get("component", ""))
        rule = rule_from_manifest(entry.get("rule") or {})
        writables.append(Writable(rel, kind, rule, comp))
        if kind == "cpufreq_governor" and comp.startswith("policy"):
            policies.append(comp)
        if kind == "cpufreq_max":
            fmin_khz = fmin_khz or rule.min_khz
            fmax_khz = fmax_khz or rule.max_khz
        if comp.startswith("gpu") and comp[3:].isdigit():
            gpu_ids.add(int(comp[3:]))
    comps: set[str] = set()
    for entry in manifest.get("counters") or []:
        rel = str(entry.get("path", "")).lstrip("/")
        if not rel or ".." in rel.split("/"):
            continue
        comp = str(entry.get("component", ""))
        comps.add(comp)
        max_range = entry.get("maxRange")
        counters.append(CounterFile(rel, str(entry.get("kind", "")), comp,
                                    int(max_range) if isinstance(max_range, int) and max_range > 0 else None))
        if comp.startswith("gpu") and comp[3:].isdigit():
            gpu_ids.add(int(comp[3:]))
    sockets = int(cpu.get("sockets", 0) or 0) or max(1, sum(1 for c in comps if c.startswith("pkg")))
    params = _cpu_params(profile, sockets)
    policies = sorted(set(policies), key=lambda p: int(p[6:]) if p[6:].isdigit() else 0)
    pol_pkg = {pol: _socket_of(pol, j, len(policies), sockets, cpu) for j, pol in enumerate(policies)}
    packages = [PackageModel(i, params, None, [p for p in policies if pol_pkg[p] == i]) for i in range(sockets)]
    for c in counters:
        if c.kind == "freq_khz" and c.component in pol_pkg:
            c.component = f"pkg{pol_pkg[c.component]}"
    vendor = str(gcfg.get("vendor") or "")
    gpus: list[GpuModel] = []
    nvml = vendor == "nvidia" and os.path.exists(os.path.join(node_dir, "state", "nvml.json"))
    boards: list[dict[str, Any]] = getattr(profile, "boards", []) if profile is not None else []
    bus_ids = [str(b) for b in gcfg.get("busIds") or []]
    if nvml:
        gpus.extend(_nvidia_gpus(profile, boards))
    else:
        for i in sorted(gpu_ids):
            cap_max = None
            sclk: tuple[int, ...] = ()
            for w in writables:
                if w.component == f"gpu{i}" and w.kind == "amdgpu_cap" and w.rule.max_uw:
                    cap_max = w.rule.max_uw / 1e6
                if w.component == f"gpu{i}" and w.kind == "amd_sclk":
                    sclk = tuple(int(x) for x in w.rule.allowed if x.isdigit())
            gparams = _gpu_params(profile, i, cap_max)
            primary = None
            share = 1.0
            if gcfg.get("secondaryDies"):
                # Two dies per package (MI250X): the primary die's cap holds the package, each die
                # draws half of it.
                share = 0.5
                gparams = replace(gparams, idle_w=gparams.idle_w / 2, max_w=gparams.max_w / 2,
                                  min_cap_w=gparams.min_cap_w / 2)
                for w in writables:
                    if w.component == f"gpu{i}" and w.kind == "amdgpu_cap" and w.rule.secondary:
                        primary = i - 1
            gpus.append(GpuModel(i, vendor or "amd", gparams, bus_ids[i] if i < len(bus_ids) else "", None, sclk,
                                 primary, share))
    for c in counters:
        if c.kind == "power_uw":
            c.secondary = any(w.component == c.component and w.kind == "amdgpu_cap" and w.rule.secondary
                              for w in writables)
    return NodeModel(
        node=node, profile=str(getattr(profile, "name", manifest.get("profile", ""))), packages=packages, gpus=gpus,
        writables=writables, counters=counters, fmax_khz=fmax_khz or 3_200_000, fmin_khz=fmin_khz or 1_200_000,
        dram=any(c.startswith("dram") for c in comps), psys="psys" in comps,
        core=any(c.startswith("core") for c in comps), nvml=nvml, virtual=bool(cpu.get("virtual")),
    )


def model_for(node_dir: str, node: str, profile: Any) -> NodeModel:
    """The node's model: from ``state/manifest.json`` when the tree has one, else from a scan of the tree."""
    path = os.path.join(node_dir, "state", "manifest.json")
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        return scan(node_dir, node, profile)
    except (OSError, ValueError) as exc:
        from joulectl.errors import InputError

        raise InputError(f"node {node}: unreadable manifest ({exc})", file=path) from None
    if not isinstance(manifest, dict):
        from joulectl.errors import InputError

        raise InputError(f"node {node}: the manifest is not a JSON object", file=path)
    return from_manifest(node_dir, node, profile, manifest)


_KIND_ALIASES = {
    "rapl_limit": "rapl_limit", "amdgpu_cap": "amdgpu_cap", "intel_pl1": "intel_pl1",
    "cpufreq_governor": "cpufreq_governor", "epp": "epp", "amd_perf_level": "amd_perf_level",
    "amd_sclk": "amd_sclk", "intel_gt_min": "intel_gt_min", "intel_gt_max": "intel_gt_max",
    "scaling_max_freq": "cpufreq_max", "scaling_min_freq": "cpufreq_min",
    "cpufreq_max": "cpufreq_max", "cpufreq_min": "cpufreq_min", "no_turbo": "no_turbo", "boost": "boost",
}


def _merge_manifest(node_dir: str, model: NodeModel) -> None:
    """Watch, as an unmodelled file, every manifest entry the scan did not classify."""
    path = os.path.join(node_dir, "state", "manifest.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return
    entries = doc.get("writable") or doc.get("writables") or doc.get("files") or []
    if not isinstance(entries, list):
        return
    known = {w.rel for w in model.writables}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        rel = str(entry.get("path", "")).lstrip("/")
        if not rel or rel in known or ".." in rel.split("/"):
            continue
        kind = _KIND_ALIASES.get(str(entry.get("kind", "")), "other")
        model.writables.append(Writable(rel, kind, Rule(), "other"))
        known.add(rel)


def instantiate(template: NodeModel, node: str) -> NodeModel:
    """A fresh copy of a template model for another node of the same profile."""
    return replace(
        template,
        node=node,
        writables=[Writable(w.rel, w.kind, w.rule, w.component) for w in template.writables],
        counters=[CounterFile(c.rel, c.kind, c.component, c.max_range, "", c.secondary) for c in template.counters],
        packages=copy.copy(template.packages),
        gpus=copy.copy(template.gpus),
    )
