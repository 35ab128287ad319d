"""Privilege: as an unprivileged user every write is ``refused`` (exit 4, with a hint) and every
read still works. The real thing drops to ``nobody`` (setuid in the child, after importing what
it needs: the interpreter lives under a root-only home here); the Host-level simulation makes
every write of a fake kernel fail with EACCES."""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_support import REPO, Fault, FaultHost, assert_clean_exit

from joulectl.cli import common
from joulectl.host import Host

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: priv}
spec:
  pools:
  - {name: mi250, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 1}
"""

#: Runs joulectl as nobody: import everything first (a dry run as root warms every lazy import),
#: then drop the groups, gid and uid, then run the real command.
DROP = r"""
import contextlib, importlib, io, os, pkgutil, sys
import joulectl, typer, rich, yaml
for pkg in (joulectl, typer, rich, yaml):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not m.name.endswith("__main__"):
            try:
                importlib.import_module(m.name)
            except Exception:
                pass
from joulectl.cli import run
args = sys.argv[2:]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    run(args if "discover" in args else [*args, "--dry-run"])
os.setgroups([])
os.setgid(int(sys.argv[1]))
os.setuid(int(sys.argv[1]))
sys.exit(run(args))
"""


def _tree_digest(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root / "sys"):
        for name in files:
            p = Path(dirpath) / name
            try:
                out[str(p)] = p.read_bytes()
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def trees() -> Iterator[dict[str, Path]]:
    """Rendered nodes under a world-traversable directory (pytest's tmp dirs are root-only)."""
    from joulectl.cli import run

    base = Path(tempfile.mkdtemp(prefix="joulectl-priv-"))
    try:
        base.chmod(0o755)
        (base / "spec.yaml").write_text(SPEC)
        assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "tree")]) == 0
        (base / "tree").chmod(0o755)
        yield {"amd": base / "tree" / "mi250-0", "cpu": base / "tree" / "cpu-0", "base": base}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _nobody() -> int:
    if os.geteuid() != 0:
        pytest.skip("dropping privileges needs root (the test runs unprivileged already)")
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user on this machine")


def _as_nobody(uid: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": REPO, "NO_COLOR": "1"}
    env.pop("JOULECTL_ROOT", None)
    return subprocess.run([sys.executable, "-c", DROP, str(uid), *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_as_nobody_reads_work_and_writes_are_refused(trees: dict[str, Path]) -> None:
    uid = _nobody()
    amd, cpu = trees["amd"], trees["cpu"]
    before = {**_tree_digest(amd), **_tree_digest(cpu)}

    # Reads: the same GPUs with the same caps and ranges as root sees; root-only energy is unknown
    # with its reason.
    as_nobody = _as_nobody(uid, "--root", str(amd), "discover", "-o", "json")
    assert as_nobody.returncode == 0, as_nobody.stderr
    from reliability_support import run_joulectl

    as_root = run_joulectl("--root", str(amd), "discover", "-o", "json")
    mine, theirs = json.loads(as_nobody.stdout), json.loads(as_root.stdout)
    assert mine["status"]["gpu"]["devices"] == theirs["status"]["gpu"]["devices"]
    zones = mine["status"]["cpu"]["zones"]
    assert zones and all(z["energyReadable"] is False and "EACCES" in z["energyReason"] for z in zones)

    # A pristine tree: the lock directory cannot be created -> refused before any write.
    r = _as_nobody(uid, "--root", str(amd), "cap", "--watts", "400")
    assert_clean_exit(r.returncode, r.stderr, {4})
    assert r.stderr == ("joulectl: error: cannot open the node lock /run/joulectl/lock: Permission denied\n"
                        "joulectl: hint: run as root (sudo joulectl ...)\n")

    # Lock and journal directories writable by anyone: every sysfs write is refused, row by row.
    for root in (amd, cpu):
        for d in ("run/joulectl", "var/lib/joulectl"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for d in ("run", "run/joulectl", "var", "var/lib", "var/lib/joulectl"):
            (root / d).chmod(0o777)
    for root, args in ((amd, ["cap", "--watts", "400"]), (amd, ["governor", "set", "low"]),
                       (cpu, ["cap", "--cpu", "--watts", "200"]), (cpu, ["governor", "set", "efficiency", "--cpu"])):
        r = _as_nobody(uid, "--root", str(root), *args, "-o", "json")
        assert_clean_exit(r.returncode, r.stderr, {4})
        statuses = {row["status"] for row in json.loads(r.stdout)["results"]}
        assert statuses <= {"refused", "skipped"} and "refused" in statuses, (args, statuses)
        lines = r.stderr.splitlines()
        assert lines[0].startswith("joulectl: error: no privilege to write: every write was refused"), lines
        assert lines[1].startswith("joulectl: hint: run as root"), lines
    assert {**_tree_digest(amd), **_tree_digest(cpu)} == before  # nothing written


@pytest.fixture
def every_write_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def host(self: common.GlobalState) -> Host:
        h = FaultHost(self.root, tool_timeout=self.tool_timeout)
        h.faults = [Fault("*", errno.EACCES, on_write=True)]
        return h

    monkeypatch.setattr(common.GlobalState, "host", host)


@pytest.mark.parametrize(
    ("node", "args"),
    [("amd", ["cap", "--watts", "400"]), ("amd", ["cap", "--pct", "80"]), ("amd", ["governor", "set", "peak"]),
     ("cpu", ["cap", "--cpu", "--watts", "200"]), ("cpu", ["governor", "set", "performance", "--cpu"])],
)
def test_host_level_simulation_every_write_refused(trees: dict[str, Path], cli: Callable[..., Any],
                                                   every_write_refused: None, node: str, args: list[str]) -> None:
    root = trees[node]
    before = _tree_digest(root)
    r = cli("--root", str(root), *args, "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {4})
    rows = json.loads(r.stdout)["results"]
    assert {row["status"] for row in rows} <= {"refused", "skipped"}
    assert all("EACCES" in row["message"] for row in rows if row["status"] == "refused")
    assert r.stderr.splitlines()[1].startswith("joulectl: hint: run as root")
    assert _tree_digest(root) == before


def test_host_level_simulation_reads_still_work(trees: dict[str, Path], cli: Callable[..., Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plain = cli("--root", str(trees["amd"]), "discover", "-o", "json")
    assert plain.exit_code == 0

    def host(self: common.GlobalState) -> Host:
        h = FaultHost(self.root, tool_timeout=self.tool_timeout)
        h.faults = [Fault("*", errno.EACCES, on_write=True)]
        return h

    monkeypatch.setattr(common.GlobalState, "host", host)
    refused = cli("--root", str(trees["amd"]), "discover", "-o", "json")
    assert refused.exit_code == 0
    mine, theirs = json.loads(refused.stdout)["status"], json.loads(plain.stdout)["status"]
    mine.pop("updatedAt", None)
    theirs.pop("updatedAt", None)
    assert mine == theirs
