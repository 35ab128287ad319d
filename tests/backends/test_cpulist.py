"""cpufreq's ``affected_cpus``/``related_cpus`` lists (space separated CPU numbers; the kernel's
cpulist format also allows ranges and commas, Documentation/admin-guide/cputopology.rst), parsed
by the CPU backend. Written for a mutant that survived the backend tests (docs/TESTING.md)."""

from __future__ import annotations

import pytest

from joulectl.backends.cpu import _cpus


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", [0]), ("0 1 2 3", [0, 1, 2, 3]), ("0-3", [0, 1, 2, 3]), ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
    ("5-5", [5]), ("", []), (None, []), ("a-b x", []),
    # a range with one end not a number is no range (kills backends/cpu.py:302 `and` -> `or`)
    ("0-x 4", [4]), ("x-3 4", [4]),
])
def test_cpu_lists(text: str | None, cpus: list[int]) -> None:
    assert _cpus(text) == cpus
