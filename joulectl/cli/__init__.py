"""The ``joulectl`` command line: one typer app, thin subcommands, one error handler.

Every expected error is a :class:`~joulectl.errors.JoulectlError` and becomes one line on stderr
with its exit code (SPEC §2); a traceback is shown only with ``--debug``.
"""

import os
import sys
from typing import Annotated

import typer

from joulectl import __version__
from joulectl.cli.common import STATE
from joulectl.errors import ExitCode, JoulectlError

app = typer.Typer(
    name="joulectl",
    help="GPU and CPU power control for GPU fleets: discover, cap, governor, plan, schedule-check, simulate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"joulectl {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _global(
    root: Annotated[
        str,
        typer.Option(
            "--root",
            metavar="PATH",
            envvar="JOULECTL_ROOT",
            help="Host root of every read and write (a node tree from `simulate render`).",
            show_default=True,
        ),
    ] = "/",
    no_color: Annotated[bool, typer.Option("--no-color", help="No colour (also NO_COLOR).")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
    tool_timeout: Annotated[
        float,
        typer.Option("--tool-timeout", metavar="SECONDS", help="Timeout of every vendor tool call, in seconds.",
                     min=0.1),
    ] = 3.0,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True),
    ] = False,
) -> None:
    """GPU and CPU power control for GPU fleets."""
    STATE.root = root
    STATE.debug = debug
    STATE.no_color = no_color or bool(os.environ.get("NO_COLOR"))
    STATE.tool_timeout = tool_timeout
    if STATE.no_color:
        from joulectl.render import set_color

        set_color(False)


def _fast_params() -> None:
    from joulectl.cli.fastparams import install
    from joulectl.cli.helpfmt import install as install_help

    install()
    install_help()


_fast_params()


#: Command name -> module under joulectl.cli that registers it.
COMMANDS = {
    "discover": "discover",
    "cap": "cap",
    "governor": "governor",
    "plan": "plan",
    "schedule-check": "schedule_check",
    "simulate": "simulate",
    "completion": "completion",
}
_registered: set[str] = set()
#: Global options that take a value (to find the command name in argv without parsing it).
_VALUE_OPTIONS = ("--root", "--tool-timeout")


def register(*names: str) -> None:
    """Register commands on the app (all of them when no name is given); idempotent.

    A run registers only the command it invokes, so start-up does not pay for building and
    importing every other command (``discover`` from cron stays cheap).
    """
    import importlib

    for name in names or tuple(COMMANDS):
        if name in _registered:
            continue
        _registered.add(name)
        importlib.import_module(f"joulectl.cli.{COMMANDS[name]}").register(app)


def _command_name(argv: list[str]) -> str | None:
    """The command named in ``argv``, skipping global options; None when there is none."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg if arg in COMMANDS else None
    return None


def _error_line(message: str, hint: str | None = None) -> None:
    sys.stderr.write(f"joulectl: error: {message}\n")
    if hint:
        sys.stderr.write(f"joulectl: hint: {hint}\n")


#: Commands that end through the interpreter's normal exit: ``simulate`` has worker processes,
#: mounts, servers and their ``atexit`` handlers.
_FULL_EXIT = frozenset({"simulate"})


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and turn every outcome into an exit code.

    A command other than :data:`_FULL_EXIT`'s leaves by ``os._exit`` once its output is flushed:
    the interpreter's teardown (freeing every module's objects, 8-13 ms, a tenth of a cap) does
    nothing such a command needs; its files are closed by the blocks that opened them."""
    code = run(argv)
    if _command_name(sys.argv[1:] if argv is None else argv) not in _FULL_EXIT:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said there
                pass
        os._exit(code)
    sys.exit(code)


def run(argv: list[str] | None = None) -> int:
    """Run the app, returning the exit code instead of exiting (used by tests and ``main``)."""
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:  # fast path: no command tree to build
        sys.stdout.write(f"joulectl {__version__}\n")
        return 0
    shell = os.environ.get("_JOULECTL_COMPLETE")
    if shell:  # a TAB in a shell whose completion script `joulectl completion SHELL` printed
        from joulectl.cli.completion import complete

        return complete(shell)
    args = sys.argv[1:] if argv is None else argv
    name = _command_name(args)
    if name is None:
        register()  # help, a typo or no command at all: the full tree, so usage lists everything
    else:
        register(name)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="joulectl", standalone_mode=False)
        code = int(rv) if isinstance(rv, int) else 0
        if code == ExitCode.INTERRUPTED:  # typer turns Ctrl-C into a silent Exit(130): say it, once
            sys.stderr.write("joulectl: interrupted\n")
        return code
    except JoulectlError as e:
        _error_line(str(e), e.hint)
        return int(e.exit_code)
    except typer.Exit as e:
        return int(e.exit_code)
    except typer.Abort:
        sys.stderr.write("joulectl: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        sys.stderr.write("joulectl: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except typer.TyperException as e:  # usage errors: bad flag, missing argument, bad value
        from typer._click.exceptions import NoArgsIsHelpError, UsageError

        if isinstance(e, NoArgsIsHelpError):  # a bare group: its help, on stderr, as a usage error
            e.show()
            return int(ExitCode.USAGE)
        if isinstance(e, UsageError):
            from joulectl.cli.helpfmt import usage_line

            sys.stderr.write(usage_line(e, command, args) + "\n")
            return int(ExitCode.USAGE)
        _error_line(e.format_message())
        return int(getattr(e, "exit_code", 1))
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except Exception as e:  # the one place internal errors become exit 1
        if STATE.debug or os.environ.get("JOULECTL_DEBUG"):
            import traceback

            traceback.print_exc()
        else:
            first = str(e).splitlines()[0] if str(e) else ""
            _error_line(
                f"internal error: {type(e).__name__}{': ' + first if first else ''}",
                "run with --debug for the traceback, and please report it",
            )
        return int(ExitCode.INTERNAL)
