#!/usr/bin/env python3
"""Mutation testing of joulectl's core modules: does the suite notice a small bug?

Each mutant is one small change to one module (a comparison flipped, ``and``/``or`` swapped, a
``not`` dropped, ``+``/``-`` or ``*``/``/`` swapped, a number moved by one, ``True``/``False``
swapped, ``max``/``min`` swapped). The script writes the mutant into the module file **in place**
(so the ``python -m joulectl`` subprocesses and the emulator's fake tools that the tests start run
it too), runs only the tests that cover that module (``MAP``) with a per-mutant timeout, and puts
the file back (content and mtime) before the next one. A mutant is *killed* when those tests fail
(or time out), *survived* when they pass.

Why our own script and not mutmut: mutmut 3 first runs the whole suite to map tests to functions
(13 minutes alone here, 30+ under load), and its trampolines live in a copy of the tree that the
tests' subprocesses and fake tools do not import; mutmut 2 runs one runner command for every
mutant. This script maps module -> test files by hand, needs no clean full run, and its mutants
reach every process the tests start.

    python scripts/mutate.py --list                      # count the mutants per module
    nice python scripts/mutate.py --sample 30 --seed 21  # 30 mutants per module group, seeded
    nice python scripts/mutate.py --only 'joulectl/ops/cap.py:545:23:max->min'

Before the first mutant of a group, each of its test files runs once on the unmutated code with
the group's modules instrumented (the map, kept in ``--map`` and remade when a module or a shared
test file changed, each line tagged with the test whose call ran it): each mutant then runs
only the test ids that ran its statement, in any process, or the whole file where it ran outside
a test's call (collection, an import, a fixture); one no test reaches survives without a run
(``unreached``). ``--select files`` runs every test of the files that reach it, ``--no-select``
every test file of the group for every mutant.

Results go to ``--out`` (JSON lines, one per mutant) and a summary to stdout. The working tree
must have no uncommitted change in the mutated files; they are restored on exit, on Ctrl-C too.
Survivors are judged by hand: equivalent (no test could tell) or a missing test; docs/TESTING.md
lists the last run's figures and every survivor with its verdict.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: module group -> (modules, the test files that cover them, fastest first)
MAP: dict[str, tuple[list[str], list[str]]] = {
    "ops/cap.py": (["joulectl/ops/cap.py"], [
        "tests/ops/test_cap.py", "tests/ops/test_cap_report_errors.py", "tests/ops/test_cap_boundaries.py",
        "tests/ops/test_cap_nvml.py", "tests/reliability/test_cron_restore.py", "tests/ops/test_cap_e2e.py"]),
    "ops/governor.py": (["joulectl/ops/governor.py"], [
        "tests/governor/test_contract.py", "tests/governor/test_scope_defaults.py",
        "tests/governor/test_regressions.py", "tests/governor/test_cli.py",
        "tests/governor/test_amd.py", "tests/governor/test_cpu.py", "tests/governor/test_nvidia.py",
        "tests/governor/test_intel.py", "tests/governor/test_node_presets.py", "tests/governor/test_e2e.py"]),
    "backends/": ([f"joulectl/backends/{m}.py" for m in (
        "amd", "base", "cpu", "gov_amd", "gov_cpu", "gov_intel", "gov_nvidia", "intel", "nvidia",
        "nvidia_clock_io", "nvidia_clocks", "nvidia_messages", "nvidia_xml", "nvml", "pci")], [
        "tests/backends/test_errno_status.py", "tests/backends/test_cpulist.py",
        "tests/backends/test_nvidia_smi_limits.py",
        "tests/backends", "tests/governor/test_amd.py", "tests/governor/test_cpu.py",
        "tests/governor/test_intel.py", "tests/governor/test_nvidia.py", "tests/governor/test_nvml.py",
        "tests/governor/test_nvidia_transport_edges.py",
        "tests/governor/test_legacy_cpufreq.py", "tests/ops/test_cap_boundaries.py", "tests/ops/test_cap_nvml.py",
        "tests/cli/test_real_captures.py", "tests/cli/test_real_facts.py"]),
    "scheduling/filters.py": (["joulectl/scheduling/filters.py"], [
        "tests/scheduling/test_gpu_selection.py", "tests/scheduling/test_node_affinity_ops.py",
        "tests/scheduling/test_filters.py", "tests/scheduling/test_check.py",
        "tests/scheduling/test_hami.py",
        "tests/scheduling/test_score.py", "tests/cli/test_schedule_check.py"]),
    "sim/tools/nvplan.py": (["joulectl/sim/tools/nvplan.py"], [
        "tests/sim/test_nvsmi_plan.py", "tests/sim/test_nvsmi_fast.py"]),
    "sim/tick.py": (["joulectl/sim/tick.py"], [
        "tests/sim/test_runtime_clock.py", "tests/sim/test_tick_poll_writes.py", "tests/sim/test_tick.py",
        "tests/sim/test_tick_kernel.py",
        "tests/sim/test_tick_fidelity.py", "tests/sim/test_tick_readback.py", "tests/sim/test_intel_gt_freq.py",
        "tests/sim/test_fake_tools.py", "tests/sim/test_runtime.py", "tests/sim/test_tick_kept_files.py",
        "tests/sim/fuse/test_energy_between_ticks.py", "tests/sim/test_tick_edges.py",
        "tests/sim/test_tick_outside_facts.py"]),
}

COMPARE_SWAP = {ast.Lt: (ast.LtE, "<", "<="), ast.LtE: (ast.Lt, "<=", "<"), ast.Gt: (ast.GtE, ">", ">="),
                ast.GtE: (ast.Gt, ">=", ">"), ast.Eq: (ast.NotEq, "==", "!="), ast.NotEq: (ast.Eq, "!=", "=="),
                ast.Is: (ast.IsNot, "is", "is not"), ast.IsNot: (ast.Is, "is not", "is"),
                ast.In: (ast.NotIn, "in", "not in"), ast.NotIn: (ast.In, "not in", "in")}
BINOP_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
              ast.FloorDiv: ("//", "/")}


@dataclass
class Mutant:
    id: str
    file: str
    line: int
    desc: str
    start: int  # byte offsets into the file
    end: int
    replacement: str


def _offsets(source: bytes) -> list[int]:
    out = [0]
    for i, b in enumerate(source):
        if b == 0x0A:
            out.append(i + 1)
    return out


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _annotation_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        anns: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(node.returns)
            a = node.args
            anns += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            anns += [a.vararg.annotation if a.vararg else None, a.kwarg.annotation if a.kwarg else None]
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            if ann is not None:
                ids.update(id(n) for n in ast.walk(ann))
    return ids


def mutants_of(rel: str) -> list[Mutant]:
    """Every mutant of one file, in source order."""
    path = REPO / rel
    source = path.read_bytes()
    tree = ast.parse(source)
    lines = _offsets(source)
    skip = _docstring_nodes(tree) | _annotation_nodes(tree)
    text_lines = source.decode().splitlines()
    out: list[Mutant] = []

    def pos(lineno: int, col: int) -> int:
        return lines[lineno - 1] + col

    def add(node: ast.AST, start: int, end: int, replacement: str, desc: str) -> None:
        line = getattr(node, "lineno", 0)
        if line and "pragma: no mutate" in text_lines[line - 1]:
            return
        col = start - lines[line - 1] if line else 0
        out.append(Mutant(f"{rel}:{line}:{col}:{desc}", rel, line, desc, start, end, replacement))

    def between(a: ast.AST, b: ast.AST, old: str, new: str, node: ast.AST, desc: str) -> None:
        """Replace the operator ``old`` in the source between nodes ``a`` and ``b``."""
        lo = pos(a.end_lineno, a.end_col_offset)  # type: ignore[arg-type]
        hi = pos(b.lineno, b.col_offset)
        seg = source[lo:hi].decode()
        # the operator outside any comment or parenthesis: the first whole-word match
        idx = _find_op(seg, old)
        if idx < 0:
            return
        start = lo + len(seg[:idx].encode())
        add(node, start, start + len(old.encode()), new, desc)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                swap = COMPARE_SWAP.get(type(op))
                if swap is not None:
                    _, old, new = swap
                    between(left, right, old, new, node, f"{old}->{new}".replace(" ", "_"))
                left = right
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            for a, b in zip(node.values, node.values[1:], strict=False):
                between(a, b, old, new, node, f"{old}->{new}")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            start = pos(node.lineno, node.col_offset)
            seg = source[start:start + 16]
            if seg.startswith(b"not"):
                n_ws = len(seg[3:]) - len(seg[3:].lstrip())
                add(node, start, start + 3 + n_ws, "", "drop_not")  # "not (a or b)" -> "(a or b)"
        elif isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAP:
            old, new = BINOP_SWAP[type(node.op)]
            if isinstance(node.op, ast.Add) and _stringy(node):
                continue  # string concatenation: "-" would only raise TypeError
            between(node.left, node.right, old, new, node, f"{old}->{new}")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, str) and node.value is not None:
            start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)  # type: ignore[arg-type]
            if isinstance(node.value, bool):
                add(node, start, end, str(not node.value), f"{node.value}->{not node.value}")
            elif isinstance(node.value, int):
                add(node, start, end, f"({node.value + 1})", f"{node.value}->{node.value + 1}")
            elif isinstance(node.value, float):
                add(node, start, end, f"({node.value!r} + 1.0)", f"{node.value!r}->+1")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
            other = "min" if node.func.id == "max" else "max"
            f = node.func
            add(node, pos(f.lineno, f.col_offset), pos(f.end_lineno, f.end_col_offset), other,  # type: ignore[arg-type]
                f"{f.id}->{other}")
    out.sort(key=lambda m: (m.start, m.id))
    seen: set[str] = set()
    unique = []
    for m in out:
        if m.id not in seen:
            seen.add(m.id)
            unique.append(m)
    return unique


def _stringy(node: ast.BinOp) -> bool:
    return any(isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
               for n in (node.left, node.right))


def _find_op(seg: str, op: str) -> int:
    """Index of the operator ``op`` in ``seg`` (the text between two operands), skipping text in
    comments; word operators must stand alone."""
    depth = 0
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "#":
            nl = seg.find("\n", i)
            if nl < 0:
                return -1
            i = nl + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth <= 0 and seg.startswith(op, i):
            if op[0].isalpha():
                before = seg[i - 1] if i else " "
                after = seg[i + len(op)] if i + len(op) < len(seg) else " "
                if before.isalnum() or before == "_" or after.isalnum() or after == "_":
                    i += 1
                    continue
            elif (op in ("<", ">") and seg[i + 1:i + 2] == "=") or (
                    op in ("/", "*") and seg[i + 1:i + 2] in ("/", "*", "=")):
                i += 2
                continue
            return i
        i += 1
    return -1


# -- running ---------------------------------------------------------------------------------------


class Restorer:
    """Puts a mutated file back (content and timestamps) on every exit path."""

    def __init__(self) -> None:
        self.saved: dict[Path, tuple[bytes, int, int]] = {}

    def save(self, path: Path) -> None:
        if path not in self.saved:
            st = path.stat()
            self.saved[path] = (path.read_bytes(), st.st_atime_ns, st.st_mtime_ns)

    def restore(self) -> None:
        for path, (data, atime, mtime) in self.saved.items():
            if path.read_bytes() != data:
                path.write_bytes(data)
            os.utime(path, ns=(atime, mtime))


# -- which test files reach which lines (the map) ----------------------------------------------------
#
# Before the mutants, each test file of a group runs once on the unmutated code with every module of
# the group instrumented: the line ``from __future__ import annotations`` gets a tracer appended on
# the same line (no line number moves), and every process that imports the module, the tests' own,
# their ``python -m joulectl`` and ``python -S`` children and the fake tools alike, appends each line
# of the module it runs to a file of its own as soon as it runs it (so a process killed or ended
# with ``os._exit`` has told already). A mutant then runs only the test files that ran the
# statement it changes; a mutant no test file reaches survives without a run ("unreached").

FUTURE = b"from __future__ import annotations"

HOOK = r"""
import os as _os, sys as _sys, threading as _th
_mod = _sys._getframe(1)
_fd = _os.open(_os.path.join(OUT, "%s.%d" % (NAME, _os.getpid())), _os.O_WRONLY | _os.O_CREAT | _os.O_APPEND,
               0o644)
