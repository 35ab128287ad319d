"""Benchmark: ``joulectl simulate compare`` on generated traces and fleets (issue 17).

Method:

- Fleet: a ClusterSpec of GPU nodes in three pools, 50 % ``nvidia-h100-sxm-8gpu``, 30 %
  ``nvidia-l40s-4gpu`` and 20 % ``amd-instinct-mi300x-8gpu`` (``--nodes`` in total).
- Trace: a CSV of ``--tasks`` tasks, arrivals uniform over ``--days`` simulated days, durations
  log-uniform from 10 minutes to 12 hours, 30 % performance; a quarter CPU-only, the rest asking for
  1, 2, 4 or 8 whole GPUs or a quarter or half of one; one task in ten asks for a GPU type
  (``H100``, ``L40S`` or ``MI300X``). A fixed seed: the same trace every run.
- Plans: ``uncapped`` and the ``joulectl plan`` of the fleet (static, half the nodes eco at 60 %).
- Each run is ``python -m joulectl simulate compare SPEC --trace TRACE --plan uncapped --plan eco.yaml
  -o json`` as a subprocess (stdout to a file): wall time, CPU time and the child's peak RSS
  (``resource.getrusage(RUSAGE_CHILDREN)``, measured in a fresh process per run so the peak is that
  run's), with the load average it ran under.

Targets: 10,000 tasks over 150 days on 1,200 GPU nodes, two plans, under 60 s and under 1 GiB;
cost linear in tasks and in nodes.

Usage: ``python benchmarks/bench_whatif.py [--tasks 1000,10000,100000] [--nodes 1200] [--days 150]``
(also ``--nodes 300,1200,4800 --tasks 10000`` for the node scaling).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

POOLS = (("h100", "nvidia-h100-sxm-8gpu", 0.5), ("l40s", "nvidia-l40s-4gpu", 0.3),
         ("mi300x", "amd-instinct-mi300x-8gpu", 0.2))
TYPES = ("H100", "L40S", "MI300X")


def spec_text(nodes: int) -> str:
    pools = []
    left = nodes
    for i, (name, profile, share) in enumerate(POOLS):
        count = left if i == len(POOLS) - 1 else round(nodes * share)
        left -= count
        pools.append(f"  - {{name: {name}, profile: {profile}, count: {count}}}\n")
    return ("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: bench}\nspec:\n"
            "  facility: {ambientC: 22, amplitudeC: 5, periodH: 24}\n  pools:\n" + "".join(pools))


def trace_text(tasks: int, days: float, seed: int = 17) -> str:
    rng = random.Random(seed)
    rows = ["name,arrival_s,duration_s,cpu_milli,memory_mib,gpus,gpu_milli,gpu_types,class"]
    horizon = days * 86400.0
    for k in range(tasks):
        arrival = round(rng.uniform(0, horizon), 1)
        duration = round(math.exp(rng.uniform(math.log(600), math.log(43200))), 1)
        cls = "performance" if rng.random() < 0.3 else "standard"
        kind = rng.random()
        gpus, milli = 0, 0
        if kind >= 0.25:
            choice = rng.choice((1, 1, 2, 4, 8, 250, 500))
            gpus, milli = (1, choice) if choice > 8 else (choice, 1000)
        types = rng.choice(TYPES) if gpus and rng.random() < 0.1 else ""
        cpu = rng.choice((1000, 2000, 4000, 8000, 16000))
        mem = rng.choice((1024, 4096, 16384, 65536))
        rows.append(f"t{k},{arrival},{duration},{cpu},{mem},{gpus},{milli if gpus else ''},{types},{cls}")
    return "\n".join(rows) + "\n"


def run_once(spec: str, trace: str, eco: str, out: str) -> dict[str, Any]:
    """One compare in a fresh child (its own peak RSS), timed from here."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run([sys.executable, '-m', 'joulectl', 'simulate', 'compare', sys.argv[1], '--trace', "
        "sys.argv[2], '--plan', 'uncapped', '--plan', sys.argv[3], '-o', 'json'], stdout=open(sys.argv[4], 'w'))\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(r.returncode, wall, u.ru_utime + u.ru_stime, u.ru_maxrss)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, spec, trace, eco, out], capture_output=True, text=True,
                         check=True)
    rc, wall, cpu, rss = res.stdout.split()
    if rc != "0":
        raise SystemExit(f"compare failed (exit {rc})")
    with open(out, encoding="utf-8") as fh:
        doc = json.load(fh)
    return {"wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_mib": int(rss) / 1024, "doc": doc}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="1000,10000,100000")
    ap.add_argument("--nodes", default="1200")
    ap.add_argument("--days", type=float, default=150.0)
    args = ap.parse_args()
    tasks_list = [int(x) for x in args.tasks.split(",")]
    nodes_list = [int(x) for x in args.nodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-whatif-") as tmp:
        print(f"load average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} CPUs")
        print(f"{'nodes':>6} {'tasks':>7} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'completed':>9} "
              f"{'unplaceable':>11} {'eco energy':>11}")
        for nodes in nodes_list:
            spec = os.path.join(tmp, f"spec-{nodes}.yaml")
            with open(spec, "w", encoding="utf-8") as fh:
                fh.write(spec_text(nodes))
            eco = os.path.join(tmp, f"eco-{nodes}.yaml")
            with open(eco, "w", encoding="utf-8") as fh:
                subprocess.run([sys.executable, "-m", "joulectl", "plan", spec, "-o", "yaml"], stdout=fh, check=True)
            for tasks in tasks_list:
                trace = os.path.join(tmp, f"trace-{tasks}.csv")
                if not os.path.exists(trace):
                    with open(trace, "w", encoding="utf-8") as fh:
                        fh.write(trace_text(tasks, args.days))
                t0 = time.perf_counter()
                r = run_once(spec, trace, eco, os.path.join(tmp, "out.json"))
                plans = r["doc"]["plans"]
                delta = plans[1]["delta"]["energyKWh"]["pct"]
                print(f"{nodes:>6} {tasks:>7} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['peak_rss_mib']:>9.0f} "
                      f"{plans[0]['jobs']['completed']:>9} {plans[0]['jobs']['unplaceable']:>11} {delta:>+10.1f}%"
                      f"  ({time.perf_counter() - t0:.1f} s, load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
