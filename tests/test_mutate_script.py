"""scripts/mutate.py: the mutants it makes of a small module, written out."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

SOURCE = '''"""Docstring: 1 < 2 is not mutated."""


def f(a: int, b: int = 3) -> int:
    if a < b and not (b == 0):  # a comment with or and < in it
        return max(a, b) + 1
    return a * b if a is not None else -a
'''


def _module():
    spec = importlib.util.spec_from_file_location("mutate", REPO / "scripts" / "mutate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_mutants_of_a_small_module(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    mutate = _module()
    mutants = mutate.mutants_of(str(path))
    got = [(m.line, m.desc) for m in mutants]
    assert got == [
        (4, "3->4"),            # the default, not the annotation
        (5, "<-><="), (5, "and->or"), (5, "drop_not"), (5, "==->!="), (5, "0->1"),
        (6, "max->min"), (6, "+->-"), (6, "1->2"),
        (7, "*->/"), (7, "is_not->is"),
    ]
    src = path.read_bytes()
    texts = []
    for m in mutants:
        mutated = src[:m.start] + m.replacement.encode() + src[m.end:]
        ast.parse(mutated)  # every mutant is valid Python
        texts.append(mutated.decode().splitlines()[m.line - 1].strip())
    assert texts[3] == "if a < b and (b == 0):  # a comment with or and < in it"
    assert texts[7] == "return max(a, b) - 1"
    assert texts[10] == "return a * b if a is None else -a"


TRACED = '''"""A module the map's tracer runs in a child process started with -S."""
from __future__ import annotations

import os
import threading


def f(x: int) -> int:
    if x > 1:
        return x * 2
    return x


def never() -> int:
    return 1


t = threading.Thread(target=f, args=(5,))
t.start()
t.join()
f(1)
os._exit(0)
'''


def _tracer_files(tmp_path: Path, mutate: Any) -> tuple[Path, Path]:
    """The map tracer's hook module and the directory its processes report to."""
    hook = tmp_path / "hook.py"
    hook.write_text(mutate.HOOK)
    out = tmp_path / "out"
    out.mkdir()
    return hook, out


def test_the_map_tracer_reports_the_lines_each_process_runs(tmp_path: Path) -> None:
    # f(5) in a thread runs line 10, f(1) line 11; never() is defined (line 14) but line 15 never
    # runs; the module's own lines run; a process ended by os._exit has told already
    import subprocess

    mutate = _module()
    hook, out = _tracer_files(tmp_path, mutate)
    mod = tmp_path / "m.py"
    mod.write_bytes(mutate.instrumented(TRACED.encode(), str(hook), str(out), "m"))
    assert mod.read_text().splitlines()[1].startswith("from __future__ import annotations; exec(")
    subprocess.run([sys.executable, "-S", str(mod)], check=True, timeout=60)
    rows = [row.split("\t") for rec in out.glob("m.*") for row in rec.read_text().splitlines()]
    assert {int(n) for _, n in rows} == {4, 5, 8, 9, 10, 11, 14, 18, 19, 20, 21, 22}
    # the child inherited this test's PYTEST_CURRENT_TEST
    assert {tag for tag, _ in rows} == {
        "C tests/test_mutate_script.py::test_the_map_tracer_reports_the_lines_each_process_runs"}


def test_a_mutant_is_reached_through_the_first_line_of_its_statement() -> None:
    mutate = _module()
    spans = mutate.statement_spans(b"def f(a, b):\n    return (a <\n            b)\n")
    assert spans == [(1, 3), (2, 3)]
    assert list(mutate.reach_lines(mutate.Mutant("m.py:2:14:<-><=", "m.py", 2, "<-><=", 0, 0, ""), spans)) == [2]
    assert list(mutate.reach_lines(mutate.Mutant("m.py:3:12:x", "m.py", 3, "x", 0, 0, ""), spans)) == [2, 3]


def test_two_instrumented_modules_in_one_process_are_both_traced(tmp_path: Path) -> None:
    # each module's hook used to install its own tracer, the last one replacing the others: only
    # the last module imported had its function bodies recorded
    import subprocess

    mutate = _module()
    hook, out = _tracer_files(tmp_path, mutate)
    a = b'from __future__ import annotations\n\n\ndef fa(x: int) -> int:\n    return x + 1\n'
    b = b'from __future__ import annotations\n\n\ndef fb(x: int) -> int:\n    return x - 1\n'
    (tmp_path / "ma.py").write_bytes(mutate.instrumented(a, str(hook), str(out), "ma"))
    (tmp_path / "mb.py").write_bytes(mutate.instrumented(b, str(hook), str(out), "mb"))
    subprocess.run([sys.executable, "-S", "-c", "import ma, mb; ma.fa(1); mb.fb(1)"], cwd=tmp_path, check=True,
                   timeout=60, env={"PYTHONDONTWRITEBYTECODE": "1"})
    for name in ("ma", "mb"):
        lines = {int(row.rpartition("\t")[2]) for rec in out.glob(f"{name}.*") for row in rec.read_text().splitlines()}
        assert lines == {4, 5}, name


def test_a_child_tags_its_lines_with_the_test_it_inherited(tmp_path: Path) -> None:
    import subprocess

    mutate = _module()
    hook, out = _tracer_files(tmp_path, mutate)
    source = b'from __future__ import annotations\n\n\ndef fa(x: int) -> int:\n    return x + 1\n'
    (tmp_path / "ma.py").write_bytes(mutate.instrumented(source, str(hook), str(out), "ma"))
    for current in ["tests/t.py::test_a[x y] (call)", "tests/t.py::test_b (setup)"]:
        subprocess.run([sys.executable, "-S", "-c", "import ma; ma.fa(1)"], cwd=tmp_path, check=True, timeout=60,
                       env={"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_CURRENT_TEST": current})
    rows = {row for rec in out.glob("ma.*") for row in rec.read_text().splitlines()}
    assert rows == {"C tests/t.py::test_a[x y]\t4", "C tests/t.py::test_a[x y]\t5",
                    "S tests/t.py::test_b\t4", "S tests/t.py::test_b\t5"}


MODULE = b'''from __future__ import annotations

