"""A GPU-only inventory (cap --pct on the GPUs) tells a virtual machine by the ``hypervisor`` word
of ``/proc/cpuinfo`` (the flag Linux sets on a guest, arch/x86 cpufeatures X86_FEATURE_HYPERVISOR),
without splitting the whole file into words (3 ms on a 224-thread host's 220 KB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulectl.host import Host
from joulectl.ops.discover import has_token, inventory


@pytest.mark.parametrize(("text", "expected"), [
    ("flags\t\t: fpu vme hypervisor lahf_lm\n", True),
    ("hypervisor", True),
    ("flags : fpu\thypervisor\n", True),
    ("flags : fpu hypervisor", True),
    ("flags : fpu hypervisor_x lm\n", False),
    ("flags : xhypervisor\n", False),
    ("flags : hyper visor\n", False),
    ("flags : hypervisorhypervisor\n", False),
    ("", False),
    ("a\u00a0hypervisor\u2003b", True),  # str.split()'s whitespace is Unicode's
])
def test_the_word_is_found_as_split_finds_it(text: str, expected: bool) -> None:
    assert has_token(text, "hypervisor") is expected
    assert ("hypervisor" in text.split()) is expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["hypervisor", "hyper", "visor", "x", "_", " ", "\t", "\n", "\u00a0", "\x1c",
                                 "\x85", ":"]), max_size=12))
def test_has_token_is_split_membership(parts: list[str]) -> None:
    text = "".join(parts)
    assert has_token(text, "hypervisor") == ("hypervisor" in text.split())


@pytest.mark.parametrize(("flags", "virtual"), [("fpu vme hypervisor lm", True), ("fpu vme lm", False)])
def test_a_gpu_only_inventory_reports_the_guest(tmp_path: Path, flags: str, virtual: bool) -> None:
    (tmp_path / "proc").mkdir()
    block = "processor\t: {n}\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: {flags}\n\n"
    (tmp_path / "proc" / "cpuinfo").write_text("".join(block.format(n=n, flags=flags) for n in range(4)))
    inv = inventory(Host(str(tmp_path)), gpus=False, cpu=False)
    assert inv.cpu.virtual is virtual
    assert inv.host.virtual is virtual


@pytest.mark.parametrize("profile", ["nvidia-h100-sxm-8gpu", "amd-instinct-mi300x-8gpu"])
def test_without_gpu_details_the_gpus_are_the_same_but_for_catalog_and_presets(tmp_path: Path,
                                                                               profile: str) -> None:
    # cap --watts/--pct/--restore asks no GPU details: same devices, models and limits, no catalog
    # entry, no governor presets (discover's own inventory keeps both)
    from tests.sim.conftest import render_one

    host = Host(str(render_one(tmp_path, profile)))
    full = inventory(host, cpu=False).gpus
    bare = inventory(host, cpu=False, gpu_details=False).gpus
    assert len(full) == len(bare) == 8
    assert all(d.catalog_key is not None and d.governor_presets for d in full)
    assert all(d.catalog_key is None and d.governor_presets == () for d in bare)
    assert [(d.index, d.bus_id, d.model, d.cap_range, d.current_cap_w) for d in bare] == \
           [(d.index, d.bus_id, d.model, d.cap_range, d.current_cap_w) for d in full]
    model = "NVIDIA H100 80GB HBM3" if profile.startswith("nvidia") else "AMD Instinct MI300X"
    assert {d.model for d in bare} == {model}


def test_the_collector_waits_while_the_inventory_is_taken_and_is_as_it_was_after(tmp_path: Path) -> None:
    import gc

    from joulectl.ops import inventory as inv_mod

    seen: list[bool] = []
    real = inv_mod._inventory

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    inv_mod._inventory = spy  # type: ignore[assignment]
    try:
        assert gc.isenabled()
        inv_mod.inventory(Host(str(tmp_path)))
        assert seen == [False] and gc.isenabled()
        gc.disable()
        try:
            inv_mod.inventory(Host(str(tmp_path)))
            assert not gc.isenabled()  # a caller that had it off keeps it off
        finally:
            gc.enable()
    finally:
        inv_mod._inventory = real  # type: ignore[assignment]
