"""The caps a node's profile gives it (SPEC §7, joulie-reference §2.4).

- A GPU node gets the GPU cap of its profile (``capPctOfMax``, plus ``capWattsPerGpu`` with
  absolute caps) and no CPU cap: unlike Joulie, which writes ``packagePowerCapWatts`` 120/5000 there.
- A GPU node whose GPUs cannot be capped gets neither, unless ``cpu_eco_cap_on_uncappable_gpu_nodes``:
  then the CPU cap of its profile.
- A CPU-only node gets the CPU cap of its profile: ``packagePowerCapPctOfMax``, or with absolute caps
  ``packagePowerCapWatts`` from the hardware range or the catalog TDP·sockets (min 0.55·max).
- A percentage of 0 means no cap of that kind.
- The GPU governor of the profile, when the node's GPUs accept the preset.
- A GPU whose enforced limit (NodeHardware ``enforcedCapWatts``) is below its maximum is budgeted
  at the enforced limit when that is below the plan's cap: another limiter holds it there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from joulectl import catalog
from joulectl.planning.hardware import NodeFacts
from joulectl.planning.options import PlanOptions

#: Joulie's CPU minimum when only the catalog TDP is known: 0.55 of the maximum.
CPU_CATALOG_MIN_FRACTION = 0.55


@dataclass
class CapPlan:
    """``spec.cpu`` and ``spec.gpu`` of a NodeTwin, and the percentages the twin budgets with."""

    cpu: dict[str, Any]
    gpu: dict[str, Any] | None
    #: percent of TDP the budget assumes (100 = uncapped).
    cpu_pct: float
    gpu_pct: float
    gpu_cap_source: str | None = None
    notes: list[str] = field(default_factory=list)


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def num(value: float) -> float | int:
    """A number for output: integral values as int, others rounded to 0.01."""
    rounded = round(value, 2)
    return int(rounded) if rounded == int(rounded) else rounded


def gpu_cap_watts(facts: NodeFacts, pct: float) -> tuple[float, str] | None:
    """``capWattsPerGpu`` for ``pct``: hardware range, catalog, then the model caps map."""
    if facts.gpu_range_source == "nodehardware":
        return _clamp(pct / 100.0 * facts.gpu_max_w, facts.gpu_min_w, facts.gpu_max_w), "nodehardware"
    if facts.gpu_range_source == "generic":  # never write watts from an assumption
        return None
    entry = catalog.load().gpus.get(facts.gpu_key) if facts.gpu_key else None
    if entry is not None:
        return _clamp(pct / 100.0 * entry.max_board_power_w, entry.min_w, entry.max_board_power_w), "catalog"
    cap = facts.model_cap
    if cap is not None:
        return _clamp(pct / 100.0 * cap.max_cap_w, cap.min_cap_w, cap.max_cap_w), "model-caps"
    return None


def cpu_cap_watts(facts: NodeFacts, pct: float) -> float | None:
    """``packagePowerCapWatts`` for ``pct``: hardware range, else catalog TDP·sockets (min 0.55·max)."""
    if facts.cpu_range_source == "nodehardware":
        max_w = facts.cpu_max_w_per_socket * facts.sockets
        min_w = facts.cpu_min_w_per_socket * facts.sockets
        return _clamp(pct / 100.0 * max_w, min_w, max_w)
    if facts.cpu_range_source == "catalog":
        max_w = facts.cpu_max_w_per_socket * facts.sockets
        return _clamp(pct / 100.0 * max_w, CPU_CATALOG_MIN_FRACTION * max_w, max_w)
    return None


def _cpu_cap(facts: NodeFacts, pct: float, options: PlanOptions, notes: list[str]) -> tuple[dict[str, Any], float]:
    if pct <= 0:
        return {}, 100.0
    if facts.cpu_cap_note:
        notes.append(f"{facts.cpu_cap_note}: the node will report the CPU cap blocked")
    if options.absolute_caps:
        w = cpu_cap_watts(facts, pct)
        if w is not None:
            tdp = facts.cpu_tdp_w
            return {"packagePowerCapWatts": num(max(1.0, w))}, (min(100.0, w / tdp * 100.0) if tdp > 0 else pct)
        notes.append("CPU cap range unknown (no NodeHardware range, no catalog match): cap left in percent")
    return {"packagePowerCapPctOfMax": num(pct)}, pct


def plan_caps(facts: NodeFacts, profile: str, options: PlanOptions) -> CapPlan:
    """The caps and governor of ``facts`` in ``profile`` (``performance`` or ``eco``)."""
    eco = profile == "eco"
    gpu_pct = options.gpu_eco_pct if eco else options.gpu_performance_pct
    cpu_pct = options.cpu_eco_pct if eco else options.cpu_performance_pct
    notes: list[str] = []
    if not facts.is_gpu_node:
        cpu_only, eff = _cpu_cap(facts, cpu_pct, options, notes)
        return CapPlan(cpu=cpu_only, gpu=None, cpu_pct=eff, gpu_pct=100.0, notes=notes)

    gpu: dict[str, Any] = {}
    cpu: dict[str, Any] = {}
    eff_cpu, eff_gpu, source = 100.0, 100.0, None
    if facts.gpu_range_source == "generic":
        notes.append(
            f"GPU model {facts.gpu_model or 'unknown'} is not in the catalog: budgets assume a generic "
            f"{num(facts.gpu_max_w)} W GPU (min {num(facts.gpu_min_w)} W)"
        )
    if not facts.gpu_cappable:
        notes.append(f"GPUs cannot be capped ({facts.gpu_cap_note})")
        if options.cpu_eco_cap_on_uncappable_gpu_nodes:
            cpu, eff_cpu = _cpu_cap(facts, cpu_pct, options, notes)
    elif gpu_pct > 0:
        power_cap: dict[str, Any] = {"scope": "perGpu", "capPctOfMax": num(gpu_pct)}
        eff_gpu = gpu_pct
        if facts.gpu_max_w > 0:
            # A percentage resolves per device to max(pct·max, min) (SPEC §10).
            eff_gpu = max(gpu_pct / 100.0 * facts.gpu_max_w, facts.gpu_min_w) / facts.gpu_max_w * 100.0
        if options.absolute_caps:
            resolved = gpu_cap_watts(facts, gpu_pct)
            if resolved is not None:
                w, source = resolved
                power_cap["capWattsPerGpu"] = num(max(1.0, w))
                if facts.gpu_max_w > 0:
                    eff_gpu = min(100.0, w / facts.gpu_max_w * 100.0)
            else:
                notes.append(
                    f"no cap range for GPU model {facts.gpu_model or 'unknown'} (hardware, catalog, model caps): "
                    "cap left in percent"
                )
        gpu["powerCap"] = power_cap

    preset = options.gpu_governor.get(profile)
    if preset:
        if preset in facts.governor_presets:
            gpu["governor"] = preset
        elif preset == "sustained" and facts.governor_presets:
            notes.append(
                f"GPU governor sustained not set: model {facts.gpu_model or 'unknown'} is not in the governor "
                "model presets"
            )
        else:
            accepted = ", ".join(facts.governor_presets) or "none"
            notes.append(f"GPU governor {preset} not set: the node's GPUs accept {accepted}")
    enforced = facts.gpu_enforced_w
    if enforced is not None and 0 < enforced < facts.gpu_max_w:
        # Another limiter (the platform, out of band) holds the GPUs below the maximum: budget at it.
        held = enforced / facts.gpu_max_w * 100.0
        if held < eff_gpu:
            eff_gpu = held
            notes.append(f"GPUs budgeted at their enforced limit {num(enforced)} W (requested limits above it)")
    return CapPlan(cpu=cpu, gpu=gpu or None, cpu_pct=eff_cpu, gpu_pct=eff_gpu, gpu_cap_source=source, notes=notes)
