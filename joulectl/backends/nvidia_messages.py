"""What nvidia-smi prints after a set command, and the status each message means: one table.

The cap backend (``-pl``) and the NVIDIA governor backend (``-lgc``, ``-lmc``, ``-rgc``, ``-rmc``)
both read the tool's output through :func:`decide`. Each row of :data:`ROWS` is a family of
wordings (a pattern, not one exact phrase), the status it means, the exit codes the driver gives
with it, and the driver range it was seen in ("all drivers (no change known)" where the wording
is not known to have changed: no bound is pinned). A line matches the first row whose pattern it
contains; a row that names a bus id decides for that GPU only, one that names none for every GPU
of the call. When rows disagree for one GPU, a row naming the GPU beats one that does not, and
then a row whose exit codes include the tool's exit code beats one whose do not (the exit code is
the tie-breaker). A GPU no row speaks for is decided by the exit code alone (:data:`EXIT_STATUS`).

nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE): 0 success (warnings included), 2 invalid
argument, 3 the operation is not available on the target device, 4 insufficient permissions,
6 no device matched, 9 the driver is not loaded, 15 the GPU fell off the bus, 255 other errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from joulectl.backends.base import normalize_bus_id
from joulectl.models import Status
from joulectl.record import record

#: A bus id as nvidia-smi prints it (``00000000:18:00.0``; 4-digit domains and lower case too).
BUS = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
_GPU = rf"for GPU:?\s*{BUS}"


@record(frozen=True)
class Row:
    """One family of nvidia-smi messages.

    ``status`` None: informational, decides nothing (``All done.``, warnings). ``exits``: the exit
    codes the driver gives with this message. ``drivers`` and ``source``: where it was seen.
    """

    key: str
    regex: str
    status: Status | None
    exits: frozenset[int]
    drivers: str
    source: str
    #: Lower-case texts one of which every line the pattern matches contains (an ASCII line
    #: without any of them is not searched: a cap's output is not matched against the rows whose
    #: patterns it cannot match, so those are never compiled).
    needles: tuple[str, ...]

    @property
    def pattern(self) -> re.Pattern[str]:
        """``regex`` compiled, case-insensitive (compiled at its first use, then from ``re``'s cache:
        the table's fourteen patterns cost 2 ms to compile, a fortieth of ``--version``)."""
        return re.compile(self.regex, re.IGNORECASE)

    def may_match(self, lowered: str | None) -> bool:
        """False when ``pattern`` cannot match a line; ``lowered``: the line in lower case when it
        is ASCII, else None (case-insensitive matching of other characters is not ``lower()``:
        ``re.IGNORECASE`` matches "s" to "\u017f", which stays as it is in lower case)."""
        return lowered is None or any(n in lowered for n in self.needles)


def _row(key: str, pattern: str, status: Status | None, exits: Iterable[int], drivers: str, source: str,
         needles: tuple[str, ...]) -> Row:
    return Row(key, pattern, status, frozenset(exits), drivers, source, needles)


ROWS: tuple[Row, ...] = (
    _row("power-limit-set", rf"Power limit {_GPU} was set to ([\d.]+) W", Status.APPLIED, {0},
         "all drivers (no change known)",
         "public `-pl` transcripts (issue 22): 'Power limit for GPU <bus id> was set to 420.00 W from 700.00 W.'",
         ("power limit for gpu",)),
    _row("gpu-clocks-set", rf'GPU clocks set to "\(gpuClkMin (\d+), gpuClkMax (\d+)\)" {_GPU}', Status.APPLIED,
         {0}, "all drivers with -lgc (Volta and newer GPUs)", "public `-lgc` transcripts (issue 22)",
         ("gpu clocks set to",)),
    _row("memory-clocks-set", rf'Memory clocks set to "\(memClkMin (\d+), memClkMax (\d+)\)" {_GPU}',
         Status.APPLIED, {0}, "all drivers with -lmc (Ampere and newer GPUs)", "public `-lmc` transcripts (issue 22)",
         ("memory clocks set to",)),
    _row("not-supported-in-scope", rf"is not supported in current scope {_GPU}", Status.UNSUPPORTED, {0, 3},
         "R535 and later", "`-pl` where the platform owns the limit (cloud SXM, laptops), issue 22 item 1",
         ("is not supported in current scope for gpu",)),
    _row("not-supported", rf"is not supported {_GPU}", Status.UNSUPPORTED, {0, 3},
         "all drivers (`-pl` before R535; `-lgc` before Volta, `-lmc` on Ada, `-ac` on Hopper)",
         "'... is not supported for GPU <bus id>.' then 'Treating as warning and moving on.'",
         ("is not supported for gpu",)),
    _row("invalid-power-limit",
         rf"not a valid power limit which should be between\s*([\d.]+)\s*W\s*and\s*([\d.]+)\s*W(?:\s*{_GPU})?",
         Status.BLOCKED, {2}, "all drivers (no change known)", "`-pl` outside power.min_limit..power.max_limit",
         ("not a valid power limit which should be between",)),
    _row("failed-insufficient-permissions", rf"{_GPU}:?\s*(?:failed:?\s*)?Insufficient Permissions",
         Status.REFUSED, {4}, "all drivers (no change known)", "unprivileged `-pl` (issue 22 item 6): 'Failed to "
         "set power management limit for GPU <bus id>: Insufficient Permissions'",
         ("insufficient permissions",)),
    _row("no-permission-to-change-clocks", rf"does not have permission to change clocks {_GPU}", Status.REFUSED,
         {4}, "all drivers with clock locks (no change known)", "unprivileged `-lgc`/`-lmc`/`-rgc` (issue 22 "
         "item 6): 'The current user does not have permission to change clocks for GPU <bus id>.'",
         ("does not have permission to change clocks for gpu",)),
    _row("insufficient-permissions",
         r"insufficient permissions|does not have permission|no permission|requires root|not permitted",
         Status.REFUSED, {4}, "all drivers", "a permission failure that names no GPU",
         ("insufficient permissions", "does not have permission", "no permission", "requires root",
          "not permitted")),
    _row("not-supported-any", r"\bnot supported\b", Status.UNSUPPORTED, {0, 3}, "all drivers",
         "a not-supported answer that names no GPU",
         ("not supported",)),
    _row("all-done", r"^All done\.?$", None, {0, 2, 3, 4}, "all drivers", "the last line of every set command",
         ("all done",)),
    _row("terminating", r"Terminating early due to previous errors", None, {2, 3, 4}, "all drivers",
         "follows the failure that stopped the command",
         ("terminating early due to previous errors",)),
    _row("warning-moving-on", r"Treating as warning and moving on", None, {0}, "all drivers",
         "follows a not-supported warning without -eow",
         ("treating as warning and moving on",)),
    _row("persistence-warning", r"persistence mode is disabled on device", None, {0},
         "all drivers with clock locks (issue 22 item 6)",
         "`-lgc`/`-lmc` with persistence mode off: the lock is lost when the driver unloads",
         ("persistence mode is disabled on device",)),
)

#: The status of a GPU no message speaks for, by exit code (nvidia-smi(1) RETURN VALUE).
EXIT_STATUS: dict[int, Status] = {3: Status.UNSUPPORTED, 4: Status.REFUSED}


@record(frozen=True)
class Verdict:
    """What the tool's output says about one GPU: the status, the row that said it (``exit N``
    when only the exit code did), the line, and the row's captured values (watts, MHz)."""

    status: Status
    row: str
    line: str = ""
    values: tuple[str, ...] = ()


@record(frozen=True)
class _Hit:
    row: Row
    line: str
    bus: str | None
    values: tuple[str, ...]


def _hits(text: str) -> list[_Hit]:
    hits = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        lowered = line.lower() if line.isascii() else None
        for row in ROWS:
            if not row.may_match(lowered):
                continue
            m = row.pattern.search(line)
            if m is None:
                continue
            groups = tuple(g for g in m.groups() if g is not None)
            bus = next((normalize_bus_id(g) for g in groups if re.fullmatch(BUS, g)), None)
            values = tuple(g for g in groups if not re.fullmatch(BUS, g))
            hits.append(_Hit(row, line, bus, values))
            break
    return hits


def decide(text: str, returncode: int, bus_ids: Iterable[str]) -> dict[str, Verdict | None]:
    """Each GPU's verdict (keys: ``bus_ids`` as given) from the tool's stdout+stderr and exit code;
    None where neither a message nor the exit code says anything (the caller decides)."""
    hits = [h for h in _hits(text) if h.row.status is not None]
    out: dict[str, Verdict | None] = {}
    for bus_id in bus_ids:
        norm = normalize_bus_id(bus_id)
        mine = [h for h in hits if h.bus == norm] or [h for h in hits if h.bus is None]
        if mine:
            agreeing = [h for h in mine if returncode in h.row.exits]
            best = (agreeing or mine)[0]
            assert best.row.status is not None
            out[bus_id] = Verdict(best.row.status, best.row.key, best.line, best.values)
        elif returncode in EXIT_STATUS:
            out[bus_id] = Verdict(EXIT_STATUS[returncode], f"exit {returncode}")
        else:
            out[bus_id] = None
    return out
