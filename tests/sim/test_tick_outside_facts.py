"""The tick against facts from outside its code: the kernel's behaviour (docs/hardware.md, the kernel
sources it cites), the emulator's documented model (docs/simulate.md) and the start-up cache's
contract. Written for the sim/tick.py survivors of the seed-8087 mutation sample (docs/TESTING.md,
"Mutation testing"); each test names the mutant it was seen failing on."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from joulectl.sim import layout
from joulectl.sim.sysfs_rules import Rule
from joulectl.sim.tick import BaseLoad, CounterFile, NodeRuntime, Writable
from tests.sim.conftest import render_one
from tests.sim.test_tick import AMD, POLICY, T0, _Profile, _saved_cache, build_node, runtime, tick

MI250X = _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"})


@pytest.mark.parametrize("obj", [
    CounterFile("sys/x/energy_uj", "energy_uj", "pkg0"),
    Writable("sys/x/scaling_governor", "cpufreq_governor", Rule()),
])
def test_counter_and_writable_files_carry_no_instance_dict(obj: object) -> None:
    # Issue 20's memory target (a plan and a tick of 100,000 nodes under 500 MB) counts on the
    # per-file records being slotted: a node has hundreds of them (529 writables on a two-socket
    # Intel node), and a __dict__ costs each about 100 bytes more. A slotted record also refuses
    # an attribute it does not declare (a misspelt field is an error, not a silent new one).
    # Mutants tick.py:74 (CounterFile slots=True -> False) and :61 (Writable).
    assert not hasattr(obj, "__dict__")
    with pytest.raises(AttributeError):
        obj.misspelt = 1  # type: ignore[attr-defined]


def test_a_start_on_a_policy_set_to_performance_while_down_pins_its_epp(tmp_path: Path) -> None:
    # intel_pstate active mode: under the performance policy the EPP reads "performance" (HWP runs
    # with EPP 0: drivers/cpufreq/intel_pstate.c intel_pstate_hwp_set, docs/hardware.md 4.2). A
    # policy switched to performance while the simulator was down (first start, no cache) shows
    # it from the start; the other policies keep balance_performance.
    # Mutant tick.py:489 (_Shared.governors `w.kind == "cpufreq_governor"` -> `!=`).
    node = build_node(tmp_path)
    (node / POLICY.format(0) / "scaling_governor").write_text("performance\n")
    rt = runtime(node)
    assert (node / POLICY.format(0) / "energy_performance_preference").read_text() == "performance\n"
    assert (node / POLICY.format(1) / "energy_performance_preference").read_text() == "balance_performance\n"
    tick(rt, 1)
    assert rt.value("policy0", "epp") == "performance"
    assert rt.value("policy1", "epp") == "balance_performance"


@pytest.mark.parametrize(("field", "drop"), [
    ("w", 1),   # one writable's text missing
    ("c", 1),   # one counter's text missing
    ("s", 3),   # one writable's signature (mtime, size, inode) missing
])
def test_a_start_up_cache_with_one_list_of_the_wrong_length_is_not_used(tmp_path: Path, field: str,
                                                                         drop: int) -> None:
    # the cache is indexed by file position: a list of another length is of another layout and the
    # whole cache is set aside (the tree is read again: the marker "1\n" in the cache is not taken),
    # and the start does not fail. Mutants tick.py:733 (`or` -> `and`, both).
    node, _rt, cache, doc = _saved_cache(tmp_path)
    doc["w"][1] = "1\n"
    del doc[field][-drop:]
    cache.write_text(json.dumps(doc))
    rt2 = runtime(node)
    assert rt2.model.writables[1].text != "1\n"
    assert rt2.value("policy0", "cpufreq_governor") == "powersave"
    tick(rt2, 2)
    assert rt2.value("policy0", "cpufreq_governor") == "powersave"


def test_a_refused_sclk_mask_leaves_the_mask_in_force(tmp_path: Path) -> None:
    # amdgpu pp_dpm_sclk (docs/hardware.md 1.5, amdgpu_pm.c amdgpu_read_mask and
    # smu_force_ppclk_levels): in the manual level a mask "0 1" bounds the clock at level 1
    # (1200 of 1700 MHz, `*` there); a level past the table ("7") is -EINVAL and changes nothing:
    # the clock stays at 1200 MHz, the file reads the same table.
    # Mutants tick.py:774 (`verdict.text is not None` -> `is None`: the mask in force taken for
    # every level) and :818 (`w.kind not in COMMAND_KINDS` -> `in`: the table taken for the mask).
    node = build_node(tmp_path, amd=True)
    rt = runtime(node, MI250X)
    sclk = node / AMD / "pp_dpm_sclk"
    tick(rt, 1)
    (node / AMD / "power_dpm_force_performance_level").write_text("manual\n")
    sclk.write_text("0 1")
    tick(rt, 2)
    table = "0: 500Mhz\n1: 1200Mhz *\n2: 1700Mhz\n"
    assert sclk.read_text() == table
    sclk.write_text("7\n")
    tick(rt, 3)
    assert [(e.attributes["file"], e.attributes["errno"]) for e in rt.events] == [("/" + AMD + "/pp_dpm_sclk",
                                                                                  errno.EINVAL)]
    assert rt.value("gpu0", "amd_sclk") == "0 1"
    tick(rt, 4)
    assert sclk.read_text() == table
    assert rt.ledger.state["c.gpu0"] == pytest.approx(1200 / 1700)


def test_the_low_level_shows_the_lowest_sclk_level_current(tmp_path: Path) -> None:
    # amdgpu power_dpm_force_performance_level "low": "the clocks are forced to the lowest power
    # state" (amdgpu_pm.c, DOC: power_dpm_force_performance_level); pp_dpm_sclk marks the current
    # level with `*` (amdgpu_read_mask's "%d: %uMhz %s\n", docs/hardware.md 1.5). The MI250X
    # profile's levels: 500 and 1700 MHz from aldebaran_ppt.c, 800 MHz between them. GPU 0 (die 0
    # of the first package) at "low" shows level 0 current, GPU 1 (its second die) stays at the top.
    # Mutant tick.py:1365 (_sclk_counter `comp[3:].isdigit()` -> `comp[4:]`: GPUs 0-9 lose their
    # `*` line).
    node = render_one(tmp_path, "amd-instinct-mi250x-4gpu")
    rt = NodeRuntime(str(node), layout.model_for(str(node), node.name, None), BaseLoad())
    gpu0, gpu1 = (node / f"sys/devices/pci0000:{b}/0000:{b}:00.0" for b in ("c1", "c6"))
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    assert (gpu0 / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 800Mhz\n2: 1700Mhz *\n"
    (gpu0 / "power_dpm_force_performance_level").write_text("low\n")
    rt.readback(T0 + 2)
    rt.step(T0 + 2, 1.0)
    assert (gpu0 / "pp_dpm_sclk").read_text() == "0: 500Mhz *\n1: 800Mhz\n2: 1700Mhz\n"
    assert (gpu1 / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 800Mhz\n2: 1700Mhz *\n"


def test_a_rapl_core_domain_counts_three_quarters_of_its_package(tmp_path: Path) -> None:
    # RAPL's core domain (PP0) is a part of its package (drivers/powercap/intel_rapl_common.c, the
    # domains package/core/uncore/dram/psys; docs/hardware.md 3.3): its energy stays under the
    # package's. The emulator's documented share is 0.75 of the package (docs/simulate.md,
    # "core zones 0.75 of the package"). The EPYC 9654 profile has a core zone per socket.
    # Mutants tick.py:1096 (`0.75 * res.power_w` -> `1.75 *`, and `*` -> `/`).
    node = render_one(tmp_path, "amd-epyc-2s-energy-only")
    rt = NodeRuntime(str(node), layout.model_for(str(node), node.name, None), BaseLoad(cpu_util=0.5))
    for k in range(1, 4):
        rt.readback(T0 + 10 * k)
        rt.step(T0 + 10 * k, 10.0)
    rapl = node / "sys/devices/virtual/powercap/intel-rapl"
    for s in (0, 1):
        pkg = int((rapl / f"intel-rapl:{s}" / "energy_uj").read_text())
        core = int((rapl / f"intel-rapl:{s}" / f"intel-rapl:{s}:0" / "energy_uj").read_text())
        assert pkg > 3 * 10 * 100 * 1_000_000  # 30 s of a package over 100 W
        assert core < pkg
        assert core == pytest.approx(0.75 * pkg, rel=1e-6)


# -- written for the survivors of the seed-5583 sample (2 December), after it was reported


def test_a_board_of_a_tree_without_a_manifest_reads_its_power(tmp_path: Path) -> None:
    # a hand-built tree (no state/manifest.json: layout.scan) with an amdgpu board of 50 W idle and
    # 500 W maximum, fully busy on compute without memory stalls: the documented GPU model
    # (docs/joulie-reference.md: compute idle + dyn·u^1.02, memory idle + dyn·(0.35√u + 0.3u)),
    # weights 0.88 and 0.12 for a compute-bound class without memory intensity, gives
    # 50 + 450 × (0.88 + 0.12 × 0.65) = 481.1 W under its 500 W cap: power1_average reads whole
    # watts in microwatts (hwmon sysfs-interface: power[1-*]_average in microWatt).
    # Mutant tick.py:83 (CounterFile.secondary default False -> True: the board read 0 W).
    node = build_node(tmp_path, amd=True)
    profile = _Profile(gpus={"vendor": "amd", "physics": {"idleW": 50, "maxW": 500}})
    rt = runtime(node, profile, BaseLoad(cpu_util=1.0, gpu_util=1.0, memory_intensity=0.0))
    tick(rt, 1)
    assert (node / AMD / "hwmon" / "hwmon3" / "power1_average").read_text() == "481000000\n"


@pytest.mark.parametrize(("field", "bad"), [
    ("h", None),     # the hard-link groups: no list
    ("w", "x"),      # the writables' texts: a string, not a list (of the right length below)
])
def test_a_start_up_cache_with_a_field_of_the_wrong_type_is_not_used(tmp_path: Path, field: str,
                                                                      bad: object) -> None:
    # the whole field of the wrong type, the others right: the cache is set aside, the tree read
    # again and the start does not fail. Mutant tick.py:729 (the type checks' last `and` -> `or`:
    # taken whenever "e" is a mapping).
    node, _rt, cache, doc = _saved_cache(tmp_path)
    doc["w"][1] = "1\n"
    doc[field] = bad if field == "h" else "x" * len(doc["w"])
    cache.write_text(json.dumps(doc))
    rt2 = runtime(node)
    assert rt2.model.writables[1].text != "1\n"
    assert rt2.value("policy0", "cpufreq_governor") == "powersave"


def test_a_value_with_a_colon_written_while_down_is_read_as_the_kernel_reads_it(tmp_path: Path) -> None:
    # scaling_max_freq's store (drivers/cpufreq/cpufreq.c, store_one: sscanf(buf, "%lu", &val))
    # reads the leading number and ignores the rest: "2000000:1" written while the simulator was
    # down is a 2 GHz limit, and the attribute reads it back as "2000000". Mutant tick.py:792
    # (`and` -> `or`: a value with a colon was taken for a rendered sclk table and kept as text).
    from tests.sim.test_tick_edges import CPUFREQ, _manifest_node, _start

    node = _manifest_node(tmp_path)
    limit = node / CPUFREQ / "policy0" / "scaling_max_freq"
    limit.write_text("2000000:1\n")
    rt = _start(node)
    assert rt.value("policy0", "cpufreq_max") == "2000000"
    assert limit.read_text() == "2000000\n"
    assert not rt.events


def _files(node: Path) -> dict[str, bytes]:
    out = {}
    for p in node.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.relative_to(node).as_posix() != "state/ledger.json":
            out[p.relative_to(node).as_posix()] = p.read_bytes()
    return out


def _rewritten(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def test_the_writes_of_a_tick_are_the_files_it_rewrote(tmp_path: Path) -> None:
    # NodeRuntime.writes counts the files of the tree a tick rewrote (the ledger aside): the disk
    # is the oracle. A refused governor store (EINVAL) is put back: that file and the four energy
    # counters. Mutant tick.py:822 (a refused store counted twice).
    node = build_node(tmp_path)
    rt = runtime(node)
    tick(rt, 1)
    (node / POLICY.format(1) / "scaling_governor").write_text("ondemand\n")
    before, w0 = _files(node), rt.writes
    tick(rt, 2)
    rewritten = _rewritten(before, _files(node))
    assert len(rewritten) == 5 and POLICY.format(1) + "/scaling_governor" in rewritten
    assert rt.writes - w0 == 5


def test_turbo_off_rewrites_cpuinfo_max_freq_once(tmp_path: Path) -> None:
    # intel_pstate no_turbo 1: cpuinfo_max_freq shows the base clock and scaling_max_freq is cut to
    # it (intel_pstate_update_limits, docs/hardware.md 4.2): with the energy counter three files
    # rewritten, three writes. Mutant tick.py:945 (the cpuinfo_max_freq rewrite counted twice).
    from tests.sim.test_tick_edges import BASE_KHZ, CPUFREQ, MAX_KHZ, NO_TURBO, _manifest_node, _start

    node = _manifest_node(tmp_path)
    (node / CPUFREQ / "policy0" / "cpuinfo_max_freq").write_text(f"{MAX_KHZ}\n")
    rt = _start(node)
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    (node / NO_TURBO).write_text("1\n")
    before, w0 = _files(node), rt.writes
    rt.readback(T0 + 2)
    rt.step(T0 + 2, 1.0)
    assert (node / CPUFREQ / "policy0" / "cpuinfo_max_freq").read_text() == f"{BASE_KHZ}\n"
    rewritten = _rewritten(before, _files(node))
    assert len(rewritten) == 3
    assert rt.writes - w0 == 3


def test_the_nvml_state_a_tick_rewrites_is_one_write(tmp_path: Path) -> None:
    # an NVIDIA node: the tick rewrites state/nvml.json (the fake nvidia-smi's and NVML's state)
    # once, beside the counters it changed. Mutant tick.py:1308 (that rewrite counted twice).
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.nvml_io import NvmlIO
    from joulectl.sim.tree import render_nodes
    from tests.sim.conftest import spec_doc

    spec = parse_spec(spec_doc([{"name": "n", "profile": "nvidia-l40s-4gpu", "count": 1}]), "t")
    render_nodes(spec.nodes, str(tmp_path))
    node = tmp_path / "n-0"
    model = layout.model_for(str(node), "n-0", spec.nodes[0].profile)
    assert model.nvml
    rt = NodeRuntime(str(node), model, BaseLoad(), nvml_io=NvmlIO())
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    before, w0 = _files(node), rt.writes
    rt.readback(T0 + 2)
    rt.step(T0 + 2, 1.0)
    rewritten = _rewritten(before, _files(node))
    assert "state/nvml.json" in rewritten
    assert rt.writes - w0 == len(rewritten)


def test_a_ledger_changed_since_the_clean_stop_is_read_from_its_file(tmp_path: Path) -> None:
    # the start-up cache's copy of the ledger stands for the ledger only while the ledger file is
    # as the clean stop left it; a ledger rewritten since (restored from a backup, here pkg0 at
    # 5 kJ instead of the 200 J of one second at the 200 W PL1) is read from its file. Mutant
    # tick.py:694 (the signature check's `or` -> `and`: the stale copy was taken). Written after
    # the seed-5583 sample's timeouts were run again.
    node, _rt, _cache, _doc = _saved_cache(tmp_path)
    led = node / "state" / "ledger.json"
    text = led.read_text()
    assert '"pkg0":200000000,' in text
    led.write_text(text.replace('"pkg0":200000000,', '"pkg0":5000000000,'))
    rt2 = runtime(node)
    assert rt2.ledger.energy["pkg0"] == 5_000_000_000
    assert rt2.ledger.energy["pkg1"] == 200_000_000


def test_an_epp_left_unparsable_on_a_tree_without_a_manifest_caps_no_clock(tmp_path: Path) -> None:
    # a tree without a manifest has no default to put back, so an EPP it holds that no rule takes
    # ("²": a digit to str.isdigit, no decimal number) stays in force: it names no preference and
    # no number, so it lowers no clock (powersave with EPP runs up to scaling_max_freq, 4 GHz,
    # at a light load that reaches no cap).
    # Mutant tick.py:1214:62 (`_uint(epp, 0)` -> `1`: read as EPP 1, 4 GHz x (1 - 0.3/255)).
    # Written after the seed-5583 sample's timeouts were run again.
    node = build_node(tmp_path)
    (node / POLICY.format(0) / "energy_performance_preference").write_text("\u00b2\n")
    rt = runtime(node, load=BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0))  # no cap reached
    assert rt.value("policy0", "epp") == "\u00b2"
    tick(rt, 1)
    assert (node / POLICY.format(0) / "scaling_cur_freq").read_text() == "4000000\n"


# -- written for the survivors of the second sim/tick.py sample (seed 5584, 2 December), after it
# was reported


def test_a_package_half_way_into_its_throttle_band_runs_at_half_its_clock(tmp_path: Path) -> None:
    # the documented CPU thermal model (docs/joulie-reference.md: throttle from 85 to 97 °C; the
    # frequency is 1 - throttle): a package at 91 °C (the ambient, no swing) is half throttled,
    # so a light load that reaches no cap runs at 2 GHz of its 4 GHz. Mutant tick.py:1071
    # (`min(f_target, 1.0 - thermal)` -> `2.0 - thermal`: no thermal throttling of the clock).
    node = build_node(tmp_path)
    model = layout.scan(str(node), node.name, _Profile())
    rt = NodeRuntime(str(node), model, BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0),
                     facility={"ambientC": 91.0, "amplitudeC": 0.0})
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    assert (node / POLICY.format(0) / "scaling_cur_freq").read_text() == "2000000\n"


def test_the_energy_counters_start_where_the_first_interval_starts(tmp_path: Path) -> None:
    # a cumulative counter's start time is the start of what it sums (OpenTelemetry data model,
    # Sums: StartTimeUnixNano, never after the point's time): the first tick at T0 + 1 s over 1 s
    # starts them at T0. Mutant tick.py:1122 (`now - dt_s` -> `now + dt_s`: a start after the
    # point, at T0 + 2 s).
    rt = runtime(build_node(tmp_path))
    rt.readback(T0 + 1)
    sample = rt.step(T0 + 1, 1.0)
    assert (sample.start_s, sample.time_s) == (T0, T0 + 1)
    rt.readback(T0 + 2)
    assert rt.step(T0 + 2, 1.0).start_s == T0


def test_the_descriptor_budget_keeps_within_the_open_file_limit() -> None:
    # getrlimit(2): RLIMIT_NOFILE bounds the descriptors a process holds; the files the tick keeps
    # open, those open already and the reserve for everything else stay within it. Mutant
    # tick.py:411 (`limit - in_use` -> `limit + in_use`: the budget past the limit).
    import os

    from joulectl.sim.tick import FD_RESERVE, fd_budget, fd_limit

    limit = fd_limit()
    budget = fd_budget()
    in_use = len(os.listdir("/proc/self/fd"))
    assert budget.size == 0 or budget.size + in_use + FD_RESERVE <= limit


# -- written from a reading of sim/tick.py against its tests (issue 21, 5 December): behaviour no
# test pinned with a value from outside the code; each test names the mutants it was seen failing on


def _zones(node: Path) -> Path:
    """build_node's two packages with a RAPL core (PP0) zone each and a psys zone (intel-rapl:2),
    as intel_rapl_common.c names them (docs/hardware.md 3.3)."""
    from tests.sim.test_tick import RAPL, _w

    for s in range(2):
        d = f"{RAPL}/intel-rapl:{s}/intel-rapl:{s}:1"
        _w(node, f"{d}/name", "core\n", 0o444)
        _w(node, f"{d}/energy_uj", "0\n", 0o444)
        _w(node, f"{d}/max_energy_range_uj", "262143328850\n", 0o444)
    _w(node, f"{RAPL}/intel-rapl:2/name", "psys\n", 0o444)
    _w(node, f"{RAPL}/intel-rapl:2/energy_uj", "0\n", 0o444)
    _w(node, f"{RAPL}/intel-rapl:2/max_energy_range_uj", "262143328850\n", 0o444)
    return node


def test_the_rapl_dram_and_psys_zones_draw_what_the_documented_model_says(tmp_path: Path) -> None:
    # docs/simulate.md (Physics): "DRAM zones draw 3 + 12·u·(0.3+0.7·mem) W per package, ...
    # psys the node plus 40 W". At u = 0.5 and mem = 0.5 a DRAM zone draws 3 + 6 × 0.65 = 6.9 W:
    # one tick of 10 s is 69 J, 69,000,000 µJ in its energy_uj (powercap sysfs: microjoules). psys
    # counts the node (the packages and DRAM zones of a node without GPUs; a core zone is part of
    # its package) and 40 W more: 400 J over the 10 s.
    # Mutants tick.py:1092 (each number and operator of the DRAM formula), :1119 (`+ 40.0` -> 41,
    # either `+` -> `-`), :1160 (µJ for every component that is not an NVML GPU: `and` -> `or`).
    from tests.sim.test_tick import RAPL

    node = _zones(build_node(tmp_path))
    rt = runtime(node, load=BaseLoad(cpu_util=0.5, gpu_util=0.0, memory_intensity=0.5))
    tick(rt, 1, dt=10.0)

    def uj(rel: str) -> int:
        return int((node / RAPL / rel / "energy_uj").read_text())

    assert uj("intel-rapl:0/intel-rapl:0:0") == 69_000_000
    assert uj("intel-rapl:1/intel-rapl:1:0") == 69_000_000
    node_uj = sum(uj(z) for z in ("intel-rapl:0", "intel-rapl:1", "intel-rapl:0/intel-rapl:0:0",
                                  "intel-rapl:1/intel-rapl:1:0"))
    assert node_uj > 2 * 69_000_000 + 2 * 10 * 60 * 1_000_000  # two packages over their 60 W idle
    assert abs(uj("intel-rapl:2") - node_uj - 400_000_000) <= 4  # four roundings to the µJ


def test_a_samples_energy_names_each_zone_by_its_hardware_type(tmp_path: Path) -> None:
    # docs/simulate.md (Telemetry): hw.energy has one point per CPU package (hw.type=cpu), DRAM
    # zone (memory), psys (host) and GPU (gpu); hw.host.energy is the node's. A core zone is part
    # of its package and has no point of its own. In joules: 69 J for a DRAM zone at 6.9 W over
    # 10 s (see above), psys 400 J over the node.
    # Mutants tick.py:1161 (the hw.type of a DRAM zone, of a GPU), :1162 (`in` -> `not in`: psys
    # and the node named cpu, every other zone host), :1164 (a core zone's point kept).
    node = _zones(build_node(tmp_path, amd=True))
    rt = runtime(node, MI250X, BaseLoad(cpu_util=0.5, gpu_util=0.0, memory_intensity=0.5))
    rt.readback(T0 + 10)
    energy = rt.step(T0 + 10, 10.0).energy_j
    assert {k: v[0] for k, v in energy.items()} == {
        "pkg0": "cpu", "pkg1": "cpu", "dram0": "memory", "dram1": "memory", "psys": "host", "host": "host",
        "gpu0": "gpu", "gpu1": "gpu"}
    assert energy["dram0"][1] == energy["dram1"][1] == 69.0
    assert energy["psys"][1] == pytest.approx(energy["host"][1] + 400.0, abs=1e-5)
    assert rt.ledger.energy["core0"] > 0  # counted, in its own energy_uj, but no point of its own


def test_a_gpu_energy_counter_counts_microjoules(tmp_path: Path) -> None:
    # i915's energy1_input is in µJ (sysfs-driver-intel-i915-hwmon, docs/hardware.md 2.1). The
    # hand-built Intel GPU without a limit, fully busy, draws 281.1 W (30 W idle and 251.1 W
    # dynamic: see test_a_hot_gpu_throttles_its_clock): 2,811 J over a tick of 10 s.
    # Mutant tick.py:1160 (`and` -> `or`: millijoules for every GPU, as NVML counts).
    node = build_node(tmp_path, intel_gpu=True)
    (node / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon5/power1_max").write_text("0\n")  # no limit
    rt = runtime(node, _Profile(gpus={"vendor": "intel"}))
    tick(rt, 1, dt=10.0)
    uj = int((node / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon5/energy1_input").read_text())
    assert uj == pytest.approx(2_811_000_000, abs=10_000)  # the 281.1 W to the milliwatt


def test_an_nvml_gpus_energy_counts_millijoules_of_the_power_it_drew(tmp_path: Path) -> None:
    # NVML's nvmlDeviceGetTotalEnergyConsumption counts millijoules (docs/hardware.md, NVML; the
    # fake nvidia-smi's energyMj in nvml.json): after each tick of 10 s each GPU's counter is the
    # sum of its ticks' power x 10 s x 1000 (each rounded to the mJ), the same number in the
    # ledger, and the sample's joules are that over 1000. A GPU's NVML temperature before any
    # reading of its own is never needed: the tick models one for each.
    # Mutants tick.py:1160:15 and :1181:19 (the mJ unit 1000 -> 1001, in a tick and in a read
    # between ticks), :1304 (each number and operator of _nvml_commit's energy).
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.nvml_io import NvmlIO
    from joulectl.sim.tools.state import read_nvml_state
    from joulectl.sim.tree import render_nodes
    from tests.sim.conftest import spec_doc

    spec = parse_spec(spec_doc([{"name": "n", "profile": "nvidia-l40s-4gpu", "count": 1}]), "t")
    render_nodes(spec.nodes, str(tmp_path))
    node = tmp_path / "n-0"
    rt = NodeRuntime(str(node), layout.model_for(str(node), "n-0", spec.nodes[0].profile),
                     BaseLoad(gpu_util=0.5), nvml_io=NvmlIO())
    drawn: dict[str, int] = {}
    for k in (1, 2):
        rt.readback(T0 + 10 * k)
        sample = rt.step(T0 + 10 * k, 10.0)
        for g, watts in sample.gpu_power_w.items():
            drawn[g] = drawn.get(g, 0) + round(watts * 10 * 1000)
        assert len(drawn) == 4 and all(mj > k * 10 * 1000 * 10 for mj in drawn.values())  # over 10 W each
        gpus = read_nvml_state(str(node))["gpus"]
        assert {f"gpu{i}": g["power"]["energyMj"] for i, g in enumerate(gpus)} == drawn
        assert {g: rt.ledger.energy[g] for g in drawn} == drawn
        assert {g: sample.energy_j[g] for g in drawn} == {g: ("gpu", mj / 1000) for g, mj in drawn.items()}
    # a read between ticks (FUSE mode) accrues at the last power, in the same millijoules
    rt.advance_energy(["gpu0"], 0.5)
    assert rt.ledger.energy["gpu0"] == drawn["gpu0"] + round(rt.power_w["gpu0"] * 0.5 * 1000)


def test_reads_between_ticks_accrue_each_span_once_at_the_last_power(tmp_path: Path) -> None:
    # FUSE mode: an energy counter read between ticks moves at the power of the last step
    # (docs/simulate.md); a read 0.25 s past the tick adds P x 0.25 s, a read at 0.75 s the next
    # 0.5 s only, in µJ for a RAPL zone and for an i915 GPU (energy1_input, docs/hardware.md 2.1).
    # Before the first tick there is no power yet: a read adds nothing, and the counter is 0.
    # Mutants tick.py:1181 (`and` -> `or`: a GPU without NVML in mJ; 1e6 -> 1000001), :1182 (`+`
    # -> `-`, `*` -> `/` both, `ahead_s - done` -> `+`; the defaults 0 -> 1 and 0.0 -> 1.0 of a
    # component with no energy or power yet).
    node = build_node(tmp_path, intel_gpu=True)
    rt = runtime(node, _Profile(gpus={"vendor": "intel"}))
    rt.advance_energy(["pkg0"], 0.5)
    assert rt.ledger.energy["pkg0"] == 0
    rt = runtime(node, _Profile(gpus={"vendor": "intel"}))
    tick(rt, 1)
    before = dict(rt.ledger.energy)
    power = dict(rt.power_w)
    assert power["pkg0"] > 60 and power["gpu0"] > 30  # over their idle
    rt.advance_energy(["pkg0", "gpu0"], 0.25)
    rt.advance_energy(["pkg0", "gpu0"], 0.75)
    for comp in ("pkg0", "gpu0"):
        quarter, half = round(power[comp] * 0.25 * 1e6), round(power[comp] * 0.5 * 1e6)
        assert rt.ledger.energy[comp] == before[comp] + quarter + half


def test_a_node_without_a_facility_of_its_own_runs_in_the_documented_default_one(tmp_path: Path) -> None:
    # docs/simulate.md: ambient `ambientC + amplitudeC·sin(2πt/periodH)`, the ClusterSpec's facility
    # 20 °C, 5 °C and 24 h by default; a GPU settles at ambient + P / 12 W/°C (τ 2.5 s: one tick
    # of 10 s gets there). At t = 1,800,000,010 s, 20833.33345 days: 20 + 5 × sin(2π × 0.33345)
    # = 24.328 °C; the board without a limit, fully busy, draws 481.1 W (as in
    # test_a_board_of_a_tree_without_a_manifest_reads_its_power): 24.328 + 40.092 = 64.42 °C,
    # which temp2_input reads in whole degrees as millidegrees (hwmon sysfs-interface: m°C).
    # Mutants tick.py:1050 (the default ambient 20 -> 21 and amplitude 5 -> 6), :1051 (the
    # period 24 h -> 25 h).
    node = build_node(tmp_path, amd=True)
    profile = _Profile(gpus={"vendor": "amd", "physics": {"idleW": 50, "maxW": 500}})
    rt = runtime(node, profile, BaseLoad(cpu_util=1.0, gpu_util=1.0, memory_intensity=0.0))
    tick(rt, 1, dt=10.0)
    assert (node / AMD / "hwmon" / "hwmon3" / "temp2_input").read_text() == "64000\n"
    assert rt.ledger.state["T.gpu0"] == pytest.approx(20 + 5 * 0.8656616 + 481.1 / 12, abs=1e-5)


def test_a_samples_gpu_power_is_given_to_the_hundredth_of_a_watt(tmp_path: Path) -> None:
    # as the CPU's (test_a_ticks_sample_gives_the_cpu_power_to_the_hundredth_of_a_watt): the
    # Intel GPU half way into its 82-92 °C throttle band draws 30 + 251.1 × 0.825^1.35 =
    # 223.66875 W (test_a_hot_gpu_throttles_its_clock), given as 223.67.
    # Mutant tick.py:1154:81 (`round(gpu_total, 2)` -> 3: 223.669).
    node = build_node(tmp_path, intel_gpu=True)
    (node / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon5/power1_max").write_text("0\n")  # no limit
    rt = runtime(node, _Profile(gpus={"vendor": "intel"}), BaseLoad(cpu_util=0.1))
    rt.ledger.state["T.gpu0"] = 87.0
    rt.readback(T0 + 1)
    sample = rt.step(T0 + 1, 1.0)
    assert sample.gpu_power_w["gpu0"] == pytest.approx(223.66875, abs=1e-5)
    assert sample.gpu_w == 223.67


def test_powersave_without_a_scaling_min_freq_runs_at_the_cpus_minimum(tmp_path: Path) -> None:
    # cpufreq's powersave runs at the policy's minimum (Documentation/admin-guide/pm/cpufreq.rst,
    # "powersave": "the lowest frequency within the borders of scaling_min_freq"), and a policy's
    # minimum starts at cpuinfo_min_freq (cpufreq_policy_online: policy->min = cpuinfo.min_freq):
    # a tree without scaling_min_freq (and without EPP, which would let HWP choose) runs at
    # cpuinfo_min_freq, 800 MHz. Mutant tick.py:1203:82 (`fmin / fmax` -> `*`: the top clock).
    node = build_node(tmp_path)
    for i in range(4):
        (node / POLICY.format(i) / "scaling_min_freq").unlink()
        (node / POLICY.format(i) / "energy_performance_preference").unlink()
    rt = runtime(node, load=BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0))
    tick(rt, 1)
    assert [(node / POLICY.format(i) / "scaling_cur_freq").read_text() for i in range(4)] == ["800000\n"] * 4


def test_the_two_dies_of_an_mi250x_share_their_packages_cap_half_each(tmp_path: Path) -> None:
    # docs/simulate.md (Physics): "MI250X dies share their package's cap half each": a 200 W
    # power1_cap on the first package's primary die holds each of its two dies at 100 W (at full
    # load a die draws 131.775 W uncapped, as the other packages' dies do).
    # Mutants tick.py:1230 (the secondary die's cap taken from its own power1_cap, which reads 0),
    # :1235:63 (`uw / 1e6 * cap_share` -> `/`: 400 W each).
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.tree import render_nodes
    from tests.sim.conftest import spec_doc

    spec = parse_spec(spec_doc([{"name": "n", "profile": "amd-instinct-mi250x-4gpu", "count": 1}]), "t")
    render_nodes(spec.nodes, str(tmp_path))
    node = tmp_path / "n-0"
    [cap] = (node / "sys/devices/pci0000:c1/0000:c1:00.0").glob("hwmon/hwmon*/power1_cap")
    cap.write_text("200000000\n")
    rt = NodeRuntime(str(node), layout.model_for(str(node), "n-0", spec.nodes[0].profile), BaseLoad())
    for k in (1, 2):
        rt.readback(T0 + k)
        sample = rt.step(T0 + k, 1.0)
    assert not rt.events
    assert sample.gpu_power_w["gpu0"] == sample.gpu_power_w["gpu1"] == pytest.approx(100.0)
    assert [round(sample.gpu_power_w[f"gpu{i}"], 3) for i in range(2, 8)] == [131.775] * 6


def test_an_idle_gpu_without_persistence_drops_its_clock_locks_and_a_1_percent_busy_one_keeps_them(
        tmp_path: Path) -> None:
    # persistence mode off: when no client holds the GPU the driver unloads and its settings go
    # back to the defaults (docs/simulate.md: "an idle GPU drops its limit and clock locks to the
    # defaults", a joulie.sim.cap.reset event). A limit at its default with a clock lock in force
    # is reset too, the event naming the lock it dropped; a GPU 1 % busy (utilization.gpu counts
    # whole percent: 1 is the least a busy GPU shows) is not idle. A node of 4 L40S at a load of
    # 0.25 % has one GPU at 1 % and three idle.
    # Mutants tick.py:1281:16 (`util < 0.01` -> `<=`), :1284:78 and :1284:149 (`or` -> `and`: a
    # lock alone, graphics or memory, not reset).
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.nvml_io import NvmlIO
    from joulectl.sim.tools.state import nvml_transaction, read_nvml_state
    from joulectl.sim.tree import render_nodes
    from tests.sim.conftest import spec_doc

    pool = {"name": "n", "profile": "nvidia-l40s-4gpu", "count": 1,
            "overrides": {"gpus": {"persistenceMode": "disabled"}}}
    spec = parse_spec(spec_doc([pool]), "t")
    render_nodes(spec.nodes, str(tmp_path))
    node = tmp_path / "n-0"
    lock = {"minMhz": 1500, "maxMhz": 1500}
    with nvml_transaction(str(node)) as state:
        gpus = state["gpus"]
        default_mw = gpus[0]["power"]["defaultLimitMw"]
        assert all(g["power"]["limitMw"] == default_mw for g in gpus)
        gpus[0]["clocks"]["lockedGraphics"] = dict(lock)  # 1 % busy: kept
        gpus[1]["clocks"]["lockedGraphics"] = dict(lock)  # idle: dropped
        gpus[2]["clocks"]["lockedMemory"] = dict(lock)    # idle: dropped
    rt = NodeRuntime(str(node), layout.model_for(str(node), "n-0", spec.nodes[0].profile),
                     BaseLoad(gpu_util=0.0025), nvml_io=NvmlIO())
    rt.readback(T0 + 1)
    sample = rt.step(T0 + 1, 1.0)
    assert [sample.readings[f"u.gpu{i}"] for i in range(4)] == [0.01, 0.0, 0.0, 0.0]
    clocks = [g["clocks"] for g in read_nvml_state(str(node))["gpus"]]
    assert [(c["lockedGraphics"], c["lockedMemory"]) for c in clocks] == [(lock, None), (None, None),
                                                                          (None, None), (None, None)]
    assert [(e.name, e.attributes["gpu"], e.attributes["from_mw"], e.attributes["to_mw"],
             e.attributes["locked_graphics"], e.attributes["locked_memory"]) for e in rt.events] == [
        ("joulie.sim.cap.reset", 1, default_mw, default_mw, lock, None),
        ("joulie.sim.cap.reset", 2, default_mw, default_mw, None, lock)]


def test_a_base_load_mapping_takes_the_documented_defaults_field_by_field() -> None:
    # docs/simulate.md (ClusterSpec): baseLoad {cpuUtil: 1.0, gpuUtil: 1.0, memoryIntensity: 0.2,
    # ioIntensity: 0, cpuClass: cpu.compute_bound, gpuClass: gpu.compute_bound}, "overridden by
    # the pool field by field"; utilisations and intensities are fractions (0..1). A library
    # caller's mapping (the ClusterSpec parser always passes every field) gets the same: a field
    # left out or not a number is its default, a fraction out of range is clamped.
    # Mutants tick.py:158-161 (each default of BaseLoad), :167 (`data or {}` -> `and`), :176-177
    # (the intensities' defaults in from_mapping), :154 (`frozen=True` -> False). :174 and :175
    # (the utilisations' default 1.0 -> 2.0) are equivalent: clamped to 1.0.
    import dataclasses

    documented = BaseLoad(1.0, 1.0, 0.2, 0.0, "cpu.compute_bound", "gpu.compute_bound")
    assert BaseLoad() == documented
    assert BaseLoad.from_mapping(None) == documented
    assert BaseLoad.from_mapping({}) == documented
    assert BaseLoad.from_mapping({"cpuUtil": 0.5, "ioIntensity": 0.25}) == dataclasses.replace(
        documented, cpu_util=0.5, io_intensity=0.25)
    assert BaseLoad.from_mapping({"gpuUtil": "x", "memoryIntensity": None}) == documented
    assert BaseLoad.from_mapping({"cpuUtil": 1.5, "gpuUtil": -1, "memoryIntensity": 2, "ioIntensity": 3}) == \
        BaseLoad(1.0, 0.0, 1.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        documented.cpu_util = 0.5  # type: ignore[misc]


def test_a_cap_raised_from_under_a_watt_moves_first_order_like_any_other(tmp_path: Path) -> None:
    # docs/simulate.md (Physics): caps move first order, step = min(1, dt/τ), τ 0.25 s for a CPU.
    # A PL1 of 125,000 µW (one RAPL power unit: 0.125 W) raised to 200 W, one tick of 0.1 s
    # later: 0.125 + (200 - 0.125) × 0.4 = 80.075 W in effect (the `cap.pkg0` reading).
    # Mutant tick.py:1077:65 (`cap_prev >= 0` -> `>= 1`: a cap under 1 W taken for none, the
    # new cap in effect at once).
    from tests.sim.test_tick import RAPL

    node = build_node(tmp_path)
    limit = node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw"
    limit.write_text("125000\n")
    rt = runtime(node)
    tick(rt, 1)
    assert not rt.events
    assert rt.ledger.state["cap.pkg0"] == pytest.approx(0.125)
    limit.write_text("200000000\n")
    tick(rt, 11, dt=0.1)
    assert rt.ledger.state["cap.pkg0"] == pytest.approx(80.075)


def test_a_store_read_back_otherwise_counts_the_files_it_rewrote(tmp_path: Path) -> None:
    # as test_the_writes_of_a_tick_are_the_files_it_rewrote, for a store the kernel takes and
    # reads back otherwise: RAPL PL1 4,196,000,000 µW wraps at its 15 bits of 0.125 W units to
    # 100 W (powercap's limitBits, test_rapl_limit_bits_wrap_and_normalised_readback), and the
    # attribute is rewritten. Mutant tick.py:842 (that rewrite counted twice).
    from tests.sim.test_tick import RAPL

    node = build_node(tmp_path)
    rt = runtime(node)
    tick(rt, 1)
    limit = node / RAPL / "intel-rapl:0" / "constraint_0_power_limit_uw"
    limit.write_text("4196000000\n")
    before, w0 = _files(node), rt.writes
    tick(rt, 2)
    assert limit.read_text() == "100000000\n"
    rewritten = _rewritten(before, _files(node))
    assert RAPL + "/intel-rapl:0/constraint_0_power_limit_uw" in rewritten
    assert rt.writes - w0 == len(rewritten)


def test_a_watched_node_looks_at_the_marked_files_only_after_its_full_poll(tmp_path: Path) -> None:
    # a node with an inotify watch reads back only the files its watch named (docs/simulate.md:
    # one lstat per writable file is for a node without a watch, or once after a queue overflow,
    # IN_Q_OVERFLOW in inotify(7)); a store inotify does not report (inotify(7): no events for
    # changes made through mmap(2)) is seen at the next full poll, not at every tick.
    # Mutants tick.py:867 (`full_poll = False` -> True: every tick a full poll after the first)
    # and :225 (ReadbackMarks.polled default False -> True: a watched node polled).
    from joulectl.sim.tick import ReadbackMarks

    node = build_node(tmp_path)
    marks = ReadbackMarks()
    rt = NodeRuntime(str(node), layout.scan(str(node), node.name, _Profile()), BaseLoad(), marks=marks)
    gov = node / POLICY.format(0) / "scaling_governor"
    gov.write_text("performance\n")
    marks.full_poll = True  # an overflow
    tick(rt, 1)
    assert rt.value("policy0", "cpufreq_governor") == "performance"
    gov.write_text("powersave\n")  # not marked: as a store through mmap
    tick(rt, 2)
    assert rt.value("policy0", "cpufreq_governor") == "performance"
    [pos] = [i for i, w in enumerate(rt.model.writables) if w.rel == POLICY.format(0) + "/scaling_governor"]
    marks.dirty.add(pos)  # as the watch marks a file it saw written
    tick(rt, 3)
    assert rt.value("policy0", "cpufreq_governor") == "powersave"


def test_cpufreq_boost_0_is_turbo_off_and_1_turbo_on(tmp_path: Path) -> None:
    # the generic cpufreq boost attribute (acpi-cpufreq, amd-pstate): "1" allows frequencies above
    # the base, "0" disables them (Documentation/admin-guide/pm/cpufreq.rst, "boost"): with 0
    # scaling_max_freq stops at the 2.1 GHz base and comes back to 4 GHz with 1, as intel_pstate's
    # no_turbo does the other way round. Mutant tick.py:916:85 (`text == "0"` -> `!=`: boost 1
    # read as turbo off).
    from tests.sim.test_tick_edges import BASE_KHZ, CPUFREQ, MAX_KHZ, NO_TURBO, _manifest_node, _start

    node = _manifest_node(tmp_path)
    boost = f"{CPUFREQ}/boost"
    (node / NO_TURBO).rename(node / boost)
    (node / boost).write_text("1\n")
    path = node / "state" / "manifest.json"
    manifest = json.loads(path.read_text())
    [entry] = [w for w in manifest["writable"] if w["kind"] == "no_turbo"]
    entry.update(path=boost, kind="boost", rule={**entry["rule"], "default": "1"})
    path.write_text(json.dumps(manifest))
    maximum = node / CPUFREQ / "policy0" / "scaling_max_freq"
    rt = _start(node)
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    assert maximum.read_text() == f"{MAX_KHZ}\n"
    (node / boost).write_text("0\n")
    rt.readback(T0 + 2)
    rt.step(T0 + 2, 1.0)
    assert maximum.read_text() == f"{BASE_KHZ}\n"
    (node / boost).write_text("1\n")
    rt.readback(T0 + 3)
    rt.step(T0 + 3, 1.0)
    assert maximum.read_text() == f"{MAX_KHZ}\n"
    assert not rt.events


# -- written for the survivors of the seed-6407 sample (5 December), after it was reported


def test_the_gt_maximum_bounds_a_busy_intel_gpus_clock_and_the_minimum_does_not(tmp_path: Path) -> None:
    # xe's freq0/max_freq limits the GT frequency to at most its value, min_freq to at least its
    # value (Documentation/ABI/testing/sysfs-driver-intel-xe-gt-freq; i915's gt_max/min_freq_mhz
    # alike, docs/hardware.md 2.3): a busy GPU runs up to its maximum whatever its minimum. The
    # Flex 170's RP0 is 2050 MHz: a maximum of 1025 MHz holds the clock at 0.5 of it, a minimum
    # raised to 1025 MHz (maximum 2050) leaves it at 1, as the untouched GPUs (minimum 300 MHz).
    # Mutant tick.py:1239:46 (`w.kind == "intel_gt_max" and rp0` -> `or`: every GT file with RP0
    # in its rule, the minimum too, bounds the clock).
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.tree import render_nodes
    from tests.sim.conftest import spec_doc

    spec = parse_spec(spec_doc([{"name": "n", "profile": "intel-flex-170-4gpu", "count": 1}]), "t")
    render_nodes(spec.nodes, str(tmp_path))
    node = tmp_path / "n-0"
    (node / "sys/bus/pci/devices/0000:4d:00.0/drm/card0/gt/gt0/rps_max_freq_mhz").write_text("1025\n")
    (node / "sys/bus/pci/devices/0000:50:00.0/drm/card1/gt/gt0/rps_min_freq_mhz").write_text("1025\n")
    rt = NodeRuntime(str(node), layout.model_for(str(node), "n-0", spec.nodes[0].profile), BaseLoad())
    rt.readback(T0 + 1)
    sample = rt.step(T0 + 1, 1.0)
    assert not rt.events
    assert [sample.readings[f"c.gpu{i}"] for i in range(4)] == [0.5, 1.0, 1.0, 1.0]


def test_a_power_counter_of_a_component_the_node_does_not_model_reads_0_w(tmp_path: Path) -> None:
    # a manifest may list a power file of a component the emulator has no model for (here
    # "board0"): nothing draws there, so it reads 0 µW (hwmon power*_average in µW), not the 1 W
    # of a made-up default. Mutant tick.py:1331:89 (`comp_power.get(comp, 0.0)` -> 1.0).
    from tests.sim.test_tick_edges import _manifest_node, _start

    rel = "sys/class/hwmon/hwmon9/power1_average"
    node = _manifest_node(tmp_path, extra_counters=({"path": rel, "kind": "power_uw", "component": "board0"},))
    rt = _start(node)
    rt.readback(T0 + 1)
    rt.step(T0 + 1, 1.0)
    assert (node / rel).read_text() == "0\n"


def test_a_minimum_pulled_down_by_a_lowered_maximum_counts_the_files_it_rewrote(tmp_path: Path) -> None:
    # as test_the_writes_of_a_tick_are_the_files_it_rewrote: a maximum lowered under the minimum
    # pulls the minimum down to it (cpufreq_verify_within_limits, docs/hardware.md 4.1), a file the
    # tick rewrites; NodeRuntime.writes counts the files a tick rewrote, the disk is the oracle.
    # Mutant tick.py:997 (that rewrite counted twice).
    node = build_node(tmp_path)
    rt = runtime(node)
    (node / POLICY.format(0) / "scaling_min_freq").write_text("3000000\n")
    tick(rt, 1)
    (node / POLICY.format(0) / "scaling_max_freq").write_text("2000000\n")
    before, w0 = _files(node), rt.writes
    tick(rt, 2)
    assert (node / POLICY.format(0) / "scaling_min_freq").read_text() == "2000000\n"
    rewritten = _rewritten(before, _files(node))
    assert POLICY.format(0) + "/scaling_min_freq" in rewritten
    assert rt.writes - w0 == len(rewritten)


# -- written for the two survivors of lines 917-999 left open (5 December, helper mutt2)


@pytest.mark.parametrize("drop", ["baseKhz", "maxKhz"])
def test_a_turbo_rule_with_one_of_its_two_clocks_leaves_cpuinfo_max_freq_a_frequency(tmp_path: Path,
                                                                                      drop: str) -> None:
    # cpuinfo_max_freq is a frequency in kHz (Documentation/admin-guide/pm/cpufreq.rst, "Policy
    # Interface in sysfs"; docs/hardware.md): whatever no_turbo is switched to, it reads digits. A
    # hand-written manifest whose no_turbo rule knows only one of the two clocks (the base or the
    # turbo maximum): turning turbo off then on again, both files read digits, and with turbo on
    # again the 4.0 GHz turbo maximum they were rendered with. Mutant tick.py:929:24 (`not base_khz or not
    # rule.max_khz` -> `and`: the missing clock is shown, "None", or compared, a TypeError).
    from tests.sim.test_tick_edges import CPUFREQ, MAX_KHZ, NO_TURBO, _manifest_node, _start

    node = _manifest_node(tmp_path)
    info = node / CPUFREQ / "policy0" / "cpuinfo_max_freq"
    info.write_text(f"{MAX_KHZ}\n")
    path = node / "state" / "manifest.json"
    manifest = json.loads(path.read_text())
    [entry] = [w for w in manifest["writable"] if w["kind"] == "no_turbo"]
    del entry["rule"][drop]
    path.write_text(json.dumps(manifest))
    maximum = node / CPUFREQ / "policy0" / "scaling_max_freq"
    rt = _start(node)
    for t, text in ((1, "1\n"), (2, "0\n")):
        (node / NO_TURBO).write_text(text)
        rt.readback(T0 + t)
        rt.step(T0 + t, 1.0)
        assert info.read_text().strip().isdigit()
        assert maximum.read_text().strip().isdigit()
    # turbo on again: the turbo maximum the tree was rendered with
    assert info.read_text() == "4000000\n"
    assert maximum.read_text() == "4000000\n"
