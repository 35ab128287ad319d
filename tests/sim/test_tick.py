"""The tick loop on hand-built trees in the renderer's layout (sysfs paths as the kernel nests them)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import layout
from joulectl.sim import ledger as lg
from joulectl.sim.tick import BaseLoad, NodeRuntime

RAPL = "sys/devices/virtual/powercap/intel-rapl"
POLICY = "sys/devices/system/cpu/cpufreq/policy{}"
AMD = "sys/bus/pci/devices/0000:03:00.0"
AMD2 = "sys/bus/pci/devices/0000:04:00.0"
INTEL_GPU = "sys/bus/pci/devices/0000:4d:00.0"
T0 = 1_800_000_000.0


def _w(node: Path, rel: str, text: str, mode: int = 0o644) -> None:
    p = node / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    p.chmod(mode)


def build_node(root: Path, name: str = "n1", *, policies: int = 4, max_range: int = 262143328850,
               amd: bool = False, intel_gpu: bool = False) -> Path:
    """A two-socket Intel node (RAPL package+DRAM, intel_pstate policies), optionally with GPUs."""
    node = root / name
    for s in range(2):
        z = f"{RAPL}/intel-rapl:{s}"
        _w(node, f"{z}/name", f"package-{s}\n", 0o444)
        _w(node, f"{z}/energy_uj", "0\n", 0o444)
        _w(node, f"{z}/max_energy_range_uj", f"{max_range}\n", 0o444)
        _w(node, f"{z}/constraint_0_name", "long_term\n", 0o444)
        _w(node, f"{z}/constraint_0_power_limit_uw", "200000000\n")
        _w(node, f"{z}/constraint_1_name", "short_term\n", 0o444)
        _w(node, f"{z}/constraint_1_power_limit_uw", "240000000\n")
        d = f"{z}/intel-rapl:{s}:0"
        _w(node, f"{d}/name", "dram\n", 0o444)
        _w(node, f"{d}/energy_uj", "0\n", 0o444)
        _w(node, f"{d}/max_energy_range_uj", f"{max_range}\n", 0o444)
    for i in range(policies):
        p = POLICY.format(i)
        _w(node, f"{p}/scaling_governor", "powersave\n")
        _w(node, f"{p}/scaling_available_governors", "performance powersave\n", 0o444)
        _w(node, f"{p}/energy_performance_preference", "balance_performance\n")
        _w(node, f"{p}/energy_performance_available_preferences",
           "default performance balance_performance balance_power power\n", 0o444)
        _w(node, f"{p}/scaling_max_freq", "4000000\n")
        _w(node, f"{p}/scaling_min_freq", "800000\n")
        _w(node, f"{p}/cpuinfo_max_freq", "4000000\n", 0o444)
        _w(node, f"{p}/cpuinfo_min_freq", "800000\n", 0o444)
        _w(node, f"{p}/scaling_cur_freq", "4000000\n", 0o444)
    if amd:
        for bdf_dir, cap in ((AMD, "500000000"), (AMD2, "0")):
            _w(node, f"{bdf_dir}/power_dpm_force_performance_level", "auto\n")
            _w(node, f"{bdf_dir}/pp_dpm_sclk", "0: 500Mhz\n1: 1200Mhz\n2: 1700Mhz *\n")
            h = f"{bdf_dir}/hwmon/hwmon{3 if cap != '0' else 4}"
            _w(node, f"{h}/name", "amdgpu\n", 0o444)
            _w(node, f"{h}/power1_cap", f"{cap}\n")
            _w(node, f"{h}/power1_cap_min", "0\n", 0o444)
            _w(node, f"{h}/power1_cap_max", "500000000\n", 0o444)
            _w(node, f"{h}/power1_average", "0\n", 0o444)
            _w(node, f"{h}/temp2_input", "35000\n", 0o444)
    if intel_gpu:
        h = f"{INTEL_GPU}/hwmon/hwmon5"
        _w(node, f"{h}/name", "i915\n", 0o444)
        _w(node, f"{h}/power1_max", "150000000\n")
        _w(node, f"{h}/power1_rated_max", "150000000\n", 0o444)
        _w(node, f"{h}/energy1_input", "0\n", 0o444)
    (node / "state").mkdir(parents=True, exist_ok=True)
    return node


class _Profile:
    """The profile facts the layout reads: secondary dies, the locked DRAM limit, the GPU vendor."""

    name = "hand-built"

    def __init__(self, gpus: dict[str, object] | None = None, locked_pl1: bool = False) -> None:
        self.cpu = {"sockets": 2, "catalogKey": "INTEL_XEON_GOLD_6530",
                    "cpufreq": {"minKHz": 800000, "maxKHz": 4000000},
                    "physics": {"model": "analytic", "idlePkgW": 60, "maxPkgW": 270},
                    "powercap": {"zones": [{"name": "package", "constraints": [
                        {"name": "long_term", "locked": locked_pl1}, {"name": "short_term"}]}]}}
        self.gpus = gpus or {}
        self.boards: list[dict[str, object]] = []


def runtime(node: Path, profile: _Profile | None = None, load: BaseLoad | None = None) -> NodeRuntime:
    model = layout.scan(str(node), node.name, profile or _Profile())
    return NodeRuntime(str(node), model, load or BaseLoad())


def tick(rt: NodeRuntime, k: int, dt: float = 1.0) -> float:
    now = T0 + k * dt
    rt.readback(now)
    return rt.step(now, dt).power_w


def test_cap_written_to_sysfs_shows_in_next_tick(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    before = tick(rt, 1)
    limit = node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw"
    limit.write_text("100000000\n")
    sample_power = tick(rt, 2)
    assert sample_power < before
    assert rt.ledger.state["P.pkg0"] == pytest.approx(100.0, abs=5.0)
    assert rt.ledger.state["P.pkg1"] == pytest.approx(200.0, abs=5.0)
    assert not rt.events


@pytest.mark.parametrize(
    ("rel", "value", "err"),
    [
        (f"{RAPL}/intel-rapl:0/constraint_0_power_limit_uw", "lots\n", errno.EINVAL),
        (f"{RAPL}/intel-rapl:0/constraint_0_power_limit_uw", "-5\n", errno.EINVAL),
        (f"{POLICY.format(1)}/scaling_governor", "ondemand\n", errno.EINVAL),
        (f"{POLICY.format(0)}/energy_performance_preference", "turbo\n", errno.EINVAL),
        (f"{POLICY.format(0)}/energy_performance_preference", "300\n", errno.EINVAL),
        (f"{AMD}/hwmon/hwmon3/power1_cap", "600000000\n", errno.EINVAL),
        (f"{AMD}/hwmon/hwmon3/power1_cap", "12.5\n", errno.EINVAL),
        (f"{AMD2}/hwmon/hwmon4/power1_cap", "300000000\n", errno.EINVAL),
        (f"{AMD}/power_dpm_force_performance_level", "turbo\n", errno.EINVAL),
        (f"{AMD}/pp_dpm_sclk", "7\n", errno.EINVAL),
    ],
)
def test_refused_write_is_reverted_and_logged(tmp_path: Path, rel: str, value: str, err: int) -> None:
    node = build_node(tmp_path, amd=True)
    rt = runtime(node, _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"}))
    tick(rt, 1)
    before = (node / rel).read_text()
    (node / rel).write_text(value)
    tick(rt, 2)
    assert (node / rel).read_text() == before
    [event] = rt.events
    assert event.name == "joulie.sim.write.rejected"
    assert event.attributes["errno"] == err
    assert event.attributes["error.type"] == errno.errorcode[err].lower()
    assert event.attributes["file"] == "/" + rel
    assert event.attributes["value"] == value.strip()


def test_locked_rapl_limit_refused_with_enodata(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node, _Profile(locked_pl1=True))
    limit = node / RAPL / "intel-rapl:1" / "constraint_0_power_limit_uw"
    limit.write_text("90000000\n")
    tick(rt, 1)
    assert limit.read_text() == "200000000\n"
    assert [e.attributes["error.type"] for e in rt.events] == ["enodata"]


def test_epp_under_performance_is_ebusy(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    pol = node / POLICY.format(2)
    (pol / "scaling_governor").write_text("performance\n")
    tick(rt, 1)
    assert not rt.events
    (pol / "energy_performance_preference").write_text("power\n")
    tick(rt, 2)
    # The performance policy pinned EPP to performance at tick 1: that is what is put back.
    assert (pol / "energy_performance_preference").read_text() == "performance\n"
    assert [e.attributes["error.type"] for e in rt.events] == ["ebusy"]
    (pol / "energy_performance_preference").write_text("performance")
    tick(rt, 3)
    assert (pol / "energy_performance_preference").read_text() == "performance\n"


def test_rapl_limit_bits_wrap_and_normalised_readback(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    limit = node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw"
    # 15-bit field of 1/8 W units: 4096 W wraps to 0; 4096 W + 100 W reads back 100 W.
    limit.write_text(str((1 << 15) * 125_000 + 100_000_000))
    tick(rt, 1)
    assert limit.read_text() == "100000000\n"
    assert rt.ledger.state["P.pkg0"] == pytest.approx(100.0, abs=5.0)
    # The kernel takes it (no errno): reported as a clamped write, with what it reads back.
    [event] = rt.events
    assert event.name == "joulie.sim.write.clamped"
    assert event.attributes["value"] == "4196000000"
    assert event.attributes["readback"] == "100000000"
    assert event.attributes["reason"] == "wrapped"


def test_intel_pl1_outside_bounds_reads_back_clamped(tmp_path: Path) -> None:
    node = build_node(tmp_path, intel_gpu=True)
    rt = runtime(node, _Profile(gpus={"vendor": "intel", "model": "Intel Data Center GPU Flex 170",
                                      "intel": {"clampMinW": 40, "clampMaxW": 150}}))
    pl1 = node / INTEL_GPU / "hwmon" / "hwmon5" / "power1_max"
    pl1.write_text("10000000\n")
    tick(rt, 1)
    assert pl1.read_text() == "40000000\n"
    pl1.write_text("400000000\n")
    tick(rt, 2)
    assert pl1.read_text() == "150000000\n"
    pl1.write_text("90000000\n")
    tick(rt, 3)
    assert pl1.read_text() == "90000000\n"
    assert rt.ledger.state["P.gpu0"] <= 90.0
    assert [e.name for e in rt.events] == ["joulie.sim.write.clamped"] * 2


def test_amd_perf_level_and_sclk_mask_bound_power(tmp_path: Path) -> None:
    node = build_node(tmp_path, amd=True)
    rt = runtime(node, _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"}))
    tick(rt, 1)
    full = rt.ledger.state["P.gpu0"]
    (node / AMD / "power_dpm_force_performance_level").write_text("manual\n")
    (node / AMD / "pp_dpm_sclk").write_text("0 1")
    tick(rt, 2)
    assert (node / AMD / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 1200Mhz *\n2: 1700Mhz\n"
    assert rt.ledger.state["P.gpu0"] < full
    (node / AMD / "power_dpm_force_performance_level").write_text("low\n")
    tick(rt, 3)
    low = rt.ledger.state["P.gpu0"]
    assert low < full
    assert not rt.events


def test_governor_and_frequency_limit_lower_power(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    before = tick(rt, 1)
    for i in (0, 1):
        (node / POLICY.format(i) / "scaling_max_freq").write_text("2000000\n")
    tick(rt, 2)
    assert (node / POLICY.format(0) / "scaling_cur_freq").read_text() == "2000000\n"
    assert rt.ledger.state["P.pkg0"] < rt.ledger.state["P.pkg1"]
    assert tick(rt, 3) < before
    # Frequencies under the hardware minimum are clamped, as cpufreq does.
    (node / POLICY.format(3) / "scaling_max_freq").write_text("100\n")
    tick(rt, 4)
    assert (node / POLICY.format(3) / "scaling_max_freq").read_text() == "800000\n"


def test_only_changed_files_are_rewritten_in_place(tmp_path: Path) -> None:
    node = build_node(tmp_path, policies=8)
    rt = runtime(node)
    for k in range(1, 4):
        tick(rt, k)
    files = [p for p in node.rglob("*") if p.is_file() and not p.is_symlink() and "state" not in p.parts]
    before = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in files}
    writes = rt.writes
    tick(rt, 4)
    changed = {p for p in files if p.stat().st_mtime_ns != before[p][0]}
    assert {p.name for p in changed} == {"energy_uj"}
    assert len(changed) == 4  # two packages, two DRAM zones
    assert all(p.stat().st_ino == before[p][1] for p in files)  # rewritten in place, same inodes
    assert rt.writes - writes == 4
    assert not list((node / "state").glob("*.tmp*"))


def test_energy_never_decreases_across_1000_ticks_with_wrap(tmp_path: Path) -> None:
    max_range = 50_000_000_000  # 50 kJ: a 200 W package wraps every 250 s
    node = build_node(tmp_path, max_range=max_range)
    rt = runtime(node)
    counter = node / RAPL / "intel-rapl:0" / "energy_uj"
    last_total = 0
    last_file = 0
    wraps = 0
    for k in range(1, 1001):
        tick(rt, k)
        total = rt.ledger.energy["pkg0"]
        value = int(counter.read_text())
        assert total > last_total
        assert value == total % max_range
        if value < last_file:
            wraps += 1
        last_total, last_file = total, value
    assert wraps >= 3
    saved = lg.load(str(node))
    assert saved is not None and saved.energy["pkg0"] == last_total and saved.tick == 1000


def test_restart_continues_counters_and_limits(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    (node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw").write_text("120000000\n")
    for k in range(1, 4):
        tick(rt, k)
    total = rt.ledger.energy["pkg0"]
    counter = int((node / RAPL / "intel-rapl:0" / "energy_uj").read_text())
    # A new process: state from disk; the first tick after the restart is one tick long (no
    # energy for the time the simulator was down).
    rt2 = runtime(node)
    assert rt2.ledger.energy["pkg0"] == total
    tick(rt2, 1000)
    assert rt2.ledger.energy["pkg0"] == pytest.approx(total + 120_000_000, rel=0.05)
    assert int((node / RAPL / "intel-rapl:0" / "energy_uj").read_text()) > counter
    assert rt2.ledger.state["P.pkg0"] == pytest.approx(120.0, abs=5.0)
    assert rt2.ledger.tick == 4


def test_value_refused_while_down_is_put_back_at_start(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    tick(rt, 1)
    gov = node / POLICY.format(0) / "scaling_governor"
    gov.write_text("userspace\n")
    model = layout.scan(str(node), node.name, _Profile())
    for w in model.writables:
        if w.kind == "cpufreq_governor":
            w.rule.default = "powersave\n"
    rt2 = NodeRuntime(str(node), model, BaseLoad())
    assert gov.read_text() == "powersave\n"
    assert [e.attributes["error.type"] for e in rt2.events] == ["einval"]


def test_idle_load_draws_less(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    busy = tick(runtime(node), 1)
    idle = tick(runtime(build_node(tmp_path, "n2"), load=BaseLoad(cpu_util=0.0, gpu_util=0.0)), 1)
    assert idle < busy
    assert os.path.exists(lg.ledger_path(str(tmp_path / "n2")))


def _saved_cache(tmp_path: Path) -> tuple[Path, NodeRuntime, Path, Any]:
    """A node ticked once and stopped cleanly: (node, its runtime, its start-up cache, the cache's document)."""
    node = build_node(tmp_path)
    rt = runtime(node)
    tick(rt, 1)
    rt.save_cache()
    cache = node / "state" / "tick-cache.json"
    return node, rt, cache, json.loads(cache.read_text())


def test_restart_reads_only_files_that_moved_since_the_last_run(tmp_path: Path) -> None:
    node, rt, cache, doc = _saved_cache(tmp_path)
    gov0 = f"{POLICY.format(0)}/scaling_governor"
    gov1 = f"{POLICY.format(1)}/scaling_governor"
    rels = [w.rel for w in rt.model.writables]
    doc["w"][rels.index(gov0)] = "performance\n"  # taken from the cache: the file's signature did not move
    cache.write_text(json.dumps(doc))
    (node / gov1).write_text("performance\n")  # written while down: read again by the first tick
    rt2 = runtime(node)
    assert rt2.value("policy0", "cpufreq_governor") == "performance"
    tick(rt2, 2)
    assert rt2.value("policy0", "cpufreq_governor") == "performance"
    assert rt2.value("policy1", "cpufreq_governor") == "performance"
    assert rt2.value("policy2", "cpufreq_governor") == "powersave"
    # rt2 ticked without a clean stop (a kill): its start-up cache is stale and not used.
    rt3 = runtime(node)
    assert rt3.value("policy0", "cpufreq_governor") == "powersave"
    assert rt3.value("policy1", "cpufreq_governor") == "performance"


def test_start_up_cache_of_another_layout_is_not_used(tmp_path: Path) -> None:
    node, _rt, cache, doc = _saved_cache(tmp_path)
    doc["w"][0] = "1\n"
    doc["f"] = "another-layout"
    cache.write_text(json.dumps(doc))
    rt2 = runtime(node)
    assert rt2.model.writables[0].text != "1\n"
    cache.write_text("{not json")
    assert runtime(node).value("policy0", "cpufreq_governor") == "powersave"


# -- edge cases with powers worked out by hand from the model in docs/joulie-reference.md
# (analytic package power idle + (max - idle)·(u·act)^α·f^β, α 1.15, β 1.35; a cap holds the
# package within cap + 5 W; idle C-states save only while the package is throttled). Written for
# mutants of sim/tick.py that survived (docs/TESTING.md).

#: 10 % load without memory or I/O stalls (act = 1)
LIGHT = BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0)


