"""`joulectl governor` end to end: nodes rendered by `joulectl simulate render`, joulectl and the
emulator's fake nvidia-smi run as subprocesses, `simulate run --fast` ticking the emulator.

One tree per module (rendering costs seconds); every test works on its own node of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from joulectl.backends.nvidia_clocks import parse_supported_clocks

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: governor}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.8, gpuUtil: 1.0, memoryIntensity: 0.2, cpuClass: cpu.compute_bound,
               gpuClass: gpu.compute_bound}
  pools:
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 3}
  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
"""


class Cluster:
    def __init__(self, base: Path) -> None:
        self.spec = base / "spec.yaml"
        self.spec.write_text(SPEC)
        self.root = base / "root"
        self.base = base

    def node(self, name: str) -> Path:
        return self.root / name

    def joulectl(self, node: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if k not in ("JOULECTL_ROOT", "HWEMU_UNPRIVILEGED")}
        full_env.update(env or {})
        return subprocess.run([sys.executable, "-m", "joulectl", "--root", str(self.node(node)), *args],
                              capture_output=True, text=True, env=full_env, timeout=120, check=False)

    def json(self, node: str, *args: str, code: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
        r = self.joulectl(node, *args, "-o", "json", env=env)
        assert r.returncode == code, r.stderr
        data: dict[str, Any] = json.loads(r.stdout)
        return data

    def tick(self, n: int = 2) -> None:
        r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "run", str(self.spec), "--root",
                            str(self.root), "--ticks", str(n), "--fast"], capture_output=True, text=True,
                           timeout=300, check=False)
        assert r.returncode == 0, r.stderr

    def smi(self, node: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run([str(self.node(node) / "bin" / "nvidia-smi"), *args], capture_output=True,
                              text=True, env=full_env, timeout=60, check=False)

    def nvml_locks(self, node: str) -> list[tuple[Any, Any]]:
        state = json.loads((self.node(node) / "state" / "nvml.json").read_text())
        return [(g["clocks"]["lockedGraphics"], g["clocks"]["lockedMemory"]) for g in state["gpus"]]

    def journal(self, node: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.node(node) / "var/lib/joulectl/state.json").read_text())
        return data

    def level(self, node: str, bus: str) -> str:
        return (self.node(node) / f"sys/bus/pci/devices/{bus}/power_dpm_force_performance_level").read_text().strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    c = Cluster(tmp_path_factory.mktemp("govsim"))
    r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(c.spec), "--root", str(c.root)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return c


def _statuses(doc: dict[str, Any]) -> list[str]:
    return [x["status"] for x in doc["results"]]


def _field(doc: dict[str, Any], name: str) -> set[Any]:
    return {x[name] for x in doc["results"]}


# -- NVIDIA -----------------------------------------------------------------------------------------


def test_h100_every_preset_and_show_verifies_after_ticks(cluster: Cluster, tmp_path: Path) -> None:
    node = "h100-0"
    doc = cluster.json(node, "governor", "set", "efficient")
    assert _statuses(doc) == ["applied-unverified"] * 8
    assert _field(doc, "after") == {"graphics 345-1485 MHz"}
    assert cluster.nvml_locks(node)[0] == ({"minMhz": 345, "maxMhz": 1485}, None)
    bus = doc["results"][0]["device"]
    assert cluster.journal(node)["devices"][bus]["current"]["governorPreset"]["status"] == "applied-unverified"
    cluster.tick()
    show = cluster.json(node, "governor", "show", "--gpu")
    assert _statuses(show) == ["applied"] * 8
    assert _field(show, "clocks") == {"graphics 1485 MHz, memory 2619 MHz, 100 % busy"}
    assert cluster.journal(node)["devices"][bus]["current"]["governorPreset"]["status"] == "applied"

    assert _field(cluster.json(node, "governor", "set", "peak"), "after") == {"graphics 1980 MHz"}
    doc = cluster.json(node, "governor", "set", "low")
    assert _field(doc, "after") == {"graphics 345-1980 MHz, memory 1593 MHz"}
    assert cluster.nvml_locks(node)[0] == ({"minMhz": 345, "maxMhz": 1980}, {"minMhz": 1593, "maxMhz": 1593})

    r = cluster.joulectl(node, "governor", "set", "sustained")
    assert r.returncode == 5
    assert r.stderr == "joulectl: error: 0 of 8 targets done; 8 blocked (see MESSAGE)\n"
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps({"NVIDIA H100 80GB HBM3": {"graphicsMHz": 1755}}))
    doc = cluster.json(node, "governor", "set", "sustained", "--model-presets", str(presets))
    assert _field(doc, "after") == {"graphics 1755 MHz"}
    # sustained locks no memory clock: the -lmc of low was undone
    assert cluster.nvml_locks(node)[0] == ({"minMhz": 1755, "maxMhz": 1755}, None)

    doc = cluster.json(node, "governor", "set", "auto")
    assert _statuses(doc) == ["applied"] * 8
    assert cluster.nvml_locks(node) == [(None, None)] * 8
    assert cluster.json(node, "governor", "set", "auto")["results"][0]["message"] == "no lock set by joulectl"


