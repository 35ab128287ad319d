"""Shared doubles for the governor tests: hand-written trees, a small fake nvidia-smi, inventories.

The fake nvidia-smi (written into ``<root>/bin``) keeps its state in ``<root>/state/smi.json``:
per GPU the clock table, the locks, the current clocks, and whether ``-lmc`` is refused as on
Ada. It answers ``-q -d SUPPORTED_CLOCKS``, ``-i <bus id> -lgc/-lmc/-rgc/-rmc``,
``--query-gpu=pci.bus_id,clocks.sm,clocks.mem,utilization.gpu``, honours ``HWEMU_UNPRIVILEGED=1`` (exit 4,
"Insufficient Permissions"), and logs every argv. :func:`tick` moves the clocks into the locks,
as the emulator does at its next tick.
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from joulectl.models import (
    Control,
    CpufreqPolicy,
    CpuInventory,
    GpuDevice,
    HostInfo,
    NodeInventory,
    PowerRange,
)

H100_TABLE = {2619: [1980, 1965, 1755, 1500, 1485, 1410, 1200, 900, 345], 1593: [1980, 1755, 1200, 345]}
#: L40S-like: the low memory clock offers only the lower graphics clocks.
L40S_TABLE = {9001: [2520, 2490, 1890, 1875, 1200, 210], 5001: [2520, 1890, 1200, 210], 405: [645, 420, 210]}

FAKE_SMI = r'''#!{python}
import json, os, sys
STATE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "state", "smi.json")
with open(STATE) as fh:
    st = json.load(fh)
argv = sys.argv[1:]
st["calls"].append(argv)
def save():
    with open(STATE, "w") as fh:
        json.dump(st, fh)
def smi_bus(b):
    return "0000" + b.upper()
gpus = st["gpus"]
if argv == ["-q", "-x"]:
    save()
    with open(os.path.join(os.path.dirname(STATE), "q.xml")) as fh:
        sys.stdout.write(fh.read())
    sys.exit(0)
if argv[:3] == ["-q", "-d", "SUPPORTED_CLOCKS"]:
    save()
    print("==============NVSMI LOG==============\n\nAttached GPUs : %d" % len(gpus))
    for bus, g in gpus.items():
        print("GPU " + smi_bus(bus))
        print("    Supported Clocks")
        for mem, gfx in sorted(g["table"].items(), key=lambda kv: -int(kv[0])):
            print("        Memory                            : %s MHz" % mem)
            for c in gfx:
                print("            Graphics                      : %d MHz" % c)
        print()
    sys.exit(0)
if argv and argv[0].startswith("--query-gpu="):
    save()
    for bus, g in gpus.items():
        print("%s, %d, %d, %d" % (smi_bus(bus), g["sm"], g["mem"], g.get("util", 0)))
    sys.exit(0)
if argv[:1] == ["-i"]:
    bus = argv[1].lower()
    if bus.startswith("0000") and len(bus) > 12:
        bus = bus[4:]
    g = gpus.get(bus)
    op = argv[2]
    if g is not None and g.get("hang"):
        import time
        time.sleep(30)
    if g is None:
        print("No devices were found", file=sys.stderr); save(); sys.exit(6)
    if op in ("-ac", "-rac", "--auto-boost-default"):
        save(); sys.exit(99)
    if os.environ.get("HWEMU_UNPRIVILEGED") == "1":
        save()
        print("Unable to set locked clocks for GPU %s: Insufficient Permissions" % smi_bus(bus))
        print("Terminating early due to previous errors.")
        sys.exit(4)
    if op == "-lgc":
        lo, hi = (int(x) for x in argv[3].split(","))
        g["lgc"] = [lo, hi]
        print('GPU clocks set to "(gpuClkMin %d, gpuClkMax %d)" for GPU %s' % (lo, hi, smi_bus(bus)))
    elif op == "-lmc":
        if g.get("lmcUnsupported"):
            print("Setting locked memory clocks is not supported for GPU %s." % smi_bus(bus))
            print("Treating as warning and moving on.")
        else:
            lo, hi = (int(x) for x in argv[3].split(","))
            g["lmc"] = [lo, hi]
            print('Memory clocks set to "(memClkMin %d, memClkMax %d)" for GPU %s' % (lo, hi, smi_bus(bus)))
    elif op == "-rgc":
        g["lgc"] = None
        print("All done.")
    elif op == "-rmc":
        g["lmc"] = None
        print("All done.")
    else:
        print("bad option " + op, file=sys.stderr); save(); sys.exit(2)
    print("All done.")
    save()
    sys.exit(0)
print("unsupported invocation", argv, file=sys.stderr)
save()
sys.exit(2)
'''


def bus(i: int) -> str:
    return f"0000:{0x10 + i:02x}:00.0"


def fake_smi(root: Path, tables: Iterable[dict[int, list[int]]], *, lmc_unsupported: bool = False,
             buses: list[str] | None = None) -> None:
    """Install the fake nvidia-smi in ``root/bin`` with one GPU per clock table."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(parents=True, exist_ok=True)
    gpus = {}
    for i, table in enumerate(tables):
        top = max(table)
        gpus[buses[i] if buses else bus(i)] = {"table": {str(k): v for k, v in table.items()}, "lgc": None, "lmc": None,
                        "sm": max(table[top]), "mem": top, "lmcUnsupported": lmc_unsupported}
    (root / "state" / "smi.json").write_text(json.dumps({"gpus": gpus, "calls": []}))
    script = root / "bin" / "nvidia-smi"
    script.write_text(FAKE_SMI.replace("{python}", sys.executable))
    script.chmod(0o755)


