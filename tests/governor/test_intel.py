"""Intel GPU governor on i915 and xe: every preset on every GT of every tile, read back, journaled, undone.

Trees: hand-written i915/xe devices (the kernel's file names, the values of the Flex 170 profile),
the real B580 (xe, two GTs) GT files copied from ../shared/real-captures, and a rendered Flex 170
node (i915 and xe layouts) through the real CLI.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trees
from govkit import inventory
from hostdoubles import FaultyHost

from joulectl.backends import gov_intel
from joulectl.errors import ExitCode
from joulectl.host import Host
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.ops import governor as gov
from joulectl.ops.journal import Journal

BUS = "0000:4d:00.0"
FIXTURES = Path(__file__).parent / "fixtures"
FLEX = "Intel Data Center GPU Flex 170"


def _device(root: Path, driver: str, bus: str = BUS, device: int = 0x56C0) -> str:
    return trees.intel_gpu(root, bus, device=device, driver=driver,
                           files={"power1_max": 150_000_000, "power1_rated_max": 150_000_000}
                           if driver == "i915" else {"power2_max": 150_000_000, "power2_rated_max": 150_000_000})


def i915_tree(root: Path, *, rp0: int = 2050, rp1: int = 1300, rpn: int = 300, per_gt: bool = True,
              lo: int | None = None, hi: int | None = None) -> Path:
    """A Flex 170 on i915: per-GT ``gt/gt0/rps_*`` files (Linux 6.2+), or only the card's ``gt_*``."""
    base = _device(root, "i915")
    d, pre = (f"{base}/drm/card0/gt/gt0", "rps") if per_gt else (f"{base}/drm/card0", "gt")
    trees.write_many(root, d, {f"{pre}_RP0_freq_mhz": rp0, f"{pre}_RP1_freq_mhz": rp1, f"{pre}_RPn_freq_mhz": rpn,
                               f"{pre}_boost_freq_mhz": rp0, f"{pre}_act_freq_mhz": 0, f"{pre}_cur_freq_mhz": rpn,
                               f"{pre}_min_freq_mhz": rpn if lo is None else lo,
                               f"{pre}_max_freq_mhz": rp0 if hi is None else hi})
    return root


def xe_tree(root: Path, tiles: int = 1) -> Path:
    """A Flex 170 on xe, one GT per tile (``tile<T>/gt<N>/freq0``; a two-tile part numbers GTs on)."""
    base = _device(root, "xe")
    for t in range(tiles):
        trees.write_many(root, f"{base}/tile{t}/gt{t}/freq0", {
            "rp0_freq": 2050, "rpe_freq": 1300, "rpn_freq": 300, "act_freq": 0, "cur_freq": 300,
            "min_freq": 300, "max_freq": 2050})
    return root


def b580_tree(root: Path) -> Path:
    """The real B580's GT files (two GTs, the media GT's minimum 1200 MHz) under an xe device."""
    base = _device(root, "xe", bus="0000:09:00.0", device=0xE20B)
    shutil.copytree(FIXTURES / "intel-b580-xe" / "tile0", root / base.lstrip("/") / "tile0")
    return root


def intel_gpu(bus: str = BUS, driver: str = "i915") -> GpuDevice:
    return GpuDevice(index=0, bus_id=bus, vendor="intel", driver=driver, raw_model=FLEX, model=FLEX,
                     cap_range=PowerRange(None, 150, 150), current_cap_w=150, control=Control(True))


def _gt(root: Path, driver: str, name: str, gt: str = "gt0", tile: str = "tile0", bus: str = BUS) -> int:
    d = root / "sys/bus/pci/devices" / bus
    if driver == "xe":
        return int((d / tile / gt / "freq0" / f"{name}_freq").read_text())
    return int((d / "drm/card0/gt" / gt / f"rps_{name}_freq_mhz").read_text())


