"""Files the tick rewrites every tick kept open between ticks (within RLIMIT_NOFILE), the ledger's
direct formatting, and a shard reading its inotify events in batches: the same bytes on disk and
no write missed, whatever the descriptor budget."""

from __future__ import annotations

import errno
import json
import os
import resource
from pathlib import Path

import pytest

from joulectl.sim import ledger as lg
from joulectl.sim import runtime
from joulectl.sim.tick import BaseLoad, FdBudget, NodeRuntime, fd_limit, kept_files
from tests.sim.test_tick import RAPL, T0, _Profile, build_node

ENERGY = [f"{RAPL}/intel-rapl:{s}/energy_uj" for s in (0, 1)] + [
    f"{RAPL}/intel-rapl:{s}/intel-rapl:{s}:0/energy_uj" for s in (0, 1)]


def _model(node: Path) -> object:
    from joulectl.sim import layout

    return layout.scan(str(node), node.name, _Profile())


def _run(node: Path, fds: FdBudget | None, ticks: int = 4) -> NodeRuntime:
    rt = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6), fds=fds)  # type: ignore[arg-type]
    for k in range(1, ticks + 1):
        rt.readback(T0 + k)
        rt.step(T0 + k, 1.0)
    return rt


def _files(node: Path) -> dict[str, str]:
    return {rel: (node / rel).read_text() for rel in ENERGY}


def test_kept_descriptors_write_the_bytes_the_open_path_writes(tmp_path: Path) -> None:
    plain = build_node(tmp_path, "n1")
    kept = build_node(tmp_path / "k", "n1")
    rt_plain = _run(plain, None)
    budget = FdBudget(100)
    rt_kept = _run(kept, budget)
    # The ledger and the four RAPL energy counters (packages and DRAM); nothing else is rewritten
    # every tick.
    assert kept_files(rt_kept.model) == 5
    assert (budget.wanted, budget.left) == (5, 95)
    assert _files(kept) == _files(plain)
    assert int((kept / ENERGY[0]).read_text()) > 0
    assert (kept / "state/ledger.json").read_bytes() == (plain / "state/ledger.json").read_bytes()
    held = [c.fd for c in rt_kept.model.counters if c.fd >= 0]  # type: ignore[attr-defined]
    assert len(held) == 4
    assert rt_kept._ledger_fd >= 0
    rt_kept.close_files()
    assert all(c.fd == -1 for c in rt_kept.model.counters)  # type: ignore[attr-defined]
    assert rt_kept._ledger_fd == -1
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)
    rt_plain.close_files()


def test_a_short_budget_keeps_what_fits_and_writes_the_rest_as_before(tmp_path: Path) -> None:
    plain = build_node(tmp_path, "n1")
    kept = build_node(tmp_path / "k", "n1")
    _run(plain, None)
    budget = FdBudget(2)
    rt = _run(kept, budget)
    assert (budget.wanted, budget.left) == (5, 0)
    assert rt._ledger_fd >= 0
    assert len([c for c in rt.model.counters if c.fd >= 0]) == 1  # type: ignore[attr-defined]
    assert _files(kept) == _files(plain)
    assert lg.load(str(kept)) == lg.load(str(plain))
    rt.close_files()


def test_a_resumed_node_continues_its_kept_counters(tmp_path: Path) -> None:
    node = build_node(tmp_path, "n1")
    rt = _run(node, FdBudget(100), ticks=3)
    total = rt.ledger.energy["pkg0"]
    rt.close_files()
    again = _run(node, FdBudget(100), ticks=0)
    assert again.ledger.energy["pkg0"] == total == int((node / ENERGY[0]).read_text())
    again.readback(T0 + 10)
    again.step(T0 + 10, 1.0)
    assert int((node / ENERGY[0]).read_text()) == again.ledger.energy["pkg0"] > total
    saved = lg.load(str(node))
    assert saved is not None and (saved.tick, saved.energy) == (4, again.ledger.energy)
    again.close_files()


