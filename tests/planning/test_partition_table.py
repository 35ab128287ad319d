"""Partition sizes of ``plan`` from a hand-worked table (joulie-reference §2.2-2.3).

Each row was worked by hand from the rule, not from ``policy.static_count``: performance nodes
= round(n·F) with halves away from zero (Go's ``math.Round``), raised to one per hardware
family, at most n; the rest are eco. The rows with a half (n·F = 2.5, 3.5, 4.5) are where
Python's ``round`` (to even) would give one fewer.
"""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from joulectl.planning import ClusterInput, PlanOptions, plan
from joulectl.planning.policy import queue_aware_count

NOW = datetime(2026, 3, 13, 12, 0, 0, tzinfo=timezone.utc)

# (nodes per family: EPYC CPU-only, H100, MI300X), F, performance, eco
TABLE = [
    ((1, 0, 0), 0.5, 1, 0),     # 0.5 -> 1
    ((3, 0, 0), 0.5, 2, 1),     # 1.5 -> 2
    ((10, 0, 0), 0.25, 3, 7),   # 2.5 -> 3 (round-to-even: 2)
    ((7, 0, 0), 0.5, 4, 3),     # 3.5 -> 4
    ((9, 0, 0), 0.5, 5, 4),     # 4.5 -> 5 (round-to-even: 4)
    ((6, 0, 0), 0.75, 5, 1),    # 4.5 -> 5
    ((10, 0, 0), 0.24, 2, 8),   # 2.4 -> 2
    ((10, 0, 0), 0.26, 3, 7),   # 2.6 -> 3
    ((4, 0, 0), 0.0, 1, 3),     # 0 -> the family floor, 1
    ((4, 0, 0), 1.0, 4, 0),
    ((4, 3, 2), 0.1, 3, 6),     # 0.9 -> 1, raised to 3 families
    ((4, 3, 2), 0.5, 5, 4),     # 4.5 -> 5
    ((4, 3, 2), 0.0, 3, 6),
    ((4, 3, 2), 1.0, 9, 0),
    ((1, 1, 1), 0.0, 3, 0),     # three families in three nodes: every node is performance
]


def _fleet(kube: SimpleNamespace, cpu: int, h100: int, mi300x: int) -> list[dict[str, Any]]:
    return ([kube.node(f"cpu-{i}", kube.EPYC) for i in range(cpu)]
            + [kube.gpu_node(f"h100-{i}", kube.H100, "nvidia.com/gpu", 8) for i in range(h100)]
            + [kube.gpu_node(f"mi300x-{i}", kube.MI300X, "amd.com/gpu", 8) for i in range(mi300x)])


@pytest.mark.parametrize(("families", "fraction", "performance", "eco"), TABLE)
def test_partition_sizes(kube: SimpleNamespace, families: tuple[int, int, int], fraction: float,
                         performance: int, eco: int) -> None:
    result = plan(ClusterInput(nodes=_fleet(kube, *families)), PlanOptions(performance_fraction=fraction), now=NOW)
    got = sorted(t["spec"]["profile"] for t in result.twins)
    assert got == ["eco"] * eco + ["performance"] * performance
    assert result.summary["performance"] == performance


# queue-aware sizing: clamp(clamp(max(round(n·frac), ceil(pods/perNode)), min, max), 0, n) with
# min<0 -> 0, max<=0 -> n, max<min -> min, perNode<=0 -> 1, worked by hand
@pytest.mark.parametrize(("args", "expected"), [
    ((10, 0.25, 0, 0, 4, 0), 3),    # round(2.5) = 3, no pods
    ((10, 0.25, 0, 0, 4, 13), 4),   # ceil(13/4) = 4 > 3
    ((10, 0.25, 0, 0, 4, 12), 3),   # ceil(12/4) = 3
    ((10, 0.0, 0, 0, 0, 5), 5),     # perNode 0 -> 1: 5 pods need 5
    ((10, 0.0, 0, 2, 1, 5), 2),     # held to max 2
    ((10, 0.9, 0, 2, 1, 0), 2),     # round(9) held to 2
    ((10, 0.0, 3, 0, 1, 0), 3),     # raised to min 3
    ((10, 0.0, 6, 4, 1, 0), 6),     # max 4 < min 6: max becomes 6
    ((10, 0.0, -2, 0, 1, 1), 1),    # min < 0 -> 0
    ((4, 0.0, 0, 0, 1, 40), 4),     # never above n
    ((4, 0.0, 9, 0, 1, 0), 4),      # min 9 over n 4: n
])
def test_queue_aware_count_table(args: tuple[int, float, int, int, int, int], expected: int) -> None:
    assert queue_aware_count(*args) == expected
