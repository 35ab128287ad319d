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