def _performance(node: Path) -> None:
    for i in range(4):
        (node / POLICY.format(i) / "scaling_governor").write_text("performance\n")


def test_an_unthrottled_package_at_light_load_saves_no_c_state_power(tmp_path: Path) -> None:
    # performance governor at the top frequency (f = 1), no cap reached, cool: no throttling, so
    # no C-state saving: 60 + 210 x 0.1^1.15 = 74.867 W (the saving would make it 56.150 W)
    node = build_node(tmp_path)
    _performance(node)
    rt = runtime(node, load=LIGHT)
    tick(rt, 1)
    assert rt.ledger.state["P.pkg0"] == pytest.approx(74.867, abs=0.001)
    assert rt.ledger.state["P.pkg1"] == pytest.approx(74.867, abs=0.001)


@pytest.mark.parametrize(("pl1_uw", "expected_w"), [
    ("1", 5.000001),    # the package is held at 1 uW + 5 W
    ("0", 74.867),      # no limit in force: the package's own power
])
def test_the_smallest_pl1_is_a_limit_and_zero_is_none(tmp_path: Path, pl1_uw: str, expected_w: float) -> None:
    # A profile may set any integer powerUnitUW; with a unit of 1 uW the smallest PL1 is 1 uW
    # (with the SDM's default 1/8 W unit, 1 uW reads back 0: test_rapl_limit_bits_wrap...).
    profile = _Profile()
    profile.cpu["powercap"]["powerUnitUW"] = 1  # type: ignore[index]
    node = build_node(tmp_path)
    _performance(node)
    (node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw").write_text(f"{pl1_uw}\n")
    rt = runtime(node, profile, load=LIGHT)
    tick(rt, 1)
    assert rt.ledger.state["P.pkg0"] == pytest.approx(expected_w, abs=0.001)
    # package 1's 200 W in 1 uW units wraps in the 15-bit field: 200,000,000 mod 2^15 = 16,896 uW
    assert rt.ledger.state["P.pkg1"] == pytest.approx(5.016896, abs=0.001)


def empty_governor_node(tmp_path: Path) -> tuple[Path, Path, NodeRuntime]:
    """A node whose policy0 ``scaling_governor`` reads empty, the governors' default
    ``powersave``: (node, that file, a runtime started on it)."""
    node = build_node(tmp_path)
    gov = node / POLICY.format(0) / "scaling_governor"
    gov.write_text("")
    model = layout.scan(str(node), node.name, None)
    for w in model.writables:
        if w.kind == "cpufreq_governor":
            w.rule.default = "powersave\n"
    return node, gov, NodeRuntime(str(node), model, BaseLoad())


def test_a_refused_write_over_a_file_that_read_empty_puts_back_the_default(tmp_path: Path) -> None:
    # nothing was in force to put back: the kernel's file reads the default again
    _, gov, rt = empty_governor_node(tmp_path)
    tick(rt, 1)
    gov.write_text("turbo\n")
    tick(rt, 2)
    assert gov.read_text() == "powersave\n"
    assert [e.attributes["error.type"] for e in rt.events] == ["einval"]


def test_a_start_on_a_tree_the_kernel_keeps_writes_nothing(tmp_path: Path) -> None:
    # every value of the hand-built tree is one the kernel would keep: the start rewrites no file;
    # the first tick writes the four energy counters and the four policies' scaling_cur_freq (the
    # rendered 4 GHz is not the clock under powersave with balance_performance), the next one the
    # four counters only
    rt = runtime(build_node(tmp_path))
    assert rt.writes == 0
    tick(rt, 1)
    assert rt.writes == 8
    tick(rt, 2)
    assert rt.writes == 12


@pytest.mark.parametrize(("field", "index", "bad"), [
    ("", None, None),       # no defect: the cache is used, its "1\n" taken
    ("w", 0, 1),            # a value that is no text
    ("c", 0, None),         # a counter's text that is no text
    ("s", 0, "x"),          # a signature part that is no integer
    ("s", 1, 1.5),
    ("h", None, [[0, 10_000]]),  # a link group past the writables
    ("e", None, {"policy0": 5}),  # a saved EPP that is no text (tick.py:738:43, `and` -> `or`)
])
def test_a_start_up_cache_with_a_wrong_type_is_not_used(tmp_path: Path, field: str, index: int | None,
                                                        bad: object) -> None:
    # the lists keep their lengths, one element has the wrong type: the whole cache is set aside
    # and the tree is read again (the marker value "1\n" in the cache is not taken)
    node, _rt, cache, doc = _saved_cache(tmp_path)
    doc["w"][1] = "1\n"
    if field and index is None:
        doc[field] = bad
    elif field:
        doc[field][index] = bad
    cache.write_text(json.dumps(doc))
    rt2 = runtime(node)
    assert (rt2.model.writables[1].text == "1\n") is (not field)
    assert rt2.value("policy0", "cpufreq_governor") == "powersave"


@pytest.mark.parametrize(("pl1_uw", "cap_w", "power_w"), [
    ("1", 1e-6, 30.0),   # a limit: the GPU is held at its idle floor (30 W)
    ("0", 300.0, None),  # no limit in force: the cap is the GPU's maximum (300 W)
])
def test_an_i915_pl1_of_1_uw_is_a_limit(tmp_path: Path, pl1_uw: str, cap_w: float, power_w: float | None) -> None:
    # with a profile's clampMinW of 0, i915 power1_max keeps 1 uW as written
    node = build_node(tmp_path, intel_gpu=True)
    (node / INTEL_GPU / "hwmon" / "hwmon5" / "power1_max").write_text(f"{pl1_uw}\n")
    rt = runtime(node, _Profile(gpus={"vendor": "intel", "intel": {"clampMinW": 0}}))
    tick(rt, 1)
    assert rt.ledger.state["cap.gpu0"] == pytest.approx(cap_w)
    if power_w is not None:
        assert rt.ledger.state["P.gpu0"] == pytest.approx(power_w)


def test_the_sclk_mask_bounds_the_clock_in_manual_only(tmp_path: Path) -> None:
    # amdgpu honours pp_dpm_sclk in the manual level only: a mask left from manual does not
    # bound the clock under auto (levels 500/1200/1700 MHz: "0 1" is 1200/1700 of the top)
    node = build_node(tmp_path, amd=True)
    rt = runtime(node, _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"}))
    tick(rt, 1)
    (node / AMD / "power_dpm_force_performance_level").write_text("manual\n")
    (node / AMD / "pp_dpm_sclk").write_text("0 1")
    tick(rt, 2)
    assert rt.ledger.state["c.gpu0"] == pytest.approx(1200 / 1700)
    (node / AMD / "power_dpm_force_performance_level").write_text("auto\n")
    tick(rt, 3)
    assert rt.ledger.state["c.gpu0"] == 1.0



@pytest.mark.parametrize(("temp_c", "power_w"), [
    (None, 281.1),      # cool: idle 30 W + a dynamic 251.1 W at full load
    (87.0, 223.669),    # half way from 82 to 92 °C: the clock x (1 - 0.35 x 0.5), 30 + 251.1 x 0.825^1.35
    (92.0, 170.372),    # full throttle: the clock x 0.65, 30 + 251.1 x 0.65^1.35
])
def test_a_hot_gpu_throttles_its_clock(tmp_path: Path, temp_c: float | None, power_w: float) -> None:
    node = build_node(tmp_path, intel_gpu=True)
    (node / INTEL_GPU / "hwmon" / "hwmon5" / "power1_max").write_text("0\n")  # no limit in force
    rt = runtime(node, _Profile(gpus={"vendor": "intel"}))
    if temp_c is not None:
        rt.ledger.state["T.gpu0"] = temp_c
    tick(rt, 1)
    assert rt.ledger.state["P.gpu0"] == pytest.approx(power_w, abs=0.001)


def test_powersave_with_the_power_epp_runs_slower_and_saves_c_state_power(tmp_path: Path) -> None:
    # powersave under EPP "power": the package runs at 0.7 of its top clock (EPP_FREQ, an
    # assumption of the emulator), throttled, so at 10 % load the C-state saving applies:
    # (60 + 210 x 0.1^1.15 x 0.7^1.35) x 0.75 = 51.889 W (performance would draw 74.867 W)
    node = build_node(tmp_path)
    for i in range(4):
        (node / POLICY.format(i) / "energy_performance_preference").write_text("power\n")
    rt = runtime(node, load=LIGHT)
    tick(rt, 1)
    assert rt.ledger.state["P.pkg0"] == pytest.approx(51.889, abs=0.001)
