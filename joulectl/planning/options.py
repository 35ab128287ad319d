"""What a plan is asked for (:class:`PlanOptions`) and what it is computed from (:class:`ClusterInput`).

Validation errors name the CLI flag in their field (``--performance-fraction: ...``), so the same
message serves ``plan`` and ``schedule-check --spec``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.k8s import PodRef
from joulectl.models import GPU_PRESETS
from joulectl.planning.selector import Requirement, SelectorError, from_mapping, parse

POLICIES = ("static", "queue-aware")
#: ``spec.policy.name`` written for each policy (Joulie's names).
POLICY_NAMES = {"static": "static-partition-v1", "queue-aware": "queue-aware-v1"}
PROFILES = ("performance", "eco")

#: Joulie's NODE_SELECTOR default; ours selects every node unless ``--selector`` is given.
JOULIE_DEFAULT_SELECTOR = "node-role.kubernetes.io/worker"


@dataclass(frozen=True)
class ModelCap:
    """One GPU_MODEL_CAPS_JSON entry: the per-GPU cap range of a product, watts."""

    min_cap_w: float
    max_cap_w: float


@dataclass
class PlanOptions:
    """Policy, sizing and cap settings of a plan (Joulie's operator settings, joulie-reference §2.1)."""

    policy: str = "static"
    performance_fraction: float = 0.5
    queue_base_fraction: float = 0.6
    queue_min: int = 1
    queue_max: int = 1_000_000
    pods_per_performance_node: int = 10
    gpu_eco_pct: float = 60.0
    gpu_performance_pct: float = 100.0
    cpu_eco_pct: float = 60.0
    cpu_performance_pct: float = 100.0
    absolute_caps: bool = False
    #: GPU_MODEL_CAPS_JSON, raw (``{"NVIDIA-L40S": {"minCapWatts": 200, "maxCapWatts": 350}}``).
    model_caps: dict[str, Any] = field(default_factory=dict)
    #: profile -> GPU governor preset (``{"eco": "efficient"}``).
    gpu_governor: dict[str, str] = field(default_factory=dict)
    #: GPU_GOVERNOR_MODEL_PRESETS_JSON: products opted in to ``sustained``.
    governor_model_presets: dict[str, Any] = field(default_factory=dict)
    cpu_eco_cap_on_uncappable_gpu_nodes: bool = False
    #: label selector: Kubernetes requirements (:func:`joulectl.planning.selector.parse`), or the older
    #: ``{key: value}`` form (a value of None means "the key exists"); None selects every node.
    selector: tuple[Requirement, ...] | dict[str, str | None] | None = None

    def selector_requirements(self) -> tuple[Requirement, ...]:
        if self.selector is None:
            return ()
        if isinstance(self.selector, Mapping):
            return from_mapping(self.selector)
        return tuple(self.selector)

    def validate(self) -> None:
        """Raise :class:`InputError` naming the flag of the first invalid setting."""
        if self.policy not in POLICIES:
            raise InputError(
                f"unknown policy {self.policy!r} (expected {' or '.join(POLICIES)})", field="--policy"
            )
        for flag, value in (
            ("--performance-fraction", self.performance_fraction),
            ("--queue-base-fraction", self.queue_base_fraction),
        ):
            if not _finite(value) or not 0.0 <= value <= 1.0:
                raise InputError(f"must be between 0 and 1, got {value}", field=flag)
        for flag, value in (
            ("--gpu-eco-pct", self.gpu_eco_pct),
            ("--gpu-performance-pct", self.gpu_performance_pct),
            ("--cpu-eco-pct", self.cpu_eco_pct),
            ("--cpu-performance-pct", self.cpu_performance_pct),
        ):
            if not _finite(value) or not 0.0 <= value <= 100.0:
                raise InputError(f"must be between 0 and 100, got {value}", field=flag)
        if self.queue_min < 0:
            raise InputError(f"must be 0 or more, got {self.queue_min}", field="--queue-min")
        if self.queue_max < 0:
            raise InputError(f"must be 0 or more (0 means every node), got {self.queue_max}", field="--queue-max")
        if self.pods_per_performance_node < 1:
            raise InputError(
                f"must be 1 or more, got {self.pods_per_performance_node}", field="--pods-per-performance-node"
            )
        for profile, preset in self.gpu_governor.items():
            check_governor_pair(profile, preset)
        parse_model_caps(self.model_caps, "--model-caps")

    def model_cap_table(self) -> dict[str, ModelCap]:
        """The model caps keyed by normalised product name (validated)."""
        return parse_model_caps(self.model_caps, "--model-caps")


@dataclass
class ClusterInput:
    """A cluster as plain data: Node objects, NodeHardware per node, pods, measured power."""

    nodes: list[dict[str, Any]]
    hardware: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[PodRef] = field(default_factory=list)
    #: node name -> measured node power, W.
    telemetry: dict[str, float] = field(default_factory=dict)
    #: ClusterSpec facility (``ambientC``, ``coolingZones[{name, offsetC}]``), None when unknown.
    facility: dict[str, Any] | None = None
    #: what the nodes came from (a spec path, a NodeList path), for messages.
    source: str = "<input>"
    #: node name -> power trend, W/min (from a telemetry series), 0 when unknown.
    trends: dict[str, float] = field(default_factory=dict)
    #: a telemetry file was given (nodes without a value report ``prometheus-no-data``).
    telemetry_given: bool = False


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def check_governor_pair(profile: str, preset: str, flag: str = "--gpu-governor") -> None:
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r} (expected performance or eco)", field=flag)
    if preset not in GPU_PRESETS:
        raise InputError(f"unknown GPU governor preset {preset!r} (expected {', '.join(GPU_PRESETS)})", field=flag)


