"""The journal: what was in force before joulectl first changed a device, and what it set since.

``<root>/var/lib/joulectl/state.json``, written atomically (temp file, fsync, rename), so a kill
at any point leaves either the old or the new journal, never a half-written one. Per device
(PCI bus id or powercap zone id) it keeps:

- ``original``: per setting, the value in force before joulectl's first change (``None`` when
  it was unset, e.g. no clock lock). ``cap --restore`` and ``governor reset`` go back to it.
- ``current``: per setting, the value joulectl last set and that is still in force by its hand.
  A lock or level not in ``current`` was not set by joulectl and is never reset.
- ``history``: the last :data:`HISTORY_LIMIT` settings made, with time and command, and at most
  :data:`HISTORY_MAX_BYTES` of them as JSON (the oldest go first). A setting made again at the
  value joulectl already has in force adds nothing. The last entry of a setting whose command is
  ``restore`` or ``operator`` says the value in force is the operator's (:meth:`Journal.owner_since`).
- ``pending`` (only while a run writes, and after a kill in that run): per setting, the values
  runs were about to write (a list: runs killed one after the other each add theirs). A run saves
  the journal with its originals and targets *ahead* of its first write (:meth:`Journal.intend`),
  so a kill between a write and the final save still leaves the original journaled and the
  target known as joulectl's, in force or not. :meth:`Journal.record` and
  :meth:`Journal.restored` clear it; :meth:`Journal.set_by_joulectl` counts it.

A save that would write what is already on disk writes nothing (:func:`save`): a cron run that
changes nothing leaves the journal untouched, not rewritten and fsynced.

A journal that cannot be parsed is reported and moved aside to ``state.json.corrupt-<time>``;
it is never overwritten blindly.

Setting names in use: ``capWatts`` (GPU and RAPL caps), ``gpuLockedClocks``,
``memoryLockedClocks`` (``"min,max"`` MHz), ``perfLevel``, ``sclkLevels`` (AMD),
``cpuGovernor``, ``epp`` (per cpufreq policy, keyed by policy name).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from joulectl.errors import ConfinementError, InputError
from joulectl.host import EscapeError, Host, HostIOError, NotRegularError
from joulectl.ops import JOURNAL_PATH as JOURNAL_PATH  # re-exported: where every other module reads it
from joulectl.record import record

HISTORY_LIMIT = 50
#: History kept per device, in bytes of JSON (the entries of a cron node are ~100 B each).
HISTORY_MAX_BYTES = 16 << 10
#: History commands after which the value in force is the operator's, not joulectl's.
OPERATOR_COMMANDS = ("restore", "operator")
#: Pending values kept per setting (one per run killed around its writes, duplicates merged).
PENDING_LIMIT = 16
#: A journal larger than this is not one joulectl wrote (history is bounded): it is set aside.
MAX_JOURNAL_BYTES = 64 << 20
API_VERSION = "joulectl.io/v1alpha1"

_UNSET = object()
#: The encoder of history entries (one instance: ``json.dumps(default=...)`` builds one per call).
_encode_entry = json.JSONEncoder(default=str).encode


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@record
class DeviceRecord:
    vendor: str = ""
    model: str | None = None
    kind: str = "gpu"
    original: dict[str, Any] = field(default_factory=dict)
    current: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, list[Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "vendor": self.vendor,
            "model": self.model,
            "kind": self.kind,
            "original": self.original,
            "current": self.current,
            "history": self.history,
        }
        if self.pending:
            out["pending"] = self.pending
        return out

    def note(self, command: str, setting: str, value: Any) -> None:
        """Add a history entry, keeping the last :data:`HISTORY_LIMIT` and at most
        :data:`HISTORY_MAX_BYTES` of JSON."""
        history = self.history
        entry = {"at": _now(), "command": command, "setting": setting, "value": value}
        # The size of the history as JSON, kept between notes of one run: a run that notes a
        # setting on each of 128 policies would otherwise encode each full history once per note.
        # Valid while the history is the one it was counted for (length and last entry).
        cached: tuple[int, object, int] | None = getattr(self, "_history_bytes", None)
        known = cached is not None and bool(history) and cached[0] == len(history) and cached[1] is history[-1]
        history.append(entry)
        if known and cached is not None:
            total = cached[2] + len(_encode_entry(entry)) + 2
        else:
            total = len(_encode_entry(history))  # one C-encoder call: sum(len(entry) + 2)
        for old in history[: max(0, len(history) - HISTORY_LIMIT)]:
            total -= len(_encode_entry(old)) + 2
        del history[:-HISTORY_LIMIT]
        if total > HISTORY_MAX_BYTES:
            sizes = [len(_encode_entry(e)) + 2 for e in history]
            total, keep = sum(sizes), 0
            while total > HISTORY_MAX_BYTES and keep < len(sizes) - 1:
                total -= sizes[keep]
                keep += 1
            del history[:keep]
        self._history_bytes = (len(history), history[-1], total)

    def last_entry(self, setting: str) -> dict[str, Any] | None:
        """The newest history entry of ``setting``."""
        for entry in reversed(self.history):
            if isinstance(entry, dict) and entry.get("setting") == setting:
                return entry
        return None

    def copy(self) -> DeviceRecord:
        """A copy whose containers change independently (the values, JSON data never changed in
        place, are shared): what ``copy.deepcopy`` gives, at a fraction of its cost."""
        return DeviceRecord(
            vendor=self.vendor,
            model=self.model,
            kind=self.kind,
            original=dict(self.original),
            current=dict(self.current),
            history=list(self.history),
            pending={k: list(v) for k, v in self.pending.items()},
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceRecord:
        if not isinstance(data, dict):
            raise ValueError("device record is not an object")
        rec = cls(
            vendor=str(data.get("vendor", "")),
            model=data.get("model"),
            kind=str(data.get("kind", "gpu")),
            original=dict(data.get("original") or {}),
            current=dict(data.get("current") or {}),
            history=list(data.get("history") or []),
            pending={str(k): list(v) if isinstance(v, list) else [v]
                     for k, v in dict(data.get("pending") or {}).items()},
        )
        return rec


@record
class Journal:
    devices: dict[str, DeviceRecord] = field(default_factory=dict)
    #: set when a corrupt journal was moved aside while loading (its new path).
    set_aside: str | None = None
    #: :func:`fingerprint` of the journal on disk as this run knows it (None: unknown), so that
    #: :func:`save` writes nothing when nothing changed; :data:`ABSENT` when there is no journal.
    on_disk: str | None = field(default=None, repr=False, compare=False)

    def record(
        self,
        device: str,
        setting: str,
        before: Any,
        value: Any,
        *,
        vendor: str = "",
        model: str | None = None,
        kind: str = "gpu",
        command: str = "cap",
    ) -> None:
        """Note that joulectl set ``setting`` of ``device`` to ``value`` (``before`` was in force).

        Setting again the value joulectl already has in force changes nothing (no history entry),
        so a cron run that repeats itself leaves the journal as it was."""
        rec = self._keep_original(device, setting, before, vendor, model, kind)
        rec.pending.pop(setting, None)
        if setting in rec.current and rec.current[setting] == value:
            return
        rec.current[setting] = value
        rec.note(command, setting, value)

    def _keep_original(
        self, device: str, setting: str, before: Any, vendor: str, model: str | None, kind: str
    ) -> DeviceRecord:
        """The record of ``device`` (created, or its vendor and model refreshed), with ``before``
        as the original of ``setting`` unless it already has one."""
        rec = self.devices.setdefault(device, DeviceRecord(vendor=vendor, model=model, kind=kind))
        rec.vendor = vendor or rec.vendor
        rec.model = model or rec.model
        if setting not in rec.original:
            rec.original[setting] = before
        return rec

    def intend(
        self,
        device: str,
        setting: str,
        before: Any,
        value: Any,
        *,
        vendor: str = "",
        model: str | None = None,
        kind: str = "gpu",
    ) -> None:
        """Note, ahead of the write, that joulectl is about to set ``setting`` of ``device`` to
        ``value`` (``before`` in force now): the original is kept as :meth:`record` keeps it, the
        value joins ``pending`` (next to any a killed run left there: each may be in force);
        ``current`` stays what joulectl set before."""
        rec = self._keep_original(device, setting, before, vendor, model, kind)
        values = rec.pending.setdefault(setting, [])
        if value not in values:
            values.append(value)
        del values[:-PENDING_LIMIT]

    def pending(self, device: str, setting: str) -> list[Any]:
        """The values runs killed around their writes were about to write (each may be in force)."""
        rec = self.devices.get(device)
        return list(rec.pending.get(setting, [])) if rec is not None else []

    def original(self, device: str, setting: str, default: Any = None) -> Any:
        rec = self.devices.get(device)
        if rec is None or setting not in rec.original:
            return default
        return rec.original[setting]

    def has_original(self, device: str, setting: str) -> bool:
        rec = self.devices.get(device)
        return rec is not None and setting in rec.original

    def current(self, device: str, setting: str, default: Any = None) -> Any:
        rec = self.devices.get(device)
        if rec is None:
            return default
        return rec.current.get(setting, default)

    def set_by_joulectl(self, device: str, setting: str) -> bool:
        """Whether joulectl set ``setting`` and has not undone it (or was about to set it when
        the run was killed: see ``pending``)."""
        rec = self.devices.get(device)
        return rec is not None and (setting in rec.current or setting in rec.pending)

    def restored(self, device: str, setting: str, *, command: str = "restore", value: Any = _UNSET,
                 vendor: str = "", model: str | None = None, kind: str = "gpu") -> None:
        """Forget ``setting`` after it was returned to its original value. With ``value`` (the
        value a restore without a journal entry put back, a default) a device without a record
        gets one, whose history says the value in force is the operator's from now on."""
        rec = self.devices.get(device)
        if rec is None:
            if value is _UNSET:
                return
            rec = self.devices[device] = DeviceRecord(vendor=vendor, model=model, kind=kind)
        original = rec.original.pop(setting, None)
        value = original if value is _UNSET else value
        rec.current.pop(setting, None)
        rec.pending.pop(setting, None)
        rec.note(command, setting, value)
        if not rec.original and not rec.current and not rec.pending:
            rec.note(command, "*", "restored")

    def forget(self, device: str, setting: str, in_force: Any, *, command: str = "operator") -> None:
        """Drop joulectl's entry of ``setting`` (original, current, pending): the operator has set
        ``in_force`` since, which is what a restore now leaves and what the next change keeps as
        the original. Noted in the history with ``command``."""
        rec = self.devices.get(device)
        if rec is None:
            return
        rec.original.pop(setting, None)
        rec.current.pop(setting, None)
        rec.pending.pop(setting, None)
        rec.note(command, setting, in_force)

    def owner_since(self, device: str, setting: str) -> dict[str, Any] | None:
        """The history entry after which the value in force is the operator's (a restore, or
        an operator's change joulectl noticed), when joulectl has set nothing since; else None."""
        rec = self.devices.get(device)
        if rec is None or setting in rec.original or setting in rec.current or setting in rec.pending:
            return None
        entry = rec.last_entry(setting)
        return entry if entry is not None and entry.get("command") in OPERATOR_COMMANDS else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "Journal",
            "updatedAt": _now(),
            "devices": {k: v.to_dict() for k, v in sorted(self.devices.items())},
        }

    @classmethod
    def from_dict(cls, data: Any) -> Journal:
        if not isinstance(data, dict) or data.get("kind") != "Journal":
            raise ValueError("not a joulectl journal")
        devices = data.get("devices") or {}
        if not isinstance(devices, dict):
            raise ValueError("devices is not an object")
        return cls(devices={str(k): DeviceRecord.from_dict(v) for k, v in devices.items()})


