"""The parts of the sysfs ABI real tools read, for the node layout (:mod:`joulectl.sim.template`).

``lspci`` reads each PCI function's ``config`` (the 64-byte type-0 header), ``irq``, ``resource``,
``numa_node`` and the ``driver`` link; ``lscpu`` reads ``cpuN/topology/`` and ``node/nodeN/``;
``cpupower idle-info`` reads ``cpuidle/`` and ``cpuN/cpuidle/stateK/``. The formats are the
kernel's (sources per function); what a real machine would show that a profile does not say (BAR
addresses, IRQ numbers) is an assumption, named as such in the docstring.

Only pure layout here: each function adds entries to a renderer :class:`~joulectl.sim.template.Template`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

R, W = 0o444, 0o644
#: ``PCI_STD_NUM_BARS`` + ROM + the six SR-IOV resources: the lines of a sysfs ``resource`` file
#: (drivers/pci/pci-sysfs.c ``resource_show``, ``PCI_BRIDGE_RESOURCES`` on a CONFIG_PCI_IOV kernel).
RESOURCE_LINES = 13
#: include/linux/ioport.h: IORESOURCE_MEM, _PREFETCH, _MEM_64, _SIZEALIGN
_MEM, _PREFETCH, _MEM_64, _SIZEALIGN = 0x200, 0x2000, 0x100000, 0x40000


class _Template(Protocol):
    dirs: list[str]

    def d(self, path: str) -> None: ...

    def f(self, path: str, content: str | bytes, mode: int = R) -> None: ...

    def a(self, path: str, value: Any, mode: int = R) -> None: ...

    def link(self, path: str, target: str) -> None: ...


# -- CPU sets --------------------------------------------------------------------------------------


def cpumask(cpus: Iterable[int], nr: int) -> str:
    """A CPU set as the kernel prints ``%*pb`` over ``nr`` bits: 32-bit hex chunks, high first.

    (lib/vsprintf.c ``bitmap_string``: the first chunk is as wide as the bits it holds.)
    """
    value = 0
    for c in cpus:
        value |= 1 << c
    chunks = []
    first = nr % 32 or 32
    top = ((nr + 31) // 32 - 1) * 32
    i = top
    width = first
    while i >= 0:
        chunk = (value >> i) & ((1 << width) - 1)
        chunks.append(f"{chunk:0{(width + 3) // 4}x}")
        i -= 32
        width = 32
    return ",".join(chunks)


def cpulist(cpus: Iterable[int]) -> str:
    """A CPU set as the kernel prints ``%*pbl``: ranges, ``0-31,64-95``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


# -- CPU topology, NUMA nodes, cpuidle -----------------------------------------------------------


def topology(t: _Template, order: Sequence[tuple[int, int, int]]) -> None:
    """``cpuN/topology/`` of every logical CPU (Documentation/ABI/stable/sysfs-devices-system-cpu).

    ``order`` is (socket, core, thread) per logical CPU. ``die_id`` 0 (one die per package as the
    kernel numbers it on these parts) and ``cluster_id`` the core id (x86 without cluster
    enumeration reports one cluster per core, as kernels since 5.16 do) are assumptions.
    """
    n = len(order)
    base = "sys/devices/system/cpu"
    by_core: dict[tuple[int, int], list[int]] = {}
    by_socket: dict[int, list[int]] = {}
    for cpu, (s, c, _t) in enumerate(order):
        by_core.setdefault((s, c), []).append(cpu)
        by_socket.setdefault(s, []).append(cpu)
    masks = {k: (cpumask(v, n), cpulist(v)) for k, v in by_core.items()}
    pkg_masks = {k: (cpumask(v, n), cpulist(v)) for k, v in by_socket.items()}
    for cpu, (s, c, _t) in enumerate(order):
        p = f"{base}/cpu{cpu}/topology"
        t.d(p)
        t.a(f"{p}/physical_package_id", s)
        t.a(f"{p}/die_id", 0)
        t.a(f"{p}/cluster_id", c)
        t.a(f"{p}/core_id", c)
        thread_mask, thread_list = masks[(s, c)]
        core_mask, core_list = pkg_masks[s]
        t.a(f"{p}/thread_siblings", thread_mask)
        t.a(f"{p}/thread_siblings_list", thread_list)
        t.a(f"{p}/core_siblings", core_mask)
        t.a(f"{p}/core_siblings_list", core_list)


