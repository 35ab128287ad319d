"""Host.read_attrs (one directory, many attributes, opened relative to it) answers as read_attr
does for each file: plain values, missing files, symlinks inside and outside the root, a FIFO, a
directory, a large file, and a directory that is itself a symlink out of the root."""

from __future__ import annotations

import os
from pathlib import Path

from joulectl.host import Attr, Host

LEAVES = ["plain", "missing", "inside", "outside", "fifo", "subdir", "big", "empty"]


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    d = root / "sys" / "devices" / "system" / "cpu" / "cpufreq" / "policy0"
    d.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("42\n")
    (d / "plain").write_text("powersave\n")
    (root / "sys" / "real").write_text("800000\n")
    (d / "inside").symlink_to("../../../../../real")
    (d / "outside").symlink_to(outside / "secret")
    os.mkfifo(d / "fifo")
    (d / "subdir").mkdir()
    (d / "big").write_text("x" * 5000)
    (d / "empty").write_text("")
    (root / "sys" / "escape").symlink_to(outside)
    return root


def _as_tuple(a: Attr) -> tuple[str | None, int | None, str | None]:
    return (a.value[:12] if a.value else a.value, a.errno, a.reason)


def test_read_attrs_answers_as_read_attr_does(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    d = "/sys/devices/system/cpu/cpufreq/policy0"
    got = Host(str(root)).read_attrs(d, LEAVES)
    one = {leaf: Host(str(root)).read_attr(f"{d}/{leaf}") for leaf in LEAVES}
    assert {k: _as_tuple(v) for k, v in got.items()} == {k: _as_tuple(v) for k, v in one.items()}
    assert {k: _as_tuple(v) for k, v in got.items()} == {
        "plain": ("powersave", None, None),
        "missing": (None, 2, "ENOENT"),
        "inside": ("800000", None, None),
        "outside": (None, 18, f"resolves outside the host root (to {tmp_path}/outside/secret)"),
        "fifo": (None, 6, "not a regular file (a FIFO)"),
        "subdir": (None, 21, "EISDIR"),
        "big": ("xxxxxxxxxxxx", None, None),
        "empty": ("", None, "empty"),
    }
    assert len(got["big"].value or "") == 5000


def test_read_attrs_of_a_directory_leaving_the_root(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    got = Host(str(root)).read_attrs("/sys/escape", ["secret", "nothing"])
    assert {k: v.value for k, v in got.items()} == {"secret": None, "nothing": None}
    assert got["secret"].reason == f"resolves outside the host root (to {tmp_path}/outside/secret)"
