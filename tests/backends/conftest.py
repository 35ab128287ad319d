"""Fixtures for the backend tests: the fixture-tree builders and a root under tmp_path."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def trees() -> ModuleType:
    """``tests/fixtures/trees.py`` (on sys.path through tests/conftest.py)."""
    import trees

    return trees


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r
