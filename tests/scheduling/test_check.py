"""The check itself: twins matched to nodes, best node, document layout, readers."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from joulectl.errors import InputError
from joulectl.scheduling.check import check, load_hardware, load_twins, match_twins, pods_from_documents, to_document

NOW = datetime(2026, 3, 13, 12, 1, tzinfo=timezone.utc)


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "8"}}}


def _twin(obj: str, node: str | None, headroom: float) -> dict[str, Any]:
    spec = {"nodeName": node, "profile": "performance"} if node else {"profile": "performance"}
    return {"apiVersion": "joulie.io/v1alpha1", "kind": "NodeTwin", "metadata": {"name": obj}, "spec": spec,
            "status": {"schedulableClass": "performance", "predictedPowerHeadroomScore": headroom,
                       "lastUpdated": "2026-03-13T12:00:00Z"}}


def test_twins_match_by_node_name_then_sanitized_object_name() -> None:
    nodes = [_node("Node_A/1"), _node("b"), _node("c")]
    twins = [_twin("node-a-1", None, 10), _twin("whatever", "b", 20)]
    matched = match_twins(nodes, twins)
    assert matched["Node_A/1"]["metadata"]["name"] == "node-a-1"
    assert matched["b"]["metadata"]["name"] == "whatever"
    assert "c" not in matched


def test_best_node_and_document() -> None:
    docs = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
        "joulie.io/workload-class": "performance"}}, "spec": {"containers": [{"name": "c"}]}}]
    demands, skipped = pods_from_documents(docs, "pods.yaml")
    assert skipped == []
    nodes = [_node("z"), _node("y"), _node("x")]
    twins = [_twin("z", "z", 100), _twin("y", "y", 100), _twin("x", "x", 0)]
    (verdict,) = check(demands, nodes, twins, NOW)
    assert verdict.best_node == "y"  # y and z tie at 85: the first name wins
    assert [n.node for n in verdict.nodes] == ["x", "y", "z"]
    assert [n.score for n in verdict.nodes] == [15, 85, 85]
    doc = to_document([verdict], NOW)
    assert doc["metadata"] == {"generatedAt": "2026-03-13T12:01:00Z"}
    pod = doc["pods"][0]
    assert list(pod)[:4] == ["name", "namespace", "kind", "source"]
    assert {"name", "namespace", "class", "gpuRequest", "feasible", "bestNode", "nodes"} <= set(pod)
    assert set(pod["nodes"][0]) == {"node", "fits", "reason", "score"}
    assert "notes" not in pod


def test_lists_and_kinds_of_pod_documents() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 4, "template": {"spec": {"containers": [{"name": "c"}]}}}}
    docs = [{"apiVersion": "v1", "kind": "List", "items": [job, {"apiVersion": "v1", "kind": "Secret",
                                                                  "metadata": {"name": "s"}}]}]
    demands, skipped = pods_from_documents(docs, "f.yaml")
    assert [(d.pod.kind, d.name, d.pod.replicas) for d in demands] == [("Job", "j", 4)]
    assert skipped == ["f.yaml: document: Secret s carries no pod; skipped"]
    broken = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    with pytest.raises(InputError) as err:
        pods_from_documents([job, broken], "f.yaml")
    assert str(err.value) == "f.yaml: document 2: Deployment d: no pod template spec"


def test_readers(tmp_path: Path) -> None:
    twins = tmp_path / "twins.yaml"
    twins.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    assert load_twins(str(twins)) == []  # no twins yet: every node scores 50
    hw = tmp_path / "hw.yaml"
    hw.write_text("apiVersion: joulie.io/v1alpha1\nkind: NodeHardware\nmetadata: {name: gpu-node-01}\n"
                  "spec: {nodeName: GPU_Node_01}\nstatus: {}\n")
    assert list(load_hardware(str(hw))) == ["GPU_Node_01"]
    twins.write_text("apiVersion: joulie.io/v1alpha1\nkind: NodeTwin\nspec: {profile: eco}\n")
    with pytest.raises(InputError) as err:
        load_twins(str(twins))
    assert str(err.value) == f"{twins}: document: NodeTwin without metadata.name"
