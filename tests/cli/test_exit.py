"""How ``joulectl`` ends (joulectl.cli.main): a command that ran to completion leaves by
``os._exit`` once its output is flushed (no interpreter teardown: 8-13 ms of a cron run);
``simulate``, with its workers, mounts and servers, by the interpreter's normal exit. Either way
every byte printed arrives and the exit code is the command's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import trees

#: Runs main() with an atexit handler that says whether the normal exit ran.
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('ATEXIT\\n'))\n"
    "from joulectl.cli import main\n"
    "main(sys.argv[1:])\n"
)


def joulectl(*args: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    return subprocess.run([sys.executable, "-c", PROBE, *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=60, check=False)


def test_a_command_leaves_without_the_interpreters_teardown_and_prints_everything(tmp_path: Path) -> None:
    trees.amd_mi300x_x8(tmp_path)
    r = joulectl("--root", str(tmp_path), "discover", "-o", "json")
    assert r.returncode == 0 and r.stderr == ""  # no ATEXIT: os._exit
    assert r.stdout.endswith("}\n") and '"kind": "NodeHardware"' in r.stdout  # the whole document, flushed
    v = joulectl("--version")
    assert (v.returncode, v.stdout, v.stderr) == (0, "joulectl 0.1.0\n", "")


@pytest.mark.parametrize(("args", "code", "err"), [
    (["cap", "--bogus"], 2, "joulectl: error: cap: no such option --bogus (see joulectl cap --help)\n"),
    (["--root", "/nonexistent-root", "discover"], 2,
     "joulectl: error: /nonexistent-root: --root: host root does not exist or is not a directory\n"),
])
def test_an_error_keeps_its_exit_code_and_message(args: list[str], code: int, err: str | None) -> None:
    r = joulectl(*args)
    assert r.returncode == code
    assert "ATEXIT" not in r.stderr and r.stderr.startswith("joulectl: error: ")
    if err is not None:
        assert r.stderr == err


def test_simulate_ends_through_the_normal_exit() -> None:
    r = joulectl("simulate", "--help")
    assert r.returncode == 0 and "Usage" in r.stdout
    assert r.stderr == "ATEXIT\n"


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    trees.amd_mi300x_x8(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is printed
    try:
        r = joulectl("--root", str(tmp_path), "discover", "-o", "json", stdout=write)
    finally:
        os.close(write)
    # click's EPIPE handling ends the command with exit 1 (SystemExit, so through the normal
    # exit); no traceback, no "Exception ignored" at the flush
    assert r.returncode == 1
    assert r.stderr == "ATEXIT\n"


# -- the collector at start-up (joulectl/__main__.py) ------------------------------------------------


def _python(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return r.stdout.strip()


def test_the_entry_points_load_the_cli_without_the_collector_then_freeze_and_collect_again() -> None:
    """``python -m joulectl`` and the console script import the command line with the cyclic
    collector off, freeze what it loaded, and turn the collector on again for the command."""
    # a collection counts from the entry point's gc.disable() (``_collecting`` set) until the command
    # line is loaded (``_main`` set); one while Python compiles the entry point itself (no bytecode
    # cached, as under PYTHONDONTWRITEBYTECODE) comes before and is not the entry point's to prevent
    probe = ("import gc, sys\n"
             "seen = []\n"
             "def during():\n"
             "    m = sys.modules.get('joulectl.__main__')\n"
             "    return m is None or ('_collecting' in vars(m) and '_main' not in vars(m))\n"
             "gc.callbacks.append(lambda phase, info: seen.append(1) if phase == 'start' and during() else None)\n"
             "import joulectl.__main__ as m\n"
             "print(len(seen), gc.isenabled(), gc.get_freeze_count() > 10000, 'typer' in sys.modules)")
    assert _python(probe.replace("m is None or ", "")) == "0 True True True"  # none while the CLI loaded
    # without the entry point, the same import runs collections (so the probe above can see them)
    assert _python(probe.replace("import joulectl.__main__ as m", "import joulectl.cli")).split()[0] != "0"
    # a process that turned the collector off itself keeps it off
    assert _python("import gc; gc.disable(); import joulectl.__main__; print(gc.isenabled())") == "False"


def test_the_console_script_is_the_entry_point_that_does_so() -> None:
    import tomllib

    with open(Path(__file__).parents[2] / "pyproject.toml", "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert scripts == {"joulectl": "joulectl.__main__:main"}
    r = subprocess.run([sys.executable, "-m", "joulectl", "--version"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "joulectl 0.1.0\n", "")