_seen = set()

# which test is running: the pytest process's plugin keeps it in sys._mutmap_cur ("C <nodeid>" in a
# test's call, "S"/"T" in its setup/teardown, "X" outside a test); a child takes it once from the
# PYTEST_CURRENT_TEST it inherited ("?" when it inherited none)
_cur = _sys.__dict__.get("_mutmap_cur")
if _cur is None:
    _t = _os.environ.get("PYTEST_CURRENT_TEST", "")
    _node, _, _phase = _t.rpartition(" ")
    _cur = _sys._mutmap_cur = [({"(call)": "C ", "(setup)": "S ", "(teardown)": "T "}.get(_phase, "? ") + _node)
                               if _node else "?"]

def _local(frame, event, arg, _seen=_seen, _fd=_fd, _write=_os.write, _cur=_cur):
    k = (_cur[0], frame.f_lineno)
    if k not in _seen:
        _seen.add(k)
        _write(_fd, ("%s\t%d\n" % k).encode())
    return _local

# one tracer per process for every instrumented module: file name -> that module's line recorder
_reg = _sys.__dict__.get("_mutmap_tracers")
if _reg is None:
    _reg = _sys._mutmap_tracers = {}

    def _global(frame, event, arg, _get=_reg.get):
        local = _get(frame.f_code.co_filename)
        return local(frame, event, arg) if local is not None else None

    _sys.settrace(_global)
    _th.settrace(_global)
