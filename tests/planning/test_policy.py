"""Sizing, family floor and selection: the upstream policy numbers (joulie-reference §7)."""

from __future__ import annotations

import pytest

from joulectl.planning import policy


@pytest.mark.parametrize(
    ("n", "fraction", "expected"),
    [
        (4, 0.5, 2),  # upstream: 4 identical nodes at 0.5 -> 2
        (5, 0.6, 3),  # upstream: 5 at 0.6 -> 3
        (5, 0.5, 3),  # 2.5 rounds away from zero (Python's round would give 2)
        (3, 0.5, 2),  # 1.5 -> 2
        (7, 0.5, 4),  # 3.5 -> 4 (banker's rounding would also give 4; 4.5 below would not)
        (9, 0.5, 5),  # 4.5 -> 5 (Python's round gives 4)
        (4, 0.0, 0),
        (4, 1.0, 4),
        (0, 0.5, 0),
    ],
)
def test_static_count(n: int, fraction: float, expected: int) -> None:
    assert policy.static_count(n, fraction) == expected


def test_static_count_clamps_fraction() -> None:
    assert policy.static_count(4, 1.7) == 4
    assert policy.static_count(4, -0.3) == 0


@pytest.mark.parametrize(
    ("pods", "expected"),
    [(20, 3), (50, 5), (0, 3), (31, 4)],  # upstream: 20 pods / 10 per node -> 3; 50 -> 5
)
def test_queue_aware_count(pods: int, expected: int) -> None:
    assert policy.queue_aware_count(5, 0.6, 1, 1_000_000, 10, pods) == expected


def test_queue_aware_normalisation() -> None:
    # max <= 0 means every node; max < min becomes min; per-node <= 0 becomes 1; min < 0 becomes 0
    assert policy.queue_aware_count(10, 0.0, 0, 0, 10, 95) == 10
    assert policy.queue_aware_count(10, 0.0, 4, 2, 10, 0) == 4
    assert policy.queue_aware_count(10, 0.0, 0, 100, 0, 3) == 3
    assert policy.queue_aware_count(10, 0.0, -5, 100, 10, 0) == 0
    # the result never exceeds the node count
    assert policy.queue_aware_count(3, 0.6, 1, 100, 10, 500) == 3


def test_family_floor() -> None:
    # a single node at fraction 0 stays performance
    assert policy.family_floor(policy.static_count(1, 0.0), ["cpu:x"], 1) == 1
    # H100, MI300X and CPU families each keep one performance node
    fams = ["gpu:NVIDIA_H100_SXM"] * 3 + ["gpu:AMD_INSTINCT_MI300X"] * 2 + ["cpu:AMD_EPYC_9654"] * 4
    assert policy.family_floor(1, fams, len(fams)) == 3
    assert policy.family_floor(5, fams, len(fams)) == 5
    assert policy.family_floor(0, [], 0) == 0


def test_order_by_density_ties_by_name() -> None:
    assert policy.order_by_density([("b", 1.0), ("a", 1.0), ("c", 5.0)]) == ["c", "a", "b"]


def test_selection_is_family_diverse_then_in_order() -> None:
    ordered = [("h0", "gpu:h"), ("h1", "gpu:h"), ("m0", "gpu:m"), ("c0", "cpu:c"), ("h2", "gpu:h")]
    assert policy.select_performance(ordered, 3) == {"h0", "m0", "c0"}
    assert policy.select_performance(ordered, 4) == {"h0", "m0", "c0", "h1"}
    assert policy.select_performance(ordered, 0) == set()
