"""The modules of ``joulectl/ops`` import one another without a cycle (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import joulectl.ops

OPS = Path(joulectl.ops.__file__).parent


def _imports(path: Path) -> set[str]:
    """The ``joulectl.ops.*`` modules a file imports anywhere (top level or inside a function)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            names = [str(node.args[0].value)]
        out |= {n.split(".")[2] for n in names if n.startswith("joulectl.ops.") and n.count(".") >= 2}
    return out


def test_no_import_cycle_in_ops() -> None:
    graph = {p.stem: _imports(p) - {p.stem} for p in OPS.glob("*.py")}
    assert {"cap", "schedule"} <= set(graph)
    assert "cap" not in graph["schedule"]  # the cycle issue 16 names

    def visit(node: str, trail: tuple[str, ...]) -> None:
        assert node not in trail, f"import cycle: {' -> '.join((*trail, node))}"
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, (*trail, node))

    for name in sorted(graph):
        visit(name, ())
