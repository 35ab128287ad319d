"""Benchmark: ``joulectl plan`` on 1,000, 10,000 and 100,000 generated nodes (issue 6, SPEC §9).

Method:

- Nodes are generated as Kubernetes Node objects the way ``kubectl get nodes -o json`` shows them:
  a mix of 8x H100 (GFD labels), 8x MI300X, 4x L40S time-sliced, 4x Intel Flex 170, two-socket EPYC
  CPU-only nodes and VMs, with NFD-style labels, capacity and allocatable; one node in 50 is
  reserved and one in 100 cordoned.
- In memory: ``plan(ClusterInput(nodes), PlanOptions(absolute_caps=True, gpu_governor={"eco":
  "efficient"}))`` timed with ``time.perf_counter`` (wall) and ``time.process_time`` (CPU), median
  of ``--repeat`` runs, then once more under ``tracemalloc`` for the peak of Python allocations
  during planning (input excluded). On a shared machine the CPU time is the steadier figure.
- Through the CLI: the 10,000-node list is written as a JSON NodeList and
  ``python -m joulectl plan --nodes FILE -o json`` runs as a subprocess (stdout to /dev/null):
  wall time (median), CPU time per run and the children's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``), next to
  ``python -m joulectl --version`` for the interpreter and CLI start-up alone.
- ``--cli-cases`` (issue 20): ``nodes-N`` is ``plan --nodes`` of N exported nodes, ``spec-N``
  ``plan`` of an N-node ClusterSpec (a fifth each 8x H100, 8x MI300X and 4x L40S, two fifths Xeon
  nodes: for 100,000, 20,000, 20,000, 20,000 and 40,000), each run in a fresh helper process so the
  peak RSS is that run's alone.

Targets: 10,000 nodes in about a second, linear in nodes; 100,000 nodes (ClusterSpec and export)
under 5 s and 500 MB; ``--nodes`` of 10,000 under 2 s.

Usage: ``python benchmarks/bench_plan.py [--sizes 1000,10000,100000] [--repeat 3] [--cli-nodes 10000]
[--cli-cases nodes-10000,nodes-100000,spec-10000,spec-100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

from joulectl.planning import ClusterInput, PlanOptions, plan

EPYC = {
    "feature.node.kubernetes.io/cpu-model.name": "AMD EPYC 9654 96-Core Processor",
    "feature.node.kubernetes.io/cpu-sockets": "2",
}
KINDS: list[tuple[str, dict[str, str], dict[str, str]]] = [
    ("h100", {**EPYC, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
     {"nvidia.com/gpu": "8"}),
    ("mi300x", {**EPYC, "amd.com/gpu.product": "AMD_Instinct_MI300X"}, {"amd.com/gpu": "8"}),
    ("l40s", {**EPYC, "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED", "nvidia.com/gpu.count": "4"},
     {"nvidia.com/gpu.shared": "16"}),
    ("flex", {**EPYC, "gpu.intel.com/product": "Flex_170", "gpu.intel.com/device.count": "4"},
     {"gpu.intel.com/i915": "4", "gpu.intel.com/i915_monitoring": "1"}),
    ("cpu", EPYC, {}),
    ("cpu", EPYC, {}),
    ("vm", {"beta.kubernetes.io/instance-type": "m6i.4xlarge"}, {}),
]


def generate(n: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(n):
        kind, labels, gpus = KINDS[i % len(KINDS)]
        res = {"cpu": "16" if kind == "vm" else "192", "memory": "1536Gi", "pods": "110", **gpus}
        node_labels = {
            "kubernetes.io/hostname": f"{kind}-{i}",
            "kubernetes.io/os": "linux",
            "node-role.kubernetes.io/worker": "",
            "topology.kubernetes.io/zone": f"zone-{i % 3}",
            "joulie.io/rack": f"rack-{i // 40}",
            **labels,
        }
        if i % 50 == 49:
            node_labels["joulie.io/reserved"] = "true"
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"{kind}-{i}", "labels": node_labels},
            "spec": {"unschedulable": True} if i % 100 == 99 else {},
            "status": {"capacity": dict(res), "allocatable": dict(res)},
        }
        nodes.append(node)
    return nodes


OPTIONS = PlanOptions(absolute_caps=True, gpu_governor={"eco": "efficient"})


def bench_memory(n: int, repeat: int) -> tuple[float, float, float, int]:
    nodes = generate(n)
    cluster = ClusterInput(nodes=nodes)
    times, cpu = [], []
    twins = 0
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = plan(cluster, OPTIONS)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        twins = len(result.twins)
        del result
    tracemalloc.start()
    result = plan(cluster, OPTIONS)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return statistics.median(times), statistics.median(cpu), peak / 2**20, twins


def _run(args: list[str]) -> float:
    env = dict(os.environ, NO_COLOR="1")
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.run([sys.executable, "-m", "joulectl", *args], stdout=sink, stderr=subprocess.PIPE,
                              env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"joulectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[:400]}")
    return elapsed


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_cli(n: int, repeat: int) -> tuple[float, float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "nodes.json")
        with open(path, "w") as fh:
            json.dump({"apiVersion": "v1", "kind": "List", "items": generate(n)}, fh)
        size_mib = os.path.getsize(path) / 2**20
        version = statistics.median(_run(["--version"]) for _ in range(repeat))
        cpu_before = _cpu_children()
        times = [_run(["plan", "--nodes", path, "--absolute-caps", "--gpu-governor", "eco=efficient", "-o", "json"])
                 for _ in range(repeat)]
        cpu = (_cpu_children() - cpu_before) / repeat
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return statistics.median(times), cpu, version, peak_kib / 1024, size_mib


SPEC_POOLS = [("h100", "nvidia-h100-sxm-8gpu", 0.2), ("mi300x", "amd-instinct-mi300x-8gpu", 0.2),
              ("l40s", "nvidia-l40s-4gpu", 0.2), ("cpu", "intel-xeon-2s-rapl", 0.4)]


def bench_cli_cases(cases: list[str], repeat: int) -> None:
    """The issue-20 cases, each run in a fresh helper (``bench_schedule_check.measure``)."""
    import yaml

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_schedule_check import measure

    base = [sys.executable, "-m", "joulectl"]
    print("| case | input | wall | CPU | peak RSS |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            kind, n = case.split("-")
            count = int(n)
            if kind == "nodes":
                path = os.path.join(tmp, f"nodes-{count}.json")
                with open(path, "w") as fh:
                    json.dump({"apiVersion": "v1", "kind": "List", "items": generate(count)}, fh)
                argv = [*base, "plan", "--nodes", path, "-o", "json"]
            else:
                path = os.path.join(tmp, f"spec-{count}.yaml")
                pools = [{"name": name, "profile": prof, "count": int(count * share)}
                         for name, prof, share in SPEC_POOLS]
                with open(path, "w") as fh:
                    yaml.safe_dump({"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec",
                                    "metadata": {"name": "bench"}, "spec": {"pools": pools}}, fh)
                argv = [*base, "plan", path, "-o", "json"]
            env = {**os.environ, "JOULECTL_MAX_INPUT_BYTES": str(1 << 30)}
            os.environ.update(env)
            runs = [measure(argv) for _ in range(repeat)]
            size = os.path.getsize(path) / 2**20
            print(f"| {case} | {size:.1f} MiB | {statistics.median(r[0] for r in runs):.2f} s "
                  f"| {statistics.median(r[1] for r in runs):.2f} s | {max(r[2] for r in runs):.0f} MiB |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli-nodes", type=int, default=10_000)
    ap.add_argument("--cli-cases", default="")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.cli_cases:
        bench_cli_cases(args.cli_cases.split(","), args.repeat)
        return
    if args.cli_nodes:  # first: a forked child counts the parent's pages in its peak RSS
        seconds, cpu, version, rss, size = bench_cli(args.cli_nodes, args.repeat)
        print(f"CLI plan --nodes ({args.cli_nodes} nodes, {size:.1f} MiB JSON) -o json: {seconds:.3f} s wall, "
              f"{cpu:.3f} s CPU (joulectl --version {version:.3f} s), peak RSS {rss:.0f} MiB")
    print(f"{'nodes':>8} {'wall s':>8} {'CPU s':>8} {'CPU us/node':>12} {'peak MiB':>9} {'twins':>7}")
    for n in (int(s) for s in args.sizes.split(",") if s):
        seconds, cpu, peak, twins = bench_memory(n, args.repeat)
        print(f"{n:>8} {seconds:>8.3f} {cpu:>8.3f} {cpu / n * 1e6:>12.1f} {peak:>9.1f} {twins:>7}")


if __name__ == "__main__":
    main()
