"""NVIDIA GPUs: NVML (nvidia-ml-py) on a live host, else ``nvidia-smi``.

Facts this module relies on, with their sources: docs/hardware.md §5.3 (nvidia-smi options, query
fields, both ``-q -x`` schemas, tokens).

Transport: NVML when the root is ``/`` and ``pynvml`` loads and ``nvmlInit`` succeeds; otherwise
``nvidia-smi -q -x`` (one call for the whole inventory). ``JOULECTL_NVIDIA_TRANSPORT=nvml|smi``
forces one. NVIDIA is present when a PCI function of vendor 0x10de with a GPU class exists, or
``/dev/nvidiactl``, or the tool (or, when forced, the library) answers.

The ``-q -x`` parser reads both schemas: the legacy ``<power_readings>`` (``power_limit``,
``enforced_power_limit``, ``default_power_limit``, ``min_power_limit``, ``max_power_limit``,
``power_draw``) and the newer ``<gpu_power_readings>`` (``requested_power_limit``,
``current_power_limit``, ..., ``power_draw`` or ``average_power_draw``/``instant_power_draw``).
Values such as ``700.00 W``; tokens (``N/A``, ``[N/A]``, ``[Not Supported]``...) are unknown, and
a GPU whose limit or range is unknown has no settable power limit.
The ``<supported_clocks>`` tables (five sixths of an H100 document) are read by regular
expressions where they have nvidia-smi's exact shape, the rest of the document by ElementTree
(:func:`_cut_clock_tables`); anything else is parsed whole.

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
from joulectl.units import mw_to_w, w_to_mw

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

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

_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

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
    if value is None:
        return None
    m = _NUMBER.match(value)
    if not m:
        return None
    number = float(m.group(1))
    return number if math.isfinite(number) else None


def _control(min_w: float | None, max_w: float | None, cap_w: float | None, managed: bool | None) -> Control:
    if managed is False:
        return Control(False, "power management is not supported on this GPU")
    if min_w is None or max_w is None:
        return Control(False, "the power limit range is unknown (the driver reports N/A): no settable power limit")
    if cap_w is None:
        return Control(False, "the power limit is unknown (the driver reports N/A): no settable power limit")
    return Control(True)


def _arch(value: str | None) -> str | None:
    if not value or _NUMBER.match(value) or value.strip().startswith(("[", "N/A")):
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


def _discover_smi(host: Host, details: bool = True) -> list[GpuDevice]:
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


def _find(el: Element, path: str) -> str | None:
    node = el.find(path)
    if node is None or node.text is None:
        return None
    return node.text.strip()


def _first_value(el: Element | None, *names: str) -> float | None:
    if el is None:
        return None
    for n in names:
        v = parse_value(_find(el, n))
        if v is not None:
            return v
    return None


def _first_present(el: Element | None, *names: str) -> float | None:
    """The value of the first of ``names`` the document prints: a token there is unknown, not a
    reason to read the next (a ``requested_power_limit`` of ``N/A`` beside a printed
    ``current_power_limit`` is an unknown limit, not the enforced one)."""
    if el is None:
        return None
    for n in names:
        node = el.find(n)
        if node is not None:
            return parse_value(node.text.strip() if node.text is not None else None)
    return None


#: The XML of a clock table's text and of the blanks between its elements: printable ASCII but
#: ``<``, ``&`` and ``>`` (so no markup, entity or ``]]>``), tab and newline; no carriage return
#: (which an XML parser turns into a newline).
_CLOCK_TEXT = r"[\t\n\x20-\x25\x27-\x3b\x3d\x3f-\x7e]*"
_BLANK = r"[ \t\n]*"
#: The content of ``<supported_clocks>`` as nvidia-smi prints it: memory clocks, each a ``<value>``
#: then its graphics clocks, nothing else (no attribute, comment, entity or empty-element tag).
_CLOCK_BODY = (rf"{_BLANK}(?:<supported_mem_clock>{_BLANK}<value>{_CLOCK_TEXT}</value>{_BLANK}"
               rf"(?:<supported_graphics_clock>{_CLOCK_TEXT}</supported_graphics_clock>{_BLANK})*"
               rf"</supported_mem_clock>{_BLANK})*")
_CLOCK_TEXTS = rf"<(v)alue>({_CLOCK_TEXT})</value>|<supported_graphics_clock>({_CLOCK_TEXT})</supported_graphics_clock>"
_CLOCKS_OPEN, _CLOCKS_CLOSE = "<supported_clocks>", "</supported_clocks>"
#: The attribute a cut table's element carries in the document handed to the XML parser.
_CUT = "_joulectl_cut"

#: One memory clock of a table: the ``<value>`` text (stripped, None when empty) and the texts of
#: its ``<supported_graphics_clock>`` elements (None when empty), as ElementTree reads them.
_MemEntry = tuple[str | None, tuple[str | None, ...]]


def _cut_clock_tables(xml_text: str) -> tuple[str, list[list[_MemEntry]]] | None:
    """The document with the content of each ``<supported_clocks>`` element cut out, and the
    tables cut (the cut element becomes ``<supported_clocks _joulectl_cut="k"/>``, k its table's
    index), or None to parse the document whole.

    An eight-GPU H100 document is 140 KB, five sixths of it ~7,000 graphics clocks, and
    ElementTree builds an element for each; the tables' rigid shape is checked and read here by
    regular expressions instead (one check per distinct table: every GPU of a model prints the
    same one), and the rest of the document is parsed by ElementTree as before. Cut only where
    the string ``<supported_clocks>`` can be nothing but that start tag (no comment, CDATA
    section, processing instruction after the XML declaration, or internal DTD subset in the
    document), and only when every table has exactly the shape above: then ElementTree's tree
    of the cut document differs from the whole one's only in those elements' children and the
    marker attribute, and a document that is not XML gives a cut one that is not either. (Only a
    doctype's quoted system id can still hold the string: cut inside double quotes it ends the
    literal, and :func:`parse_smi_xml` parses the whole document when the cut one fails.)
    """
    if _CLOCKS_OPEN not in xml_text or _CUT in xml_text:
        return None
    # Searched for as "?" and "!", rare characters, not as "<?" and "<!" ("<" is everywhere).
    query = xml_text.find("?")
    if query >= 0:  # only the XML declaration's, at the start
        close = xml_text.find("?>", 2)
        if query != 1 or not xml_text.startswith("<?") or close < 0 or xml_text.find("?", 2) != close:
            return None
        if xml_text.find("?", close + 1) >= 0:
            return None
    bang = xml_text.find("!")
    if bang >= 0:  # only the document type declaration's, with no internal subset
        if not xml_text.startswith("<!DOCTYPE", bang - 1) or xml_text.find("!", bang + 1) >= 0:
            return None
        if xml_text.find("[", bang, xml_text.find(">", bang)) >= 0:
            return None
    body_re = re.compile(_CLOCK_BODY)
    texts_re = re.compile(_CLOCK_TEXTS)
    seen: dict[str, int] = {}
    tables: list[list[_MemEntry]] = []
    pieces: list[str] = []
    pos = 0
    while (start := xml_text.find(_CLOCKS_OPEN, pos)) >= 0:
        body_at = start + len(_CLOCKS_OPEN)
        end = xml_text.find(_CLOCKS_CLOSE, body_at)
        if end < 0:
            return None
        body = xml_text[body_at:end]
        index = seen.get(body)
        if index is None:
            if body_re.fullmatch(body) is None:
                return None
            mems: list[str | None] = []
            graphics: list[list[str | None]] = []
            for is_value, value, clock in texts_re.findall(body):
                if is_value:
                    mems.append(value.strip() if value else None)
                    graphics.append([])
                else:
                    graphics[-1].append(clock or None)
            index = seen[body] = len(tables)
            tables.append([(mem, tuple(gfx)) for mem, gfx in zip(mems, graphics, strict=True)])
        pieces += (xml_text[pos:start], f'<supported_clocks {_CUT}="{index}"/>')
        pos = end + len(_CLOCKS_CLOSE)
    pieces.append(xml_text[pos:])
    return "".join(pieces), tables


def parse_smi_xml(xml_text: str) -> list[GpuDevice]:
    """The GPUs of an ``nvidia-smi -q -x`` document (either schema), in document order."""
    from xml.etree import ElementTree

    cut = _cut_clock_tables(xml_text)
    tables = cut[1] if cut is not None else None
    try:
        try:
            root = ElementTree.fromstring(cut[0] if cut is not None else xml_text)
        except ElementTree.ParseError:
            if cut is None:
                raise
            # The document printed decides: its error (line and column), or its tree (the string
            # "<supported_clocks>...</supported_clocks>" inside a doctype's quoted system id).
            root, tables = ElementTree.fromstring(xml_text), None
    except ElementTree.ParseError as e:
        raise BackendUnavailable(f"nvidia-smi -q -x printed output that is not XML ({e})") from e
    if root.tag != "nvidia_smi_log":
        raise BackendUnavailable(f"nvidia-smi -q -x printed <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    parsed: dict[str | None, float | None] = {}
    memo: dict[tuple[int, ...], dict[int, list[int]] | None] = {}
    for index, el in enumerate(root.findall("gpu")):
        # A blank id="  " (or <pci_bus_id> ) is a missing id: fall back to the index.
        bus_raw = (el.get("id") or "").strip() or _find(el, "pci/pci_bus_id")
        bus_id = normalize_bus_id(bus_raw) if bus_raw else f"nvidia-index-{index}"
        new = el.find("gpu_power_readings")
        legacy = el.find("power_readings")
        readings = new if new is not None else legacy
        if new is not None:
            cap_w = _first_present(new, "requested_power_limit", "current_power_limit", "power_limit")
            enforced_w = _first_value(new, "current_power_limit")
            power_w = _first_value(new, "power_draw", "average_power_draw", "instant_power_draw")
        else:
            cap_w = _first_present(legacy, "power_limit", "enforced_power_limit")
            enforced_w = _first_value(legacy, "enforced_power_limit")
            power_w = _first_value(legacy, "power_draw", "average_power_draw", "instant_power_draw")
        min_w = _first_value(readings, "min_power_limit")
        max_w = _first_value(readings, "max_power_limit")
        default_w = _first_value(readings, "default_power_limit")
        managed = None
        mgmt = _find(legacy, "power_management") if legacy is not None else None
        if mgmt is not None and mgmt.strip().lower() in ("not supported", "[not supported]", "n/a"):
            managed = False
        warnings = []
        if readings is None:
            warnings.append("no power readings in nvidia-smi -q -x")
        supported = _supported_clocks(el, parsed, tables, memo)
        clocks: dict[str, Any] = {}
        for key, path in (("graphics_mhz", "clocks/graphics_clock"), ("memory_mhz", "clocks/mem_clock")):
            v = parse_value(_find(el, path))
            if v is not None:
                clocks[key] = int(v)
        gpus.append(
            GpuDevice(
                index=index,
                bus_id=bus_id,
                vendor=vendor,
                driver="nvidia",
                raw_model=_find(el, "product_name"),
                model=None,
                uuid=_find(el, "uuid"),
                cap_range=PowerRange(min_w, max_w, default_w if default_w is not None else max_w),
                current_cap_w=cap_w,
                enforced_cap_w=enforced_w,
                power_w=power_w,
                mig=_mig(_find(el, "mig_mode/current_mig")),
                control=_control(min_w, max_w, cap_w, managed),
                architecture=_arch(_find(el, "product_architecture")),
                persistence_mode=_find(el, "persistence_mode"),
                supported_clocks=supported,
                clocks=clocks,
                warnings=warnings,
            )
        )
    return gpus


def _supported_clocks(el: Element, parsed: dict[str | None, float | None], tables: list[list[_MemEntry]] | None,
                      memo: dict[tuple[int, ...], dict[int, list[int]] | None]) -> dict[int, list[int]] | None:
    """The supported clock table of one GPU. An H100 lists ~220 graphics clocks under each memory
    clock, the same texts (``1980 MHz``) on every GPU: ``parsed`` keeps each text's value, so
    each is parsed once per document. ``tables``: the tables :func:`_cut_clock_tables` cut out
    of the document, by the index its ``<supported_clocks>`` elements carry; ``memo``: the
    result of each combination of cut tables already read (every GPU of a model prints the same
    table), given to each GPU as a copy."""
    entries, key = _clock_entries(el, tables)
    if key is not None and key in memo:
        known = memo[key]
        return None if known is None else {m: list(g) for m, g in known.items()}
    table: dict[int, list[int]] = {}
    for entry in entries:
        mem = parse_value(entry[0])
        if mem is None:
            continue
        gfx = []
        for text in entry[1]:
            if text not in parsed:
                parsed[text] = parse_value(text)
            gfx.append(parsed[text])
        table[int(mem)] = sorted((int(g) for g in gfx if g is not None), reverse=True)
    result = {m: table[m] for m in sorted(table, reverse=True)} if table else None
    if key is not None:
        memo[key] = None if result is None else {m: list(g) for m, g in result.items()}
    return result


def _clock_entries(el: Element, tables: list[list[_MemEntry]] | None) -> tuple[list[_MemEntry], tuple[int, ...] | None]:
    """The ``supported_clocks/supported_mem_clock`` entries of a GPU element, in document order,
    and the indices of the cut tables they come from (None when a table was not cut)."""
    out: list[_MemEntry] = []
    key: list[int] | None = []
    for clocks in el.findall("supported_clocks"):
        index = clocks.get(_CUT)
        if index is not None and tables is not None:
            out += tables[int(index)]
            if key is not None:
                key.append(int(index))
            continue
        key = None
        for mem_el in clocks.findall("supported_mem_clock"):
            out.append((_find(mem_el, "value"), tuple(g.text for g in mem_el.findall("supported_graphics_clock"))))
    return out, None if key is None else tuple(key)


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
