"""Boundaries of ``cap``, with expected values worked out by hand (never by the code under test).

- Percent targets that land on a half watt round away from zero: 25 % of 350 W is 87.5 W -> 88 W,
  87.625 % of 400 W is 350.5 W -> 351 W (Python's ``round`` would give 350).
- A GPU whose nvidia-smi prints one limit as a token: min only, max only or the requested limit
  only is blocked in discover and cap with the backend's own message, and nothing is written; the
  default only is the documented fallback (docs/discover.md: "the default is the driver's default
  limit, or the maximum when none is printed"), so that GPU stays settable.
- A GPU whose minimum equals its maximum (300-300 W): every percentage is that one value; a watt
  outside it is blocked naming the range.

The end-to-end cases run the CLI on nodes rendered by ``joulectl simulate render`` (the fake
nvidia-smi and amdgpu sysfs); the board files of those nodes are the packaged ones (A100) or the
packaged L40S with its four limit lines replaced, written out below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from joulectl.ops.cap import CapSetting, resolve_target
from joulectl.units import round_half_away

BOARDS = Path(__file__).resolve().parents[2] / "joulectl" / "sim" / "boards"
L40S_LIMITS = ("default_limit_mw: 350000", "enforced_limit_mw: 350000", "min_limit_mw: 100000",
               "max_limit_mw: 350000")
EQUAL_LIMITS = ("default_limit_mw: 300000", "enforced_limit_mw: 300000", "min_limit_mw: 300000",
                "max_limit_mw: 300000")
NA_REASON_RANGE = "the power limit range is unknown (the driver reports N/A): no settable power limit"
NA_REASON_LIMIT = "the power limit is unknown (the driver reports N/A): no settable power limit"

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: bounds}}
spec:
  pools:
  - {{name: a100, profile: nvidia-l40s-4gpu, count: 1, overrides: {{gpus: {{count: 1, nvmlConfig: {a100}}}}}}}
  - {{name: equal, profile: nvidia-l40s-4gpu, count: 1, overrides: {{gpus: {{count: 1, nvmlConfig: equal.yaml}}}}}}
  - {{name: w350, profile: amd-radeon-pro-w7900, count: 1,
     overrides: {{gpus: {{count: 1, power: {{minW: 60, maxW: 350, defaultW: 241, capW: 241}}}}}}}}
  - {{name: namin, profile: nvidia-l40s-4gpu, count: 1,
     overrides: {{gpus: {{count: 1, fieldSupport: {{power.min_limit: "[N/A]"}}}}}}}}
  - {{name: namax, profile: nvidia-l40s-4gpu, count: 1,
     overrides: {{gpus: {{count: 1, fieldSupport: {{power.max_limit: "[N/A]"}}}}}}}}
  - {{name: nadefault, profile: nvidia-l40s-4gpu, count: 1,
     overrides: {{gpus: {{count: 1, fieldSupport: {{power.default_limit: "[N/A]"}}}}}}}}
  - {{name: nacurrent, profile: nvidia-l40s-4gpu, count: 1,
     overrides: {{gpus: {{count: 1, fieldSupport: {{power.limit: "[N/A]"}}}}}}}}
"""
L40S_BUS = "0000:4f:00.0"


def _joulectl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1")
    env.pop("JOULECTL_ROOT", None)
    return subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cap-bounds")
    board = (BOARDS / "l40s.yaml").read_text()
    for old, new in zip(L40S_LIMITS, EQUAL_LIMITS, strict=True):
        assert board.count(old) == 1, old
        board = board.replace(old, new)
    (base / "equal.yaml").write_text(board)
    (base / "spec.yaml").write_text(SPEC.format(a100=BOARDS / "a100.yaml"))
    r = _joulectl("simulate", "render", str(base / "spec.yaml"), "--root", str(base / "root"), timeout=300)
    assert r.returncode == 0, r.stderr
    return base / "root"


@pytest.fixture
def node(rendered: Path, tmp_path: Path) -> Any:
    """A private copy of one rendered node (the fake tools find their node from their own path)."""

    def copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(rendered / name, dst, symlinks=True)
        return dst

    return copy


