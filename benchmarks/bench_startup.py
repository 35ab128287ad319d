"""Start-up benchmark: ``joulectl --version``, and ``discover -o json`` on every builtin profile,
against ``python -c "import typer"`` (the CLI framework alone) and ``--version``, in one run.

Method: one node of each builtin profile (``--profiles`` to choose) is rendered by ``joulectl
simulate render`` into a temporary directory on ``--dir`` (default TMPDIR: on disk). Each command
runs ``--runs`` times (default 11) as a fresh ``python`` process, in interleaved rounds so that
machine noise hits all of them alike, after ``--warmup`` rounds that also cache the bytecode of
every module (``PYTHONPYCACHEPREFIX`` in the temporary directory; ``PYTHONDONTWRITEBYTECODE`` is
dropped, since an installed package runs from bytecode). For each: the median wall time, the
median CPU time (user + system of the child and of the tools it runs, from ``RUSAGE_CHILDREN``),
and their ratios to ``--version`` (targets: ``--version`` at most 1.3x ``import typer``; discover
within 1.5x ``--version`` on every builtin profile, issue 20). The attribute reads of one
in-process discover are counted too. On a shared machine the CPU ratio is the steadier figure.
``discover`` with its default output (a plain table off a terminal, as cron and pipes get it) is
measured on the first profile too: tabulate's import once made it 1.7x-1.9x where ``-o json`` was
1.4x.

``--baseline CHECKOUT`` (a checkout of another version, e.g. ``/work/main``) adds that version's
``discover`` on nodes it renders itself (so its fake tools are its own too), with its modules first
on ``PYTHONPATH`` and its bytecode cached apart, interleaved with the rest: a before/after in one run.

Run: ``python benchmarks/bench_startup.py [--runs N] [--profiles a,b] [--dir DIR] [--baseline CHECKOUT]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_VERSION = 1.3
TARGET_DISCOVER = 1.5


def timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child and its children) of one run. ``python -m``
    puts ``cwd`` first on ``sys.path``: the checkout in ``cwd`` is the one that runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def render(profiles: list[str], root: Path, env: dict[str, str], cwd: Path = REPO) -> dict[str, Path]:
    pools = "".join(f"  - {{name: p{i}, profile: {p}, count: 1}}\n" for i, p in enumerate(profiles))
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: bench-startup}\n"
                    f"spec:\n  pools:\n{pools}")
    subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(spec), "--root", str(root / "nodes")],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    return {p: root / "nodes" / f"p{i}-0" for i, p in enumerate(profiles)}


def reads(node: Path) -> tuple[int, int]:
    """(attribute reads, tool calls) of one in-process ``discover``."""
    from joulectl.host import Host
    from joulectl.ops.discover import inventory

    count = [0]

    class Counting(Host):
        def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
            count[0] += 1
            return super().read(host_path, limit=limit)

    host = Counting(str(node))
    inventory(host)
    return count[0], len(host.tool_calls)


def main() -> int:
    from joulectl.sim.profiles import builtin_profile_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--profiles", default=",".join(builtin_profile_names()))
    parser.add_argument("--dir", default=None, help="where to render (default TMPDIR)")
    parser.add_argument("--baseline", default=None, help="a checkout of the version to compare with")
    args = parser.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = [p for p in profiles if p not in builtin_profile_names()]
    if unknown:  # one line, before anything is rendered (the render's own error went to DEVNULL)
        parser.error(f"--profiles: unknown profile {', '.join(unknown)} (known: {', '.join(builtin_profile_names())})")
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("JOULECTL_ROOT", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    tmp = tempfile.mkdtemp(prefix="joulectl-bench-startup-", dir=args.dir)
    try:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        nodes = render(profiles, Path(tmp), env)
        py = sys.executable
        commands = {"import typer": [py, "-c", "import typer"], "--version": [py, "-m", "joulectl", "--version"]}
        envs = dict.fromkeys(commands, env)
        cwds = dict.fromkeys(commands, REPO)
        for p, node in nodes.items():
            commands[p] = [py, "-m", "joulectl", "--root", str(node), "discover", "-o", "json"]
            envs[p] = env
        # the default output off a terminal (cron, a pipe): a plain table, on the first profile
        table = f"table {profiles[0]}"
        commands[table] = [py, "-m", "joulectl", "--root", str(nodes[profiles[0]]), "discover"]
        envs[table] = env
        base_nodes: dict[str, Path] = {}
        if args.baseline:
            checkout = Path(args.baseline).resolve()
            base_env = {**env, "PYTHONPATH": str(checkout), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache-baseline")}
            base_nodes = render(profiles, Path(tmp) / "baseline", base_env, checkout)
            commands["baseline --version"] = [py, "-m", "joulectl", "--version"]
            for p, node in base_nodes.items():
                commands[f"baseline {p}"] = [py, "-m", "joulectl", "--root", str(node), "discover", "-o", "json"]
            for name in commands:
                if name.startswith("baseline "):
                    envs[name], cwds[name] = base_env, checkout
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
        load0 = os.getloadavg()
        for i in range(args.warmup + args.runs):
            for name, argv in commands.items():
                t = timed(argv, envs[name], cwds.get(name, REPO))
                if i >= args.warmup:
                    samples[name].append(t)
        load1 = os.getloadavg()
        wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
        fast = {k: min(w for w, _ in v) for k, v in samples.items()}
        print(f"Medians of {args.runs} runs each (after {args.warmup} warm-up rounds), Python "
              f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load0[0]:.1f} -> {load1[0]:.1f}\n")
        print("| command | wall | CPU | wall ratio | CPU ratio | fastest-run ratio | reads | tool calls |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        v = "--version"
        typer = "import typer"
        print(f"| `python -c \"import typer\"` | {wall[typer] * 1e3:.0f} ms | {cpu[typer] * 1e3:.0f} ms | | | | | |")
        print(f"| `joulectl --version` | {wall[v] * 1e3:.0f} ms | {cpu[v] * 1e3:.0f} ms | "
              f"{wall[v] / wall[typer]:.2f}x typer | {cpu[v] / cpu[typer]:.2f}x typer | "
              f"{fast[v] / fast[typer]:.2f}x typer | | |")
        for p, node in nodes.items():
            n_reads, n_tools = reads(node)
            print(f"| discover `{p}` | {wall[p] * 1e3:.0f} ms | {cpu[p] * 1e3:.0f} ms | {wall[p] / wall[v]:.2f}x | "
                  f"{cpu[p] / cpu[v]:.2f}x | {fast[p] / fast[v]:.2f}x | {n_reads} | {n_tools} |")
        print(f"| discover `{profiles[0]}`, default output (a plain table) | {wall[table] * 1e3:.0f} ms | "
              f"{cpu[table] * 1e3:.0f} ms | {wall[table] / wall[v]:.2f}x | {cpu[table] / cpu[v]:.2f}x | "
              f"{fast[table] / fast[v]:.2f}x | | |")

        def paired(name: str, ref: str) -> float:
            """The median over rounds of CPU(name) / CPU(ref) within one round (a slow drift of
            the machine's load cancels out of each round's ratio)."""
            return statistics.median(c / r for (_, c), (_, r) in zip(samples[name], samples[ref], strict=True))

        if base_nodes:
            b = "baseline --version"
            print(f"\nbaseline ({args.baseline}): `--version` {wall[b] * 1e3:.0f} ms wall, {cpu[b] * 1e3:.0f} ms CPU\n")
            print("| profile | baseline CPU | CPU | baseline CPU ratio | CPU ratio | baseline paired CPU ratio | "
                  "paired CPU ratio | baseline wall ratio | wall ratio |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for p in nodes:
                bp = f"baseline {p}"
                print(f"| `{p}` | {cpu[bp] * 1e3:.0f} ms | {cpu[p] * 1e3:.0f} ms | {cpu[bp] / cpu[b]:.2f}x | "
                      f"{cpu[p] / cpu[v]:.2f}x | {paired(bp, b):.2f}x | {paired(p, v):.2f}x | "
                      f"{wall[bp] / wall[b]:.2f}x | {wall[p] / wall[v]:.2f}x |")
        else:
            print("\npaired CPU ratios (median over rounds of discover / --version of the same round): "
                  + ", ".join(f"{p} {paired(p, v):.2f}x" for p in nodes))
        worst = max(cpu[p] / cpu[v] for p in nodes)  # (-o json, as issue 20 names it)
        print(f"\nworst discover CPU ratio {worst:.2f}x (target <= {TARGET_DISCOVER}x); --version "
              f"{wall[v] / wall[typer]:.2f}x import typer (target <= {TARGET_VERSION}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