def numa_nodes(t: _Template, order: Sequence[tuple[int, int, int]]) -> dict[int, list[int]]:
    """``sys/devices/system/node/``: one node per socket (NPS1 / SNC off: an assumption of the
    profiles), ``nodeN/cpulist``, ``cpumap`` and ``distance`` (10 local, 21 remote, the SLIT
    values two-socket servers report). Returns the CPUs of each node."""
    n = len(order)
    nodes: dict[int, list[int]] = {}
    for cpu, (s, _c, _t) in enumerate(order):
        nodes.setdefault(s, []).append(cpu)
    base = "sys/devices/system/node"
    t.d(base)
    ids = sorted(nodes)
    for name in ("online", "possible", "has_cpu", "has_normal_memory"):
        t.a(f"{base}/{name}", cpulist(ids))
    for k in ids:
        p = f"{base}/node{k}"
        t.d(p)
        t.a(f"{p}/cpulist", cpulist(nodes[k]))
        t.a(f"{p}/cpumap", cpumask(nodes[k], n))
        t.a(f"{p}/distance", " ".join("10" if j == k else "21" for j in ids))
        for cpu in nodes[k]:
            t.link(f"{p}/cpu{cpu}", f"../../cpu/cpu{cpu}")
    return nodes


@dataclass(frozen=True)
class IdleState:
    name: str
    desc: str
    latency_us: int
    residency_us: int


def cpuidle(t: _Template, cpus: int, idle: dict[str, Any]) -> None:
    """``cpuidle/current_driver`` and ``current_governor(_ro)``, and per CPU ``cpuidle/stateK/``
    with ``name``, ``desc``, ``latency``, ``usage`` and ``time`` (Documentation/admin-guide/pm/
    cpuidle.rst): what ``cpupower idle-info`` prints. The other state attributes (``residency``,
    ``disable``, ``above``, ``below``, ``rejected``, ``power``, ``default_status``, ``s2idle/``)
    are left out: a two-socket node has 512 states, and every file costs render time."""
    if not idle:
        return
    base = "sys/devices/system/cpu"
    t.d(f"{base}/cpuidle")
    t.a(f"{base}/cpuidle/current_driver", idle.get("driver", "intel_idle"))
    governor = str(idle.get("governor", "menu"))
    t.a(f"{base}/cpuidle/current_governor", governor, W)
    t.a(f"{base}/cpuidle/current_governor_ro", governor)
    t.a(f"{base}/cpuidle/available_governors", " ".join(idle.get("governors") or ["menu"]))
    states = [IdleState(str(s["name"]), str(s.get("desc", s["name"])), int(s.get("latencyUs", 0)),
                        int(s.get("residencyUs", 0))) for s in idle.get("states") or []]
    for cpu in range(cpus):
        p = f"{base}/cpu{cpu}/cpuidle"
        t.d(p)
        for k, st in enumerate(states):
            q = f"{p}/state{k}"
            t.d(q)
            t.a(f"{q}/name", st.name)
            t.a(f"{q}/desc", st.desc)
            t.a(f"{q}/latency", st.latency_us)
            t.a(f"{q}/usage", 0)
            t.a(f"{q}/time", 0)


# -- PCI -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One memory BAR: its index, size in bytes, 64-bit and prefetchable flags."""

    index: int
    size: int
    is64: bool = True
    prefetch: bool = True