def nvidia_node(root: Path, tables: list[dict[int, list[int]]], *, product: str = "NVIDIA H100 80GB HBM3",
                architecture: str = "Hopper", lmc_unsupported: bool = False) -> list[str]:
    """A two-socket Xeon host with NVIDIA GPUs that discover finds (``nvidia-smi -q -x``) and the
    fake nvidia-smi locks; returns the bus ids."""
    import trees

    buses = [f"0000:{0x18 + 0x11 * i:02x}:00.0" for i in range(len(tables))]
    trees.intel_2s_host(root, "gpu-node-01")
    trees.nvidia_pci(root, buses)
    gpus = [trees.smi_gpu_xml(b, i, schema="new", product=product, architecture=architecture, clocks=t)
            for i, (b, t) in enumerate(zip(buses, tables, strict=True))]
    fake_smi(root, tables, lmc_unsupported=lmc_unsupported, buses=buses)
    (root / "state" / "q.xml").write_text(trees.smi_document(gpus, schema="new"))
    return buses


def smi_state(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "state" / "smi.json").read_text())
    return data


def set_smi(root: Path, bus_id: str, **values: Any) -> None:
    st = smi_state(root)
    st["gpus"][bus_id].update(values)
    (root / "state" / "smi.json").write_text(json.dumps(st))


def tick(root: Path) -> None:
    """Run every GPU busy (100 %), its clocks moved into its locks (a memory lock bounds graphics)."""
    st = smi_state(root)
    for g in st["gpus"].values():
        g["util"] = 100
        table = {int(k): v for k, v in g["table"].items()}
        mem = max(table)
        if g["lmc"]:
            mem = max(m for m in table if g["lmc"][0] <= m <= g["lmc"][1])
        sm = max(table[mem])
        if g["lgc"]:
            sm = max(min(sm, g["lgc"][1]), g["lgc"][0])
        g["sm"], g["mem"] = sm, mem
    (root / "state" / "smi.json").write_text(json.dumps(st))


