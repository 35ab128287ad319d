"""The tick loop's side of ``state/nvml.json``, the NVIDIA GPUs' mutable state.

The fake nvidia-smi (:mod:`joulectl.sim.tools`) writes limits, clock locks and persistence mode
into the file under an exclusive ``flock`` on ``state/nvml.lock``; the tick takes the same lock
for its read-modify-write, so neither loses the other's update. Inside the lock the tick
``lstat``s the file and reads it only when it changed since its own last write; otherwise it
works from the copy it keeps in memory. Fields the tick owns: power draw, energy, current clocks,
temperature, utilisation (and the limit and locks when persistence mode is off and the GPU idles).
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from joulectl.sim.tools.state import NVML_LOCK, NVML_STATE


def _lock_path(node_dir: str) -> str:
    return os.path.join(node_dir, NVML_LOCK)


def _state_path(node_dir: str) -> str:
    return os.path.join(node_dir, NVML_STATE)


def _sig(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _range(value: Any) -> tuple[int, int] | None:
    """A clock lock as ``(min, max)`` MHz: ``{"minMhz", "maxMhz"}`` as the fake nvidia-smi writes it,
    ``[min, max]``, or one number."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    if isinstance(value, dict):
        hi_v = value.get("maxMhz", value.get("max"))
        if hi_v is None:
            return None
        lo_v = value.get("minMhz", value.get("min"))
        return (int(lo_v) if lo_v is not None else int(hi_v)), int(hi_v)
    if isinstance(value, (int, float)):
        return int(value), int(value)
    return None


class NvmlSession:
    """One node's locked read-modify-write of ``state/nvml.json`` for one tick."""

    def __init__(self, io: NvmlIO, node_dir: str) -> None:
        self.io = io
        self.dir = node_dir
        self.fd = -1
        self.state: dict[str, Any] | None = None

    def __enter__(self) -> NvmlSession:
        self.fd = os.open(_lock_path(self.dir), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.state = self.io.refresh(self.dir)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)


