"""Benchmark: the simulator tick of 1,000 ``intel-xeon-2s-rapl`` nodes, and resuming 200 of them.

Method (issue 3, SPEC §9; Joulie fits 200 Intel nodes in its 1 s tick and resumes 200 in ~0.7 s):

- Renders ``--nodes`` (default 1000) ``intel-xeon-2s-rapl`` nodes into ``--root`` (default: a
  directory under TMPDIR, on disk, not tmpfs) with the renderer, unless they already exist there.
  Each node has 128 cpufreq policies: 529 agent-writable files, one ``lstat`` each per tick when
  polled, none when inotify reports what was written.
- Tick: ``--ticks`` (default 10) ticks of the whole cluster with ``--fast`` after one warm-up tick,
  for each readback mode in ``--modes`` (default ``poll,inotify``; ``SIM_READBACK``) and each worker
  count in ``--workers`` (default ``1,2``); reported: the median and the maximum tick wall time
  (readback + physics + counters + ledger + telemetry files). Between ticks an "agent" writes
  ``--writes`` (default 10) cpufreq files of the cluster, so the readback has something to take.
- Resume: the start of a run over the first ``--resume-nodes`` (default 200) existing trees, from
  ``run()`` being called to the first tick starting (spec parsing, the renderer's resume check,
  layout, every node's state from the start-up cache a clean stop leaves, inotify watches, workers),
  with the renderer's share and the first tick (which polls every writable file once to take what
  was written while the simulator was down) reported separately; wall time, and CPU time of the
  renderer's check, of the spec and node models, and of the runtimes' start (workers included).
- Also reported: the CPU seconds per tick (this process and its workers, from ``/proc/<pid>/stat``,
  from the end of one tick's agent writes to the end of the next tick: start-up, the first tick
  and the agent not counted), median and range, which depend far less on the machine's load than
  wall time, and the load average before each case (the machine is shared).

Usage: ``python benchmarks/bench_sim_tick.py [--nodes N] [--ticks T] [--workers 1,2] [--modes poll,inotify]
[--writes W] [--root DIR] [--keep] [--skip-resume]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: bench-tick}}
spec:
  pools:
  - {{name: intel, profile: intel-xeon-2s-rapl, count: {count}{overrides}}}
"""
#: ``--small``: the same profile cut to one socket of two cores without cpuidle states (165 entries
#: a node instead of 6,927, 19 writable files in 6 directories instead of 529 in 134), so that
#: 10,000 trees fit on this disk (the full profile would need 69 million inodes).
SMALL = (", overrides: {cpu: {sockets: 1, coresPerSocket: 2, threadsPerCore: 1, "
         "cpuidle: {states: []}}}")
POLICIES = {"full": 128, "small": 2}


def _load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return " ".join(fh.read().split()[:3])


def _spec(dirpath: Path, count: int, small: bool = False) -> str:
    path = dirpath / f"spec-{count}{'-small' if small else ''}.yaml"
    path.write_text(SPEC.format(count=count, overrides=SMALL if small else ""))
    return str(path)


