"""Exit codes and the error tree.

Every error a user can reach is a :class:`JoulectlError`; it knows its exit code and an optional
hint, and the CLI's single handler (``joulectl.cli.main``) prints it as one line on stderr.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes: API, documented in the README (SPEC §2)."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    NO_DEVICE = 3
    REFUSED = 4
    PARTIAL = 5
    UNSCHEDULABLE = 6
    LOCK_BUSY = 7
    INTERRUPTED = 130


class JoulectlError(Exception):
    """Base of every expected error. ``str(err)`` is the one line shown to the user."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class InputError(JoulectlError):
    """Invalid input: a bad flag value, an unreadable file, bad YAML, a schema or range violation.

    Formats as ``<file>: <field>: <problem>``, leaving out the parts that are unknown.
    """

    exit_code = ExitCode.USAGE

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.file = file
        self.field = field
        self.problem = message
        parts = [p for p in (file, field) if p]
        full = ": ".join([*parts, message])
        super().__init__(full, hint=hint)


class NoDeviceError(JoulectlError):
    """No device matched: no GPU on the node, or ``--device`` matched nothing."""

    exit_code = ExitCode.NO_DEVICE


class RefusedError(JoulectlError):
    """No privilege for any requested write."""

    exit_code = ExitCode.REFUSED


class PartialError(JoulectlError):
    """Some targets were blocked, unsupported or failed."""

    exit_code = ExitCode.PARTIAL


class UnschedulableError(JoulectlError):
    """``schedule-check``: at least one pod fits no node."""

    exit_code = ExitCode.UNSCHEDULABLE


class LockBusyError(JoulectlError):
    """The node lock was held by another run past ``--wait``."""

    exit_code = ExitCode.LOCK_BUSY


class ConfinementError(InputError):
    """A path would leave the host root (a ``..`` component or a symlink escaping it)."""
