"""``parse_smi_xml`` with its clock tables cut out (backends/nvidia_xml.py ``_cut_clock_tables``): the
``<supported_clocks>`` content of an ``nvidia-smi -q -x`` document is read by regular expressions and
the rest by ElementTree; the GPUs are the ones ElementTree reads from the whole document, on the
documents nvidia-smi prints (both power schemas, as in tests/fixtures/trees.py) and on every
document outside the tables' shape, which is parsed whole.

Also the message table's needles (backends/nvidia_messages.py): a row's pattern is searched only
on lines that hold one of them, so each must be in every line the pattern matches.

Expected values are literal: the clock tables the fixture documents print.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulectl.backends import nvidia, nvidia_xml
from joulectl.backends.base import BackendUnavailable

H100 = {2619: [1980, 1965, 1950, 1500, 1200, 990, 600, 345], 1593: [1410, 1200, 990, 345]}


def whole(xml_text: str) -> list[Any] | str:
    """What parse_smi_xml gives without the cut (ElementTree on the whole document): the GPUs, or
    the BackendUnavailable message."""
    saved = nvidia_xml._cut_clock_tables
    nvidia_xml._cut_clock_tables = lambda text: None  # type: ignore[assignment]
    try:
        return nvidia.parse_smi_xml(xml_text)
    except BackendUnavailable as e:
        return str(e)
    finally:
        nvidia_xml._cut_clock_tables = saved  # type: ignore[assignment]


def cut(xml_text: str) -> list[Any] | str:
    try:
        return nvidia.parse_smi_xml(xml_text)
    except BackendUnavailable as e:
        return str(e)


def document(trees: ModuleType, schema: str = "new", **gpu: Any) -> str:
    return trees.smi_document([trees.smi_gpu_xml("0000:18:00.0", 0, schema=schema, **gpu),
                               trees.smi_gpu_xml("0000:2a:00.0", 1, schema=schema, **gpu)], schema=schema)


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_the_tables_of_nvidia_smis_documents_are_cut_and_read_as_elementtree_reads_them(
        trees: ModuleType, schema: str) -> None:
    doc = document(trees, schema)
    pieces = nvidia_xml._cut_clock_tables(doc)
    assert pieces is not None
    reduced, tables = pieces
    assert "supported_graphics_clock" not in reduced
    # the rest of the document exactly as printed, each table an empty element naming it
    assert reduced == re.sub(r"<supported_clocks>.*?</supported_clocks>", '<supported_clocks _joulectl_cut="0"/>',
                             doc, flags=re.S)
    assert ElementTree.fromstring(reduced).tag == "nvidia_smi_log"  # parsed as cut, no fallback
    assert reduced.count('<supported_clocks _joulectl_cut="0"/>') == 2  # both GPUs print one table
    assert tables == [[("2619 MHz", tuple(f"{g} MHz" for g in H100[2619])),
                       ("1593 MHz", ("1410 MHz", "1200 MHz", "990 MHz", "345 MHz"))]]
    gpus = cut(doc)
    assert gpus == whole(doc)
    assert isinstance(gpus, list)
    assert [g.supported_clocks for g in gpus] == [H100, H100]
    assert [g.bus_id for g in gpus] == ["0000:18:00.0", "0000:2a:00.0"]
    # one table read for both GPUs, each given its own copy
    gpus[0].supported_clocks[2619].append(1)  # type: ignore[index]
    assert gpus[1].supported_clocks == H100


def test_a_table_read_once_is_given_to_the_next_gpu_without_reading_its_texts(trees: ModuleType) -> None:
    pieces = nvidia_xml._cut_clock_tables(document(trees))
    assert pieces is not None
    first, second = ElementTree.fromstring(pieces[0]).findall("gpu")
    memo: dict[tuple[int, ...], dict[int, list[int]] | None] = {}
    parsed: dict[str | None, float | None] = {}
    a = nvidia_xml._supported_clocks(first, parsed, pieces[1], memo)
    assert parsed["1980 MHz"] == 1980  # the first GPU's texts read
    untouched: dict[str | None, float | None] = {}
    b = nvidia_xml._supported_clocks(second, untouched, pieces[1], memo)
    assert untouched == {}  # the second GPU's table came from the memo
    assert a == b == H100
    assert a is not None and b is not None and a[2619] is not b[2619]  # each GPU its own copy


def test_gpus_with_different_tables_and_an_empty_one(trees: ModuleType) -> None:
    doc = trees.smi_document([
        trees.smi_gpu_xml("0000:18:00.0", 0, schema="new"),
        trees.smi_gpu_xml("0000:2a:00.0", 1, schema="new", clocks={}),
        trees.smi_gpu_xml("0000:3a:00.0", 2, schema="new", clocks={9501: [2520, 210]}),
        trees.smi_gpu_xml("0000:5d:00.0", 3, schema="new"),
    ], schema="new")
    pieces = nvidia_xml._cut_clock_tables(doc)
    assert pieces is not None and len(pieces[1]) == 3
    gpus = cut(doc)
    assert gpus == whole(doc)
    assert [g.supported_clocks for g in gpus] == [H100, None, {9501: [2520, 210]}, H100]  # type: ignore[union-attr]


def test_tokens_and_odd_texts_in_a_table_read_as_elementtree_reads_them(trees: ModuleType) -> None:
    doc = document(trees).replace("<value>1593 MHz</value>", "<value>  N/A </value>").replace(
        "<supported_graphics_clock>345 MHz</supported_graphics_clock>",
        "<supported_graphics_clock></supported_graphics_clock><supported_graphics_clock> 300MHz\n"
        "</supported_graphics_clock><supported_graphics_clock>[N/A]</supported_graphics_clock>")
    assert nvidia_xml._cut_clock_tables(doc) is not None
    gpus = cut(doc)
    assert gpus == whole(doc)
    assert [g.supported_clocks for g in gpus] == [{2619: [1980, 1965, 1950, 1500, 1200, 990, 600, 300]}] * 2  # type: ignore[union-attr]


#: Edits of a document that take it out of the tables' shape (or make the string
#: "<supported_clocks>" possibly something else than the start tag): parsed whole.
WHOLE = {
    "comment": ("</uuid>", "</uuid><!-- <supported_clocks> -->"),
    "comment in a table": ("<supported_mem_clock>", "<!-- x --><supported_mem_clock>"),
    "cdata": ("<product_name>", "<product_name><![CDATA[x]]>"),
    "processing instruction": ("</uuid>", "</uuid><?pi x?>"),
    "question mark in a text": ("NVIDIA H100 80GB HBM3", "NVIDIA H100?"),
    "exclamation mark in a text": ("NVIDIA H100 80GB HBM3", "NVIDIA H100!"),
    "internal subset": ('"nvsmi_device_v12.dtd">', '"nvsmi_device_v12.dtd" [<!ENTITY w "W">]>'),
    "attribute on the table": ("<supported_clocks>", '<supported_clocks a="1">'),
    "entity in a clock": ("<value>2619 MHz</value>", "<value>2619 &#77;Hz</value>"),
    "carriage return": ("<value>2619 MHz</value>", "<value>2619\r MHz</value>"),
    "empty-element clock": ("<supported_graphics_clock>345 MHz</supported_graphics_clock>",
                            "<supported_graphics_clock/>"),
    "clock before the value": ("<value>2619 MHz</value>",
                               "<supported_graphics_clock>1 MHz</supported_graphics_clock><value>2619 MHz</value>"),
    "two values": ("<value>2619 MHz</value>", "<value>2619 MHz</value><value>1 MHz</value>"),
    "another element in a table": ("<value>2619 MHz</value>", "<value>2619 MHz</value><x>1</x>"),
    "the marker attribute": ("<gpu ", '<gpu _joulectl_cut="0" '),
    "a vertical tab": ("<value>2619 MHz</value>", "<value>2619\x0bMHz</value>"),
    "non-ASCII": ("<value>2619 MHz</value>", "<value>2619 \u00b5Hz</value>"),
    "no end tag": ("</supported_clocks>", "</supported_clock>"),
}


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_document_outside_the_shape_is_parsed_whole(trees: ModuleType, name: str) -> None:
    old, new = WHOLE[name]
    doc = document(trees)
    assert old in doc
    doc = doc.replace(old, new)
    assert nvidia_xml._cut_clock_tables(doc) is None
    assert cut(doc) == whole(doc)


def test_a_table_with_an_attribute_is_left_to_elementtree_and_the_others_are_cut(trees: ModuleType) -> None:
    doc = document(trees).replace("<supported_clocks>", '<supported_clocks a="1">', 1)
    pieces = nvidia_xml._cut_clock_tables(doc)
    assert pieces is not None
    assert pieces[0].count("<supported_graphics_clock>") == 12 and pieces[0].count("_joulectl_cut") == 1
    gpus = cut(doc)
    assert gpus == whole(doc)
    assert [g.supported_clocks for g in gpus] == [H100, H100]  # type: ignore[union-attr]


@pytest.mark.parametrize("edit", [
    ("<product_name>NVIDIA H100 80GB HBM3</product_name>", "<product_name>a < b</product_name>"),
    ("</nvidia_smi_log>\n", ""),
    ("</gpu>", "</gpus>"),
    ("<uuid>", "<uuid><uuid>"),
])
def test_a_document_that_is_not_xml_fails_with_the_whole_documents_error(
        trees: ModuleType, edit: tuple[str, str]) -> None:
    doc = document(trees).replace(*edit, 1)
    assert nvidia_xml._cut_clock_tables(doc) is not None  # the tables were cut: the error is the rest's
    message = cut(doc)
    assert isinstance(message, str) and message.startswith("nvidia-smi -q -x printed output that is not XML (")
    assert message == whole(doc)  # the line and column of the document printed, not of the cut one


def test_a_cut_inside_a_doctypes_quoted_system_id_falls_back_to_the_whole_document(trees: ModuleType) -> None:
    # a system literal may hold "<": cut there, the double-quoted literal would end early
    for quote in ('"', "'"):
        doc = document(trees).replace(
            '"nvsmi_device_v12.dtd"', f"{quote}<supported_clocks></supported_clocks>{quote}")
        gpus = cut(doc)
        assert gpus == whole(doc)
        assert isinstance(gpus, list) and [g.supported_clocks for g in gpus] == [H100, H100]


TEXTS = st.one_of(
    st.sampled_from(["1980 MHz", "345 MHz", "", " ", "N/A", "[N/A]", "\n\t1410 MHz\n", "99999999999 MHz"]),
    st.text(alphabet=st.sampled_from(list("09 .MHz-+e\t\n<>&;]!?'\"\r\x0b\u00b5ſ")), max_size=8),
)
BLANKS = st.sampled_from(["", "\n", "\n\t\t\t", " ", "\r\n", "\x0c"])


@st.composite
def table_xml(draw: st.DrawFn) -> str:
    out = ["<supported_clocks>"]
    for _ in range(draw(st.integers(0, 3))):
        out.append(draw(BLANKS) + "<supported_mem_clock>" + draw(BLANKS))
        value = draw(TEXTS)
        out.append(draw(st.sampled_from([f"<value>{value}</value>", f"<value>{escape(value)}</value>", ""])))
        for text in draw(st.lists(TEXTS, max_size=4)):
            out.append(draw(BLANKS) + draw(st.sampled_from([
                f"<supported_graphics_clock>{escape(text)}</supported_graphics_clock>",
                f"<supported_graphics_clock>{text}</supported_graphics_clock>",
                "<supported_graphics_clock/>", "<!-- c -->"])))
        out.append(draw(BLANKS) + "</supported_mem_clock>")
    out.append(draw(BLANKS) + "</supported_clocks>")
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(table_xml(), st.booleans()), min_size=1, max_size=3), st.booleans())
def test_cut_and_whole_agree_on_generated_tables(gpus: list[tuple[str, bool]], doctype: bool) -> None:
    head = '<?xml version="1.0" ?>\n' + ('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n' if doctype else "")
    body = "".join(f'<gpu id="00000000:{i + 16:02X}:00.0"><product_name>NVIDIA L40S</product_name>'
                   + (table + table if twice else table) + "</gpu>" for i, (table, twice) in enumerate(gpus))
    doc = f"{head}<nvidia_smi_log>{body}</nvidia_smi_log>\n"
    assert cut(doc) == whole(doc)


# -- the message table's needles (backends/nvidia_messages.py) ------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_line_a_row_matches_holds_one_of_its_needles(data: st.DataObject) -> None:
    # a row's pattern is searched (and compiled) only on ASCII lines holding one of its needles:
    # the needles must be in every line the pattern matches, in any case
    from joulectl.backends.nvidia_messages import ROWS

    row = data.draw(st.sampled_from(ROWS))
    line = data.draw(st.from_regex(row.regex, fullmatch=False))
    line = "".join(c.swapcase() if data.draw(st.booleans()) else c for c in line)
    assert row.pattern.search(line) is not None
    assert row.may_match(line.lower() if line.isascii() else None)


def test_the_needles_are_lower_case_and_a_non_ascii_line_is_searched_by_every_row() -> None:
    from joulectl.backends.nvidia_messages import ROWS, decide

    assert all(n == n.lower() and n.isascii() for row in ROWS for n in row.needles)
    assert all(row.may_match(None) for row in ROWS)
    # "\u017f" (long s) matches "s" case-insensitively and stays itself in lower case
    line = "Power limit for GPU 00000000:18:00.0 was \u017fet to 420.00 W from 700.00 W."
    verdict = decide(line, 0, ["0000:18:00.0"])["0000:18:00.0"]
    assert verdict is not None and verdict.row == "power-limit-set" and verdict.values == ("420.00",)
