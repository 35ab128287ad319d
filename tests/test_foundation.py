"""The package skeleton: version, exit codes, global options, the error handler, host confinement."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from joulectl import __version__
from joulectl.errors import ExitCode, InputError
from joulectl.host import Host, HostIOError, ToolNotFound
from joulectl.units import number_text, round_half_away


def test_version(cli) -> None:
    r = cli("--version")
    assert r.exit_code == 0
    assert r.stdout == f"joulectl {__version__}\n"


def test_python_dash_m() -> None:
    out = subprocess.run([sys.executable, "-m", "joulectl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"joulectl {__version__}"


def test_exit_code_values_are_api() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0, "INTERNAL": 1, "USAGE": 2, "NO_DEVICE": 3, "REFUSED": 4, "PARTIAL": 5,
        "UNSCHEDULABLE": 6, "LOCK_BUSY": 7, "INTERRUPTED": 130,
    }


def test_unknown_flag_is_usage_error(cli) -> None:
    r = cli("--no-such-flag")
    assert r.exit_code == 2
    assert r.stderr == "joulectl: error: no such option --no-such-flag (see joulectl --help)\n"


def test_input_error_formats_file_field_problem() -> None:
    e = InputError("must be > 0", file="spec.yaml", field="spec.pools[0].count")
    assert str(e) == "spec.yaml: spec.pools[0].count: must be > 0"
    assert e.exit_code == ExitCode.USAGE


def test_missing_root_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(InputError) as ei:
        Host(str(tmp_path / "nope"))
    assert "--root" in str(ei.value) and "does not exist" in str(ei.value)


def test_host_maps_and_confines(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "a").write_text("42\n")
    os.symlink("/etc/hostname", tmp_path / "sys" / "escape")
    host = Host(str(tmp_path))
    assert host.read_int("/sys/a") == 42
    assert host.read_attr("/sys/missing").errno == errno.ENOENT
    with pytest.raises(HostIOError) as ei:
        host.read("/sys/escape")
    assert ei.value.errno == errno.EXDEV  # not EACCES: an escape is no privilege problem
    assert ei.value.strerror == "resolves outside the host root (to /etc/hostname)"
    with pytest.raises(InputError):
        host.path("/sys/../../etc/passwd")


def test_host_write_keeps_errno(tmp_path: Path) -> None:
    host = Host(str(tmp_path))
    with pytest.raises(HostIOError) as ei:
        host.write("/sys/class/gone", "1")
    assert ei.value.errno == errno.ENOENT and ei.value.errno_name == "ENOENT"


def test_tools_are_confined_to_root_bin(tmp_path: Path) -> None:
    host = Host(str(tmp_path))
    with pytest.raises(ToolNotFound):
        host.run(["ls"])
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "hello"
    tool.write_text("#!/bin/sh\necho hi \"$1\"\n")
    tool.chmod(0o755)
    res = host.run(["hello", "a b; rm -rf /"])
    assert res.returncode == 0 and res.stdout == "hi a b; rm -rf /\n"
    assert host.tool_calls == [("hello", "a b; rm -rf /")]


def test_number_text_writes_a_number_back_as_given() -> None:
    cases = [(1000000, "1000000"), (1000000.0, "1000000"), (150.0, "150"), (-5, "-5"), (87.5, "87.5"),
             (0.1, "0.1"), (100.0000001, "100.0000001"), (1e20, "1e+20"), (float("inf"), "inf"),
             (float("-inf"), "-inf"), (10**30, "1" + "0" * 30)]
    assert [number_text(v) for v in (v for v, _ in cases)] == [t for _, t in cases]


def test_round_half_away_from_zero() -> None:
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, -2.5, 2.4)] == [1, 2, 3, -1, -3, 2]
