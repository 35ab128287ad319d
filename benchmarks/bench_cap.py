"""Benchmark: ``joulectl cap --pct 60`` on one emulated node of every builtin GPU profile.

Method (issue 4, SPEC §9; issue 20: within 1.5x of ``--version`` on every GPU profile):

- Renders one node of each builtin profile with GPUs (``--profiles`` to choose) with
  ``joulectl simulate render`` into a temporary directory (on disk: TMPDIR).
- Wall time: ``python -m joulectl --version`` and ``python -m joulectl --root NODE cap --pct P -o json``
  as subprocesses, interleaved, ``--repeat`` times each; the cap alternates between 60 % and 70 %
  so that every timed run writes all eight GPUs. Reported: medians and the ratio to ``--version``
  (target: AMD within 1.5x), the ratio of the fastest runs, and the ratio of median CPU time
  (user + system of the child): on a shared machine the wall time of single runs swings by tens
  of per cent with the neighbours' load, the minimum and the CPU time much less.
- Tool invocations: one more cap run in-process, reading ``Host.tool_calls`` (target for NVIDIA:
  one query call and at most one write call per distinct target value, plus one readback).
- Fake tool start-up: the node's ``bin/nvidia-smi`` answering the cap's readback query
  (``--query-gpu=pci.bus_id,power.limit,enforced.power.limit``), interleaved with a bare
  ``python -S -c pass`` (the interpreter's floor, as the tool script starts), twice ``--repeat``
  times each; reported: wall and CPU medians and the CPU the tool adds over the floor, per call.
  Since 5 December the script's POSIX sh part answers that query from a prepared answer while
  it is valid (it is on this static node once the cap runs have made it): the figure is the
  shell's, below the floor (joulectl/sim/tools/nvfast.py).

- ``--baseline CHECKOUT`` (another version's checkout, e.g. ``/work/main``): that version's
  ``--version`` and cap run too, on nodes it renders itself (its own fake tools), with its modules
  first on ``PYTHONPATH`` and its bytecode cached apart, interleaved with the rest: a before/after
  in one run.

Usage: ``python benchmarks/bench_cap.py [--repeat N] [--keep DIR] [--baseline CHECKOUT]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: bench-cap}}
spec:
  pools:
{pools}"""


def gpu_profiles() -> list[str]:
    """The builtin profiles with at least one GPU."""
    from joulectl.sim.profiles import ProfileSet, builtin_profile_names

    profiles = ProfileSet()
    return [n for n in builtin_profile_names() if profiles.get(n).gpus]


#: Bytecode cached in a private prefix, as an installed package runs (the checkout's sources change
#: under parallel work, which would otherwise recompile them on every start).
PYCACHE = ""  # made by main(), so that --help leaves nothing behind


REPO = str(Path(__file__).resolve().parents[1])
#: ``--baseline``: the other version's checkout (first on PYTHONPATH for its runs), or None.
BASELINE: list[str] = []