_reg[_mod.f_code.co_filename] = _local
_mod.f_trace = _local
"""

#: the pytest plugin of a map run (``-p mutmap_plugin``): the phase and test id the tracer tags each
#: line with, and each test's clean time (setup + call + teardown) in ``durations.json``
PLUGIN = r"""
import json, os, sys
import pytest

_cur = sys.__dict__.setdefault("_mutmap_cur", ["X"])
_cur[0] = "X"
_durations = {}


def _phase(tag):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item, **_kw):
        _cur[0] = tag + item.nodeid
        try:
            yield
        finally:
            _cur[0] = "X"
    return hook


pytest_runtest_setup = _phase("S ")
pytest_runtest_call = _phase("C ")
pytest_runtest_teardown = _phase("T ")

# What a module runs while it is imported (its tables, class bodies, defaults, the functions it
# calls to build them) runs once per process, for the first test that imports it, and every later
# test uses the result: an import in a test's call is tagged "I" (a whole file), like collection.
# Every import that loads a module goes through importlib's _find_and_load, which the interpreter
# looks up by name on each import (the import statement and importlib.import_module alike).
_bootstrap = sys.modules["_frozen_importlib"]
_find_and_load = _bootstrap._find_and_load


def _tagged_find_and_load(name, import_, _find=_find_and_load, _cur=_cur):
    was = _cur[0]
    if was.startswith("C "):
        _cur[0] = "I " + was[2:]
    try:
        return _find(name, import_)
    finally:
        _cur[0] = was


