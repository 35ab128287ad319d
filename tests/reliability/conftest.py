"""Reliability suite settings.

Tests marked ``nightly`` (bigger example budgets, longer kill loops) run only with
``JOULECTL_NIGHTLY=1``; CI (``python -m pytest -q``) runs everything else with its CI budget.
Helpers live in ``reliability_support`` (this directory is put on ``sys.path`` for it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reliability_support import NIGHTLY


@pytest.fixture(autouse=True)
def _nightly_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("nightly") is not None and not NIGHTLY:
        pytest.skip("nightly test: set JOULECTL_NIGHTLY=1 to run it")
