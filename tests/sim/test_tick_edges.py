"""Edges of the tick that the rendered layouts never reach: a tree described by a hand-written
``state/manifest.json`` (the renderer's contract, which any tool may write), hard-linked writable
files read back under inotify, and a refused store of the very text in force."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from joulectl.sim import inotify, layout
from joulectl.sim.tick import BaseLoad, NodeRuntime, ReadbackMarks
from tests.sim.test_tick import POLICY, RAPL, T0, _Profile, build_node, runtime

CPUFREQ = "sys/devices/system/cpu/cpufreq"
NO_TURBO = "sys/devices/system/cpu/intel_pstate/no_turbo"
ENERGY = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj"
# intel-xeon-2s-rapl's sourced clocks (Intel ARK Xeon Gold 6530): 800 MHz lowest, 2.1 GHz base,
# 4.0 GHz turbo
MIN_KHZ, BASE_KHZ, MAX_KHZ = 800_000, 2_100_000, 4_000_000


def _manifest_node(root: Path, *, extra_counters: tuple[dict[str, Any], ...] = ()) -> Path:
    """One socket, one intel_pstate policy without EPP (powersave runs at scaling_min_freq),
    ``no_turbo`` with the base clock in its rule; files and manifest as the renderer writes them."""
    node = root / "m1"
    files = {
        f"{CPUFREQ}/policy0/scaling_governor": "powersave\n",
        f"{CPUFREQ}/policy0/scaling_max_freq": f"{MAX_KHZ}\n",
        f"{CPUFREQ}/policy0/scaling_min_freq": f"{MIN_KHZ}\n",
        f"{CPUFREQ}/policy0/scaling_cur_freq": f"{BASE_KHZ}\n",
        NO_TURBO: "0\n",
        ENERGY: "0\n",
    }
    for c in extra_counters:
        files[c["path"]] = f"{BASE_KHZ}\n"
    for rel, text in files.items():
        p = node / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    rng = {"minKhz": MIN_KHZ, "maxKhz": MAX_KHZ}
    manifest = {
        "layoutVersion": 2, "node": "m1", "profile": "hand-written",
        "writable": [
            {"path": f"{CPUFREQ}/policy0/scaling_governor", "kind": "cpufreq_governor", "component": "policy0",
             "rule": {"allowed": ["performance", "powersave"], "default": "powersave"}},
            {"path": f"{CPUFREQ}/policy0/scaling_max_freq", "kind": "cpufreq_max", "component": "policy0",
             "rule": {**rng, "baseKhz": BASE_KHZ, "default": str(MAX_KHZ)}},
            {"path": f"{CPUFREQ}/policy0/scaling_min_freq", "kind": "cpufreq_min", "component": "policy0",
             "rule": {**rng, "default": str(MIN_KHZ)}},
            {"path": NO_TURBO, "kind": "no_turbo", "component": "cpu",
             "rule": {"allowed": ["0", "1"], "default": "0", "baseKhz": BASE_KHZ, "maxKhz": MAX_KHZ}},
        ],
        "counters": [
            {"path": f"{CPUFREQ}/policy0/scaling_cur_freq", "kind": "freq_khz", "component": "policy0"},
            {"path": ENERGY, "kind": "energy_uj", "component": "pkg0", "maxRange": 262143328850},
            *extra_counters,
        ],
    }
    (node / "state").mkdir()
    (node / "state" / "manifest.json").write_text(json.dumps(manifest))
    return node


def _start(node: Path) -> NodeRuntime:
    return NodeRuntime(str(node), layout.model_for(str(node), node.name, None), BaseLoad())


def _tick(rt: NodeRuntime, k: int) -> None:
    rt.readback(T0 + k)
    rt.step(T0 + k, 1.0)


def _cur(node: Path, rel: str = f"{CPUFREQ}/policy0/scaling_cur_freq") -> str:
    return (node / rel).read_text()


def test_turbo_off_holds_the_clock_at_base_over_a_minimum_above_it(tmp_path: Path) -> None:
    # powersave without EPP runs at scaling_min_freq (kernel Documentation/admin-guide/pm/
    # cpufreq.rst, "powersave"). With the minimum raised to the turbo top, turning turbo off
    # (intel_pstate no_turbo 1) caps the policy at the base clock: the kernel keeps min <= max,
    # the emulator leaves the minimum as written and caps the clock at base itself.
    node = _manifest_node(tmp_path)
    rt = _start(node)
    _tick(rt, 1)
    assert _cur(node) == f"{MIN_KHZ}\n"
    (node / CPUFREQ / "policy0" / "scaling_min_freq").write_text(f"{MAX_KHZ}\n")
    _tick(rt, 2)
    assert _cur(node) == f"{MAX_KHZ}\n"  # turbo on: the minimum is the clock
    (node / NO_TURBO).write_text("1\n")
    _tick(rt, 3)
    assert (node / CPUFREQ / "policy0" / "scaling_max_freq").read_text() == f"{BASE_KHZ}\n"
    assert (node / CPUFREQ / "policy0" / "scaling_min_freq").read_text() == f"{MAX_KHZ}\n"
    assert _cur(node) == f"{BASE_KHZ}\n"
    (node / NO_TURBO).write_text("0\n")
    _tick(rt, 4)
    assert (node / CPUFREQ / "policy0" / "scaling_max_freq").read_text() == f"{MAX_KHZ}\n"
    assert _cur(node) == f"{MAX_KHZ}\n"


def test_a_clock_counter_of_a_policy_without_a_governor_shows_package_0s_clock(tmp_path: Path) -> None:
    # policy1's scaling_cur_freq is in the manifest, its governor is not: the policy is of no known
    # package, and on a one-socket node every CPU is on package 0, whose powersave clock (the
    # 800 MHz minimum) it shows, not the 4 GHz top
    other = f"{CPUFREQ}/policy1/scaling_cur_freq"
    node = _manifest_node(tmp_path, extra_counters=({"path": other, "kind": "freq_khz", "component": "policy1"},))
    rt = _start(node)
    _tick(rt, 1)
    assert _cur(node) == f"{MIN_KHZ}\n"
    assert _cur(node, other) == f"{MIN_KHZ}\n"


def test_a_store_through_one_hard_link_is_read_back_through_the_other(tmp_path: Path) -> None:
    # policy0's and policy1's scaling_max_freq are one inode (a layout with hard-linked shared
    # attributes): inotify reports the store under the name it was made through only, yet both
    # policies hold the new limit
    node = build_node(tmp_path)
    first = node / POLICY.format(0) / "scaling_max_freq"
    second = node / POLICY.format(1) / "scaling_max_freq"
    second.unlink()
    os.link(first, second)
    model = layout.scan(str(node), node.name, None)
    marks = ReadbackMarks()
    watcher = inotify.Watcher(inotify.Inotify())
    watcher.watch(marks, os.fsencode(os.path.join(str(node), "")),
                  inotify.dir_groups([w.rel for w in model.writables]))
    rt = NodeRuntime(str(node), model, BaseLoad(), marks=marks)
    _tick(rt, 1)
    assert rt.value("policy1", "cpufreq_max") == "4000000"
    with open(first, "w") as fh:
        fh.write("2000000\n")
    watcher.drain()
    assert len(marks.dirty) == 1
    _tick(rt, 2)
    assert rt.value("policy0", "cpufreq_max") == "2000000"
    assert rt.value("policy1", "cpufreq_max") == "2000000"
    assert rt.value("policy2", "cpufreq_max") == "4000000"


def test_a_refused_store_of_the_text_in_force_is_reported_once(tmp_path: Path) -> None:
    # a PL1 the firmware locked refuses every store, of the value in force too: the file already
    # reads what was written, so nothing is rewritten, and the refusal is reported once, not again
    # at every later tick
    node = build_node(tmp_path)
    rt = runtime(node, _Profile(locked_pl1=True))
    _tick(rt, 1)
    limit = node / RAPL / "intel-rapl:1" / "constraint_0_power_limit_uw"
    writes = rt.writes
    with open(limit, "w") as fh:
        fh.write("200000000\n")
    _tick(rt, 2)
    _tick(rt, 3)
    _tick(rt, 4)
    assert [e.attributes["error.type"] for e in rt.events] == ["enodata"]
    assert limit.read_text() == "200000000\n"
    # the ticks' own rewrites (four energy counters each), the limit file not among them
    assert rt.writes - writes == 12
