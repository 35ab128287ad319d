"""The journal and the node lock: arbitrary journal contents (a corrupt journal is set aside with its
bytes intact, never overwritten), kill -9 in the middle of saves (the journal always parses and
never loses a committed record), and 20 concurrent writers serialized by the lock (no lost record,
exit 7 / LockBusyError only when the wait runs out)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import NIGHTLY, REPO, examples

from joulectl.errors import ConfinementError, ExitCode, LockBusyError
from joulectl.host import Host
from joulectl.ops import journal as journal_mod
from joulectl.ops.journal import JOURNAL_PATH, Journal
from joulectl.ops.lock import node_lock

FUZZ = settings(max_examples=examples(1000), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

VALID = json.dumps(
    {"apiVersion": "joulectl.io/v1alpha1", "kind": "Journal",
     "devices": {"0000:07:00.0": {"vendor": "amd", "original": {"capWatts": 300.0}, "current": {"capWatts": 250.0},
                                  "history": []}}}
)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["kind", "devices", "original", "current", "history", "pending", "vendor", "model", "x"]),
        inner,
        max_size=4),
    max_leaves=15,
)
contents = (
    st.binary(max_size=200)
    | json_like.map(lambda v: json.dumps(v).encode())
    | json_like.map(lambda v: json.dumps({"kind": "Journal", "devices": v}).encode())
    | json_like.map(lambda v: json.dumps({"kind": "Journal", "devices": {"d": v}}).encode())
    | st.integers(1, len(VALID)).map(lambda n: VALID[:n].encode())  # a torn write
)


def _journal_dir(root: Path) -> Path:
    return root / JOURNAL_PATH.lstrip("/")


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("journal-root")


@FUZZ
@given(contents)
def test_load_parses_or_sets_aside_never_overwrites(fuzz_root: Path, data: bytes) -> None:
    path = _journal_dir(fuzz_root)
    if path.parent.exists():
        for leftover in path.parent.iterdir():
            leftover.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    host = Host(str(fuzz_root))
    j = journal_mod.load(host)
    if j.set_aside is None:
        assert path.read_bytes() == data  # loading never rewrites
        for device, rec in j.devices.items():
            assert isinstance(device, str)
            assert isinstance(rec.original, dict) and isinstance(rec.current, dict)
            assert isinstance(rec.history, list)
    else:
        assert not path.exists()
        assert (fuzz_root / j.set_aside.lstrip("/")).read_bytes() == data  # kept byte for byte
        assert j.devices == {}
    # Whatever was loaded can be used and saved again.
    j.record("0000:01:00.0", "capWatts", 300.0, 250.0)
    journal_mod.save(host, j)
    again = journal_mod.load(host)
    assert again.set_aside is None
    assert again.current("0000:01:00.0", "capWatts") == 250.0


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000 + b"]" * 100_000, b'{"kind": "Journal", "devices": ' + b"[" * 50_000],
    ids=["deep-json", "deep-torn"],
)
def test_deeply_nested_journal_is_set_aside(tmp_path: Path, data: bytes) -> None:
    """json.loads raised RecursionError, which load() did not catch (exit 1 for every cap run)."""
    path = _journal_dir(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    j = journal_mod.load(Host(str(tmp_path)))
    assert j.set_aside is not None
    assert (tmp_path / j.set_aside.lstrip("/")).read_bytes() == data


def test_oversized_journal_is_set_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal over the read limit raised HostIOError(EFBIG) out of load(); now it is set aside."""
    monkeypatch.setattr(journal_mod, "MAX_JOURNAL_BYTES", 4096)
    path = _journal_dir(tmp_path)
    path.parent.mkdir(parents=True)
    data = b'{"kind": "Journal", "devices": {}, "pad": "' + b"x" * 5000 + b'"}'
    path.write_bytes(data)
    j = journal_mod.load(Host(str(tmp_path)))
    assert j.set_aside is not None
    assert (tmp_path / j.set_aside.lstrip("/")).read_bytes() == data


# -- kill -9 in the middle of saves ---------------------------------------------------------------

SAVER = r"""
import sys
from joulectl.host import Host
from joulectl.ops import journal
host = Host(sys.argv[1])
j = journal.load(host)
if j.set_aside:
    print("SET-ASIDE", j.set_aside, flush=True)
    sys.exit(3)
values = [v for rec in j.devices.values() for v in rec.current.values()]
i = max(values, default=0)
while True:
    i += 1
    dev = f"dev{i % 8}"
    j.record(dev, "capWatts", f"orig-{dev}", i, vendor="amd", command="cap")
    journal.save(host, j)
    print(i, flush=True)
"""


