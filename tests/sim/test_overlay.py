"""Overlay node trees (``simulate render --overlay``, issue 20's render of 1,000 nodes on disk).

The judge is a plain render of the same spec and the kernel: an overlay tree must show exactly the
entries, modes, bytes and symlinks of a plain tree; a write through one node (by joulectl, by
``echo``, by real tools) must change that node only, be read back by the next tick, and survive an
unmount and the start that mounts the trees again; whatever the resume check finds removed through
the mount it puts back whole.

Everything that mounts runs in a private mount namespace (``unshare -m --propagation private``):
the scenario is one Python driver run in it, whose observations the tests check; nothing is
mounted outside it, and every mount ends with it. The failure paths of the mount itself (no
privilege, no overlayfs) are tested in-process with the C library's ``mount`` stood in for.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulectl.errors import ExitCode, RefusedError
from joulectl.sim import libc as sim_libc
from joulectl.sim import overlay
from joulectl.sim.clusterspec import parse_spec
from joulectl.sim.tree import RenderError, render_nodes

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: overlay}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.5, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 2}
  - {name: epyc, profile: amd-epyc-2s-energy-only, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
"""
NODES = ["epyc-0", "flex-0", "h100-0", "intel-0", "intel-1", "mi300x-0", "vm-0"]
RAPL = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"
POLICY = "sys/devices/system/cpu/cpufreq/policy{}"