class NvmlIO:
    """Reads, interprets and writes ``state/nvml.json`` (one instance per worker process)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        self.reads = 0

    def session(self, node_dir: str) -> NvmlSession:
        """``with io.session(dir) as s:`` — the lock held, ``s.state`` current."""
        return NvmlSession(self, node_dir)

    def refresh(self, node_dir: str) -> dict[str, Any] | None:
        """The node's state: the cached copy when the file did not change since the last write."""
        path = _state_path(node_dir)
        try:
            sig = _sig(os.lstat(path))
        except OSError:
            return None
        cached = self._cache.get(node_dir)
        if cached is not None and cached[0] == sig:
            return cached[1]
        state = self.read(node_dir)
        self._cache[node_dir] = (sig, state)
        return state

    def read(self, node_dir: str) -> dict[str, Any]:
        """The file's content (no lock: for status, which only reads)."""
        self.reads += 1
        with open(_state_path(node_dir), encoding="utf-8") as fh:
            state: dict[str, Any] = json.load(fh)
        return state

    def write(self, node_dir: str, state: dict[str, Any]) -> None:
        """Replace the file atomically (temporary file and rename; the caller holds the lock)."""
        path = _state_path(node_dir)
        tmp = f"{path}.{os.getpid()}.tick.tmp"
        text = json.dumps(state, separators=(",", ":"))  # the C encoder (json.dump is the Python one)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
        self._cache[node_dir] = (_sig(os.lstat(path)), state)

    # -- reading a device ------------------------------------------------------------------------

    @staticmethod
    def devices(state: dict[str, Any]) -> list[dict[str, Any]]:
        gpus = state.get("gpus") or []
        return [g for g in gpus if isinstance(g, dict)]

    def device(self, state: dict[str, Any], index: int) -> dict[str, Any] | None:
        for dev in self.devices(state):
            if int(dev.get("index", -1)) == index:
                return dev
        return None

    @staticmethod
    def limit_w(dev: dict[str, Any]) -> float:
        """The power limit in force, W: the requested one, held below by the board's platform
        limit when it has one (the enforced limit)."""
        power = dev.get("power") or {}
        mw = power.get("limitMw", power.get("enforcedLimitMw", power.get("defaultLimitMw", 0)))
        platform = power.get("platformLimitMw")
        if platform is not None:
            mw = min(float(mw), float(platform))
        return float(mw) / 1000.0

    @staticmethod
    def default_w(dev: dict[str, Any]) -> float | None:
        mw = (dev.get("power") or {}).get("defaultLimitMw")
        return float(mw) / 1000.0 if mw is not None else None

    @staticmethod
    def persistence(dev: dict[str, Any]) -> bool:
        return str(dev.get("persistenceMode", "Enabled")).lower() in ("enabled", "1", "true", "on")

    @staticmethod
    def sm_bound_mhz(dev: dict[str, Any]) -> tuple[float, float]:
        """(highest SM clock the locks allow, the SM maximum), MHz.

        A graphics clock lock bounds it by its maximum; a memory clock lock by the ``smMaxByMem``
        ceiling of the locked memory clock (L40S: lower memory clocks offer only lower graphics clocks).
        """
        clocks = dev.get("clocks") or {}
        sm_max = float(clocks.get("smMaxMhz") or clocks.get("graphicsMaxMhz") or 0.0)
        bound = sm_max
        g = _range(clocks.get("lockedGraphics"))
        if g is not None and g[1] > 0:
            bound = min(bound, float(g[1])) if bound else float(g[1])
        mem = NvmlIO.memory_mhz(dev)
        ceiling = (dev.get("smMaxByMem") or {}).get(str(mem)) if mem is not None else None
        if ceiling is not None:
            bound = min(bound, float(ceiling)) if bound else float(ceiling)
        return bound, sm_max

    @staticmethod
    def memory_mhz(dev: dict[str, Any]) -> int | None:
        """The memory clock in force: under a lock, the highest supported clock within it (as
        nvidia-smi ``-lmc`` picks it), else the maximum."""
        clocks = dev.get("clocks") or {}
        m = _range(clocks.get("lockedMemory"))
        if m is None:
            mx = clocks.get("memoryMaxMhz") or clocks.get("memoryMhz")
            return int(mx) if mx else None
        lo, hi = m
        mems = sorted({int(e["memoryMhz"]) for e in dev.get("supportedClocks") or [] if "memoryMhz" in e},
                      reverse=True)
        pick = next((x for x in mems if lo <= x <= hi), None)
        if pick is None:
            pick = min(mems, key=lambda x: min(abs(x - lo), abs(x - hi))) if mems else hi
        return pick

    @staticmethod
    def lock_floor_mhz(dev: dict[str, Any]) -> float:
        """The floor of a graphics clock lock (``-lgc MIN,MAX``), MHz; 0 without a lock."""
        g = _range((dev.get("clocks") or {}).get("lockedGraphics"))
        return float(g[0]) if g is not None and g[0] > 0 else 0.0

    def lock_floor_frac(self, dev: dict[str, Any]) -> float:
        """The lock floor as a fraction of the SM maximum (0 without a lock)."""
        floor = self.lock_floor_mhz(dev)
        bound, sm_max = self.sm_bound_mhz(dev)
        if floor <= 0 or sm_max <= 0:
            return 0.0
        return min(floor, bound or floor) / sm_max

    def clock_frac(self, dev: dict[str, Any]) -> float:
        bound, sm_max = self.sm_bound_mhz(dev)
        return bound / sm_max if sm_max > 0 and bound > 0 else 1.0

    # -- writing a device ------------------------------------------------------------------------

    @staticmethod
    def reset_to_default(dev: dict[str, Any]) -> dict[str, Any]:
        """Persistence off and idle: the driver unloads; limit and clock locks go back to default."""
        power = dev.setdefault("power", {})
        clocks = dev.setdefault("clocks", {})
        before = {"limitMw": power.get("limitMw"), "lockedGraphics": clocks.get("lockedGraphics"),
                  "lockedMemory": clocks.get("lockedMemory")}
        default = power.get("defaultLimitMw")
        if default is not None:
            power["limitMw"] = default
            power["enforcedLimitMw"] = round(NvmlIO.limit_w(dev) * 1000)
        clocks["lockedGraphics"] = None
        clocks["lockedMemory"] = None
        return before

    def advance(self, dev: dict[str, Any], *, power_w: float, energy_mj: int, temp_c: float, util: float,
                ratio: float) -> None:
        """Write one tick's readings into a device: draw, energy, clocks, temperature, utilisation."""
        power = dev.setdefault("power", {})
        clocks = dev.setdefault("clocks", {})
        # A field the profile marks unsupported (gpus.fieldSupport) is printed as its token: never written.
        if "power.draw" not in (dev.get("fieldSupport") or {}):
            power["drawMw"] = round(power_w * 1000.0)
        power["energyMj"] = int(energy_mj)
        if power.get("limitMw") is not None:
            power["enforcedLimitMw"] = round(self.limit_w(dev) * 1000)
        bound, sm_max = self.sm_bound_mhz(dev)
        if util < 0.01:
            lows = [min(c["graphicsMhz"]) for c in dev.get("supportedClocks") or [] if c.get("graphicsMhz")]
            sm = float(min(lows)) if lows else 0.2 * sm_max
            sm = min(sm, bound) if bound else sm
        else:
            sm = bound * (max(0.0, min(1.0, ratio)) ** (1.0 / 1.35))
        floor = self.lock_floor_mhz(dev)
        if floor > 0 and ratio >= 0.999:
            # A locked GPU runs inside [min, max] of the lock, idle or not (only the power limit
            # pulls it below the floor).
            sm = max(sm, min(floor, bound) if bound else floor)
        clocks["smMhz"] = round(sm)
        clocks["graphicsMhz"] = round(sm)
        mem = self.memory_mhz(dev)
        if mem is not None:
            clocks["memoryMhz"] = mem
        dev["temperatureC"] = round(temp_c)
        dev["utilizationGpu"] = round(util * 100)
        dev["pstate"] = "P0" if util >= 0.01 else "P8"
