"""Benchmark: ``joulectl schedule-check`` of many pods against many nodes (issues 15 and 20).

Method:

- Nodes are generated as ``kubectl get nodes -o json`` shows them: 8x H100 and 4x L40S nodes with
  HAMi's ``hami.io/node-nvidia-register`` annotation (split 10, the cards' memory), 8x MI300X,
  CPU-only EPYC nodes; every fifth GPU node already has cards in use (HAMi running pods given with
  ``--pods``, their ``hami.io/vgpu-devices-allocated`` annotation). Twins are ``plan -o json`` of the
  same nodes.
- Pods come in 5 shapes: 8 whole H100 (performance, ``use-gputype: H100``), 1 vGPU of 20000 MiB and
  30 % cores (HAMi), 1 vGPU of 90000 MiB (fits no card), 4 AMD GPUs, a CPU pod; a pod list of N
  pods cycles through them.
- ``python -m joulectl schedule-check PODS --nodes NODES --twins TWINS --pods RUNNING --now T -o FMT``
  runs as a subprocess, stdout to /dev/null: wall time (median of ``--repeat``), CPU time of the
  child (user + system) and its peak RSS (``resource.getrusage(RUSAGE_CHILDREN)`` of a fresh
  helper process per run), next to ``python -m joulectl --version``, interleaved.

Targets: 1,000 pods x 1,000 nodes under 1 s and 200 MB; 10,000 x 10,000 under 10 s; with HAMi
annotations 1,000 x 1,000 under 2 s (issue 15).

Usage: ``python benchmarks/bench_schedule_check.py [--cases 1000x1000,10000x10000] [--repeat 3]
[--formats table,json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

NOW = "2026-12-01T00:00:00Z"
EPYC = {"feature.node.kubernetes.io/cpu-model.name": "AMD EPYC 9654 96-Core Processor",
        "feature.node.kubernetes.io/cpu-sockets": "2"}


def _register(prefix: str, n: int, mem: int, model: str) -> str:
    return "".join(f"GPU-{prefix}-{i:02d},10,{mem},100,NVIDIA-NVIDIA {model},{i * 2 // n},true:" for i in range(n))


def nodes(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, running HAMi pods)."""
    out, running = [], []
    for i in range(n):
        kind = ("h100", "l40s", "mi300x", "cpu", "cpu")[i % 5]
        name = f"{kind}-{i:05d}"
        labels = {"kubernetes.io/hostname": name, "joulie.io/rack": f"rack-{i // 40}", **EPYC}
        annotations: dict[str, str] = {}
        res = {"cpu": "384", "memory": "1536Gi", "pods": "110"}
        if kind == "h100":
            labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
            annotations["hami.io/node-nvidia-register"] = _register(name, 8, 81559, "H100 80GB HBM3")
            res["nvidia.com/gpu"] = "80"
        elif kind == "l40s":
            labels.update({"nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.count": "4"})
            annotations["hami.io/node-nvidia-register"] = _register(name, 4, 46068, "L40S")
            res["nvidia.com/gpu"] = "40"
        elif kind == "mi300x":
            labels["amd.com/gpu.product"] = "AMD_Instinct_MI300X"
            res["amd.com/gpu"] = "8"
        if kind in ("h100", "l40s") and i % 25 < 5:
            running.append({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": f"run-{i}", "namespace": "ml", "annotations": {
                                "hami.io/vgpu-devices-allocated": f"GPU-{name}-00,NVIDIA,20000,30:;"}},
                            "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {
                                "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000,
                                           "nvidia.com/gpucores": 30}}}]},
                            "status": {"phase": "Running"}})
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": annotations},
                    "spec": {}, "status": {"capacity": dict(res), "allocatable": dict(res)}})
    return out, running


def _pod(name: str, limits: dict[str, Any], requests: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "bench",
                                                           "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "x",
                                     "resources": {"limits": limits, "requests": requests}}]}}


SHAPES = [
    ({"nvidia.com/gpu": 8}, {"cpu": "64", "memory": "512Gi"},
     {"joulie.io/workload-class": "performance", "nvidia.com/use-gputype": "H100"}),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 30}, {"cpu": "4", "memory": "16Gi"},
     {}),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 90000}, {"cpu": "4", "memory": "16Gi"}, {}),
    ({"amd.com/gpu": 4}, {"cpu": "32", "memory": "256Gi"}, {}),
    ({}, {"cpu": "8", "memory": "32Gi"}, {}),
]


def pods(n: int) -> list[dict[str, Any]]:
    return [_pod(f"p-{i:05d}", *SHAPES[i % len(SHAPES)]) for i in range(n)]


def write_case(where: str, n_pods: int, n_nodes: int) -> dict[str, str]:
    from joulectl.planning import ClusterInput, PlanOptions, plan

    node_objs, running = nodes(n_nodes)
    paths = {k: os.path.join(where, f"{k}-{n_pods}x{n_nodes}.json") for k in ("pods", "nodes", "twins", "running")}
    result = plan(ClusterInput(nodes=node_objs), PlanOptions())
    for key, items in (("pods", pods(n_pods)), ("nodes", node_objs), ("twins", result.twins),
                       ("running", running)):
        with open(paths[key], "w", encoding="utf-8") as fh:
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, fh)
    return paths


_MEASURE = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.perf_counter() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, r.ru_utime + r.ru_stime, r.ru_maxrss)
"""


def measure(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one run in a fresh helper (so the RSS is this run's)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True)
    wall, cpu, rss_kb = out.stdout.split()
    return float(wall), float(cpu), float(rss_kb) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="1000x1000,10000x10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default="table,json")
    args = ap.parse_args()
    env_note = f"load average {os.getloadavg()[0]:.1f}"
    base = [sys.executable, "-m", "joulectl"]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"# schedule-check benchmark ({env_note}); wall/CPU medians of {args.repeat}, peak RSS max")
        print("| case | format | wall | CPU | peak RSS | --version wall | --version CPU |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for case in args.cases.split(","):
            n_pods, n_nodes = (int(x) for x in case.split("x"))
            p = write_case(tmp, n_pods, n_nodes)
            for fmt in args.formats.split(","):
                argv = [*base, "schedule-check", p["pods"], "--nodes", p["nodes"], "--twins", p["twins"],
                        "--pods", p["running"], "--now", NOW, "-o", fmt]
                runs, versions = [], []
                for _ in range(args.repeat):
                    versions.append(measure([*base, "--version"]))
                    runs.append(measure(argv))
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                rss = max(r[2] for r in runs)
                vw = statistics.median(v[0] for v in versions)
                vc = statistics.median(v[1] for v in versions)
                print(f"| {n_pods:,} pods x {n_nodes:,} nodes | {fmt} | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MiB "
                      f"| {vw:.2f} s | {vc:.2f} s |", flush=True)
        print(f"# done, {env_note} at start, {os.getloadavg()[0]:.1f} at end; {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
