"""The plain tables (``-o table`` off a terminal: cron, pipes, files) are written by joulectl, not
tabulate, for printable cells (tabulate 0.10's import costs 25-30 ms of CPU: it loads
``importlib.metadata``): every table is the one tabulate made, character for character, and any
other cell (a control character, lines, ragged rows; beyond ASCII with ``wcwidth`` installed) is
still tabulate's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from joulectl import render

#: cells as joulectl prints them (bus ids, models, watts, messages, "-") and blanks around them
ascii_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
odd_text = st.sampled_from(["\u00e9", "\u65e5\u672c", "a\nb", "a\r\nb", "\t", "\x1b[31mred\x1b[0m", "\u00a0x",
                            "\u2028", "\x85", "x\x0by"])


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[list[str]], list[str]]:
    ncols = draw(st.integers(1, 6))
    cell = ascii_text | odd_text if draw(st.booleans()) else ascii_text
    headers = draw(st.lists(ascii_text, min_size=ncols, max_size=ncols)) if draw(st.booleans()) else []
    rows = draw(st.lists(st.lists(cell, min_size=ncols, max_size=ncols), max_size=6))
    if rows and draw(st.integers(0, 9)) == 0:  # a ragged row
        rows[-1] = rows[-1][: draw(st.integers(0, ncols))]
    return rows, headers


def _tabulate(rows: list[list[str]], headers: list[str]) -> str:
    if headers:
        return tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True)
    return tabulate(rows, tablefmt="plain", disable_numparse=True)


@settings(max_examples=1500, deadline=None)
@given(tables())
def test_plain_tables_are_tabulates(table: tuple[list[list[str]], list[str]]) -> None:
    rows, headers = table
    if not rows and not headers:
        return  # (the callers print nothing for no rows without headers)
    assert render._plain(rows, headers) == _tabulate(rows, headers)


def test_literal_tables() -> None:
    cases = [
        ([["a", "bb"], ["ccc", "d"]], ["H1", "H2"], "H1    H2\na     bb\nccc   d"),
        ([["a", "bb"], ["ccc", "d"]], [], "a    bb\nccc  d"),
        ([["a", ""], ["", "d"]], ["H", "X"], "H    X\na\n     d"),
        ([["  lead", "trail  "]], ["H", "Y"], "H     Y\nlead  trail"),
        ([["a", "b"]], [" H ", "Y "], " H     Y\na      b"),
        ([], ["H", "Y"], "H    Y"),
        ([["", ""]], ["H", "Y"], "H    Y\n"),
    ]
    for rows, headers, text in cases:
        assert render._plain(rows, headers) == text == _tabulate(rows, headers)


def test_wide_characters_are_measured_as_tabulate_measures_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # with wcwidth installed, tabulate counts a CJK character two columns: such a table is its own
    rows = [["\u65e5\u672c", "b"], ["x", "\u2013560 W"]]
    monkeypatch.setattr(render, "_WCWIDTH", [True])
    assert render._plain(rows, ["H", "Y"]) == _tabulate(rows, ["H", "Y"])
    called = []
    monkeypatch.setattr("tabulate.tabulate", lambda *a, **k: called.append(a) or "T")
    assert render._plain(rows, ["H", "Y"]) == "T" and called
    monkeypatch.setattr(render, "_WCWIDTH", [False])
    text = render._plain(rows, ["H", "Y"])
    assert text == "H    Y\n\u65e5\u672c   b\nx    \u2013560 W" == _tabulate(rows, ["H", "Y"])


def test_a_table_off_a_terminal_does_not_import_tabulate(tmp_path: object) -> None:
    code = ("import sys; from joulectl import render; "
            "render.table(['DEVICE', 'RANGE'], [['0000:18:00.0', '200\u2013700 W'], ['0000:2a:00.0', None]], "
            "stream=sys.stderr); "
            "print('tabulate' in sys.modules, 'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
