"""`joulectl governor` (placeholder until the command lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command to the app."""