#: Run in the private namespace: argv[1] the work directory; prints one JSON document.
DRIVER = textwrap.dedent(r'''
    import json, os, shutil, stat, subprocess, sys
    base = sys.argv[1]
    spec, ov, plain = f"{base}/spec.yaml", f"{base}/ov", f"{base}/plain"
    obs = {}

    def jc(*args):
        p = subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True, timeout=600)
        return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}

    def snapshot(tree):
        out = {}
        for dirpath, dirs, files in os.walk(tree):
            for name in dirs + files:
                path = os.path.join(dirpath, name)
                rel = path[len(tree) + 1:]
                if rel == "state/layout-sig.json":
                    continue
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ["l", os.readlink(path)]
                elif stat.S_ISDIR(st.st_mode):
                    out[rel] = ["d", stat.S_IMODE(st.st_mode)]
                else:
                    with open(path, "rb") as fh:
                        out[rel] = ["f", stat.S_IMODE(st.st_mode), fh.read().hex()]
        return out

    def mounted(node):
        return os.stat(f"{ov}/{node}").st_dev != os.stat(ov).st_dev

    def in_node(node, script):
        wrapped = (f"mount --bind {node}/sys /sys && mount --bind {node}/proc/cpuinfo /proc/cpuinfo && "
                   f"{{\n{script}\n}}")
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", wrapped],
                           capture_output=True, text=True, timeout=120)
        return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}

    def read(path):
        with open(path) as fh:
            return fh.read()

    obs["render"] = jc("simulate", "render", spec, "--root", ov, "--overlay")
    obs["render_plain"] = jc("simulate", "render", spec, "--root", plain)
    nodes = sorted(n for n in os.listdir(plain) if not n.startswith("."))
    obs["nodes"] = nodes
    obs["mounted"] = {n: mounted(n) for n in nodes}
    obs["lowers"] = sorted(os.listdir(f"{ov}/.joulectl-layers/lower"))
    with open("/proc/self/mountinfo") as fh:
        obs["options"] = [line.split(" - ")[1] for line in fh if f" {ov}/intel-0 " in line]
    diff = {}
    for n in nodes:
        a, b = snapshot(f"{plain}/{n}"), snapshot(f"{ov}/{n}")
        bad = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        diff[n] = {"entries": len(a), "differ": bad[:5], "n_differ": len(bad)}
    obs["diff"] = diff

    # writes through one node: echo to a writable and (as root) a read-only attribute
    rapl = "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"
    ro = "sys/devices/system/cpu/cpufreq/policy7/cpuinfo_max_freq"
    i0, i1 = f"{ov}/intel-0", f"{ov}/intel-1"
    lower = os.path.realpath(f"{ov}/.joulectl-layers/nodes/intel-0/lower")
    ino_before = os.stat(f"{i0}/{rapl}").st_ino
    with open(f"{i0}/{rapl}", "w") as fh:
        fh.write("150000000\n")
    with open(f"{i0}/{ro}", "w") as fh:
        fh.write("9999999\n")
    obs["write"] = {
        "node": read(f"{i0}/{rapl}"), "other": read(f"{i1}/{rapl}"), "lower": read(f"{lower}/{rapl}"),
        "ro_other": read(f"{i1}/{ro}"), "ro_lower": read(f"{lower}/{ro}"),
        "mode": stat.S_IMODE(os.stat(f"{i0}/{rapl}").st_mode), "ro_mode": stat.S_IMODE(os.stat(f"{i0}/{ro}").st_mode),
        "same_inode": os.stat(f"{i0}/{rapl}").st_ino == ino_before,
    }
    obs["tick1"] = jc("simulate", "run", spec, "--root", ov, "--ticks", "1", "--fast")
    obs["after_tick"] = {"rapl": read(f"{i0}/{rapl}"), "ro": read(f"{i0}/{ro}"), "ro_other": read(f"{i1}/{ro}")}

    # real tools through the mount
    obs["powercap_set"] = in_node(i1, "powercap-set -p intel-rapl -z 0 -c 0 -l 200000000")
    obs["cpupower"] = in_node(i1, "cpupower -c 3 frequency-set -g performance >/dev/null")
    obs["lspci"] = in_node(f"{ov}/mi300x-0", "lspci -nn")
    obs["tick2"] = jc("simulate", "run", spec, "--root", ov, "--ticks", "1", "--fast")
    obs["status"] = jc("simulate", "status", "--root", ov, "-o", "json")
    gov3 = "sys/devices/system/cpu/cpufreq/policy3/scaling_governor"
    obs["tools_landed"] = {"rapl": read(f"{i1}/{rapl}"), "gov3": read(f"{i1}/{gov3}"),
                           "gov3_other": read(f"{i0}/{gov3}")}
    obs["discover"] = jc("--root", i1, "discover", "-o", "json")
    obs["cap"] = jc("--root", f"{ov}/h100-0", "cap", "--pct", "60", "-o", "json")

    # unmount, then the start that mounts them again (a reboot's)
    obs["unmount"] = jc("simulate", "unmount", "--root", ov)
    obs["unmounted"] = {n: mounted(n) for n in nodes}
    obs["unmounted_empty"] = os.listdir(i0)
    obs["status_unmounted"] = jc("simulate", "status", "--root", ov)
    obs["unmount_again"] = jc("simulate", "unmount", "--root", ov)
    obs["remount"] = jc("simulate", "render", spec, "--root", ov)
    obs["remounted"] = {n: mounted(n) for n in nodes}
    obs["kept"] = {"rapl0": read(f"{i0}/{rapl}"), "rapl1": read(f"{i1}/{rapl}")}

    # a directory removed through the mount and a file replaced by a directory: the check puts
    # the first back whole and refuses the second, naming it
    policy = f"{i0}/sys/devices/system/cpu/cpufreq/policy13"
    shutil.rmtree(policy)
    os.unlink(f"{i0}/sys/devices/system/cpu/cpufreq/policy11/scaling_governor")
    obs["repair"] = jc("simulate", "render", spec, "--root", ov)
    obs["repaired"] = {"policy13": sorted(os.listdir(policy)),
                       "policy13_other": sorted(os.listdir(f"{i1}/sys/devices/system/cpu/cpufreq/policy13")),
                       "gov11": read(f"{i0}/sys/devices/system/cpu/cpufreq/policy11/scaling_governor")}
    obs["repair_again"] = jc("simulate", "render", spec, "--root", ov)

    # the root keeps rendering overlays: a spec with one node more, no --overlay
    with open(spec) as fh:
        text = fh.read()
    with open(f"{base}/spec3.yaml", "w") as fh:
        fh.write(text.replace("profile: intel-xeon-2s-rapl, count: 2", "profile: intel-xeon-2s-rapl, count: 3"))
    obs["grow"] = jc("simulate", "render", f"{base}/spec3.yaml", "--root", ov)
    obs["grown_mounted"] = mounted("intel-2")
    ref = snapshot(f"{plain}/intel-0")
    obs["grown_diff"] = sorted(k for k, v in snapshot(f"{ov}/intel-2").items()
                               if ref.get(k) != v and not k.startswith(("etc/", "proc/sys/", "state/")))
    # two render workers (a fleet's render), each mounting its share
    with open(f"{base}/pool.yaml", "w") as fh:
        fh.write(text.replace("count: 2}", "count: 24}").replace("count: 1}", "count: 0}"))
    pool = f"{base}/pool"
    obs["pool"] = jc("simulate", "render", f"{base}/pool.yaml", "--root", pool, "--overlay", "--workers", "2")
    names = sorted(n for n in os.listdir(pool) if not n.startswith("."))
    obs["pool_nodes"] = {n: os.stat(f"{pool}/{n}").st_dev != os.stat(pool).st_dev for n in names}
    got = snapshot(f"{pool}/intel-23")
    obs["pool_diff"] = sorted(k for k in set(got) | set(ref) if got.get(k) != ref.get(k)
                              and not k.startswith(("etc/", "proc/sys/", "state/")))
    obs["pool_entries"] = len(got)
    # FUSE mode serving overlay trees: a cap and a governor preset through DIR/fuse/<node>
    if os.environ.get("OVERLAY_FUSE"):
        import time
        run = subprocess.Popen([sys.executable, "-m", "joulectl", "simulate", "run", spec, "--root", ov, "--fuse",
                                "--tick", "0.5", "-o", "json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not os.path.exists(f"{ov}/fuse/h100-0/bin") and time.time() < deadline and run.poll() is None:
            time.sleep(0.2)
        obs["fuse_cap"] = jc("--root", f"{ov}/fuse/h100-0", "cap", "--pct", "70", "-o", "json")
        obs["fuse_gov"] = jc("--root", f"{ov}/fuse/intel-0", "governor", "set", "efficiency", "-o", "json")
        import signal
        run.send_signal(signal.SIGINT)  # stops after the tick, unmounts DIR/fuse
        out, err = run.communicate(timeout=120)
        obs["fuse_run"] = {"rc": run.returncode, "out": out, "err": err}
        obs["fuse_epp"] = read(f"{i0}/sys/devices/system/cpu/cpufreq/policy9/energy_performance_preference")
        obs["fuse_epp_other"] = read(f"{i1}/sys/devices/system/cpu/cpufreq/policy9/energy_performance_preference")

    # a relative --root (the mount is given absolute paths)
    with open(f"{base}/vm.yaml", "w") as fh:
        fh.write(text.replace("count: 2}", "count: 0}").replace("count: 1}", "count: 0}").replace(
            "profile: vm-no-powercap, count: 0}", "profile: vm-no-powercap, count: 2}"))
    p = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", "vm.yaml", "--root", "rel",
                        "--overlay"], capture_output=True, text=True, timeout=600, cwd=base)
    obs["relative"] = {"rc": p.returncode, "out": p.stdout, "err": p.stderr,
                       "mounted": [os.stat(f"{base}/rel/{n}").st_dev != os.stat(f"{base}/rel").st_dev
                                   for n in ("vm-0", "vm-1")]}
    print(json.dumps(obs))
''')


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode != 0:
        return f"unshare -m is not allowed here: {proc.stderr.strip()}"
    with open("/proc/filesystems", encoding="utf-8") as fh:
        if "overlay" not in fh.read():
            return "this kernel has no overlayfs"
    return None


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = _can_unshare()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the overlay trees in a mount namespace: {why}")
        pytest.skip(why)
    for tool in ("lspci", "powercap-set", "cpupower"):
        if shutil.which(tool) is None:
            if os.environ.get("CI"):
                pytest.fail(f"CI must install the real tools: missing {tool}")
            pytest.skip(f"real tools not installed: {tool}")
    base = tmp_path_factory.mktemp("overlay")
    (base / "spec.yaml").write_text(SPEC)
    from tests.sim.fuse.conftest import missing

    env = dict(os.environ)
    if missing() is None:
        env["OVERLAY_FUSE"] = "1"
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", DRIVER, str(base)],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    obs: dict[str, Any] = json.loads(proc.stdout)
    return obs


