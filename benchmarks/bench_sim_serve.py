"""Benchmark: the simulator's HTTP face at 1,000 nodes (issue 19).

Method:

- Renders ``--nodes`` (default 1000) nodes, 80 % ``intel-xeon-2s-rapl`` and 20 %
  ``nvidia-h100-sxm-8gpu``, into ``--root`` (default: a new directory under /tmp, which is on
  disk; give ``--root`` of a kept tree to resume it instead of rendering, ~10 minutes for 1,000
  nodes), then runs the tick loop in real time (1 s ticks, one worker) in a thread of this
  process with ``--listen 127.0.0.1:0``, as ``simulate run --listen`` does: the HTTP server runs
  in its own process (``joulectl.sim.serve.child``), fed one encoded snapshot per tick.
- ``/metrics``: after a tick, ``--requests`` (default 50) sequential GET requests over one
  keep-alive connection, each timed from sending the request to the last byte read; reported: the
  first request after a tick (it encodes the tick's page), the median and the 95th percentile, and
  the page size. Done for the Prometheus text and for OpenMetrics.
- The phases start once the loop is on time again after the resume's slow first tick (the loop
  runs missed ticks back to back; those catch-up ticks would count as more than one tick a
  second).
- Then ``--rounds`` (default 2) rounds of a quiet phase (no HTTP requests) and a load phase, each
  ``--seconds`` (default 30) long: in the load phase a second process sends ``--rate`` (default
  200) requests per second to random nodes' ``/telemetry/<node>`` over 4 keep-alive connections.
  Interleaving the phases puts both under the same share of a loaded machine.
- Reported per kind of phase (all its rounds together): ticks per second, tick intervals (wall time between the
  ends of two ticks; 1 s when the loop keeps its 1 s tick) and how many are late (> 1.1 s); the
  tick loop thread's CPU seconds per tick (from one tick's end to the next); CPU seconds per wall
  second of the tick loop's thread, of the rest of the tick process (the snapshot writer thread,
  the benchmark's waiting main thread) and of the server process; for the load phase the requests
  answered, the achieved rate and the latency median and p99.
- The run's ticks after the warm-up longer than 1 s (``RunSummary.tick_seconds``: overruns).
- The load average is printed with each figure (the machine may be shared).

Usage: ``python benchmarks/bench_sim_serve.py [--nodes N] [--root DIR] [--requests R] [--rate Q]
[--seconds S] [--rounds K] [--workers W] [--keep]`` (``--workers``: the tick loop's worker
processes, default 1; with more, "tick loop thread" is the main process's share of a tick only).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: bench-serve}}
spec:
  pools:
  - {{name: intel, profile: intel-xeon-2s-rapl, count: {intel}}}
  - {{name: h100, profile: nvidia-h100-sxm-8gpu, count: {h100}}}
"""


def _load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as fh:
        return " ".join(fh.read().split()[:3])


