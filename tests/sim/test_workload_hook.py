"""The tick loop's workload hook: a workload sets each node's load before a tick and sees its samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec
from joulectl.sim.tick import BaseLoad, Sample

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: hook}
spec:
  defaults:
    baseLoad: {cpuUtil: 1.0, gpuUtil: 1.0}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 2}
"""


class Steps:
    """Idle for two ticks, then intel-1 at full load; records what each tick reported."""

    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []
        self.dts: list[float] = []

    def loads(self, now: float, dt_s: float) -> dict[str, BaseLoad]:
        idle = BaseLoad(cpu_util=0.0, gpu_util=0.0, memory_intensity=0.0)
        if len(self.seen) < 2:
            return {"intel-0": idle, "intel-1": idle}
        return {"intel-1": BaseLoad(cpu_util=1.0, gpu_util=0.0, memory_intensity=0.0)}

    def advance(self, now: float, dt_s: float, samples: list[Sample]) -> None:
        self.seen.append({s.node: s.power_w for s in samples})
        self.dts.append(dt_s)


@pytest.mark.parametrize("workers", [1, 2])
def test_workload_sets_loads_per_tick(tmp_path: Path, workers: int) -> None:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    root = tmp_path / "root"
    steps = Steps()

    def make(spec: Any) -> Steps:
        assert [n.name for n in spec.nodes] == ["intel-0", "intel-1"]
        return steps

    runtime.run(str(spec_path), str(root), ticks=4, fast=True, workers=workers, workload=make)
    assert len(steps.seen) == 4
    assert steps.dts[1:] == [1.0, 1.0, 1.0]
    idle = steps.seen[1]
    assert idle["intel-0"] == idle["intel-1"]
    # a load given once stays until the workload changes it: intel-0 stays idle, intel-1 runs
    assert steps.seen[3]["intel-0"] == idle["intel-0"]
    assert steps.seen[3]["intel-1"] > idle["intel-1"] + 100
    spec = load_spec(str(spec_path))
    assert spec.nodes[0].base_load["cpuUtil"] == 1.0  # the spec's baseLoad did not apply
