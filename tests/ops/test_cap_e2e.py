"""``joulectl cap`` end to end on nodes rendered by ``joulectl simulate render``.

The real discover, backends, journal and lock run against rendered node trees; the fake
nvidia-smi runs as a subprocess (through ``Host.run``); most cases run the CLI itself as a
subprocess. One cluster is rendered per test session and each test works on its own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops.cap import build_request, execute

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: cap-e2e}
spec:
  pools:
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: flexe, profile: intel-flex-170-4gpu, count: 1, overrides: {gpus: {intel: {driver: xe}}}}
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
  - {name: na, profile: nvidia-h100-sxm-8gpu, count: 1,
     overrides: {gpus: {count: 2, fieldSupport: {power.min_limit: "[N/A]", power.max_limit: "[N/A]"}}}}
  - {name: nosup, profile: nvidia-l40s-4gpu, count: 1,
     overrides: {gpus: {fieldSupport: {power.management: "[Not Supported]"}}}}
  - name: locked
    profile: intel-xeon-2s-rapl
    count: 1
    overrides:
      cpu:
        powercap:
          zones:
          - name: package
            perSocket: true
            enabled: false
            constraints:
            - {name: long_term, limitW: 270, maxW: 270, timeWindowUs: 999424, locked: true}
"""


def _joulectl(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, NO_COLOR="1", **(env or {}))
    full_env.pop("JOULECTL_ROOT", None)
    return subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True,
                          env=full_env, input=stdin, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cap-e2e")
    (base / "spec.yaml").write_text(SPEC)
    r = _joulectl("simulate", "render", str(base / "spec.yaml"), "--root", str(base / "root"), timeout=300)
    assert r.returncode == 0, r.stderr
    return base / "root"


class Cluster(type(Path())):  # type: ignore[misc]
    """A test's private root: a node is copied from the rendered cluster when first used (the fake
    tools find their node from their own path, so a node directory is self-contained)."""

    rendered: Path

    def __truediv__(self, key: Any) -> Path:
        name = str(key).split("/", 1)[0]
        node = Path(self) / name
        if not node.exists() and (self.rendered / name).is_dir():
            shutil.copytree(self.rendered / name, node, symlinks=True)
        return Path(self).__truediv__(key)


@pytest.fixture
def cluster(rendered: Path, tmp_path: Path) -> Path:
    root = Cluster(tmp_path / "root")
    root.rendered = rendered
    root.mkdir()
    return root


