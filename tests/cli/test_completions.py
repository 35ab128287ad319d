"""The shell completion scripts in completions/ are generated from the app and must be current."""

from __future__ import annotations

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


def test_completion_command(cli) -> None:
    r = cli("completion", "fish")
    assert r.exit_code == 0 and r.stdout == generate("fish")
    bad = cli("completion", "tcsh")
    assert bad.exit_code == 2 and "'tcsh' is not one of bash, zsh, fish" in bad.stderr


def test_the_scripts_ask_joulectl() -> None:
    """Static word lists go stale; each script asks the installed joulectl at every TAB."""
    for shell in FILES:
        script = generate(shell)
        assert "_JOULECTL_COMPLETE=" + shell in script and "_JOULECTL_COMPLETE_WORDS=" in script
