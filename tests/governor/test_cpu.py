"""CPU presets: cpufreq governor then EPP on every policy, EBUSY avoided by ordering, reset."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from govkit import EACCES, amd_gpu, amd_tree, bus, inventory, policy_tree
from hostdoubles import FaultyHost

from joulectl.errors import ExitCode, JoulectlError, NoDeviceError
from joulectl.host import Host, HostIOError
from joulectl.models import Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal


class KernelHost(Host):
    """Enforces intel_pstate's rule: an EPP other than performance under ``performance`` is EBUSY."""

    def write(self, host_path: str, value: str) -> None:
        if host_path.endswith("energy_performance_preference") and value != "performance":
            gov_file = host_path.rsplit("/", 1)[0] + "/scaling_governor"
            if self.read_attr(gov_file).value == "performance":
                raise HostIOError(errno.EBUSY, host_path)
        super().write(host_path, value)
        if host_path.endswith("scaling_governor") and value == "performance":
            epp = host_path.rsplit("/", 1)[0] + "/energy_performance_preference"
            if self.exists(epp):
                super().write(epp, "performance")


def _read(root: Path, n: int, name: str) -> str:
    return (root / "sys/devices/system/cpu/cpufreq" / f"policy{n}" / name).read_text().strip()


def test_every_preset_on_intel_pstate(tmp_path: Path) -> None:
    pols = [policy_tree(tmp_path, n, governor="performance", epp="performance") for n in range(2)]
    host, journal, inv = KernelHost(str(tmp_path)), Journal(), inventory([], pols)
    # from performance: the governor goes first, else the EPP write is EBUSY
    results = gov.apply_preset(host, inv, journal, "balanced", gpu=False, cpu=True)
    assert [(r.device, r.status, r.before, r.after) for r in results] == [
        (f"cpufreq:policy{n}", Status.APPLIED, "performance/performance", "powersave/balance_performance")
        for n in range(2)]
    assert results[0].kind == "cpu"
    r = gov.apply_preset(host, inv, journal, "efficiency", gpu=False, cpu=True)[0]
    assert (r.status, r.after) == (Status.APPLIED, "powersave/power")
    r = gov.apply_preset(host, inv, journal, "performance", gpu=False, cpu=True)[0]
    assert (r.status, r.after) == (Status.APPLIED, "performance/performance")
    assert journal.original("cpufreq:policy0", "cpuGovernor") == "performance"
    assert journal.original("cpufreq:policy0", "epp") == "performance"
    again = gov.apply_preset(host, inv, journal, "performance", gpu=False, cpu=True)[0]
    assert (again.status, again.message) == (Status.UNCHANGED, "already in force")


def test_balanced_uses_schedutil_without_an_epp_driver(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0, driver="acpi-cpufreq", governor="ondemand", epp=None,
                      governors="conservative ondemand userspace powersave performance schedutil")
    r = gov.apply_preset(Host(str(tmp_path)), inventory([], [pol]), Journal(), "balanced", gpu=False, cpu=True)[0]
    assert (r.status, r.after) == (Status.APPLIED, "schedutil")
    assert _read(tmp_path, 0, "scaling_governor") == "schedutil"


@pytest.mark.parametrize(("driver", "epp", "intents"), [
    # performance on a policy without EPP (acpi-cpufreq): the governor only
    ("acpi-cpufreq", None, [("cpuGovernor", "ondemand", "performance")]),
    # intel_pstate pins EPP to performance under the performance governor (intel_pstate.rst):
    # the EPP it had is journaled ahead beside the governor, one already at performance is not
    ("intel_pstate", "balance_power", [("cpuGovernor", "ondemand", "performance"),
                                       ("epp", "balance_power", "performance")]),
    ("intel_pstate", "performance", [("cpuGovernor", "ondemand", "performance")]),
])
def test_performance_journals_ahead_the_epp_it_moves_only(tmp_path: Path, driver: str, epp: str | None,
                                                        intents: list[tuple[str, str, str]]) -> None:
    pol = policy_tree(tmp_path, 0, driver=driver, governor="ondemand", epp=epp,
                      governors="conservative ondemand userspace powersave performance schedutil")
    got = gov.plan_intents(Host(str(tmp_path)), inventory([], [pol]), Journal(), "performance", gpu=False, cpu=True)
    assert [(i.setting, i.before, i.value) for i in got] == intents


