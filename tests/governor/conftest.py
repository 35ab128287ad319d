"""Make the governor test kit (``govkit``: fake nvidia-smi, trees, inventories) importable."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
