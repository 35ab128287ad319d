"""`joulectl simulate compare` through the real CLI: hand-computed cases, conservation, eco, determinism,
the real cap path with a blocked device, and every bad-input error."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from whatifkit import gpu_job, spec_text, twin

L40S = "{name: l40s, profile: nvidia-l40s-4gpu, count: 1}"


def _compare(cli: Callable[..., Any], *args: str) -> dict[str, Any]:
    r = cli("simulate", "compare", *args, "-o", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _plan(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in doc["plans"] if p["name"] == name)


def test_one_node_one_job_cap_halves_speed(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    """One L40S node, one job on one GPU at 25 % utilisation (compute-bound, memory intensity 0,
    sensitivity 1, no CPU request), 3600 s of work; the eco plan caps the GPUs at 50 % (175 W).

    By hand (joulie-reference §5): weights .6·.8+.4 = .88 compute, .12 memory; board power
    34 + 316·(.88·.25^1.02 + .12·(.35·√.25 + .3·.25)) = 111.098972 W, under the 175 W cap, so the
    throughput is 1 and the speed 1·(1 - (1 - 175/350)·1) = 0.5: the job runs 7200 s.
    Node power: 2 packages at idle 65 W, DRAM 2·3 W, 3 idle GPUs at 34 W (the managed idle floor,
    0.1·idle, is under an idle board's natural power: it does not bind) = 238 W, plus the job's
    111.098972 W: 349.098972 W, over 3600 s uncapped = 0.349099 kWh, over 7200 s capped = 0.698198 kWh.
    """
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job("j1")])
    eco = write("eco.yaml", [twin("l40s-0", gpu_pct=50)])
    doc = _compare(cli, spec, "--trace", trace, "--plan", "uncapped", "--plan", eco)
    assert doc["kind"] == "WhatIfComparison"
    base, half = _plan(doc, "uncapped"), _plan(doc, "eco")
    assert base["makespanS"] == 3600.0
    assert base["slowdown"]["standard"]["mean"] == 1.0
    assert base["energyKWh"] == pytest.approx(0.349099, abs=2e-6)
    assert base["energyByClassKWh"]["standard"] == pytest.approx(0.111099, abs=2e-6)
    assert base["energyByClassKWh"]["idle"] == pytest.approx(0.238, abs=2e-6)
    assert half["makespanS"] == 7200.0
    assert half["slowdown"]["standard"] == {"count": 1, "mean": 2.0, "p50": 2.0, "p95": 2.0}
    assert half["energyKWh"] == pytest.approx(0.698198, abs=2e-6)
    assert half["energyByClassKWh"]["standard"] == pytest.approx(0.222198, abs=2e-6)
    assert half["energyByClassKWh"]["idle"] == pytest.approx(0.476, abs=2e-6)
    assert half["peakPowerW"] == pytest.approx(349.1, abs=0.01)
    assert half["delta"]["makespanS"] == {"abs": 3600.0, "pct": 100.0}
    assert half["delta"]["energyKWh"] == {"abs": pytest.approx(0.349099, abs=4e-6), "pct": pytest.approx(100.0)}
    assert half["notes"] == []


def test_uncapped_runs_every_task_at_its_duration_and_counts_waits(cli: Callable[..., Any],
                                                                   write: Callable[..., str]) -> None:
    """Six one-GPU jobs of 600 s on a 4-GPU node: two wait 600 s for a GPU, none is slowed."""
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job(f"j{i}", units=600, util=0.9) for i in range(6)])
    doc = _compare(cli, spec, "--trace", trace, "--plan", "uncapped")
    p = doc["plans"][0]
    assert p["slowdown"]["standard"] == {"count": 6, "mean": 1.0, "p50": 1.0, "p95": 1.0}
    assert p["waitS"]["standard"]["mean"] == pytest.approx(200.0)  # 0,0,0,0,600,600
    assert p["waitS"]["standard"]["p95"] == pytest.approx(600.0)
    assert p["makespanS"] == 1200.0
    assert p["jobs"] == {"completed": 6, "unplaceable": 0, "unplaceableReasons": []}


def test_conservation_and_unplaceable_reasons(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text(L40S, "{name: cpu, profile: intel-xeon-2s-rapl, count: 1}"))
    trace = write("trace.csv", "name,arrival_s,duration_s,cpu_milli,memory_mib,gpus,gpu_milli,gpu_types,class\n"
                               "a,0,100,4000,1024,1,1000,,performance\n"
                               "b,5,300,1000,512,1,500,L40S,standard\n"
                               "c,5,300,1000,512,1,250,,\n"
                               "d,10,200,16000,2048,0,0,,standard\n"
                               "e,10,100,1000,512,16,1000,,standard\n"
                               "f,11,100,1000,512,1,1000,H100,standard\n")
    eco = write("eco.yaml", [twin("l40s-0", gpu_pct=100, profile="performance"), twin("cpu-0", cpu_pct=60)])
    doc = _compare(cli, spec, "--trace", trace, "--plan", "uncapped", "--plan", f"half={eco}")
    for p in doc["plans"]:
        by_class = p["energyByClassKWh"]
        assert sum(by_class.values()) == pytest.approx(p["energyKWh"], abs=1e-5)
        assert p["jobs"]["completed"] + p["jobs"]["unplaceable"] == 6
        reasons = {r["reason"]: r["count"] for r in p["jobs"]["unplaceableReasons"]}
        assert p["jobs"]["unplaceable"] == 2
        assert any("needs 16 nvidia.com/gpu" in r for r in reasons), reasons
        assert any("H100" in r for r in reasons), reasons
        assert p["facilityEnergyKWh"] > p["energyKWh"]
    half = _plan(doc, "half")
    assert half["slowdown"]["performance"]["mean"] == 1.0  # on the performance node, at 100 %
    assert half["delta"]["energyKWh"]["abs"] == pytest.approx(half["energyKWh"] - doc["plans"][0]["energyKWh"],
                                                              abs=2e-6)


def test_eco_never_slows_performance_tasks_and_is_deterministic(cli: Callable[..., Any],
                                                               write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text("{name: l40s, profile: nvidia-l40s-4gpu, count: 4}"))
    plan = cli("plan", spec, "-o", "yaml")
    assert plan.exit_code == 0, plan.stderr
    eco = write("eco.yaml", plan.stdout)
    jobs = [gpu_job(f"p{i}", at=i * 50, units=900, util=0.9, cls="performance") for i in range(8)]
    jobs += [gpu_job(f"s{i}", at=i * 30, units=600, util=0.9) for i in range(12)]
    trace = write("trace.jsonl", jobs)
    args = (spec, "--trace", trace, "--plan", "uncapped", "--plan", eco)
    first = cli("simulate", "compare", *args, "-o", "json")
    again = cli("simulate", "compare", *args, "-o", "json")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == again.stdout  # bit for bit
    doc = json.loads(first.stdout)
    eco_plan = _plan(doc, "eco")
    assert eco_plan["slowdown"]["performance"]["count"] == 8
    assert eco_plan["slowdown"]["performance"]["p95"] == 1.0
    assert eco_plan["slowdown"]["standard"]["mean"] > 1.0
    assert eco_plan["energyByClassKWh"]["performance"] > 0


def test_a_blocked_cap_replays_the_device_uncapped_and_says_so(cli: Callable[..., Any],
                                                               write: Callable[..., str]) -> None:
    """The W7900's cap is pinned at 241 W (emulate-mode seed): 150 W is refused by the real cap path."""
    spec = write("spec.yaml", spec_text("{name: w, profile: amd-radeon-pro-w7900, count: 1}"))
    job = gpu_job("j", units=600, util=0.9)
    job["podTemplate"]["requests"] = {"cpu": "1", "amd.com/gpu": "1"}
    trace = write("trace.jsonl", [job])
    eco = write("eco.yaml", [twin("w-0", gpu_watts=150)])
    doc = _compare(cli, spec, "--trace", trace, "--plan", "uncapped", "--plan", eco)
    p = _plan(doc, "eco")
    assert p["slowdown"]["standard"]["mean"] == 1.0
    assert p["energyKWh"] == pytest.approx(doc["plans"][0]["energyKWh"], rel=1e-9)
    assert len(p["notes"]) == 1
    assert "blocked" in p["notes"][0] and "replayed with the limit read back" in p["notes"][0]
    table = cli("simulate", "compare", spec, "--trace", trace, "--plan", "uncapped", "--plan", eco)
    assert table.exit_code == 0
    assert "eco: plan eco: amd-radeon-pro-w7900" in table.stdout


def test_governor_of_the_plan_goes_through_the_governor_code(cli: Callable[..., Any],
                                                             write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job("j", units=600, util=0.9)])
    low = write("efficient.yaml", [twin("l40s-0", governor="efficient")])
    doc = _compare(cli, spec, "--trace", trace, "--plan", "uncapped", "--plan", low)
    p = _plan(doc, "efficient")
    assert p["slowdown"]["standard"]["mean"] > 1.0  # the clock lock slows the board
    assert p["energyByClassKWh"]["standard"] < doc["plans"][0]["energyByClassKWh"]["standard"]