_bootstrap._find_and_load = _tagged_find_and_load


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    with open(os.path.join(os.environ["MUTMAP_OUT"], "durations.json"), "w") as fh:
        json.dump(_durations, fh)
"""


def instrumented(source: bytes, hook_path: str, out_dir: str, name: str) -> bytes:
    """``source`` with the tracer appended to its ``from __future__`` line (ValueError without one)."""
    idx = source.find(FUTURE + b"\n")
    if idx < 0:
        raise ValueError("no 'from __future__ import annotations' line to hang the tracer on")
    end = idx + len(FUTURE)
    call = (f"; exec(compile(open({hook_path!r}).read(), {hook_path!r}, 'exec'), "
            f"{{'OUT': {out_dir!r}, 'NAME': {name!r}}})")
    return source[:end] + call.encode() + source[end:]


def statement_spans(source: bytes) -> list[tuple[int, int]]:
    """(first line, last line) of every statement, decorators included."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            spans.append((first, node.end_lineno or node.lineno))
    return spans


def reach_lines(m: Mutant, spans: list[tuple[int, int]]) -> range:
    """The lines of which one runs whenever the mutated code may: from the first line of the
    innermost statement holding the mutant to the mutant's own line."""
    holding = [s for s in spans if s[0] <= m.line <= s[1]]
    if not holding:
        return range(m.line, m.line + 1)
    first, _ = min(holding, key=lambda s: s[1] - s[0])
    return range(first, m.line + 1)


