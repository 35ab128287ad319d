"""Issue 12: a property over random cron histories on a rendered MI250X node (four primary dies).

Random sequences of ``cap --pct``, ``cap --watts``, ``cap --restore``, ``cap --schedule`` (a pct, a
watts and a restore window) and the operator's own writes to ``power1_cap``, run through the real
CLI (``joulectl.cli.run``, in process, to keep the runtime to a few seconds). After every step:

- a restore leaves every die at exactly what the operator last set (or, on a die joulectl never
  changed, the default: SPEC §4), and so does a schedule's restore window;
- the same joulectl command run again changes nothing: the journal file is neither grown nor
  rewritten (same inode, time stamp and size), and no journal appears where there was none.

The one history the property leaves out: an operator who writes, by hand, the very value
joulectl's cap has in force cannot be told from joulectl (nothing on the node differs), so such a
write is drawn as no write at all.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
from cron_support import hwmon, node_copy, read_w, rendered, write_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulectl.cli import run as cli_run
from joulectl.units import round_half_away

PRIMARIES = ("0000:c1:00.0", "0000:c9:00.0", "0000:d1:00.0", "0000:d9:00.0")
DEFAULT_W = 560
SCHEDULE = """\
timezone: UTC
windows:
  - {name: pct, days: [daily], start: "00:00", end: "06:00", cap: {pct: 45}}
  - {name: watts, days: [daily], start: "06:00", end: "12:00", cap: {watts: 300}}
default:
  cap: {restore: true}
"""
AT = {"pct": "2026-12-01T03:00:00Z", "watts": "2026-12-01T09:00:00Z", "restore": "2026-12-01T15:00:00Z"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cron-property")
    n = node_copy(rendered(tmp_path_factory.mktemp("cron-render")), "mi250x-0", base)
    (base / "schedule.yaml").write_text(SCHEDULE)
    return n


def _joulectl(node: Path, *args: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_run(["--root", str(node), "cap", *args])
    assert code == 0, (args, err.getvalue())


def _journal_stat(node: Path) -> tuple[int, int, int] | None:
    p = node / "var/lib/joulectl/state.json"
    if not p.exists():
        return None
    st = p.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


_operator = st.tuples(st.just("operator"), st.sampled_from(PRIMARIES), st.integers(100, 560))
_pct = st.tuples(st.just("pct"), st.integers(1, 100))
_watts = st.tuples(st.just("watts"), st.integers(1, 560))
_restore = st.just(("restore",))
_schedule = st.tuples(st.just("schedule"), st.sampled_from(sorted(AT)))
steps = st.lists(st.one_of(_operator, _pct, _watts, _restore, _schedule), min_size=1, max_size=7)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(history=steps)
def test_restore_returns_what_the_operator_last_set_and_the_journal_stops_growing(
        node: Path, history: list[tuple[object, ...]]) -> None:
    shutil.rmtree(node / "var", ignore_errors=True)
    caps = {bus: hwmon(node, bus, "power1_cap") for bus in PRIMARIES}
    for path in caps.values():
        write_w(path, DEFAULT_W)
    operator = dict.fromkeys(PRIMARIES, float(DEFAULT_W))  # what the operator last set
    known = dict.fromkeys(PRIMARIES, False)  # whether joulectl ever wrote the die
    schedule = str(node.parent / "schedule.yaml")

    for step in history:
        kind = step[0]
        if kind == "operator":
            bus, watts = str(step[1]), float(step[2])  # type: ignore[arg-type]
            if watts == read_w(caps[bus]):
                continue  # indistinguishable from no write (see the module doc)
            write_w(caps[bus], watts)
            operator[bus] = watts
            continue
        setting = str(step[1]) if kind == "schedule" else kind
        if setting == "pct":
            pct = 45 if kind == "schedule" else int(step[1])  # type: ignore[call-overload]
            want: dict[str, float] = dict.fromkeys(PRIMARIES, float(max(1, round_half_away(pct / 100 * DEFAULT_W))))
        elif setting == "watts":
            w = 300.0 if kind == "schedule" else float(step[1])  # type: ignore[arg-type]
            want = dict.fromkeys(PRIMARIES, w)
        else:
            want = {bus: operator[bus] if known[bus] else float(DEFAULT_W) for bus in PRIMARIES}
        before = {bus: read_w(p) for bus, p in caps.items()}
        args = ("--schedule", schedule, "--at", AT[setting]) if kind == "schedule" else (
            ("--restore",) if setting == "restore" else (f"--{setting}", str(step[1])))
        _joulectl(node, *args)
        after = {bus: read_w(p) for bus, p in caps.items()}
        assert after == want, (history, step)
        for bus in PRIMARIES:
            known[bus] = known[bus] or after[bus] != before[bus]
            if setting == "restore":
                operator[bus] = after[bus]
        # the same run again: nothing changes, nothing is written
        saved = _journal_stat(node)
        _joulectl(node, *args)
        assert {bus: read_w(p) for bus, p in caps.items()} == after
        assert _journal_stat(node) == saved, (history, step)
