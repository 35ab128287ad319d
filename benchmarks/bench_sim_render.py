"""Benchmark: render 200 ``intel-xeon-2s-rapl`` node trees, then resume them.

Method (issue 3, SPEC §9; Joulie renders 200 Intel nodes in about 12 s and resumes them in about
0.7 s; targets: render under 6 s, resume under 0.7 s on the 2-core machine):

- Render: ``simulate render``'s engine (:func:`joulectl.sim.tree.render_nodes`) on a fresh root
  (default: a directory under TMPDIR, on disk, not tmpfs), ``--workers`` processes (default: the
  renderer's choice, one per CPU). Spec parsing and profile loading are included, as the command
  pays them. Each node is about 2,400 entries (128 cpufreq policies).
- Resume: the same call again on the rendered root (every node checked, nothing created), twice:
  the first after dropping nothing, the second to show the steady state.
- Reported: wall time, CPU time of this process and its children (user+sys), and the load average
  before each case, because the machine is shared and file creation is kernel CPU time.

``--overlay`` (issue 20: 1,000 full nodes under 10 s on disk, linear to 10,000) renders overlay
trees (``simulate render --overlay``, :mod:`joulectl.sim.overlay`) instead, in a private mount
namespace of its own (the script runs itself again under ``unshare -m --propagation private``, so
no mount outlives it), and adds a case: every tree unmounted, then the resume that mounts them
all again (a reboot's first start).

Usage: ``python benchmarks/bench_sim_render.py [--nodes 200] [--workers N] [--root DIR] [--keep]
[--overlay] [--profile NAME]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--root", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--overlay", action="store_true")
    ap.add_argument("--profile", default="intel-xeon-2s-rapl")
    args = ap.parse_args()
    if args.overlay and not os.environ.get("BENCH_PRIVATE_NS"):
        os.environ["BENCH_PRIVATE_NS"] = "1"
        os.execvp("unshare", ["unshare", "-m", "--propagation", "private", sys.executable, *sys.argv])
    from joulectl.sim import overlay
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.tree import render_nodes

    root = Path(args.root or tempfile.mkdtemp(prefix="bench-sim-render-"))
    if root.exists():
        shutil.rmtree(root)
    doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "bench"},
           "spec": {"pools": [{"name": "n", "profile": args.profile, "count": args.nodes}]}}
    cases = ["render", "resume", "resume-again"] + (["remount"] if args.overlay else [])
    print(f"{args.nodes} {args.profile} nodes, {'overlay' if args.overlay else 'plain'} trees under {root}")
    try:
        for case in cases:
            if case == "remount":
                overlay.unmount_all(str(root))
            load = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), _cpu()
            spec = parse_spec(doc, "bench")
            stats = render_nodes(spec.nodes, str(root), workers=args.workers, overlay=args.overlay)
            wall, cpu = time.perf_counter() - t0, _cpu() - c0
            done = len(stats.rendered) if case == "render" else len(stats.resumed)
            print(f"{case:13s} {done:4d} nodes  wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                  f"({1000 * wall / max(1, done):6.1f} ms/node)  load {load:.2f}")
    finally:
        if not args.keep:
            overlay.unmount_all(str(root))
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
