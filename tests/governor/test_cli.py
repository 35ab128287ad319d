"""`joulectl governor` through the real CLI: real discover on kernel-ABI trees, the fake nvidia-smi
as a subprocess, output formats, exit codes and the one-line messages of every failure."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trees
from govkit import H100_TABLE, L40S_TABLE, nvidia_node, smi_state, tick

from joulectl.errors import ExitCode, JoulectlError
from joulectl.host import Host
from joulectl.ops import governor as gov
from joulectl.ops.discover import inventory
from joulectl.ops.journal import Journal, journal_ahead

Cli = Callable[..., Any]


def _json(r: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def _journal(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "var/lib/joulectl/state.json").read_text())
    return data


# -- AMD --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "level"), [("auto", "auto"), ("sustained", "profile_standard"),
                                                ("efficient", "manual"), ("low", "low"), ("peak", "profile_peak")])
def test_every_preset_on_mi300x(tmp_path: Path, cli: Cli, preset: str, level: str) -> None:
    root = trees.amd_mi300x_x8(tmp_path / "n")
    if preset == "auto":
        for b in trees.MI300X_BUSES:
            (root / f"sys/bus/pci/devices/{b}/power_dpm_force_performance_level").write_text("low\n")
    r = cli("--root", root, "governor", "set", preset, "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = _json(r)
    assert (doc["kind"], doc["action"], doc["preset"], doc["dryRun"]) == ("GovernorResult", "set", preset, False)
    assert len(doc["results"]) == 8
    expected = "applied-unverified" if preset == "efficient" else "applied"
    assert {x["status"] for x in doc["results"]} == {expected}
    assert doc["summary"] == {expected: 8}
    for b in trees.MI300X_BUSES:
        assert (root / f"sys/bus/pci/devices/{b}/power_dpm_force_performance_level").read_text() == level
    if preset == "efficient":
        # 75 % of 2100 MHz is 1575: levels 0 (500) and 1 (1300)
        assert (root / f"sys/bus/pci/devices/{trees.MI300X_BUSES[0]}/pp_dpm_sclk").read_text() == "0 1"
        assert doc["results"][0]["after"] == "manual (sclk levels 0 1 (500-1300 MHz), ceiling 1575 MHz)"


def test_mi250x_both_dies_and_w7900(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    r = cli("--root", root, "governor", "set", "low", "-o", "json")
    assert r.exit_code == 0
    assert [x["status"] for x in _json(r)["results"]] == ["applied"] * 8
    root = trees.amd_apu_and_w7900(tmp_path / "w")
    r = cli("--root", root, "governor", "set", "efficient", "-o", "json")
    assert r.exit_code == 0
    (res,) = _json(r)["results"]
    # 75 % of 2495 MHz is 1871.25 -> 1871: levels 0 (500) and 1 (1800)
    assert res["after"] == "manual (sclk levels 0 1 (500-1800 MHz), ceiling 1871 MHz)"


def test_amd_show_and_reset_leave_the_operators_level(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi300x_x8(tmp_path / "n")
    hand = root / f"sys/bus/pci/devices/{trees.MI300X_BUSES[7]}/power_dpm_force_performance_level"
    hand.write_text("profile_min_sclk\n")
    assert cli("--root", root, "governor", "set", "peak", "--device", "0", "--device", "1").exit_code == 0
    r = cli("--root", root, "governor", "show", "--gpu", "-o", "json")
    assert r.exit_code == 0
    rows = _json(r)["results"]
    assert [(x["setBy"], x["preset"], x["inForce"]) for x in rows[:3]] == [
        ("joulectl", "peak", "profile_peak"), ("joulectl", "peak", "profile_peak"), (None, None, "auto")]
    assert (rows[7]["setBy"], rows[7]["message"]) == ("operator", "set by the operator, not by joulectl")
    r = cli("--root", root, "governor", "reset", "--gpu", "-o", "json")
    assert r.exit_code == 0
    msgs = [x["message"] for x in _json(r)["results"]]
    assert msgs[:2] == ["performance level set by joulectl restored"] * 2
    assert msgs[7] == "performance level profile_min_sclk locked by the operator, not by joulectl: left alone"
    assert hand.read_text() == "profile_min_sclk\n"
    level0 = root / f"sys/bus/pci/devices/{trees.MI300X_BUSES[0]}/power_dpm_force_performance_level"
    assert level0.read_text() == "auto"


def test_table_output(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    r = cli("--root", root, "governor", "set", "peak", "--device", "0")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["DEVICE", "MODEL", "PRESET", "BEFORE", "AFTER", "STATUS", "MESSAGE"]
    assert lines[1].split()[:1] == ["0000:c1:00.0"]
    assert "auto  " in lines[1] and lines[1].rstrip().endswith("applied")
    r = cli("--root", root, "governor", "show", "--gpu")
    assert r.stdout.splitlines()[0] == "node mi250x-node-01: GPU presets every GPU accepts: auto, sustained, " \
                                       "efficient, low, peak"


# -- NVIDIA through the fake nvidia-smi ------------------------------------------------------------


def test_h100_sustained_efficient_show_verifies_after_tick(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "h"
    buses = nvidia_node(root, [H100_TABLE, H100_TABLE])
    r = cli("--root", root, "governor", "set", "sustained")
    assert r.exit_code == 5
    assert r.stderr == "joulectl: error: 0 of 2 targets done; 2 blocked (see MESSAGE)\n"
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps({"NVIDIA H100 80GB HBM3": {"graphicsMHz": 1755}}))
    r = cli("--root", root, "governor", "set", "sustained", "--model-presets", presets, "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [(x["status"], x["after"]) for x in _json(r)["results"]] == [
        ("applied-unverified", "graphics 1755 MHz")] * 2
    r = cli("--root", root, "governor", "show", "--gpu", "--model-presets", presets, "-o", "json")
    doc = _json(r)
    assert doc["gpu"]["presets"] == ["auto", "sustained", "efficient", "low", "peak"]
    assert [x["status"] for x in doc["results"]] == ["applied-unverified"] * 2
    tick(root)
    r = cli("--root", root, "governor", "show", "--gpu", "-o", "json")
    assert [(x["status"], x["clocks"]) for x in _json(r)["results"]] == [
        ("applied", "graphics 1755 MHz, memory 2619 MHz, 100 % busy")] * 2
    assert _journal(root)["devices"][buses[0]]["current"]["governorPreset"] == {
        "preset": "sustained", "status": "applied"}
    # efficient replaces the lock; reset undoes it with -rgc
    r = cli("--root", root, "governor", "set", "efficient", "-o", "json")
    assert _json(r)["results"][0]["before"] == "graphics 1755 MHz"
    assert _json(r)["results"][0]["after"] == "graphics 345-1485 MHz"
    r = cli("--root", root, "governor", "reset", "-o", "json")
    assert r.exit_code == 0
    gpu_rows = [x for x in _json(r)["results"] if x["kind"] == "gpu"]
    assert [x["status"] for x in gpu_rows] == ["applied", "applied"]
    assert all(g["lgc"] is None for g in smi_state(root)["gpus"].values())


def test_l40s_low_memory_bound_and_ada_lmc_refusal(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "ok"
    nvidia_node(root, [L40S_TABLE], product="NVIDIA L40S", architecture="Ada Lovelace")
    r = cli("--root", root, "governor", "set", "low", "-o", "json")
    assert r.exit_code == 0
    assert _json(r)["results"][0]["after"] == "graphics 210-645 MHz, memory 405 MHz"
    root = tmp_path / "ada"
    (bus,) = nvidia_node(root, [L40S_TABLE], product="NVIDIA L40S", architecture="Ada Lovelace",
                         lmc_unsupported=True)
    r = cli("--root", root, "governor", "set", "low", "-o", "json")
    assert r.exit_code == 5
    (res,) = _json(r)["results"]
    assert res["status"] == "unsupported"
    assert res["message"] == ("memory clock lock: Setting locked memory clocks is not supported for GPU "
                              "00000000:18:00.0; graphics lock set by joulectl undone")
    assert smi_state(root)["gpus"][bus]["lgc"] is None
    assert _journal(root)["devices"][bus]["current"] == {}
    assert r.stderr == "joulectl: error: 0 of 1 targets done; 1 unsupported (see MESSAGE)\n"


def test_unprivileged_tools_exit_4(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "h"
    nvidia_node(root, [H100_TABLE, H100_TABLE])
    monkeypatch.setenv("HWEMU_UNPRIVILEGED", "1")
    r = cli("--root", root, "governor", "set", "peak")
    assert r.exit_code == 4
    assert r.stderr == ("joulectl: error: no privilege to write: every write was refused (2 devices)\n"
                        "joulectl: hint: run as root (sudo joulectl ...)\n")


def test_hand_lock_survives_reset(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "h"
    buses = nvidia_node(root, [H100_TABLE, H100_TABLE])
    st = smi_state(root)
    st["gpus"][buses[0]]["lgc"] = [1000, 1200]  # nvidia-smi -i <bus> -lgc 1000,1200 by the operator
    (root / "state" / "smi.json").write_text(json.dumps(st))
    assert cli("--root", root, "governor", "set", "peak", "--device", buses[1]).exit_code == 0
    r = cli("--root", root, "governor", "reset", "--gpu", "-o", "json")
    assert r.exit_code == 0
    assert [(x["device"], x["message"]) for x in _json(r)["results"]] == [
        (buses[0], "nothing set by joulectl"), (buses[1], "graphics locks set by joulectl undone")]
    assert smi_state(root)["gpus"][buses[0]]["lgc"] == [1000, 1200]
    assert not [c for c in smi_state(root)["calls"] if buses[0] in c or buses[0].upper() in c]


def test_pre_ampere_blocked(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "t4"
    nvidia_node(root, [{5001: [1590, 1200, 300]}], product="Tesla T4", architecture="Turing")
    r = cli("--root", root, "governor", "set", "efficient", "-o", "json")
    assert r.exit_code == 5
    assert _json(r)["results"][0]["message"] == "no governor for Turing GPUs: clock locks need Ampere or newer"


def test_dry_run_writes_nothing(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "h"
    nvidia_node(root, [H100_TABLE])
    r = cli("--root", root, "governor", "set", "low", "--dry-run", "-o", "yaml")
    assert r.exit_code == 0
    assert "status: planned" in r.stdout and "dryRun: true" in r.stdout
    assert not [c for c in smi_state(root)["calls"] if c[:1] == ["-i"]]
    assert not (root / "var/lib/joulectl/state.json").exists()


# -- Intel and CPUs ----------------------------------------------------------------------------------


def test_intel_gpus_without_frequency_files_blocked(tmp_path: Path, cli: Cli) -> None:
    root = trees.intel_flex170_i915_x4(tmp_path / "f")
    r = cli("--root", root, "governor", "set", "efficient", "-o", "json")
    assert r.exit_code == 5
    assert {x["message"].split(" (")[0] for x in _json(r)["results"] if x["status"] == "blocked"} == {
        f"no GT frequency files under /sys/bus/pci/devices/{b}" for b in trees.FLEX_BUSES}
    assert r.stderr == "joulectl: error: 0 of 4 targets done; 4 blocked (see MESSAGE)\n"


@pytest.mark.parametrize(("preset", "governor", "epp"), [("performance", "performance", "balance_performance"),
                                                         ("balanced", "powersave", "balance_performance"),
                                                         ("efficiency", "powersave", "power")])
def test_cpu_presets(tmp_path: Path, cli: Cli, preset: str, governor: str, epp: str) -> None:
    root = trees.intel_2s_host(tmp_path / "c")
    r = cli("--root", root, "governor", "set", preset, "-o", "json")  # a CPU preset needs no --cpu
    assert r.exit_code == 0, r.stderr
    doc = _json(r)
    assert len(doc["results"]) == 16
    assert {x["kind"] for x in doc["results"]} == {"cpu"}
    # the host runs powersave/balance_performance: balanced is already in force
    assert {x["status"] for x in doc["results"]} == {"unchanged" if preset == "balanced" else "applied"}
    pol = root / "sys/devices/system/cpu/cpufreq/policy15"
    assert (pol / "scaling_governor").read_text().strip() == governor
    assert (pol / "energy_performance_preference").read_text().strip() == epp
    r = cli("--root", root, "governor", "reset", "--cpu", "-o", "json")
    assert r.exit_code == 0
    assert (pol / "scaling_governor").read_text().strip() == "powersave"
    assert (pol / "energy_performance_preference").read_text().strip() == "balance_performance"


# -- failures ------------------------------------------------------------------------------------------


def test_unknown_presets_exit_2(tmp_path: Path, cli: Cli) -> None:
    root = trees.intel_2s_host(tmp_path / "c")
    r = cli("--root", root, "governor", "set", "turbo")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: PRESET: unknown preset 'turbo' (GPU presets: auto, "
                                          "sustained, efficient, low, peak; CPU presets: performance, balanced, "
                                          "efficiency)\n")
    r = cli("--root", root, "governor", "set", "peak", "--cpu")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: PRESET: unknown CPU preset 'peak' (CPU presets: "
                                          "performance, balanced, efficiency)\n")
    r = cli("--root", root, "governor", "set", "balanced", "--gpu")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: PRESET: unknown GPU preset 'balanced' (GPU presets: "
                                          "auto, sustained, efficient, low, peak)\n")


def test_no_gpu_and_unmatched_device_exit_3(tmp_path: Path, cli: Cli) -> None:
    root = trees.intel_2s_host(tmp_path / "c")
    r = cli("--root", root, "governor", "set", "peak")
    assert (r.exit_code, r.stderr) == (3, "joulectl: error: no GPU found on this node\n")
    root = trees.amd_mi250x_x4(tmp_path / "m")
    r = cli("--root", root, "governor", "set", "peak", "--device", "H100")
    assert (r.exit_code, r.stderr) == (3, "joulectl: error: --device H100 matched no GPU (this node has 8 GPUs)\n")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("[1]", "expected a JSON object, found list"),
    ('{"NVIDIA H100 80GB HBM3": "fast"}', 'NVIDIA H100 80GB HBM3: expected an object like {"graphicsMHz": 1755}, '
                                          "found str"),
    ('{"NVIDIA H100 80GB HBM3": {"graphicsMHz": -5}}',
     "NVIDIA H100 80GB HBM3.graphicsMHz: must be a positive whole number of MHz, found -5"),
    ('{"NVIDIA H100 80GB HBM3": {"memoryMHz": 1593}}',
     "NVIDIA H100 80GB HBM3.graphicsMHz: missing (the sustained graphics clock in MHz)"),
    ('{"NVIDIA H100 80GB HBM3": {"graphicsMHz": 1755, "mhz": 1}}',
     "NVIDIA H100 80GB HBM3.mhz: unknown field (known: graphicsMHz, memoryMHz)"),
])
def test_bad_model_presets_file_exit_2(tmp_path: Path, cli: Cli, content: str, message: str) -> None:
    root = tmp_path / "h"
    nvidia_node(root, [H100_TABLE])
    f = tmp_path / "presets.json"
    f.write_text(content)
    r = cli("--root", root, "governor", "set", "sustained", "--model-presets", f)
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {f}: {message}\n")


def test_missing_model_presets_file_and_env(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "h"
    nvidia_node(root, [H100_TABLE])
    r = cli("--root", root, "governor", "set", "sustained", "--model-presets", tmp_path / "nope.json")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"joulectl: error: {tmp_path / 'nope.json'}: ")
    monkeypatch.setenv("GPU_GOVERNOR_MODEL_PRESETS_JSON", '{"NVIDIA H100 80GB HBM3": 1755}')
    r = cli("--root", root, "governor", "set", "sustained", "-o", "json")
    assert r.exit_code == 0
    assert _json(r)["results"][0]["after"] == "graphics 1755 MHz"
    monkeypatch.setenv("GPU_GOVERNOR_MODEL_PRESETS_JSON", "{")
    r = cli("--root", root, "governor", "set", "sustained")
    assert r.exit_code == 2
    assert r.stderr.startswith("joulectl: error: $GPU_GOVERNOR_MODEL_PRESETS_JSON: invalid JSON: ")


def test_lock_busy_exit_7(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    (root / "run/joulectl").mkdir(parents=True)
    fd = os.open(root / "run/joulectl/lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = cli("--root", root, "governor", "set", "low", "--wait", "0")
    finally:
        os.close(fd)
    assert r.exit_code == 7
    assert r.stderr.splitlines()[0] == ("joulectl: error: the node lock /run/joulectl/lock is held by another "
                                        "joulectl run (waited 0 s)")


def test_bad_output_format_and_missing_root(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    r = cli("--root", root, "governor", "show", "-o", "xml")
    assert r.exit_code == 2
    assert r.stderr == ("joulectl: error: -o: 'xml' is not one of table, wide, json, yaml, name, csv, "
                        "jsonpath=..., custom-columns=...\n")
    r = cli("--root", tmp_path / "missing", "governor", "show")
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {tmp_path / 'missing'}: --root: host root does not "
                                          "exist or is not a directory\n")


def test_corrupt_journal_is_set_aside_with_a_warning(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    (root / "var/lib/joulectl").mkdir(parents=True)
    (root / "var/lib/joulectl/state.json").write_text("{garbage")
    r = cli("--root", root, "governor", "set", "low", "--device", "0")
    assert r.exit_code == 0
    assert r.stderr.startswith("joulectl: warning: the journal was unreadable and was set aside as "
                               "/var/lib/joulectl/state.json.corrupt-")
    assert [p.name for p in (root / "var/lib/joulectl").iterdir() if "corrupt" in p.name]


def test_show_warns_when_it_cannot_record_the_verification(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "h"
    buses = nvidia_node(root, [H100_TABLE])
    assert cli("--root", root, "governor", "set", "peak").exit_code == 0
    tick(root)
    fd = os.open(root / "run/joulectl/lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = cli("--root", root, "governor", "show", "--wait", "0", "-o", "json")
    finally:
        os.close(fd)
    assert r.exit_code == 0
    assert _json(r)["results"][0]["status"] == "applied"  # verified, but not recorded
    assert r.stderr.startswith("joulectl: warning: could not record the verified locks in the journal: the node "
                               "lock /run/joulectl/lock is held by another joulectl run")
    assert _journal(root)["devices"][buses[0]]["current"]["governorPreset"]["status"] == "applied-unverified"
    r = cli("--root", root, "governor", "show", "-o", "json")
    assert _journal(root)["devices"][buses[0]]["current"]["governorPreset"]["status"] == "applied"
    # once verified, a show has nothing to record
    before = (root / "var/lib/joulectl/state.json").read_text()
    assert cli("--root", root, "governor", "show").exit_code == 0
    assert (root / "var/lib/joulectl/state.json").read_text() == before


def test_tool_timeout_is_an_error(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "h"
    buses = nvidia_node(root, [H100_TABLE, H100_TABLE])
    st = smi_state(root)
    st["gpus"][buses[1]]["hang"] = True
    (root / "state" / "smi.json").write_text(json.dumps(st))
    r = cli("--root", root, "--tool-timeout", "1", "governor", "set", "peak", "-o", "json")
    assert r.exit_code == 5
    assert [(x["status"], x["message"]) for x in _json(r)["results"]] == [
        ("applied-unverified", "a lock cannot be read back: `joulectl governor show` verifies it"),
        ("error", "graphics clock lock: nvidia-smi timed out after 1 s"),
    ]
    assert r.stderr == "joulectl: error: 1 of 2 targets done; 1 error (see MESSAGE)\n"


def test_reset_dry_run_and_device_selection(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi300x_x8(tmp_path / "n")
    assert cli("--root", root, "governor", "set", "low").exit_code == 0
    # amd-pstate-epp lists only "performance" as EPP under performance: efficiency still goes through
    assert cli("--root", root, "governor", "set", "efficiency").exit_code == 0
    r = cli("--root", root, "governor", "reset", "--device", "0", "--dry-run", "-o", "json")
    assert r.exit_code == 0
    doc = _json(r)
    # --device alone means GPUs only
    assert [(x["device"], x["status"], x["before"], x["after"]) for x in doc["results"]] == [
        (trees.MI300X_BUSES[0], "planned", "low", "auto")]
    level = root / f"sys/bus/pci/devices/{trees.MI300X_BUSES[0]}/power_dpm_force_performance_level"
    assert level.read_text() == "low"
    r = cli("--root", root, "governor", "reset", "-o", "json")
    doc = _json(r)
    assert {x["status"] for x in doc["results"]} == {"applied"}
    # reset takes the default scope of set: the GPUs; the CPUs with --cpu
    assert {x["kind"] for x in doc["results"]} == {"gpu"}
    assert level.read_text() == "auto"
    doc = _json(cli("--root", root, "governor", "reset", "--cpu", "-o", "json"))
    assert ({x["kind"] for x in doc["results"]}, {x["status"] for x in doc["results"]}) == ({"cpu"}, {"applied"})


def test_show_and_dry_run_leave_a_corrupt_journal_in_place(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    (root / "var/lib/joulectl").mkdir(parents=True)
    (root / "var/lib/joulectl/state.json").write_text("{garbage")
    for args in (("show",), ("set", "low", "--dry-run"), ("reset", "--dry-run")):
        r = cli("--root", root, "governor", *args)
        assert r.exit_code == 0, args
        assert r.stderr == ("joulectl: warning: the journal /var/lib/joulectl/state.json is corrupt: what joulectl "
                            "set is unknown (the next set or reset moves it aside)\n")
    assert [p.name for p in (root / "var/lib/joulectl").iterdir()] == ["state.json"]


def test_unreadable_journal(tmp_path: Path, cli: Cli) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    (root / "var/lib/joulectl/state.json").mkdir(parents=True)  # EISDIR: cannot be read
    r = cli("--root", root, "governor", "show", "--gpu", "-o", "json")
    assert r.exit_code == 0
    assert r.stderr.startswith("joulectl: warning: cannot read the journal /var/lib/joulectl/state.json: ")
    r = cli("--root", root, "governor", "set", "low")
    assert r.exit_code == 2  # bad input on the node, not an internal error (issue 12, item 9)
    assert r.stderr == ("joulectl: error: /var/lib/joulectl/state.json: the journal is not a regular file "
                        "(a directory); move it away\n")


@pytest.mark.parametrize(("err", "code", "text"), [(errno.EROFS, ExitCode.REFUSED, "Read-only file system"),
                                                   (errno.ENOSPC, ExitCode.INTERNAL, "No space left on device")])
def test_journal_that_cannot_be_saved_ahead_stops_before_any_write(tmp_path: Path, err: int, code: ExitCode,
                                                                   text: str) -> None:
    """The originals are journaled before the first write; when that save fails nothing is written."""
    class NoJournal(Host):
        def write_atomic(self, host_path: str, data: str, *, mode: int = 0o644, durable: bool = True) -> None:
            raise OSError(err, os.strerror(err))

    root = trees.amd_mi250x_x4(tmp_path / "m")
    levels = sorted(root.glob("sys/bus/pci/devices/*/power_dpm_force_performance_level"))
    before = [p.read_text() for p in levels]
    with pytest.raises(JoulectlError) as exc:
        gov.run_set(NoJournal(str(root)), "low", gpu=True, cpu=False, selectors=(), dry_run=False, wait_s=0,
                    model_presets_path=None, warnings=[])
    assert str(exc.value) == (f"cannot save the journal /var/lib/joulectl/state.json before writing: {text}; "
                              "nothing changed")
    assert exc.value.exit_code == code
    assert [p.read_text() for p in levels] == before


def test_the_write_ahead_journal_has_the_originals_and_the_targets(tmp_path: Path) -> None:
    root = trees.amd_mi250x_x4(tmp_path / "m")
    host = Host(str(root))
    inv = inventory(host)
    journal = Journal()
    intents = gov.plan_intents(host, inv, journal, "low", selectors=("0",))
    ahead = journal_ahead(journal, intents)
    assert journal.devices == {}  # the run's own journal is untouched
    (bus,) = ahead.devices
    assert (ahead.original(bus, "perfLevel"), ahead.current(bus, "perfLevel"), ahead.pending(bus, "perfLevel")) == (
        "auto", None, ["low"])
    cpu = gov.plan_intents(host, inv, journal, "efficiency", gpu=False, cpu=True)
    assert len(cpu) == 2 * 16  # governor and EPP of each of the 16 policies
    assert {(i.setting, i.before, i.value) for i in cpu} == {("cpuGovernor", "performance", "powersave"),
                                                            ("epp", "performance", "power")}


def test_the_library_calls_target_the_gpus_unless_told(tmp_path: Path) -> None:
    # plan_intents and apply_preset without gpu/cpu act on the GPUs (as `governor set` does): a
    # CPU-only preset is then an unknown GPU preset, exit 2, nothing planned or written
    root = trees.amd_mi250x_x4(tmp_path / "m")
    host = Host(str(root))
    inv = inventory(host)
    for call in (lambda: gov.plan_intents(host, inv, Journal(), "efficiency"),
                 lambda: gov.apply_preset(host, inv, Journal(), "efficiency", dry_run=True)):
        with pytest.raises(JoulectlError) as exc:
            call()
        assert str(exc.value) == ("PRESET: unknown GPU preset 'efficiency' "
                                  "(GPU presets: auto, sustained, efficient, low, peak)")
        assert exc.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize(("err", "exit_code", "hint"), [
    (errno.EACCES, ExitCode.REFUSED, "run as root (sudo joulectl ...)"),
    (errno.EROFS, ExitCode.REFUSED, "run as root (sudo joulectl ...)"),
    (errno.EIO, ExitCode.INTERNAL, None),
])
def test_a_journal_that_cannot_be_read_stops_a_reset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    err: int, exit_code: ExitCode, hint: str | None) -> None:
    # no privilege to read the journal (EACCES, EROFS: open(2)) is a refusal with the privilege
    # hint, SPEC §2's exit 4; an I/O error (EIO) is a failure, exit 1
    from joulectl.host import HostIOError
    from joulectl.ops import journal as journal_mod

    root = trees.amd_mi250x_x4(tmp_path / "m")

    def unreadable(host: Host) -> Journal:
        raise HostIOError(err, "/var/lib/joulectl/state.json")

    monkeypatch.setattr(journal_mod, "load", unreadable)
    with pytest.raises(JoulectlError) as exc:
        gov.run_reset(Host(str(root)), gpu=False, cpu=False, selectors=(), dry_run=False, wait_s=0, warnings=[])
    assert str(exc.value) == f"cannot read the journal /var/lib/joulectl/state.json: {os.strerror(err)}"
    assert (exc.value.exit_code, exc.value.hint) == (exit_code, hint)


def test_reset_gpu_on_a_node_without_gpus_touches_no_policy(tmp_path: Path, cli: Cli) -> None:
    # `governor reset --gpu` names its target: on a node without GPUs there is no device (exit 3,
    # SPEC §2), and the CPU policies joulectl set stay as set; only without a flag does such a
    # node default to its CPUs
    root = trees.intel_2s_host(tmp_path / "c")
    pol = root / "sys/devices/system/cpu/cpufreq/policy15"
    assert cli("--root", root, "governor", "set", "efficiency").exit_code == 0
    r = cli("--root", root, "governor", "reset", "--gpu")
    assert (r.exit_code, r.stderr.strip()) == (ExitCode.NO_DEVICE, "joulectl: error: no GPU found on this node")
    assert (pol / "scaling_governor").read_text().strip() == "powersave"
    assert (pol / "energy_performance_preference").read_text().strip() == "power"
