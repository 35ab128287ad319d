"""Issue 12, items 1, 2 and 6: restores that stay put, caps that never lose a GPU, a journal that
stops growing. Every test runs the real CLI on nodes rendered by ``joulectl simulate render``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cron_support import (
    hwmon,
    jl,
    journal_path,
    node_copy,
    read_w,
    rendered,
    rows,
    smi_limits,
    smi_set,
    write_w,
)

from joulectl.ops import journal as journal_mod


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory.mktemp("cron-restore"))


def _stat(p: Path) -> tuple[int, int, int]:
    st = p.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


MI250X_PRIMARY = "0000:c1:00.0"
H100 = "0000:18:00.0"


# -- item 1: a restore is idempotent and leaves the operator's cap -----------------------------


def test_amd_restore_three_times_stays_at_the_operators_cap(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 500)
    assert jl(node, "cap", "--pct", "60").returncode == 0
    assert read_w(cap) == 336
    first = jl(node, "cap", "--restore", "-o", "json")
    assert first.returncode == 0, first.stderr
    assert [(r["beforeWatts"], r["targetWatts"], r["status"]) for r in rows(first)
            if r["device"] == MI250X_PRIMARY] == [(336, 500, "applied")]
    saved = _stat(journal_path(node))
    for _ in range(3):
        again = jl(node, "cap", "--restore", "-o", "json")
        assert again.returncode == 0
        row = next(r for r in rows(again) if r["device"] == MI250X_PRIMARY)
        assert (row["targetWatts"], row["status"]) == (500, "unchanged")
        assert "left as it is" in row["message"]
        assert read_w(cap) == 500
    # item 6: the no-op restores wrote nothing (same file, same time stamp)
    assert _stat(journal_path(node)) == saved
    history = json.loads(journal_path(node).read_text())["devices"][MI250X_PRIMARY]["history"]
    assert [(h["command"], h["setting"], h["value"]) for h in history] == [
        ("cap", "capWatts", 336.0), ("restore", "capWatts", 500.0), ("restore", "*", "restored")]


def test_rapl_restore_three_times_stays_at_the_operators_cap(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "xeon-0", tmp_path)
    limit = node / "sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    write_w(limit, 250)
    assert jl(node, "cap", "--cpu", "--pct", "60").returncode == 0
    assert read_w(limit) == 162
    for _ in range(3):
        r = jl(node, "cap", "--cpu", "--restore", "-o", "json")
        assert r.returncode == 0, r.stderr
        assert read_w(limit) == 250
    assert read_w(node / "sys/class/powercap/intel-rapl:1/constraint_0_power_limit_uw") == 270


def test_nvidia_restore_three_times_stays_at_the_operators_cap(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "h100-0", tmp_path)
    smi_set(node, H100, 650)
    assert jl(node, "cap", "--pct", "60").returncode == 0
    assert smi_limits(node)[0] == 420
    for _ in range(3):
        r = jl(node, "cap", "--restore", "-o", "json")
        assert r.returncode == 0, r.stderr
        assert smi_limits(node) == [650.0] + [700.0] * 7


def test_schedule_restore_window_three_times_stays_at_the_operators_cap(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 500)
    schedule = str(Path(__file__).parents[2] / "examples/eco-schedule.yaml")
    night = jl(node, "cap", "--schedule", schedule, "--at", "2026-12-01T23:00:00+01:00")  # Tuesday night
    assert night.returncode == 0, night.stderr
    assert read_w(cap) == 336
    for _ in range(3):
        office = jl(node, "cap", "--schedule", schedule, "--at", "2026-12-01T10:00:00+01:00", "-o", "json")
        assert office.returncode == 0, office.stderr
        assert json.loads(office.stdout)["schedule"]["window"] == "default"
        assert read_w(cap) == 500
    saved = _stat(journal_path(node))
    assert jl(node, "cap", "--schedule", schedule, "--at", "2026-12-01T10:05:00+01:00").returncode == 0
    assert _stat(journal_path(node)) == saved


def test_an_operators_change_after_joulectls_cap_is_what_restore_leaves(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 500)
    assert jl(node, "cap", "--pct", "60").returncode == 0
    write_w(cap, 450)  # the operator takes the device back by hand
    r = jl(node, "cap", "--restore", "-o", "json")
    row = next(x for x in rows(r) if x["device"] == MI250X_PRIMARY)
    assert (row["beforeWatts"], row["targetWatts"], row["status"]) == (450, 450, "unchanged")
    assert "set by hand since joulectl's change" in row["message"]
    assert read_w(cap) == 450
    # and a cap made over the operator's new value journals that value as the original
    assert jl(node, "cap", "--pct", "60").returncode == 0
    write_w(cap, 400)
    assert jl(node, "cap", "--pct", "70").returncode == 0
    assert read_w(cap) == 392
    assert jl(node, "cap", "--restore").returncode == 0
    assert read_w(cap) == 400


def test_a_restore_without_any_journal_goes_to_the_default_once(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 300)
    r = jl(node, "cap", "--restore", "-o", "json")  # SPEC §4: no journal entry, the default
    assert next(x for x in rows(r) if x["device"] == MI250X_PRIMARY)["status"] == "applied"
    assert read_w(cap) == 560
    write_w(cap, 480)  # after that, the operator's
    assert jl(node, "cap", "--restore").returncode == 0
    assert read_w(cap) == 480


def test_a_journal_with_restore_none_from_an_older_joulectl_is_left_as_it_is(cluster: Path,
                                                                            tmp_path: Path) -> None:
    """The buggy journals earlier versions wrote (``restore capWatts None``) must not send the
    next restore to the default."""
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 500)
    old = {"apiVersion": "joulectl.io/v1alpha1", "kind": "Journal", "devices": {MI250X_PRIMARY: {
        "vendor": "amd", "model": "AMD Instinct MI250X", "kind": "gpu", "original": {}, "current": {},
        "history": [{"at": "2026-11-30T10:00:00Z", "command": "cap", "setting": "capWatts", "value": 336.0},
                    {"at": "2026-11-30T10:05:00Z", "command": "restore", "setting": "capWatts", "value": 500.0},
                    {"at": "2026-11-30T10:10:00Z", "command": "restore", "setting": "capWatts", "value": None}]}}}
    journal_path(node).parent.mkdir(parents=True)
    journal_path(node).write_text(json.dumps(old))
    assert jl(node, "cap", "--restore").returncode == 0
    assert read_w(cap) == 500


# -- item 2: no target under 1 W or the device minimum ----------------------------------------


@pytest.mark.parametrize(("name", "bus", "operator_w", "default_w"), [
    ("mi250x-0", MI250X_PRIMARY, 500, 560),
    ("mi300x-0", "0000:0c:00.0", 600, 750),
])
def test_a_tiny_pct_never_writes_0_w_and_the_gpu_stays_controllable(cluster: Path, tmp_path: Path, name: str,
                                                                     bus: str, operator_w: float,
                                                                     default_w: float) -> None:
    node = node_copy(cluster, name, tmp_path)
    cap = hwmon(node, bus, "power1_cap")
    write_w(cap, operator_w)
    r = jl(node, "cap", "--pct", "0.05", "-o", "json")
    assert r.returncode == 0, r.stderr
    row = next(x for x in rows(r) if x["device"] == bus)
    assert (row["targetWatts"], row["afterWatts"], row["status"]) == (1, 1, "applied")
    assert read_w(cap) == 1
    disc = json.loads(jl(node, "discover", "-o", "json").stdout)
    dev = next(d for d in disc["status"]["gpu"]["devices"] if d["busId"] == bus)
    assert dev["holdsLimit"] is True
    assert jl(node, "cap", "--watts", "400").returncode == 0
    assert read_w(cap) == 400
    assert jl(node, "cap", "--restore").returncode == 0
    assert read_w(cap) == operator_w
    assert default_w > operator_w


def test_a_journal_original_of_0_is_not_an_original(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    cap = hwmon(node, MI250X_PRIMARY, "power1_cap")
    write_w(cap, 300)
    bad = {"apiVersion": "joulectl.io/v1alpha1", "kind": "Journal", "devices": {MI250X_PRIMARY: {
        "vendor": "amd", "model": "AMD Instinct MI250X", "kind": "gpu", "original": {"capWatts": 0},
        "current": {"capWatts": 300.0}, "history": []}}}
    journal_path(node).parent.mkdir(parents=True)
    journal_path(node).write_text(json.dumps(bad))
    r = jl(node, "cap", "--restore", "-o", "json")
    row = next(x for x in rows(r) if x["device"] == MI250X_PRIMARY)
    assert (row["targetWatts"], row["status"]) == (560, "applied")  # the default, never 0 W
    assert read_w(cap) == 560


def test_a_watts_request_under_the_known_minimum_is_blocked(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "h100-0", tmp_path)
    r = jl(node, "cap", "--pct", "0.05", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert {(x["targetWatts"], x["status"]) for x in rows(r)} == {(200, "applied")}  # the H100's minimum


# -- item 6: a run that changes nothing writes nothing; history bounded -----------------------


def test_repeated_governor_set_and_cap_write_nothing(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    assert jl(node, "governor", "set", "low").returncode == 0
    assert jl(node, "cap", "--watts", "400").returncode == 0
    saved = _stat(journal_path(node))
    for args in (("governor", "set", "low"), ("cap", "--watts", "400"), ("governor", "set", "low")):
        r = jl(node, *args)
        assert r.returncode == 0, r.stderr
        assert _stat(journal_path(node)) == saved, args


def test_a_no_op_run_on_a_node_without_journal_creates_none(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    assert jl(node, "cap", "--watts", "560").returncode == 0  # already at 560 W everywhere
    assert jl(node, "governor", "reset").returncode == 0
    assert not journal_path(node).exists()


def test_history_is_bounded_by_count_and_by_bytes() -> None:
    rec = journal_mod.DeviceRecord(vendor="amd")
    for n in range(500):
        rec.note("cap", "capWatts", 100.0 + n)
    assert len(rec.history) == journal_mod.HISTORY_LIMIT
    assert rec.history[-1]["value"] == 599.0
    big = journal_mod.DeviceRecord(vendor="amd")
    for n in range(200):
        big.note("governor", "preset", {"preset": "x" * 1000, "n": n})
    assert len(json.dumps(big.history)) <= journal_mod.HISTORY_MAX_BYTES
    assert big.history[-1]["value"]["n"] == 199
    assert 10 <= len(big.history) < journal_mod.HISTORY_LIMIT


def test_a_cron_of_alternating_windows_keeps_the_journal_bounded(cluster: Path, tmp_path: Path) -> None:
    """60 runs of a schedule alternating cap and restore: the journal stays under a few KiB."""
    node = node_copy(cluster, "mi250x-0", tmp_path)
    journal_path(node).parent.mkdir(parents=True)
    j = journal_mod.Journal()
    from joulectl.host import Host

    host = Host(str(node))
    for n in range(300):  # as 300 alternating cron runs would leave it
        for bus in ("0000:c1:00.0", "0000:c9:00.0", "0000:d1:00.0", "0000:d9:00.0"):
            j.record(bus, "capWatts", 560.0, 336.0 + n % 2, vendor="amd", model="AMD Instinct MI250X")
            j.restored(bus, "capWatts")
    journal_mod.save(host, j)
    size = journal_path(node).stat().st_size
    assert size < 4 * journal_mod.HISTORY_MAX_BYTES
    r = jl(node, "cap", "--pct", "60")
    assert r.returncode == 0, r.stderr
    assert journal_path(node).stat().st_size < 4 * journal_mod.HISTORY_MAX_BYTES
    assert os.path.getsize(journal_path(node)) > 0
