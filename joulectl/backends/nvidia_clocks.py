"""NVIDIA clock tables and preset planning: which graphics/memory lock each preset asks for.

Pure functions over SUPPORTED_CLOCKS tables (memory MHz -> graphics MHz, highest first); no I/O.
The governor (:mod:`joulectl.backends.gov_nvidia`) applies the plans through a transport
(:mod:`joulectl.backends.nvidia_clock_io`). The presets are described there.
"""

from __future__ import annotations

import re
from typing import Any

from joulectl.backends.base import (
    normalize_bus_id,
)
from joulectl.models import GpuDevice, Status
from joulectl.record import record

GOVERNOR_ARCHS = frozenset({"ampere", "ada", "ada_lovelace", "hopper", "blackwell", "rubin"})
#: Known older architectures, named in the blocked message.
OLDER_ARCHS = frozenset({"kepler", "maxwell", "pascal", "volta", "turing"})

EFFICIENT_FRACTION = 0.75


class PresetBlocked(Exception):
    """The preset cannot be expressed on this GPU (the message says why)."""


@record(frozen=True)
class ClockLock:
    """A clock lock range in MHz, journaled as ``"min,max"``."""

    min_mhz: int
    max_mhz: int

    def text(self) -> str:
        return f"{self.min_mhz},{self.max_mhz}"

    def describe(self) -> str:
        if self.min_mhz == self.max_mhz:
            return f"{self.min_mhz} MHz"
        return f"{self.min_mhz}-{self.max_mhz} MHz"

    def contains(self, mhz: float) -> bool:
        return self.min_mhz <= mhz <= self.max_mhz

    @classmethod
    def parse(cls, value: Any) -> ClockLock | None:
        """``"min,max"`` (or a single clock) as journaled; None for anything else."""
        if not isinstance(value, str):
            return None
        parts = [p.strip() for p in value.split(",")]
        try:
            nums = [int(p) for p in parts if p]
        except ValueError:
            return None
        if len(nums) == 1:
            return cls(nums[0], nums[0])
        if len(nums) == 2:
            return cls(min(nums), max(nums))
        return None


@record(frozen=True)
class LockPlan:
    """The locks a preset wants on one GPU: None means no lock of that domain."""

    graphics: ClockLock | None
    memory: ClockLock | None


@record(frozen=True)
class ClockSample:
    """One sample of the clock query: graphics (SM) and memory MHz, GPU utilization in %."""

    graphics_mhz: int | None
    memory_mhz: int | None
    utilization_pct: int | None = None

    @property
    def busy(self) -> bool | None:
        """Whether the GPU was working (None when the utilization is unknown)."""
        return None if self.utilization_pct is None else self.utilization_pct > 0


@record(frozen=True)
class CallOutcome:
    """What one lock or reset call did."""

    status: Status  # APPLIED_UNVERIFIED (lock accepted), APPLIED (reset), or a failure status
    message: str = ""
    command: str = ""


# -- clock tables and presets ------------------------------------------------------------------


def architecture_key(device: GpuDevice) -> str | None:
    """The device's architecture, lower case with ``_`` (``Ada Lovelace`` -> ``ada_lovelace``),
    from discover or, failing that, the catalog."""
    arch = device.architecture
    if not arch:
        from joulectl.catalog import load

        entry = load().gpu(device.model) or load().gpu(device.raw_model)
        arch = entry.architecture if entry else None
    if not arch:
        return None
    return _underscored(arch.strip().lower())


def _underscored(text: str) -> str:
    """``re.sub(r"[\\s\\-]+", "_", text)`` without compiling the pattern: every run of blanks
    (Unicode's, as ``\\s``) and hyphens one ``_`` (a test holds the two equal)."""
    spaced = text.replace("-", " ")
    words = spaced.split()
    out = "_".join(words)
    if spaced[:1].isspace():
        out = "_" + out
    if words and spaced[-1:].isspace():
        out += "_"
    return out


