"""``joulectl cap``: GPU and CPU power caps in watts or percent, read back, journaled, restorable.

The flow of one run (SPEC §4):

1. :func:`build_request` turns the flags into a :class:`CapRequest` (exit 2 on bad input, before
   anything is read from the node). ``--from-twin`` and ``--schedule`` files are parsed here.
2. :func:`execute` takes the node lock (unless ``--dry-run``), makes ONE inventory (one
   nvidia-smi query, not one per GPU), loads the journal once, resolves a target per device
   (``target = max(pct/100 × max, min)`` in whole watts), hands the writes to the vendor
   backends in one batch per vendor (they write and read back), records every change in the
   journal and saves it once, atomically.
3. The caller renders the :class:`CapReport` and exits with :attr:`CapReport.exit_code`.

Per-device decisions made here, never by a backend: out-of-range requests are ``blocked`` with
the range in the message, a device already at target is ``unchanged`` and not written, a
secondary die is ``skipped``, a device whose limits are unknown is ``blocked`` with the
backend's reason, and ``--dry-run`` gives ``planned`` rows.
"""

from __future__ import annotations

import errno
import functools
import importlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, Protocol

from joulectl.errors import (
    ExitCode,
    InputError,
    JoulectlError,
    NoDeviceError,
    PartialError,
    RefusedError,
)
from joulectl.models import (
    GPU_PRESETS,
    OK_STATUSES,
    DeviceResult,
    GpuDevice,
    NodeInventory,
    PowercapZone,
    Status,
)
from joulectl.ops.capsetting import CapSetting, check_pct, check_watts
from joulectl.record import record
from joulectl.units import round_half_away

if TYPE_CHECKING:
    from joulectl.backends.base import WriteOutcome
    from joulectl.host import Host
    from joulectl.ops.journal import Journal
    from joulectl.ops.schedule import Schedule

API_VERSION = "joulectl.io/v1alpha1"
#: The journal setting name of a power cap (GPU and RAPL alike).
SETTING = "capWatts"
#: Two caps closer than this (watts) are the same value: NVIDIA prints two decimals, sysfs µW.
SAME_W = 0.01
PRIVILEGE_HINT = "run as root (sudo joulectl cap ...)"


# -- the request ------------------------------------------------------------------------------


@record(frozen=True)
class NodeTwinIntent:
    """The cap intent of one NodeTwin (seed precedence already applied)."""

    node_name: str | None
    gpu: CapSetting | None
    cpu: CapSetting | None
    governor: str | None


@record
class CapRequest:
    """A parsed ``cap`` command line.

    ``gpu`` / ``cpu`` are the settings for each target (``None``: leave that target alone);
    ``gpu_governor`` / ``cpu_governor`` a governor preset to apply too (twins and schedules).
    ``explicit_target`` is the ``--gpu|--cpu|--all`` flag when one was given: it narrows what a
    twin or schedule sets.
    """

    mode: str  # watts | pct | restore | twin | schedule
    gpu: CapSetting | None = None
    cpu: CapSetting | None = None
    gpu_governor: str | None = None
    cpu_governor: str | None = None
    selectors: tuple[str, ...] = ()
    dry_run: bool = False
    wait_s: float = 10.0
    node_name: str | None = None
    explicit_target: str | None = None
    #: --from-twin: the file label and its twins (one, or the items of a List).
    twin_file: str | None = None
    twins: list[NodeTwinIntent] = field(default_factory=list)
    any_node: bool = False
    #: --schedule: the parsed schedule and the instant to evaluate it at (None: now).
    schedule: Schedule | None = None
    at: str | None = None
    model_presets: dict[str, Any] | None = None

    @property
    def wants_gpu(self) -> bool:
        return self.gpu is not None or self.gpu_governor is not None

    @property
    def wants_cpu(self) -> bool:
        return self.cpu is not None or self.cpu_governor is not None


def _target_flag(gpu: bool, cpu: bool, all_: bool) -> str | None:
    given = [name for name, on in (("--gpu", gpu), ("--cpu", cpu), ("--all", all_)) if on]
    if len(given) > 1:
        raise InputError(f"give at most one of --gpu, --cpu, --all (got {' '.join(given)})", field="target")
    if not given:
        return None
    return given[0].lstrip("-")


def _split(setting: CapSetting | None, target: str) -> tuple[CapSetting | None, CapSetting | None]:
    return (setting if target in ("gpu", "all") else None, setting if target in ("cpu", "all") else None)


