"""`simulate run --fuse`: joulectl and shell tools against nodes served live through FUSE."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.sim.fuse.conftest import Served, joulectl, requires_fuse

pytestmark = requires_fuse

RAPL0 = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
DRAM0 = RAPL0 + "/intel-rapl:0:0"
POLICY0 = "sys/devices/system/cpu/cpufreq/policy0"


def _errno_of_write(path: Path, data: bytes) -> int:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return exc.errno or -1
    try:
        os.write(fd, data)
    except OSError as exc:
        return exc.errno or -1
    finally:
        os.close(fd)
    return 0


def test_discover_through_fuse_matches_the_plain_tree(served: Served) -> None:
    live = joulectl("--root", str(served.node("intel-0")), "discover", "-o", "json")
    plain = joulectl("--root", str(served.root / "intel-0"), "discover", "-o", "json")
    assert live.returncode == 0, live.stderr
    doc, ref = json.loads(live.stdout), json.loads(plain.stdout)
    cpu = doc["status"]["cpu"]
    assert (cpu["rawModel"], cpu["sockets"], cpu["threads"]) == ("INTEL(R) XEON(R) GOLD 6530", 2, 128)
    assert [c["limitWatts"] for c in cpu["zones"][0]["constraints"]] == [270, 324]
    for d in (doc, ref):
        d["status"].pop("updatedAt")
    assert doc == ref


def test_flex_clamp_is_seen_by_caps_own_readback(served: Served) -> None:
    r = joulectl("--root", str(served.node("flex-0")), "cap", "--watts", "30", "-o", "json")
    assert r.returncode == 5, r.stderr
    results = json.loads(r.stdout)["results"]
    assert [x["status"] for x in results] == ["error"] * 4
    assert results[0]["afterWatts"] == 40.0
    assert results[0]["message"] == "0000:4d:00.0: read back 40 W after writing 30 W"
    # In force at once, and on the tree (the simulator's own copy).
    hwmon = served.root / "flex-0/sys/devices/pci0000:4d/0000:4d:00.0/hwmon/hwmon2/power1_max"
    assert hwmon.read_text() == "40000000\n"
    ok = joulectl("--root", str(served.node("flex-0")), "cap", "--watts", "100", "-o", "json")
    assert ok.returncode == 0, ok.stderr
    assert {x["afterWatts"] for x in json.loads(ok.stdout)["results"]} == {100.0}
    # the journal (var/, atomic rename) and the lock (run/) went through the mount
    assert (served.root / "flex-0/var/lib/joulectl/state.json").is_file()
    assert (served.root / "flex-0/run/joulectl/lock").is_file()


def test_cap_and_governor_on_the_cpu(served: Served) -> None:
    node = str(served.node("intel-0"))
    r = joulectl("--root", node, "cap", "--cpu", "--watts", "200", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert {x["afterWatts"] for x in json.loads(r.stdout)["results"]} == {200.0}
    assert (served.node("intel-0") / RAPL0 / "constraint_0_power_limit_uw").read_text() == "200000000\n"
    g = joulectl("--root", node, "governor", "set", "performance", "--cpu", "-o", "json")
    assert g.returncode == 0, g.stderr
    assert (served.node("intel-0") / POLICY0 / "scaling_governor").read_text() == "performance\n"
    # the performance policy pins EPP at once, as intel_pstate does
    assert (served.node("intel-0") / POLICY0 / "energy_performance_preference").read_text() == "performance\n"
    back = joulectl("--root", node, "governor", "reset", "-o", "json")
    assert back.returncode == 0, back.stderr
    assert (served.node("intel-0") / POLICY0 / "scaling_governor").read_text() == "powersave\n"


def test_amd_pinned_cap_and_sclk_mask_are_answered_at_the_write(served: Served) -> None:
    device = served.node("w7900-0") / "sys/bus/pci/devices/0000:03:00.0"
    cap = next((device / "hwmon").iterdir()) / "power1_cap"
    assert _errno_of_write(cap, b"200000000\n") == errno.EINVAL  # the W7900's cap is pinned at 241 W
    assert cap.read_text() == "241000000\n"
    # under auto the driver refuses a level mask (smu_force_ppclk_levels) and the table stays
    assert (device / "power_dpm_force_performance_level").read_text() == "auto\n"
    assert _errno_of_write(device / "pp_dpm_sclk", b"0\n") == errno.EINVAL
    assert (device / "pp_dpm_sclk").read_text() == "0: 500Mhz\n1: 1900Mhz\n2: 2495Mhz *\n"
    r = joulectl("--root", str(served.node("w7900-0")), "governor", "set", "efficient", "--gpu", "-o", "json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)["results"]
    assert (row["status"], row["after"]) == ("applied", "manual (sclk levels 0 (500 MHz), ceiling 1871 MHz)")
    # a mask is a command: the attribute keeps reading the level table, the active level marked
    assert (device / "pp_dpm_sclk").read_text() == "0: 500Mhz *\n1: 1900Mhz\n2: 2495Mhz\n"


def test_nvidia_cap_through_the_fake_tool_and_the_tick_takes_the_tools_lock(served: Served) -> None:
    from joulectl.sim import ledger

    r = joulectl("--root", str(served.node("h100-0")), "cap", "--watts", "500", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert {x["afterWatts"] for x in json.loads(r.stdout)["results"]} == {500.0}
    # The tools flock state/nvml.lock through the mount: the tick takes that same lock before its
    # read-modify-write of state/nvml.json, so while a tool holds it the node is not stepped.
    fd = os.open(served.node("h100-0") / "state/nvml.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = ledger.load(str(served.root / "h100-0"))
        time.sleep(1.6)  # three ticks
        assert ledger.load(str(served.root / "h100-0")).tick == held.tick  # type: ignore[union-attr]
    finally:
        os.close(fd)
    deadline = time.monotonic() + 30
    while ledger.load(str(served.root / "h100-0")).tick == held.tick:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the tick did not resume after the lock was released"
        time.sleep(0.05)
    state = json.loads((served.root / "h100-0/state/nvml.json").read_text())
    assert {g["power"]["limitMw"] for g in state["gpus"]} == {500_000}  # nothing lost in between


def test_nvidia_smi_through_the_mount_is_answered_by_python_every_time(served: Served) -> None:
    """The fake nvidia-smi's shell fast path (joulectl/sim/tools/nvfast.py) never serves through
    the mount: ``link`` is refused there, so no answer is prepared, and inode numbers are the
    mount's own per path, so a hard link made in the tree is another file through it."""
    node = served.node("h100-0")
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    for _ in range(2):
        r = subprocess.run([str(node / "bin/nvidia-smi"), "--query-gpu=pci.bus_id,power.limit,enforced.power.limit",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, env=env, timeout=60,
                           check=False)
        assert r.returncode == 0 and "import time:" in r.stderr, r.stderr  # Python answered
        assert len(r.stdout.splitlines()) == 8
    answers = served.root / "h100-0/state/nvsmi-answers"
    assert not answers.exists() or not any(n.endswith(".state") for n in os.listdir(answers))
    tree_state = served.root / "h100-0/state"
    os.link(tree_state / "node.json", tree_state / "node-link.json")
    try:
        assert os.path.samefile(tree_state / "node.json", tree_state / "node-link.json")
        assert not os.path.samefile(node / "state/node.json", node / "state/node-link.json")
    finally:
        os.unlink(tree_state / "node-link.json")


def test_read_only_attribute_is_eacces_even_for_root(served: Served) -> None:
    node = served.node("intel-0")
    assert _errno_of_write(node / POLICY0 / "cpuinfo_max_freq", b"9999999\n") == errno.EACCES
    assert _errno_of_write(node / RAPL0 / "energy_uj", b"0\n") == errno.EACCES
    assert (node / POLICY0 / "cpuinfo_max_freq").read_text() == "4000000\n"


def test_locked_rapl_limit_is_enodata_and_changes_nothing(served: Served) -> None:
    attr = served.node("intel-0") / DRAM0 / "constraint_0_power_limit_uw"
    assert _errno_of_write(attr, b"10000000\n") == errno.ENODATA
    assert attr.read_text() == "0\n"


def test_refused_value_fails_with_einval_and_changes_nothing(served: Served) -> None:
    attr = served.node("intel-0") / "sys/devices/system/cpu/cpufreq/policy5/scaling_governor"
    assert _errno_of_write(attr, b"turbo\n") == errno.EINVAL
    assert attr.read_text() == "powersave\n"


def test_epp_under_the_performance_policy_is_ebusy(served: Served) -> None:
    policy = served.node("intel-0") / "sys/devices/system/cpu/cpufreq/policy9"
    assert _errno_of_write(policy / "scaling_governor", b"performance") == 0
    assert (policy / "energy_performance_preference").read_text() == "performance\n"
    assert _errno_of_write(policy / "energy_performance_preference", b"balance_power\n") == errno.EBUSY
    assert (policy / "energy_performance_preference").read_text() == "performance\n"


def test_echo_into_an_attribute_and_one_store_up_to_nul(served: Served) -> None:
    node = served.node("intel-0")
    attr = node / "sys/devices/virtual/powercap/intel-rapl/intel-rapl:1/constraint_0_power_limit_uw"
    r = subprocess.run(["sh", "-c", f"echo 150000000 > '{attr}'"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert attr.read_text() == "150000000\n"
    fd = os.open(attr, os.O_WRONLY)  # as powercap-set writes: the value, a NUL, then garbage
    try:
        assert os.write(fd, b"180000000\x00\x7f\x12junk") == 16
    finally:
        os.close(fd)
    assert attr.read_text() == "180000000\n"
    # cpupower writes without O_TRUNC: the store is the value, nothing of the old one is left
    gov = node / "sys/devices/system/cpu/cpufreq/policy7/scaling_max_freq"
    fd = os.open(gov, os.O_WRONLY)
    try:
        os.write(fd, b"800000")
    finally:
        os.close(fd)
    assert gov.read_text() == "800000\n"


def test_files_look_as_sysfs_shows_them(served: Served) -> None:
    node = served.node("intel-0")
    st = os.stat(node / POLICY0 / "scaling_governor")
    assert (st.st_size, st.st_nlink) == (4096, 1)
    assert os.stat(node / POLICY0 / "cpuinfo_max_freq").st_mode & 0o777 == 0o444
    with pytest.raises(PermissionError):
        (node / "sys/new-attr").write_text("1\n")  # create: EACCES, as the VFS answers sysfs
    for op in (lambda: os.unlink(node / RAPL0 / "name"), lambda: os.rename(node / RAPL0 / "name", node / "sys/x"),
               lambda: os.mkdir(node / "sys/d"), lambda: os.rmdir(node / DRAM0)):
        with pytest.raises(OSError) as exc:
            op()
        assert exc.value.errno == errno.EPERM
    assert (node / RAPL0 / "name").read_text() == "package-0\n"
    # a writable attribute the emulator does not model takes the write and changes nothing
    enabled = node / RAPL0 / "enabled"
    assert enabled.read_text() == "1\n"
    assert _errno_of_write(enabled, b"0\n") == 0
    assert enabled.read_text() == "1\n"


def test_energy_moves_between_reads_and_never_back(served: Served) -> None:
    attr = served.node("intel-0") / RAPL0 / "energy_uj"
    values = []
    for _ in range(20):
        values.append(int(attr.read_text()))
        time.sleep(0.02)
    assert values == sorted(values)
    assert len(set(values)) >= 10  # it moved within ticks (0.5 s), not only at them
    # the ledger holds what a reader saw (a restart never resumes below it)
    from joulectl.sim import ledger

    led = ledger.load(str(served.root / "intel-0"))
    assert led is not None
    assert led.energy["pkg0"] >= values[-1]


def test_second_run_on_a_served_root_stops_with_one_line(served: Served) -> None:
    r = joulectl("simulate", "run", str(served.spec), "--root", str(served.root), "--fuse", "--ticks", "1")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"joulectl: error: {served.mnt}: --fuse: is served by another running simulator "
                                "(stop it first)")


def test_kill_9_leaves_a_tree_the_next_start_resumes(tmp_path: Path) -> None:
    from tests.sim.fuse.conftest import SPEC, start

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: flex")[0])
    root = tmp_path / "root"
    s = start(root, spec)
    attr = RAPL0 + "/constraint_0_power_limit_uw"
    (s.node("intel-0") / attr).write_text("190000000\n")
    time.sleep(1.2)  # a tick or two
    seen = int((s.node("intel-0") / RAPL0 / "energy_uj").read_text())
    s.stop(signal.SIGKILL)
    try:
        with pytest.raises(OSError) as exc:
            os.stat(s.node("intel-0"))
        assert exc.value.errno == errno.ENOTCONN  # the stale mount of a killed run
        again = start(root, spec)
        try:
            assert (again.node("intel-0") / attr).read_text() == "190000000\n"
            assert int((again.node("intel-0") / RAPL0 / "energy_uj").read_text()) >= seen
        finally:
            code, out, err = again.stop()
    finally:
        # a failure before the next start cleaned it would leave the killed run's mount behind
        # (pytest then cannot remove its directory, and warns at every later run)
        from joulectl.sim.fuse import mount

        if mount.mounted(str(root / "fuse")):
            mount.detach(str(root / "fuse"))
    assert code == 130, err
    assert "interrupted  yes" in out
    assert not (root / "fuse").exists()  # unmounted and removed at the stop


def test_missing_binding_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "mfusepy.py").write_text("raise ImportError('no mfusepy here')\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: x}\n"
                    "spec:\n  pools:\n  - {name: vm, profile: vm-no-powercap, count: 1}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    import sys

    r = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "run", str(spec), "--root",
                        str(tmp_path / "root"), "--fuse", "--ticks", "1"], capture_output=True, text=True,
                       env=env, check=False)
    assert r.returncode == 2
    assert r.stderr.strip() == "joulectl: error: --fuse: needs the mfusepy package: pip install 'joulectl[fuse]'"
    assert not (tmp_path / "root").exists()  # nothing rendered


def test_sigint_unmounts_and_removes_the_mount_point(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) ends the run as SIGTERM does: the tick finishes, the mount goes, exit 130."""
    from joulectl.sim.fuse import mount
    from tests.sim.fuse.conftest import SPEC, start

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: flex")[0])
    root = tmp_path / "root"
    s = start(root, spec)
    assert mount.mounted(str(root / "fuse"))
    code, out, err = s.stop(signal.SIGINT)
    assert code == 130, err
    assert "interrupted  yes" in out
    assert not mount.mounted(str(root / "fuse"))
    assert not (root / "fuse").exists()
