"""What a ``governor`` command did, ready to render: rows, the table (identical rows collapsed),
JSON/YAML (one record per device) and the exit code (SPEC §2)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from joulectl.backends.base import PRIVILEGE_HINT, ShowRow
from joulectl.errors import ExitCode, JoulectlError, PartialError, RefusedError
from joulectl.models import OK_STATUSES, DeviceResult, Status
from joulectl.record import record

API_VERSION = "joulectl.io/v1alpha1"


@record
class GovernorReport:
    """What a ``governor`` command did, ready to render."""

    action: str  # show | set | reset
    node: str
    preset: str | None = None
    dry_run: bool = False
    results: list[DeviceResult] = field(default_factory=list)
    rows: list[ShowRow] = field(default_factory=list)
    presets: tuple[str, ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        return exit_code_for(self.results)

    def error(self) -> JoulectlError | None:
        """The error the run ends with (exit 4 or 5), or None for exit 0 (SPEC §2)."""
        code = self.exit_code
        if code == ExitCode.OK:
            return None
        if code == ExitCode.REFUSED:
            n = len([r for r in self.results if r.status == Status.REFUSED])
            return RefusedError(f"no privilege to write: every write was refused ({n} "
                                f"device{'s' if n != 1 else ''})", hint=PRIVILEGE_HINT)
        failed = [r for r in self.results if r.status not in OK_STATUSES]
        counts: dict[str, int] = {}
        for r in failed:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        return PartialError(
            f"{len(self.results) - len(failed)} of {len(self.results)} targets done; "
            + ", ".join(f"{n} {s}" for s, n in counts.items()) + " (see MESSAGE)",
            hint=PRIVILEGE_HINT if "refused" in counts else None,
        )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "GovernorResult", "action": self.action,
                               "node": self.node}
        if self.action == "show":
            doc["gpu"] = {"presets": list(self.presets)}
            doc["results"] = [r.to_dict() for r in self.rows]
            return doc
        doc["preset"] = self.preset
        doc["dryRun"] = self.dry_run
        doc["results"] = [result_dict(r) for r in self.results]
        summary: dict[str, int] = {}
        for r in self.results:
            summary[str(r.status)] = summary.get(str(r.status), 0) + 1
        doc["summary"] = summary
        return doc

    def columns(self) -> list[Any]:
        """The columns of the table and of ``-o csv`` (render.Column): show's rows or the results."""
        from joulectl.render import Column

        head = [
            Column("DEVICE", lambda r: r.device, "device"),
            Column(None, lambda r: r.vendor, "vendor"),
            Column("MODEL", lambda r: r.model, "name"),
            Column("PRESET", lambda r: r.preset, "preset"),
        ]
        if self.action == "show":
            return [
                *head,
                Column("SET BY", lambda r: r.set_by, "set_by"),
                Column("IN FORCE", lambda r: r.in_force, "in_force"),
                Column("CLOCKS", lambda r: r.clocks, "clocks", wide=True),
                Column("STATUS", lambda r: r.status, "status"),
                Column("PRESETS", lambda r: " ".join(r.presets), "presets", wide=True,
                       cell=lambda r: ",".join(r.presets)),
                Column("MESSAGE", lambda r: r.message, "message"),
            ]
        return [
            *head,
            Column("BEFORE", lambda r: r.before, "before"),
            Column("AFTER", lambda r: r.after, "after"),
            Column("STATUS", lambda r: str(r.status), "status"),
            Column("MESSAGE", lambda r: r.message, "message"),
        ]

    def records(self) -> list[Any]:
        return list(self.rows) if self.action == "show" else list(self.results)

    def table_text(self, wide: bool = False) -> str:
        """The table: rows identical but for the device collapse into one (``cpufreq:policy0-127
        (128)``); ``-o json|yaml|csv`` keep one record per device. ``wide`` adds the wide columns."""
        from joulectl.render import table

        shown = [c for c in self.columns() if c.header is not None and (wide or not c.wide)]
        rows = collapse([[c.text(r) for c in shown] for r in self.records()])
        title = None
        if self.action == "show":
            title = f"node {self.node}: GPU presets every GPU accepts: {', '.join(self.presets) or 'none'}"
        return table([c.header or "" for c in shown], rows, title=title)


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def device_span(devices: Sequence[str]) -> str:
    """One label for the devices of a collapsed row: ``cpufreq:policy0-127 (128)`` where they
    share a prefix and end in numbers (runs as ``0-63,96-127``), else the first and the last."""
    if len(devices) == 1:
        return devices[0]
    parts = [_NUMBERED.match(d) for d in devices]
    prefixes = {m.group(1) for m in parts if m}
    if len(prefixes) == 1 and all(parts):
        numbers = sorted(int(m.group(2)) for m in parts if m)
        runs: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        return f"{prefixes.pop()}{','.join(runs)} ({len(devices)})"
    return f"{devices[0]} .. {devices[-1]} ({len(devices)})"


def collapse(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Table rows (device first) with the rows identical in every other column merged into the
    first of them, the device column naming them all (:func:`device_span`)."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for row in rows:
        groups.setdefault(tuple(row[1:]), []).append(str(row[0]))
    return [[device_span(devices), *rest] for rest, devices in groups.items()]


def result_dict(r: DeviceResult) -> dict[str, Any]:
    return {"device": r.device, "vendor": r.vendor, "model": r.model, "kind": r.kind, "preset": r.preset,
            "status": str(r.status), "message": r.message, "before": r.before, "after": r.after}


def exit_code_for(results: Sequence[DeviceResult]) -> ExitCode:
    """SPEC §2: 0 when every device is fine; 4 when every write needed was refused; 5 otherwise."""
    bad = [r for r in results if r.status not in OK_STATUSES]
    if not bad:
        return ExitCode.OK
    needed = [r for r in results if r.status not in (Status.UNCHANGED, Status.SKIPPED)]
    if needed and all(r.status == Status.REFUSED for r in needed):
        return ExitCode.REFUSED
    return ExitCode.PARTIAL
