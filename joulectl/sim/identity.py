"""What each emulated node and GPU is (profile, CPU model, GPU vendor, product, bus id, UUID),
from a spec's resolved profiles and their layout models: for the telemetry's identity labels, the
HTTP endpoints and the exporter formats."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuMeta:
    """What a GPU is, for the exporter formats (from the profile and its layout)."""

    key: str  # gpu0, gpu1, ... as in Sample
    index: int
    vendor: str
    product: str
    bus_id: str  # 0000:18:00.0, lower-case hex as sysfs spells it
    uuid: str = ""
    serial: str = ""
    max_w: float = 0.0
    idle_w: float = 0.0
    max_sm_clock_mhz: int = 0
    max_mem_clock_mhz: int = 0
    memory_mib: int = 0
    driver_version: str = ""
    vbios_version: str = ""


@dataclass(frozen=True)
class NodeMeta:
    """What a node is: its profile, CPU model, packages and GPUs."""

    node: str
    profile: str
    virtual: bool = False
    cpu_model: str = ""
    packages: tuple[str, ...] = ()  # pkg0, pkg1, ...
    package_idle_w: float = 0.0
    gpus: tuple[GpuMeta, ...] = ()


def node_metas(spec: Any, models: Iterable[Any]) -> dict[str, NodeMeta]:
    """One :class:`NodeMeta` per spec node, from its resolved profile and its layout model."""
    by_name = {m.node: m for m in models}
    out: dict[str, NodeMeta] = {}
    for node in spec.nodes:
        model = by_name.get(node.name)
        if model is None:
            continue
        out[node.name] = _node_meta(node.name, node.profile, model)
    return out


def _node_meta(name: str, profile: Any, model: Any) -> NodeMeta:
    gcfg: dict[str, Any] = profile.gpus
    boards: list[dict[str, Any]] = list(profile.boards or [])
    system = profile.board_system or {}
    product = str(gcfg.get("model", ""))
    gpus = []
    for g in model.gpus:
        b = boards[g.index] if g.index < len(boards) else {}
        clocks = b.get("clocks") or {}
        mem = b.get("memory") or {}
        gpus.append(GpuMeta(
            key=f"gpu{g.index}",
            index=g.index,
            vendor=g.vendor,
            product=str(b.get("name") or product or f"{g.vendor} GPU"),
            bus_id=(g.bus_id or str((b.get("pci") or {}).get("bus_id", ""))).lower(),
            uuid=str(b.get("uuid", "")),
            serial=str(b.get("serial", "")),
            max_w=float(g.params.max_w),
            idle_w=float(g.params.idle_w),
            max_sm_clock_mhz=int(clocks.get("sm_max") or clocks.get("graphics_max") or _amd_top_mhz(g)),
            max_mem_clock_mhz=int(clocks.get("memory_max") or 0),
            memory_mib=int(mem.get("total_bytes", 0)) >> 20 if mem else int(gcfg.get("memoryMiB", 0) or 0),
            driver_version=str(system.get("driver_version", "")),
            vbios_version=str(b.get("vbios_version", "")),
        ))
    packages = tuple(f"pkg{p.index}" for p in model.packages)
    idle_w = float(model.packages[0].params.idle_w) if model.packages else 0.0
    return NodeMeta(node=name, profile=profile.name, virtual=bool(model.virtual),
                    cpu_model=str(profile.cpu.get("model", "")), packages=packages, package_idle_w=idle_w,
                    gpus=tuple(gpus))


def _amd_top_mhz(gpu: Any) -> int:
    levels = getattr(gpu, "sclk_mhz", ()) or ()
    return int(max(levels)) if levels else 0
