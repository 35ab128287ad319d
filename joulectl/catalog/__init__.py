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

from joulectl.gfd import strip_gfd_suffix as strip_gfd_suffix  # re-exported: the catalog's name rules
from joulectl.record import record

#: The marks dropped from a lowercased name, by :func:`_drop_marks` (the pattern is kept for names
#: holding a NUL, compiled at its first use by ``re``'s cache: 0.5 ms of a discover otherwise).
_DROP = r"\([rR]\)|\([tT][mM]\)|®|™"
#: The separators that become a space: ``( ) - _ / ,``.
_SEP = str.maketrans("()-_/,", "      ")


def normalize(name: str) -> str:
    """The catalog's matching form of a model name: lower case, the trademark marks dropped,
    every run of separators and white space one space, stripped."""
    text = name.lower()
    if "(" in text or "®" in text or "™" in text:
        text = _drop_marks(text)
    return " ".join(text.translate(_SEP).split())


def _drop_marks(text: str) -> str:
    """``re.sub(_DROP, "", text)`` without the pattern, for a lowercased ``text``.

    The four marks are literals none of which overlaps itself or another (no suffix of one is a
    prefix of one), so the pattern's left-to-right scan removes exactly the occurrences the text
    holds before any removal. Each is first replaced by a NUL, which no mark contains (so no new
    occurrence forms across it, as one would by removing ``(r)`` from ``((r)tm)``), then every NUL
    goes: all at once, as the scan does. A text that holds a NUL itself takes the pattern."""
    if "\x00" in text:
        return re.sub(_DROP, "", text)
    return text.replace("(r)", "\x00").replace("(tm)", "\x00").replace("®", "\x00").replace("™", "\x00") \
        .replace("\x00", "")


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
    #: memory per GPU as the devices count it, MiB (None when not catalogued)
    memory_mib: int | None = None
    #: MIG geometry: compute slices and memory slices per GPU (None: no MIG)
    mig_slices: tuple[int, int] | None = None

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
            memory_mib=g.get("memoryMiB"),
            mig_slices=(int(g["mig"]["computeSlices"]), int(g["mig"]["memorySlices"])) if g.get("mig") else None,
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


#: Patterns compiled at their first use (by ``re``'s own cache), not at import: only NVIDIA MIG
#: names need them, and each compiled pattern is 0.1-0.3 ms of every start-up (issue 20).
_MIG_PROFILE = r"(?i)^(\d+)g\.(\d+)gb(\+me)?$"
_MIG_SUFFIX = r"(?i)-MIG-(\d+g\.\d+gb(?:\+me)?)(?:-SHARED)?$"
#: MIG instances per GPU of a profile on a seven-slice GPU whose memory slices allow it (A100, H100)
GENERIC_MIG_PER_GPU = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}


def mig_profile_of(product: str) -> str | None:
    """The MIG profile GPU feature discovery appends under the single strategy
    (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb`` -> ``1g.10gb``), else None (``-MIG-INVALID`` too)."""
    m = re.search(_MIG_SUFFIX, product.strip())
    return m.group(1).lower() if m else None


def mig_instances_per_gpu(product: str | None, profile: str) -> int:
    """How many instances of a MIG profile (``1g.10gb``) one GPU of ``product`` holds.

    From the catalogued geometry: ``min(compute slices // g, memory slices // slices of the
    profile's memory)`` (an H100 80GB: 7 of ``1g.10gb``, 4 of ``1g.20gb``, 2 of ``3g.40gb``; an
    A30: 4 of ``1g.6gb``); a ``+me`` profile is one per GPU. An unknown product is taken as a
    seven-slice GPU (:data:`GENERIC_MIG_PER_GPU`)."""
    m = re.match(_MIG_PROFILE, profile.strip())
    if not m:
        return 1
    g, mem_gb, media = int(m.group(1)), int(m.group(2)), m.group(3)
    if media:
        return 1
    entry = load().gpu(product) if product else None
    if entry is not None and entry.mig_slices and entry.memory_mib:
        compute, memory = entry.mig_slices
        per_slice_gb = entry.memory_mib / 1024 / memory
        mem_slices = max(1, round(mem_gb / per_slice_gb))
        return max(1, min(compute // g, memory // mem_slices))
    return GENERIC_MIG_PER_GPU.get(g, max(1, 7 // g))


def gpu_family(model: str | None, raw_model: str | None = None) -> str:
    """Joulie's GPU family key ``gpu:<model|raw model|unknown-gpu>`` (suffixes stripped)."""
    name = model or raw_model
    return f"gpu:{strip_gfd_suffix(name)}" if name else "gpu:unknown-gpu"
