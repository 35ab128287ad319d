"""Builtin hardware profiles: every value sourced, extends, boards, local profiles, `simulate profiles`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from joulectl.errors import InputError
from joulectl.sim.profiles import BUILTIN_DIR, ProfileSet, builtin_profile_names, leaf_paths, source_of

EXPECTED = {
    "intel-xeon-2s-rapl", "intel-xeon6-2s-tpmi", "amd-epyc-2s-energy-only", "vm-no-powercap",
    "nvidia-h100-sxm-8gpu", "nvidia-l40s-4gpu", "amd-instinct-mi300x-8gpu", "amd-instinct-mi250x-4gpu",
    "amd-radeon-pro-w7900", "intel-flex-170-4gpu",
}


def test_the_ten_builtin_profiles_exist() -> None:
    assert set(builtin_profile_names()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_value_of_a_profile_file_names_its_source(name: str) -> None:
    doc = yaml.safe_load(Path(BUILTIN_DIR, f"{name}.yaml").read_text())
    sources = doc.get("sources") or {}
    body = {k: v for k, v in doc.items() if k not in ("sources", "apiVersion", "kind", "extends")}
    missing = [p for p in leaf_paths(body) if source_of(sources, p) is None]
    assert missing == []
    assert all(isinstance(s, str) and s.strip() for s in sources.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_profiles_extend_a_cpu_host_profile(name: str) -> None:
    prof = ProfileSet().get(name)
    if prof.gpu_count:
        assert len(prof.chain) == 2
        host = ProfileSet().get(prof.chain[1])
        assert host.gpu_count == 0
        assert prof.cpu["model"] == host.cpu["model"]
    else:
        assert prof.cpu["sockets"] >= 1


def test_limit_bits_defaults_and_tpmi() -> None:
    ps = ProfileSet()
    tpmi = ps.get("intel-xeon6-2s-tpmi").cpu["powercap"]["zones"][0]["constraints"]
    assert {c["limitBits"] for c in tpmi} == {18}
    rapl = ps.get("intel-xeon-2s-rapl").cpu["powercap"]["zones"]
    psys = next(z for z in rapl if z["name"] == "psys")
    assert {c["limitBits"] for c in psys["constraints"]} == {17}


def test_nvidia_boards_merge_device_defaults_into_devices() -> None:
    prof = ProfileSet().get("nvidia-h100-sxm-8gpu")
    assert len(prof.boards) == 8
    b3 = prof.boards[3]
    assert b3["name"] == "NVIDIA H100 80GB HBM3"  # from device_defaults
    assert b3["pci"]["bus_id"] == "0000:5D:00.0"  # from devices[3]
    assert b3["pci"]["device_id"] == 0x233010DE  # defaults merged field by field into pci
    assert b3["power"]["max_limit_mw"] == 700000
    assert prof.gpus["busIds"][3] == "0000:5d:00.0"
    assert prof.gpus["uuids"][3].startswith("GPU-")


def _local_board(tmp_path: Path) -> Path:
    board = {
        "version": "1.0",
        "system": {"driver_version": "550.163.01", "cuda_version": "12.4"},
        "device_defaults": {
            "name": "NVIDIA A100-SXM4-40GB", "architecture": "ampere",
            "power": {"default_limit_mw": 400000, "min_limit_mw": 100000, "max_limit_mw": 400000},
            "clocks_throttle_reasons": {"gpu_idle": True, "sw_power_cap": False},
            "thermal": {"temperature_gpu_c": 33, "shutdown_threshold_c": 92},
        },
        "devices": [
            {"index": 0, "uuid": "GPU-a0", "pci": {"bus_id": "0000:07:00.0"}, "thermal": {"temperature_gpu_c": 35}},
            {"index": 1, "uuid": "GPU-a1", "pci": {"bus_id": "0000:0F:00.0"},
             "clocks_throttle_reasons": {"counters": {"sw_power_cap_us": 5}}},
        ],
    }
    path = tmp_path / "boards" / "a100.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(board))
    return path


def test_device_override_merges_field_by_field_but_replaces_throttle_reasons_wholesale(tmp_path: Path) -> None:
    _local_board(tmp_path)
    local = tmp_path / "profiles"
    local.mkdir()
    (local / "a100-2gpu.yaml").write_text(yaml.safe_dump({
        "name": "a100-2gpu", "extends": "intel-xeon-2s-rapl", "sources": {"gpus": "test"},
        "gpus": {"vendor": "nvidia", "nvmlConfig": "../boards/a100.yaml"},
    }))
    prof = ProfileSet(str(local)).get("a100-2gpu")
    assert not prof.builtin
    b0, b1 = prof.boards
    assert b0["thermal"] == {"temperature_gpu_c": 35, "shutdown_threshold_c": 92}
    assert b1["clocks_throttle_reasons"] == {"counters": {"sw_power_cap_us": 5}}
    assert b0["clocks_throttle_reasons"] == {"gpu_idle": True, "sw_power_cap": False}
    assert prof.gpus["count"] == 2 and prof.gpus["architecture"] == "ampere"


def test_profiles_dir_from_the_environment_adds_local_profiles(cli, tmp_path: Path, monkeypatch) -> None:
    local = tmp_path / "p"
    local.mkdir()
    (local / "tiny-vm.yaml").write_text(yaml.safe_dump({
        "name": "tiny-vm", "extends": "vm-no-powercap", "sources": {"cpu": "test"},
        "cpu": {"coresPerSocket": 2},
    }))
    monkeypatch.setenv("SIM_PROFILES_DIR", str(local))
    r = cli("simulate", "profiles", "-o", "json")
    assert r.exit_code == 0
    rows = {p["name"]: p for p in json.loads(r.stdout)["items"]}
    assert rows["tiny-vm"]["cpu"]["threads"] == 2
    assert rows["tiny-vm"]["builtin"] is False
    assert set(rows) == EXPECTED | {"tiny-vm"}


def test_simulate_profiles_lists_sources(cli) -> None:
    r = cli("simulate", "profiles", "-o", "yaml")
    assert r.exit_code == 0
    doc = yaml.safe_load(r.stdout)
    assert doc["kind"] == "HardwareProfileList"
    w7900 = next(p for p in doc["items"] if p["name"] == "amd-radeon-pro-w7900")
    assert "241" in w7900["sources"]["gpus.pinnedCapW"]
    assert w7900["extends"] == "intel-xeon-2s-rapl"
    table = cli("simulate", "profiles")
    assert table.exit_code == 0 and "nvidia-l40s-4gpu" in table.stdout


def test_unknown_key_in_a_local_profile_is_refused(cli, tmp_path: Path) -> None:
    local = tmp_path / "p"
    local.mkdir()
    (local / "bad.yaml").write_text(yaml.safe_dump({"name": "bad", "extends": "vm-no-powercap",
                                                    "cpu": {"cpufreq": {"govrnor": "x"}}}))
    r = cli("simulate", "profiles", "--profiles-dir", str(local))
    assert r.exit_code == 2
    assert r.stderr == (f"joulectl: error: {local / 'bad.yaml'}: profile.cpu.cpufreq.govrnor: unknown key "
                        "'govrnor' (allowed: baseKHz, driver, epp, eppAvailable, governor, governors, hwp, maxKHz, "
                        "minKHz, transitionLatencyNs, turbo, turboMaxKHz)\n")


def test_missing_profiles_dir_is_an_input_error() -> None:
    with pytest.raises(InputError, match="profiles directory not found"):
        ProfileSet("/nonexistent/profiles")


def test_extends_unknown_profile(tmp_path: Path) -> None:
    (tmp_path / "orphan.yaml").write_text(yaml.safe_dump({"name": "orphan", "extends": "nope"}))
    with pytest.raises(InputError, match="extends unknown profile 'nope'"):
        ProfileSet(str(tmp_path)).get("orphan")


def _refusal_of_local_board(tmp_path: Path) -> InputError:
    """The error of loading a profile whose ``gpus.nvmlConfig`` is ``_local_board``'s file."""
    local = tmp_path / "profiles"
    local.mkdir()
    (local / "a100-2gpu.yaml").write_text(yaml.safe_dump({
        "name": "a100-2gpu", "extends": "intel-xeon-2s-rapl", "sources": {"gpus": "test"},
        "gpus": {"vendor": "nvidia", "nvmlConfig": "../boards/a100.yaml"},
    }))
    from joulectl.sim import profiles

    profiles._board_doc.cache_clear()
    with pytest.raises(InputError) as ei:
        ProfileSet(str(local)).get("a100-2gpu")
    return ei.value


