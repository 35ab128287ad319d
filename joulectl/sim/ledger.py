"""The per-node energy ledger in ``<node>/state/ledger.json``.

Exported energy counters never decrease: the tick loop keeps each counter's unwrapped total here
(µJ for sysfs zones and hwmon, mJ for NVML), and a restart continues from it. The ledger is
rewritten every tick whole, in place, padded with spaces to :data:`INPLACE_BYTES` — one
``pwrite`` of less than a page at offset 0, which a kill cannot split — so the file always holds
the last whole tick and always parses. A ledger larger than that (a node with many counters) is
written to a temporary file and renamed over the old one, which is atomic as well.

The ledger also records the wall time of its tick: a restart starts a fresh time base, so no
energy accrues while the simulator is down.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError

LEDGER_NAME = "ledger.json"
LEDGER_VERSION = 1
#: Ledgers up to this size are rewritten in place (padded); larger ones by rename.
INPLACE_BYTES = 2048


@dataclass
class Ledger:
    """One node's counters and slow state as of its last tick.

    ``energy`` maps a counter id (``pkg0``, ``dram1``, ``gpu3`` ...) to its unwrapped total, in
    the counter's own unit; ``state`` holds floats the physics continues from (temperatures,
    settled caps, average power); ``time_s`` is the wall-clock time of the tick.
    """

    node: str
    tick: int = 0
    time_s: float = 0.0
    energy: dict[str, int] = field(default_factory=dict)
    state: dict[str, float] = field(default_factory=dict)
    #: The keys :meth:`to_json`'s template was made for, and the template.
    _keys: tuple[tuple[str, ...], tuple[str, ...]] | None = field(default=None, repr=False, compare=False)
    _template: str = field(default="", repr=False, compare=False)

    def to_json(self) -> str:
        """The compact JSON document: state values to 4 decimals, the time to 3 (milliseconds).

        One ``%`` format of a template made once per set of keys (``%.4f`` for each state value,
        which parses as ``round(v, 4)``): ``json.dumps``, with ``round`` and ``repr`` of each float,
        cost a third of a node's tick. A value that is not a finite number, or an energy that is
        not an int, goes through ``json.dumps`` instead."""
        state = self.state
        energy = self.energy
        keys = (tuple(energy), tuple(state))
        if keys != self._keys:
            e = ",".join([_quoted(k) + ":%d" for k in energy])
            st = ",".join([_quoted(k) + ":%.4f" for k in state])
            self._template = ('{"v":' + str(LEDGER_VERSION) + ',"node":' + _quoted(self.node)
                              + ',"tick":%d,"t":%.3f,"e":{' + e + '},"s":{' + st + "}}")
            self._keys = keys
        values = (self.time_s, *state.values())
        if not math.isfinite(sum(values)) or type(sum(energy.values())) is not int:
            return self._dumps()
        return self._template % (self.tick, *values[:1], *energy.values(), *values[1:])

    def _dumps(self) -> str:
        doc = {"v": LEDGER_VERSION, "node": self.node, "tick": self.tick, "t": round(self.time_s, 3),
               "e": self.energy, "s": {k: round(v, 4) for k, v in self.state.items()}}
        return json.dumps(doc, separators=(",", ":"))


_QUOTED: dict[str, str] = {}


def _quoted(key: str) -> str:
    """``json.dumps(key)`` with ``%`` doubled (for a ``%`` template), remembered."""
    hit = _QUOTED.get(key)
    if hit is None:
        if len(_QUOTED) > 4096:
            _QUOTED.clear()
        hit = _QUOTED[key] = json.dumps(key).replace("%", "%%")
    return hit


def ledger_path(node_dir: str) -> str:
    """The ledger file of the node tree at ``node_dir``."""
    return os.path.join(node_dir, "state", LEDGER_NAME)


def parse(text: str, path: str) -> Ledger:
    """A ledger from its file content; :class:`InputError` naming the file when it is not one."""
    try:
        doc: Any = json.loads(text)
    except UnicodeDecodeError:
        raise InputError("not valid JSON (not UTF-8)", file=path, field="ledger") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", file=path, field="ledger") from None
    return from_doc(doc, path)


def from_doc(doc: Any, path: str) -> Ledger:
    """A ledger from its parsed JSON document (see :func:`parse`)."""
    if not isinstance(doc, dict) or doc.get("v") != LEDGER_VERSION:
        raise InputError(f"not a version {LEDGER_VERSION} energy ledger", file=path, field="v")
    energy = doc.get("e", {})
    state = doc.get("s", {})
    if not isinstance(energy, dict) or not all(isinstance(v, int) and v >= 0 for v in energy.values()):
        raise InputError("energy counters must be non-negative integers", file=path, field="e")
    if not isinstance(state, dict) or not all(isinstance(v, (int, float)) for v in state.values()):
        raise InputError("state values must be numbers", file=path, field="s")
    tick = doc.get("tick", 0)
    t = doc.get("t", 0.0)
    if not isinstance(tick, int) or not isinstance(t, (int, float)):
        raise InputError("tick and t must be numbers", file=path, field="tick")
    return Ledger(node=str(doc.get("node", "")), tick=tick, time_s=float(t),
                  energy={str(k): int(v) for k, v in energy.items()},
                  state={str(k): float(v) for k, v in state.items()})


def signature(node_dir: str) -> list[int] | None:
    """The ledger file's (mtime_ns, size, inode), or None when it has none: a start-up cache holding
    a copy of the ledger is used only while the file still has the signature it had then."""
    try:
        st = os.lstat(ledger_path(node_dir))
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def load(node_dir: str) -> Ledger | None:
    """The node's ledger, or None when it has none yet (a fresh tree)."""
    path = ledger_path(node_dir)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"cannot read the energy ledger ({exc.strerror})", file=path) from None
    return parse(text, path)


def encode(ledger: Ledger) -> bytes:
    """The ledger's bytes: padded with spaces to :data:`INPLACE_BYTES` when it fits."""
    raw = ledger.to_json().encode("utf-8")
    if len(raw) < INPLACE_BYTES:
        return raw + b" " * (INPLACE_BYTES - 1 - len(raw)) + b"\n"
    return raw + b"\n"


def write(node_dir: str, ledger: Ledger) -> None:
    """Rewrite the ledger: in place when it and the file are both one padded block, else by rename."""
    path = ledger_path(node_dir)
    data = encode(ledger)
    if len(data) == INPLACE_BYTES:
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                if os.fstat(fd).st_size == INPLACE_BYTES:
                    os.pwrite(fd, data, 0)
                    return
            finally:
                os.close(fd)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_kept(node_dir: str, ledger: Ledger, fd: int) -> int:
    """:func:`write` through a descriptor of the ledger kept open between ticks: one ``pwrite``
    while the ledger fits its padded block. ``fd`` is the descriptor (-1: none yet); returned is
    the one to keep (-1 when the ledger is written by rename: a descriptor would hold the old file).

    Only the process that holds the descriptor may rewrite the ledger meanwhile, and only in place.
    """
    data = encode(ledger)
    if len(data) == INPLACE_BYTES and fd >= 0:
        os.pwrite(fd, data, 0)
        return fd
    if fd >= 0:
        os.close(fd)
    write(node_dir, ledger)
    if len(data) != INPLACE_BYTES:
        return -1
    try:
        return os.open(ledger_path(node_dir), os.O_WRONLY)
    except OSError:
        return -1