def test_missing_governor_is_blocked(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0, driver="acpi-cpufreq", governor="ondemand", epp=None,
                      governors="ondemand performance")
    r = gov.apply_preset(Host(str(tmp_path)), inventory([], [pol]), Journal(), "balanced", gpu=False, cpu=True)[0]
    assert (r.status, r.message) == (
        Status.BLOCKED, "governor schedutil not available under acpi-cpufreq (available: ondemand, performance)")


def test_refused_cpu_write(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0)
    results = gov.apply_preset(FaultyHost(str(tmp_path), {"scaling_governor": EACCES}), inventory([], [pol]),
                               Journal(), "performance", gpu=False, cpu=True)
    assert results[0].status == Status.REFUSED
    assert results[0].message == (
        "writing performance to /sys/devices/system/cpu/cpufreq/policy0/scaling_governor: EACCES")
    assert gov.exit_code_for(results) == ExitCode.REFUSED


def test_dry_run_and_no_policies(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0)
    r = gov.apply_preset(Host(str(tmp_path)), inventory([], [pol]), Journal(), "efficiency", gpu=False, cpu=True,
                         dry_run=True)[0]
    assert (r.status, r.before, r.after) == (Status.PLANNED, "powersave/balance_performance", "powersave/power")
    assert _read(tmp_path, 0, "energy_performance_preference") == "balance_performance"
    with pytest.raises(NoDeviceError, match="no cpufreq policy found on this node"):
        gov.apply_preset(Host(str(tmp_path)), inventory([]), Journal(), "efficiency", gpu=False, cpu=True)


def test_reset_restores_in_the_order_that_avoids_ebusy(tmp_path: Path) -> None:
    pols = [policy_tree(tmp_path, n, governor="performance", epp="performance") for n in range(2)]
    host, journal, inv = KernelHost(str(tmp_path)), Journal(), inventory([], pols)
    gov.apply_preset(host, inv, journal, "efficiency", gpu=False, cpu=True)
    (tmp_path / "sys/devices/system/cpu/cpufreq/policy1/scaling_governor").write_text("powersave\n")
    (tmp_path / "sys/devices/system/cpu/cpufreq/policy1/energy_performance_preference").write_text("balance_power\n")
    results = gov.reset(host, inv, journal, gpu=False, cpu=True)
    assert [(r.status, r.message, r.after) for r in results] == [
        (Status.APPLIED, "governor set by joulectl restored", "performance/performance"),
        (Status.UNCHANGED, "changed to powersave/balance_power since joulectl set it: left alone",
         "powersave/balance_power"),
    ]
    assert _read(tmp_path, 0, "scaling_governor") == "performance"
    results = gov.reset(host, inv, journal, gpu=False, cpu=True)
    assert [r.message for r in results] == ["nothing set by joulectl"] * 2


def test_reset_to_powersave_epp(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0, governor="powersave", epp="balance_power")
    host, journal, inv = KernelHost(str(tmp_path)), Journal(), inventory([], [pol])
    gov.apply_preset(host, inv, journal, "performance", gpu=False, cpu=True)
    r = gov.reset(host, inv, journal, gpu=False, cpu=True)[0]
    assert (r.status, r.after) == (Status.APPLIED, "powersave/balance_power")


def test_show_cpu(tmp_path: Path) -> None:
    pol = policy_tree(tmp_path, 0)
    host, journal, inv = Host(str(tmp_path)), Journal(), inventory([], [pol])
    rows, _ = gov.show(host, inv, journal, gpu=False, cpu=True)
    assert (rows[0].device, rows[0].in_force, rows[0].set_by) == ("cpufreq:policy0", "powersave/balance_performance",
                                                                  None)
    gov.apply_preset(host, inv, journal, "efficiency", gpu=False, cpu=True)
    rows, _ = gov.show(host, inv, journal, gpu=False, cpu=True)
    assert (rows[0].preset, rows[0].set_by, rows[0].status) == ("efficiency", "joulectl", "applied")


