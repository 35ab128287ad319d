"""Benchmark: the simulator's HTTP face at 1,000 nodes (issue 19).

Method:

- Renders ``--nodes`` (default 1000) nodes, 80 % ``intel-xeon-2s-rapl`` and 20 %
  ``nvidia-h100-sxm-8gpu``, into ``--root`` (default: a directory under /dev/shm when it exists,
  else TMPDIR), then runs the tick loop in real time (1 s ticks, one worker) with
  ``--listen 127.0.0.1:0`` in this process, as ``simulate run --listen`` does.
- ``/metrics``: after a tick, ``--requests`` (default 50) sequential GET requests over one
  keep-alive connection, each timed from sending the request to the last byte read; reported: the
  first request after a tick (it encodes the tick's page), the median and the 95th percentile, and
  the page size. Done for the Prometheus text and for OpenMetrics.
- ``/telemetry/<node>`` under load: a second process sends ``--rate`` (default 200) requests per
  second to random nodes over 4 keep-alive connections for ``--seconds`` (default 20) while the
  tick loop runs; reported: requests answered, the achieved rate, latency median and p99, the
  run's tick overruns (a tick longer than its 1 s interval) and median tick.
- Tick intervals (wall time between the ends of two ticks; 1 s when the loop keeps its 1 s tick)
  are reported for a quiet phase of ``--seconds``/2 without HTTP requests and for the load phase,
  so the cost of serving is the difference of the two on the same machine at the same time.
- CPU seconds per wall second of the quiet and the load phase: the whole process, the tick loop's
  thread (the tick and the snapshot it publishes) and the rest (the HTTP server's threads). The
  tick and the server share one interpreter lock, so the loop keeps its 1 s tick while the two
  together stay under one CPU second per second; this holds on any machine with a core free for
  the process, which the wall-time figures of a loaded machine cannot show.
- The load average before each case is printed (the machine is shared).

Usage: ``python benchmarks/bench_sim_serve.py [--nodes N] [--root DIR] [--requests R] [--rate Q]
[--seconds S] [--keep]``.
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


def _thread_cpu(native_id: int | None) -> float:
    """CPU seconds (user + system) of one thread of this process, from /proc."""
    if native_id is None:
        return 0.0
    with open(f"/proc/self/task/{native_id}/stat", encoding="ascii") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Cpu:
    """CPU seconds of a phase: the whole process, the tick loop's thread, and the rest (the HTTP
    server's threads: the tick loop runs on_tick, so the snapshot build counts as the tick's)."""

    def __init__(self, tick_thread: threading.Thread) -> None:
        self.tid = tick_thread.native_id
        self.t0, self.p0, self.k0 = time.monotonic(), time.process_time(), _thread_cpu(self.tid)

    def report(self, label: str) -> None:
        wall = time.monotonic() - self.t0
        proc, tick = time.process_time() - self.p0, _thread_cpu(self.tid) - self.k0
        print(f"  CPU per wall second {label}: process {proc / wall:.3f} s/s, tick loop thread "
              f"{tick / wall:.3f} s/s, the rest (HTTP) {(proc - tick) / wall:.3f} s/s")


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--root")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    from joulectl.sim import runtime
    from joulectl.sim.serve.face import NetworkFace

    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    work = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-serve-", dir=base))
    work.mkdir(parents=True, exist_ok=True)
    h100 = args.nodes // 5
    spec = work / "spec.yaml"
    spec.write_text(SPEC.format(intel=args.nodes - h100, h100=h100))
    root = work / "root"
    names = [f"intel-{i}" for i in range(args.nodes - h100)] + [f"h100-{i}" for i in range(h100)]
    t0 = time.monotonic()
    runtime.run(str(spec), str(root), ticks=0, fast=True, workers=1)
    print(f"rendered/resumed {args.nodes} nodes in {time.monotonic() - t0:.1f} s (load {_load()})")

    face = NetworkFace(str(root), listen=("127.0.0.1", 0))
    stop = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["summary"] = runtime.run(str(spec), str(root), ticks=10_000, tick_s=1.0, workers=1,
                                        on_start=face.on_start, on_tick=on_tick, stop_event=stop)

    ticks_seen: list[float] = []
    last = {"t": 0.0}

    def on_tick(out: Any) -> None:
        face.on_tick(out)
        now = time.monotonic()
        if last["t"]:
            ticks_seen.append(now - last["t"])  # wall time between two ticks' ends: 1 s when on time
        last["t"] = now

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while face.hub is None or face.hub.current is None:
        time.sleep(0.05)
    port = face.server.port
    try:
        for label, accept in (("prometheus", ""), ("openmetrics", "application/openmetrics-text")):
            hub = face.hub
            tick = hub.current.tick
            hub.wait(tick, 5)  # a fresh tick: the first request encodes its page
            print(f"/metrics {label} (load {_load()}):")
            times, size = _timed_gets(port, "/metrics", args.requests, accept)
            q = statistics.quantiles(times, n=20)
            print(f"  first after a tick {times[0] * 1000:.2f} ms, median {statistics.median(times) * 1000:.2f} ms, "
                  f"p95 {q[18] * 1000:.2f} ms, {size / 1024:.0f} KiB")
        quiet0 = len(ticks_seen)
        cpu = _Cpu(thread)
        time.sleep(args.seconds / 2)  # a quiet phase: the tick without HTTP load, for comparison
        quiet = ticks_seen[quiet0:]
        cpu.report("without HTTP load")
        if quiet:
            print(f"tick intervals without HTTP load: {len(quiet)}, median {statistics.median(quiet) * 1000:.0f} ms, "
                  f"max {max(quiet) * 1000:.0f} ms, late (> 1.1 s): {sum(t > 1.1 for t in quiet)} (load {_load()})")
        tick0 = face.hub.current.tick
        busy0 = len(ticks_seen)
        print(f"/telemetry/<node> at {args.rate:.0f} req/s for {args.seconds:.0f} s (load {_load()}):")
        ctx = multiprocessing.get_context("spawn")
        q_out = ctx.Queue()
        proc = ctx.Process(target=_load_client, args=(port, names, args.rate, args.seconds, q_out))
        t_start = time.monotonic()
        proc.start()
        cpu = _Cpu(thread)
        answered, lat = q_out.get(timeout=args.seconds + 120)
        cpu.report(f"at {args.rate:.0f} req/s")
        proc.join()
        elapsed = time.monotonic() - t_start
        ticks_during = face.hub.current.tick - tick0
        lat.sort()
        print(f"  answered {answered} in {elapsed:.1f} s ({answered / args.seconds:.0f}/s), "
              f"median {statistics.median(lat) * 1000:.2f} ms, p99 {lat[int(len(lat) * 0.99)] * 1000:.2f} ms, "
              f"{ticks_during} ticks meanwhile")
        busy = ticks_seen[busy0:]
        if busy:
            print(f"tick intervals under HTTP load: {len(busy)}, median {statistics.median(busy) * 1000:.0f} ms, "
                  f"max {max(busy) * 1000:.0f} ms, late (> 1.1 s): {sum(t > 1.1 for t in busy)}")
    finally:
        stop.set()
        thread.join(60)
        face.close()
    summary = result["summary"]
    print(f"run: {summary.ticks} ticks, overruns {summary.overruns}, "
          f"median tick {summary.median_tick_s * 1000:.0f} ms, max tick {max(summary.tick_seconds) * 1000:.0f} ms")
    if not args.keep and not args.root:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