def _joulectl(*args: str, baseline: bool = False) -> tuple[float, float]:
    """Run joulectl (the baseline checkout's with ``baseline``); its wall time and CPU time (user +
    system of the child and of the tools it ran), in seconds."""
    env = dict(os.environ, NO_COLOR="1", PYTHONPYCACHEPREFIX=PYCACHE)
    if baseline:
        env.update(PYTHONPATH=BASELINE[0], PYTHONPYCACHEPREFIX=PYCACHE + "-baseline")
    # An installed package runs from bytecode: cache it (under the prefix, so the checkout stays
    # clean) even where PYTHONDONTWRITEBYTECODE is set, as bench_startup.py does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # ``python -m`` puts the working directory first on sys.path: run in the checkout to time.
    proc = subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, env=env, check=False,
                          cwd=BASELINE[0] if baseline else REPO)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"joulectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[:400]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system of the child) of one run, in seconds."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=PYCACHE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=env, check=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _tool_startup(node_root: Path, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, CPU) medians of one fake ``nvidia-smi`` readback query and of ``python -S -c pass``."""
    tool = [str(node_root / "bin" / "nvidia-smi"), "--query-gpu=pci.bus_id,power.limit,enforced.power.limit",
            "--format=csv,noheader,nounits"]
    floor = [sys.executable, "-S", "-c", "pass"]
    _timed(tool)
    tools, floors = [], []
    for _ in range(repeat):
        tools.append(_timed(tool))
        floors.append(_timed(floor))

    def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)

    return medians(tools), medians(floors)


def _tool_calls(node_root: Path) -> tuple[list[tuple[str, ...]], list[str]]:
    from joulectl.host import Host
    from joulectl.ops.cap import build_request, execute

    host = Host(str(node_root))
    report = execute(host, build_request(pct=55))
    return list(host.tool_calls), [r.status.value for r in report.results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--keep", help="render into this directory and keep it")
    parser.add_argument("--profiles", default=None, help="comma-separated profiles (default: every GPU profile)")
    parser.add_argument("--baseline", default=None, help="a checkout of the version to compare with")
    args = parser.parse_args()
    unknown = [p for p in (args.profiles or "").split(",") if p and p not in gpu_profiles()]
    if unknown:  # one line, before anything is rendered
        parser.error(f"--profiles: not a GPU profile: {', '.join(unknown)} (known: {', '.join(gpu_profiles())})")
    if args.baseline:
        BASELINE.append(str(Path(args.baseline).resolve()))
    global PYCACHE
    PYCACHE = tempfile.mkdtemp(prefix="bench-cap-pycache-")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-cap-"))
    try:
        _bench(args, work)
    finally:
        import shutil

        shutil.rmtree(PYCACHE, ignore_errors=True)
        shutil.rmtree(PYCACHE + "-baseline", ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path) -> None:
    profiles = args.profiles.split(",") if args.profiles else gpu_profiles()
    nodes = {p: f"p{i}-0" for i, p in enumerate(profiles)}
    spec = work / "spec.yaml"
    work.mkdir(parents=True, exist_ok=True)
    spec.write_text(SPEC.format(pools="".join(f"  - {{name: p{i}, profile: {p}, count: 1}}\n"
                                              for i, p in enumerate(profiles))))
    root = work / "nodes"
    _joulectl("simulate", "render", str(spec), "--root", str(root))
    base_root = work / "baseline-nodes"
    if BASELINE:
        _joulectl("simulate", "render", str(spec), "--root", str(base_root), baseline=True)

    _joulectl("--version")  # warm the file cache before timing
    print(f"repeat={args.repeat}  python={sys.version.split()[0]}  cpus={os.cpu_count()}  "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'node':<26} {'--version s':>11} {'cap s':>8} {'ratio':>6} {'min ratio':>9} {'cpu ratio':>9}"
          "  tool calls (in-process run)")
    for label, node in nodes.items():
        node_root = root / node
        _joulectl("--root", str(node_root), "cap", "--pct", "60", "-o", "json")  # warm up
        version: list[tuple[float, float]] = []
        cap: list[tuple[float, float]] = []
        base_version: list[tuple[float, float]] = []
        base_cap: list[tuple[float, float]] = []
        if BASELINE:
            _joulectl("--root", str(base_root / node), "cap", "--pct", "60", "-o", "json", baseline=True)
        for i in range(args.repeat):
            version.append(_joulectl("--version"))
            pct = "70" if i % 2 == 0 else "60"
            cap.append(_joulectl("--root", str(node_root), "cap", "--pct", pct, "-o", "json"))
            if BASELINE:
                base_version.append(_joulectl("--version", baseline=True))
                base_cap.append(_joulectl("--root", str(base_root / node), "cap", "--pct", pct, "-o", "json",
                                          baseline=True))
        calls, statuses = _tool_calls(node_root)
        v, c = statistics.median(w for w, _ in version), statistics.median(w for w, _ in cap)
        v_min, c_min = min(w for w, _ in version), min(w for w, _ in cap)
        v_cpu, c_cpu = statistics.median(u for _, u in version), statistics.median(u for _, u in cap)
        kinds: dict[str, int] = {}
        for argv in calls:
            key = "-pl" if "-pl" in argv else ("-q -x" if "-x" in argv else " ".join(argv[1:2]))
            kinds[f"{argv[0]} {key}"] = kinds.get(f"{argv[0]} {key}", 0) + 1
        detail = ", ".join(f"{k}: {n}" for k, n in kinds.items()) or "none"
        print(f"{label:<26} {v:>11.3f} {c:>8.3f} {c / v:>6.2f} {c_min / v_min:>9.2f} {c_cpu / v_cpu:>9.2f}"
              f"  {len(calls)} ({detail}); {statuses.count('applied')}/{len(statuses)} applied")
        if BASELINE:
            bv, bc = statistics.median(w for w, _ in base_version), statistics.median(w for w, _ in base_cap)
            bv_cpu, bc_cpu = statistics.median(u for _, u in base_version), statistics.median(u for _, u in base_cap)
            print(f"{'  baseline':<26} {bv:>11.3f} {bc:>8.3f} {bc / bv:>6.2f} {'':>9} {bc_cpu / bv_cpu:>9.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    nvidia = [n for p, n in nodes.items() if p.startswith("nvidia-")]
    if not nvidia:
        return
    (tool_w, tool_c), (floor_w, floor_c) = _tool_startup(root / nvidia[0], args.repeat * 2)
    print(f"fake nvidia-smi readback query: wall {tool_w * 1000:.1f} ms, CPU {tool_c * 1000:.1f} ms (medians); "
          f"python -S -c pass: wall {floor_w * 1000:.1f} ms, CPU {floor_c * 1000:.1f} ms; "
          f"the tool adds {(tool_c - floor_c) * 1000:.1f} ms CPU per call")


if __name__ == "__main__":
    main()
