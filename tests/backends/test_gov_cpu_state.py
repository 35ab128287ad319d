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