@pytest.mark.parametrize("driver", ["i915", "xe"])
@pytest.mark.parametrize(("preset", "lo", "hi", "after"), [
    ("efficient", 300, 1500, "gt0 300-1500 MHz"),  # 75 % of 2050 = 1537.5 -> 1500 (50 MHz step), above RP1 1300
    ("low", 300, 300, "gt0 300 MHz"),
    ("peak", 2050, 2050, "gt0 2050 MHz"),
    ("sustained", 1600, 1600, "gt0 1600 MHz"),  # the model's 1610 MHz, snapped down to the step
])
def test_presets(tmp_path: Path, driver: str, preset: str, lo: int, hi: int, after: str) -> None:
    (i915_tree if driver == "i915" else xe_tree)(tmp_path)
    host, journal, inv = Host(str(tmp_path)), Journal(), inventory([intel_gpu(driver=driver)])
    r = gov.apply_preset(host, inv, journal, preset, model_presets={FLEX: {"graphicsMHz": 1610}})[0]
    name = "tile0/gt0" if driver == "xe" else "gt0"
    assert (r.status, r.before, r.after, r.message) == (
        Status.APPLIED, f"{name} 300-2050 MHz", after.replace("gt0", name), "frequency limits of 1 GT set")
    assert (_gt(tmp_path, driver, "min"), _gt(tmp_path, driver, "max")) == (lo, hi)
    # a bound already at its target is not written, nor journaled (peak's maximum is RP0 already)
    assert journal.current(BUS, f"gtMaxMHz:{name}") == (None if hi == 2050 else hi)
    assert journal.current(BUS, f"gtMinMHz:{name}") == (None if lo == 300 else lo)
    assert journal.current(BUS, "governorPreset") == {"preset": preset, "status": "applied"}
    again = gov.apply_preset(host, inv, journal, preset, model_presets={FLEX: {"graphicsMHz": 1610}})[0]
    assert (again.status, again.message) == (Status.UNCHANGED, "already in force")
    back = gov.apply_preset(host, inv, journal, "auto")[0]
    assert (back.status, back.after, back.message) == (
        Status.APPLIED, f"{name} 300-2050 MHz", "frequency limits set by joulectl restored")
    assert (_gt(tmp_path, driver, "min"), _gt(tmp_path, driver, "max")) == (300, 2050)
    assert not any(rec.current for rec in journal.devices.values())


def test_xe_gt_names_and_i915_card_level_files(tmp_path: Path) -> None:
    xe_tree(tmp_path / "xe", tiles=2)
    r = gov.apply_preset(Host(str(tmp_path / "xe")), inventory([intel_gpu(driver="xe")]), Journal(), "peak")[0]
    assert (r.status, r.after, r.message) == (Status.APPLIED, "tile0/gt0 2050 MHz, tile1/gt1 2050 MHz",
                                              "frequency limits of 2 GTs set")
    i915_tree(tmp_path / "old", per_gt=False)  # before Linux 6.2: only the card's gt_*_freq_mhz
    r = gov.apply_preset(Host(str(tmp_path / "old")), inventory([intel_gpu()]), Journal(), "low")[0]
    assert (r.status, r.after) == (Status.APPLIED, "card0 300 MHz")
    card = tmp_path / "old/sys/bus/pci/devices" / BUS / "drm/card0"
    assert [int((card / f"gt_{n}_freq_mhz").read_text()) for n in ("min", "max")] == [300, 300]


def test_efficient_never_below_rp1(tmp_path: Path) -> None:
    """75 % of RP0 1600 MHz is 1200 MHz, below RP1 1300 MHz: the maximum is RP1."""
    i915_tree(tmp_path, rp0=1600, rp1=1300)
    r = gov.apply_preset(Host(str(tmp_path)), inventory([intel_gpu()]), Journal(), "efficient")[0]
    assert (r.status, r.after) == (Status.APPLIED, "gt0 300-1300 MHz")


def test_writes_keep_min_at_most_max(tmp_path: Path) -> None:
    """peak raises the maximum before the minimum; low from peak lowers the minimum first."""
    i915_tree(tmp_path)

    class Driver(Host):
        """i915's store rule: EINVAL when min would exceed max (or max fall below min)."""

        def write(self, host_path: str, value: str) -> None:
            from joulectl.host import HostIOError

            d = host_path.rsplit("/", 1)[0]
            lo, hi = (int(self.read_attr(f"{d}/rps_{n}_freq_mhz").value or 0) for n in ("min", "max"))
            v = int(value)
            if (host_path.endswith("rps_min_freq_mhz") and v > hi) or (host_path.endswith("rps_max_freq_mhz")
                                                                       and v < lo):
                raise HostIOError(errno.EINVAL, host_path)
            super().write(host_path, value)

    host, journal, inv = Driver(str(tmp_path)), Journal(), inventory([intel_gpu()])
    assert [gov.apply_preset(host, inv, journal, p)[0].status for p in ("efficient", "peak", "low", "peak", "auto")] \
        == [Status.APPLIED] * 5
    assert (_gt(tmp_path, "i915", "min"), _gt(tmp_path, "i915", "max")) == (300, 2050)