def build_request(
    *,
    watts: float | None = None,
    pct: float | None = None,
    restore: bool = False,
    from_twin: str | None = None,
    schedule: str | None = None,
    at: str | None = None,
    any_node: bool = False,
    gpu: bool = False,
    cpu: bool = False,
    all_: bool = False,
    selectors: Sequence[str] = (),
    dry_run: bool = False,
    wait_s: float = 10.0,
    node_name: str | None = None,
    model_presets_file: str | None = None,
) -> CapRequest:
    """Validate the flags and parse the input files (exit 2 naming the flag, file or field)."""
    modes = [
        name
        for name, on in (
            ("--watts", watts is not None),
            ("--pct", pct is not None),
            ("--restore", restore),
            ("--from-twin", from_twin is not None),
            ("--schedule", schedule is not None),
        )
        if on
    ]
    if len(modes) != 1:
        what = f"got {' '.join(modes)}" if modes else "got none"
        raise InputError(
            f"give exactly one of --watts, --pct, --restore, --from-twin, --schedule ({what})",
            field="cap",
            hint="joulectl cap --pct 60 caps every GPU at 60 % of its maximum",
        )
    if at is not None and schedule is None:
        raise InputError("only applies with --schedule", field="--at")
    if any_node and from_twin is None:
        raise InputError("only applies with --from-twin", field="--any-node")
    explicit = _target_flag(gpu, cpu, all_)
    selectors = tuple(s for s in selectors if s is not None)
    if selectors and explicit == "cpu":
        raise InputError("selects GPUs and cannot be combined with --cpu", field="--device")
    model_presets = None
    if model_presets_file is not None:
        from joulectl.yamlio import load_json_map

        model_presets = load_json_map(model_presets_file, what="model presets file")
    req = CapRequest(
        mode="",
        selectors=selectors,
        dry_run=dry_run,
        wait_s=wait_s,
        node_name=node_name,
        explicit_target=explicit,
        any_node=any_node,
        model_presets=model_presets,
    )
    target = explicit or "gpu"
    if watts is not None:
        req.mode = "watts"
        req.gpu, req.cpu = _split(CapSetting(watts=check_watts(watts, "--watts")), target)
    elif pct is not None:
        req.mode = "pct"
        req.gpu, req.cpu = _split(CapSetting(pct=check_pct(pct, "--pct")), target)
    elif restore:
        req.mode = "restore"
        req.gpu, req.cpu = _split(CapSetting(restore=True), target)
    elif from_twin is not None:
        req.mode = "twin"
        req.twin_file = "<stdin>" if from_twin == "-" else from_twin
        req.twins = load_twins(from_twin)
    else:
        assert schedule is not None
        from joulectl.ops.schedule import load_schedule, parse_at

        req.mode = "schedule"
        req.schedule = load_schedule(schedule)
        if at is not None:
            parse_at(at)  # validate now: exit 2 before the node is touched
        req.at = at
    return req


# -- NodeTwin input ---------------------------------------------------------------------------


def _num(data: Mapping[str, Any], key: str) -> Any:
    value = data.get(key)
    return None if value is None else value


def _twin_intent(doc: Any, label: str, where: str) -> NodeTwinIntent:
    def field_(path: str) -> str:
        return f"{where}{path}"

    if not isinstance(doc, dict):
        raise InputError(f"expected a NodeTwin object, found {type(doc).__name__}", file=label,
                         field=where.rstrip(".") or None)
    kind = doc.get("kind")
    if kind != "NodeTwin":
        raise InputError(f"expected kind NodeTwin, found {kind!r}", file=label, field=field_("kind"))
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise InputError("missing or not an object", file=label, field=field_("spec"))
    node = spec.get("nodeName")
    if node is not None and not isinstance(node, str):
        raise InputError("must be a string", file=label, field=field_("spec.nodeName"))

    gpu_setting: CapSetting | None = None
    governor: str | None = None
    gpu = spec.get("gpu")
    if gpu is not None:
        if not isinstance(gpu, dict):
            raise InputError("must be an object", file=label, field=field_("spec.gpu"))
        pc = gpu.get("powerCap")
        if pc is not None:
            if not isinstance(pc, dict):
                raise InputError("must be an object", file=label, field=field_("spec.gpu.powerCap"))
            scope = pc.get("scope")
            if scope is not None and scope != "perGpu":
                raise InputError(f"must be perGpu, got {scope!r}", file=label,
                                 field=field_("spec.gpu.powerCap.scope"))
            w, p = _num(pc, "capWattsPerGpu"), _num(pc, "capPctOfMax")
            # Validate both even though watts wins: a twin with a bad value is a bad twin.
            if w is not None:
                w = check_watts(w, field_("spec.gpu.powerCap.capWattsPerGpu"), label)
            if p is not None:
                p = check_pct(p, field_("spec.gpu.powerCap.capPctOfMax"), label)
            if w is not None:  # seed precedence: capWattsPerGpu, otherwise capPctOfMax
                gpu_setting = CapSetting(watts=w)
            elif p is not None:
                gpu_setting = CapSetting(pct=p)
        gov = gpu.get("governor")
        if gov is not None:
            if not isinstance(gov, str) or gov not in GPU_PRESETS:
                raise InputError(f"must be one of {', '.join(GPU_PRESETS)}, got {gov!r}", file=label,
                                 field=field_("spec.gpu.governor"))
            governor = gov

    cpu_setting: CapSetting | None = None
    cpu = spec.get("cpu")
    if cpu is not None:
        if not isinstance(cpu, dict):
            raise InputError("must be an object", file=label, field=field_("spec.cpu"))
        w, p = _num(cpu, "packagePowerCapWatts"), _num(cpu, "packagePowerCapPctOfMax")
        if w is not None:
            w = check_watts(w, field_("spec.cpu.packagePowerCapWatts"), label)
        if p is not None:
            p = check_pct(p, field_("spec.cpu.packagePowerCapPctOfMax"), label)
        if w is not None:
            cpu_setting = CapSetting(watts=w)
        elif p is not None:
            cpu_setting = CapSetting(pct=p)
    return NodeTwinIntent(node_name=node, gpu=gpu_setting, cpu=cpu_setting, governor=governor)