@record(frozen=True)
class Intent:
    """A setting a run is about to write, journaled ahead of the write (write-ahead): ``before``
    is what is in force now (the original, unless the journal has one), ``value`` the target."""

    device: str
    setting: str
    before: Any
    value: Any
    vendor: str = ""
    model: str | None = None
    kind: str = "gpu"


def journal_ahead(journal: Journal, intents: Sequence[Intent]) -> Journal:
    """A copy of ``journal`` with every intent noted (:meth:`Journal.intend`: the original kept,
    the target ``pending``): saved before the writes, it keeps the originals, and the targets known
    as joulectl's, should the run be killed between a write and the final save. ``journal``
    itself is left as it is (the final save writes it as today)."""
    ahead = Journal(devices={k: v.copy() for k, v in journal.devices.items()})
    for i in intents:
        ahead.intend(i.device, i.setting, i.before, i.value, vendor=i.vendor, model=i.model, kind=i.kind)
    return ahead


def save_ahead(host: Host, journal: Journal, intents: Sequence[Intent]) -> None:
    """Save :func:`journal_ahead` atomically; ``OSError`` when the journal cannot be written.

    Not fsynced: it guards against a killed run (the page cache outlives the process). A power loss
    needs no guard: the limits themselves do not survive it, and the final save is durable.
    """
    if intents:
        ahead = journal_ahead(journal, intents)
        ahead.on_disk = journal.on_disk
        save(host, ahead, durable=False)
        journal.on_disk = ahead.on_disk


