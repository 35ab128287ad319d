"""Plain files as close as files allow (issue 14 item 2), on rendered trees.

Writes made before the first run are checked at start and corrected on disk with an event; a
``pp_dpm_sclk`` mask written while no emulator ran reads as the level table again; turbo turned
off at run time moves every policy's ``cpuinfo_max_freq``; a store ends at its first NUL; one
policy's attribute is its own file.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec
from joulectl.sim.tree import render_nodes

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: t}}
spec:
  defaults:
    baseLoad: {{cpuUtil: 0.5, gpuUtil: 0.5}}
  pools:
  - {{name: n, profile: {profile}, count: 1}}
"""
POLICY = "sys/devices/system/cpu/cpufreq/policy{}"
RAPL0 = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
NO_TURBO = "sys/devices/system/cpu/intel_pstate/no_turbo"


def _render(tmp_path: Path, profile: str) -> tuple[str, Path]:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(profile=profile))
    root = tmp_path / "root"
    render_nodes(load_spec(str(path)).nodes, str(root), workers=1)
    return str(path), root


def _events(root: Path) -> list[dict[str, object]]:
    path = root / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_pre_run_writes_are_corrected_on_disk_with_an_event(tmp_path: Path) -> None:
    spec, root = _render(tmp_path, "intel-xeon-2s-rapl")
    node = root / "n-0"
    pl1 = node / RAPL0 / "constraint_0_power_limit_uw"
    pl1.write_text("5000000000\n")  # 5000 W: 40000 units of 1/8 W in a 15-bit field
    (node / POLICY.format(2) / "scaling_max_freq").write_text("9999999\n")
    (node / POLICY.format(3) / "scaling_governor").write_text("turbo\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert pl1.read_text() == "904000000\n"  # (40000 - 32768) * 125000 µW
    assert (node / POLICY.format(2) / "scaling_max_freq").read_text() == "4000000\n"
    assert (node / POLICY.format(3) / "scaling_governor").read_text() == "powersave\n"
    events = {(e["name"], e["attributes"]["file"].rsplit("/", 1)[-1]): e["attributes"]  # type: ignore[index,union-attr]
              for e in _events(root)}
    wrapped = events[("joulie.sim.write.clamped", "constraint_0_power_limit_uw")]
    assert (wrapped["value"], wrapped["readback"], wrapped["reason"]) == ("5000000000", "904000000", "wrapped")
    clamped = events[("joulie.sim.write.clamped", "scaling_max_freq")]
    assert (clamped["value"], clamped["readback"]) == ("9999999", "4000000")
    rejected = events[("joulie.sim.write.rejected", "scaling_governor")]
    assert rejected["errno"] == errno.EINVAL


def test_flex_cap_written_before_the_run_reads_back_clamped(tmp_path: Path) -> None:
    spec, root = _render(tmp_path, "intel-flex-170-4gpu")
    cap = next((root / "n-0" / "sys/bus/pci/devices/0000:4d:00.0/hwmon").iterdir()) / "power1_max"
    cap.write_text("500000000\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert cap.read_text() == "150000000\n"
    [event] = [e for e in _events(root) if e["name"] == "joulie.sim.write.clamped"]
    assert event["attributes"] == {"file": "/sys/devices/pci0000:4d/0000:4d:00.0/hwmon/" + cap.parent.name
                                   + "/power1_max", "kind": "intel_pl1", "value": "500000000",
                                   "readback": "150000000", "reason": "clamped"}


def test_sclk_mask_written_while_down_reads_the_table_again(tmp_path: Path) -> None:
    spec, root = _render(tmp_path, "amd-instinct-mi300x-8gpu")
    sclk = root / "n-0" / "sys/bus/pci/devices/0000:0c:00.0/pp_dpm_sclk"
    table = sclk.read_text()
    assert table == "0: 500Mhz\n1: 1300Mhz\n2: 2100Mhz *\n"
    sclk.write_text("0 1")  # what `governor set efficient` writes with no emulator running
    (root / "n-0" / "sys/bus/pci/devices/0000:0c:00.0/power_dpm_force_performance_level").write_text("manual\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert sclk.read_text() == "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n"
    # a refused mask (past the table) also leaves the table, with an event
    sclk.write_text("5")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert sclk.read_text().startswith("0: 500Mhz\n")
    [event] = [e for e in _events(root) if e["name"] == "joulie.sim.write.rejected"]
    assert event["attributes"]["errno"] == errno.EINVAL  # type: ignore[index]


def test_an_sclk_mask_written_under_auto_is_refused_and_the_table_stays(tmp_path: Path) -> None:
    # amdgpu takes a pp_dpm_sclk mask in manual only (smu_force_ppclk_levels: -EINVAL otherwise)
    spec, root = _render(tmp_path, "amd-instinct-mi300x-8gpu")
    dev = root / "n-0" / "sys/bus/pci/devices/0000:0c:00.0"
    runtime.run(spec, str(root), ticks=1, fast=True)
    (dev / "pp_dpm_sclk").write_text("0 1")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (dev / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 1300Mhz\n2: 2100Mhz *\n"
    [event] = [e for e in _events(root) if e["name"] == "joulie.sim.write.rejected"]
    assert event["attributes"] == {"file": "/sys/devices/pci0000:0c/0000:0c:00.0/pp_dpm_sclk", "kind": "amd_sclk",
                                   "value": "0 1", "error.type": "einval", "errno": errno.EINVAL,
                                   "reason": "force clock level is for dpm manual mode only"}
    # manual and the mask written between the same two ticks: the level is taken first
    (dev / "power_dpm_force_performance_level").write_text("manual\n")
    (dev / "pp_dpm_sclk").write_text("0 1")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (dev / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n"


def test_cpuinfo_max_freq_follows_turbo_at_run_time(tmp_path: Path) -> None:
    spec, root = _render(tmp_path, "intel-xeon-2s-rapl")
    node = root / "n-0"
    runtime.run(spec, str(root), ticks=1, fast=True)
    (node / POLICY.format(7) / "scaling_max_freq").write_text("3000000\n")
    (node / "sys/devices/system/cpu/intel_pstate/no_turbo").write_text("1\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    for p in (0, 7, 127):
        assert (node / POLICY.format(p) / "cpuinfo_max_freq").read_text() == "2100000\n"
        assert (node / POLICY.format(p) / "scaling_max_freq").read_text() == "2100000\n"
    # a maximum written while turbo is off stops at the base frequency
    (node / POLICY.format(9) / "scaling_max_freq").write_text("3500000\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (node / POLICY.format(9) / "scaling_max_freq").read_text() == "2100000\n"
    (node / "sys/devices/system/cpu/intel_pstate/no_turbo").write_text("0\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (node / POLICY.format(0) / "cpuinfo_max_freq").read_text() == "4000000\n"
    assert (node / POLICY.format(0) / "scaling_max_freq").read_text() == "4000000\n"
    assert (node / POLICY.format(7) / "scaling_max_freq").read_text() == "3000000\n"  # its own value back


def test_the_minimum_follows_the_maximum_down_and_comes_back(tmp_path: Path) -> None:
    # cpufreq_verify_within_limits (include/linux/cpufreq.h): policy->min = clamp(min, cpuinfo_min,
    # policy->max); the minimum asked for is a freq QoS request, in force again once the max allows
    spec, root = _render(tmp_path, "intel-xeon-2s-rapl")
    node = root / "n-0"

    def put(policy: int, limit: str, khz: int) -> None:
        (node / POLICY.format(policy) / f"scaling_{limit}_freq").write_text(f"{khz}\n")

    def freq(policy: int, limit: str) -> int:
        text = (node / POLICY.format(policy) / f"scaling_{limit}_freq").read_text()
        assert text == f"{int(text)}\n", text  # a decimal and a newline, as the kernel prints it
        return int(text)

    def tick() -> None:
        runtime.run(spec, str(root), ticks=1, fast=True)

    tick()
    put(3, "min", 3000000)
    tick()
    assert freq(3, "min") == 3000000
    (node / NO_TURBO).write_text("1\n")
    tick()
    assert freq(3, "max") == 2100000
    assert freq(3, "min") == 2100000
    assert freq(4, "min") == 800000  # under the base: left
    (node / NO_TURBO).write_text("0\n")
    tick()
    assert freq(3, "min") == 3000000
    # a maximum written under the minimum, and a minimum asked for above the maximum
    put(3, "max", 1500000)
    put(5, "max", 1500000)
    tick()
    put(5, "min", 2000000)
    tick()
    assert freq(3, "min") == 1500000
    assert freq(5, "min") == 1500000
    put(3, "max", 2500000)
    put(5, "max", 4000000)
    tick()
    assert freq(3, "min") == 2500000  # up to the new max
    assert freq(5, "min") == 2000000
    put(3, "max", 4000000)
    tick()
    assert freq(3, "min") == 3000000
    # a minimum and a lower maximum written between two ticks (cpupower frequency-set -d 800MHz
    # -u 1500MHz): both are taken, the minimum as written, whatever order the tick reads them in
    put(3, "min", 800000)
    put(3, "max", 1500000)
    tick()
    assert freq(3, "min") == 800000
    assert freq(3, "max") == 1500000
    # a minimum asked for above the base clock while turbo is off is a request turbo gives back
    put(3, "max", 4000000)
    (node / NO_TURBO).write_text("1\n")
    tick()
    put(3, "min", 3000000)
    tick()
    assert freq(3, "min") == 2100000
    (node / NO_TURBO).write_text("0\n")
    tick()
    assert freq(3, "min") == 3000000


def test_store_ends_at_nul_and_one_policy_is_its_own_file(tmp_path: Path) -> None:
    spec, root = _render(tmp_path, "intel-xeon-2s-rapl")
    node = root / "n-0"
    runtime.run(spec, str(root), ticks=1, fast=True)
    pl1 = node / RAPL0 / "constraint_0_power_limit_uw"
    pl1.write_bytes(b"200000000" + b"\0" * 15)  # as powercap-set writes it
    (node / POLICY.format(0) / "cpuinfo_max_freq").write_text("9999999\n")  # root ignores 0444
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert pl1.read_text() == "200000000\n"
    assert (node / POLICY.format(1) / "cpuinfo_max_freq").read_text() == "4000000\n"
    assert not [e for e in _events(root) if e["name"] == "joulie.sim.write.rejected"]


def test_a_secondary_die_reads_no_power_of_its_own(tmp_path: Path) -> None:
    # MI250X: each package's power is reported on its primary die (the first of each pair here);
    # the secondary die's power1_average reads 0, as amdgpu shows it
    spec, root = _render(tmp_path, "amd-instinct-mi250x-4gpu")
    runtime.run(spec, str(root), ticks=1, fast=True)
    dies = sorted((root / "n-0" / "sys/devices").glob("pci0000:*/0000:*:00.0/hwmon/hwmon*/power1_average"))
    assert [p.parts[-4] for p in dies] == ["0000:c1:00.0", "0000:c6:00.0", "0000:c9:00.0", "0000:ce:00.0",
                                           "0000:d1:00.0", "0000:d6:00.0", "0000:d9:00.0", "0000:de:00.0"]
    readings = [p.read_text() for p in dies]
    assert readings[1::2] == ["0\n"] * 4
    assert all(r != "0\n" for r in readings[0::2])


def test_an_sclk_mask_stored_without_truncating_over_the_shown_table_is_taken(tmp_path: Path) -> None:
    # A writer that opens pp_dpm_sclk without O_TRUNC overwrites the first bytes of the table the
    # file shows; the store is what it wrote ("0"), read against that table: here the table shows
    # the clock at level 2 under auto while the mask left from manual ("0 1") tops at level 1
    spec, root = _render(tmp_path, "amd-instinct-mi300x-8gpu")
    dev = root / "n-0" / "sys/bus/pci/devices/0000:0c:00.0"
    level, sclk = dev / "power_dpm_force_performance_level", dev / "pp_dpm_sclk"
    runtime.run(spec, str(root), ticks=1, fast=True)
    level.write_text("manual\n")
    sclk.write_text("0 1")
    runtime.run(spec, str(root), ticks=1, fast=True)
    level.write_text("auto\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert sclk.read_text() == "0: 500Mhz\n1: 1300Mhz\n2: 2100Mhz *\n"
    level.write_text("manual\n")
    with open(sclk, "r+b") as fh:
        fh.write(b"0")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert sclk.read_text() == "0: 500Mhz *\n1: 1300Mhz\n2: 2100Mhz\n"
    assert not [e for e in _events(root) if e["name"] == "joulie.sim.write.rejected"]
