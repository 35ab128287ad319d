"""Edges of the tick that the rendered layouts never reach: a tree described by a hand-written
``state/manifest.json`` (the renderer's contract, which any tool may write), hard-linked writable
files read back under inotify, and a refused store of the very text in force."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import inotify, layout
from joulectl.sim import tick as tick_mod
from joulectl.sim.tick import BaseLoad, NodeRuntime, ReadbackMarks
from tests.sim.test_tick import POLICY, RAPL, T0, _Profile, _saved_cache, build_node, empty_governor_node, runtime

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
    # (intel_pstate no_turbo 1) caps the policy at the base clock, and the kernel keeps min <= max
    # (cpufreq_verify_within_limits): the minimum reads the base clock until turbo is back.
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
    assert (node / CPUFREQ / "policy0" / "scaling_min_freq").read_text() == f"{BASE_KHZ}\n"
    assert _cur(node) == f"{BASE_KHZ}\n"
    (node / NO_TURBO).write_text("0\n")
    _tick(rt, 4)
    assert (node / CPUFREQ / "policy0" / "scaling_max_freq").read_text() == f"{MAX_KHZ}\n"
    assert (node / CPUFREQ / "policy0" / "scaling_min_freq").read_text() == f"{MAX_KHZ}\n"
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
    ino = inotify.Inotify()
    try:  # closed: a leaked instance counts against the watch-limit tests run later in this process
        watcher = inotify.Watcher(ino)
        watcher.watch(marks, os.fsencode(os.path.join(str(node), "")),
                      inotify.dir_groups([w.rel for w in model.writables]))
        rt = NodeRuntime(str(node), model, BaseLoad(), marks=marks)
        _tick(rt, 1)
        assert rt.value("policy1", "cpufreq_max") == "4000000"
        with open(first, "w") as fh:
            fh.write("2000000\n")
        watcher.drain()
        assert len(marks.dirty) == 1
    finally:
        ino.close()
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


@pytest.mark.parametrize(("util", "khz"), [
    (0.1, 800_000),    # 1.25 x 0.1 = 0.125 of the top clock is under the 800 MHz minimum: the minimum
    (0.4, 2_000_000),  # 1.25 x 0.4 x 4 GHz
    (0.6, 3_000_000),  # 1.25 x 0.6 x 4 GHz
])
def test_schedutil_runs_at_1_25_times_the_load_within_the_limits(tmp_path: Path, util: float, khz: int) -> None:
    # schedutil's frequency: 1.25 x f_max x util / max, held within scaling_min/max_freq
    # (kernel Documentation/scheduler/schedutil.rst, "Frequency / CPU Invariance")
    node = build_node(tmp_path)
    for i in range(4):
        pol = node / POLICY.format(i)
        (pol / "scaling_available_governors").write_text("performance powersave schedutil\n")
        (pol / "scaling_governor").write_text("schedutil\n")
    rt = runtime(node, load=BaseLoad(cpu_util=util, gpu_util=0.0, memory_intensity=0.0))
    _tick(rt, 1)
    assert [(node / POLICY.format(i) / "scaling_cur_freq").read_text() for i in range(4)] == [f"{khz}\n"] * 4


def _as_unprivileged(tmp_path: Path, action: Callable[[], bool]) -> int:
    """Run ``action`` in a child process that cannot override file modes (uid 65534 when the tests
    run as root), its working directory ``tmp_path/w`` (owned by it); the child's exit status:
    0 when ``action`` returned True, 1 when False, 2 when it raised."""
    work = tmp_path / "w"
    root = os.geteuid() == 0
    if root:
        for p in (work, *work.iterdir()):
            os.chown(p, 65534, 65534)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 2
        try:
            os.chdir(work)
            if root:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            code = 0 if action() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_read_only_file_is_written_through_a_passing_chmod(tmp_path: Path) -> None:
    # not root, the emulator still rewrites its 0444 attributes: a temporary u+w, the mode put back
    (tmp_path / "w").mkdir()
    for name in ("attr", "counter"):
        (tmp_path / "w" / name).write_text("1000\n")
        (tmp_path / "w" / name).chmod(0o444)

    def both() -> bool:
        return tick_mod.write_in_place("attr", "7\n") is not None and tick_mod.write_counter("counter", "8\n", 5)

    assert _as_unprivileged(tmp_path, both) == 0
    assert (tmp_path / "w" / "attr").read_text() == "7\n"
    assert (tmp_path / "w" / "counter").read_text() == "8\n"
    assert [os.lstat(tmp_path / "w" / n).st_mode & 0o7777 for n in ("attr", "counter")] == [0o444, 0o444]


def _refused_then(monkeypatch: pytest.MonkeyPatch, path: Path, second: OSError | None) -> list[int]:
    """``os.open`` for writing ``path`` as a process that cannot override file modes meets it: the
    first open refused (EACCES on a 0444 file), the second one (after the ``chmod``) raising
    ``second``, or opening; the file's mode at each open."""
    real_open = os.open
    modes: list[int] = []

    def unprivileged_open(p: Any, flags: int, *args: Any) -> int:
        if os.fspath(p) == str(path) and flags & os.O_ACCMODE == os.O_WRONLY:
            modes.append(os.stat(p).st_mode & 0o7777)
            if len(modes) == 1:
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
            if second is not None:
                raise second
        return real_open(p, flags, *args)

    monkeypatch.setattr(os, "open", unprivileged_open)
    return modes


