"""The tick loop of one emulated node: readback, validation, physics, counters, ledger.

A :class:`NodeRuntime` keeps its node's state in memory between ticks. Each tick:

1. **Readback** (:meth:`NodeRuntime.readback`): one ``lstat`` per agent-writable file of the
   manifest; only a file whose (mtime, size, inode) moved since the emulator last wrote it is read.
   The value is checked against the manifest rule the kernel applies; a value the hardware would
   refuse is put back and reported as a ``joulie.sim.write.rejected`` event carrying the errno,
   a value it would take is normalised the way the kernel reads it back (RAPL ``limitBits`` wrap,
   amdgpu whole watts, Intel PL1 clamped to its bounds). NVIDIA state is ``state/nvml.json``,
   which the fake nvidia-smi writes under an flock: it is read only when it changed.
2. **Physics** (:meth:`NodeRuntime.step`): per CPU package and per GPU, with the node's baseLoad,
   the caps, governors, clock locks and performance levels in force (:mod:`joulectl.sim.physics`).
3. **Counters**: energy advanced by ``P·dt`` in the ledger (unwrapped), exposed files wrap at
   ``max_energy_range_uj``; power, frequency and temperature files; a file is rewritten only when
   its content changed, in place (same inode), so a reader holding it open keeps reading it.
4. **Ledger**: rewritten in place (:mod:`joulectl.sim.ledger`).

Everything about where files are comes from :class:`NodeModel`, built by
:mod:`joulectl.sim.layout` from the tree's ``state/manifest.json``.
"""

from __future__ import annotations

import errno as errno_mod
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from joulectl.errors import InputError
from joulectl.sim import ledger as ledger_mod
from joulectl.sim import physics as ph
from joulectl.sim import sysfs_rules as rules
from joulectl.sim.sysfs_rules import EPP_STRINGS as EPP_STRINGS
from joulectl.sim.sysfs_rules import Context as Context
from joulectl.sim.sysfs_rules import Rule as Rule
from joulectl.sim.sysfs_rules import Verdict as Verdict
from joulectl.sim.sysfs_rules import sclk_table as sclk_table

CACHE_NAME = "tick-cache.json"
#: How a start-up cache begins (``json.dumps`` of save_cache's document): ``u`` (used) is the byte
#: before the last, set to 1 in place by the start that takes the cache's copy of the ledger.
_CACHE_HEAD = b'{"v":2,"u":0,'
REJECTED = "joulie.sim.write.rejected"
CAP_RESET = "joulie.sim.cap.reset"
CLAMPED = "joulie.sim.write.clamped"

#: Writable-file kinds the emulator models. Any other kind is taken as written and changes nothing.
KINDS = rules.KINDS
_FREQ_KINDS = frozenset({"cpufreq_governor", "cpufreq_max", "cpufreq_min", "epp", "no_turbo", "boost"})
#: Frequency ceiling an EPP string leaves a package at (fraction of max): an assumption.
EPP_FREQ = {"performance": 1.0, "balance_performance": 1.0, "default": 1.0, "balance_power": 0.85, "power": 0.7}
_UINT = re.compile(r"^\s*\+?(\d+)\s*$")


@dataclass(slots=True)
class Writable:
    """An agent-writable file and the value in force."""

    rel: str
    kind: str
    rule: Rule
    component: str = ""
    text: str = ""
    sig: tuple[int, int, int] | None = None
    path: str = ""


@dataclass(slots=True)
class CounterFile:
    """A file the emulator advances: ``kind`` is energy_uj, power_uw, freq_khz, temp_mc or sclk."""

    rel: str
    kind: str
    component: str
    max_range: int | None = None
    text: str = ""
    secondary: bool = False
    path: str = ""
    sig: tuple[int, int, int] | None = None
    #: Kept open between ticks (:class:`FdBudget`): ``keep`` when the budget gave it a descriptor,
    #: ``fd`` once opened (-1 before).
    keep: bool = False
    fd: int = -1


@dataclass
class PackageModel:
    """A CPU package: its RAPL zone ids, cpufreq policies and power model."""

    index: int
    params: ph.CpuParams
    cap_range_w: tuple[float, float] | None = None
    policies: list[str] = field(default_factory=list)


@dataclass
class GpuModel:
    """A GPU: vendor, the model parameters, and where its cap lives."""

    index: int
    vendor: str
    params: ph.GpuParams
    bus_id: str = ""
    default_cap_w: float | None = None
    sclk_mhz: tuple[int, ...] = ()
    primary: int | None = None
    cap_share: float = 1.0


@dataclass
class NodeModel:
    """Everything the tick needs about one node's layout and hardware, relative to its dir."""

    node: str
    profile: str
    packages: list[PackageModel]
    gpus: list[GpuModel]
    writables: list[Writable]
    counters: list[CounterFile]
    fmax_khz: int
    fmin_khz: int
    dram: bool
    psys: bool
    core: bool
    nvml: bool
    virtual: bool
    #: Identifies the layout (the writable and counter files, in order): see :func:`model_fingerprint`.
    fingerprint: str = ""


def model_fingerprint(model: NodeModel) -> str:
    """A digest of the model's file layout (kept on the model; copies of a template share it).

    The start-up cache is indexed by file position, valid only for the layout it was written for.
    """
    if not model.fingerprint:
        import hashlib

        h = hashlib.blake2b(digest_size=12)
        for w in model.writables:
            h.update(f"w {w.rel} {w.kind} {w.component}\n".encode())
        for c in model.counters:
            h.update(f"c {c.rel} {c.kind} {c.component}\n".encode())
        model.fingerprint = h.hexdigest()
    return model.fingerprint


@dataclass(frozen=True)
class BaseLoad:
    """The utilisation a node runs at while no workload drives it (a ClusterSpec baseLoad)."""

    cpu_util: float = 1.0
    gpu_util: float = 1.0
    memory_intensity: float = 0.2
    io_intensity: float = 0.0
    cpu_class: str = "cpu.compute_bound"
    gpu_class: str = "gpu.compute_bound"

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> BaseLoad:
        data = data or {}

        def num(key: str, default: float) -> float:
            value = data.get(key, default)
            return float(value) if isinstance(value, (int, float)) else default

        return cls(
            cpu_util=ph.clamp01(num("cpuUtil", 1.0)),
            gpu_util=ph.clamp01(num("gpuUtil", 1.0)),
            memory_intensity=ph.clamp01(num("memoryIntensity", 0.2)),
            io_intensity=ph.clamp01(num("ioIntensity", 0.0)),
            cpu_class=str(data.get("cpuClass", "cpu.compute_bound")),
            gpu_class=str(data.get("gpuClass", "gpu.compute_bound")),
        )


@dataclass
class Event:
    """A simulator event: appended to ``events.jsonl`` as ``{time, node, name, attributes}``."""

    time_s: float
    node: str
    name: str
    attributes: dict[str, Any]


