"""Completion benchmark: what one TAB costs (the scripts of ``joulectl completion SHELL`` run
joulectl at each TAB), against ``python -c "import typer"`` and ``joulectl --version``, in one run.

Method: as ``bench_startup.py`` (fresh processes in interleaved rounds after warm-up rounds that
cache every module's bytecode; median wall and CPU times): ``governor set <TAB>`` (choices),
``discover -o <TAB>``, ``<TAB>`` at the top (every command registered) and ``cap --device <TAB>``
on an eight-MI300X node written by ``tests/fixtures/trees.py`` (the node's GPUs are read).

Run: ``python benchmarks/bench_completion.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_startup import REPO, timed  # type: ignore[import-not-found]


def build_fixture(root: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_trees", REPO / "tests" / "fixtures" / "trees.py")
    assert spec is not None and spec.loader is not None
    trees = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trees)
    trees.amd_mi300x_x8(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="joulectl-bench-completion-")
    try:
        node = Path(tmp) / "node"
        build_fixture(node)
        env = {**os.environ, "NO_COLOR": "1", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")}
        env.pop("JOULECTL_ROOT", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        py = sys.executable
        tabs = {
            "governor set <TAB>": "joulectl governor set ",
            "discover -o <TAB>": "joulectl discover -o ",
            "<TAB> (every command)": "joulectl ",
            "cap --device <TAB> (8x MI300X)": f"joulectl --root {node} cap --device ",
        }
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "import typer": ([py, "-c", "import typer"], env),
            "--version": ([py, "-m", "joulectl", "--version"], env),
        }
        for name, words in tabs.items():
            commands[name] = ([py, "-m", "joulectl"],
                              {**env, "_JOULECTL_COMPLETE": "bash", "_JOULECTL_COMPLETE_WORDS": words})
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
        load0 = os.getloadavg()
        for i in range(args.warmup + args.runs):
            for name, (argv, e) in commands.items():
                t = timed(argv, e)
                if i >= args.warmup:
                    samples[name].append(t)
        load1 = os.getloadavg()
        wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
        print(f"Medians of {args.runs} runs each (after {args.warmup} warm-up rounds), Python "
              f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load0[0]:.1f} -> {load1[0]:.1f}\n")
        print("| command | wall | CPU | wall ratio to `import typer` |")
        print("|---|---:|---:|---:|")
        for name in commands:
            label = '`python -c "import typer"`' if name == "import typer" else f"`joulectl {name}`"
            print(f"| {label} | {wall[name] * 1e3:.0f} ms | {cpu[name] * 1e3:.0f} ms | "
                  f"{wall[name] / wall['import typer']:.2f}x |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n(repository {REPO})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
