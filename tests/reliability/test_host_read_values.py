"""Host.read_values (one directory, many attributes, opened relative to it) reads what read_attr
reads for each file: plain values, missing files, symlinks inside and outside the root, a FIFO, a
directory, a large file, and a directory that is itself a symlink out of the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from joulectl.host import Host

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


def test_read_values_reads_what_read_attr_reads(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    d = "/sys/devices/system/cpu/cpufreq/policy0"
    got = Host(str(root)).read_values(d, LEAVES)
    one = {leaf: Host(str(root)).read_attr(f"{d}/{leaf}") for leaf in LEAVES}
    assert got == {k: v.value for k, v in one.items()}
    assert {k: (v[:12] if v else v) for k, v in got.items()} == {
        "plain": "powersave", "missing": None, "inside": "800000", "outside": None, "fifo": None,
        "subdir": None, "big": "xxxxxxxxxxxx", "empty": "",
    }
    assert len(got["big"] or "") == 5000
    # read_attr says why for the ones read_values leaves None.
    assert {k: v.reason for k, v in one.items() if v.value is None} == {
        "missing": "ENOENT",
        "outside": f"resolves outside the host root (to {tmp_path}/outside/secret)",
        "fifo": "not a regular file (a FIFO)",
        "subdir": "EISDIR",
    }


def test_read_values_of_a_directory_leaving_the_root(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert Host(str(root)).read_values("/sys/escape", ["secret", "nothing"]) == {"secret": None, "nothing": None}
    assert Host(str(root)).read_values("/sys", ["real"]) == {"real": "800000"}


def test_read_dirs_reads_what_read_values_reads(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    cpufreq = root / "sys" / "devices" / "system" / "cpu" / "cpufreq"
    (cpufreq / "policy1").mkdir()
    (cpufreq / "policy1" / "plain").write_text("performance\n")
    (cpufreq / "policy2").symlink_to("policy1")  # a symlinked directory inside the root
    (cpufreq / "policy3").symlink_to(tmp_path / "outside")  # and one leading out of it
    (cpufreq / "policy4").write_text("a file\n")
    names = ["policy0", "policy1", "policy2", "policy3", "policy4", "policy5", "../policy0"]
    d = "/sys/devices/system/cpu/cpufreq"
    got = Host(str(root)).read_dirs(d, names, [*LEAVES, "secret"])
    assert got == {n: Host(str(root)).read_values(f"{d}/{n}", [*LEAVES, "secret"]) for n in names}
    assert [got[n]["plain"] for n in names] == ["powersave", "performance", "performance", None, None, None, None]
    assert got["policy3"]["secret"] is None and got["policy0"]["inside"] == "800000"
    # a directory outside the root, or a Host whose read is replaced, goes file by file, alike
    assert Host(str(root)).read_dirs("/sys/escape", ["x"], ["secret"]) == {"x": {"secret": None}}

    class Counting(Host):
        def read(self, host_path: str, *, limit: int = 1 << 20) -> str:
            return super().read(host_path, limit=limit)

    assert Counting(str(root)).read_dirs(d, names, [*LEAVES, "secret"]) == got


def test_a_plain_attribute_is_read_without_fstat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open, read, close and nothing more: through FUSE an fstat after a direct_io read is a GETATTR
    request of its own (the read marks the access time stale), a third of a discover's requests.
    Only a read that leaves doubt (empty, failed, a page long) asks fstat what the file is."""
    root = _tree(tmp_path)
    d = "/sys/devices/system/cpu/cpufreq/policy0"
    calls: list[int] = []
    real_fstat = os.fstat

    def counting(fd: int) -> os.stat_result:
        calls.append(fd)
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", counting)
    host = Host(str(root))
    assert host.read(f"{d}/plain") == "powersave\n"
    assert host.read_values(d, ["plain", "inside"]) == {"plain": "powersave", "inside": "800000"}
    assert host.read_dirs("/sys/devices/system/cpu/cpufreq", ["policy0"], ["plain"]) == {
        "policy0": {"plain": "powersave"}}
    assert calls == []
    # the doubtful ones still say what they are, each after one fstat
    assert host.read_attr(f"{d}/fifo").reason == "not a regular file (a FIFO)"
    assert host.read_attr(f"{d}/subdir").reason == "EISDIR"
    assert host.read_attr(f"{d}/empty").value == ""
    assert len(host.read(f"{d}/big")) == 5000
    assert len(calls) == 4
