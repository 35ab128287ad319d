"""The fault matrix: a fake kernel (FaultHost) fails chosen reads and writes of a rendered node's
attributes with an errno, and a fake nvidia-smi hangs, crashes, prints garbage or exits oddly.
Every cell maps to the documented status and exit code and never changes another device's row.
docs/RELIABILITY.md lists the cells and the test ids that cover them."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_support import Fault, FaultHost, assert_clean_exit

from joulectl.cli import common
from joulectl.host import Host
from joulectl.ops import journal as journal_mod

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: faults}
spec:
  pools:
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: mi250, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: cpu, profile: intel-xeon-2s-rapl, count: 1}
"""

#: backend -> (node, cap arguments, glob of the cap attribute, glob of the range attribute) with
#: {dev} standing for the faulty device (the first one the baseline run applies).
BACKENDS: dict[str, tuple[str, list[str], str, str]] = {
    "amd": ("mi250-0", ["cap", "--watts", "400"], "*/{dev}/hwmon/hwmon*/power1_cap",
            "*/{dev}/hwmon/hwmon*/power1_cap_max"),
    "intel": ("flex-0", ["cap", "--watts", "100"], "*/{dev}/hwmon/hwmon*/power1_max",
              "*/{dev}/hwmon/hwmon*/power1_rated_max"),
    "cpu": ("cpu-0", ["cap", "--cpu", "--watts", "200"], "*/{dev}/constraint_0_power_limit_uw",
            "*/{dev}/constraint_0_max_power_uw"),
}
ERRNOS = ["EACCES", "EPERM", "EROFS", "EINVAL", "EBUSY", "EOPNOTSUPP", "ENODATA", "ENODEV", "EIO"]
#: SPEC §4: the status of a failed cap write.
WRITE_STATUS = {"EACCES": "refused", "EPERM": "refused", "EROFS": "refused", "EINVAL": "blocked",
                "ENODATA": "blocked", "EBUSY": "unsupported", "EOPNOTSUPP": "unsupported", "ENODEV": "error",
                "EIO": "error"}


class Node:
    """A rendered node tree whose mutable files can be put back between cells."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.snapshot: dict[Path, bytes] = {}
        for top in ("sys", "state", "bin"):
            for dirpath, _dirs, files in os.walk(root / top):
                for name in files:
                    p = Path(dirpath) / name
                    if not p.is_symlink():
                        self.snapshot[p] = p.read_bytes()
        self.modes = {p: p.stat().st_mode for p in self.snapshot}

    def reset(self) -> None:
        for p, data in self.snapshot.items():
            try:
                if p.read_bytes() == data:
                    continue
            except OSError:
                pass
            p.write_bytes(data)
            p.chmod(stat.S_IMODE(self.modes[p]))
        for extra in ("var/lib/joulectl", "run/joulectl"):
            shutil.rmtree(self.root / extra, ignore_errors=True)
        for p in (self.root / "bin").iterdir():
            if p not in self.snapshot:
                p.unlink()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Node]:
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("fault-cluster")
    (base / "spec.yaml").write_text(SPEC)
    assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "tree")]) == 0
    return {name: Node(base / "tree" / name) for name in os.listdir(base / "tree")}


Rows = dict[str, dict[str, Any]]


@pytest.fixture
def cap_run(nodes: dict[str, Node], cli: Callable[..., Any],
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[int, str, Rows, Node]]]:
    """Run a command on a freshly reset node through a FaultHost with the given faults."""
    faults: list[Fault] = []

    def host(self: common.GlobalState) -> Host:
        h = FaultHost(self.root, tool_timeout=self.tool_timeout)
        h.faults = faults
        return h

    monkeypatch.setattr(common.GlobalState, "host", host)

    def invoke(node_name: str, args: list[str], *new_faults: Fault,
               extra: tuple[str, ...] = ()) -> tuple[int, str, dict[str, dict[str, Any]], Node]:
        node = nodes[node_name]
        node.reset()
        faults[:] = list(new_faults)
        r = cli("--root", str(node.root), *extra, *args, "-o", "json")
        assert_clean_exit(r.exit_code, r.stderr, {0, 2, 3, 4, 5})
        rows = {row["device"]: row for row in json.loads(r.stdout)["results"]} if r.stdout.strip() else {}
        return r.exit_code, r.stderr, rows, node

    yield invoke
    for node in nodes.values():
        node.reset()


_BASELINES: dict[str, dict[str, dict[str, Any]]] = {}


def _baseline(cap_run: Callable[..., Any], backend: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """The fault-free rows of a backend's cap run and the device the faults target."""
    node, args, _, _ = BACKENDS[backend]
    if backend not in _BASELINES:
        code, _, rows, _ = cap_run(node, args)
        assert code == 0
        _BASELINES[backend] = rows
    rows = _BASELINES[backend]
    device = next(d for d, r in sorted(rows.items()) if r["status"] == "applied")
    return device, rows


