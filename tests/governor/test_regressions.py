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
    r = cli("--root", root, "--tool-timeout", "1", "governor", "set", "peak", "-o", "json")
    assert r.exit_code == 5
    rows = [(x["device"], x["status"], x["message"]) for x in json.loads(r.stdout)["results"]]
    assert rows[0] == (buses[0], "error", "graphics clock lock: nvidia-smi timed out after 1 s")
    skipped = f"not tried: nvidia-smi timed out on {buses[0]} (graphics clock lock); the other GPUs would wait as long"
    assert rows[1:] == [(b, "error", skipped) for b in buses[1:]]
    assert all(g["lgc"] is None for g in smi_state(root)["gpus"].values())
    assert r.stderr == "joulectl: error: 0 of 8 targets done; 8 error (see MESSAGE)\n"
