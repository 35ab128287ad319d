"""`joulectl discover`: the node's CPUs and GPUs, their limits and what can be controlled."""

# No ``from __future__ import annotations``: typer would ``eval`` every parameter annotation string
# when it builds the command (1.5 ms of each discover run, issue 20).
from typing import TYPE_CHECKING, Annotated

import typer

from joulectl.cli.common import DISCOVER_FORMATS, STATE, DiscoverOutput, NoHeaders, check_format

if TYPE_CHECKING:
    from joulectl.models import NodeInventory
    from joulectl.render import View


def _view(inv: "NodeInventory") -> "View":
    """discover in every ``-o`` format: the NodeHardware object, the tables, one csv row per GPU."""
    from joulectl.ops import discover as ops
    from joulectl.render import View

    return View(ops.node_hardware(inv), table=lambda wide: ops.table_text(inv, wide),
                csv=lambda: (ops.gpu_columns(), inv.gpus))


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("discover")
    def discover(
        output: DiscoverOutput = "table",
        no_headers: NoHeaders = False,
        watch: Annotated[
            float | None,
            typer.Option(
                "--watch", metavar="SECONDS", help="Redraw a table of power draw and caps every SECONDS.", min=0.1
            ),
        ] = None,
        count: Annotated[
            int | None, typer.Option("--count", metavar="N", help="With --watch: stop after N refreshes.", min=1)
        ] = None,
        node_name: Annotated[
            str | None,
            typer.Option("--node-name", metavar="NAME", help="Node name to report (default: the host name)."),
        ] = None,
        output_file: Annotated[
            str | None,
            typer.Option("--output-file", metavar="FILE",
                         help="Write to FILE atomically (a scraper never reads half of it) instead of stdout."),
        ] = None,
    ) -> None:
        """Inventory of the node's CPUs and GPUs (reads only; -o yaml gives a NodeHardware object)."""
        import sys

        from joulectl.errors import InputError
        from joulectl.ops import discover as ops
        from joulectl.render import render, warn

        fmt = check_format(output, DISCOVER_FORMATS, no_headers)
        if count is not None and watch is None:
            raise InputError("needs --watch", field="--count")
        if watch is not None and fmt != "table":
            raise InputError(f"--watch prints a table and cannot be combined with -o {fmt}", field="--watch")
        if watch is not None and output_file is not None:
            raise InputError("--watch redraws a terminal and cannot be combined with --output-file", field="--watch")
        if output_file is not None:
            from joulectl.cli.common import check_output_file

            check_output_file(output_file)
        host = STATE.host()
        if watch is not None:
            clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
            take = lambda: ops.inventory(host, node_name=node_name)  # noqa: E731
            for frame in ops.watch_frames(take, watch, count):
                sys.stdout.write(clear + frame + ("" if clear else "\n"))
                sys.stdout.flush()
            return
        inv = ops.inventory(host, node_name=node_name)
        for vendor, message in inv.gpu_errors.items():
            warn(f"{vendor} GPUs could not be listed: {message}")
        if output_file is not None:
            from joulectl.render import set_color

            set_color(False)  # a file gets plain text, whatever stdout is
        text = ops.prometheus_text(inv) if fmt == "prometheus" else render(_view(inv), fmt)
        if output_file is not None:
            from joulectl.cli.common import write_output_file

            write_output_file(output_file, text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