def test_l40s_memory_bound_and_ada_lmc_refusal(cluster: Cluster) -> None:
    node = "l40s-0"
    tables = parse_supported_clocks(cluster.smi(node, "-q", "-d", "SUPPORTED_CLOCKS").stdout)
    table = next(iter(tables.values()))
    low_mem, top_mem = min(table), max(table)
    bound = max(table[low_mem])
    assert bound < max(table[top_mem])  # the L40S offers only lower graphics clocks at its lowest memory clock
    doc = cluster.json(node, "governor", "set", "low", "--dry-run")
    assert _field(doc, "after") == {f"graphics {min(table[low_mem])}-{bound} MHz, memory {low_mem} MHz"}

    r = cluster.joulectl(node, "governor", "set", "low", "-o", "json")
    assert r.returncode == 5
    doc = json.loads(r.stdout)
    assert _statuses(doc) == ["unsupported"] * 4
    first = doc["results"][0]
    assert first["message"].startswith("memory clock lock: ")
    assert "is not supported for GPU 00000000:" in first["message"]
    assert first["message"].endswith("; graphics lock set by joulectl undone")
    # no lock recorded, and the -lgc that low had just set is reset
    assert cluster.nvml_locks(node) == [(None, None)] * 4
    assert all(not d["current"] for d in cluster.journal(node)["devices"].values())
    # efficient needs no memory lock and works
    assert _statuses(cluster.json(node, "governor", "set", "efficient")) == ["applied-unverified"] * 4


def test_unprivileged_nvidia_smi_exit_4(cluster: Cluster) -> None:
    r = cluster.joulectl("h100-1", "governor", "set", "peak", env={"HWEMU_UNPRIVILEGED": "1"})
    assert r.returncode == 4
    assert r.stderr == ("joulectl: error: no privilege to write: every write was refused (8 devices)\n"
                        "joulectl: hint: run as root (sudo joulectl ...)\n")
    assert cluster.nvml_locks("h100-1") == [(None, None)] * 8


def test_a_hand_set_lock_survives_reset(cluster: Cluster) -> None:
    node = "h100-2"
    buses = [x["device"] for x in cluster.json(node, "governor", "show", "--gpu")["results"]]
    smi_bus = "0000" + buses[0].upper()
    r = cluster.smi(node, "-i", smi_bus, "-lgc", "1000,1200")  # the operator, before joulectl ran
    assert r.returncode == 0, r.stdout + r.stderr
    doc = cluster.json(node, "governor", "set", "efficient", "--device", "1", "--device", "2")
    assert _statuses(doc) == ["applied-unverified"] * 2
    doc = cluster.json(node, "governor", "reset", "--gpu")
    rows = {x["device"]: (x["status"], x["message"]) for x in doc["results"]}
    assert rows[buses[0]] == ("unchanged", "nothing set by joulectl")
    assert rows[buses[1]] == ("applied", "graphics locks set by joulectl undone")
    locks = cluster.nvml_locks(node)
    assert locks[0] == ({"minMhz": 1000, "maxMhz": 1200}, None)
    assert locks[1:] == [(None, None)] * 7


# -- AMD --------------------------------------------------------------------------------------------


def test_mi300x_every_preset_efficient_verified_after_tick(cluster: Cluster) -> None:
    node = "mi300x-0"
    for preset, level in (("peak", "profile_peak"), ("low", "low"), ("sustained", "profile_standard"),
                          ("auto", "auto")):
        doc = cluster.json(node, "governor", "set", preset)
        assert _statuses(doc) == ["applied"] * 8, preset
        assert _field(doc, "after") == {level}
    doc = cluster.json(node, "governor", "set", "efficient")
    bus = doc["results"][0]["device"]
    assert cluster.level(node, bus) == "manual"
    assert _statuses(doc) == ["applied-unverified"] * 8
    cluster.tick()
    show = cluster.json(node, "governor", "show", "--gpu")
    assert _statuses(show) == ["applied"] * 8
    assert show["results"][0]["message"] == "sclk level in use inside the mask: verified"
    assert cluster.json(node, "governor", "set", "efficient")["results"][0]["status"] == "unchanged"
    doc = cluster.json(node, "governor", "reset", "--gpu")
    assert _statuses(doc) == ["applied"] * 8
    assert cluster.level(node, bus) == "auto"


