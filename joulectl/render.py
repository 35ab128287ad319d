"""Output, defined once: results to table, JSON, YAML (and discover's Prometheus text), and the
kubectl / nvidia-smi conventions every reporting command takes the same way.

``-o table`` (the default), ``-o wide`` (the same tables with their wide columns added, so the
default ones stay narrow), ``-o json|yaml``, ``-o name`` (kubectl's ``kind/name`` lines),
``-o jsonpath=TEMPLATE`` and ``-o custom-columns=SPEC`` (kubectl's, over the ``-o json``
document: :mod:`joulectl.cli.jsonpath`), ``-o csv`` like ``nvidia-smi --format=csv`` (a header
line, ``, `` separated, units in the header, ``[N/A]`` for unknown; ``csv,noheader``,
``csv,nounits``), and ``--no-headers``. A command describes its output once (a document, its
tables as :class:`Column` lists, its names) and :func:`emit` does the rest.

Data goes to stdout, diagnostics to stderr. Tables use rich on a terminal with colour allowed
(``--no-color`` and ``NO_COLOR`` are honoured) and plain text otherwise. rich and yaml are
imported only when a table on a terminal or YAML output is asked for.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("table", "json", "yaml")
#: every reporting command's ``-o`` (``jsonpath`` and ``custom-columns`` take ``=ARG``)
REPORT_FORMATS = ("table", "wide", "json", "yaml", "name", "csv", "jsonpath", "custom-columns")

#: Set by the CLI from ``--no-color`` / ``NO_COLOR``.
_color_enabled: bool | None = None
#: Set by :func:`emit` from ``--no-headers`` (and ``csv,noheader``): tables print no header row or title.
_headers = True


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
    if not _headers:
        return _plain(cells, ()) + "\n" if cells else ""
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
    text = _plain(cells, headers)
    if title:
        text = f"{title}\n{text}"
    return text + "\n"


def _plain(cells: list[list[str]], headers: Sequence[str]) -> str:
    """``tabulate(cells, headers, tablefmt="plain", disable_numparse=True)``: every cell stripped
    and left-aligned, a column as wide as its widest cell and its header plus two, columns two
    spaces apart, each line without trailing blanks.

    Written here for printable cells in rows as long as the headers (every table joulectl prints,
    nearly always): tabulate 0.10 imports ``importlib.metadata`` and with it the email package,
    zipfile, csv and sockets, 25-30 ms of CPU, a quarter of a cron run of ``discover`` or ``cap``
    with the default output. Anything else (a control character, a multi-line or ragged cell, or
    text beyond ASCII where the ``wcwidth`` package is installed: tabulate then measures wide
    characters by it) is tabulate's, imported then; a test holds the two equal."""
    ncols = len(headers) if headers else len(cells[0]) if cells else 0
    texts = [*headers, *(text for row in cells for text in row)]
    if not ncols or any(len(row) != ncols for row in cells) or not all(text.isprintable() for text in texts) \
            or (not all(text.isascii() for text in texts) and _wcwidth_installed()):
        from tabulate import tabulate

        if headers:
            return tabulate(cells, headers=list(headers), tablefmt="plain", disable_numparse=True)
        return tabulate(cells, tablefmt="plain", disable_numparse=True)
    rows = [[text.strip() for text in row] for row in cells]
    widths = [len(header) + 2 for header in headers] if headers else [0] * ncols
    for row in rows:
        widths = [max(width, len(text)) for width, text in zip(widths, row, strict=True)]
    lines = [_line(list(headers), widths)] if headers else []
    lines += [_line(row, widths) for row in rows]
    return "\n".join(lines)


_WCWIDTH: list[bool] = []


def _wcwidth_installed() -> bool:
    """Whether the ``wcwidth`` package tabulate measures text by is installed (looked up once)."""
    if not _WCWIDTH:
        from importlib.util import find_spec

        _WCWIDTH.append(find_spec("wcwidth") is not None)
    return _WCWIDTH[0]


def _line(texts: list[str], widths: list[int]) -> str:
    """One line of a plain table: each text left-aligned in its column, two spaces between."""
    return "  ".join(text.ljust(width) for text, width in zip(texts, widths, strict=True)).rstrip()


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns or 120  # a pty without a size reports 0 columns
    except OSError:
        return 120


class OutputFormat(str):
    """An ``-o`` value, parsed: ``kind`` (one of :data:`REPORT_FORMATS`, ``prometheus``...), its
    ``arg`` (the jsonpath template, the custom-columns spec), and the header and unit switches.
    It compares equal to the kind (``fmt == "json"``)."""

    kind: str
    arg: str
    headers: bool
    units: bool

    def __new__(cls, kind: str, arg: str = "", *, headers: bool = True, units: bool = True) -> OutputFormat:
        obj = super().__new__(cls, kind)
        obj.kind, obj.arg, obj.headers, obj.units = kind, arg, headers, units
        return obj


