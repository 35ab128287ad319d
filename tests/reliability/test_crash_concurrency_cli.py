"""Crash safety and concurrency through the real CLI on rendered nodes: kill -9 at random points
of ``cap``, ``governor`` and ``simulate run`` (bounded loops), after which the journal and the
simulator ledgers parse, no committed record is lost, and ``cap --restore`` / ``governor reset``
return every device to what was in force before; and 20 concurrent ``cap``/``governor`` runs on
one node that serialize through the lock (exit 7 only when ``--wait`` runs out)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_support import NIGHTLY, REPO, run_joulectl

from joulectl.host import Host
from joulectl.ops import journal as journal_mod
from joulectl.sim import ledger as ledger_mod

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: crash}
spec:
  pools:
  - {name: mi250, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 1}
"""
ENV = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1"}
ENV.pop("JOULECTL_ROOT", None)
#: kills per loop (CI / nightly): a fixed count, never a time bound, so a loaded machine runs the
#: same loop as an idle one (only slower)
KILLS = 200 if NIGHTLY else 12


def _watched_files(root: Path, names: tuple[str, ...]) -> dict[Path, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root / "sys" / "devices"):
        for name in files:
            if name in names:
                p = Path(dirpath) / name
                out[p] = p.read_text().strip()
    return out


CAP_FILES = ("power1_cap", "constraint_0_power_limit_uw")
# pp_dpm_sclk is left out: in a tree without the simulator's tick loop a write of a level mask
# replaces the file, where the kernel keeps printing the level table.
GOV_FILES = ("power_dpm_force_performance_level", "scaling_governor", "energy_performance_preference")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("crash-cluster")
    (base / "spec.yaml").write_text(SPEC)
    r = run_joulectl("simulate", "render", str(base / "spec.yaml"), "--root", str(base / "tree"))
    assert r.returncode == 0, r.stderr
    return base


