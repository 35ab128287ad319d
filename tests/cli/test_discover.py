"""`joulectl discover` end to end: real app, fixture trees under tmp_path, every output format."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import trees
import typer
import yaml

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "crds" / "joulie.io_nodehardwares.yaml"


def validate(obj: dict[str, Any]) -> None:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(obj)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture(autouse=True)
def _smi_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULECTL_NVIDIA_TRANSPORT", "smi")


Cli = Callable[..., Any]


def test_vm_table_says_why_nothing_can_be_capped(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    r = cli("--root", root, "discover")
    assert r.exit_code == 0 and r.stderr == ""
    assert "node             vm-01" in r.stdout
    assert "virtual machine  yes" in r.stdout
    assert ("cap control                no: nothing can be capped: no powercap (RAPL) zones under "
            "/sys/class/powercap and no cpufreq policies under /sys/devices/system/cpu/cpufreq "
            "(a virtual machine: the hypervisor exposes no RAPL)") in r.stdout
    assert "GPUs: none found" in r.stdout


def test_vm_json_is_a_valid_node_hardware(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    r = cli("--root", root, "discover", "-o", "json")
    assert r.exit_code == 0
    obj = json.loads(r.stdout)
    validate(obj)
    assert (obj["apiVersion"], obj["kind"], obj["metadata"], obj["spec"]) == (
        "joulie.io/v1alpha1", "NodeHardware", {"name": "vm-01"}, {"nodeName": "vm-01"})
    st = obj["status"]
    assert st["gpu"] == {"present": False, "count": 0, "powerDomains": 0, "controlAvailable": False,
                         "telemetryAvailable": False, "governor": {"presets": []}, "devices": []}
    assert st["cpu"]["controlAvailable"] is False
    assert st["cpu"]["controlReason"].startswith("nothing can be capped")
    assert st["capabilities"] == {"cpuControl": False, "gpuControl": False, "cpuTelemetry": False,
                                  "gpuTelemetry": False}
    assert st["host"] == {"hostname": "vm-01", "kernel": "6.1.0-26-cloud-amd64", "virtual": True}
    assert st["quality"]["overall"] == "heuristic"


def test_missing_root_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    r = cli("--root", missing, "discover")
    assert r.exit_code == 2
    assert r.stderr == f"joulectl: error: {missing}: --root: host root does not exist or is not a directory\n"
    assert r.stdout == ""


def test_root_that_is_a_file_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    r = cli("--root", afile, "discover")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"joulectl: error: {afile}: --root: host root is not a directory\n"


def test_mi300x_json_validates_and_has_devices(cli: Cli, root: Path) -> None:
    trees.amd_mi300x_x8(root)
    r = cli("--root", root, "discover", "-o", "json")
    assert r.exit_code == 0, r.stderr
    obj = json.loads(r.stdout)
    validate(obj)
    gpu = obj["status"]["gpu"]
    assert (gpu["present"], gpu["count"], gpu["powerDomains"], gpu["vendor"], gpu["model"]) == (
        True, 8, 8, "amd", "AMD_INSTINCT_MI300X")
    assert gpu["capRangePerGpu"] == {"minWatts": 350, "maxWatts": 750, "defaultWatts": 750}
    assert gpu["currentCapWatts"] == 750
    assert gpu["slicing"] == {"supported": True, "modes": ["SPX"]}
    assert gpu["governor"]["presets"] == ["auto", "sustained", "efficient", "low", "peak"]
    d = gpu["devices"][3]
    assert {k: d[k] for k in ("index", "busId", "vendor", "model", "rawModel", "holdsLimit", "partition")} == {
        "index": 3, "busId": "0000:65:00.0", "vendor": "amd", "model": "AMD Instinct MI300X OAM",
        "rawModel": "AMD Instinct MI300X OAM", "holdsLimit": True, "partition": "SPX"}
    assert d["capRange"] == {"minWatts": 350, "maxWatts": 750, "defaultWatts": 750}
    assert (d["currentCapWatts"], d["powerWatts"], d["control"]) == (750, 143, {"available": True})
    res = obj["status"]["inventoryResolution"]
    assert res == {"hardwareCatalogKey": {"cpu": "AMD_EPYC_9654", "gpu": "AMD_INSTINCT_MI300X"},
                   "exactness": {"cpu": "exact", "gpu": "exact"}}
    assert obj["status"]["quality"]["overall"] == "exact"


def test_mi250x_yaml_counts_and_domains(cli: Cli, root: Path) -> None:
    trees.amd_mi250x_x4(root)
    r = cli("--root", root, "discover", "-o", "yaml")
    assert r.exit_code == 0
    obj = yaml.safe_load(r.stdout)
    validate(obj)
    gpu = obj["status"]["gpu"]
    assert (gpu["count"], gpu["powerDomains"]) == (8, 4)
    sec = gpu["devices"][1]
    assert (sec["holdsLimit"], sec["primaryBusId"], sec["control"]) == (
        False, "0000:c1:00.0", {"available": False, "reason": "limited through primary 0000:c1:00.0"})
    assert "currentCapWatts" not in sec


def test_node_name_override_and_sanitised_object_name(cli: Cli, root: Path) -> None:
    trees.intel_2s_host(root)
    r = cli("--root", root, "discover", "-o", "json")
    obj = json.loads(r.stdout)
    assert obj["metadata"]["name"] == "gpu-node-01-example-com"
    assert obj["spec"]["nodeName"] == "gpu-node-01.example.com"
    r = cli("--root", root, "discover", "-o", "json", "--node-name", "Rack_7/Node.3")
    obj = json.loads(r.stdout)
    assert (obj["metadata"]["name"], obj["spec"]["nodeName"]) == ("rack-7-node-3", "Rack_7/Node.3")


def test_hostname_falls_back_to_etc_hostname(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    (root / "proc/sys/kernel/hostname").unlink()
    (root / "etc/hostname").write_text("from-etc\n")
    obj = json.loads(cli("--root", root, "discover", "-o", "json").stdout)
    assert obj["spec"]["nodeName"] == "from-etc"


def test_intel_host_cpu_block(cli: Cli, root: Path) -> None:
    trees.intel_2s_host(root)
    (root / "sys/class/powercap/intel-rapl:0:0/enabled").write_text("0\n")  # a disabled dram limit
    obj = json.loads(cli("--root", root, "discover", "-o", "json").stdout)
    validate(obj)
    c = obj["status"]["cpu"]
    assert (c["sockets"], c["totalCores"], c["coresPerSocket"], c["threads"], c["driverFamily"]) == (
        2, 8, 4, 16, "intel_pstate")
    assert c["capRange"] == {"type": "package", "minWattsPerSocket": 150, "maxWattsPerSocket": 350}
    assert c["landmarks"] == {"minFreqMHz": 800, "nominalFreqMHz": 2000, "maxBoostMHz": 3800}
    assert c["turbo"] is True
    assert c["governor"]["current"] == ["powersave"] and c["governor"]["epp"] == ["balance_performance"]
    zones = {z["id"]: z for z in c["zones"]}
    assert zones["intel-rapl:1"]["locked"] is True and zones["intel-rapl:1"]["enabled"] is False
    assert zones["intel-rapl:0:0"]["locked"] is False and zones["intel-rapl:0:0"]["enabled"] is False
    assert zones["intel-rapl:2"]["kind"] == "psys"
    assert zones["intel-rapl:0"]["constraints"][0] == {
        "index": 0, "name": "long_term", "limitWatts": 350, "minWatts": 150, "maxWatts": 350,
        "timeWindowUs": 999424}
    assert c["warnings"] == ["package-1 (intel-rapl:1): PL1 limit locked by firmware"]


def test_table_shows_zones_and_gpus(cli: Cli, root: Path) -> None:
    trees.intel_flex170_i915_x4(root)
    r = cli("--root", root, "discover", "-o", "table")
    assert r.exit_code == 0
    assert "intel-rapl:1    package-1  no (locked)" in r.stdout
    assert "GPUs: 4, power domains: 4, governor presets: none" in r.stdout
    assert "0      0000:4d:00.0  intel     i915      Intel Data Center GPU Flex 170  120 W" in r.stdout


def test_intel_without_rated_max(cli: Cli, root: Path) -> None:
    trees.intel_no_rated_max(root)
    obj = json.loads(cli("--root", root, "discover", "-o", "json").stdout)
    validate(obj)
    d = obj["status"]["gpu"]["devices"][0]
    assert d["control"] == {"available": False, "reason": "the power limit range of the Intel GPUs is unknown"}
    assert obj["status"]["gpu"]["controlAvailable"] is False
    assert "capRangePerGpu" not in obj["status"]["gpu"]


@pytest.mark.parametrize("schema", ["legacy", "new"])
def test_h100_through_nvidia_smi(cli: Cli, root: Path, schema: str) -> None:
    trees.nvidia_h100_x8_smi(root, schema=schema)
    r = cli("--root", root, "discover", "-o", "json")
    assert r.exit_code == 0 and r.stderr == ""
    obj = json.loads(r.stdout)
    validate(obj)
    gpu = obj["status"]["gpu"]
    assert (gpu["count"], gpu["model"], gpu["rawModel"], gpu["capRangePerGpu"]) == (
        8, "NVIDIA_H100_SXM", "NVIDIA H100 80GB HBM3", {"minWatts": 200, "maxWatts": 700, "defaultWatts": 700})
    assert gpu["devices"][7]["busId"] == "0000:db:00.0"
    assert gpu["devices"][0]["mig"] == "disabled"
    assert gpu["slicing"] == {"supported": True, "modes": []}


def test_nvidia_smi_missing_still_reports_everything_else(cli: Cli, root: Path) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES)
    r = cli("--root", root, "discover")
    assert r.exit_code == 0
    assert r.stderr == f"joulectl: warning: nvidia GPUs could not be listed: nvidia-smi not found in {root}/bin\n"
    assert "Traceback" not in r.stdout + r.stderr
    assert "nvidia    -         not listed" in r.stdout
    assert f"no: nvidia-smi not found in {root}/bin" in r.stdout
    assert "intel-rapl:0    package-0" in r.stdout
    obj = json.loads(cli("--root", root, "discover", "-o", "json").stdout)
    validate(obj)
    assert obj["status"]["gpu"]["errors"] == {"nvidia": f"nvidia-smi not found in {root}/bin"}


def test_nvidia_smi_timing_out(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, "exec sleep 5\n")
    r = cli("--root", root, "--tool-timeout", "0.3", "discover")
    assert r.exit_code == 0
    assert r.stderr == "joulectl: warning: nvidia GPUs could not be listed: nvidia-smi timed out after 0.3 s\n"
    assert "no: nvidia-smi timed out after 0.3 s" in r.stdout


def test_nvidia_smi_failing(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, 'echo "No devices were found"\nexit 6\n')
    r = cli("--root", root, "discover", "-o", "prometheus")
    assert r.exit_code == 0
    assert r.stderr == ("joulectl: warning: nvidia GPUs could not be listed: nvidia-smi -q -x failed (exit 6): "
                        "No devices were found\n")
    assert 'joulectl_gpu_discovery_error{node="vm-01",vendor="nvidia"} 1' in r.stdout


def test_unreadable_attribute_is_unknown_with_reason(cli: Cli, root: Path) -> None:
    trees.amd_mi300x_x8(root)
    cap = root / "sys/bus/pci/devices/0000:05:00.0/hwmon/hwmon3/power1_cap"
    cap.unlink()
    cap.mkdir()  # reading it fails with EISDIR
    r = cli("--root", root, "discover", "-o", "json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)["status"]["gpu"]["devices"][0]
    assert "currentCapWatts" not in d
    assert d["warnings"] == ["power1_cap unreadable (EISDIR)"]


def test_prometheus_textfile(cli: Cli, root: Path) -> None:
    trees.amd_mi250x_x4(root)
    r = cli("--root", root, "discover", "-o", "prometheus")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert "# HELP joulectl_gpus GPUs counted per the Joulie rules." in lines
    assert "# TYPE joulectl_gpus gauge" in lines
    assert 'joulectl_gpus{node="mi250x-node-01"} 8' in lines
    assert 'joulectl_gpu_power_domains{node="mi250x-node-01"} 4' in lines
    labels = ('node="mi250x-node-01",gpu="0",pci_bus_id="00000000:C1:00.0",bus_id="0000:c1:00.0",vendor="amd",'
              'model="AMD Instinct MI250X"')
    assert f"joulectl_gpu_power_cap_watts{{{labels}}} 500" in lines
    assert f"joulectl_gpu_power_cap_max_watts{{{labels}}} 560" in lines
    assert f"joulectl_gpu_holds_limit{{{labels}}} 1" in lines
    assert not any(line.startswith("joulectl_gpu_power_cap_watts{") and "0000:c6:00.0" in line for line in lines)
    assert ('joulectl_powercap_energy_joules_total{node="mi250x-node-01",zone="intel-rapl:0",name="package-0"} '
            "123.456789") in lines
    types = [line for line in lines if line.startswith("# TYPE")]
    assert len(types) == len(set(types))
    for line in lines:
        assert line.startswith("#") or line.startswith("joulectl_")


def test_watch_with_count(cli: Cli, root: Path) -> None:
    trees.amd_mi250x_x4(root)
    r = cli("--root", root, "discover", "--watch", "0.1", "--count", "2")
    assert r.exit_code == 0
    assert r.stdout.count("mi250x-node-01 at ") == 2
    assert "DEVICE        VENDOR    MODEL" in r.stdout
    assert "0000:c6:00.0  amd       AMD Instinct MI250X  0 W      via 0000:c1:00.0" in r.stdout
    frames = r.stdout.split("mi250x-node-01 at ")
    assert "intel-rapl:0  cpu       package-0            -" in frames[1]  # no energy delta yet
    assert "intel-rapl:0  cpu       package-0            0.0 W" in frames[2]  # the static tree's counter


def test_watch_with_nothing_to_watch_says_so(cli: Cli, root: Path) -> None:
    trees.vm_host(root)
    r = cli("--root", root, "discover", "--watch", "0.1", "--count", "1")
    assert r.exit_code == 0
    assert "nothing to watch: no powercap package zone and no GPU" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--count", "2"), "joulectl: error: --count: needs --watch\n"),
        (("--watch", "1", "-o", "json"),
         "joulectl: error: --watch: --watch prints a table and cannot be combined with -o json\n"),
    ],
)
def test_watch_usage_errors(cli: Cli, root: Path, args: tuple[str, ...], message: str) -> None:
    trees.vm_host(root)
    r = cli("--root", root, "discover", *args)
    assert (r.exit_code, r.stderr, r.stdout) == (2, message, "")


def test_bad_output_format(cli: Cli, root: Path) -> None:
    r = cli("--root", root, "discover", "-o", "xml")
    assert r.exit_code == 2
    assert r.stderr == ("joulectl: error: -o: 'xml' is not one of table, wide, json, yaml, name, csv, "
                        "jsonpath=..., custom-columns=..., prometheus\n")


def test_watch_ctrl_c_exits_130(root: Path) -> None:
    trees.vm_host(root)
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    # SIGINT back to its default in the child: a pytest started with SIGINT ignored (a background
    # job of a non-interactive shell) would pass SIG_IGN on, and Python then installs no handler.
    proc = subprocess.Popen(
        [sys.executable, "-m", "joulectl", "--root", str(root), "discover", "--watch", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("vm-01 at ")  # the first frame is drawn
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tool-timeout", "0", "discover"),
         "joulectl: error: --tool-timeout: 0 is less than the minimum 0.1 (see joulectl --help)"),
        (("--tool-timeout", "soon", "discover"),
         "joulectl: error: --tool-timeout: 'soon' is not a number (see joulectl --help)"),
        (("discover", "--watch", "1", "--count", "0"),
         "joulectl: error: discover: --count: 0 is less than the minimum 1 (see joulectl discover --help)"),
        (("discover", "--watch", "1", "--count", "x"),
         "joulectl: error: discover: --count: 'x' is not a whole number (see joulectl discover --help)"),
    ],
)
def test_bad_option_values(cli: Cli, root: Path, args: tuple[str, ...], message: str) -> None:
    trees.vm_host(root)
    r = cli("--root", root, *args)
    assert r.exit_code == 2
    assert r.stderr == message + "\n"


def test_discover_does_not_import_pydantic_yaml_rich_or_pynvml(root: Path) -> None:
    """Start-up stays near ``import typer``: plain options skip typer's pydantic coercion
    (joulectl.cli.fastparams) and the heavy modules are imported only by what needs them (the
    journal's only where there is one: MI300X defaults equal their caps, so discover looks)."""
    trees.amd_mi300x_x8(root)
    code = (
        "import sys\nfrom joulectl.cli import run\n"
        f"code = run(['--root', {str(root)!r}, 'discover', '-o', 'json'])\n"
        "heavy = sorted(m for m in ('pydantic', 'yaml', 'rich', 'pynvml', 'joulectl.sim', 'joulectl.ops.journal')\n"
        "               if m in sys.modules)\n"
        "print('HEAVY', code, heavy, file=sys.stderr)\n"
    )
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert "HEAVY 0 []" in proc.stderr


def test_each_signature_is_read_once_while_a_command_is_built(root: Path) -> None:
    """typer reads a command's signature twice, and the app callback's twice (fastparams keeps
    each): with the memo every function's is read once; discover and cap still run."""
    import json

    trees.amd_mi300x_x8(root)
    code = (
        "import collections, json, sys\nimport typer.main as tm\n"
        "read = tm.get_params_from_function\ncount = collections.Counter()\nnames = {}\n"
        "def counting(func):\n    count[id(func)] += 1\n    names[id(func)] = func.__qualname__\n"
        "    return read(func)\n"
        "tm.get_params_from_function = counting\n"
        "from joulectl.cli import run\n"
        f"codes = [run(['--root', {str(root)!r}, 'discover', '-o', 'json']),"
        f" run(['--root', {str(root)!r}, 'cap', '--pct', '60', '-o', 'json'])]\n"
        "print('COUNTS', json.dumps([codes, sorted([names[k], n] for k, n in count.items())]), file=sys.stderr)\n"
    )
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("COUNTS "))
    codes, counts = json.loads(line[len("COUNTS "):])
    assert codes == [0, 0]
    assert ["register.<locals>.discover", 1] in counts and ["register.<locals>.cap", 1] in counts
    assert all(n == 1 for _, n in counts), counts


