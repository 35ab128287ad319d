"""Output, defined once: results to table, JSON, YAML (and discover's Prometheus text).

Data goes to stdout, diagnostics to stderr. Tables use rich on a terminal with colour allowed
(``--no-color`` and ``NO_COLOR`` are honoured) and plain text otherwise. rich and yaml are
imported only when a table on a terminal or YAML output is asked for.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

FORMATS = ("table", "json", "yaml")

#: Set by the CLI from ``--no-color`` / ``NO_COLOR``.
_color_enabled: bool | None = None


def set_color(enabled: bool) -> None:
    global _color_enabled
    _color_enabled = enabled


def color_enabled(stream: Any = None) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` or ``--no-color``."""
    stream = stream or sys.stdout
    if _color_enabled is False or os.environ.get("NO_COLOR"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_yaml(data: Any) -> str:
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    if isinstance(data, list):
        return "".join(
            ("---\n" if i else "") + yaml.dump(d, Dumper=dumper, sort_keys=False, allow_unicode=True)
            for i, d in enumerate(data)
        )
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True)


def dumps(data: Any, fmt: str) -> str:
    """Serialise ``data`` as ``json`` or ``yaml``."""
    if fmt == "json":
        return to_json(data)
    if fmt == "yaml":
        return to_yaml(data)
    raise ValueError(f"unknown format {fmt}")


def fmt_num(value: float | None, unit: str = "", digits: int = 0) -> str:
    """A number for a table cell: ``-`` when unknown, trailing ``.0`` dropped."""
    if value is None:
        return "-"
    if digits:
        text = f"{value:.{digits}f}"
    else:
        text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{text}{unit}"


#: Header words of the columns whose cells identify something (bus ids, UUIDs, names): a table
#: never cuts, folds or re-spells them; the other columns fold to fit.
IDENTITY_HEADERS = ("BUS", "UUID", "NAME", "NODE", "DEVICE", "MODEL", "POD", "ZONE", "PROFILE")


def is_identity(header: str) -> bool:
    words = header.upper().replace("-", " ").split()
    return any(w in IDENTITY_HEADERS for w in words)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    stream: Any = None,
) -> str:
    """Render a table: rich on a colour terminal, plain text otherwise. Returns the text.

    Cells are printed as they are: no markup, emoji codes (``0000:ab:00.0`` is no ``:ab:``
    emoji) or highlighting. Identity columns (:data:`IDENTITY_HEADERS`) and every header keep
    their full width; other columns fold. When even that does not fit the terminal, the table is
    drawn wider than it (the terminal wraps the lines) rather than cutting a bus id.
    """
    stream = stream or sys.stdout
    cells = [["-" if c is None else str(c) for c in row] for row in rows]
    if color_enabled(stream):
        from io import StringIO

        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(title) if title else None, title_justify="left", header_style="bold")
        need = 1
        for i, h in enumerate(headers):
            longest = max((len(r[i]) for r in cells if i < len(r)), default=0)
            ident = is_identity(h)
            width = max(len(h), longest) if ident else max(len(h), min(longest, 8))
            need += width + 3
            t.add_column(Text(h), no_wrap=ident, overflow="fold", min_width=width)
        for row in cells:
            t.add_row(*(Text(c) for c in row))
        buf = StringIO()
        Console(file=buf, force_terminal=True, width=max(_term_width(), need), emoji=False, markup=False,
                highlight=False).print(t)
        return buf.getvalue()
    from tabulate import tabulate

    text = tabulate(cells, headers=list(headers), tablefmt="plain", disable_numparse=True)
    if title:
        text = f"{title}\n{text}"
    return text + "\n"


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns or 120  # a pty without a size reports 0 columns
    except OSError:
        return 120


def emit(data: Any, fmt: str, table_text: Callable[[], str] | None = None) -> None:
    """Print ``data`` to stdout in ``fmt``; ``table_text`` renders the table form."""
    if fmt == "table":
        if table_text is None:
            sys.stdout.write(to_json(data))
        else:
            sys.stdout.write(table_text())
    else:
        sys.stdout.write(dumps(data, fmt))
    sys.stdout.flush()


def warn(message: str) -> None:
    """A diagnostic line on stderr."""
    sys.stderr.write(f"joulectl: warning: {message}\n")
