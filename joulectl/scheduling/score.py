"""Joulie's scheduler-extender score, 0..100 per node (joulie-reference §3 "Score", §8 items 9-10).

::

    no twin | stale twin                     -> 50
    marginal = NodeHardware known ? estimate(pod, node) : 0
    headroom = nodeCappedPowerW > 0 ? min(100, (capped - (measured + marginal)) / capped * 100)
                                    : predictedPowerHeadroomScore
    trendBonus = trend != 0 ? -clamp(trend / (|clusterTrend| > 500 ? 2 : 6), -25, 25) : 0
    score = 0.7 headroom + 0.15 (100 - cooling) + trendBonus
            + 10 [standard pod on an eco node] - 0.3 perfPressure [standard pod on a performance node]
    int(clamp(score, 0, 100))   (truncated)

``clusterTrend`` is the sum of the trends of the fresh twins that carry a power measurement;
``perfPressure`` the mean of ``100 - predictedPowerHeadroomScore`` over the fresh performance twins.
A twin is stale when ``status.lastUpdated`` is missing, unparsable or older than 5 minutes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

STALE_AFTER = timedelta(minutes=5)
NEUTRAL_SCORE = 50

#: Marginal-power coefficients (Joulie's MARGINAL_* defaults).
CPU_UTIL_COEFF = 0.7
GPU_UTIL_COEFF_STANDARD = 0.65
GPU_UTIL_COEFF_PERFORMANCE = 0.85
GPU_FALLBACK_W = {"nvidia": 350.0, "amd": 400.0}
GPU_FALLBACK_OTHER_W = 350.0


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 / ISO 8601 time as an aware datetime (naive means UTC); None when unparsable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            number = float(str(value)) if value is not None and str(value).strip() else None
        except ValueError:
            return None
    else:
        number = float(value)
    return number if number is not None and math.isfinite(number) else None


#: The NodeTwin numbers the score reads (paths under the twin); the twins-file reader checks them.
TWIN_NUMBER_FIELDS = (
    ("status", "predictedPowerHeadroomScore"),
    ("status", "predictedCoolingStressScore"),
    ("status", "powerMeasurement", "measuredNodePowerW"),
    ("status", "powerMeasurement", "nodeCappedPowerW"),
    ("status", "powerMeasurement", "powerTrendWPerMin"),
)


def twin_number_problem(twin: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first score field of ``twin`` that is present but not a finite number, as
    ``(dotted field, problem)``; None when every one is a number or absent (null counts as absent).
    A number written as a string is refused too: the CRD types these fields ``number``."""
    for path in TWIN_NUMBER_FIELDS:
        node: Any = twin
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is None:
            continue
        dotted = ".".join(path)
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            shown = repr(node) if isinstance(node, str) else f"a {type(node).__name__}"
            return dotted, f"must be a number, got {shown[:60]}"
        if not math.isfinite(node):
            return dotted, f"must be a finite number, got {node}"
    return None


@dataclass(frozen=True)
class TwinView:
    """The numbers of a NodeTwin the score reads."""

    schedulable_class: str
    measured_w: float
    capped_w: float
    trend_w_per_min: float
    headroom_score: float
    cooling_score: float
    has_measurement: bool
    last_updated: datetime | None

    @classmethod
    def from_twin(cls, twin: Mapping[str, Any]) -> TwinView:
        status = twin.get("status") or {}
        if not isinstance(status, Mapping):
            status = {}
        pm = status.get("powerMeasurement")
        pmm: Mapping[str, Any] = pm if isinstance(pm, Mapping) else {}
        return cls(
            schedulable_class=str(status.get("schedulableClass") or "unknown").lower(),
            measured_w=_num(pmm.get("measuredNodePowerW")) or 0.0,
            capped_w=_num(pmm.get("nodeCappedPowerW")) or 0.0,
            trend_w_per_min=_num(pmm.get("powerTrendWPerMin")) or 0.0,
            headroom_score=_num(status.get("predictedPowerHeadroomScore")) or 0.0,
            cooling_score=_num(status.get("predictedCoolingStressScore")) or 0.0,
            has_measurement=isinstance(pm, Mapping),
            last_updated=parse_time(status.get("lastUpdated")),
        )

    def stale(self, now: datetime) -> bool:
        return self.last_updated is None or now - self.last_updated > STALE_AFTER


@dataclass(frozen=True)
class ClusterAggregates:
    cluster_trend_w_per_min: float
    perf_pressure: float


def aggregates(twins: Iterable[TwinView], now: datetime) -> ClusterAggregates:
    """``clusterTrend`` and ``perfPressure`` over the fresh twins."""
    trend = 0.0
    pressures: list[float] = []
    for t in twins:
        if t.stale(now):
            continue
        if t.has_measurement:
            trend += t.trend_w_per_min
        if t.schedulable_class == "performance":
            pressures.append(100.0 - t.headroom_score)
    return ClusterAggregates(trend, sum(pressures) / len(pressures) if pressures else 0.0)