def test_paths(tests: list[str]) -> list[str]:
    """The group's test entries as files (a directory: its test_*.py files), in order, each once."""
    out: list[str] = []
    for t in tests:
        p = REPO / t
        files = sorted(str(f.relative_to(REPO)) for f in p.rglob("test_*.py")) if p.is_dir() else [t]
        out += [f for f in files if f not in out]
    return out


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(REPO)).encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def map_key(group: str) -> str:
    """What a group's map depends on besides its own test files: the modules and every shared file
    of tests/ (fixture and helper modules, data): anything but a ``test_*.py``, which only its own
    run reads, and a ``conftest.py`` outside the directories of the group's test files and their
    parents, which pytest never loads for them."""
    files, tests = MAP[group]
    dirs = {(REPO / t).parent for t in test_paths(tests)}
    dirs |= {parent for d in dirs for parent in d.parents}
    shared = [p for p in (REPO / "tests").rglob("*") if p.is_file() and "__pycache__" not in p.parts
              and not (p.name.startswith("test_") and p.suffix == ".py")
              and not (p.name == "conftest.py" and p.parent not in dirs)]
    return MAP_FORMAT + ":" + _digest([REPO / f for f in files] + shared)


#: the map's format (a map of another format is remade): per test id since "tests-2"
MAP_FORMAT = "tests-3"


def build_map(group: str, restorer: Restorer, log: Any, only: list[str] | None = None) -> dict[str, Any] | None:
    """Run each test file of ``group`` (or of ``only``) once with its modules instrumented: the lines
    each reaches, its time and status (None when one fails on the unmutated code)."""
    files, tests = MAP[group]
    work = Path(tempfile.mkdtemp(prefix="mutmap-"))
    hook = work / "hook.py"
    hook.write_text(HOOK)
    (work / "mutmap_plugin.py").write_text(PLUGIN)
    entry: dict[str, Any] = {"key": map_key(group), "paths": {}}
    try:
        for n, t in enumerate(only if only is not None else test_paths(tests)):
            out_dir = work / str(n)
            out_dir.mkdir()
            for f in files:
                path = REPO / f
                restorer.save(path)
                original, _, mtime = restorer.saved[path]
                path.write_bytes(instrumented(original, str(hook), str(out_dir), f.replace("/", "_")))
                stamp = mtime + (500 + n) * 1_000_000_000
                os.utime(path, ns=(stamp, stamp))
            status, dt, tail = run_tests(["-p", "mutmap_plugin", t], timeout=3600, env={
                "PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")])),
                "MUTMAP_OUT": str(out_dir)})
            restorer.restore()
            print(f"[map] {group}: {t}: {status} in {dt:.0f} s", file=log, flush=True)
            if status != "survived":
                print(f"[map] {group}: {t} fails on the unmutated code ({tail}); group skipped", file=log, flush=True)
                return None
            entry["paths"][t] = {"sha": _digest([REPO / t]), "seconds": round(dt, 1),
                                 **read_records(out_dir, files)}
    finally:
        restorer.restore()
        shutil.rmtree(work, ignore_errors=True)
    return entry


