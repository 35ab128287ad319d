"""Correctness at fleet scale: 2,000 nodes, caps written on random nodes between ticks, every one
read back in the next tick, with inotify watches (two workers) and polled (one worker).

The nodes are the builtin profiles cut down by overrides (one socket of two cores, no cpuidle
states) so that 2,000 trees fit on tmpfs in seconds: the readback is the same code whatever the
tree's size. An "agent" (the progress callback, between ticks) writes RAPL PL1 limits and amdgpu
``power1_cap`` values it picks at random (a fixed seed), some nodes twice in one gap (the last write
is the one in force); the next tick's samples must show exactly those caps, and the files must read
back what was written (nothing refused, nothing put back).
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec

SMALL = {"cpu": {"sockets": 1, "coresPerSocket": 2, "threadsPerCore": 1, "cpuidle": {"states": []}}}
INTEL = 1_950
AMD = 50
T0 = 1_800_000_000.0
RAPL = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"


def _spec(tmp_path: Path) -> Path:
    doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "scale"},
           "spec": {"pools": [
               {"name": "intel", "profile": "intel-xeon-2s-rapl", "count": INTEL, "overrides": SMALL},
               {"name": "amd", "profile": "amd-instinct-mi300x-8gpu", "count": AMD, "overrides": SMALL}]}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _amd_cap_rel(entries: list[Any], gpu: int) -> str:
    """Where GPU ``gpu``'s power1_cap is in an AMD node (its hwmon number is the renderer's)."""
    amd = next(e for e in entries if e.model.node == "amd-0")
    rels = [w.rel for w in amd.model.writables if w.kind == "amdgpu_cap" and w.component == f"gpu{gpu}"]
    assert len(rels) == 1 and rels[0].endswith("/power1_cap"), rels
    return rels[0]


class Agent:
    """Writes caps between ticks and checks, at the next tick, that each is the cap in force."""

    def __init__(self, root: Path, entries: list[Any], seed: int, writes: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.writes = writes
        self.gpu_rels = [_amd_cap_rel(entries, g) for g in range(8)]
        self.nodes = [e.model.node for e in entries]
        self.expected: dict[tuple[str, str], float] = {}
        self.checked = 0
        self.ticks = 0

    def progress(self, done: int, total: int | None, samples: list[Any]) -> None:
        self.ticks = done
        by_node = {s.node: s for s in samples}
        assert len(by_node) == INTEL + AMD
        missed = {k: (by_node[k[0]].caps_w.get(k[1]), w) for k, w in self.expected.items()
                  if by_node[k[0]].caps_w.get(k[1]) != w}
        assert not missed, f"tick {done}: {len(missed)} of {len(self.expected)} writes not read back: " \
                           f"{sorted(missed.items())[:5]}"
        self.checked += len(self.expected)
        self.expected = {}
        if total is not None and done >= total:
            return
        for _ in range(self.writes):
            node = self.rng.choice(self.nodes)
            if node.startswith("amd-"):
                gpu = self.rng.randrange(8)
                watts = self.rng.randrange(300, 740)
                rel, key = self.gpu_rels[gpu], f"gpu{gpu}"
            else:
                watts = self.rng.randrange(100, 260)
                rel, key = RAPL, "pkg0"
            (self.root / node / rel).write_text(f"{watts * 1_000_000}\n")
            self.expected[(node, key)] = float(watts)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """The 2,000 trees, rendered once (the second run resumes them, as a restarted simulator does),
    and removed after the module: 400,000 entries on a tmpfs other suites share."""
    tmp = tmp_path_factory.mktemp("scale")
    spec = load_spec(str(_spec(tmp)))
    root = tmp / "root"
    try:
        runtime._ensure_trees(spec, str(root))
        yield root, spec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize(("mode", "workers", "seed", "checked"), [("inotify", 2, 20, 1_449), ("poll", 1, 21, 1_457)])
def test_every_cap_written_between_ticks_is_read_back_next_tick(
    fleet: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch, mode: str, workers: int, seed: int, checked: int,
) -> None:
    monkeypatch.setenv("SIM_READBACK", mode)
    root, spec = fleet
    entries = runtime.build_entries(spec, str(root))
    agent = Agent(root, entries, seed=seed, writes=400)
    summary = runtime.run_entries(entries, str(root), spec.facility, ticks=5, fast=True, workers=workers,
                                  progress=agent.progress, clock=lambda: T0)
    assert (summary.ticks, summary.nodes) == (5, 2_000)
    # Four gaps of 400 writes; a cap drawn twice in one gap counts once (its last write is the one
    # checked): with these seeds, 151 and 143 of the 1,600 were.
    assert agent.checked == checked
    events = root / "events.jsonl"
    assert not events.exists() or [json.loads(x)["name"] for x in events.read_text().splitlines()] == []
