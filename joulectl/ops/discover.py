"""``discover``: the node inventory's renderings (the inventory itself is
:mod:`joulectl.ops.inventory`, re-exported here; cap and governor import it from there and load
none of the renderings).

Renderings: :func:`node_hardware` (a ``joulie.io/v1alpha1`` NodeHardware object, extended),
:func:`table_text`, :func:`prometheus_text` (node_exporter textfile collector) and
:func:`watch_frames` (the ``--watch`` table of power draw and caps).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from joulectl.models import Control, CpuInventory, GpuDevice, NodeInventory, PowercapZone, PowerRange
from joulectl.ops.inventory import has_token as has_token
from joulectl.ops.inventory import inventory as inventory
from joulectl.ops.inventory import read_host_info as read_host_info

API_VERSION = "joulie.io/v1alpha1"
VENDOR_ORDER = ("nvidia", "amd", "intel")

__all__ = [
    "inventory",
    "node_hardware",
    "prometheus_text",
    "read_host_info",
    "sanitize_name",
    "table_text",
    "watch_frames",
]


# -- NodeHardware ------------------------------------------------------------------------------------

_NAME_CHARS = str.maketrans("._/", "---")


def sanitize_name(node: str) -> str:
    """The object name Joulie's agent uses: lowercase, ``.``, ``_`` and ``/`` turned into ``-``."""
    return node.lower().translate(_NAME_CHARS)


def _clean(value: Any) -> Any:
    """Drop None values (the CRD types every field; unknown means absent)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _num(value: float | None) -> float | int | None:
    """Whole numbers as ints (``700`` rather than ``700.0``) in JSON/YAML."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(value, 3)


def _control(c: Control) -> dict[str, Any]:
    return {"available": c.available, "reason": c.reason}


def _device(d: GpuDevice) -> dict[str, Any]:
    return {
        "index": d.index,
        "busId": d.bus_id,
        "vendor": d.vendor,
        "driver": d.driver,
        "model": d.model,
        "rawModel": d.raw_model,
        "catalogKey": d.catalog_key,
        "uuid": d.uuid,
        "architecture": d.architecture,
        "capRange": {
            "minWatts": _num(d.cap_range.min_w),
            "maxWatts": _num(d.cap_range.max_w),
            "defaultWatts": _num(d.cap_range.default_w),
        },
        "currentCapWatts": _num(d.current_cap_w),
        "enforcedCapWatts": _num(d.enforced_cap_w),
        "powerWatts": _num(d.power_w),
        "holdsLimit": d.holds_limit,
        "primaryBusId": d.primary_bus_id,
        "partition": d.partition,
        "mig": d.mig,
        "persistenceMode": d.persistence_mode,
        "perfLevel": d.perf_level,
        "clocks": {k: v for k, v in d.clocks.items()} or None,
        "governorPresets": list(d.governor_presets),
        "otherLimitsWatts": {k: _num(v) for k, v in d.other_limits_w.items()} or None,
        "control": _control(d.control),
        "warnings": d.warnings or None,
    }


def _pl1_locked(z: PowercapZone) -> bool:
    """A package PL1 locked by firmware. Other zones (dram) are often simply disabled
    (``enabled`` 0) and their limit is not what joulectl caps, so they are never called locked."""
    return z.kind == "package" and z.locked


def _exactness(key: str | None, raw: str | None) -> str:
    return "exact" if key else ("proxy" if raw else "generic")


