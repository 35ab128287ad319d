"""What a cap run sets on one device (``CapSetting``) and the checks of its numbers.

Shared by :mod:`joulectl.ops.cap` and :mod:`joulectl.ops.schedule` (which parses schedule windows
into settings) so that neither imports the other's module to build one.
"""

from __future__ import annotations

import math
from typing import Any

from joulectl.errors import InputError
from joulectl.record import record
from joulectl.units import number_text

TARGETS = ("gpu", "cpu", "all")


@record(frozen=True)
class CapSetting:
    """What to set on a device: exactly one of ``watts``, ``pct`` or ``restore``."""

    watts: float | None = None
    pct: float | None = None
    restore: bool = False

    def to_dict(self) -> dict[str, Any]:
        if self.restore:
            return {"restore": True}
        if self.pct is not None:
            return {"pct": self.pct}
        return {"watts": self.watts}


def check_pct(value: float, field_name: str, file: str | None = None) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise InputError(f"must be a number, got {value!r}", file=file, field=field_name)
    if not 0 < value <= 100:
        raise InputError(f"must be in (0, 100], got {number_text(value)}", file=file, field=field_name)
    return float(value)


def check_watts(value: float, field_name: str, file: str | None = None) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise InputError(f"must be a number, got {value!r}", file=file, field=field_name)
    if value < 1 or math.isinf(value):
        raise InputError(f"must be at least 1 W, got {number_text(value)}", file=file, field=field_name)
    return float(value)
