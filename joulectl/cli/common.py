"""Options and state shared by every command: defined once, stacked on each command."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from joulectl.render import REPORT_FORMATS as REPORT_FORMATS

if TYPE_CHECKING:
    from joulectl.host import Host
    from joulectl.render import OutputFormat


@dataclass
class GlobalState:
    """What the global options set; commands read it through :data:`STATE`."""

    root: str = "/"
    debug: bool = False
    no_color: bool = False
    tool_timeout: float = 3.0

    def host(self) -> Host:
        """The :class:`~joulectl.host.Host` for ``--root`` (validated: exit 2 when missing)."""
        from joulectl.host import Host

        return Host(self.root, tool_timeout=self.tool_timeout)


STATE = GlobalState()


#: A completer's annotations as objects: typer reads every completer's signature when it builds a
#: command, and evaluating this module's string annotations (``from __future__ import
#: annotations``) took 0.1 ms more a completer. Given to each completer below.
_COMPLETER_HINTS = {"ctx": Any, "args": list[str], "incomplete": str, "return": list[str | tuple[str, str]]}


def choices(*values: str | tuple[str, str]) -> Callable[[Any, list[str], str], list[str | tuple[str, str]]]:
    """A completer offering ``values`` (words, or (word, help) pairs): typer's ``autocompletion``."""

    def complete(ctx: Any, args: list[str], incomplete: str) -> list[str | tuple[str, str]]:
        return list(values)

    complete.__annotations__ = dict(_COMPLETER_HINTS)
    return complete


def complete_presets(ctx: Any, args: list[str], incomplete: str) -> list[str | tuple[str, str]]:
    """``governor set PRESET``: GPU presets, CPU presets, or both (by ``--gpu`` / ``--cpu``)."""
    from joulectl.models import CPU_PRESETS, GPU_PRESETS

    gpu, cpu = bool(ctx.params.get("gpu")), bool(ctx.params.get("cpu"))
    out: list[str | tuple[str, str]] = []
    if gpu or not cpu:
        out += [(p, "GPU preset") for p in GPU_PRESETS]
    if cpu or not gpu:
        out += [(p, "CPU preset") for p in CPU_PRESETS]
    return out


def complete_devices(ctx: Any, args: list[str], incomplete: str) -> list[str | tuple[str, str]]:
    """``--device``: the index and bus id of every GPU of the node under ``--root`` (nothing when
    it cannot be read: a TAB never fails)."""
    try:
        from joulectl.host import Host
        from joulectl.ops.inventory import inventory

        params = ctx.find_root().params
        host = Host(params.get("root") or "/", tool_timeout=params.get("tool_timeout") or 3.0)
        gpus = inventory(host, cpu=False).gpus
    except Exception:
        return []
    out: list[str | tuple[str, str]] = []
    for d in gpus:
        out.append((str(d.index), f"{d.bus_id} {d.model or ''}".strip()))
    for d in gpus:
        out.append((d.bus_id, f"GPU {d.index} {d.model or ''}".strip()))
    return out


complete_presets.__annotations__ = dict(_COMPLETER_HINTS)
complete_devices.__annotations__ = dict(_COMPLETER_HINTS)


def _format_words(formats: tuple[str, ...]) -> list[str]:
    words = []
    for f in formats:
        words += [f + "="] if f in ("jsonpath", "custom-columns") else [f]
        if f == "csv":
            words += ["csv,noheader", "csv,nounits"]
    return words


def _output_choice(formats: tuple[str, ...]) -> typer.models.OptionInfo:
    shown = ", ".join(f"{f}=TEMPLATE" if f == "jsonpath" else f"{f}=SPEC" if f == "custom-columns" else f
                      for f in formats)
    option: typer.models.OptionInfo = typer.Option(
        "-o",
        "--output",
        help=f"Output format: {shown}.",
        show_default=True,
        case_sensitive=False,
        metavar="FORMAT",
        autocompletion=choices(*_format_words(formats)),
    )
    return option


def check_format(value: str, formats: tuple[str, ...], no_headers: bool = False) -> OutputFormat:
    """Parse an ``-o`` value (exit 2 naming the allowed formats, or what is wrong with a jsonpath
    template or custom-columns spec); ``no_headers`` is ``--no-headers``."""
    from joulectl.render import parse_output

    return parse_output(value, formats, no_headers=no_headers)


#: ``-o table|json|yaml`` on the commands that change things.
Output = Annotated[str, _output_choice(("table", "json", "yaml"))]
#: the reporting commands' formats (render.REPORT_FORMATS): kubectl's and nvidia-smi's conventions.
Report = Annotated[str, _output_choice(REPORT_FORMATS)]
#: ``discover`` adds ``prometheus``.
DISCOVER_FORMATS = (*REPORT_FORMATS, "prometheus")
DiscoverOutput = Annotated[str, _output_choice(DISCOVER_FORMATS)]
NoHeaders = Annotated[
    bool, typer.Option("--no-headers", help="No header row or title (table, wide, custom-columns, csv).")
]

Wait = Annotated[
    float,
    typer.Option("--wait", metavar="SECONDS", help="Seconds to wait for the node lock before exit 7.", min=0,
                 show_default=True),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Write nothing; print planned rows.")]
Devices = Annotated[
    list[str] | None,
    typer.Option(
        "--device",
        "-d",
        metavar="DEVICE",
        autocompletion=complete_devices,
        help="Select GPUs by index, PCI bus id or model substring (repeatable; default every GPU).",
    ),
]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def check_output_file(path: str) -> None:
    """Refuse an ``--output-file`` that is not a regular file or whose directory is missing (exit 2)
    before any work is done."""
    import stat

    from joulectl.errors import InputError

    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"cannot be used ({exc.strerror})", file=path, field="--output-file") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError("is not a regular file", file=path, field="--output-file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError("its directory does not exist", file=path, field="--output-file")


def write_output_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file beside it, fsync, rename, fsync of
    the directory. A reader sees the old file or the new one, never half of one; on any error the
    old file is left as it was and the temporary file removed (exit 2 naming the file)."""
    from joulectl.errors import InputError

    check_output_file(path)
    target = os.path.abspath(path)
    parent = os.path.dirname(target)
    tmp = os.path.join(parent, f".{os.path.basename(target)}.tmp.{os.getpid()}")
    mode = 0o644
    try:
        mode = os.stat(target).st_mode & 0o777
    except OSError:
        pass
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            data = text.encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"cannot be written ({exc.strerror})", file=path, field="--output-file") from None
