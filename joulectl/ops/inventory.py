"""The node inventory (host, CPUs, GPUs): what ``discover`` reports, and what cap and governor read.

:func:`inventory` is the one entry point. GPUs come from the vendor backends in the order NVIDIA,
AMD, Intel; NVIDIA keeps its own (NVML / nvidia-smi) order, AMD and Intel are sorted by PCI bus
id, and ``index`` is the position in that final list. A vendor whose GPUs cannot be listed
(nvidia-smi missing, failing or timing out) is reported in ``NodeInventory.gpu_errors``;
everything else is still reported. The renderings are :mod:`joulectl.ops.discover`'s.
"""

from __future__ import annotations

import gc
import re

from joulectl.host import Host
from joulectl.models import Control, CpuInventory, GpuDevice, HostInfo, NodeInventory, PowerRange

__all__ = ["has_token", "inventory", "read_host_info"]


def read_host_info(host: Host, *, virtual: bool, node_name: str | None = None) -> HostInfo:
    """Hostname (``--node-name``, else ``/proc/sys/kernel/hostname``, else ``/etc/hostname``), kernel."""
    name = node_name
    if not name:
        name = host.read_attr("/proc/sys/kernel/hostname").value or None
    if not name:
        name = (host.read_attr("/etc/hostname").value or "").split("\n")[0].strip() or None
    if not name and host.is_live:
        import socket

        name = socket.gethostname()
    kernel = host.read_attr("/proc/sys/kernel/osrelease").value or None
    return HostInfo(hostname=name or "unknown", kernel=kernel, virtual=virtual)


#: The start of /proc/cpuinfo that holds its first processor's block (2 KB on a modern x86 CPU).
_HEAD = 1 << 14


def _unprobed_cpu() -> CpuInventory:
    off = Control(False, "not probed")
    return CpuInventory(
        vendor=None, raw_model=None, model=None, catalog_key=None, exactness="generic", sockets=0, cores=0,
        threads=0, driver=None, available_governors=[], governors=[], epp=[], available_epp=[], turbo=None,
        min_mhz=None, nominal_mhz=None, max_mhz=None, zones=[], policies=[], cap_range_per_socket=PowerRange(),
        control=off, telemetry=off, governor_control=off, virtual=False,
    )