def test_ledger_kept_open_then_renamed_when_it_outgrows_its_block(tmp_path: Path) -> None:
    (tmp_path / "n" / "state").mkdir(parents=True)
    node = str(tmp_path / "n")
    fd = lg.write_kept(node, lg.Ledger("n", tick=1, energy={"pkg0": 1}), -1)
    assert fd >= 0
    ino = os.stat(lg.ledger_path(node)).st_ino
    assert lg.write_kept(node, lg.Ledger("n", tick=2, energy={"pkg0": 2}), fd) == fd
    assert os.fstat(fd).st_ino == ino
    assert lg.load(node) == lg.Ledger("n", tick=2, energy={"pkg0": 2})
    big = lg.Ledger("n", tick=3, energy={f"counter-with-a-long-name-{i}": 10**12 + i for i in range(80)})
    assert lg.write_kept(node, big, fd) == -1  # renamed: a descriptor would hold the old file
    with pytest.raises(OSError):
        os.fstat(fd)
    assert lg.load(node) == big
    fd = lg.write_kept(node, lg.Ledger("n", tick=4), -1)
    assert fd >= 0 and os.path.getsize(lg.ledger_path(node)) == lg.INPLACE_BYTES
    assert lg.load(node) == lg.Ledger("n", tick=4)
    os.close(fd)


def test_ledger_text_is_formatted_directly() -> None:
    led = lg.Ledger("n1", tick=3, time_s=12.5, energy={"pkg0": 10, "gpu1": 2**40},
                    state={"T.pkg0": 41.25, "P": 68, "f.pkg0": 0.123456789})
    assert led.to_json() == ('{"v":1,"node":"n1","tick":3,"t":12.500,"e":{"pkg0":10,"gpu1":1099511627776},'
                             '"s":{"T.pkg0":41.2500,"P":68.0000,"f.pkg0":0.1235}}')
    led.state["new"] = 1.0  # a key added since: a new template
    led.tick = 4
    assert json.loads(led.to_json())["s"] == {"T.pkg0": 41.25, "P": 68.0, "f.pkg0": 0.1235, "new": 1.0}
    assert json.loads(led.to_json())["tick"] == 4
    odd = lg.Ledger('a "%s" node', energy={"100%": 1})
    assert json.loads(odd.to_json()) == {"v": 1, "node": 'a "%s" node', "tick": 0, "t": 0.0, "e": {"100%": 1},
                                         "s": {}}


