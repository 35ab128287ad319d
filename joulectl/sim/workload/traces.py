"""Workload traces: one task model, three ways in.

- **Joulie JSONL** (a ``.jsonl`` file, or a directory of them; joulie-reference.md §5 "Trace format"):
  only ``type: job`` records with a ``jobId`` are read, with Joulie's defaults and class-derived
  workload profile. A job's duration at full speed is its work over its base speed: ``gpuUnits /
  max(0.1, gpus)`` seconds when it has GPU work, else ``cpuUnits / cpu`` (one unit per requested core,
  or GPU, per second: Joulie's base speed of 1). ``durationSec`` overrides it.
- **Kubernetes manifests** (``.yaml``/``.yml``/``.json``): Pods and workload templates (Deployment,
  Job, ...), each replica a task, with ``joulectl.io/arrival-s`` and ``joulectl.io/duration-s``
  annotations; the demand is read by schedule-check's own code (:mod:`joulectl.scheduling.demand`).
- **CSV** (``.csv``) with exactly the columns of :data:`CSV_COLUMNS`, the shape public cluster traces
  reduce to: duration at full speed, ``gpu_milli`` the share of one GPU (1000 = whole), ``gpu_types``
  ``|``-separated model names matched as HAMi matches types, ``class`` performance or standard
  (empty = standard).

Every bad record is an :class:`~joulectl.errors.InputError` (exit 2) naming the file, the line and
the column (or field): a trace is read whole before anything runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from joulectl.errors import InputError

ARRIVAL_ANNOTATION = "joulectl.io/arrival-s"
DURATION_ANNOTATION = "joulectl.io/duration-s"
CSV_COLUMNS = ("name", "arrival_s", "duration_s", "cpu_milli", "memory_mib", "gpus", "gpu_milli", "gpu_types",
               "class")
CLASSES = ("performance", "standard")
GPU_KEYS = {"nvidia.com/gpu": "nvidia.com/gpu", "amd.com/gpu": "amd.com/gpu", "gpu": "nvidia.com/gpu"}


@dataclass(frozen=True, slots=True)
class Task:
    """One task of a trace. Times in seconds; ``duration_s`` is the run time at full speed.

    ``gpu_resource`` is the GPU resource asked for (``nvidia.com/gpu``, ``amd.com/gpu``, ...), or
    None for a GPU of any vendor (CSV); ``gpu_milli`` is the share of each GPU (1000 = whole GPU).
    """

    name: str
    arrival_s: float
    duration_s: float
    workload_class: str
    cpu_milli: int
    memory_mib: float
    gpus: int
    gpu_milli: int = 1000
    gpu_types: tuple[str, ...] = ()
    gpu_resource: str | None = None
    cpu_util: float = 0.65
    gpu_util: float = 0.80
    memory_intensity: float = 0.45
    io_intensity: float = 0.10
    cpu_class: str = "cpu.mixed"
    gpu_class: str = "gpu.mixed"
    sensitivity_cpu: float = 1.0
    sensitivity_gpu: float = 1.0
    gang: str | None = None
    source: str = ""
    #: Kubernetes manifests: the pod as found (annotations and spec go to the filters as they are)
    pod: Any = None


# -- class-derived defaults (joulie-reference §5 "Class-derived defaults") ------------------------


def _kind(cls: str) -> str:
    return cls.split(".", 1)[-1]


def cpu_util_default(cpu_class: str) -> float:
    return {"compute_bound": 0.95, "memory_bound": 0.60, "io_bound": 0.20}.get(_kind(cpu_class), 0.65)


def gpu_util_default(gpu_class: str) -> float:
    return {"compute_bound": 0.95, "memory_bound": 0.70, "bandwidth_bound": 0.70}.get(_kind(gpu_class), 0.80)


def memory_default(cpu_class: str) -> float:
    return {"memory_bound": 0.85, "io_bound": 0.20}.get(_kind(cpu_class), 0.45)


def io_default(cpu_class: str) -> float:
    return 0.85 if _kind(cpu_class) == "io_bound" else 0.10


# -- helpers -----------------------------------------------------------------------------------------


def _number(value: Any, file: str, where: str, *, minimum: float = 0.0, positive: bool = False) -> float:
    if isinstance(value, bool):
        raise InputError(f"must be a number, got {value!r}", file=file, field=where)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"must be a number, got {value!r}", file=file, field=where) from None
    if not math.isfinite(number):
        raise InputError(f"must be a finite number, got {value!r}", file=file, field=where)
    if positive and number <= 0:
        raise InputError(f"must be above 0, got {value!r}", file=file, field=where)
    if number < minimum:
        raise InputError(f"must be {minimum:g} or more, got {value!r}", file=file, field=where)
    return number


def _integer(value: Any, file: str, where: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit():
        raise InputError(f"must be a whole number 0 or more, got {value!r}", file=file, field=where)
    return int(text)


def _fraction(value: Any, file: str, where: str) -> float:
    number = _number(value, file, where)
    if number > 1:
        raise InputError(f"must be between 0 and 1, got {value!r}", file=file, field=where)
    return number


# -- CSV -------------------------------------------------------------------------------------------


def read_csv(text: str, file: str) -> list[Task]:
    """Tasks of a CSV trace with exactly :data:`CSV_COLUMNS` (in that order)."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise InputError("empty CSV trace (no header)", file=file, field="line 1")
    header = [h.strip() for h in header]
    if tuple(header) != CSV_COLUMNS:
        raise InputError(f"the header must be exactly {','.join(CSV_COLUMNS)}, got {','.join(header)}",
                         file=file, field="line 1")
    tasks: list[Task] = []
    seen: set[str] = set()
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(CSV_COLUMNS):
            raise InputError(f"expected {len(CSV_COLUMNS)} columns, found {len(row)}", file=file,
                             field=f"line {line}")

        def at(col: str, _line: int = line) -> str:
            return f"line {_line}, column {col}"

        name, arrival, duration, cpu, mem, gpus, milli, types, cls = (c.strip() for c in row)
        if not name:
            raise InputError("empty task name", file=file, field=at("name"))
        if name in seen:
            raise InputError(f"task {name!r} is listed twice", file=file, field=at("name"))
        seen.add(name)
        cls = cls.lower() or "standard"
        if cls not in CLASSES:
            raise InputError(f"must be performance or standard (or empty), got {cls!r}", file=file, field=at("class"))
        n_gpus = _integer(gpus, file, at("gpus"))
        share = _integer(milli, file, at("gpu_milli")) if milli else 1000
        if n_gpus and not 0 < share <= 1000:
            raise InputError(f"must be 1..1000 (the share of one GPU), got {milli!r}", file=file,
                             field=at("gpu_milli"))
        if n_gpus > 1 and share != 1000:
            raise InputError(f"a share of a GPU ({milli}) is for one GPU, the task asks for {n_gpus}", file=file,
                             field=at("gpu_milli"))
        gpu_types = tuple(t.strip() for t in types.split("|") if t.strip())
        tasks.append(Task(
            name=name,
            arrival_s=_number(arrival, file, at("arrival_s")),
            duration_s=_number(duration, file, at("duration_s"), positive=True),
            workload_class=cls,
            cpu_milli=_integer(cpu, file, at("cpu_milli")),
            memory_mib=_number(mem, file, at("memory_mib")) if mem else 0.0,
            gpus=n_gpus,
            gpu_milli=share if n_gpus else 0,
            gpu_types=gpu_types,
            gpu_class="gpu.mixed",
            source=f"{file}:{line}",
        ))
    return tasks


