"""The twin's budgets and scores (joulie-reference §2.6): pure functions of watts, percent and °C.

```
capped_x = TDP_x·pct_x/100                     headroom = capped<=0 ? 100 : min(100, (capped-measured)/capped·100)
tempMul  = ambient<=0 ? 1 : 1/max(0.5, 1-(ambient-20)·0.02)
cooling  = TDP<=0 ? 0 : clamp(measured/TDP·tempMul·100, 0, 100)
psu      = clamp(W/50000·100, 0, 100)           PUE = 1.05 + cooling/100·0.35
density  = gpus ? (cores/192·100 + count/8·100)/2 : cores/192·100, clamp 0..100
```
Headroom has no lower bound: a node over its budget scores negative.
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE_CORES = 192
REFERENCE_GPUS = 8
PSU_REFERENCE_W = 50_000.0


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def effective_pct(pct: float | None) -> float:
    """A cap of None or <=0 percent counts as 100 (uncapped)."""
    return pct if pct is not None and pct > 0 else 100.0


def headroom_score(capped_w: float, measured_w: float) -> float:
    if capped_w <= 0:
        return 100.0
    return min(100.0, (capped_w - measured_w) / capped_w * 100.0)


def temperature_multiplier(ambient_c: float | None) -> float:
    if ambient_c is None or ambient_c <= 0:
        return 1.0
    return 1.0 / max(0.5, 1.0 - (ambient_c - 20.0) * 0.02)


def cooling_stress(measured_w: float, tdp_w: float, ambient_c: float | None) -> float:
    if tdp_w <= 0:
        return 0.0
    return _clamp(measured_w / tdp_w * temperature_multiplier(ambient_c) * 100.0, 0.0, 100.0)


def psu_stress(rack_w: float, cluster_it_w: float) -> float:
    watts = rack_w if rack_w > 0 else cluster_it_w
    if watts <= 0:
        return 0.0
    return _clamp(watts / PSU_REFERENCE_W * 100.0, 0.0, 100.0)


def estimated_pue(cooling: float) -> float:
    return 1.0 + 0.05 + cooling / 100.0 * 0.35


def density_score(total_cores: int, gpu_count: int) -> float:
    cpu = total_cores / REFERENCE_CORES * 100.0
    score = (cpu + gpu_count / REFERENCE_GPUS * 100.0) / 2.0 if gpu_count > 0 else cpu
    return _clamp(score, 0.0, 100.0)


@dataclass(frozen=True)
class Budget:
    """TDP and capped budgets of a node, watts."""

    cpu_tdp_w: float
    gpu_tdp_w: float
    cpu_capped_w: float
    gpu_capped_w: float

    @property
    def node_tdp_w(self) -> float:
        return self.cpu_tdp_w + self.gpu_tdp_w

    @property
    def node_capped_w(self) -> float:
        return self.cpu_capped_w + self.gpu_capped_w


def budget(cpu_tdp_w: float, gpu_tdp_w: float, cpu_pct: float | None, gpu_pct: float | None) -> Budget:
    """Budgets at the given caps (None or <=0 percent: uncapped)."""
    return Budget(
        cpu_tdp_w=cpu_tdp_w,
        gpu_tdp_w=gpu_tdp_w,
        cpu_capped_w=cpu_tdp_w * effective_pct(cpu_pct) / 100.0,
        gpu_capped_w=gpu_tdp_w * effective_pct(gpu_pct) / 100.0,
    )