def read_records(out_dir: Path, files: list[str]) -> dict[str, Any]:
    """One map run's records: every line each module ran (``hits``), the lines it ran outside a
    test's call phase (``whole``: collection, a module's import, a fixture's setup or teardown, a
    child that inherited no test id), and for the others the tests whose call ran them (``calls``: line -> indices into
    ``tests``, whose clean times are ``durations``)."""
    try:
        durations: dict[str, float] = json.loads((out_dir / "durations.json").read_text())
    except (OSError, ValueError):
        durations = {}
    index: dict[str, int] = {}
    hits: dict[str, list[int]] = {}
    whole: dict[str, list[int]] = {}
    calls: dict[str, dict[str, list[int]]] = {}
    for f in files:
        every: set[int] = set()
        outside: set[int] = set()
        by_line: dict[int, set[int]] = {}
        for rec in out_dir.glob(f.replace("/", "_") + ".*"):
            for row in rec.read_text().splitlines():
                tag, _, num = row.rpartition("\t")
                if not num.isdigit():
                    continue
                n = int(num)
                every.add(n)
                if tag.startswith("C "):
                    by_line.setdefault(n, set()).add(index.setdefault(tag[2:], len(index)))
                else:
                    outside.add(n)
        if every:
            hits[f] = sorted(every)
            whole[f] = sorted(outside)
            calls[f] = {str(n): sorted(ix) for n, ix in sorted(by_line.items())}
    tests = list(index)
    return {"hits": hits, "whole": whole, "calls": calls, "tests": tests,
            "durations": [round(durations.get(t, 1.0), 3) for t in tests]}


#: what a map run of one test file costs besides its tests (start-up, imports, collection), in s
FILE_OVERHEAD_S = 3.0


def select(m: Mutant, entry: dict[str, Any], tests: list[str], by_test: bool = True) -> tuple[list[str], float]:
    """What to run for ``m`` and its clean time: the tests whose call ran the statement holding it;
    a whole test file where a statement ran outside a test's call (collection, a fixture shared by
    tests), where the file changed since the map, or with ``by_test`` false."""
    spans = SPANS.get(m.file)
    if spans is None:
        spans = SPANS[m.file] = statement_spans((REPO / m.file).read_bytes())
    want = set(reach_lines(m, spans))
    chosen: list[str] = []
    seconds = 0.0
    for t in test_paths(tests):
        rec = entry["paths"].get(t)
        if rec is None or rec["sha"] != _digest([REPO / t]):
            chosen.append(t)
            seconds += rec["seconds"] if rec is not None else 60.0
            continue
        if not want & set(rec["hits"].get(m.file, ())):
            continue
        if not by_test or want & set(rec["whole"].get(m.file, ())):
            chosen.append(t)
            seconds += rec["seconds"]
            continue
        calls = rec["calls"].get(m.file, {})
        ix = sorted({i for n in want for i in calls.get(str(n), ())})
        chosen += [rec["tests"][i] for i in ix]
        seconds += FILE_OVERHEAD_S + sum(rec["durations"][i] for i in ix)
    return chosen, seconds


SPANS: dict[str, list[tuple[int, int]]] = {}