# -- Joulie JSONL ----------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _intent_class(rec: Mapping[str, Any], file: str, where: str) -> str:
    raw = rec.get("intentClass")
    if raw is not None:
        value = str(raw).strip().lower()
        if value not in CLASSES:
            raise InputError(f"must be performance or standard, got {raw!r}", file=file, field=f"{where}intentClass")
        return value
    # inferred from podTemplate.affinity: a required power-profile of performance only
    text = repr(_get(rec, "podTemplate").get("affinity") or "")
    return "performance" if "performance" in text and "eco" not in text else "standard"


def _jsonl_task(rec: Mapping[str, Any], file: str, line: int) -> Task:
    where = f"line {line}, "
    pt = _get(rec, "podTemplate")
    req = _get(pt, "requests")
    cpu = _number(req.get("cpu", 1), file, f"{where}podTemplate.requests.cpu") if "cpu" in req else 1.0
    mem_raw = req.get("memory")
    mem_mib = 0.0
    if mem_raw is not None:
        from joulectl.k8s import parse_quantity

        try:
            mem_mib = parse_quantity(mem_raw) / 2**20
        except ValueError:
            raise InputError(f"not a valid quantity: {mem_raw!r}", file=file,
                             field=f"{where}podTemplate.requests.memory") from None
    gpus, resource = 0, None
    # Joulie's keys first, then any resource that counts whole GPUs (example.com/gpu, or a name
    # given with --gpu-resource), as `plan` and `schedule-check` read a pod's requests
    from joulectl.k8s import gpu_resource

    keys = dict(GPU_KEYS)
    for name in req:
        found = gpu_resource(str(name)) if name not in keys else None
        if found is not None and found.is_whole:
            keys[str(name)] = found.name
    for key, res in keys.items():
        if key in req:
            raw = req[key]
            if not isinstance(raw, str) or not raw.strip().isdigit():
                raise InputError(f"a GPU request must be an integer string, got {raw!r}", file=file,
                                 field=f"{where}podTemplate.requests.{key}")
            gpus, resource = int(raw), res
            break
    work = _get(rec, "work")
    cpu_units = _number(work.get("cpuUnits", 1000), file, f"{where}work.cpuUnits")
    gpu_units = _number(work.get("gpuUnits", 0), file, f"{where}work.gpuUnits")
    sens = _get(rec, "sensitivity")
    wl = _get(rec, "workloadClass")
    cpu_class = str(wl.get("cpu") or "cpu.mixed")
    gpu_class = str(wl.get("gpu") or "gpu.mixed")
    prof = _get(rec, "workloadProfile")

    def frac(key: str, default: float) -> float:
        return _fraction(prof[key], file, f"{where}workloadProfile.{key}") if key in prof else default

    if "durationSec" in rec:
        duration = _number(rec["durationSec"], file, f"{where}durationSec", positive=True)
    elif gpus > 0 and gpu_units > 0:
        duration = gpu_units / max(0.1, gpus)
    else:
        duration = cpu_units / max(cpu, 1e-3)
    if duration <= 0:
        raise InputError("the job has no work (cpuUnits and gpuUnits are 0)", file=file, field=f"{where}work")
    gang = rec.get("gang")
    gang_id = None
    if isinstance(gang, Mapping):
        gang_id = str(gang.get("id") or gang.get("name") or rec.get("workloadId") or "") or None
    elif gang:
        gang_id = str(rec.get("workloadId") or gang)
    return Task(
        name=str(rec["jobId"]),
        arrival_s=_number(rec.get("submitTimeOffsetSec", 0), file, f"{where}submitTimeOffsetSec"),
        duration_s=duration,
        workload_class=_intent_class(rec, file, where),
        cpu_milli=round(cpu * 1000),
        memory_mib=mem_mib,
        gpus=gpus,
        gpu_milli=1000 if gpus else 0,
        gpu_resource=resource,
        cpu_util=frac("cpuUtilization", cpu_util_default(cpu_class)),
        gpu_util=frac("gpuUtilization", gpu_util_default(gpu_class)),
        memory_intensity=frac("memoryIntensity", memory_default(cpu_class)),
        io_intensity=frac("ioIntensity", io_default(cpu_class)),
        cpu_class=cpu_class,
        gpu_class=gpu_class,
        sensitivity_cpu=_number(sens.get("cpu", 1), file, f"{where}sensitivity.cpu"),
        sensitivity_gpu=_number(sens.get("gpu", 1), file, f"{where}sensitivity.gpu"),
        gang=gang_id,
        source=f"{file}:{line}",
    )


