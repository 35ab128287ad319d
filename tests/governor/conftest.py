"""Make the governor test kit (``govkit``) importable (the host trees come from tests/conftest.py)."""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
