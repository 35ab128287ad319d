"""Fixtures for the backend tests: the fixture-tree builders and a root under tmp_path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_trees() -> ModuleType:
    """``tests/fixtures/trees.py`` (pytest runs in importlib mode, so it is loaded by path)."""
    name = "joulectl_fixture_trees"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "fixtures" / "trees.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def trees() -> ModuleType:
    return load_trees()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r
