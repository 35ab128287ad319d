"""Start-up benchmark: ``joulectl --version`` and ``discover -o json`` on an 8-GPU AMD node
against ``python -c "import typer"`` (the CLI framework alone), in one run.

Method: each command runs ``--runs`` times (default 21) as a fresh ``python`` process, in
interleaved rounds so that machine noise hits all three alike, after ``--warmup`` rounds that
also cache the bytecode of every module (``PYTHONPYCACHEPREFIX`` in the temporary directory;
``PYTHONDONTWRITEBYTECODE`` is dropped, since an installed package runs from bytecode); the
median wall time of each is compared with the baseline's. The 8-GPU node is eight MI300X built
from the kernel ABI by ``tests/fixtures/trees.py`` in a temporary directory.

Run: ``python benchmarks/bench_startup.py [--runs N]``. Targets (SPEC §9, issue 2): at most 1.3x
for ``--version`` and 1.6x for ``discover``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"version": 1.3, "discover": 1.6}


def build_fixture(root: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_trees", REPO / "tests" / "fixtures" / "trees.py")
    assert spec is not None and spec.loader is not None
    trees = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trees)
    trees.amd_mi300x_x8(root)


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("JOULECTL_ROOT", None)
    # An installed package runs from bytecode: let the warm-up rounds cache it (in a temporary
    # prefix, so the checkout stays clean) even where PYTHONDONTWRITEBYTECODE is set.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="joulectl-bench-") as tmp:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        root = Path(tmp) / "node"
        root.mkdir()
        build_fixture(root)
        py = sys.executable
        commands = {
            "baseline": [py, "-c", "import typer"],
            "version": [py, "-m", "joulectl", "--version"],
            "discover": [py, "-m", "joulectl", "--root", str(root), "discover", "-o", "json"],
        }
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for i in range(args.warmup + args.runs):
            for name, argv in commands.items():
                t = timed(argv, env)
                if i >= args.warmup:
                    samples[name].append(t)
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["baseline"]
    print(f"Median of {args.runs} runs each (after {args.warmup} warm-up rounds), Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    print("| command | median (ms) | ratio to `import typer` | target |")
    print("|---|---:|---:|---:|")
    print(f"| `python -c \"import typer\"` | {base * 1000:.1f} | 1.00x | - |")
    labels = {"version": "`joulectl --version`", "discover": "`joulectl --root <8x MI300X> discover -o json`"}
    failed = False
    for name in ("version", "discover"):
        ratio = med[name] / base
        ok = ratio <= TARGETS[name]
        failed |= not ok
        print(f"| {labels[name]} | {med[name] * 1000:.1f} | {ratio:.2f}x | <= {TARGETS[name]}x "
              f"{'(met)' if ok else '(MISSED)'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
