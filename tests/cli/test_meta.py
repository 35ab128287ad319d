"""Every command has help, is in the README, and has a reference page under docs/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from joulectl.cli import COMMANDS, app, register

REPO = Path(__file__).resolve().parents[2]


def _paths() -> list[list[str]]:
    register()
    root = typer.main.get_command(app)
    out: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            out.append([*path, name])
            walk(sub, [*path, name])

    walk(root, [])
    return out


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p))
def test_every_command_has_help(cli, path: list[str]) -> None:
    r = cli(*path, "--help")
    assert r.exit_code == 0, r.stderr
    assert "Usage: joulectl " + " ".join(path) in r.stdout
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) >= 3, f"joulectl {' '.join(path)} has no help text"


@pytest.mark.parametrize("command", sorted(c for c in COMMANDS if c != "completion"))
def test_every_command_is_documented(command: str) -> None:
    readme = (REPO / "README.md").read_text()
    assert f"joulectl {command}" in readme, f"README.md does not mention `joulectl {command}`"
    assert (REPO / "docs" / f"{command}.md").is_file(), f"docs/{command}.md is missing"


def test_exit_codes_are_in_the_readme() -> None:
    from joulectl.errors import ExitCode

    readme = (REPO / "README.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} |" in readme, f"exit code {int(code)} missing from the README table"
