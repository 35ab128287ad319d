"""CPU backend edge cases with expected values worked out by hand from the kernel's ABI
(docs/hardware.md): a package shown by three powercap zones, and a first cpufreq policy that lists
no CPUs. Written for mutants of backends/cpu.py that survived (docs/TESTING.md)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import cpu
from joulectl.host import Host
from joulectl.models import Control, PowercapConstraint, PowercapZone


def _package(zone_id: str, interface: str, pl1_w: float | None) -> PowercapZone:
    constraints = [] if pl1_w is None else [PowercapConstraint(
        index=0, name="long_term", limit_w=pl1_w, min_w=None, max_w=None, time_window_us=None,
        limit_path=f"/sys/class/powercap/{zone_id}/constraint_0_power_limit_uw")]
    return PowercapZone(path=f"/sys/class/powercap/{zone_id}", zone_id=zone_id, name="package-0", kind="package",
                        socket=0, enabled=True, energy_readable=True, energy_uj=0, max_energy_range_uj=None,
                        constraints=constraints, interface=interface)


def test_three_zones_of_one_package_give_one_note_naming_both_others() -> None:
    # One note per package: the binding zone's, naming every other zone; a zone that does not
    # bind says nothing, even beside another zone that does not bind either.
    zones = [_package("intel-rapl:0", "msr", 350.0), _package("intel-rapl-mmio:0", "mmio", 100.0),
             _package("intel-rapl-mmio:1", "mmio", 280.0)]
    cpu._mark_binding(zones)
    assert [z.binds for z in zones] == [False, True, False]
    assert cpu.binding_notes(zones) == [
        "package-0: PL1 100 W of intel-rapl-mmio:0 (mmio) binds, the lower beside intel-rapl:0 (msr) PL1 350 W, "
        "intel-rapl-mmio:1 (mmio) PL1 280 W; cap --cpu writes both"]


def test_zones_without_a_pl1_bind_nothing_and_give_no_note() -> None:
    zones = [_package("intel-rapl:0", "msr", None), _package("intel-rapl-mmio:0", "mmio", None),
             _package("intel-rapl-mmio:1", "mmio", None)]
    cpu._mark_binding(zones)
    assert [z.binds for z in zones] == [False, False, False]
    assert cpu.binding_notes(zones) == []


def test_nominal_from_acpi_cppc_of_cpu0_when_policy0_lists_no_cpus(root: Path, trees: ModuleType) -> None:
    # cppc_cpufreq: acpi_cppc/nominal_freq is in MHz (Documentation/admin-guide/acpi/cppc_sysfs.rst);
    # policy<N> is named after its first CPU (Documentation/admin-guide/pm/cpufreq.rst), so policy0
    # without affected_cpus/related_cpus is CPU 0's.
    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Neoverse-N1", "ARM", 1, 4, 1, "fp asimd"))
    trees.cpufreq_policies(root, 4, driver="cppc_cpufreq", governors="ondemand performance schedutil",
                           governor="schedutil", min_khz=1_000_000, max_khz=3_000_000)
    for i in range(4):
        for leaf in ("affected_cpus", "related_cpus"):
            (root / f"sys/devices/system/cpu/cpufreq/policy{i}/{leaf}").unlink()
    trees.write(root, "/sys/devices/system/cpu/cpu0/acpi_cppc/nominal_freq", 2600)
    inv = cpu.discover(Host(str(root)))
    assert inv.nominal_mhz == 2600.0


def test_cpuinfo_summary_reads_the_first_block_after_a_leading_blank_line() -> None:
    text = ("\n\nprocessor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6530\n"
            "physical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
            "model name\t: Intel(R) Xeon(R) Gold 6530\nphysical id\t: 0\ncore id\t: 1\n\n")
    first, threads, sockets, cores = cpu.cpuinfo_summary(text)
    assert (first["processor"], first["model name"]) == ("0", "Intel(R) Xeon(R) Gold 6530")
    assert (threads, sockets, cores) == (2, {"0"}, {("0", "0"), ("0", "1")})


def test_a_boost_switch_is_amd_cpb_only_on_an_amd_cpu(root: Path, trees: ModuleType) -> None:
    # acpi-cpufreq offers cpufreq/boost on Intel and AMD alike (Documentation/admin-guide/pm/
    # cpufreq.rst); only on AMD is it Core Performance Boost (cpuinfo_max_freq then the base clock)
    trees.cpufreq_policies(root, 2, driver="acpi-cpufreq", governors="ondemand performance", governor="ondemand",
                           min_khz=1_200_000, max_khz=3_000_000)
    trees.write(root, "/sys/devices/system/cpu/cpufreq/boost", 1)
    host = Host(str(root))
    policies = cpu.read_policies(host)
    flags = {"flags": "fpu msr"}
    assert cpu._has_cpb(host, flags, "AuthenticAMD", policies) is True
    assert cpu._has_cpb(host, flags, "HygonGenuine", policies) is True
    assert cpu._has_cpb(host, flags, "GenuineIntel", policies) is False
    assert cpu._has_cpb(host, {"flags": "fpu cpb"}, "GenuineIntel", policies) is True  # the flag says so


@pytest.mark.parametrize(("boosts", "turbo"), [
    ((1, 1), True), ((0, 1), True), ((0, 0), False), ((None, 0), False), ((None, None), None)])
def test_turbo_from_the_per_policy_boost_files(root: Path, trees: ModuleType, boosts: tuple[int | None, ...],
                                               turbo: bool | None) -> None:
    # amd-pstate without the global cpufreq/boost: each policy's own boost file (0/1,
    # amd-pstate.rst "boost", docs/hardware.md 4.3); turbo is on when any policy boosts, unknown
    # when no policy has the file (kills backends/cpu.py:433 `b is not None` -> `is`, and :435)
    trees.cpufreq_policies(root, 2, driver="amd-pstate-epp", governors="powersave performance", governor="powersave",
                           min_khz=400_000, max_khz=3_700_000)
    for n, b in enumerate(boosts):
        if b is not None:
            trees.write(root, f"/sys/devices/system/cpu/cpufreq/policy{n}/boost", b)
    host = Host(str(root))
    assert cpu._turbo(host, cpu.read_policies(host)) is turbo


def test_a_hybrid_cpu_spans_the_lowest_minimum_and_the_highest_maximum_clock(root: Path, trees: ModuleType) -> None:
    # a hybrid Core (intel_pstate, one policy per CPU): a P-core's cpuinfo range 800-5,400 MHz, an
    # E-core's 700-4,300 MHz (cpufreq.rst: cpuinfo_min_freq/cpuinfo_max_freq are per policy); the
    # node's clock range spans both (kills backends/cpu.py:505 `max(maxs_khz)` -> `min`)
    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("13th Gen Intel(R) Core(TM) i9-13900K", "GenuineIntel", 1, 2, 1,
                                                      "fpu hwp"))
    trees.cpufreq_policies(root, 2, driver="intel_pstate", governors="performance powersave", governor="powersave",
                           min_khz=800_000, max_khz=5_400_000)
    trees.write(root, "/sys/devices/system/cpu/cpufreq/policy1/cpuinfo_min_freq", 700_000)
    trees.write(root, "/sys/devices/system/cpu/cpufreq/policy1/cpuinfo_max_freq", 4_300_000)
    inv = cpu.discover(Host(str(root)))
    assert (inv.min_mhz, inv.max_mhz) == (700, 5400)


def test_a_constraint_is_read_when_only_its_name_or_only_its_limit_is_there(root: Path, trees: ModuleType) -> None:
    # powercap.rst: constraint_X_name is optional; a constraint whose limit file is missing is
    # still listed (unknown limit): the constraints end only where neither file is (kills
    # backends/cpu.py:169 `exists(name) or exists(power_limit_uw)` -> `and`)
    base = trees.rapl_zone(root, "intel-rapl:0", "package-0", [("long_term", 250_000_000, None, 350_000_000, 999_424),
                                                              ("short_term", 300_000_000, None, None, 2_440)])
    (root / base.lstrip("/") / "constraint_0_name").unlink()
    (root / base.lstrip("/") / "constraint_1_power_limit_uw").unlink()
    (zone,) = cpu.read_zones(Host(str(root)))
    assert [(c.index, c.name, c.limit_w) for c in zone.constraints] == [(0, None, 250), (1, "short_term", None)]


def test_why_the_cpu_cannot_be_capped(root: Path, trees: ModuleType) -> None:
    # cpufreq policies without any powercap zone: the zones are missing, not everything; a package
    # zone without a long_term constraint: energy only (kills backends/cpu.py:592 `not zones and
    # not policies` -> `or`, and :604 `Control(False, ...)` -> `True`)
    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 1, 1, 1, "fpu"))
    trees.cpufreq_policies(root, 1, driver="intel_pstate", governors="performance powersave", governor="powersave",
                           min_khz=800_000, max_khz=3_800_000)
    control = cpu.discover(Host(str(root))).control
    assert (control.available, control.reason) == (False, "no powercap (RAPL) zones under /sys/class/powercap")
    trees.rapl_zone(root, "intel-rapl:0", "package-0")
    control = cpu.discover(Host(str(root))).control
    assert (control.available, control.reason) == (
        False, "the package zones are energy-only (no long_term power limit constraint)")


def test_a_cpuinfo_without_physical_id_is_one_socket_and_no_policies_no_governor(root: Path, trees: ModuleType) -> None:
    # a guest's /proc/cpuinfo often has no "physical id": its processors are one socket; without
    # cpufreq policies no governor can be set (written after the seed-9174 deciding sample: kills
    # backends/cpu.py:455 `1 if threads else 0` -> `2` and :497 `Control(False, ...)` -> `True`)
    trees.write(root, "/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\n\n"
                                       "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\n\n")
    inv = cpu.discover(Host(str(root)))
    assert (inv.threads, inv.sockets) == (2, 1)
    assert (inv.governor_control.available, inv.governor_control.reason) == (
        False, "no cpufreq policies under /sys/devices/system/cpu/cpufreq")


def _two_packages(root: Path, trees: ModuleType, pkg0: tuple[int | None, int | None],
                  pkg1: tuple[int | None, int | None]) -> None:
    # powercap's constraint_N_min_power_uw and _max_power_uw are optional per zone
    # (Documentation/power/powercap/powercap.rst, docs/hardware.md 3.1); a range per socket spans every package's
    trees.write(root, "/proc/cpuinfo", trees.cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 2, 2, 1, "fpu"))
    for n, (lo, hi) in enumerate((pkg0, pkg1)):
        trees.rapl_zone(root, f"intel-rapl:{n}", f"package-{n}", [("long_term", 250_000_000, lo, hi, 999_424)])


def test_the_socket_range_is_the_lowest_minimum_and_the_highest_maximum(root: Path, trees: ModuleType) -> None:
    # (the default is the highest maximum too: RAPL has no default of its own)
    _two_packages(root, trees, (150_000_000, 300_000_000), (125_000_000, 350_000_000))
    r = cpu.discover(Host(str(root))).cap_range_per_socket
    assert (r.min_w, r.max_w, r.default_w) == (125, 350, 350)


def test_a_package_without_a_minimum_or_maximum_leaves_the_others(root: Path, trees: ModuleType) -> None:
    _two_packages(root, trees, (None, 300_000_000), (125_000_000, None))
    r = cpu.discover(Host(str(root))).cap_range_per_socket
    assert (r.min_w, r.max_w, r.default_w) == (125, 300, 300)


def test_a_zone_symlinked_out_of_the_root_is_a_row_never_read(tmp_path: Path, trees: ModuleType) -> None:
    # /sys/class/powercap/intel-rapl:0 pointing outside the host root (EXDEV from Host): a package
    # row naming why, nothing read from it; a subzone pointing outside is no row (only top-level
    # zones are packages). (kills backends/cpu.py:205, four, and :208 `energy_readable=False` ->
    # `True`: unreached before, no test of the backends put a powercap zone out of the root)
    root, outside = tmp_path / "root", tmp_path / "outside"
    trees.rapl_zone(root, "intel-rapl:1", "package-1", [("long_term", 200_000_000, None, 250_000_000, 1_000_000)])
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:1:0", "dram")):
        (outside / zone).mkdir(parents=True)
        (outside / zone / "name").write_text(name + "\n")
        (outside / zone / "energy_uj").write_text("5\n")
        (root / "sys/class/powercap" / zone).symlink_to(outside / zone)
    rows = [(z.zone_id, z.name, z.kind, z.socket, z.enabled, z.energy_readable, z.energy_uj, z.energy_reason,
             len(z.constraints)) for z in cpu.read_zones(Host(str(root)))]
    assert rows == [
        ("intel-rapl:0", "intel-rapl:0", "package", None, None, False, None,
         f"resolves outside the host root (to {outside}/intel-rapl:0/name)", 0),
        ("intel-rapl:1", "package-1", "package", 1, True, True, 123456789, None, 1),
    ]


def test_off_is_a_core_zone_with_enabled_0_and_the_interface_is_the_control_type(tmp_path: Path,
                                                                                 trees: ModuleType) -> None:
    # a core zone reading enabled 0 with a limit of 0 is off; one reading enabled 1 holds its limit
    # of 0 W (kills backends/cpu.py:232 `and` -> `or`). A zone's interface is its control type:
    # msr for intel-rapl, mmio for intel-rapl-mmio, the type itself for any other (kills :248:82
    # the default's `[0]` -> `[1]`)
    trees.rapl_zone(tmp_path, "intel-rapl:0", "package-0", [("long_term", 200_000_000, None, 250_000_000, 1_000_000)])
    trees.rapl_zone(tmp_path, "intel-rapl:0:0", "core", [("long_term", 0, None, None, 976)], enabled=0)
    trees.rapl_zone(tmp_path, "intel-rapl:0:1", "core", [("long_term", 0, None, None, 976)], enabled=1)
    trees.rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", [("long_term", 150_000_000, None, None, 28000000)])
    trees.rapl_zone(tmp_path, "acme-power:0", "package-0", [("long_term", 100_000_000, None, None, 28000000)])
    zones = {z.zone_id: z for z in cpu.read_zones(Host(str(tmp_path)))}
    assert [(z.constraints[0].limit_w, z.constraints[0].limit_reason) for z in
            (zones["intel-rapl:0:0"], zones["intel-rapl:0:1"])] == [(None, "off (enabled 0)"), (0.0, None)]
    assert {k: z.interface for k, z in zones.items() if z.kind == "package"} == {
        "intel-rapl:0": "msr", "intel-rapl-mmio:0": "mmio", "acme-power:0": "acme-power"}


def test_a_zone_is_read_for_at_most_32_constraints(tmp_path: Path, trees: ModuleType) -> None:
    # RAPL zones show at most three constraints (long_term, short_term, peak_power: docs/hardware.md
    # 3.3); joulectl stops at 32 whatever a tree holds: constraint_0 to constraint_31, never
    # constraint_32 (kills backends/cpu.py:167 `range(32)` -> `range(33)`)
    trees.rapl_zone(tmp_path, "intel-rapl:0", "package-0",
                    [(f"c{i}", 1_000_000 * (i + 1), None, None, 1000) for i in range(33)])
    (zone,) = cpu.read_zones(Host(str(tmp_path)))
    assert [(c.index, c.name, c.limit_w) for c in zone.constraints] == [(i, f"c{i}", i + 1.0) for i in range(32)]


def test_a_binding_zone_without_a_readable_pl1_gets_no_note() -> None:
    # binding_notes takes zones from any caller: one marked binding whose PL1 reads nothing says
    # nothing (kills backends/cpu.py:279 the second `or` -> `and`, which named "unknown")
    a, b = _package("intel-rapl:0", "msr", None), _package("intel-rapl-mmio:0", "mmio", 15.0)
    a.constraints = [PowercapConstraint(index=0, name="long_term", limit_w=None, min_w=None, max_w=None,
                                        time_window_us=None, limit_path="/p")]
    a.binds = True
    assert cpu.binding_notes([a, b]) == []


def test_a_legacy_cpufreq_directory_is_named_after_the_cpu_owning_it(tmp_path: Path, trees: ModuleType) -> None:
    # Kernels without policyN: CPUs sharing a policy show cpuN/cpufreq as a symlink to the owner's
    # directory, and the owner need not be the lowest CPU (cpu0 offlined and back: policy->cpu moved
    # to cpu1). The policy is cpu1's, at cpu1's real directory, listed once (kills backends/cpu.py:411
    # `[-2]` -> `[-3]` and :413 `real == d` -> `!=`)
    cpu_dir = tmp_path / "sys/devices/system/cpu"
    for n in (1, 2):
        trees.write_many(tmp_path, f"/sys/devices/system/cpu/cpu{n}/cpufreq", {
            "scaling_driver": "acpi-cpufreq", "scaling_governor": "ondemand",
            "scaling_available_governors": "ondemand performance", "affected_cpus": "0 1" if n == 1 else "2",
            "cpuinfo_min_freq": 1_064_000, "cpuinfo_max_freq": 2_000_000})
    (cpu_dir / "cpu0").mkdir()
    (cpu_dir / "cpu0" / "cpufreq").symlink_to("../cpu1/cpufreq")
    policies = cpu.read_policies(Host(str(tmp_path)))
    assert [(p.name, p.path, p.cpus, p.layout) for p in policies] == [
        ("cpu1", "/sys/devices/system/cpu/cpu1/cpufreq", [0, 1], "legacy"),
        ("cpu2", "/sys/devices/system/cpu/cpu2/cpufreq", [2], "legacy")]


def test_a_node_without_proc_cpuinfo_counts_no_socket(tmp_path: Path) -> None:
    # no /proc/cpuinfo: no processor block, so no thread, core or socket, and the reason (kills
    # backends/cpu.py:455 `1 if threads else 0` -> `else 1`); no powercap zone: no energy to read
    # (kills :491 `Control(False, ...)` -> `True`)
    inv = cpu.discover(Host(str(tmp_path)))
    assert (inv.sockets, inv.cores, inv.threads, inv.vendor, inv.warnings) == (
        0, 0, 0, None, ["/proc/cpuinfo unreadable (ENOENT)"])
    assert inv.telemetry == Control(False, "no powercap (RAPL) zones to read energy from")


def test_policies_listing_no_governor_give_no_governor_control(tmp_path: Path, trees: ModuleType) -> None:
    # a cpufreq policy whose scaling_available_governors is empty (kills backends/cpu.py:495
    # `Control(False, ...)` -> `True`, unreached before)
    trees.cpufreq_policies(tmp_path, 2, driver="intel_cpufreq", governors="", governor="schedutil",
                           min_khz=800_000, max_khz=3_800_000)
    inv = cpu.discover(Host(str(tmp_path)))
    assert (len(inv.policies), inv.governor_control) == (2, Control(False, "the cpufreq policies list no governors"))


def test_cores_from_cpu_cores_times_sockets_without_core_ids(tmp_path: Path, trees: ModuleType) -> None:
    # a cpuinfo with "cpu cores" (cores per package) and no "core id": 4 cores on each of 2
    # packages are 8 cores (kills backends/cpu.py:459 `*` -> `/`, unreached before)
    block = "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU\nphysical id\t: {s}\n" \
            "cpu cores\t: 4\nflags\t\t: fpu\n"
    trees.write(tmp_path, "/proc/cpuinfo", "\n".join(block.format(n=n, s=n % 2) for n in range(2)))
    inv = cpu.discover(Host(str(tmp_path)))
    assert (inv.sockets, inv.cores, inv.threads) == (2, 8, 2)


@pytest.mark.parametrize(("highest", "nominal_perf", "nominal", "note"), [
    # amd-pstate without amd_pstate_nominal_freq: amd_pstate_max_freq x nominal_perf / highest_perf
    (166, 166, 3700.0, "nominal clock 3700 MHz derived from amd_pstate_max_freq x acpi_cppc/nominal_perf / "
                       "amd_pstate_highest_perf (no amd_pstate_nominal_freq)"),  # no boost: nominal = highest
    (166, 200, None, "nominal clock unknown: no amd_pstate_nominal_freq and no amd-pstate perf levels to derive it "
                     "from"),  # a nominal perf above the highest is no perf level: unknown
])
def test_the_amd_pstate_nominal_clock_derived_from_its_perf_levels(
        tmp_path: Path, trees: ModuleType, highest: int, nominal_perf: int, nominal: float | None, note: str) -> None:
    # (kills backends/cpu.py:580 the first `and` -> `or` and `nominal_perf <= highest` -> `<`)
    trees.cpufreq_policies(tmp_path, 1, driver="amd-pstate-epp", governors="performance powersave",
                           governor="powersave", min_khz=400_000, max_khz=3_700_000)
    trees.write(tmp_path, "/sys/devices/system/cpu/cpufreq/policy0/amd_pstate_highest_perf", highest)
    trees.write(tmp_path, "/sys/devices/system/cpu/cpufreq/policy0/amd_pstate_max_freq", 3_700_000)
    trees.write(tmp_path, "/sys/devices/system/cpu/cpu0/acpi_cppc/nominal_perf", nominal_perf)
    inv = cpu.discover(Host(str(tmp_path)))
    assert (inv.nominal_mhz, [w for w in inv.warnings if w.startswith("nominal")]) == (nominal, [note])


def test_the_nominal_clock_is_the_highest_base_frequency(tmp_path: Path, trees: ModuleType) -> None:
    # a hybrid CPU's policies state two base clocks (P-cores 2.1 GHz, E-cores 1.6 GHz): the node's
    # nominal clock is the P-cores' (kills backends/cpu.py:565 `max` -> `min`)
    trees.cpufreq_policies(tmp_path, 2, driver="intel_pstate", governors="performance powersave",
                           governor="powersave", min_khz=800_000, max_khz=4_900_000, base_khz=2_100_000)
    trees.write(tmp_path, "/sys/devices/system/cpu/cpufreq/policy1/base_frequency", 1_600_000)
    assert cpu.discover(Host(str(tmp_path))).nominal_mhz == 2100.0


def test_zones_without_a_package_cannot_be_capped(tmp_path: Path, trees: ModuleType) -> None:
    # a platform zone alone (psys, top level) has no package PL1 to cap (kills backends/cpu.py:601
    # `Control(False, ...)` -> `True`, unreached before)
    trees.rapl_zone(tmp_path, "intel-rapl:1", "psys", [("long_term", 0, None, None, 27983872)])
    inv = cpu.discover(Host(str(tmp_path)))
    assert ([z.kind for z in inv.zones], inv.control) == (["psys"], Control(False, "no package powercap zone"))


def test_every_package_locked_by_firmware_cannot_be_capped(tmp_path: Path, trees: ModuleType) -> None:
    # both packages' PL1 locked by firmware (enabled reads 0 when PL1 is locked: docs/hardware.md
    # 3.3) (kills backends/cpu.py:606 `Control(False, ...)` -> `True`, unreached before)
    for n in (0, 1):
        trees.rapl_zone(tmp_path, f"intel-rapl:{n}", f"package-{n}",
                        [("long_term", 250_000_000, None, 250_000_000, 999424)], enabled=0)
    inv = cpu.discover(Host(str(tmp_path)))
    assert inv.control == Control(False, "the long_term (PL1) limit locked by firmware on every package")
