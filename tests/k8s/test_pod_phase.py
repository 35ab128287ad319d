"""PodRef carries the phase and the terminating flag of a Pod (used by plan's draining guard)."""

from __future__ import annotations

from joulectl import k8s


def test_pod_phase_and_deleting() -> None:
    doc = {
        "kind": "Pod",
        "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running"},
    }
    (pod,) = k8s.iter_pods(doc)
    assert (pod.phase, pod.deleting) == ("Running", True)


def test_template_has_no_phase() -> None:
    doc = {
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": []}}},
        "status": {"phase": "Running"},
    }
    (pod,) = k8s.iter_pods(doc)
    assert (pod.phase, pod.deleting, pod.replicas) == ("", False, 3)


def test_pod_without_status() -> None:
    (pod,) = k8s.iter_pods({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    assert (pod.phase, pod.deleting) == ("", False)
