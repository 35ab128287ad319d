"""The presets a node lists are the presets ``governor set`` then puts in force, on every builtin
emulator profile (the L40S listed ``low`` though Ada has no run-time memory clock lock, issue 16).

One node per profile (the Flex 170 under i915 and xe), through the real CLI: ``discover`` and
``governor show`` list the same presets; every listed preset applies on every GPU (``applied`` or
``applied-unverified``), every other one fails on at least one (exit 5), and a CPU-only node lists
none (``set`` exit 3).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulectl.models import GPU_PRESETS
from joulectl.sim.profiles import builtin_profile_names

PROFILES = [*builtin_profile_names(), "intel-flex-170-4gpu+xe"]
OK = {"applied", "applied-unverified", "unchanged"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("profiles")
    pools = []
    for i, name in enumerate(PROFILES):
        profile, _, driver = name.partition("+")
        extra = f", overrides: {{gpus: {{intel: {{driver: {driver}}}}}}}" if driver else ""
        pools.append(f"  - {{name: p{i}, profile: {profile}{extra}}}")
    (base / "spec.yaml").write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: p}\n"
                                    "spec:\n  pools:\n" + "\n".join(pools) + "\n")
    assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "t")]) == 0
    return base / "t"


@pytest.mark.parametrize("profile", PROFILES)
def test_listed_presets_are_the_presets_that_work(nodes: Path, cli: Callable[..., Any], profile: str) -> None:
    root = str(nodes / f"p{PROFILES.index(profile)}-0")
    # the emulator's nvidia-smi is a Python process: on a loaded machine a call can take seconds
    slow = ("--root", root, "--tool-timeout", "60")
    discovered = json.loads(cli(*slow, "discover", "-o", "json").stdout)["status"]["gpu"]
    shown = cli(*slow, "governor", "show", "--gpu", "-o", "json")
    if not discovered.get("count"):
        assert shown.exit_code == 3
        assert cli(*slow, "governor", "set", "peak").exit_code == 3
        return
    listed = json.loads(shown.stdout)["gpu"]["presets"]
    assert discovered["governor"]["presets"] == listed
    assert listed, profile
    for preset in [p for p in GPU_PRESETS if p != "auto"] + ["auto"]:
        r = cli(*slow, "governor", "set", preset, "-o", "json")
        statuses = {x["status"] for x in json.loads(r.stdout)["results"]}
        if preset in listed:
            assert (r.exit_code, statuses <= OK) == (0, True), (profile, preset, r.stdout)
        else:
            assert r.exit_code == 5 and not statuses <= OK, (profile, preset, statuses)