# -- marginal power ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PodPowerDemand:
    """What the marginal estimate reads of a pod."""

    workload_class: str
    cpu_cores: float
    memory_bytes: float
    gpus: float  # weighted GPUs (MIG g/7)
    gpu_vendor: str | None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def marginal_watts(pod: PodPowerDemand, hardware: Mapping[str, Any] | None, node_cores: float = 0.0) -> float:
    """Joulie's EstimateMarginalImpact: the power the pod would add to the node, in watts.

    ``dCPU = cpuMax * 0.7 * clamp(podCores/cores, 0, 1) * clamp(1 + memGiB * 0.01, 1, 1.3)`` where
    cpuMax is the NodeHardware CPU maximum (``maxWattsPerSocket * sockets``), else
    ``max(150, cores * 3.5)``; ``dGPU = gpus * maxPerGpu * (0.85 performance | 0.65)`` on a GPU node
    (fallback 350 W NVIDIA, 400 W AMD, 350 W other). A pod without a CPU request counts 0.5 cores
    (performance) or 0.25. On a node whose GPUs share power domains (MI250X: two GCDs per limit)
    the per-GPU maximum is scaled by ``powerDomains / count``. 0 without NodeHardware.
    """
    if not hardware:
        return 0.0
    status = _mapping(hardware.get("status"))
    cpu = _mapping(status.get("cpu"))
    gpu = _mapping(status.get("gpu"))
    cores = _num(cpu.get("totalCores")) or node_cores or 0.0
    sockets = _num(cpu.get("sockets")) or 0.0
    per_socket = _num(_mapping(cpu.get("capRange")).get("maxWattsPerSocket")) or 0.0
    cpu_max = per_socket * max(sockets, 1.0)
    if cpu_max <= 0:
        cpu_max = max(150.0, cores * 3.5)
    pod_cores = pod.cpu_cores if pod.cpu_cores > 0 else (0.5 if pod.workload_class == "performance" else 0.25)
    share = min(max(pod_cores / (cores if cores > 0 else 1.0), 0.0), 1.0)
    mem_mod = min(max(1.0 + pod.memory_bytes / 2**30 * 0.01, 1.0), 1.3)
    d_cpu = cpu_max * CPU_UTIL_COEFF * share * mem_mod
    d_gpu = 0.0
    count = _num(gpu.get("count")) or 0.0
    has_gpu = gpu.get("present") is True or count > 0
    if pod.gpus > 0 and has_gpu:
        vendor = str(gpu.get("vendor") or pod.gpu_vendor or "").lower()
        per_gpu = _num(_mapping(gpu.get("capRangePerGpu")).get("maxWatts")) or 0.0
        if per_gpu <= 0:
            per_gpu = GPU_FALLBACK_W.get(vendor, GPU_FALLBACK_OTHER_W)
        domains = _num(gpu.get("powerDomains")) or 0.0
        if 0 < domains < count:
            per_gpu *= domains / count
        coeff = GPU_UTIL_COEFF_PERFORMANCE if pod.workload_class == "performance" else GPU_UTIL_COEFF_STANDARD
        d_gpu = pod.gpus * per_gpu * coeff
    return d_cpu + d_gpu


# -- the score ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """A node's score and how it was made (``reason`` is one line for people)."""

    value: int
    reason: str
    headroom: float | None = None
    cooling: float | None = None
    trend_bonus: float = 0.0
    class_adjustment: float = 0.0
    marginal_w: float = 0.0


def _signed(value: float) -> str:
    return f"{value:+.1f}"


def score(
    pod_class: str,
    twin: TwinView | None,
    agg: ClusterAggregates,
    now: datetime,
    marginal_w: float = 0.0,
) -> Score:
    """The extender's score of one node for a pod of ``pod_class`` (performance | standard)."""
    if twin is None:
        return Score(NEUTRAL_SCORE, "no NodeTwin: neutral score")
    if twin.stale(now):
        when = twin.last_updated.isoformat() if twin.last_updated else "never"
        return Score(NEUTRAL_SCORE, f"NodeTwin stale (lastUpdated {when}): neutral score")
    if twin.capped_w > 0:
        headroom = min(100.0, (twin.capped_w - (twin.measured_w + marginal_w)) / twin.capped_w * 100.0)
    else:
        headroom = twin.headroom_score
    trend_bonus = 0.0
    if twin.trend_w_per_min != 0:
        divisor = 2.0 if abs(agg.cluster_trend_w_per_min) > 500 else 6.0
        trend_bonus = -min(max(twin.trend_w_per_min / divisor, -25.0), 25.0)
    adjust = 0.0
    if pod_class == "standard" and twin.schedulable_class == "eco":
        adjust = 10.0
    elif pod_class == "standard" and twin.schedulable_class == "performance":
        adjust = -0.3 * agg.perf_pressure
    raw = 0.7 * headroom + 0.15 * (100.0 - twin.cooling_score) + trend_bonus + adjust
    value = int(min(max(raw, 0.0), 100.0))
    parts = [f"headroom {headroom:.1f}", f"cooling {twin.cooling_score:.1f}"]
    if marginal_w:
        parts.append(f"pod adds ~{marginal_w:.0f} W")
    if trend_bonus:
        parts.append(f"trend {_signed(trend_bonus)}")
    if adjust > 0:
        parts.append("standard on eco +10")
    elif adjust < 0:
        parts.append(f"performance pressure {_signed(adjust)}")
    return Score(value, ", ".join(parts), headroom, twin.cooling_score, trend_bonus, adjust, marginal_w)
