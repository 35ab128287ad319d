"""ClusterSpec: parse, validate and expand the emulator's cluster description (emulate-mode seed).

```yaml
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: smoke}
spec:
  defaults: {kwok: true, labels: {...}, baseLoad: {cpuUtil: 1.0, gpuUtil: 1.0, ...}}
  facility: {ambientC: 20, amplitudeC: 5, periodH: 24, coolingZones: [{name: zone-a, offsetC: 0}]}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1, prefix: ..., startIndex: 0, rack: rack-1,
     coolingZone: zone-a, labels: {...}, baseLoad: {...}, overrides: {gpus: {...}}}
```

A pool expands to ``count`` nodes named ``<prefix or pool name>-<startIndex + i>``. Labels are the
profile's, then the defaults', then the pool's, plus rack, cooling zone, ``sim.joulie.io/cluster``
and ``sim.joulie.io/pool``; the annotation ``sim.joulie.io/profile`` names the profile. A pool's
``baseLoad`` overrides the defaults field by field. Every problem is an :class:`InputError` naming
the file and the YAML path.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.sim.profiles import Profile, ProfileSet
from joulectl.units import number_text

API_VERSION = "sim.joulie.io/v1alpha1"
KIND = "ClusterSpec"

#: Default baseLoad: what an emulated node runs at while no workload drives it.
DEFAULT_BASE_LOAD: dict[str, Any] = {
    "cpuUtil": 0.0,
    "gpuUtil": 0.0,
    "memoryIntensity": 0.0,
    "ioIntensity": 0.0,
    "cpuClass": "cpu.compute_bound",
    "gpuClass": "gpu.compute_bound",
}
_BASE_LOAD_NUM = {"cpuUtil", "gpuUtil", "memoryIntensity", "ioIntensity"}
_BASE_LOAD_STR = {"cpuClass", "gpuClass"}
_DEFAULTS_KEYS = {"kwok", "labels", "annotations", "baseLoad"}
_FACILITY_KEYS = {"ambientC", "amplitudeC", "periodH", "coolingZones"}
_POOL_KEYS = {
    "name", "profile", "count", "prefix", "startIndex", "rack", "coolingZone", "labels",
    "annotations", "baseLoad", "overrides", "kwok",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MAX_NODES = 100_000


@dataclass
class Facility:
    ambient_c: float = 20.0
    amplitude_c: float = 5.0
    period_h: float = 24.0
    cooling_zones: dict[str, float] = field(default_factory=dict)  # name -> offset °C

    def as_dict(self) -> dict[str, Any]:
        return {
            "ambientC": self.ambient_c,
            "amplitudeC": self.amplitude_c,
            "periodH": self.period_h,
            "coolingZones": [{"name": n, "offsetC": o} for n, o in self.cooling_zones.items()],
        }


@dataclass
class SpecNode:
    """One expanded node: its name, pool, resolved profile (overrides applied), labels and load."""

    name: str
    pool: str
    profile: Profile
    labels: dict[str, str]
    annotations: dict[str, str]
    rack: str | None
    cooling_zone: str | None
    base_load: dict[str, Any]
    overrides: dict[str, Any]
    kwok: bool = True
    cluster: str = ""
    index: int = 0


@dataclass
class ClusterSpec:
    name: str
    file: str
    facility: Facility
    nodes: list[SpecNode]
    defaults: dict[str, Any] = field(default_factory=dict)
    pools: list[dict[str, Any]] = field(default_factory=list)

    def node(self, name: str) -> SpecNode | None:
        return next((n for n in self.nodes if n.name == name), None)


def load_spec(path: str, profiles_dir: str | None = None) -> ClusterSpec:
    """Read and expand the ClusterSpec at ``path`` (``-`` for stdin)."""
    from joulectl.yamlio import load_one

    data = load_one(path, what="cluster spec")
    return parse_spec(data, "<stdin>" if path == "-" else path, profiles_dir)


def _fail(label: str, field_path: str, message: str) -> InputError:
    return InputError(message, file=label, field=field_path)


def _mapping(value: Any, label: str, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(label, path, f"must be a mapping, found {type(value).__name__}")
    return value


def _check_keys(value: dict[str, Any], allowed: set[str], label: str, path: str) -> None:
    for key in value:
        if key not in allowed:
            raise _fail(label, f"{path}.{key}", f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")


def _string_map(value: Any, label: str, path: str, *, labels: bool = False) -> dict[str, str]:
    m = _mapping(value, label, path)
    out: dict[str, str] = {}
    for k, v in m.items():
        if not isinstance(k, str) or not k:
            raise _fail(label, path, f"key {k!r} must be a non-empty string")
        if isinstance(v, (dict, list)) or v is None:
            raise _fail(label, f"{path}.{k}", "must be a string")
        text = str(v).lower() if isinstance(v, bool) else str(v)
        if labels:
            _check_label(k, text, label, f"{path}.{k}")
        out[k] = text
    return out


def _check_label(key: str, value: str, label: str, path: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not all(_DNS_LABEL.match(p) for p in prefix.split("."))):
        raise _fail(label, path, f"label key prefix {prefix!r} is not a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise _fail(label, path, f"label key {key!r} is not a valid label name")
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise _fail(label, path, f"label value {value!r} is not a valid label value")


def _number(value: Any, label: str, path: str, *, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(label, path, f"must be a number, found {value!r}")
    if not math.isfinite(value):  # .nan passes every comparison, .inf every minimum
        raise _fail(label, path, f"must be a finite number, found {value!r}")
    if minimum is not None and value < minimum:
        raise _fail(label, path, f"must be at least {minimum:g}, found {number_text(value)}")
    if maximum is not None and value > maximum:
        raise _fail(label, path, f"must be at most {maximum:g}, found {number_text(value)}")
    return float(value)


def _integer(value: Any, label: str, path: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(label, path, f"must be an integer, found {value!r}")
    if value < minimum:
        what = "negative" if minimum == 0 else f"below {minimum}"
        raise _fail(label, path, f"must not be {what}, found {value}")
    return value


def _base_load(value: Any, label: str, path: str) -> dict[str, Any]:
    m = _mapping(value, label, path)
    out: dict[str, Any] = {}
    for k, v in m.items():
        if k in _BASE_LOAD_NUM:
            out[k] = _number(v, label, f"{path}.{k}", minimum=0.0, maximum=1.0)
        elif k in _BASE_LOAD_STR:
            if not isinstance(v, str) or not v:
                raise _fail(label, f"{path}.{k}", "must be a non-empty string")
            out[k] = v
        else:
            allowed = ", ".join(sorted(_BASE_LOAD_NUM | _BASE_LOAD_STR))
            raise _fail(label, f"{path}.{k}", f"unknown key {k!r} (allowed: {allowed})")
    return out


def check_node_name(name: str, label: str, path: str) -> None:
    """A node name must be a DNS-1123 subdomain (so it can never escape the render root)."""
    if not name or len(name) > 253:
        raise _fail(label, path, f"node name {name!r} must be 1 to 253 characters")
    parts = name.split(".")
    if not all(p and len(p) <= 63 and _DNS_LABEL.match(p) for p in parts):
        raise _fail(
            label, path,
            f"node name {name!r} is not a valid DNS-1123 subdomain "
            "(lowercase letters, digits, '-' and '.', starting and ending alphanumeric)",
        )


def parse_spec(data: Any, label: str, profiles_dir: str | None = None) -> ClusterSpec:
    """Validate and expand a parsed ClusterSpec document; ``label`` names its file in errors."""
    if not isinstance(data, dict):
        raise _fail(label, "", f"a ClusterSpec must be a mapping, found {type(data).__name__}")
    _check_keys(data, {"apiVersion", "kind", "metadata", "spec"}, label, "")
    if data.get("apiVersion") != API_VERSION:
        raise _fail(label, "apiVersion", f"must be {API_VERSION}, found {data.get('apiVersion')!r}")
    if data.get("kind") != KIND:
        raise _fail(label, "kind", f"must be {KIND}, found {data.get('kind')!r}")
    meta = _mapping(data.get("metadata"), label, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(label, "metadata.name", "is required")
    if not _LABEL_VALUE.match(name) or len(name) > 63:
        raise _fail(label, "metadata.name", f"{name!r} is not a valid label value")
    spec = _mapping(data.get("spec"), label, "spec")
    _check_keys(spec, {"defaults", "facility", "pools"}, label, "spec")

    defaults = _mapping(spec.get("defaults"), label, "spec.defaults")
    _check_keys(defaults, _DEFAULTS_KEYS, label, "spec.defaults")
    kwok_default = defaults.get("kwok", True)
    if not isinstance(kwok_default, bool):
        raise _fail(label, "spec.defaults.kwok", "must be true or false")
    default_labels = _string_map(defaults.get("labels"), label, "spec.defaults.labels", labels=True)
    default_ann = _string_map(defaults.get("annotations"), label, "spec.defaults.annotations")
    default_load = {**DEFAULT_BASE_LOAD, **_base_load(defaults.get("baseLoad"), label, "spec.defaults.baseLoad")}

    fac_raw = _mapping(spec.get("facility"), label, "spec.facility")
    _check_keys(fac_raw, _FACILITY_KEYS, label, "spec.facility")
    facility = Facility()
    if "ambientC" in fac_raw:
        facility.ambient_c = _number(fac_raw["ambientC"], label, "spec.facility.ambientC", minimum=-50, maximum=60)
    if "amplitudeC" in fac_raw:
        facility.amplitude_c = _number(fac_raw["amplitudeC"], label, "spec.facility.amplitudeC", minimum=0)
    if "periodH" in fac_raw:
        facility.period_h = _number(fac_raw["periodH"], label, "spec.facility.periodH", minimum=0.001)
    zones = fac_raw.get("coolingZones") or []
    if not isinstance(zones, list):
        raise _fail(label, "spec.facility.coolingZones", "must be a list")
    for i, z in enumerate(zones):
        zp = f"spec.facility.coolingZones[{i}]"
        z = _mapping(z, label, zp)
        _check_keys(z, {"name", "offsetC"}, label, zp)
        zname = z.get("name")
        if not isinstance(zname, str) or not zname:
            raise _fail(label, f"{zp}.name", "is required")
        if zname in facility.cooling_zones:
            raise _fail(label, f"{zp}.name", f"duplicate cooling zone {zname!r}")
        facility.cooling_zones[zname] = _number(z.get("offsetC", 0), label, f"{zp}.offsetC")

    pools_raw = spec.get("pools")
    if pools_raw is None or pools_raw == []:
        raise _fail(label, "spec.pools", "at least one pool is required")
    if not isinstance(pools_raw, list):
        raise _fail(label, "spec.pools", "must be a list")

    profiles = ProfileSet(profiles_dir)
    nodes: list[SpecNode] = []
    seen: dict[str, str] = {}
    pool_names: set[str] = set()
    pools_out: list[dict[str, Any]] = []
    for pi, pool in enumerate(pools_raw):
        pp = f"spec.pools[{pi}]"
        pool = _mapping(pool, label, pp)
        _check_keys(pool, _POOL_KEYS, label, pp)
        pname = pool.get("name")
        if not isinstance(pname, str) or not pname:
            raise _fail(label, f"{pp}.name", "is required")
        if not _DNS_LABEL.match(pname) or len(pname) > 63:
            raise _fail(label, f"{pp}.name", f"pool name {pname!r} is not a valid DNS-1123 label")
        if pname in pool_names:
            raise _fail(label, f"{pp}.name", f"duplicate pool name {pname!r}")
        pool_names.add(pname)
        pname_profile = pool.get("profile")
        if not isinstance(pname_profile, str) or not pname_profile:
            raise _fail(label, f"{pp}.profile", "is required")
        try:
            base = profiles.get(pname_profile)
        except KeyError:
            raise _fail(
                label, f"{pp}.profile",
                f"unknown profile {pname_profile!r} (known: {', '.join(profiles.names())})",
            ) from None
        count = _integer(pool.get("count", 1), label, f"{pp}.count", minimum=0)
        start = _integer(pool.get("startIndex", 0), label, f"{pp}.startIndex", minimum=0)
        prefix = pool.get("prefix", pname)
        if not isinstance(prefix, str) or not prefix:
            raise _fail(label, f"{pp}.prefix", "must be a non-empty string")
        rack = pool.get("rack")
        if rack is not None and (not isinstance(rack, str) or not _LABEL_VALUE.match(rack)):
            raise _fail(label, f"{pp}.rack", f"{rack!r} is not a valid label value")
        zone = pool.get("coolingZone")
        if zone is not None:
            if not isinstance(zone, str):
                raise _fail(label, f"{pp}.coolingZone", "must be a string")
            if zone not in facility.cooling_zones:
                known = ", ".join(facility.cooling_zones) or "none defined"
                raise _fail(label, f"{pp}.coolingZone", f"unknown cooling zone {zone!r} (known: {known})")
        kwok = pool.get("kwok", kwok_default)
        if not isinstance(kwok, bool):
            raise _fail(label, f"{pp}.kwok", "must be true or false")
        pool_labels = _string_map(pool.get("labels"), label, f"{pp}.labels", labels=True)
        pool_ann = _string_map(pool.get("annotations"), label, f"{pp}.annotations")
        load = {**default_load, **_base_load(pool.get("baseLoad"), label, f"{pp}.baseLoad")}
        overrides = _mapping(pool.get("overrides"), label, f"{pp}.overrides")
        profile = base.with_overrides(overrides, file=label, field_path=f"{pp}.overrides")
        if len(nodes) + count > MAX_NODES:
            raise _fail(label, f"{pp}.count", f"the spec expands to more than {MAX_NODES} nodes")
        pools_out.append({"name": pname, "profile": pname_profile, "count": count})
        prof_labels = {str(k): str(v) for k, v in (profile.data.get("labels") or {}).items()}
        # every node of the pool has these labels and annotations (each node gets its own copy)
        labels = {**prof_labels, **default_labels, **pool_labels}
        if rack:
            labels["joulie.io/rack"] = rack
        if zone:
            labels["joulie.io/cooling-zone"] = zone
        labels["sim.joulie.io/cluster"] = name
        labels["sim.joulie.io/pool"] = pname
        annotations = {**default_ann, **pool_ann, "sim.joulie.io/profile": pname_profile}
        name_field = f"{pp}.prefix" if "prefix" in pool else f"{pp}.name"
        # The names differ only in the digits after "<prefix>-": one of the fewest digits and one of
        # the most (the first and the last) decide for all; when the last fails, each is checked,
        # so the error names the first bad node as before.
        each = False
        if count:
            check_node_name(f"{prefix}-{start}", label, name_field)
            try:
                check_node_name(f"{prefix}-{start + count - 1}", label, name_field)
            except InputError:
                each = True
        for i in range(count):
            nname = f"{prefix}-{start + i}"
            if each:
                check_node_name(nname, label, name_field)
            if nname in seen:
                raise _fail(label, f"{pp}.count", f"duplicate node name {nname!r} (also in {seen[nname]})")
            seen[nname] = pp
            nodes.append(
                SpecNode(
                    name=nname, pool=pname, profile=profile, labels=labels.copy(),
                    annotations=annotations.copy(), rack=rack, cooling_zone=zone, base_load=load.copy(),
                    overrides=overrides, kwok=kwok, cluster=name, index=start + i,
                )
            )
    return ClusterSpec(
        name=name, file=label, facility=facility, nodes=nodes,
        defaults={"kwok": kwok_default, "labels": default_labels, "baseLoad": default_load},
        pools=pools_out,
    )
