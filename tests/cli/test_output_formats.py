"""kubectl's and nvidia-smi's output conventions, the same on every reporting command: -o wide, -o name,
-o jsonpath=, -o custom-columns=, --no-headers, -o csv[,noheader][,nounits]. Through the real CLI on
hand-written trees (an MI250X node: eight GCDs, four holding the limit) and examples/cluster.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import trees

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")
TRAINING = str(REPO / "examples" / "pods" / "training-h100.yaml")
REPORT = "table, wide, json, yaml, name, csv, jsonpath=..., custom-columns=..."


@pytest.fixture
def mi250x(tmp_path: Path) -> Path:
    return trees.amd_mi250x_x4(tmp_path / "node")


def _ok(cli, *args: object) -> str:
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    return str(r.stdout)


# --- discover --------------------------------------------------------------------------------------

def test_discover_csv_is_nvidia_smi_shaped(cli, mi250x: Path) -> None:
    lines = _ok(cli, "--root", mi250x, "discover", "-o", "csv").splitlines()
    assert lines[0] == (
        "index, pci.bus_id, vendor, driver, name, power.limit [W], enforced.power.limit [W], power.min_limit [W], "
        "power.max_limit [W], power.default_limit [W], power.draw [W], mode, limit, control, architecture, "
        "catalog_key, uuid, governor.presets")
    assert lines[1] == ("0, 0000:c1:00.0, amd, amdgpu, AMD Instinct MI250X, 500 W, [N/A], [N/A], 560 W, 500 W, 120 W, "
                        "[N/A], holds, yes, cdna2, AMD_INSTINCT_MI250X, [N/A], auto sustained efficient low peak")
    assert lines[2] == ("1, 0000:c6:00.0, amd, amdgpu, AMD Instinct MI250X, [N/A], [N/A], [N/A], 560 W, 560 W, 0 W, "
                        "[N/A], via 0000:c1:00.0, no: limited through primary 0000:c1:00.0, cdna2, "
                        "AMD_INSTINCT_MI250X, [N/A], auto sustained efficient low peak")
    assert len(lines) == 9


def test_discover_csv_noheader_nounits(cli, mi250x: Path) -> None:
    lines = _ok(cli, "--root", mi250x, "discover", "-o", "csv,noheader,nounits").splitlines()
    assert lines[0] == ("0, 0000:c1:00.0, amd, amdgpu, AMD Instinct MI250X, 500, [N/A], [N/A], 560, 500, 120, [N/A], "
                        "holds, yes, cdna2, AMD_INSTINCT_MI250X, [N/A], auto sustained efficient low peak")
    assert len(lines) == 8
    assert _ok(cli, "--root", mi250x, "discover", "-o", "csv", "--no-headers").splitlines()[0].startswith(
        "0, 0000:c1:00.0, amd, amdgpu, AMD Instinct MI250X, 500 W, ")


def test_discover_wide_adds_columns(cli, mi250x: Path) -> None:
    table = _ok(cli, "--root", mi250x, "discover").splitlines()
    wide = _ok(cli, "--root", mi250x, "discover", "-o", "wide").splitlines()
    head = next(line for line in table if line.startswith("IDX"))
    assert head.split() == ["IDX", "BUS", "ID", "VENDOR", "DRIVER", "MODEL", "CAP", "RANGE", "DEFAULT", "POWER",
                            "MODE", "LIMIT", "CONTROL"]
    wide_head = next(line for line in wide if line.startswith("IDX"))
    assert wide_head.startswith(head.rstrip())
    assert wide_head[len(head.rstrip()):].split() == ["ARCH", "CATALOG", "KEY", "UUID", "PRESETS"]
    row = next(line for line in wide if line.startswith("0 "))
    assert row.split()[-4:] == ["cdna2", "AMD_INSTINCT_MI250X", "-", "auto,sustained,efficient,low,peak"]


def test_discover_name_jsonpath_custom_columns(cli, mi250x: Path) -> None:
    assert _ok(cli, "--root", mi250x, "discover", "-o", "name") == "nodehardware.joulie.io/mi250x-node-01\n"
    assert _ok(cli, "--root", mi250x, "discover", "-o", "jsonpath={.status.gpu.devices[0:3].busId}") == (
        "0000:c1:00.0 0000:c6:00.0 0000:c9:00.0")
    template = '{range .status.gpu.devices[?(@.holdsLimit==true)]}{.busId}={.currentCapWatts}{"\\n"}{end}'
    assert _ok(cli, "--root", mi250x, "discover", "-o", f"jsonpath={template}") == (
        "0000:c1:00.0=500\n0000:c9:00.0=500\n0000:d1:00.0=500\n0000:d9:00.0=500\n")
    assert _ok(cli, "--root", mi250x, "discover", "-o", "custom-columns=NODE:.metadata.name,GPUS:.status.gpu.count,"
               "MISSING:.status.nosuch") == "NODE            GPUS    MISSING\nmi250x-node-01  8       <none>\n"
    assert _ok(cli, "--root", mi250x, "discover", "-o", "custom-columns=NODE:{.metadata.name}", "--no-headers") == (
        "mi250x-node-01\n")


def test_discover_no_headers_drops_header_rows_and_titles(cli, mi250x: Path) -> None:
    out = _ok(cli, "--root", mi250x, "discover", "--no-headers")
    assert "IDX" not in out and "GPUs: 8" not in out and "HOST" not in out
    assert "0  0000:c1:00.0  amd  amdgpu  AMD Instinct MI250X  500 W  ?–560 W  500 W  120 W  -  holds" in out


@pytest.mark.parametrize(("value", "message"), [
    ("xml", f"'xml' is not one of {REPORT}, prometheus"),
    ("jsonpath", "jsonpath needs a TEMPLATE: -o jsonpath=TEMPLATE"),
    ("jsonpath={.status.gpu", "jsonpath '{.status.gpu': unclosed action: a '{' has no '}'"),
    ("jsonpath={range .items[*]}{.a}", "jsonpath '{range .items[*]}{.a}': unclosed range: {range ...} needs an {end}"),
    ("jsonpath={.a[x]}", "jsonpath '{.a[x]}': invalid array index [x]"),
    ("custom-columns=NAME", "custom-columns 'NAME': unexpected custom-columns spec: 'NAME', expected "
                            "<header>:<json-path-expr>"),
    ("custom-columns=", "custom-columns needs a SPEC: -o custom-columns=SPEC"),
    ("csv,bogus", "csv takes noheader and nounits (as nvidia-smi --format does), not 'bogus'"),
    ("wide=1", "wide takes no '=': 'wide=1'"),
])
def test_a_bad_format_is_exit_2_naming_the_problem(cli, mi250x: Path, value: str, message: str) -> None:
    r = cli("--root", mi250x, "discover", "-o", value)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"joulectl: error: -o: {message}\n")


def test_a_bad_template_is_refused_before_any_work(cli, tmp_path: Path) -> None:
    """The template is checked while parsing flags: no node is read (this root does not exist)."""
    r = cli("--root", tmp_path / "missing", "governor", "show", "-o", "jsonpath={.a")
    assert (r.exit_code, r.stderr) == (2, "joulectl: error: -o: jsonpath '{.a': unclosed action: a '{' has no '}'\n")


# --- governor show ---------------------------------------------------------------------------------

def test_governor_show_formats(cli, mi250x: Path) -> None:
    show = ("--root", mi250x, "governor", "show", "--gpu")
    names = _ok(cli, *show, "-o", "name").splitlines()
    assert names == [f"device/0000:{b}:00.0" for b in ("c1", "c6", "c9", "ce", "d1", "d6", "d9", "de")]
    csv = _ok(cli, *show, "-o", "csv").splitlines()
    assert csv[0] == "device, vendor, name, preset, set_by, in_force, clocks, status, presets, message"
    assert csv[1] == ("0000:c1:00.0, amd, AMD Instinct MI250X, [N/A], [N/A], auto, sclk level 1 (1300 MHz), [N/A], "
                      "auto sustained efficient low peak, [N/A]")
    assert _ok(cli, *show, "--no-headers") == "0000:c1:00.0 .. 0000:de:00.0 (8)  AMD Instinct MI250X  -  -  auto  -\n"
    assert _ok(cli, *show, "-o", "wide", "--no-headers") == (
        "0000:c1:00.0 .. 0000:de:00.0 (8)  AMD Instinct MI250X  -  -  auto  sclk level 1 (1300 MHz)  -  "
        "auto,sustained,efficient,low,peak\n")
    table = _ok(cli, *show).splitlines()
    assert table[1].split() == ["DEVICE", "MODEL", "PRESET", "SET", "BY", "IN", "FORCE", "STATUS", "MESSAGE"]
    wide = _ok(cli, *show, "-o", "wide").splitlines()
    assert wide[1].split() == ["DEVICE", "MODEL", "PRESET", "SET", "BY", "IN", "FORCE", "CLOCKS", "STATUS", "PRESETS",
                               "MESSAGE"]
    assert _ok(cli, *show, "-o", "custom-columns=DEVICE:.device,LEVEL:.inForce").splitlines()[:2] == [
        "DEVICE        LEVEL", "0000:c1:00.0  auto"]


# --- plan, schedule-check, simulate ----------------------------------------------------------------

def test_plan_formats(cli) -> None:
    assert _ok(cli, "plan", CLUSTER, "-o", "name").splitlines()[:3] == [
        "nodetwin.joulie.io/cpu-0", "nodetwin.joulie.io/cpu-1", "nodetwin.joulie.io/cpu-2"]
    csv = _ok(cli, "plan", CLUSTER, "-o", "csv").splitlines()
    assert csv[:3] == [
        "node, profile, class, gpu.count, gpu.power_domains, gpu.cap [%], gpu.cap_per_gpu [W], gpu.governor, "
        "cpu.cap [%], cpu.cap_watts [W], tdp [W], budget [W], power.measured [W], headroom, cooling, family, "
        "density, notes",
        "cpu-0, performance, performance, 0, 0, [N/A], [N/A], [N/A], 100 %, [N/A], 540 W, 540 W, 0 W, 100, 0, "
        "cpu:INTEL_XEON_GOLD_6530, 16384, [N/A]",
        "cpu-1, eco, eco, 0, 0, [N/A], [N/A], [N/A], 60 %, [N/A], 540 W, 324 W, 0 W, 100, 0, "
        "cpu:INTEL_XEON_GOLD_6530, 16384, [N/A]",
    ]
    table = _ok(cli, "plan", CLUSTER).splitlines()
    assert table[0].split() == ["NODE", "PROFILE", "CLASS", "GPUS", "GPU", "CAP", "GOVERNOR", "CPU", "CAP", "TDP",
                                "BUDGET", "HEADROOM", "COOLING", "NOTES"]
    wide = _ok(cli, "plan", CLUSTER, "-o", "wide").splitlines()
    assert wide[0].split() == ["NODE", "PROFILE", "CLASS", "GPUS", "GPU", "CAP", "GOVERNOR", "CPU", "CAP", "TDP",
                               "BUDGET", "MEASURED", "HEADROOM", "COOLING", "FAMILY", "DENSITY", "NOTES"]
    assert wide[1].split() == ["cpu-0", "performance", "performance", "-", "-", "-", "100%", "540", "W", "540", "W",
                               "0", "W", "100", "0", "cpu:INTEL_XEON_GOLD_6530", "16384"]
    template = '{range .items[0:2]}{.metadata.name}={.spec.profile}{"\\n"}{end}'
    assert _ok(cli, "plan", CLUSTER, "-o", f"jsonpath={template}") == "cpu-0=performance\ncpu-1=eco\n"
    rows = _ok(cli, "plan", CLUSTER, "-o", "custom-columns=NODE:.metadata.name,PROFILE:.spec.profile",
               "--no-headers").splitlines()
    assert [r.split() for r in rows[:2]] == [["cpu-0", "performance"], ["cpu-1", "eco"]]


def test_schedule_check_formats(cli) -> None:
    check = ("schedule-check", "--spec", CLUSTER, TRAINING)
    assert _ok(cli, *check, "-o", "name") == "pod/llm-train\n"
    both = ("schedule-check", "--spec", CLUSTER, str(REPO / "examples" / "pods" / "inference-deployment.yaml"),
            str(REPO / "examples" / "pods" / "nightly-cronjob.yaml"), "-o", "name")
    r = cli(*both)
    assert r.stdout == "deployment.apps/embeddings\ncronjob.batch/nightly-eval\n"  # kubectl's resource.group/name
    assert _ok(cli, *check, "-o", "csv,nounits") == (
        "namespace, name, kind, class, gpus, replicas, fits, best_node, nodes.fitting, nodes.checked\n"
        "ml, llm-train, Pod, performance, 8, 1, yes, reserved-0, 3, 17\n")
    assert _ok(cli, *check, "-o", "jsonpath={.pods[*].bestNode}") == "reserved-0"
    assert _ok(cli, *check, "-o", "custom-columns=POD:.name,BEST:.bestNode,FITS:.feasible") == (
        "POD        BEST        FITS\nllm-train  reserved-0  true\n")


def test_simulate_profiles_formats(cli) -> None:
    names = _ok(cli, "simulate", "profiles", "-o", "name").splitlines()
    assert "hardwareprofile.sim.joulie.io/nvidia-h100-sxm-8gpu" in names and len(names) == len(set(names))
    csv = _ok(cli, "simulate", "profiles", "-o", "csv").splitlines()
    assert csv[0] == ("name, extends, cpu.name, cpu.sockets, cpu.threads, cpufreq.driver, powercap.zones, gpu.name, "
                      "gpu.count, gpu.exposure, sources")
    assert csv[1] == ("amd-epyc-2s-energy-only, [N/A], AMD EPYC 9654 96-Core Processor, 2, 384, amd-pstate-epp, "
                      "package, [N/A], [N/A], [N/A], 36")
    table = _ok(cli, "simulate", "profiles").splitlines()
    assert table[1].split() == ["PROFILE", "EXTENDS", "CPU", "CPUFREQ", "GPUS"]
    wide = _ok(cli, "simulate", "profiles", "-o", "wide").splitlines()
    assert wide[1].split() == ["PROFILE", "EXTENDS", "CPU", "CPUFREQ", "POWERCAP", "GPUS", "SOURCES"]


def test_simulate_status_formats(cli, tmp_path: Path) -> None:
    spec = tmp_path / "one.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: one}\n"
                    "spec:\n  pools:\n  - {name: mi, profile: amd-instinct-mi250x-4gpu, count: 1}\n")
    root = tmp_path / "sim"
    _ok(cli, "simulate", "render", spec, "--root", root)
    assert _ok(cli, "simulate", "status", "--root", root, "-o", "name") == "node/mi-0\n"
    assert _ok(cli, "simulate", "status", "--root", root, "-o", "csv") == (
        "node, profile, ticks, power.draw [W], energy [kJ], caps, governors\n"
        "mi-0, amd-instinct-mi250x-4gpu, 0, [N/A], 0 kJ, pkg0=- pkg1=- gpu0=560W gpu1=0W gpu2=560W gpu3=0W "
        "gpu4=560W gpu5=0W gpu6=560W gpu7=0W, powersave epp=balance_performance gpu=auto\n")
    assert _ok(cli, "simulate", "status", "--root", root, "-o", "custom-columns=NODE:.node,PROFILE:.profile") == (
        "NODE    PROFILE\nmi-0    amd-instinct-mi250x-4gpu\n")
    assert _ok(cli, "simulate", "status", "--root", root).splitlines()[0].split() == [
        "NODE", "PROFILE", "TICKS", "POWER", "ENERGY", "CAPS"]
    assert _ok(cli, "simulate", "status", "--root", root, "-o", "wide").splitlines()[0].split() == [
        "NODE", "PROFILE", "TICKS", "POWER", "ENERGY", "CAPS", "GOVERNORS"]


def test_cap_formats(cli, mi250x: Path) -> None:
    cap = ("--root", mi250x, "cap", "--pct", "80", "--dry-run")
    csv = _ok(cli, *cap, "-o", "csv").splitlines()
    assert csv[:3] == [
        "device, vendor, name, power.limit.before [W], power.limit.target [W], power.limit.after [W], status, message",
        "0000:c1:00.0, amd, AMD Instinct MI250X, 500 W, 448 W, [N/A], planned, would set 448 W",
        "0000:c6:00.0, amd, AMD Instinct MI250X, [N/A], [N/A], [N/A], skipped, limited through primary 0000:c1:00.0",
    ]
    assert _ok(cli, *cap, "-o", "name").splitlines()[:2] == ["device/0000:c1:00.0", "device/0000:c6:00.0"]
    assert _ok(cli, *cap, "-o", "custom-columns=DEV:.device,TARGET:.targetWatts").splitlines()[:3] == [
        "DEV           TARGET", "0000:c1:00.0  448", "0000:c6:00.0  <none>"]
    assert _ok(cli, *cap, "--no-headers").splitlines()[0].split() == [
        "0000:c1:00.0", "AMD", "Instinct", "MI250X", "500", "W", "448", "W", "-", "planned", "would", "set", "448", "W"]
