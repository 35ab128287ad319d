"""Issue 15 item 2: HAMi's card-level fit as fitInCertainDevice does it (seed
gpu-type-and-uuid-scheduling.txt; HAMi v2.4 score.go and policy). Every expected value is worked
out by hand in the comments: card order after the policy sort, the walk from the last card, and
the usage each container leaves behind."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from joulectl.k8s import HamiGpu, iter_pods
from joulectl.scheduling.check import check, running_pods_by_node
from joulectl.scheduling.demand import pod_demand
from joulectl.scheduling.filters import filter_reasons, node_view
from joulectl.scheduling.hami import ContainerRequest, Selection, cards_of, decode_allocated, fit_pod

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
# the seed's register: two A40 of 46068 MiB, split 10, 100 cores
A40_0 = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
A40_1 = "GPU-1afede84-4e70-2174-49af-f07ebb94d1ae"
SEED_REGISTER = (f"{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,true:"
                 f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true:")


def _node(name: str, register: str | None, gpus: int = 20, cpu: str = "64") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {}}
    if register is not None:
        meta["annotations"] = {"hami.io/node-nvidia-register": register}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"allocatable": {"cpu": cpu, "memory": "512Gi", "nvidia.com/gpu": str(gpus)}}}


def _pod_doc(name: str, *containers: dict[str, Any], annotations: dict[str, str] | None = None,
             node: str | None = None, phase: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "resources": {"limits": c}}
                                           for i, c in enumerate(containers)]}
    if node:
        spec["nodeName"] = node
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
                           "spec": spec}
    if phase:
        doc["status"] = {"phase": phase}
    return doc


def _demand(*containers: dict[str, Any], annotations: dict[str, str] | None = None) -> Any:
    (ref,) = iter_pods(_pod_doc("p", *containers, annotations=annotations))
    return pod_demand(ref, "pod.yaml")


def _running(*docs: dict[str, Any]) -> list[Any]:
    return [ref for d in docs for ref in iter_pods(d)]


def _allocated(uuid: str, mem: int, cores: int) -> dict[str, str]:
    return {"hami.io/vgpu-devices-allocated": f"{uuid},NVIDIA,{mem},{cores}:;"}


def test_the_issue_case_90000_mib_on_a_46_gb_card() -> None:
    view = node_view(_node("a40-0", SEED_REGISTER))
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 90000}), view) == [
        "HAMi: no card with 90000 MiB free (largest 46068 MiB)"]
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 46068}), view) == []


def test_vgpus_go_to_distinct_cards_and_never_exceed_them() -> None:
    view = node_view(_node("a40-0", SEED_REGISTER))
    assert filter_reasons(_demand({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000}), view) == []
    assert filter_reasons(_demand({"nvidia.com/gpu": 3, "nvidia.com/gpumem": 1000}), view) == [
        "HAMi: asks for 3 vGPUs, 1000 MiB each, node has 2 cards"]


def test_without_gpumem_a_vgpu_takes_the_whole_card() -> None:
    # one running pod asked for nvidia.com/gpu: 1 only: HAMi's default is 100 % of the card's memory.
    # Equal scores, spread: the order stays, the walk from the last card takes A40_1.
    running = _running(_pod_doc("old", {"nvidia.com/gpu": 1}, node="a40-0"))
    view = node_view(_node("a40-0", SEED_REGISTER), running=running)
    assert [(c.uuid, c.used, c.used_mem) for c in sorted(view.cards, key=lambda c: c.index)] == [
        (A40_0, 0, 0), (A40_1, 1, 46068)]
    assert filter_reasons(_demand({"nvidia.com/gpu": 2}), view) == [
        "HAMi: needs 2 cards for 2 vGPUs, 1 fits: 1 card without 100% of its memory free (largest 0 MiB)"]


def test_cards_used_by_running_pods_and_both_gpu_policies() -> None:
    # A40_1 holds 20000 MiB and 30 cores of a running pod (its vgpu-devices-allocated annotation).
    running = _running(_pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_1, 20000, 30),
                                node="a40-0"))
    nodes = [_node("a40-0", SEED_REGISTER)]
    # request 10000 MiB: scores 10 x (used/10 + cores/100 + mem/46068):
    # A40_0 = 10 x (1/10 + 0 + 10000/46068) = 3.17; A40_1 = 10 x (2/10 + 30/100 + 30000/46068) = 11.51.
    # spread sorts descending [A40_1, A40_0] and walks from the last: A40_0;
    # binpack sorts ascending [A40_0, A40_1]: A40_1, which still has 26068 MiB free.
    spread = pod_demand(next(iter_pods(_pod_doc("s", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000}))), "p")
    binpack = pod_demand(next(iter_pods(_pod_doc("b", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000},
                                                 annotations={"hami.io/gpu-scheduler-policy": "binpack"}))), "p")
    verdicts = check([spread, binpack], nodes, [], NOW, running=running)
    assert verdicts[0].nodes[0].devices == ((A40_0,),)
    assert verdicts[1].nodes[0].devices == ((A40_1,),)
    # 30000 MiB no longer fits A40_1 (26068 free): both policies end on A40_0
    big = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000},
                  annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    assert check([big], nodes, [], NOW, running=running)[0].nodes[0].devices == ((A40_0,),)
    # 40000 MiB on both cards: A40_1 has 26068 free
    two = _demand({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 40000})
    assert check([two], nodes, [], NOW, running=running)[0].nodes[0].reason == (
        "HAMi: needs 2 cards for 2 vGPUs, 40000 MiB each, 1 fits: 1 card without 40000 MiB free (largest 26068 MiB)")


def test_finished_and_other_nodes_pods_use_nothing() -> None:
    pods = _running(
        _pod_doc("done", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_0, 46068, 100), node="a40-0",
                 phase="Succeeded"),
        _pod_doc("elsewhere", {"nvidia.com/gpu": 1}, node="a40-9"),
        _pod_doc("pending-unbound", {"nvidia.com/gpu": 1}),
    )
    assert set(running_pods_by_node(pods)) == {"a40-9"}
    view = node_view(_node("a40-0", SEED_REGISTER), running=running_pods_by_node(pods).get("a40-0", ()))
    assert all(c.used == 0 for c in view.cards)


def test_percentage_of_a_card() -> None:
    running = _running(_pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_0, 30000, 0),
                                node="one"))
    view = node_view(_node("one", f"{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,true:"), running=running)
    # 50 % of 46068 = 23034 MiB, 16068 are free
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}), view) == [
        "HAMi: no card with 50% of its memory free (largest 16068 MiB)"]
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 30}), view) == []


def test_gpucores_clamp_exclusive_and_full_cards() -> None:
    register = f"{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,true:"
    some_cores = node_view(_node("n", register), running=_running(
        _pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_0, 1000, 10), node="n")))
    over = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 150})
    assert over.notes == ("container c0: nvidia.com/gpucores 150 is above 100: clamped to 100, as HAMi does",)
    # clamped to 100; 90 cores are free
    assert filter_reasons(over, some_cores) == ["HAMi: no card with 100% cores free (most 90%)"]
    no_cores = node_view(_node("n", register), running=_running(
        _pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_0, 1000, 0), node="n")))
    exclusive = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 100})
    assert filter_reasons(exclusive, no_cores) == ["HAMi: no unused card (gpucores 100 takes a card alone)"]
    full = node_view(_node("n", register), running=_running(
        _pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_0, 1000, 100), node="n")))
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}), full) == [
        "HAMi: no card with cores left (a request of 0 cores needs some)"]
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10}),
                          full) == ["HAMi: no card with 10% cores free (most 0%)"]


def test_split_count_and_unhealthy_cards() -> None:
    register = f"{A40_0},2,46068,100,NVIDIA-NVIDIA A40,0,true:{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,false:"
    alloc = _allocated(A40_0, 1000, 0)
    view = node_view(_node("n", register), running=_running(
        _pod_doc("a", {"nvidia.com/gpu": 1}, annotations=alloc, node="n"),
        _pod_doc("b", {"nvidia.com/gpu": 1}, annotations=alloc, node="n")))
    assert len(view.cards) == 1  # the unhealthy card is left out
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1}), view) == [
        "HAMi: no card with a free vGPU slot (all 2 used)"]


def test_containers_are_fitted_one_after_the_other() -> None:
    view = node_view(_node("n", f"{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,true:"))
    two = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000},
                  {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000})
    # the first leaves 16068 MiB
    assert filter_reasons(two, view) == ["HAMi: no card with 30000 MiB free (largest 16068 MiB)"]
    fits = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}, {"cpu": "1"},
                   {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 16000})
    assert filter_reasons(fits, view) == []
    (verdict,) = check([fits], [_node("n", f"{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,true:")], [], NOW)
    assert verdict.nodes[0].devices == ((A40_0,), (), (A40_0,))


def test_type_and_uuid_annotations_per_card() -> None:
    mixed = (f"GPU-h0,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,0,true:{A40_0},10,46068,100,NVIDIA-NVIDIA A40,0,"
             "true:")
    view = node_view(_node("n", mixed))
    assert filter_reasons(_demand({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gputype": "a40"}), view) == []
    assert filter_reasons(_demand({"nvidia.com/gpu": 2}, annotations={"nvidia.com/use-gputype": "A40"}), view) == [
        "HAMi: needs 2 cards for 2 vGPUs, 1 fits: 1 card not of type A40 (NVIDIA-NVIDIA H100 80GB HBM3)"]
    assert filter_reasons(_demand({"nvidia.com/gpu": 1}, annotations={"nvidia.com/nouse-gputype": "H100,A40"}),
                          view) == ["HAMi: no card not of type H100|A40 (the node's cards: NVIDIA-NVIDIA A40, "
                                    "NVIDIA-NVIDIA H100 80GB HBM3)"]
    # UUIDs are exact; with use-gpuuuid given, nouse-gpuuuid is not read
    pinned = _demand({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gpuuuid": A40_0,
                                                          "nvidia.com/nouse-gpuuuid": A40_0})
    (verdict,) = check([pinned], [_node("n", mixed)], [], NOW)
    assert verdict.nodes[0].devices == ((A40_0,),)
    assert filter_reasons(_demand({"nvidia.com/gpu": 1}, annotations={"nvidia.com/use-gpuuuid": A40_0[:-1]}),
                          view) == [f"HAMi: no card allowed by use-gpuuuid {A40_0[:-1]}"]


def test_numa_bind_keeps_a_container_on_one_numa_node() -> None:
    cards = cards_of([HamiGpu("g0", 10, 1000, 100, "NVIDIA-X", 0, True),
                      HamiGpu("g1", 10, 1000, 100, "NVIDIA-X", 1, True)])
    request = ContainerRequest(2, 10)
    assert fit_pod([*cards], [request], Selection(), "spread").ok
    # spread order (numa, -score): [g0, g1]; walking from g1 (numa 1), then g0 resets on numa 0
    bound = fit_pod(cards_of([HamiGpu("g0", 10, 1000, 100, "NVIDIA-X", 0, True),
                              HamiGpu("g1", 10, 1000, 100, "NVIDIA-X", 1, True)]),
                    [request], Selection(numa_bind=True), "spread")
    assert not bound.ok


def test_node_policy_binpack_and_spread() -> None:
    # a40-0 has 20000 MiB and 30 cores used on one card: node score 10 x (1/20 + 30/200 + 20000/92136) = 4.17
    running = _running(_pod_doc("old", {"nvidia.com/gpu": 1}, annotations=_allocated(A40_1, 20000, 30),
                                node="a40-0"))
    nodes = [_node("a40-0", SEED_REGISTER), _node("a40-1", SEED_REGISTER)]
    binpack = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})  # HAMi's default node policy
    spread = _demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
                     annotations={"hami.io/node-scheduler-policy": "spread"})
    first, second = check([binpack, spread], nodes, [], NOW, running=running)
    assert first.best_node == "a40-0" and second.best_node == "a40-1"
    assert first.nodes[0].reason == "no NodeTwin: neutral score; HAMi binpack node score 4.17"


def test_hami_requests_need_a_hami_node() -> None:
    plain = node_view(_node("plain", None))
    assert filter_reasons(_demand({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}), plain) == [
        "asks for HAMi's nvidia.com/gpumem, node has no hami.io/node-nvidia-register (HAMi does not manage its GPUs)"]
    assert filter_reasons(_demand({"nvidia.com/gpu": 1}), plain) == []  # the NVIDIA device plugin's GPUs


def test_decode_allocated_skips_short_records() -> None:
    assert decode_allocated(f"{A40_0},NVIDIA,20000,30:GPU-x,NVIDIA:;{A40_1},NVIDIA,100,0:;") == [
        [(A40_0, 20000, 30)], [(A40_1, 100, 0)]]


def test_emulated_l40s_node_from_a_spec(cli: Any, tmp_path: Path) -> None:
    import yaml

    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: l}\nspec:\n"
                    "  pools:\n  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([_pod_doc("big", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 90000}),
                                        _pod_doc("fits", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40000})]))
    r = cli("schedule-check", str(pods), "--spec", str(spec), "--now", "2026-12-01T00:00:00Z", "-o", "json")
    assert r.exit_code == 6
    import json

    big, fits = json.loads(r.stdout)["pods"]
    # the profile's L40S have 46068 MiB (HAMi's register of an emulated node)
    assert big["nodes"][0]["reason"] == "HAMi: no card with 90000 MiB free (largest 46068 MiB)"
    # spread over four free cards, numa 0, 0, 1, 1: sorted (numa, -score) and walked from the last
    assert fits["nodes"][0]["devices"] == [["GPU-2b7e4c91-5a3f-4d6e-8c1b-7f9e0a1b2c03"]]


def test_running_pods_use_node_resources(cli: Any, tmp_path: Path) -> None:
    import json

    import yaml

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [_node("n", None, cpu="8")]}))
    twins = tmp_path / "twins.yaml"
    twins.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": []}))
    running = tmp_path / "running.yaml"
    running.write_text(yaml.safe_dump_all([{**_pod_doc("old", {"nvidia.com/gpu": 18}, node="n"),
                                            "spec": {"nodeName": "n", "containers": [
                                                {"name": "c", "resources": {"requests": {"cpu": "6"},
                                                                            "limits": {"nvidia.com/gpu": 18}}}]}}]))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump({**_pod_doc("new", {"nvidia.com/gpu": 4}),
                                    "spec": {"containers": [{"name": "c", "resources": {
                                        "requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": 4}}}]}}))
    r = cli("schedule-check", str(pods), "--nodes", str(nodes), "--twins", str(twins), "--pods", str(running),
            "-o", "json")
    assert r.exit_code == 6
    (pod,) = json.loads(r.stdout)["pods"]
    assert pod["nodes"][0]["reason"] == ("needs 4 nvidia.com/gpu, node has 2 free (18 used by running pods); "
                                         "needs 4 CPU, node has 2 free (6 used by running pods)")
