"""Issue 12, items 3, 4, 8 and 10, through the real CLI on rendered nodes: tools resolve inside the
root, tool output is read with a bound, FIFOs never hang a run, and escapes say what happened."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cron_support import hwmon, jl, journal_path, node_copy, read_w, rendered, rows, write_w
from reliability_support import assert_clean_exit, assert_input_error, run_python

MI250X_PRIMARY = "0000:c1:00.0"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory.mktemp("cron-confinement"))


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


# -- item 3: tools resolve inside the root -------------------------------------------------------


@pytest.mark.parametrize("how", ["bin", "bin/nvidia-smi"])
def test_a_tool_symlinked_out_of_the_root_is_never_run(cluster: Path, tmp_path: Path, how: str) -> None:
    node = node_copy(cluster, "h100-0", tmp_path / "nodes")
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = tmp_path / "ran"
    _script(outside / "nvidia-smi", f"touch {marker}\necho 'Power limit set'")
    if how == "bin":
        os.rename(node / "bin", tmp_path / "bin.orig")
        (node / "bin").symlink_to(outside)
    else:
        (node / "bin/nvidia-smi").unlink()
        (node / "bin/nvidia-smi").symlink_to(outside / "nvidia-smi")
    r = jl(node, "cap", "--watts", "400")
    assert_clean_exit(r.returncode, r.stderr, {3})
    assert "nvidia-smi resolves outside the host root" in r.stderr
    assert not marker.exists()
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr
    assert not marker.exists()
    assert "resolves outside the host root" in d.stdout


# -- item 4: bounded tool output ----------------------------------------------------------------


def _peak(node: Path, *args: str) -> tuple[int, float, str, str]:
    """Exit code, peak RSS (MiB) of joulectl and its children, seconds, stderr of one run."""
    code = f"""
import json, resource, subprocess, sys, time
t = time.monotonic()
p = subprocess.run([sys.executable, "-m", "joulectl", "--root", {str(node)!r}, *{list(args)!r}],
                   capture_output=True, text=True, timeout=120)
print(json.dumps([p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  time.monotonic() - t, p.stderr, p.stdout]))
"""
    r = run_python(code, timeout=180)
    rc, mib, secs, err, out = json.loads(r.stdout)
    return int(rc), float(mib), float(secs), str(err) + str(out)


@pytest.mark.parametrize(("body", "what"), [
    ("exec yes 0123456789abcdef0123456789abcdef", "printed more than 8 MiB on stdout; killed"),
    ("exec yes 0123456789abcdef0123456789abcdef >&2", "printed more than 1 MiB on stderr; killed"),
    ("while :; do echo '<nvidia_smi_log>'; sleep 0.05; done", "timed out after 1 s"),
])
def test_a_tool_that_prints_for_ever_is_killed_at_the_limit(cluster: Path, tmp_path: Path, body: str,
                                                             what: str) -> None:
    node = node_copy(cluster, "h100-0", tmp_path)
    (node / "bin/nvidia-smi").unlink()
    _script(node / "bin/nvidia-smi", body)
    rc, mib, secs, text = _peak(node, "--tool-timeout", "1", "discover", "-o", "json")
    assert rc == 0, text
    assert what in text
    assert mib < 200, mib  # was 4.8 GB: stdout is read incrementally and bounded
    assert secs < 30, secs  # killed, not read until the flood ends (generous: a loaded CI machine)


# -- item 8: FIFOs ------------------------------------------------------------------------------


def _fifo_attr(cluster: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A copy of the MI250X node whose first primary die has a FIFO as attribute ``name``."""
    node = node_copy(cluster, "mi250x-0", tmp_path)
    fifo = hwmon(node, MI250X_PRIMARY, name)
    fifo.unlink()
    os.mkfifo(fifo)
    return node, fifo