def _ok(result: dict[str, Any]) -> str:
    assert result["rc"] == 0, result["err"] + result["out"]
    return str(result["out"])


def test_render_mounts_one_overlay_per_node_over_one_lower_per_profile(scenario: dict[str, Any]) -> None:
    assert _ok(scenario["render"]).startswith(f"rendered {len(NODES)} and resumed 0 node trees under ")
    assert scenario["nodes"] == NODES
    assert all(scenario["mounted"].values()), scenario["mounted"]
    assert len(scenario["lowers"]) == 6  # six profiles: the two Intel nodes share one lower layer
    [options] = scenario["options"]
    assert options.startswith("overlay overlay rw,")
    if tuple(int(x) for x in os.uname().release.split(".")[:2]) >= (5, 10):
        assert "volatile" in options  # no sync of the upper layer, as a plain tree's writes


def test_an_overlay_tree_is_the_plain_tree_entry_for_entry(scenario: dict[str, Any]) -> None:
    _ok(scenario["render_plain"])
    for node, d in scenario["diff"].items():
        assert d["n_differ"] == 0, (node, d["differ"])
        assert d["entries"] > 20, node
    assert scenario["diff"]["intel-0"]["entries"] > 6000  # full nodes: every attribute, every policy


def test_a_write_through_one_node_changes_that_node_only(scenario: dict[str, Any]) -> None:
    w = scenario["write"]
    assert w["node"] == "150000000\n"
    assert w["other"] == w["lower"] != w["node"]
    # a read-only attribute written by root: the node's copy only, its mode kept
    assert w["ro_other"] == w["ro_lower"] == "4000000\n"
    assert (w["mode"], w["ro_mode"]) == (0o644, 0o444)
    assert w["same_inode"]  # the copy-up keeps the inode number the tick's signatures hold
    _ok(scenario["tick1"])
    after = scenario["after_tick"]
    assert after["rapl"] == "150000000\n"
    # as on a plain tree, root's write to a 0444 file stays (FUSE mode refuses it with EACCES),
    # in that node only
    assert (after["ro"], after["ro_other"]) == ("9999999\n", "4000000\n")