def test_mi250x_both_dies_and_reset(cluster: Cluster) -> None:
    node = "mi250x-0"
    doc = cluster.json(node, "governor", "set", "low")
    assert _statuses(doc) == ["applied"] * 8
    buses = [x["device"] for x in doc["results"]]
    assert [cluster.level(node, b) for b in buses] == ["low"] * 8
    assert _statuses(cluster.json(node, "governor", "reset"))[:8] == ["applied"] * 8
    assert [cluster.level(node, b) for b in buses] == ["auto"] * 8


def test_w7900_efficient_ceiling(cluster: Cluster) -> None:
    doc = cluster.json("w7900-0", "governor", "set", "efficient")
    (row,) = doc["results"]
    assert row["after"].startswith("manual (sclk levels 0 ")
    assert row["after"].endswith(", ceiling 1871 MHz)")  # 75 % of 2495 MHz, rounded down


# -- Intel ----------------------------------------------------------------------------------------------


def test_intel_cpu_presets_and_reset(cluster: Cluster) -> None:
    node = "intel-0"
    pol = cluster.node(node) / "sys/devices/system/cpu/cpufreq/policy0"
    def state() -> tuple[str, str]:
        return ((pol / "scaling_governor").read_text().strip(),
                (pol / "energy_performance_preference").read_text().strip())

    before = state()
    for preset, gov, epp in (("efficiency", "powersave", "power"), ("performance", "performance", None),
                             ("balanced", "powersave", "balance_performance")):
        doc = cluster.json(node, "governor", "set", preset)
        assert _field(doc, "kind") == {"cpu"}
        assert _field(doc, "status") <= {"applied", "unchanged"}
        assert (pol / "scaling_governor").read_text().strip() == gov
        if epp:
            assert (pol / "energy_performance_preference").read_text().strip() == epp
    cluster.json(node, "governor", "reset", "--cpu")
    assert state() == before


def test_intel_gpus_efficient_then_reset(cluster: Cluster) -> None:
    doc = cluster.json("flex-0", "governor", "set", "efficient")
    assert {(x["status"], x["after"]) for x in doc["results"]} == {("applied", "gt0 300-1500 MHz")}
    doc = cluster.json("flex-0", "governor", "reset", "--gpu")
    assert {(x["status"], x["after"]) for x in doc["results"]} == {("applied", "gt0 300-2050 MHz")}


# -- a SIGKILL right after a write ------------------------------------------------------------------

#: The script that runs joulectl and SIGKILLs it right after its N-th sysfs write.
KILL_AFTER_WRITE = str(Path(__file__).resolve().parents[1] / "fixtures" / "kill_after_write.py")

MI300X_ONLY = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: governor-kill}
spec:
  pools:
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
"""


def test_kill_right_after_a_write_reset_returns_the_operators_level(tmp_path: Path) -> None:
    """The operator's performance level (``high``, set by hand) survives a SIGKILL right after each
    of joulectl's level writes: the write-ahead journal has the original and joulectl's target, so
    ``governor reset`` puts ``high`` back everywhere instead of calling joulectl's own level the
    operator's (as it did before the write-ahead save)."""
    (tmp_path / "spec.yaml").write_text(MI300X_ONLY)
    r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(tmp_path / "spec.yaml"),
                        "--root", str(tmp_path / "root")], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    node = tmp_path / "root" / "mi300x-0"
    levels = sorted(node.glob("sys/devices/*/*/power_dpm_force_performance_level"))
    assert len(levels) == 8
    for f in levels:
        f.write_text("high\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JOULECTL_ROOT", "HWEMU_UNPRIVILEGED")}
    for n in range(1, 9):  # a kill after the 1st, 2nd, ... 8th level write, one run after the other
        preset, level = [("low", "low"), ("peak", "profile_peak"), ("sustained", "profile_standard")][n % 3]
        r = subprocess.run([sys.executable, KILL_AFTER_WRITE, "--root", str(node), "governor", "set", preset],
                           capture_output=True, text=True, env={**env, "KILL_AFTER_WRITE": str(n)}, timeout=120,
                           check=False)
        assert r.returncode == -signal.SIGKILL, (n, r.stderr)
        assert [f.read_text().strip() for f in levels].count(level) == n
        devices = json.loads((node / "var/lib/joulectl/state.json").read_text())["devices"]
        assert len(devices) == 8
        assert all(d["original"]["perfLevel"] == "high" and level in d["pending"]["perfLevel"]
                   for d in devices.values())
    r = subprocess.run([sys.executable, "-m", "joulectl", "--root", str(node), "governor", "reset", "--gpu",
                        "-o", "json"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert {f.read_text().strip() for f in levels} == {"high"}
    devices = json.loads((node / "var/lib/joulectl/state.json").read_text())["devices"]
    assert all("perfLevel" not in d["original"] and "perfLevel" not in d["current"] for d in devices.values())
