"""discover and cap read what they report: every policy's governor, EPP and clock range, but the
CPUs and the current clock of the first policy only; the governor commands read every policy in
full. The same aggregates either way."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from joulectl.backends import cpu
from joulectl.host import Host
from joulectl.ops.discover import inventory


class CountingHost(Host):
    """Counts the attribute reads by leaf name."""

    def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
        leaf = host_path.rsplit("/", 1)[-1]
        self.counts[leaf] = self.counts.get(leaf, 0) + 1
        return super().read(host_path, limit=limit)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.counts: dict[str, int] = {}


def test_discover_reads_the_cpus_and_clock_of_the_first_policy_only(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    full_host, lean_host = CountingHost(str(root)), CountingHost(str(root))
    full = cpu.discover(full_host)
    lean = cpu.discover(lean_host, details=False)
    # 16 policies: the full read takes affected_cpus and scaling_cur_freq of each.
    assert (full_host.counts["affected_cpus"], full_host.counts["scaling_cur_freq"]) == (16, 16)
    assert (lean_host.counts["affected_cpus"], lean_host.counts.get("scaling_cur_freq", 0)) == (1, 0)
    for leaf in ("scaling_governor", "energy_performance_preference", "cpuinfo_min_freq", "cpuinfo_max_freq",
                 "base_frequency"):
        assert (full_host.counts[leaf], lean_host.counts[leaf]) == (16, 16), leaf
    assert sum(full_host.counts.values()) - sum(lean_host.counts.values()) == 31
    assert [(p.name, p.cpus, p.cur_khz) for p in lean.policies[:2]] == [("policy0", [0], None), ("policy1", [], None)]
    assert [(p.name, p.cpus, p.cur_khz) for p in full.policies[:2]] == [("policy0", [0], 2_300_000),
                                                                        ("policy1", [1], 2_300_000)]
    for field in ("driver", "governors", "available_governors", "epp", "available_epp", "turbo", "min_mhz",
                  "nominal_mhz", "max_mhz", "sockets", "cores", "threads"):
        assert getattr(lean, field) == getattr(full, field), field
    assert (lean.min_mhz, lean.nominal_mhz, lean.max_mhz) == (800, 2000, 3800)
    # discover's inventory (and cap's) is the lean one.
    host = CountingHost(str(root))
    inventory(host, gpus=False)
    assert (host.counts["affected_cpus"], host.counts.get("scaling_cur_freq", 0)) == (1, 0)


def test_governor_inventory_reads_every_policy_in_full(root: Path, trees: ModuleType) -> None:
    from joulectl.ops.governor import _inventory

    trees.intel_2s_host(root)
    host = CountingHost(str(root))
    inv = _inventory(host, gpu=False, cpu=True)
    assert (host.counts["affected_cpus"], host.counts["scaling_cur_freq"]) == (16, 16)
    assert [p.cpus for p in inv.cpu.policies] == [[i] for i in range(16)]