def nvidia_gpu(i: int, table: dict[int, list[int]] | None = None, *, arch: str | None = "hopper",
               model: str = "NVIDIA H100 80GB HBM3", with_table: bool = True) -> GpuDevice:
    return GpuDevice(
        index=i, bus_id=bus(i), vendor="nvidia", driver="nvidia", raw_model=model, model=model,
        cap_range=PowerRange(200, 700, 700), current_cap_w=700, control=Control(True), architecture=arch,
        supported_clocks=dict(table or H100_TABLE) if with_table else None,
    )


def amd_gpu(i: int, *, model: str = "AMD Instinct MI300X", level: str | None = "auto",
            sclk: list[int] | None = None) -> GpuDevice:
    return GpuDevice(
        index=i, bus_id=bus(i), vendor="amd", driver="amdgpu", raw_model=model, model=model,
        cap_range=PowerRange(0, 750, 750), current_cap_w=750, control=Control(True), perf_level=level,
        sclk_levels_mhz=sclk,
    )


def intel_gpu(i: int) -> GpuDevice:
    return GpuDevice(index=i, bus_id=bus(i), vendor="intel", driver="i915",
                     raw_model="Intel Data Center GPU Flex 170", model="Intel Data Center GPU Flex 170",
                     control=Control(True))


def amd_tree(root: Path, i: int, *, level: str = "auto", sclk_mhz: Iterable[int] = (500, 1100, 1700, 2100),
             current: int = 0) -> None:
    d = root / "sys" / "bus" / "pci" / "devices" / bus(i)
    d.mkdir(parents=True, exist_ok=True)
    (d / "power_dpm_force_performance_level").write_text(level + "\n")
    (d / "pp_dpm_sclk").write_text(
        "".join(f"{n}: {mhz}Mhz{' *' if n == current else ''}\n" for n, mhz in enumerate(sclk_mhz)))


def policy_tree(root: Path, n: int, *, driver: str = "intel_pstate", governor: str = "powersave",
                epp: str | None = "balance_performance",
                governors: str = "performance powersave") -> CpufreqPolicy:
    d = root / "sys" / "devices" / "system" / "cpu" / "cpufreq" / f"policy{n}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "scaling_driver").write_text(driver + "\n")
    (d / "scaling_governor").write_text(governor + "\n")
    (d / "scaling_available_governors").write_text(governors + "\n")
    if epp is not None:
        (d / "energy_performance_preference").write_text(epp + "\n")
        (d / "energy_performance_available_preferences").write_text(
            "default performance balance_performance balance_power power\n")
    return CpufreqPolicy(
        name=f"policy{n}", path=f"/sys/devices/system/cpu/cpufreq/policy{n}", cpus=[n], driver=driver,
        governor=governor, available_governors=governors.split(), epp=epp,
        available_epp=["default", "performance", "balance_performance", "balance_power", "power"] if epp else [],
        min_khz=800000, max_khz=3800000, base_khz=2100000, cur_khz=2100000,
    )


def inventory(gpus: list[GpuDevice], policies: list[CpufreqPolicy] | None = None) -> NodeInventory:
    cpu = CpuInventory(
        vendor="Intel", raw_model="Intel(R) Xeon(R) Platinum 8480+", model="Intel Xeon Platinum 8480+",
        catalog_key=None, exactness="generic", sockets=2, cores=112, threads=224, driver="intel_pstate",
        available_governors=[], governors=[], epp=[], available_epp=[], turbo=True, min_mhz=800,
        nominal_mhz=2000, max_mhz=3800, zones=[], policies=policies or [], cap_range_per_socket=PowerRange(),
        control=Control(True), telemetry=Control(True), governor_control=Control(True), virtual=False,
    )
    return NodeInventory(host=HostInfo("node-a", "6.8.0", False), cpu=cpu, gpus=gpus)


EINVAL, EBUSY, EOPNOTSUPP, EACCES, EPERM, EROFS, EIO = (
    errno.EINVAL, errno.EBUSY, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO)
