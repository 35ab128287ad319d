"""The CPU governor (cpufreq policies) at its edges: an EPP a policy does not list, a write the
kernel does not take. Every expected value is written out.

cpufreq.rst and intel_pstate.rst/amd-pstate.rst (docs/hardware.md 4.1-4.2): ``scaling_governor``
and ``energy_performance_preference`` per policy; ``energy_performance_available_preferences``
lists the EPP strings a policy takes (amd-pstate lists only ``performance`` while the governor is
``performance``).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import cpu, gov_cpu
from joulectl.host import Host
from joulectl.models import CpufreqPolicy, CpuInventory, Status
from joulectl.ops.journal import Journal

POLICY = "/sys/devices/system/cpu/cpufreq/policy0"


def _state(governor: str, epp: str, available_epp: list[str], driver: str = "amd-pstate-epp") -> gov_cpu.PolicyState:
    return gov_cpu.PolicyState(governor=governor, epp=epp, available_governors=["performance", "powersave"],
                               available_epp=available_epp, driver=driver, has_epp=True)


def test_an_epp_the_policy_does_not_list_blocks_the_preset_outside_performance() -> None:
    # outside performance the list is the driver's whole list: an EPP not in it cannot be set;
    # under performance amd-pstate lists only "performance", so the list is not checked there
    # (kills backends/gov_cpu.py:129 `state.governor != "performance"` -> `==`)
    with pytest.raises(gov_cpu.PresetBlocked) as e:
        gov_cpu.target_for("efficiency", _state("powersave", "balance_power", ["performance", "balance_power"]))
    assert str(e.value) == "EPP power not available (available: performance, balance_power)"
    assert gov_cpu.target_for("efficiency", _state("performance", "performance", ["performance"])) == \
        gov_cpu.CpuTarget("powersave", "power")


def _policy() -> CpufreqPolicy:
    return CpufreqPolicy(name="policy0", path=POLICY, cpus=[0], driver="intel_pstate", governor="powersave",
                         available_governors=["performance", "powersave"], epp=None, available_epp=[],
                         min_khz=800_000, max_khz=3_800_000, base_khz=None, cur_khz=None)


class _Ignoring(Host):
    """A store that does not take: the file keeps what it held (or, with ``empty``, reads empty)."""

    def __init__(self, root: str, empty: bool = False) -> None:
        super().__init__(root)
        self.empty = empty

    def write(self, host_path: str, value: str) -> None:
        if self.empty:
            super().write(host_path, "")


@pytest.mark.parametrize(("empty", "read"), [(False, "powersave"), (True, "nothing")])
def test_a_governor_that_reads_back_otherwise_is_an_error_naming_what_it_reads(
        tmp_path: Path, empty: bool, read: str) -> None:
    # (kills backends/gov_cpu.py:150 `back or 'nothing'` -> `and`, unreached before)
    d = tmp_path / POLICY.lstrip("/")
    d.mkdir(parents=True)
    (d / "scaling_governor").write_text("powersave\n")
    w = gov_cpu.write_governor(_Ignoring(str(tmp_path), empty), _policy(), "performance")
    assert (w.status, w.message) == (
        Status.ERROR, f"{POLICY}/scaling_governor reads back {read} after writing performance")


class _Logged(Host):
    """A host that logs every store (path, value) and writes it as the kernel would keep it."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.writes: list[tuple[str, str]] = []

    def write(self, host_path: str, value: str) -> None:
        self.writes.append((host_path, value))
        super().write(host_path, value)


def _node(root: Path, trees: ModuleType, governor: str = "powersave", epp: str = "balance_power") -> tuple[
        _Logged, CpuInventory]:
    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 1, 1, 1,
                                                     "fpu"))
    trees.cpufreq_policies(root, 1, driver="intel_pstate", governors="performance powersave", governor=governor,
                           min_khz=800_000, max_khz=3_800_000, epp=epp,
                           epps="default performance balance_performance balance_power power")
    host = _Logged(str(root))
    return host, cpu.discover(host)