Cap = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cap(cluster: Path) -> Cap:
    def run(node: str, *args: str, env: dict[str, str] | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return _joulectl("--root", str(cluster / node), "cap", *args, env=env, stdin=stdin)

    return run


def rows(r: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(r.stdout)["results"]
    return out


def smi_limits(cluster: Path, node: str) -> list[float]:
    """power.limit of every GPU, asked of the node's fake nvidia-smi."""
    out = subprocess.run([str(cluster / node / "bin/nvidia-smi"), "--query-gpu=power.limit",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


def hwmon_file(cluster: Path, node: str, bus: str, name: str) -> Path:
    base = cluster / node / "sys/bus/pci/devices" / bus / "hwmon"
    return next(base.iterdir()) / name


def journal(cluster: Path, node: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((cluster / node / "var/lib/joulectl/state.json").read_text())
    return data


# -- --pct 60 on every profile ------------------------------------------------------------------


def test_h100_pct_60_one_query_one_write_one_readback(cluster: Path) -> None:
    host = Host(str(cluster / "h100-0"))
    report = execute(host, build_request(pct=60))
    assert [(r.before_w, r.target_w, r.after_w, r.status) for r in report.results] == [
        (700, 420, 420, Status.APPLIED)] * 8
    # the inventory is the CSV query of what a cap needs, not the whole -q -x document
    assert [c[1:2] for c in host.tool_calls] == [
        ("--query-gpu=pci.bus_id,uuid,power.min_limit,power.max_limit,power.default_limit,power.limit,"
         "enforced.power.limit,power.draw,mig.mode.current,persistence_mode,name",),
        ("-i",), ("--query-gpu=pci.bus_id,power.limit,enforced.power.limit",)]
    write = host.tool_calls[1]
    assert write[3:] == ("-pl", "420") and len(write[2].split(",")) == 8
    assert smi_limits(cluster, "h100-0") == [420.0] * 8
    assert journal(cluster, "h100-0")["devices"]["0000:18:00.0"]["original"] == {"capWatts": 700.0}


@pytest.mark.parametrize(
    ("node", "expect"),
    [
        ("l40s-0", [(350, 210, "applied")] * 4),
        ("mi300x-0", [(750, 450, "applied")] * 8),
        ("mi250x-0", [(560, 336, "applied"), (None, None, "skipped")] * 4),
        ("w7900-0", [(241, 241, "unchanged")]),
        ("flex-0", [(150, 90, "applied")] * 4),
        ("flexe-0", [(150, 90, "applied")] * 4),
    ],
)
def test_pct_60(cap: Cap, node: str, expect: list[tuple[Any, ...]]) -> None:
    r = cap(node, "--pct", "60", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(r)] == expect


def test_mi250x_only_primaries_are_written(cap: Cap, cluster: Path) -> None:
    r = cap("mi250x-0", "--pct", "60", "-o", "json")
    for x in rows(r):
        value = int(hwmon_file(cluster, "mi250x-0", x["device"], "power1_cap").read_text())
        if x["status"] == "skipped":
            assert x["message"].startswith("limited through primary 0000:")
            assert value == 0
        else:
            assert value == 336_000_000


@pytest.mark.parametrize(("node", "pl1"), [("flex-0", "power1_max"), ("flexe-0", "power2_max")])
def test_flex_170_writes_pl1_of_its_driver(cap: Cap, cluster: Path, node: str, pl1: str) -> None:
    r = cap(node, "--pct", "60", "-o", "json")
    bus = rows(r)[0]["device"]
    assert int(hwmon_file(cluster, node, bus, pl1).read_text()) == 90_000_000


def test_w7900_refuses_every_value_but_241(cap: Cap) -> None:
    r = cap("w7900-0", "--watts", "200", "-o", "json")
    assert r.returncode == 5
    assert rows(r)[0]["status"] == "blocked" and rows(r)[0]["targetWatts"] == 200
    assert rows(r)[0]["message"] == "200 W is below the minimum 241 W (range 241–241 W)"
    assert r.stderr == "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n"


def test_cpu_only_intel_host(cap: Cap, cluster: Path) -> None:
    r = cap("xeon-0", "--cpu", "--pct", "60", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [(x["device"], x["kind"], x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(r)] == [
        ("intel-rapl:0", "cpu", 270, 162, "applied"), ("intel-rapl:1", "cpu", 270, 162, "applied")]
    pl1 = cluster / "xeon-0/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    assert int(pl1.read_text()) == 162_000_000
    gpu = cap("xeon-0", "--pct", "60")
    assert gpu.returncode == 3 and gpu.stderr == "joulectl: error: no GPU found on this node\n"


def test_vm_is_exit_3(cap: Cap) -> None:
    r = cap("vm-0", "--pct", "60")
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr == "joulectl: error: no GPU found on this node\n"
    c = cap("vm-0", "--cpu", "--pct", "60")
    assert c.returncode == 3
    assert c.stderr == ("joulectl: error: no powercap package zone (RAPL) on this node: a virtual machine (the "
                        "hypervisor exposes no RAPL)\n"
                        "joulectl: hint: CPU power caps need the intel-rapl powercap driver\n")


# -- ranges, tokens, privileges, unsupported, locks ---------------------------------------------


def test_watts_above_max_and_below_min(cap: Cap, cluster: Path) -> None:
    above = cap("h100-0", "--watts", "800", "-o", "json")
    assert above.returncode == 5
    assert {x["message"] for x in rows(above)} == {"800 W is above the maximum 700 W (range 200–700 W)"}
    below = cap("h100-0", "--watts", "150", "--device", "0", "-o", "json")
    assert below.returncode == 5
    assert rows(below)[0]["message"] == "150 W is below the minimum 200 W (range 200–700 W)"
    assert below.stderr == "joulectl: error: 0 of 1 targets done; 1 blocked (see MESSAGE)\n"
    assert smi_limits(cluster, "h100-0") == [700.0] * 8


def test_na_limits_from_field_support_are_blocked_and_never_written(cluster: Path) -> None:
    host = Host(str(cluster / "na-0"))
    report = execute(host, build_request(pct=60))
    assert {r.status for r in report.results} == {Status.BLOCKED}
    assert report.results[0].message == (
        "the power limit range is unknown (the driver reports N/A): no settable power limit")
    assert [c for c in host.tool_calls if "-pl" in c] == []
    assert report.error() is not None and int(report.exit_code) == 5


def test_unprivileged_is_exit_4(cap: Cap, cluster: Path) -> None:
    r = cap("h100-0", "--watts", "500", env={"HWEMU_UNPRIVILEGED": "1"})
    assert r.returncode == 4
    assert r.stderr == ("joulectl: error: no privilege to write: every write was refused (8 devices)\n"
                        "joulectl: hint: run as root (sudo joulectl cap ...)\n")
    assert r.stdout.count("refused") == 8 and "Insufficient Permissions" in r.stdout
    assert smi_limits(cluster, "h100-0") == [700.0] * 8
    assert not (cluster / "h100-0/var/lib/joulectl/state.json").exists()


def test_not_supported_warning_is_unsupported_exit_5(cap: Cap) -> None:
    r = cap("nosup-0", "--pct", "60", "-o", "json")
    assert r.returncode == 5
    assert {x["status"] for x in rows(r)} == {"unsupported"}
    assert rows(r)[0]["message"] == (
        "nvidia-smi: Changing power management limit is not supported for GPU: 00000000:4F:00.0.")
    assert r.stderr == "joulectl: error: 0 of 4 targets done; 4 unsupported (see MESSAGE)\n"


def test_locked_rapl_constraint_is_blocked(cap: Cap, cluster: Path) -> None:
    r = cap("locked-0", "--cpu", "--pct", "60", "-o", "json")
    assert r.returncode == 5
    assert [(x["device"], x["status"], x["message"]) for x in rows(r)] == [
        ("intel-rapl:0", "blocked", "limit locked by firmware"),
        ("intel-rapl:1", "blocked", "limit locked by firmware")]
    pl1 = cluster / "locked-0/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    assert int(pl1.read_text()) == 270_000_000


# -- restore ------------------------------------------------------------------------------------


def test_restore_after_a_cap(cap: Cap, cluster: Path) -> None:
    assert cap("mi300x-0", "--pct", "60").returncode == 0
    r = cap("mi300x-0", "--restore", "-o", "json")
    assert r.returncode == 0
    assert {(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(r)} == {(450, 750, "applied")}
    assert journal(cluster, "mi300x-0")["devices"]["0000:0c:00.0"]["original"] == {}


def test_restore_after_two_caps(cap: Cap, cluster: Path) -> None:
    assert cap("h100-0", "--pct", "60").returncode == 0
    assert cap("h100-0", "--watts", "300").returncode == 0
    assert journal(cluster, "h100-0")["devices"]["0000:18:00.0"]["original"] == {"capWatts": 700.0}
    r = cap("h100-0", "--restore", "-o", "json")
    assert {(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(r)} == {(300, 700, "applied")}
    assert smi_limits(cluster, "h100-0") == [700.0] * 8
    again = cap("h100-0", "--restore", "-o", "json")
    assert {x["status"] for x in rows(again)} == {"unchanged"}


def test_restore_without_a_journal_uses_defaults(cap: Cap, cluster: Path) -> None:
    assert cap("l40s-0", "--watts", "250").returncode == 0
    assert cap("xeon-0", "--cpu", "--watts", "200").returncode == 0
    for node in ("l40s-0", "xeon-0"):
        (cluster / node / "var/lib/joulectl/state.json").unlink()
    gpu = cap("l40s-0", "--restore", "-o", "json")
    assert {(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(gpu)} == {(250, 350, "applied")}
    cpu = cap("xeon-0", "--cpu", "--restore", "-o", "json")
    assert {(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(cpu)} == {(200, 270, "applied")}


# -- twin and schedule ----------------------------------------------------------------------------


def test_twin_watts_win_over_pct(cap: Cap) -> None:
    twin = ("apiVersion: joulie.io/v1alpha1\nkind: NodeTwin\nmetadata: {name: h100-0}\n"
            "spec:\n  nodeName: h100-0\n  profile: eco\n"
            "  gpu: {powerCap: {scope: perGpu, capPctOfMax: 60, capWattsPerGpu: 350}}\n")
    r = cap("h100-0", "--from-twin", "-", "-o", "json", stdin=twin)
    assert r.returncode == 0, r.stderr
    assert {(x["targetWatts"], x["status"]) for x in rows(r)} == {(350, "applied")}
    other = cap("l40s-0", "--from-twin", "-", stdin=twin)
    assert other.returncode == 2
    assert other.stderr.splitlines()[0] == (
        "joulectl: error: <stdin>: spec.nodeName: the twin is for node 'h100-0', this node is 'l40s-0'; "
        "refusing to apply it")


SCHEDULE = """\
timezone: America/New_York
windows:
  - name: night
    days: [mon-fri]
    start: "22:00"
    end: "06:00"
    cap: {pct: 60}
  - name: tokyo-peak
    days: [daily]
    start: "17:00"
    end: "19:00"
    timezone: Asia/Tokyo
    cap: {watts: 500}
default:
  cap: {restore: true}
"""


@pytest.mark.parametrize(
    ("at", "window", "target"),
    [
        ("2026-01-06T03:30:00Z", "night", 420),  # Mon 22:30 in New York
        ("2026-01-06T10:30:00Z", "night", 420),  # Tue 05:30 in New York: Monday's window
        ("2026-01-06T11:00:00Z", "default", 700),  # 06:00 in New York: over
        ("2026-01-06T08:30:00Z", "night", 420),  # Tue 17:30 in Tokyo, but Mon night in New York comes first
        ("2026-01-05T08:30:00Z", "tokyo-peak", 500),  # Mon 17:30 in Tokyo; Sun night is not in mon-fri
        ("2026-01-10T08:30:00Z", "night", 420),  # Sat 03:30 in New York: Friday's night
        ("2026-01-11T08:30:00Z", "tokyo-peak", 500),  # Sun 17:30 in Tokyo
    ],
)
def test_schedule_windows_across_midnight_and_time_zones(cap: Cap, cluster: Path, at: str, window: str,
                                                         target: float) -> None:
    sched = cluster / "eco.yaml"
    sched.write_text(SCHEDULE)
    r = cap("h100-0", "--schedule", str(sched), "--at", at, "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["schedule"]["window"] == window
    assert f"window '{window}' in force" in r.stderr
    assert {x["targetWatts"] for x in doc["results"]} == {target}
    assert r.returncode == 0


def test_schedule_rerun_writes_nothing(cap: Cap, cluster: Path) -> None:
    sched = cluster / "eco.yaml"
    sched.write_text(SCHEDULE)
    first = cap("mi300x-0", "--schedule", str(sched), "--at", "2026-01-06T03:30:00Z", "-o", "json")
    assert {x["status"] for x in rows(first)} == {"applied"}
    state = cluster / "mi300x-0/var/lib/joulectl/state.json"
    caps = [hwmon_file(cluster, "mi300x-0", x["device"], "power1_cap") for x in rows(first)]
    stamps = [p.stat().st_mtime_ns for p in (state, *caps)]
    again = cap("mi300x-0", "--schedule", str(sched), "--at", "2026-01-06T03:35:00Z", "-o", "json")
    assert again.returncode == 0 and {x["status"] for x in rows(again)} == {"unchanged"}
    assert [p.stat().st_mtime_ns for p in (state, *caps)] == stamps


# -- concurrency and crashes --------------------------------------------------------------------


def test_ten_concurrent_runs_serialize(cluster: Path) -> None:
    """Ten overlapping runs, as cron can start them, with the default --wait of 10 s."""
    node = cluster / "h100-0"
    values = [300 + 10 * i for i in range(10)]
    env = dict(os.environ, NO_COLOR="1")
    procs = [subprocess.Popen([sys.executable, "-m", "joulectl", "--root", str(node), "cap", "--watts", str(v),
                               "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for v in values]
    codes = [p.wait(timeout=120) for p in procs]
    assert set(codes) <= {0, 7}, [p.stderr.read() if p.stderr else "" for p in procs]
    done = [v for v, c in zip(values, codes, strict=True) if c == 0]
    data = journal(cluster, "h100-0")  # valid JSON
    final = smi_limits(cluster, "h100-0")
    assert len(set(final)) == 1 and final[0] in done
    assert data["devices"]["0000:18:00.0"]["original"] == {"capWatts": 700.0}
    assert data["devices"]["0000:18:00.0"]["current"] == {"capWatts": final[0]}


def test_kill_during_a_write_leaves_a_readable_journal(cap: Cap, cluster: Path) -> None:
    node = cluster / "h100-0"
    assert cap("h100-0", "--watts", "500").returncode == 0
    before = (node / "var/lib/joulectl/state.json").read_text()
    # an nvidia-smi that hangs in the -pl write, so that the kill lands during it
    real = node / "bin/nvidia-smi.real"
    (node / "bin/nvidia-smi").rename(real)
    marker = node / "writing"
    wrapper = node / "bin/nvidia-smi"
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -pl "*) : > "{marker}"; sleep 60;; esac\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "joulectl", "--root", str(node), "--tool-timeout", "120", "cap",
                             "--watts", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    after = json.loads((node / "var/lib/joulectl/state.json").read_text())
    # the write-ahead journal, saved before the -pl write: every original kept, the target pending
    assert after["kind"] == "Journal" and after != json.loads(before)
    for dev in after["devices"].values():
        assert (dev["original"], dev["current"], dev["pending"]) == (
            {"capWatts": 700.0}, {"capWatts": 500.0}, {"capWatts": [300.0]})
    # the lock died with the process: the next run proceeds, and its journal still knows the original
    wrapper.unlink()
    real.rename(node / "bin/nvidia-smi")
    r = cap("h100-0", "--watts", "300", "--wait", "5")
    assert r.returncode == 0, r.stderr
    assert journal(cluster, "h100-0")["devices"]["0000:18:00.0"]["original"] == {"capWatts": 700.0}


def test_intel_without_rated_max_is_blocked(cap: Cap, cluster: Path) -> None:
    # the out-of-tree i915 (intel-gpu-i915-backports) shows no power1_rated_max on Flex
    for f in (cluster / "flex-0/sys").rglob("power1_rated_max"):
        f.unlink()
    r = cap("flex-0", "--pct", "60", "-o", "json")
    assert r.returncode == 5
    assert {(x["status"], x["message"]) for x in rows(r)} == {
        ("blocked", "the power limit range of the Intel GPUs is unknown")}
    bus = rows(r)[0]["device"]
    assert int(hwmon_file(cluster, "flex-0", bus, "power1_max").read_text()) == 150_000_000


def test_a_driver_reload_loses_the_cap_and_the_next_run_puts_it_back(tmp_path: Path) -> None:
    """What the cron entry and the systemd timer are for: limits do not survive a driver reload."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: nopm}\nspec:\n"
                    "  pools:\n  - {name: nopm, profile: nvidia-l40s-4gpu, count: 1,\n"
                    "     overrides: {gpus: {persistenceMode: disabled}}, baseLoad: {cpuUtil: 0.0, gpuUtil: 0.0}}\n")
    root = tmp_path / "root"
    assert _joulectl("simulate", "render", str(spec), "--root", str(root)).returncode == 0
    node = root / "nopm-0"
    first = _joulectl("--root", str(node), "cap", "--pct", "60", "-o", "json")
    assert {x["status"] for x in rows(first)} == {"applied"}
    # persistence mode off and the GPUs idle: the driver unloads and the limits go back to default
    run = _joulectl("simulate", "run", str(spec), "--root", str(root), "--ticks", "2", "--fast")
    assert run.returncode == 0, run.stderr
    assert smi_limits(root, "nopm-0") == [350.0] * 4
    again = _joulectl("--root", str(node), "cap", "--pct", "60", "-o", "json")
    assert {(x["beforeWatts"], x["targetWatts"], x["status"]) for x in rows(again)} == {(350, 210, "applied")}
    assert journal(root, "nopm-0")["devices"]["0000:4f:00.0"]["original"] == {"capWatts": 350.0}


#: The script that runs joulectl and SIGKILLs it right after its N-th sysfs write
#: (``Host.write``), so that the gap between a write and the journal save is hit every time.
KILL_AFTER_WRITE = str(Path(__file__).resolve().parents[1] / "fixtures" / "kill_after_write.py")


def _killed_after_write(node: Path, n: int, *args: str) -> None:
    env = dict(os.environ, NO_COLOR="1", KILL_AFTER_WRITE=str(n))
    env.pop("JOULECTL_ROOT", None)
    r = subprocess.run([sys.executable, KILL_AFTER_WRITE, "--root", str(node), *args], capture_output=True,
                       text=True, env=env, timeout=60, check=False)
    assert r.returncode == -signal.SIGKILL, (n, args, r.stderr)


def test_kill_right_after_a_write_keeps_the_operators_cap_for_restore(cap: Cap, cluster: Path) -> None:
    """An operator's cap (600 W, set by hand, no journal) survives a SIGKILL right after each of
    joulectl's writes: the original is journaled ahead of the first write, so --restore goes back
    to 600 W and not to the 750 W default (before the write-ahead save it did)."""
    node = cluster / "mi300x-0"
    caps = sorted(node.glob("sys/devices/*/*/hwmon/*/power1_cap"))
    assert len(caps) == 8
    for f in caps:
        f.write_text("600000000\n")
    for n in range(1, 9):  # a kill after the 1st, 2nd, ... 8th GPU write, one run after the other
        _killed_after_write(node, n, "cap", "--watts", str(400 + 10 * n))
        assert [f.read_text().strip() for f in caps].count(str((400 + 10 * n) * 10**6)) == n
        data = journal(cluster, "mi300x-0")
        assert {json.dumps(d["original"]) for d in data["devices"].values()} == {'{"capWatts": 600.0}'}
        assert len(data["devices"]) == 8
    _killed_after_write(node, 3, "cap", "--restore")  # a restore killed half-way is run again
    r = cap("mi300x-0", "--restore", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert {row["afterWatts"] for row in rows(r)} == {600.0}
    assert {f.read_text().strip() for f in caps} == {"600000000"}
    assert all(not d["original"] and not d["current"] for d in journal(cluster, "mi300x-0")["devices"].values())
