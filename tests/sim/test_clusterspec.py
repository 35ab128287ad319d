"""ClusterSpec parsing: expansion as the seed describes, and one-line errors (exit 2) for bad specs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from joulectl.sim.clusterspec import load_spec
from tests.sim.conftest import spec_doc

SMOKE = "examples/sim/smoke.yaml"


def test_smoke_spec_expands_as_the_seed_says() -> None:
    spec = load_spec(SMOKE)
    assert spec.name == "smoke"
    assert [n.name for n in spec.nodes] == ["intel-0", "sxm-nopm-0", "vm-0"]
    intel, sxm, vm = spec.nodes
    assert intel.labels["joulie.io/managed"] == "true"
    assert intel.labels["joulie.io/rack"] == "rack-1"
    assert intel.labels["joulie.io/cooling-zone"] == "zone-a"
    assert intel.labels["sim.joulie.io/cluster"] == "smoke"
    assert intel.labels["sim.joulie.io/pool"] == "intel"
    assert intel.annotations["sim.joulie.io/profile"] == "intel-xeon-2s-rapl"
    assert sxm.cooling_zone == "zone-b" and spec.facility.cooling_zones == {"zone-a": 0.0, "zone-b": 3.0}
    assert sxm.profile.gpus["persistenceMode"] == "disabled"
    assert sxm.overrides == {"gpus": {"persistenceMode": "disabled"}}
    assert vm.rack is None and "joulie.io/rack" not in vm.labels
    assert vm.base_load["cpuUtil"] == 1.0 and vm.base_load["memoryIntensity"] == 0.2
    assert all(n.kwok for n in spec.nodes)


def test_prefix_start_index_labels_and_base_load_override(write_spec: Callable[..., str]) -> None:
    path = write_spec(spec_doc(
        [{"name": "gpu", "profile": "nvidia-l40s-4gpu", "count": 2, "prefix": "l40s", "startIndex": 5,
          "labels": {"team": "ml", "joulie.io/managed": "false"}, "baseLoad": {"gpuUtil": 0.5}, "kwok": False}],
        defaults={"labels": {"joulie.io/managed": "true", "env": "dev"},
                  "baseLoad": {"cpuUtil": 0.3, "gpuUtil": 0.9, "cpuClass": "cpu.memory_bound"}},
    ))
    nodes = load_spec(path).nodes
    assert [n.name for n in nodes] == ["l40s-5", "l40s-6"]
    n = nodes[0]
    # profile labels, then defaults, then the pool's
    assert n.labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert n.labels["env"] == "dev" and n.labels["team"] == "ml" and n.labels["joulie.io/managed"] == "false"
    assert n.base_load["cpuUtil"] == 0.3 and n.base_load["gpuUtil"] == 0.5
    assert n.base_load["cpuClass"] == "cpu.memory_bound"
    assert not n.kwok


def test_pool_overrides_take_a_board_file_relative_to_the_spec(write_spec: Callable[..., str], tmp_path) -> None:
    import shutil

    from joulectl.sim.profiles import BOARDS_DIR

    (tmp_path / "boards").mkdir()
    shutil.copy(f"{BOARDS_DIR}/l40s.yaml", tmp_path / "boards" / "mine.yaml")
    path = write_spec(spec_doc([{"name": "h", "profile": "nvidia-h100-sxm-8gpu",
                                 "overrides": {"gpus": {"nvmlConfig": "boards/mine.yaml", "count": 2}}}]))
    prof = load_spec(path).nodes[0].profile
    assert prof.gpu_count == 2
    assert prof.gpus["model"] == "NVIDIA L40S" and prof.gpus["architecture"] == "ada"
    assert [b["name"] for b in prof.boards] == ["NVIDIA L40S", "NVIDIA L40S"]


BAD: list[tuple[str, Any, str]] = [
    ("missing-profile", spec_doc([{"name": "a", "count": 1}]), "spec.pools[0].profile: is required"),
    ("unknown-profile", spec_doc([{"name": "a", "profile": "nope"}]),
     "spec.pools[0].profile: unknown profile 'nope' (known: amd-epyc-2s-energy-only, amd-instinct-mi250x-4gpu, "
     "amd-instinct-mi300x-8gpu, amd-radeon-pro-w7900, intel-flex-170-4gpu, intel-xeon-2s-rapl, intel-xeon6-2s-tpmi, "
     "nvidia-h100-sxm-8gpu, nvidia-l40s-4gpu, vm-no-powercap)"),
    ("duplicate-names", spec_doc([{"name": "a", "profile": "vm-no-powercap", "count": 2},
                                  {"name": "b", "profile": "vm-no-powercap", "prefix": "a", "startIndex": 1}]),
     "spec.pools[1].count: duplicate node name 'a-1' (also in spec.pools[0])"),
    ("negative-count", spec_doc([{"name": "a", "profile": "vm-no-powercap"},
                                 {"name": "b", "profile": "vm-no-powercap", "count": -1}]),
     "spec.pools[1].count: must not be negative, found -1"),
    ("unknown-override-key", spec_doc([{"name": "a", "profile": "nvidia-h100-sxm-8gpu",
                                        "overrides": {"gpus": {"persistenceMod": "disabled"}}}]),
     "spec.pools[0].overrides.gpus.persistenceMod: unknown key 'persistenceMod'"),
    ("unknown-override-section", spec_doc([{"name": "a", "profile": "vm-no-powercap",
                                            "overrides": {"physics": {}}}]),
     "spec.pools[0].overrides.physics: unknown key 'physics' (allowed: cpu, gpus, labels, node)"),
    ("escaping-name", spec_doc([{"name": "a", "profile": "vm-no-powercap", "prefix": "../x"}]),
     "spec.pools[0].prefix: node name '../x-0' is not a valid DNS-1123 subdomain"),
    ("slash-in-name", spec_doc([{"name": "a", "profile": "vm-no-powercap", "prefix": "x/y"}]),
     "spec.pools[0].prefix: node name 'x/y-0' is not a valid DNS-1123 subdomain"),
    ("uppercase-pool", spec_doc([{"name": "A", "profile": "vm-no-powercap"}]),
     "spec.pools[0].name: pool name 'A' is not a valid DNS-1123 label"),
    ("unknown-zone", spec_doc([{"name": "a", "profile": "vm-no-powercap", "coolingZone": "z9"}],
                              facility={"coolingZones": [{"name": "z1"}]}),
     "spec.pools[0].coolingZone: unknown cooling zone 'z9' (known: z1)"),
    ("bad-base-load", spec_doc([{"name": "a", "profile": "vm-no-powercap", "baseLoad": {"cpuUtil": 1.5}}]),
     "spec.pools[0].baseLoad.cpuUtil: must be at most 1, found 1.5"),
    ("huge-base-load", spec_doc([{"name": "a", "profile": "vm-no-powercap", "baseLoad": {"cpuUtil": 1000000}}]),
     "spec.pools[0].baseLoad.cpuUtil: must be at most 1, found 1000000"),  # as written, not :g's 1e+06
    ("unknown-pool-key", spec_doc([{"name": "a", "profile": "vm-no-powercap", "replicas": 2}]),
     "spec.pools[0].replicas: unknown key 'replicas'"),
    ("no-pools", spec_doc([]), "spec.pools: at least one pool is required"),
    ("bad-kind", {**spec_doc([{"name": "a", "profile": "vm-no-powercap"}]), "kind": "Cluster"},
     "kind: must be ClusterSpec, found 'Cluster'"),
    ("bad-api", {**spec_doc([{"name": "a", "profile": "vm-no-powercap"}]), "apiVersion": "v1"},
     "apiVersion: must be sim.joulie.io/v1alpha1, found 'v1'"),
    ("mig-on-l40s", spec_doc([{"name": "a", "profile": "nvidia-l40s-4gpu",
                               "overrides": {"gpus": {"exposure": "mig-single"}}}]),
     "gpus.exposure: exposure mig-single needs a MIG-capable GPU"),
    ("bad-intel-driver", spec_doc([{"name": "a", "profile": "intel-flex-170-4gpu",
                                    "overrides": {"gpus": {"intel": {"driver": "i965"}}}}]),
     "gpus.intel.driver: unknown Intel driver 'i965' (i915, xe)"),
    ("bad-label", spec_doc([{"name": "a", "profile": "vm-no-powercap", "labels": {"team": "a b"}}]),
     "spec.pools[0].labels.team: label value 'a b' is not a valid label value"),
]


@pytest.mark.parametrize(("case", "doc", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_spec_exits_2_with_one_line(cli, write_spec: Callable[..., str], case: str, doc: Any,
                                            message: str) -> None:
    path = write_spec(doc)
    r = cli("simulate", "validate", path)
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"joulectl: error: {path}: ")
    assert message in lines[0]


def test_every_spec_command_reports_the_same_error(cli, write_spec: Callable[..., str], tmp_path) -> None:
    path = write_spec(spec_doc([{"name": "a", "profile": "vm-no-powercap", "count": -3}]))
    want = f"joulectl: error: {path}: spec.pools[0].count: must not be negative, found -3\n"
    for args in (("render", path, "--root", str(tmp_path / "r")), ("render-nodes", path)):
        r = cli("simulate", *args)
        assert (r.exit_code, r.stderr) == (2, want)
    assert not (tmp_path / "r").exists()


def test_missing_spec_file_and_bad_yaml(cli, tmp_path, write_spec: Callable[..., str]) -> None:
    r = cli("simulate", "validate", str(tmp_path / "none.yaml"))
    assert (r.exit_code, r.stderr) == (2, f"joulectl: error: {tmp_path / 'none.yaml'}: cluster spec not found\n")
    bad = write_spec("spec: [unclosed\n")
    r = cli("simulate", "validate", bad)
    assert r.exit_code == 2 and r.stderr.startswith(f"joulectl: error: {bad}: invalid YAML: line")


def test_validate_prints_the_expansion(cli) -> None:
    r = cli("simulate", "validate", SMOKE)
    assert r.exit_code == 0
    assert r.stdout == (f"{SMOKE}: ClusterSpec smoke is valid: 3 nodes (intel: 1 x intel-xeon-2s-rapl, "
                        "sxm-nopm: 1 x nvidia-h100-sxm-8gpu, vm: 1 x vm-no-powercap)\n")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"cpu": {"coresPerSocket": 100000}}, "cpu.coresPerSocket: must be between 1 and 1024, found 100000"),
    ({"cpu": {"threadsPerCore": 0}}, "cpu.threadsPerCore: must be between 1 and 8, found 0"),
    ({"gpus": {"count": 0}}, "gpus.count: must be at least 1, found 0"),
    ({"gpus": {"count": 9}}, "gpus.count: count 9 exceeds the 8 devices of the board file"),
    ({"gpus": {"count": "8"}}, "spec.pools[0].overrides.gpus.count: must be an integer, found '8'"),
])
def test_override_values_are_bounded(cli, write_spec: Callable[..., str], overrides: dict[str, Any],
                                     message: str) -> None:
    path = write_spec(spec_doc([{"name": "a", "profile": "nvidia-h100-sxm-8gpu", "overrides": overrides}]))
    r = cli("simulate", "validate", path)
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1


LONG_PREFIX = ("b" * 62 + ".") * 3 + "b" * 50 + "." + "c" * 11  # 251 characters


@pytest.mark.parametrize(("pool", "message"), [
    # 61 + "-9" is 63 characters, a DNS label's most: "-10" is the first node past it
    ({"prefix": "a" * 61, "startIndex": 8, "count": 5},
     f"spec.pools[0].prefix: node name '{'a' * 61}-10' is not a valid DNS-1123 subdomain"),
    # 251 + "-9" is 253 characters, a name's most
    ({"prefix": LONG_PREFIX, "startIndex": 9, "count": 2},
     f"spec.pools[0].prefix: node name '{LONG_PREFIX}-10' must be 1 to 253 characters"),
    ({"prefix": "-x", "count": 3}, "spec.pools[0].prefix: node name '-x-0' is not a valid DNS-1123 subdomain"),
])
def test_a_node_name_that_outgrows_a_limit_is_named_by_the_first_bad_node(pool: dict[str, Any], message: str) -> None:
    """Node names are checked at a pool's first and last index (they differ only in the digits);
    when one fails the error still names the first bad node."""
    from joulectl.errors import InputError
    from joulectl.sim.clusterspec import parse_spec

    with pytest.raises(InputError) as err:
        parse_spec(spec_doc([{"name": "a", "profile": "vm-no-powercap", **pool}]), "s.yaml")
    assert str(err.value).startswith(f"s.yaml: {message}")
    names = [n.name for n in parse_spec(spec_doc([{"name": "a", "profile": "vm-no-powercap",
                                                   "prefix": "a" * 61, "startIndex": 7, "count": 3}]), "s").nodes]
    assert names == [f"{'a' * 61}-7", f"{'a' * 61}-8", f"{'a' * 61}-9"]
