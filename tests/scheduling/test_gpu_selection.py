"""HAMi's GPU type and UUID annotations, as truth tables written from HAMi's checkGPUtype (an
upper-cased substring match) and CheckUUID (exact; with use-gpuuuid given, nouse-gpuuuid is not
read). Written for mutants that survived the scheduling tests (docs/TESTING.md)."""

from __future__ import annotations

import dataclasses

import pytest

from joulectl.scheduling import hami
from joulectl.scheduling.filters import GpuSelection, NodeView


def _sel(**annotations: str) -> GpuSelection:
    return GpuSelection.from_annotations({f"nvidia.com/{k.replace('_', '-')}": v for k, v in annotations.items()})


@pytest.mark.parametrize(("annotations", "card", "passes"), [
    ({}, "NVIDIA-A100-SXM4-80GB", True),
    ({"use_gputype": "a100"}, "NVIDIA-A100-SXM4-80GB", True),
    ({"use_gputype": "H100,A100"}, "NVIDIA-A100-SXM4-80GB", True),
    ({"use_gputype": "H100"}, "NVIDIA-A100-SXM4-80GB", False),
    ({"nouse_gputype": "A100"}, "NVIDIA-A100-SXM4-80GB", False),
    ({"nouse_gputype": "h100, a40"}, "NVIDIA-A100-SXM4-80GB", True),
    ({"nouse_gputype": "H100,A100"}, "NVIDIA-A100-SXM4-80GB", False),
    ({"use_gputype": "A100", "nouse_gputype": "SXM4"}, "NVIDIA-A100-SXM4-80GB", False),
    ({"use_gputype": "A100", "nouse_gputype": "PCIE"}, "NVIDIA-A100-SXM4-80GB", True),
])
def test_type_passes(annotations: dict[str, str], card: str, passes: bool) -> None:
    assert _sel(**annotations).type_passes(card) is passes


@pytest.mark.parametrize(("annotations", "uuid", "passes"), [
    ({}, "GPU-1", True),
    ({"use_gpuuuid": "GPU-1,GPU-2"}, "GPU-1", True),
    ({"use_gpuuuid": "GPU-2"}, "GPU-1", False),
    ({"use_gpuuuid": "GPU-11"}, "GPU-1", False),          # exact, not a substring
    ({"nouse_gpuuuid": "GPU-1"}, "GPU-1", False),
    ({"nouse_gpuuuid": "GPU-2"}, "GPU-1", True),
    ({"use_gpuuuid": "GPU-1", "nouse_gpuuuid": "GPU-1"}, "GPU-1", True),  # nouse not read
])
def test_uuid_passes(annotations: dict[str, str], uuid: str, passes: bool) -> None:
    assert _sel(**annotations).uuid_passes(uuid) is passes


def test_a_node_without_hami_cards_scores_zero() -> None:
    node = NodeView(name="n", labels={}, allocatable={}, unschedulable=False, gpus=(), gpu_types_from="none")
    assert node.hami_node_score == 0.0


def test_a_node_view_with_cards_is_hamis_and_read_only() -> None:
    # built without mig_single (a library caller's view of a node HAMi registered), the cards are
    # HAMi's to place pods on; the view is shared by every pod checked against the node, so it
    # refuses assignment
    card = hami.Card("GPU-1", 0, "NVIDIA-A100-SXM4-80GB", 0, 10, 81920, 100)
    node = NodeView(name="n", labels={}, allocatable={}, unschedulable=False, gpus=(), gpu_types_from="hami",
                    cards=(card,))
    assert node.hami is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.unschedulable = True  # type: ignore[misc]


def test_a_gpu_selection_is_read_only() -> None:
    # one pod's parsed annotations, shared by every node it is checked against
    sel = _sel(use_gputype="A100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sel.use_types = None  # type: ignore[misc]