#: :attr:`Journal.on_disk` of a node without a journal file.
ABSENT = "absent"


def _encoded_devices(journal: Journal) -> list[str]:
    """Each device record as the journal file holds it (``"<key>": <record>``), by key: one C
    encoder call per device, shared by :func:`fingerprint` and :func:`save`."""
    return [f"{json.dumps(k)}: {json.dumps(v.to_dict())}" for k, v in sorted(journal.devices.items())]


def fingerprint(journal: Journal, encoded: list[str] | None = None) -> str:
    """What a save would write, but for the time stamp: equal fingerprints, equal journals.

    The records in key order, each in its fields' order (a record keeps the order of its
    settings as loaded; a setting dropped and set again moves to the end, and its journal is
    then saved once more: never a change left unsaved)."""
    return "\n".join(_encoded_devices(journal) if encoded is None else encoded)


def _fingerprint_of_text(text: str) -> str | None:
    """The :func:`fingerprint` of a journal file :func:`save` wrote, from its text (one line per
    device record, in key order), without encoding the records again; None for any other shape
    (then the caller encodes). A file whose lines are not what this version writes for its
    records gets another fingerprint: the journal is saved once more, never a change lost."""
    start = text.find('\n  "devices": {\n')
    if start < 0:
        return None
    start += len('\n  "devices": {\n')
    end = text.find("\n  }", start)
    if end < 0:
        return None
    lines = text[start:end].split("\n")
    if not all(line.startswith("    ") for line in lines):
        return None
    return "\n".join(line[4:-1] if line.endswith(",") else line[4:] for line in lines)


