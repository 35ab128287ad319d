"""Fidelity fixes of the tick (issue 3 follow-up): clock-lock floors, EPP under the performance policy."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from joulectl.sim import ledger as lg
from joulectl.sim import runtime
from joulectl.sim.tools.state import read_nvml_state

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: t}}
spec:
  defaults:
    baseLoad: {{cpuUtil: 0.5, gpuUtil: {gpu_util}}}
  pools:
  - {{name: n, profile: {profile}, count: 1}}
"""
POLICY = "sys/devices/system/cpu/cpufreq/policy{}"


def _spec(tmp_path: Path, profile: str, gpu_util: float = 0.0) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(profile=profile, gpu_util=gpu_util))
    return str(path)


def _events(root: Path) -> list[dict[str, object]]:
    path = root / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_idle_gpu_under_a_graphics_clock_lock_holds_the_floor(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "nvidia-h100-sxm-8gpu", gpu_util=0.0)
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    node = root / "n-0"
    idle = read_nvml_state(str(node))["gpus"][0]["clocks"]["smMhz"]
    assert idle < 1000  # an idle unlocked H100 sits at its lowest clock
    smi = str(node / "bin" / "nvidia-smi")
    done = subprocess.run([smi, "-i", "0", "-lgc", "1980,1980"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    runtime.run(spec, str(root), ticks=3, fast=True)
    gpus = read_nvml_state(str(node))["gpus"]
    assert gpus[0]["clocks"]["smMhz"] == 1980
    assert gpus[0]["clocks"]["graphicsMhz"] == 1980
    assert gpus[1]["clocks"]["smMhz"] == idle  # unlocked neighbour unchanged
    query = subprocess.run([smi, "-i", "0", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
    assert query.stdout.strip() == "1980"
    led = lg.load(str(node))
    assert led is not None
    # Idle power rises with the clock held up, and stays far below full load.
    assert led.state["P.gpu0"] > led.state["P.gpu1"] + 20
    assert led.state["P.gpu0"] < 300


def test_performance_governor_pins_epp_and_powersave_restores_it(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "intel-xeon-2s-rapl")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    pol = root / "n-0" / POLICY.format(3)
    epp = pol / "energy_performance_preference"
    assert epp.read_text() == "balance_performance\n"
    (pol / "scaling_governor").write_text("performance\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert epp.read_text() == "performance\n"
    assert (root / "n-0" / POLICY.format(4) / "energy_performance_preference").read_text() == "balance_performance\n"
    # Another EPP under the performance policy is EBUSY and put back to performance.
    epp.write_text("power\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert epp.read_text() == "performance\n"
    [event] = [e for e in _events(root) if e["name"] == "joulie.sim.write.rejected"]
    attrs = event["attributes"]
    assert isinstance(attrs, dict)
    assert attrs["errno"] == errno.EBUSY
    # Back to powersave in one run: the EPP in force before performance comes back.
    (pol / "scaling_governor").write_text("powersave\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert epp.read_text() == "balance_performance\n"


def test_governor_and_epp_written_in_the_same_tick(tmp_path: Path) -> None:
    """An EPP the agent wrote with the policy switch is checked under the new policy, not overwritten."""
    spec = _spec(tmp_path, "intel-xeon-2s-rapl")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    pol = root / "n-0" / POLICY.format(5)
    epp = pol / "energy_performance_preference"
    (pol / "scaling_governor").write_text("performance\n")
    epp.write_text("balance_power\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (pol / "scaling_governor").read_text() == "performance\n"
    assert epp.read_text() == "performance\n"
    names = [e["name"] for e in _events(root)]
    assert names == ["joulie.sim.write.rejected"]


@pytest.mark.parametrize("profile", ["intel-xeon-2s-rapl"])
def test_epp_of_a_tree_rendered_under_performance_reads_performance(tmp_path: Path, profile: str) -> None:
    spec = _spec(tmp_path, profile)
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    pol = root / "n-0" / POLICY.format(0)
    (pol / "scaling_governor").write_text("performance\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    # The restart keeps performance: the pinned EPP stays.
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert (pol / "energy_performance_preference").read_text() == "performance\n"