def _others_unchanged(rows: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]], device: str) -> None:
    assert set(rows) == set(baseline)
    for dev, row in rows.items():
        if dev != device:
            assert row == baseline[dev], dev


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err", ERRNOS)
def test_write_fault(cap_run: Callable[..., Any], backend: str, err: str) -> None:
    device, baseline = _baseline(cap_run, backend)
    node, args, cap_glob, _ = BACKENDS[backend]
    fault = Fault(cap_glob.format(dev=device), getattr(errno, err), on_write=True)
    code, stderr, rows, tree = cap_run(node, args, fault)
    assert fault.hits >= 1
    expected = WRITE_STATUS[err]
    assert rows[device]["status"] == expected, rows[device]
    name = errno.errorcode[getattr(errno, err)]  # EOPNOTSUPP is ENOTSUP on Linux
    assert name in rows[device]["message"] or (err == "ENODATA" and "locked by firmware" in rows[device]["message"])
    assert rows[device]["afterWatts"] is None
    assert code == 5
    assert f"1 {expected} (see MESSAGE)" in stderr
    if expected == "refused":
        assert "joulectl: hint: run as root" in stderr
    _others_unchanged(rows, baseline, device)
    journal = journal_mod.load(Host(str(tree.root)))
    assert not journal.set_by_joulectl(device, "capWatts")  # a failed write is not journaled as set


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err", ERRNOS)
def test_read_fault_of_the_cap_attribute(cap_run: Callable[..., Any], backend: str, err: str) -> None:
    """The cap cannot be read (at discovery nor at readback): the write goes ahead and is
    ``applied-unverified`` (exit 0) -- except ENODATA on a RAPL constraint, which is the firmware
    lock: ``blocked``, exit 5."""
    device, baseline = _baseline(cap_run, backend)
    node, args, cap_glob, _ = BACKENDS[backend]
    fault = Fault(cap_glob.format(dev=device), getattr(errno, err), on_read=True)
    code, _stderr, rows, _ = cap_run(node, args, fault)
    assert fault.hits >= 1
    row = rows[device]
    if backend == "cpu" and err == "ENODATA":
        assert (row["status"], row["message"], code) == ("blocked", "limit locked by firmware", 5)
    else:
        assert row["status"] == "applied-unverified", row
        assert errno.errorcode[getattr(errno, err)] in row["message"]
        assert row["beforeWatts"] is None and row["afterWatts"] is None
        assert code == 0
    _others_unchanged(rows, baseline, device)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_read_fault_of_the_range(cap_run: Callable[..., Any], backend: str) -> None:
    """The maximum cannot be read: AMD and Intel block the device (no known range), RAPL writes
    (its constraint max is advisory)."""
    device, baseline = _baseline(cap_run, backend)
    node, args, _, range_glob = BACKENDS[backend]
    fault = Fault(range_glob.format(dev=device), errno.EIO, on_read=True)
    code, _, rows, _ = cap_run(node, args, fault)
    assert fault.hits >= 1
    expected = {"amd": ("blocked", 5), "intel": ("blocked", 5), "cpu": ("applied", 0)}[backend]
    assert (rows[device]["status"], code) == expected, rows[device]
    _others_unchanged(rows, baseline, device)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_readback_that_differs_is_an_error(cap_run: Callable[..., Any], backend: str) -> None:
    device, baseline = _baseline(cap_run, backend)
    node, args, cap_glob, _ = BACKENDS[backend]
    fault = Fault(cap_glob.format(dev=device), readback=lambda _text: "90000000\n")
    code, stderr, rows, _ = cap_run(node, args, fault)
    row = rows[device]
    assert row["status"] == "error"
    assert row["message"] == f"{device}: read back 90 W after writing {row['targetWatts']:g} W"
    assert row["afterWatts"] == 90.0
    assert code == 5 and "1 error (see MESSAGE)" in stderr
    _others_unchanged(rows, baseline, device)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_attribute_vanishing_between_discovery_and_write(cap_run: Callable[..., Any], backend: str) -> None:
    """Hot unplug: the attribute is there at discovery and gone at the write (ENOENT)."""
    device, baseline = _baseline(cap_run, backend)
    node, args, cap_glob, _ = BACKENDS[backend]
    fault = Fault(cap_glob.format(dev=device), on_write=True, vanish=True)
    code, _, rows, _ = cap_run(node, args, fault)
    assert fault.hits == 1
    assert rows[device]["status"] == "error" and "ENOENT" in rows[device]["message"]
    assert code == 5
    _others_unchanged(rows, baseline, device)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_write_refused_is_exit_4(cap_run: Callable[..., Any], backend: str) -> None:
    _, baseline = _baseline(cap_run, backend)
    node, args, cap_glob, _ = BACKENDS[backend]
    fault = Fault(cap_glob.format(dev="*"), errno.EACCES, on_write=True)
    code, stderr, rows, _ = cap_run(node, args, fault)
    written = [d for d, r in baseline.items() if r["status"] == "applied"]
    assert all(rows[d]["status"] == "refused" for d in written)
    assert code == 4
    assert stderr.splitlines()[0].startswith("joulectl: error: no privilege to write: every write was refused")
    assert stderr.splitlines()[1] == "joulectl: hint: run as root (sudo joulectl cap ...)"


