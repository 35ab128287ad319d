"""CPU backend: /proc/cpuinfo, powercap zones, cpufreq, and RAPL cap writes with readback."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import ModuleType

from hostdoubles import FaultyHost

from joulectl.backends import cpu
from joulectl.host import Host, HostIOError
from joulectl.models import Status


class NonRootHost(Host):
    """A host seen by an unprivileged user: a file without the ``other`` read bit is EACCES
    (the tests run as root, who reads everything, so the permission check is made here)."""

    def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
        real = self.path(host_path)
        if os.path.isfile(real) and not os.stat(real).st_mode & stat.S_IROTH:
            raise HostIOError(errno.EACCES, host_path)
        return super().read(host_path, limit=limit)


class RoundingHost(Host):
    """RAPL encodes limits in power units (1/8 W on most parts): a written limit reads back rounded."""

    def write(self, host_path: str, value: str) -> None:
        if host_path.endswith("_power_limit_uw"):
            value = str(int(value) // 125_000 * 125_000)
        super().write(host_path, value)


def test_two_socket_intel_host(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    inv = cpu.discover(Host(str(root)))
    assert (inv.vendor, inv.raw_model) == ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+")
    assert (inv.catalog_key, inv.model, inv.exactness) == ("INTEL_XEON_PLATINUM_8480P",) * 2 + ("exact",)
    assert (inv.sockets, inv.cores, inv.threads) == (2, 8, 16)
    assert not inv.virtual
    assert inv.driver == "intel_pstate"
    assert inv.governors == ["powersave"]
    assert inv.available_governors == ["performance", "powersave"]
    assert inv.epp == ["balance_performance"]
    assert inv.available_epp == ["default", "performance", "balance_performance", "balance_power", "power"]
    assert inv.turbo is True
    assert (inv.min_mhz, inv.nominal_mhz, inv.max_mhz) == (800, 2000, 3800)
    assert [p.cpus for p in inv.policies][:3] == [[0], [1], [2]]

    assert [(z.zone_id, z.name, z.kind, z.socket) for z in inv.zones] == [
        ("intel-rapl:0", "package-0", "package", 0),
        ("intel-rapl:0:0", "dram", "dram", 0),
        ("intel-rapl:1", "package-1", "package", 1),
        ("intel-rapl:1:0", "dram", "dram", 1),
        ("intel-rapl:2", "psys", "psys", None),
    ]
    pkg0, _, pkg1, _, psys = inv.zones
    lt = pkg0.long_term
    assert lt is not None
    assert (lt.index, lt.limit_w, lt.min_w, lt.max_w, lt.time_window_us) == (0, 350, 150, 350, 999_424)
    assert lt.limit_path == "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    assert [c.name for c in pkg0.constraints] == ["long_term", "short_term"]
    assert not pkg0.locked and pkg1.locked and pkg1.enabled is False
    assert psys.energy_readable and psys.energy_uj == 123456789 and psys.max_energy_range_uj == 262143328850
    assert [z.name for z in inv.package_zones] == ["package-0", "package-1"]
    assert (inv.cap_range_per_socket.min_w, inv.cap_range_per_socket.max_w) == (150, 350)
    assert inv.control.available and inv.telemetry.available and inv.governor_control.available
    assert inv.warnings == ["package-1 (intel-rapl:1): PL1 limit locked by firmware"]


def test_vm_says_why_nothing_can_be_capped(root: Path, trees: ModuleType) -> None:
    trees.vm_host(root)
    inv = cpu.discover(Host(str(root)))
    assert inv.virtual and inv.zones == [] and inv.policies == []
    assert inv.control.available is False
    assert inv.control.reason == (
        "nothing can be capped: no powercap (RAPL) zones under /sys/class/powercap and no cpufreq policies "
        "under /sys/devices/system/cpu/cpufreq (a virtual machine: the hypervisor exposes no RAPL)"
    )
    assert inv.telemetry.reason == "no powercap (RAPL) zones to read energy from"
    assert inv.governor_control.reason == "no cpufreq policies under /sys/devices/system/cpu/cpufreq"
    assert (inv.sockets, inv.cores, inv.threads, inv.turbo, inv.driver) == (1, 2, 2, None, None)
    assert inv.exactness == "proxy" and inv.catalog_key is None and inv.model == "Intel(R) Xeon(R) Processor"


def test_amd_energy_only_zones_and_amd_pstate(root: Path, trees: ModuleType) -> None:
    trees.amd_2s_host(root)
    inv = cpu.discover(Host(str(root)))
    assert inv.catalog_key == "AMD_EPYC_9654"
    assert inv.control.reason == "the package zones are energy-only (no long_term power limit constraint)"
    assert inv.telemetry.available
    assert inv.cap_range_per_socket.max_w is None
    assert (inv.driver, inv.turbo, inv.nominal_mhz, inv.lowest_nonlinear_mhz) == ("amd-pstate-epp", True, 2400, 1400)
    assert inv.available_epp == ["performance"]


def test_energy_readable_only_by_root(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    inv = cpu.discover(NonRootHost(str(root)))
    assert all(not z.energy_readable for z in inv.zones)
    assert inv.zones[0].energy_reason == "EACCES: energy needs root"
    assert inv.telemetry.available is False
    assert inv.telemetry.reason == "energy_uj is not readable (EACCES: energy needs root)"
    assert inv.control.available  # limits are world-readable; writing needs root, reported by cap


def test_unreadable_limit_is_unknown_with_reason(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    limit = root / "sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    limit.unlink()
    limit.mkdir()  # reading it fails with EISDIR: the value is unknown, the reason kept
    inv = cpu.discover(Host(str(root)))
    lt = inv.zones[0].long_term
    assert lt is not None and lt.limit_w is None and lt.limit_reason == "EISDIR"


def test_mmio_zone_beside_a_msr_package_is_a_package_and_the_lower_pl1_binds(root: Path, trees: ModuleType) -> None:
    # issue 13: with intel-rapl (MSR) and intel-rapl-mmio zones for one package, the lower PL1 binds
    trees.intel_2s_host(root)
    trees.rapl_zone(root, "intel-rapl-mmio:0", "package-0", [("long_term", 100_000_000, None, 350_000_000, 3)])
    zones = cpu.read_zones(Host(str(root)))
    by_id = {z.zone_id: z for z in zones}
    assert [z.zone_id for z in zones if z.kind == "package"] == ["intel-rapl:0", "intel-rapl:1", "intel-rapl-mmio:0"]
    assert (by_id["intel-rapl:0"].interface, by_id["intel-rapl-mmio:0"].interface) == ("msr", "mmio")
    assert (by_id["intel-rapl:0"].binds, by_id["intel-rapl-mmio:0"].binds, by_id["intel-rapl:1"].binds) == (
        False, True, None)
    assert cpu.binding_notes(zones) == [
        "package-0: PL1 100 W of intel-rapl-mmio:0 (mmio) binds, the lower beside intel-rapl:0 (msr) PL1 350 W; "
        "cap --cpu writes both"]


def test_cpuinfo_without_topology_counts_one_socket() -> None:
    blocks = cpu.parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n")
    assert len(blocks) == 2 and blocks[1]["processor"] == "1"


def test_set_caps_writes_long_term_and_reads_back(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    host = Host(str(root))
    inv = cpu.discover(host)
    out = cpu.set_caps(host, [(inv.zones[0], 200.0)])
    assert [(o.device, o.status, o.after_w) for o in out] == [("intel-rapl:0", Status.APPLIED, 200)]
    assert (root / "sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw").read_text() == "200000000"


def test_set_caps_locked_refused_and_no_pl1(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    host = FaultyHost(str(root), {})
    host.faults = {
        "/sys/class/powercap/intel-rapl:1/constraint_0_power_limit_uw": errno.ENODATA,
        "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw": errno.EACCES,
    }
    inv = cpu.discover(host)
    pkg0, dram0, pkg1, _, _ = inv.zones
    dram0.constraints = []
    out = cpu.set_caps(host, [(pkg0, 200.0), (pkg1, 200.0), (dram0, 10.0)])
    assert [(o.device, o.status) for o in out] == [
        ("intel-rapl:0", Status.REFUSED), ("intel-rapl:1", Status.BLOCKED), ("intel-rapl:0:0", Status.BLOCKED)
    ]
    assert out[0].message == (
        "EACCES writing /sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw: no privilege "
        "(run as root (sudo joulectl ...))"
    )
    assert out[1].message == "limit locked by firmware"
    assert out[2].message == "no long_term constraint"


def test_set_caps_einval_names_the_range(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    host = FaultyHost(str(root), {})
    host.faults = {"/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw": errno.EINVAL}
    out = cpu.set_caps(host, [(cpu.discover(host).zones[0], 900.0)])
    assert (out[0].status, out[0].message) == (Status.BLOCKED, "EINVAL: the driver refused 900 W (range 150-350 W)")


def test_set_caps_readback_that_differs_is_an_error(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    host = RoundingHost(str(root))
    out = cpu.set_caps(host, [(cpu.discover(host).zones[0], 200.06)])
    assert (out[0].status, out[0].after_w) == (Status.ERROR, 200)
    assert out[0].message == "intel-rapl:0: read back 200 W after writing 200.06 W"


def test_available_epp_follows_each_policys_governor(root: Path, trees: ModuleType) -> None:
    trees.amd_2s_host(root)  # every policy under performance: EPP list "performance" only
    base = "/sys/devices/system/cpu/cpufreq/policy3"
    trees.write(root, f"{base}/scaling_governor", "powersave\n")
    trees.write(root, f"{base}/energy_performance_preference", "balance_power\n")
    trees.write(root, f"{base}/energy_performance_available_preferences",
                "default performance balance_performance balance_power power\n")
    inv = cpu.discover(Host(str(root)))
    p0, p3 = inv.policies[0], inv.policies[3]
    assert (p0.governor, p0.available_epp) == ("performance", ["performance"])
    assert (p3.governor, p3.epp) == ("powersave", "balance_power")
    assert p3.available_epp == ["default", "performance", "balance_performance", "balance_power", "power"]
    assert inv.governors == ["performance", "powersave"]
    assert inv.epp == ["performance", "balance_power"]
    assert all(p.driver == "amd-pstate-epp" for p in inv.policies)