@dataclass
class Sample:
    """What one tick of one node produced, for telemetry and status."""

    node: str
    time_s: float
    power_w: float
    cpu_w: float
    gpu_w: float
    energy_j: dict[str, tuple[str, float]]
    gpu_power_w: dict[str, float]
    caps_w: dict[str, float | None]
    governors: dict[str, str]
    virtual: bool = False
    start_s: float = 0.0
    #: The node's last readings by component (``T.gpu0`` °C, ``P.gpu0`` average W, ``u.gpu0``
    #: utilisation 0..1, ``c.gpu0`` clock fraction, ``cap.gpu0`` the cap in effect W, ``f.pkg0``
    #: frequency fraction): what the HTTP endpoints and exporter formats report.
    readings: dict[str, float] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its field values in order, not as a ``__dict__``: a worker sends every
        node's sample to the main process each tick, and this loads in two thirds of the time
        (docs/PERFORMANCE.md)."""
        return type(self), (self.node, self.time_s, self.power_w, self.cpu_w, self.gpu_w, self.energy_j,
                            self.gpu_power_w, self.caps_w, self.governors, self.virtual, self.start_s, self.readings)


#: Prefixes of the ledger state keys a :class:`Sample` carries as readings.
_READING_PREFIXES = ("T.", "P.", "u.", "c.", "cap.", "f.")


@dataclass
class ReadbackMarks:
    """What the readback of a node must look at: the writables (indices) an inotify watch named
    since the last tick, a full poll once (queue overflow), or polling for good (no watch)."""

    dirty: set[int] = field(default_factory=set)
    full_poll: bool = False
    polled: bool = False


# -- file helpers --------------------------------------------------------------------------------


def _sig(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_bytes(path: str) -> bytes | None:
    """A small file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(65536)
    except OSError:
        return None


def read_text(path: str) -> str | None:
    """A small file's text, or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(65536).decode("utf-8", "replace")
    except OSError:
        return None


def _open_for_write(path: str) -> int | None:
    """A write descriptor of ``path`` (a read-only attribute through a temporary ``chmod`` when
    not root), or None when it cannot be opened."""
    try:
        return os.open(path, os.O_WRONLY)
    except PermissionError:
        try:
            mode = os.stat(path).st_mode & 0o7777
            os.chmod(path, mode | 0o200)
        except OSError:
            return None
        try:
            return os.open(path, os.O_WRONLY)
        except OSError:
            return None
        finally:  # the mode put back whether the open worked or not
            try:
                os.chmod(path, mode)
            except OSError:
                pass
    except OSError:
        return None


def write_in_place(path: str, text: str) -> tuple[int, int, int] | None:
    """Replace a file's content without replacing the file (same inode); its new signature.

    ``pwrite`` at offset 0 then ``ftruncate`` to the new length: never ``O_TRUNC``, whose
    truncation to zero frees the file's block (a discard on this kind of ext4 costs milliseconds).
    A read-only attribute (0444) is written through a temporary ``chmod`` when not root.
    """
    data = text.encode("utf-8")
    fd = _open_for_write(path)
    if fd is None:
        return None
    try:
        n = os.pwrite(fd, data, 0)
        os.ftruncate(fd, n)
        return _sig(os.fstat(fd))
    finally:
        os.close(fd)


#: The first byte of a document :func:`rewrite_document` is rewriting: no JSON text starts with it.
TORN = b"!"


def rewrite_document(path: str, data: bytes) -> None:
    """Replace a JSON document's file in place (same inode), so that no reader and no kill ever
    finds a document that parses but mixes the new bytes with the old.

    The first byte is set to :data:`TORN` before the rest is written and put back last, after the
    file is cut to the new length: a read or a kill in between sees a file that does not parse,
    which every reader takes as no document. Instead of a temporary file and ``rename``: over an
    existing file, ext4 starts the new file's write-out at the rename (``auto_da_alloc``), about
    3 ms a file on this machine's disk at load 7 against microseconds for the writes in place
    (a stop writes one start-up cache per node).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not data:
            os.ftruncate(fd, 0)
            return
        os.pwrite(fd, TORN, 0)
        view, off = memoryview(data)[1:], 1
        while view:
            n = os.pwrite(fd, view, off)
            if n <= 0:
                raise OSError(errno_mod.EIO, "short write", path)
            view, off = view[n:], off + n
        os.ftruncate(fd, len(data))
        os.pwrite(fd, data[:1], 0)
    finally:
        os.close(fd)


def write_counter(path: str, text: str, old_len: int) -> bool:
    """:func:`write_in_place` for a counter the emulator alone writes: no signature taken, and no
    ``ftruncate`` when the new text is not shorter than the ``old_len`` bytes it replaces."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return write_in_place(path, text) is not None
    try:
        return _overwrite(fd, text.encode("utf-8"), old_len)
    finally:
        os.close(fd)


def _overwrite(fd: int, data: bytes, old_len: int) -> bool:
    """``data`` over the file's first bytes, cut to its length only when the text it replaces
    (``old_len`` bytes) was longer; False when the write fails."""
    try:
        n = os.pwrite(fd, data, 0)
        if n < old_len:
            os.ftruncate(fd, n)
        return True
    except OSError:
        return False


def write_kept(c: CounterFile, text: str) -> bool:
    """:func:`write_counter` through the counter's descriptor kept open between ticks (opened at
    the first write: one ``pwrite`` a tick instead of open, write and close). A counter whose file
    cannot be opened is written the usual way from then on."""
    fd = c.fd
    if fd < 0:
        opened = _open_for_write(c.path)
        if opened is None:
            c.keep = False
            return write_counter(c.path, text, len(c.text))
        fd = c.fd = opened
    return _overwrite(fd, text.encode("utf-8"), len(c.text))


#: Descriptors left for everything else a process of the run opens (telemetry files, HTTP clients,
#: pipes, the NVML state, tools) when the tick keeps files open.
FD_RESERVE = 1024


class FdBudget:
    """How many files a process keeps open between ticks: what ``RLIMIT_NOFILE`` allows (its soft
    limit raised to the hard one) less those open and :data:`FD_RESERVE`. ``take()`` hands one out
    while any is left; ``wanted`` counts every request, so a start can say what did not fit."""

    def __init__(self, size: int) -> None:
        self.size = max(0, size)
        self.left = self.size
        self.wanted = 0

    def take(self) -> bool:
        self.wanted += 1
        if self.left > 0:
            self.left -= 1
            return True
        return False


def fd_limit() -> int:
    """``RLIMIT_NOFILE`` after raising this process's soft limit to its hard limit (which needs no
    privilege); 1024 where it cannot be read."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    except (ValueError, OSError):
        return soft


def fd_budget() -> FdBudget:
    """This process's :class:`FdBudget` (see :func:`fd_limit`)."""
    limit = fd_limit()
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 64
    return FdBudget(limit - in_use - FD_RESERVE)


def kept_files(model: NodeModel) -> int:
    """The files a node of ``model`` rewrites every tick and keeps open when the budget allows: its
    ledger and its energy counters (those that are not also agent-writable files)."""
    rels = {w.rel for w in model.writables}
    return 1 + sum(1 for c in model.counters if c.kind == "energy_uj" and c.rel not in rels)


# -- validation ----------------------------------------------------------------------------------


