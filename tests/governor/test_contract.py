"""The governor contract (``backends/base.GovernorBackend``), tested once against every backend.

Each case is a backend on a fake of its hardware (the fake nvidia-smi for NVIDIA, hand-written
amdgpu, i915 and cpufreq trees) and the state that shows what is in force. For every preset the
backend accepts: ``plan`` writes nothing and says what ``apply`` journals; ``apply`` puts it in
force (read back), records it, and a second ``apply`` changes nothing; ``show`` names joulectl
and the preset; ``undo`` puts back exactly what was there and forgets it; a second ``undo``
touches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from govkit import (
    H100_TABLE,
    amd_gpu,
    amd_tree,
    fake_smi,
    inventory,
    nvidia_gpu,
    policy_tree,
    smi_state,
)
from test_intel import i915_tree
from test_intel import intel_gpu as flex_gpu

from joulectl.backends import gov_amd, gov_cpu, gov_intel, gov_nvidia
from joulectl.backends.base import GovernorBackend, governor_module
from joulectl.host import Host
from joulectl.models import CPU_PRESETS, GPU_PRESETS, OK_STATUSES, Status
from joulectl.ops.journal import Journal


@dataclass
class Case:
    backend: GovernorBackend
    devices: Sequence[Any]
    state: Callable[[], Any]  # what is in force, comparable
    all_presets: tuple[str, ...]


def _files(root: Path, *names: str) -> Callable[[], dict[str, str]]:
    def read() -> dict[str, str]:
        return {str(p.relative_to(root)): p.read_text().strip() for n in names for p in sorted(root.rglob(n))}
    return read


def _nvidia(root: Path) -> Case:
    fake_smi(root, [H100_TABLE, H100_TABLE])
    host = Host(str(root))

    def locks() -> list[tuple[Any, Any]]:
        return [(g["lgc"], g["lmc"]) for g in smi_state(root)["gpus"].values()]
    return Case(gov_nvidia.governor(host, {"NVIDIA H100 80GB HBM3": {"graphicsMHz": 1755}}),
                [nvidia_gpu(0), nvidia_gpu(1)], locks, GPU_PRESETS)


def _amd(root: Path) -> Case:
    for i in range(2):
        amd_tree(root, i, level="auto")
    return Case(gov_amd.governor(Host(str(root))), [amd_gpu(0, sclk=[500, 2100]), amd_gpu(1, sclk=[500, 2100])],
                _files(root, "power_dpm_force_performance_level"), GPU_PRESETS)


def _intel(root: Path) -> Case:
    i915_tree(root, lo=500, hi=1800)
    return Case(gov_intel.governor(Host(str(root)), {"Intel Data Center GPU Flex 170": {"graphicsMHz": 1200}}),
                [flex_gpu()], _files(root, "rps_m*_freq_mhz"), GPU_PRESETS)


def _cpu(root: Path) -> Case:
    pols = [policy_tree(root, n, governor="powersave", epp="balance_power") for n in range(3)]
    return Case(gov_cpu.governor(Host(str(root)), inventory([], pols).cpu), pols,
                _files(root, "scaling_governor", "energy_performance_preference"), CPU_PRESETS)


CASES = {"nvidia": _nvidia, "amd": _amd, "intel": _intel, "cpu": _cpu}


@pytest.mark.parametrize("name", list(CASES))
def test_the_contract(tmp_path: Path, name: str) -> None:
    case = CASES[name](tmp_path)
    accepted = {p for d in case.devices for p in case.backend.accepted(d)}
    assert accepted and accepted <= set(case.all_presets)
    original = case.state()
    for preset in [p for p in case.all_presets if p != "auto" and p in accepted]:
        journal = Journal()
        planned, intents = case.backend.plan(case.devices, preset, journal)
        assert case.state() == original, f"{preset}: plan wrote"
        assert [r.status for r in planned] == [Status.PLANNED] * len(case.devices), preset
        assert intents and not journal.devices

        applied = case.backend.apply(case.devices, preset, journal)
        assert len(applied) == len(case.devices)
        assert all(r.status in OK_STATUSES and r.status != Status.UNCHANGED for r in applied), (preset, applied)
        assert case.state() != original, preset
        # every setting apply journaled was announced by plan (the write-ahead save holds it)
        announced = {(i.device, i.setting) for i in intents}
        assert {(d, s) for d, rec in journal.devices.items() for s in rec.current
                if s != "governorPreset"} <= announced, preset
        in_force = case.state()
        again = case.backend.apply(case.devices, preset, journal)
        assert [r.status for r in again] == [Status.UNCHANGED] * len(case.devices), (preset, again)
        assert case.state() == in_force

        rows = case.backend.show(case.devices, journal)
        assert [(r.set_by, r.preset) for r in rows] == [("joulectl", preset)] * len(case.devices), preset

        dry = case.backend.undo(case.devices, journal, dry_run=True)
        assert [r.status for r in dry] == [Status.PLANNED] * len(case.devices) and case.state() == in_force
        undone = case.backend.undo(case.devices, journal)
        assert [r.status for r in undone] == [Status.APPLIED] * len(case.devices), (preset, undone)
        assert case.state() == original, preset
        assert not any(rec.current for rec in journal.devices.values()), preset
        assert [r.message for r in case.backend.undo(case.devices, journal)] == [
            "nothing set by joulectl"] * len(case.devices)
        assert case.state() == original


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel", "cpu"])
def test_every_backend_module_has_the_two_entry_points(vendor: str) -> None:
    module = governor_module(vendor)
    assert module is not None and callable(module.presets) and callable(module.governor)


def test_a_vendor_without_governor_backend_is_blocked(tmp_path: Path) -> None:
    from joulectl.ops import governor as gov

    other = amd_gpu(0)
    other.vendor = "acme"
    r = gov.apply_preset(Host(str(tmp_path)), inventory([other]), Journal(), "peak")[0]
    assert (r.status, r.message) == (Status.BLOCKED, "no governor mapping for Acme GPUs")
    assert governor_module("acme") is None and governor_module("../x") is None
    assert gov.reset(Host(str(tmp_path)), inventory([other]), Journal(), cpu=False)[0].message == (
        "nothing set by joulectl")
    rows, _ = gov.show(Host(str(tmp_path)), inventory([other]), Journal(), gpu=True, cpu=False)
    assert (rows[0].in_force, rows[0].message) == ("no governor", "no governor mapping for Acme GPUs")
    assert json.dumps(rows[0].to_dict())


def test_a_gpu_without_governor_backend_shows_its_raw_model_when_unnamed(tmp_path: Path) -> None:
    # a board the catalog does not name is shown by the model string the driver reported
    from joulectl.ops import governor as gov

    other = amd_gpu(0)
    other.vendor, other.model, other.raw_model = "acme", None, "Acme X1 Accelerator"
    rows, _ = gov.show(Host(str(tmp_path)), inventory([other]), Journal(), gpu=True, cpu=False)
    assert (rows[0].model, rows[0].in_force) == ("Acme X1 Accelerator", "no governor")


def test_the_library_reset_undoes_the_cpus_unless_told(tmp_path: Path) -> None:
    # reset() without gpu/cpu restores everything joulectl set, the cpufreq policies too (its
    # docstring: "every lock and level joulectl set"); cpu=False leaves them as set. The GPU,
    # which joulectl never set, stays untouched either way
    from joulectl.ops import governor as gov

    amd_tree(tmp_path, 0, level="auto")
    pols = [policy_tree(tmp_path, n, governor="powersave", epp="balance_power") for n in range(2)]
    host, inv = Host(str(tmp_path)), inventory([amd_gpu(0, sclk=[500, 2100])], pols)
    pol = tmp_path / "sys/devices/system/cpu/cpufreq"

    def state() -> list[tuple[str, str]]:
        return [((pol / f"policy{n}/scaling_governor").read_text().strip(),
                 (pol / f"policy{n}/energy_performance_preference").read_text().strip()) for n in range(2)]

    journal = Journal()
    gov.apply_preset(host, inv, journal, "efficiency", gpu=False, cpu=True)
    assert state() == [("powersave", "power")] * 2
    gpu_only = gov.reset(host, inv, journal, cpu=False)
    assert [(r.status, r.message) for r in gpu_only] == [(Status.UNCHANGED, "nothing set by joulectl")]
    assert state() == [("powersave", "power")] * 2
    results = gov.reset(host, inv, journal)
    assert [r.status for r in results] == [Status.UNCHANGED, Status.APPLIED, Status.APPLIED]
    assert state() == [("powersave", "balance_power")] * 2
