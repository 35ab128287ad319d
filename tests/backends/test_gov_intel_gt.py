"""``gov_intel.Gt``: one GT's frequency files as read, a value nothing changes after the read.

i915 names a GT's files ``gt_min_freq_mhz``/``gt_max_freq_mhz`` under ``gt/gt0`` and xe
``min_freq``/``max_freq`` under ``tile0/gt0/freq0`` (docs/hardware.md 2.2-2.3).
"""

from __future__ import annotations

import dataclasses

import pytest

from joulectl.backends.gov_intel import Gt

FILES = ("min_freq", "max_freq", "rp0_freq", "rpe_freq", "rpn_freq", "act_freq")


def test_a_gt_names_its_min_and_max_files_and_is_a_frozen_value() -> None:
    gt = Gt("tile0/gt0", "/sys/class/drm/card0/device/tile0/gt0/freq0", FILES, 300, 2100, 2100, 1400, 300, 0)
    assert gt.path("min") == "/sys/class/drm/card0/device/tile0/gt0/freq0/min_freq"
    assert gt.path("max") == "/sys/class/drm/card0/device/tile0/gt0/freq0/max_freq"
    # a read is compared with the next one (kills backends/gov_intel.py:73 `@record(frozen=True)`
    # -> `False`): equal reads are equal and hash alike, and none can be changed
    same = Gt("tile0/gt0", "/sys/class/drm/card0/device/tile0/gt0/freq0", FILES, 300, 2100, 2100, 1400, 300, 0)
    assert gt == same and len({gt, same}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        gt.max_mhz = 1800  # type: ignore[misc]
