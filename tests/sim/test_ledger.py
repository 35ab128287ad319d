"""The energy ledger: in-place padded rewrites, rename above 2 KB, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulectl.errors import InputError
from joulectl.sim import ledger as lg


def _node(tmp_path: Path) -> str:
    (tmp_path / "n" / "state").mkdir(parents=True)
    return str(tmp_path / "n")


def test_round_trip_and_padding(tmp_path: Path) -> None:
    node = _node(tmp_path)
    assert lg.load(node) is None
    led = lg.Ledger("n", tick=3, time_s=12.5, energy={"pkg0": 10, "gpu1": 2**40}, state={"t.pkg0": 41.25})
    lg.write(node, led)
    assert os.path.getsize(lg.ledger_path(node)) == lg.INPLACE_BYTES
    again = lg.load(node)
    assert again == led


def test_small_ledger_rewritten_in_place(tmp_path: Path) -> None:
    node = _node(tmp_path)
    lg.write(node, lg.Ledger("n", energy={"pkg0": 1}))
    ino = os.stat(lg.ledger_path(node)).st_ino
    for tick in range(1, 5):
        lg.write(node, lg.Ledger("n", tick=tick, energy={"pkg0": tick * 1000}))
        assert os.stat(lg.ledger_path(node)).st_ino == ino
    loaded = lg.load(node)
    assert loaded is not None and loaded.energy == {"pkg0": 4000}


def test_large_ledger_by_rename_then_back_in_place(tmp_path: Path) -> None:
    node = _node(tmp_path)
    big = lg.Ledger("n", energy={f"counter-with-a-long-name-{i}": 10**12 + i for i in range(80)})
    lg.write(node, big)
    assert os.path.getsize(lg.ledger_path(node)) > lg.INPLACE_BYTES
    assert lg.load(node) == big
    small = lg.Ledger("n", energy={"pkg0": 5})
    lg.write(node, small)  # from a large file: rename, padded
    assert os.path.getsize(lg.ledger_path(node)) == lg.INPLACE_BYTES
    assert lg.load(node) == small
    assert not [p for p in os.listdir(os.path.join(node, "state")) if ".tmp." in p]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "state/ledger.json: ledger: not valid JSON"),
        ('{"v": 9}', "state/ledger.json: v: not a version 1 energy ledger"),
        ('{"v": 1, "e": {"pkg0": -1}}', "state/ledger.json: e: energy counters must be non-negative integers"),
        ('{"v": 1, "s": {"x": "hot"}}', "state/ledger.json: s: state values must be numbers"),
        ('{"v": 1, "tick": "x"}', "state/ledger.json: tick: tick and t must be numbers"),
    ],
)
def test_corrupt_ledger_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    node = _node(tmp_path)
    Path(lg.ledger_path(node)).write_text(content)
    with pytest.raises(InputError) as err:
        lg.load(node)
    assert message in str(err.value)


_WRITER = """
import sys
from joulectl.sim import ledger as lg
node = sys.argv[1]
i = 0
while True:
    i += 1
    lg.write(node, lg.Ledger("n", tick=i, time_s=float(i), energy={f"c{k}": i * 1000 + k for k in range(12)},
                              state={f"s{k}": i / 7 for k in range(12)}))
    if i == 1:
        print("ready", flush=True)
"""


def test_kill_mid_write_always_leaves_a_parsable_ledger(tmp_path: Path) -> None:
    node = _node(tmp_path)
    last_tick = 0
    for round_no in range(12):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, node], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.002 * (round_no % 4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        led = lg.load(node)
        assert led is not None
        assert led.energy["c0"] == led.tick * 1000
        assert led.energy["c11"] == led.tick * 1000 + 11
        assert led.tick >= 1
        last_tick = led.tick
    assert last_tick >= 1
