"""Confinement through the CLI: no input (pool names and prefixes, --device values, bus ids and
symlinks inside the tree, bus ids printed by nvidia-smi) makes joulectl read or write outside
--root, and vendor tools get their arguments as a list, never through a shell."""

from __future__ import annotations

import ast
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from reliability_support import assert_clean_exit, assert_input_error


def _snapshot(d: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(d):
        for name in files:
            p = Path(dirpath) / name
            out[str(p)] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("confine")
    (base / "spec.yaml").write_text(
        "apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: c}\nspec:\n  pools:\n"
        "  - {name: mi250, profile: amd-instinct-mi250x-4gpu, count: 1}\n"
        "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n"
    )
    assert run(["simulate", "render", str(base / "spec.yaml"), "--root", str(base / "tree")]) == 0
    return base


@pytest.fixture
def node(rendered: Path, tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        dst = tmp_path / "root" / name
        shutil.copytree(rendered / "tree" / name, dst, symlinks=True)
        return dst

    return copy


@pytest.mark.parametrize("field", ["name", "prefix"])
@pytest.mark.parametrize("value", ["../escape", "..", "/tmp/abs", "a/b", ".", "x\\y", "-rf", "a b"])
def test_pool_names_cannot_leave_the_render_root(tmp_path: Path, cli: Callable[..., Any], field: str,
                                                 value: str) -> None:
    pool: dict[str, Any] = {"name": "p", "profile": "intel-xeon-2s-rapl", "count": 1, field: value}
    spec = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "c"},
            "spec": {"pools": [pool]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "out").mkdir()
    before = sorted(os.listdir(tmp_path))
    r = cli("simulate", "render", str(tmp_path / "spec.yaml"), "--root", str(tmp_path / "out"))
    assert_clean_exit(r.exit_code, r.stderr, {0, 2})
    assert sorted(os.listdir(tmp_path)) == before  # nothing next to the root
    assert not Path("/tmp/abs").exists()
    if r.exit_code == 0:
        for entry in os.listdir(tmp_path / "out"):
            assert "/" not in entry and entry not in (".", "..")
    else:
        assert_input_error(r.exit_code, r.stderr, str(tmp_path / "spec.yaml"))


@pytest.mark.parametrize("selector", ["../../../etc/passwd", "/sys/bus/pci/devices/0000:c1:00.0", "*", "",
                                      "0000:c1:00.0/../..", "$(id)", "-1", "99"])
def test_device_selectors_are_matched_never_used_as_paths(node: Callable[[str], Path], cli: Callable[..., Any],
                                                          selector: str) -> None:
    root = node("mi250-0")
    before = _snapshot(root.parent)
    r = cli("--root", str(root), "cap", "--watts", "400", "--device", selector, "-o", "json")
    # A path ending in a bus id selects that device (the last two colons are read as a bus id):
    # lenient, but the selector is only ever compared, never opened.
    assert_clean_exit(r.exit_code, r.stderr, {0, 2, 3})
    changed = {p for p, data in _snapshot(root.parent).items() if before.get(p) != data}
    assert all(p.startswith(str(root) + "/") for p in changed)
    assert all(p.endswith(("/power1_cap", "/state.json", "/lock")) for p in changed), changed
    if r.exit_code != 0:
        assert not changed or all(p.endswith("/lock") for p in changed)


def _fake_amd_hwmon(where: Path) -> None:
    where.mkdir(parents=True)
    for name, value in {"name": "amdgpu", "power1_cap": "300000000", "power1_cap_max": "560000000",
                        "power1_cap_min": "0", "power1_cap_default": "560000000"}.items():
        (where / name).write_text(value + "\n")


def test_symlinks_in_the_tree_escaping_the_root_are_not_followed(node: Callable[[str], Path], tmp_path: Path,
                                                                 cli: Callable[..., Any]) -> None:
    """An hwmon directory, a PCI device and a whole class directory symlinked out of the root:
    discover ignores them (the devices inside the root are unchanged) and cap writes nothing
    outside; cap says so with exit 2 (issue 12, item 10) after capping the devices inside."""
    root = node("mi250-0")
    outside = tmp_path / "outside"
    _fake_amd_hwmon(outside / "hwmon" / "hwmon99")
    plain = cli("--root", str(root), "discover", "-o", "json")
    assert plain.exit_code == 0
    devices = sorted(os.listdir(root / "sys" / "bus" / "pci" / "devices"))
    first = root / "sys" / "bus" / "pci" / "devices" / devices[0]
    hwmon_dir = Path(os.path.realpath(first)) / "hwmon"
    (hwmon_dir / "hwmon99").symlink_to(outside / "hwmon" / "hwmon99")
    (root / "sys" / "bus" / "pci" / "devices" / "0000:ff:00.0").symlink_to(outside)
    before = _snapshot(outside)
    r = cli("--root", str(root), "discover", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {0})
    assert json.loads(r.stdout)["status"]["gpu"]["devices"] == json.loads(plain.stdout)["status"]["gpu"]["devices"]
    r = cli("--root", str(root), "cap", "--watts", "400", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {2})
    assert "/sys/bus/pci/devices/0000:ff:00.0/vendor: resolves outside the host root" in r.stderr
    assert {x["status"] for x in json.loads(r.stdout)["results"]} <= {"applied", "skipped"}
    assert _snapshot(outside) == before


NVIDIA_SMI_EVIL = """#!{python} -S
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "argv.log"), "a") as log:
    log.write(repr(args) + "\\n")
if "-x" in args:
    sys.stdout.write(open(os.path.join(here, "evil.xml")).read())
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-S", os.path.join(here, "nvidia-smi.real"), *args])
"""


@pytest.mark.parametrize("bus_id", ["../../../../../tmp/joulectl-evil", "00000000:18:00.0; touch /tmp/joulectl-evil",
                                    "$(touch /tmp/joulectl-evil)", "-pl", "/etc/passwd"])
def test_bus_ids_printed_by_nvidia_smi_stay_arguments(node: Callable[[str], Path], cli: Callable[..., Any],
                                                      bus_id: str) -> None:
    import sys

    root = node("h100-0")
    real = root / "bin" / "nvidia-smi"
    (root / "bin" / "nvidia-smi.real").write_bytes(real.read_bytes())
    (root / "bin" / "nvidia-smi.real").chmod(0o755)
    from joulectl.host import Host

    xml = Host(str(root)).run(["nvidia-smi", "-q", "-x"]).stdout
    first_id = xml.split('<gpu id="', 1)[1].split('"', 1)[0]
    (root / "bin" / "evil.xml").write_text(xml.replace(f'<gpu id="{first_id}"', f'<gpu id="{bus_id}"', 1))
    real.write_text(NVIDIA_SMI_EVIL.format(python=sys.executable))
    before = _snapshot(root / "sys")
    r = cli("--root", str(root), "discover", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {0})
    r = cli("--root", str(root), "cap", "--watts", "500", "-o", "json")
    assert_clean_exit(r.exit_code, r.stderr, {0, 3, 5})
    assert not Path("/tmp/joulectl-evil").exists()
    for line in (root / "bin" / "argv.log").read_text().splitlines():
        argv = ast.literal_eval(line)  # the fake tool logged its argv as a Python literal
        assert all(isinstance(a, str) for a in argv)
        for a in argv:  # the odd id is one whole argument (or a member of a comma list), never split
            assert bus_id not in a or a == bus_id or bus_id in a.split(","), argv
    changed = {p for p, data in _snapshot(root / "sys").items() if before.get(p) != data}
    assert all(p.startswith(str(root) + "/") for p in changed)