def load_twins(path: str) -> list[NodeTwinIntent]:
    """The NodeTwin(s) of a YAML/JSON file (``-`` = stdin): one object, or a ``List`` of them."""
    from joulectl.yamlio import load_one

    label = "<stdin>" if path == "-" else path
    doc = load_one(path, what="NodeTwin file")
    if isinstance(doc, dict) and doc.get("kind") in ("List", "NodeTwinList"):
        items = doc.get("items")
        if not isinstance(items, list) or not items:
            raise InputError("a List with no NodeTwin items", file=label, field="items")
        return [_twin_intent(item, label, f"items[{i}].") for i, item in enumerate(items)]
    return [_twin_intent(doc, label, "")]


def _pick_twin(req: CapRequest, node: str) -> NodeTwinIntent:
    label = req.twin_file
    if len(req.twins) > 1:
        for t in req.twins:
            if t.node_name == node:
                return t
        raise InputError(f"no NodeTwin for node {node!r} among {len(req.twins)} items", file=label,
                         field="items", hint="pass --node-name if this node is known by another name")
    twin = req.twins[0]
    if twin.node_name is not None and twin.node_name != node and not req.any_node:
        raise InputError(
            f"the twin is for node {twin.node_name!r}, this node is {node!r}; refusing to apply it",
            file=label,
            field="spec.nodeName",
            hint="pass --node-name if this node is known by another name, or --any-node to apply it anyway",
        )
    return twin


def _narrow(req: CapRequest, gpu: CapSetting | None, cpu: CapSetting | None,
            gpu_gov: str | None, cpu_gov: str | None) -> None:
    """Fill the request's settings, narrowed by an explicit --gpu/--cpu flag."""
    t = req.explicit_target
    keep_gpu = t in (None, "gpu", "all")
    keep_cpu = t in (None, "cpu", "all")
    req.gpu = gpu if keep_gpu else None
    req.gpu_governor = gpu_gov if keep_gpu else None
    req.cpu = cpu if keep_cpu else None
    req.cpu_governor = cpu_gov if keep_cpu else None


# -- the report -------------------------------------------------------------------------------


@record
class CapReport:
    """What a ``cap`` run did, ready to render: the CapResult object and the exit code."""

    node: str
    results: list[DeviceResult] = field(default_factory=list)
    governor_results: list[DeviceResult] = field(default_factory=list)
    dry_run: bool = False
    mode: str = ""
    #: --schedule: {file, window, at, timezone}.
    schedule: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    journal_error: str | None = None
    #: host paths the run refused because they resolve outside the host root (exit 2).
    escapes: list[str] = field(default_factory=list)

    @property
    def all_rows(self) -> list[DeviceResult]:
        return [*self.results, *self.governor_results]

    def summary(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for r in self.all_rows:
            counts[r.status.value] += 1
        return counts

    def error(self) -> JoulectlError | None:
        """The error the run ends with (exit 2, 4 or 5), or None for exit 0 (SPEC §2)."""
        rows = self.all_rows
        if self.escapes:
            from joulectl.errors import ConfinementError

            more = f" (and {len(self.escapes) - 1} more)" if len(self.escapes) > 1 else ""
            done = sum(1 for r in rows if r.status in OK_STATUSES)
            return ConfinementError(
                f"resolves outside the host root{more}: never read nor written; {done} of {len(rows)} "
                "targets done (see MESSAGE)", file=self.escapes[0])
        attempted = [r for r in rows if r.status in _ATTEMPTED]
        if attempted and all(r.status is Status.REFUSED for r in attempted):
            return RefusedError(
                f"no privilege to write: every write was refused ({len(attempted)} "
                f"device{'s' if len(attempted) != 1 else ''})",
                hint=PRIVILEGE_HINT,
            )
        failed = [r for r in rows if r.status not in OK_STATUSES]
        if failed or self.journal_error:
            counts: dict[str, int] = {}
            for r in failed:
                counts[r.status.value] = counts.get(r.status.value, 0) + 1
            parts = [f"{n} {s}" for s, n in counts.items()]
            text = f"{len(rows) - len(failed)} of {len(rows)} targets done; " + ", ".join(parts)
            if failed:
                text += " (see MESSAGE)"
            if self.journal_error:
                text += ("; " if failed else "") + f"journal not saved: {self.journal_error}"
            hint = PRIVILEGE_HINT if "refused" in counts else None
            return PartialError(text, hint=hint)
        return None

    @property
    def exit_code(self) -> ExitCode:
        err = self.error()
        return ExitCode.OK if err is None else err.exit_code

    def to_dict(self) -> dict[str, Any]:
        """The ``CapResult`` object (camelCase, SPEC §2)."""
        out: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "CapResult",
            "node": self.node,
            "mode": self.mode,
            "dryRun": self.dry_run,
        }
        if self.schedule is not None:
            out["schedule"] = self.schedule
        out["results"] = [result_dict(r) for r in self.results]
        if self.governor_results:
            out["governorResults"] = [governor_dict(r) for r in self.governor_results]
        out["summary"] = self.summary()
        out["exitCode"] = int(self.exit_code)
        return out


