"""The tick's readback, polled (one lstat per writable file) or driven by inotify: the same results.

The scenario writes between ticks (from the progress callback, as an agent would while the
simulator runs): valid and refused values by hand, values through the fake nvidia-smi, a file
replaced atomically, a file replaced by a directory and back, a touched file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from joulectl.errors import InputError
from joulectl.sim import ledger as lg
from joulectl.sim import runtime
from joulectl.sim.clusterspec import load_spec
from joulectl.sim.tools.state import read_nvml_state

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: t}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.6, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
"""
T0 = 1_800_000_000.0
POLICY = "intel-0/sys/devices/system/cpu/cpufreq/policy{}"
RAPL0 = "intel-0/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"


#: The spec without its NVIDIA node: the Intel node alone.
INTEL_ONLY = SPEC.replace("  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n", "")


def _smi(root: Path, *args: str) -> int:
    smi = str(root / "h100-0" / "bin" / "nvidia-smi")
    return subprocess.run([smi, *args], capture_output=True, text=True, timeout=30).returncode


def _agent(root: Path, done: int) -> None:
    """What an agent writes after tick ``done``."""
    if done == 1:
        (root / RAPL0 / "constraint_0_power_limit_uw").write_text("150000000\n")
        (root / POLICY.format(1) / "scaling_governor").write_text("turbo\n")  # EINVAL
        (root / POLICY.format(2) / "scaling_max_freq").write_text("99999999\n")  # clamped
        assert _smi(root, "-i", "0", "-pl", "300") == 0
    elif done == 2:
        gov = root / POLICY.format(2) / "scaling_governor"
        gov.unlink()
        gov.mkdir()  # a file replaced by a directory
        pol3 = root / POLICY.format(3)
        (pol3 / ".epp.tmp").write_text("power\n")
        os.replace(pol3 / ".epp.tmp", pol3 / "energy_performance_preference")  # atomic replace
        assert _smi(root, "-i", "1", "-pl", "5000") != 0  # refused by the tool
    elif done == 3:
        gov = root / POLICY.format(2) / "scaling_governor"
        gov.rmdir()
        gov.write_text("performance\n")  # and back: pins that policy's EPP
        min_freq = root / POLICY.format(4) / "scaling_min_freq"
        os.utime(min_freq, ns=(1, 1))  # touched, same content
        (root / POLICY.format(5) / "energy_performance_preference").write_text("999\n")  # EINVAL
    elif done == 4:
        (root / POLICY.format(6) / "scaling_governor").write_text("performance\n")
        (root / POLICY.format(6) / "energy_performance_preference").write_text("balance_power\n")  # EBUSY
        assert _smi(root, "-i", "2", "-lgc", "1980,1980") == 0