def _cpu_status(c: CpuInventory) -> dict[str, Any]:
    cap = None
    if c.cap_range_per_socket.max_w is not None:
        cap = {
            "type": "package",
            "minWattsPerSocket": _num(c.cap_range_per_socket.min_w),
            "maxWattsPerSocket": _num(c.cap_range_per_socket.max_w),
        }
    landmarks = {
        "minFreqMHz": _num(c.min_mhz),
        "nominalFreqMHz": _num(c.nominal_mhz),
        "maxBoostMHz": _num(c.max_mhz),
        "maxNonBoostMHz": _num(c.max_nonboost_mhz),
        "lowestNonlinearFreqMHz": _num(c.lowest_nonlinear_mhz),
    }
    zones = [
        {
            "id": z.zone_id,
            "name": z.name,
            "kind": z.kind,
            "interface": z.interface or None,
            "binds": z.binds,
            "socket": z.socket,
            "enabled": z.enabled,
            "locked": _pl1_locked(z),
            "energyReadable": z.energy_readable,
            "energyReason": z.energy_reason,
            "maxEnergyRangeUj": z.max_energy_range_uj,
            "constraints": [
                {
                    "index": k.index,
                    "name": k.name,
                    "limitWatts": _num(k.limit_w),
                    "minWatts": _num(k.min_w),
                    "maxWatts": _num(k.max_w),
                    "timeWindowUs": k.time_window_us,
                    "limitReason": k.limit_reason,
                }
                for k in z.constraints
            ],
        }
        for z in c.zones
    ]
    return {
        "rawModel": c.raw_model,
        "model": c.model,
        "vendor": c.vendor,
        "sockets": c.sockets,
        "totalCores": c.cores,
        "coresPerSocket": c.cores // c.sockets if c.sockets else None,
        "threads": c.threads,
        "driverFamily": c.driver,
        "capRange": cap,
        "landmarks": {k: v for k, v in landmarks.items() if v is not None} or None,
        "controlAvailable": c.control.available,
        "controlReason": c.control.reason,
        "telemetryAvailable": c.telemetry.available,
        "telemetryReason": c.telemetry.reason,
        "governor": {
            "available": c.governor_control.available,
            "reason": c.governor_control.reason,
            "current": c.governors,
            "availableGovernors": c.available_governors,
            "epp": c.epp,
            "availableEpp": c.available_epp,
        },
        "turbo": c.turbo,
        "zones": zones,
        "warnings": c.warnings or None,
    }


def _gpu_status(inv: NodeInventory) -> dict[str, Any]:
    gpus = inv.gpus
    warnings = [f"{v}: {m}" for v, m in inv.gpu_errors.items()]
    for d in gpus:
        warnings.extend(f"{d.bus_id}: {w}" for w in d.warnings)
    models = sorted({d.model or "unknown" for d in gpus})
    if len(models) > 1:
        warnings.append(f"mixed GPU models: {', '.join(models)}")
    first = gpus[0] if gpus else None
    holder = next((d for d in gpus if d.holds_limit), first)
    cap_range = None
    if first is not None and first.cap_range.max_w is not None:
        cap_range = {
            "minWatts": _num(first.cap_range.min_w),
            "maxWatts": _num(first.cap_range.max_w),
            "defaultWatts": _num(first.cap_range.default_w),
        }
    modes: list[str] = []
    if any(d.mig == "enabled" for d in gpus):
        modes.append("mig")
    for d in gpus:
        if d.partition and d.partition not in modes:
            modes.append(d.partition)
    slicing_supported = any(d.mig is not None or d.partition for d in gpus)
    return {
        "present": bool(gpus),
        "rawModel": first.raw_model if first else None,
        "model": (first.catalog_key or first.model) if first else None,
        "vendor": first.vendor if first else None,
        "count": inv.gpu_count,
        "powerDomains": inv.power_domains,
        "capRangePerGpu": cap_range,
        "currentCapWatts": _num(holder.current_cap_w) if holder else None,
        "enforcedCapWatts": _num(holder.enforced_cap_w) if holder else None,
        "slicing": {"supported": slicing_supported, "modes": modes} if gpus else None,
        "controlAvailable": any(d.control.available for d in gpus),
        "telemetryAvailable": any(d.power_w is not None for d in gpus),
        "governor": {"presets": list(inv.governor_presets)},
        "devices": [_device(d) for d in gpus],
        "errors": dict(inv.gpu_errors) or None,
        "warnings": warnings or None,
    }