@dataclass(frozen=True)
class PciIds:
    """What a PCI function's header says about it (hex strings as sysfs prints them)."""

    vendor: int
    device: int
    pci_class: int
    revision: int
    subsystem_vendor: int
    subsystem_device: int


def _parse_hex(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, int):
        return value
    return int(str(value), 16)


def ids(vendor: Any, device: Any, pci_class: Any, revision: Any, subsystem: Any) -> PciIds:
    """:class:`PciIds` from profile strings: ``subsystem`` ``"0x1002:0x0b0c"`` (vendor:device)."""
    sub_v, _, sub_d = str(subsystem or "").partition(":")
    return PciIds(_parse_hex(vendor), _parse_hex(device), _parse_hex(pci_class), _parse_hex(revision),
                  _parse_hex(sub_v), _parse_hex(sub_d))


def config_header(i: PciIds, bars: Sequence[tuple[Bar, int]], irq: int) -> bytes:
    """The 64-byte type-0 configuration header (PCI Local Bus Specification 3.0, 6.1).

    Command: memory space and bus master on; status: no capability list, fast DEVSEL; interrupt
    pin INTA (1) and line ``irq & 0xff``, as a BIOS leaves them for a function using MSI.
    """
    regs = [0] * 6
    for bar, addr in bars:
        flags = (0x4 if bar.is64 else 0) | (0x8 if bar.prefetch else 0)
        regs[bar.index] = (addr & 0xFFFFFFF0) | flags
        if bar.is64 and bar.index < 5:
            regs[bar.index + 1] = addr >> 32
    command = 0x0006 if bars else 0x0000
    prog_if, sub, base = i.pci_class & 0xFF, (i.pci_class >> 8) & 0xFF, (i.pci_class >> 16) & 0xFF
    head = struct.pack("<HHHHBBBBBBBB", i.vendor, i.device, command, 0x0000, i.revision, prog_if, sub, base,
                       0x10 if bars else 0, 0, 0x00, 0)
    body = struct.pack("<6I", *regs)
    tail = struct.pack("<IHHIB7xBBBB", 0, i.subsystem_vendor, i.subsystem_device, 0, 0, irq & 0xFF,
                       1 if irq else 0, 0, 0)
    data = head + body + tail
    assert len(data) == 64
    return data


def resource_text(bars: Sequence[tuple[Bar, int]]) -> str:
    """The ``resource`` file: ``start end flags`` per resource (pci-sysfs.c ``resource_show``)."""
    lines = [(0, 0, 0)] * RESOURCE_LINES
    for bar, addr in bars:
        flags = _MEM | _SIZEALIGN | (_PREFETCH | 0x8 if bar.prefetch else 0) | (_MEM_64 | 0x4 if bar.is64 else 0)
        lines[bar.index] = (addr, addr + bar.size - 1, flags)
    return "".join(f"0x{a:016x} 0x{b:016x} 0x{c:016x}\n" for a, b, c in lines)


def modalias(i: PciIds) -> str:
    """``pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X`` (pci-driver.c ``pci_uevent``)."""
    return (f"pci:v{i.vendor:08X}d{i.device:08X}sv{i.subsystem_vendor:08X}sd{i.subsystem_device:08X}"
            f"bc{(i.pci_class >> 16) & 0xFF:02X}sc{(i.pci_class >> 8) & 0xFF:02X}i{i.pci_class & 0xFF:02X}")