def run_tests(tests: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[str, float, str]:
    """Run ``tests`` (stop at the first failure) in a session of their own: on a timeout the whole
    session (pytest and every process it started) is killed."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1", **(env or {})}
    env.pop("JOULECTL_ROOT", None)
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    RUNNING[:] = [p]
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        return "timeout", time.monotonic() - t0, ""
    dt = time.monotonic() - t0
    tail = "\n".join((out or "").strip().splitlines()[-3:])
    if p.returncode == 0:
        return "survived", dt, tail
    if p.returncode == 5:
        return "no-tests", dt, tail
    # not the mutant's doing: a usage error (a test file missing) or a full disk
    if p.returncode == 4 or "[Errno 28] No space left on device" in (out or ""):
        return "error", dt, _first_failure(out) or tail
    return "killed", dt, _first_failure(out) or tail


#: the pytest session running now (killed with its whole process group when the script stops)
RUNNING: list[subprocess.Popen[str]] = []


def _stop_running() -> None:
    for p in RUNNING:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _first_failure(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("FAILED ") or line.startswith("ERROR "):
            return line[:200]
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", action="append", choices=sorted(MAP), help="module groups (default: all)")
    ap.add_argument("--sample", type=int, default=0, help="mutants per group, drawn with --seed (0: all)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--only", action="append", default=[], help="run these mutant ids only")
    ap.add_argument("--list", action="store_true", help="count and list the mutants, run nothing")
    ap.add_argument("--timeout", type=float, default=0, help="per-mutant timeout in s (default: 3x baseline, >= 60)")
    ap.add_argument("--out", default="mutants.jsonl", help="results, one JSON object per line")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the clean run of each group (needs --timeout; the suite is known green); "
                         "every mutant runs all the group's tests")
    ap.add_argument("--no-select", action="store_true",
                    help="run all the group's tests for every mutant, not only the tests that reach it")
    ap.add_argument("--select", choices=("tests", "files"), default="tests",
                    help="run the tests whose call ran the mutated statement (default), or every test of "
                         "the files that ran it")
    ap.add_argument("--map", default="mutmap.json",
                    help="the map of which test file reaches which line, kept between runs and remade "
                         "when a module or a shared test file changed")
    args = ap.parse_args(argv)

    groups = args.group or sorted(MAP)
    plan: list[tuple[str, Mutant]] = []
    for g in groups:
        files, _tests = MAP[g]
        everything = [m for f in files for m in mutants_of(f)]
        chosen = everything
        if args.only:
            chosen = [m for m in everything if m.id in args.only]
        elif args.sample and len(everything) > args.sample:
            chosen = sorted(random.Random(f"{args.seed}:{g}").sample(everything, args.sample),
                            key=lambda m: (m.file, m.start))
        if args.list:
            print(f"{g}: {len(everything)} mutants ({len(chosen)} chosen)")
            for m in chosen if args.sample or args.only else []:
                print(f"  {m.id}")
        plan += [(g, m) for m in chosen]
    if args.list:
        return 0
    if args.no_baseline and not args.timeout:
        print("--no-baseline needs --timeout", file=sys.stderr)
        return 2
    # round robin over the groups: a run stopped early has covered every group alike
    by_group: dict[str, list[Mutant]] = {}
    for g, m in plan:
        by_group.setdefault(g, []).append(m)
    plan = [(g, ms[i]) for i in range(max((len(v) for v in by_group.values()), default=0))
            for g, ms in by_group.items() if i < len(ms)]
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *{m.file for _, m in plan}], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        print(f"uncommitted changes in mutated files:\n{dirty}", file=sys.stderr)
        return 2

    restorer = Restorer()
    # Ctrl-C and SIGTERM stop the run and restore the files, even when started with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: list[dict[str, Any]] = []
    baseline: dict[str, float] = {}
    out = open(args.out, "w")  # noqa: SIM115 - one handle for the whole run
    select_tests = not (args.no_select or args.no_baseline)
    maps: dict[str, Any] = {}
    if select_tests and os.path.exists(args.map):
        try:
            with open(args.map, encoding="utf-8") as fh:
                maps = json.load(fh)
        except (OSError, ValueError):
            maps = {}
    try:
        for g in dict.fromkeys(g for g, _ in plan):
            if args.no_baseline:
                baseline[g] = args.timeout / 3
                continue
            if select_tests:
                cached = maps.get(g)
                if isinstance(cached, dict) and cached.get("key") == map_key(g):
                    # the modules and shared files are those of the map: only the test files changed
                    # or added since are mapped again (each file's map run stands alone)
                    stale = [t for t in test_paths(MAP[g][1]) if (rec := cached["paths"].get(t)) is None
                             or rec["sha"] != _digest([REPO / t])]
                    if stale:
                        t0 = time.monotonic()
                        fresh = build_map(g, restorer, sys.stdout, only=stale)
                        if fresh is None:
                            continue
                        cached["paths"].update(fresh["paths"])
                        with open(args.map, "w", encoding="utf-8") as fh:
                            json.dump(maps, fh)
                        print(f"[map] {g}: {len(stale)} test files mapped again in {time.monotonic() - t0:.0f} s",
                              flush=True)
                    print(f"[map] {g}: the map in {args.map} is current", flush=True)
                else:
                    t0 = time.monotonic()
                    entry = build_map(g, restorer, sys.stdout)
                    if entry is None:
                        continue
                    maps[g] = entry
                    with open(args.map, "w", encoding="utf-8") as fh:
                        json.dump(maps, fh)
                    print(f"[map] {g}: {time.monotonic() - t0:.0f} s", flush=True)
                baseline[g] = sum(r["seconds"] for r in maps[g]["paths"].values())
                continue
            status, dt, tail = run_tests(MAP[g][1], timeout=3600)
            print(f"[baseline] {g}: {status} in {dt:.0f} s {tail.splitlines()[-1] if tail else ''}", flush=True)
            if status != "survived":
                print(f"[baseline] {g}: the tests fail on the unmutated code; group skipped", flush=True)
                continue
            baseline[g] = dt
        for n, (g, m) in enumerate(plan, 1):
            if g not in baseline:
                continue
            tests = MAP[g][1]
            clean_s = baseline[g]
            if select_tests:
                tests, clean_s = select(m, maps[g], tests, by_test=args.select == "tests")
                if not tests:
                    rec = {**asdict(m), "group": g, "status": "unreached", "seconds": 0.0,
                           "detail": "no test file of the group runs this statement",
                           "source_line": (REPO / m.file).read_text().splitlines()[m.line - 1].strip()}
                    del rec["start"], rec["end"]
                    results.append(rec)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print(f"[{n}/{len(plan)}] unreached    0 s  {m.id}", flush=True)
                    continue
            path = REPO / m.file
            restorer.save(path)
            original, _, mtime = restorer.saved[path]
            mutated = original[:m.start] + m.replacement.encode() + original[m.end:]
            try:
                ast.parse(mutated)
            except SyntaxError:
                print(f"[{n}/{len(plan)}] {m.id}: not valid Python, skipped", flush=True)
                continue
            path.write_bytes(mutated)
            # a timestamp no other version of the file had: no stale bytecode is ever used
            stamp = mtime + (1000 + n) * 1_000_000_000
            os.utime(path, ns=(stamp, stamp))
            limit = args.timeout or max(60.0, 3 * clean_s)
            status, dt, detail = run_tests(tests, timeout=limit)
            if status in ("error", "no-tests") and select_tests and any("::" in t for t in tests):
                # a test id pytest does not take back (an odd parameter id): the files it is in, whole
                tests, clean_s = select(m, maps[g], MAP[g][1], by_test=False)
                status, dt2, detail = run_tests(tests, timeout=max(60.0, 3 * clean_s))
                dt += dt2
            restorer.restore()
            rec = {**asdict(m), "group": g, "status": status, "seconds": round(dt, 1), "detail": detail,
                   "source_line": original.decode().splitlines()[m.line - 1].strip(), "tests": len(tests)}
            del rec["start"], rec["end"]
            results.append(rec)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"[{n}/{len(plan)}] {status:8s} {dt:5.0f} s  {m.id}", flush=True)
    except (KeyboardInterrupt, SystemExit):
        print("interrupted", file=sys.stderr)
    finally:
        _stop_running()
        restorer.restore()
        out.close()
    print()
    results_all = results
    results = [r for r in results_all if r["status"] in ("killed", "timeout", "survived", "unreached")]
    if len(results) < len(results_all):
        print(f"{len(results_all) - len(results)} mutants not judged (error or no tests): see {args.out}")
    print(f"{'group':24s} {'mutants':>7s} {'killed':>6s} {'timeout':>7s} {'survived':>8s} {'(unreached)':>11s}")
    for g in groups:
        rs = [r for r in results if r["group"] == g]
        k = sum(r["status"] == "killed" for r in rs)
        t = sum(r["status"] == "timeout" for r in rs)
        s = sum(r["status"] in ("survived", "unreached") for r in rs)
        u = sum(r["status"] == "unreached" for r in rs)
        print(f"{g:24s} {len(rs):7d} {k:6d} {t:7d} {s:8d} {u:11d}")
    survivors = [r for r in results if r["status"] in ("survived", "unreached")]
    total = len(results)
    if total:
        print(f"\nkill rate {100 * (total - len(survivors)) / total:.1f} % of {total} mutants "
              f"(before survivors judged equivalent are set aside)")
    for r in survivors:
        tag = "UNREACHED" if r["status"] == "unreached" else "SURVIVED"
        print(f"{tag} {r['id']}    {r['source_line']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
