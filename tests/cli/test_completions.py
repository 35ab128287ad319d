"""The shell completion scripts in completions/ are generated from the app and must be current."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from joulectl.cli.completion import FILES, generate

COMPLETIONS = Path(__file__).resolve().parents[2] / "completions"


@pytest.mark.parametrize("shell", sorted(FILES))
def test_completion_script_is_current(shell: str) -> None:
    current = (COMPLETIONS / FILES[shell]).read_text()
    assert current == generate(shell), (
        f"completions/{FILES[shell]} is out of date: regenerate with "
        f"`joulectl completion {shell} > completions/{FILES[shell]}`"
    )


def test_bash_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(COMPLETIONS / FILES["bash"])]).returncode == 0


def test_completion_command(cli) -> None:
    r = cli("completion", "fish")
    assert r.exit_code == 0 and r.stdout == generate("fish")
    bad = cli("completion", "tcsh")
    assert bad.exit_code == 2 and "'tcsh' is not one of bash, zsh, fish" in bad.stderr


def test_every_subcommand_is_completed() -> None:
    script = generate("bash")
    for word in ("discover", "cap", "governor", "plan", "schedule-check", "simulate"):
        assert word in script
