"""The benchmarks refuse a profile they cannot run in one line (argparse's usage error, exit 2),
before rendering anything (bench_startup.py's failed render was a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(("script", "profiles", "words"), [
    ("bench_startup.py", "nope", "--profiles: unknown profile nope (known: amd-epyc-2s-energy-only,"),
    ("bench_cap.py", "vm-no-powercap", "--profiles: not a GPU profile: vm-no-powercap (known: "),
])
def test_an_unknown_profile_is_one_line_and_exit_2(tmp_path: Path, script: str, profiles: str, words: str) -> None:
    res = subprocess.run([sys.executable, str(BENCH / script), "--profiles", profiles], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}: error: ") and words in last and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []  # nothing rendered
