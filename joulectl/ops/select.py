"""``--device`` selection, shared by cap and governor.

A selector matches a GPU by index (``3``), PCI bus id (``0000:07:00.0``, ``07:00.0`` or
nvidia-smi's ``00000000:07:00.0``, case-insensitive) or model substring (``H100``,
case-insensitive, against the normalised and the raw model). Several selectors add up.
"""

from __future__ import annotations

from collections.abc import Sequence

from joulectl.backends.base import normalize_bus_id
from joulectl.errors import NoDeviceError
from joulectl.models import GpuDevice


def matches(device: GpuDevice, selector: str) -> bool:
    sel = selector.strip()
    if not sel:
        return False
    if sel.isdigit():
        return device.index == int(sel)
    if ":" in sel:
        return normalize_bus_id(sel) == device.bus_id or device.bus_id.endswith(sel.lower())
    needle = sel.lower()
    return any(needle in m.lower() for m in (device.model, device.raw_model) if m)


def select_devices(devices: Sequence[GpuDevice], selectors: Sequence[str] | None) -> list[GpuDevice]:
    """The devices matched by any selector (all when none); :class:`NoDeviceError` when none match."""
    if not selectors:
        if not devices:
            raise NoDeviceError("no GPU found on this node")
        return list(devices)
    chosen = [d for d in devices if any(matches(d, s) for s in selectors)]
    if not chosen:
        raise NoDeviceError(
            f"--device {', '.join(selectors)} matched no GPU "
            f"(this node has {len(devices)} GPU{'s' if len(devices) != 1 else ''})"
        )
    return chosen
