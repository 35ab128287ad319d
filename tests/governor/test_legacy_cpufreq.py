"""The CPU governor on the legacy cpufreq layout (issue 13): kernels before 4.x have no
``cpufreq/policyN`` but one ``cpuN/cpufreq/`` per CPU, and the governor reads and writes those.
The tree is the real Xeon X7550 capture (acpi-cpufreq, ``ondemand``, no EPP, no ``powersave`` or
``schedutil`` loaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

from govkit import inventory

from joulectl.host import Host
from joulectl.models import CpufreqPolicy, Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal

FIXTURE = Path(__file__).parent / "fixtures" / "cpu-xeon-x7550-4s-legacy"


def _policies(root: Path) -> list[CpufreqPolicy]:
    """The policies as discover reports the legacy layout: one per CPU, at ``cpuN/cpufreq``."""
    shutil.copytree(FIXTURE / "sys", root / "sys", symlinks=True)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return [CpufreqPolicy(name=f"cpu{n}", path=f"/sys/devices/system/cpu/cpu{n}/cpufreq", cpus=[n],
                          driver="acpi-cpufreq", governor="ondemand",
                          available_governors=["ondemand", "userspace", "performance"], epp=None, available_epp=[],
                          min_khz=1064000, max_khz=1996000, base_khz=None, cur_khz=1064000) for n in range(4)]


def _governors(root: Path) -> list[str]:
    return [(root / f"sys/devices/system/cpu/cpu{n}/cpufreq/scaling_governor").read_text().strip() for n in range(4)]


def test_performance_and_reset_on_per_cpu_directories(tmp_path: Path) -> None:
    pols = _policies(tmp_path)
    host, journal, inv = Host(str(tmp_path)), Journal(), inventory([], pols)
    results = gov.apply_preset(host, inv, journal, "performance", gpu=False, cpu=True)
    assert [(r.device, r.status, r.before, r.after) for r in results] == [
        (f"cpufreq:cpu{n}", Status.APPLIED, "ondemand", "performance") for n in range(4)]
    assert _governors(tmp_path) == ["performance"] * 4
    assert journal.original("cpufreq:cpu0", "cpuGovernor") == "ondemand"
    undone = gov.reset(host, inv, journal, gpu=False, cpu=True)
    assert {(r.status, r.after) for r in undone} == {(Status.APPLIED, "ondemand")}
    assert _governors(tmp_path) == ["ondemand"] * 4


def test_presets_the_old_kernel_cannot_take_are_blocked(tmp_path: Path) -> None:
    pols = _policies(tmp_path)
    host, inv = Host(str(tmp_path)), inventory([], pols)
    for preset, governor in (("balanced", "schedutil"), ("efficiency", "powersave")):
        r = gov.apply_preset(host, inv, Journal(), preset, gpu=False, cpu=True)[0]
        assert (r.status, r.message) == (Status.BLOCKED, f"governor {governor} not available under acpi-cpufreq "
                                                         "(available: ondemand, userspace, performance)")
    assert _governors(tmp_path) == ["ondemand"] * 4
