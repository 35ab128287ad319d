"""Every input file of every command, fuzzed through the real CLI (in-process): valid documents
mutated at random places (subtrees replaced with odd values, keys deleted, types changed), plus
arbitrary text. Every example ends in a result or in an exit-2 error of one line that names the
file; never a traceback, an internal error (exit 1) or a hang."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import REPO, assert_clean_exit, examples

from joulectl.sim import profiles

FUZZ = settings(max_examples=examples(60), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
EXAMPLES = Path(REPO) / "examples"


def _odd(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(), st.integers(-(10**15), 10**15), floats, st.text(max_size=16),
        st.sampled_from(["", "-1", "0", "1e999", "nan", "-inf", "../../etc/passwd", "/etc/passwd", "a" * 300,
                         "25:61", "2026-13-45T99:99:99Z", "mon-sun", "xyz", "100%", "-0", "0x10", "∞", "\t"]),
        st.lists(st.integers(-5, 5), max_size=3),
        st.dictionaries(st.text(max_size=6), st.integers(-5, 5), max_size=3),
    )


ODD = _odd(st.floats())


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn, seed: Any, avoid: frozenset[str] = frozenset(),
            odd: st.SearchStrategy[Any] = ODD) -> Any:
    """``seed`` with one to four random mutations (none under a key in ``avoid``)."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from([p for p in _paths(doc) if not avoid.intersection(map(str, p))]))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "dup"]))
        if not path:
            if op == "replace":
                doc = draw(odd)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if op == "replace":
            parent[key] = draw(odd)
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(odd)
        elif op == "dup" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
    return doc


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _load_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small rendered cluster (CPU node, H100 node) and its NodeHardware/NodeTwin documents."""
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("fuzz-cluster")
    spec = base / "spec.yaml"
    spec.write_text(
        "apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: fuzz}\nspec:\n  pools:\n"
        "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n"
        "  - {name: amd, profile: amd-instinct-mi300x-8gpu, count: 1}\n"
    )
    assert run(["simulate", "render", str(spec), "--root", str(base / "tree")]) == 0
    return {"spec": spec, "h100": base / "tree" / "h100-0", "amd": base / "tree" / "amd-0", "base": base}


@pytest.fixture
def fuzz_cli(cli: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """Write ``text`` to a file, run the command with ``{file}`` replaced by its path, and check
    the outcome: an allowed exit code, no traceback, and an exit-2 line that names the file."""
    work = tmp_path_factory.mktemp("fuzz-input")

    def invoke(text: str, args: list[str], allowed: set[int], name: str = "input.yaml") -> Any:
        path = work / name
        path.write_text(text)
        argv = [a.replace("{file}", str(path)) for a in args]
        r = cli(*argv)
        assert_clean_exit(r.exit_code, r.stderr, allowed | {2})
        if r.exit_code == 2:
            line = next(ln for ln in r.stderr.splitlines() if ln.startswith("joulectl: error:"))
            assert str(path) in line or name in line, line
        return r

    return invoke


# -- ClusterSpec -----------------------------------------------------------------------------------

CLUSTER_SPECS = [_load_all(EXAMPLES / "sim" / "smoke.yaml")[0], _load_all(EXAMPLES / "cluster.yaml")[0]]


@FUZZ
@given(st.sampled_from(CLUSTER_SPECS).flatmap(mutated))
def test_cluster_spec(fuzz_cli: Callable[..., Any], doc: Any) -> None:
    fuzz_cli(_dump(doc), ["simulate", "validate", "{file}"], {0})


@FUZZ
@given(st.text(max_size=300))
def test_cluster_spec_text(fuzz_cli: Callable[..., Any], text: str) -> None:
    fuzz_cli(text, ["simulate", "validate", "{file}"], {0})


@FUZZ
@given(st.sampled_from(CLUSTER_SPECS).flatmap(mutated))
def test_cluster_spec_through_plan_and_render_nodes(fuzz_cli: Callable[..., Any], doc: Any) -> None:
    fuzz_cli(_dump(doc), ["plan", "{file}", "-o", "json"], {0})
    fuzz_cli(_dump(doc), ["simulate", "render-nodes", "{file}"], {0})


# -- NodeList, NodeTwin lists, pods, NodeHardware -----------------------------------------------------

NODES = _load_all(EXAMPLES / "pods" / "cluster" / "nodes.yaml")[0]
TWINS = _load_all(EXAMPLES / "pods" / "cluster" / "twins.yaml")[0]
PODS = [doc for f in sorted((EXAMPLES / "pods").glob("*.yaml")) for doc in _load_all(f)]
CLUSTER = ["--nodes", str(EXAMPLES / "pods" / "cluster" / "nodes.yaml"),
           "--twins", str(EXAMPLES / "pods" / "cluster" / "twins.yaml"), "--now", "2026-03-13T12:01:00Z"]


@FUZZ
@given(mutated(NODES))
def test_node_list_through_plan(fuzz_cli: Callable[..., Any], doc: Any) -> None:
    fuzz_cli(_dump(doc), ["plan", "--nodes", "{file}", "-o", "json"], {0})


@FUZZ
@given(mutated(NODES), st.sampled_from(PODS))
def test_node_list_through_schedule_check(fuzz_cli: Callable[..., Any], doc: Any, pod: Any) -> None:
    fuzz_cli(_dump(doc), ["schedule-check", str(EXAMPLES / "pods" / "training-h100.yaml"), "--nodes", "{file}",
                          "--twins", str(EXAMPLES / "pods" / "cluster" / "twins.yaml"),
                          "--now", "2026-03-13T12:01:00Z", "-o", "json"], {0, 6})


@FUZZ
@given(mutated(TWINS))
def test_twin_list_through_schedule_check(fuzz_cli: Callable[..., Any], doc: Any) -> None:
    fuzz_cli(_dump(doc), ["schedule-check", str(EXAMPLES / "pods" / "inference-deployment.yaml"),
                          "--nodes", str(EXAMPLES / "pods" / "cluster" / "nodes.yaml"), "--twins", "{file}",
                          "--now", "2026-03-13T12:01:00Z", "-o", "json"], {0, 6})


@FUZZ
@given(st.sampled_from(PODS).flatmap(mutated))
def test_pods_through_schedule_check(fuzz_cli: Callable[..., Any], doc: Any) -> None:
    fuzz_cli(_dump(doc), ["schedule-check", "{file}", *CLUSTER, "-o", "json"], {0, 6})


@FUZZ
@given(st.lists(st.sampled_from(PODS).flatmap(mutated), min_size=1, max_size=3))
def test_pods_through_plan_queue_aware(fuzz_cli: Callable[..., Any], docs: list[Any]) -> None:
    text = "".join("---\n" + _dump(d) for d in docs)
    fuzz_cli(text, ["plan", "--nodes", str(EXAMPLES / "pods" / "cluster" / "nodes.yaml"), "--pods", "{file}",
                    "--policy", "queue-aware", "-o", "json"], {0})


@pytest.fixture(scope="module")
def hardware_doc(rendered: dict[str, Path]) -> Any:
    from reliability_support import run_joulectl

    proc = run_joulectl("--root", str(rendered["h100"]), "discover", "-o", "yaml")
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


@FUZZ
@given(st.data())
def test_node_hardware_through_plan(fuzz_cli: Callable[..., Any], rendered: dict[str, Path], hardware_doc: Any,
                                    data: st.DataObject) -> None:
    doc = data.draw(mutated(hardware_doc))
    fuzz_cli(_dump(doc), ["plan", str(rendered["spec"]), "--hardware", "{file}", "-o", "json"], {0})


# -- NodeTwin, eco schedule, JSON maps through cap --dry-run -------------------------------------------


@pytest.fixture(scope="module")
def twin_doc(rendered: dict[str, Path]) -> Any:
    from reliability_support import run_joulectl

    proc = run_joulectl("plan", str(rendered["spec"]), "-o", "yaml", "--absolute-caps",
                        "--gpu-governor", "eco=efficient")
    assert proc.returncode == 0, proc.stderr
    return next(d for d in yaml.safe_load_all(proc.stdout) if d and d["metadata"]["name"] == "h100-0")


@FUZZ
@given(st.data())
def test_node_twin_through_cap_dry_run(fuzz_cli: Callable[..., Any], rendered: dict[str, Path], twin_doc: Any,
                                       data: st.DataObject) -> None:
    doc = data.draw(mutated(twin_doc))
    fuzz_cli(_dump(doc), ["--root", str(rendered["h100"]), "cap", "--from-twin", "{file}", "--any-node",
                          "--dry-run", "-o", "json"], {0, 3, 5})


SCHEDULE = _load_all(EXAMPLES / "eco-schedule.yaml")[0]


@FUZZ
@given(mutated(SCHEDULE), st.sampled_from(["2026-11-30T23:00:00Z", "2026-12-05T12:00:00+01:00", "2026-12-01T18:30:00"]))
def test_eco_schedule_through_cap_dry_run(fuzz_cli: Callable[..., Any], rendered: dict[str, Path], doc: Any,
                                          at: str) -> None:
    fuzz_cli(_dump(doc), ["--root", str(rendered["amd"]), "cap", "--schedule", "{file}", "--at", at,
                          "--dry-run", "-o", "json"], {0, 3, 5})


MODEL_CAPS = {"NVIDIA H100 80GB HBM3": {"minCapWatts": 200, "maxCapWatts": 700}, "NVIDIA L40S": {"maxCapWatts": 300}}
MODEL_PRESETS = {"NVIDIA H100 80GB HBM3": {"graphicsClockMHz": 1500}, "NVIDIA-L40S": {"graphicsClockMHz": 1800}}


@FUZZ
@given(mutated(MODEL_CAPS))
def test_model_caps_map_through_plan(fuzz_cli: Callable[..., Any], rendered: dict[str, Path], doc: Any) -> None:
    fuzz_cli(json.dumps(doc), ["plan", str(rendered["spec"]), "--model-caps", "{file}", "-o", "json"], {0},
             name="caps.json")


@FUZZ
@given(mutated(MODEL_PRESETS))
def test_model_presets_map_through_governor_and_plan(fuzz_cli: Callable[..., Any], rendered: dict[str, Path],
                                                     doc: Any) -> None:
    fuzz_cli(json.dumps(doc), ["--root", str(rendered["h100"]), "governor", "set", "sustained",
                               "--governor-model-presets", "{file}", "--dry-run", "-o", "json"], {0, 3, 4, 5},
             name="presets.json")
    fuzz_cli(json.dumps(doc), ["plan", str(rendered["spec"]), "--governor-model-presets", "{file}",
                               "--gpu-governor", "eco=sustained", "-o", "json"], {0}, name="presets.json")


# -- mock-NVML YAML (a board file named by a local profile) -----------------------------------------------

BOARD = _load_all(Path(REPO) / "joulectl" / "sim" / "boards" / "l40s.yaml")[0]


@pytest.fixture(scope="module")
def nvml_profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("profiles")
    profile = _load_all(Path(REPO) / "joulectl" / "sim" / "profiles" / "nvidia-l40s-4gpu.yaml")[0]
    profile["name"] = "fuzz-nvml"
    profile["gpus"]["nvmlConfig"] = "board.yaml"
    (d / "fuzz-nvml.yaml").write_text(_dump(profile))
    (d / "spec.yaml").write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: n}\n"
                                 "spec:\n  pools:\n  - {name: nv, profile: fuzz-nvml, count: 1}\n")
    return d


@FUZZ
@given(mutated(BOARD))
def test_mock_nvml_board(fuzz_cli: Callable[..., Any], nvml_profile_dir: Path, doc: Any) -> None:
    (nvml_profile_dir / "board.yaml").write_text(_dump(doc))
    profiles._board_doc.cache_clear()  # boards are cached per path within a process
    fuzz_cli(_dump(doc), ["simulate", "validate", str(nvml_profile_dir / "spec.yaml"),
                          "--profiles-dir", str(nvml_profile_dir)], {0}, name="board.yaml")


def test_the_seeds_are_valid(fuzz_cli: Callable[..., Any], rendered: dict[str, Path], twin_doc: Any,
                             nvml_profile_dir: Path) -> None:
    """The unmutated seeds pass, so the fuzzers start from documents the commands accept."""
    for seed in CLUSTER_SPECS:
        assert fuzz_cli(_dump(seed), ["simulate", "validate", "{file}"], {0}).exit_code == 0
    assert fuzz_cli(_dump(NODES), ["plan", "--nodes", "{file}", "-o", "json"], {0}).exit_code == 0
    assert fuzz_cli(_dump(twin_doc), ["--root", str(rendered["h100"]), "cap", "--from-twin", "{file}",
                                      "--any-node", "--dry-run", "-o", "json"], {0}).exit_code == 0
    (nvml_profile_dir / "board.yaml").write_text(_dump(BOARD))
    profiles._board_doc.cache_clear()
    assert fuzz_cli(_dump(BOARD), ["simulate", "validate", str(nvml_profile_dir / "spec.yaml"),
                                   "--profiles-dir", str(nvml_profile_dir)], {0}).exit_code == 0
