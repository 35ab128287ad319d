"""Random pools and overrides: a ClusterSpec is either expanded (and renders a layout and a Node) or
refused with an InputError; never an internal error."""

from __future__ import annotations

import random
from typing import Any

from joulectl.errors import InputError
from joulectl.sim.clusterspec import parse_spec
from joulectl.sim.k8s import node_hardware, node_object
from joulectl.sim.profiles import SCHEMA
from joulectl.sim.template import template

VALUES: list[Any] = [None, 0, -1, 1, 2.5, "x", "", True, [], {}, [1], {"a": 1}, "../x", "A", 10**9]
PROFILES = ["vm-no-powercap", "nvidia-h100-sxm-8gpu", "amd-instinct-mi250x-4gpu", "intel-flex-170-4gpu",
            "intel-xeon-2s-rapl"]
POOL_KEYS = ["count", "prefix", "startIndex", "rack", "coolingZone", "labels", "baseLoad", "kwok", "annotations"]


def _random_override(rng: random.Random, spec: Any, depth: int = 0) -> Any:
    if isinstance(spec, dict) and depth < 4:
        keys = rng.sample(list(spec), k=min(len(spec), rng.randint(0, 2)))
        return {k: _random_override(rng, spec[k], depth + 1) if rng.random() < 0.8 else rng.choice(VALUES)
                for k in keys}
    if isinstance(spec, list):
        return [_random_override(rng, spec[0], depth + 1) for _ in range(rng.randint(0, 2))]
    return rng.choice(VALUES)


def test_random_specs_are_expanded_or_refused() -> None:
    rng = random.Random(20261130)
    accepted = refused = 0
    for _ in range(400):
        pool: dict[str, Any] = {"name": "p", "profile": rng.choice(PROFILES)}
        for key in rng.sample(POOL_KEYS, k=rng.randint(0, 3)):
            pool[key] = rng.choice(VALUES)
        if rng.random() < 0.7:
            pool["overrides"] = _random_override(rng, {k: SCHEMA[k] for k in ("cpu", "gpus", "labels", "node")})
        doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "t"},
               "spec": {"pools": [pool]}}
        try:
            spec = parse_spec(doc, "fuzz.yaml")
        except InputError as e:
            assert str(e).startswith("fuzz.yaml: ")
            refused += 1
            continue
        accepted += 1
        if spec.nodes and len(spec.nodes) <= 2:
            node = spec.nodes[0]
            assert template(node.profile).dirs
            assert node_object(node)["metadata"]["name"] == node.name
            assert node_hardware(node)["spec"]["nodeName"] == node.name
    assert accepted > 50 and refused > 50
