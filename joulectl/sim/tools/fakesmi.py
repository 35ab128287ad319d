"""Entry point of the fake vendor tools a rendered node tree carries in ``bin/``.

``bin/nvidia-smi`` (and ``rocm-smi``, ``amd-smi``) are small scripts that call :func:`main` with
the tool name and their own path; the node root is the script's grandparent. Standard library
only (no typer, rich or yaml), and not even ``os`` (its ``_collections_abc`` is most of a
millisecond and a half): the tools use ``posix`` directly, and start fast.
"""

from __future__ import annotations

import posix
import sys


def node_root(script: str) -> str:
    """The node root of a tool script at ``<root>/bin/<tool>`` (``dirname(dirname(abspath()))``
    without ``os.path``)."""
    parts: list[str] = []
    for part in (script if script.startswith("/") else f"{posix.getcwd()}/{script}").split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts[:-2])


def main(tool: str, script: str, argv: list[str] | None = None) -> None:
    """Run ``tool`` against the node tree the script lives in and exit with its code."""
    args = sys.argv[1:] if argv is None else argv
    root = node_root(script)
    try:
        if tool == "nvidia-smi":
            from joulectl.sim.tools.nvsmi import run as run_nv

            code = run_nv(root, args)
        elif tool == "rocm-smi":
            from joulectl.sim.tools.amdsmi import run_rocm

            code = run_rocm(root, args)
        elif tool == "amd-smi":
            from joulectl.sim.tools.amdsmi import run_amd

            code = run_amd(root, args)
        else:
            sys.stderr.write(f"{tool}: not an emulated tool\n")
            code = 2
    except BrokenPipeError:
        code = 0
    sys.stdout.flush()
    sys.exit(code)
