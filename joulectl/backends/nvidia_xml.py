"""NVIDIA's ``nvidia-smi -q -x`` document read into GPUs (both schemas), for
:mod:`joulectl.backends.nvidia`: discover, the governor, and a cap whose driver refuses the CSV
inventory query.

The legacy ``<power_readings>`` (``power_limit``, ``enforced_power_limit``,
``default_power_limit``, ``min_power_limit``, ``max_power_limit``, ``power_draw``) and the newer
``<gpu_power_readings>`` (``requested_power_limit``, ``current_power_limit``, ..., ``power_draw``
or ``average_power_draw``/``instant_power_draw``). Values such as ``700.00 W``; tokens (``N/A``,
``[N/A]``, ``[Not Supported]``...) are unknown, and a GPU whose limit or range is unknown has no
settable power limit. The ``<supported_clocks>`` tables (five sixths of an H100 document) are read
by regular expressions where they have nvidia-smi's exact shape, the rest of the document by
expat into ElementTree's tree (:func:`parse_xml`, :func:`_cut_clock_tables`); anything else is
parsed whole.
"""

from __future__ import annotations

import re
from typing import Any

from joulectl.backends.base import BackendUnavailable, normalize_bus_id
from joulectl.backends.nvidia import _arch, _control, _mig, parse_value, vendor
from joulectl.models import GpuDevice, PowerRange

__all__ = ["parse_smi_xml"]


class Element:
    """The part of ElementTree's ``Element`` the parser reads: the tag, the attributes, the text
    before the first child (None when there is none) and the children, built by :func:`parse_xml`."""

    __slots__ = ("attrib", "children", "tag", "text")

    def __init__(self, tag: str, attrib: dict[str, str]) -> None:
        self.tag, self.attrib = tag, attrib
        self.text: str | None = None
        self.children: list[Element] = []

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.attrib.get(key, default)

    def findall(self, path: str) -> list[Element]:
        """The elements a path of child names (``pci/pci_bus_id``) selects, in document order:
        ElementTree's ``findall`` for such a path (its only kind here)."""
        nodes = [self]
        for name in path.split("/"):
            nodes = [child for node in nodes for child in node.children if child.tag == name]
        return nodes

    def find(self, path: str) -> Element | None:
        if "/" not in path:  # a child's name: the first such child (no list of them all)
            for child in self.children:
                if child.tag == path:
                    return child
            return None
        found = self.findall(path)
        return found[0] if found else None


class XmlError(ValueError):
    """A document expat refuses: its message, as ElementTree's ``ParseError`` says it."""


def parse_xml(text: str) -> Element:
    """The root element of ``text`` as ``ElementTree.fromstring`` builds it, for what
    :class:`Element` holds, by expat itself (``pyexpat``, which ElementTree wraps): the same
    parser, limits (an entity bomb's amplification) and error messages, including ElementTree's
    own for an undefined entity; comments and processing instructions dropped as ElementTree's
    tree builder drops them. Importing ElementTree costs 2.5 ms of a discover on an NVIDIA node,
    its C tree builder saves less than that on the document cut by :func:`_cut_clock_tables`."""
    import pyexpat

    # Namespaces processed as ElementTree has expat process them ("}" between a namespace and a
    # name, which becomes "{namespace}name"): an undeclared prefix is its error too.
    parser = pyexpat.ParserCreate(None, "}")
    parser.buffer_text = True
    stack: list[Element] = []
    roots: list[Element] = []

    def start(tag: str, attrib: dict[str, str]) -> None:
        if "}" in tag:
            tag = "{" + tag
        if attrib and any("}" in key for key in attrib):
            attrib = {("{" + key if "}" in key else key): value for key, value in attrib.items()}
        node = Element(tag, attrib)
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def data(chunk: str) -> None:
        node = stack[-1] if stack else None
        if node is not None and not node.children:
            node.text = chunk if node.text is None else node.text + chunk

    def default(chunk: str) -> None:
        # An entity reference expat could not expand (a document with an external DTD may use one
        # it declares): ElementTree refuses it with this message.
        if len(chunk) >= 2 and chunk[0] == "&":
            raise XmlError(f"undefined entity {chunk[:100]}: line {parser.CurrentLineNumber}, "
                           f"column {parser.CurrentColumnNumber}")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    parser.DefaultHandlerExpand = default
    try:  # fed, then closed, as ElementTree.fromstring does (expat's message can depend on it)
        parser.Parse(text, False)
        parser.Parse("", True)
    except pyexpat.ExpatError as e:
        raise XmlError(str(e)) from e
    return roots[0]


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


#: A character no clock table holds, in its tags, texts or blanks: a table's texts are printable
#: ASCII but ``<``, ``&`` and ``>`` (so no markup, entity or ``]]>``), tab and newline; no carriage
#: return (which an XML parser turns into a newline). Searched for apart: the table's patterns
#: below then take a text as anything but ``<`` and ``>``, which compiles in a fifth of the time
#: of the exact class repeated (1.3 ms of every NVIDIA discover, issue 20), for the same tables.
_CLOCK_BAD_CHAR = r"[^\t\n\x20-\x25\x27-\x7e]"
_CLOCK_TEXT = r"[^<>]*"
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
    a tree builder makes an element for each; the tables' rigid shape is checked and read here by
    regular expressions instead (one check per distinct table: every GPU of a model prints the
    same one), and the rest of the document is parsed by :func:`parse_xml` as before. Cut only where
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
            if re.search(_CLOCK_BAD_CHAR, body) is not None or body_re.fullmatch(body) is None:
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
    cut = _cut_clock_tables(xml_text)
    tables = cut[1] if cut is not None else None
    try:
        try:
            root = parse_xml(cut[0] if cut is not None else xml_text)
        except XmlError:
            if cut is None:
                raise
            # The document printed decides: its error (line and column), or its tree (the string
            # "<supported_clocks>...</supported_clocks>" inside a doctype's quoted system id).
            root, tables = parse_xml(xml_text), None
    except XmlError as e:
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
