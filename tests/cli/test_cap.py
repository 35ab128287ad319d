"""`joulectl cap` through the real CLI on hand-written sysfs trees (kernel ABI: amdgpu hwmon, RAPL).

The real discover and the real AMD and CPU backends run; rendered nodes with the fake vendor
tools are exercised in tests/ops/test_cap_e2e.py.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Tree = Callable[[dict[str, str]], Path]


def amd_node(write_tree: Tree, *, gpus: int = 2, rapl: bool = True, hostname: str = "gpu-node-1") -> Path:
    files: dict[str, str] = {
        "/proc/sys/kernel/hostname": f"{hostname}\n",
        "/proc/cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum "
                         "8480+\nflags\t\t: fpu sse\n\n",
    }
    for i in range(gpus):
        dev = f"/sys/bus/pci/devices/0000:{0x11 + i:02x}:00.0"
        hw = f"{dev}/hwmon/hwmon{3 + i}"
        files.update({
            f"{dev}/vendor": "0x1002\n", f"{dev}/device": "0x74a1\n", f"{dev}/class": "0x120000\n",
            f"{dev}/product_name": "AMD Instinct MI300X\n",
            f"{dev}/power_dpm_force_performance_level": "auto\n",
            f"{dev}/pp_dpm_sclk": "0: 500Mhz\n1: 1300Mhz *\n2: 2100Mhz\n",
            f"{hw}/name": "amdgpu\n", f"{hw}/power1_cap": "750000000\n", f"{hw}/power1_cap_max": "750000000\n",
            f"{hw}/power1_cap_min": "0\n", f"{hw}/power1_cap_default": "750000000\n",
            f"{hw}/power1_average": "120000000\n",
        })
    if rapl:
        for s in range(2):
            z = f"/sys/class/powercap/intel-rapl:{s}"
            files.update({
                f"{z}/name": f"package-{s}\n", f"{z}/enabled": "1\n", f"{z}/energy_uj": "1000\n",
                f"{z}/max_energy_range_uj": "262143328850\n", f"{z}/constraint_0_name": "long_term\n",
                f"{z}/constraint_0_power_limit_uw": "350000000\n", f"{z}/constraint_0_max_power_uw": "350000000\n",
                f"{z}/constraint_0_time_window_us": "999424\n", f"{z}/constraint_1_name": "short_term\n",
                f"{z}/constraint_1_power_limit_uw": "420000000\n", f"{z}/constraint_1_max_power_uw": "0\n",
                f"{z}/constraint_1_time_window_us": "2440\n",
            })
    return write_tree(files)


def cap_of(root: Path, bus: str) -> int:
    hw = next((root / f"sys/bus/pci/devices/{bus}/hwmon").iterdir())
    return int((hw / "power1_cap").read_text())


def pl1_of(root: Path, zone: int) -> int:
    return int((root / f"sys/class/powercap/intel-rapl:{zone}/constraint_0_power_limit_uw").read_text())


def test_pct_table(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--pct", "60")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["DEVICE", "MODEL", "BEFORE", "TARGET", "AFTER", "STATUS", "MESSAGE"]
    assert lines[1].split() == ["0000:11:00.0", "AMD", "Instinct", "MI300X", "750", "W", "450", "W", "450", "W",
                                "applied"]
    assert cap_of(root, "0000:11:00.0") == 450_000_000 and cap_of(root, "0000:12:00.0") == 450_000_000
    assert r.stderr == ""


def test_json_cap_result_and_idempotent_rerun(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--watts", "500", "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["apiVersion"] == "joulectl.io/v1alpha1" and doc["kind"] == "CapResult"
    assert doc["node"] == "gpu-node-1" and doc["mode"] == "watts" and doc["dryRun"] is False
    assert doc["results"][0] == {
        "device": "0000:11:00.0", "kind": "gpu", "vendor": "amd", "model": "AMD Instinct MI300X",
        "status": "applied", "message": "", "beforeWatts": 750.0, "targetWatts": 500.0, "afterWatts": 500.0,
    }
    assert doc["summary"]["applied"] == 2 and doc["exitCode"] == 0
    journal = json.loads((root / "var/lib/joulectl/state.json").read_text())
    assert journal["devices"]["0000:11:00.0"]["original"] == {"capWatts": 750.0}
    again = cli("--root", root, "cap", "--watts", "500", "-o", "yaml")
    assert again.exit_code == 0
    assert "kind: CapResult" in again.stdout and again.stdout.count("status: unchanged") == 2


def test_restore_from_journal(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    cli("--root", root, "cap", "--pct", "60")
    cli("--root", root, "cap", "--watts", "300")
    r = cli("--root", root, "cap", "--restore", "-o", "json")
    assert r.exit_code == 0
    assert [(x["beforeWatts"], x["targetWatts"]) for x in json.loads(r.stdout)["results"]] == [(300, 750)] * 2
    assert cap_of(root, "0000:11:00.0") == 750_000_000


def test_cpu_caps_pl1_of_every_package(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--cpu", "--pct", "60", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert [(x["device"], x["kind"], x["targetWatts"], x["status"]) for x in rows] == [
        ("intel-rapl:0", "cpu", 210, "applied"), ("intel-rapl:1", "cpu", 210, "applied")]
    assert pl1_of(root, 0) == 210_000_000 and pl1_of(root, 1) == 210_000_000


def test_locked_rapl_is_partial(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    (root / "sys/class/powercap/intel-rapl:1/enabled").write_text("0\n")
    r = cli("--root", root, "cap", "--cpu", "--watts", "200")
    assert r.exit_code == 5
    assert "intel-rapl:1" in r.stdout and "limit locked by firmware" in r.stdout
    assert r.stderr == "joulectl: error: 1 of 2 targets done; 1 blocked (see MESSAGE)\n"
    assert pl1_of(root, 1) == 350_000_000


def test_out_of_range_is_partial_naming_the_range(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    hw = next((root / "sys/bus/pci/devices/0000:12:00.0/hwmon").iterdir())
    (hw / "power1_cap_max").write_text("600000000\n")
    (hw / "power1_cap").write_text("600000000\n")
    r = cli("--root", root, "cap", "--watts", "700", "-o", "json")
    assert r.exit_code == 5
    rows = json.loads(r.stdout)["results"]
    assert [x["status"] for x in rows] == ["applied", "blocked"]
    # power1_cap_min 0 is an unknown minimum (issue 13)
    assert rows[1]["message"] == "700 W is above the maximum 600 W (range ?–600 W)"
    assert r.stderr == "joulectl: error: 1 of 2 targets done; 1 blocked (see MESSAGE)\n"


def test_dry_run_writes_nothing(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--all", "--pct", "50", "--dry-run", "-o", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert {x["status"] for x in doc["results"]} == {"planned"} and doc["dryRun"] is True
    assert cap_of(root, "0000:11:00.0") == 750_000_000 and pl1_of(root, 0) == 350_000_000
    assert not (root / "var").exists() and not (root / "run").exists()


def test_device_selector(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--pct", "60", "--device", "12:00.0", "-o", "json")
    assert [x["device"] for x in json.loads(r.stdout)["results"]] == ["0000:12:00.0"]
    assert cap_of(root, "0000:11:00.0") == 750_000_000
    bad = cli("--root", root, "cap", "--pct", "60", "--device", "H100")
    assert bad.exit_code == 3
    assert bad.stderr == "joulectl: error: --device H100 matched no GPU (this node has 2 GPUs)\n"


def test_no_gpu_is_exit_3(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree, gpus=0)
    r = cli("--root", root, "cap", "--pct", "60")
    assert r.exit_code == 3 and r.stdout == ""
    assert r.stderr == "joulectl: error: no GPU found on this node\n"


def test_vm_without_rapl_is_exit_3_for_cpu(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree, gpus=0, rapl=False)
    (root / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: QEMU\nflags\t\t: fpu hypervisor\n\n")
    r = cli("--root", root, "cap", "--cpu", "--pct", "60")
    assert r.exit_code == 3
    first, hint = r.stderr.splitlines()
    assert first == ("joulectl: error: no powercap package zone (RAPL) on this node: a virtual machine (the "
                     "hypervisor exposes no RAPL)")
    assert hint == "joulectl: hint: CPU power caps need the intel-rapl powercap driver"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pct", "0"], "--pct: must be in (0, 100], got 0"),
        (["--pct", "120"], "--pct: must be in (0, 100], got 120"),
        (["--watts", "0"], "--watts: must be at least 1 W, got 0"),
        ([], "cap: give exactly one of --watts, --pct, --restore, --from-twin, --schedule (got none)"),
        (["--restore", "--pct", "5"],
         "cap: give exactly one of --watts, --pct, --restore, --from-twin, --schedule (got --pct --restore)"),
        (["--pct", "50", "--cpu", "--all"], "target: give at most one of --gpu, --cpu, --all (got --cpu --all)"),
        (["--schedule", "/nonexistent/eco.yaml"], "/nonexistent/eco.yaml: schedule file not found"),
        (["--from-twin", "/nonexistent/twin.yaml"], "/nonexistent/twin.yaml: NodeTwin file not found"),
    ],
)
def test_usage_errors(cli: Any, write_tree: Tree, args: list[str], message: str) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", *args)
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == f"joulectl: error: {message}"
    assert r.stdout == "" and cap_of(root, "0000:11:00.0") == 750_000_000


def test_bad_output_format(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    r = cli("--root", root, "cap", "--pct", "60", "-o", "xml")
    assert (r.exit_code, r.stderr) == (
        2, "joulectl: error: -o: 'xml' is not one of table, wide, json, yaml, name, csv, jsonpath=..., "
           "custom-columns=...\n")


def test_lock_busy_is_exit_7(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    (root / "run/joulectl").mkdir(parents=True)
    fd = os.open(root / "run/joulectl/lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = cli("--root", root, "cap", "--pct", "60", "--wait", "0.1")
    finally:
        os.close(fd)
    assert r.exit_code == 7
    assert r.stderr.splitlines()[0] == (
        "joulectl: error: the node lock /run/joulectl/lock is held by another joulectl run (waited 0.1 s)")
    assert cap_of(root, "0000:11:00.0") == 750_000_000


def test_corrupt_journal_is_reported_and_kept_aside(cli: Any, write_tree: Tree) -> None:
    root = amd_node(write_tree)
    state = root / "var/lib/joulectl/state.json"
    state.parent.mkdir(parents=True)
    state.write_text("garbage")
    r = cli("--root", root, "cap", "--restore")
    assert r.exit_code == 0
    assert r.stderr.startswith("joulectl: warning: the journal /var/lib/joulectl/state.json was corrupt: kept "
                               "aside as /var/lib/joulectl/state.json.corrupt-")
    aside = [p for p in state.parent.iterdir() if ".corrupt-" in p.name]
    assert [p.read_text() for p in aside] == ["garbage"]


def test_twin_from_stdin(cli: Any, write_tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    root = amd_node(write_tree)
    twin = ("apiVersion: joulie.io/v1alpha1\nkind: NodeTwin\nspec:\n  nodeName: gpu-node-1\n  profile: eco\n"
            "  gpu:\n    powerCap: {scope: perGpu, capPctOfMax: 60, capWattsPerGpu: 400}\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(twin.encode())))
    r = cli("--root", root, "cap", "--from-twin", "-", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [x["targetWatts"] for x in json.loads(r.stdout)["results"]] == [400, 400]
    other = twin.replace("gpu-node-1", "gpu-node-2")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(other.encode())))
    r2 = cli("--root", root, "cap", "--from-twin", "-")
    assert r2.exit_code == 2
    assert r2.stderr.splitlines() == [
        "joulectl: error: <stdin>: spec.nodeName: the twin is for node 'gpu-node-2', this node is 'gpu-node-1'; "
        "refusing to apply it",
        "joulectl: hint: pass --node-name if this node is known by another name, or --any-node to apply it anyway",
    ]


def test_schedule_prints_the_window(cli: Any, write_tree: Tree, tmp_path: Path) -> None:
    root = amd_node(write_tree)
    sched = tmp_path / "eco.yaml"
    sched.write_text('timezone: UTC\nwindows:\n- {name: night, days: [daily], start: "22:00", end: "06:00", '
                     "cap: {pct: 60}}\ndefault: {cap: restore}\n")
    r = cli("--root", root, "cap", "--schedule", sched, "--at", "2026-01-05T23:00:00Z", "-o", "json")
    assert r.exit_code == 0
    assert r.stderr == (f"joulectl: schedule: {sched}: window 'night' in force at 2026-01-05T23:00:00+00:00 "
                        "(UTC) (cap pct 60.0)\n")
    doc = json.loads(r.stdout)
    assert doc["schedule"]["window"] == "night" and doc["schedule"]["at"] == "2026-01-05T23:00:00+00:00"
    day = cli("--root", root, "cap", "--schedule", sched, "--at", "2026-01-06T12:00:00Z")
    assert day.exit_code == 0 and "window 'default' in force" in day.stderr
    assert cap_of(root, "0000:11:00.0") == 750_000_000


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example_commands() -> list[list[str]]:
    """The joulectl command lines of the cron entry and the systemd service."""
    import shlex

    commands = []
    for line in (EXAMPLES / "cron/joulectl-eco").read_text().splitlines():
        if line.startswith("#") or "=" in line.split(" ")[0] or not line.strip():
            continue
        fields = line.split()
        assert fields[0] == "@reboot" or len(fields[:5]) == 5
        user_at = 1 if fields[0] == "@reboot" else 5
        assert fields[user_at] == "root"
        cmd = line.split(" joulectl ", 1)[1].split(" >>", 1)[0]
        commands.append(shlex.split(cmd))
    for line in (EXAMPLES / "systemd/joulectl-cap.service").read_text().splitlines():
        if line.startswith("ExecStart="):
            commands.append(shlex.split(line.split("/joulectl ", 1)[1]))
    return commands


def test_example_cron_and_systemd_commands_run(cli: Any, write_tree: Tree) -> None:
    commands = _example_commands()
    assert len(commands) == 3
    root = amd_node(write_tree)
    schedule = str(EXAMPLES / "eco-schedule.yaml")
    for args in commands:
        args = [schedule if a == "/etc/joulectl/eco-schedule.yaml" else a for a in args]
        r = cli("--root", root, *args, "--at", "2026-03-03T23:00:00+01:00")  # a weeknight
        assert r.exit_code == 0, (args, r.stderr)
        assert "window 'weeknight' in force" in r.stderr
    assert cap_of(root, "0000:11:00.0") == 450_000_000
    timer = (EXAMPLES / "systemd/joulectl-cap.timer").read_text()
    assert "OnBootSec=" in timer and "OnCalendar=" in timer and "Unit=joulectl-cap.service" in timer


def test_a_cap_loads_neither_discovers_renderings_nor_the_catalog_nor_an_xml_parser(write_tree: Tree) -> None:
    """A cap reads the inventory (joulectl.ops.inventory) and writes: the discover renderings, the
    catalog (its model names come from joulectl.gfd) and the NVIDIA -q -x parse are not loaded (the
    start-up of a command cron runs; docs/PERFORMANCE.md)."""
    import subprocess

    root = amd_node(write_tree)
    code = (
        "import sys\nfrom joulectl.cli import run\n"
        f"code = run(['--root', {str(root)!r}, 'cap', '--pct', '60', '-o', 'json'])\n"
        "loaded = sorted(m for m in ('joulectl.ops.discover', 'joulectl.catalog', 'joulectl.backends.nvidia_xml',\n"
        "                            'xml.etree') if m in sys.modules)\n"
        "print('LOADED', code, loaded, 'joulectl.ops.inventory' in sys.modules, file=sys.stderr)\n"
    )
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert "LOADED 0 [] True" in proc.stderr, proc.stderr
