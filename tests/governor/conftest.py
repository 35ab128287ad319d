"""Make the governor test kit (``govkit``) and the shared host trees (``tests/fixtures/trees.py``)
importable."""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "fixtures"))  # trees.py: kernel-ABI host trees
