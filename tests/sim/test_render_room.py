"""Room for the trees a render writes (issue 20: every kernel limit the design needs is checked at
the start, in one line): inodes and bytes before anything is written, and a write that fails half
way (a full disk) removes the half-rendered tree and says so in one line."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import room, tree
from joulectl.sim.clusterspec import load_spec

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: room}
spec:
  pools:
  - {name: x, profile: intel-xeon-2s-rapl, count: 3}
  - {name: h, profile: nvidia-h100-sxm-8gpu, count: 1}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def _fresh(spec: Path) -> tuple[list[Any], dict[str, int]]:
    nodes = list(load_spec(str(spec)).nodes)
    per_profile: dict[str, int] = {}
    for node in nodes:
        per_profile[node.profile.profile_hash()] = per_profile.get(node.profile.profile_hash(), 0) + 1
    return nodes, per_profile


def _statvfs(monkeypatch: pytest.MonkeyPatch, **fields: int) -> None:
    real = os.statvfs

    def fake(path: Any) -> os.statvfs_result:
        st = real(path)
        values = {name: getattr(st, name) for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                       "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}
        values.update(fields)
        return os.statvfs_result(tuple(values.values()))

    monkeypatch.setattr(room.os, "statvfs", fake)


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_the_estimate_is_a_close_lower_bound_of_a_real_render(spec: Path, tmp_path: Path) -> None:
    # The figures the check compares are what the trees take: at most, and within 5 % of, the
    # inodes (distinct, hard links counted once) and the file bytes of a real render.
    nodes, per_profile = _fresh(spec)
    inodes, data = room.need(nodes, per_profile)
    root = tmp_path / "root"
    tree.render_nodes(nodes, str(root), workers=1)
    seen: set[int] = set()
    real_data = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen and os.path.join(dirpath, name) != str(root / tree.SHARED_DIR):
                seen.add(st.st_ino)
                if os.path.isfile(os.path.join(dirpath, name)) and not os.path.islink(os.path.join(dirpath, name)):
                    real_data += st.st_size
    shared = {os.lstat(p).st_ino for p in (root / tree.SHARED_DIR).rglob("*") if p.is_dir() and not p.is_symlink()}
    real_inodes = len(seen) - len(shared)  # the shared copy's directories are not counted by the estimate
    assert 0.95 * real_inodes <= inodes <= real_inodes
    assert 0.95 * real_data <= data <= real_data


def test_too_few_inodes_stop_the_render_before_anything_is_written(
        spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, per_profile = _fresh(spec)
    inodes, _ = room.need(nodes, per_profile)
    _statvfs(monkeypatch, f_files=10**8, f_ffree=inodes - 1, f_favail=inodes - 1)
    root = tmp_path / "root"
    with pytest.raises(tree.RenderError) as err:
        tree.render_nodes(nodes, str(root), workers=1)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert message.startswith(f"{root}: --root: 4 new node trees need at least {inodes:,} inodes")
    assert f"the filesystem has {inodes - 1:,} free (df -i)" in message and "\n" not in message
    assert _left(root) == []
    _statvfs(monkeypatch, f_files=10**8, f_ffree=inodes, f_favail=inodes)  # exactly enough: renders
    assert len(tree.render_nodes(nodes, str(root), workers=1).rendered) == 4


def test_a_filesystem_that_counts_no_inodes_is_not_refused(
        spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # btrfs and others report no inode total (f_files 0): no inode limit to check.
    nodes, _ = _fresh(spec)
    _statvfs(monkeypatch, f_files=0, f_ffree=0, f_favail=0)
    assert len(tree.render_nodes(nodes[:1], str(tmp_path / "root"), workers=1).rendered) == 1


def test_too_few_bytes_stop_the_render(spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, per_profile = _fresh(spec)
    _, data = room.need(nodes, per_profile)
    _statvfs(monkeypatch, f_frsize=1, f_bfree=data - 1, f_bavail=data - 1)
    root = tmp_path / "root"
    wanted = rf"need at least {data:,} bytes, the filesystem has {data - 1:,} free"
    with pytest.raises(tree.RenderError, match=wanted) as err:
        tree.render_nodes(nodes, str(root), workers=1)
    assert err.value.exit_code == 2
    assert _left(root) == []


@pytest.fixture
def failing_writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int, BaseException], None]]:
    """``fail(n, exc)``: every ``os.write`` of the renderer after the n-th raises ``exc`` (in its
    forked workers too; the pool's own pipes write as usual)."""
    state: list[Any] = [0, 10**12, None]

    class FailingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def write(fd: int, data: Any) -> int:
            state[0] += 1
            if state[0] > state[1]:
                raise state[2]
            return os.write(fd, data)

    def fail(n: int, exc: BaseException) -> None:
        state[:] = [0, n, exc]

    monkeypatch.setattr(tree, "os", FailingOs())
    yield fail


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_disk_that_fills_half_way_leaves_no_half_tree(
        spec: Path, tmp_path: Path, failing_writes: Callable[[int, BaseException], None], workers: int) -> None:
    # The check passed (its figures are lower bounds), then a write failed: one line naming the
    # node and the error, the half-rendered tree removed; with two workers the other worker's
    # half tree too. Trees finished before stay, and a later render resumes them.
    nodes, _ = _fresh(spec)
    root = tmp_path / "root"
    tree.render_nodes(nodes[:1], str(root), workers=1)  # x-0 is complete
    failing_writes(4000 if workers == 1 else 2000, _disk_full())  # in each process: an x tree is about 5,700
    with pytest.raises(tree.RenderError) as err:
        tree.render_nodes(nodes, str(root), workers=workers)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert "No space left on device (df -h, df -i): the half-rendered tree was removed" in message
    assert message.startswith(f"{root}/x-") and "\n" not in message
    assert not [name for name in _left(root) if name.endswith(".rendering")]
    assert "x-0" in _left(root)
    failing_writes(10**12, _disk_full())
    stats = tree.render_nodes(nodes, str(root), workers=1)
    assert sorted(stats.rendered + stats.resumed) == sorted(n.name for n in nodes)
    assert "x-0" in stats.resumed


def test_ctrl_c_half_way_leaves_no_half_tree(
        spec: Path, tmp_path: Path, failing_writes: Callable[[int, BaseException], None]) -> None:
    nodes, _ = _fresh(spec)
    failing_writes(2999, KeyboardInterrupt())
    root = tmp_path / "root"
    with pytest.raises(KeyboardInterrupt):
        tree.render_nodes(nodes, str(root), workers=1)
    assert not [name for name in _left(root) if name.endswith(".rendering")]


def test_signatures_that_cannot_be_written_leave_the_complete_tree(
        spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tree is in place when its resume signatures are written: a failure there says so, the
    # tree stays, and a later render resumes it (checking it in full).
    nodes, _ = _fresh(spec)
    root = tmp_path / "root"

    def no_room(target: str, t: Any, node: Any) -> None:
        open(f"{target}/{tree.SIG_FILE}.tmp", "w").close()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{target}/{tree.SIG_FILE}.tmp")

    monkeypatch.setattr(tree, "_write_sigs", no_room)
    with pytest.raises(tree.RenderError) as err:
        tree.render_nodes(nodes[:1], str(root), workers=1)
    assert err.value.exit_code == 2
    assert str(err.value) == (f"{root}/x-0: node x-0: No space left on device writing state/layout-sig.json.tmp "
                              "(df -h, df -i): the tree is complete, a later start checks it in full")
    assert not (root / "x-0" / "state" / "layout-sig.json.tmp").exists()
    monkeypatch.undo()
    assert tree.render_nodes(nodes[:1], str(root), workers=1).resumed == ["x-0"]


def _unshare_tmpfs(mnt: Path, options: str, script: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run this test as root with unshare (util-linux)")
        pytest.skip("needs root and unshare to mount a small tmpfs in a private mount namespace")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f"mount -t tmpfs -o {options} tmpfs \"$MNT\" && {script}"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, "MNT": str(mnt)})


@pytest.mark.parametrize(("options", "message"), [
    ("nr_inodes=5000,size=200m", r"--root: 4 new node trees need at least [\d,]+ inodes \(a file per attribute\), "
                                 r"the filesystem has 4,998 free \(df -i\)"),
    ("nr_inodes=100000,size=12m", r"/x-\d: node x-\d: No space left on device \(df -h, df -i\): the half-rendered "
                                  r"tree was removed"),
])
def test_a_real_small_filesystem(spec: Path, tmp_path: Path, options: str, message: str) -> None:
    # A tmpfs of 5,000 inodes (the check, from the kernel's own figures) and one of 12 MB (the
    # check passes, the disk fills during the render): the CLI exits 2 with one line, no
    # traceback, and leaves no half tree.
    import re

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = _unshare_tmpfs(mnt, options, f'"$PYTHON" -m joulectl simulate render {spec} --root "$MNT/root"; '
                                        'echo "exit $?"; ls -A "$MNT/root"')
    assert proc.returncode == 0, proc.stderr
    assert "exit 2" in proc.stdout
    assert ".rendering" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("joulectl: error: "), proc.stderr
    assert re.search(message, lines[0]), lines[0]
