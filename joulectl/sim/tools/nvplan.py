"""The prepared power-limit write of the fake ``nvidia-smi``: ``-i <bus>,... -pl <W>`` without Python.

A cap on an NVIDIA node sends three tool calls: the inventory query, one ``-i <bus>,... -pl <W>``
and the readback query. The two queries are printed by the tool's shell part from prepared answers
(:mod:`joulectl.sim.tools.nvfast`); the write started the Python tool, whose interpreter alone
costs more CPU than the rest of the cap's tool calls together. This module prepares, beside the
cap's inventory answer and for the same state, what the shell needs to make that write itself:

``plw``
    A POSIX sh file the shell sources: each GPU's bus id, range, platform limit and whether a
    ``-pl`` may be made by the shell (``ok<i>``), and a function ``pl_write STATE INV RB PL``
    that prints the new state file and the new inventory and readback answers, each split at
    its GPUs' two limits (the parts in between are this state's text, in single quotes), and
    the new ``pl``. A write changes nothing but those limits, so ``plw`` holds for every state
    the shell's writes lead to, until anything else writes.
``pl``
    The limits themselves: ``L<i>`` and ``E<i>`` (requested and enforced, mW, as the state file
    holds them) and ``l<i>``, ``e<i>`` (as the queries print them).

The shell takes this way only for exactly ``-i <bus>,... -pl <W>`` with ``W`` a plain number of
watts with at most two decimals, each ``<bus>`` a GPU's bus id as the state spells it, once,
every one of them a GPU the tool would change without a message of its own, ``W`` in each one's
range, ``HWEMU_UNPRIVILEGED`` unset, and the plan valid (while the inventory answer is: its link
``csv.state``, see :mod:`~joulectl.sim.tools.nvfast`; the plan's files have no link of their
own); every other case (and every failure of the shell on the way,
before the state is replaced) runs the Python tool, which says what is wrong as before. What the
shell prints, writes and prepares is byte-identical to the Python tool's (tests/sim/
test_nvsmi_plan.py holds them together), but that it does not ``fsync`` the state before the
rename (ext4 flushes a file renamed over another on its own: ``auto_da_alloc``). The shell runs
four programs (``flock``, ``touch``, ``ln``, ``mv``), about 1.5 ms each: 6.4 ms of CPU for the
write on eight H100s, where the Python tool takes 16.5 ms (9 of them its interpreter's start).

Standard library only, and not ``re`` (the tool's start-up: tests/sim/test_fake_tools.py).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: The GPU's two limits in the prepared texts: 13 digits each (so none is part of another), at
#: a value no state holds; ``+ 100 * i`` for GPU ``i``, ``+ 10`` for the enforced one.
_SENTINEL = 9_876_543_210_000
#: Which answers a plan rewrites, in ``pl_write``'s argument order after the state file.
_CSV = ("inv", "rb")


def _q(text: str) -> str:
    """``text`` as one single-quoted sh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _w(mw: int) -> str:
    """A limit as the queries print it (``_fields``'s ``w`` without units)."""
    return f"{mw / 1000:.2f}"


def _split(text: str, marks: dict[str, str]) -> list[str] | None:
    """``text`` as sh words: its parts in single quotes, each mark (exactly once in it) replaced by
    the variable ``marks[mark]`` names; None if a mark is missing or repeated."""
    if any(text.count(mark) != 1 for mark in marks):
        return None
    words: list[str] = []
    at = 0
    for start, mark in sorted((text.index(mark), mark) for mark in marks):
        if start < at:  # two marks overlapping (none does: all have the same length)
            return None
        words.append(_q(text[at:start]))
        words.append(f'"${marks[mark]}"')
        at = start + len(mark)
    words.append(_q(text[at:]))
    return words


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def values(state: dict[str, Any]) -> str:
    """``pl``: the limits of ``state``'s GPUs, as the shell writes them too (``pl_write``)."""
    out = []
    for i, g in enumerate(state.get("gpus") or []):
        p = g["power"]
        out.append(f"L{i}={int(p['limitMw'])} E{i}={int(p['enforcedLimitMw'])} "
                   f"l{i}={_w(p['limitMw'])} e{i}={_w(p['enforcedLimitMw'])}\n")
    return "".join(out)


def plan(state: dict[str, Any], eligible: Callable[[dict[str, Any]], bool], dumps: Callable[[Any], str],
         answers: Callable[[dict[str, Any]], dict[str, str] | None]) -> dict[str, str] | None:
    """``{"plw": ..., "pl": ...}`` for ``state``, or None where the shell cannot write for it.

    ``eligible(g)``: whether ``-pl`` changes GPU ``g`` without a message of its own (no token
    replacing a limit, power management supported in scope); ``dumps``: the state file's
    encoder; ``answers(state)``: the inventory and readback answers of a state (``inv``, ``rb``)."""
    gpus = state.get("gpus") or []
    if not gpus:
        return None
    marked: list[dict[str, Any]] = []
    marks: dict[str, str] = {}  # the JSON marks
    csv_marks: dict[str, str] = {}
    lines = [f"n={len(gpus)}\n"]
    for i, g in enumerate(gpus):
        p = g.get("power") or {}
        lo, hi, limit, enforced = (_int(p.get(k)) for k in ("minLimitMw", "maxLimitMw", "limitMw", "enforcedLimitMw"))
        platform = p.get("platformLimitMw")
        bus = g.get("busId")
        if limit is None or enforced is None or not isinstance(bus, str):
            return None
        ok = lo is not None and hi is not None and eligible(g) and (platform is None or _int(platform) is not None)
        lines.append(f"b{i}={_q(bus)} lo{i}={lo if ok else 0} hi{i}={hi if ok else 0} ok{i}={1 if ok else 0} "
                     f"pf{i}={platform if ok and platform is not None else ''} "
                     f"pw{i}={_w(platform) if ok and platform is not None else ''}\n")
        mark_l, mark_e = _SENTINEL + 100 * i, _SENTINEL + 100 * i + 10
        marked.append({**g, "power": {**p, "limitMw": mark_l, "enforcedLimitMw": mark_e}})
        marks[str(mark_l)], marks[str(mark_e)] = f"L{i}", f"E{i}"
        csv_marks[_w(mark_l)], csv_marks[_w(mark_e)] = f"l{i}", f"e{i}"
    twin = {**state, "gpus": marked}
    texts = answers(twin)
    if texts is None:
        return None
    split = [_split(dumps(twin), marks)] + [_split(texts[name], csv_marks) for name in _CSV]
    parts = [words for words in split if words is not None]
    if len(parts) != len(split):
        return None
    # 'L0=' "$L0" ' E0=' "$E0" ...: the pl file as values() writes it
    pl_words = []
    for i in range(len(gpus)):
        for name, tail in (("L", " "), ("E", " "), ("l", " "), ("e", "\n")):
            pl_words += [_q(f"{name}{i}="), f'"${name}{i}"', _q(tail)]
    body = "".join(
        f"  printf '%s' {' '.join(words)} >\"${arg}\" || return 1\n"
        for arg, words in zip((1, 2, 3), parts, strict=True)
    )
    body += f"  printf '%s' {' '.join(pl_words)} >\"$4\"\n"
    lines.append("pl_write() {\n" + body + "}\n")
    return {"plw": "".join(lines), "pl": values(state)}
