"""`joulectl plan`: per-node NodeTwin results for a whole cluster, from a cluster spec or a NodeList.

The plan flags are defined once here as ``Annotated`` types and turned into
:class:`~joulectl.planning.PlanOptions` by :func:`options_from_flags`, so ``schedule-check --spec``
stacks the same flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from joulectl.cli.common import REPORT_FORMATS, NoHeaders, Report, check_format, choices

if TYPE_CHECKING:
    from joulectl.planning import PlanOptions, PlanResult

Policy = Annotated[
    str,
    typer.Option(
        "--policy",
        metavar="static|queue-aware",
        autocompletion=choices("static", "queue-aware"),
        help="static (a fixed share at performance) or queue-aware (sized by demand).",
    ),
]
PerformanceFraction = Annotated[
    float, typer.Option("--performance-fraction", metavar="F", help="static: share of eligible nodes at performance.")
]
QueueBaseFraction = Annotated[
    float, typer.Option("--queue-base-fraction", metavar="F", help="queue-aware: base share at performance.")
]
QueueMin = Annotated[int, typer.Option("--queue-min", metavar="N", help="queue-aware: fewest performance nodes.")]
QueueMax = Annotated[
    int, typer.Option("--queue-max", metavar="N", help="queue-aware: most performance nodes (0 = every node).")
]
PodsPerPerformanceNode = Annotated[
    int,
    typer.Option(
        "--pods-per-performance-node", metavar="N", help="queue-aware: performance pods one performance node takes."
    ),
]
Pods = Annotated[
    str | None,
    typer.Option("--pods", metavar="PODS.yaml", help="Pods (kubectl get pods -A -o yaml): demand and draining guard."),
]
GpuEcoPct = Annotated[float, typer.Option("--gpu-eco-pct", metavar="P", help="GPU cap of eco nodes, % of max.")]
GpuPerformancePct = Annotated[
    float, typer.Option("--gpu-performance-pct", metavar="P", help="GPU cap of performance nodes, % of max.")
]
CpuEcoPct = Annotated[float, typer.Option("--cpu-eco-pct", metavar="P", help="CPU cap of eco CPU-only nodes, %.")]
CpuPerformancePct = Annotated[
    float, typer.Option("--cpu-performance-pct", metavar="P", help="CPU cap of performance CPU-only nodes, %.")
]
AbsoluteCaps = Annotated[
    bool, typer.Option("--absolute-caps", help="Also write watts (capWattsPerGpu, packagePowerCapWatts).")
]
ModelCaps = Annotated[
    str | None,
    typer.Option("--model-caps", metavar="FILE", help="GPU_MODEL_CAPS_JSON: {product: {minCapWatts, maxCapWatts}}."),
]
GpuGovernor = Annotated[
    list[str] | None,
    typer.Option("--gpu-governor", metavar="PROFILE=PRESET", help="GPU governor of a profile (eco=efficient)."),
]
GovernorModelPresets = Annotated[
    str | None,
    typer.Option(
        "--governor-model-presets", metavar="FILE", help="JSON map of GPU models opted in to the sustained preset."
    ),
]
CpuEcoCapOnUncappable = Annotated[
    bool,
    typer.Option(
        "--cpu-eco-cap-on-uncappable-gpu-nodes", help="Give GPU nodes whose GPUs cannot be capped the CPU cap."
    ),
]
Telemetry = Annotated[
    str | None,
    typer.Option("--telemetry", metavar="FILE", help="Measured power: Prometheus text or OTLP JSON lines."),
]
Selector = Annotated[
    list[str] | None,
    typer.Option(
        "--selector",
        metavar="SELECTOR",
        help="Plan only nodes matching this label selector (kubectl -l: k=v, k!=v, k, !k, k in (a,b), k notin (a,b)).",
    ),
]
Hardware = Annotated[
    list[str] | None,
    typer.Option("--hardware", metavar="FILE", help="NodeHardware objects (discover -o yaml); repeatable."),
]
GpuResources = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu-resource",
        metavar="NAME",
        help="A resource whose units are whole GPUs (repeatable; env JOULECTL_GPU_RESOURCES, comma-separated).",
    ),
]
GpuShareResources = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu-share-resource",
        metavar="NAME=UNITS",
        help="A resource counted in shares, UNITS per GPU (repeatable; env JOULECTL_GPU_SHARE_RESOURCES).",
    ),
]
GpuProductLabels = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu-product-label",
        metavar="KEY",
        help="A node label naming the GPU model (repeatable; env JOULECTL_GPU_PRODUCT_LABEL_KEYS).",
    ),
]


def apply_gpu_flags(
    resources: list[str] | None, share_resources: list[str] | None, product_labels: list[str] | None
) -> None:
    """Put the GPU configuration of the flags (or their environment variables) in force; exit 2 on
    an invalid name, naming the flag."""
    from joulectl.errors import InputError
    from joulectl.k8s import parse_gpu_config, set_gpu_config

    try:
        config = parse_gpu_config(resources, share_resources, product_labels)
    except ValueError as e:
        flag, _, message = str(e).partition(": ")
        raise InputError(message, field=flag) from None
    set_gpu_config(config)


ProfilesDir = Annotated[
    str | None,
    typer.Option("--profiles-dir", envvar="SIM_PROFILES_DIR", metavar="DIR", help="Local simulator profiles."),
]


def options_from_flags(
    *,
    policy: str = "static",
    performance_fraction: float = 0.5,
    queue_base_fraction: float = 0.6,
    queue_min: int = 1,
    queue_max: int = 1_000_000,
    pods_per_performance_node: int = 10,
    gpu_eco_pct: float = 60.0,
    gpu_performance_pct: float = 100.0,
    cpu_eco_pct: float = 60.0,
    cpu_performance_pct: float = 100.0,
    absolute_caps: bool = False,
    model_caps: str | None = None,
    gpu_governor: list[str] | None = None,
    governor_model_presets: str | None = None,
    cpu_eco_cap_on_uncappable_gpu_nodes: bool = False,
    selector: list[str] | None = None,
) -> PlanOptions:
    """The :class:`PlanOptions` of the plan flags (files read, everything validated: exit 2 on error)."""
    from joulectl.planning.options import PlanOptions, parse_governor_pairs, parse_model_caps, parse_selector
    from joulectl.yamlio import load_json_map

    caps: dict[str, Any] = {}
    if model_caps is not None:
        caps = load_json_map(model_caps, what="model caps file")
        parse_model_caps(caps, model_caps)
    presets: dict[str, Any] = {}
    if governor_model_presets is not None:
        presets = load_json_map(governor_model_presets, what="governor model presets file")
    options = PlanOptions(
        policy=policy.strip().lower(),
        performance_fraction=performance_fraction,
        queue_base_fraction=queue_base_fraction,
        queue_min=queue_min,
        queue_max=queue_max,
        pods_per_performance_node=pods_per_performance_node,
        gpu_eco_pct=gpu_eco_pct,
        gpu_performance_pct=gpu_performance_pct,
        cpu_eco_pct=cpu_eco_pct,
        cpu_performance_pct=cpu_performance_pct,
        absolute_caps=absolute_caps,
        model_caps=caps,
        gpu_governor=parse_governor_pairs(gpu_governor),
        governor_model_presets=presets,
        cpu_eco_cap_on_uncappable_gpu_nodes=cpu_eco_cap_on_uncappable_gpu_nodes,
        selector=parse_selector(selector),
    )
    options.validate()
    return options


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("plan")
    def plan(
        spec: Annotated[
            str | None, typer.Argument(metavar="SPEC", help="ClusterSpec file (- = stdin).", show_default=False)
        ] = None,
        nodes: Annotated[
            str | None, typer.Option("--nodes", metavar="NODES.yaml", help="NodeList (kubectl get nodes -o yaml).")
        ] = None,
        hardware: Hardware = None,
        policy: Policy = "static",
        performance_fraction: PerformanceFraction = 0.5,
        queue_base_fraction: QueueBaseFraction = 0.6,
        queue_min: QueueMin = 1,
        queue_max: QueueMax = 1_000_000,
        pods_per_performance_node: PodsPerPerformanceNode = 10,
        pods: Pods = None,
        gpu_eco_pct: GpuEcoPct = 60.0,
        gpu_performance_pct: GpuPerformancePct = 100.0,
        cpu_eco_pct: CpuEcoPct = 60.0,
        cpu_performance_pct: CpuPerformancePct = 100.0,
        absolute_caps: AbsoluteCaps = False,
        model_caps: ModelCaps = None,
        gpu_governor: GpuGovernor = None,
        governor_model_presets: GovernorModelPresets = None,
        cpu_eco_cap_on_uncappable_gpu_nodes: CpuEcoCapOnUncappable = False,
        telemetry: Telemetry = None,
        selector: Selector = None,
        gpu_resource: GpuResources = None,
        gpu_share_resource: GpuShareResources = None,
        gpu_product_label: GpuProductLabels = None,
        profiles_dir: ProfilesDir = None,
        output: Report = "table",
        no_headers: NoHeaders = False,
    ) -> None:
        """Plan a cluster: which nodes stay at performance, their caps, and their NodeTwin objects."""
        fmt = check_format(output, REPORT_FORMATS, no_headers)
        apply_gpu_flags(gpu_resource, gpu_share_resource, gpu_product_label)
        options = options_from_flags(
            policy=policy, performance_fraction=performance_fraction, queue_base_fraction=queue_base_fraction,
            queue_min=queue_min, queue_max=queue_max, pods_per_performance_node=pods_per_performance_node,
            gpu_eco_pct=gpu_eco_pct, gpu_performance_pct=gpu_performance_pct, cpu_eco_pct=cpu_eco_pct,
            cpu_performance_pct=cpu_performance_pct, absolute_caps=absolute_caps, model_caps=model_caps,
            gpu_governor=gpu_governor, governor_model_presets=governor_model_presets,
            cpu_eco_cap_on_uncappable_gpu_nodes=cpu_eco_cap_on_uncappable_gpu_nodes, selector=selector,
        )
        from joulectl.planning.planner import no_gc

        # The cyclic collector is paused from the input's first byte until the plan is printed and
        # dropped: planning builds acyclic dicts and lists, and a 100,000-node export is 300 MiB of
        # them; with it running, the first collection after planning (at plan()'s own end) scanned
        # all of them again, 0.75 s of the run (benchmarks/bench_plan.py). _plan_and_print returns
        # inside the pause, so its objects are freed before the collector is back.
        with no_gc():
            _plan_and_print(options, fmt, spec=spec, nodes=nodes, hardware=hardware or (), pods=pods,
                            telemetry=telemetry, profiles_dir=profiles_dir)


def _plan_and_print(options: Any, fmt: str, **inputs: Any) -> None:
    from joulectl.planning import load_cluster
    from joulectl.planning import plan as run_plan
    from joulectl.render import emit, warn

    cluster = load_cluster(**inputs, node_ids=False)  # no twin, row or warning shows a Node's nodeInfo ids
    result = run_plan(cluster, options)
    for line in result.warnings:
        warn(line)
    if fmt == "json":
        import sys

        write_json_list(result, sys.stdout)
        return
    from joulectl.render import View

    emit(result.twins, fmt, out=View(result.twins, table=lambda wide: plan_table(result, wide),
                                     csv=lambda: (plan_columns(), result.nodes)))


#: Above this many twins ``-o json`` prints one twin per line (json's indenting encoder is pure
#: Python and would take longer than the plan itself).
JSON_INDENT_MAX_ITEMS = 1000


def write_json_list(result: PlanResult, out: Any) -> None:
    """The twins as a ``v1`` ``List``: indented, or for large fleets one compact twin per line,
    written as they are made (:meth:`PlanResult.iter_twin_json`)."""
    if len(result) <= JSON_INDENT_MAX_ITEMS:
        out.write(json_list(result.twins))
        return
    out.write('{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [\n    ')
    batch: list[str] = []
    sep = ""
    for text in result.iter_twin_json():
        batch.append(text)
        if len(batch) == 2000:  # a few large writes, not 100,000 small ones
            out.write(sep + ",\n    ".join(batch))
            sep, batch = ",\n    ", []
    if batch:
        out.write(sep + ",\n    ".join(batch))
    out.write("\n  ]\n}\n")


def json_list(items: list[dict[str, Any]]) -> str:
    """The twins as a ``v1`` ``List``: indented, or for large fleets one compact twin per line."""
    import json

    from joulectl.render import to_json

    if len(items) <= JSON_INDENT_MAX_ITEMS:
        return to_json({"apiVersion": "v1", "kind": "List", "items": items})
    body = ",\n".join("    " + json.dumps(item, ensure_ascii=False) for item in items)
    return '{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [\n' + body + "\n  ]\n}\n"


def _gpus(r: dict[str, Any]) -> str:
    if not r["gpuCount"]:
        return "-"
    return f"{r['gpuCount']}" + (f"/{r['powerDomains']}" if r["powerDomains"] != r["gpuCount"] else "")


def plan_columns() -> list[Any]:
    """The plan table's columns (render.Column), and ``-o csv``'s: ``-o wide`` adds the measured
    power, the hardware family and the density."""
    from joulectl.render import Column, fmt_num

    def cap(pct: Any, w: Any, unit: str) -> str:
        if w is not None:
            return f"{fmt_num(w, ' W')}{unit}"
        return f"{fmt_num(pct, '%')}" if pct is not None else "-"

    return [
        Column("NODE", lambda r: r["node"], "node"),
        Column("PROFILE", lambda r: r["profile"], "profile"),
        Column("CLASS", lambda r: r["class"], "class"),
        Column("GPUS", lambda r: r["gpuCount"], "gpu.count", cell=_gpus),
        Column(None, lambda r: r["powerDomains"], "gpu.power_domains"),
        Column("GPU CAP", lambda r: r["gpuCapPct"], "gpu.cap", "%",
               cell=lambda r: cap(r["gpuCapPct"], r["gpuCapWattsPerGpu"], "/GPU")),
        Column(None, lambda r: r["gpuCapWattsPerGpu"], "gpu.cap_per_gpu", "W"),
        Column("GOVERNOR", lambda r: r["gpuGovernor"], "gpu.governor"),
        Column("CPU CAP", lambda r: r["cpuCapPct"], "cpu.cap", "%",
               cell=lambda r: cap(r["cpuCapPct"], r["cpuCapWatts"], "")),
        Column(None, lambda r: r["cpuCapWatts"], "cpu.cap_watts", "W"),
        Column("TDP", lambda r: r["nodeTdpW"], "tdp", "W"),
        Column("BUDGET", lambda r: r["plannedW"], "budget", "W"),
        Column("MEASURED", lambda r: r["measuredW"], "power.measured", "W", wide=True),
        Column("HEADROOM", lambda r: r["headroom"], "headroom"),
        Column("COOLING", lambda r: r["cooling"], "cooling"),
        Column("FAMILY", lambda r: r["family"], "family", wide=True),
        Column("DENSITY", lambda r: r["density"], "density", wide=True),
        Column("NOTES", lambda r: "; ".join(r["notes"]), "notes", cell=lambda r: "; ".join(r["notes"])),
    ]


def plan_table(result: PlanResult, wide: bool = False) -> str:
    """The plan as tables: one row per node, the nodes left out, and the fleet summary."""
    from joulectl.render import columns_table, fmt_num, table

    text = columns_table(plan_columns(), result.nodes, wide=wide)
    if result.ineligible:
        text += "\n" + table(("NODE", "NOT PLANNED BECAUSE"), result.ineligible, title="not planned")
    s = result.summary
    prof = s["profiles"]
    summary_rows = [
        (name, prof[name]["nodes"], fmt_num(prof[name]["tdpW"], " W"), fmt_num(prof[name]["plannedW"], " W"))
        for name in ("performance", "eco")
    ]
    summary_rows.append(("total", s["planned"], fmt_num(s["tdpW"], " W"), fmt_num(s["plannedW"], " W")))
    text += "\n" + table(("PROFILE", "NODES", "TDP", "BUDGET"), summary_rows, title="fleet")
    text += (
        f"policy {s['policy']}: {s['performance']} of {s['planned']} planned nodes at performance"
        f" (sized {s['performanceTarget']}, {s['families']} hardware families), {s['draining']} draining;"
        f" saving {fmt_num(s['savingW'], ' W')} ({fmt_num(s['savingPct'], '%', 1)}) against all-performance"
        f" {fmt_num(s['allPerformanceW'], ' W')}\n"
    )
    return text