_ATTEMPTED = frozenset(
    {Status.APPLIED, Status.APPLIED_UNVERIFIED, Status.REFUSED, Status.ERROR, Status.UNSUPPORTED}
)


def result_dict(r: DeviceResult) -> dict[str, Any]:
    return {
        "device": r.device,
        "kind": r.kind,
        "vendor": r.vendor,
        "model": r.model,
        "status": r.status.value,
        "message": r.message,
        "beforeWatts": r.before_w,
        "targetWatts": r.target_w,
        "afterWatts": r.after_w,
    }


def governor_dict(r: DeviceResult) -> dict[str, Any]:
    return {
        "device": r.device,
        "kind": r.kind,
        "vendor": r.vendor,
        "model": r.model,
        "preset": r.preset,
        "status": r.status.value,
        "message": r.message,
        "before": r.before,
        "after": r.after,
    }


# -- dependencies (the real backends, or test doubles) ----------------------------------------


class CapWriter(Protocol):
    """The part of the backend contract ``cap`` uses: write each (device, watts), read back."""

    def set_caps(self, host: Host, requests: list[tuple[Any, float]]) -> list[WriteOutcome]: ...


InventoryFn = Callable[..., NodeInventory]
GovernorFn = Callable[..., list[DeviceResult]]
#: ``governor.plan_intents``: the settings a preset would write, as ``journal.Intent`` objects.
IntentFn = Callable[..., list[Any]]


@record
class Deps:
    """Where ``cap`` gets its inventory, writers and governor; ``None`` means the real modules."""

    inventory: InventoryFn | None = None
    writers: Mapping[str, CapWriter] | None = None
    apply_preset: GovernorFn | None = None

    def get_inventory(self) -> InventoryFn:
        if self.inventory is not None:
            return self.inventory
        fn: InventoryFn = importlib.import_module("joulectl.ops.inventory").inventory
        return fn

    def writer(self, name: str) -> CapWriter:
        """The backend for ``nvidia``, ``amd``, ``intel`` or ``cpu``."""
        if self.writers is not None:
            return self.writers[name]
        module: Any = importlib.import_module(f"joulectl.backends.{name}")
        return module  # type: ignore[no-any-return]

    def governor(self) -> GovernorFn:
        if self.apply_preset is not None:
            return self.apply_preset
        fn: GovernorFn = importlib.import_module("joulectl.ops.governor").apply_preset
        return fn

    def governor_pair(self, host: Host) -> tuple[IntentFn, GovernorFn]:
        """What the governor would write (for the write-ahead save) and the governor itself. The
        real pair shares one clock-table cache; a test-double governor writes nothing to journal ahead."""
        if self.apply_preset is not None:
            return (lambda *args, **kwargs: []), self.apply_preset
        module: Any = importlib.import_module("joulectl.ops.governor")
        ctx = module.new_context(host)
        return functools.partial(module.plan_intents, ctx=ctx), functools.partial(module.apply_preset, ctx=ctx)


# -- per-device planning ----------------------------------------------------------------------


def _fmt_w(w: float | None) -> str:
    if w is None:
        return "?"
    return f"{w:.0f}" if float(w).is_integer() else f"{w:.2f}".rstrip("0").rstrip(".")


def _range_text(min_w: float | None, max_w: float | None) -> str:
    return f"{_fmt_w(min_w) if min_w is not None else '?'}–{_fmt_w(max_w)} W"


#: No cap is ever resolved under this, whatever the device's minimum says: an amdgpu
#: ``power1_cap`` of 0 reads as a secondary die, and the GPU is lost to joulectl.
FLOOR_W = 1.0


