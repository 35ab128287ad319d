"""joulectl's CRDs (examples/k8s/crds/) against what joulectl prints, and built-in kinds against
the Kubernetes API's own schemas (kubernetes-validate, strict).

The API server prunes every field a structural schema does not declare: each object joulectl
prints must validate against its CRD and lose nothing to pruning. The CRDs must stay a compatible
superset of Joulie's (every field of Joulie's schema, same type).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "examples" / "k8s" / "crds"
JOULIE = REPO / "tests" / "fixtures" / "crds"
REGEN = "regenerate with `python scripts/gen_crds.py` and review the diff"
K8S_VERSION = "1.30.0"


def _crd(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def _jsonschema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 ``nullable`` as JSON Schema (a null type beside the declared one)."""
    out = copy.deepcopy(schema)

    def fix(s: dict[str, Any]) -> None:
        if s.pop("nullable", False) and "type" in s:
            s["type"] = [s["type"], "null"]
        for sub in s.get("properties", {}).values():
            fix(sub)
        if isinstance(s.get("items"), dict):
            fix(s["items"])
        if isinstance(s.get("additionalProperties"), dict):
            fix(s["additionalProperties"])

    fix(out)
    return out


def pruned(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[str]:
    """The paths the API server would prune from ``value`` (fields the schema does not declare)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                yield from pruned(props[key], item, f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from pruned(extra, item, f"{path}.{key}")
            else:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from pruned(schema["items"], item, f"{path}[{i}]")


def _joulectl(*args: str) -> Any:
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    proc = subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode in (0, 5), proc.stderr
    return proc.stdout


def _check(crd_name: str, objs: list[dict[str, Any]]) -> None:
    crd = _crd(OURS / f"joulie.io_{crd_name}.yaml")
    schema = _schema(crd)
    validator = jsonschema.Draft7Validator(_jsonschema(schema))
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    for obj in objs:
        # apiVersion, kind and metadata (ObjectMeta) are the API server's: validated, never pruned.
        errors = sorted(validator.iter_errors(obj), key=str)
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        assert not errors, f"{obj['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}: {REGEN}"
        lost = list(pruned(schema, body))
        assert not lost, f"{obj['metadata']['name']}: the API server would prune {lost[:5]}: {REGEN}"


def test_every_node_hardware_keeps_every_field(all_trees: dict[str, Path]) -> None:
    objs = [json.loads(_joulectl("--root", str(tree), "discover", "-o", "json")) for tree in all_trees.values()]
    assert len(objs) >= 10
    _check("nodehardwares", objs)


@pytest.mark.parametrize("extra", [
    [], ["--policy", "queue-aware"], ["--absolute-caps", "--gpu-governor", "eco=efficient"],
])
def test_every_node_twin_keeps_every_field(extra: list[str]) -> None:
    out = json.loads(_joulectl("plan", str(REPO / "examples" / "cluster.yaml"), "-o", "json", *extra))
    objs = out if isinstance(out, list) else out.get("items", [out])
    assert objs
    _check("nodetwins", objs)
    if "--gpu-governor" in extra:
        assert any(o["spec"].get("gpu", {}).get("governor") == "efficient" for o in objs)


def _paths(schema: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, sub in schema.get("properties", {}).items():
        p = f"{prefix}.{key}"
        out[p] = sub.get("type", "")
        out.update(_paths(sub, p))
    if isinstance(schema.get("items"), dict):
        out.update(_paths(schema["items"], prefix + "[]"))
    return out


@pytest.mark.parametrize("name", ["nodehardwares", "nodetwins"])
def test_our_crds_are_a_superset_of_joulies(name: str) -> None:
    theirs = _crd(JOULIE / f"joulie.io_{name}.yaml")
    ours = _crd(OURS / f"joulie.io_{name}.yaml")
    assert (ours["spec"]["group"], ours["spec"]["names"], ours["spec"]["scope"]) == (
        theirs["spec"]["group"], theirs["spec"]["names"], theirs["spec"]["scope"])
    assert ours["spec"]["versions"][0]["name"] == theirs["spec"]["versions"][0]["name"]
    mine = _paths(_schema(ours))
    for path, kind in _paths(_schema(theirs)).items():
        assert path in mine, f"{path} of Joulie's schema is missing"
        assert mine[path] == kind or (kind, mine[path]) == ("integer", "number"), path


@pytest.mark.parametrize("name", ["nodehardwares", "nodetwins"])
def test_printer_columns_name_declared_fields(name: str) -> None:
    crd = _crd(OURS / f"joulie.io_{name}.yaml")
    paths = _paths(_schema(crd))
    cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert cols
    for col in cols:
        jp = col["jsonPath"]
        if jp.startswith(".metadata."):
            continue
        assert jp in paths, jp
        assert {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}.get(
            paths[jp], "") in (col["type"], "integer" if col["type"] == "number" else ""), jp


def test_render_nodes_validate_strictly_as_kubernetes_nodes(tmp_path: Path) -> None:
    text = _joulectl("simulate", "render-nodes", str(REPO / "examples" / "sim" / "all-profiles.yaml"))
    doc = yaml.safe_load(text)
    assert doc["kind"] == "List"
    for node in doc["items"]:
        kubernetes_validate.validate(node, K8S_VERSION, strict=True)
    info = doc["items"][0]["status"]["nodeInfo"]
    assert len(info["machineID"]) == 32
    # The ids are the same every render (a re-apply changes nothing).
    again = yaml.safe_load(_joulectl("simulate", "render-nodes", str(REPO / "examples" / "sim" / "all-profiles.yaml")))
    assert again["items"][0]["status"]["nodeInfo"] == info


def test_a_pruned_field_is_found() -> None:
    """The pruning check itself, on a literal schema."""
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}},
                                               "m": {"type": "object", "additionalProperties": {"type": "string"}},
                                               "l": {"type": "array", "items": {"type": "object", "properties": {
                                                   "x": {"type": "integer"}}}}}}
    value = {"a": {"b": "ok", "c": 1}, "m": {"any": "thing"}, "l": [{"x": 1}, {"x": 2, "y": 3}], "z": True}
    assert list(pruned(schema, value)) == [".a.c", ".l[1].y", ".z"]
