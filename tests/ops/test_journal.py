"""The journal module: atomic saves, records, and the leftovers of killed saves."""

from __future__ import annotations

import json
from pathlib import Path

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
