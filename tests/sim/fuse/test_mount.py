"""The FUSE binding check and the mount point's preparation (no mount needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from joulectl.errors import InputError
from joulectl.sim.fuse import mount


def _stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    (tmp_path / "mfusepy.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mfusepy", raising=False)


def test_missing_dev_fuse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mount, "DEV_FUSE", str(tmp_path / "fuse"))
    with pytest.raises(InputError) as exc:
        mount.load_binding()
    assert str(exc.value) == f"--fuse: {tmp_path / 'fuse'} is missing (FUSE needs Linux with the fuse module)"
    assert exc.value.exit_code == 2


def test_binding_without_libfuse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mount, "DEV_FUSE", str(tmp_path))
    _stub(tmp_path, monkeypatch, "raise OSError('Unable to find libfuse')\n")
    with pytest.raises(InputError) as exc:
        mount.load_binding()
    assert str(exc.value) == "--fuse: needs libfuse3 (apt-get install fuse3): Unable to find libfuse"


def test_binding_on_libfuse2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mount, "DEV_FUSE", str(tmp_path))
    _stub(tmp_path, monkeypatch, "fuse_version_major = 2\n")
    with pytest.raises(InputError) as exc:
        mount.load_binding()
    assert str(exc.value) == "--fuse: needs libfuse3 (apt-get install fuse3); only libfuse 2 was found"


def test_mountinfo_paths_are_unescaped(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
                    "90 22 0:50 / /tmp/a\\040b/fuse rw,nosuid,nodev - fuse.joulectl joulectl-sim rw\n")
    assert mount.mounted("/tmp/a b/fuse", str(info))
    assert mount.mounted("/tmp/a b/fuse/", str(info))
    assert not mount.mounted("/tmp/a b", str(info))
    assert not mount.mounted("/x", str(tmp_path / "missing"))


def test_prepare_creates_the_mount_point_and_refuses_a_file(tmp_path: Path) -> None:
    assert mount.prepare(str(tmp_path / "root" / "fuse")) is False
    assert (tmp_path / "root" / "fuse").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError) as exc:
        mount.prepare(str(tmp_path / "file"))
    assert str(exc.value) == f"{tmp_path / 'file'}: --fuse: the mount point is not a directory"
    with pytest.raises(InputError) as exc:
        mount.prepare(str(tmp_path / "file" / "fuse"))
    assert str(exc.value) == f"{tmp_path / 'file' / 'fuse'}: --fuse: cannot create the mount point: Not a directory"