def inventory(host: Host, *, gpus: bool = True, cpu: bool = True, node_name: str | None = None,
              policy_details: bool = False, gpu_details: bool = True) -> NodeInventory:
    """Everything ``discover`` reports about the node under ``host``. Reads only.

    ``policy_details``: every cpufreq policy's CPUs and current clock too (the governor commands);
    discover and cap report the aggregates only (:func:`joulectl.backends.cpu.read_policies`).
    ``gpu_details``: each GPU's catalog entry (``catalog_key``, a missing ``architecture``),
    governor presets, and what the backend reads besides the limits (NVIDIA: architecture,
    clocks and clock tables, by ``-q -x``); a cap in watts or percent needs none of it (the
    catalog and the governor modules cost about 3 ms to load, an eight-H100 ``-q -x`` 5 ms).

    The cyclic collector waits while the inventory is taken: its records, dicts and lists hold no
    cycles, and on a 384-thread host their thousands of allocations ran ten young collections and
    one of the middle generation over the command line's objects (1 ms of a discover, issue 20);
    whatever it leaves is collected after (``discover --watch`` takes one inventory a refresh)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _inventory(host, gpus=gpus, cpu=cpu, node_name=node_name, policy_details=policy_details,
                          gpu_details=gpu_details)
    finally:
        if enabled:
            gc.enable()


def _inventory(host: Host, *, gpus: bool, cpu: bool, node_name: str | None, policy_details: bool,
               gpu_details: bool) -> NodeInventory:
    host.forget()  # read the hardware as it is now (``discover --watch`` takes one inventory a refresh)
    if cpu:
        from joulectl.backends import cpu as cpu_backend

        cpu_inv = cpu_backend.discover(host, details=policy_details)
    else:
        cpu_inv = _unprobed_cpu()
    if not cpu and host.exists("/proc/cpuinfo"):
        # the first CPU's flags, as the CPU inventory reads them (not all 650 KB of a large host's)
        cpu_inv.virtual = has_token(host.read_head("/proc/cpuinfo", _HEAD).split("\n\n", 1)[0], "hypervisor")
    info = read_host_info(host, virtual=cpu_inv.virtual, node_name=node_name)
    devices: list[GpuDevice] = []
    errors: dict[str, str] = {}
    if gpus:
        devices, errors = _discover_gpus(host, details=gpu_details)
        _note_rewritten_defaults(host, devices)
    warnings = [*cpu_inv.warnings]
    for vendor, message in errors.items():
        warnings.append(f"{vendor} GPUs could not be listed: {message}")
    return NodeInventory(host=info, cpu=cpu_inv, gpus=devices, gpu_errors=errors, warnings=warnings)


def has_token(text: str, token: str) -> bool:
    """``token in text.split()`` without splitting: a 224-thread host's ``/proc/cpuinfo`` is 220 KB,
    and splitting it into words costs 3 ms, where a search for the word costs a few µs when it is
    absent (the usual case: ``hypervisor`` is only in a virtual machine's flags)."""
    if token not in text:
        return False
    return re.search(rf"(?<!\S){re.escape(token)}(?!\S)", text) is not None


def _discover_gpus(host: Host, details: bool = True) -> tuple[list[GpuDevice], dict[str, str]]:
    from joulectl.backends import amd, intel, nvidia
    from joulectl.backends.base import BackendUnavailable, governor_presets
    from joulectl.gfd import strip_gfd_suffix

    devices: list[GpuDevice] = []
    errors: dict[str, str] = {}
    for backend in (nvidia, amd, intel):
        # A backend whose discovery runs a tool is probed first (PROBE_FIRST); a sysfs backend's
        # discovery is itself the probe and returns nothing when there is nothing. Each returns
        # its devices in its own order (NVIDIA the driver's index, sysfs by bus id).
        if getattr(backend, "PROBE_FIRST", False) and not backend.is_available(host):
            continue
        try:
            found = backend.discover(host, details=details)
        except BackendUnavailable as e:
            errors[backend.vendor] = str(e)
            continue
        devices.extend(found)
    if details and devices:
        from joulectl.catalog import load

        catalog = load()
    else:
        catalog = None
    for index, dev in enumerate(devices):
        dev.index = index
        dev.model = strip_gfd_suffix(dev.raw_model) if dev.raw_model else None
        if catalog is None:
            continue
        entry = catalog.gpu(dev.raw_model)
        dev.catalog_key = entry.key if entry else None
        if dev.architecture is None and entry is not None and entry.architecture:
            dev.architecture = entry.architecture
        dev.governor_presets = governor_presets(dev, host=host)
    return devices, errors


def _note_rewritten_defaults(host: Host, devices: list[GpuDevice]) -> None:
    """Note a default limit that equals a cap joulectl set on a device whose driver may rewrite
    its default with the cap in force: that default is not the stock limit, and ``cap --restore``
    goes back to the journal's pre-change value. The journal is read only when a device qualifies."""
    same = [d for d in devices if d.default_tracks_cap and d.holds_limit and d.current_cap_w is not None
            and d.cap_range.default_w is not None and abs(d.cap_range.default_w - d.current_cap_w) < 0.01]
    if not same:
        return
    import json

    from joulectl.ops import JOURNAL_PATH

    try:
        text = host.read(JOURNAL_PATH)
    except Exception:  # no journal (a node joulectl never changed: the journal module is not loaded)
        return
    from joulectl.ops.journal import Journal

    try:
        journal = Journal.from_dict(json.loads(text))
    except Exception:  # a journal that cap will report: nothing to compare with
        return
    for d in same:
        original = journal.original(d.bus_id, "capWatts")
        if (not journal.set_by_joulectl(d.bus_id, "capWatts") or isinstance(original, bool)
                or not isinstance(original, (int, float)) or abs(original - (d.current_cap_w or 0)) < 0.01):
            continue
        d.warnings.append(
            f"the default limit reads {d.current_cap_w:g} W, the cap joulectl set: the driver may have rewritten "
            f"it; cap --restore goes back to the journal's {original:g} W"
        )