def parse_output(value: str, formats: Sequence[str], *, no_headers: bool = False) -> OutputFormat:
    """Parse ``-o VALUE`` against the command's ``formats`` (InputError naming the allowed ones, or
    the problem of a template or spec: exit 2)."""
    from joulectl.errors import InputError

    raw = value.strip()
    kind, sep, arg = raw.partition("=")
    kind = kind.strip().lower()
    headers, units = not no_headers, True
    if kind.startswith("csv") and not sep:
        words = [w.strip().lower() for w in kind.split(",")]
        bad = [w for w in words[1:] if w not in ("noheader", "nounits")]
        if bad:
            raise InputError(f"csv takes noheader and nounits (as nvidia-smi --format does), not {bad[0]!r}",
                             field="-o")
        kind, headers, units = "csv", headers and "noheader" not in words, "nounits" not in words
    allowed = ", ".join(f + ("=..." if f in ("jsonpath", "custom-columns") else "") for f in formats)
    if kind not in formats:
        raise InputError(f"{value!r} is not one of {allowed}", field="-o")
    if kind in ("jsonpath", "custom-columns"):
        if not sep or not arg.strip():
            what = "TEMPLATE" if kind == "jsonpath" else "SPEC"
            raise InputError(f"{kind} needs a {what}: -o {kind}={what}", field="-o")
        arg = _strip_quotes(arg.strip())
        _check_template(kind, arg)
    elif sep:
        raise InputError(f"{kind} takes no '=': {value!r}", field="-o")
    return OutputFormat(kind, arg, headers=headers, units=units)


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _check_template(kind: str, arg: str) -> None:
    from joulectl.cli import jsonpath
    from joulectl.errors import InputError

    try:
        if kind == "jsonpath":
            jsonpath.parse(arg)
        else:
            custom_columns(arg)
    except jsonpath.TemplateError as e:
        raise InputError(f"{kind} {arg!r}: {e}", field="-o") from None


def custom_columns(spec: str) -> list[tuple[str, Any]]:
    """kubectl's ``HEADER:.json.path,...``: (header, expression) pairs (TemplateError when bad)."""
    from joulectl.cli import jsonpath

    out = []
    for part in spec.split(","):
        header, sep, expr = part.partition(":")
        if not sep or not header.strip() or not expr.strip():
            raise jsonpath.TemplateError(
                f"unexpected custom-columns spec: {part!r}, expected <header>:<json-path-expr>")
        out.append((header.strip(), jsonpath.single(expr)))
    return out


@dataclass(frozen=True)
class Column:
    """One column of a table and of ``-o csv``.

    ``header`` is the table's (None: csv only); ``key`` the csv field name in nvidia-smi's style
    (``pci.bus_id``, ``power.limit``; None: table only); ``get`` the value of a row (a number in
    ``unit``, a string, or None when unknown); ``cell`` the table text (default: the value with
    its unit); ``wide`` columns appear with ``-o wide`` only (and always in csv).
    """

    header: str | None
    get: Callable[[Any], Any]
    key: str | None = None
    unit: str = ""
    wide: bool = False
    cell: Callable[[Any], Any] | None = None

    def text(self, row: Any) -> str:
        if self.cell is not None:
            value = self.cell(row)
            return "-" if value is None else str(value)
        value = self.get(row)
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, (int, float)):
            return fmt_num(value, f" {self.unit}" if self.unit else "")
        return "-" if value is None else str(value)


def columns_table(columns: Sequence[Column], rows: Sequence[Any], *, wide: bool = False,
                  title: str | None = None) -> str:
    """A table of ``rows`` by ``columns`` (the wide ones only when ``wide``)."""
    shown = [c for c in columns if c.header is not None and (wide or not c.wide)]
    return table([c.header or "" for c in shown], [[c.text(r) for c in shown] for r in rows], title=title)


def _csv_value(value: Any, unit: str, units: bool) -> str:
    if value is None or value == "":
        return "[N/A]"
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, (int, float)):
        text = str(int(value)) if float(value).is_integer() else f"{value:.2f}"
        return f"{text} {unit}" if unit and units else text
    return str(value)


def csv_text(columns: Sequence[Column], rows: Sequence[Any], *, header: bool = True, units: bool = True) -> str:
    """``nvidia-smi --format=csv``: ``key [unit]`` header line, ``, `` separated values."""
    shown = [c for c in columns if c.key is not None]
    lines = []
    if header:
        lines.append(", ".join(c.key + (f" [{c.unit}]" if c.unit else "") for c in shown if c.key))
    for r in rows:
        lines.append(", ".join(_csv_value(c.get(r), c.unit, units) for c in shown))
    return "".join(line + "\n" for line in lines)


