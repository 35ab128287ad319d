"""Real Linux tools against nodes served live through FUSE (issue 14): answered at the write.

As tests/sim/test_real_tools.py does for plain trees, each tool runs in a private mount namespace
(``unshare -m --propagation private``) with the node's ``sys/`` bound over ``/sys`` and its
``proc/cpuinfo`` over ``/proc/cpuinfo``; here the node is the one ``simulate run --fuse`` serves,
so a write by the tool is one store, taken or refused by the kernel's rules before the tool's
``write`` returns, and read back at once, with no tick in between (in FUSE mode the tick reads
back no file). Expected values are literal: the kernel's own answers (cpufreq stores a frequency
in kHz and clamps it to the hardware limits, ``cpufreq_verify_within_cpu_limits``; a locked RAPL
limit refuses a store with ENODATA, ``powercap_sys.c``/``intel_rapl_common.c``), the tools' own
output formats.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim.fuse.conftest import Served, requires_fuse
from tests.sim.test_real_tools import _can_unshare, _need

pytestmark = requires_fuse

RAPL = "sys/devices/virtual/powercap/intel-rapl"
CPUFREQ = "sys/devices/system/cpu/cpufreq"


@pytest.fixture(scope="module")
def node(served: Served) -> Iterator[Path]:
    why = _can_unshare()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real tools in a mount namespace: {why}")
        pytest.skip(why)
    yield served.node("intel-0")


def in_node(node: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) with the served node's sys/ over /sys and its cpuinfo over /proc/cpuinfo."""
    wrapped = (f"mount --bind {node}/sys /sys && mount --bind {node}/proc/cpuinfo /proc/cpuinfo && "
               f"{{\n{script}\n}}")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", wrapped], capture_output=True,
                          text=True, timeout=120, check=False)


def _read(node: Path, rel: str) -> str:
    return (node / rel).read_text()


def test_powercap_set_is_in_force_when_the_tool_returns(served: Served, node: Path) -> None:
    _need("powercap-set", "powercap-info")
    limit = f"{RAPL}/intel-rapl:1/constraint_0_power_limit_uw"
    # powercap-set writes "200000000", a NUL and what followed in its buffer: the store ends at the NUL
    proc = in_node(node, "powercap-set -p intel-rapl -z 1 -c 0 -l 200000000")
    assert proc.returncode == 0, proc.stderr
    assert _read(node, limit) == "200000000\n"
    assert (served.root / "intel-0" / limit).read_text() == "200000000\n"  # the simulator's own copy
    proc = in_node(node, "powercap-info -p intel-rapl -z 1 -c 0 -l")
    assert (proc.returncode, proc.stdout) == (0, "200000000\n")
    # a shorter value over a longer one leaves nothing of the old
    proc = in_node(node, "powercap-set -p intel-rapl -z 1 -c 0 -l 95000000")
    assert proc.returncode == 0, proc.stderr
    assert _read(node, limit) == "95000000\n"


def test_powercap_set_of_a_locked_limit_is_refused_by_the_store(node: Path) -> None:
    _need("powercap-set")
    dram = f"{RAPL}/intel-rapl:0/intel-rapl:0:0/constraint_0_power_limit_uw"
    proc = in_node(node, "powercap-set -p intel-rapl -z 0:0 -c 0 -l 10000000")
    assert proc.returncode != 0
    assert os.strerror(errno.ENODATA) in proc.stderr, proc.stderr  # "No data available", from the write
    assert _read(node, dram) == "0\n"


def test_cpupower_frequency_set_is_in_force_when_the_tool_returns(node: Path) -> None:
    _need("cpupower")
    proc = in_node(node, "cpupower -c 12 frequency-set -g performance >/dev/null && "
                         "cpupower -c 13 frequency-set -u 800MHz >/dev/null && "
                         "cpupower -c 14 frequency-set -d 1200MHz >/dev/null")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert _read(node, f"{CPUFREQ}/policy12/scaling_governor") == "performance\n"
    assert _read(node, f"{CPUFREQ}/policy13/scaling_max_freq") == "800000\n"
    assert _read(node, f"{CPUFREQ}/policy14/scaling_min_freq") == "1200000\n"
    # back over the longer values: powersave over performance, 4 GHz over 800 MHz (cpupower writes
    # without O_TRUNC; a file that kept the old tail would read "powersavece" and "8000000")
    proc = in_node(node, "cpupower -c 12 frequency-set -g powersave >/dev/null && "
                         "cpupower -c 13 frequency-set -u 4000MHz >/dev/null")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert _read(node, f"{CPUFREQ}/policy12/scaling_governor") == "powersave\n"
    assert _read(node, f"{CPUFREQ}/policy13/scaling_max_freq") == "4000000\n"
    # a maximum above the hardware's is clamped to cpuinfo_max_freq (4 GHz) at the store
    proc = in_node(node, "cpupower -c 15 frequency-set -u 9000MHz >/dev/null")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert _read(node, f"{CPUFREQ}/policy15/scaling_max_freq") == "4000000\n"
    proc = in_node(node, "cpupower -c 13 frequency-info -p")
    assert proc.returncode == 0, proc.stderr
    assert 'The governor "powersave"' in proc.stdout
    assert _read(node, f"{CPUFREQ}/policy16/scaling_governor") == "powersave\n"  # every policy its own


def test_cpupower_governor_the_driver_lacks_is_refused(node: Path) -> None:
    _need("cpupower")
    proc = in_node(node, "cpupower -c 17 frequency-set -g ondemand")
    assert proc.returncode != 0  # intel_pstate offers performance and powersave only: EINVAL
    assert _read(node, f"{CPUFREQ}/policy17/scaling_governor") == "powersave\n"


def test_lspci_and_lscpu_read_a_served_node(served: Served) -> None:
    _need("lspci", "lscpu")
    flex = served.node("flex-0")
    proc = in_node(flex, "lspci -nn -v")
    assert proc.returncode == 0, proc.stderr
    for bus in ("4d:00.0", "50:00.0", "b3:00.0", "b6:00.0"):  # the four Flex 170s, revision 08
        assert re.search(rf"^{re.escape(bus)} Display controller \[0380\]: .*\[8086:56c0\] \(rev 08\)$",
                         proc.stdout, re.MULTILINE), proc.stdout
    proc = in_node(flex, "lscpu -J")
    assert proc.returncode == 0, proc.stderr
    info = {e["field"].rstrip(":"): e["data"] for e in json.loads(proc.stdout)["lscpu"]}
    assert (info["CPU(s)"], info["Socket(s)"], info["Core(s) per socket"], info["Thread(s) per core"]) == \
        ("128", "2", "32", "2")