def test_real_b580_two_gts(tmp_path: Path) -> None:
    """The real B580: gt0 400-2850 MHz, gt1 (media) 1200-1500 MHz. efficient caps gt0 at 2100 MHz
    (75 % of 2850 = 2137.5) and gt1 at 1100 MHz (75 % of 1500 = 1125), below gt1's minimum 1200,
    which is lowered first; auto puts 1200-1500 back."""
    b580_tree(tmp_path)
    bus = "0000:09:00.0"
    host, journal = Host(str(tmp_path)), Journal()
    inv = inventory([intel_gpu(bus, "xe")])
    r = gov.apply_preset(host, inv, journal, "efficient")[0]
    assert (r.status, r.before, r.after) == (Status.APPLIED, "tile0/gt0 400-2850 MHz, tile0/gt1 1200-1500 MHz",
                                             "tile0/gt0 400-2100 MHz, tile0/gt1 1100 MHz")
    assert [_gt(tmp_path, "xe", n, gt, bus=bus) for gt in ("gt0", "gt1") for n in ("min", "max")] == [
        400, 2100, 1100, 1100]
    rows, _ = gov.show(host, inv, journal, gpu=True, cpu=False)
    assert (rows[0].preset, rows[0].set_by, rows[0].status, rows[0].clocks) == (
        "efficient", "joulectl", "applied", "tile0/gt0 0 MHz, tile0/gt1 0 MHz")
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert (r.status, r.after) == (Status.APPLIED, "tile0/gt0 400-2850 MHz, tile0/gt1 1200-1500 MHz")
    assert [_gt(tmp_path, "xe", n, gt, bus=bus) for gt in ("gt0", "gt1") for n in ("min", "max")] == [
        400, 2850, 1200, 1500]


@pytest.mark.parametrize(("err", "status"), [
    (errno.EINVAL, Status.UNSUPPORTED), (errno.EOPNOTSUPP, Status.UNSUPPORTED), (errno.EBUSY, Status.UNSUPPORTED),
    (errno.EACCES, Status.REFUSED), (errno.EPERM, Status.REFUSED), (errno.EROFS, Status.REFUSED),
    (errno.EIO, Status.ERROR),
])
def test_refusals_map_errnos_as_for_amdgpu(tmp_path: Path, err: int, status: Status) -> None:
    xe_tree(tmp_path)
    host, journal = FaultyHost(str(tmp_path), {"max_freq": err}), Journal()
    r = gov.apply_preset(host, inventory([intel_gpu(driver="xe")]), journal, "efficient")[0]
    path = f"/sys/bus/pci/devices/{BUS}/tile0/gt0/freq0/max_freq"
    assert (r.status, r.message) == (
        status, f"writing 1500 to {path}: {errno.errorcode[err]}: {os.strerror(err)}")
    assert r.after == "tile0/gt0 300-2050 MHz"
    assert not journal.devices or not any(rec.current for rec in journal.devices.values())
    assert gov_intel.status_for_errno(err) is status


def test_readback_that_differs_is_an_error(tmp_path: Path) -> None:
    i915_tree(tmp_path)

    class Clamping(Host):
        def write(self, host_path: str, value: str) -> None:
            super().write(host_path, "1450" if host_path.endswith("rps_max_freq_mhz") else value)

    r = gov.apply_preset(Clamping(str(tmp_path)), inventory([intel_gpu()]), Journal(), "efficient")[0]
    path = f"/sys/bus/pci/devices/{BUS}/drm/card0/gt/gt0/rps_max_freq_mhz"
    assert (r.status, r.message) == (Status.ERROR, f"{path} reads back 1450 after writing 1500")


def test_blocked_without_frequency_files_or_model_entry(tmp_path: Path) -> None:
    _device(tmp_path, "i915")
    r = gov.apply_preset(Host(str(tmp_path)), inventory([intel_gpu()]), Journal(), "efficient")[0]
    assert (r.status, r.message) == (Status.BLOCKED, (
        f"no GT frequency files under /sys/bus/pci/devices/{BUS} (tile*/gt*/freq0 for xe, "
        "drm/card*/gt/gt*/rps_*_freq_mhz or drm/card*/gt_*_freq_mhz for i915)"))
    assert gov.accepted_presets(intel_gpu(), gov.new_context(Host(str(tmp_path)))) == ()
    i915_tree(tmp_path / "t")
    r = gov.apply_preset(Host(str(tmp_path / "t")), inventory([intel_gpu()]), Journal(), "sustained")[0]
    assert (r.status, r.message) == (
        Status.BLOCKED, "no sustained clock for this model in the model presets (--model-presets FILE)")
    ctx = gov.new_context(Host(str(tmp_path / "t")))
    assert gov.accepted_presets(intel_gpu(), ctx) == ("auto", "efficient", "low", "peak")
    assert gov.accepted_presets(intel_gpu(), ctx, {FLEX: {"graphicsMHz": 1500}}) == (
        "auto", "sustained", "efficient", "low", "peak")


