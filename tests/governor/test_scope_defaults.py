"""Which devices ``governor show`` and ``governor set`` reach when no ``--gpu``/``--cpu`` is given
(SPEC §5), with the devices written out: an MI300X node's 8 GPUs and 192 cpufreq policies.

Written for mutants that survived the governor tests (docs/TESTING.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trees

from joulectl.errors import InputError
from joulectl.host import Host
from joulectl.ops.governor import run_set

MI300X = ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0", "0000:a6:00.0",
          "0000:c6:00.0", "0000:e5:00.0"]


def _rows(cli: Any, root: Path, *args: str) -> list[tuple[str, str]]:
    r = cli("--root", root, "governor", *args, "-o", "json")
    assert r.exit_code == 0, r.stderr
    return [(x["kind"], x["device"]) for x in json.loads(r.stdout)["results"]]


@pytest.fixture
def mi300x(tmp_path: Path) -> Path:
    return trees.amd_mi300x_x8(tmp_path / "n")


def test_show_without_a_flag_is_every_gpu_then_every_cpu_policy(cli: Any, mi300x: Path) -> None:
    rows = _rows(cli, mi300x, "show")
    assert rows[:8] == [("gpu", b) for b in MI300X]
    assert rows[8:] == [("cpu", f"cpufreq:policy{i}") for i in range(len(rows) - 8)]
    assert len(rows) - 8 == len(list((mi300x / "sys/devices/system/cpu/cpufreq").glob("policy*")))


def test_show_with_device_is_that_gpu_only(cli: Any, mi300x: Path) -> None:
    assert _rows(cli, mi300x, "show", "--device", "0") == [("gpu", MI300X[0])]


def test_show_on_a_node_without_gpus_is_the_cpu_policies(cli: Any, tmp_path: Path) -> None:
    root = trees.intel_2s_host(tmp_path / "c")
    rows = _rows(cli, root, "show")
    assert rows and {kind for kind, _ in rows} == {"cpu"}


def test_set_without_a_flag_goes_where_the_preset_belongs(cli: Any, mi300x: Path) -> None:
    assert {k for k, _ in _rows(cli, mi300x, "set", "low", "--dry-run")} == {"gpu"}
    assert {k for k, _ in _rows(cli, mi300x, "set", "efficiency", "--dry-run")} == {"cpu"}


def test_an_unknown_preset_without_a_flag_lists_both_sets(mi300x: Path) -> None:
    with pytest.raises(InputError) as e:
        run_set(Host(str(mi300x)), "turbo", gpu=False, cpu=False, selectors=(), dry_run=True, wait_s=0,
                model_presets_path=None, warnings=[])
    assert str(e.value) == ("PRESET: unknown preset 'turbo' (GPU presets: auto, sustained, efficient, low, peak; "
                            "CPU presets: performance, balanced, efficiency)")


def test_accepted_presets_with_and_without_a_context(mi300x: Path) -> None:
    """amdgpu takes every GPU preset (SPEC §5: auto, profile_peak, low and the sclk levels); the
    backend's answer through a context is discover's."""
    from joulectl.ops.discover import inventory
    from joulectl.ops.governor import Context, accepted_presets

    host = Host(str(mi300x))
    dev = inventory(host).gpus[0]
    every = ("auto", "sustained", "efficient", "low", "peak")
    assert accepted_presets(dev) == every
    assert accepted_presets(dev, Context(host)) == every


def test_show_reads_each_policys_current_frequency(cli: Any, mi300x: Path) -> None:
    """``governor show`` reads the policy details discover skips: ``scaling_cur_freq`` (kHz) as
    the clocks column, whole MHz."""
    for i, khz in ((0, 2054500), (1, 3100999)):
        (mi300x / f"sys/devices/system/cpu/cpufreq/policy{i}/scaling_cur_freq").write_text(f"{khz}\n")
    r = cli("--root", mi300x, "governor", "show", "--cpu", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert [(x["device"], x["clocks"]) for x in rows[:2]] == [("cpufreq:policy0", "2054 MHz"),
                                                              ("cpufreq:policy1", "3100 MHz")]