def test_a_value_that_is_not_finite_goes_through_the_json_encoder() -> None:
    led = lg.Ledger("n1", tick=1, time_s=2.0, energy={"pkg0": 5}, state={"T.pkg0": float("inf")})
    assert led.to_json() == '{"v":1,"node":"n1","tick":1,"t":2.0,"e":{"pkg0":5},"s":{"T.pkg0":Infinity}}'


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 64:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}: nothing to raise to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard - 1), hard))
    try:
        assert fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_budget_without_proc_counts_64_descriptors_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/PERFORMANCE.md: the budget is RLIMIT_NOFILE less the descriptors open (counted in
    # /proc/self/fd; 64 assumed where it cannot be listed, as without /proc) and the 1,024 kept
    # for everything else (tick.py:416:17, 64 -> 65, seed 8821)
    from joulectl.sim import tick as tick_mod

    listdir = os.listdir

    def no_proc(path: str) -> list[str]:
        if path == "/proc/self/fd":
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return listdir(path)

    limit = fd_limit()
    monkeypatch.setattr(tick_mod.os, "listdir", no_proc)
    assert tick_mod.fd_budget().size == max(0, limit - 64 - 1024)


def test_more_files_than_the_budget_is_one_warning_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    entries = []
    for name in ("n1", "n2"):
        node = build_node(tmp_path, name)
        entries.append(runtime.NodeEntry(str(node), _model(node), BaseLoad(), 0.0, {}))  # type: ignore[arg-type]
    monkeypatch.setattr(runtime, "fd_budget", lambda: FdBudget(3))
    runtime.check_fd_budget([entries])
    assert capsys.readouterr().err.splitlines() == [
        "joulectl: warning: simulate run: 10 files rewritten every tick in a worker, 3 can stay open under "
        "RLIMIT_NOFILE: the other 7 are opened at every write (slower); raise the hard limit (ulimit -Hn) "
        "or use more --workers"]
    monkeypatch.setattr(runtime, "fd_budget", lambda: FdBudget(10))
    runtime.check_fd_budget([entries[:1], entries[1:]])
    assert capsys.readouterr().err == ""


def test_batched_event_reads_miss_no_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events read every 2 nodes of 5: caps written between ticks, and written during a tick to a
    node already read back and to one not yet read, are each in force by the next tick."""
    monkeypatch.setattr(runtime, "DRAIN_NODES", 2)
    entries = []
    for i in range(5):
        node = build_node(tmp_path, f"n{i}", policies=1)
        entries.append(runtime.NodeEntry(str(node), _model(node), BaseLoad(), 0.0, {}))  # type: ignore[arg-type]
    shard = runtime.Shard(entries, None, "inotify")
    if shard.watcher is None:
        pytest.skip("no inotify here")
    limit = f"{RAPL}/intel-rapl:0/constraint_0_power_limit_uw"

    def cap(i: int, watts: int) -> None:
        (tmp_path / f"n{i}" / limit).write_text(f"{watts * 1_000_000}\n")

    try:
        samples, _ = shard.tick(T0 + 1, 1.0)
        assert {s.caps_w["pkg0"] for s in samples} == {200.0}
        cap(0, 150)
        cap(4, 140)
        samples, _ = shard.tick(T0 + 2, 1.0)
        assert [s.caps_w["pkg0"] for s in samples] == [150.0, 200.0, 200.0, 200.0, 140.0]
        step = shard.nodes[2].step

        def step_and_write(now: float, dt: float) -> object:
            cap(1, 130)  # its readback was this tick's
            cap(3, 120)  # read back after this, maybe before the next batch's events
            return step(now, dt)

        monkeypatch.setattr(shard.nodes[2], "step", step_and_write)
        shard.tick(T0 + 3, 1.0)
        monkeypatch.setattr(shard.nodes[2], "step", step)
        samples, _ = shard.tick(T0 + 4, 1.0)
        assert [s.caps_w["pkg0"] for s in samples] == [150.0, 130.0, 200.0, 120.0, 140.0]
    finally:
        shard.close()


def test_a_clean_stop_resumes_from_the_caches_copy_of_the_ledger(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    node = build_node(tmp_path, "n1")
    rt = _run(node, FdBudget(100), ticks=2)
    rt.save_cache()
    rt.close_files()
    cache = node / "state/tick-cache.json"
    assert cache.read_bytes().startswith(b'{"v":2,"u":0,')
    doc = json.loads(cache.read_text())
    assert doc["l"] == json.loads((node / "state/ledger.json").read_text())
    assert doc["ls"][2] == os.stat(node / "state/ledger.json").st_ino
    reads: list[str] = []
    load = lg.load

    def counted(node_dir: str) -> lg.Ledger | None:
        reads.append(node_dir)
        return load(node_dir)

    monkeypatch.setattr(lg, "load", counted)
    again = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6), fds=FdBudget(100))  # type: ignore[arg-type]
    assert reads == []  # the copy, not the file
    assert (again.ledger.tick, again.ledger.energy) == (2, rt.ledger.energy)
    # Taken once: the cache is marked used in place, and the next start reads the ledger file.
    assert json.loads(cache.read_text())["u"] == 1
    third = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6))  # type: ignore[arg-type]
    assert reads == [str(node)]
    assert third.ledger == again.ledger
    again.readback(T0 + 3)
    again.step(T0 + 3, 1.0)
    again.readback(T0 + 4)
    again.step(T0 + 4, 1.0)
    saved = load(str(node))
    assert saved is not None and (saved.tick, saved.energy) == (4, again.ledger.energy)
    again.save_cache()
    assert json.loads(cache.read_text())["u"] == 0  # a clean stop writes it afresh
    again.close_files()


def _saved_after_a_tick(tmp_path: Path) -> tuple[Path, NodeRuntime, Path]:
    """A node ticked once and its start-up cache saved: (node, runtime, the cache file)."""
    node = build_node(tmp_path, "n1")
    rt = _run(node, None, ticks=1)
    rt.save_cache()
    return node, rt, node / "state/tick-cache.json"


def _start_reading_the_ledger_file(node: Path, monkeypatch: pytest.MonkeyPatch) -> NodeRuntime:
    """A runtime started again on ``node``, which must read the ledger file once (no cache copy)."""
    reads: list[str] = []
    load = lg.load
    monkeypatch.setattr(lg, "load", lambda node_dir: reads.append(node_dir) or load(node_dir))
    again = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6))  # type: ignore[arg-type]
    assert reads == [str(node)]
    return again


def test_a_cache_not_written_by_save_cache_gives_no_ledger_copy(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    node, _, cache = _saved_after_a_tick(tmp_path)
    cache.write_text(json.dumps(json.loads(cache.read_text()), indent=1))  # same document, other bytes
    again = _start_reading_the_ledger_file(node, monkeypatch)
    assert again.ledger.tick == 1
    assert json.loads(cache.read_text())["u"] == 0


def test_a_cache_whose_last_u_says_used_gives_no_ledger_copy(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # save_cache's bytes, head and all, with a second "u" key of 1 at the end: a JSON object's
    # last value of a name is the one a parser keeps (Python's json, RFC 8259 section 4), so the
    # cache reads as used and its copy of the ledger is not taken (tick.py:689:58, `or` -> `and`)
    node, _, cache = _saved_after_a_tick(tmp_path)
    raw = cache.read_bytes()
    assert raw.startswith(b'{"v":2,"u":0,') and raw.endswith(b"}")
    used = raw[:-1] + b',"u":1}'
    cache.write_bytes(used)
    assert json.loads(used)["u"] == 1
    again = _start_reading_the_ledger_file(node, monkeypatch)
    assert again.ledger.tick == 1
    assert cache.read_bytes() == used  # not marked in place either


def test_a_kill_right_after_a_resume_leaves_the_cache_unused(tmp_path: Path) -> None:
    """A run that resumed, ticked once within the same clock tick of the file system and was killed
    (no clean stop): the next start reads the ledger file, and the stale cache is not used."""
    node, rt, cache = _saved_after_a_tick(tmp_path)
    doc = json.loads(cache.read_text())
    gov0 = "sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
    doc["w"][[w.rel for w in rt.model.writables].index(gov0)] = "performance\n"  # only a used cache says so
    cache.write_text(json.dumps(doc))
    killed = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6))  # type: ignore[arg-type]
    assert killed.value("policy0", "cpufreq_governor") == "performance"
    killed.readback(T0 + 2)
    killed.step(T0 + 2, 1.0)
    after = NodeRuntime(str(node), _model(node), BaseLoad(cpu_util=0.6))  # type: ignore[arg-type]
    assert after.ledger.tick == 2
    assert after.ledger.energy == killed.ledger.energy
    assert after.value("policy0", "cpufreq_governor") == "powersave"


@pytest.mark.parametrize(("cpus", "load", "workers"), [(2, 0.3, 2), (2, 0.6, 1), (2, 9.5, 1), (16, 3.4, 12),
                                                       (16, 10.6, 5), (64, 0.0, 12), (1, 0.0, 1)])
def test_default_workers_are_the_free_cpus(monkeypatch: pytest.MonkeyPatch, cpus: int, load: float,
                                           workers: int) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert runtime.default_workers() == workers


def test_default_workers_without_a_load_average(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", missing)
    assert runtime.default_workers() == 4


@pytest.mark.parametrize(("budget", "kept_at_0"), [
    (1, "state/ledger.json"),  # the ledger alone kept: opened first while descriptor 0 is free
    (100, ENERGY[0]),          # the counters too: written before the ledger, pkg0's first
])
def test_close_files_closes_a_kept_descriptor_numbered_0(tmp_path: Path, budget: int, kept_at_0: str) -> None:
    # open(2) returns the lowest descriptor not open: in a process started with its stdin closed,
    # the first file the tick keeps open is descriptor 0, and close_files closes it like any other
    # (tick.py close_files' `fd >= 0`); run in a child, whose descriptor 0 is closed first
    node = build_node(tmp_path, "n1")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            os.close(0)
            rt = _run(node, FdBudget(budget), ticks=1)
            if os.readlink("/proc/self/fd/0") != str(node / kept_at_0):
                code = 2
            else:
                rt.close_files()
                try:
                    os.fstat(0)
                    code = 1
                except OSError as e:
                    code = 0 if e.errno == errno.EBADF else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