def _agent(root: str, nodes: list[str], writes: int, policies: int = 128) -> Any:
    """A progress callback writing ``writes`` scaling_governor files (alternating values) per tick."""
    state = {"k": 0}

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        for _j in range(writes):
            k = state["k"]
            state["k"] += 1
            node = nodes[k % len(nodes)]
            path = os.path.join(root, node, f"sys/devices/system/cpu/cpufreq/policy{k % policies}/scaling_governor")
            with open(path, "w", encoding="ascii") as fh:
                fh.write("performance\n" if (k // len(nodes)) % 2 == 0 else "powersave\n")

    return progress


def _cpu_now() -> float:
    """CPU seconds (user + system) of this process, of its live worker processes and of its
    children that ended (the resume check's forked processes) so far."""
    import multiprocessing
    import resource

    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + ended.ru_utime + ended.ru_stime
    tck = os.sysconf("SC_CLK_TCK")
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat", encoding="ascii") as fh:
                fields = fh.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / tck  # utime, stime
        except (OSError, ValueError, IndexError):
            pass
    return total


def bench_tick(spec_path: str, root: str, ticks: int, workers: int, mode: str, writes: int,
               policies: int = 128) -> dict[str, Any]:
    from joulectl.sim import runtime
    from joulectl.sim.clusterspec import load_spec

    os.environ["SIM_READBACK"] = mode
    spec = load_spec(spec_path)
    names = [n.name for n in spec.nodes]
    agent = _agent(root, names, writes, policies)
    # CPU seconds of this process and its workers from the end of one tick's callback (the agent's
    # writes done) to the next tick's callback: the tick alone, start-up and agent not counted.
    marks: list[tuple[float, float]] = []
    started = [0.0]

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        at_tick_end = _cpu_now()
        agent(done, total, samples)
        marks.append((at_tick_end, _cpu_now()))

    entries = runtime.build_entries(spec, root)
    started[0] = _cpu_now()
    summary = runtime.run_entries(entries, root, spec.facility, ticks=ticks + 1, fast=True, workers=workers,
                                  progress=progress)
    cpu = [marks[k][0] - marks[k - 1][1] for k in range(1, len(marks))]
    times = summary.tick_seconds[1:]
    import resource

    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"workers": summary.workers, "nodes": summary.nodes, "median_s": statistics.median(times),
            "max_s": max(times), "ticks": len(times), "cpu_per_tick_s": statistics.median(cpu),
            "cpu_min_s": min(cpu), "cpu_max_s": max(cpu), "first_tick_cpu_s": marks[0][0] - started[0],
            "peak_rss_mib": rss / 1024}


def bench_stop(spec_path: str, root: str, workers: int) -> float:
    """Seconds a clean stop takes after one tick: every node's start-up cache written."""
    from joulectl.sim import runtime
    from joulectl.sim.clusterspec import load_spec

    spec = load_spec(spec_path)
    entries = runtime.build_entries(spec, root)
    n = max(1, min(workers, len(entries)))
    pool = runtime._Pool([entries[i::n] for i in range(n)], runtime._nvml_io(), runtime.readback_mode())
    pool.tick(time.time(), 1.0)
    t = time.perf_counter()
    pool.close()
    return time.perf_counter() - t


def bench_resume(spec_path: str, root: str, workers: int) -> dict[str, float]:
    """Seconds from ``run()`` to the first tick starting, the renderer's resume check within them,
    and the first tick (which verifies every writable file against the start-up cache)."""
    from joulectl.sim import runtime

    started: list[float] = []
    check: list[float] = []
    check_cpu: list[float] = []
    ensure = runtime._ensure_trees
    pool_init = runtime._Pool.__init__
    before_pool: list[float] = []

    def timed_ensure(*args: Any, **kwargs: Any) -> tuple[int, int]:
        t, c = time.perf_counter(), _cpu_now()
        try:
            return ensure(*args, **kwargs)
        finally:
            check.append(time.perf_counter() - t)
            check_cpu.append(_cpu_now() - c)

    def timed_pool(self: Any, *args: Any, **kwargs: Any) -> None:
        c = _cpu_now()
        pool_init(self, *args, **kwargs)
        before_pool.append(_cpu_now() - c)  # the runtimes' start, in this process or the workers

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        started.append(time.perf_counter())

    runtime._ensure_trees = timed_ensure  # type: ignore[assignment]
    runtime._Pool.__init__ = timed_pool  # type: ignore[method-assign]
    try:
        t0, c0 = time.perf_counter(), _cpu_now()
        ready: list[float] = []
        summary = runtime.run(spec_path, root, ticks=1, fast=True, workers=workers, progress=progress,
                              on_start=lambda spec, models: ready.append(_cpu_now()))
    finally:
        runtime._ensure_trees = ensure  # type: ignore[assignment]
        runtime._Pool.__init__ = pool_init  # type: ignore[method-assign]
    first_tick = summary.tick_seconds[0]
    total = started[0] - t0 - first_tick
    return {"total_s": total, "renderer_s": check[0], "runtime_s": total - check[0], "first_tick_s": first_tick,
            "renderer_cpu_s": check_cpu[0], "entries_cpu_s": ready[0] - c0 - check_cpu[0],
            "runtime_cpu_s": before_pool[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--resume-nodes", type=int, default=200)
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--modes", default="poll,inotify", help="Readback modes (SIM_READBACK) to measure.")
    ap.add_argument("--writes", type=int, default=10, help="cpufreq files an agent writes between ticks.")
    ap.add_argument("--skip-resume", action="store_true")
    ap.add_argument("--root", default=None, help="Directory for the trees (reused when it holds them).")
    ap.add_argument("--keep", action="store_true", help="Keep the trees of a temporary root.")
    ap.add_argument("--small", action="store_true", help="Cut-down nodes (see SMALL) instead of the full profile.")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from joulectl.sim import tree
    from joulectl.sim.clusterspec import load_spec

    tmp = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-sim-tick-"))
    tmp.mkdir(parents=True, exist_ok=True)
    root = tmp / "root"
    spec_path = _spec(tmp, args.nodes, args.small)
    policies = POLICIES["small" if args.small else "full"]
    kind = "intel-xeon-2s-rapl" + (" (small)" if args.small else "")
    try:
        t = time.perf_counter()
        stats = tree.render_nodes(load_spec(spec_path).nodes, str(root))
        print(f"trees: {len(stats.rendered)} rendered, {len(stats.resumed)} resumed in "
              f"{time.perf_counter() - t:.1f} s ({root})")
        for mode in args.modes.split(","):
            for w in (int(x) for x in args.workers.split(",")):
                print(f"load average {_load()}")
                r = bench_tick(spec_path, str(root), args.ticks, w, mode, args.writes, policies)
                print(f"tick of {r['nodes']} {kind} nodes, {mode}, {r['workers']} worker(s): "
                      f"median {r['median_s'] * 1000:.0f} ms, max {r['max_s'] * 1000:.0f} ms over {r['ticks']} "
                      f"ticks; CPU per tick median {r['cpu_per_tick_s']:.2f} s ({r['cpu_min_s']:.2f}-"
                      f"{r['cpu_max_s']:.2f}); start + first tick {r['first_tick_cpu_s']:.2f} CPU s; "
                      f"peak RSS {r['peak_rss_mib']:.0f} MiB")
                os.environ["SIM_READBACK"] = mode
                print(f"stop after a tick, {w} worker(s): {bench_stop(spec_path, str(root), w):.2f} s")
        if args.skip_resume:
            return 0
        resume_spec = _spec(tmp, args.resume_nodes, args.small)
        for w in (int(x) for x in args.workers.split(",")):
            bench_resume(resume_spec, str(root), w)  # leaves the start-up cache of a clean stop
            print(f"load average {_load()}")
            r = bench_resume(resume_spec, str(root), w)
            print(f"resume of {args.resume_nodes} nodes, {w} worker(s): {r['total_s']:.2f} s to the first tick "
                  f"(renderer's resume check {r['renderer_s']:.2f} s, runtime {r['runtime_s']:.2f} s); "
                  f"first tick {r['first_tick_s']:.2f} s; CPU: renderer's check {r['renderer_cpu_s']:.2f} s, "
                  f"spec and models {r['entries_cpu_s']:.2f} s, runtimes' start {r['runtime_cpu_s']:.2f} s")
    finally:
        if not args.root and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
