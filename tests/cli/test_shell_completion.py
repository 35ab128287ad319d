"""Completion in the real shells: bash and zsh driven at their prompt through a pty, fish through
``complete -C``, each with the script of ``completions/`` asking the installed joulectl."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trees

from joulectl.cli.completion import FILES

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "completions"
BIN = str(Path(sys.executable).parent)  # the venv's joulectl
PRESETS = ["auto", "sustained", "efficient", "low", "peak", "performance", "balanced", "efficiency"]
#: the bus ids of tests/fixtures/trees.amd_mi250x_x4 (eight GCDs)
MI250X = ["0000:c1:00.0", "0000:c6:00.0", "0000:c9:00.0", "0000:ce:00.0",
          "0000:d1:00.0", "0000:d6:00.0", "0000:d9:00.0", "0000:de:00.0"]


def _need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{shell} is not installed (.ci/run installs it)")
        pytest.skip(f"{shell} is not installed (outside CI)")
    return path


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), HOME=str(home), TERM="dumb",
                NO_COLOR="1")


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """A working directory holding a file, which no completion but a path's may offer."""
    d = tmp_path / "work"
    d.mkdir()
    (d / "somefile.txt").write_text("x\n")
    (d / "spec.yaml").write_text("x\n")
    return d


@pytest.fixture
def gpu_root(tmp_path: Path) -> Path:
    return trees.amd_mi250x_x4(tmp_path / "node")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_script_parses(shell: str) -> None:
    assert subprocess.run([_need(shell), "-n", str(SCRIPTS / FILES[shell])]).returncode == 0


# --- the reply protocol, in-process ---------------------------------------------------------------

def _reply(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shell: str, words: str) -> str:
    from joulectl.cli import run

    monkeypatch.setenv("_JOULECTL_COMPLETE", shell)
    monkeypatch.setenv("_JOULECTL_COMPLETE_WORDS", words)
    capsys.readouterr()
    assert run([]) == 0
    return capsys.readouterr().out


def test_reply_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _reply(monkeypatch, capsys, "bash", "joulectl governor set --cpu ") == (
        "plain\tperformance\tCPU preset\nplain\tbalanced\tCPU preset\nplain\tefficiency\tCPU preset\n")
    assert _reply(monkeypatch, capsys, "bash", "joulectl cap ") == ""
    assert _reply(monkeypatch, capsys, "zsh", "joulectl\nplan\n--nodes\nno") == "file\tno\t\n"
    assert _reply(monkeypatch, capsys, "fish", "joulectl\x1fdiscover\x1f-o\x1fj") == (
        "plain\tjson\t\nplain\tjsonpath=\t\n")
    assert _reply(monkeypatch, capsys, "bash", "joulectl simulate render --root ") == "dir\t\t\n"
    assert _reply(monkeypatch, capsys, "bash", "joulectl cap --watts ") == ""
    assert _reply(monkeypatch, capsys, "bash", "joulectl completion ") == "plain\tbash\t\nplain\tzsh\t\nplain\tfish\t\n"