@pytest.fixture
def cluster(pristine: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the rendered cluster (kills leave trees in any state)."""
    shutil.copytree(pristine, tmp_path / "c", symlinks=True)
    yield tmp_path / "c"


def _kill_loop(argvs: list[list[str]], check: object, seed: int, *, group: bool = False,
               window: tuple[float, float] = (0.0, 1.0), max_kills: int = KILLS) -> tuple[int, int]:
    """Start each command and SIGKILL it at a random point; ``check()`` after every kill.
    Returns (kills, kills that interrupted a run still in progress)."""
    rng = random.Random(seed)
    kills = interrupted = 0
    for _ in range(max_kills):
        argv = rng.choice(argvs)
        p = subprocess.Popen([sys.executable, "-m", "joulectl", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=ENV, start_new_session=group)
        time.sleep(rng.uniform(*window))
        if p.poll() is None:
            interrupted += 1
        if group:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            p.kill()
        _, err = p.communicate(timeout=120)
        assert "Traceback" not in err.decode(), err.decode()
        kills += 1
        check()  # type: ignore[operator]
    print(f"{' '.join(argvs[0][:3])}: kills={kills} interrupted={interrupted}")
    return kills, interrupted


def _journal_ok(root: Path, originals: dict[str, float]) -> None:
    j = journal_mod.load(Host(str(root)))
    assert j.set_aside is None, f"journal corrupt after a kill (set aside to {j.set_aside})"
    for device, rec in j.devices.items():
        if "capWatts" in rec.original and device in originals:
            assert rec.original["capWatts"] == originals[device], (device, rec.original)


def _caps_now(root: Path) -> dict[str, float]:
    r = run_joulectl("--root", str(root), "cap", "--all", "--watts", "1", "--dry-run", "-o", "json")
    return {row["device"]: row["beforeWatts"] for row in json.loads(r.stdout)["results"]
            if row["beforeWatts"] is not None}


def _operator_caps(root: Path, name: str) -> None:
    """The operator's own caps, set by hand before joulectl runs: 40 W under each default (which is
    what ``--restore`` falls back to without a journal entry, so a lost original shows)."""
    for path, text in _watched_files(root, (name,)).items():
        if int(text) > 100_000_000:
            path.write_text(f"{int(text) - 40_000_000}\n")


def test_cap_survives_kill9_and_restore_returns_every_device(cluster: Path) -> None:
    """Every kill leaves the operator's caps journaled as the originals (the write-ahead save comes
    before the first write), so ``--restore`` returns each device to the operator's cap. One run
    completes first: a device joulectl never changed has nothing to restore, and ``--restore``
    gives it the default."""
    results = {}
    for node, file, argvs in (
        ("mi250-0", "power1_cap", [["cap", "--watts", str(w)] for w in (300, 350, 420, 500)]
         + [["cap", "--pct", "75"], ["cap", "--restore"]]),
        ("cpu-0", "constraint_0_power_limit_uw", [["cap", "--cpu", "--watts", str(w)] for w in (150, 200, 250)]
         + [["cap", "--cpu", "--restore"]]),
    ):
        root = cluster / "tree" / node
        _operator_caps(root, file)
        before_files = _watched_files(root, CAP_FILES)
        originals = _caps_now(root)
        assert originals
        r = run_joulectl("--root", str(root), *argvs[0])
        assert r.returncode == 0, r.stderr
        results[node] = _kill_loop([["--root", str(root), *a] for a in argvs],
                                   lambda root=root, originals=originals: _journal_ok(root, originals),
                                   seed=len(node), window=(0.0, 0.8))
        r = run_joulectl("--root", str(root), "cap", "--all", "--restore", "-o", "json")
        assert r.returncode in (0, 5), r.stderr  # 5: a node whose CPU zones cannot be capped
        assert _watched_files(root, CAP_FILES) == before_files
        assert _caps_now(root) == originals
    assert [kills for kills, _ in results.values()] == [KILLS] * len(results)


def test_governor_survives_kill9_and_reset_returns_every_device(cluster: Path) -> None:
    """The operator's performance level (``high``, set by hand) is back everywhere after kills at
    random points and a ``governor reset``: the write-ahead journal keeps the original and every
    level a killed run was about to set (``pending``), so none is mistaken for the operator's."""
    root = cluster / "tree" / "mi250-0"
    for path in _watched_files(root, ("power_dpm_force_performance_level",)):
        path.write_text("high\n")
    before_files = _watched_files(root, GOV_FILES)
    argvs = [["--root", str(root), "governor", "set", p] for p in ("low", "peak", "efficient", "sustained")]

    def check() -> None:
        assert journal_mod.load(Host(str(root))).set_aside is None

    kills, _ = _kill_loop(argvs, check, seed=7, window=(0.0, 0.8))
    assert kills == KILLS
    r = run_joulectl("--root", str(root), "governor", "reset", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert _watched_files(root, GOV_FILES) == before_files


def test_simulate_run_survives_kill9(cluster: Path) -> None:
    """The tick loop and its worker processes are killed (the whole process group) at random
    points; every ledger parses, ticks and energy counters never go back."""
    tree = cluster / "simtree"
    seen: dict[str, tuple[int, dict[str, float]]] = {}

    def check() -> None:
        for node in sorted(os.listdir(tree)) if tree.exists() else []:
            if not (tree / node / "state").is_dir():
                continue
            led = ledger_mod.load(str(tree / node))
            if led is None:
                continue
            tick, energy = seen.get(node, (0, {}))
            assert led.tick >= tick, (node, led.tick, tick)
            for counter, value in energy.items():
                assert led.energy.get(counter, value) >= value, (node, counter)
            seen[node] = (led.tick, dict(led.energy))

    argv = ["simulate", "run", str(cluster / "spec.yaml"), "--root", str(tree), "--fast", "--ticks", "1000000",
            "--tick", "5", "--workers", "2"]
    kills, _ = _kill_loop([argv], check, seed=11, group=True, window=(0.5, 3.0), max_kills=max(10, KILLS // 2))
    assert kills == max(10, KILLS // 2)
    # After every kill the tree resumes: a run to completion continues the counters.
    r = run_joulectl("simulate", "run", str(cluster / "spec.yaml"), "--root", str(tree), "--fast", "--ticks", "2",
                     "--tick", "5", "--workers", "2", timeout=600)
    assert r.returncode == 0, r.stderr
    check()
    assert seen and all(tick > 0 for tick, _ in seen.values())
    r = run_joulectl("simulate", "status", "--root", str(tree), "-o", "json")
    assert r.returncode == 0, r.stderr


# -- concurrency ----------------------------------------------------------------------------------


def test_twenty_concurrent_cap_and_governor_runs_serialize(cluster: Path) -> None:
    root = cluster / "tree" / "mi250-0"
    run_joulectl("--root", str(root), "cap", "--restore")
    run_joulectl("--root", str(root), "governor", "reset")
    watts = [301 + i for i in range(10)]
    argvs = [["--root", str(root), "cap", "--watts", str(w), "--wait", "300"] for w in watts]
    argvs += [["--root", str(root), "governor", "set", ("low", "peak")[i % 2], "--wait", "300"] for i in range(10)]
    random.Random(3).shuffle(argvs)
    procs = [subprocess.Popen([sys.executable, "-m", "joulectl", *a, "-o", "json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for a in argvs]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    j = journal_mod.load(Host(str(root)))
    assert j.set_aside is None
    primaries = [d for d, rec in j.devices.items() if "capWatts" in rec.original]
    assert len(primaries) == 4
    for device in primaries:
        cap_history = [h["value"] for h in j.devices[device].history
                       if h["setting"] == "capWatts" and h["value"] in watts]
        assert sorted(cap_history) == watts, cap_history  # every run's record, none lost
        assert j.current(device, "capWatts") == cap_history[-1]


HOLDER = r"""
import sys
from joulectl.host import Host
from joulectl.ops.lock import node_lock
with node_lock(Host(sys.argv[1]), 5):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_cap_exits_7_only_when_the_wait_runs_out(cluster: Path) -> None:
    root = cluster / "tree" / "cpu-0"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=ENV)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "held\n"
    r = run_joulectl("--root", str(root), "cap", "--cpu", "--watts", "210", "--wait", "0.5")
    assert r.returncode == 7, r.stderr
    assert r.stderr.splitlines()[0] == ("joulectl: error: the node lock /run/joulectl/lock is held by another "
                                        "joulectl run (waited 0.5 s)")
    r = run_joulectl("--root", str(root), "governor", "set", "efficiency", "--cpu", "--wait", "0.5")
    assert r.returncode == 7, r.stderr
    waiter = subprocess.Popen([sys.executable, "-m", "joulectl", "--root", str(root), "cap", "--cpu", "--watts",
                               "210", "--wait", "300"], stderr=subprocess.PIPE, text=True, env=ENV)
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0
    _, err = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, err
    run_joulectl("--root", str(root), "cap", "--cpu", "--restore")