def _render(tmp_path: Path, text: str, name: str) -> tuple[Path, Any, Any]:
    """Render the ClusterSpec ``text`` under ``tmp_path/name``: (root, spec, tick entries)."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(text)
    root = tmp_path / name
    spec = load_spec(str(spec_path))
    runtime._ensure_trees(spec, str(root))
    return root, spec, runtime.build_entries(spec, str(root))


def _scenario(tmp_path: Path, mode: str, workers: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("SIM_READBACK", mode)
    root, spec, entries = _render(tmp_path, SPEC, f"{mode}-{workers}")
    powers: list[list[float]] = []

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        powers.append([s.power_w for s in samples])
        _agent(root, done)

    runtime.run_entries(entries, str(root), spec.facility, ticks=6, fast=True, workers=workers,
                        progress=progress, clock=lambda: T0)
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    files: dict[str, str] = {}
    for node in ("intel-0", "h100-0"):
        manifest = json.loads((root / node / "state" / "manifest.json").read_text())
        for entry in manifest["writable"]:
            path = root / node / entry["path"].lstrip("/")
            files[f"{node}/{entry['path'].lstrip('/')}"] = path.read_text() if path.is_file() else "<dir>"
    ledgers = {}
    for node in ("intel-0", "h100-0"):
        led = lg.load(str(root / node))
        assert led is not None
        ledgers[node] = (led.tick, led.energy)
    gpus = read_nvml_state(str(root / "h100-0"))["gpus"]
    return {
        "events": [(e["node"], e["name"], e["attributes"]) for e in events],
        "files": files,
        "ledgers": ledgers,
        "powers": powers,
        "nvml": [(g["power"]["limitMw"], g["clocks"]["smMhz"]) for g in gpus],
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_poll_and_inotify_readback_give_identical_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], workers: int,
) -> None:
    polled = _scenario(tmp_path, "poll", workers, monkeypatch)
    watched = _scenario(tmp_path, "inotify", workers, monkeypatch)
    assert "warning" not in capsys.readouterr().err  # every node was watched, none fell back
    assert watched == polled
    # And the scenario did what it says (so the equality above is not of two no-ops).
    rejected = [(a["file"].rsplit("/", 2)[-2:], a["error.type"]) for _n, name, a in polled["events"]
                if name == "joulie.sim.write.rejected"]
    errs = {(tuple(f), e) for f, e in rejected}
    assert (("policy1", "scaling_governor"), "einval") in errs
    assert (("policy5", "energy_performance_preference"), "einval") in errs
    assert (("policy6", "energy_performance_preference"), "ebusy") in errs
    files = polled["files"]
    assert files[f"{RAPL0}/constraint_0_power_limit_uw"] == "150000000\n"
    assert files[f"{POLICY.format(1)}/scaling_governor"] == "powersave\n"
    assert files[f"{POLICY.format(2)}/scaling_governor"] == "performance\n"
    assert files[f"{POLICY.format(2)}/energy_performance_preference"] == "performance\n"
    assert files[f"{POLICY.format(3)}/energy_performance_preference"] == "power\n"
    assert files[f"{POLICY.format(6)}/energy_performance_preference"] == "performance\n"
    max_freq = files[f"{POLICY.format(2)}/scaling_max_freq"]
    assert int(max_freq) < 99999999
    assert polled["nvml"][0][0] == 300_000
    assert polled["nvml"][1][0] == 700_000
    assert polled["nvml"][2][1] >= 1980


def test_inotify_queue_overflow_falls_back_to_a_full_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More events than the kernel queues (IN_Q_OVERFLOW): the next tick polls every file, nothing is lost."""
    monkeypatch.setenv("SIM_READBACK", "inotify")
    root, spec, entries = _render(tmp_path, INTEL_ONLY, "root")
    queue = 2 * 16384  # twice the kernel's default fs.inotify.max_queued_events

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        if done != 1:
            return
        a = root / POLICY.format(0) / "scaling_min_freq"
        b = root / POLICY.format(1) / "scaling_min_freq"
        fa = os.open(a, os.O_WRONLY)
        fb = os.open(b, os.O_WRONLY)
        try:
            for _ in range(queue // 2 + 10):  # alternating files: no two consecutive events merge
                os.pwrite(fa, b"800000\n", 0)
                os.pwrite(fb, b"800000\n", 0)
        finally:
            os.close(fa)
            os.close(fb)
        (root / POLICY.format(7) / "scaling_governor").write_text("bogus\n")  # after the overflow

    runtime.run_entries(entries, str(root), spec.facility, ticks=3, fast=True, workers=1, progress=progress,
                        clock=lambda: T0)
    assert (root / POLICY.format(7) / "scaling_governor").read_text() == "powersave\n"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    assert [e["attributes"]["file"].rsplit("/", 2)[-2:] for e in events] == [["policy7", "scaling_governor"]]


def test_unwatchable_node_is_polled_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SIM_READBACK", "auto")
    root, spec, entries = _render(tmp_path, INTEL_ONLY, "root")
    # The intel_pstate directory is gone (its watch cannot be added): the node is polled.
    pstate = root / "intel-0" / "sys/devices/system/cpu/intel_pstate"
    for f in pstate.iterdir():
        f.unlink()
    pstate.rmdir()

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        if done == 1:
            (root / POLICY.format(0) / "scaling_governor").write_text("nope\n")

    runtime.run_entries(entries, str(root), spec.facility, ticks=2, fast=True, workers=1, progress=progress,
                        clock=lambda: T0)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["joulectl: warning: simulate run: inotify_add_watch: No such file or directory: "
                   "1 node(s) from intel-0 on are polled instead"]
    assert (root / POLICY.format(0) / "scaling_governor").read_text() == "powersave\n"


def test_bad_sim_readback_is_refused_before_rendering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_READBACK", "fanotify")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    with pytest.raises(InputError) as err:
        runtime.run(str(spec_path), str(tmp_path / "root"), ticks=1, fast=True)
    assert str(err.value) == "SIM_READBACK: must be poll, inotify or auto (got 'fanotify')"
    assert not (tmp_path / "root").exists()


def test_bad_sim_readback_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    monkeypatch.setenv("SIM_READBACK", "sometimes")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    r = cli("simulate", "run", str(spec_path), "--root", str(tmp_path / "root"), "--ticks", "1", "--fast")
    assert r.exit_code == 2
    assert r.stderr.strip() == "joulectl: error: SIM_READBACK: must be poll, inotify or auto (got 'sometimes')"


def test_watched_directory_replaced_switches_the_node_to_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A policy directory moved away and put back (a new inode): its watch is gone, the node is polled."""
    monkeypatch.setenv("SIM_READBACK", "inotify")
    root, spec, entries = _render(tmp_path, INTEL_ONLY, "root")
    pol = root / POLICY.format(9)

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        if done == 1:
            copy = pol.with_name("policy9.new")
            copy.mkdir()
            for f in pol.iterdir():
                if f.is_file():
                    (copy / f.name).write_text(f.read_text())
            old = pol.with_name("policy9.old")
            pol.rename(old)
            copy.rename(pol)
        elif done == 2:
            (pol / "scaling_governor").write_text("invalid\n")  # in a directory no watch covers

    runtime.run_entries(entries, str(root), spec.facility, ticks=4, fast=True, workers=1, progress=progress,
                        clock=lambda: T0)
    assert (pol / "scaling_governor").read_text() == "powersave\n"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    assert [e["attributes"]["value"] for e in events] == ["invalid"]
