"""Node trees: layout, modes, cpuinfo, state files; resume and mismatch errors; discover round trip."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from joulectl.sim.clusterspec import load_spec, parse_spec
from joulectl.sim.profiles import ProfileSet
from joulectl.sim.tree import RenderError, load_manifest, read_nvml_state, render_nodes, write_nvml_state
from tests.sim.conftest import mode, read, render_one, spec_doc


def test_intel_tree_layout_and_modes(all_trees: dict[str, Path]) -> None:
    n = all_trees["intel-xeon-2s-rapl"]
    z0 = n / "sys/class/powercap/intel-rapl:0"
    assert os.readlink(z0) == "../../devices/virtual/powercap/intel-rapl/intel-rapl:0"
    assert read(z0 / "name") == "package-0"
    assert read(z0 / "constraint_0_name") == "long_term"
    assert read(z0 / "constraint_0_power_limit_uw") == "270000000"
    assert mode(z0 / "constraint_0_power_limit_uw") == 0o644
    assert mode(z0 / "constraint_0_max_power_uw") == 0o444
    assert mode(z0 / "energy_uj") == 0o400
    assert read(n / "sys/class/powercap/intel-rapl:0:0/name") == "dram"
    assert read(n / "sys/class/powercap/intel-rapl:2/name") == "psys"
    assert read(n / "sys/class/powercap/intel-rapl:0:0/enabled") == "0"  # PL1 locked by firmware
    pol = n / "sys/devices/system/cpu/cpufreq/policy127"
    assert read(pol / "scaling_driver") == "intel_pstate"
    assert read(pol / "scaling_governor") == "powersave" and mode(pol / "scaling_governor") == 0o644
    assert read(pol / "base_frequency") == "2100000"
    assert read(pol / "energy_performance_preference") == "balance_performance"
    assert os.readlink(n / "sys/devices/system/cpu/cpu5/cpufreq") == "../cpufreq/policy5"
    assert read(n / "sys/devices/system/cpu/intel_pstate/no_turbo") == "0"
    assert not (n / "sys/devices/system/cpu/cpufreq/boost").exists()  # absent under intel_pstate
    assert read(n / "etc/hostname") == n.name == read(n / "proc/sys/kernel/hostname")
    assert read(n / "proc/sys/kernel/osrelease") == "6.8.0-57-generic"
    assert list((n / "bin").iterdir()) == []


def test_every_symlink_is_relative_and_stays_inside_the_node(all_trees: dict[str, Path]) -> None:
    for tree in all_trees.values():
        real_root = os.path.realpath(tree)
        for dirpath, dirnames, filenames in os.walk(tree):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                if os.path.islink(p):
                    target = os.readlink(p)
                    assert not target.startswith("/"), p
                    resolved = os.path.realpath(p)
                    assert resolved.startswith(real_root + os.sep), p
                    assert os.path.exists(resolved), p


def test_cpuinfo_blocks_and_flags_follow_the_seed(all_trees: dict[str, Path]) -> None:
    intel = (all_trees["intel-xeon-2s-rapl"] / "proc/cpuinfo").read_text()
    blocks = [b for b in intel.split("\n\n") if b.strip()]
    assert len(blocks) == 128
    assert "model name\t: INTEL(R) XEON(R) GOLD 6530" in blocks[0]
    # the flags a real Emerald Rapids shows (lm: lscpu's 64-bit op-mode), the seed's implied ones among them
    flags = re.search(r"^flags\t\t: (.*)$", blocks[0], re.MULTILINE)
    assert flags and flags.group(1).startswith("fpu vme de pse tsc msr")
    assert {"lm", "constant_tsc", "hwp", "hwp_epp", "amx_tile"} <= set(flags.group(1).split())
    assert "rapl" not in flags.group(1).split() and "hypervisor" not in flags.group(1).split()
    assert "physical id\t: 1" in blocks[32] and "physical id\t: 0" in blocks[64]
    vm = (all_trees["vm-no-powercap"] / "proc/cpuinfo").read_text()
    assert vm.count("processor\t:") == 8 and " hypervisor " in vm and " hwp " not in vm
    amd = (all_trees["amd-epyc-2s-energy-only"] / "proc/cpuinfo").read_text()
    assert amd.count("processor\t:") == 384
    assert " rapl " in amd and " cppc " in amd and " lm " in amd and " hwp " not in amd


def test_vm_has_no_cpufreq_and_no_powercap(all_trees: dict[str, Path]) -> None:
    vm = all_trees["vm-no-powercap"]
    assert not (vm / "sys/devices/system/cpu/cpufreq").exists()
    assert not (vm / "sys/class/powercap/intel-rapl").exists()
    assert load_manifest(str(vm))["writable"] == []


def test_amd_devices_secondary_dies_and_pinned_caps(all_trees: dict[str, Path]) -> None:
    mi250 = all_trees["amd-instinct-mi250x-4gpu"]
    prim = mi250 / "sys/bus/pci/devices/0000:c1:00.0"
    sec = mi250 / "sys/bus/pci/devices/0000:c6:00.0"
    hp = next((prim / "hwmon").iterdir())
    hs = next((sec / "hwmon").iterdir())
    assert read(hp / "name") == "amdgpu" and read(hp / "power1_cap") == "560000000"
    assert read(hs / "power1_cap") == "0" and read(hs / "power1_cap_default") == "0"
    assert read(hs / "power1_cap_max") == "560000000"
    assert read(prim / "vendor") == "0x1002" and read(prim / "class") == "0x038000"
    assert read(prim / "pp_dpm_sclk") == "0: 500Mhz\n1: 800Mhz\n2: 1700Mhz *"
    w = all_trees["amd-radeon-pro-w7900"] / "sys/bus/pci/devices/0000:03:00.0"
    hw = next((w / "hwmon").iterdir())
    assert {read(hw / f) for f in ("power1_cap", "power1_cap_max", "power1_cap_min", "power1_cap_default")} == {
        "241000000"}
    mi300 = all_trees["amd-instinct-mi300x-8gpu"] / "sys/bus/pci/devices/0000:0c:00.0"
    assert read(mi300 / "current_compute_partition") == "SPX"
    assert mode(mi300 / "current_compute_partition") == 0o644
    assert not (next((mi300 / "hwmon").iterdir()) / "temp1_input").exists()  # edge hidden on GC 9.4.3
    assert os.path.realpath(all_trees["amd-instinct-mi300x-8gpu"] / "sys/class/drm/card0/device") == str(
        mi300.resolve())


def test_intel_i915_and_xe_layouts(all_trees: dict[str, Path], tmp_path: Path) -> None:
    i915 = all_trees["intel-flex-170-4gpu"] / "sys/bus/pci/devices/0000:4d:00.0"
    h = next((i915 / "hwmon").iterdir())
    assert read(h / "name") == "i915" and read(h / "power1_max") == "150000000"
    assert mode(h / "power1_max") == 0o664 and read(h / "power1_rated_max") == "150000000"
    xe_tree = render_one(tmp_path, "intel-flex-170-4gpu", "xe", {"gpus": {"intel": {"driver": "xe"}}})
    hx = next((xe_tree / "sys/bus/pci/devices/0000:4d:00.0/hwmon").iterdir())
    assert read(hx / "name") == "xe" and read(hx / "power2_max") == "150000000"
    assert read(hx / "power2_label") == "pkg" and not (hx / "power1_max").exists()
    kinds = {w["path"]: w for w in load_manifest(str(xe_tree))["writable"] if w["kind"] == "intel_pl1"}
    rule = kinds[f"sys/devices/pci0000:4d/0000:4d:00.0/hwmon/{hx.name}/power2_max"]["rule"]
    assert rule["clampUw"] == [40_000_000, 150_000_000]


def test_manifest_rules(all_trees: dict[str, Path]) -> None:
    m = load_manifest(str(all_trees["intel-xeon6-2s-tpmi"]))
    rapl = [w for w in m["writable"] if w["kind"] == "rapl_limit"]
    assert {w["rule"]["limitBits"] for w in rapl} == {18}
    m = load_manifest(str(all_trees["intel-xeon-2s-rapl"]))
    by_path = {w["path"]: w for w in m["writable"]}
    pl1 = by_path["sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"]
    assert pl1["component"] == "pkg0"
    assert pl1["rule"] == {"constraint": "long_term", "minUw": 0, "maxUw": 270_000_000, "limitBits": 15,
                           "unitUw": 125000, "locked": False, "default": "270000000"}
    dram = by_path["sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0/constraint_0_power_limit_uw"]
    assert dram["rule"]["locked"] is True
    psys = by_path["sys/devices/virtual/powercap/intel-rapl/intel-rapl:2/constraint_0_power_limit_uw"]
    assert psys["rule"]["limitBits"] == 17
    gov = by_path["sys/devices/system/cpu/cpufreq/policy3/scaling_governor"]
    assert gov["rule"]["allowed"] == ["performance", "powersave"]
    epp = by_path["sys/devices/system/cpu/cpufreq/policy3/energy_performance_preference"]
    assert epp["rule"]["busyUnderPerformance"] is True
    counters = {c["path"]: c for c in m["counters"]}
    e0 = counters["sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj"]
    assert e0 == {"path": e0["path"], "kind": "energy_uj", "component": "pkg0", "maxRange": 262143328850}
    m = load_manifest(str(all_trees["amd-instinct-mi250x-4gpu"]))
    caps = [w for w in m["writable"] if w["kind"] == "amdgpu_cap"]
    assert [w["rule"]["secondary"] for w in caps] == [False, True] * 4
    assert caps[1]["rule"]["primaryBusId"] == "0000:c1:00.0"
    m = load_manifest(str(all_trees["amd-radeon-pro-w7900"]))
    assert next(w for w in m["writable"] if w["kind"] == "amdgpu_cap")["rule"]["pinnedUw"] == 241_000_000


def test_node_meta_and_nvml_state(all_trees: dict[str, Path], tmp_path: Path) -> None:
    tree = all_trees["nvidia-l40s-4gpu"]
    meta = json.loads((tree / "state/node.json").read_text())
    prof = ProfileSet().get("nvidia-l40s-4gpu")
    assert (meta["node"], meta["profile"], meta["profileHash"], meta["layoutVersion"]) == (
        tree.name, "nvidia-l40s-4gpu", prof.profile_hash(), 2)
    st = read_nvml_state(str(tree))
    g = st["gpus"][0]
    assert g["busId"] == "00000000:4F:00.0" and g["architecture"] == "ada"
    assert g["power"]["maxLimitMw"] == 350000 and g["power"]["minLimitMw"] == 100000
    assert g["smMaxByMem"] == {"405": 645, "810": 1395} and g["memoryLockSupported"] is False
    assert [c["memoryMhz"] for c in g["supportedClocks"]] == [9001, 405]
    assert (tree / "dev/nvidiactl").exists() and (tree / "dev/nvidia3").exists()
    # the API round-trips
    copy = render_one(tmp_path, "nvidia-l40s-4gpu", "c")
    st["gpus"][0]["power"]["limitMw"] = 200000
    write_nvml_state(str(copy), st)
    assert read_nvml_state(str(copy))["gpus"][0]["power"]["limitMw"] == 200000


def test_persistence_mode_override_reaches_nvml_state(tmp_path: Path) -> None:
    spec = load_spec("examples/sim/smoke.yaml")
    render_nodes(spec.nodes, str(tmp_path))
    st = read_nvml_state(str(tmp_path / "sxm-nopm-0"))
    assert {g["persistenceMode"] for g in st["gpus"]} == {"Disabled"}


# -- resume ------------------------------------------------------------------------------------------


def _smoke(tmp_path: Path) -> tuple[str, Path]:
    root = tmp_path / "root"
    return "examples/sim/smoke.yaml", root


def test_resume_touches_nothing_and_creates_missing_entries(cli, tmp_path: Path) -> None:
    spec, root = _smoke(tmp_path)
    assert cli("simulate", "render", spec, "--root", str(root)).exit_code == 0
    cap = root / "intel-0/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    cap.write_text("100000000\n")
    before = os.stat(cap)
    gov = root / "intel-0/sys/devices/system/cpu/cpufreq/policy7/scaling_governor"
    gov.unlink()
    hostname = root / "vm-0/etc/hostname"
    hostname.unlink()
    r = cli("simulate", "render", spec, "--root", str(root))
    assert r.exit_code == 0
    assert r.stdout == f"rendered 0 and resumed 3 node trees under {root}, 2 missing entries created\n"
    assert cap.read_text() == "100000000\n" and os.stat(cap).st_ino == before.st_ino
    assert read(gov) == "powersave" and mode(gov) == 0o644
    assert read(hostname) == "vm-0"
    r = cli("simulate", "render", spec, "--root", str(root))
    assert r.stdout == f"rendered 0 and resumed 3 node trees under {root}\n"


def test_resume_removes_leftover_ensure_dirs(tmp_path: Path) -> None:
    spec = load_spec("examples/sim/smoke.yaml")
    render_nodes(spec.nodes, str(tmp_path))
    left = tmp_path / "vm-0/state/.tmp/ensure-123"
    left.mkdir()
    render_nodes(spec.nodes, str(tmp_path))
    assert not left.exists()


def test_entry_of_the_wrong_kind_stops_naming_the_node(cli, tmp_path: Path) -> None:
    spec, root = _smoke(tmp_path)
    cli("simulate", "render", spec, "--root", str(root))
    limit = root / "intel-0/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0/" \
        "constraint_0_power_limit_uw"
    limit.unlink()
    limit.mkdir()  # a locked limit rendered as a directory, as an older simulator did
    r = cli("simulate", "render", spec, "--root", str(root))
    assert r.exit_code == 2
    assert r.stderr == (
        f"joulectl: error: {root / 'intel-0'}: node intel-0: /sys/devices/virtual/powercap/intel-rapl/"
        "intel-rapl:0/intel-rapl:0:0/constraint_0_power_limit_uw is a directory where the layout has a file; "
        f"remove {root / 'intel-0'} to render the node fresh\n")


def test_tree_of_another_profile_or_node_stops_naming_the_node(cli, tmp_path: Path, write_spec) -> None:
    spec, root = _smoke(tmp_path)
    cli("simulate", "render", spec, "--root", str(root))
    other = write_spec(spec_doc([{"name": "intel", "profile": "intel-xeon6-2s-tpmi"}]))
    r = cli("simulate", "render", other, "--root", str(root))
    assert r.exit_code == 2
    assert r.stderr == (
        f"joulectl: error: {root / 'intel-0'}: node intel-0: the tree was rendered for profile "
        "'intel-xeon-2s-rapl', the spec says 'intel-xeon6-2s-tpmi'; "
        f"remove {root / 'intel-0'} to render the node fresh (its counters restart at zero)\n")
    shutil.copytree(root / "vm-0", root / "vm-1", symlinks=True)
    two_vms = write_spec(spec_doc([{"name": "vm", "profile": "vm-no-powercap", "count": 2}]))
    r = cli("simulate", "render", two_vms, "--root", str(root))
    assert r.exit_code == 2 and "node vm-1: the tree was rendered for node 'vm-0', the spec says 'vm-1'" in r.stderr
    changed = write_spec(spec_doc([{"name": "vm", "profile": "vm-no-powercap",
                                    "overrides": {"cpu": {"coresPerSocket": 4}}}]))
    r = cli("simulate", "render", changed, "--root", str(root))
    assert r.exit_code == 2 and "node vm-0: the tree was rendered for profileHash" in r.stderr


def test_a_foreign_directory_is_not_resumed(cli, tmp_path: Path, write_spec) -> None:
    (tmp_path / "r" / "vm-0").mkdir(parents=True)
    spec = write_spec(spec_doc([{"name": "vm", "profile": "vm-no-powercap"}]))
    r = cli("simulate", "render", spec, "--root", str(tmp_path / "r"))
    assert r.exit_code == 2
    assert "node vm-0: the tree exists but has no state/node.json" in r.stderr


def test_parallel_render_matches_serial(tmp_path: Path) -> None:
    spec = parse_spec(spec_doc([{"name": "v", "profile": "vm-no-powercap", "count": 4}]), "x")
    render_nodes(spec.nodes, str(tmp_path / "a"), workers=1)
    stats = render_nodes(spec.nodes, str(tmp_path / "b"), workers=2)
    assert stats.rendered == ["v-0", "v-1", "v-2", "v-3"]
    for n in stats.rendered:
        assert read(tmp_path / "b" / n / "etc/hostname") == n
        a = sorted(str(p.relative_to(tmp_path / "a" / n)) for p in (tmp_path / "a" / n).rglob("*"))
        b = sorted(str(p.relative_to(tmp_path / "b" / n)) for p in (tmp_path / "b" / n).rglob("*"))
        assert a == b


# -- discover round trip -----------------------------------------------------------------------------


def _discover(cli, tree: Path) -> dict:
    r = cli("--root", str(tree), "discover", "-o", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_discover_on_xe_and_on_a_token_board(cli, tmp_path: Path) -> None:
    xe = render_one(tmp_path, "intel-flex-170-4gpu", "xe", {"gpus": {"intel": {"driver": "xe"}}})
    st = _discover(cli, xe)["status"]["gpu"]
    assert st["count"] == 4 and st["capRangePerGpu"]["maxWatts"] == 150
    tok = render_one(tmp_path, "nvidia-h100-sxm-8gpu", "tok", {"gpus": {"fieldSupport": {"power.min_limit": "[N/A]"}}})
    st = _discover(cli, tok)["status"]["gpu"]
    assert st["count"] == 8 and "minWatts" not in st["capRangePerGpu"]


def test_example_specs_validate(cli) -> None:
    for path in sorted(Path("examples/sim").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["kind"] == "ClusterSpec"
        r = cli("simulate", "validate", str(path))
        assert r.exit_code == 0, r.stderr


def test_root_that_is_a_file_is_an_input_error(cli, tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("x")
    r = cli("simulate", "render", "examples/sim/smoke.yaml", "--root", str(root))
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {root}: --root: is not a directory\n")


def test_every_attribute_is_its_own_file_only_symlinks_are_shared(tmp_path: Path) -> None:
    spec = parse_spec(spec_doc([{"name": "x", "profile": "intel-xeon-2s-rapl", "count": 3}]), "x")
    render_nodes(spec.nodes, str(tmp_path), workers=1)
    store = tmp_path / ".joulectl-shared" / spec.nodes[0].profile.profile_hash()
    assert (store / ".complete").exists()
    # read-only attributes too: one inode per node and per policy, never a hard link
    for rel in ("sys/devices/system/cpu/cpufreq/policy9/affected_cpus",
                "sys/devices/system/cpu/cpufreq/policy9/cpuinfo_max_freq",
                "sys/devices/system/cpu/cpu9/topology/core_id",
                "sys/devices/system/cpu/cpufreq/policy9/scaling_governor",
                "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"):
        assert len({os.stat(tmp_path / f"x-{i}" / rel).st_ino for i in range(3)}) == 3, rel
        assert os.stat(tmp_path / "x-0" / rel).st_nlink == 1, rel
    policies = {os.stat(tmp_path / "x-0" / f"sys/devices/system/cpu/cpufreq/policy{p}/cpuinfo_max_freq").st_ino
                for p in range(128)}
    assert len(policies) == 128
    # symlinks (which cannot be written) are shared through the store
    link = "sys/devices/system/cpu/cpu9/cpufreq"
    assert {os.lstat(tmp_path / f"x-{i}" / link).st_ino for i in range(3)} == {os.lstat(store / link).st_ino}
    assert os.path.realpath(tmp_path / "x-1" / link) == str((tmp_path / "x-1" / "sys/devices/system/cpu/cpufreq/"
                                                              "policy9").resolve())
    # the trees do not depend on the store, and a resume gives a missing symlink its own copy
    shutil.rmtree(tmp_path / ".joulectl-shared")
    (tmp_path / "x-2" / link).unlink()
    stats = render_nodes(spec.nodes, str(tmp_path))
    assert stats.created_entries == 1 and os.readlink(tmp_path / "x-2" / link) == "../cpufreq/policy9"


def test_status_ignores_the_shared_store(cli, tmp_path: Path, write_spec) -> None:
    spec = write_spec(spec_doc([{"name": "v", "profile": "vm-no-powercap", "count": 2}]))
    assert cli("simulate", "render", spec, "--root", str(tmp_path / "r")).exit_code == 0
    assert (tmp_path / "r" / ".joulectl-shared").is_dir()
    r = cli("simulate", "status", "--root", str(tmp_path / "r"), "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [n["node"] for n in json.loads(r.stdout)["nodes"]] == ["v-0", "v-1"]


@pytest.mark.parametrize("profile", ["amd-instinct-mi300x-8gpu", "intel-flex-170-4gpu", "nvidia-h100-sxm-8gpu"])
def test_no_file_is_shared(tmp_path: Path, profile: str) -> None:
    spec = parse_spec(spec_doc([{"name": "s", "profile": profile, "count": 2}]), "x")
    render_nodes(spec.nodes, str(tmp_path), workers=1)
    m = load_manifest(str(tmp_path / "s-0"))
    paths = [w["path"] for w in m["writable"]] + [c["path"] for c in m["counters"]]
    assert paths
    for rel in paths:
        assert os.stat(tmp_path / "s-0" / rel).st_ino != os.stat(tmp_path / "s-1" / rel).st_ino, rel
    for tree in (tmp_path / "s-0", tmp_path / "s-1"):
        for p in tree.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert os.lstat(p).st_nlink == 1, p


def test_resume_checks_the_root_and_every_changed_directory(tmp_path: Path, write_spec) -> None:
    """The signature holds the tree's root too: an entry removed from the root, or from a directory
    below, is created again; a root entry of the wrong kind stops; a missing or damaged signature
    file means every directory is listed; a symlinked tree is no tree."""
    spec = load_spec(write_spec(spec_doc([{"name": "vm", "profile": "vm-no-powercap"}])))
    root = tmp_path / "r"
    render_nodes(spec.nodes, str(root))
    node = root / "vm-0"
    sigs = json.loads((node / "state/layout-sig.json").read_text())
    assert sigs[""] == os.lstat(node).st_mtime_ns and "etc" in sigs and not {"state", "state/.tmp"} & set(sigs)
    shutil.rmtree(node / "etc")
    assert render_nodes(spec.nodes, str(root)).created_entries == 2  # etc/ and etc/hostname
    assert read(node / "etc/hostname") == "vm-0"
    (node / "etc/hostname").unlink()
    (node / "state/layout-sig.json").write_text("[")
    assert render_nodes(spec.nodes, str(root)).created_entries == 1
    assert render_nodes(spec.nodes, str(root)).created_entries == 0
    shutil.rmtree(node / "bin")
    (node / "bin").write_text("")
    with pytest.raises(RenderError, match="node vm-0: /bin is a file where the layout has a directory"):
        render_nodes(spec.nodes, str(root))
    (node / "bin").unlink()
    render_nodes(spec.nodes, str(root))
    # node.json is read again once it is not the file the signature names
    assert json.loads((node / "state/layout-sig.json").read_text())["state/node.json"][3:] == [
        "vm-0", "vm-no-powercap", spec.nodes[0].profile.profile_hash(), 2]
    meta = json.loads((node / "state/node.json").read_text())
    (node / "state/node.json").write_text(json.dumps({**meta, "node": "vm-9"}))
    with pytest.raises(RenderError, match="node vm-0: the tree was rendered for node 'vm-9', the spec says 'vm-0'"):
        render_nodes(spec.nodes, str(root))
    (node / "state/node.json").write_text(json.dumps(meta))
    render_nodes(spec.nodes, str(root))
    node.rename(root / "real")
    node.symlink_to("real")
    with pytest.raises(RenderError, match=r"node vm-0: .* exists and is not a directory"):
        render_nodes(spec.nodes, str(root))