def read_jsonl(text: str, file: str) -> list[Task]:
    """Tasks of a Joulie JSONL trace (``type: job`` records with a ``jobId``)."""
    import json

    tasks: list[Task] = []
    seen: set[str] = set()
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError as e:
            col = getattr(e, "colno", None)
            raise InputError(f"not JSON ({getattr(e, 'msg', e)})", file=file,
                             field=f"line {line}, column {col}" if col else f"line {line}") from None
        if not isinstance(rec, dict) or rec.get("type") != "job" or not rec.get("jobId"):
            continue
        task = _jsonl_task(rec, file, line)
        if task.name in seen:
            raise InputError(f"job {task.name!r} is listed twice", file=file, field=f"line {line}, jobId")
        seen.add(task.name)
        tasks.append(task)
    return tasks


# -- Kubernetes manifests ----------------------------------------------------------------------------


def read_manifests(docs: Iterable[Any], file: str) -> list[Task]:
    """Tasks of Kubernetes Pod/Job/Deployment manifests (one per replica) with arrival and duration."""
    from joulectl.k8s import iter_pods
    from joulectl.scheduling.demand import pod_demand

    tasks: list[Task] = []
    for i, doc in enumerate(docs, start=1):
        where = f"document {i}"
        if doc is None:
            continue
        try:
            refs = list(iter_pods(doc, file))
        except ValueError as e:
            raise InputError(str(e), file=file, field=where) from None
        for ref in refs:
            label = f"{where} ({ref.kind} {ref.namespace}/{ref.name})"
            ann = ref.annotations
            for key in (ARRIVAL_ANNOTATION, DURATION_ANNOTATION):
                if key not in ann:
                    raise InputError("missing annotation (seconds)", file=file,
                                     field=f"{label}: metadata.annotations[{key}]")
            arrival = _number(ann[ARRIVAL_ANNOTATION], file, f"{label}: metadata.annotations[{ARRIVAL_ANNOTATION}]")
            duration = _number(ann[DURATION_ANNOTATION], file,
                               f"{label}: metadata.annotations[{DURATION_ANNOTATION}]", positive=True)
            demand = pod_demand(ref, file)
            gpus = 0
            resource = None
            for res_name, units in sorted(demand.gpu_requests.items()):
                gpus, resource = units, res_name
                break
            for k in range(max(1, ref.replicas)):
                name = f"{ref.namespace}/{ref.name}" + (f"-{k}" if ref.replicas > 1 else "")
                tasks.append(Task(
                    name=name, arrival_s=arrival, duration_s=duration, workload_class=demand.workload_class,
                    cpu_milli=round(demand.cpu_cores * 1000), memory_mib=demand.memory_bytes / 2**20,
                    gpus=gpus, gpu_milli=1000 if gpus else 0, gpu_resource=resource,
                    source=f"{file}: {label}", pod=ref,
                ))
    return tasks