def test_nodes_export_is_emulated_from_the_catalog(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text(L40S))
    nodes = cli("simulate", "render-nodes", spec)
    assert nodes.exit_code == 0
    nodes_file = write("nodes.yaml", nodes.stdout)
    trace = write("trace.jsonl", [gpu_job("j1")])
    from_spec = _compare(cli, spec, "--trace", trace, "--plan", "uncapped")
    from_nodes = _compare(cli, "--nodes", nodes_file, "--trace", trace, "--plan", "uncapped")
    assert from_nodes["plans"][0]["energyKWh"] == from_spec["plans"][0]["energyKWh"]


def test_a_fleet_with_its_own_device_plugin_is_read_with_plans_gpu_flags(cli: Callable[..., Any],
                                                                         write: Callable[..., str]) -> None:
    """A node export whose GPUs are only `example.com/gpu` and whose model is only in the label
    `example.com/gpu-model` (no NVIDIA or Joulie labels), and a job asking for `example.com/gpu`:
    with plan's GPU flags it is the hand-computed L40S case (0.349099 kWh over 3600 s)."""
    import yaml

    spec = write("spec.yaml", spec_text(L40S))
    nodes = cli("simulate", "render-nodes", spec, "--gpu-resource", "example.com/gpu",
                "--gpu-product-label", "example.com/gpu-model")
    assert nodes.exit_code == 0, nodes.stderr
    doc = yaml.safe_load(nodes.stdout)
    for item in doc["items"]:
        labels = item["metadata"]["labels"]
        item["metadata"]["labels"] = {k: v for k, v in labels.items()
                                      if not k.startswith(("nvidia.com/", "joulie.io/gpu", "joulie.io/hw.gpu"))}
        assert item["metadata"]["labels"]["example.com/gpu-model"] == "NVIDIA-L40S"
        assert item["status"]["capacity"]["example.com/gpu"] == "4"
    own = write("own.yaml", yaml.safe_dump(doc))
    job = gpu_job("j1")
    job["podTemplate"]["requests"] = {"cpu": "0", "example.com/gpu": "1"}
    trace = write("trace.jsonl", [job])
    r = cli("simulate", "compare", "--nodes", own, "--trace", trace, "--plan", "uncapped")
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"joulectl: error: {own}: node l40s-0: GPU model 'unknown' is not in the catalog: "
                                "the node cannot be emulated")
    doc = _compare(cli, "--nodes", own, "--trace", trace, "--plan", "uncapped", "--gpu-resource", "example.com/gpu",
                   "--gpu-product-label", "example.com/gpu-model")
    base = _plan(doc, "uncapped")
    assert base["makespanS"] == 3600.0
    assert base["energyKWh"] == pytest.approx(0.349099, abs=2e-6)
    r = cli("simulate", "compare", "--nodes", own, "--trace", trace, "--plan", "uncapped",
            "--gpu-product-label", "not a label!")
    assert r.exit_code == 2
    assert r.stderr.strip() == "joulectl: error: --gpu-product-label: 'not a label!' is not a label key"


