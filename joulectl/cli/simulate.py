"""`joulectl simulate`: emulated clusters of bare-metal nodes (profiles, validate, render, unmount, render-nodes).

`run` and `status` are added by :mod:`joulectl.cli.simulate_run` (the simulator runtime).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Annotated, Any

import typer

from joulectl.cli.common import REPORT_FORMATS, NoHeaders, Report, check_format, choices
from joulectl.cli.plan import GpuProductLabels, GpuResources, GpuShareResources, apply_gpu_flags

_PROFILES_HELP = "Directory of local hardware profiles, added to the builtin ones (env SIM_PROFILES_DIR)."
ProfilesDir = Annotated[
    str | None,
    typer.Option("--profiles-dir", metavar="DIR", envvar="SIM_PROFILES_DIR", help=_PROFILES_HELP),
]
Spec = Annotated[str, typer.Argument(metavar="SPEC", help="ClusterSpec file (- = stdin).")]
OVERLAY_HELP = ("Render new trees as overlayfs mounts over one copy of each profile's files (needs root; a node's "
                "writes stay its own; the root keeps rendering this way; `simulate unmount` detaches them).")


def _profile_columns() -> list[Any]:
    from joulectl.render import Column

    def gpu(key: str) -> Any:
        return lambda r: (r["gpu"] or {}).get(key)

    return [
        Column("PROFILE", lambda r: r["name"], "name"),
        Column("EXTENDS", lambda r: r["extends"], "extends"),
        Column("CPU", lambda r: r["cpu"]["model"], "cpu.name",
               cell=lambda r: f"{r['cpu']['sockets']}x {r['cpu']['model']} ({r['cpu']['threads']} threads)"),
        Column(None, lambda r: r["cpu"]["sockets"], "cpu.sockets"),
        Column(None, lambda r: r["cpu"]["threads"], "cpu.threads"),
        Column("CPUFREQ", lambda r: r["cpu"]["driver"], "cpufreq.driver"),
        Column("POWERCAP", lambda r: " ".join(r["cpu"]["powercapZones"]), "powercap.zones", wide=True),
        Column("GPUS", gpu("model"), "gpu.name",
               cell=lambda r: f"{r['gpu']['count']}x {r['gpu']['model']} ({r['gpu']['exposure']})"
               if r["gpu"] else "-"),
        Column(None, gpu("count"), "gpu.count"),
        Column(None, gpu("exposure"), "gpu.exposure"),
        Column("SOURCES", lambda r: len(r["sources"]), "sources", wide=True),
    ]


def _profiles_view(doc: dict[str, Any]) -> Any:
    from joulectl.render import View, columns_table, kind_name

    rows = doc["items"]
    cols = _profile_columns()
    return View(doc, table=lambda wide: columns_table(cols, rows, wide=wide,
                                                      title="Hardware profiles (sources: -o yaml)"),
                csv=lambda: (cols, rows),
                names=lambda: [kind_name("HardwareProfile", doc["apiVersion"], r["name"]) for r in rows])


def _progress(total: int, label: str) -> tuple[Any, Any]:
    """A rich progress bar on a terminal, else nothing: returns (context, callback).

    It shows what the render does from the start: each profile's shared store as it is prepared
    (the fresh trees wait for it), then every tree rendered or resumed."""
    if not sys.stderr.isatty() or total < 2:
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[now]}"), console=Console(stderr=True), transient=True)
    task = progress.add_task(label, total=total, now="reading the trees")

    def advance(name: str, what: str) -> None:
        if what == "prepared":
            progress.update(task, now=f"profile {name} prepared")
        else:
            progress.update(task, advance=1, now=f"{name} {what}")

    return progress, advance


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` sub-app."""
    sim_app = typer.Typer(
        help="Emulate a cluster's bare-metal nodes as files and fake vendor tools.",
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.add_typer(sim_app, name="simulate")

    @sim_app.command("profiles")
    def profiles_cmd(output: Report = "table", no_headers: NoHeaders = False,
                     profiles_dir: ProfilesDir = None) -> None:
        """List the hardware profiles (builtin and local) with the source of their values."""
        fmt = check_format(output, REPORT_FORMATS, no_headers)
        from joulectl.render import emit
        from joulectl.sim.profiles import ProfileSet, profile_summary

        ps = ProfileSet(profiles_dir)
        rows = [profile_summary(ps.get(n)) for n in ps.names()]
        doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "HardwareProfileList", "items": rows}
        emit(doc, fmt, out=_profiles_view(doc))

    @sim_app.command("validate")
    def validate_cmd(spec: Spec, profiles_dir: ProfilesDir = None) -> None:
        """Validate a ClusterSpec and print what it expands to (exit 2 naming file and field on error)."""
        from joulectl.sim.clusterspec import load_spec

        cs = load_spec(spec, profiles_dir)
        pools = ", ".join(f"{p['name']}: {p['count']} x {p['profile']}" for p in cs.pools)
        sys.stdout.write(f"{cs.file}: ClusterSpec {cs.name} is valid: {len(cs.nodes)} nodes ({pools})\n")

    @sim_app.command("render")
    def render_cmd(
        spec: Spec,
        root: Annotated[str, typer.Option("--root", metavar="DIR", help="Directory of the node trees (DIR/<node>).")],
        profiles_dir: ProfilesDir = None,
        workers: Annotated[
            int | None, typer.Option("--workers", metavar="N", min=1, help="Render processes (default: one per CPU).")
        ] = None,
        overlay: Annotated[bool, typer.Option("--overlay", help=OVERLAY_HELP)] = False,
    ) -> None:
        """Render (or resume) one node tree per spec node under DIR/<node>/."""
        from joulectl.sim.clusterspec import load_spec
        from joulectl.sim.tree import render_nodes

        cs = load_spec(spec, profiles_dir)
        progress, advance = _progress(len(cs.nodes), "render")
        if progress is not None:
            with progress:
                stats = render_nodes(cs.nodes, root, progress=advance, workers=workers, overlay=overlay)
        else:
            stats = render_nodes(cs.nodes, root, workers=workers, overlay=overlay)
        extra = f", {stats.created_entries} missing entries created" if stats.created_entries else ""
        sys.stdout.write(f"rendered {len(stats.rendered)} and resumed {len(stats.resumed)} node trees "
                         f"under {root}{extra}\n")

    @sim_app.command("unmount")
    def unmount_cmd(
        root: Annotated[str, typer.Option("--root", metavar="DIR", help="Directory of the node trees (DIR/<node>).")],
    ) -> None:
        """Detach the overlay trees mounted under DIR (before removing it; a later render or run mounts them)."""
        from joulectl.errors import InputError
        from joulectl.sim.overlay import unmount_all

        if not os.path.isdir(root):
            raise InputError("not a directory", file=root, field="--root")
        try:
            n = unmount_all(root)
        except OSError as e:
            from joulectl.errors import RefusedError

            if e.errno in (errno.EPERM, errno.EACCES):
                raise RefusedError(f"{e.filename}: cannot unmount ({e.strerror}): run as root") from None
            raise InputError(f"cannot unmount ({e.strerror})", file=str(e.filename), field="--root") from None
        sys.stdout.write(f"unmounted {n} overlay node tree{'' if n == 1 else 's'} under {root}\n")

    @sim_app.command("render-nodes")
    def render_nodes_cmd(
        spec: Spec,
        output: Annotated[
            str, typer.Option("-o", "--output", metavar="FORMAT", help="Output format: yaml, json.",
                              autocompletion=choices("yaml", "json"))
        ] = "yaml",
        profiles_dir: ProfilesDir = None,
        gpu_resource: GpuResources = None,
        gpu_share_resource: GpuShareResources = None,
        gpu_product_label: GpuProductLabels = None,
    ) -> None:
        """Print the spec's Kubernetes Nodes (a List) for KWOK or `plan --nodes`.

        The GPU flags advertise the GPUs as a fleet with its own device plugin does (the vendor's resource
        renamed to the first --gpu-resource, share resources, the model in each --gpu-product-label)."""
        fmt = check_format(output, ("yaml", "json"))
        from joulectl.k8s import expose_gpus_as, gpu_config
        from joulectl.render import dumps
        from joulectl.sim.clusterspec import load_spec
        from joulectl.sim.k8s import node_list

        apply_gpu_flags(gpu_resource, gpu_share_resource, gpu_product_label)
        cs = load_spec(spec, profiles_dir)
        doc = node_list(cs.nodes)
        config = gpu_config()
        if config.resources or config.share_resources or config.product_labels:
            for item in doc["items"]:
                expose_gpus_as(item, config)
        sys.stdout.write(dumps(doc, fmt))

    from joulectl.cli.simulate_run import register_run

    register_run(sim_app)
    from joulectl.cli.simulate_compare import register_compare

    register_compare(sim_app)
