"""GPU feature discovery's product names: its suffixes stripped (a module of its own so that a cap,
which needs this and nothing of the catalog, does not load the catalog: 1.5 ms)."""

from __future__ import annotations

import re

#: Compiled at its first use (``re``'s cache): most names have no suffix (see below).
_GFD_SUFFIX = r"(?i)(?:-MIG-[^\s]*|-SHARED)+$"


def strip_gfd_suffix(product: str) -> str:
    """Remove GPU feature discovery's ``-MIG-<profile>``, ``-MIG-INVALID`` and ``-SHARED`` suffixes.
    An ASCII name without ``-mig-`` or ``-shared`` in any case has none, and is not matched (so the
    pattern is not compiled by a discover that sees no such name); any other goes through it."""
    name = product.strip()
    if name.isascii():
        lower = name.lower()
        if "-mig-" not in lower and "-shared" not in lower:
            return name
    return re.sub(_GFD_SUFFIX, "", name)
