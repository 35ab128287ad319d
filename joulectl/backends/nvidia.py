"""NVIDIA GPUs: NVML (nvidia-ml-py) on a live host, else ``nvidia-smi``.

Facts this module relies on, with their sources: docs/hardware.md §5.3 (nvidia-smi options, query
fields, both ``-q -x`` schemas, tokens).

Transport: NVML when the root is ``/`` and ``pynvml`` loads and ``nvmlInit`` succeeds; otherwise
``nvidia-smi -q -x`` (one call for the whole inventory). ``JOULECTL_NVIDIA_TRANSPORT=nvml|smi``
forces one. NVIDIA is present when a PCI function of vendor 0x10de with a GPU class exists, or
``/dev/nvidiactl``, or the tool (or, when forced, the library) answers.

The ``-q -x`` document is parsed by :mod:`joulectl.backends.nvidia_xml` (both schemas); a cap
reads the CSV query :data:`INVENTORY_ARGV` instead (:func:`parse_smi_csv`). Values such as
``700.00 W``; tokens (``N/A``, ``[N/A]``, ``[Not Supported]``...) are unknown, and a GPU whose
limit or range is unknown has no settable power limit.

Two limits are read: the requested one (``power.limit``, ``requested_power_limit`` / legacy
``power_limit``, NVML ``nvmlDeviceGetPowerManagementLimit``) as ``current_cap_w``, and the one in
force after every limiter (``enforced.power.limit``, ``current_power_limit`` / legacy
``enforced_power_limit``, NVML ``nvmlDeviceGetEnforcedPowerLimit``) as ``enforced_cap_w``. A
platform may hold the enforced limit below the request (a cloud H100 at 500 W of 700 W).
Messages of ``nvidia-smi -pl`` map to statuses through :mod:`joulectl.backends.nvidia_messages`.

GPUs keep NVML's / nvidia-smi's own order (the nvidia-smi index).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from joulectl.backends.base import PRIVILEGE_HINT, BackendUnavailable, WriteOutcome, normalize_bus_id
from joulectl.backends.pci import VENDOR_NVIDIA, fmt_w, gpu_functions, range_text, smi_bus_id
from joulectl.host import Host, ToolError, ToolResult
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.units import decimals_end, mw_to_w, w_to_mw

if TYPE_CHECKING:
    from joulectl.backends.nvml import Nvml

vendor = "nvidia"

TRANSPORT_ENV = "JOULECTL_NVIDIA_TRANSPORT"
SMI = "nvidia-smi"
QUERY_ARGV = (SMI, "-q", "-x")
READBACK_ARGV = (SMI, "--query-gpu=pci.bus_id,power.limit,enforced.power.limit", "--format=csv,noheader,nounits")
#: What a cap needs of each GPU (``discover(host, details=False)``), one CSV line a GPU, the name
#: last (the only field whose text is free). A fraction of what ``-q -x`` costs: the document is
#: every counter and every supported clock of every GPU (140 KB on eight H100s), which the driver
#: gathers and joulectl parses.
#: (``power.management`` is not asked: ``<gpu_power_readings>`` has no such element, so a GPU that
#: cannot be capped is found as it is through ``-q -x``, by the write's "not supported" answer.)
INVENTORY_FIELDS = ("pci.bus_id", "uuid", "power.min_limit", "power.max_limit", "power.default_limit",
                    "power.limit", "enforced.power.limit", "power.draw", "mig.mode.current", "persistence_mode",
                    "name")
INVENTORY_ARGV = (SMI, f"--query-gpu={','.join(INVENTORY_FIELDS)}", "--format=csv,noheader,nounits")

#: A number and its unit, as nvidia-smi prints them: read by :func:`_number_text`, without
#: compiling it (0.15 ms of every NVIDIA discover; a test holds the function to the pattern).
_NUMBER = r"^\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$"
_UNIT_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

__all__ = ["discover", "is_available", "parse_smi_csv", "parse_smi_xml", "parse_value", "set_caps", "transport",
           "vendor"]


# -- transport ----------------------------------------------------------------------------------


def _env(host: Host) -> Mapping[str, str]:
    return host.env if host.env is not None else os.environ


def transport(host: Host) -> str | None:
    """The forced transport (``nvml`` or ``smi``) from ``JOULECTL_NVIDIA_TRANSPORT``, else None."""
    value = _env(host).get(TRANSPORT_ENV, "").strip().lower()
    return value if value in ("nvml", "smi") else None


#: discover probes this backend with :func:`is_available` before :func:`discover` (which runs a
#: tool); the sysfs backends' discovery is itself the probe.
PROBE_FIRST = True


def is_available(host: Host) -> bool:
    """NVIDIA PCI GPUs, ``/dev/nvidiactl``, ``nvidia-smi`` on the tool path, or a forced NVML."""
    return (
        bool(gpu_functions(host, VENDOR_NVIDIA))
        or host.exists("/dev/nvidiactl")
        or transport(host) == "nvml"
        or host.which(SMI) is not None
    )


# -- value parsing ---------------------------------------------------------------------------------


def parse_value(value: str | None) -> float | None:
    """``700.00 W``, ``1980 MHz``, ``350`` -> the number; tokens (``N/A``, ``[N/A]``,
    ``[Not Supported]``, ``Unknown Error``...), numbers too large for a float (a 400-digit
    clock) and anything else -> None."""
    text = None if value is None else _number_text(value)
    if text is None:
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def _number_text(value: str) -> str | None:
    """The number of ``value`` as :data:`_NUMBER` matches it (its first group), else None: blanks
    (Unicode's, as ``\\s``), a sign, decimal digits (Unicode's, as ``\\d``), an optional fraction,
    blanks, ASCII letters, blanks, the end."""
    text = value.strip()
    at = 1 if text[:1] in ("+", "-") else 0
    digits = decimals_end(text, at)
    if digits == at:
        return None
    if text[digits:digits + 1] == "." and decimals_end(text, digits + 1) > digits + 1:
        digits = decimals_end(text, digits + 1)
    unit = text[digits:].lstrip()
    return text[:digits] if _UNIT_LETTERS.issuperset(unit) else None


def _control(min_w: float | None, max_w: float | None, cap_w: float | None, managed: bool | None) -> Control:
    if managed is False:
        return Control(False, "power management is not supported on this GPU")
    if min_w is None or max_w is None:
        return Control(False, "the power limit range is unknown (the driver reports N/A): no settable power limit")
    if cap_w is None:
        return Control(False, "the power limit is unknown (the driver reports N/A): no settable power limit")
    return Control(True)


def _arch(value: str | None) -> str | None:
    if not value or _number_text(value) is not None or value.strip().startswith(("[", "N/A")):
        return None
    return value.strip().lower().replace(" ", "_")


def _mig(value: str | None) -> str | None:
    if not value:
        return None
    v = value.strip().lower()
    return v if v in ("enabled", "disabled") else None


# -- discover ---------------------------------------------------------------------------------------


def discover(host: Host, *, details: bool = True) -> list[GpuDevice]:
    """Every physical NVIDIA GPU (never MIG devices), in NVML / nvidia-smi order.

    ``details=False`` (a cap): through nvidia-smi, the power limits, identity, MIG and persistence
    modes only (:data:`INVENTORY_ARGV`), no architecture, clocks or clock tables; ``-q -x`` where
    that query fails (a driver without one of its fields). Raises :class:`BackendUnavailable`
    when the GPUs cannot be listed at all.
    """
    forced = transport(host)
    nvml_problem = None
    if forced == "nvml" or (forced is None and host.is_live):
        from joulectl.backends.nvml import NvmlUnavailable  # only here: the nvidia-smi path needs no NVML

        try:
            return _discover_nvml()
        except NvmlUnavailable as e:
            if forced == "nvml":
                raise BackendUnavailable(f"NVML: {e}") from e
            nvml_problem = f"NVML: {e}"
    try:
        return _discover_smi(host, details)
    except BackendUnavailable as e:
        if nvml_problem:
            raise BackendUnavailable(f"{nvml_problem}; {e}") from e
        raise


def _discover_nvml() -> list[GpuDevice]:
    from joulectl.backends.nvml import Nvml, NvmlError, NvmlUnavailable

    with Nvml() as nv:
        try:
            count = int(nv.call("nvmlDeviceGetCount"))
        except NvmlError as e:
            raise NvmlUnavailable(str(e)) from e
        return [_nvml_device(nv, i) for i in range(count)]


def _nvml_device(nv: Nvml, index: int) -> GpuDevice:
    from joulectl.backends.nvml import NvmlError, text

    try:
        h = nv.call("nvmlDeviceGetHandleByIndex", index)
    except NvmlError as e:
        return GpuDevice(
            index=index, bus_id=f"nvidia-index-{index}", vendor=vendor, driver="nvidia", raw_model=None,
            model=None, control=Control(False, f"GPU {index} cannot be opened: {e}"),
        )
    warnings: list[str] = []
    name, _ = nv.try_call("nvmlDeviceGetName", h)
    uuid, _ = nv.try_call("nvmlDeviceGetUUID", h)
    pci, pci_err = nv.try_call("nvmlDeviceGetPciInfo", h)
    bus_raw = text(getattr(pci, "busId", None)) if pci is not None else None
    bus_id = normalize_bus_id(bus_raw) if bus_raw else f"nvidia-index-{index}"
    if pci_err:
        warnings.append(f"PCI bus id unknown ({pci_err})")
    limits, lim_err = nv.try_call("nvmlDeviceGetPowerManagementLimitConstraints", h)
    min_mw, max_mw = (limits[0], limits[1]) if limits else (None, None)
    default_mw, _ = nv.try_call("nvmlDeviceGetPowerManagementDefaultLimit", h)
    cap_mw, cap_err = nv.try_call("nvmlDeviceGetPowerManagementLimit", h)
    enforced_mw, _ = nv.try_call("nvmlDeviceGetEnforcedPowerLimit", h)
    power_mw, _ = nv.try_call("nvmlDeviceGetPowerUsage", h)
    if lim_err:
        warnings.append(f"power limit range unknown ({lim_err})")
    if cap_err:
        warnings.append(f"power limit unknown ({cap_err})")
    mig_modes, _ = nv.try_call("nvmlDeviceGetMigMode", h)
    mig = None
    if mig_modes:
        mig = "enabled" if mig_modes[0] == nv.constant("NVML_DEVICE_MIG_ENABLE") else "disabled"
    arch_code, _ = nv.try_call("nvmlDeviceGetArchitecture", h)
    arch = nv.architecture_name(arch_code) if arch_code is not None else None
    pm, _ = nv.try_call("nvmlDeviceGetPersistenceMode", h)
    persistence = None if pm is None else ("Enabled" if pm else "Disabled")
    supported: dict[int, list[int]] | None = None
    mems, _ = nv.try_call("nvmlDeviceGetSupportedMemoryClocks", h)
    if mems:
        supported = {}
        for mem in sorted((int(m) for m in mems), reverse=True):
            gfx, _ = nv.try_call("nvmlDeviceGetSupportedGraphicsClocks", h, mem)
            supported[mem] = sorted((int(g) for g in gfx or ()), reverse=True)
    clocks: dict[str, Any] = {}
    for key, const in (("graphics_mhz", "NVML_CLOCK_GRAPHICS"), ("memory_mhz", "NVML_CLOCK_MEM")):
        value, _ = nv.try_call("nvmlDeviceGetClockInfo", h, nv.constant(const))
        if value is not None:
            clocks[key] = int(value)
    min_w = mw_to_w(min_mw) if min_mw is not None else None
    max_w = mw_to_w(max_mw) if max_mw is not None else None
    default_w = mw_to_w(default_mw) if default_mw is not None else max_w
    cap_w = mw_to_w(cap_mw) if cap_mw is not None else None
    return GpuDevice(
        index=index,
        bus_id=bus_id,
        vendor=vendor,
        driver="nvidia",
        raw_model=text(name),
        model=None,
        uuid=text(uuid),
        cap_range=PowerRange(min_w, max_w, default_w),
        current_cap_w=cap_w,
        enforced_cap_w=mw_to_w(enforced_mw) if enforced_mw is not None else None,
        power_w=mw_to_w(power_mw) if power_mw is not None else None,
        mig=mig,
        control=_control(min_w, max_w, cap_w, None),
        architecture=arch,
        persistence_mode=persistence,
        supported_clocks=supported,
        clocks=clocks,
        warnings=warnings,
    )


def _run_smi(host: Host, argv: tuple[str, ...]) -> ToolResult:
    try:
        return host.run(argv)
    except ToolError as e:  # missing, timed out, or could not be run
        raise BackendUnavailable(str(e)) from e


def _first_line(*texts: str) -> str:
    for t in texts:
        for line in t.splitlines():
            if line.strip():
                return line.strip()[:200]
    return "no output"


def _discover_smi(host: Host, details: bool) -> list[GpuDevice]:
    if not details:
        res = _run_smi(host, INVENTORY_ARGV)
        if res.returncode == 0:
            try:
                return parse_smi_csv(res.stdout)
            except BackendUnavailable:
                pass  # whatever this driver printed, its -q -x document decides
        # else a driver that does not know a field ('Field "mig.mode.current" is not a valid field
        # to query.'): the whole document has what it knows
    res = _run_smi(host, QUERY_ARGV)
    if res.returncode != 0:
        raise BackendUnavailable(
            f"nvidia-smi -q -x failed (exit {res.returncode}): {_first_line(res.stderr, res.stdout)}"
        )
    return parse_smi_xml(res.stdout)


def parse_smi_xml(xml_text: str) -> list[GpuDevice]:
    """The GPUs of an ``nvidia-smi -q -x`` document (either schema), in document order
    (:func:`joulectl.backends.nvidia_xml.parse_smi_xml`, loaded only where a document is read)."""
    from joulectl.backends.nvidia_xml import parse_smi_xml as parse

    return parse(xml_text)


def _text(value: str) -> str | None:
    return value or None


def parse_smi_csv(text: str) -> list[GpuDevice]:
    """The GPUs of an :data:`INVENTORY_ARGV` answer, in its order (the nvidia-smi index), read as
    :func:`parse_smi_xml` reads the same facts of a ``-q -x`` document (``<gpu_power_readings>``):
    tokens are unknown, a missing default is the maximum. Raises :class:`BackendUnavailable` for a
    line without every field."""
    from joulectl.backends.nvidia_messages import BUS

    count = len(INVENTORY_FIELDS)
    gpus: list[GpuDevice] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",", count - 1)]
        if len(parts) != count:
            raise BackendUnavailable(f"nvidia-smi --query-gpu printed {len(parts)} of the {count} fields asked "
                                     f"in {line.strip()[:200]!r}")
        bus_raw, uuid, min_t, max_t, default_t, limit_t, enforced_t, draw_t, mig, persistence, name = parts
        index = len(gpus)
        min_w, max_w, cap_w = parse_value(min_t), parse_value(max_t), parse_value(limit_t)
        default_w = parse_value(default_t)
        gpus.append(
            GpuDevice(
                index=index,
                bus_id=normalize_bus_id(bus_raw) if re.fullmatch(BUS, bus_raw) else f"nvidia-index-{index}",
                vendor=vendor,
                driver="nvidia",
                raw_model=_text(name),
                model=None,
                uuid=_text(uuid),
                cap_range=PowerRange(min_w, max_w, default_w if default_w is not None else max_w),
                current_cap_w=cap_w,
                enforced_cap_w=parse_value(enforced_t),
                power_w=parse_value(draw_t),
                mig=_mig(mig),
                control=_control(min_w, max_w, cap_w, None),
                persistence_mode=_text(persistence),
            )
        )
    return gpus


# -- set_caps ---------------------------------------------------------------------------------------


def set_caps(host: Host, requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]:
    """Set each GPU's software power limit and read it back.

    NVML: ``nvmlDeviceSetPowerManagementLimit`` (v1, mW; the ``_v2`` binding's return is never
    trusted) then ``nvmlDeviceGetPowerManagementLimit``. nvidia-smi: one ``-i <bus>,... -pl <W>``
    call per distinct target, then one ``--query-gpu=pci.bus_id,power.limit,enforced.power.limit`` readback.
    """
    if not requests:
        return []
    forced = transport(host)
    if forced == "nvml" or (forced is None and host.is_live):
        from joulectl.backends.nvml import NvmlUnavailable  # not on the nvidia-smi path

        try:
            return _set_nvml(requests)
        except NvmlUnavailable as e:
            if forced == "nvml":
                return [WriteOutcome(g.bus_id, Status.ERROR, f"NVML: {e}") for g, _ in requests]
    return _set_smi(host, requests)


def _verified(gpu: GpuDevice, watts: float, back: float | None, enforced: float | None, why: str) -> WriteOutcome:
    """The outcome of a write from the requested limit read back (``back``) and the enforced one.

    The request reads back as written: ``applied``, with a message naming the enforced limit when
    the platform holds it below the request (out-of-band limiters, cloud SXM). It reads back as
    something else: ``error``. It cannot be read: ``applied-unverified`` with ``why``.
    """
    if back is None:
        return WriteOutcome(gpu.bus_id, Status.APPLIED_UNVERIFIED, f"written, readback: {why}")
    if w_to_mw(back) != w_to_mw(watts):
        return WriteOutcome(
            gpu.bus_id, Status.ERROR, f"{gpu.bus_id}: read back {fmt_w(back)} after writing {fmt_w(watts)}", back
        )
    if enforced is not None and w_to_mw(enforced) < w_to_mw(back):
        return WriteOutcome(
            gpu.bus_id,
            Status.APPLIED,
            f"requested {fmt_w(back)}; enforced limit {fmt_w(enforced)} (another limiter holds the GPU below it)",
            back,
        )
    return WriteOutcome(gpu.bus_id, Status.APPLIED, "", back)


def _set_nvml(requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]:
    from joulectl.backends.nvml import Nvml, NvmlError

    out = []
    with Nvml() as nv:
        for gpu, watts in requests:
            mw = w_to_mw(watts)
            try:
                h = nv.call("nvmlDeviceGetHandleByPciBusId", smi_bus_id(gpu.bus_id))
                nv.call("nvmlDeviceSetPowerManagementLimit", h, mw)
            except NvmlError as e:
                if e.status is Status.REFUSED:
                    msg = f"NVML: {e} ({PRIVILEGE_HINT})"
                elif e.status is Status.BLOCKED:
                    rng = range_text(gpu.cap_range.min_w, gpu.cap_range.max_w)
                    msg = f"NVML: {e}: {fmt_w(watts)} is outside the range {rng}"
                else:
                    msg = f"NVML: {e}"
                out.append(WriteOutcome(gpu.bus_id, e.status, msg))
                continue
            back, reason = nv.try_call("nvmlDeviceGetPowerManagementLimit", h)
            enforced, _ = nv.try_call("nvmlDeviceGetEnforcedPowerLimit", h)
            out.append(_verified(gpu, watts, None if back is None else mw_to_w(back),
                                 None if enforced is None else mw_to_w(enforced), str(reason)))
    return out


def _watts_arg(watts: float) -> str:
    return f"{watts:.2f}".rstrip("0").rstrip(".")


def _set_smi(host: Host, requests: list[tuple[GpuDevice, float]]) -> list[WriteOutcome]:
    results: dict[str, WriteOutcome] = {}
    groups: dict[int, list[tuple[GpuDevice, float]]] = {}
    for gpu, watts in requests:
        groups.setdefault(w_to_mw(watts), []).append((gpu, watts))
    for group in groups.values():
        results.update(_smi_set_group(host, group))
    applied = [(g, w) for g, w in requests if results[g.bus_id].status is Status.APPLIED]
    if applied:
        readback, problem = _smi_readback(host)
        for gpu, watts in applied:
            back, enforced = readback.get(gpu.bus_id, (None, None))
            why = problem or f"power.limit of {gpu.bus_id} is unknown"
            results[gpu.bus_id] = _verified(gpu, watts, back, enforced, why)
    return [results[g.bus_id] for g, _ in requests]


def _smi_set_group(host: Host, group: list[tuple[GpuDevice, float]]) -> dict[str, WriteOutcome]:
    """One ``-i <bus>,... -pl <W>`` call; each GPU's status from the message table."""
    watts = group[0][1]
    ids = ",".join(smi_bus_id(g.bus_id) for g, _ in group)
    argv = (SMI, "-i", ids, "-pl", _watts_arg(watts))
    try:
        res = host.run(argv)
    except ToolError as e:
        return {g.bus_id: WriteOutcome(g.bus_id, Status.ERROR, f"nvidia-smi -pl: {e}") for g, _ in group}
    # The message table (a score of compiled patterns) is imported by the writes alone, not by discover.
    from joulectl.backends.nvidia_messages import decide

    verdicts = decide(f"{res.stdout}\n{res.stderr}", res.returncode, [g.bus_id for g, _ in group])
    out = {}
    for gpu, _ in group:
        v = verdicts[gpu.bus_id]
        bus = gpu.bus_id
        if v is None:
            if res.returncode != 0:
                msg = f"nvidia-smi -pl exited {res.returncode}: {_first_line(res.stderr, res.stdout)}"
            else:
                msg = f"nvidia-smi -pl printed no result for {bus}: {_first_line(res.stdout, res.stderr)}"
            out[bus] = WriteOutcome(bus, Status.ERROR, msg)
        elif v.status is Status.APPLIED:
            out[bus] = WriteOutcome(bus, Status.APPLIED, "", float(v.values[0]) if v.values else None)
        elif v.status is Status.REFUSED:
            out[bus] = WriteOutcome(bus, Status.REFUSED, f"nvidia-smi: Insufficient Permissions ({PRIVILEGE_HINT})")
        elif v.status is Status.BLOCKED and len(v.values) >= 2:
            out[bus] = WriteOutcome(
                bus, Status.BLOCKED,
                f"nvidia-smi: {fmt_w(watts)} is not a valid power limit (range {v.values[0]}-{v.values[1]} W)",
            )
        elif v.line:
            out[bus] = WriteOutcome(bus, v.status, f"nvidia-smi: {v.line}")
        else:
            out[bus] = WriteOutcome(
                bus, v.status, f"nvidia-smi -pl exited {res.returncode}: {_first_line(res.stderr, res.stdout)}"
            )
    return out


def _smi_readback(host: Host) -> tuple[dict[str, tuple[float | None, float | None]], str | None]:
    """bus id -> (``power.limit``, ``enforced.power.limit``) watts (None for a token), or ({}, why
    the query failed)."""
    try:
        res = host.run(READBACK_ARGV)
    except ToolError as e:
        return {}, str(e)
    if res.returncode != 0:
        return {}, f"nvidia-smi --query-gpu exited {res.returncode}: {_first_line(res.stderr, res.stdout)}"
    from joulectl.backends.nvidia_messages import BUS

    any_bus = re.compile(BUS)
    values: dict[str, tuple[float | None, float | None]] = {}
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not any_bus.fullmatch(parts[0]):
            continue
        values[normalize_bus_id(parts[0])] = (parse_value(parts[1]), parse_value(parts[2]) if len(parts) > 2 else None)
    return values, None
