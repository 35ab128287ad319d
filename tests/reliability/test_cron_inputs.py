"""Issue 12, items 9, 11 and 12 through the real CLI: exit 2 (never 1) for bad input, duplicate keys
refused naming the key and both lines, emulated trees resumable by another install."""

from __future__ import annotations

from pathlib import Path

import pytest
from cron_support import jl, rendered
from reliability_support import assert_input_error, run_joulectl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory.mktemp("cron-inputs"))


# -- item 9: exit 2 where SPEC says 2 -------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_tool_timeout_that_is_not_a_finite_number_is_exit_2(cluster: Path, value: str) -> None:
    r = run_joulectl("--root", str(cluster / "h100-0"), "--tool-timeout", value, "discover")
    assert_input_error(r.returncode, r.stderr, "--tool-timeout", "must be a finite number of seconds")


def test_an_absurd_node_cpu_capacity_is_exit_2(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    text = (REPO / "examples/pods/cluster/nodes.yaml").read_text()
    assert "cpu: '192'" in text
    nodes.write_text(text.replace("cpu: '192'", "cpu: 1.0e+308", 1))
    r = run_joulectl("plan", "--nodes", str(nodes))
    assert_input_error(r.returncode, r.stderr, str(nodes), "status.capacity.cpu", "is not a CPU count")


@pytest.mark.parametrize(("where", "value"), [
    ("defaults: {baseLoad: {cpuUtil: X}}", ".nan"),
    ("facility: {ambientC: X}", ".nan"),
    ("facility: {amplitudeC: X}", ".inf"),
])
def test_a_non_finite_number_in_a_cluster_spec_is_exit_2(tmp_path: Path, where: str, value: str) -> None:
    f = tmp_path / "spec.yaml"
    f.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: x}\nspec:\n"
                 f"  {where.replace('X', value)}\n  pools:\n  - {{name: a, profile: vm-no-powercap, count: 1}}\n")
    field = where.split("{")[-1].split(":")[0]
    for args in (("simulate", "validate", str(f)), ("simulate", "run", str(f), "--root", str(tmp_path / "r"),
                                                    "--ticks", "1", "--fast")):
        r = run_joulectl(*args)
        assert_input_error(r.returncode, r.stderr, str(f), field, "must be a finite number")


def _deep_json(tmp_path: Path) -> Path:
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    return p


def test_json_nested_100000_deep_is_exit_2_in_every_presets_and_caps_flag(cluster: Path, tmp_path: Path) -> None:
    deep = _deep_json(tmp_path)
    nested = tmp_path / "nested.json"
    nested.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    node = str(cluster / "h100-0")
    for f in (deep, nested):
        r = run_joulectl("--root", node, "governor", "set", "sustained", "--governor-model-presets", str(f),
                         "--dry-run")
        assert_input_error(r.returncode, r.stderr, str(f), "nested deeper than")
        r = run_joulectl("--root", node, "cap", "--pct", "60", "--governor-model-presets", str(f), "--dry-run")
        assert_input_error(r.returncode, r.stderr, str(f), "nested deeper than")
        r = run_joulectl("plan", str(REPO / "examples/cluster.yaml"), "--model-caps", str(f))
        assert_input_error(r.returncode, r.stderr, str(f), "nested deeper than")
    env_deep = '{"a": ' * 5_000 + "1" + "}" * 5_000  # an environment string holds at most 128 KiB
    r = run_joulectl("--root", node, "governor", "set", "sustained", "--dry-run",
                     env={"GPU_GOVERNOR_MODEL_PRESETS_JSON": env_deep})
    assert_input_error(r.returncode, r.stderr, "$GPU_GOVERNOR_MODEL_PRESETS_JSON", "nested deeper than")


# -- item 11: duplicate keys --------------------------------------------------------------------


SCHEDULE_DUP = """\
timezone: UTC
windows:
  - name: night
    days: [daily]
    start: "00:00"
    end: "06:00"
    cap: {pct: 45}
    cap: {pct: 90}
"""

TWIN_DUP = """\
apiVersion: joulie.io/v1alpha1
kind: NodeTwin
metadata: {name: h100-0}
spec:
  nodeName: h100-0
  gpu:
    powerCap: {scope: perGpu, capPctOfMax: 60}
  gpu:
    powerCap: {scope: perGpu, capPctOfMax: 100}
"""


