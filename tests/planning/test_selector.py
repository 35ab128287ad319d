"""Issue 15 item 4: ``plan --selector`` takes Kubernetes label selectors (kubectl -l) or exits 2,
never silently selecting nothing for a valid expression."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulectl.planning.selector import Requirement, SelectorError, parse

NODE = {"zone": "a", "tier": "gpu", "gen": "5", "node-role.kubernetes.io/worker": "", "example.com/pool": "x"}


@pytest.mark.parametrize(("selector", "matches"), [
    ("zone", True), ("!zone", False), ("!missing", True), ("missing", False),
    ("zone=a", True), ("zone==a", True), ("zone=b", False), ("zone!=b", True), ("zone!=a", False),
    ("missing!=a", True),
    ("zone in (a,b)", True), ("zone in (b, c)", False), ("zone notin (b,c)", True), ("zone notin (a)", False),
    ("missing notin (a)", True), ("missing in (a)", False),
    ("gen>4", True), ("gen>5", False), ("gen<6", True), ("zone>1", False), ("missing<1", False),
    ("node-role.kubernetes.io/worker", True), ("node-role.kubernetes.io/worker=", True),
    ("example.com/pool in (x,y),tier=gpu,!spot", True), ("zone=a,tier=cpu", False),
    (" zone = a , tier in ( gpu ) ", True), ("zone in (a,),tier", True),
])
def test_grammar(selector: str, matches: bool) -> None:
    requirements = parse([selector])
    assert all(r.matches(NODE) for r in requirements) is matches


def test_parsed_form() -> None:
    assert parse(["zone in (b,a,a)", "!spot", "x!=1", "gen>3"]) == (
        Requirement("zone", "in", ("a", "b")), Requirement("spot", "!exists"), Requirement("x", "!=", ("1",)),
        Requirement("gen", ">", ("3",)))


@pytest.mark.parametrize(("selector", "message"), [
    ("=x", "a requirement has no key in '=x'"),
    ("zone in (a,b", "missing ')' in 'zone in (a,b'"),
    ("zone in a,b)", "')' without '(' in 'zone in a,b)'"),
    ("zone in ()", "in needs at least one value in 'zone in ()'"),
    ("zone notin ((a))", "nested '(' in 'zone notin ((a))'"),
    ("zone,,tier", "an empty requirement in 'zone,,tier'"),
    ("zone = a b", "'a b' is not a valid label value in 'zone = a b'"),
    ("gen>x", "> needs an integer, got 'x' in 'gen>x'"),
    ("bad key!", "cannot parse 'bad key!' (expected key, !key, key=value, key!=value, key in (a,b), "
                 "key notin (a,b)) in 'bad key!'"),
    ("zone exists", "cannot parse 'zone exists' (expected key, !key, key=value, key!=value, key in (a,b), "
                    "key notin (a,b)) in 'zone exists'"),
    ("Example.com/x=1", "'Example.com/x' is not a valid label key in 'Example.com/x=1'"),
    ("-zone", "'-zone' is not a valid label key in '-zone'"),
])
def test_what_cannot_be_parsed_is_an_error(selector: str, message: str) -> None:
    with pytest.raises(SelectorError) as e:
        parse([selector])
    assert str(e.value) == message


def _nodes(tmp_path: Path) -> Path:
    def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "8"}}}

    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        node("a-0", {"zone": "a", "tier": "gpu"}), node("b-0", {"zone": "b", "tier": "cpu"}),
        node("c-0", {"zone": "c", "spot": "true"})]}))
    return path


@pytest.mark.parametrize(("selectors", "planned"), [
    (["zone in (a,b)"], ["a-0", "b-0"]),
    (["zone notin (a)"], ["b-0", "c-0"]),
    (["!spot"], ["a-0", "b-0"]),
    (["tier!=gpu"], ["b-0", "c-0"]),
    (["zone in (a,b,c)", "!tier"], ["c-0"]),  # repeated flags: all must hold
    (["zone in (a,b),tier=cpu"], ["b-0"]),
])
def test_plan_selects_by_set_based_selectors(cli: Callable[..., Any], tmp_path: Path, selectors: list[str],
                                             planned: list[str]) -> None:
    args = [a for s in selectors for a in ("--selector", s)]
    r = cli("plan", "--nodes", str(_nodes(tmp_path)), "-o", "json", *args)
    assert r.exit_code == 0, r.stderr
    assert [t["spec"]["nodeName"] for t in json.loads(r.stdout)["items"]] == planned


def test_a_node_left_out_says_which_requirement(cli: Callable[..., Any], tmp_path: Path) -> None:
    nodes = str(_nodes(tmp_path))
    r = cli("plan", "--nodes", nodes, "--selector", "zone in (a,b,c),!spot,tier", "-o", "json")
    assert [t["spec"]["nodeName"] for t in json.loads(r.stdout)["items"]] == ["a-0", "b-0"]
    r = cli("plan", "--nodes", nodes, "--selector", "zone in (a,b,c),!spot,tier")
    assert "c-0     does not match the selector !spot\n" in r.stdout  # the first requirement it fails
    r = cli("plan", "--nodes", nodes, "--selector", "tier in (gpu)")
    assert "c-0     does not match the selector (no label tier)\n" in r.stdout
    assert "b-0     does not match the selector tier in (gpu)\n" in r.stdout


def test_bad_selector_exits_2(cli: Callable[..., Any], tmp_path: Path) -> None:
    r = cli("plan", "--nodes", str(_nodes(tmp_path)), "--selector", "zone in (a,b")
    assert (r.exit_code, r.stderr.strip()) == (2, "joulectl: error: --selector: missing ')' in 'zone in (a,b'")
    assert r.stdout == ""
