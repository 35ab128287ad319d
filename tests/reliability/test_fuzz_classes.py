"""Fuzzing by input class: each generated input belongs to a class whose outcome is known before
the code runs, and the test asserts that outcome, not only "no traceback".

- valid documents parse, with the value the input implies (a ClusterSpec of pools of counts
  c1..ck is valid with c1+..+ck nodes; a twin or schedule at an integer pct p of an H100's 700 W
  plans 7·p W on every GPU);
- a document with one defect at a known field exits 2 with one line that names the file, the field
  path and the problem (SPEC §2);
- the Kubernetes readers return the parsed value for a well-formed input and raise ValueError
  with the reader's message for a malformed one.

The other fuzz files (test_fuzz_cli.py and friends) mutate at random and check the outcome's
shape; this one checks the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl import k8s
from joulectl.sim.profiles import builtin_profile_names

CLI = settings(max_examples=examples(25), deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SLOW = settings(max_examples=examples(10), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FAST = settings(max_examples=examples(300), deadline=None)

PROFILES = builtin_profile_names()
LABEL = st.from_regex(r"\A[a-z][a-z0-9]{0,6}\Z")


def _write(tmp_path_factory: pytest.TempPathFactory, name: str, text: str) -> Path:
    path = tmp_path_factory.mktemp("fuzz-class") / name
    path.write_text(text)
    return path


def _error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("joulectl: error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


# -- ClusterSpec -----------------------------------------------------------------------------------

pools = st.lists(st.tuples(LABEL, st.sampled_from(PROFILES), st.integers(1, 4)), min_size=1, max_size=4,
                 unique_by=lambda p: p[0])


def _spec(name: str, items: list[tuple[str, Any, Any]]) -> str:
    doc = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": name},
           "spec": {"pools": [{"name": n, "profile": p, "count": c} for n, p, c in items]}}
    return yaml.safe_dump(doc, sort_keys=False)


@CLI
@given(LABEL, pools)
def test_valid_cluster_specs_are_valid_with_their_node_count(cli: Callable[..., Any],
                                                             tmp_path_factory: pytest.TempPathFactory,
                                                             name: str, items: list[tuple[str, str, int]]) -> None:
    path = _write(tmp_path_factory, "spec.yaml", _spec(name, items))
    r = cli("simulate", "validate", str(path))
    assert r.exit_code == 0, r.stderr
    pools_text = ", ".join(f"{n}: {c} x {p}" for n, p, c in items)
    assert r.stdout.strip() == (f"{path}: ClusterSpec {name} is valid: {sum(c for _, _, c in items)} nodes "
                                f"({pools_text})")


#: (field, bad value, the problem as the error states it)
BAD_POOL_FIELDS = st.one_of(
    st.integers(-1000, -1).map(lambda v: ("count", v, f"must not be negative, found {v}")),
    st.from_regex(r"\A[a-z]{1,8}\Z").map(lambda v: ("count", v, f"must be an integer, found {v!r}")),
    st.integers(0, 99).map(lambda v: ("count", v + 0.5, f"must be an integer, found {v + 0.5}")),
    st.from_regex(r"\Azz[a-z0-9-]{0,10}\Z").map(lambda v: ("profile", v, f"unknown profile {v!r}")),
    st.from_regex(r"\A[A-Z][A-Za-z_]{0,6}\Z").map(
        lambda v: ("name", v, f"pool name {v!r} is not a valid DNS-1123 label")),
)


@CLI
@given(pools, st.data(), BAD_POOL_FIELDS)
def test_one_bad_pool_field_is_exit_2_naming_file_and_field(cli: Callable[..., Any],
                                                             tmp_path_factory: pytest.TempPathFactory,
                                                             items: list[tuple[str, str, int]], data: st.DataObject,
                                                             bad: tuple[str, Any, str]) -> None:
    field, value, problem = bad
    i = data.draw(st.integers(0, len(items) - 1))
    n, p, c = items[i]
    row: list[Any] = [n, p, c]
    row[("name", "profile", "count").index(field)] = value
    broken: list[tuple[str, Any, Any]] = [*items[:i], (row[0], row[1], row[2]), *items[i + 1:]]
    path = _write(tmp_path_factory, "spec.yaml", _spec("x", broken))
    r = cli("simulate", "validate", str(path))
    assert r.exit_code == 2, r.stdout
    line = _error(r.stderr)
    assert line.startswith(f"joulectl: error: {path}: spec.pools[{i}].{field}: {problem}"), line


@CLI
@given(st.sampled_from(["", "[]", "42", "just text", "- a\n- b\n", "{"]))
def test_a_cluster_spec_that_is_no_mapping_is_exit_2_naming_the_file(cli: Callable[..., Any],
                                                                      tmp_path_factory: pytest.TempPathFactory,
                                                                      text: str) -> None:
    path = _write(tmp_path_factory, "spec.yaml", text)
    r = cli("simulate", "validate", str(path))
    assert r.exit_code == 2
    assert _error(r.stderr).startswith(f"joulectl: error: {path}: "), r.stderr


# -- NodeTwin and eco schedule through cap --dry-run on an H100 node (200-700 W) -------------------


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from reliability_support import run_joulectl

    base = tmp_path_factory.mktemp("fuzz-class-h100")
    spec = base / "spec.yaml"
    spec.write_text(_spec("fz", [("h100", "nvidia-h100-sxm-8gpu", 1)]))
    assert run_joulectl("simulate", "render", str(spec), "--root", str(base / "tree")).returncode == 0
    proc = run_joulectl("plan", str(spec), "-o", "yaml")
    assert proc.returncode == 0, proc.stderr
    twin = next(d for d in yaml.safe_load_all(proc.stdout) if d and d.get("kind") == "NodeTwin")
    return {"root": base / "tree" / "h100-0", "twin": twin}


def _twin(h100: dict[str, Any], pct: Any) -> str:
    doc = dict(h100["twin"])
    doc["spec"] = {**doc["spec"], "gpu": {"powerCap": {"capPctOfMax": pct, "scope": "perGpu"}}}
    return yaml.safe_dump(doc, sort_keys=False)


def _gpu_targets(stdout: str) -> set[tuple[str, float]]:
    import json

    return {(r["status"], r["targetWatts"]) for r in json.loads(stdout)["results"] if r["kind"] == "gpu"}


@SLOW
@given(st.integers(29, 99))
def test_twin_pct_plans_seven_watts_per_percent(cli: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory,
                                                h100: dict[str, Any], pct: int) -> None:
    path = _write(tmp_path_factory, "twin.yaml", _twin(h100, pct))
    r = cli("--root", str(h100["root"]), "cap", "--from-twin", str(path), "--dry-run", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert _gpu_targets(r.stdout) == {("planned", 7.0 * pct)}


BAD_PCT = st.one_of(
    st.integers(-10**6, 0).map(lambda v: (v, f"must be in (0, 100], got {v}")),
    st.integers(101, 10**6).map(lambda v: (v, f"must be in (0, 100], got {v}")),
    st.from_regex(r"\A[a-z]{1,8}\Z").map(lambda v: (v, f"must be a number, got {v!r}")),
    st.booleans().map(lambda v: (v, f"must be a number, got {v!r}")),
)


@SLOW
@given(BAD_PCT)
def test_twin_bad_pct_is_exit_2_naming_the_field(cli: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory,
                                                 h100: dict[str, Any], bad: tuple[Any, str]) -> None:
    value, problem = bad
    assume(value not in ("yes", "no", "on", "off", "y", "n", "true", "false", "null", "nan", "inf"))
    path = _write(tmp_path_factory, "twin.yaml", _twin(h100, value))
    r = cli("--root", str(h100["root"]), "cap", "--from-twin", str(path), "--dry-run", "-o", "json")
    assert r.exit_code == 2, r.stdout
    assert _error(r.stderr) == f"joulectl: error: {path}: spec.gpu.powerCap.capPctOfMax: {problem}"


def _schedule(start: str = "00:00", end: str = "24:00", days: str = "daily", pct: Any = 60) -> str:
    return yaml.safe_dump({"timezone": "UTC", "windows": [
        {"name": "w", "days": [days], "start": start, "end": end, "cap": {"pct": pct}}],
        "default": {"cap": {"restore": True}}}, sort_keys=False)


@SLOW
@given(st.integers(29, 99))
def test_schedule_window_in_force_plans_its_pct(cli: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory,
                                                h100: dict[str, Any], pct: int) -> None:
    path = _write(tmp_path_factory, "schedule.yaml", _schedule(pct=pct))
    r = cli("--root", str(h100["root"]), "cap", "--schedule", str(path), "--at", "2026-12-01T23:00:00Z",
            "--dry-run", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert _gpu_targets(r.stdout) == {("planned", 7.0 * pct)}


BAD_TIME = st.one_of(
    st.tuples(st.integers(25, 99), st.integers(0, 59)),
    st.tuples(st.integers(0, 23), st.integers(60, 99)),
    st.tuples(st.just(24), st.integers(1, 59)),
).map(lambda hm: f"{hm[0]:02d}:{hm[1]:02d}")


@SLOW
@given(BAD_TIME, st.sampled_from(["start", "end"]))
def test_schedule_bad_time_is_exit_2_naming_the_field(cli: Callable[..., Any],
                                                      tmp_path_factory: pytest.TempPathFactory,
                                                      h100: dict[str, Any], time: str, field: str) -> None:
    path = _write(tmp_path_factory, "schedule.yaml", _schedule(**{field: time}))
    r = cli("--root", str(h100["root"]), "cap", "--schedule", str(path), "--at", "2026-12-01T23:00:00Z",
            "--dry-run", "-o", "json")
    assert r.exit_code == 2, r.stdout
    assert _error(r.stderr) == (f"joulectl: error: {path}: windows[0].{field}: "
                                f"must be a time \"HH:MM\" (00:00 to 24:00), got '{time}'")


@SLOW
@given(st.from_regex(r"\A(x|q|z)[a-z]{2,5}\Z"))
def test_schedule_unknown_day_is_exit_2_naming_the_field(cli: Callable[..., Any],
                                                         tmp_path_factory: pytest.TempPathFactory,
                                                         h100: dict[str, Any], day: str) -> None:
    path = _write(tmp_path_factory, "schedule.yaml", _schedule(days=day))
    r = cli("--root", str(h100["root"]), "cap", "--schedule", str(path), "--at", "2026-12-01T23:00:00Z",
            "--dry-run", "-o", "json")
    assert r.exit_code == 2, r.stdout
    assert _error(r.stderr).startswith(f"joulectl: error: {path}: windows[0].days[0]: unknown day {day!r}")


# -- the Kubernetes readers --------------------------------------------------------------------------

#: The quantity suffixes of k8s.io/apimachinery resource.Quantity, written out.
SUFFIX = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


@FAST
@given(st.integers(0, 10**6), st.sampled_from(sorted(SUFFIX)))
def test_quantity_of_an_integer_and_a_suffix(n: int, suffix: str) -> None:
    assert k8s.parse_quantity(f"{n}{suffix}") == pytest.approx(n * SUFFIX[suffix], rel=1e-12)


@FAST
@given(st.one_of(st.booleans(), st.from_regex(r"\A[a-zA-Z]{1,6}[0-9]?\Z"), st.just("1x"), st.just("--1")))
def test_not_a_quantity(value: Any) -> None:
    assume(value not in SUFFIX and not (isinstance(value, str) and value.lower() in ("inf", "nan", "infinity")))
    with pytest.raises(ValueError) as e:
        k8s.parse_quantity(value)
    assert str(e.value) == f"not a quantity: {value!r}"


@FAST
@given(st.sampled_from(["1e400", "-1e400", "9e999k"]) | st.sampled_from([float("inf"), float("-inf"), float("nan")]))
def test_not_a_finite_quantity(value: Any) -> None:
    with pytest.raises(ValueError) as e:
        k8s.parse_quantity(value)
    assert str(e.value) == f"not a finite quantity: {value!r}"


GPU_NAMES = ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe"]


@FAST
@given(st.dictionaries(st.sampled_from(GPU_NAMES), st.integers(0, 64), max_size=4),
       st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "ephemeral-storage"]), st.integers(0, 64)))
def test_gpu_resources_are_the_gpu_names_with_their_counts(gpus: dict[str, int], others: dict[str, int]) -> None:
    resources = {**{k: str(v) for k, v in others.items()}, **{k: str(v) for k, v in gpus.items()}}
    assert k8s.gpu_resources(resources) == {k: float(v) for k, v in gpus.items()}


@FAST
@given(st.integers(1, 64), st.none() | st.integers(1, 64))
def test_node_gpu_count_source_order(label_count: int, hardware_count: int | None) -> None:
    node = {"metadata": {"name": "n", "labels": {"joulie.io/hw.gpu-count": str(label_count)}}}
    hardware = None if hardware_count is None else {"status": {"gpu": {"count": hardware_count}}}
    expected = (label_count, "joulie.io/hw.gpu-count") if hardware_count is None else (hardware_count, "nodehardware")
    assert k8s.node_gpu_count(node, hardware) == expected


@FAST
@given(LABEL, st.integers(0, 50))
def test_a_deployment_is_one_template_with_its_replicas(name: str, replicas: int) -> None:
    doc = {"kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c"}]}}}}
    (pod,) = k8s.iter_pods(doc, "fuzz.yaml")
    assert (pod.replicas, pod.spec) == (replicas, {"containers": [{"name": "c"}]})


@FAST
@given(st.none() | st.integers() | st.text(max_size=8) | st.lists(st.integers(), max_size=2)
       | st.dictionaries(st.sampled_from(["metadata", "spec", "items"]), st.integers(), max_size=2))
def test_no_kind_is_not_a_kubernetes_object(doc: Any) -> None:
    with pytest.raises(ValueError) as e:
        list(k8s.iter_pods(doc, "fuzz.yaml"))
    assert str(e.value) == "not a Kubernetes object (no kind)"


@FAST
@given(st.integers().filter(bool) | st.text(min_size=1, max_size=8))
def test_a_list_whose_items_are_not_a_list(items: Any) -> None:
    with pytest.raises(ValueError) as e:
        list(k8s.iter_pods({"kind": "List", "items": items}, "fuzz.yaml"))
    assert str(e.value) == "List: items is not a list"
    # a *List kind with no list of items is an object of that kind, which carries no pod spec
    with pytest.raises(ValueError) as e:
        list(k8s.iter_pods({"kind": "PodList", "items": items}, "fuzz.yaml"))
    assert str(e.value) == "kind PodList carries no pod spec"


@FAST
@given(st.sampled_from([0, "", None, [], {}]))
def test_a_list_with_empty_items_has_no_pods(items: Any) -> None:
    assert list(k8s.iter_pods({"kind": "List", "items": items}, "fuzz.yaml")) == []


# -- nvidia-smi --------------------------------------------------------------------------------------

TOKENS = ["N/A", "[N/A]", "[Not Supported]", "Unknown Error", "[Unknown Error]", ""]


@FAST
@given(st.integers(0, 10**7), st.sampled_from([" W", " MHz", ""]))
def test_smi_value_with_two_decimals_and_a_unit(centi: int, unit: str) -> None:
    from joulectl.backends import nvidia

    assert nvidia.parse_value(f"{centi // 100}.{centi % 100:02d}{unit}") == centi / 100


@FAST
@given(st.sampled_from(TOKENS))
def test_smi_token_is_unknown(token: str) -> None:
    from joulectl.backends import nvidia

    assert nvidia.parse_value(token) is None


@st.composite
def smi_gpus(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    """(bus id, min W, max W, cap W) with min <= cap <= max, distinct bus ids."""
    buses = draw(st.lists(st.integers(1, 0xFE), min_size=1, max_size=8, unique=True))
    out = []
    for b in buses:
        lo = draw(st.integers(1, 600))
        hi = draw(st.integers(lo, 1200))
        out.append((f"00000000:{b:02X}:00.0", lo, hi, draw(st.integers(lo, hi))))
    return out


def _smi_doc(gpus: list[tuple[str, int, int, int]], token_field: str | None = None) -> str:
    body = []
    for bus, lo, hi, cap in gpus:
        values = {"current_power_limit": cap, "requested_power_limit": cap, "default_power_limit": hi,
                  "min_power_limit": lo, "max_power_limit": hi}
        readings = "".join(f"<{k}>{'N/A' if k == token_field else f'{v}.00 W'}</{k}>" for k, v in values.items())
        body.append(f'<gpu id="{bus}"><product_name>NVIDIA H100 80GB HBM3</product_name>'
                    f"<gpu_power_readings>{readings}</gpu_power_readings></gpu>")
    return '<?xml version="1.0" ?><nvidia_smi_log>' + "".join(body) + "</nvidia_smi_log>"


@FAST
@given(smi_gpus())
def test_smi_document_of_printed_limits_parses_to_them(gpus: list[tuple[str, int, int, int]]) -> None:
    from joulectl.backends import nvidia

    got = [(g.bus_id, g.cap_range.min_w, g.cap_range.max_w, g.current_cap_w, g.control.available)
           for g in nvidia.parse_smi_xml(_smi_doc(gpus))]
    assert got == [(f"0000:{bus[9:11].lower()}:00.0", lo, hi, cap, True) for bus, lo, hi, cap in gpus]


@FAST
@given(smi_gpus(), st.sampled_from(["requested_power_limit", "min_power_limit", "max_power_limit"]))
def test_smi_document_with_a_limit_token_blocks_every_gpu(gpus: list[tuple[str, int, int, int]], field: str) -> None:
    from joulectl.backends import nvidia

    reason = {"requested_power_limit": "the power limit is unknown (the driver reports N/A): no settable power limit"}
    want = reason.get(field, "the power limit range is unknown (the driver reports N/A): no settable power limit")
    assert [(g.control.available, g.control.reason) for g in nvidia.parse_smi_xml(_smi_doc(gpus, field))] == [
        (False, want)] * len(gpus)
