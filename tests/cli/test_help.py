"""Help reads as a person expects it (metavars, whole summaries) and a usage error is one line, exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import typer

from joulectl.cli import app, register


def _commands() -> list[tuple[list[str], Any]]:
    register()
    root = typer.main.get_command(app)
    out: list[tuple[list[str], Any]] = [([], root)]

    def walk(cmd: Any, path: list[str]) -> None:
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            out.append(([*path, name], sub))
            walk(sub, [*path, name])

    walk(root, [])
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "joulectl")
def test_help_shows_metavars_not_types(cli, path: list[str]) -> None:
    r = cli(*path, "--help")
    assert r.exit_code == 0, r.stderr
    for leak in ("<str>", "<int>", "<float>", "range>", "<list[", "<bool>", "<path>"):
        assert leak not in r.stdout, f"joulectl {' '.join(path)} --help shows {leak}"
    usage = r.stdout.splitlines()[0]
    assert "{" not in usage and "}" not in usage, usage


def test_help_of_a_few_options_literally(cli) -> None:
    r = cli("cap", "--help")
    assert "  --watts W " in r.stdout
    assert "  -d, --device DEVICE " in r.stdout
    assert "  --wait SECONDS " in r.stdout
    assert "  -o, --output FORMAT " in r.stdout
    r = cli("governor", "set", "--help")
    assert r.stdout.startswith("Usage: joulectl governor set [OPTIONS] PRESET\n")
    r = cli("schedule-check", "--help")
    assert r.stdout.startswith("Usage: joulectl schedule-check [OPTIONS] POD_FILE...\n")
    assert "\n  POD_FILE...  Pod files" in r.stdout
    r = cli("--help")
    assert "  --root PATH " in r.stdout and "  --tool-timeout SECONDS " in r.stdout


def _listed_summaries(help_text: str) -> dict[str, str]:
    """The Commands section of a group's help, each entry's wrapped lines joined."""
    section = help_text.split("\nCommands:\n", 1)[1]
    out: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif line.strip() and name:
            out[name] += " " + line.strip()
    return out


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if getattr(c, "commands", None)],
                         ids=lambda p: " ".join(p) or "joulectl")
def test_summaries_are_whole_first_lines(cli, path: list[str]) -> None:
    group = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    listed = _listed_summaries(cli(*path, "--help").stdout)
    assert set(listed) == set(group.commands)
    for name, sub in group.commands.items():
        first = (sub.help or "").strip().splitlines()[0].strip()
        assert listed[name] == first, f"{name}: {listed[name]!r} is not the first help line {first!r}"
        assert not first.endswith("...") and first[-1] in ".)", f"{name}: summary {first!r} is not a sentence"


def test_the_summaries_of_joulectl_literally(cli) -> None:
    listed = _listed_summaries(cli("--help").stdout)
    assert listed["completion"] == ("Print a shell completion script (e.g. joulectl completion bash > "
                                    "/etc/bash_completion.d/joulectl).")
    assert listed["discover"] == ("Inventory of the node's CPUs and GPUs (reads only; -o yaml gives a "
                                  "NodeHardware object).")


USAGE_ERRORS = [
    (["discovr"], "joulectl: error: no such command 'discovr'; did you mean 'discover'? (see joulectl --help)"),
    (["cap", "--watts", "abc"], "joulectl: error: cap: --watts: 'abc' is not a number (see joulectl cap --help)"),
    (["cap", "--watts"], "joulectl: error: cap: --watts: needs a value (see joulectl cap --help)"),
    (["cap", "extra"], "joulectl: error: cap: unexpected argument 'extra' (see joulectl cap --help)"),
    (["governor", "set"], "joulectl: error: governor set: PRESET is missing (see joulectl governor set --help)"),
    (["governor", "bogus"], "joulectl: error: governor: no such command 'bogus' (see joulectl governor --help)"),
    (["governor", "show", "--wait", "-1"],
     "joulectl: error: governor show: --wait: -1 is less than the minimum 0 (see joulectl governor show --help)"),
    (["plan", "--bogus"], "joulectl: error: plan: no such option --bogus (see joulectl plan --help)"),
    (["plan", "--podz", "x"],
     "joulectl: error: plan: no such option --podz; did you mean --pods? (see joulectl plan --help)"),
    (["simulate", "render", "spec.yaml"],
     "joulectl: error: simulate render: --root is required (see joulectl simulate render --help)"),
    (["--tool-timeout", "0", "discover"],
     "joulectl: error: --tool-timeout: 0 is less than the minimum 0.1 (see joulectl --help)"),
    (["discover", "--count", "x"],
     "joulectl: error: discover: --count: 'x' is not a whole number (see joulectl discover --help)"),
    (["schedule-check"], "joulectl: error: schedule-check: POD_FILE is missing (see joulectl schedule-check --help)"),
]


@pytest.mark.parametrize(("argv", "line"), USAGE_ERRORS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_a_usage_error_is_one_line_exit_2(cli, argv: list[str], line: str) -> None:
    r = cli(*argv)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")


def test_a_usage_error_through_the_installed_command() -> None:
    """The console script, as a shell runs it: one line on stderr, nothing on stdout, exit 2."""
    r = subprocess.run([sys.executable, "-m", "joulectl", "cap", "--pct", "ten"], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "joulectl: error: cap: --pct: 'ten' is not a number (see joulectl cap --help)\n")