def test_real_tools_write_through_the_mount_and_the_tick_reads_them_back(scenario: dict[str, Any]) -> None:
    _ok(scenario["powercap_set"])
    _ok(scenario["cpupower"])
    assert "1002:74a1" in _ok(scenario["lspci"])
    _ok(scenario["tick2"])
    landed = scenario["tools_landed"]
    assert landed["rapl"] == "200000000\n"
    assert landed["gov3"] == "performance\n" and landed["gov3_other"] != "performance\n"
    status = {n["node"]: n for n in json.loads(_ok(scenario["status"]))["nodes"]}
    assert status["intel-1"]["capsWatts"]["pkg0"] == 200.0
    assert status["intel-0"]["capsWatts"]["pkg0"] == 150.0
    assert '"limitWatts": 200' in _ok(scenario["discover"]).replace(".0,", ",")
    cap = json.loads(_ok(scenario["cap"]))
    assert cap["summary"]["applied"] == 8, cap["summary"]


def test_unmount_then_the_next_start_mounts_and_resumes_every_tree(scenario: dict[str, Any]) -> None:
    assert _ok(scenario["unmount"]).startswith(f"unmounted {len(NODES)} overlay node trees under ")
    assert not any(scenario["unmounted"].values())
    assert scenario["unmounted_empty"] == []
    status = scenario["status_unmounted"]  # says what to do, in one line (exit 2)
    assert status["rc"] == 2 and status["out"] == ""
    assert status["err"].strip().endswith("its overlay node trees are not mounted (after a reboot, or in another "
                                          "mount namespace): `joulectl simulate render SPEC --root DIR` mounts them")
    assert status["err"].count("\n") == 1
    assert _ok(scenario["unmount_again"]).startswith("unmounted 0 overlay node trees")
    assert f"rendered 0 and resumed {len(NODES)} node trees" in _ok(scenario["remount"])
    assert all(scenario["remounted"].values())
    assert scenario["kept"] == {"rapl0": "150000000\n", "rapl1": "200000000\n"}


def test_the_resume_check_puts_back_what_was_removed_through_the_mount(scenario: dict[str, Any]) -> None:
    out = _ok(scenario["repair"])
    rep = scenario["repaired"]
    # policy13 and all its attributes, and policy11's governor: the directory the check created
    # is listed in full though its lower layer's signature is unchanged
    assert rep["policy13"] == rep["policy13_other"] and len(rep["policy13"]) > 10
    assert f"{len(rep['policy13']) + 2} missing entries created" in out
    assert rep["gov11"] in ("powersave\n", "performance\n")
    assert "missing entries" not in _ok(scenario["repair_again"])


