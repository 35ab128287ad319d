"""Regressions of issue 12 through the real CLI: item 5 (``governor reset --cpu`` restores the EPP
after set efficiency, performance, efficiency) and item 13 (a hanging nvidia-smi costs one
timeout, not one per GPU, while the node lock is held)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trees
from govkit import H100_TABLE, nvidia_node, smi_state

POLICIES = "sys/devices/system/cpu/cpufreq"


def _cpu_state(root: Path) -> set[tuple[str, str]]:
    return {((p / "scaling_governor").read_text().strip(), (p / "energy_performance_preference").read_text().strip())
            for p in (root / POLICIES).glob("policy*")}


def test_reset_cpu_restores_the_epp_after_efficiency_performance_efficiency(tmp_path: Path,
                                                                            cli: Callable[..., Any]) -> None:
    root = trees.intel_2s_host(tmp_path / "n")  # 16 policies, powersave/balance_performance, intel_pstate
    assert _cpu_state(root) == {("powersave", "balance_performance")}
    for preset in ("efficiency", "performance", "efficiency"):
        r = cli("--root", root, "governor", "set", preset, "-o", "json")
        assert r.exit_code == 0, r.stderr
    assert _cpu_state(root) == {("powersave", "power")}
    # the journal holds what was read back: the EPP the file shows, not the "performance" asked of the driver
    journal = json.loads((root / "var/lib/joulectl/state.json").read_text())
    assert {d["current"].get("epp") for d in journal["devices"].values()} == {"power"}
    r = cli("--root", root, "governor", "reset", "--cpu", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert {(x["status"], x["after"]) for x in json.loads(r.stdout)["results"]} == {
        ("applied", "powersave/balance_performance")}
    assert _cpu_state(root) == {("powersave", "balance_performance")}


def test_a_hanging_nvidia_smi_costs_one_timeout(tmp_path: Path, cli: Callable[..., Any]) -> None:
    root = tmp_path / "h"
    buses = nvidia_node(root, [H100_TABLE] * 8)
    st = smi_state(root)
    for b in buses:  # discover's query answers; every lock call hangs
        st["gpus"][b]["hang"] = True
    (root / "state" / "smi.json").write_text(json.dumps(st))
    # 4 s: long enough for discover's (answering) nvidia-smi on a loaded machine
    r = cli("--root", root, "--tool-timeout", "4", "governor", "set", "peak", "-o", "json")
    assert r.exit_code == 5
    rows = [(x["device"], x["status"], x["message"]) for x in json.loads(r.stdout)["results"]]
    assert rows[0] == (buses[0], "error", "graphics clock lock: nvidia-smi timed out after 4 s")
    skipped = f"not tried: nvidia-smi timed out on {buses[0]} (graphics clock lock); the other GPUs would wait as long"
    assert rows[1:] == [(b, "error", skipped) for b in buses[1:]]
    assert all(g["lgc"] is None for g in smi_state(root)["gpus"].values())
    assert r.stderr == "joulectl: error: 0 of 8 targets done; 8 error (see MESSAGE)\n"


def test_reset_takes_the_default_scope_of_set(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """``set low`` (a GPU preset) and ``set efficiency`` (a CPU preset); ``reset`` without a flag
    undoes the GPUs only, as ``set`` without a flag targets them; a CPU-only node resets its CPUs."""
    root = trees.amd_mi300x_x8(tmp_path / "n")
    assert cli("--root", root, "governor", "set", "low").exit_code == 0
    assert cli("--root", root, "governor", "set", "efficiency").exit_code == 0
    doc = json.loads(cli("--root", root, "governor", "reset", "-o", "json").stdout)
    assert {(x["kind"], x["status"]) for x in doc["results"]} == {("gpu", "applied")}
    assert len(doc["results"]) == 8
    cpu_only = trees.intel_2s_host(tmp_path / "c")
    assert cli("--root", cpu_only, "governor", "set", "efficiency").exit_code == 0
    doc = json.loads(cli("--root", cpu_only, "governor", "reset", "-o", "json").stdout)
    assert {(x["kind"], x["status"]) for x in doc["results"]} == {("cpu", "applied")}


def test_table_rows_collapse_and_json_keeps_every_device(tmp_path: Path, cli: Callable[..., Any]) -> None:
    root = trees.amd_mi300x_x8(tmp_path / "n")
    r = cli("--root", root, "governor", "set", "balanced", "--dry-run")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout  # the header and one row for the 16 policies
    assert lines[1].split()[0:2] == ["cpufreq:policy0-15", "(16)"]
    assert lines[1].split()[-1] == "planned"
    doc = json.loads(cli("--root", root, "governor", "set", "balanced", "--dry-run", "-o", "json").stdout)
    assert [x["device"] for x in doc["results"]] == [f"cpufreq:policy{n}" for n in range(16)]
    r = cli("--root", root, "governor", "reset", "--cpu")
    assert [ln.split()[0] for ln in r.stdout.splitlines()[1:]] == ["cpufreq:policy0-15"]


def test_device_span() -> None:
    from joulectl.ops.govreport import collapse, device_span

    assert device_span(["cpufreq:policy0"]) == "cpufreq:policy0"
    assert device_span([f"cpufreq:policy{n}" for n in (*range(64), *range(96, 128))]) == (
        "cpufreq:policy0-63,96-127 (96)")
    assert device_span(["0000:18:00.0", "0000:2a:00.0", "0000:db:00.0"]) == "0000:18:00.0 .. 0000:db:00.0 (3)"
    assert collapse([["a1", "x", "ok"], ["b", "y", "ok"], ["a2", "x", "ok"]]) == [["a1-2 (2)", "x", "ok"],
                                                                                  ["b", "y", "ok"]]


def test_show_watch(tmp_path: Path, cli: Callable[..., Any]) -> None:
    root = trees.amd_mi300x_x8(tmp_path / "n")
    r = cli("--root", root, "governor", "show", "--gpu", "--watch", "0.1", "--count", "2")
    assert r.exit_code == 0, r.stderr
    frames = r.stdout.split("node ")[1:]
    assert len(frames) == 2 and frames[0] == frames[1]
    assert "GPU presets every GPU accepts: auto, sustained, efficient, low, peak" in frames[0]
    r = cli("--root", root, "governor", "show", "--count", "2")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: --count: needs --watch\n")
    r = cli("--root", root, "governor", "show", "--watch", "1", "-o", "json")
    assert (r.exit_code, r.stderr) == (
        2, "joulectl: error: --watch: --watch prints a table and cannot be combined with -o json\n")