def test_completers_carry_their_annotations_as_objects() -> None:
    """typer reads every completer's signature when it builds a command; string annotations (the
    module's ``from __future__ import annotations``) would be evaluated each time."""
    from joulectl.cli import common

    for completer in (common.choices("a", ("b", "help")), common.complete_devices, common.complete_presets):
        assert completer.__annotations__ == common._COMPLETER_HINTS
        assert not any(isinstance(a, str) for a in completer.__annotations__.values())


def test_fast_params_coerce_like_typer(capsys: pytest.CaptureFixture[str]) -> None:
    """joulectl.cli.fastparams (installed by the app) on a throwaway app: values, lists, ranges."""
    import joulectl.cli  # noqa: F401 - installs the fast coercion
    from joulectl.cli.fastparams import _plain_type

    seen: dict[str, Any] = {}
    app = typer.Typer()

    @app.command()
    def main(
        name: Annotated[str, typer.Option("--name")] = "x",
        n: Annotated[int, typer.Option("--n", min=1, max=5)] = 1,
        f: Annotated[float | None, typer.Option("--f")] = None,
        flag: Annotated[bool, typer.Option("--flag")] = False,
        dev: Annotated[list[str] | None, typer.Option("--dev")] = None,
    ) -> None:
        seen.update(name=name, n=n, f=f, flag=flag, dev=dev)

    command = typer.main.get_command(app)
    command.main(["--name", "a", "--n", "5", "--f", "2.5", "--flag", "--dev", "0", "--dev", "1"],
                 standalone_mode=False)
    assert seen == {"name": "a", "n": 5, "f": 2.5, "flag": True, "dev": ["0", "1"]}
    command.main([], standalone_mode=False)
    assert seen == {"name": "x", "n": 1, "f": None, "flag": False, "dev": None}
    with pytest.raises(typer.BadParameter, match="6 is more than the maximum 5"):
        command.main(["--n", "6"], standalone_mode=False)
    assert _plain_type(list[int] | None) == (int, True)
    assert _plain_type(str | int) is None
    assert _plain_type(dict[str, str]) is None