def test_the_passing_chmod_adds_the_owners_write_bit_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod(2): S_IWUSR is 0200; the 0444 attribute is 0644 while it is opened again, and no
    # other bit (o+x with 0201) is ever set; 0444 again afterwards (tick.py:261:34)
    path = tmp_path / "attr"
    path.write_text("1000\n")
    path.chmod(0o444)
    modes = _refused_then(monkeypatch, path, None)
    fd = tick_mod._open_for_write(str(path))
    assert fd is not None
    os.close(fd)
    assert modes == [0o444, 0o644]
    assert os.lstat(path).st_mode & 0o7777 == 0o444


def test_a_reopen_that_fails_after_the_passing_chmod_puts_the_mode_back(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # the open after the temporary u+w is refused too (an LSM refusing the write: EACCES): no
    # descriptor, nothing written, and the file keeps its 0444 (it was left 0644 before)
    path = tmp_path / "attr"
    path.write_text("1000\n")
    path.chmod(0o444)
    modes = _refused_then(monkeypatch, path, PermissionError(errno.EACCES, "Permission denied"))
    assert tick_mod._open_for_write(str(path)) is None
    assert modes == [0o444, 0o644]
    assert os.lstat(path).st_mode & 0o7777 == 0o444
    modes = _refused_then(monkeypatch, path, PermissionError(errno.EACCES, "Permission denied"))
    assert tick_mod.write_in_place(str(path), "7\n") is None
    assert modes == [0o444, 0o644]
    assert path.read_text() == "1000\n"
    assert os.lstat(path).st_mode & 0o7777 == 0o444


def test_a_file_that_cannot_be_written_reports_failure(tmp_path: Path) -> None:
    # a directory where the counter was: neither way of writing works, and the caller is told
    (tmp_path / "counter").mkdir()
    assert tick_mod.write_counter(str(tmp_path / "counter"), "1\n", 0) is False
    assert tick_mod.write_in_place(str(tmp_path / "counter"), "1\n") is None
    # a kept counter whose file is gone is written the usual way from then on (and fails here)
    c = tick_mod.CounterFile("gone", "energy_uj", "pkg0", path=str(tmp_path / "gone"), keep=True)
    assert tick_mod.write_kept(c, "5\n") is False
    assert (c.keep, c.fd) == (False, -1)


def test_an_overwrite_that_fails_reports_failure(tmp_path: Path) -> None:
    # pwrite(2) on a descriptor not open for writing fails (EBADF): the overwrite says so
    path = tmp_path / "counter"
    path.write_text("1000\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert tick_mod._overwrite(fd, b"7\n", 5) is False
    finally:
        os.close(fd)
    assert path.read_text() == "1000\n"


def test_a_resume_takes_a_file_that_was_missing_at_the_stop(tmp_path: Path) -> None:
    # a writable file missing at the stop has no signature (saved as -1s): at the resume it is
    # looked at whatever it then holds, and a value an agent wrote meanwhile is taken
    node = _saved_cache_missing(tmp_path)
    gov = node / POLICY.format(3) / "scaling_governor"
    gov.write_text("performance\n")
    rt2 = runtime(node)
    assert rt2.model.writables[rt2._pos(rt2._index[("policy3", "cpufreq_governor")])].sig is None
    _tick(rt2, 2)
    assert rt2.value("policy3", "cpufreq_governor") == "performance"
    assert rt2.value("policy2", "cpufreq_governor") == "powersave"
    assert not rt2.events


def _saved_cache_missing(tmp_path: Path) -> Path:
    """A node ticked once, policy3's governor file then gone, stopped cleanly (its start-up cache)."""
    node = build_node(tmp_path)
    rt = runtime(node)
    _tick(rt, 1)
    gov = node / POLICY.format(3) / "scaling_governor"
    gov.unlink()
    rt.model.writables[rt._pos(rt._index[("policy3", "cpufreq_governor")])].sig = None
    rt.save_cache()
    assert -1 in json.loads((node / "state" / "tick-cache.json").read_text())["s"]
    return node


def _stop_with_signature(node: Path, rt: NodeRuntime, sigs: dict[str, list[int]]) -> None:
    """A clean stop (the start-up cache) whose saved signatures of the files ``sigs`` names are
    the given ones (-1s: the file was missing at the stop, as save_cache writes it)."""
    rt.save_cache()
    cache = node / "state" / "tick-cache.json"
    doc = json.loads(cache.read_text())
    rels = [w.rel for w in rt.model.writables]
    for rel, sig in sigs.items():
        i = rels.index(rel)
        doc["s"][3 * i:3 * i + 3] = sig
    cache.write_text(json.dumps(doc))


@pytest.mark.parametrize(("epp", "position"), [
    (True, 3),   # governor, EPP, maximum, minimum a policy: the saved -1s at 9-11 (tick.py:563:36, 0::3 -> 0::4)
    (False, 2),  # no EPP (intel_pstate passive, acpi-cpufreq): governor, maximum, minimum: at 6-8
])
def test_a_lowered_maximum_pulls_down_the_minimum_of_a_file_missing_at_the_stop(tmp_path: Path, epp: bool,
                                                                                position: int) -> None:
    # cpufreq_verify_within_limits (docs/hardware.md): policy->min is clamped to policy->max.
    # policy0's scaling_min_freq (2 GHz) was missing at the stop (saved as -1s); after the resume
    # a 1.5 GHz maximum pulls the minimum in force down to 1.5 GHz, as without a restart
    node = build_node(tmp_path)
    if not epp:
        for i in range(4):
            for name in ("energy_performance_preference", "energy_performance_available_preferences"):
                (node / POLICY.format(i) / name).unlink()
    rt = runtime(node)
    pol0 = node / POLICY.format(0)
    (pol0 / "scaling_min_freq").write_text("2000000\n")
    _tick(rt, 1)
    assert rt.value("policy0", "cpufreq_min") == "2000000"
    model = layout.scan(str(node), node.name, _Profile())  # the layout as its manifest keeps it
    (pol0 / "scaling_min_freq").unlink()
    _stop_with_signature(node, rt, {f"{POLICY.format(0)}/scaling_min_freq": [-1, -1, -1]})
    rt2 = NodeRuntime(str(node), model, BaseLoad())
    assert rt2.marks.full_poll  # resumed from the start-up cache
    assert rt2.model.writables[position].rel == f"{POLICY.format(0)}/scaling_min_freq"
    assert rt2.model.writables[position].sig is None
    (pol0 / "scaling_max_freq").write_text("1500000\n")
    _tick(rt2, 2)
    assert rt2.value("policy0", "cpufreq_max") == "1500000"
    assert rt2.value("policy0", "cpufreq_min") == "1500000"


def test_an_empty_writable_file_is_left_alone_at_a_resume_as_at_a_first_start(tmp_path: Path) -> None:
    # a writable file that reads empty at the start is left as it is (nothing in force to put
    # back: test_a_refused_write_over_a_file_that_read_empty_puts_back_the_default); stopped and
    # resumed with another file missing at the stop (-1s), the empty file (size 0) did not move
    # while the simulator was down: no event, no write, still empty
    node, gov, rt = empty_governor_node(tmp_path)
    _tick(rt, 1)
    assert gov.read_text() == ""
    assert not rt.events
    (node / POLICY.format(3) / "scaling_governor").unlink()
    _stop_with_signature(node, rt, {f"{POLICY.format(3)}/scaling_governor": [-1, -1, -1]})
    rt2 = NodeRuntime(str(node), rt.model, BaseLoad())
    assert rt2.marks.full_poll  # resumed from the start-up cache
    _tick(rt2, 2)
    assert gov.read_text() == ""
    assert not rt2.events
    assert rt2.value("policy0", "cpufreq_governor") == ""


@pytest.mark.parametrize(("mtime_ns", "other_missing"), [
    (0, True),               # the epoch (a tree unpacked from a reproducible archive): tick.py:564:55, :564:58
    (-1_000_000_000, True),  # 1969-12-31 23:59:59 UTC (touch -d): taken for a missing file before
    (-1_000_000_000, False),
])
def test_a_minimum_file_of_an_old_mtime_keeps_its_asked_value_across_a_resume(tmp_path: Path, mtime_ns: int,
                                                                              other_missing: bool) -> None:
    # a scaling_min_freq asked above scaling_max_freq reads the maximum, and the minimum asked
    # comes back when the maximum rises (a freq QoS request outlives the clamp: docs/hardware.md).
    # Its file's mtime is the epoch or before it (stat(2): st_mtime is signed), and maybe another
    # writable was missing at the stop (saved as -1s): the file did not move while the simulator
    # was down, so the resume does not take its value again as a new store, and the 2 GHz asked
    # is restored
    node = build_node(tmp_path)
    rt = runtime(node)
    pol1 = node / POLICY.format(1)
    (pol1 / "scaling_max_freq").write_text("1500000\n")
    _tick(rt, 1)
    (pol1 / "scaling_min_freq").write_text("2000000\n")
    _tick(rt, 2)
    assert rt.value("policy1", "cpufreq_min") == "1500000"
    os.utime(pol1 / "scaling_min_freq", ns=(mtime_ns, mtime_ns))
    st = os.lstat(pol1 / "scaling_min_freq")
    assert st.st_mtime_ns == mtime_ns
    sigs = {f"{POLICY.format(1)}/scaling_min_freq": [mtime_ns, st.st_size, st.st_ino]}
    model = layout.scan(str(node), node.name, _Profile())  # the layout as its manifest keeps it
    if other_missing:
        (node / POLICY.format(3) / "scaling_governor").unlink()
        sigs[f"{POLICY.format(3)}/scaling_governor"] = [-1, -1, -1]
    _stop_with_signature(node, rt, sigs)
    rt2 = NodeRuntime(str(node), model, BaseLoad())
    assert rt2.marks.full_poll  # resumed from the start-up cache
    _tick(rt2, 3)
    assert rt2.value("policy1", "cpufreq_min") == "1500000"
    (pol1 / "scaling_max_freq").write_text("4000000\n")
    _tick(rt2, 4)
    assert rt2.value("policy1", "cpufreq_max") == "4000000"
    assert rt2.value("policy1", "cpufreq_min") == "2000000"
    assert (pol1 / "scaling_min_freq").read_text() == "2000000\n"


@pytest.mark.parametrize(("epp", "khz"), [
    ("performance", 4_000_000),
    ("balance_performance", 4_000_000),
    ("default", 4_000_000),
    ("balance_power", 3_400_000),  # 0.85 of the top clock (EPP_FREQ, the emulator's assumption)
    ("power", 2_800_000),          # 0.7
    ("0", 4_000_000),              # a raw EPP (intel_pstate takes 0-255): 1 - epp / 255 x 0.3
    ("128", 3_398_000),            # 1 - 128 / 255 x 0.3 = 0.849412: 3,397,647 kHz, to the MHz
    ("255", 2_800_000),
])
def test_each_epp_caps_the_powersave_clock(tmp_path: Path, epp: str, khz: int) -> None:
    # light load (10 %): no power limit binds, the clock is the EPP's ceiling of the 4 GHz top
    node = build_node(tmp_path)
    for i in range(4):
        (node / POLICY.format(i) / "energy_performance_preference").write_text(f"{epp}\n")
    rt = runtime(node, load=BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0))
    _tick(rt, 1)
    assert not rt.events
    assert (node / POLICY.format(0) / "scaling_cur_freq").read_text() == f"{khz}\n"


def test_the_profile_standard_level_holds_the_clock_at_0_7(tmp_path: Path) -> None:
    # amdgpu's profile_standard fixes the clocks at a level that "varies from asic to asic" (kernel
    # Documentation/gpu/amdgpu/thermal.rst, power_dpm_force_performance_level): the emulator's
    # assumption is 0.7 of the top clock; low is the lowest level's share, 500 / 1700
    node = build_node(tmp_path, amd=True)
    rt = runtime(node, _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"}))
    _tick(rt, 1)
    level = node / "sys/bus/pci/devices/0000:03:00.0/power_dpm_force_performance_level"
    level.write_text("profile_standard\n")
    _tick(rt, 2)
    assert rt.ledger.state["c.gpu0"] == pytest.approx(0.7)
    level.write_text("low\n")
    _tick(rt, 3)
    assert rt.ledger.state["c.gpu0"] == pytest.approx(500 / 1700)
    assert not rt.events


def test_the_low_level_without_a_clock_table_is_0_3_of_the_top(tmp_path: Path) -> None:
    # a GPU that shows no pp_dpm_sclk has no lowest level to go to: the emulator's assumption is
    # 0.3 of the top clock
    node = build_node(tmp_path, amd=True)
    (node / "sys/bus/pci/devices/0000:03:00.0/pp_dpm_sclk").unlink()
    rt = runtime(node, _Profile(gpus={"vendor": "amd", "secondaryDies": True, "model": "AMD Instinct MI250X"}))
    (node / "sys/bus/pci/devices/0000:03:00.0/power_dpm_force_performance_level").write_text("low\n")
    _tick(rt, 1)
    assert rt.ledger.state["c.gpu0"] == pytest.approx(0.3)


def test_an_energy_counter_of_a_component_that_draws_nothing_reads_0(tmp_path: Path) -> None:
    # an energy_uj counter of a component the model has no power for (here "uncore") accrues
    # nothing: it reads 0 uJ, whatever the file held before the first tick
    other = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:1/energy_uj"
    node = _manifest_node(tmp_path, extra_counters=({"path": other, "kind": "energy_uj", "component": "uncore"},))
    rt = _start(node)
    _tick(rt, 1)
    _tick(rt, 2)
    assert _cur(node, other) == "0\n"
    assert int((node / ENERGY).read_text()) > 0


def test_a_start_up_cache_whose_link_group_names_one_past_the_writables_is_not_used(tmp_path: Path) -> None:
    node, _rt, cache, doc = _saved_cache(tmp_path)
    doc["w"][1] = "1\n"
    doc["h"] = [[0, len(doc["w"])]]
    cache.write_text(json.dumps(doc))
    assert runtime(node).model.writables[1].text != "1\n"
    doc["h"] = [[0, len(doc["w"]) - 1]]  # the last writable is a valid index: the cache is used
    cache.write_text(json.dumps(doc))
    assert runtime(node).model.writables[1].text == "1\n"


def test_a_ticks_sample_gives_the_cpu_power_to_the_hundredth_of_a_watt(tmp_path: Path) -> None:
    # performance at 10 % load: each package 60 + 210 x 0.1^1.15 = 74.86686 W, each DRAM
    # 3 + 12 x 0.1 x 0.3 = 3.36 W: 156.45372 W for the node, given as 156.45
    node = build_node(tmp_path)
    for i in range(4):
        (node / POLICY.format(i) / "scaling_governor").write_text("performance\n")
    rt = runtime(node, load=BaseLoad(cpu_util=0.1, gpu_util=0.0, memory_intensity=0.0))
    rt.readback(T0 + 1)
    sample = rt.step(T0 + 1, 1.0)
    assert (sample.cpu_w, sample.gpu_w, sample.power_w) == (156.45, 0.0, 156.45)


def test_a_refused_value_is_reported_by_its_first_64_characters(tmp_path: Path) -> None:
    node = build_node(tmp_path)
    rt = runtime(node)
    _tick(rt, 1)
    (node / POLICY.format(0) / "scaling_governor").write_text("x" * 100 + "\n")
    _tick(rt, 2)
    assert [(e.attributes["error.type"], e.attributes["value"]) for e in rt.events] == [("einval", "x" * 64)]


def test_turbo_turned_off_while_down_cuts_the_maxima_at_the_start(tmp_path: Path) -> None:
    # no_turbo reads 1 at the start (written while the simulator was down): the policies' maxima
    # stop at the 2.1 GHz base from the start, as intel_pstate_update_limits leaves them
    node = _manifest_node(tmp_path)
    (node / NO_TURBO).write_text("1\n")
    _start(node)
    assert (node / CPUFREQ / "policy0" / "scaling_max_freq").read_text() == f"{BASE_KHZ}\n"


def test_a_temperature_counter_without_a_modelled_temperature_reads_30_c(tmp_path: Path) -> None:
    # a temp_mc counter of a component the model does not heat reads the 30 °C the model starts at
    other = "sys/class/hwmon/hwmon9/temp1_input"
    node = _manifest_node(tmp_path, extra_counters=({"path": other, "kind": "temp_mc", "component": "uncore"},))
    rt = _start(node)
    _tick(rt, 1)
    assert _cur(node, other) == "30000\n"


def test_a_gt_minimum_above_a_0_mhz_maximum_is_refused(tmp_path: Path) -> None:
    # i915 intel_rps_set_min_frequency / xe xe_guc_pc_set_min_freq refuse a minimum above the
    # maximum in force (EINVAL), whatever that maximum is. A manifest may leave RPn out (no floor),
    # so a maximum of 0 MHz can be in force: a minimum of 100 MHz is then refused, put back to 0
    gt = "sys/bus/pci/devices/0000:4d:00.0/drm/card0/gt/gt0"
    node = tmp_path / "g1"
    (node / gt).mkdir(parents=True)
    (node / gt / "rps_min_freq_mhz").write_text("0\n")
    (node / gt / "rps_max_freq_mhz").write_text("2050\n")
    (node / "state").mkdir()
    (node / "state" / "manifest.json").write_text(json.dumps({
        "layoutVersion": 2, "node": "g1", "profile": "hand-written",
        "writable": [
            {"path": f"{gt}/rps_min_freq_mhz", "kind": "intel_gt_min", "component": "gpu0",
             "rule": {"rp0Mhz": 2050, "default": "0"}},
            {"path": f"{gt}/rps_max_freq_mhz", "kind": "intel_gt_max", "component": "gpu0",
             "rule": {"rp0Mhz": 2050, "default": "2050"}},
        ],
        "counters": [],
    }))
    rt = _start(node)
    _tick(rt, 1)
    (node / gt / "rps_max_freq_mhz").write_text("0\n")
    _tick(rt, 2)
    assert (node / gt / "rps_max_freq_mhz").read_text() == "0\n"  # min 0 <= max 0: taken
    (node / gt / "rps_min_freq_mhz").write_text("100\n")
    _tick(rt, 3)
    assert (node / gt / "rps_min_freq_mhz").read_text() == "0\n"
