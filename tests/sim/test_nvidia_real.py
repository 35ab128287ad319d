"""NVIDIA as real drivers behave (issue 22): the real CLI against the fake nvidia-smi of rendered
nodes that print what real drivers print, and the fake's ``-q -x`` element tree against a
reference tree of element names written down from the facts (not copied from a capture).

Each wording joulectl reads reaches it through ``joulectl`` run as a subprocess (its ``Host``
runs the node's ``bin/nvidia-smi``), so the message table, the readback and the exit code are the
ones a user gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulectl.sim.profiles import BOARDS_DIR, ProfileSet
from tests.sim.conftest import render_one


def board(name: str) -> str:
    return os.path.join(BOARDS_DIR, name)


def joulectl(root: Path, *args: str, unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HWEMU_UNPRIVILEGED", "JOULECTL_ROOT")}
    env["NO_COLOR"] = "1"
    if unprivileged:
        env["HWEMU_UNPRIVILEGED"] = "1"
    return subprocess.run([sys.executable, "-m", "joulectl", "--root", str(root), *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def smi(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "bin" / "nvidia-smi"), *args], capture_output=True, text=True, timeout=30,
                          check=False)


def results(r: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(r.stdout)["results"]
    return rows


def nvml(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "state/nvml.json").read_text())
    return data


def two_gpus(tmp_path: Path, name: str, nvml_config: str | None = None, **gpus: Any) -> Path:
    over: dict[str, Any] = {"gpus": {"count": 2, **gpus}}
    if nvml_config:
        over["gpus"]["nvmlConfig"] = board(nvml_config)
    return render_one(tmp_path, "nvidia-h100-sxm-8gpu", name, over)


# -- each wording through the real CLI ------------------------------------------------------------


def test_not_supported_in_current_scope_is_unsupported(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "cloud", "h100-cloud.yaml")
    raw = smi(node, "-i", "0", "-pl", "420")
    assert (raw.returncode, raw.stdout) == (0, "Changing power management limit is not supported in current scope "
                                               "for GPU: 00000000:18:00.0.\nAll done.\n")
    r = joulectl(node, "cap", "--watts", "420", "-o", "json")
    assert r.returncode == 5, r.stderr
    assert [(x["device"], x["status"], x["message"]) for x in results(r)] == [
        ("0000:18:00.0", "unsupported", "nvidia-smi: Changing power management limit is not supported in current "
                                        "scope for GPU: 00000000:18:00.0."),
        ("0000:2a:00.0", "unsupported", "nvidia-smi: Changing power management limit is not supported in current "
                                        "scope for GPU: 00000000:2A:00.0."),
    ]
    assert [g["power"]["limitMw"] for g in nvml(node)["gpus"]] == [700000, 700000]


def test_not_supported_before_driver_535_is_unsupported(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "old", "h100-cloud.yaml")
    state = nvml(node)
    state["driverVersion"] = "530.30.02"
    (node / "state/nvml.json").write_text(json.dumps(state))
    raw = smi(node, "-i", "1", "-pl", "420")
    assert raw.stdout == ("Changing power management limit is not supported for GPU: 00000000:2A:00.0.\n"
                          "Treating as warning and moving on.\nAll done.\n")
    r = joulectl(node, "cap", "--watts", "420", "-d", "1", "-o", "json")
    assert r.returncode == 5, r.stderr
    assert [(x["status"], x["message"]) for x in results(r)] == [
        ("unsupported", "nvidia-smi: Changing power management limit is not supported for GPU: 00000000:2A:00.0.")]


def test_unprivileged_power_limit_is_refused(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "unpriv")
    raw = subprocess.run([str(node / "bin/nvidia-smi"), "-i", "00000000:18:00.0,00000000:2A:00.0", "-pl", "420"],
                         capture_output=True, text=True, env={**os.environ, "HWEMU_UNPRIVILEGED": "1"}, check=False)
    assert (raw.returncode, raw.stdout) == (4, "Failed to set power management limit for GPU 00000000:18:00.0: "
                                               "Insufficient Permissions\nTerminating early due to previous errors.\n")
    r = joulectl(node, "cap", "--watts", "420", "-o", "json", unprivileged=True)
    assert r.returncode == 4, r.stderr
    assert [(x["status"], x["message"]) for x in results(r)] == [
        ("refused", "nvidia-smi: Insufficient Permissions (run as root (sudo joulectl ...))")] * 2


def test_unprivileged_clock_lock_is_refused(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "unclk")
    raw = subprocess.run([str(node / "bin/nvidia-smi"), "-i", "0", "-lgc", "345,1485"], capture_output=True,
                         text=True, env={**os.environ, "HWEMU_UNPRIVILEGED": "1"}, check=False)
    assert (raw.returncode, raw.stdout) == (4, "The current user does not have permission to change clocks for GPU "
                                               "00000000:18:00.0.\nTerminating early due to previous errors.\n")
    r = joulectl(node, "governor", "set", "efficient", "--gpu", "-o", "json", unprivileged=True)
    assert r.returncode == 4, r.stderr
    assert [(x["status"], x["message"]) for x in results(r)] == [
        ("refused", "graphics clock lock: insufficient permissions")] * 2


def test_clock_lock_with_persistence_off_warns_and_applies(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "nopm", persistenceMode="disabled")
    raw = smi(node, "-i", "00000000:2A:00.0", "-lgc", "1980,1980")
    assert raw.returncode == 0
    assert raw.stdout == (
        "Warning: persistence mode is disabled on device 00000000:2A:00.0. See the Known Issues section of the "
        "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more information on how "
        "to enable persistence mode.\n"
        'GPU clocks set to "(gpuClkMin 1980, gpuClkMax 1980)" for GPU 00000000:2A:00.0\nAll done.\n')
    smi(node, "-i", "1", "-rgc")
    r = joulectl(node, "governor", "set", "peak", "--gpu", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in results(r)] == ["applied-unverified"] * 2
    assert [g["clocks"]["lockedGraphics"] for g in nvml(node)["gpus"]] == [{"minMhz": 1980, "maxMhz": 1980}] * 2


def test_reset_gpu_clocks_prints_only_all_done(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "rgc")
    assert joulectl(node, "governor", "set", "efficient", "--gpu").returncode == 0
    raw = smi(node, "-i", "0", "-rgc")
    assert (raw.returncode, raw.stdout) == (0, "All done.\n")
    assert smi(node, "-i", "0", "-lgc", "345,1485").returncode == 0
    r = joulectl(node, "governor", "reset", "--gpu", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in results(r)] == ["applied", "applied"]
    assert [g["clocks"]["lockedGraphics"] for g in nvml(node)["gpus"]] == [None, None]


# -- the enforced limit below the requested one: discover, cap, plan --------------------------------


def test_enforced_below_requested_in_discover_cap_and_plan(tmp_path: Path) -> None:
    over = {"gpus": {"nvmlConfig": board("h100-platform-500w.yaml")}}
    node = render_one(tmp_path, "nvidia-h100-sxm-8gpu", "plat", over)
    x = ET.fromstring(smi(node, "-q", "-x").stdout)
    readings = x.find("gpu/gpu_power_readings")
    assert readings is not None
    assert (readings.findtext("current_power_limit"), readings.findtext("requested_power_limit")) == (
        "500.00 W", "700.00 W")

    d = joulectl(node, "discover", "-o", "yaml")
    assert d.returncode == 0, d.stderr
    hw = yaml.safe_load(d.stdout)
    gpu = hw["status"]["gpu"]
    assert (gpu["currentCapWatts"], gpu["enforcedCapWatts"]) == (700, 500)
    assert {(dev["currentCapWatts"], dev["enforcedCapWatts"]) for dev in gpu["devices"]} == {(700, 500)}
    from joulectl.sim.clusterspec import parse_spec
    from joulectl.sim.k8s import node_hardware
    from tests.sim.conftest import spec_doc

    (spec_node,) = parse_spec(spec_doc([{"name": "plat", "profile": "nvidia-h100-sxm-8gpu", "count": 1,
                                         "overrides": over}]), "test-spec").nodes
    simulated = node_hardware(spec_node)["status"]["gpu"]  # what the simulated cluster's NodeHardware says
    assert (simulated["currentCapWatts"], simulated["enforcedCapWatts"]) == (700, 500)
    table = joulectl(node, "discover").stdout
    assert table.count("700 W (enforced 500 W)") == 8

    r = joulectl(node, "cap", "--watts", "600", "-d", "0", "-d", "1", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [(x["status"], x["afterWatts"], x["message"]) for x in results(r)] == [
        ("applied", 600, "requested 600 W; enforced limit 500 W (another limiter holds the GPU below it)")] * 2
    r = joulectl(node, "cap", "--watts", "450", "-d", "2", "-o", "json")
    assert [(x["status"], x["afterWatts"], x["message"]) for x in results(r)] == [("applied", 450, "")]
    limits = [(g["power"]["limitMw"], g["power"]["enforcedLimitMw"]) for g in nvml(node)["gpus"][:4]]
    assert limits == [(600000, 500000), (600000, 500000), (450000, 450000), (700000, 500000)]

    hw_file = tmp_path / "hw.yaml"
    hw_file.write_text(d.stdout)
    name = hw["metadata"]["name"]
    nodes = tmp_path / "nodes.yaml"
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
    res = {"cpu": "224", "nvidia.com/gpu": "8"}
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
         "status": {"capacity": res, "allocatable": res}}]}))
    p = joulectl(node, "plan", "--nodes", str(nodes), "--hardware", str(hw_file), "-o", "json")
    assert p.returncode == 0, p.stderr
    (twin,) = json.loads(p.stdout)["items"]
    pm = twin["status"]["powerMeasurement"]
    assert (pm["gpuTdpW"], pm["gpuCappedPowerW"]) == (5600, 4000)


# -- nvidia-smi -r -----------------------------------------------------------------------------------


def test_gpu_reset_puts_clocks_and_limits_back(tmp_path: Path) -> None:
    node = two_gpus(tmp_path, "reset")
    assert smi(node, "-i", "0", "-pl", "420").returncode == 0
    assert smi(node, "-i", "0", "-lgc", "1000,1500").returncode == 0
    assert smi(node, "-i", "0", "-lmc", "1593,1593").returncode == 0
    assert smi(node, "-i", "1", "-pl", "500").returncode == 0
    raw = smi(node, "-r", "-i", "00000000:18:00.0")
    assert (raw.returncode, raw.stdout) == (0, "GPU 00000000:18:00.0 was successfully reset.\nAll done.\n")
    g0, g1 = nvml(node)["gpus"]
    assert (g0["power"]["limitMw"], g0["power"]["enforcedLimitMw"]) == (700000, 700000)
    assert (g0["clocks"]["lockedGraphics"], g0["clocks"]["lockedMemory"], g0["clocks"]["memoryMhz"]) == (
        None, None, 2619)
    assert g1["power"]["limitMw"] == 500000  # the other GPU keeps its writes
    denied = subprocess.run([str(node / "bin/nvidia-smi"), "-r"], capture_output=True, text=True,
                            env={**os.environ, "HWEMU_UNPRIVILEGED": "1"}, check=False)
    assert (denied.returncode, denied.stdout) == (4, "Failed to reset GPU 00000000:18:00.0: Insufficient "
                                                     "Permissions\nTerminating early due to previous errors.\n")
    assert smi(node, "-r").stdout == ("GPU 00000000:18:00.0 was successfully reset.\n"
                                      "GPU 00000000:2A:00.0 was successfully reset.\nAll done.\n")
    assert nvml(node)["gpus"][1]["power"]["limitMw"] == 700000


# -- the -q -x element tree against a reference written from the facts ------------------------------

#: The elements joulectl reads in ``nvidia-smi -q -x`` of the newer schema (R535 and later, as the
#: real captures of seven data-center boards print them), each with the children it must have, in
#: the order the real tool prints them. Written from docs/hardware.md §5.3 and issue 22; not
#: copied from a capture.
REFERENCE: dict[str, list[str]] = {
    "nvidia_smi_log": ["timestamp", "driver_version", "cuda_version", "attached_gpus", "gpu"],
    "gpu": ["product_name", "product_brand", "product_architecture", "persistence_mode", "mig_mode", "uuid", "pci",
            "performance_state", "gpu_power_readings", "gpu_memory_power_readings", "module_power_readings",
            "clocks", "max_clocks", "supported_clocks"],
    "gpu/mig_mode": ["current_mig", "pending_mig"],
    "gpu/pci": ["pci_bus", "pci_device", "pci_domain", "pci_device_id", "pci_bus_id"],
    "gpu/gpu_power_readings": ["power_state", "average_power_draw", "instant_power_draw", "current_power_limit",
                               "requested_power_limit", "default_power_limit", "min_power_limit", "max_power_limit"],
    "gpu/module_power_readings": ["power_state", "average_power_draw", "current_power_limit",
                                  "requested_power_limit", "default_power_limit", "min_power_limit",
                                  "max_power_limit"],
    "gpu/clocks": ["graphics_clock", "sm_clock", "mem_clock", "video_clock"],
    "gpu/max_clocks": ["graphics_clock", "sm_clock", "mem_clock", "video_clock"],
    "gpu/supported_clocks": ["supported_mem_clock"],
    "gpu/supported_clocks/supported_mem_clock": ["value", "supported_graphics_clock"],
}

#: nvidia-smi's spelling of each architecture (``<product_architecture>``).
ARCH_NAMES = {"ampere": "Ampere", "ada": "Ada Lovelace", "ada_lovelace": "Ada Lovelace", "hopper": "Hopper",
              "blackwell": "Blackwell", "turing": "Turing"}

BOARDS = sorted(p.name for p in Path(BOARDS_DIR).glob("*.yaml"))
NVIDIA_PROFILES = [n for n in ProfileSet().names() if ProfileSet().get(n).gpu_vendor == "nvidia"]


def _in_order(children: list[str], wanted: list[str]) -> list[str]:
    """``wanted`` in the order found among ``children`` (each once)."""
    seen: list[str] = []
    for c in children:
        if c in wanted and c not in seen:
            seen.append(c)
    return seen


def _check_tree(x: ET.Element) -> None:
    for path, wanted in REFERENCE.items():
        nodes = [x] if path == "nvidia_smi_log" else x.findall(path)
        assert nodes, f"no <{path}>"
        for node in nodes:
            children = [c.tag for c in node]
            assert _in_order(children, wanted) == wanted, f"<{path}>: {children}"


def _expected(board_doc: dict[str, Any]) -> dict[str, Any]:
    d = board_doc["device_defaults"]
    p = d["power"]
    mems = d["supported_clocks"]["memory_clocks"]
    return {
        "arch": ARCH_NAMES[str(d["architecture"]).lower()],
        "mig": "N/A" if not d["mig"]["capable"] else "Disabled",
        "average": "N/A" if p.get("average_draw") is False else f"{p['current_draw_mw'] / 1000:.2f} W",
        "mems": [f"{m['freq_mhz']} MHz" for m in sorted(mems, key=lambda m: -m["freq_mhz"])],
        "graphics": [len(m["graphics_clocks"]) for m in sorted(mems, key=lambda m: -m["freq_mhz"])],
        "buses": ["0000" + str(dev["pci"]["bus_id"]).upper() for dev in board_doc["devices"]],
    }


@pytest.mark.parametrize("name", BOARDS)
def test_each_board_prints_the_real_element_tree(tmp_path: Path, name: str) -> None:
    doc = yaml.safe_load(Path(board(name)).read_text())
    over: dict[str, Any] = {"gpus": {"nvmlConfig": board(name), "mig": {"capable": True}}}
    node = render_one(tmp_path, "nvidia-h100-sxm-8gpu", "b", over)
    r = smi(node, "-q", "-x")
    assert r.returncode == 0
    x = ET.fromstring(r.stdout)
    _check_tree(x)
    want = _expected(doc)
    gpus = x.findall("gpu")
    assert [g.get("id") for g in gpus] == want["buses"]
    assert [g.findtext("pci/pci_bus_id") for g in gpus] == want["buses"]
    g = gpus[0]
    assert g.findtext("product_architecture") == want["arch"]
    assert (g.findtext("mig_mode/current_mig"), g.findtext("mig_mode/pending_mig")) == (want["mig"], want["mig"])
    assert g.findtext("gpu_power_readings/average_power_draw") == want["average"]
    assert g.findtext("gpu_power_readings/instant_power_draw", "").endswith(" W")
    mems = g.findall("supported_clocks/supported_mem_clock")
    assert [m.findtext("value") for m in mems] == want["mems"]
    assert [len(m.findall("supported_graphics_clock")) for m in mems] == want["graphics"]
    for m in mems:  # highest first
        clocks = [int(str(c.text).split()[0]) for c in m.findall("supported_graphics_clock")]
        assert clocks == sorted(clocks, reverse=True)


@pytest.mark.parametrize("profile", NVIDIA_PROFILES)
def test_each_builtin_nvidia_profile_prints_the_real_element_tree(tmp_path: Path, profile: str) -> None:
    node = render_one(tmp_path, profile, "p")
    x = ET.fromstring(smi(node, "-q", "-x").stdout)
    _check_tree(x)
    for g in x.findall("gpu"):
        assert g.findtext("product_architecture") in ARCH_NAMES.values()


def test_real_values_of_the_boards() -> None:
    """The facts of issue 22 the boards carry: literal values."""
    def first(name: str) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(Path(board(name)).read_text())
        return doc

    l40s = first("l40s.yaml")["device_defaults"]
    assert [m["freq_mhz"] for m in l40s["supported_clocks"]["memory_clocks"]] == [9001, 405]
    t4 = first("t4.yaml")
    assert [m["freq_mhz"] for m in t4["device_defaults"]["supported_clocks"]["memory_clocks"]] == [5001, 405]
    assert t4["devices"][3]["pci"]["bus_id"] == "0000:00:1E.0"
    assert first("gb200.yaml")["devices"][0]["pci"]["bus_id"] == "0008:01:00.0"
    a100 = first("a100.yaml")["device_defaults"]
    assert len(a100["supported_clocks"]["memory_clocks"][0]["graphics_clocks"]) == 81
    assert a100["power"]["average_draw"] is False


def test_ada_lovelace_spelling_is_ada_and_the_governor_is_eligible(tmp_path: Path) -> None:
    """mock-NVML accepts ``ada_lovelace`` for ``ada``: nvidia-smi prints ``Ada Lovelace`` (was ``Unknown``)."""
    text = Path(board("l40s.yaml")).read_text().replace('architecture: "ada"', 'architecture: "ada_lovelace"')
    assert 'architecture: "ada_lovelace"' in text
    mine = tmp_path / "l40s-ada-lovelace.yaml"
    mine.write_text(text)
    node = render_one(tmp_path, "nvidia-l40s-4gpu", "ada", {"gpus": {"nvmlConfig": str(mine), "count": 1}})
    x = ET.fromstring(smi(node, "-q", "-x").stdout)
    assert x.findtext("gpu/product_architecture") == "Ada Lovelace"
    d = joulectl(node, "discover", "-o", "json")
    (dev,) = json.loads(d.stdout)["status"]["gpu"]["devices"]
    assert (dev["architecture"], dev.get("mig")) == ("ada_lovelace", None)
    # Ada has no run-time memory clock lock, so no `low` (issue 16: a node lists only presets every GPU takes).
    assert dev["governorPresets"] == ["auto", "efficient", "peak"]