def load(host: Host) -> Journal:
    """The node's journal; empty when there is none. A corrupt one is moved aside and reported
    through :attr:`Journal.set_aside`."""
    import errno

    try:
        text: str | None = host.read(JOURNAL_PATH, limit=MAX_JOURNAL_BYTES)
    except EscapeError as e:
        raise ConfinementError(e.strerror, file=JOURNAL_PATH) from None
    except NotRegularError as e:
        raise InputError(f"the journal is {e.strerror}; move it away", file=JOURNAL_PATH) from None
    except HostIOError as e:
        if e.errno == errno.ENOENT:
            return Journal(on_disk=ABSENT)
        if e.errno == errno.EISDIR:
            raise InputError("the journal is not a regular file (a directory); move it away",
                             file=JOURNAL_PATH) from None
        if e.errno != errno.EFBIG:
            raise
        text = None  # far larger than any journal joulectl writes: corrupt
    try:
        if text is None:
            raise ValueError("journal too large")
        journal = Journal.from_dict(json.loads(text))
        journal.on_disk = _fingerprint_of_text(text) or fingerprint(journal)
        return journal
    except (ValueError, TypeError, AttributeError, RecursionError):
        aside = f"{JOURNAL_PATH}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 1000000:06d}"
        import os

        os.replace(host.path(JOURNAL_PATH), host.path(aside))
        return Journal(set_aside=aside)


def dumps(data: dict[str, Any], encoded: list[str] | None = None) -> str:
    """The journal as JSON text: one line per top-level key and per device record.

    Readable and greppable by bus id, and written by the C encoder (``indent`` would switch
    ``json`` to its pure-Python encoder: 2 ms per save of a journal with full histories).
    ``encoded``: the device lines of :func:`_encoded_devices`, when the caller has them."""
    lines = []
    for key, value in data.items():
        if key == "devices" and value:
            if encoded is None:
                encoded = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            text = "{\n" + ",\n".join(f"    {line}" for line in encoded) + "\n  }"
        else:
            text = json.dumps(value)
        lines.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def save(host: Host, journal: Journal, *, durable: bool = True) -> None:
    """Write the journal atomically, then remove the temp files of saves that were killed.

    Every save runs under the node lock, so a ``.state.json.*`` temp file beside the journal is
    the leftover of a run killed between creating and renaming it: never read, only clutter.
    Nothing is written when the journal is what :attr:`Journal.on_disk` says is on disk (or when
    there is no journal and nothing to put in one).
    """
    encoded = _encoded_devices(journal)
    now = fingerprint(journal, encoded)
    if journal.on_disk is not None and (now == journal.on_disk or (journal.on_disk == ABSENT
                                                                   and not journal.devices)):
        return
    data = {"apiVersion": API_VERSION, "kind": "Journal", "updatedAt": _now(), "devices": journal.devices}
    host.write_atomic(JOURNAL_PATH, dumps(data, encoded), mode=0o600, durable=durable)
    import os

    directory, name = os.path.split(JOURNAL_PATH)
    for entry in host.listdir(directory):
        if entry.startswith(f".{name}."):
            try:
                os.unlink(host.path(f"{directory}/{entry}"))
            except OSError:
                pass
    journal.on_disk = now
