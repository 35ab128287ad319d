"""Benchmark: FUSE mode of ``simulate run`` (issue 14) with ``--nodes`` ``intel-xeon-2s-rapl`` nodes.

Method:

- Renders ``--nodes`` (default 200) nodes into ``--root`` (default: a directory under TMPDIR, on
  disk) unless they exist there, then runs one resume without FUSE so every case below starts
  from the same resumed trees.
- Start: ``joulectl simulate run SPEC --root DIR --fuse --tick 1`` is started; reported is the wall
  time from the process's start to every node's ``sys/`` being visible through the mount (Python
  start-up, spec, the renderer's resume check, the runtimes, the mount), and the time from SIGTERM
  to the process's exit with the mount gone. Both over ``--starts`` (default 2) runs, median; next
  to them the same start and stop without FUSE (``simulate run --ticks 0 --workers 1``, start to
  exit), so the mount's own share is the difference; and the CPU seconds of each (the children's
  rusage), which the machine's load does not inflate.
- Reads: from this process, ``--reads`` (default 1000) ``open``/``read``/``close`` of one attribute
  of node 0 through the mount and on the plain tree, alternating in blocks of 100; median and 90th
  percentile per attribute kind (a static attribute, a counter the tick writes, an energy counter,
  which the read steps, and a writable attribute).
- discover: ``joulectl --root R discover -o json`` through the mount and on the plain tree,
  alternately, ``--discover`` (default 6) runs each; median wall time and the ratio.
- Placement: the same reads with the serving process's FUSE thread pinned to CPU 0 and this
  process on CPU 0 ("same CPU") or CPU 1 ("other CPU"), alternating in blocks of 100. On an idle
  machine the scheduler puts a reader on the CPU the FUSE thread is not on (it prefers an idle
  CPU at each wake-up), so "other CPU" is what an idle machine shows and "same CPU" the floor.
- The loop: three more runs of ``--ab-nodes`` (default 2) nodes each, on their own roots, served
  at once: one with ``JOULECTL_FUSE_SPIN_US=0`` (the loop sleeps after every request, as libfuse's
  own loop), one with polling only (``JOULECTL_FUSE_COLOCATE=0``), one with polling and
  colocation, the default (on a quiet machine the loop moves to the reader's CPU as SCHED_IDLE:
  joulectl/sim/fuse/colocate.py); each variant sets both variables, whatever the caller's
  environment says; reads
  from this process alternate between them in blocks of 100 (unpinned, and with the FUSE threads
  on CPU 0 and this process on CPU 1; a colocating loop moves anyway), then
  ``discover -o json`` alternately; the CPU time of each FUSE thread per read
  (``/proc/PID/schedstat``: the loop is the main thread; polling shows there).
- Tick: the run serving all nodes with the tick at 1 s while the reads and discovers above go on,
  then ``--ticks`` more seconds idle; its own summary gives the median tick and the overruns.
- The load average before each case is reported (the machine is shared).

Usage: ``python benchmarks/bench_fuse.py [--nodes N] [--reads R] [--discover D] [--ticks T]
[--starts S] [--ab-nodes N] [--root DIR] [--keep]``. The defaults give the figures the targets
need in 1-3 minutes (``--quick`` forces them); ``--root DIR`` keeps the rendered nodes between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: bench-fuse}}
spec:
  pools:
  - {{name: intel, profile: intel-xeon-2s-rapl, count: {count}}}
"""
ATTRS = {
    "static (cpuinfo_max_freq)": "sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq",
    "counter (scaling_cur_freq)": "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq",
    "energy (energy_uj)": "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj",
    "writable (scaling_governor)": "sys/devices/system/cpu/cpufreq/policy0/scaling_governor",
}
JOULECTL = [sys.executable, "-m", "joulectl"]