def test_a_root_rendered_with_overlay_keeps_rendering_overlays(scenario: dict[str, Any]) -> None:
    assert "rendered 1 and resumed" in _ok(scenario["grow"])
    assert scenario["grown_mounted"]
    assert scenario["grown_diff"] == []


# -- in-process: the mount's failures, the room, the path ------------------------------------------


def _spec(count: int = 1, profile: str = "intel-xeon-2s-rapl") -> Any:
    doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "t"},
           "spec": {"pools": [{"name": "n", "profile": profile, "count": count}]}}
    return parse_spec(doc, "t")


class _FailingLibc:
    """The C library's mount and umount2 failing with ``err``, as the kernel returns it (in place of
    :func:`joulectl.sim.libc.libc`)."""

    def __init__(self, err: int) -> None:
        self.err = err
        self.calls: list[bytes] = []

    def mount(self, source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes) -> int:
        self.calls.append(data)
        ctypes.set_errno(self.err)
        return -1

    def umount2(self, target: bytes, flags: int) -> int:
        ctypes.set_errno(self.err)
        return -1


@pytest.mark.parametrize(("err", "exc", "code", "words"), [
    (errno.EPERM, RefusedError, ExitCode.REFUSED, "need the privilege to mount (root or CAP_SYS_ADMIN)"),
    (errno.ENODEV, RenderError, ExitCode.USAGE, "this kernel has no overlayfs (modprobe overlay)"),
])
def test_a_mount_that_fails_leaves_nothing_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int,
                                                        exc: type[Exception], code: ExitCode, words: str) -> None:
    libc = _FailingLibc(err)
    monkeypatch.setattr(sim_libc, "_LIBC", libc)
    root = tmp_path / "root"
    with pytest.raises(exc) as info:
        render_nodes(_spec(2).nodes, str(root), overlay=True)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert info.value.exit_code == code  # type: ignore[attr-defined]
    assert len(libc.calls) == 1  # the first node stops the render
    options = libc.calls[0].decode()
    assert options.startswith(f"lowerdir={root}/.joulectl-layers/lower/")
    assert f"upperdir={root}/.joulectl-layers/nodes/n-0/upper,workdir={root}/.joulectl-layers/nodes/n-0/work" in options
    # no mount point, no layer, nothing half-made: the root holds only the shared layers
    assert sorted(p.name for p in root.iterdir()) == [".joulectl-layers"]
    assert sorted(p.name for p in (root / ".joulectl-layers" / "nodes").iterdir()) == []


def test_the_cli_says_so_in_one_line_with_the_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cli: Callable[..., Any]) -> None:
    monkeypatch.setattr(sim_libc, "_LIBC", _FailingLibc(errno.EPERM))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = cli("simulate", "render", spec, "--root", tmp_path / "r", "--overlay")
    assert result.exit_code == ExitCode.REFUSED
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot mount node intel-0's overlay (Operation not permitted)" in lines[0], lines
    assert "Traceback" not in result.stderr and result.stdout == ""
    result = cli("simulate", "unmount", "--root", tmp_path / "missing")
    assert result.exit_code == ExitCode.USAGE and "not a directory" in result.stderr