def test_show_without_flags_shows_the_gpus_and_the_cpus(tmp_path: Path) -> None:
    # show(gpu=True, cpu=True) by default: an AMD GPU's row and the CPU policy's
    amd_tree(tmp_path, 0, sclk_mhz=(500, 1100, 1700, 2100))
    pol = policy_tree(tmp_path, 0)
    rows, _ = gov.show(Host(str(tmp_path)), inventory([amd_gpu(0)], [pol]), Journal())
    assert [r.device for r in rows] == [bus(0), "cpufreq:policy0"]


class UnreadableJournalHost(Host):
    """The journal's read fails with EIO (a failing disk)."""

    def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
        if host_path.endswith("/state.json"):
            raise HostIOError(errno.EIO, host_path)
        return super().read(host_path, limit=limit)


def test_a_journal_that_cannot_be_read_stops_the_run_naming_why(tmp_path: Path) -> None:
    policy_tree(tmp_path, 0)
    (tmp_path / "var/lib/joulectl").mkdir(parents=True)
    (tmp_path / "var/lib/joulectl/state.json").write_text("{}")
    with pytest.raises(JoulectlError) as e:
        gov.run_set(UnreadableJournalHost(str(tmp_path)), "performance", gpu=False, cpu=True, selectors=(),
                    dry_run=False, wait_s=0.0, model_presets_path=None, warnings=[])
    assert e.value.message == "cannot read the journal /var/lib/joulectl/state.json: Input/output error"


@pytest.mark.parametrize(
    ("err", "cpu_status", "amd_status"),
    [
        (errno.EACCES, Status.REFUSED, Status.REFUSED),
        (errno.EPERM, Status.REFUSED, Status.REFUSED),
        (errno.EROFS, Status.REFUSED, Status.REFUSED),
        (errno.EINVAL, Status.UNSUPPORTED, Status.UNSUPPORTED),
        (errno.EOPNOTSUPP, Status.UNSUPPORTED, Status.UNSUPPORTED),
        (errno.EBUSY, Status.UNSUPPORTED, Status.UNSUPPORTED),
        (errno.EAGAIN, Status.UNSUPPORTED, Status.ERROR),  # intel_pstate's EPP store without a driver
        (errno.EIO, Status.ERROR, Status.ERROR),
    ],
)
def test_governor_errno_tables(err: int, cpu_status: Status, amd_status: Status) -> None:
    """SPEC §5: the governor's tables, where EINVAL is unsupported (a cap's EINVAL is blocked)."""
    from joulectl.backends import gov_amd, gov_cpu

    assert gov_cpu.status_for_errno(err) is cpu_status
    assert gov_amd.status_for_errno(err) is amd_status


@pytest.mark.parametrize(("governor", "epp", "intents"), [
    # efficiency is powersave with EPP "power" (an intel_pstate EPP string, docs/hardware.md 4.2):
    # from powersave/balance_performance only the EPP moves, and it is journaled ahead
    ("powersave", "balance_performance", [("epp", "balance_performance", "power")]),
    # from performance both move, the governor first
    ("performance", "performance", [("cpuGovernor", "performance", "powersave"), ("epp", "performance", "power")]),
])
def test_efficiency_journals_ahead_the_epp_it_sets(tmp_path: Path, governor: str, epp: str,
                                                   intents: list[tuple[str, str, str]]) -> None:
    # mutant backends/gov_cpu.py:256 (`epp != state.epp` -> `==`: the EPP intent left out of the
    # write-ahead save, so a run killed after the EPP write could not restore it)
    pol = policy_tree(tmp_path, 0, governor=governor, epp=epp)
    got = gov.plan_intents(Host(str(tmp_path)), inventory([], [pol]), Journal(), "efficiency", gpu=False, cpu=True)
    assert [(i.setting, i.before, i.value) for i in got] == intents
