"""The journal module: atomic saves, records, and the leftovers of killed saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulectl.host import Host
from joulectl.ops import journal


def test_save_removes_temp_files_of_killed_saves_but_keeps_set_aside_journals(tmp_path: Path) -> None:
    host = Host(str(tmp_path))
    state = tmp_path / "var" / "lib" / "joulectl"
    state.mkdir(parents=True)
    (state / ".state.json.abc123").write_text('{"half": ')  # a save killed before its rename
    (state / "state.json.corrupt-20261130T000000-000001").write_text("garbage")
    j = journal.Journal()
    j.record("0000:07:00.0", "capWatts", 700.0, 420.0, vendor="nvidia", model="H100")
    journal.save(host, j)
    assert sorted(p.name for p in state.iterdir()) == ["state.json", "state.json.corrupt-20261130T000000-000001"]
    data = json.loads((state / "state.json").read_text())
    assert data["devices"]["0000:07:00.0"]["original"] == {"capWatts": 700.0}
    assert journal.load(host).original("0000:07:00.0", "capWatts") == 700.0


def _full_journal() -> journal.Journal:
    j = journal.Journal()
    for n in range(journal.HISTORY_LIMIT + 5):  # a cron node: full histories
        for dev in ("0000:0c:00.0", "0000:07:00.0"):
            j.record(dev, "capWatts", 750.0, 400.0 + n, vendor="amd", model='MI300X "OAM"')
    j.intend("0000:07:00.0", "perfLevel", "auto", "manual", vendor="amd")
    return j


def test_saved_text_is_json_with_one_line_per_device(tmp_path: Path) -> None:
    host = Host(str(tmp_path))
    j = _full_journal()
    journal.save(host, j)
    text = (tmp_path / "var/lib/joulectl/state.json").read_text()
    data = json.loads(text)
    assert data["devices"] == {k: v.to_dict() for k, v in j.devices.items()}
    lines = text.splitlines()
    assert [line.split('": ')[0].strip() + '"' for line in lines if line.startswith("    ")] == [
        '"0000:07:00.0"', '"0000:0c:00.0"']  # sorted, one line each
    assert len(lines) == 4 + 1 + 2 + 2  # braces, four keys, two devices, closing brace of devices
    assert json.loads(journal.dumps({"kind": "Journal", "devices": {}})) == {"kind": "Journal", "devices": {}}
    assert journal.load(host).devices == j.devices


def test_the_write_ahead_copy_leaves_the_journal_untouched() -> None:
    j = _full_journal()
    before = json.dumps({k: v.to_dict() for k, v in j.devices.items()})
    intents = [journal.Intent("0000:0c:00.0", "capWatts", 750.0, 300.0, vendor="amd"),
               journal.Intent("0000:0c:00.0", "perfLevel", "auto", "manual", vendor="amd"),
               journal.Intent("0000:99:00.0", "capWatts", 300.0, 200.0, vendor="amd"),
               journal.Intent("0000:07:00.0", "perfLevel", "auto", "high", vendor="amd")]
    ahead = journal.journal_ahead(j, intents)
    assert json.dumps({k: v.to_dict() for k, v in j.devices.items()}) == before
    assert ahead.pending("0000:0c:00.0", "capWatts") == [300.0]
    assert ahead.pending("0000:07:00.0", "perfLevel") == ["manual", "high"]
    assert ahead.original("0000:0c:00.0", "capWatts") == 750.0 and "0000:99:00.0" not in j.devices
    assert ahead.devices["0000:0c:00.0"].history == j.devices["0000:0c:00.0"].history


def _entry_value(n: int, size: int) -> str:
    # {"at": "2026-12-01T00:00:00Z", "command": "cap", "setting": "s", "value": "<v>"} is 77 bytes
    # of JSON plus the value; the history's size counts 2 more per entry (the ", " or the brackets)
    return f"{n:02d}".ljust(size - 77 - 2, "x")


def test_history_keeps_the_newest_entries_within_16_kib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "_now", lambda: "2026-12-01T00:00:00Z")
    rec = journal.DeviceRecord()
    for n in range(20):  # 1,000 bytes each: 16 fit in 16,384, the 17th pushes the oldest out
        rec.note("cap", "s", _entry_value(n, 1000))
        assert len(json.dumps(rec.history)) <= 16384
    assert [e["value"][:2] for e in rec.history] == [f"{n:02d}" for n in range(4, 20)]
    rec.history.clear()  # a history changed behind the record's back is counted afresh
    rec.note("cap", "s", _entry_value(99, 1000))
    assert [e["value"][:2] for e in rec.history] == ["99"]
    small = journal.DeviceRecord()
    for n in range(60):  # small entries: the count bound (50) applies first
        small.note("cap", "s", n)
    assert [e["value"] for e in small.history] == list(range(10, 60))
    big = journal.DeviceRecord()
    big.note("cap", "s", "y" * 20000)  # one entry larger than the bound is kept: the newest
    big.note("cap", "s", "z")
    assert [e["value"] for e in big.history] == ["z"]


def test_history_trimming_matches_a_reference_over_random_sizes() -> None:
    import random

    rng = random.Random(21)

    def reference(history: list[dict[str, object]]) -> list[dict[str, object]]:
        history = history[-journal.HISTORY_LIMIT:]
        while len(history) > 1 and sum(len(json.dumps(e)) + 2 for e in history) > 16384:
            history = history[1:]
        return history

    for _ in range(30):
        rec = journal.DeviceRecord()
        expected: list[dict[str, object]] = []
        for n in range(rng.randrange(1, 120)):
            value = "v" * rng.choice([0, 10, 300, 2000, 9000])
            if rng.random() < 0.05:
                rec = rec.copy()  # a copy (the write-ahead journal) counts its history afresh
            rec.note("cap", "s", value)
            expected = reference([*expected, rec.history[-1]])
            assert rec.history == expected, n


def test_a_loaded_journal_knows_its_fingerprint_from_the_text(tmp_path: Path) -> None:
    host = Host(str(tmp_path))
    j = _full_journal()
    j.record("0000:07:00.0", "epp", None, "caf\u00e9 \"power\"", vendor="amd")  # escapes in a line
    journal.save(host, j)
    path = tmp_path / "var/lib/joulectl/state.json"
    loaded = journal.load(host)
    assert loaded.on_disk == journal.fingerprint(loaded) == journal.fingerprint(j)
    mtime = path.stat().st_mtime_ns
    journal.save(host, loaded)  # nothing changed: nothing written
    assert path.stat().st_mtime_ns == mtime
    # a journal in another shape (an older version's compact JSON) is encoded instead
    compact = json.dumps({"apiVersion": journal.API_VERSION, "kind": "Journal",
                          "devices": {k: v.to_dict() for k, v in j.devices.items()}})
    assert journal._fingerprint_of_text(compact) is None
    path.write_text(compact)
    assert journal.load(host).on_disk == journal.fingerprint(j)
    assert journal._fingerprint_of_text('{\n  "kind": "Journal",\n  "devices": {}\n}\n') is None