@pytest.mark.parametrize(("attr", "args", "status", "message"), [
    ("power1_cap_max", ("--pct", "60"), "blocked", "power1_cap_max unreadable (not a regular file (a FIFO))"),
    ("power1_cap", ("--watts", "400"), "error", "not a regular file (a FIFO)"),
])
def test_a_fifo_as_a_sysfs_attribute_fails_that_device_only(cluster: Path, tmp_path: Path, attr: str,
                                                            args: tuple[str, ...], status: str, message: str) -> None:
    node, fifo = _fifo_attr(cluster, tmp_path, attr)
    r = jl(node, "cap", *args, "-o", "json", timeout=60)
    assert_clean_exit(r.returncode, r.stderr, {5})
    by_dev = {x["device"]: x for x in rows(r)}
    assert by_dev[MI250X_PRIMARY]["status"] == status
    assert message in by_dev[MI250X_PRIMARY]["message"]
    assert {by_dev[b]["status"] for b in ("0000:c9:00.0", "0000:d1:00.0", "0000:d9:00.0")} == {"applied"}
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_fifo_as_cpuinfo_does_not_hang_discover(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "xeon-0", tmp_path)
    (node / "proc/cpuinfo").unlink()
    os.mkfifo(node / "proc/cpuinfo")
    r = jl(node, "discover", "-o", "json", timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_fifo_as_the_journal_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    journal_path(node).parent.mkdir(parents=True)
    os.mkfifo(journal_path(node))
    r = jl(node, "cap", "--watts", "400", timeout=60)
    assert_input_error(r.returncode, r.stderr, "var/lib/joulectl/state.json", "not a regular file (a FIFO)")
    assert read_w(hwmon(node, MI250X_PRIMARY, "power1_cap")) == 560


def test_a_directory_as_the_journal_or_the_lock_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    journal_path(node).mkdir(parents=True)
    r = jl(node, "cap", "--watts", "400", timeout=60)
    assert_input_error(r.returncode, r.stderr, "state.json", "not a regular file (a directory)")
    journal_path(node).rmdir()
    (node / "run/joulectl/lock").unlink(missing_ok=True)
    (node / "run/joulectl/lock").mkdir(parents=True)
    r = jl(node, "cap", "--watts", "400", timeout=60)
    assert_input_error(r.returncode, r.stderr, "run/joulectl/lock", "a directory")


def test_a_fifo_as_the_lock_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    (node / "run/joulectl").mkdir(parents=True, exist_ok=True)
    os.mkfifo(node / "run/joulectl/lock")
    r = jl(node, "cap", "--watts", "400", timeout=60)
    assert_input_error(r.returncode, r.stderr, "run/joulectl/lock", "not a regular file (a FIFO)")


def test_a_fifo_as_an_input_file_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    fifo = tmp_path / "twin.yaml"
    os.mkfifo(fifo)
    r = jl(node, "cap", "--from-twin", str(fifo), timeout=60)
    assert_input_error(r.returncode, r.stderr, str(fifo), "not a regular file (a FIFO)")
    spec = tmp_path / "spec.yaml"
    os.mkfifo(spec)
    r = jl(node, "simulate", "validate", str(spec), timeout=60)
    assert_input_error(r.returncode, r.stderr, str(spec), "not a regular file (a FIFO)")


# -- item 10: escapes say what happened ---------------------------------------------------------


def test_var_symlinked_out_of_the_root_is_exit_2_not_run_as_root(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path / "nodes")
    outside = tmp_path / "outside"
    (outside / "lib/joulectl").mkdir(parents=True)
    (node / "var").symlink_to(outside)
    r = jl(node, "cap", "--watts", "400")
    assert_input_error(r.returncode, r.stderr, "resolves outside the host root")
    assert "run as root" not in r.stderr
    assert list((outside / "lib/joulectl").iterdir()) == []


def test_the_journal_symlinked_out_of_the_root_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path / "nodes")
    outside = tmp_path / "state.json"
    outside.write_text('{"kind": "Journal", "devices": {}}')
    journal_path(node).parent.mkdir(parents=True)
    journal_path(node).symlink_to(outside)
    r = jl(node, "cap", "--watts", "400")
    assert_input_error(r.returncode, r.stderr, "var/lib/joulectl/state.json", "resolves outside the host root")
    assert outside.read_text() == '{"kind": "Journal", "devices": {}}'


def test_an_escaping_cap_attribute_gets_a_row_and_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path / "nodes")
    outside = tmp_path / "power1_cap"
    write_w(outside, 300)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    cap.unlink()
    cap.symlink_to(outside)
    r = jl(node, "cap", "--watts", "400", "-o", "json")
    assert_input_error(r.returncode, r.stderr, "power1_cap", "resolves outside the host root")
    by_dev = {x["device"]: x for x in rows(r)}
    assert "resolves outside the host root" in by_dev[MI250X_PRIMARY]["message"]
    assert by_dev["0000:c9:00.0"]["status"] == "applied"
    assert read_w(outside) == 300  # never written
    d = jl(node, "discover", "-o", "json")
    assert MI250X_PRIMARY in [g["busId"] for g in json.loads(d.stdout)["status"]["gpu"]["devices"]]


def test_an_escaping_rapl_zone_gets_a_row_and_exit_2(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "xeon-0", tmp_path / "nodes")
    zone = node / "sys/class/powercap/intel-rapl:0"
    real = zone.resolve()
    outside = tmp_path / "zone"
    import shutil

    shutil.copytree(real, outside, symlinks=True)
    zone.unlink()
    zone.symlink_to(outside)
    before = (outside / "constraint_0_power_limit_uw").read_text()
    r = jl(node, "cap", "--cpu", "--watts", "200", "-o", "json")
    assert_input_error(r.returncode, r.stderr, "intel-rapl:0", "resolves outside the host root")
    by_dev = {x["device"]: x for x in rows(r)}
    assert "resolves outside the host root" in by_dev["intel-rapl:0"]["message"]
    assert by_dev["intel-rapl:1"]["status"] == "applied"
    assert (outside / "constraint_0_power_limit_uw").read_text() == before
