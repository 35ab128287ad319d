"""Real Linux tools against rendered node trees: the judge of the emulated sysfs ABI (issue 14).

Each tool runs in a private mount namespace (``unshare -m --propagation private``) with the node's
``sys/`` bound over ``/sys`` and its ``proc/cpuinfo`` over ``/proc/cpuinfo``, so it reads the tree
exactly where it reads a kernel's. Nothing outside the namespace is touched. Writes made by the
tools land in the tree and are taken by the next tick (``simulate run --ticks 1``), then read back
as a kernel shows them.

Expected values are literal: the ids, revisions and topology of the hardware the profiles describe
(their ``sources``), not values taken from the renderer.

The tools are Debian's ``pciutils``, ``util-linux``, ``powercap-utils`` and ``linux-cpupower``
(installed by ``.ci/run``). Outside CI (``CI`` unset) a missing tool or a host where ``unshare -m``
is not allowed skips with the reason; in CI both fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = {"lspci": "pciutils", "lscpu": "util-linux", "unshare": "util-linux", "powercap-info": "powercap-utils",
         "powercap-set": "powercap-utils", "cpupower": "linux-cpupower"}

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: realtools}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.5, gpuUtil: 0.5}
  pools:
  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}
  - {name: epyc, profile: amd-epyc-2s-energy-only, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: mi250x, profile: amd-instinct-mi250x-4gpu, count: 1}
  - {name: flex, profile: intel-flex-170-4gpu, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}
  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}
"""


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        why = ", ".join(f"{t} ({TOOLS[t]})" for t in missing)
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the real tools: missing {why}")
        pytest.skip(f"real tools not installed: {why}")


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    try:
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              text=True, timeout=30)
    except OSError as e:
        return f"unshare failed: {e}"
    return None if proc.returncode == 0 else f"unshare -m is not allowed here: {proc.stderr.strip()}"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = _can_unshare()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real tools in a mount namespace: {why}")
        pytest.skip(why)
    base = tmp_path_factory.mktemp("realtools")
    (base / "spec.yaml").write_text(SPEC)
    root = base / "root"
    proc = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(base / "spec.yaml"),
                           "--root", str(root)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return root


def in_node(node: Path, script: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (sh) with the node's sys/ over /sys and its cpuinfo over /proc/cpuinfo."""
    wrapped = (f"mount --bind {node}/sys /sys && mount --bind {node}/proc/cpuinfo /proc/cpuinfo && "
               f"{{\n{script}\n}}")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", wrapped], capture_output=True,
                          text=True, timeout=timeout)