TABLE = {"a": 1}


def f(x: int) -> int:
    if x > 1:
        return x * 2
    return x


def g() -> int:
    return TABLE["a"]
'''

TESTS = '''import pytest


@pytest.fixture(scope="module")
def shared():
    import mm
    return mm.f(3)


def test_one():
    import mm
    assert mm.f(1) == 1


def test_two():
    import mm
    assert mm.f(5) == 10


def test_three(shared):
    assert shared == 6


def test_four():
    import mm
    assert mm.g() == 1
'''


def test_the_map_tags_each_line_with_the_test_whose_call_ran_it(tmp_path: Path) -> None:
    # a pytest run with the map's plugin: f's body in test_one's and test_two's calls only;
    # the module's top level ran at test_one's import ("I": a whole file), f's `x * 2` also in
    # the module-scoped fixture's setup ("S": a whole file)
    import os
    import subprocess

    mutate = _module()
    hook, out = _tracer_files(tmp_path, mutate)
    (tmp_path / "mutmap_plugin.py").write_text(mutate.PLUGIN)
    (tmp_path / "mm.py").write_bytes(mutate.instrumented(MODULE, str(hook), str(out), "mm"))
    (tmp_path / "test_mm.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MUTMAP_OUT": str(out), "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutmap_plugin",
                    "test_mm.py"], cwd=tmp_path, env=env, check=True, timeout=120, capture_output=True)
    rec = mutate.read_records(out, ["mm"])
    assert rec["hits"]["mm"] == [3, 6, 7, 8, 9, 12, 13]  # line 1 ran before its tracer
    assert rec["whole"]["mm"] == [3, 6, 7, 8, 12]
    calls = {int(n): sorted(rec["tests"][i].split("::")[1] for i in ix) for n, ix in rec["calls"]["mm"].items()}
    # a call event reports the def line too
    assert calls == {6: ["test_one", "test_two"], 7: ["test_one", "test_two"], 8: ["test_two"], 9: ["test_one"],
                     12: ["test_four"], 13: ["test_four"]}
    assert len(rec["durations"]) == len(rec["tests"]) == 3


def test_a_mutant_runs_the_tests_whose_call_reached_it_or_whole_files() -> None:
    mutate = _module()
    entry = {"paths": {"tests/a.py": {
        "sha": "x", "seconds": 9.0, "hits": {"m.py": [2, 3, 4]}, "whole": {"m.py": [2]},
        "calls": {"m.py": {"3": [0, 1], "4": [1]}}, "tests": ["tests/a.py::t1", "tests/a.py::t2"],
        "durations": [0.5, 1.5]}}}
    mutate.SPANS["m.py"] = [(3, 3), (4, 4), (2, 2)]
    mutate._digest = lambda paths: "x"
    m = mutate.Mutant
    assert mutate.select(m("m.py:4:0:x", "m.py", 4, "x", 0, 0, ""), entry, ["tests/a.py"]) == (
        ["tests/a.py::t2"], mutate.FILE_OVERHEAD_S + 1.5)
    assert mutate.select(m("m.py:3:0:x", "m.py", 3, "x", 0, 0, ""), entry, ["tests/a.py"])[0] == [
        "tests/a.py::t1", "tests/a.py::t2"]
    assert mutate.select(m("m.py:2:0:x", "m.py", 2, "x", 0, 0, ""), entry, ["tests/a.py"]) == (["tests/a.py"], 9.0)
    assert mutate.select(m("m.py:4:0:x", "m.py", 4, "x", 0, 0, ""), entry, ["tests/a.py"], by_test=False) == (
        ["tests/a.py"], 9.0)
    assert mutate.select(m("m.py:5:0:x", "m.py", 5, "x", 0, 0, ""), entry, ["tests/a.py"]) == ([], 0.0)


def test_a_map_is_remade_for_the_shared_files_its_tests_can_load_only(tmp_path: Path) -> None:
    mutate = _module()
    for rel in ("joulectl/m.py", "tests/a/test_x.py", "tests/a/conftest.py", "tests/b/conftest.py",
                "tests/conftest.py", "tests/fixtures/data.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("0\n")
    mutate.REPO = tmp_path
    mutate.MAP = {"g": (["joulectl/m.py"], ["tests/a"])}
    before = mutate.map_key("g")
    (tmp_path / "tests/b/conftest.py").write_text("1\n")  # pytest never loads it for tests/a
    (tmp_path / "tests/a/test_x.py").write_text("1\n")    # its own run reads it (a sha of its own)
    assert mutate.map_key("g") == before
    for rel in ("tests/conftest.py", "tests/a/conftest.py", "tests/fixtures/data.txt", "joulectl/m.py"):
        (tmp_path / rel).write_text("1\n")
        assert mutate.map_key("g") != before, rel
        (tmp_path / rel).write_text("0\n")
