"""scripts/mutate.py: the mutants it makes of a small module, written out."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

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