@pytest.mark.parametrize(("args", "message"), [
    (("--plan", "uncapped"), "--trace: the workload is missing: give --trace TRACE"),
    (("--trace", "TRACE"), "--plan: give at least one --plan (uncapped, FILE or LABEL=FILE)"),
    (("--trace", "TRACE", "--plan", "uncapped", "--plan", "uncapped"), "--plan: two plans are named 'uncapped'"),
    (("--trace", "TRACE", "--plan", "nope.yaml"), "nope.yaml: --plan: no such file"),
    (("--trace", "TRACE", "--plan", "uncapped", "--nodes", "x.yaml"), "give a cluster spec or --nodes NODES.yaml, "
                                                                       "not both"),
])
def test_usage_errors(cli: Callable[..., Any], write: Callable[..., str], args: tuple[str, ...], message: str) -> None:
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job("j1")])
    r = cli("simulate", "compare", spec, *[trace if a == "TRACE" else a for a in args])
    assert r.exit_code == 2
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


def test_a_plan_that_names_no_node(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job("j1")])
    other = write("other.yaml", [twin("elsewhere-0", gpu_pct=50)])
    r = cli("simulate", "compare", spec, "--trace", trace, "--plan", other)
    assert r.exit_code == 2
    assert f"{other}: --plan: no NodeTwin of the plan names a node of the fleet" in r.stderr


