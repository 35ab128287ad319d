"""``gov_cpu.read_state``: a policy's governor and EPP as read now, a snapshot nothing changes.

cpufreq.rst and intel_pstate.rst (docs/hardware.md 4.1-4.2): ``scaling_governor`` and
``energy_performance_preference`` are per policy; a policy without the EPP file has no EPP.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import cpu, gov_cpu
from joulectl.host import Host
from joulectl.models import CpufreqPolicy


def test_a_policy_state_is_a_snapshot_read_from_its_files(root: Path, trees: ModuleType) -> None:
    trees.cpufreq_policies(root, 2, driver="intel_pstate", governors="performance powersave", governor="powersave",
                           min_khz=800_000, max_khz=3_800_000, epp="balance_performance",
                           epps="default performance balance_performance balance_power power")
    (root / "sys/devices/system/cpu/cpufreq/policy1/energy_performance_preference").unlink()
    host = Host(str(root))
    p0, p1 = cpu.read_policies(host)
    s0, s1 = gov_cpu.read_state(host, p0), gov_cpu.read_state(host, p1)
    assert (s0.governor, s0.epp, s0.driver, s0.has_epp) == ("powersave", "balance_performance", "intel_pstate", True)
    assert s0.available_governors == ["performance", "powersave"]
    assert (s1.governor, s1.epp, s1.has_epp) == ("powersave", None, False)
    # the state before a write is compared with the state after it: neither can be changed in
    # between (kills backends/gov_cpu.py:47 `@record(frozen=True)` -> `False`)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s0.governor = "performance"  # type: ignore[misc]


def _policy(governor: str | None, epp: str | None, available_epp: list[str]) -> CpufreqPolicy:
    return CpufreqPolicy(name="policy0", path="/sys/devices/system/cpu/cpufreq/policy0", cpus=[0],
                         driver="intel_pstate", governor=governor, available_governors=["performance", "powersave"],
                         epp=epp, available_epp=available_epp, min_khz=800_000, max_khz=3_800_000, base_khz=None,
                         cur_khz=None)


def test_the_state_from_the_inventory_only_when_it_tells_the_governor_and_the_epp_file() -> None:
    # the inventory's own reads stand in for read_state when they say the governor and whether
    # there is an EPP file (a value, or a list of them); otherwise None: read the files (kills
    # backends/gov_cpu.py:91 `governor is None` -> `is not None`)
    s = gov_cpu.state_from_inventory(_policy("powersave", "balance_power", ["performance", "balance_power"]))
    assert s is not None
    assert (s.governor, s.epp, s.available_epp, s.driver, s.has_epp) == (
        "powersave", "balance_power", ["performance", "balance_power"], "intel_pstate", True)
    assert gov_cpu.state_from_inventory(_policy("powersave", None, ["performance"])) is not None
    assert gov_cpu.state_from_inventory(_policy(None, "balance_power", ["balance_power"])) is None
    assert gov_cpu.state_from_inventory(_policy("performance", None, [])) is None


def test_a_show_row_gives_the_policy_clock_in_whole_mhz(root: Path, trees: ModuleType) -> None:
    # scaling_cur_freq is in kHz (cpufreq.rst): 2,400,250 kHz shows as 2400 MHz, not 2400.25
    # (kills backends/gov_cpu.py:369 `cur_khz // 1000` -> `/`)
    from joulectl.ops import governor as gov
    from joulectl.ops.discover import inventory
    from joulectl.ops.journal import Journal

    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 1, 1, 1, "fpu"))
    trees.cpufreq_policies(root, 1, driver="intel_pstate", governors="performance powersave", governor="powersave",
                           min_khz=800_000, max_khz=4_000_500)
    host = Host(str(root))
    rows, _ = gov.show(host, inventory(host, policy_details=True), Journal(), gpu=False, cpu=True)
    assert [(r.device, r.clocks) for r in rows] == [("cpufreq:policy0", "2400 MHz")]


def test_a_cpu_show_row_names_the_vendor_and_the_raw_model(root: Path, trees: ModuleType) -> None:
    # the row's VENDOR is /proc/cpuinfo's vendor_id in lower case ("cpu" without one), its MODEL the
    # raw "model name" (the catalog's name without one) (written after the deciding samples: kills
    # backends/gov_cpu.py:179 `cpu.vendor or "cpu"` -> `and` and :366 `raw_model or model` -> `and`)
    from joulectl.ops import governor as gov
    from joulectl.ops.discover import inventory
    from joulectl.ops.journal import Journal

    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 1, 1, 1, "fpu"))
    trees.cpufreq_policies(root, 1, driver="intel_pstate", governors="performance powersave", governor="powersave",
                           min_khz=800_000, max_khz=3_800_000)
    host = Host(str(root))
    inv = inventory(host)
    rows, _ = gov.show(host, inv, Journal(), gpu=False, cpu=True)
    assert [(r.vendor, r.model) for r in rows] == [("genuineintel", "Intel(R) Xeon(R) Platinum 8480+")]
    inv.cpu.vendor, inv.cpu.raw_model, inv.cpu.model = None, None, "Xeon Platinum 8480+"
    rows, _ = gov.show(host, inv, Journal(), gpu=False, cpu=True)
    assert [(r.vendor, r.model) for r in rows] == [("cpu", "Xeon Platinum 8480+")]