# -- NVIDIA: the vendor tool misbehaves ------------------------------------------------------------

TOOL_WRAPPER = """#!{python} -S
import os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
mode, when = open(os.path.join(here, "fault-mode")).read().split()
args = sys.argv[1:]
hit = ("-pl" in args) if when == "write" else ("-q" in args or "-L" in args or "--query-gpu" in " ".join(args))
if hit:
    if mode == "hang":
        time.sleep(600)
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "garbage":
        sys.stdout.write("\\x00\\xff<gpu><<<not xml>>> ### 42 ;;\\n")
        sys.exit(0)
    if mode == "exit9":
        sys.stderr.write("Unknown Error\\n")
        sys.exit(9)
os.execv(sys.executable, [sys.executable, "-S", os.path.join(here, "nvidia-smi.real"), *args])
"""


def _break_nvidia_smi(node: Node, mode: str, when: str) -> None:
    import sys

    tool = node.root / "bin" / "nvidia-smi"
    shutil.copy2(tool, node.root / "bin" / "nvidia-smi.real")
    tool.write_text(TOOL_WRAPPER.format(python=sys.executable))
    (node.root / "bin" / "fault-mode").write_text(f"{mode} {when}\n")


@pytest.mark.parametrize("mode", ["hang", "crash", "garbage", "exit9"])
def test_nvidia_smi_fails_at_the_write(nodes: dict[str, Node], cli: Callable[..., Any], mode: str) -> None:
    """``nvidia-smi -pl`` hangs (killed at --tool-timeout), crashes, prints garbage with exit 0 or
    exits 9: every GPU of the batch is ``error``, exit 5, and the journal does not claim the cap."""
    node = nodes["h100-0"]
    node.reset()
    _break_nvidia_smi(node, mode, "write")
    r = cli("--root", str(node.root), "--tool-timeout", "1", "cap", "--watts", "500", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {5})
    rows = json.loads(r.stdout)["results"]
    assert len(rows) == 8
    assert {row["status"] for row in rows} == {"error"}, rows
    if mode == "hang":
        assert all("timed out" in row["message"] for row in rows), rows
    journal = journal_mod.load(Host(str(node.root)))
    assert not any(journal.set_by_joulectl(row["device"], "capWatts") for row in rows)
    node.reset()


@pytest.mark.parametrize("mode", ["hang", "crash", "garbage", "exit9"])
def test_nvidia_smi_fails_at_discovery(nodes: dict[str, Node], cli: Callable[..., Any], mode: str) -> None:
    """``nvidia-smi -q -x`` misbehaves: discover reports the NVIDIA backend unavailable (exit 0,
    a reason), and cap finds no device to cap (exit 3), with one line each, never a traceback."""
    node = nodes["h100-0"]
    node.reset()
    _break_nvidia_smi(node, mode, "discover")
    r = cli("--root", str(node.root), "--tool-timeout", "1", "discover", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {0})
    r = cli("--root", str(node.root), "--tool-timeout", "1", "cap", "--watts", "500")
    assert_clean_exit(r.exit_code, r.stderr, {3})
    node.reset()


# -- governor writes ---------------------------------------------------------------------------------

#: SPEC §5: the status of a failed governor write (AMD perf level, CPU scaling_governor).
GOVERNOR_WRITE_STATUS = {"EACCES": "refused", "EPERM": "refused", "EROFS": "refused", "EINVAL": "unsupported",
                         "EBUSY": "unsupported", "EOPNOTSUPP": "unsupported", "ENODATA": "error",
                         "ENODEV": "error", "EIO": "error"}
GOVERNORS = {
    "amd": ("mi250-0", ["governor", "set", "low"], "*/{dev}/power_dpm_force_performance_level", "0000:c1:00.0"),
    "cpu": ("cpu-0", ["governor", "set", "performance", "--cpu"], "*/cpufreq/{dev}/scaling_governor",
            "policy0"),
}


@pytest.mark.parametrize("backend", sorted(GOVERNORS))
@pytest.mark.parametrize("err", ERRNOS)
def test_governor_write_fault(cap_run: Callable[..., Any], backend: str, err: str) -> None:
    node, args, glob, dev = GOVERNORS[backend]
    code, _, baseline, _ = cap_run(node, args)
    assert code == 0
    fault = Fault(glob.format(dev=dev), getattr(errno, err), on_write=True)
    code, stderr, rows, _ = cap_run(node, args, fault)
    assert fault.hits >= 1
    device = next(d for d in rows if d.endswith(dev))
    expected = GOVERNOR_WRITE_STATUS[err]
    assert rows[device]["status"] == expected, rows[device]
    assert errno.errorcode[getattr(errno, err)] in rows[device]["message"]
    assert code == 5 and f"1 {expected} (see MESSAGE)" in stderr
    _others_unchanged(rows, baseline, device)
