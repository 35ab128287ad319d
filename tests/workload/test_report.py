"""`simulate compare --report`: one self-contained HTML page with charts; without matplotlib, one line
saying how to install it (exit 2, nothing run, nothing written)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from whatifkit import gpu_job, spec_text, twin

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:  # pragma: no cover - CI installs it with the test extra
    HAVE_MPL = False


@pytest.mark.skipif(not HAVE_MPL and not os.environ.get("CI"), reason="matplotlib (joulectl[report]) not installed")
def test_report_is_one_self_contained_page(cli: Callable[..., Any], write: Callable[..., str],
                                           tmp_path: Path) -> None:
    spec = write("spec.yaml", spec_text("{name: l40s, profile: nvidia-l40s-4gpu, count: 1}"))
    trace = write("trace.jsonl", [gpu_job(f"j{i}", at=i * 60, units=600, util=0.9) for i in range(6)])
    eco = write("eco.yaml", [twin("l40s-0", gpu_pct=60)])
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    r = cli("simulate", "compare", spec, "--trace", trace, "--plan", "uncapped", "--plan", eco, "--report", str(page))
    assert r.exit_code == 0, r.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert text.count("<svg") == 3
    for title in ("Power over time", "Energy by class", "Slowdown distributions"):
        assert f"<h2>{title}</h2>" in text
    assert "src=\"http" not in text and "href=\"http" not in text.replace('xmlns:xlink="http', "")
    assert "energy (kWh)" in text  # the figures table
    assert os.listdir(page.parent) == ["report.html"]
    again = tmp_path / "again.html"
    cli("simulate", "compare", spec, "--trace", trace, "--plan", "uncapped", "--plan", eco, "--report", str(again))
    assert again.read_text() == text  # the same page for the same inputs


def test_report_without_matplotlib(cli: Callable[..., Any], write: Callable[..., str], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    spec = write("spec.yaml", spec_text("{name: l40s, profile: nvidia-l40s-4gpu, count: 1}"))
    trace = write("trace.jsonl", [gpu_job("j")])
    page = tmp_path / "report.html"
    r = cli("simulate", "compare", spec, "--trace", trace, "--plan", "uncapped", "--report", str(page))
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0] == ("joulectl: error: --report: needs matplotlib, which is not installed: "
                                        "pip install 'joulectl[report]'")
    assert r.stdout == "" and not page.exists()