def pci_function(t: _Template, bdf: str, i: PciIds, driver: str, *, numa: int, local_cpus: Sequence[int],
                 nr_cpus: int, irq: int, bars: Sequence[tuple[Bar, int]] = ()) -> str:
    """A PCI function under ``sys/devices/pciDDDD:BB/`` with the attributes lspci and the kernel's
    uevent show, linked from ``sys/bus/pci/devices`` and its driver. Returns its directory."""
    domain, bus = bdf.split(":")[0], bdf.split(":")[1]
    host = f"sys/devices/pci{domain}:{bus}"
    dev = f"{host}/{bdf}"
    if host not in t.dirs:
        t.d(host)
    t.d(dev)
    t.a(f"{dev}/vendor", f"0x{i.vendor:04x}")
    t.a(f"{dev}/device", f"0x{i.device:04x}")
    t.a(f"{dev}/class", f"0x{i.pci_class:06x}")
    t.a(f"{dev}/revision", f"0x{i.revision:02x}")
    t.a(f"{dev}/subsystem_vendor", f"0x{i.subsystem_vendor:04x}")
    t.a(f"{dev}/subsystem_device", f"0x{i.subsystem_device:04x}")
    t.f(f"{dev}/config", config_header(i, bars, irq), W)
    t.a(f"{dev}/irq", irq)
    t.f(f"{dev}/resource", resource_text(bars))
    t.a(f"{dev}/numa_node", numa)
    t.a(f"{dev}/local_cpulist", cpulist(local_cpus))
    t.a(f"{dev}/local_cpus", cpumask(local_cpus, nr_cpus))
    alias = modalias(i)
    t.a(f"{dev}/modalias", alias)
    t.f(f"{dev}/uevent", (f"DRIVER={driver}\nPCI_CLASS={i.pci_class:X}\nPCI_ID={i.vendor:04X}:{i.device:04X}\n"
                          f"PCI_SUBSYS_ID={i.subsystem_vendor:04X}:{i.subsystem_device:04X}\n"
                          f"PCI_SLOT_NAME={bdf}\nMODALIAS={alias}\n"), W)
    t.a(f"{dev}/enable", 1, W)
    t.link(f"{dev}/driver", f"../../../bus/pci/drivers/{driver}")
    t.link(f"{dev}/subsystem", "../../../bus/pci")
    t.link(f"sys/bus/pci/devices/{bdf}", f"../../../devices/pci{domain}:{bus}/{bdf}")
    t.link(f"sys/bus/pci/drivers/{driver}/{bdf}", f"../../../../devices/pci{domain}:{bus}/{bdf}")
    return dev


def bar_addresses(index: int, bars: Sequence[Bar]) -> list[tuple[Bar, int]]:
    """Addresses for the BARs of the ``index``-th GPU (an assumption: 64-bit BARs 1 TiB apart
    above 16 TiB, 32-bit BARs 32 MiB apart from 0x90000000, as a BIOS might place them)."""
    out = []
    off64 = 0x1000_0000_0000 + index * 0x100_0000_0000
    off32 = 0x9000_0000 + index * 0x200_0000
    for bar in bars:
        if bar.is64:
            off64 = (off64 + bar.size - 1) // bar.size * bar.size
            out.append((bar, off64))
            off64 += bar.size
        else:
            off32 = (off32 + bar.size - 1) // bar.size * bar.size
            out.append((bar, off32))
            off32 += bar.size
    return out


def gpu_bars(vendor: str, memory_mib: int) -> list[Bar]:
    """The memory BARs of a GPU (an assumption after the layouts lspci shows for these vendors):
    NVIDIA BAR0 16 MiB registers, BAR1 the VRAM aperture, BAR3 32 MiB; AMD BAR0 the VRAM
    aperture, BAR2 2 MiB doorbells, BAR5 512 KiB registers; Intel BAR0 16 MiB registers, BAR2
    the local memory aperture. Apertures are the VRAM size rounded up to a power of two."""
    vram = 1 << max(28, (max(1, memory_mib) * 1024 * 1024 - 1).bit_length())
    if vendor == "nvidia":
        return [Bar(0, 16 << 20, False, False), Bar(1, vram), Bar(3, 32 << 20)]
    if vendor == "amd":
        return [Bar(0, vram), Bar(2, 2 << 20), Bar(5, 512 << 10, False, False)]
    return [Bar(0, 16 << 20, True, False), Bar(2, vram)]