# -- round trip: trees rendered by `joulectl simulate render` -------------------------------------

ROUND_TRIP_SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: discover-round-trip}
spec:
  pools:
  - {name: vm, profile: vm-no-powercap, count: 1}
  - {name: epyc, profile: amd-epyc-2s-energy-only, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: flexxe, profile: intel-flex-170-4gpu, count: 1, overrides: {gpus: {intel: {driver: xe}}}}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from joulectl.cli import run

    base = tmp_path_factory.mktemp("rendered")
    spec = base / "cluster.yaml"
    spec.write_text(ROUND_TRIP_SPEC)
    assert run(["simulate", "render", str(spec), "--root", str(base / "sim")]) == 0
    return base / "sim"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("node", "count", "domains", "model", "driver"),
    [
        ("vm-0", 0, 0, None, None),
        ("epyc-0", 0, 0, None, None),
        ("h100-0", 8, 8, "NVIDIA_H100_SXM", "nvidia"),
        ("l40s-0", 4, 4, "NVIDIA_L40S", "nvidia"),
        ("mi300x-0", 8, 8, "AMD_INSTINCT_MI300X", "amdgpu"),
        ("mi250x-0", 8, 4, "AMD_INSTINCT_MI250X", "amdgpu"),
        ("w7900-0", 1, 1, "AMD_RADEON_PRO_W7900", "amdgpu"),
        ("flex-0", 4, 4, "INTEL_DATA_CENTER_GPU_FLEX_170", "i915"),
        ("flexxe-0", 4, 4, "INTEL_DATA_CENTER_GPU_FLEX_170", "xe"),
    ],
)
def test_round_trip_on_rendered_nodes(
    cli: Cli, rendered: Path, node: str, count: int, domains: int, model: str | None, driver: str | None
) -> None:
    r = cli("--root", rendered / node, "discover", "-o", "json")
    assert (r.exit_code, r.stderr) == (0, "")
    obj = json.loads(r.stdout)
    validate(obj)
    assert obj["spec"]["nodeName"] == node  # the rendered node names itself
    gpu = obj["status"]["gpu"]
    assert (gpu["count"], gpu["powerDomains"], gpu.get("model")) == (count, domains, model)
    assert {d["driver"] for d in gpu["devices"]} == ({driver} if driver else set())
    holders = [d for d in gpu["devices"] if d["holdsLimit"]]
    assert all(d["control"]["available"] and d["currentCapWatts"] > 0 for d in holders)
    cpu = obj["status"]["cpu"]
    if node == "vm-0":
        assert cpu["controlReason"].startswith("nothing can be capped")
    elif cpu["vendor"] == "AuthenticAMD":
        assert cpu["controlReason"] == "the package zones are energy-only (no long_term power limit constraint)"
    else:
        assert cpu["controlAvailable"] is True
