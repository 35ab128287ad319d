"""`simulate run --trace`: the workload drives the emulated trees in time, and its telemetry agrees
with `simulate compare` on the same small cluster (within 1 %), caps set by the real `cap` on the trees."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from whatifkit import gpu_job, spec_text, twin

SPEC = spec_text("{name: l40s, profile: nvidia-l40s-4gpu, count: 1}",
                 "{name: cpu, profile: intel-xeon-2s-rapl, count: 1}")


def _jobs() -> list[dict[str, Any]]:
    jobs = [gpu_job("g1", units=300, util=0.9, cpu="2"), gpu_job("g2", units=400, util=0.9, cpu="2", gpus=2,
                                                                   cls="performance"),
            gpu_job("g3", at=100, units=300, util=0.9, cpu="2")]
    jobs.append({"type": "job", "jobId": "c1", "podTemplate": {"requests": {"cpu": "16"}}, "durationSec": 300,
                 "workloadProfile": {"memoryIntensity": 0, "cpuUtilization": 0.5, "ioIntensity": 0}})
    return jobs


@pytest.mark.parametrize("capped", [False, True])
def test_run_trace_agrees_with_compare(cli: Callable[..., Any], write: Callable[..., str], tmp_path: Path,
                                       capped: bool) -> None:
    spec = write("spec.yaml", SPEC)
    trace = write("trace.jsonl", _jobs())
    plan = "uncapped"
    root = tmp_path / "root"
    if capped:
        twins = [twin("l40s-0", gpu_pct=60, profile="performance"), twin("cpu-0", cpu_pct=60, profile="performance")]
        plan = write("eco.yaml", [{"apiVersion": "v1", "kind": "List", "items": twins}])  # as cap --from-twin takes
        assert cli("simulate", "render", spec, "--root", str(root)).exit_code == 0
        for node in ("l40s-0", "cpu-0"):
            r = cli("--root", str(root / node), "cap", "--from-twin", plan)
            assert r.exit_code == 0, r.stderr
    cmp = cli("simulate", "compare", spec, "--trace", trace, "--plan", plan, "-o", "json")
    assert cmp.exit_code == 0, cmp.stderr
    expected = json.loads(cmp.stdout)["plans"][0]
    makespan = expected["makespanS"]
    ticks = int(-(-makespan // 2))
    r = cli("simulate", "run", spec, "--root", str(root), "--trace", trace, "--fast", "--tick", "2", "--ticks",
            str(ticks), "-o", "json")
    assert r.exit_code == 0, r.stderr
    run = json.loads(r.stdout)
    wl = run["workload"]
    assert wl["completed"] == 4 and wl["running"] == 0
    # telemetry: the nodes' energy counters (simulate status reads the ledgers the OTLP export comes from)
    status = json.loads(cli("simulate", "status", "--root", str(root), "-o", "json").stdout)
    energy_kwh = sum(n["energyJoules"] for n in status["nodes"]) / 3.6e6
    if capped:  # the tree's energy includes the ticks before the run (none: cap only writes limits)
        assert expected["slowdown"]["standard"]["mean"] > 1.0
    assert energy_kwh == pytest.approx(expected["energyKWh"], rel=0.01)
    for cls in ("performance", "standard", "idle"):
        assert wl["energyByClassKWh"][cls] == pytest.approx(expected["energyByClassKWh"][cls], rel=0.01)
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    done = [e for e in events if e["name"] == "joulie.sim.job.completed"]
    assert sorted(e["attributes"]["job"] for e in done) == ["c1", "g1", "g2", "g3"]
    slow = {e["attributes"]["job"]: e["attributes"]["slowdown"] for e in done}
    assert slow["g2"] == pytest.approx(expected["slowdown"]["performance"]["mean"], rel=0.01)
    prom = (root / "workload.prom").read_text()
    assert 'joulie_sim_workload_energy_joules{class="performance"}' in prom
    assert 'joulie_sim_workload_jobs{state="completed"} 4' in prom
