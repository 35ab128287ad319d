"""``nvidia_xml.parse_xml``: the tree of an ``nvidia-smi -q -x`` document built on expat directly,
not by ElementTree (whose import was 2.5 ms of every NVIDIA discover, issue 20). Held to
ElementTree's own ``fromstring`` (the reference, imported here only): the same tags, attributes,
texts and children on the documents nvidia-smi prints (both power schemas, the fake tool's
full documents) and on arbitrary markup (entities, CDATA, comments, processing instructions, an
external DTD, undefined entities, broken documents), and the same error message where ElementTree
refuses a document."""

from __future__ import annotations

from types import ModuleType
from typing import Any
from xml.etree import ElementTree

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulectl.backends.nvidia_xml import Element, XmlError, parse_xml


def shape(el: Element | ElementTree.Element) -> tuple[Any, ...]:
    children = el.children if isinstance(el, Element) else list(el)
    return el.tag, dict(el.attrib), el.text, [shape(c) for c in children]


def both(text: str) -> tuple[Any, Any]:
    """(ElementTree's tree or error message, parse_xml's)."""
    try:
        want: Any = shape(ElementTree.fromstring(text))
    except ElementTree.ParseError as e:
        want = ("error", str(e))
    try:
        got: Any = shape(parse_xml(text))
    except XmlError as e:
        got = ("error", str(e))
    return want, got


@pytest.mark.parametrize("schema", ["new", "legacy"])
def test_nvidia_smi_documents_give_elementtree_s_tree(trees: ModuleType, schema: str) -> None:
    doc = trees.smi_document([trees.smi_gpu_xml("0000:18:00.0", 0, schema=schema),
                              trees.smi_gpu_xml("0000:2a:00.0", 1, schema=schema)], schema=schema)
    want, got = both(doc)
    assert want[0] == "nvidia_smi_log" and got == want


def test_the_fake_tools_full_documents_give_elementtree_s_tree(tmp_path: Any) -> None:
    import subprocess
    import sys

    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: x}\nspec:\n  pools:\n"
                    "  - {name: h, profile: nvidia-h100-sxm-8gpu, count: 1}\n"
                    "  - {name: l, profile: nvidia-l40s-4gpu, count: 1}\n")
    subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(spec), "--root", str(tmp_path / "n")],
                   check=True, capture_output=True)
    for node in ("h-0", "l-0"):
        doc = subprocess.run([str(tmp_path / "n" / node / "bin" / "nvidia-smi"), "-q", "-x"], check=True,
                             capture_output=True, text=True).stdout
        want, got = both(doc)
        assert len(want[3]) > 4 and got == want  # the driver's lines and every GPU, clock tables whole


MARKUP = st.sampled_from([
    "<a>", "</a>", "<b x='1'>", "</b>", "<c/>", "text", " ", "\n", "&amp;", "&lt;", "&#65;", "&#x1F600;", "&nope;",
    "<![CDATA[<raw> & ]]>", "<!-- note -->", "<?pi data?>", "<d y=\"&quot;q&quot;\" z='2'>", "</d>", ">", "&", "<",
    "\r\n", "é", "<gpu id=\"00000000:18:00.0\">", "</gpu>", "<n:e xmlns:n='urn:x' n:k='v'>", "</n:e>", "<p:q>",
    "</p:q>", "<f xmlns='urn:d'>", "</f>",
])
PROLOGUE = st.sampled_from([
    "", '<?xml version="1.0" ?>\n', '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n',
    '<!DOCTYPE r [<!ENTITY e "expanded">]>', '<!DOCTYPE r [<!ATTLIST r d CDATA "dflt">]>', "<!-- c -->", " ",
])


@settings(max_examples=600, deadline=None)
@given(PROLOGUE, st.lists(MARKUP, max_size=14), st.sampled_from(["r", "nvidia_smi_log"]), st.booleans())
def test_any_markup_gives_elementtree_s_tree_or_its_error(prologue: str, body: list[str], root: str,
                                                          entity: bool) -> None:
    inner = "".join(body) + ("&e;" if entity else "")
    for text in (f"{prologue}<{root}>{inner}</{root}>", prologue + inner, f"{prologue}<{root}>{inner}"):
        want, got = both(text)
        assert got == want, text


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_any_text_gives_elementtree_s_tree_or_its_error(text: str) -> None:
    want, got = both(text)
    assert got == want


def test_an_undefined_entity_under_an_external_dtd_is_elementtree_s_error() -> None:
    doc = ('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
           "<nvidia_smi_log><gpu><product_name>H100 &trade;</product_name></gpu></nvidia_smi_log>")
    want, got = both(doc)
    assert want == got == ("error", "undefined entity &trade;: line 3, column 40")


def test_paths_select_as_elementtree_s_find_and_findall() -> None:
    doc = "<r><a/><a><b>1</b><b>2</b></a><a><b>3</b></a><c><b>x</b></c></r>"
    ours, theirs = parse_xml(doc), ElementTree.fromstring(doc)
    for path in ("a", "a/b", "c/b", "b", "a/b/c", "c"):
        assert [e.text for e in ours.findall(path)] == [e.text for e in theirs.findall(path)]
        mine, ref = ours.find(path), theirs.find(path)
        assert (mine is None) == (ref is None) and (mine is None or mine.text == ref.text)
    assert ours.find("a").get("missing", "d") == "d"