def context(rt: NodeRuntime | None, w: Writable, *, own_limit: bool = True) -> Context:
    """What else is in force for a store to ``w`` (its policy's governor, turbo, the other limit;
    ``own_limit=False``: a minimum as asked for, not yet clamped to the policy's maximum)."""
    if rt is None:
        return Context()
    governor = rt.value(w.component, "cpufreq_governor") if w.kind in ("epp", "cpufreq_governor") else None
    turbo = True
    other: int | None = None
    if w.kind in ("cpufreq_max", "cpufreq_min"):
        turbo = rt.turbo_on()
        if w.kind == "cpufreq_min" and own_limit:
            hi = rt.value(w.component, "cpufreq_max")
            other = _uint(hi, -1) if hi is not None else None
            other = other if other is not None and other >= 0 else None
    if w.kind == "amd_sclk":
        return Context(perf_level=rt.value(w.component, "amd_perf_level"))
    if w.kind in ("intel_gt_min", "intel_gt_max"):
        bound = rt.value(w.component, "intel_gt_max" if w.kind == "intel_gt_min" else "intel_gt_min")
        mhz = _uint(bound, -1) if bound is not None else -1
        return Context(other_mhz=mhz if mhz >= 0 else None)
    return Context(governor=governor, turbo=turbo, other_khz=other)


# -- the node ------------------------------------------------------------------------------------


@dataclass
class _Shared:
    """What every node of one layout has in common, by file position (computed once per layout)."""

    rels: list[str]
    by_component: dict[str, list[int]]
    index: dict[tuple[str, str], int]
    governors: list[int]
    shared_rels: dict[str, list[int]]
    freq_groups: dict[int, list[int]]
    other_counters: list[int]


_SHARED: dict[str, _Shared] = {}


def _shared(model: NodeModel) -> _Shared:
    key = model_fingerprint(model)
    hit = _SHARED.get(key)
    if hit is not None:
        return hit
    by_component: dict[str, list[int]] = {}
    index: dict[tuple[str, str], int] = {}
    by_rel: dict[str, list[int]] = {}
    for i, w in enumerate(model.writables):
        by_component.setdefault(w.component, []).append(i)
        index.setdefault((w.component, w.kind), i)
        by_rel.setdefault(w.rel, []).append(i)
    freq_groups: dict[int, list[int]] = {}
    other: list[int] = []
    for i, c in enumerate(model.counters):
        if c.kind == "freq_khz":
            pkg = int(c.component[3:]) if c.component.startswith("pkg") and c.component[3:].isdigit() else 0
            freq_groups.setdefault(pkg, []).append(i)
        else:
            other.append(i)
    counter_rels = {c.rel for c in model.counters}
    hit = _Shared(
        rels=[w.rel for w in model.writables], by_component=by_component, index=index,
        governors=[i for i, w in enumerate(model.writables) if w.kind == "cpufreq_governor"],
        shared_rels={r: v for r, v in by_rel.items() if r in counter_rels},
        freq_groups=freq_groups, other_counters=other,
    )
    if len(_SHARED) >= 64:
        _SHARED.clear()
    _SHARED[key] = hit
    return hit



def _errno_type(err: int) -> str:
    return errno_mod.errorcode.get(err, str(err)).lower()


def _uint(text: str, default: int) -> int:
    m = _UINT.match(text)
    return int(m.group(1)) if m else default


