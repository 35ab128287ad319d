"""GPU and CPU model catalog (shipped as data) and model-name normalisation.

Matching follows Joulie's hwinv: exact match of the normalised name against a key or an alias
(lowercase; ``(r)``, ``®``, ``™`` dropped; ``( ) - _ / ,`` turned into spaces; whitespace
collapsed). GPU feature discovery's product suffixes (``-MIG-<profile>``, ``-MIG-INVALID``,
``-SHARED``) are stripped before any lookup, as Joulie does for catalog, family and model-map keys.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any

from joulectl.record import record

_GFD_SUFFIX = re.compile(r"(?:-MIG-[^\s]*|-SHARED)+$", re.IGNORECASE)
_DROP = re.compile(r"\(r\)|\(tm\)|®|™", re.IGNORECASE)
_SEP = re.compile(r"[()\-_/,]+")
_WS = re.compile(r"\s+")


def strip_gfd_suffix(product: str) -> str:
    """Remove GPU feature discovery's ``-MIG-<profile>``, ``-MIG-INVALID`` and ``-SHARED`` suffixes."""
    return _GFD_SUFFIX.sub("", product.strip())


def normalize(name: str) -> str:
    """The catalog's matching form of a model name."""
    text = _DROP.sub("", name.lower())
    text = _SEP.sub(" ", text)
    return _WS.sub(" ", text).strip()


@record(frozen=True)
class GpuEntry:
    key: str
    vendor: str
    family: str
    architecture: str | None
    max_board_power_w: float
    min_board_power_w: float | None
    compute_density: float | None
    aliases: tuple[str, ...]
    source: str

    @property
    def min_w(self) -> float:
        """The minimum board power, defaulting to half the maximum (Joulie's default)."""
        return self.min_board_power_w if self.min_board_power_w else 0.5 * self.max_board_power_w


@record(frozen=True)
class CpuEntry:
    key: str
    vendor: str
    tdp_w: float
    ctdp_range_w: tuple[float, float] | None
    base_ghz: float
    boost_ghz: float
    cores: int | None
    compute_density: float | None
    driver: str | None
    curve_w: tuple[float, ...] | None
    proxy: str | None
    aliases: tuple[str, ...]
    source: str


@record(frozen=True)
class Catalog:
    gpus: dict[str, GpuEntry]
    cpus: dict[str, CpuEntry]
    gpu_index: dict[str, str]
    cpu_index: dict[str, str]

    def gpu(self, name: str | None) -> GpuEntry | None:
        """The GPU entry for a raw model, normalised model or key; None when not catalogued."""
        if not name:
            return None
        key = self.gpu_index.get(normalize(strip_gfd_suffix(name)))
        return self.gpus[key] if key else None

    def cpu(self, name: str | None) -> CpuEntry | None:
        """The CPU entry for a raw model (``/proc/cpuinfo`` model name) or key."""
        if not name:
            return None
        key = self.cpu_index.get(normalize(name))
        return self.cpus[key] if key else None


def _index(entries: dict[str, Any]) -> dict[str, str]:
    index: dict[str, str] = {}
    for key, entry in entries.items():
        for alias in (key, *entry.aliases):
            index.setdefault(normalize(alias), key)
    return index


@lru_cache(maxsize=1)
def load() -> Catalog:
    """The shipped catalog (``hardware.json``), parsed once per process."""
    # Read beside this module (not through importlib.resources, whose import costs discover's start-up).
    with open(os.path.join(os.path.dirname(__file__), "hardware.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    gpus = {
        g["key"]: GpuEntry(
            key=g["key"],
            vendor=g["vendor"],
            family=g.get("family", g["key"]),
            architecture=g.get("architecture"),
            max_board_power_w=float(g["maxBoardPowerW"]),
            min_board_power_w=float(g["minBoardPowerW"]) if g.get("minBoardPowerW") else None,
            compute_density=g.get("computeDensity"),
            aliases=tuple(g.get("aliases", ())),
            source=g.get("source", ""),
        )
        for g in raw["gpus"]
    }
    cpus = {
        c["key"]: CpuEntry(
            key=c["key"],
            vendor=c["vendor"],
            tdp_w=float(c["tdpW"]),
            ctdp_range_w=tuple(c["cTdpRangeW"]) if c.get("cTdpRangeW") else None,  # type: ignore[arg-type]
            base_ghz=float(c["baseGHz"]),
            boost_ghz=float(c["boostGHz"]),
            cores=c.get("cores"),
            compute_density=c.get("computeDensity"),
            driver=c.get("driver"),
            curve_w=tuple(c["curveW"]) if c.get("curveW") else None,
            proxy=c.get("proxy"),
            aliases=tuple(c.get("aliases", ())),
            source=c.get("source", ""),
        )
        for c in raw["cpus"]
    }
    return Catalog(gpus=gpus, cpus=cpus, gpu_index=_index(gpus), cpu_index=_index(cpus))


def gpu_family(model: str | None, raw_model: str | None = None) -> str:
    """Joulie's GPU family key ``gpu:<model|raw model|unknown-gpu>`` (suffixes stripped)."""
    name = model or raw_model
    return f"gpu:{strip_gfd_suffix(name)}" if name else "gpu:unknown-gpu"
