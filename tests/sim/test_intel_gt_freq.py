"""The Flex 170 profile emulates the Intel GT frequency files under i915 and xe with the driver's
rules: a write within RPn..RP0 that keeps min <= max is taken, anything else is EINVAL (put back
and reported as a rejected write at the next tick)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: t}
spec:
  pools:
  - {name: i915, profile: intel-flex-170-4gpu}
  - {name: xe, profile: intel-flex-170-4gpu, overrides: {gpus: {intel: {driver: xe}}}}
"""
DEV = "sys/bus/pci/devices/0000:4d:00.0"
BUSES = ("0000:4d:00.0", "0000:50:00.0", "0000:b3:00.0", "0000:b6:00.0")
GT = {"i915": f"{DEV}/drm/card0/gt/gt0/rps_{{}}_freq_mhz", "xe": f"{DEV}/tile0/gt0/freq0/{{}}_freq"}


def _gt(driver: str, card: int, name: str) -> str:
    """The GT 0 file ``name`` of the card-th GPU."""
    if driver == "xe":
        return f"sys/bus/pci/devices/{BUSES[card]}/tile0/gt0/freq0/{name}_freq"
    return f"sys/bus/pci/devices/{BUSES[card]}/drm/card{card}/gt/gt0/rps_{name}_freq_mhz"
LANDMARKS = {"i915": ("RP0", "RP1", "RPn"), "xe": ("rp0", "rpe", "rpn")}


def _render(tmp_path: Path) -> tuple[Path, object, object]:
    (tmp_path / "spec.yaml").write_text(SPEC)
    spec = load_spec(str(tmp_path / "spec.yaml"))
    root = tmp_path / "t"
    runtime._ensure_trees(spec, str(root))
    return root, spec, runtime.build_entries(spec, str(root))


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_gt_frequency_files_and_landmarks(tmp_path: Path, driver: str) -> None:
    root, _, _ = _render(tmp_path)
    node = root / f"{driver}-0"
    gt = GT[driver]
    assert [(node / gt.format(n)).read_text() for n in LANDMARKS[driver]] == ["2050\n", "1300\n", "300\n"]
    assert [(node / gt.format(n)).read_text() for n in ("min", "max")] == ["300\n", "2050\n"]
    assert (node / gt.format("min")).stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_gt_writes_follow_the_driver_rules(tmp_path: Path, driver: str) -> None:
    root, spec, entries = _render(tmp_path)
    node = root / f"{driver}-0"
    gt = GT[driver]

    def agent(done: int, total: int | None, samples: object) -> None:
        if done == 1:
            (node / gt.format("max")).write_text("1500\n")  # taken
            (node / _gt(driver, 1, "min")).write_text("250\n")  # below RPn
            (node / _gt(driver, 2, "max")).write_text("2100\n")  # above RP0
        elif done == 2:
            (node / gt.format("min")).write_text("1600\n")  # above the max in force (1500)
            (node / _gt(driver, 3, "min")).write_text("fast\n")
        elif done == 3:
            (node / gt.format("min")).write_text("1500\n")  # min == max: taken

    runtime.run_entries(entries, str(root), spec.facility, ticks=5, fast=True, workers=1, progress=agent,
                        clock=lambda: 1_800_000_000.0)
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    ours = [e["attributes"] for e in events if e["name"] == "joulie.sim.write.rejected" and e["node"] == f"{driver}-0"]
    rejected = sorted((re.findall(r"0000:[0-9a-f]{2}:00\.0", a["file"])[-1], a["value"], a["error.type"]) for a in ours)
    assert rejected == [("0000:4d:00.0", "1600", "einval"), ("0000:50:00.0", "250", "einval"),
                        ("0000:b3:00.0", "2100", "einval"), ("0000:b6:00.0", "fast", "einval")]
    assert (node / gt.format("max")).read_text() == "1500\n"
    assert (node / gt.format("min")).read_text() == "1500\n"
    assert (node / _gt(driver, 1, "min")).read_text() == "300\n"
    assert (node / _gt(driver, 2, "max")).read_text() == "2050\n"