def test_facility_energy_over_a_day(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    """One job of exactly 24 h on the L40S node (349.098972 W, as above): over a whole period the
    sine of the ambient integrates to 0, so PUE = 1.08 + 0.006·(20-15) + 0.04L + 0.015·L·5/15 =
    1.11 + 0.045L with L = 349.098972 / 1970 W (peak: 2·270 + 2·15 + 4·350) = 0.177208:
    PUE 1.117974; IT 8.378375 kWh, facility 9.366809 kWh."""
    spec = write("spec.yaml", spec_text(L40S))
    trace = write("trace.jsonl", [gpu_job("day", units=86400)])
    p = _compare(cli, spec, "--trace", trace, "--plan", "uncapped")["plans"][0]
    assert p["energyKWh"] == pytest.approx(8.378375, abs=2e-6)
    assert p["facilityEnergyKWh"] == pytest.approx(9.366809, abs=2e-6)


def test_a_gang_runs_whole_or_stalls(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    spec = write("spec.yaml", spec_text(L40S))
    jobs = [gpu_job("solo", units=600, util=0.9, gpus=3)]  # 600 units on 3 GPUs: 200 s
    for i in range(2):  # 2 x 2 GPUs (150 s each): runs whole once the 3-GPU job has left, at 200 s
        jobs.append({**gpu_job(f"g{i}", at=10, units=300, util=0.9, gpus=2), "gang": {"id": "pair"}})
    for i in range(2):  # 2 x 3 GPUs on a 4-GPU node: never whole
        jobs.append({**gpu_job(f"big{i}", at=20, units=300, util=0.9, gpus=3), "gang": {"id": "big"}})
    trace = write("trace.jsonl", jobs)
    p = _compare(cli, spec, "--trace", trace, "--plan", "uncapped")["plans"][0]
    assert p["jobs"]["completed"] == 3
    assert p["jobs"]["unplaceableReasons"] == [
        {"reason": "stalled: waiting when the trace ended (a gang that never runs whole)", "count": 2}]
    assert p["waitS"]["standard"]["mean"] == pytest.approx((0 + 190 + 190) / 3)
    assert p["makespanS"] == 350.0