@pytest.mark.parametrize("devices", [None, []])
def test_a_board_without_devices_is_named(tmp_path: Path, devices: object) -> None:
    """``devices: null`` or ``[]`` is the board file's error, not the profile's missing
    ``gpus.nvmlConfig`` (found by tests/reliability/test_fuzz_cli.py::test_mock_nvml_board)."""
    path = _local_board(tmp_path)
    board = yaml.safe_load(path.read_text())
    board["devices"] = devices
    path.write_text(yaml.safe_dump(board))
    err = _refusal_of_local_board(tmp_path)
    assert (err.file, err.field, err.problem) == (
        str(path), "devices", "a board file lists at least one device")


@pytest.mark.parametrize(
    ("where", "value", "field", "problem"),
    [
        ("device", {"minor_number": None}, "devices[0].minor_number", "must be an integer, found None"),
        ("device", {"minor_number": "x"}, "devices[0].minor_number", "must be an integer, found 'x'"),
        ("defaults", {"memory": True}, "devices[0].memory", "must be a mapping, found bool"),
        ("defaults", {"memory": {"total_bytes": "x"}}, "devices[0].memory.total_bytes",
         "must be a whole number >= 0, found 'x'"),
        ("device", {"pci": "x"}, "devices[0].pci", "must be a mapping, found str"),
        ("defaults", {"power": {"max_limit_mw": -5}}, "devices[0].power.max_limit_mw",
         "must be a whole number >= 0, found -5"),
        ("defaults", {"supported_clocks": {"memory_clocks": [{"freq_mhz": "fast"}]}},
         "devices[0].supported_clocks.memory_clocks[0]", "must be a mapping with an integer freq_mhz"),
    ],
)
def test_mistyped_board_fields_are_named(tmp_path: Path, where: str, value: dict[str, object], field: str,
                                          problem: str) -> None:
    """A mistyped mock-NVML field is exit 2 naming the board file and field, never an internal error."""
    path = _local_board(tmp_path)
    board = yaml.safe_load(path.read_text())
    if where == "device":
        board["devices"][0].update(value)
    else:
        board["device_defaults"].update(value)
    path.write_text(yaml.safe_dump(board))
    err = _refusal_of_local_board(tmp_path)
    assert err.file == str(path) and err.field == field and err.problem.startswith(problem)