def parse_governor_pairs(values: list[str] | None, flag: str = "--gpu-governor") -> dict[str, str]:
    """``["eco=efficient", "performance=auto"]`` -> ``{"eco": "efficient", ...}``."""
    out: dict[str, str] = {}
    for raw in values or []:
        profile, sep, preset = raw.partition("=")
        profile, preset = profile.strip().lower(), preset.strip().lower()
        if not sep or not profile or not preset:
            raise InputError(f"expected PROFILE=PRESET (like eco=efficient), got {raw!r}", field=flag)
        check_governor_pair(profile, preset, flag)
        out[profile] = preset
    return out


def parse_selector(values: list[str] | None, flag: str = "--selector") -> tuple[Requirement, ...] | None:
    """``--selector`` texts (Kubernetes label selectors, repeatable: all must hold) as requirements;
    None when none is given. A selector that cannot be parsed is an :class:`InputError` (exit 2)."""
    if not values:
        return None
    try:
        return parse(values) or None
    except SelectorError as e:
        raise InputError(str(e), field=flag) from None


def parse_model_caps(data: Mapping[str, Any], label: str) -> dict[str, ModelCap]:
    """Validate a GPU_MODEL_CAPS_JSON map; keys are normalised (GFD suffixes dropped)."""
    from joulectl.catalog import normalize, strip_gfd_suffix

    table: dict[str, ModelCap] = {}
    for product, entry in data.items():
        where = f"{product}"
        if not isinstance(entry, Mapping):
            raise InputError("expected an object with maxCapWatts (and minCapWatts)", file=label, field=where)
        max_w: Any = entry.get("maxCapWatts")
        min_w: Any = entry.get("minCapWatts")
        if min_w is None:
            min_w = 0
        if not _number(max_w) or max_w <= 0:
            raise InputError(f"maxCapWatts must be a number above 0, got {max_w!r}", file=label, field=where)
        if not _number(min_w) or min_w < 0 or min_w > max_w:
            raise InputError(
                f"minCapWatts must be a number between 0 and maxCapWatts, got {min_w!r}", file=label, field=where
            )
        # Joulie: min = minCapWatts or 1.
        table[normalize(strip_gfd_suffix(str(product)))] = ModelCap(float(min_w) or 1.0, float(max_w))
    return table


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
