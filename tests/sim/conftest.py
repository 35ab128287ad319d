"""Shared fixtures of the simulator tests: specs written to tmp_path, trees rendered once per session."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulectl.sim.clusterspec import parse_spec
from joulectl.sim.profiles import builtin_profile_names
from joulectl.sim.tree import render_nodes

API = "sim.joulie.io/v1alpha1"


@pytest.fixture(autouse=True)
def _fresh_tick_layouts() -> Iterator[None]:
    """Every test computes sim/tick.py's per-layout shared data itself: the module keeps it in a
    cache (``_SHARED``) that the first test of a process to tick a layout would fill for the
    later ones, so a test would pass or fail by which tests ran before it in the process, and the
    mutation script's map (scripts/mutate.py: which test ran a line) would tie those lines to the
    first test alone (docs/TESTING.md, "Mutation testing")."""
    tick = sys.modules.get("joulectl.sim.tick")
    if tick is not None:
        tick._SHARED.clear()
    yield


def spec_doc(pools: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ClusterSpec", "metadata": {"name": "t"}, "spec": {"pools": pools, **spec}}


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., str]:
    """Write a ClusterSpec (a dict, or raw YAML text) to tmp_path and return its path."""
    counter = [0]

    def make(doc: dict[str, Any] | str, name: str | None = None) -> str:
        counter[0] += 1
        path = tmp_path / (name or f"spec{counter[0]}.yaml")
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
        return str(path)

    return make


def render_one(root: Path, profile: str, name: str = "n", overrides: dict[str, Any] | None = None) -> Path:
    """Render one node of ``profile`` under ``root`` and return its tree."""
    pool: dict[str, Any] = {"name": name, "profile": profile, "count": 1}
    if overrides:
        pool["overrides"] = overrides
    spec = parse_spec(spec_doc([pool]), "test-spec")
    render_nodes(spec.nodes, str(root))
    return root / f"{name}-0"


def ticked_h100(tmp_path: Path) -> tuple[str, Path]:
    """(spec file, root) of a one-node H100 cluster under load, run for one tick: ``h100-0``'s
    tree has its first tick's state (run ``runtime.run(spec, root, ticks=1, fast=True)`` again
    for another)."""
    from joulectl.sim import runtime

    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: t}\nspec:\n"
                    "  defaults:\n    baseLoad: {cpuUtil: 0.5, gpuUtil: 1.0}\n"
                    "  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n")
    root = tmp_path / "root"
    runtime.run(str(spec), str(root), ticks=1, fast=True)
    return str(spec), root


@pytest.fixture(scope="session")
def all_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One rendered (never modified) tree per builtin profile: {profile: node dir}."""
    root = tmp_path_factory.mktemp("all-profiles")
    names = builtin_profile_names()
    pools = [{"name": f"p{i}", "profile": n, "count": 1} for i, n in enumerate(names)]
    spec = parse_spec(spec_doc(pools), "all-profiles")
    render_nodes(spec.nodes, str(root), workers=1)
    return {n: root / f"p{i}-0" for i, n in enumerate(names)}


def read(path: Path) -> str:
    return path.read_text().strip()


def mode(path: Path) -> int:
    return os.lstat(path).st_mode & 0o777