def test_a_preset_that_changes_only_the_epp_writes_only_the_epp(root: Path, trees: ModuleType) -> None:
    # balanced under intel_pstate is powersave (in force) with EPP balance_performance: one store,
    # the EPP's; the governor is not written again (kills backends/gov_cpu.py:223 `or` -> `and`)
    host, inv = _node(root, trees)
    backend = gov_cpu.CpuGovernor(host, inv)
    (r,) = backend.apply(inv.policies, "balanced", Journal())
    assert (r.status, r.before, r.after) == (Status.APPLIED, "powersave/balance_power", "powersave/balance_performance")
    assert host.writes == [(f"{POLICY}/energy_performance_preference", "balance_performance")]


def test_a_governor_change_journals_no_epp_the_driver_left_as_it_was(root: Path, trees: ModuleType) -> None:
    # performance from powersave/balance_power: the governor store, then the EPP read back; a
    # driver that left it at balance_power (as these plain files do) changed nothing joulectl
    # must put back: only the governor is journaled (kills backends/gov_cpu.py:217 `and` -> `or`)
    host, inv = _node(root, trees)
    journal = Journal()
    (r,) = gov_cpu.CpuGovernor(host, inv).apply(inv.policies, "performance", journal)
    assert (r.status, r.after) == (Status.APPLIED, "performance/balance_power")
    assert journal.devices["cpufreq:policy0"].current == {
        "cpuGovernor": "performance", "governorPreset": {"preset": "performance", "status": "applied"}}


def test_a_planned_performance_names_no_epp(root: Path, trees: ModuleType) -> None:
    # the driver pins EPP under performance (intel_pstate.rst): the plan's "after" names the
    # governor alone, not the EPP in force now (kills backends/gov_cpu.py:286 `==` -> `!=`)
    host, inv = _node(root, trees)
    (r,), _ = gov_cpu.CpuGovernor(host, inv).plan(inv.policies, "performance", Journal())
    assert (r.status, r.before, r.after) == (Status.PLANNED, "powersave/balance_power", "performance")
    assert host.writes == []


def test_results_name_the_raw_model_and_an_undo_is_no_dry_run_unless_asked(root: Path, trees: ModuleType) -> None:
    # a result row's MODEL is /proc/cpuinfo's "model name" (kills backends/gov_cpu.py:202 `raw_model
    # or model` -> `and`); the contract's undo puts back unless told dry_run (kills :195 the
    # default `False` -> `True`)
    host, inv = _node(root, trees)
    backend, journal = gov_cpu.CpuGovernor(host, inv), Journal()
    (r,) = backend.apply(inv.policies, "efficiency", journal)
    assert (r.status, r.model, r.after) == (Status.APPLIED, "Intel(R) Xeon(R) Platinum 8480+", "powersave/power")
    (u,) = backend.undo(inv.policies, journal)
    assert (u.status, u.model, u.after) == (
        Status.APPLIED, "Intel(R) Xeon(R) Platinum 8480+", "powersave/balance_power")
    assert (root / POLICY.lstrip("/") / "energy_performance_preference").read_text() == "balance_power"


