"""NVIDIA's cap inventory: ``discover(host, details=False)`` asks nvidia-smi one CSV query of what a
cap needs (:data:`joulectl.backends.nvidia.INVENTORY_ARGV`) instead of the whole ``-q -x`` document,
reads it as the document's facts are read, and falls back to ``-q -x`` where a driver refuses a
field or prints something else."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from joulectl.backends import nvidia
from joulectl.backends.base import BackendUnavailable
from joulectl.host import Host
from joulectl.models import GpuDevice
from tests.sim.conftest import render_one

SMI_ENV = {"JOULECTL_NVIDIA_TRANSPORT": "smi", "PATH": "/usr/bin:/bin"}
INV = nvidia.INVENTORY_ARGV
QX = nvidia.QUERY_ARGV


def cap_facts(g: GpuDevice) -> tuple[Any, ...]:
    """What a cap reads of a GPU: every fact the CSV query carries."""
    return (g.index, g.bus_id, g.raw_model, g.uuid, g.cap_range, g.current_cap_w, g.enforced_cap_w, g.power_w,
            g.mig, g.control, g.persistence_mode)


@pytest.mark.parametrize(("profile", "overrides"), [
    ("nvidia-h100-sxm-8gpu", None),
    ("nvidia-l40s-4gpu", None),
    ("nvidia-h100-sxm-8gpu", {"gpus": {"exposure": "mig-mixed"}}),
    ("nvidia-h100-sxm-8gpu", {"gpus": {"power": {"capW": 450}, "persistenceMode": "disabled"}}),
    ("nvidia-h100-sxm-8gpu", {"gpus": {"fieldSupport": {"power.min_limit": "[N/A]"}}}),
    ("nvidia-l40s-4gpu", {"gpus": {"fieldSupport": {
        "power.limit": "[N/A]", "power.default_limit": "[Not Supported]", "power.draw": "[N/A]",
        "enforced.power.limit": "[N/A]"}}}),
    ("nvidia-l40s-4gpu", {"gpus": {"fieldSupport": {"power.management": "[Not Supported]"}}}),
], ids=["h100", "l40s", "mig", "capped-no-persistence", "min-na", "tokens", "no-management"])
def test_the_csv_inventory_reads_what_the_document_says(tmp_path: Path, profile: str,
                                                         overrides: dict[str, Any] | None) -> None:
    """Oracle: the ``-q -x`` parse of the same emulated GPUs (the fake tool prints both from one state)."""
    tree = render_one(tmp_path, profile, "n", overrides)
    host = Host(str(tree))
    quick = nvidia.discover(host, details=False)
    assert host.tool_calls == [INV]
    whole = nvidia.discover(host)
    assert host.tool_calls == [INV, QX]
    assert quick and [cap_facts(g) for g in quick] == [cap_facts(g) for g in whole]
    # and nothing the CSV does not carry is made up
    assert {(g.architecture, g.supported_clocks, str(g.clocks)) for g in quick} == {(None, None, "{}")}


def test_parse_smi_csv_literal() -> None:
    text = (
        "00000000:18:00.0, GPU-aa, 200.00, 700.00, 700.00, 420.00, 400.00, 71.52, Disabled, Enabled, "
        "NVIDIA H100 80GB HBM3\n"
        "\n"
        "00000000:2A:00.0, GPU-bb, [N/A], [N/A], [Not Supported], [N/A], [N/A], [N/A], [N/A], [N/A], "
        "A, name, with commas\n"
        "[N/A], , 100.00, 300.00, [N/A], 300.00, 300.00, 12.00, Enabled, Disabled, \n"
    )
    a, b, c = nvidia.parse_smi_csv(text)
    assert cap_facts(a) == (0, "0000:18:00.0", "NVIDIA H100 80GB HBM3", "GPU-aa", nvidia.PowerRange(200, 700, 700),
                            420, 400, 71.52, "disabled", nvidia.Control(True), "Enabled")
    assert cap_facts(b) == (1, "0000:2a:00.0", "A, name, with commas", "GPU-bb", nvidia.PowerRange(None, None, None),
                            None, None, None, None, nvidia.Control(
                                False, "the power limit range is unknown (the driver reports N/A): "
                                       "no settable power limit"), "[N/A]")
    # no bus id: the index names it; an empty name or uuid is unknown; a missing default is the maximum
    assert cap_facts(c) == (2, "nvidia-index-2", None, None, nvidia.PowerRange(100, 300, 300), 300, 300, 12.0,
                            "enabled", nvidia.Control(True), "Disabled")
    assert nvidia.parse_smi_csv("") == []


def test_a_line_short_of_fields_is_refused() -> None:
    with pytest.raises(BackendUnavailable) as e:
        nvidia.parse_smi_csv("00000000:18:00.0, GPU-aa, 200.00, 700.00\n")
    assert str(e.value) == ("nvidia-smi --query-gpu printed 4 of the 11 fields asked in "
                            "'00000000:18:00.0, GPU-aa, 200.00, 700.00'")
    # a long line is quoted up to its 200th character
    with pytest.raises(BackendUnavailable) as e:
        nvidia.parse_smi_csv("x" * 150 + "," + "y" * 300 + "\n")
    assert str(e.value) == f"nvidia-smi --query-gpu printed 2 of the 11 fields asked in {'x' * 150 + ',' + 'y' * 49!r}"


def _smi(root: Path, trees: ModuleType, query_gpu: str) -> None:
    """A fake nvidia-smi: ``-q -x`` prints a two-H100 document, ``--query-gpu`` runs ``query_gpu``."""
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    doc = trees.write(root, "/fixtures/q.xml", trees.smi_document(
        [trees.smi_gpu_xml(b, i, schema="new") for i, b in enumerate(trees.H100_BUSES[:2])], schema="new"))
    trees.smi_script(root, f'case "$1" in\n  -q) cat "{doc}" ;;\n  --query-gpu=*) {query_gpu} ;;\n'
                           '  *) echo "unexpected: $*" >&2; exit 2 ;;\nesac\n')


@pytest.mark.parametrize("query_gpu", [
    # a driver that does not know a field (older than MIG)
    'echo \'Field "mig.mode.current" is not a valid field to query.\'; echo; exit 2',
    # a tool that prints something else with exit 0
    "echo 'Unable to determine the device handle for GPU 0000:18:00.0: Unknown Error'",
    # fewer fields than asked
    "echo '00000000:18:00.0, GPU-aa, 200.00'",
], ids=["unknown-field", "garbage", "short"])
def test_where_the_csv_query_fails_the_document_decides(root: Path, trees: ModuleType, query_gpu: str) -> None:
    _smi(root, trees, query_gpu)
    host = Host(str(root), env=SMI_ENV)
    quick = nvidia.discover(host, details=False)
    assert host.tool_calls == [INV, QX]
    whole = nvidia.discover(host)
    assert [cap_facts(g) for g in quick] == [cap_facts(g) for g in whole]
    assert [g.bus_id for g in quick] == trees.H100_BUSES[:2]
    assert quick[0].architecture == "hopper"  # the document's, details and all


def test_where_both_fail_the_documents_failure_is_reported(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
                           "exit 9\n")
    host = Host(str(root), env=SMI_ENV)
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(host, details=False)
    assert str(e.value) == ("nvidia-smi -q -x failed (exit 9): NVIDIA-SMI has failed because it couldn't "
                            "communicate with the NVIDIA driver.")
    assert host.tool_calls == [INV, QX]
