"""Options and state shared by every command: defined once, stacked on each command."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from joulectl.host import Host


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


def _output_choice(formats: tuple[str, ...]) -> typer.models.OptionInfo:
    option: typer.models.OptionInfo = typer.Option(
        "-o",
        "--output",
        help=f"Output format: {', '.join(formats)}.",
        show_default=True,
        case_sensitive=False,
        metavar="|".join(formats).upper(),
    )
    return option


def check_format(value: str, formats: tuple[str, ...]) -> str:
    """Validate an ``-o`` value (exit 2 naming the allowed formats)."""
    v = value.lower()
    if v not in formats:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(formats)}", param_hint="'-o'")
    return v


#: ``-o table|json|yaml`` on every reporting command.
Output = Annotated[str, _output_choice(("table", "json", "yaml"))]
#: ``discover`` adds ``prometheus``.
DiscoverOutput = Annotated[str, _output_choice(("table", "json", "yaml", "prometheus"))]

Wait = Annotated[
    float,
    typer.Option("--wait", help="Seconds to wait for the node lock before exit 7.", min=0, show_default=True),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Write nothing; print planned rows.")]
Devices = Annotated[
    list[str] | None,
    typer.Option(
        "--device",
        "-d",
        help="Select GPUs by index, PCI bus id or model substring (repeatable; default every GPU).",
    ),
]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