def test_a_duplicate_key_in_a_schedule_is_exit_2_naming_the_key_and_both_lines(cluster: Path,
                                                                              tmp_path: Path) -> None:
    f = tmp_path / "schedule.yaml"
    f.write_text(SCHEDULE_DUP)
    r = jl(cluster / "mi250x-0", "cap", "--schedule", str(f), "--dry-run")
    assert_input_error(r.returncode, r.stderr, str(f), "duplicate key 'cap' on lines 7 and 8")


def test_a_duplicate_key_in_a_twin_is_exit_2(cluster: Path, tmp_path: Path) -> None:
    f = tmp_path / "twin.yaml"
    f.write_text(TWIN_DUP)
    r = jl(cluster / "h100-0", "cap", "--from-twin", str(f), "--dry-run")
    assert_input_error(r.returncode, r.stderr, str(f), "duplicate key 'gpu' on lines 6 and 8")
    r = jl(cluster / "h100-0", "cap", "--from-twin", "-", "--dry-run")
    assert r.returncode == 2  # stdin is empty here: an error, never a silent last-wins


def test_a_duplicate_key_in_a_cluster_spec_is_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "spec.yaml"
    f.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: x}\n"
                 "spec:\n  pools:\n  - {name: a, profile: vm-no-powercap, count: 1, count: 3}\n")
    r = run_joulectl("simulate", "validate", str(f))
    assert_input_error(r.returncode, r.stderr, str(f), "duplicate key 'count' on lines 6 and 6")


def test_a_duplicate_key_in_json_presets_is_exit_2_with_both_lines(cluster: Path, tmp_path: Path) -> None:
    f = tmp_path / "presets.json"
    f.write_text('{\n  "NVIDIA H100 80GB HBM3": {"graphicsMHz": 1500},\n'
                 '  "NVIDIA H100 80GB HBM3": {"graphicsMHz": 900}\n}\n')
    r = jl(cluster / "h100-0", "governor", "set", "sustained", "--governor-model-presets", str(f), "--dry-run")
    assert_input_error(r.returncode, r.stderr, str(f), "duplicate key 'NVIDIA H100 80GB HBM3' on lines 2 and 3")


def test_yaml_merge_keys_still_override(tmp_path: Path) -> None:
    from joulectl.yamlio import load_one

    f = tmp_path / "merge.yaml"
    f.write_text("base: &b {pct: 45, x: 1}\nnight: {<<: *b, pct: 60}\n")
    assert load_one(str(f))["night"] == {"pct": 60, "x": 1}


# -- item 12: trees resumable by another install --------------------------------------------------


def test_the_profile_hash_holds_values_not_paths(tmp_path: Path) -> None:
    """The same board values at two paths (two venvs, or before and after an upgrade that moved
    the package) hash alike; different values do not."""
    import shutil

    from joulectl.sim import profiles

    prof = profiles.ProfileSet().get("nvidia-h100-sxm-8gpu")
    moved = tmp_path / "site-packages/joulectl/sim/boards"
    shutil.copytree(profiles.BOARDS_DIR, moved)
    board = prof.data["gpus"]["nvmlConfig"]
    assert board.startswith("/")
    there = prof.with_overrides({"gpus": {"nvmlConfig": str(moved / Path(board).name)}},
                                file=str(tmp_path / "spec.yaml"), field_path="spec.pools[0].overrides")
    assert there.profile_hash() == prof.profile_hash()
    other = prof.with_overrides({"gpus": {"count": 4}}, file=str(tmp_path / "spec.yaml"),
                                field_path="spec.pools[0].overrides")
    assert other.profile_hash() != prof.profile_hash()


def test_a_tree_rendered_by_one_install_runs_under_another(tmp_path: Path) -> None:
    """Render with a copy of the package at another path (another venv, or the install before an
    upgrade moved it), then run and cap with this one: the tree is resumed, not refused."""
    import shutil

    other = tmp_path / "other-venv/site-packages"
    shutil.copytree(REPO / "joulectl", other / "joulectl", ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: moved}\n"
                    "spec:\n  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n")
    root = tmp_path / "root"
    r = run_joulectl("simulate", "render", str(spec), "--root", str(root), env={"PYTHONPATH": str(other)},
                     timeout=300)
    assert r.returncode == 0, r.stderr
    r = run_joulectl("simulate", "run", str(spec), "--root", str(root), "--ticks", "2", "--fast", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "remove the tree" not in r.stderr
