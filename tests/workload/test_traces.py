"""The three trace formats, read as the what-if model reads them, and each one's bad rows (exit 2
naming file, line and column; nothing run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from whatifkit import spec_text

from joulectl.errors import InputError
from joulectl.sim.workload.traces import load_trace

HEADER = "name,arrival_s,duration_s,cpu_milli,memory_mib,gpus,gpu_milli,gpu_types,class\n"


def test_csv(write: Callable[..., str]) -> None:
    path = write("t.csv", HEADER + "b,10,60,500,256,1,250,A100|H100,performance\n"
                                   "a,10,30.5,2000,1024,0,,,\n")
    a, b = load_trace(path)
    assert (a.name, a.arrival_s, a.duration_s, a.cpu_milli, a.memory_mib, a.gpus, a.workload_class) == \
        ("a", 10.0, 30.5, 2000, 1024.0, 0, "standard")
    assert (b.gpus, b.gpu_milli, b.gpu_types, b.workload_class, b.gpu_resource) == \
        (1, 250, ("A100", "H100"), "performance", None)
    assert b.source == f"{path}:2"


def test_jsonl_defaults_and_class_profile(write: Callable[..., str]) -> None:
    path = write("t.jsonl", [
        {"type": "workload", "workloadId": "w"},
        {"type": "job", "jobId": "cpu-job", "submitTimeOffsetSec": 5,
         "workloadClass": {"cpu": "cpu.memory_bound"}, "podTemplate": {"requests": {"cpu": "4", "memory": "8Gi"}},
         "work": {"cpuUnits": 2000}},
        {"type": "job", "jobId": "amd-job", "podTemplate": {"requests": {"amd.com/gpu": "2"}},
         "work": {"gpuUnits": 500}, "sensitivity": {"gpu": 0}},
        {"type": "job"},  # no jobId: not read
    ])
    amd, cpu = load_trace(path)
    assert (cpu.duration_s, cpu.cpu_milli, cpu.memory_mib, cpu.cpu_util, cpu.memory_intensity, cpu.io_intensity) == \
        (500.0, 4000, 8192.0, 0.60, 0.85, 0.10)
    assert (amd.duration_s, amd.gpus, amd.gpu_resource, amd.sensitivity_gpu, amd.gpu_util, amd.cpu_milli) == \
        (250.0, 2, "amd.com/gpu", 0.0, 0.80, 1000)


def test_kubernetes_manifests(write: Callable[..., str]) -> None:
    ann = {"joulectl.io/arrival-s": "30", "joulectl.io/duration-s": "120", "joulie.io/workload-class": "performance"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"parallelism": 2, "template": {"metadata": {"annotations": ann}, "spec": {"containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "8"}}}]}}}}
    path = write("t.yaml", [job])
    t0, t1 = load_trace(path)
    assert (t0.name, t1.name) == ("ml/train-0", "ml/train-1")
    assert (t0.arrival_s, t0.duration_s, t0.gpus, t0.gpu_resource, t0.cpu_milli, t0.workload_class) == \
        (30.0, 120.0, 4, "nvidia.com/gpu", 8000, "performance")


@pytest.mark.parametrize(("name", "content", "message"), [
    ("t.csv", "name,arrival_s,duration_s\n", "t.csv: line 1: the header must be exactly name,arrival_s,"),
    ("t.csv", HEADER + "a,0,60,100,10,0,,,\nb,x,60,100,10,0,,,\n",
     "t.csv: line 3, column arrival_s: must be a number, got 'x'"),
    ("t.csv", HEADER + "a,0,0,100,10,0,,,\n", "t.csv: line 2, column duration_s: must be above 0, got '0'"),
    ("t.csv", HEADER + "a,0,5,100,10,1.5,,,\n", "t.csv: line 2, column gpus: must be a whole number 0 or more"),
    ("t.csv", HEADER + "a,0,5,100,10,1,2000,,\n", "t.csv: line 2, column gpu_milli: must be 1..1000"),
    ("t.csv", HEADER + "a,0,5,100,10,0,,,batch\n",
     "t.csv: line 2, column class: must be performance or standard (or empty), got 'batch'"),
    ("t.csv", HEADER + "a,0,5,100,10,0,,\n", "t.csv: line 2: expected 9 columns, found 8"),
    ("t.csv", HEADER + "a,0,5,100,10,0,,,\na,0,5,100,10,0,,,\n",
     "t.csv: line 3, column name: task 'a' is listed twice"),
    ("t.csv", HEADER + "a,0,nan,100,10,0,,,\n", "t.csv: line 2, column duration_s: must be a finite number"),
    ("t.jsonl", '{"type":"job","jobId":"a"}\n{"type": "job", oops}\n', "t.jsonl: line 2, column 17: not JSON"),
    ("t.jsonl", '{"type":"job","jobId":"a","podTemplate":{"requests":{"nvidia.com/gpu":1}}}\n',
     "t.jsonl: line 1, podTemplate.requests.nvidia.com/gpu: a GPU request must be an integer string, got 1"),
    ("t.jsonl", '{"type":"job","jobId":"a","workloadProfile":{"gpuUtilization":2}}\n',
     "t.jsonl: line 1, workloadProfile.gpuUtilization: must be between 0 and 1, got 2"),
    ("t.jsonl", '{"type":"job","jobId":"a","intentClass":"eco"}\n',
     "t.jsonl: line 1, intentClass: must be performance or standard, got 'eco'"),
    ("t.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n",
     "t.yaml: document 1 (Pod default/p): metadata.annotations[joulectl.io/arrival-s]: missing annotation"),
    ("t.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {joulectl.io/arrival-s: '0', "
               "joulectl.io/duration-s: soon}}\nspec: {containers: [{name: c}]}\n",
     "t.yaml: document 1 (Pod default/p): metadata.annotations[joulectl.io/duration-s]: must be a number, got 'soon'"),
    ("t.txt", "x\n", "t.txt: --trace: unknown trace format"),
    ("t.csv", HEADER, "t.csv: --trace: the trace has no task"),
])
def test_bad_rows(cli: Callable[..., Any], write: Callable[..., str], tmp_path: Any, name: str, content: str,
                  message: str) -> None:
    path = write(name, content)
    with pytest.raises(InputError):
        load_trace(path)
    spec = write("spec.yaml", spec_text("{name: cpu, profile: intel-xeon-2s-rapl, count: 1}"))
    r = cli("simulate", "compare", spec, "--trace", path, "--plan", "uncapped")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"joulectl: error: {tmp_path}/{message}"), r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    # nothing half-run: run --trace refuses it before a tree is rendered
    root = tmp_path / "root"
    r = cli("simulate", "run", spec, "--root", str(root), "--trace", path, "--ticks", "1", "--fast")
    assert r.exit_code == 2 and message.split(": ")[-1] in r.stderr
    assert not root.exists()


def test_each_format_replays_the_same_task(cli: Callable[..., Any], write: Callable[..., str]) -> None:
    """One 600 s, 2-core CPU task in each format: the same energy on the same node."""
    spec = write("spec.yaml", spec_text("{name: cpu, profile: intel-xeon-2s-rapl, count: 1}"))
    csv = write("t.csv", HEADER + "job,0,600,2000,1024,0,,,\n")
    jsonl = write("t.jsonl", [{"type": "job", "jobId": "job", "podTemplate": {"requests": {"cpu": "2",
                                                                                        "memory": "1Gi"}},
                               "durationSec": 600}])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job", "annotations": {
        "joulectl.io/arrival-s": "0", "joulectl.io/duration-s": "600"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}
    k8s = write("t.yaml", [pod])
    energies = []
    for path in (csv, jsonl, k8s):
        r = cli("simulate", "compare", spec, "--trace", path, "--plan", "uncapped", "-o", "yaml")
        assert r.exit_code == 0, r.stderr
        import yaml

        doc = yaml.safe_load(r.stdout)
        energies.append(doc["plans"][0]["energyKWh"])
        assert doc["plans"][0]["makespanS"] == 600.0
    assert energies[0] == energies[1] == energies[2]