def _stat_cpu(path: str) -> float:
    """CPU seconds (user + system) from a /proc stat file (of a process or of one thread)."""
    try:
        with open(path, encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Cpu:
    """CPU seconds of a phase: the tick loop's thread, the rest of this process (the snapshot
    writer; the tick loop runs on_tick, so building and encoding the snapshot count as the
    tick's), and the server process."""

    def __init__(self, tick_thread: threading.Thread, server_pid: int | None) -> None:
        self.tick_stat = f"/proc/self/task/{tick_thread.native_id}/stat"
        self.server_stat = f"/proc/{server_pid}/stat"
        self.t0, self.p0 = time.monotonic(), time.process_time()
        self.k0, self.s0 = _stat_cpu(self.tick_stat), _stat_cpu(self.server_stat)

    def stop(self) -> tuple[float, float, float, float]:
        """(wall s, tick thread CPU s, rest of the process CPU s, server process CPU s)."""
        wall = time.monotonic() - self.t0
        proc, tick = time.process_time() - self.p0, _stat_cpu(self.tick_stat) - self.k0
        return wall, tick, max(0.0, proc - tick), _stat_cpu(self.server_stat) - self.s0


def _timed_gets(port: int, path: str, n: int, accept: str = "") -> tuple[list[float], int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times: list[float] = []
    size = 0
    headers = {"Accept": accept} if accept else {}
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        body = conn.getresponse().read()
        times.append(time.perf_counter() - t0)
        size = len(body)
    conn.close()
    return times, size


def _load_client(port: int, nodes: list[str], rate: float, seconds: float, out: Any) -> None:
    """Send ``rate`` requests/s spread over 4 connections; put (answered, latencies) on ``out``."""
    lat: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def worker(k: int) -> None:
        rng = random.Random(k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        interval = 4.0 / rate
        nxt = time.monotonic()
        while time.monotonic() < end:
            nxt += interval
            t0 = time.perf_counter()
            conn.request("GET", f"/telemetry/{rng.choice(nodes)}")
            resp = conn.getresponse()
            resp.read()
            dt = time.perf_counter() - t0
            if resp.status == 200:
                with lock:
                    lat.append(dt)
            pause = nxt - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((len(lat), lat))


def _intervals(label: str, seen: list[float], own: list[float], cpu: list[tuple[float, float, float, float]]) -> None:
    wall = sum(c[0] for c in cpu)
    print(f"  {label}: {len(seen) / wall:.2f} ticks per s; tick intervals {len(seen)}, "
          f"median {statistics.median(seen) * 1000:.0f} ms, "
          f"max {max(seen) * 1000:.0f} ms, late (> 1.1 s): {sum(t > 1.1 for t in seen)}; tick loop thread CPU per tick "
          f"median {statistics.median(own) * 1000:.0f} ms, max {max(own) * 1000:.0f} ms")
    print(f"  {label}: CPU s per wall s: tick loop thread {sum(c[1] for c in cpu) / wall:.3f}, rest of the tick "
          f"process {sum(c[2] for c in cpu) / wall:.3f}, server process {sum(c[3] for c in cpu) / wall:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--root")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="worker processes of the tick loop (default 1)")
    args = ap.parse_args()

    from joulectl.sim import runtime
    from joulectl.sim.serve.face import NetworkFace

    work = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-serve-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    h100 = args.nodes // 5
    spec = work / "spec.yaml"
    spec.write_text(SPEC.format(intel=args.nodes - h100, h100=h100))
    root = work / "root"
    names = [f"intel-{i}" for i in range(args.nodes - h100)] + [f"h100-{i}" for i in range(h100)]
    t0 = time.monotonic()
    runtime.run(str(spec), str(root), ticks=0, fast=True, workers=1)
    print(f"rendered/resumed {args.nodes} nodes in {time.monotonic() - t0:.1f} s (load {_load()})")

    face = NetworkFace(str(root), listen=("127.0.0.1", 0), warn=lambda m: print(f"warning: {m}"))
    stop = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["summary"] = runtime.run(str(spec), str(root), ticks=10_000, tick_s=1.0, workers=args.workers,
                                        on_start=face.on_start, on_tick=on_tick, stop_event=stop)

    ticks_seen: list[float] = []
    tick_cpu: list[float] = []
    last = {"t": 0.0, "cpu": 0.0}

    face_cpu: list[float] = []

    def on_tick(out: Any) -> None:
        c0 = time.thread_time()
        face.on_tick(out)
        now, cpu_now = time.monotonic(), time.thread_time()
        face_cpu.append(cpu_now - c0)  # building, accounting and encoding the tick's snapshot
        if last["t"]:
            ticks_seen.append(now - last["t"])  # wall time between two ticks' ends: 1 s when on time
            tick_cpu.append(cpu_now - last["cpu"])  # the tick loop thread's CPU s from one tick's end to the next
        last["t"], last["cpu"] = now, cpu_now

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while face.hub is None or face.hub.current is None:
        time.sleep(0.05)
    port = face.server.port
    # The first tick after a resume polls every writable file (seconds at 1,000 nodes) and the
    # loop then runs the ticks it missed back to back (it keeps start + k * 1 s): wait until it is
    # on time again (three intervals of 0.9 s or more, at most 120 s), so that no phase counts
    # catch-up ticks.
    warm0 = time.monotonic()
    while time.monotonic() - warm0 < 120 and not (len(ticks_seen) >= 3 and min(ticks_seen[-3:]) >= 0.9):
        time.sleep(0.1)
    warm_ticks = face.hub.current.tick
    print(f"on time after {time.monotonic() - warm0:.0f} s more, at tick {warm_ticks} (load {_load()})")
    phases: dict[str, tuple[list[float], list[float], list[tuple[float, float, float, float]]]] = {
        "quiet": ([], [], []), "load": ([], [], [])}
    answered_all: list[float] = []
    try:
        for label, accept in (("prometheus", ""), ("openmetrics", "application/openmetrics-text")):
            tick = face.hub.current.tick
            while face.hub.current.tick == tick:  # a fresh tick: the first request encodes its page
                time.sleep(0.01)
            time.sleep(0.05)  # the server process takes the tick's snapshot a moment after the tick
            times, size = _timed_gets(port, "/metrics", args.requests, accept)
            q = statistics.quantiles(times, n=20)
            print(f"/metrics {label} (load {_load()}): first after a tick {times[0] * 1000:.2f} ms, median "
                  f"{statistics.median(times) * 1000:.2f} ms, p95 {q[18] * 1000:.2f} ms, {size / 1024:.0f} KiB")
        ctx = multiprocessing.get_context("spawn")
        for rnd in range(args.rounds):
            for kind in ("quiet", "load"):
                seen, own, cpu = phases[kind]
                n0 = len(ticks_seen)
                print(f"round {rnd + 1} {kind} for {args.seconds:.0f} s (load {_load()})")
                meter = _Cpu(thread, face.server.pid)
                if kind == "quiet":
                    time.sleep(args.seconds)
                else:
                    q_out = ctx.Queue()
                    proc = ctx.Process(target=_load_client, args=(port, names, args.rate, args.seconds, q_out))
                    proc.start()
                    _n, lat = q_out.get(timeout=args.seconds + 120)
                    proc.join()
                    answered_all.extend(lat)
                cpu.append(meter.stop())
                seen.extend(ticks_seen[n0:])
                own.extend(tick_cpu[n0:])
        for kind in ("quiet", "load"):
            seen, own, cpu = phases[kind]
            _intervals("without HTTP load" if kind == "quiet" else f"at {args.rate:.0f} req/s", seen, own, cpu)
        fc = [c * 1000 for c in face_cpu]
        print(f"  the snapshot (built, idle energy accounted, pickled for the server process) in the tick loop "
              f"thread: median {statistics.median(fc):.1f} ms CPU a tick, max {max(fc):.1f} ms")
        lat = sorted(answered_all)
        load_s = args.rounds * args.seconds
        print(f"  /telemetry/<node>: answered {len(lat)} in {load_s:.0f} s ({len(lat) / load_s:.0f}/s, asked "
              f"{args.rate:.0f}/s), median {statistics.median(lat) * 1000:.2f} ms, "
              f"p99 {lat[int(len(lat) * 0.99)] * 1000:.2f} ms (load {_load()})")
    finally:
        stop.set()
        thread.join(60)
        restarts = face.server.restarts if face.server is not None else 0
        face.close()
    summary = result["summary"]
    after = summary.tick_seconds[warm_ticks:]
    print(f"after tick {warm_ticks}: {len(after)} ticks, {sum(t > 1.0 for t in after)} longer than 1 s "
          f"(overruns), median {statistics.median(after) * 1000:.0f} ms, max {max(after) * 1000:.0f} ms")
    print(f"run: {summary.ticks} ticks, overruns {summary.overruns}, "
          f"median tick {summary.median_tick_s * 1000:.0f} ms, max tick {max(summary.tick_seconds) * 1000:.0f} ms, "
          f"server restarts {restarts}")
    if not args.keep and not args.root:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