def tick(root: Path) -> None:
    spec = root.parent / "spec.yaml"
    proc = subprocess.run([sys.executable, "-m", "joulectl", "simulate", "run", str(spec), "--root", str(root),
                           "--ticks", "1", "--fast"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


# -- lspci ---------------------------------------------------------------------------------------

#: node -> (bus ids as lspci prints them, [vendor:device], revision, subsystem [vendor:device])
GPUS = {
    "mi300x-0": (["0c:00.0", "22:00.0", "38:00.0", "5c:00.0", "9f:00.0", "af:00.0", "bf:00.0", "df:00.0"],
                 "1002:74a1", "00", "1002:74a1", "Processing accelerators [1200]"),
    "mi250x-0": (["c1:00.0", "c6:00.0", "c9:00.0", "ce:00.0", "d1:00.0", "d6:00.0", "d9:00.0", "de:00.0"],
                 "1002:740c", "01", "1002:0b0c", "Display controller [0380]"),
    "w7900-0": (["03:00.0"], "1002:7448", "00", "1002:0e0d", "VGA compatible controller [0300]"),
    "flex-0": (["4d:00.0", "50:00.0", "b3:00.0", "b6:00.0"], "8086:56c0", "08", "8086:4905",
               "Display controller [0380]"),
    "h100-0": (["18:00.0", "2a:00.0", "3a:00.0", "5d:00.0", "9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"],
               "10de:2330", "a1", "10de:16c1", "3D controller [0302]"),
    "l40s-0": (["4f:00.0", "52:00.0", "d6:00.0", "d9:00.0"], "10de:26b9", "a1", "10de:1851",
               "3D controller [0302]"),
}


@pytest.mark.parametrize("node", sorted(GPUS))
def test_lspci_lists_every_gpu_with_ids_revision_and_subsystem(trees: Path, node: str) -> None:
    _need("lspci")
    buses, ids, rev, subsys, cls = GPUS[node]
    proc = in_node(trees / node, "lspci -nn -v")
    assert proc.returncode == 0, proc.stderr
    assert "pcilib" not in proc.stderr, proc.stderr
    for bus in buses:
        m = re.search(rf"^{re.escape(bus)} (.*)$", proc.stdout, re.MULTILINE)
        assert m, f"{bus} missing from lspci:\n{proc.stdout}"
        line = m.group(1)
        assert line.startswith(cls), line
        assert f"[{ids}]" in line, line
        # lspci prints a revision only when it is not 0, as the header holds it
        assert line.endswith(f"(rev {rev})") if rev != "00" else "(rev" not in line, line
    assert proc.stdout.count(f"[{subsys}]") >= len(buses), proc.stdout
    assert "rev ff" not in proc.stdout
    # lspci reads the interrupt line, the NUMA node and the kernel driver of each function
    assert "IRQ " in proc.stdout and "NUMA node " in proc.stdout
    assert "Kernel driver in use: " in proc.stdout


def test_lspci_shows_the_epyc_k10temp_functions(trees: Path) -> None:
    _need("lspci")
    proc = in_node(trees / "epyc-0", "lspci -nn -k")
    assert proc.returncode == 0, proc.stderr
    # Genoa's data fabric function 3 (family 19h model 10h..1fh: PCI id 14b3), one per socket
    for bus in ("00:18.3", "00:19.3"):  # every socket's data fabric sits on bus 0 (18h + socket)
        m = re.search(rf"^{re.escape(bus)} Host bridge \[0600\]: .*\[1022:14b3\]$", proc.stdout, re.MULTILINE)
        assert m, proc.stdout
    assert proc.stdout.count("Kernel driver in use: k10temp") == 2


# -- lscpu ---------------------------------------------------------------------------------------

#: node -> (CPUs, sockets, cores per socket, threads per core, NUMA nodes)
TOPOLOGY = {"intel-0": (128, 2, 32, 2), "epyc-0": (384, 2, 96, 2), "flex-0": (128, 2, 32, 2)}


def _lscpu(trees: Path, node: str) -> dict[str, str]:
    proc = in_node(trees / node, "lscpu -J")
    assert proc.returncode == 0, proc.stderr
    return {e["field"].rstrip(":"): e["data"] for e in json.loads(proc.stdout)["lscpu"]}


@pytest.mark.parametrize("node", sorted(TOPOLOGY))
def test_lscpu_topology_is_the_profiles(trees: Path, node: str) -> None:
    _need("lscpu")
    cpus, sockets, cores, threads = TOPOLOGY[node]
    info = _lscpu(trees, node)
    assert info["CPU(s)"] == str(cpus)
    assert info["Socket(s)"] == str(sockets)
    assert info["Core(s) per socket"] == str(cores)
    assert info["Thread(s) per core"] == str(threads)
    assert info["CPU op-mode(s)"] == "32-bit, 64-bit"
    assert info["On-line CPU(s) list"] == f"0-{cpus - 1}"


def test_lscpu_per_cpu_table(trees: Path) -> None:
    _need("lscpu")
    proc = in_node(trees / "intel-0", "lscpu -p=CPU,CORE,SOCKET,NODE")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(",") for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert len(rows) == 128
    # Linux numbering: thread 0 of every core of socket 0, then socket 1, then the siblings
    assert rows[0] == ["0", "0", "0", "0"]
    assert rows[31] == ["31", "31", "0", "0"]
    assert rows[32] == ["32", "32", "1", "1"]
    assert rows[64] == ["64", "0", "0", "0"]
    assert rows[127] == ["127", "63", "1", "1"]


def test_lscpu_flags_of_the_real_cpus(trees: Path) -> None:
    _need("lscpu")
    intel = set(_lscpu(trees, "intel-0")["Flags"].split())
    assert {"fpu", "lm", "constant_tsc", "hwp", "hwp_epp", "avx512f", "amx_tile"} <= intel
    assert "hypervisor" not in intel and "rapl" not in intel  # Intel has no CPUID bit, so no flag, for RAPL
    epyc = set(_lscpu(trees, "epyc-0")["Flags"].split())
    assert {"fpu", "lm", "constant_tsc", "rapl", "cppc", "avx512f", "svm"} <= epyc
    assert "hwp" not in epyc


# -- powercap ------------------------------------------------------------------------------------


def test_powercap_info_reads_the_zones(trees: Path) -> None:
    _need("powercap-info")
    proc = in_node(trees / "intel-0", "powercap-info -p intel-rapl")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("package-0", "package-1", "dram", "psys"):
        assert f"name: {name}" in out
    assert "power_limit_uw: 270000000" in out
    assert "max_power_uw: 270000000" in out
    assert "time_window_us: 999424" in out
    assert "min_power_uw" not in out  # no real RAPL zone has one
    proc = in_node(trees / "intel-0", "powercap-info -p intel-rapl -z 0 -c 1 -U")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"  # PL2 max_power_uw reads 0 on real machines


def test_powercap_set_lands_after_a_tick(trees: Path) -> None:
    _need("powercap-set")
    node = trees / "intel-0"
    limit = node / "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/constraint_0_power_limit_uw"
    proc = in_node(node, "powercap-set -p intel-rapl -z 0 -c 0 -l 200000000")
    assert proc.returncode == 0, proc.stderr
    tick(trees)
    assert limit.read_text() == "200000000\n"
    proc = in_node(node, "powercap-info -p intel-rapl -z 0 -c 0 -l")
    assert proc.stdout.strip() == "200000000"
    out = subprocess.run([sys.executable, "-m", "joulectl", "--root", str(node), "discover", "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"limitWatts": 200' in out.stdout.replace(".0,", ",")


# -- cpupower ------------------------------------------------------------------------------------


def _policy(node: Path, cpu: int, name: str) -> str:
    return (node / f"sys/devices/system/cpu/cpufreq/policy{cpu}/{name}").read_text()


def test_cpupower_frequency_set_lands_as_on_a_kernel(trees: Path) -> None:
    _need("cpupower")
    node = trees / "intel-0"
    script = ("cpupower -c 3 frequency-set -g performance >/dev/null && "
              "cpupower -c 4 frequency-set -u 800MHz >/dev/null && "
              "cpupower -c 5 frequency-set -d 1200MHz >/dev/null")
    proc = in_node(node, script)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    tick(trees)
    assert _policy(node, 3, "scaling_governor") == "performance\n"
    assert _policy(node, 4, "scaling_max_freq") == "800000\n"
    assert _policy(node, 5, "scaling_min_freq") == "1200000\n"
    # and back over the longer value: powersave over performance, 4 GHz over 800 MHz
    proc = in_node(node, "cpupower -c 3 frequency-set -g powersave >/dev/null && "
                         "cpupower -c 4 frequency-set -u 4000MHz >/dev/null")
    assert proc.returncode == 0, proc.stderr
    tick(trees)
    assert _policy(node, 3, "scaling_governor") == "powersave\n"
    assert _policy(node, 4, "scaling_max_freq") == "4000000\n"
    proc = in_node(node, "cpupower -c 4 frequency-info -p")
    assert proc.returncode == 0, proc.stderr
    assert "The governor \"powersave\"" in proc.stdout
    # other policies untouched: every attribute is its own file
    assert _policy(node, 6, "scaling_governor") == "powersave\n"
    assert _policy(node, 6, "cpuinfo_max_freq") == "4000000\n"


def test_cpupower_frequency_info_reads_the_limits(trees: Path) -> None:
    _need("cpupower")
    proc = in_node(trees / "epyc-0", "cpupower -c 0 frequency-info")
    assert proc.returncode == 0, proc.stderr
    assert "driver: amd-pstate-epp" in proc.stdout
    assert "hardware limits: 1.50 GHz - 3.70 GHz" in proc.stdout