def _check_journal(root: Path, committed: int) -> int:
    """The journal parses and holds every committed record; returns the last value it holds."""
    j = journal_mod.load(Host(str(root)))
    assert j.set_aside is None, f"journal corrupt after a kill (set aside to {j.set_aside})"
    values = [v for rec in j.devices.values() for v in rec.current.values()]
    last = max(values, default=0)
    assert last in (committed, committed + 1), (last, committed)  # the save in flight may have landed
    for value in range(max(1, last - 7), last + 1):
        dev = f"dev{value % 8}"
        assert j.current(dev, "capWatts") == value
        assert j.original(dev, "capWatts") == f"orig-{dev}"
    return last


def test_journal_survives_sigkill_at_random_points(tmp_path: Path) -> None:
    """Kill a process saving the journal in a loop with SIGKILL at random points (a fixed count: 40
    kills in CI, 500 nightly; never a time bound), then load: never corrupt, never a lost record."""
    max_kills = 500 if NIGHTLY else 40
    rng = random.Random(8)
    env = {**os.environ, "PYTHONPATH": REPO}
    committed = kills = 0
    for _ in range(max_kills):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None
        first = child.stdout.readline()  # one save committed: the kill lands after it, however slow the start
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate()
        out = first + out
        assert child.returncode == -signal.SIGKILL, (child.returncode, out, err)
        kills += 1
        lines = out.split()
        if lines:
            committed = int(lines[-1])
        committed = _check_journal(tmp_path, committed)
    assert kills == max_kills
    assert committed > 0
    leftovers = [p.name for p in _journal_dir(tmp_path).parent.iterdir() if p.name.startswith(".state.json.")]
    print(f"kills={kills} records={committed} temp-files-left={len(leftovers)}")


# -- the lock ----------------------------------------------------------------------------------

APPENDER = r"""
import sys
from joulectl.host import Host
from joulectl.ops import journal
from joulectl.ops.lock import node_lock
from joulectl.errors import LockBusyError
host = Host(sys.argv[1])
n = int(sys.argv[2])
try:
    with node_lock(host, float(sys.argv[3])):
        j = journal.load(host)
        j.record(f"proc{n}", "capWatts", 0, n, command="cap")
        journal.save(host, j)
except LockBusyError as e:
    print(e, file=sys.stderr)
    sys.exit(int(e.exit_code))
"""


def test_twenty_concurrent_writers_serialize_without_losing_a_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": REPO}
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(tmp_path), str(n), "120"],
                              stderr=subprocess.PIPE, text=True, env=env) for n in range(20)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    j = journal_mod.load(Host(str(tmp_path)))
    assert sorted(j.devices) == sorted(f"proc{n}" for n in range(20))
    assert all(j.current(f"proc{n}", "capWatts") == n for n in range(20))


HOLDER = r"""
import sys
from joulectl.host import Host
from joulectl.ops.lock import node_lock
with node_lock(Host(sys.argv[1]), 5):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_lock_busy_only_when_the_wait_runs_out(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": REPO}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "held\n"
    host = Host(str(tmp_path))
    with pytest.raises(LockBusyError) as e, node_lock(host, 0.2):
        pass
    assert e.value.exit_code == ExitCode.LOCK_BUSY
    assert str(e.value) == "the node lock /run/joulectl/lock is held by another joulectl run (waited 0.2 s)"
    assert e.value.hint is not None and e.value.hint.startswith("raise --wait")
    # A waiter with enough --wait gets the lock as soon as the holder lets go.
    waiter = subprocess.Popen([sys.executable, "-c", APPENDER, str(tmp_path), "1", "60"],
                              stderr=subprocess.PIPE, text=True, env=env)
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0
    assert waiter.wait(timeout=60) == 0
    assert journal_mod.load(host).current("proc1", "capWatts") == 1


def test_a_killed_holder_never_leaves_the_node_locked(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": REPO}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait(timeout=60)
    host = Host(str(tmp_path))
    with node_lock(host, 30):
        j = Journal()
        j.record("after-kill", "capWatts", 1, 2)
        journal_mod.save(host, j)
    assert journal_mod.load(host).current("after-kill", "capWatts") == 2


def test_lock_file_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    root = tmp_path / "root"
    (root / "run" / "joulectl").mkdir(parents=True)
    (root / "run" / "joulectl" / "lock").symlink_to(outside)
    with pytest.raises(ConfinementError) as e, node_lock(Host(str(root)), 0.1):
        pass
    assert outside.read_text() == "precious\n"
    assert str(e.value) == "/run/joulectl/lock: the node lock is a symlink; refusing to follow it"
    assert e.value.exit_code == ExitCode.USAGE
