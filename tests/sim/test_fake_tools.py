"""The fake vendor tools of a rendered tree, run as subprocesses: every command and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim.conftest import read, render_one


def run(tree: Path, tool: str, *args: str, unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HWEMU_UNPRIVILEGED"}
    if unprivileged:
        env["HWEMU_UNPRIVILEGED"] = "1"
    return subprocess.run([str(tree / "bin" / tool), *args], capture_output=True, text=True, env=env, timeout=30,
                          check=False)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tools")
    out = {
        "h100": render_one(root, "nvidia-h100-sxm-8gpu", "h"),
        "l40s": render_one(root, "nvidia-l40s-4gpu", "l"),
        "tok": render_one(root, "nvidia-h100-sxm-8gpu", "t", {"gpus": {"fieldSupport": {"power.min_limit": "[N/A]"}}}),
        "mig": render_one(root, "nvidia-h100-sxm-8gpu", "m", {"gpus": {"exposure": "mig-mixed"}}),
        "mi250": render_one(root, "amd-instinct-mi250x-4gpu", "a"),
        "w7900": render_one(root, "amd-radeon-pro-w7900", "w"),
    }
    return out


@pytest.fixture(autouse=True)
def pristine(trees: dict[str, Path]) -> Iterator[None]:
    """Undo every write a test makes: nvml.json and the AMD sysfs files."""
    saved: dict[Path, str] = {}
    for tree in trees.values():
        for p in [tree / "state/nvml.json", *tree.glob("sys/devices/pci*/*/hwmon/hwmon*/power1_cap"),
                  *tree.glob("sys/devices/pci*/*/power_dpm_force_performance_level")]:
            if p.exists():
                saved[p] = p.read_text()
    yield
    for p, text in saved.items():
        p.write_text(text)


def nvml(tree: Path) -> dict:
    return json.loads((tree / "state/nvml.json").read_text())


# -- nvidia-smi: queries ---------------------------------------------------------------------------------


def test_list_gpus(trees: dict[str, Path]) -> None:
    r = run(trees["h100"], "nvidia-smi", "-L")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert len(lines) == 8
    assert lines[0] == "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00)"
    mig = run(trees["mig"], "nvidia-smi", "-L", "-i", "0").stdout.splitlines()
    assert mig[0].startswith("GPU 0: NVIDIA H100 80GB HBM3")
    assert sum("MIG 1g.10gb" in line for line in mig) == 2 and sum("MIG 3g.40gb" in line for line in mig) == 1


def test_query_gpu_csv_variants(trees: dict[str, Path]) -> None:
    fields = "index,name,pci.bus_id,power.limit,power.min_limit,power.max_limit,power.default_limit," \
             "enforced.power.limit,power.draw,power.management,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem," \
             "persistence_mode,mig.mode.current,temperature.gpu,uuid"
    r = run(trees["h100"], "nvidia-smi", f"--query-gpu={fields}", "--format=csv")
    assert r.returncode == 0
    header, first = r.stdout.splitlines()[:2]
    assert header.startswith("index, name, pci.bus_id, power.limit [W], power.min_limit [W]")
    assert first == ("0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 700.00 W, 200.00 W, 700.00 W, 700.00 W, 700.00 W, "
                     "72.00 W, Supported, 345 MHz, 2619 MHz, 1980 MHz, 2619 MHz, Enabled, Disabled, 31, "
                     "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00")
    r = run(trees["h100"], "nvidia-smi", "--query-gpu=index,power.limit", "--format=csv,noheader,nounits", "-i", "7")
    assert r.stdout == "7, 700.00\n"
    r = run(trees["l40s"], "nvidia-smi", "--query-gpu", "mig.mode.current", "--format", "csv,noheader")
    assert r.stdout == "[N/A]\n" * 4


def test_field_support_tokens_are_printed_in_place(trees: dict[str, Path]) -> None:
    r = run(trees["tok"], "nvidia-smi", "--query-gpu=power.min_limit,power.max_limit",
            "--format=csv,noheader,nounits", "-i", "0")
    assert r.stdout == "[N/A], 700.00\n"
    xml = ET.fromstring(run(trees["tok"], "nvidia-smi", "-q", "-x").stdout)
    assert xml.find("gpu/gpu_power_readings/min_power_limit").text == "N/A"


def test_query_errors(trees: dict[str, Path]) -> None:
    r = run(trees["h100"], "nvidia-smi", "--query-gpu=bogus.field", "--format=csv")
    assert (r.returncode, r.stdout) == (2, 'Field "bogus.field" is not a valid field to query.\n\n')
    r = run(trees["h100"], "nvidia-smi", "--query-gpu=index")
    assert r.returncode == 2 and "--format is required" in r.stdout
    r = run(trees["h100"], "nvidia-smi", "-L", "-i", "9")
    assert (r.returncode, r.stdout) == (6, "No devices were found\n")
    r = run(trees["h100"], "nvidia-smi", "--bogus")
    assert r.returncode == 2
    assert r.stdout == ('Invalid combination of input arguments: unknown option "--bogus". '
                        "Please run 'nvidia-smi -h' for help.\n")
    r = run(trees["h100"], "nvidia-smi", "-pl", "300", "-pm", "1")
    assert r.returncode == 2 and r.stdout.startswith("Invalid combination of input arguments.")


def test_xml_newer_schema(trees: dict[str, Path]) -> None:
    r = run(trees["h100"], "nvidia-smi", "-q", "-x")
    assert r.returncode == 0
    root = ET.fromstring(r.stdout)
    assert root.findtext("attached_gpus") == "8" and root.findtext("driver_version") == "550.163.01"
    gpu = root.findall("gpu")[1]
    assert gpu.get("id") == "00000000:2A:00.0"
    assert gpu.findtext("pci/pci_bus_id") == "00000000:2A:00.0"
    assert gpu.findtext("product_architecture") == "Hopper"
    assert gpu.findtext("persistence_mode") == "Enabled"
    assert gpu.findtext("mig_mode/current_mig") == "Disabled"
    readings = gpu.find("gpu_power_readings")
    assert readings.findtext("current_power_limit") == "700.00 W"
    assert readings.findtext("min_power_limit") == "200.00 W"
    assert gpu.findtext("clocks/sm_clock") == "345 MHz"
    mems = gpu.findall("supported_clocks/supported_mem_clock")
    assert [m.findtext("value") for m in mems] == ["2619 MHz", "1593 MHz"]
    assert len(mems[0].findall("supported_graphics_clock")) == 110


def test_supported_clocks_honour_sm_max_by_mem(trees: dict[str, Path]) -> None:
    r = run(trees["l40s"], "nvidia-smi", "-q", "-d", "SUPPORTED_CLOCKS", "-i", "0")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    start = lines.index(next(line for line in lines if "Memory" in line and "405 MHz" in line))
    graphics = [line.split(":")[1].strip() for line in lines[start + 1:] if "Graphics" in line]
    assert graphics[0] == "645 MHz" and graphics[-1] == "210 MHz"
    x = ET.fromstring(run(trees["l40s"], "nvidia-smi", "-q", "-x", "-d", "SUPPORTED_CLOCKS").stdout)
    mems = x.findall("gpu")[0].findall("supported_clocks/supported_mem_clock")
    assert [m.findtext("value") for m in mems] == ["9001 MHz", "405 MHz"]
    assert [len(m.findall("supported_graphics_clock")) for m in mems] == [155, 30]
    assert mems[1].findall("supported_graphics_clock")[0].text == "645 MHz"
    text = run(trees["h100"], "nvidia-smi", "-q").stdout
    assert "Product Name                          : NVIDIA H100 80GB HBM3" in text
    power = run(trees["h100"], "nvidia-smi", "-q", "-x", "-d", "POWER")
    assert power.returncode == 0 and "<supported_clocks>" not in power.stdout
    assert "<gpu_power_readings>" in power.stdout
    bad = run(trees["h100"], "nvidia-smi", "-q", "-d", "WATTS")
    assert bad.returncode == 2
    assert bad.stdout == "Invalid display option \"WATTS\". Please run 'nvidia-smi -h' for help.\n"


# -- nvidia-smi: set commands ----------------------------------------------------------------------------


def test_power_limit_by_index_bus_id_and_list(trees: dict[str, Path]) -> None:
    t = trees["h100"]
    r = run(t, "nvidia-smi", "-i", "0,0000:2a:00.0,00000000:3A:00.0", "-pl", "350")
    assert r.returncode == 0
    assert r.stdout == ("Power limit for GPU 00000000:18:00.0 was set to 350.00 W from 700.00 W.\n"
                        "Power limit for GPU 00000000:2A:00.0 was set to 350.00 W from 700.00 W.\n"
                        "Power limit for GPU 00000000:3A:00.0 was set to 350.00 W from 700.00 W.\n"
                        "All done.\n")
    limits = [g["power"]["limitMw"] for g in nvml(t)["gpus"]]
    assert limits == [350000] * 3 + [700000] * 5
    assert nvml(t)["gpus"][0]["power"]["enforcedLimitMw"] == 350000
    # inclusive range
    assert run(t, "nvidia-smi", "-i", "4", "-pl", "200").returncode == 0
    assert run(t, "nvidia-smi", "-i", "4", "--power-limit=700").returncode == 0


def test_power_limit_out_of_range(trees: dict[str, Path]) -> None:
    r = run(trees["h100"], "nvidia-smi", "-i", "1", "-pl", "199.5")
    assert r.returncode == 2
    assert r.stdout == ("Provided power limit 199.50 W is not a valid power limit which should be between "
                        "200.00 W and 700.00 W for GPU 00000000:2A:00.0\nTerminating early due to previous errors.\n")
    assert nvml(trees["h100"])["gpus"][1]["power"]["limitMw"] == 700000
    r = run(trees["h100"], "nvidia-smi", "-pl", "abc")
    assert r.returncode == 2 and r.stdout.startswith('Invalid power limit value "abc"')


def test_power_limit_on_a_token_gpu_is_a_warning(trees: dict[str, Path]) -> None:
    t = trees["tok"]
    r = run(t, "nvidia-smi", "-i", "0", "-pl", "300")
    assert r.returncode == 0
    assert r.stdout == ("Changing power management limit is not supported for GPU: 00000000:18:00.0.\n"
                        "Treating as warning and moving on.\nAll done.\n")
    assert nvml(t)["gpus"][0]["power"]["limitMw"] == 700000
    r = run(t, "nvidia-smi", "-i", "0,1", "-pl", "300", "-eow")
    assert r.returncode == 3
    assert r.stdout.startswith("Changing power management limit is not supported for GPU: 00000000:18:00.0.\n")
    assert [g["power"]["limitMw"] for g in nvml(t)["gpus"][:2]] == [700000, 700000]


def test_lock_and_reset_gpu_clocks(trees: dict[str, Path]) -> None:
    t = trees["h100"]
    r = run(t, "nvidia-smi", "-i", "0", "-lgc", "1000,1500")
    assert r.returncode == 0
    assert r.stdout == 'GPU clocks set to "(gpuClkMin 1000, gpuClkMax 1500)" for GPU 00000000:18:00.0\nAll done.\n'
    g = nvml(t)["gpus"][0]
    assert g["clocks"]["lockedGraphics"] == {"minMhz": 1000, "maxMhz": 1500}
    assert g["clocks"]["smMhz"] == 1000  # clamped into the locked range
    r = run(t, "nvidia-smi", "-i", "0", "-rgc")
    assert (r.returncode, r.stdout) == (0, "All done.\n")  # real drivers print nothing else
    assert nvml(t)["gpus"][0]["clocks"]["lockedGraphics"] is None
    assert run(t, "nvidia-smi", "-lgc", "1500,1000").returncode == 2


def test_memory_lock_bounds_graphics_and_is_refused_on_ada(trees: dict[str, Path]) -> None:
    t = trees["h100"]
    r = run(t, "nvidia-smi", "-i", "2", "-lmc", "1593,1593")
    assert r.returncode == 0
    assert r.stdout == 'Memory clocks set to "(memClkMin 1593, memClkMax 1593)" for GPU 00000000:3A:00.0\nAll done.\n'
    assert nvml(t)["gpus"][2]["clocks"]["memoryMhz"] == 1593
    assert run(t, "nvidia-smi", "-i", "2", "-rmc").returncode == 0
    assert nvml(t)["gpus"][2]["clocks"]["lockedMemory"] is None
    ada = trees["l40s"]
    r = run(ada, "nvidia-smi", "-i", "0", "-lmc", "405,405")
    assert r.returncode == 0
    assert r.stdout == ("Setting locked memory clocks is not supported for GPU 00000000:4F:00.0.\n"
                        "Treating as warning and moving on.\nAll done.\n")
    assert nvml(ada)["gpus"][0]["clocks"]["lockedMemory"] is None
    assert run(ada, "nvidia-smi", "-i", "0", "-lmc", "405,405", "--error-on-warning").returncode == 3


def test_persistence_mode(trees: dict[str, Path]) -> None:
    t = trees["h100"]
    r = run(t, "nvidia-smi", "-i", "5", "-pm", "0")
    assert (r.returncode, r.stdout) == (0, "Disabled persistence mode for GPU 00000000:AB:00.0.\nAll done.\n")
    assert nvml(t)["gpus"][5]["persistenceMode"] == "Disabled"
    r = run(t, "nvidia-smi", "-i", "5", "-pm", "1")
    assert r.stdout == "Enabled persistence mode for GPU 00000000:AB:00.0.\nAll done.\n"
    assert run(t, "nvidia-smi", "-pm", "2").returncode == 2


CLOCKS_DENIED = "The current user does not have permission to change clocks for GPU 00000000:18:00.0.\n"


@pytest.mark.parametrize(("args", "first"), [
    (("-pl", "300"), "Failed to set power management limit for GPU 00000000:18:00.0: Insufficient Permissions\n"),
    (("-lgc", "1000,1500"), CLOCKS_DENIED), (("-lmc", "1593,1593"), CLOCKS_DENIED), (("-rgc",), CLOCKS_DENIED),
    (("-rmc",), CLOCKS_DENIED),
    (("-pm", "0"), "Failed to set persistence mode for GPU 00000000:18:00.0: Insufficient Permissions\n"),
    (("-r",), "Failed to reset GPU 00000000:18:00.0: Insufficient Permissions\n"),
])
def test_unprivileged_set_commands_exit_4(trees: dict[str, Path], args: tuple[str, ...], first: str) -> None:
    t = trees["h100"]
    before = nvml(t)
    r = run(t, "nvidia-smi", "-i", "0", *args, unprivileged=True)
    assert (r.returncode, r.stdout) == (4, first + "Terminating early due to previous errors.\n")
    assert nvml(t) == before
    assert run(t, "nvidia-smi", "-L", unprivileged=True).returncode == 0


@pytest.mark.parametrize(("args", "what"), [(("-ac", "2619,1980"), "Setting applications clocks"),
                                            (("-rac",), "Resetting applications clocks"),
                                            (("--auto-boost-default=0",), "Setting auto boosted clocks")])
def test_application_clocks_and_auto_boost_are_always_refused(trees: dict[str, Path], args: tuple[str, ...],
                                                              what: str) -> None:
    t = trees["h100"]
    before = nvml(t)
    r = run(t, "nvidia-smi", "-i", "0", *args)
    assert r.returncode == 0
    assert r.stdout.startswith(f"{what}") and "is not supported for GPU 00000000:18:00.0." in r.stdout
    assert "Treating as warning and moving on." in r.stdout
    assert run(t, "nvidia-smi", "-i", "0", *args, "-eow").returncode == 3
    assert nvml(t) == before


# -- rocm-smi and amd-smi -------------------------------------------------------------------------------


def _cap_file(tree: Path, bdf: str) -> Path:
    return next((tree / f"sys/bus/pci/devices/{bdf}/hwmon").iterdir()) / "power1_cap"


def test_rocm_smi_queries(trees: dict[str, Path]) -> None:
    t = trees["mi250"]
    r = run(t, "rocm-smi", "--showproductname", "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert sorted(doc) == [f"card{i}" for i in range(8)]
    assert doc["card0"]["Card Series"] == "AMD Instinct MI250X" and doc["card0"]["GFX Version"] == "gfx90a"
    caps = json.loads(run(t, "rocm-smi", "--showpowercap", "--json").stdout)
    assert caps["card0"]["Max Graphics Package Power (W)"] == "560.0"
    assert caps["card1"]["Max Graphics Package Power (W)"] == "0.0"
    level = json.loads(run(t, "rocm-smi", "--showperflevel", "--json", "-d", "3").stdout)
    assert level == {"card3": {"Performance Level": "auto"}}
    text = run(t, "rocm-smi", "--showpowercap").stdout
    assert "GPU[0]\t\t: Max Graphics Package Power (W): 560.0\n" in text
    bad = run(t, "rocm-smi", "--bogus")
    assert (bad.returncode, bad.stderr.splitlines()[-1]) == (2, "rocm-smi: error: unrecognized arguments: --bogus")


def test_rocm_smi_set_power_and_perf_level(trees: dict[str, Path]) -> None:
    t = trees["mi250"]
    r = run(t, "rocm-smi", "-d", "0", "--setpoweroverdrive", "400")
    assert r.returncode == 0 and "GPU[0]\t\t: Successfully set power to: 400W\n" in r.stdout
    assert read(_cap_file(t, "0000:c1:00.0")) == "400000000"
    r = run(t, "rocm-smi", "-d", "1", "--setpoweroverdrive", "400")
    assert r.returncode == 0 and "Invalid argument" in r.stdout
    assert read(_cap_file(t, "0000:c6:00.0")) == "0"
    r = run(t, "rocm-smi", "-d", "0", "--setpoweroverdrive", "600")
    assert "requested power is above the maximum of 560W" in r.stdout
    r = run(t, "rocm-smi", "-d", "2", "--setperflevel", "manual")
    assert r.returncode == 0
    assert read(t / "sys/bus/pci/devices/0000:c9:00.0/power_dpm_force_performance_level") == "manual"
    assert run(t, "rocm-smi", "--setperflevel", "turbo").returncode == 2
    r = run(t, "rocm-smi", "--setperflevel", "low", unprivileged=True)
    assert r.returncode == 4 and "Permission denied" in r.stdout


def test_w7900_pinned_cap_texts(trees: dict[str, Path]) -> None:
    t = trees["w7900"]
    r = run(t, "rocm-smi", "--setpoweroverdrive", "200")
    assert r.returncode == 0
    assert "GPU[0]\t\t: Unable to set power to 200W: requested power is below the minimum of 241W\n" in r.stdout
    r = run(t, "amd-smi", "set", "-g", "0", "-o", "ppt0", "250")
    assert (r.returncode, r.stdout) == (1, "Power cap must be between 241W and 241W\n")
    assert read(_cap_file(t, "0000:03:00.0")) == "241000000"
    r = run(t, "amd-smi", "set", "-g", "0", "-o", "ppt0", "241")
    assert r.returncode == 0 and "Successfully set power cap to 241W" in r.stdout
    # unprivilegedSetIsNoop: rocm-smi --setperflevel prints nothing, exits 0, changes nothing
    r = run(t, "rocm-smi", "--setperflevel", "high", unprivileged=True)
    assert (r.returncode, r.stdout) == (0, "")
    assert read(t / "sys/bus/pci/devices/0000:03:00.0/power_dpm_force_performance_level") == "auto"


def test_amd_smi_static_metric_and_set(trees: dict[str, Path]) -> None:
    t = trees["mi250"]
    static = json.loads(run(t, "amd-smi", "static", "--json", "-g", "0").stdout)
    assert static[0]["asic"]["market_name"] == "AMD Instinct MI250X"
    assert static[0]["limit"]["max_power"] == {"value": 560, "unit": "W"}
    metric = json.loads(run(t, "amd-smi", "metric", "--power", "--json").stdout)
    assert len(metric) == 8 and metric[0]["power"]["socket_power"]["unit"] == "W"
    level = json.loads(run(t, "amd-smi", "metric", "--perf-level", "--json", "-g", "1").stdout)
    assert level == [{"gpu": 1, "perf_level": "AMDSMI_DEV_PERF_LEVEL_AUTO"}]
    r = run(t, "amd-smi", "set", "-g", "2", "-o", "ppt0", "300")
    assert r.returncode == 0 and read(_cap_file(t, "0000:c9:00.0")) == "300000000"
    r = run(t, "amd-smi", "set", "-g", "2", "--perf-level", "profile_peak")
    assert r.returncode == 0
    assert read(t / "sys/bus/pci/devices/0000:c9:00.0/power_dpm_force_performance_level") == "profile_peak"
    r = run(t, "amd-smi", "set", "-g", "2", "-o", "ppt0", "300", unprivileged=True)
    assert (r.returncode, r.stdout) == (4, "Command requires elevation\n")
    r = run(t, "amd-smi", "frobnicate")
    assert r.returncode == 2 and "invalid choice: 'frobnicate'" in r.stderr
    r = run(t, "amd-smi", "static", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr


def test_tools_import_only_the_standard_library(trees: dict[str, Path]) -> None:
    probe = ("import runpy, sys; sys.argv=['nvidia-smi', '-L']\n"
             f"sys.path.insert(0, {os.getcwd()!r})\n"
             "from joulectl.sim.tools import fakesmi, nvsmi, amdsmi, state\n"
             "bad = [m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'yaml', 'click')]\n"
             "print(bad)")
    r = subprocess.run([os.sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_fake_nvidia_smi_starts_without_re_typing_or_json(trees: dict[str, Path]) -> None:
    """The fake nvidia-smi runs at every tool call of joulectl: it reads and writes its JSON state
    through ``_json`` directly, so neither ``json`` (which imports ``re``, ``enum``, ``functools``)
    nor ``typing`` is loaded, nor ``os`` (the tools use ``posix``; speed is in docs/PERFORMANCE.md;
    this keeps the structure); nor, for a set command, the reports (``nvreport``)."""
    tree = trees["h100"]
    probe = (f"import sys; sys.path.insert(0, {os.getcwd()!r})\n"
             "from joulectl.sim.tools import nvsmi\n"
             f"code = nvsmi.run({str(tree)!r}, ['-i', '0', '-pl', '650'])\n"
             "print(code, sorted(m for m in ('re', 'typing', 'json', 'collections', 'os',\n"
             "                               'joulectl.sim.tools.nvreport') if m in sys.modules))")
    r = subprocess.run([os.sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "0 []"
    assert nvml(tree)["gpus"][0]["power"]["limitMw"] == 650000


def test_state_json_is_the_json_modules_json() -> None:
    from joulectl.sim.tools import state

    value = {"a": [1, 2.5, None, True, "é\n"], "b": {"c": -3}, "nan": float("inf")}
    text = json.dumps(value, separators=(",", ":"))
    assert state.dumps(value) == text
    assert state.loads(" " + text + "\n") == value
    for bad in ("", "{", '{"a":1} x', "[1,]"):
        with pytest.raises(json.JSONDecodeError):
            state.loads(bad)
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        state.dumps({"x": object()})