def resolve_target(
    setting: CapSetting,
    min_w: float | None,
    max_w: float | None,
    restore_to: float | None = None,
) -> tuple[float | None, str | None]:
    """The target in whole watts for one device and, when it cannot be set, why (blocked).

    ``pct``: ``max(pct/100 × max, min, 1 W)`` rounded half away from zero (never below ``min``
    nor 1 W, nor above ``max``). ``watts``: rounded to whole watts. ``restore``: ``restore_to``.
    A target outside ``[min, max]``, or under 1 W, is returned with the message naming the range.
    """
    floor = max(min_w or 0.0, FLOOR_W)
    if setting.restore:
        if restore_to is None:
            return None, "nothing to restore to: no journal entry and the default limit is unknown"
        target = float(restore_to)
    elif setting.pct is not None:
        if max_w is None:
            return None, "the maximum power limit is unknown; a percentage cannot be resolved"
        raw = max(setting.pct / 100.0 * max_w, floor)
        target = float(round_half_away(raw))
        if target < floor:
            target = float(math.ceil(floor))
        if target > max_w:
            target = float(math.floor(max_w))
    else:
        assert setting.watts is not None
        target = float(round_half_away(setting.watts))
    if target < FLOOR_W:
        return target, f"{_fmt_w(target)} W is below 1 W, the least joulectl sets (range {_range_text(min_w, max_w)})"
    if min_w is not None and target < min_w - SAME_W:
        return target, f"{_fmt_w(target)} W is below the minimum {_fmt_w(min_w)} W (range {_range_text(min_w, max_w)})"
    # a restore puts back what was in force, which the kernel took: RAPL firmware leaves PL1 at an
    # "unlimited" 4090 W (or 200 W) above a 95 W (28 W) maximum
    if max_w is not None and target > max_w + SAME_W and not setting.restore:
        return target, f"{_fmt_w(target)} W is above the maximum {_fmt_w(max_w)} W (range {_range_text(min_w, max_w)})"
    return target, None


