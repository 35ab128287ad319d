"""NVIDIA clock-lock transports: nvidia-smi (``-lgc``/``-lmc``/``-rgc``/``-rmc``, one GPU by bus id
per call) and NVML (``nvmlDeviceSet*LockedClocks``), both behind :class:`Transport`.

nvidia-smi's messages map to statuses through :mod:`joulectl.backends.nvidia_messages`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol

from joulectl.backends.base import (
    normalize_bus_id,
)
from joulectl.backends.nvidia_clocks import CallOutcome, ClockLock, ClockSample, normalize_table, parse_supported_clocks
from joulectl.host import Host, ToolError, ToolTimeout
from joulectl.models import GpuDevice, Status


class Transport(Protocol):
    name: str

    def lock(self, device: GpuDevice, domain: str, lock: ClockLock) -> CallOutcome: ...

    def reset(self, device: GpuDevice, domain: str) -> CallOutcome: ...

    def supported_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, dict[int, list[int]]]: ...

    def sample_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, ClockSample]: ...


_SMI_FLAGS = {("lock", "graphics"): "-lgc", ("lock", "memory"): "-lmc",
              ("reset", "graphics"): "-rgc", ("reset", "memory"): "-rmc"}


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


class SmiTransport:
    """nvidia-smi, one call per lock, addressed by bus id."""

    name = "nvidia-smi"

    def __init__(self, host: Host) -> None:
        self.host = host
        #: set by the first call that timed out: the governor tries no other GPU after it
        self.timed_out: str | None = None

    def _call(self, device: GpuDevice, args: list[str], what: str) -> CallOutcome:
        from joulectl.backends.nvidia_messages import decide
        from joulectl.backends.pci import smi_bus_id

        argv = ["nvidia-smi", "-i", smi_bus_id(device.bus_id), *args]
        command = " ".join(argv)
        try:
            res = self.host.run(argv)
        except ToolError as e:
            if isinstance(e, ToolTimeout):
                self.timed_out = f"nvidia-smi timed out on {device.bus_id} ({what}); the other GPUs would wait as long"
            return CallOutcome(Status.ERROR, f"{what}: {e}", command)
        out = (res.stdout + "\n" + res.stderr).strip()
        verdict = decide(out, res.returncode, [device.bus_id])[device.bus_id]
        if verdict is not None and verdict.status is Status.REFUSED:
            return CallOutcome(Status.REFUSED, f"{what}: insufficient permissions", command)
        if verdict is not None and verdict.status is Status.UNSUPPORTED and verdict.line:
            return CallOutcome(Status.UNSUPPORTED, f"{what}: {verdict.line.rstrip('.')}", command)
        if res.returncode != 0 or (verdict is not None and verdict.status is not Status.APPLIED):
            detail = _first_line(res.stderr) or _first_line(res.stdout) or f"exit {res.returncode}"
            status = verdict.status if verdict is not None else Status.ERROR
            return CallOutcome(status, f"{what}: nvidia-smi failed (exit {res.returncode}): {detail}", command)
        return CallOutcome(Status.APPLIED_UNVERIFIED if args[0] in ("-lgc", "-lmc") else Status.APPLIED,
                           "", command)

    def lock(self, device: GpuDevice, domain: str, lock: ClockLock) -> CallOutcome:
        return self._call(device, [_SMI_FLAGS[("lock", domain)], lock.text()], f"{domain} clock lock")

    def reset(self, device: GpuDevice, domain: str) -> CallOutcome:
        return self._call(device, [_SMI_FLAGS[("reset", domain)]], f"{domain} clock reset")

    def supported_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, dict[int, list[int]]]:
        try:
            res = self.host.run(["nvidia-smi", "-q", "-d", "SUPPORTED_CLOCKS"])
        except ToolError:
            return {}
        return parse_supported_clocks(res.stdout) if res.returncode == 0 else {}

    def sample_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, ClockSample]:
        """Graphics (SM) and memory clocks in MHz and utilization per bus id, one query for every GPU."""
        try:
            res = self.host.run(["nvidia-smi", "--query-gpu=pci.bus_id,clocks.sm,clocks.mem,utilization.gpu",
                                 "--format=csv,noheader,nounits"])
        except ToolError:
            return {}
        if res.returncode != 0:
            return {}
        out: dict[str, ClockSample] = {}
        for line in res.stdout.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 3 or ":" not in cells[0]:
                continue
            util = _int_or_none(cells[3]) if len(cells) > 3 else None
            out[normalize_bus_id(cells[0])] = ClockSample(_int_or_none(cells[1]), _int_or_none(cells[2]), util)
        return out


def _int_or_none(text: str) -> int | None:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", text)
    if not m:
        return None
    number = float(m.group(1))
    return round(number) if math.isfinite(number) else None  # 400 digits: unknown, not OverflowError


class NvmlTransport:
    """NVML through the shared wrapper (:mod:`joulectl.backends.nvml`); handles by PCI bus id.

    Each call opens its own NVML session, so nothing stays initialised between commands.
    """

    name = "NVML"

    def _run(self, device: GpuDevice, what: str, function: str, *args: int) -> CallOutcome:
        from joulectl.backends.nvml import Nvml, NvmlError, NvmlUnavailable
        from joulectl.backends.pci import smi_bus_id

        command = f"{function}({', '.join([device.bus_id, *(str(a) for a in args)])})"
        try:
            with Nvml() as nv:
                handle = nv.call("nvmlDeviceGetHandleByPciBusId", smi_bus_id(device.bus_id))
                nv.call(function, handle, *args)
        except NvmlUnavailable as e:
            return CallOutcome(Status.ERROR, f"{what}: NVML unavailable: {e}", command)
        except NvmlError as e:
            if e.status == Status.REFUSED:
                return CallOutcome(Status.REFUSED, f"{what}: insufficient permissions (NVML: {e})", command)
            if e.status == Status.UNSUPPORTED:
                return CallOutcome(Status.UNSUPPORTED, f"{what}: not supported for GPU {device.bus_id} "
                                   f"(NVML: {e})", command)
            return CallOutcome(Status.ERROR if e.status != Status.BLOCKED else Status.BLOCKED,
                               f"{what}: NVML: {e}", command)
        locked = function.startswith("nvmlDeviceSet")
        return CallOutcome(Status.APPLIED_UNVERIFIED if locked else Status.APPLIED, "", command)

    def lock(self, device: GpuDevice, domain: str, lock: ClockLock) -> CallOutcome:
        fn = "nvmlDeviceSetGpuLockedClocks" if domain == "graphics" else "nvmlDeviceSetMemoryLockedClocks"
        return self._run(device, f"{domain} clock lock", fn, lock.min_mhz, lock.max_mhz)

    def reset(self, device: GpuDevice, domain: str) -> CallOutcome:
        fn = "nvmlDeviceResetGpuLockedClocks" if domain == "graphics" else "nvmlDeviceResetMemoryLockedClocks"
        return self._run(device, f"{domain} clock reset", fn)

    def supported_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, dict[int, list[int]]]:
        from joulectl.backends.nvml import Nvml, NvmlError, NvmlUnavailable
        from joulectl.backends.pci import smi_bus_id

        out: dict[str, dict[int, list[int]]] = {}
        try:
            with Nvml() as nv:
                for dev in devices:
                    try:
                        h = nv.call("nvmlDeviceGetHandleByPciBusId", smi_bus_id(dev.bus_id))
                        out[dev.bus_id] = normalize_table({
                            int(m): list(nv.call("nvmlDeviceGetSupportedGraphicsClocks", h, m))
                            for m in nv.call("nvmlDeviceGetSupportedMemoryClocks", h)
                        })
                    except NvmlError:
                        continue
        except NvmlUnavailable:
            return {}
        return out

    def sample_clocks(self, devices: Sequence[GpuDevice]) -> dict[str, ClockSample]:
        """Graphics (SM) and memory clocks in MHz (``nvmlDeviceGetClockInfo``) and the GPU
        utilization (``nvmlDeviceGetUtilizationRates``)."""
        from joulectl.backends.nvml import Nvml, NvmlError, NvmlUnavailable
        from joulectl.backends.pci import smi_bus_id

        out: dict[str, ClockSample] = {}
        try:
            with Nvml() as nv:
                for dev in devices:
                    try:
                        h = nv.call("nvmlDeviceGetHandleByPciBusId", smi_bus_id(dev.bus_id))
                    except NvmlError:
                        continue
                    sm, _ = nv.try_call("nvmlDeviceGetClockInfo", h, nv.constant("NVML_CLOCK_SM"))
                    mem, _ = nv.try_call("nvmlDeviceGetClockInfo", h, nv.constant("NVML_CLOCK_MEM"))
                    util, _ = nv.try_call("nvmlDeviceGetUtilizationRates", h)
                    gpu_pct = getattr(util, "gpu", None) if util is not None else None
                    out[dev.bus_id] = ClockSample(None if sm is None else int(sm), None if mem is None else int(mem),
                                                  None if gpu_pct is None else int(gpu_pct))
        except NvmlUnavailable:
            return {}
        return out


def transport(host: Host) -> Transport:
    """The NVIDIA backend's choice: NVML when forced (``JOULECTL_NVIDIA_TRANSPORT=nvml``) or when
    the root is ``/`` and NVML initialises; nvidia-smi otherwise."""
    from joulectl.backends.nvidia import transport as forced_transport
    from joulectl.backends.nvml import Nvml, NvmlUnavailable

    forced = forced_transport(host)
    if forced == "nvml":
        return NvmlTransport()
    if forced is None and host.is_live:
        try:
            with Nvml():
                pass
        except NvmlUnavailable:
            return SmiTransport(host)
        return NvmlTransport()
    return SmiTransport(host)
