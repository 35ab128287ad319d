"""``simulate compare``: replay one trace under every plan and compare them (``kind: WhatIfComparison``).

Each plan's entry: ``name``, ``energyKWh``, ``energyByClassKWh`` (performance, standard, idle; they add
up to ``energyKWh``), ``facilityEnergyKWh`` (with the facility's PUE), ``peakPowerW``, ``makespanS``,
``jobs`` (``completed``, ``unplaceable`` and its reasons by count), ``slowdown`` and ``waitS`` per
class (``mean``, ``p50``, ``p95``; slowdown = run time over duration at full speed) and ``delta``
against the first plan (absolute and relative where it is a quantity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from joulectl.sim.workload.replay import PlanResult

API_VERSION = "sim.joulie.io/v1alpha1"
KIND = "WhatIfComparison"
J_PER_KWH = 3_600_000.0
CLASSES = ("performance", "standard")


def _r(value: float, digits: int = 6) -> float:
    return round(value, digits) + 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted ``values``, by linear interpolation (numpy's default)."""
    if not values:
        return 0.0
    pos = (len(values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def stats(values: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "mean": None, "p50": None, "p95": None}
    return {"count": len(ordered), "mean": _r(math.fsum(ordered) / len(ordered)),
            "p50": _r(percentile(ordered, 0.5)), "p95": _r(percentile(ordered, 0.95))}


def plan_entry(res: PlanResult, source: str) -> dict[str, Any]:
    by_class = {k: _r(v / J_PER_KWH) for k, v in res.energy_by_class_j.items()}
    return {
        "name": res.name,
        "source": source,
        "energyKWh": _r(res.energy_j / J_PER_KWH),
        "energyByClassKWh": by_class,
        "facilityEnergyKWh": _r(res.facility_j / J_PER_KWH),
        "peakPowerW": _r(res.peak_w, 2),
        "makespanS": _r(res.end_s - res.start_s, 3),
        "jobs": {"completed": res.completed, "unplaceable": sum(res.unplaceable.values()),
                 "unplaceableReasons": [{"reason": k, "count": v} for k, v in sorted(res.unplaceable.items())]},
        "slowdown": {c: stats(res.slowdown[c]) for c in CLASSES},
        "waitS": {c: stats(res.wait_s[c]) for c in CLASSES},
        "notes": list(res.notes),
    }


def _delta(a: float | None, b: float | None) -> dict[str, Any] | None:
    if a is None or b is None:
        return None
    out: dict[str, Any] = {"abs": _r(b - a)}
    out["pct"] = _r((b - a) / a * 100.0, 3) if a else None
    return out


def deltas(first: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``other`` against ``first``: energy, facility energy, peak, makespan, per-class energy and stats."""
    d: dict[str, Any] = {
        "energyKWh": _delta(first["energyKWh"], other["energyKWh"]),
        "facilityEnergyKWh": _delta(first["facilityEnergyKWh"], other["facilityEnergyKWh"]),
        "peakPowerW": _delta(first["peakPowerW"], other["peakPowerW"]),
        "makespanS": _delta(first["makespanS"], other["makespanS"]),
        "energyByClassKWh": {k: _delta(first["energyByClassKWh"][k], v) for k, v in
                             other["energyByClassKWh"].items()},
        "jobs": {"completed": other["jobs"]["completed"] - first["jobs"]["completed"],
                 "unplaceable": other["jobs"]["unplaceable"] - first["jobs"]["unplaceable"]},
    }
    for key in ("slowdown", "waitS"):
        d[key] = {c: {m: _delta(first[key][c][m], other[key][c][m]) for m in ("mean", "p50", "p95")}
                  for c in CLASSES}
    return d


def document(results: Sequence[PlanResult], sources: Sequence[str], *, fleet: str, trace: str, tasks: int,
             nodes: int, coefficients: list[dict[str, Any]], notes: Sequence[str] = ()) -> dict[str, Any]:
    plans = [plan_entry(r, s) for r, s in zip(results, sources, strict=True)]
    for p in plans:
        p["delta"] = deltas(plans[0], p)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"fleet": fleet, "trace": trace, "tasks": tasks, "nodes": nodes, "baseline": plans[0]["name"]},
        "plans": plans,
        "model": {"coefficients": coefficients},
        "notes": list(notes),
    }


# -- the table -----------------------------------------------------------------------------------------


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _with_delta(v: Any, d: dict[str, Any] | None, digits: int = 3) -> str:
    text = _fmt(v, digits)
    if d and d.get("pct") is not None and d["abs"] != 0:
        text += f" ({d['pct']:+.1f} %)"
    return text


def table_text(doc: dict[str, Any]) -> str:
    from joulectl.render import table

    plans = doc["plans"]
    rows: list[list[str]] = []

    def row(label: str, get: Callable[[dict[str, Any]], Any], dget: Callable[[dict[str, Any]], Any] | None = None,
            digits: int = 3) -> None:
        cells = [label]
        for i, p in enumerate(plans):
            d = dget(p["delta"]) if (dget is not None and i > 0) else None
            cells.append(_with_delta(get(p), d, digits))
        rows.append(cells)

    def field(*path: str) -> Callable[[dict[str, Any]], Any]:
        def get(d: dict[str, Any]) -> Any:
            for key in path:
                d = d[key]
            return d

        return get

    row("energy (kWh)", field("energyKWh"), field("energyKWh"))
    for c in ("performance", "standard", "idle"):
        row(f"  {c} (kWh)", field("energyByClassKWh", c), field("energyByClassKWh", c))
    row("facility energy (kWh)", field("facilityEnergyKWh"), field("facilityEnergyKWh"))
    row("peak power (W)", field("peakPowerW"), field("peakPowerW"), 0)
    row("makespan (s)", field("makespanS"), field("makespanS"), 0)
    row("completed", field("jobs", "completed"))
    row("unplaceable", field("jobs", "unplaceable"))
    for c in CLASSES:
        for m in ("mean", "p50", "p95"):
            row(f"slowdown {c} {m}", field("slowdown", c, m))
        for m in ("mean", "p95"):
            row(f"wait {c} {m} (s)", field("waitS", c, m), None, 1)
    meta = doc["metadata"]
    out = table(["WHAT-IF", *[p["name"] for p in plans]], rows,
                title=f"{meta['tasks']} tasks of {meta['trace']} on {meta['nodes']} nodes of {meta['fleet']} "
                      f"(deltas against {meta['baseline']})")
    extra = []
    for p in plans:
        for reason in p["jobs"]["unplaceableReasons"]:
            extra.append(f"{p['name']}: {reason['count']} unplaceable: {reason['reason']}")
        extra.extend(f"{p['name']}: {n}" for n in p["notes"])
    extra.extend(doc["notes"])
    return out + ("\n" + "\n".join(extra) + "\n" if extra else "")


@dataclass
class Comparison:
    document: dict[str, Any]
    results: list[PlanResult]


def run_compare(
    *,
    spec: str | None,
    nodes: str | None,
    trace: str,
    plans: Sequence[str],
    profiles_dir: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Comparison:
    """Read everything (exit 2 on any bad input, before anything runs), apply the plans, replay each."""
    from joulectl.errors import InputError
    from joulectl.sim.workload import fleet as fleet_mod
    from joulectl.sim.workload.replay import replay
    from joulectl.sim.workload.speed import COEFFICIENTS, gpu_coefficients
    from joulectl.sim.workload.traces import load_trace

    if (spec is None) == (nodes is None):
        raise InputError("give a cluster spec or --nodes NODES.yaml" if spec is None
                         else "give a cluster spec or --nodes NODES.yaml, not both")
    fl = fleet_mod.fleet_from_spec(spec, profiles_dir) if spec is not None else \
        fleet_mod.fleet_from_nodes(str(nodes), profiles_dir)
    tasks = load_trace(trace)
    plan_list = fleet_mod.load_plans(plans, fl)
    total = len(tasks) * len(plan_list)

    def step(what: str) -> None:
        if progress is not None:
            progress(f"apply {what}", 0, total)

    limits = fleet_mod.apply_plans(fl, plan_list, progress=step)
    results = []
    for pi, plan in enumerate(plan_list):

        def tick(done: int, pi: int = pi, name: str = plan.name) -> None:
            if progress is not None:
                progress(f"replay {name}", pi * len(tasks) + done, total)

        results.append(replay(fl, tasks, limits[plan.name], plan.twins, plan.name, tick))
    coefficients: list[dict[str, Any]] = list(COEFFICIENTS)
    seen: set[str] = set()
    for shape in fl.shapes.values():
        for c in gpu_coefficients(shape):
            if c["gpuModel"] not in seen:
                seen.add(str(c["gpuModel"]))
                coefficients.append(c)
    doc = document(results, [p.source for p in plan_list], fleet=fl.source, trace=trace, tasks=len(tasks),
                   nodes=len(fl.nodes), coefficients=coefficients, notes=fl.notes)
    return Comparison(doc, results)
