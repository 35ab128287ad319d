"""The backends' value types are frozen: a reading, a plan or a table row, once made, is compared
and passed on but never changed in place (a shared table row or a state compared before and after
a write would otherwise change under its other holders).

The list is written out: a type added to it is a decision, and each entry kills the mutant that
turns its ``@record(frozen=True)`` into ``False``.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest

FROZEN = [
    ("gov_amd", "SclkLevel"), ("gov_amd", "WriteResult"),
    ("gov_cpu", "CpuTarget"), ("gov_cpu", "PolicyState"), ("gov_cpu", "WriteResult"),
    ("gov_intel", "Gt"), ("gov_intel", "_Write"),
    ("nvidia_clocks", "ClockLock"), ("nvidia_clocks", "LockPlan"), ("nvidia_clocks", "ClockSample"),
    ("nvidia_clocks", "CallOutcome"),
    ("nvidia_messages", "Row"), ("nvidia_messages", "Verdict"), ("nvidia_messages", "_Hit"),
    ("pci", "PciDevice"),
]


@pytest.mark.parametrize(("module", "name"), FROZEN)
def test_a_value_cannot_be_changed_once_made(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(f"joulectl.backends.{module}"), name)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    value = cls(*[None] * len(fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, fields[0].name, 1)