def cap(root: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    r = _joulectl("--root", str(root), "cap", *args, "-o", "json")
    rows = json.loads(r.stdout)["results"] if r.stdout else []
    return r.returncode, [{k: x[k] for k in ("device", "status", "message", "targetWatts", "afterWatts")}
                          for x in rows], r.stderr


def gpu0(root: Path) -> dict[str, Any]:
    r = _joulectl("--root", str(root), "discover", "-o", "json")
    assert r.returncode == 0, r.stderr
    dev: dict[str, Any] = json.loads(r.stdout)["status"]["gpu"]["devices"][0]
    return {k: dev.get(k) for k in ("busId", "capRange", "currentCapWatts", "control")}


def smi_limit(root: Path) -> str:
    out = subprocess.run([str(root / "bin" / "nvidia-smi"), "--query-gpu=power.limit", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


def amd_cap_uw(root: Path) -> str:
    (path,) = root.glob("sys/bus/pci/devices/*/hwmon/hwmon*/power1_cap")
    return path.read_text().strip()


# -- percent and watt halves --------------------------------------------------------------------


def test_pct_of_350_w_landing_on_87_5_w_rounds_up_to_88_w(node: Any) -> None:
    root = node("w350-0")
    rc, rows, _ = cap(root, "--pct", "25")
    assert rc == 0
    assert [(r["status"], r["targetWatts"], r["afterWatts"]) for r in rows] == [("applied", 88.0, 88.0)]
    assert amd_cap_uw(root) == "88000000"


def test_pct_of_400_w_landing_on_350_5_w_rounds_up_to_351_w(node: Any) -> None:
    root = node("a100-0")
    assert gpu0(root)["capRange"] == {"minWatts": 100, "maxWatts": 400, "defaultWatts": 400}
    rc, rows, _ = cap(root, "--pct", "87.625")
    assert rc == 0
    assert [(r["status"], r["targetWatts"], r["afterWatts"]) for r in rows] == [("applied", 351.0, 351.0)]
    assert smi_limit(root) == "351.00 W"


def test_watts_halves_round_away_from_zero(node: Any) -> None:
    root = node("a100-0")
    assert cap(root, "--watts", "350.5")[1][0]["targetWatts"] == 351.0
    assert cap(root, "--watts", "349.5")[1][0]["targetWatts"] == 350.0
    assert cap(root, "--watts", "349.49")[1][0]["targetWatts"] == 349.0
    assert smi_limit(root) == "349.00 W"


def test_a_percentage_under_the_minimum_is_the_minimum(node: Any) -> None:
    root = node("a100-0")  # 100-400 W: 10 % is 40 W, under the 100 W minimum
    rc, rows, _ = cap(root, "--pct", "10")
    assert rc == 0 and [(r["status"], r["targetWatts"]) for r in rows] == [("applied", 100.0)]
    assert smi_limit(root) == "100.00 W"


def test_the_range_edges_are_inside_and_one_watt_past_them_is_blocked(node: Any) -> None:
    root = node("a100-0")
    assert cap(root, "--watts", "100")[1][0]["status"] == "applied"
    assert cap(root, "--watts", "400")[1][0]["status"] == "applied"
    rc, rows, err = cap(root, "--watts", "401")
    assert rc == 5 and rows[0]["message"] == "401 W is above the maximum 400 W (range 100–400 W)"
    assert err == "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n"
    rc, rows, _ = cap(root, "--watts", "99")
    assert rc == 5 and rows[0]["message"] == "99 W is below the minimum 100 W (range 100–400 W)"
    # 400.4 rounds to 400 (inside), 400.5 to 401 (outside)
    assert cap(root, "--watts", "400.4")[1][0]["status"] == "unchanged"
    assert cap(root, "--watts", "400.5")[1][0]["message"] == "401 W is above the maximum 400 W (range 100–400 W)"
    assert smi_limit(root) == "400.00 W"


# -- equal minimum and maximum ------------------------------------------------------------------


def test_equal_min_and_max_every_percentage_is_that_value(node: Any) -> None:
    root = node("equal-0")
    assert gpu0(root) == {"busId": L40S_BUS, "capRange": {"minWatts": 300, "maxWatts": 300, "defaultWatts": 300},
                          "currentCapWatts": 300, "control": {"available": True}}
    for pct in ("1", "50", "100"):
        rc, rows, _ = cap(root, "--pct", pct)
        assert (rc, rows) == (0, [{"device": L40S_BUS, "status": "unchanged", "message": "already at target",
                                   "targetWatts": 300.0, "afterWatts": 300.0}]), pct
    rc, rows, _ = cap(root, "--watts", "301")
    assert (rc, rows[0]["message"]) == (5, "301 W is above the maximum 300 W (range 300–300 W)")
    rc, rows, _ = cap(root, "--watts", "299")
    assert (rc, rows[0]["message"]) == (5, "299 W is below the minimum 300 W (range 300–300 W)")
    assert smi_limit(root) == "300.00 W"


# -- one token at a time -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cap_range", "current", "reason"), [
    ("namin-0", {"maxWatts": 350, "defaultWatts": 350}, 350, NA_REASON_RANGE),
    ("namax-0", {"minWatts": 100, "defaultWatts": 350}, 350, NA_REASON_RANGE),
    ("nacurrent-0", {"minWatts": 100, "maxWatts": 350, "defaultWatts": 350}, None, NA_REASON_LIMIT),
])
def test_one_token_limit_is_blocked_in_discover_and_cap(node: Any, name: str, cap_range: dict[str, int],
                                                         current: int | None, reason: str) -> None:
    root = node(name)
    assert gpu0(root) == {"busId": L40S_BUS, "capRange": cap_range, "currentCapWatts": current,
                          "control": {"available": False, "reason": reason}}
    for args in (("--pct", "60"), ("--watts", "200")):
        rc, rows, err = cap(root, *args)
        assert rc == 5, args
        assert [(r["status"], r["message"], r["afterWatts"]) for r in rows] == [("blocked", reason, None)]
        assert err == "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n"
    # nothing was written: the fake tool still holds the board's 350 W
    out = subprocess.run([str(root / "bin" / "nvidia-smi"), "--query-gpu=enforced.power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "350.00 W"


def test_default_token_only_falls_back_to_the_maximum_and_stays_settable(node: Any) -> None:
    root = node("nadefault-0")
    assert gpu0(root) == {"busId": L40S_BUS, "capRange": {"minWatts": 100, "maxWatts": 350, "defaultWatts": 350},
                          "currentCapWatts": 350, "control": {"available": True}}
    rc, rows, _ = cap(root, "--pct", "60")
    assert (rc, [(r["status"], r["targetWatts"]) for r in rows]) == (0, [("applied", 210.0)])
    assert smi_limit(root) == "210.00 W"
    rc, rows, _ = cap(root, "--restore")
    assert (rc, [(r["status"], r["targetWatts"], r["afterWatts"]) for r in rows]) == (0, [("applied", 350.0, 350.0)])


# -- resolve_target and the rounding rule, in process --------------------------------------------


@pytest.mark.parametrize(("setting", "min_w", "max_w", "expected"), [
    (CapSetting(pct=25), 60, 350, (88.0, None)),
    (CapSetting(pct=87.625), 100, 400, (351.0, None)),
    (CapSetting(pct=50), 200, 701, (351.0, None)),
    (CapSetting(pct=49.95), 0, 100, (50.0, None)),
    (CapSetting(pct=0.001), 100, 400, (100.0, None)),   # raw 0.004 W -> the minimum
    (CapSetting(pct=1), None, 50, (1.0, None)),          # 0.5 W -> the 1 W floor
    (CapSetting(pct=50), 0, 1.5, (1.0, None)),           # 0.75 W -> the 1 W floor
    (CapSetting(pct=1), 99.4, 400, (100.0, None)),       # min 99.4 rounds to 99: up to 100
    (CapSetting(pct=100), 100, 350.7, (350.0, None)),    # 350.7 rounds to 351 > max: down to 350
    (CapSetting(pct=100), 300, 300, (300.0, None)),
    (CapSetting(pct=1), 300, 300, (300.0, None)),
    (CapSetting(pct=60), None, None, (None, "the maximum power limit is unknown; a percentage cannot be resolved")),
    (CapSetting(watts=350.5), 100, 400, (351.0, None)),
    (CapSetting(watts=99.5), 100, 400, (100.0, None)),
    (CapSetting(watts=99.4), 100, 400, (99.0, "99 W is below the minimum 100 W (range 100–400 W)")),
    (CapSetting(watts=400.5), 100, 400, (401.0, "401 W is above the maximum 400 W (range 100–400 W)")),
    (CapSetting(watts=400.5), None, 400, (401.0, "401 W is above the maximum 400 W (range ?–400 W)")),
    (CapSetting(watts=0.4), None, 400, (0.0, "0 W is below 1 W, the least joulectl sets (range ?–400 W)")),
    (CapSetting(watts=5000), 100, None, (5000.0, None)),  # no maximum known: nothing to hold it to
    (CapSetting(watts=100.005), 100.01, 400, (100.0, None)),  # within SAME_W (0.01 W) of the minimum
])
def test_resolve_target_table(setting: CapSetting, min_w: float | None, max_w: float | None,
                              expected: tuple[float | None, str | None]) -> None:
    assert resolve_target(setting, min_w, max_w) == expected


def test_restore_targets() -> None:
    assert resolve_target(CapSetting(restore=True), 100, 400, 400) == (400.0, None)
    # a restore may go above the maximum: RAPL firmware leaves PL1 at 4090 W over a 95 W maximum
    assert resolve_target(CapSetting(restore=True), 0, 95, 4090) == (4090.0, None)
    assert resolve_target(CapSetting(restore=True), 100, 400, None) == (
        None, "nothing to restore to: no journal entry and the default limit is unknown")
    assert resolve_target(CapSetting(restore=True), 100, 400, 50) == (
        50.0, "50 W is below the minimum 100 W (range 100–400 W)")


@pytest.mark.parametrize(("x", "expected"), [
    (0.5, 1), (1.5, 2), (2.5, 3), (87.5, 88), (350.5, 351), (-0.5, -1), (-2.5, -3), (0.0, 0), (-0.0, 0),
    (349.49, 349), (349.5, 350), (0.49999999999999994, 0), (-0.49999999999999994, 0),
    (4503599627370497.0, 4503599627370497),  # 2**52 + 1: an odd integer stays itself
])
def test_round_half_away_from_zero(x: float, expected: int) -> None:
    assert round_half_away(x) == expected
