"""plan and schedule-check give the recorded outputs on the 1,000-node golden case (issue 20:
results identical before and after the speed work). Regenerate with
``python tests/golden/fleet1000.py write`` only for an intended change of output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.golden import fleet1000

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, int]]:
    return fleet1000.outputs(fleet1000.write_inputs(tmp_path_factory.mktemp("golden")))


def _gz(name: str) -> str:
    with gzip.open(fleet1000.DATA / name, "rt", encoding="utf-8") as fh:
        return fh.read()


NAMES = ("plan-spec.json", "plan-nodes.json", "plan-nodes-table.txt", "schedule-check.json")


@pytest.mark.parametrize("name", NAMES)
def test_output_is_the_recorded_one(results: dict[str, tuple[str, int]], name: str) -> None:
    text, code = results[name]
    expected = _gz(f"{name}.gz")
    codes = json.loads((fleet1000.DATA / "exit-codes.json").read_text())
    assert code == codes[name]
    if text != expected:
        old, new = expected.splitlines(), text.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        shown = "\n".join(f"- {a}\n+ {b}" for a, b in zip(old[first:first + 8], new[first:first + 8], strict=False))
        pytest.fail(f"output differs from the golden record from line {first + 1} "
                    f"({len(old)} lines recorded, {len(new)} now):\n{shown}")


def test_the_golden_case_is_what_it_claims() -> None:
    """1,000 nodes, 60 pods; the recorded schedule-check covers every node for every pod."""
    spec = fleet1000.cluster_spec()
    assert sum(p["count"] for p in spec["spec"]["pools"]) == 1000
    doc = json.loads(_gz("schedule-check.json.gz"))
    assert len(doc["pods"]) == 60
    assert {len(p["nodes"]) for p in doc["pods"]} == {1000}
    assert doc["summary"] == {"pods": 60, "feasible": 55, "unschedulable": 5}
    plan = json.loads(_gz("plan-spec.json.gz"))
    assert len(plan["items"]) == 990  # the 10 reserved nodes are not planned


def test_inputs_are_deterministic(tmp_path: Path) -> None:
    a = fleet1000.write_inputs(tmp_path)
    first = {k: p.read_bytes() for k, p in a.items()}
    again = tmp_path / "again"
    again.mkdir()
    b = fleet1000.write_inputs(again)
    assert {k: p.read_bytes() for k, p in b.items()} == first
