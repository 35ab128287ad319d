"""The 1,000-node golden case of plan and schedule-check (issue 20: results identical before and
after the speed work).

``python tests/golden/fleet1000.py write`` regenerates ``tests/golden/data/*.gz`` from the CLI as it
is; run it only when a change of output is intended, and say so in the commit. The inputs are built
here, deterministically: a ClusterSpec of 1,000 nodes over every builtin GPU exposure, its Node
export (``simulate render-nodes``), and 60 pods of 12 shapes.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
NOW = "2026-12-01T00:00:00Z"

POOLS: list[dict[str, Any]] = [
    {"name": "h100", "profile": "nvidia-h100-sxm-8gpu", "count": 150, "rack": "rack-1", "coolingZone": "cold"},
    {"name": "h100-mig", "profile": "nvidia-h100-sxm-8gpu", "count": 40, "rack": "rack-1", "coolingZone": "cold",
     "overrides": {"gpus": {"exposure": "mig-single"}}},
    {"name": "h100-mixed", "profile": "nvidia-h100-sxm-8gpu", "count": 20, "rack": "rack-2", "coolingZone": "cold",
     "overrides": {"gpus": {"exposure": "mig-mixed"}}},
    {"name": "mi300x", "profile": "amd-instinct-mi300x-8gpu", "count": 100, "rack": "rack-2", "coolingZone": "warm"},
    {"name": "mi250x", "profile": "amd-instinct-mi250x-4gpu", "count": 40, "rack": "rack-3", "coolingZone": "warm"},
    {"name": "l40s", "profile": "nvidia-l40s-4gpu", "count": 100, "rack": "rack-3", "coolingZone": "warm",
     "overrides": {"gpus": {"exposure": "timeslice-rename"}}},
    {"name": "l40s-whole", "profile": "nvidia-l40s-4gpu", "count": 50, "rack": "rack-4", "coolingZone": "warm"},
    {"name": "flex", "profile": "intel-flex-170-4gpu", "count": 50, "rack": "rack-4", "coolingZone": "warm",
     "overrides": {"gpus": {"intel": {"driver": "xe"}}}},
    {"name": "w7900", "profile": "amd-radeon-pro-w7900", "count": 20, "rack": "rack-4", "coolingZone": "cold"},
    {"name": "cpu", "profile": "intel-xeon-2s-rapl", "count": 250, "rack": "rack-5", "coolingZone": "cold"},
    {"name": "xeon6", "profile": "intel-xeon6-2s-tpmi", "count": 60, "rack": "rack-5", "coolingZone": "cold"},
    {"name": "epyc", "profile": "amd-epyc-2s-energy-only", "count": 60, "rack": "rack-6", "coolingZone": "warm"},
    {"name": "vm", "profile": "vm-no-powercap", "count": 50},
    {"name": "reserved", "profile": "nvidia-h100-sxm-8gpu", "count": 10, "rack": "rack-1", "coolingZone": "cold",
     "labels": {"joulie.io/reserved": "true"}},
]


def cluster_spec() -> dict[str, Any]:
    return {
        "apiVersion": "sim.joulie.io/v1alpha1",
        "kind": "ClusterSpec",
        "metadata": {"name": "golden-1000"},
        "spec": {
            "defaults": {"kwok": True, "labels": {"joulie.io/managed": "true"}},
            "facility": {"ambientC": 22, "amplitudeC": 4, "periodH": 24,
                         "coolingZones": [{"name": "cold", "offsetC": 0}, {"name": "warm", "offsetC": 6}]},
            "pools": POOLS,
        },
    }


def _pod(name: str, limits: dict[str, Any], requests: dict[str, Any] | None = None,
         annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "golden"}
    if annotations:
        meta["annotations"] = annotations
    container = {"name": "main", "image": "busybox",
                 "resources": {"requests": requests or {"cpu": "4", "memory": "16Gi"}, "limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


PERF = {"joulie.io/workload-class": "performance"}
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("train8", _pod("x", {"nvidia.com/gpu": 8}, {"cpu": "64", "memory": "512Gi"},
                    {**PERF, "nvidia.com/use-gputype": "H100"})),
    ("infer1", _pod("x", {"nvidia.com/gpu": 1})),
    ("amd4", _pod("x", {"amd.com/gpu": 4}, {"cpu": "32", "memory": "256Gi"}, PERF)),
    ("cpu8", _pod("x", {}, {"cpu": "8", "memory": "32Gi"})),
    ("cpu-perf", _pod("x", {}, {"cpu": "16", "memory": "64Gi"}, PERF)),
    ("mig1g", _pod("x", {"nvidia.com/mig-1g.10gb": 1}, {"cpu": "2", "memory": "8Gi"})),
    ("shared", _pod("x", {"nvidia.com/gpu.shared": 2})),
    ("intel", _pod("x", {"gpu.intel.com/xe": 2})),
    ("nouse-l40s", _pod("x", {"nvidia.com/gpu": 2}, None, {"nvidia.com/nouse-gputype": "L40S"})),
    ("too-big", _pod("x", {"nvidia.com/gpu": 16})),
    ("selector", _pod("x", {}, {"cpu": "1", "memory": "1Gi"}, None, nodeSelector={"joulie.io/rack": "rack-5"})),
    ("huge-cpu", _pod("x", {}, {"cpu": "1000", "memory": "1Gi"})),
]


def pods() -> list[dict[str, Any]]:
    out = []
    for i in range(60):
        shape, pod = SHAPES[i % len(SHAPES)]
        doc = json.loads(json.dumps(pod))
        doc["metadata"]["name"] = f"{shape}-{i}"
        out.append(doc)
    return out


def write_inputs(where: Path) -> dict[str, Path]:
    """Write spec, nodes export and pods into ``where``; return their paths."""
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.k8s import node_list

    spec = where / "cluster.yaml"
    spec.write_text(yaml.safe_dump(cluster_spec(), sort_keys=False))
    nodes = where / "nodes.json"
    nodes.write_text(json.dumps(node_list(load_spec(str(spec)).nodes)))
    pod_file = where / "pods.yaml"
    pod_file.write_text(yaml.safe_dump_all(pods(), sort_keys=False))
    return {"spec": spec, "nodes": nodes, "pods": pod_file}


def _normalize_plan(text: str) -> str:
    """The plan's ``lastUpdated`` is the time of the run: replaced by a constant."""
    doc = json.loads(text)
    for item in doc["items"]:
        item["status"]["lastUpdated"] = NOW
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def outputs(paths: dict[str, Path]) -> dict[str, tuple[str, int]]:
    """Every golden output: name -> (text, exit code). The CLI runs beside the inputs, which it is
    given by their file names (outputs name their source file)."""
    cwd = paths["spec"].parent
    paths = {k: Path(p.name) for k, p in paths.items()}

    def _joulectl(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250"}
        return subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True, env=env,
                              timeout=600, cwd=cwd)

    out: dict[str, tuple[str, int]] = {}
    r = _joulectl("plan", str(paths["spec"]), "-o", "json", "--absolute-caps", "--gpu-governor", "eco=efficient")
    out["plan-spec.json"] = (_normalize_plan(r.stdout), r.returncode)
    r = _joulectl("plan", "--nodes", str(paths["nodes"]), "-o", "json")
    out["plan-nodes.json"] = (_normalize_plan(r.stdout), r.returncode)
    r = _joulectl("plan", "--nodes", str(paths["nodes"]), "--policy", "queue-aware", "--pods", str(paths["pods"]))
    out["plan-nodes-table.txt"] = (r.stdout, r.returncode)
    r = _joulectl("schedule-check", str(paths["pods"]), "--spec", str(paths["spec"]), "--now", NOW, "-o", "json")
    doc = json.loads(r.stdout)
    out["schedule-check.json"] = (json.dumps(doc, indent=1, sort_keys=True) + "\n", r.returncode)
    return out


def main() -> None:
    import tempfile

    if sys.argv[1:] != ["write"]:
        sys.exit("usage: fleet1000.py write")
    DATA.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = outputs(write_inputs(Path(tmp)))
    for name, (text, code) in results.items():
        with gzip.open(DATA / f"{name}.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
            fh.write(text)
        print(f"{name}: exit {code}, {len(text)} bytes")
    (DATA / "exit-codes.json").write_text(json.dumps({k: c for k, (_, c) in results.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