@pytest.mark.parametrize("line", ["joulectl --tool-timeout x cap --watts ", "joulectl cap --watts 5 --nosuch "])
def test_a_line_that_does_not_parse_offers_nothing(line: str, cwd: Path) -> None:
    env = dict(_env(cwd), _JOULECTL_COMPLETE="bash", _JOULECTL_COMPLETE_WORDS=line)
    r = subprocess.run([sys.executable, "-m", "joulectl"], capture_output=True, text=True, env=env, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


# --- bash -------------------------------------------------------------------------------------------

def _bash_function(line: str, words: list[str], cwd: Path) -> list[str]:
    """Call the completion function as readline does (COMP_LINE, COMP_WORDS split at colons)."""
    bash = _need("bash")
    script = (f"source {SCRIPTS / FILES['bash']}\n"
              f"COMP_LINE={_q(line)}; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({' '.join(_q(w) for w in words)}); "
              f"COMP_CWORD={len(words) - 1}\n_joulectl_completion\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    r = subprocess.run([bash, "--norc", "--noprofile", "-c", script], capture_output=True, text=True, cwd=cwd,
                       env=_env(cwd), timeout=120)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def _q(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def test_bash_governor_set_offers_the_presets(cwd: Path) -> None:
    assert _bash_function("joulectl governor set ", ["joulectl", "governor", "set", ""], cwd) == PRESETS
    assert _bash_function("joulectl governor set eff", ["joulectl", "governor", "set", "eff"], cwd) == [
        "efficient", "efficiency"]


def test_bash_cap_offers_no_files(cwd: Path) -> None:
    assert _bash_function("joulectl cap ", ["joulectl", "cap", ""], cwd) == []
    assert sorted(_bash_function("joulectl plan --nodes s", ["joulectl", "plan", "--nodes", "s"], cwd)) == [
        "somefile.txt", "spec.yaml"]


def test_bash_device_completes_bus_ids_across_colons(cwd: Path, gpu_root: Path) -> None:
    words = ["joulectl", "--root", str(gpu_root), "cap", "--device", "0000", ":", "d"]
    line = f"joulectl --root {gpu_root} cap --device 0000:d"
    assert _bash_function(line, words, cwd) == ["d1:00.0", "d6:00.0", "d9:00.0", "de:00.0"]
    words = ["joulectl", "--root", str(gpu_root), "governor", "show", "-d", ""]
    assert _bash_function(f"joulectl --root {gpu_root} governor show -d ", words, cwd) == (
        [str(i) for i in range(8)] + MI250X)


def _pty(argv: list[str], steps: list[tuple[bytes, bytes | None]], cwd: Path) -> str:
    """Drive an interactive shell: write each input, then wait for its marker (or 1.5 s of quiet)."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cwd)
        os.execvpe(argv[0], argv, _env(cwd))
    out = b""

    def read(marker: bytes | None, seconds: float) -> None:
        nonlocal out
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                out += chunk
                if marker is not None and marker in out:
                    return

    try:
        for data, marker in steps:
            os.write(fd, data)
            read(marker, 60 if marker is not None else 1.5)
        os.write(fd, b"exit\n")
        read(None, 0.5)
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_bash_at_the_prompt(cwd: Path) -> None:
    bash = _need("bash")
    setup = (f"PS1='READY> '; source {SCRIPTS / FILES['bash']}; bind 'set show-all-if-ambiguous on'; "
             "bind 'set completion-query-items 0'; echo SET''UP\n").encode()
    out = _pty([bash, "--norc", "--noprofile", "-i"], [
        (setup, b"SETUP"),
        (b"joulectl governor set \t", None), (b"\x15echo MA''RK1\n", b"MARK1"),
        (b"joulectl cap \t", None), (b"\x15echo MA''RK2\n", b"MARK2"),
        (b"joulectl governor set --gpu pe\t\n", b"READY> "),
    ], cwd)
    presets = _between(out, "SETUP", "MARK1")
    assert set(PRESETS) <= set(presets.split()) and "somefile.txt" not in presets, presets
    assert "somefile.txt" not in _between(out, "MARK1", "MARK2")
    assert "joulectl governor set --gpu peak " in out


# --- zsh --------------------------------------------------------------------------------------------

def test_zsh_device_bus_ids(cwd: Path, gpu_root: Path) -> None:
    zsh = _need("zsh")
    setup = (f"PS1='READY> '; fpath=({SCRIPTS} $fpath); autoload -U compinit; compinit -u -D; "
             "echo SET''UP\n").encode()
    out = _pty([zsh, "-f", "-i"], [
        (setup, b"SETUP"),
        (f"joulectl --root {gpu_root} cap -d 0000:c\t".encode(), None), (b"\x15echo MA''RK1\n", b"MARK1"),
    ], cwd)
    listed = _between(out, "SETUP", "MARK1")
    for i, bus in enumerate(MI250X[:4]):
        assert re.search(rf"{re.escape(bus)}\s+-- GPU {i} AMD Instinct MI250X", listed), listed
    assert MI250X[4] not in listed


def test_zsh_at_the_prompt(cwd: Path) -> None:
    zsh = _need("zsh")
    setup = (f"PS1='READY> '; fpath=({SCRIPTS} $fpath); autoload -U compinit; compinit -u -D; "
             "echo SET''UP\n").encode()
    out = _pty([zsh, "-f", "-i"], [
        (setup, b"SETUP"),
        (b"joulectl governor set \t", None), (b"\x15echo MA''RK1\n", b"MARK1"),
        (b"joulectl cap \t", None), (b"\x15echo MA''RK2\n", b"MARK2"),
        (b"joulectl discover -o pro\t", None), (b"\x15echo MA''RK3\n", b"MARK3"),
    ], cwd)
    presets = _between(out, "SETUP", "MARK1")
    for word in [*PRESETS, "-- GPU preset", "-- CPU preset"]:
        assert word in presets, presets
    assert "somefile.txt" not in _between(out, "MARK1", "MARK2")
    assert "joulectl discover -o prometheus" in _between(out, "MARK2", "MARK3")


# --- fish -------------------------------------------------------------------------------------------

def _fish(line: str, cwd: Path) -> list[str]:
    fish = _need("fish")
    r = subprocess.run([fish, "--no-config", "-c", f"source {SCRIPTS / FILES['fish']}; complete -C {_q(line)}"],
                       capture_output=True, text=True, cwd=cwd, env=_env(cwd), timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_fish_governor_set_offers_the_presets(cwd: Path) -> None:
    assert _fish("joulectl governor set ", cwd) == [
        "auto\tGPU preset", "balanced\tCPU preset", "efficiency\tCPU preset", "efficient\tGPU preset",
        "low\tGPU preset", "peak\tGPU preset", "performance\tCPU preset", "sustained\tGPU preset"]


def test_fish_cap_offers_no_files_but_paths_do(cwd: Path) -> None:
    assert _fish("joulectl cap ", cwd) == []
    assert _fish("joulectl schedule-check --spec sp", cwd) == ["spec.yaml"]
    assert _fish("joulectl gov", cwd) == ["governor\tClock governor presets for GPUs and CPUs."]


def test_fish_device(cwd: Path, gpu_root: Path) -> None:
    assert _fish(f"joulectl --root {gpu_root} governor set -d 0000:c", cwd) == [
        f"{b}\tGPU {i} AMD Instinct MI250X" for i, b in enumerate(MI250X[:4])]