def test_an_unmounted_tree_that_cannot_be_mounted_again_stops_the_start(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a layer left by an earlier render (its mount gone, as after a reboot), mounted by no one here
    root = tmp_path / "root"
    layer = root / ".joulectl-layers" / "nodes" / "n-0"
    (layer / "upper").mkdir(parents=True)
    (layer / "work").mkdir()
    (root / ".joulectl-layers" / "lower" / "k").mkdir(parents=True)
    (layer / "lower").symlink_to("../../lower/k")
    (root / ".joulectl-layers" / "overlay").write_text("")
    monkeypatch.setattr(sim_libc, "_LIBC", _FailingLibc(errno.EPERM))
    with pytest.raises(RefusedError, match="cannot mount node n-0's overlay"):
        render_nodes(_spec(1).nodes, str(root))
    assert (layer / "upper").is_dir()  # the node's own files are never removed by a failed mount


@pytest.mark.parametrize("char", [",", ":", "\\"])
def test_a_root_path_overlayfs_cannot_take_is_refused_before_anything_is_written(tmp_path: Path, char: str) -> None:
    root = tmp_path / f"a{char}b"
    with pytest.raises(RenderError, match="cannot hold") as info:
        render_nodes(_spec(1).nodes, str(root), overlay=True)
    assert info.value.exit_code == ExitCode.USAGE
    assert not (root / "n-0").exists()


def test_unmount_of_a_root_without_overlays(tmp_path: Path) -> None:
    assert overlay.unmount_all(str(tmp_path)) == 0


def test_the_room_check_counts_one_lower_per_profile_and_a_few_inodes_per_node(tmp_path: Path) -> None:
    from joulectl.sim.room import need
    from joulectl.sim.template import template

    nodes = _spec(1000).nodes
    t = template(nodes[0].profile)
    inodes, data = need(nodes, {nodes[0].profile.profile_hash(): 1000}, overlay_root=str(tmp_path))
    lower = 1 + len(t.dirs) + len(t.files) + len(t.symlinks)
    per_node = (inodes - lower) / 1000
    assert 10 <= per_node <= 20  # layer, upper, work, lower link, mount point, own files and their dirs
    plain_inodes, _ = need(nodes, {nodes[0].profile.profile_hash(): 1000})
    assert plain_inodes > 300 * inodes  # what a plain render of the same thousand nodes takes
    assert data > 1000 * 133_000  # each node's manifest (133 KB) and signatures


def test_two_render_workers_mount_their_shares(scenario: dict[str, Any]) -> None:
    assert _ok(scenario["pool"]).startswith("rendered 24 and resumed 0 node trees")
    assert sorted(scenario["pool_nodes"]) == sorted(f"intel-{i}" for i in range(24))
    assert all(scenario["pool_nodes"].values())
    assert scenario["pool_diff"] == [] and scenario["pool_entries"] > 6000  # the plain intel-0's entries


def test_a_render_past_the_kernels_mount_limit_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overlay, "mount_limit", lambda: 1000)
    monkeypatch.setattr(overlay, "mounts_in_use", lambda: 990)
    libc = _FailingLibc(errno.EPERM)
    monkeypatch.setattr(sim_libc, "_LIBC", libc)
    root = tmp_path / "root"
    with pytest.raises(RenderError) as info:
        render_nodes(_spec(11).nodes, str(root), overlay=True)
    assert str(info.value).endswith(
        "11 new overlay trees need a mount each, and 990 of the kernel's fs.mount-max 1,000 are in use: raise it "
        "(sysctl -w fs.mount-max=2001), render fewer nodes, or render without --overlay")
    assert libc.calls == [] and not (root / ".joulectl-layers" / "lower").exists()
    # ten fit: the render goes on (to the mount, refused here)
    with pytest.raises(RefusedError):
        render_nodes(_spec(10).nodes, str(root), overlay=True)


def test_a_full_mount_table_met_at_a_mount_names_the_sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_libc, "_LIBC", _FailingLibc(errno.ENOSPC))
    monkeypatch.setattr(overlay, "mount_limit", lambda: 100_000)
    with pytest.raises(RenderError, match=r"cannot mount its overlay \(No space left on device: the kernel's mount "
                                          r"table is full \(fs.mount-max 100,000; sysctl -w fs.mount-max=200000\)"):
        render_nodes(_spec(1).nodes, str(tmp_path / "root"), overlay=True)
    assert overlay.mount_limit is not None and isinstance(overlay.mounts_in_use(), int)


def test_a_relative_root_mounts_with_absolute_paths(scenario: dict[str, Any]) -> None:
    assert _ok(scenario["relative"]).startswith("rendered 2 and resumed 0 node trees under rel")
    assert scenario["relative"]["mounted"] == [True, True]


def test_fuse_mode_serves_overlay_trees(scenario: dict[str, Any]) -> None:
    from tests.sim.fuse.conftest import missing

    if "fuse_run" not in scenario:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run FUSE mode: {missing()}")
        pytest.skip(str(missing()))
    cap = json.loads(_ok(scenario["fuse_cap"]))
    assert cap["summary"]["applied"] == 8, cap["summary"]
    _ok(scenario["fuse_gov"])
    run = scenario["fuse_run"]
    assert run["rc"] == ExitCode.INTERRUPTED, run["err"]  # stopped by Ctrl-C, as an operator stops it
    assert json.loads(run["out"])["interrupted"] is True
    # the preset's write reached the node's upper layer through the FUSE mount, and that node only
    assert scenario["fuse_epp"] != scenario["fuse_epp_other"]