def _sys_value(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def _load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return " ".join(fh.read().split()[:3])


def _served(mnt: Path, names: list[str]) -> bool:
    try:
        return all(os.path.isdir(mnt / n / "sys") for n in names)
    except OSError:
        return False


def _start(spec: Path, root: Path, names: list[str],
           env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([*JOULECTL, "simulate", "run", str(spec), "--root", str(root), "--fuse", "--tick", "1",
                             "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while not _served(root / "fuse", names):
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise SystemExit(f"simulate run --fuse exited {proc.returncode}: {err}")
        time.sleep(0.005)
    return proc, time.perf_counter() - t0


def _stop(proc: subprocess.Popen[str], root: Path) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    took = time.perf_counter() - t0
    if (root / "fuse").exists() and os.path.ismount(root / "fuse"):
        raise SystemExit("the mount is still there after the stop")
    try:
        return took, json.loads(out)
    except ValueError:
        raise SystemExit(f"no summary from the run: {err.strip()}") from None


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _reads(path: Path, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def _cpu_of(pid: int) -> float:
    """CPU seconds of the main thread of ``pid`` (the FUSE loop; the tick thread is not counted), in ns
    resolution from ``/proc/PID/schedstat``."""
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
        return int(fh.read().split()[0]) / 1e9


def _pin(cpu: int | None) -> None:
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)) if cpu is None else {cpu})


def _placement(pid: int, node: Path, n: int) -> None:
    """Reads with the FUSE thread (the serving process's main thread) on CPU 0 and this process on
    CPU 0 or CPU 1, alternating in blocks of 100."""
    cpus = os.sched_getaffinity(pid)
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= cpus:
        print("\nplacement: needs CPUs 0 and 1 (skipped)")
        return
    print(f"\nreads by placement, µs median (load {_load()}): FUSE thread on CPU 0, reader on CPU 0 / CPU 1")
    os.sched_setaffinity(pid, {0})  # the thread whose id is the process's: libfuse's loop
    try:
        for label, rel in ATTRS.items():
            same: list[float] = []
            other: list[float] = []
            for _ in range(max(1, n // 100)):
                _pin(0)
                same.extend(_reads(node / rel, 100))
                _pin(1)
                other.extend(_reads(node / rel, 100))
            print(f"  {label:28s} same CPU {statistics.median(same):6.1f}   other CPU {statistics.median(other):6.1f}")
    finally:
        _pin(None)
        os.sched_setaffinity(pid, cpus)


#: The loop variants of the polling A/B: label, root suffix, environment.
VARIANTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("no polling", "nopoll", {"JOULECTL_FUSE_SPIN_US": "0", "JOULECTL_FUSE_COLOCATE": "0"}),
    ("polling", "default", {"JOULECTL_FUSE_COLOCATE": "0"}),
    ("polling + colocate (default)", "colocate", {"JOULECTL_FUSE_COLOCATE": "1"}),
)


def _polling(base: Path, count: int, n: int, discovers: int) -> None:
    """The request loop without polling (JOULECTL_FUSE_SPIN_US=0), with polling only, and with
    polling and JOULECTL_FUSE_COLOCATE=1, served at once."""
    runs = []
    spec = base / f"spec-ab-{count}.yaml"
    spec.write_text(SPEC.format(count=count))
    try:
        for label, suffix, extra in VARIANTS:
            root = base / f"ab-{suffix}"
            subprocess.run([*JOULECTL, "simulate", "run", str(spec), "--root", str(root), "--ticks", "1", "--fast"],
                           check=True, capture_output=True)
            env = {k: v for k, v in os.environ.items() if k not in ("JOULECTL_FUSE_SPIN_US", "JOULECTL_FUSE_COLOCATE")}
            proc, _ = _start(spec, root, ["intel-0"], env={**env, **extra})
            runs.append((label, root, proc))
        print(f"\nthe loop, µs median (load {_load()}): " + " vs ".join(r[0] for r in runs) +
              ", alternating in blocks of 100; in brackets the FUSE thread's CPU µs per read")
        for where in (None, 1):
            for label, rel in ATTRS.items():
                times: list[list[float]] = [[] for _ in runs]
                cpu0 = [_cpu_of(p.pid) for _, _, p in runs]
                for _, _, p in runs:  # "other CPU": the FUSE threads on CPU 0 (a colocating one moves), reader CPU 1
                    os.sched_setaffinity(p.pid, {0} if where == 1 else set(range(os.cpu_count() or 1)))
                _pin(where)
                for _ in range(max(1, n // 200)):
                    for i, (_, root, _p) in enumerate(runs):
                        times[i].extend(_reads(root / "fuse" / "intel-0" / rel, 100))
                _pin(None)
                cpu = [(_cpu_of(p.pid) - c) * 1e6 / max(1, len(times[i])) for i, ((_, _, p), c) in
                       enumerate(zip(runs, cpu0, strict=True))]
                place = "unpinned  " if where is None else "other CPU "
                print(f"  {place}{label:28s} " + "   ".join(
                    f"{statistics.median(t):6.1f} ({c:4.0f})" for t, c in zip(times, cpu, strict=True)))
        d: list[list[float]] = [[] for _ in runs]
        for _ in range(discovers):
            for i, (_, root, _p) in enumerate(runs):
                d[i].append(_discover(root / "fuse" / "intel-0"))
        print(f"  discover -o json, s, median of {discovers} (fastest): " + "   ".join(
            f"{statistics.median(t):.3f} ({min(t):.3f})" for t in d))
    finally:
        for _, root, proc in runs:
            _stop(proc, root)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _discover(root: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([*JOULECTL, "--root", str(root), "discover", "-o", "json"], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        raise SystemExit(f"discover on {root} failed: {r.stderr.strip()}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--discover", type=int, default=6)
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--ab-nodes", type=int, default=2)
    ap.add_argument("--root")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.reads, args.discover, args.ticks, args.starts = 1000, 6, 5, 2
    print(f"{os.cpu_count()} CPUs; cpuidle {_sys_value('/sys/devices/system/cpu/cpuidle/current_driver')}, "
          f"guest_halt_poll_ns {_sys_value('/sys/module/haltpoll/parameters/guest_halt_poll_ns')}")
    base = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-fuse-"))
    base.mkdir(parents=True, exist_ok=True)
    spec = base / f"spec-{args.nodes}.yaml"
    spec.write_text(SPEC.format(count=args.nodes))
    root = base / "root"
    names = [f"intel-{i}" for i in range(args.nodes)]
    try:
        print(f"render/resume {args.nodes} nodes (load {_load()})", flush=True)
        subprocess.run([*JOULECTL, "simulate", "run", str(spec), "--root", str(root), "--ticks", "1", "--fast"],
                       check=True, capture_output=True)
        plain_runs, plain_cpu, fuse_cpu = [], [], []
        for _ in range(args.starts):
            t0, c0 = time.perf_counter(), _child_cpu()
            subprocess.run([*JOULECTL, "simulate", "run", str(spec), "--root", str(root), "--ticks", "0",
                            "--workers", "1"], check=True, capture_output=True)
            plain_runs.append(time.perf_counter() - t0)
            plain_cpu.append(_child_cpu() - c0)
        starts, stops = [], []
        for _ in range(max(0, args.starts - 1)):
            load = _load()
            c0 = _child_cpu()
            proc, took = _start(spec, root, names)
            starts.append(took)
            stops.append(_stop(proc, root)[0])
            fuse_cpu.append(_child_cpu() - c0)
        load = _load()
        proc, took = _start(spec, root, names)
        starts.append(took)
        node = root / "fuse" / names[0]
        plain = root / names[0]
        print(f"\nreads of one attribute, µs (load {load}): median / p90, through FUSE vs the plain tree")
        for label, rel in ATTRS.items():
            live: list[float] = []
            ref: list[float] = []
            for _ in range(max(1, args.reads // 100)):
                live.extend(_reads(node / rel, 100))
                ref.extend(_reads(plain / rel, 100))
            print(f"  {label:28s} FUSE {statistics.median(live):6.1f} / {_pct(live, 0.9):6.1f}   "
                  f"plain {statistics.median(ref):5.1f} / {_pct(ref, 0.9):5.1f}")
        print(f"\ndiscover -o json, s (load {_load()}), {args.discover} runs each, alternating")
        d_live, d_ref = [], []
        for _ in range(args.discover):
            d_live.append(_discover(node))
            d_ref.append(_discover(plain))
        ml, mr = statistics.median(d_live), statistics.median(d_ref)
        print(f"  FUSE {ml:.3f}  plain {mr:.3f}  ratio {ml / mr:.2f}x (min {min(d_live):.3f} vs {min(d_ref):.3f})")
        _placement(proc.pid, node, args.reads)
        time.sleep(args.ticks)
        stop, summary = _stop(proc, root)
        stops.append(stop)
        print(f"\none process serving {args.nodes} nodes, tick 1 s (load {_load()}): "
              f"{summary['ticks']} ticks, median tick {float(summary['medianTickSeconds']) * 1000:.0f} ms, "  # type: ignore[arg-type]
              f"overruns {summary['overruns']}")
        print(f"mount start to serving {args.nodes} nodes: median {statistics.median(starts):.2f} s "
              f"({', '.join(f'{s:.2f}' for s in starts)}); stop (SIGTERM to exit, unmounted): median "
              f"{statistics.median(stops):.2f} s ({', '.join(f'{s:.2f}' for s in stops)})")
        if fuse_cpu:
            print(f"CPU seconds of a start and an immediate stop with FUSE: median {statistics.median(fuse_cpu):.2f}"
                  f" ({', '.join(f'{s:.2f}' for s in fuse_cpu)})")
        print(f"the same start and stop without FUSE (simulate run --ticks 0, 1 worker): median "
              f"{statistics.median(plain_runs):.2f} s ({', '.join(f'{s:.2f}' for s in plain_runs)}), CPU "
              f"{statistics.median(plain_cpu):.2f} s")
        if args.ab_nodes > 0:
            _polling(base, args.ab_nodes, args.reads, args.discover)
    finally:
        if not args.keep and not args.root:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
