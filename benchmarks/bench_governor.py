"""Benchmark: a CPU preset on the 128 cpufreq policies of an emulated two-socket Xeon node.

Method (issue 16):

- Renders ``intel-xeon-2s-rapl`` (128 policies, intel_pstate, EPP) with ``joulectl simulate
  render`` into a temporary directory (``--tmpfs`` puts it on /dev/shm, where a write costs what
  a sysfs store does instead of ext4's flush of a truncated file).
- Wall time and CPU time (user + system of the child) of ``python -m joulectl --version`` and of
  ``python -m joulectl --root NODE governor set PRESET -o json``, interleaved, ``--repeat`` times
  each, from cached bytecode; the preset alternates between ``efficiency`` and ``balanced`` so
  that every timed run writes the EPP of all 128 policies (the journal's histories fill up to
  their bound, as on a node a cron job toggles). Reported: medians, the ratio to ``--version``
  (target: within 2x), the ratio of the fastest runs and of the median CPU times.
- Writes: one more run in-process, counting ``Host.write`` (attribute stores) and
  ``Host.write_atomic`` (journal saves: the write-ahead one and the final one).

Usage: ``python benchmarks/bench_governor.py [--repeat N] [--tmpfs] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_cap import PYCACHE, _joulectl

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: bench-governor}
spec:
  pools:
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
"""


def _writes(node_root: Path, preset: str) -> tuple[int, int, list[str]]:
    from joulectl.host import Host
    from joulectl.ops.governor import run_set

    class Counting(Host):
        stores = 0
        saves = 0

        def write(self, host_path: str, value: str) -> None:
            Counting.stores += 1
            super().write(host_path, value)

        def write_atomic(self, host_path: str, data: str, **kw: object) -> None:  # type: ignore[override]
            Counting.saves += 1
            super().write_atomic(host_path, data, **kw)  # type: ignore[arg-type]

    report = run_set(Counting(str(node_root)), preset, gpu=False, cpu=False, selectors=(), dry_run=False,
                     wait_s=10, model_presets_path=None, warnings=[])
    return Counting.stores, Counting.saves, [str(r.status) for r in report.results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--tmpfs", action="store_true", help="render under /dev/shm")
    parser.add_argument("--keep", help="render into this directory and keep it")
    args = parser.parse_args()
    base = "/dev/shm" if args.tmpfs else None
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-governor-", dir=base))
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.yaml").write_text(SPEC)
    _joulectl("simulate", "render", str(work / "spec.yaml"), "--root", str(work / "nodes"))
    node = work / "nodes" / "xeon-0"
    _joulectl("--version")
    _joulectl("--root", str(node), "governor", "set", "balanced", "-o", "json")  # warm up
    version: list[tuple[float, float]] = []
    sets: list[tuple[float, float]] = []
    for i in range(args.repeat):
        version.append(_joulectl("--version"))
        sets.append(_joulectl("--root", str(node), "governor", "set", ("efficiency", "balanced")[i % 2], "-o", "json"))
    stores, saves, statuses = _writes(node, "efficiency" if args.repeat % 2 == 0 else "balanced")
    v, s = statistics.median(w for w, _ in version), statistics.median(w for w, _ in sets)
    v_min, s_min = min(w for w, _ in version), min(w for w, _ in sets)
    v_cpu, s_cpu = statistics.median(u for _, u in version), statistics.median(u for _, u in sets)
    print(f"repeat={args.repeat}  python={sys.version.split()[0]}  tree={'tmpfs' if args.tmpfs else work}")
    print(f"{'--version s':>11} {'set s':>8} {'ratio':>6} {'min ratio':>9} {'cpu ratio':>9} {'cpu ms':>12}  writes")
    print(f"{v:>11.3f} {s:>8.3f} {s / v:>6.2f} {s_min / v_min:>9.2f} {s_cpu / v_cpu:>9.2f} "
          f"{v_cpu * 1000:>5.0f}/{s_cpu * 1000:<6.0f}  {stores} stores, {saves} journal saves; "
          f"{statuses.count('applied')}/{len(statuses)} applied")
    shutil.rmtree(PYCACHE, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
