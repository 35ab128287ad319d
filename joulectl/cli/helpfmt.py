"""Help and usage errors as a person reads them: metavars, summaries, one-line errors.

typer 0.29 prints a parameter's Python type in help (``--wait <float range>``, ``SPEC <str>``,
``-d <list[str]>``), writes required arguments as ``{preset}``, cuts command summaries at ~45
characters mid-phrase, and prints a usage error over four lines (usage, a "Try" line, a blank line
and the error, with difflib suggestions such as ``--bogus`` -> ``--pods``). :func:`install` makes
help show each parameter's metavar (an option without one shows its name in capitals, as click
does), arguments as ``PRESET`` / ``[SPEC]`` / ``POD_FILE...``, and the first line of each
command's docstring as its summary, whole. :func:`usage_line` turns a usage error into the one
line the README promises (``joulectl: error: <command>: <field>: <problem>``).
"""

from __future__ import annotations

from typing import Any

_installed = False


def _summary(cmd: Any) -> str:
    """The first line of the command's help (its docstring), whole."""
    text = (getattr(cmd, "short_help", None) or getattr(cmd, "help", None) or "").strip()
    return text.splitlines()[0].strip() if text else ""


def install() -> None:
    """Patch typer's help rendering (idempotent; a no-op on another typer layout)."""
    global _installed
    if _installed:
        return
    try:
        from typer import _click
        from typer.core import TyperArgument, TyperOption
    except ImportError:  # pragma: no cover - another typer layout: keep its help
        return
    _installed = True

    def argument_name(self: Any) -> str:
        return str(self.metavar or (self.name or "").upper())

    def argument_label(self: Any) -> str:
        return argument_name(self) + ("..." if self.nargs != 1 else "")

    def argument_usage(self: Any) -> str:
        name = argument_label(self)
        return name if self.required else f"[{name}]"

    def argument_type(self: Any, ctx: Any = None) -> None:
        return None

    def option_type(self: Any, ctx: Any = None) -> str:
        name = str(self.metavar or (self.name or "value").upper())
        return name + "..." if self.nargs != 1 else name

    TyperArgument.display_name_raw = property(argument_name)  # type: ignore[assignment,method-assign]
    TyperArgument._rich_display_name = argument_label  # type: ignore[method-assign]
    TyperArgument._usage_display_name = argument_usage  # type: ignore[method-assign]
    TyperArgument.display_type_rich = argument_type  # type: ignore[method-assign,assignment]
    TyperOption.display_type_rich = option_type  # type: ignore[method-assign]

    def short_help(self: Any, limit: int = 45) -> str:
        return _summary(self)

    _click.core.Command.get_short_help_str = short_help  # type: ignore[method-assign]


def _command_path(ctx: Any) -> str:
    path = str(getattr(ctx, "command_path", "") or "")
    return path.split(" ", 1)[1] if " " in path else ""


def _field(e: Any) -> str:
    param = getattr(e, "param", None)
    hint = getattr(e, "param_hint", None)
    if param is not None:
        if getattr(param, "param_type_name", "") == "option":
            opts = sorted([*param.opts, *param.secondary_opts], key=len)
            return str(opts[-1])
        return str(param.metavar or (param.name or "").upper())
    if hint:
        text = hint if isinstance(hint, str) else " / ".join(hint)
        return text.strip("'\"")
    return ""


def _options_of(ctx: Any) -> list[str]:
    command = getattr(ctx, "command", None)
    names: list[str] = []
    for p in getattr(command, "params", []) if command is not None else []:
        if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False):
            names.extend([*p.opts, *p.secondary_opts])
    return names


def _path_in_argv(root: Any, argv: list[str]) -> str:
    """The subcommand path named in ``argv`` (for errors raised without a context)."""
    path: list[str] = []
    cmd = root
    for word in argv:
        sub = getattr(cmd, "commands", {}).get(word) if not word.startswith("-") else None
        if sub is not None:
            path.append(word)
            cmd = sub
    return " ".join(path)


def usage_line(e: Any, root: Any = None, argv: list[str] | None = None) -> str:
    """One line (without the newline) for a click usage error ``e``; ``root`` and ``argv`` name the
    command when the error carries no context."""
    from difflib import get_close_matches

    from typer._click import exceptions as ex

    ctx = getattr(e, "ctx", None)
    where = _command_path(ctx) if ctx is not None else _path_in_argv(root, argv or [])
    if isinstance(e, ex.NoSuchOption):
        name = e.option_name
        close = get_close_matches(name, _options_of(ctx), n=1, cutoff=0.75)
        problem = f"no such option {name}" + (f"; did you mean {close[0]}?" if close else "")
        field = ""
    elif isinstance(e, ex.BadOptionUsage) and e.message.endswith("requires an argument."):
        field, problem = e.option_name, "needs a value"
    elif isinstance(e, ex.MissingParameter):
        kind = getattr(e, "param_type", None) or getattr(getattr(e, "param", None), "param_type_name", "")
        problem = f"{_field(e)} is required" if kind == "option" else f"{_field(e)} is missing"
        field = ""
    elif isinstance(e, ex.BadParameter):
        field = _field(e)
        problem = e.message
    else:
        field = ""
        problem = e.format_message() if hasattr(e, "format_message") else str(e)
        problem = problem.rstrip(".")
        if problem.startswith("No such command "):
            problem = "no such command " + problem[len("No such command "):]
            problem = problem.replace(". Did you mean ", "; did you mean ")
        elif problem.startswith("Got unexpected extra argument"):
            extra = problem.rpartition(" (")[2].rstrip(")")
            problem = f"unexpected argument {extra!r}" if " " not in extra else f"unexpected arguments {extra}"
        elif problem[:1].isupper() and not problem[1:2].isupper():
            problem = problem[0].lower() + problem[1:]
    parts = [p for p in (where, field, problem) if p]
    help_cmd = f"joulectl {where} --help" if where else "joulectl --help"
    return f"joulectl: error: {': '.join(parts)} (see {help_cmd})".replace("\n", " ")