# -- entry point -------------------------------------------------------------------------------------


def trace_format(path: str) -> str:
    """``jsonl``, ``csv`` or ``k8s`` from the path (a directory is a set of ``*.jsonl``)."""
    if os.path.isdir(path):
        return "jsonl"
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        return "jsonl"
    if ext == ".csv":
        return "csv"
    if ext in (".yaml", ".yml", ".json"):
        return "k8s"
    raise InputError("unknown trace format: expected .jsonl (or a directory of them), .csv, or .yaml/.yml/.json "
                     "Kubernetes manifests", file=path, field="--trace")


def load_trace(path: str) -> list[Task]:
    """Every task of the trace at ``path``, sorted by arrival then name (deterministic)."""
    from joulectl.yamlio import read_text

    fmt = trace_format(path)
    tasks: list[Task] = []
    if fmt == "jsonl":
        files = ([os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".jsonl")]
                 if os.path.isdir(path) else [path])
        if not files:
            raise InputError("no *.jsonl file in the directory", file=path, field="--trace")
        for f in files:
            tasks += read_jsonl(read_text(f, what="trace"), f)
    elif fmt == "csv":
        tasks = read_csv(read_text(path, what="trace"), path)
    else:
        from joulectl.yamlio import load_documents

        tasks = read_manifests(load_documents(path, what="trace"), path)
    if not tasks:
        raise InputError("the trace has no task", file=path, field="--trace")
    names: set[str] = set()
    for t in tasks:
        if t.name in names:
            raise InputError(f"task {t.name!r} appears twice", file=t.source.split(":", 1)[0] or path)
        names.add(t.name)
    return sorted(tasks, key=lambda t: (t.arrival_s, t.name))