class NodeRuntime:
    """One node's emulation state, kept in memory between ticks."""

    def __init__(self, node_dir: str, model: NodeModel, load: BaseLoad, *, zone_offset_c: float = 0.0,
                 facility: dict[str, float] | None = None, nvml_io: Any = None,
                 marks: ReadbackMarks | None = None, fds: FdBudget | None = None) -> None:
        self.dir = node_dir
        # Set by the shard's inotify watcher; without one the node is polled.
        self.marks = marks if marks is not None else ReadbackMarks(polled=True)
        self.model = model
        self.load = load
        self.zone_offset_c = zone_offset_c
        self.facility = facility or {}
        self.nvml_io = nvml_io
        self.events: list[Event] = []
        self.writes = 0
        #: Each component's power over the last step (W), and the seconds of the next interval whose
        #: energy a read already accrued (:meth:`advance_energy`).
        self.power_w: dict[str, float] = {}
        self.energy_ahead: dict[str, float] = {}
        # After a clean stop the start-up cache holds a copy of the ledger, used while the ledger
        # file has the signature it had then (one lstat instead of reading and parsing the file).
        cache_doc = self._read_cache()
        led = self._cached_ledger(cache_doc)
        if led is None:
            led = ledger_mod.load(node_dir)
        self.ledger = led if led is not None else ledger_mod.Ledger(model.node)
        self._freq_cache: dict[int, float] | None = None
        self._governors: dict[str, str] = {}
        self._epp_saved: dict[str, str] = {}
        # scaling_max_freq values turbo-off cut to the base frequency, restored when turbo comes back
        self._turbo_cut: dict[str, str] = {}
        # scaling_min_freq values asked for above the policy's maximum, shown at the maximum and
        # restored when the maximum rises again (a freq QoS request: the core keeps min <= max)
        self._min_asked: dict[str, str] = {}
        sh = _shared(model)
        ws = model.writables
        self.by_component: dict[str, list[Writable]] = {k: [ws[i] for i in v] for k, v in sh.by_component.items()}
        self._index: dict[tuple[str, str], Writable] = {k: ws[i] for k, i in sh.index.items()}
        # Counter files that are also writable files (same path): their rewrite moves both signatures.
        self._by_rel: dict[str, list[int]] = sh.shared_rels
        prefix = os.path.join(node_dir, "")
        paths = self._paths = [prefix + rel for rel in sh.rels]
        fresh: list[Writable] = []
        # Writables sharing an inode (hard links): a write through one path is a write to all.
        link_groups: list[list[int]] = []
        cache = self._load_cache(cache_doc)
        if cache is not None:
            # Resume after a clean stop: every value and signature as the last run left them, no
            # file touched here; the first tick's readback polls every writable file and takes or
            # refuses what moved while the simulator was down (one lstat each, as a tick would).
            self.marks.full_poll = True
            flat = cache["s"]
            sigs: list[tuple[int, int, int] | None] = list(zip(flat[0::3], flat[1::3], flat[2::3], strict=True))
            if flat and min(flat[1::3]) < 0:  # a size of -1: missing at the stop (an mtime may be < 0)
                sigs = [sg if sg is not None and sg[1] >= 0 else None for sg in sigs]
            for w, path, text, sig in zip(ws, paths, cache["w"], sigs, strict=True):
                w.path = path
                w.text = text
                w.sig = sig
            for c, text in zip(model.counters, cache["c"], strict=True):
                c.path = prefix + c.rel
                c.text = text
            link_groups = cache["h"]
            self._epp_saved.update(cache["e"])
            cut = cache.get("k")
            if isinstance(cut, dict):
                self._turbo_cut.update({str(k): str(v) for k, v in cut.items()})
            asked = cache.get("m")
            if isinstance(asked, dict):
                self._min_asked.update({str(k): str(v) for k, v in asked.items()})
        else:
            for w, path in zip(ws, paths, strict=True):
                w.path = path
            links = self._read_tree(prefix, fresh)
            by_ino: dict[tuple[int, int], list[int]] = {}
            for i, key in links.items():
                by_ino.setdefault(key, []).append(i)
            link_groups = [g for g in by_ino.values() if len(g) > 1]
        self._link_groups = link_groups
        self._siblings: dict[int, list[int]] = {}
        for group in link_groups:
            for i in group:
                self._siblings[i] = [j for j in group if j != i]
        self._counter_at: dict[str, CounterFile] = {c.rel: c for c in model.counters
                                                    if c.rel in sh.shared_rels}
        self._cpuinfo_max: str | None = None
        self._initial_check(time.time(), fresh)
        self._sigs: list[tuple[int, int, int] | None] = [w.sig for w in ws]
        self._pos_map: dict[int, int] | None = None
        for i in sh.governors:
            # The performance policy pins EPP (a start after the policy was set while down too).
            w = ws[i]
            if w.text.strip() == "performance":
                self._epp_follows_governor(w.component, "", "performance")
        # scaling_cur_freq of every policy of a package carries the same value: one check per package.
        cs = model.counters
        self._freq_groups: dict[int, list[CounterFile]] = {k: [cs[i] for i in v] for k, v in sh.freq_groups.items()}
        self._other_counters: list[CounterFile] = [cs[i] for i in sh.other_counters]
        self._freq_last: dict[int, str] = {}
        # With a descriptor budget (a shard's), the files rewritten every tick stay open: the
        # ledger first, then the energy counters (see :func:`kept_files`).
        self._comp_kinds: dict[str, tuple[float, str]] = {}
        self._reading_keys: list[str] = []
        self._readings_of = -1
        self._readings_st: dict[str, float] | None = None
        self._ledger_fd = -1
        self._keep_ledger = fds is not None and fds.take()
        if fds is not None:
            for c in self._other_counters:
                if c.kind == "energy_uj" and c.rel not in sh.shared_rels and fds.take():
                    c.keep = True

    def close_files(self) -> None:
        """Close the descriptors kept open between ticks (they are opened again at the next write)."""
        if self._ledger_fd >= 0:
            os.close(self._ledger_fd)
            self._ledger_fd = -1
        for c in self._other_counters:
            if c.fd >= 0:
                os.close(c.fd)
                c.fd = -1

    def _read_tree(self, prefix: str, fresh: list[Writable]) -> dict[int, tuple[int, int]]:
        """Without a start-up cache: stat and read every writable file and counter (a first start)."""
        lstat = os.lstat
        links: dict[int, tuple[int, int]] = {}
        for n, w in enumerate(self.model.writables):
            path = w.path
            try:
                st = lstat(path)
            except OSError:
                w.sig, w.text = None, ""
                continue
            if st.st_nlink > 1:
                links[n] = (st.st_dev, st.st_ino)
            w.sig = (st.st_mtime_ns, st.st_size, st.st_ino)
            text = read_text(path)
            w.text = text if text is not None else ""
            fresh.append(w)
        for c in self.model.counters:
            c.path = prefix + c.rel
            text = read_text(c.path)
            c.text = text if text is not None else ""
            try:
                st = lstat(c.path)
                c.sig = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                c.sig = None
        return links

    def _pos(self, w: Writable) -> int:
        if self._pos_map is None:
            self._pos_map = {id(x): i for i, x in enumerate(self.model.writables)}
        return self._pos_map[id(w)]

    # -- start-up cache --------------------------------------------------------------------------

    def _cache_path(self) -> str:
        return os.path.join(self.dir, "state", CACHE_NAME)

    def _read_cache(self) -> Any:
        """The parsed ``state/tick-cache.json``, or None when there is none or it does not parse."""
        try:
            with open(self._cache_path(), "rb") as fh:
                raw = fh.read()
            doc = json.loads(raw)
        except (OSError, ValueError):
            return None
        if isinstance(doc, dict) and not raw.startswith(_CACHE_HEAD):
            doc.pop("l", None)  # not as save_cache writes it: its "u" cannot be set in place
        return doc

    def _cached_ledger(self, doc: Any) -> ledger_mod.Ledger | None:
        """The copy of the ledger in the start-up cache ``doc`` (``l``: the ledger, ``ls``: its
        file's signature then), when the cache was not used since the clean stop that wrote it
        (``u`` 0) and the ledger file still has that signature; else None.

        Taking it marks the cache used (``u`` set to 1 in place, one ``pwrite``): a run that then
        ticks and is killed leaves a cache whose copy is never taken again, whatever the mtime."""
        if not isinstance(doc, dict) or doc.get("v") != 2 or doc.get("u") != 0:
            return None
        if not isinstance(doc.get("l"), dict):
            return None
        sig = doc.get("ls")
        if not isinstance(sig, list) or sig != ledger_mod.signature(self.dir):
            return None
        try:
            led = ledger_mod.from_doc(doc["l"], ledger_mod.ledger_path(self.dir))
        except InputError:
            return None
        if led.node != self.model.node:
            return None
        try:
            fd = os.open(self._cache_path(), os.O_WRONLY)
            try:
                if os.pwrite(fd, b"1", len(_CACHE_HEAD) - 2) != 1:
                    return None
            finally:
                os.close(fd)
        except OSError:
            return None
        return led

    def _load_cache(self, doc: Any) -> dict[str, Any] | None:
        """``state/tick-cache.json`` of the last clean stop (``doc``, parsed), when it is of this layout.

        ``w``/``c``: the text of every writable/counter file in model order; ``s``: the writables'
        signatures, flat (mtime_ns, size, inode; -1s for a file that was missing); ``h``:
        hard-link groups of writables; ``e``: EPP values saved under the
        performance policy; ``f``: the layout's fingerprint; ``t``: the ledger's tick count then
        (a run killed since has ticked on: its cache is not used); ``l`` and ``ls``: a copy of the
        ledger and its file's signature (see :meth:`_cached_ledger`).
        """
        m = self.model
        if not isinstance(doc, dict) or doc.get("v") != 2 or doc.get("f") != model_fingerprint(m):
            return None
        if doc.get("t") != self.ledger.tick:  # a run since the cache was written did not stop cleanly
            return None
        w, c, f, h, e = doc.get("w"), doc.get("c"), doc.get("s"), doc.get("h"), doc.get("e")
        if not (isinstance(w, list) and isinstance(c, list) and isinstance(f, list) and isinstance(h, list)
                and isinstance(e, dict)):
            return None
        n = len(m.writables)
        if len(w) != n or len(c) != len(m.counters) or len(f) != 3 * n:
            return None
        if not (all(map(isinstance, w, repeat(str))) and all(map(isinstance, c, repeat(str)))
                and all(map(isinstance, f, repeat(int)))
                and all(isinstance(g, list) and all(type(i) is int and 0 <= i < n for i in g) for g in h)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in e.items())):
            return None
        return doc

    def save_cache(self) -> None:
        """Write the start-up cache (in place, never read half-written: :func:`rewrite_document`);
        called at a clean stop."""
        m = self.model
        flat: list[int] = []
        for w in m.writables:
            flat.extend(w.sig if w.sig is not None else (-1, -1, -1))
        doc = {"v": 2, "u": 0, "f": model_fingerprint(m), "t": self.ledger.tick, "s": flat,
               "w": [w.text for w in m.writables], "c": [c.text for c in m.counters],
               "h": self._link_groups, "e": self._epp_saved, "k": self._turbo_cut,
               "m": self._min_asked}
        sig = ledger_mod.signature(self.dir)
        if sig is not None:  # the ledger as of the stop, as its file holds it (values rounded)
            doc["l"] = json.loads(self.ledger.to_json())
            doc["ls"] = sig
        # json.dumps, not json.dump: dump streams through the pure-Python encoder (seconds for
        # thousands of nodes at a stop), dumps takes the C one.
        text = json.dumps(doc, separators=(",", ":"))
        try:
            rewrite_document(self._cache_path(), text.encode("utf-8"))
        except OSError:
            pass

    # -- values in force -------------------------------------------------------------------------

    def value(self, component: str, kind: str) -> str | None:
        w = self._index.get((component, kind))
        return w.text.strip() if w is not None else None

    def _sclk_mask_text(self, w: Writable) -> str:
        """The sclk mask in force: the text when it is a mask the driver took, else every level."""
        verdict = rules.apply(w.kind, w.rule, w.text) if ":" not in w.text else None
        if verdict is not None and verdict.text is not None:
            return verdict.text
        return " ".join(str(i) for i in range(len(w.rule.allowed)))

    # -- readback --------------------------------------------------------------------------------

    def _initial_check(self, now: float, writables: list[Writable]) -> None:
        """Check what is on disk at start (it may have been written while the simulator was down).

        Each value is parsed as the kernel parses a store made over the rendered default. A value
        the kernel would refuse is put back to the rule's default (a ``write.rejected`` event); a
        value it would clamp or wrap is written back as it reads after the store (a
        ``write.clamped`` event); a command (``pp_dpm_sclk``) is taken and the attribute reads its
        table again.
        """
        for w in writables:
            if not w.text:
                continue
            table = w.kind in rules.COMMAND_KINDS and ":" in w.text
            if table or (w.rule.default is not None and w.text == w.rule.default):
                if w.kind in rules.COMMAND_KINDS:
                    w.text = self._sclk_mask_text(w)
                continue  # as rendered
            old = (w.rule.default or "").encode()
            self._take(w, w.text.encode(), old, now, None)
        self._turbo_follows(now)

    def _take(self, w: Writable, raw: bytes, old: bytes, now: float, sig: tuple[int, int, int] | None) -> None:
        """Apply the kernel's verdict on the store ``raw`` (the file's content) to ``w``.

        ``old`` is what the file held before (a write that did not truncate left its tail);
        ``sig`` the file's signature when its content is ``raw`` (None: unknown, rewrite it).
        """
        written = raw.decode("utf-8", "replace")
        store, verdict = rules.resolve(w.kind, w.rule, raw, old, context(self, w))
        if verdict.text is None:
            if w.kind in rules.COMMAND_KINDS:
                w.text = self._sclk_mask_text(w)
                restore = self._sclk_render(w)
            else:
                restore = old.decode("utf-8", "replace") or (w.rule.default or "")
            if not restore:
                return  # a start with nothing to put back (no default): left as it is
            self._reject(w, store.decode("utf-8", "replace"), verdict, now)
            if w.kind not in rules.COMMAND_KINDS:
                w.text = restore
            if restore != written:
                w.sig = write_in_place(w.path, restore)
                self.writes += 1
            elif sig is not None:
                w.sig = sig
            return
        if verdict.note in ("clamped", "wrapped"):
            self.events.append(Event(now, self.model.node, CLAMPED, {
                "file": "/" + w.rel, "kind": w.kind, "value": rules.store_text(store).strip()[:64],
                "readback": verdict.text.strip(), "reason": verdict.note,
            }))
        before = w.text
        w.text = verdict.text
        if w.kind in _FREQ_KINDS:
            self._freq_cache = None
        if w.kind == "cpufreq_min":
            self._ask_min(w, store, verdict)
        if w.kind == "cpufreq_governor" and before.strip() != verdict.text.strip():
            self._epp_follows_governor(w.component, before.strip(), verdict.text.strip())
        out = self._sclk_render(w) if w.kind in rules.COMMAND_KINDS else verdict.text
        if out != written:
            w.sig = write_in_place(w.path, out)
            self.writes += 1
        elif sig is not None:
            w.sig = sig
        if w.kind in ("no_turbo", "boost") and before.strip() != verdict.text.strip():
            self._turbo_follows(now)
        if w.kind == "cpufreq_max":
            self._min_follows(w.component)

    def _reject(self, w: Writable, written: str, verdict: Verdict, now: float) -> None:
        self.events.append(Event(now, self.model.node, REJECTED, {
            "file": "/" + w.rel, "kind": w.kind, "value": written.strip()[:64],
            "error.type": _errno_type(verdict.errno), "errno": verdict.errno, "reason": verdict.note,
        }))

    def readback(self, now: float) -> None:
        """Take or refuse what agents wrote since the last tick.

        Polled (no inotify for this node, or the queue overflowed): one ``lstat`` per writable file
        (529 on a two-socket Intel node). Watched: only the files the shard's
        :class:`~joulectl.sim.inotify.Watcher` marked dirty since the last tick (and their hard
        links). Either way a file is looked at further only when its signature moved since the
        emulator last wrote or read it, so the tick's own rewrites are never taken for agent writes.
        """
        marks = self.marks
        if marks.polled or marks.full_poll:
            marks.full_poll = False
            marks.dirty.clear()
            self._check(range(len(self._paths)), now)
            return
        if not marks.dirty:
            return
        dirty = marks.dirty
        marks.dirty = set()
        if self._siblings:
            for i in list(dirty):
                dirty.update(self._siblings.get(i, ()))
        self._check(sorted(dirty), now)

    def _check(self, indices: Iterable[int], now: float) -> None:
        lstat = os.lstat
        paths = self._paths
        sigs = self._sigs
        for i in indices:
            try:
                st = lstat(paths[i])
            except OSError:
                continue
            old = sigs[i]
            if old is not None and st.st_mtime_ns == old[0] and st.st_size == old[1] and st.st_ino == old[2]:
                continue
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
            w = self.model.writables[i]
            if sig != w.sig:
                self._moved(w, sig, now)
            sigs[i] = w.sig

    def _moved(self, w: Writable, sig: tuple[int, int, int], now: float) -> None:
        """A writable file whose signature moved: read, parse as the kernel, take or put back."""
        raw = read_bytes(w.path)
        if raw is None:
            return
        self._take(w, raw, self._disk_text(w).encode(), now, sig)

    def _disk_text(self, w: Writable) -> str:
        """What ``w``'s file held after the emulator last wrote or read it."""
        if w.kind in rules.COMMAND_KINDS:
            c = self._counter_at.get(w.rel)
            return c.text if c is not None and c.text else self._sclk_render(w)
        return w.text

    def turbo_on(self) -> bool:
        """Turbo in force: ``intel_pstate/no_turbo`` 0, ``cpufreq/boost`` 1 (True without either)."""
        for w in self.by_component.get("cpu", ()):
            text = w.text.strip()
            if (w.kind == "no_turbo" and text == "1") or (w.kind == "boost" and text == "0"):
                return False
        return True

    def _turbo_follows(self, now: float) -> None:
        """``cpuinfo_max_freq`` of every policy shows the non-turbo maximum while turbo is off, and
        ``scaling_max_freq`` stops there (intel_pstate ``intel_pstate_update_limits``); turning
        turbo back on restores the maxima it cut."""
        tw = next((w for w in self.by_component.get("cpu", ()) if w.kind in ("no_turbo", "boost")), None)
        if tw is None:
            return
        rule = tw.rule
        base_khz = rule.base_khz
        if not base_khz or not rule.max_khz:
            return
        on = self.turbo_on()
        shown = f"{rule.max_khz if on else base_khz}\n"
        if self._cpuinfo_max == shown:
            return
        if self._cpuinfo_max is None and tw.text == rule.default:
            self._cpuinfo_max = shown  # as rendered: nothing to look at
            return
        self._cpuinfo_max = shown
        for w in self.model.writables:
            if w.kind != "cpufreq_max":
                continue
            path = w.path.rpartition("/")[0] + "/cpuinfo_max_freq"
            if read_text(path) != shown:
                write_in_place(path, shown)
                self.writes += 1
            if not on and _uint(w.text, 0) > base_khz:
                self._turbo_cut[w.rel] = w.text
                w.text = f"{base_khz}\n"
            elif on and w.rel in self._turbo_cut and _uint(w.text, 0) == base_khz:
                w.text = self._turbo_cut.pop(w.rel)
            else:
                continue
            w.sig = write_in_place(w.path, w.text)
            self.writes += 1
            self._sigs_set(w)
            self._min_follows(w.component)
        self._freq_cache = None

    def _ask_min(self, w: Writable, store: bytes, verdict: Verdict) -> None:
        """Remember a ``scaling_min_freq`` asked for above the policy's maximum (shown clamped)."""
        asked = rules.apply(w.kind, w.rule, store, context(self, w, own_limit=False))
        if asked.text is not None and asked.text != verdict.text:
            self._min_asked[w.rel] = asked.text
        else:
            self._min_asked.pop(w.rel, None)

    def _min_follows(self, policy: str) -> None:
        """The cpufreq core keeps a policy's minimum at or under its maximum
        (``cpufreq_verify_within_limits``: ``policy->min = clamp(min, cpuinfo_min, policy->max)``,
        the minimum asked for being a freq QoS request that outlives it): a maximum lowered under
        the minimum pulls the minimum down to it, and raising the maximum again gives back the
        minimum asked for, up to the new maximum."""
        wmin = self._index.get((policy, "cpufreq_min"))
        wmax = self._index.get((policy, "cpufreq_max"))
        if wmin is None or wmax is None:
            return
        hi = _uint(wmax.text, -1)
        if hi < 0:
            return
        asked = self._min_asked.get(wmin.rel, wmin.text)
        want = min(_uint(asked, 0), hi)
        if want == _uint(asked, 0):
            self._min_asked.pop(wmin.rel, None)
        else:
            self._min_asked[wmin.rel] = asked
        if want == _uint(wmin.text, -1):
            return
        if wmin.sig is not None:
            try:
                st = os.lstat(wmin.path)
            except OSError:
                return
            if (st.st_mtime_ns, st.st_size, st.st_ino) != wmin.sig:
                return  # an agent's store to the minimum is pending: its readback takes it against this maximum
        wmin.text = f"{want}\n"
        wmin.sig = write_in_place(wmin.path, wmin.text)
        self.writes += 1
        self._sigs_set(wmin)
        self._freq_cache = None

    def _sigs_set(self, w: Writable) -> None:
        sigs = getattr(self, "_sigs", None)
        if sigs is not None:
            sigs[self._pos(w)] = w.sig

    def _epp_follows_governor(self, policy: str, old: str, new: str) -> None:
        """intel_pstate / amd-pstate active mode: the ``performance`` policy pins EPP to performance.

        Switching to it saves the EPP in force and shows ``performance``; switching back restores
        the saved EPP (the rule's default, else ``balance_performance``, when none was saved), as
        ``intel_pstate_hwp_set`` does. An EPP an agent wrote since the last tick is left on disk for
        its own check, which then sees the new policy (``EBUSY`` under performance).
        """
        e = self._index.get((policy, "epp"))
        if e is None:
            return
        if new == "performance":
            if e.text.strip() in ("performance", "0"):
                return
            self._epp_saved[policy] = e.text
            text = "performance\n"
        elif old == "performance":
            fallback = e.rule.default or "balance_performance\n"
            text = self._epp_saved.pop(policy, fallback)
        else:
            return
        e.text = text
        try:
            sig = _sig(os.lstat(e.path))
        except OSError:
            return
        if sig == e.sig:
            e.sig = write_in_place(e.path, text)
            self.writes += 1
            self._sigs[self._pos(e)] = e.sig

    def _sclk_render(self, w: Writable) -> str:
        levels = tuple(int(x) for x in w.rule.allowed)
        mask = [int(x) for x in w.text.split()] or list(range(len(levels)))
        return sclk_table(levels, max(mask)) if levels else w.text

    # -- physics ---------------------------------------------------------------------------------

    def step(self, now: float, dt_s: float) -> Sample:
        """Advance the node by ``dt_s`` seconds of simulated time and write what changed."""
        m = self.model
        led = self.ledger
        st = led.state
        load = self.load
        amb = ph.ambient_c(now, self.facility.get("ambientC", 20.0), self.facility.get("amplitudeC", 5.0),
                           self.facility.get("periodH", 24.0), self.zone_offset_c)
        cpu_total = 0.0
        caps: dict[str, float | None] = {}
        governors = self._governors
        freqs: dict[int, float] = {}
        energy: dict[str, tuple[str, float]] = {}
        comp_power: dict[str, float] = {}
        for pkg in m.packages:
            key = f"pkg{pkg.index}"
            cap_w = self._cpu_cap_w(key)
            caps[key] = cap_w
            if self._freq_cache is None:
                self._freq_cache = {}
                self._governors = {}
            f_target = self._freq_cache.get(pkg.index)
            if f_target is None:
                f_target = self._freq_cache[pkg.index] = self._freq_target(pkg, self._governors)
            governors = self._governors
            temp = st.get(f"T.{key}", amb)
            thermal = ph.throttle_fraction(temp, ph.CPU_THERMAL.throttle_start_c, ph.CPU_THERMAL.throttle_full_c)
            f_target = min(f_target, 1.0 - thermal)
            f_prev = st.get(f"f.{key}", f_target)
            f = ph.first_order(f_prev, f_target, dt_s, ph.CPU_RAMP_S)
            cap_prev = st.get(f"cap.{key}", cap_w if cap_w is not None else -1.0)
            cap_now = None
            if cap_w is not None:
                cap_now = ph.first_order(cap_prev if cap_prev >= 0 else cap_w, cap_w, dt_s, ph.CPU_CAP_TAU_S)
                st[f"cap.{key}"] = cap_now
            res = ph.cpu_package_power(pkg.params, load.cpu_util, f, cap_now, cap_range_w=pkg.cap_range_w,
                                       memory_intensity=load.memory_intensity, io_intensity=load.io_intensity,
                                       thermal=thermal, throttle=1.0 - f_target if f_target < 1 else 0.0,
                                       cpu_class=load.cpu_class)
            st[f"f.{key}"] = f
            freqs[pkg.index] = res.freq
            avg = ph.first_order(st.get(f"P.{key}", res.power_w), res.power_w, dt_s, ph.CPU_TELEMETRY_S)
            st[f"P.{key}"] = avg
            st[f"T.{key}"] = ph.first_order(temp, ph.steady_temp_c(amb, res.power_w, ph.CPU_THERMAL.w_per_c),
                                            dt_s, ph.CPU_THERMAL.tau_s)
            comp_power[key] = res.power_w
            cpu_total += res.power_w
            if m.dram:
                dram_w = 3.0 + 12.0 * load.cpu_util * (0.3 + 0.7 * load.memory_intensity)
                comp_power[f"dram{pkg.index}"] = dram_w
                cpu_total += dram_w
            if m.core:
                comp_power[f"core{pkg.index}"] = 0.75 * res.power_w
        gpu_total = 0.0
        gpu_power: dict[str, float] = {}
        utils = ph.spread_load(load.gpu_util, len(m.gpus))
        wc, wm = ph.gpu_weights(load.gpu_class, load.memory_intensity)
        session = self.nvml_io.session(self.dir) if (m.nvml and self.nvml_io is not None) else None
        if session is not None:
            session.__enter__()
        try:
            nvml_state = session.state if session is not None else None
            for gpu, util in zip(m.gpus, utils, strict=False):
                key = f"gpu{gpu.index}"
                dev = self.nvml_io.device(nvml_state, gpu.index) if nvml_state is not None else None
                p = self._gpu_step(gpu, key, util, wc, wm, amb, dt_s, now, caps, dev)
                gpu_power[key] = p
                comp_power[key] = p
                gpu_total += p
            if session is not None and nvml_state is not None:
                self._nvml_commit(nvml_state, comp_power, dt_s)
        finally:
            if session is not None:
                session.__exit__(None, None, None)
        if m.psys:
            comp_power["psys"] = cpu_total + gpu_total + 40.0
        comp_power["host"] = cpu_total + gpu_total
        # The counters start where the first tick's interval starts, not where it ends.
        st.setdefault("t0", round(now - dt_s, 3))
        # Energy: unwrapped totals in the ledger, µJ (mJ for NVML GPUs). A component whose energy a
        # read already advanced past the previous tick (FUSE mode, :meth:`advance_energy`) accrues
        # only the rest of the interval, so the counter never goes back.
        ahead = self.energy_ahead
        kinds = self._comp_kinds
        led_energy = led.energy
        for comp, watts in comp_power.items():
            kind = kinds.get(comp) or self._comp_kind(comp)
            span = dt_s - ahead.get(comp, 0.0) if ahead else dt_s
            led_energy[comp] = led_energy.get(comp, 0) + round(watts * (span if span > 0.0 else 0.0) * kind[0])
        if ahead:
            self.energy_ahead = {c: a - dt_s for c, a in ahead.items() if a > dt_s}
        self.power_w = comp_power
        for comp, total in led_energy.items():
            unit, hw_type = kinds.get(comp) or self._comp_kind(comp)
            if hw_type:
                energy[comp] = (hw_type, total / unit)
        self._write_counters(freqs, st, comp_power)
        node_w = round(cpu_total + gpu_total, 2)
        st["P"] = node_w
        led.tick += 1
        led.time_s = now
        if self._keep_ledger:
            self._ledger_fd = ledger_mod.write_kept(self.dir, led, self._ledger_fd)
        else:
            ledger_mod.write(self.dir, led)
        if len(st) != self._readings_of or st is not self._readings_st:  # keys are only ever added
            self._reading_keys = [k for k in st if k.startswith(_READING_PREFIXES)]
            self._readings_of = len(st)
            self._readings_st = st
        readings = {k: st[k] for k in self._reading_keys}
        return Sample(m.node, now, node_w, round(cpu_total, 2), round(gpu_total, 2), energy, gpu_power, caps,
                      governors, m.virtual, st["t0"], readings)

    def _comp_kind(self, comp: str) -> tuple[float, str]:
        """A component's energy unit per joule (mJ for NVML GPUs, else µJ) and its hardware type
        in samples ("" for a core zone, which samples leave out); remembered per node."""
        unit = 1000.0 if (comp.startswith("gpu") and self.model.nvml) else 1_000_000.0
        hw_type = "gpu" if comp.startswith("gpu") else "memory" if comp.startswith("dram") else "cpu"
        if comp in ("psys", "host"):
            hw_type = "host"
        if comp.startswith("core"):
            hw_type = ""
        kind = self._comp_kinds[comp] = (unit, hw_type)
        return kind

    def advance_energy(self, comps: Iterable[str], ahead_s: float) -> None:
        """Accrue the energy of ``comps`` up to ``ahead_s`` seconds past the last tick, at the power of
        the last step (a read in FUSE mode: the counter moves between ticks). The next step accrues
        the rest of its interval only."""
        led = self.ledger.energy
        power = self.power_w
        ahead = self.energy_ahead
        nvml = self.model.nvml
        for comp in comps:
            done = ahead.get(comp, 0.0)
            if ahead_s <= done:
                continue
            unit = 1000.0 if (comp.startswith("gpu") and nvml) else 1_000_000.0
            led[comp] = led.get(comp, 0) + round(power.get(comp, 0.0) * (ahead_s - done) * unit)
            ahead[comp] = ahead_s

    def _cpu_cap_w(self, key: str) -> float | None:
        for w in self.by_component.get(key, ()):
            if w.kind == "rapl_limit":
                uw = _uint(w.text, -1)
                if uw > 0:
                    return uw / 1_000_000.0
        return None

    def _freq_target(self, pkg: PackageModel, governors: dict[str, str]) -> float:
        m = self.model
        fmax = max(1, m.fmax_khz)
        targets = []
        for pol in pkg.policies:
            gov = self.value(pol, "cpufreq_governor") or "performance"
            governors.setdefault(f"pkg{pkg.index}", gov)
            hi = self.value(pol, "cpufreq_max")
            lo = self.value(pol, "cpufreq_min")
            f_hi = _uint(hi, fmax) / fmax if hi is not None else 1.0
            f_lo = _uint(lo, m.fmin_khz) / fmax if lo is not None else m.fmin_khz / fmax
            if gov == "performance":
                f = f_hi
            elif gov == "powersave" and self.value(pol, "epp") is None:
                f = f_lo
            elif gov in ("ondemand", "conservative", "schedutil"):
                f = min(f_hi, max(f_lo, 1.25 * self.load.cpu_util))
            else:
                f = f_hi
            epp = self.value(pol, "epp")
            if epp is not None and gov != "performance":
                f = min(f, EPP_FREQ.get(epp, 1.0 - _uint(epp, 0) / 255 * 0.3 if epp.isdigit() else 1.0))
            targets.append(ph.clamp(f, f_lo if f_lo <= f_hi else f_hi, 1.0))
        # Turbo off needs no cap of its own here: it cuts every policy's scaling_max_freq to the
        # base clock and the minimum follows the maximum down (_turbo_follows, _min_follows).
        return sum(targets) / len(targets) if targets else 1.0

    def _gpu_step(self, gpu: GpuModel, key: str, util: float, wc: float, wm: float, amb: float, dt_s: float,
                  now: float, caps: dict[str, float | None], dev: dict[str, Any] | None) -> float:
        st = self.ledger.state
        g = gpu.params
        clock_frac = 1.0
        target = g.max_w
        if dev is not None:
            target, clock_frac = self._nvml_limits(gpu, dev, util, now)
        else:
            # A secondary die (MI250X) has no limit of its own: the primary die's cap holds the package.
            cap_key = f"gpu{gpu.primary}" if gpu.primary is not None else key
            for w in self.by_component.get(cap_key, ()):
                if w.kind in ("amdgpu_cap", "intel_pl1"):
                    uw = _uint(w.text, 0)
                    if uw > 0:
                        target = min(g.max_w, uw / 1_000_000.0 * gpu.cap_share)
            for w in self.by_component.get(key, ()):
                if w.kind == "amd_perf_level":
                    clock_frac = min(clock_frac, self._perf_level_frac(gpu, w.text.strip()))
                elif w.kind == "intel_gt_max" and w.rule.rp0_mhz:
                    clock_frac = min(clock_frac, _uint(w.text, w.rule.rp0_mhz) / w.rule.rp0_mhz)
        cap_prev = st.get(f"cap.{key}", target)
        cap = ph.first_order(cap_prev, target, dt_s, g.cap_tau_s)
        st[f"cap.{key}"] = cap
        caps[key] = target
        temp = st.get(f"T.{key}", amb)
        thermal = ph.throttle_fraction(temp, ph.GPU_THERMAL.throttle_start_c, ph.GPU_THERMAL.throttle_full_c)
        power = ph.gpu_power(g, util, cap, wc, wm, clock_frac * (1.0 - 0.35 * thermal))
        if dev is not None:
            floor_frac = self.nvml_io.lock_floor_frac(dev)
            if floor_frac > 0:
                # A graphics clock lock's floor holds even idle: the clock (and its power) stays up.
                power = max(power, min(cap, ph.gpu_locked_floor_w(g, floor_frac)))
        st[f"T.{key}"] = ph.first_order(temp, ph.steady_temp_c(amb, power, ph.GPU_THERMAL.w_per_c), dt_s,
                                        ph.GPU_THERMAL.tau_s)
        st[f"P.{key}"] = ph.first_order(st.get(f"P.{key}", power), power, dt_s, ph.GPU_TELEMETRY_S)
        st[f"u.{key}"] = util
        natural = ph.gpu_natural_power(g, util, wc, wm, clock_frac)
        st[f"r.{key}"] = ph.clamp01(cap / natural) if natural > 0 else 1.0
        st[f"c.{key}"] = clock_frac
        return power

    def _perf_level_frac(self, gpu: GpuModel, level: str) -> float:
        levels = gpu.sclk_mhz
        top = max(levels) if levels else 1
        low = (min(levels) / top) if levels else 0.3
        if level in ("low", "profile_min_sclk"):
            return low
        if level == "profile_standard":
            return 0.7
        if level == "manual" and levels:
            mask = self.value(f"gpu{gpu.index}", "amd_sclk")
            idx = [int(x) for x in (mask or "").split() if x.isdigit() and int(x) < len(levels)]
            if idx:
                return levels[max(idx)] / top
        return 1.0

    # -- NVML -----------------------------------------------------------------------------------

    def _nvml_limits(self, gpu: GpuModel, dev: dict[str, Any], util: float, now: float) -> tuple[float, float]:
        io = self.nvml_io
        if util < 0.01 and not io.persistence(dev):
            default = io.default_w(dev)
            locks = (dev.get("clocks") or {})
            if default is not None and (abs(io.limit_w(dev) - default) > 1e-6 or locks.get("lockedGraphics")
                                        or locks.get("lockedMemory")):
                before = io.reset_to_default(dev)
                self.events.append(Event(now, self.model.node, CAP_RESET, {
                    "gpu": gpu.index, "bus_id": gpu.bus_id, "from_mw": before["limitMw"],
                    "to_mw": int(default * 1000), "locked_graphics": before["lockedGraphics"],
                    "locked_memory": before["lockedMemory"],
                    "reason": "persistence mode disabled and the GPU idle: the driver unloaded",
                }))
        return io.limit_w(dev), io.clock_frac(dev)

    def _nvml_commit(self, state: dict[str, Any], comp_power: dict[str, float], dt_s: float) -> None:
        io = self.nvml_io
        st = self.ledger.state
        led = self.ledger.energy
        for gpu in self.model.gpus:
            dev = io.device(state, gpu.index)
            if dev is None:
                continue
            key = f"gpu{gpu.index}"
            energy_mj = led.get(key, 0) + round(comp_power.get(key, 0.0) * dt_s * 1000.0)
            io.advance(dev, power_w=st.get(f"P.{key}", 0.0), energy_mj=energy_mj, temp_c=st.get(f"T.{key}", 30.0),
                       util=st.get(f"u.{key}", 0.0), ratio=st.get(f"r.{key}", 1.0))
        io.write(self.dir, state)
        self.writes += 1

    # -- counters --------------------------------------------------------------------------------

    def _write_counters(self, freqs: dict[int, float], st: dict[str, float], comp_power: dict[str, float]) -> None:
        m = self.model
        energy = self.ledger.energy
        for pkg, group in self._freq_groups.items():
            khz = round(freqs.get(pkg, 1.0) * m.fmax_khz / 1000) * 1000
            text = f"{khz}\n"
            if self._freq_last.get(pkg) == text:
                continue
            for c in group:
                if text != c.text and write_counter(c.path, text, len(c.text)):
                    c.text = text
                    self.writes += 1
            self._freq_last[pkg] = text
        for c in self._other_counters:
            comp = c.component
            if c.kind == "energy_uj":
                total = energy.get(comp, 0)
                text = f"{total % c.max_range if c.max_range else total}\n"
            elif c.kind == "power_uw":
                watts = 0.0 if c.secondary else st.get("P." + comp, comp_power.get(comp, 0.0))
                text = f"{round(watts) * 1_000_000}\n"
            elif c.kind == "sclk":
                table = self._sclk_counter(comp, st)
                if table is None:
                    continue
                text = table
            elif c.kind == "temp_mc":
                text = f"{round(st.get('T.' + comp, 30.0)) * 1000}\n"
            else:
                continue
            if text == c.text:
                continue
            if c.keep:
                if write_kept(c, text):
                    c.text = text
                    self.writes += 1
                continue
            shared = self._by_rel.get(c.rel)
            if shared is None:
                if write_counter(c.path, text, len(c.text)):
                    c.text = text
                    self.writes += 1
                continue
            sig = write_in_place(c.path, text)
            if sig is not None:
                c.text = text
                self.writes += 1
                for i in shared:
                    self.model.writables[i].sig = sig
                    self._sigs[i] = sig

    def _sclk_counter(self, comp: str, st: dict[str, float]) -> str | None:
        """``pp_dpm_sclk`` with ``*`` on the level the clock runs at (the highest within the bound)."""
        idx = int(comp[3:]) if comp[3:].isdigit() else -1
        gpu = next((g for g in self.model.gpus if g.index == idx), None)
        if gpu is None or not gpu.sclk_mhz:
            return None
        levels = gpu.sclk_mhz
        bound = st.get(f"c.{comp}", 1.0) * max(levels) + 0.5
        allowed = [i for i, mhz in enumerate(levels) if mhz <= bound] or [0]
        return sclk_table(levels, max(allowed))