def test_detach_of_a_path_nothing_is_mounted_at_names_the_kernels_errno(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        sim_libc.detach(str(tmp_path))
    assert info.value.errno == (errno.EINVAL if os.geteuid() == 0 else errno.EPERM)
    assert info.value.filename == str(tmp_path)


def _layer(root: Path, name: str = "n-0") -> Path:
    """A node's layer as a render leaves it (upper, work, lower link), its mount gone."""
    layer = root / ".joulectl-layers" / "nodes" / name
    (layer / "upper").mkdir(parents=True)
    (layer / "work").mkdir()
    (root / ".joulectl-layers" / "lower" / "k").mkdir(parents=True, exist_ok=True)
    (layer / "lower").symlink_to("../../lower/k")
    (root / ".joulectl-layers" / "overlay").write_text("")
    return layer


def test_a_layer_whose_lower_is_gone_says_what_to_remove(tmp_path: Path, cli: Callable[..., Any]) -> None:
    root = tmp_path / "root"
    layer = _layer(root)
    (root / ".joulectl-layers" / "lower" / "k").rmdir()
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.split("  - {name: epyc")[0].replace("count: 2", "count: 1").replace("name: intel", "name: n"))
    result = cli("simulate", "render", spec, "--root", root)
    assert result.exit_code == ExitCode.USAGE and result.stdout == ""
    assert result.stderr.strip() == (
        f"joulectl: error: {root}/n-0: node n-0: its overlay's lower layer is missing (No such file or directory); "
        f"remove {layer} and {root}/n-0 to render the node fresh")


@pytest.mark.parametrize(("err", "code", "words"), [
    (errno.EPERM, ExitCode.REFUSED, "cannot unmount (Operation not permitted): run as root"),
    (errno.EBUSY, ExitCode.USAGE, "cannot unmount (Device or resource busy)"),
])
def test_unmount_that_the_kernel_refuses_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     cli: Callable[..., Any], err: int, code: ExitCode,
                                                     words: str) -> None:
    root = tmp_path / "root"
    _layer(root)
    (root / "n-0").mkdir()
    monkeypatch.setattr(overlay, "mounted", lambda target: True)
    monkeypatch.setattr(sim_libc, "_LIBC", _FailingLibc(err))
    result = cli("simulate", "unmount", "--root", root)
    assert result.exit_code == code and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(root / "n-0") in lines[0] and words in lines[0], lines


def test_a_lower_layer_whose_write_fails_leaves_nothing_of_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from joulectl.sim import tree

    def full(tmp: str, t: Any, store: Any) -> None:
        os.mkdir(tmp)
        raise OSError(errno.ENOSPC, "No space left on device", f"{tmp}/sys")

    monkeypatch.setattr(tree, "write_layout", full)
    root = tmp_path / "root"
    with pytest.raises(RenderError) as info:
        render_nodes(_spec(1).nodes, str(root), overlay=True)
    lower = root / ".joulectl-layers" / "lower"
    [key] = {n.profile.profile_hash() for n in _spec(1).nodes}
    assert str(info.value) == (f"{lower}/{key}: profile intel-xeon-2s-rapl's shared lower layer: No space left on "
                               "device writing sys (df -h, df -i): nothing of it was left")
    assert info.value.exit_code == ExitCode.USAGE
    assert sorted(p.name for p in (root / ".joulectl-layers").iterdir()) == ["lower", "overlay"]
    assert list(lower.iterdir()) == [] and not (root / "n-0").exists()


def test_a_node_whose_write_fails_leaves_nothing_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from joulectl.sim import tree

    real = tree._write_file

    def full(path: str, data: bytes, mode: int) -> None:
        if path.endswith("/state/node.json"):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(path, data, mode)

    monkeypatch.setattr(tree, "_write_file", full)
    root = tmp_path / "root"
    with pytest.raises(RenderError) as info:
        render_nodes(_spec(1).nodes, str(root), overlay=True)
    assert str(info.value) == (f"{root}/n-0: node n-0: No space left on device writing upper/state/node.json "
                               "(df -h, df -i): nothing of the node was left")
    assert info.value.exit_code == ExitCode.USAGE
    assert list((root / ".joulectl-layers" / "nodes").iterdir()) == [] and not (root / "n-0").exists()
    assert len(list((root / ".joulectl-layers" / "lower").iterdir())) == 1  # the profile's layer stays