def test_a_reset_tells_the_operators_governor_from_an_unreadable_one(root: Path, trees: ModuleType) -> None:
    # joulectl set performance (from powersave); the operator set powersave again since: the reset
    # leaves it. A governor file that reads nothing is no operator's choice: the reset writes it
    # back (kills backends/gov_cpu.py:325 the first `is not None` -> `is`). The dry run names what it
    # would put back (kills :342 `gov or state.governor` -> `and`)
    host, inv = _node(root, trees)
    backend, journal = gov_cpu.CpuGovernor(host, inv), Journal()
    gov_file = root / POLICY.lstrip("/") / "scaling_governor"
    assert backend.apply(inv.policies, "performance", journal)[0].status is Status.APPLIED
    (dry,) = backend.undo(inv.policies, journal, dry_run=True)
    assert (dry.status, dry.before, dry.after) == (
        Status.PLANNED, "performance/balance_power", "powersave/balance_power")
    gov_file.write_text("")
    (r,) = backend.undo(inv.policies, journal)
    assert (r.status, r.message, r.after) == (
        Status.APPLIED, "governor set by joulectl restored", "powersave/balance_power")
    assert gov_file.read_text() == "powersave"
    assert backend.apply(inv.policies, "performance", journal)[0].status is Status.APPLIED
    gov_file.write_text("powersave\n")
    (r,) = backend.undo(inv.policies, journal)
    assert (r.status, r.message) == (
        Status.UNCHANGED, "changed to powersave/balance_power since joulectl set it: left alone")
    assert "cpufreq:policy0" not in journal.devices or not journal.devices["cpufreq:policy0"].current


def test_a_reset_to_performance_writes_no_epp(root: Path, trees: ModuleType) -> None:
    # efficiency from performance/performance journals the governor and the EPP; the reset puts
    # the governor back to performance and writes no EPP: the driver pins it under performance
    # (intel_pstate.rst) (kills backends/gov_cpu.py:339 `gov is not None` -> `is`)
    host, inv = _node(root, trees, governor="performance", epp="performance")
    backend, journal = gov_cpu.CpuGovernor(host, inv), Journal()
    assert backend.apply(inv.policies, "efficiency", journal)[0].after == "powersave/power"
    host.writes.clear()
    (r,) = backend.undo(inv.policies, journal)
    assert r.status is Status.APPLIED
    assert host.writes == [(f"{POLICY}/scaling_governor", "performance")]


def test_a_planned_reset_names_the_epp_it_puts_back(root: Path, trees: ModuleType) -> None:
    # efficiency kept the governor (powersave) and set EPP power; the dry-run reset names the EPP
    # it would put back, balance_power, not the one in force (kills backends/gov_cpu.py:342 `epp or
    # state.epp` -> `and`)
    host, inv = _node(root, trees)
    backend, journal = gov_cpu.CpuGovernor(host, inv), Journal()
    assert backend.apply(inv.policies, "efficiency", journal)[0].after == "powersave/power"
    (dry,) = backend.undo(inv.policies, journal, dry_run=True)
    assert (dry.status, dry.before, dry.after) == (Status.PLANNED, "powersave/power", "powersave/balance_power")


def test_show_says_who_set_the_governor_in_force(root: Path, trees: ModuleType) -> None:
    # after performance the row is joulectl's, with the preset and its status; once the operator
    # set another governor, the operator's (kills backends/gov_cpu.py:370 `ours_gov ==
    # state.governor` -> `!=`). A run killed after its governor store and before its preset entry
    # leaves a governor joulectl set and no preset: joulectl's, no preset, status applied (the
    # store was read back) (kills :371 `status or ...` -> `and`)
    host, inv = _node(root, trees)
    backend, journal = gov_cpu.CpuGovernor(host, inv), Journal()
    backend.apply(inv.policies, "performance", journal)
    (row,) = backend.show(inv.policies, journal)
    assert (row.in_force, row.set_by, row.preset, row.status, row.message) == (
        "performance/balance_power", "joulectl", "performance", "applied", "")
    (root / POLICY.lstrip("/") / "scaling_governor").write_text("powersave\n")
    (row,) = backend.show(inv.policies, journal)
    assert (row.in_force, row.set_by, row.preset, row.status, row.message) == (
        "powersave/balance_power", "operator", None, None, "changed since joulectl set performance")
    lost = Journal()
    lost.record("cpufreq:policy0", "cpuGovernor", "performance", "powersave", vendor="genuineintel", kind="cpu",
                command="governor")
    (row,) = backend.show(inv.policies, lost)
    assert (row.set_by, row.preset, row.status) == ("joulectl", None, "applied")