def node_hardware(inv: NodeInventory, *, updated_at: datetime | None = None) -> dict[str, Any]:
    """The inventory as a NodeHardware object (joulie-reference.md §1.2, extended per SPEC §3)."""
    cpu, gpus = inv.cpu, inv.gpus
    gpu_key = gpus[0].catalog_key if gpus else None
    gpu_raw = gpus[0].raw_model if gpus else None
    gpu_exact = all(d.catalog_key for d in gpus)
    if cpu.catalog_key and gpu_exact:
        overall = "exact"
    elif cpu.raw_model or gpu_raw:
        overall = "heuristic"
    else:
        overall = "unavailable"
    stamp = (updated_at or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    quality_warnings = [*inv.warnings]
    for d in gpus:
        quality_warnings.extend(f"{d.bus_id}: {w}" for w in d.warnings)
    obj = {
        "apiVersion": API_VERSION,
        "kind": "NodeHardware",
        "metadata": {"name": sanitize_name(inv.host.hostname)},
        "spec": {"nodeName": inv.host.hostname},
        "status": {
            "host": {"hostname": inv.host.hostname, "kernel": inv.host.kernel, "virtual": inv.host.virtual},
            "cpu": _cpu_status(cpu),
            "gpu": _gpu_status(inv),
            "inventoryResolution": {
                "hardwareCatalogKey": {"cpu": cpu.catalog_key, "gpu": gpu_key},
                "exactness": {
                    "cpu": cpu.exactness,
                    "gpu": _exactness(gpu_key, gpu_raw) if gpus else None,
                },
            },
            "capabilities": {
                "cpuControl": cpu.control.available,
                "gpuControl": any(d.control.available for d in gpus),
                "cpuTelemetry": cpu.telemetry.available,
                "gpuTelemetry": any(d.power_w is not None for d in gpus),
            },
            "quality": {"overall": overall, "warnings": quality_warnings or None},
            "updatedAt": stamp,
        },
    }
    cleaned: dict[str, Any] = _clean(obj)
    return cleaned


# -- table -------------------------------------------------------------------------------------------


def _w(value: float | None) -> str:
    from joulectl.render import fmt_num

    return fmt_num(value, " W")


def _cap_cell(d: GpuDevice) -> str:
    """The requested limit, and the enforced one beside it when another limiter holds it lower:
    ``700 W (enforced 500 W)``."""
    text = _w(d.current_cap_w)
    e = d.enforced_cap_w
    if e is not None and d.current_cap_w is not None and round(e * 1000) != round(d.current_cap_w * 1000):
        text += f" (enforced {_w(e)})"
    return text


def _range(r: PowerRange) -> str:
    if r.min_w is None and r.max_w is None:
        return "unknown"
    from joulectl.render import fmt_num

    return f"{fmt_num(r.min_w) if r.min_w is not None else '?'}–{_w(r.max_w)}"


def _yes(c: Control) -> str:
    return "yes" if c.available else f"no: {c.reason}"


def _list(values: list[str]) -> str:
    return ", ".join(values) if values else "-"


def gpu_columns() -> list[Any]:
    """The GPU table's columns, and ``-o csv``'s (nvidia-smi's field names where it has one):
    ``-o wide`` adds the architecture, catalog key, UUID and governor presets."""
    from joulectl.render import Column

    return [
        Column("IDX", lambda d: d.index, "index"),
        Column("BUS ID", lambda d: d.bus_id, "pci.bus_id"),
        Column("VENDOR", lambda d: d.vendor, "vendor"),
        Column("DRIVER", lambda d: d.driver, "driver"),
        Column("MODEL", lambda d: d.model or "unknown", "name"),
        Column("CAP", lambda d: d.current_cap_w, "power.limit", "W", cell=_cap_cell),
        Column(None, lambda d: d.enforced_cap_w, "enforced.power.limit", "W"),
        Column("RANGE", lambda d: d.cap_range.min_w, "power.min_limit", "W", cell=lambda d: _range(d.cap_range)),
        Column(None, lambda d: d.cap_range.max_w, "power.max_limit", "W"),
        Column("DEFAULT", lambda d: d.cap_range.default_w, "power.default_limit", "W"),
        Column("POWER", lambda d: d.power_w, "power.draw", "W"),
        Column("MODE", lambda d: d.partition or (f"MIG {d.mig}" if d.mig else None), "mode"),
        Column("LIMIT", lambda d: "holds" if d.holds_limit else f"via {d.primary_bus_id or '?'}", "limit"),
        Column("CONTROL", lambda d: _yes(d.control), "control"),
        Column("ARCH", lambda d: d.architecture, "architecture", wide=True),
        Column("CATALOG KEY", lambda d: d.catalog_key, "catalog_key", wide=True),
        Column("UUID", lambda d: d.uuid, "uuid", wide=True),
        Column("PRESETS", lambda d: " ".join(d.governor_presets), "governor.presets", wide=True,
               cell=lambda d: ",".join(d.governor_presets) or "-"),
    ]


def table_text(inv: NodeInventory, wide: bool = False) -> str:
    """Host, CPU, powercap zones and GPUs as tables (plain text when piped); ``wide`` adds the GPU
    table's wide columns (:func:`gpu_columns`)."""
    from joulectl.render import fmt_num, table

    cpu = inv.cpu
    parts = [
        table(
            ["HOST", ""],
            [
                ["node", inv.host.hostname],
                ["kernel", inv.host.kernel or "unknown"],
                ["virtual machine", "yes" if inv.host.virtual else "no"],
            ],
        )
    ]
    freq = " / ".join(fmt_num(v, " MHz") for v in (cpu.min_mhz, cpu.nominal_mhz, cpu.max_mhz))
    key = f"{cpu.catalog_key} ({cpu.exactness})" if cpu.catalog_key else f"none ({cpu.exactness})"
    turbo = "unknown" if cpu.turbo is None else ("on" if cpu.turbo else "off")
    parts.append(
        table(
            ["CPU", ""],
            [
                ["vendor", cpu.vendor or "unknown"],
                ["model", cpu.raw_model or "unknown"],
                ["catalog key", key],
                ["sockets / cores / threads", f"{cpu.sockets} / {cpu.cores} / {cpu.threads}"],
                ["cpufreq driver", cpu.driver or "none"],
                ["governor (available)", f"{_list(cpu.governors)} ({_list(cpu.available_governors)})"],
                ["EPP (available)", f"{_list(cpu.epp)} ({_list(cpu.available_epp)})"],
                ["turbo", turbo],
                ["min / nominal / max", freq],
                *([["max non-boost (boost clock not shown)", fmt_num(cpu.max_nonboost_mhz, " MHz")]]
                  if cpu.max_nonboost_mhz is not None else []),
                ["cap range per socket", _range(cpu.cap_range_per_socket)],
                ["cap control", _yes(cpu.control)],
                ["energy telemetry", _yes(cpu.telemetry)],
                ["governor control", _yes(cpu.governor_control)],
            ],
        )
    )
    if cpu.zones:
        rows = []
        for z in cpu.zones:
            energy = "readable" if z.energy_readable else f"no ({z.energy_reason})"
            enabled = "-" if z.enabled is None else ("yes" if z.enabled else "no")
            marks = [m for m, on in (("locked", _pl1_locked(z)), ("binds", z.binds)) if on]
            head = [z.zone_id, z.name, enabled + (f" ({', '.join(marks)})" if marks else ""), energy]
            if not z.constraints:
                rows.append([*head, "-", "-", "-", "-", "-"])
            for i, k in enumerate(z.constraints):
                limit = _w(k.limit_w) if k.limit_w is not None else (k.limit_reason or "-")
                window = fmt_num(k.time_window_us, " us")
                rows.append(
                    [*(head if i == 0 else ["", "", "", ""]), k.name or f"#{k.index}", limit, _w(k.min_w),
                     _w(k.max_w), window]
                )
        parts.append(
            table(
                ["ZONE", "NAME", "ENABLED", "ENERGY", "CONSTRAINT", "LIMIT", "MIN", "MAX", "WINDOW"],
                rows,
                title="Powercap zones",
            )
        )
    columns = [c for c in gpu_columns() if c.header is not None and (wide or not c.wide)]
    gpu_rows = [[c.text(d) for c in columns] for d in inv.gpus]
    for vendor, message in inv.gpu_errors.items():
        unlisted = {"VENDOR": vendor, "MODEL": "not listed", "CONTROL": f"no: {message}"}
        gpu_rows.append([unlisted.get(c.header or "", "-") for c in columns])
    if gpu_rows:
        presets = ", ".join(inv.governor_presets) or "none"
        parts.append(
            table(
                [c.header or "" for c in columns],
                gpu_rows,
                title=f"GPUs: {inv.gpu_count}, power domains: {inv.power_domains}, governor presets: {presets}",
            )
        )
    else:
        parts.append("GPUs: none found\n")
    notes = _notes(inv)
    if notes:
        parts.append("Notes\n" + "".join(f"  {n}\n" for n in notes))
    return "\n".join(parts)


_LIMIT_NAMES = {"pl2": "PL2", "critical": "critical"}


def _notes(inv: NodeInventory) -> list[str]:
    """What the tables cannot show: the node's and each device's warnings, and the limits a GPU
    reports besides the cap joulectl sets."""
    from joulectl.render import fmt_num

    notes = [*inv.cpu.warnings]
    for d in inv.gpus:
        if d.other_limits_w:
            limits = ", ".join(f"{_LIMIT_NAMES.get(k, k)} {fmt_num(v, ' W')}" for k, v in d.other_limits_w.items())
            notes.append(f"{d.bus_id}: reports {limits} (not the cap joulectl sets)")
        notes.extend(f"{d.bus_id}: {w}" for w in d.warnings)
    return notes


# -- Prometheus --------------------------------------------------------------------------------------


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Metrics:
    def __init__(self) -> None:
        self._order: list[str] = []
        self._meta: dict[str, tuple[str, str]] = {}
        self._samples: dict[str, list[str]] = {}

    def add(self, name: str, kind: str, help_text: str, labels: dict[str, str], value: float | None) -> None:
        if value is None:
            return
        full = f"joulectl_{name}"
        if full not in self._meta:
            self._order.append(full)
            self._meta[full] = (kind, help_text)
            self._samples[full] = []
        label_text = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        number = repr(float(value)) if not float(value).is_integer() else str(int(value))
        self._samples[full].append(f"{full}{{{label_text}}} {number}")

    def text(self) -> str:
        out = []
        for name in self._order:
            kind, help_text = self._meta[name]
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(self._samples[name])
        return "\n".join(out) + "\n"


def prometheus_text(inv: NodeInventory) -> str:
    """node_exporter textfile-collector metrics (``joulectl_`` prefix, watts and joules)."""
    from joulectl.backends.base import nvml_bus_id

    m = _Metrics()
    node = inv.host.hostname
    cpu = inv.cpu
    m.add("node_info", "gauge", "Node identity (value 1).",
          {"node": node, "kernel": inv.host.kernel or "", "virtual": str(inv.host.virtual).lower()}, 1)
    m.add("cpu_info", "gauge", "CPU identity (value 1).",
          {"node": node, "vendor": cpu.vendor or "", "model": cpu.raw_model or "",
           "catalog_key": cpu.catalog_key or ""}, 1)
    m.add("cpu_sockets", "gauge", "CPU sockets.", {"node": node}, cpu.sockets)
    m.add("cpu_cores", "gauge", "Physical CPU cores.", {"node": node}, cpu.cores)
    m.add("cpu_threads", "gauge", "Logical CPUs.", {"node": node}, cpu.threads)
    m.add("cpu_control_available", "gauge", "1 when the CPU package power can be capped.", {"node": node},
          int(cpu.control.available))
    for z in cpu.zones:
        labels = {"node": node, "zone": z.zone_id, "name": z.name}
        if z.energy_uj is not None:
            m.add("powercap_energy_joules_total", "counter", "Powercap zone energy counter (wraps).", labels,
                  z.energy_uj / 1_000_000)
        m.add("powercap_locked", "gauge", "1 when the package zone's PL1 is locked by firmware.", labels,
              int(_pl1_locked(z)) if z.kind == "package" and z.long_term else None)
        for k in z.constraints:
            cl = {**labels, "constraint": k.name or str(k.index)}
            m.add("powercap_limit_watts", "gauge", "Powercap constraint power limit.", cl, k.limit_w)
            m.add("powercap_limit_max_watts", "gauge", "Powercap constraint maximum.", cl, k.max_w)
            m.add("powercap_limit_min_watts", "gauge", "Powercap constraint minimum.", cl, k.min_w)
    m.add("gpus", "gauge", "GPUs counted per the Joulie rules.", {"node": node}, inv.gpu_count)
    m.add("gpu_power_domains", "gauge", "GPUs that hold a power limit.", {"node": node}, inv.power_domains)
    for d in inv.gpus:
        # dcgm-exporter's identity labels (gpu, pci_bus_id, UUID) join these series with DCGM_FI_*.
        labels = {"node": node, "gpu": str(d.index), "pci_bus_id": nvml_bus_id(d.bus_id), "bus_id": d.bus_id}
        if d.uuid:
            labels["UUID"] = d.uuid
        labels |= {"vendor": d.vendor, "model": d.model or ""}
        m.add("gpu_info", "gauge", "GPU identity (value 1).",
              {**labels, "driver": d.driver, "catalog_key": d.catalog_key or ""}, 1)
        m.add("gpu_power_cap_watts", "gauge", "GPU power limit in force.", labels, d.current_cap_w)
        m.add("gpu_power_cap_min_watts", "gauge", "GPU power limit minimum.", labels, d.cap_range.min_w)
        m.add("gpu_power_cap_max_watts", "gauge", "GPU power limit maximum.", labels, d.cap_range.max_w)
        m.add("gpu_power_cap_default_watts", "gauge", "GPU default power limit.", labels, d.cap_range.default_w)
        m.add("gpu_power_watts", "gauge", "GPU power draw.", labels, d.power_w)
        m.add("gpu_energy_joules_total", "counter", "GPU energy counter (Intel hwmon).", labels,
              d.energy_uj / 1_000_000 if d.energy_uj is not None else None)
        m.add("gpu_holds_limit", "gauge", "1 when the GPU holds its own power limit.", labels, int(d.holds_limit))
        m.add("gpu_control_available", "gauge", "1 when the GPU power limit can be set.", labels,
              int(d.control.available))
    for vendor, _message in inv.gpu_errors.items():
        m.add("gpu_discovery_error", "gauge", "1 when a vendor's GPUs could not be listed.",
              {"node": node, "vendor": vendor}, 1)
    return m.text()


# -- watch -------------------------------------------------------------------------------------------


def watch_frames(
    take: Callable[[], NodeInventory],
    interval_s: float,
    count: int | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[str]:
    """Yield one table of power draw and caps per refresh (``count`` refreshes, or forever).

    CPU package power (and an Intel GPU's, which has no power reading) is the energy counter's
    increase over the refresh interval (RAPL wraps handled with ``max_energy_range_uj``); the
    first frame has none yet.
    """
    from joulectl.render import fmt_num, table

    previous: dict[str, tuple[int, float, int | None]] = {}
    n = 0
    while count is None or n < count:
        if n:
            sleep(interval_s)
        inv = take()
        now = clock()
        rows = []
        for z in inv.cpu.zones:
            if z.kind != "package":
                continue
            watts = None
            if z.energy_uj is not None:
                prev = previous.get(z.zone_id)
                if prev is not None and now > prev[1]:
                    delta = z.energy_uj - prev[0]
                    if delta < 0 and z.max_energy_range_uj:
                        delta += z.max_energy_range_uj
                    watts = delta / 1_000_000 / (now - prev[1]) if delta >= 0 else None
                previous[z.zone_id] = (z.energy_uj, now, z.max_energy_range_uj)
            lt = z.long_term
            rows.append([z.zone_id, "cpu", z.name, fmt_num(watts, " W", 1) if watts is not None else "-",
                         _w(lt.limit_w if lt else None)])
        for d in inv.gpus:
            draw = d.power_w
            if draw is None and d.energy_uj is not None:  # Intel: energy counter over the interval
                prev_gpu = previous.get(d.bus_id)
                if prev_gpu is not None and now > prev_gpu[1] and d.energy_uj >= prev_gpu[0]:
                    draw = (d.energy_uj - prev_gpu[0]) / 1_000_000 / (now - prev_gpu[1])
                previous[d.bus_id] = (d.energy_uj, now, None)
            rows.append([d.bus_id, d.vendor, d.model or "unknown",
                         fmt_num(draw, " W", 1) if draw is not None and d.power_w is None else _w(draw),
                         _w(d.current_cap_w) if d.holds_limit else f"via {d.primary_bus_id}"])
        for vendor, message in inv.gpu_errors.items():
            rows.append(["-", vendor, f"not listed: {message}", "-", "-"])
        if not rows:
            rows.append(["-", "-", "nothing to watch: no powercap package zone and no GPU", "-", "-"])
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        n += 1
        yield table(["DEVICE", "VENDOR", "MODEL", "POWER", "CAP"], rows,
                    title=f"{inv.host.hostname} at {stamp} UTC (every {interval_s:g} s, Ctrl-C to stop)")