def eligibility(device: GpuDevice) -> str | None:
    """Why this GPU gets no governor (None when it can have one)."""
    arch = architecture_key(device)
    if arch is None:
        return "GPU architecture unknown: clock locks need Ampere or newer"
    if arch not in GOVERNOR_ARCHS:
        return f"no governor for {arch.replace('_', ' ').title()} GPUs: clock locks need Ampere or newer"
    return None


def normalize_table(table: dict[Any, Any]) -> dict[int, list[int]]:
    """A clock table as ``{memory MHz: [graphics MHz, highest first]}`` (keys may be strings)."""
    out: dict[int, list[int]] = {}
    for mem, graphics in table.items():
        clocks = sorted({int(g) for g in graphics}, reverse=True)
        if clocks:
            out[int(mem)] = clocks
    return out


def parse_supported_clocks(text: str) -> dict[str, dict[int, list[int]]]:
    """``nvidia-smi -q -d SUPPORTED_CLOCKS`` text -> {bus id (sysfs form): clock table}."""
    tables: dict[str, dict[int, list[int]]] = {}
    current: dict[int, list[int]] | None = None
    mem: int | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^GPU\s+([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])\s*$", line)
        if m:
            current = tables.setdefault(normalize_bus_id(m.group(1)), {})
            mem = None
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        num = re.match(r"^\s*(\d+)\s*MHz", value)
        if key.strip() == "Memory":
            mem = int(num.group(1)) if num else None
            if mem is not None:
                current.setdefault(mem, [])
        elif key.strip() == "Graphics" and num and mem is not None:
            current[mem].append(int(num.group(1)))
    return {bus: normalize_table(t) for bus, t in tables.items() if t}


def plan_preset(
    table: dict[int, list[int]], preset: str, model_entry: dict[str, Any] | None = None, *, model: str = ""
) -> LockPlan:
    """The locks ``preset`` means for a GPU with clock ``table``; :class:`PresetBlocked` when the
    preset cannot be expressed (no clocks, or ``sustained`` without a model entry)."""
    if preset == "auto":
        return LockPlan(None, None)
    if not table:
        raise PresetBlocked("no supported clocks listed (SUPPORTED_CLOCKS is N/A)")
    top_mem = max(table)
    graphics = table[top_mem]
    max_g, min_g = max(graphics), min(graphics)
    if preset == "peak":
        return LockPlan(ClockLock(max_g, max_g), None)
    if preset == "efficient":
        limit = EFFICIENT_FRACTION * max_g
        below = [g for g in graphics if g <= limit]
        ceiling = max(below) if below else min_g
        return LockPlan(ClockLock(min_g, ceiling), None)
    if preset == "low":
        low_mem = min(table)
        offered = table[low_mem]
        return LockPlan(ClockLock(min(offered), max(offered)), ClockLock(low_mem, low_mem))
    if preset == "sustained":
        if model_entry is None:
            raise PresetBlocked(
                f"no sustained clock for {model or 'this model'} in the model presets "
                "(--model-presets FILE)"
            )
        mem = int(model_entry.get("memoryMHz") or top_mem)
        if mem not in table:
            raise PresetBlocked(
                f"memoryMHz {mem} of the model preset is not a supported memory clock "
                f"({', '.join(str(m) for m in sorted(table, reverse=True))})"
            )
        wanted = int(model_entry["graphicsMHz"])
        offered = [g for g in table[mem] if g <= wanted]
        if not offered:
            raise PresetBlocked(
                f"graphicsMHz {wanted} of the model preset is below the lowest supported clock "
                f"{min(table[mem])} MHz"
            )
        clock = max(offered)
        memory = ClockLock(mem, mem) if "memoryMHz" in model_entry else None
        return LockPlan(ClockLock(clock, clock), memory)
    raise PresetBlocked(f"unknown GPU preset {preset!r}")

