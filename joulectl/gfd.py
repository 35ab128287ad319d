"""GPU feature discovery's product names: its suffixes stripped (a module of its own so that a cap,
which needs this and nothing of the catalog, does not load the catalog: 1.5 ms)."""

from __future__ import annotations

import re

_GFD_SUFFIX = re.compile(r"(?:-MIG-[^\s]*|-SHARED)+$", re.IGNORECASE)


def strip_gfd_suffix(product: str) -> str:
    """Remove GPU feature discovery's ``-MIG-<profile>``, ``-MIG-INVALID`` and ``-SHARED`` suffixes."""
    return _GFD_SUFFIX.sub("", product.strip())
