"""How many nodes stay at performance, and which (joulie-reference §2.2-2.3).

Sizing rounds halves away from zero, as Go's ``math.Round`` does. The family floor keeps one
performance node per hardware family; selection runs over the density-ordered nodes in two passes
(first node of each family, then the rest in order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import TypeVar

from joulectl.units import round_half_away

T = TypeVar("T")


def clamp_int(x: int, lo: int, hi: int) -> int:
    return lo if x < lo else hi if x > hi else x


def static_count(n: int, fraction: float) -> int:
    """``clamp(round(n·clamp01(frac)), 0, n)``."""
    frac = 0.0 if fraction < 0 else 1.0 if fraction > 1 else fraction
    return clamp_int(round_half_away(n * frac), 0, n)


def queue_aware_count(
    n: int, base_fraction: float, hp_min: int, hp_max: int, perf_per_node: int, perf_pods: int
) -> int:
    """``clamp(clamp(max(round(n·frac), ceil(pods/perNode)), min, max), 0, n)`` with Joulie's
    normalisation (min<0 -> 0, max<=0 -> n, max<min -> min, perNode<=0 -> 1)."""
    hp_min = max(hp_min, 0)
    if hp_max <= 0:
        hp_max = n
    hp_max = max(hp_max, hp_min)
    perf_per_node = perf_per_node if perf_per_node > 0 else 1
    base = round_half_away(n * base_fraction)
    need = math.ceil(perf_pods / perf_per_node) if perf_pods > 0 else 0
    return clamp_int(clamp_int(max(base, need), hp_min, hp_max), 0, n)


def family_floor(hp: int, families: Iterable[str], n: int) -> int:
    """``min(max(hp, #families), n)``: every hardware family keeps a performance node."""
    return min(max(hp, len(set(families))), n)


def order_by_density(items: Sequence[tuple[str, float]]) -> list[str]:
    """Names sorted by density descending, ties by name (two stable sorts: no key tuple per item)."""
    return [name for name, _ in density_order(sorted(items, key=itemgetter(0)), itemgetter(1))]


def density_order(by_name: Iterable[T], density: Callable[[T], float]) -> list[T]:
    """Nodes given in name order, sorted by density descending, ties by name (a stable sort:
    ``reverse`` keeps the name order of equal densities)."""
    return sorted(by_name, key=density, reverse=True)


def select_performance(ordered: Sequence[tuple[str, str]], hp: int) -> set[str]:
    """Two-pass family-diverse selection over ``(name, family)`` in density order."""
    chosen: list[str] = []
    taken: set[str] = set()
    seen: set[str] = set()
    for name, family in ordered:
        if len(chosen) >= hp:
            break
        if family not in seen:
            seen.add(family)
            chosen.append(name)
            taken.add(name)
    for name, _ in ordered:
        if len(chosen) >= hp:
            break
        if name not in taken:
            chosen.append(name)
            taken.add(name)
    return taken