@dataclass
class View:
    """What a reporting command prints, described once for every format.

    ``data`` is the ``-o json|yaml`` document (and what jsonpath and custom-columns read), or a
    function of no arguments that builds it, called once by the first format that needs it (a
    table of a large report need not build a document it does not print: see :meth:`document`);
    ``table(wide)`` the table text; ``csv`` the (columns, rows) of ``-o csv``; ``names`` the
    ``kind/name`` lines of ``-o name`` (default: each object's ``kind`` and ``metadata.name``).
    A format a command has no description for is exit 2 naming it.
    """

    data: Any
    table: Callable[[bool], str] | None = None
    csv: Callable[[], tuple[Sequence[Column], Sequence[Any]]] | None = None
    names: Callable[[], list[str]] | None = None
    #: the objects custom-columns makes rows of (default: :func:`objects` of ``data``)
    items: Callable[[], list[Any]] | None = None

    def document(self) -> Any:
        """``data``, built the first time it is asked for when it is a function (a document,
        a dict or a list, is never callable)."""
        if callable(self.data):
            self.data = self.data()
        return self.data


def _tree(data: Any) -> Any:
    """What jsonpath reads: the document, a list of objects as the ``v1`` ``List`` ``-o json`` prints."""
    return {"apiVersion": "v1", "kind": "List", "items": data} if isinstance(data, list) else data


def objects(data: Any) -> list[Any]:
    """The objects of a document: the items of a List, else the document itself."""
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return list(data["items"])
    return data if isinstance(data, list) else [data]


def kind_name(kind: str, api_version: str, name: str) -> str:
    """kubectl's ``-o name``: ``pod/x`` for the core group, ``deployment.apps/x``,
    ``nodetwin.joulie.io/x`` for the others."""
    group = api_version.rpartition("/")[0]
    return f"{kind.lower()}{'.' + group if group else ''}/{name}"


def default_names(data: Any) -> list[str]:
    from joulectl.errors import InputError

    out = []
    for obj in objects(data):
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
        if not name:
            raise InputError("this output has no named objects to print", field="-o name")
        out.append(kind_name(str(obj.get("kind", "object")), str(obj.get("apiVersion", "")), name))
    return out


def render(out: View, fmt: str) -> str:
    """The text of ``out`` in ``fmt`` (an :class:`OutputFormat`, or a plain format name)."""
    global _headers
    f = fmt if isinstance(fmt, OutputFormat) else OutputFormat(str(fmt))
    kind = f.kind
    if kind in ("json", "yaml"):
        return dumps(out.document(), kind)
    if kind == "name":
        return "".join(n + "\n" for n in (out.names or (lambda: default_names(out.document())))())
    if kind == "jsonpath":
        from joulectl.cli import jsonpath

        return jsonpath.execute(f.arg, _tree(out.document()))
    if kind == "custom-columns":
        from joulectl.cli import jsonpath

        cols = custom_columns(f.arg)
        rows = [[",".join(jsonpath.text(v) for v in jsonpath.evaluate(e, obj) if v is not None) or "<none>"
                 for _, e in cols]
                for obj in (out.items() if out.items is not None else objects(out.document()))]
        previous, _headers = _headers, f.headers
        try:
            return table([h for h, _ in cols], rows)
        finally:
            _headers = previous
    if kind == "csv":
        if out.csv is None:
            raise _no_format("csv")
        csv_columns, csv_rows = out.csv()
        return csv_text(csv_columns, csv_rows, header=f.headers, units=f.units)
    if kind in ("table", "wide"):
        if out.table is None:
            return to_json(out.document())
        previous, _headers = _headers, f.headers
        try:
            return out.table(kind == "wide")
        finally:
            _headers = previous
    raise ValueError(f"unknown format {kind}")


def _no_format(kind: str) -> Exception:
    from joulectl.errors import InputError

    return InputError(f"this command has no {kind} output", field="-o")


def emit(data: Any, fmt: str, table_text: Callable[[], str] | None = None, *, out: View | None = None) -> None:
    """Print ``data`` to stdout in ``fmt``; ``table_text`` renders the table form (or ``out``
    describes every form)."""
    if out is None:
        out = View(data, table=(lambda wide: table_text()) if table_text is not None else None)
    sys.stdout.write(render(out, fmt))
    sys.stdout.flush()


def warn(message: str) -> None:
    """A diagnostic line on stderr."""
    sys.stderr.write(f"joulectl: warning: {message}\n")
