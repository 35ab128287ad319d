"""`joulectl discover`: the node's CPUs and GPUs, their limits and what can be controlled."""

from typing import Annotated

import typer

from joulectl.cli.common import STATE, check_format, choices

FORMATS = ("table", "json", "yaml", "prometheus")
# common.DiscoverOutput passes its default positionally, which typer 0.29 reads as a second name.
_Output = Annotated[
    str,
    typer.Option(
        "-o", "--output", help="Output format: table, json, yaml, prometheus.", metavar="FORMAT",
        autocompletion=choices(*FORMATS),
    ),
]


def register(app: typer.Typer) -> None:
    """Add the command to the app."""

    @app.command("discover")
    def discover(
        output: _Output = "table",
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
        from joulectl.render import emit, warn

        fmt = check_format(output, FORMATS)
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
            from joulectl.cli.common import write_output_file
            from joulectl.render import dumps

            if fmt == "prometheus":
                text = ops.prometheus_text(inv)
            elif fmt == "table":
                from joulectl.render import set_color

                set_color(False)  # a file gets plain text, whatever stdout is
                text = ops.table_text(inv)
            else:
                text = dumps(ops.node_hardware(inv), fmt)
            write_output_file(output_file, text)
        elif fmt == "prometheus":
            sys.stdout.write(ops.prometheus_text(inv))
        else:
            emit(ops.node_hardware(inv), fmt, lambda: ops.table_text(inv))