def _watts(value: Any) -> float | None:
    """A journaled cap as watts, or None when it is not one joulectl could have read from a device
    that holds a limit (missing, not a number, not finite, under 1 W: an original of 0 is not an
    original)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= FLOOR_W else None


def _reconcile(journal: Journal, device: str, in_force: float | None) -> None:
    """Forget joulectl's entry of a cap that is no longer joulectl's: the value in force is neither
    what joulectl set (or was about to set) nor the original, so the operator set it since. The
    value in force is then the operator's: a restore leaves it, and the next change journals it as
    the original."""
    if in_force is None or not journal.has_original(device, SETTING):
        return
    original = _watts(journal.original(device, SETTING))
    ours = [w for w in (_watts(v) for v in (journal.current(device, SETTING), *journal.pending(device, SETTING)))
            if w is not None]
    if any(_same(in_force, w) for w in ours) or (original is not None and _same(in_force, original)):
        return
    journal.forget(device, SETTING, in_force, command="operator")


def _restore_plan(journal: Journal, device: str, in_force: float | None,
                  fallback: float | None) -> tuple[float | None, str | None]:
    """Where ``--restore`` takes a device, and why it leaves it alone (``None``: it does not):

    - joulectl's cap is in force: back to the journaled original;
    - joulectl restored the device (or noticed the operator's change) and set nothing since: the
      cap in force is the operator's, left as it is (a restore run every few minutes stays put);
    - joulectl never changed the device: the default ``fallback`` (SPEC §4).
    """
    original = _watts(journal.original(device, SETTING))
    if original is not None:
        return original, None
    since = journal.owner_since(device, SETTING)
    if since is not None:
        if in_force is not None:
            what = "restored" if since.get("command") == "restore" else "set by hand since joulectl's change"
            return in_force, f"{what}: the cap in force is the operator's, left as it is"
        last = _watts(since.get("value"))
        return (last, None) if last is not None else (fallback, None)
    return fallback, None


@record
class _Pending:
    """A row waiting for its write: the device or zone object and the target."""

    row: DeviceResult
    obj: Any
    writer: str


def _same(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) < SAME_W


def _cannot(row: DeviceResult, setting: CapSetting, journal: Journal, reason: str) -> tuple[DeviceResult, bool]:
    """A device whose cap cannot be set: ``blocked``; but for ``--restore`` with nothing journaled,
    ``skipped`` (joulectl never changed it, so there is nothing to put back and nothing failed)."""
    if setting.restore and not journal.has_original(row.device, SETTING):
        row.status = Status.SKIPPED
        row.message = f"{reason}; nothing to restore"
    else:
        row.status = Status.BLOCKED
        row.message = reason
    return row, False


def _plan_gpu(dev: GpuDevice, setting: CapSetting, journal: Journal) -> tuple[DeviceResult, bool]:
    """The row for one GPU and whether it needs a write."""
    row = DeviceResult(
        device=dev.bus_id, vendor=dev.vendor, model=dev.model or dev.raw_model, status=Status.PLANNED,
        before_w=dev.current_cap_w, kind="gpu",
    )
    if not dev.holds_limit:
        row.status = Status.SKIPPED
        row.message = f"limited through primary {dev.primary_bus_id or 'die'}"
        return row, False
    if not dev.control.available or not dev.cap_range.known:
        return _cannot(row, setting, journal, dev.control.reason or "the power limit range is unknown")
    rng = dev.cap_range
    fallback = rng.default_w if rng.default_w is not None else rng.max_w  # the backend fills the default
    return _plan_target(row, setting, journal, rng.min_w, rng.max_w, fallback)


def _plan_zone(zone: PowercapZone, setting: CapSetting, journal: Journal, vendor: str | None,
               model: str | None) -> tuple[DeviceResult, bool]:
    lt = zone.long_term
    row = DeviceResult(
        device=zone.zone_id, vendor=vendor or "cpu", model=model or zone.name, status=Status.PLANNED, kind="cpu",
        before_w=lt.limit_w if lt is not None else None,
    )
    if lt is None:
        from joulectl.host import OUTSIDE

        if OUTSIDE in (zone.energy_reason or ""):  # the zone is a symlink out of the root
            return _cannot(row, setting, journal, f"{zone.path}: {zone.energy_reason}")
        return _cannot(row, setting, journal,
                       f"{zone.name} has no long_term (PL1) constraint: the zone reports energy only")
    if zone.locked:
        return _cannot(row, setting, journal, "limit locked by firmware")
    return _plan_target(row, setting, journal, lt.min_w, lt.max_w, lt.max_w)


def _plan_target(row: DeviceResult, setting: CapSetting, journal: Journal, min_w: float | None,
                 max_w: float | None, fallback: float | None) -> tuple[DeviceResult, bool]:
    """The target of a device or zone that can be capped (``row.before_w`` is the cap in force)."""
    _reconcile(journal, row.device, row.before_w)
    restore_to: float | None = None
    if setting.restore:
        restore_to, leave = _restore_plan(journal, row.device, row.before_w, fallback)
        if leave is not None:
            row.target_w = row.after_w = row.before_w
            row.status = Status.UNCHANGED
            row.message = leave
            return row, False
    target, why = resolve_target(setting, min_w, max_w, restore_to)
    return _targeted(row, target, why, row.before_w)


def _targeted(row: DeviceResult, target: float | None, why: str | None,
              current_w: float | None) -> tuple[DeviceResult, bool]:
    """Fill a planned row with its target: blocked when out of range (``why``), unchanged when the
    device is already there; the boolean says whether it must be written."""
    row.target_w = target
    if why is not None:
        row.status = Status.BLOCKED
        row.message = why
        return row, False
    if _same(current_w, target):
        row.status = Status.UNCHANGED
        row.after_w = current_w
        row.message = "already at target"
        return row, False
    return row, True


def _write(host: Host, deps: Deps, pending: list[_Pending]) -> None:
    """Hand the writes to the backends, one batch per backend, and fill the rows in."""
    by_writer: dict[str, list[_Pending]] = {}
    for p in pending:
        by_writer.setdefault(p.writer, []).append(p)
    for name, batch in by_writer.items():
        try:
            writer = deps.writer(name)
            outcomes = writer.set_caps(host, [(p.obj, float(p.row.target_w or 0)) for p in batch])
        except Exception as e:  # a backend that cannot run at all fails its rows, not the run
            if isinstance(e, JoulectlError):
                raise
            for p in batch:
                p.row.status = Status.ERROR
                p.row.message = f"{name} backend failed: {e}"
            continue
        by_device = {o.device: o for o in outcomes}
        for i, p in enumerate(batch):
            outcome = by_device.get(p.row.device)
            if outcome is None and len(outcomes) == len(batch):
                outcome = outcomes[i]
            if outcome is None:
                p.row.status = Status.ERROR
                p.row.message = f"{name} backend reported nothing for {p.row.device}"
                continue
            p.row.status = outcome.status
            p.row.message = outcome.message
            p.row.after_w = outcome.after_w


def _record(journal: Journal, rows: list[DeviceResult], restore: bool) -> None:
    """Journal what changed: the value in force before the first change, and every setting made."""
    for r in rows:
        changed = r.status in (Status.APPLIED, Status.APPLIED_UNVERIFIED) or (
            r.status is Status.ERROR and r.after_w is not None and not _same(r.after_w, r.before_w)
        )
        if restore and r.status in (Status.APPLIED, Status.APPLIED_UNVERIFIED, Status.UNCHANGED):
            if journal.has_original(r.device, SETTING):
                journal.restored(r.device, SETTING, command="restore")
            elif r.status is not Status.UNCHANGED and journal.owner_since(r.device, SETTING) is None:
                # the default put back on a device joulectl never changed: from now on the cap in
                # force is the operator's, and a later restore leaves it
                journal.restored(r.device, SETTING, command="restore", value=r.after_w or r.target_w,
                                 vendor=r.vendor, model=r.model, kind=r.kind)
            continue
        if changed:
            value = r.after_w if r.after_w is not None else r.target_w
            journal.record(r.device, SETTING, r.before_w, value, vendor=r.vendor, model=r.model,
                           kind=r.kind, command="cap")


# -- the run ----------------------------------------------------------------------------------


def _fingerprint(journal: Journal) -> str:
    from joulectl.ops.journal import fingerprint

    return fingerprint(journal)


def _peek_journal(host: Host, report: CapReport) -> Journal:
    """The journal for a dry run: read only, a corrupt one is reported but not moved."""
    from joulectl.host import HostIOError
    from joulectl.ops.journal import JOURNAL_PATH, Journal

    try:
        text = host.read(JOURNAL_PATH)
    except HostIOError as e:
        if e.errno != errno.ENOENT:
            report.warnings.append(f"cannot read the journal {JOURNAL_PATH}: {e.strerror}")
        return Journal()
    try:
        return Journal.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError):
        report.warnings.append(
            f"the journal {JOURNAL_PATH} is corrupt; a real run will move it aside and start a new one"
        )
        return Journal()


def _load_journal(host: Host, report: CapReport) -> Journal:
    from joulectl.host import HostIOError
    from joulectl.ops import journal as journal_mod

    try:
        journal = journal_mod.load(host)
    except (HostIOError, OSError) as e:
        err = getattr(e, "errno", None)
        text = getattr(e, "strerror", None) or str(e)
        if err in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise RefusedError(f"cannot read the journal {journal_mod.JOURNAL_PATH}: {text}",
                               hint=PRIVILEGE_HINT) from None
        raise JoulectlError(f"cannot read the journal {journal_mod.JOURNAL_PATH}: {text}") from None
    if journal.set_aside:
        report.warnings.append(
            f"the journal {journal_mod.JOURNAL_PATH} was corrupt: kept aside as {journal.set_aside}; "
            "starting a new one (restore falls back to the default limits)"
        )
    return journal


def execute(host: Host, req: CapRequest, deps: Deps | None = None) -> CapReport:
    """Run ``cap``: under the node lock (not for a dry run), one inventory, one journal save."""
    deps = deps or Deps()
    if req.dry_run:
        return _run(host, req, deps)
    from joulectl.ops.lock import node_lock

    with node_lock(host, req.wait_s):
        return _run(host, req, deps)


def _run(host: Host, req: CapRequest, deps: Deps) -> CapReport:
    req = replace(req)  # twin and schedule resolution fill the settings in on a copy
    inv = deps.get_inventory()(host, gpus=True if req.mode in ("twin", "schedule") else req.wants_gpu,
                               cpu=True if req.mode in ("twin", "schedule") else req.wants_cpu,
                               node_name=req.node_name, gpu_details=req.mode in ("twin", "schedule"))
    report = CapReport(node=inv.host.hostname, dry_run=req.dry_run, mode=req.mode)
    if req.mode == "twin":
        twin = _pick_twin(req, inv.host.hostname)
        _narrow(req, twin.gpu, twin.cpu, twin.governor, None)
        if not (req.wants_gpu or req.wants_cpu):
            report.warnings.append(f"{req.twin_file}: the twin has no cap intent for this target: nothing to do")
            return report
    elif req.mode == "schedule":
        from joulectl.ops.schedule import resolve

        assert req.schedule is not None
        active = resolve(req.schedule, req.at)
        report.schedule = active.to_dict()
        g_gov, c_gov = active.gpu_governor, active.cpu_governor
        target = req.explicit_target or active.target
        # Without a target the cap goes to the GPUs and a governor where its preset belongs.
        gpu_set, cpu_set = _split(active.cap, target or "gpu") if active.cap is not None else (None, None)
        if target == "gpu":
            c_gov = None
        elif target == "cpu":
            g_gov = None
        req.gpu, req.cpu, req.gpu_governor, req.cpu_governor = gpu_set, cpu_set, g_gov, c_gov
        if not (req.wants_gpu or req.wants_cpu):
            return report

    gpus: list[GpuDevice] = []
    zones: list[PowercapZone] = []
    both = req.wants_gpu and req.cpu is not None
    if req.wants_gpu:
        gpus = _select_gpus(inv, req, both, report)
    if req.cpu is not None:
        zones = _cpu_zones(inv, both, report)
    if both and not gpus and not zones:
        raise NoDeviceError("no GPU and no powercap package zone (RAPL) on this node: nothing to cap")

    journal = _peek_journal(host, report) if req.dry_run else _load_journal(host, report)
    before = _fingerprint(journal)
    #: once the write-ahead journal is on disk: whether a journal existed before it (the final save
    #: replaces it; a run that changed nothing leaves no journal where there was none)
    ahead: list[bool] = []
    try:
        _cap_and_govern(host, req, deps, inv, journal, gpus, zones, report, ahead)
    finally:
        # whatever happened after the first write, what was written is journaled
        if not req.dry_run and (ahead or _fingerprint(journal) != before):
            from joulectl.ops import journal as journal_mod

            try:
                if ahead and not ahead[0] and _fingerprint(journal) == before:
                    os.remove(host.path(journal_mod.JOURNAL_PATH))
                else:
                    journal_mod.save(host, journal)
            except OSError as e:  # the writes happened; say loudly that they are not journaled
                report.journal_error = f"{journal_mod.JOURNAL_PATH}: {e.strerror or e}"
        report.escapes = list(getattr(host, "escapes", ()))
    return report


def _cap_and_govern(host: Host, req: CapRequest, deps: Deps, inv: NodeInventory, journal: Journal,
                    gpus: list[GpuDevice], zones: list[PowercapZone], report: CapReport,
                    ahead: list[bool]) -> None:
    pending: list[_Pending] = []
    if req.gpu is not None:
        for dev in gpus:
            row, needs = _plan_gpu(dev, req.gpu, journal)
            report.results.append(row)
            if needs:
                pending.append(_Pending(row, dev, dev.vendor))
    if req.cpu is not None:
        for zone in zones:
            row, needs = _plan_zone(zone, req.cpu, journal, inv.cpu.vendor, inv.cpu.raw_model or inv.cpu.model)
            report.results.append(row)
            if needs:
                pending.append(_Pending(row, zone, "cpu"))

    governors = _governors(req, gpus)
    plan_governor: IntentFn | None = None
    apply_governor: GovernorFn | None = None
    if governors:  # the governor module (and its backends) is imported only for a run that names a preset
        plan_governor, apply_governor = (None, deps.governor()) if req.dry_run else deps.governor_pair(host)
    if req.dry_run:
        for p in pending:
            p.row.message = f"would set {_fmt_w(p.row.target_w)} W"
    else:
        _write_ahead(host, req, inv, journal, pending, gpus, plan_governor, report, ahead)
        try:
            _write(host, deps, pending)
        finally:  # an interrupt between two vendor batches still journals the first one
            _record(journal, report.results, restore=_is_restore(req))

    for preset, gpu_side in governors:
        assert apply_governor is not None
        try:
            rows = apply_governor(
                host, inv, journal, preset, gpu=gpu_side, cpu=not gpu_side,
                selectors=req.selectors if gpu_side else (), dry_run=req.dry_run,
                model_presets=req.model_presets,
            )
        except (InputError, NoDeviceError) as e:
            # a preset this node cannot take blocks the governor, never the caps already set
            rows = [DeviceResult(device="gpu" if gpu_side else "cpu", vendor="-", model=None,
                                 status=Status.BLOCKED, message=str(e), preset=preset,
                                 kind="gpu" if gpu_side else "cpu")]
        report.governor_results.extend(rows)


def _governors(req: CapRequest, gpus: list[GpuDevice]) -> list[tuple[str, bool]]:
    """The governor presets of the run and whether each is the GPU side."""
    return [(preset, gpu_side) for preset, gpu_side in ((req.gpu_governor, True), (req.cpu_governor, False))
            if preset is not None and not (gpu_side and not gpus)]


def _write_ahead(host: Host, req: CapRequest, inv: NodeInventory, journal: Journal, pending: list[_Pending],
                 gpus: list[GpuDevice], plan_governor: IntentFn | None, report: CapReport,
                 ahead: list[bool]) -> None:
    """Before the first write, one atomic save of the journal with every original and target of
    the run recorded (caps and governor alike): a kill between a write and the final save leaves
    the original journaled, so ``--restore`` and ``governor reset`` still go back to it. A restore
    writes originals and needs none. When the journal cannot be written the run goes on and says so
    (``journal not saved``), as for the final save."""
    from joulectl.ops.journal import JOURNAL_PATH, Intent, save_ahead

    intents: list[Any] = []
    if not _is_restore(req):
        intents += [Intent(p.row.device, SETTING, p.row.before_w, p.row.target_w, p.row.vendor, p.row.model,
                           p.row.kind) for p in pending]
    for preset, gpu_side in _governors(req, gpus):
        try:
            assert plan_governor is not None
            intents += plan_governor(host, inv, journal, preset, gpu=gpu_side, cpu=not gpu_side,
                                     selectors=req.selectors if gpu_side else (), model_presets=req.model_presets)
        except (InputError, NoDeviceError):
            continue  # reported as a blocked governor row by the run itself
    if not intents:
        return
    existed = host.exists(JOURNAL_PATH)
    try:
        save_ahead(host, journal, intents)
    except OSError as e:
        report.journal_error = f"{JOURNAL_PATH}: {e.strerror or e}"
        return
    ahead.append(existed)


def _is_restore(req: CapRequest) -> bool:
    return any(s is not None and s.restore for s in (req.gpu, req.cpu))


def _select_gpus(inv: NodeInventory, req: CapRequest, both: bool, report: CapReport) -> list[GpuDevice]:
    from joulectl.ops.select import select_devices

    if not inv.gpus:
        why = "; ".join(f"{v}: {m}" for v, m in sorted(inv.gpu_errors.items()))
        msg = "no GPU found on this node" + (f" ({why})" if why else "")
        if both and not req.selectors:
            report.warnings.append(msg + ": capping the CPU only")
            return []
        raise NoDeviceError(msg)
    return select_devices(inv.gpus, req.selectors)


def _cpu_zones(inv: NodeInventory, both: bool, report: CapReport) -> list[PowercapZone]:
    zones = inv.cpu.package_zones
    if zones:
        return zones
    reason = inv.cpu.control.reason if not inv.cpu.control.available else None
    msg = "no powercap package zone (RAPL) on this node"
    if inv.cpu.virtual:
        msg += ": a virtual machine (the hypervisor exposes no RAPL)"
    elif reason:
        msg += f" ({reason})"
    if both:
        report.warnings.append(msg + ": capping the GPUs only")
        return []
    raise NoDeviceError(msg, hint="CPU power caps need the intel-rapl powercap driver")