def test_reset_leaves_a_limit_the_operator_changed(tmp_path: Path) -> None:
    i915_tree(tmp_path, lo=500, hi=1800)
    host, journal, inv = Host(str(tmp_path)), Journal(), inventory([intel_gpu()])
    gov.apply_preset(host, inv, journal, "peak")
    (tmp_path / "sys/bus/pci/devices" / BUS / "drm/card0/gt/gt0/rps_min_freq_mhz").write_text("1000\n")
    dry = gov.reset(host, inv, journal, cpu=False, dry_run=True)[0]
    assert (dry.status, dry.message, dry.after) == (Status.PLANNED, "would write 1800 to gt0 max", "gt0 1000-1800 MHz")
    r = gov.reset(host, inv, journal, cpu=False)[0]
    assert (r.status, r.message) == (
        Status.APPLIED, "frequency limits set by joulectl restored; gt0 min changed since joulectl set it: left alone")
    assert (_gt(tmp_path, "i915", "min"), _gt(tmp_path, "i915", "max")) == (1000, 1800)
    assert gov.reset(host, inv, journal, cpu=False)[0].message == "nothing set by joulectl"


# -- through the real CLI on the rendered Flex 170 profile -----------------------------------------

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: intel}
spec:
  pools:
  - {name: i915, profile: intel-flex-170-4gpu}
  - {name: xe, profile: intel-flex-170-4gpu, overrides: {gpus: {intel: {driver: xe}}}}
"""


@pytest.fixture(scope="module")
def flex(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("flex")
    (base / "spec.yaml").write_text(SPEC)
    assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "t")]) == 0
    return base / "t"


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "joulectl", "--root", str(root), *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_cli_every_preset_on_the_rendered_flex(flex: Path, driver: str) -> None:
    root = flex / f"{driver}-0"
    name = "tile0/gt0" if driver == "xe" else "gt0"
    shown = json.loads(_cli(root, "governor", "show", "--gpu", "-o", "json").stdout)
    assert shown["gpu"]["presets"] == ["auto", "efficient", "low", "peak"]
    want = {"efficient": f"{name} 300-1500 MHz", "low": f"{name} 300 MHz", "peak": f"{name} 2050 MHz",
            "auto": f"{name} 300-2050 MHz"}
    for preset, after in want.items():
        r = _cli(root, "governor", "set", preset, "-o", "json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert {(x["device"], x["status"], x["after"]) for x in doc["results"]} == {
            (b, "applied", after) for b in ("0000:4d:00.0", "0000:50:00.0", "0000:b3:00.0", "0000:b6:00.0")}
    r = _cli(root, "governor", "set", "sustained")
    assert r.returncode == 5
    assert r.stderr == "joulectl: error: 0 of 4 targets done; 4 blocked (see MESSAGE)\n"


def test_cli_unprivileged_is_refused() -> None:
    """As ``nobody`` nothing can be written (the node lock, the journal, the root-owned 0644
    frequency files): exit 4 with the privilege hint, and every limit stays as it was."""
    import pwd
    import tempfile

    from joulectl.cli import run

    if os.geteuid() != 0:
        pytest.skip("dropping privileges needs root")
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user on this machine")
    sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))
    from test_privilege import DROP

    base = Path(tempfile.mkdtemp(prefix="joulectl-intel-"))
    try:
        base.chmod(0o755)
        (base / "spec.yaml").write_text(SPEC)
        assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "t")]) == 0
        (base / "t").chmod(0o755)
        root = base / "t" / "xe-0"
        files = sorted(root.glob("sys/devices/**/freq0/*_freq"))
        before = [f.read_text() for f in files]
        r = subprocess.run([sys.executable, "-c", DROP, str(uid), "--root", str(root), "governor", "set", "low",
                            "--wait", "0"], capture_output=True, text=True, timeout=300, check=False,
                           env={**os.environ, "NO_COLOR": "1"})
        assert r.returncode == ExitCode.REFUSED, r.stderr
        assert "run as root (sudo joulectl ...)" in r.stderr
        assert [f.read_text() for f in files] == before and len(files) == 28
    finally:
        shutil.rmtree(base, ignore_errors=True)
