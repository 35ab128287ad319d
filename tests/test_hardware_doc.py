"""docs/hardware.md is where the code, the emulator's profiles and boards, and the fixtures cite
kernel, driver and tool facts from: every ``docs/hardware.md §N[.M]`` citation names a section the
document has, and nothing cites a document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "hardware.md"
CITED = [p for d in ("joulectl", "tests", "docs", "scripts", "benchmarks") for p in (REPO / d).rglob("*")
         if p.is_file() and p.suffix in (".py", ".yaml", ".json", ".md") and "fixtures/real" not in str(p)]
CITATION = re.compile(r"docs/hardware\.md §(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?")


def _sections() -> set[str]:
    out = set()
    for line in DOC.read_text().splitlines():
        m = re.match(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", line)
        if m:
            out.add(m.group(1))
    return out


def test_the_document_has_its_sections() -> None:
    assert {"1", "1.1", "1.2", "1.3", "1.4", "1.7", "2", "2.1", "2.2", "3", "3.2", "3.4", "4", "4.2", "5", "5.1",
            "5.3", "6", "7"} <= _sections()


def test_every_citation_names_an_existing_section() -> None:
    sections = _sections()
    bad = []
    count = 0
    for path in CITED:
        for m in CITATION.finditer(path.read_text(errors="replace")):
            count += 1
            for ref in filter(None, m.groups()):
                if ref not in sections:
                    bad.append(f"{path.relative_to(REPO)}: §{ref}")
    assert not bad, bad
    assert count >= 40  # the profiles, boards, catalog, backends and fixtures cite it


def test_nothing_cites_a_document_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    offenders = [str(p.relative_to(REPO)) for p in CITED if p != here
                 and re.search(r"hardware-interfaces\.md|/work/shared", p.read_text(errors="replace"))]
    assert offenders == []
