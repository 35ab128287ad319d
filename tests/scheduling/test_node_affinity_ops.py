"""Required node affinity operators, a truth table written from the Kubernetes API reference
(NodeSelectorRequirement: In, NotIn, Exists, DoesNotExist, Gt, Lt; Gt/Lt take one integer).
Written for a mutant that survived the scheduling tests (docs/TESTING.md)."""

from __future__ import annotations

from typing import Any

import pytest

from joulectl.scheduling.filters import _expression_matches

LABELS = {"zone": "a", "gen": "5"}


@pytest.mark.parametrize(("expr", "matches"), [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ({"key": "zone", "operator": "In", "values": ["b"]}, False),
    ({"key": "rack", "operator": "In", "values": ["a"]}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
    ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
    ({"key": "rack", "operator": "NotIn", "values": ["a"]}, True),
    ({"key": "zone", "operator": "Exists"}, True),
    ({"key": "rack", "operator": "Exists"}, False),
    ({"key": "zone", "operator": "DoesNotExist"}, False),
    ({"key": "rack", "operator": "DoesNotExist"}, True),
    ({"key": "gen", "operator": "Gt", "values": ["4"]}, True),
    ({"key": "gen", "operator": "Gt", "values": ["5"]}, False),
    ({"key": "gen", "operator": "Lt", "values": ["6"]}, True),
    ({"key": "gen", "operator": "Lt", "values": ["5"]}, False),
    ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),  # not an integer
    ({"key": "rack", "operator": "Gt", "values": ["1"]}, False),  # no such label: no match
    ({"key": "rack", "operator": "Lt", "values": ["9"]}, False),
    ({"key": "gen", "operator": "Lt", "values": ["6", "7"]}, False),  # Gt/Lt take exactly one value
    ({"key": "gen", "operator": "Eq", "values": ["6"]}, False),  # no such operator
    ({"key": "gen", "operator": "lt", "values": ["6"]}, False),  # operators are case-sensitive
])
def test_label_expression(expr: dict[str, Any], matches: bool) -> None:
    assert _expression_matches(expr, LABELS, "node-1", False) is matches


@pytest.mark.parametrize(("expr", "matches"), [
    ({"key": "metadata.name", "operator": "In", "values": ["node-1"]}, True),
    ({"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}, False),
])
def test_field_expression(expr: dict[str, Any], matches: bool) -> None:
    assert _expression_matches(expr, LABELS, "node-1", True) is matches
