"""``simulate compare --report FILE.html``: one self-contained HTML page with the comparison's charts.

Charts (matplotlib, rendered to inline SVG: the page needs no other file and no network): each
plan's IT power over time, energy by class per plan, and the slowdown distribution per class. The
optional extra ``joulectl[report]`` installs matplotlib; without it the command says how to get it
and exits 2 before anything runs.
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence
from typing import Any

from joulectl.errors import InputError
from joulectl.sim.workload.replay import PlanResult

INSTALL_HINT = "pip install 'joulectl[report]'"


def require_matplotlib() -> None:
    """Exit 2 with the install line when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"needs matplotlib, which is not installed: {INSTALL_HINT}", field="--report") from None


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _charts(results: Sequence[PlanResult]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "joulectl"  # the same page for the same inputs
    from matplotlib import pyplot as plt

    out: list[tuple[str, str]] = []
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for r in results:
        if r.series:
            ax.step([(t - r.start_s) / 3600.0 for t, _ in r.series], [w / 1000.0 for _, w in r.series], where="post",
                    label=r.name, linewidth=1.0)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("IT power (kW)")
    ax.legend()
    ax.grid(alpha=0.3)
    out.append(("Power over time", _svg(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    bottom = [0.0] * len(results)
    names = [r.name for r in results]
    for cls in ("performance", "standard", "idle"):
        values = [r.energy_by_class_j[cls] / 3.6e6 for r in results]
        ax.bar(names, values, bottom=bottom, label=cls)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("energy (kWh)")
    ax.legend()
    out.append(("Energy by class", _svg(fig)))
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, cls in zip(axes, ("performance", "standard"), strict=True):
        data = [sorted(r.slowdown[cls]) or [1.0] for r in results]
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_title(f"{cls} tasks")
        ax.set_ylabel("slowdown (run time / duration)")
        ax.grid(alpha=0.3)
    out.append(("Slowdown distributions", _svg(fig)))
    plt.close(fig)
    return out


def write_report(path: str, doc: dict[str, Any], results: Sequence[PlanResult], table: str) -> None:
    """Write the page atomically (a temp file beside it, then rename)."""
    charts = _charts(results)
    meta = doc["metadata"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>What-if: {html.escape(str(meta['trace']))} on {html.escape(str(meta['fleet']))}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "pre{background:#f6f6f6;padding:1em;overflow-x:auto}svg{max-width:100%;height:auto}</style>",
        "</head><body>",
        f"<h1>What-if: {meta['tasks']} tasks on {meta['nodes']} nodes</h1>",
        f"<p>Trace <code>{html.escape(str(meta['trace']))}</code>, fleet <code>{html.escape(str(meta['fleet']))}"
        f"</code>; deltas against <b>{html.escape(str(meta['baseline']))}</b>.</p>",
    ]
    for title, svg in charts:
        parts.append(f"<h2>{html.escape(title)}</h2>\n{svg}")
    parts.append(f"<h2>Figures</h2><pre>{html.escape(table)}</pre>")
    parts.append("</body></html>\n")
    text = "\n".join(parts)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise InputError(f"cannot write the report ({e.strerror or e})", file=path, field="--report") from None
