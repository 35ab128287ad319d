"""CPU governor: the cpufreq governor and EPP of every policy.

Facts this module relies on, with their sources: docs/hardware.md §4 (cpufreq policy files,
intel_pstate and amd-pstate EPP errnos).

Presets (SPEC §5):

- ``performance``: governor ``performance`` (the driver pins EPP to performance itself).
- ``balanced``: governor ``powersave`` under an EPP driver in active mode (``intel_pstate``,
  ``amd-pstate-epp``), ``schedutil`` otherwise; EPP ``balance_performance`` where the policy
  has EPP.
- ``efficiency``: governor ``powersave`` and EPP ``power``.

Ordering avoids EBUSY: intel_pstate and amd-pstate refuse an EPP other than ``performance``
while the governor is ``performance``, so the governor is written first (leaving
``performance``) and then the EPP; going to ``performance`` writes no EPP (the preset names none,
and a reset drops the saved one: the driver pins it). Every write is read back.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Any

from joulectl.backends.base import GOVERNOR_COMMAND, PRESET_SETTING, ShowRow, governor_status_for_errno, preset_of
from joulectl.host import Host, HostIOError
from joulectl.models import CPU_PRESETS, OK_STATUSES, CpufreqPolicy, CpuInventory, DeviceResult, Status
from joulectl.ops.journal import Intent, Journal
from joulectl.record import record

#: cpufreq drivers whose ``powersave`` is an EPP-guided algorithm rather than the minimum clock.
EPP_ACTIVE_DRIVERS = frozenset({"intel_pstate", "amd-pstate-epp"})

#: EAGAIN: intel_pstate's EPP store when no driver is registered (docs/hardware.md §4.2).
_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY, errno.EAGAIN})


@record(frozen=True)
class CpuTarget:
    """What a preset wants on one policy; ``epp`` None leaves EPP as the driver sets it."""

    governor: str
    epp: str | None


@record(frozen=True)
class PolicyState:
    governor: str | None
    epp: str | None
    available_governors: list[str]
    available_epp: list[str]
    driver: str | None
    has_epp: bool


@record(frozen=True)
class WriteResult:
    status: Status
    message: str = ""


class PresetBlocked(Exception):
    """The preset cannot be expressed on this policy."""


def _path(policy: CpufreqPolicy, name: str) -> str:
    return f"{policy.path.rstrip('/')}/{name}"


def read_state(host: Host, policy: CpufreqPolicy) -> PolicyState:
    """The policy's governor and EPP as they are now (two fresh reads). The driver and the lists
    of governors and EPP values are the inventory's, read by discover in the same run: reading
    them again for every policy made a preset on 128 policies cost seven reads each."""
    gov = host.read_attr(_path(policy, "scaling_governor")).value or None
    epp_attr = host.read_attr(_path(policy, "energy_performance_preference"))
    return PolicyState(
        governor=gov,
        epp=epp_attr.value or None,
        available_governors=list(policy.available_governors),
        available_epp=list(policy.available_epp),
        driver=policy.driver,
        has_epp=epp_attr.errno != errno.ENOENT,
    )


def state_from_inventory(policy: CpufreqPolicy) -> PolicyState | None:
    """The policy's state as the inventory of this run read it (under the node lock, moments
    ago), or None when the inventory cannot tell whether the policy has an EPP file (no EPP value
    and no list of them: :func:`read_state` reads it then)."""
    if policy.governor is None or (policy.epp is None and not policy.available_epp):
        return None
    return PolicyState(
        governor=policy.governor,
        epp=policy.epp,
        available_governors=list(policy.available_governors),
        available_epp=list(policy.available_epp),
        driver=policy.driver,
        has_epp=True,
    )


def describe(governor: str | None, epp: str | None) -> str:
    if governor is None:
        return "unknown"
    return f"{governor}/{epp}" if epp else governor


def target_for(preset: str, state: PolicyState) -> CpuTarget:
    """The governor and EPP ``preset`` means on a policy; :class:`PresetBlocked` when the policy
    lacks the governor it needs."""
    if preset == "performance":
        governor, epp = "performance", None
    elif preset == "balanced":
        governor = "powersave" if (state.driver or "") in EPP_ACTIVE_DRIVERS else "schedutil"
        epp = "balance_performance"
    elif preset == "efficiency":
        governor, epp = "powersave", "power"
    else:
        raise PresetBlocked(f"unknown CPU preset {preset!r}")
    if state.available_governors and governor not in state.available_governors:
        raise PresetBlocked(
            f"governor {governor} not available under {state.driver or 'this driver'} "
            f"(available: {', '.join(state.available_governors)})"
        )
    if epp is not None and not state.has_epp:
        epp = None
    elif (epp is not None and state.available_epp and epp not in state.available_epp
          and state.governor != "performance"):
        # amd-pstate lists only "performance" while the governor is performance: the full list
        # comes back with the governor change, so the list is only checked outside performance
        raise PresetBlocked(f"EPP {epp} not available (available: {', '.join(state.available_epp)})")
    return CpuTarget(governor, epp)


def status_for_errno(err: int) -> Status:
    """The governor's errno table for cpufreq (SPEC §5)."""
    return governor_status_for_errno(err, _UNSUPPORTED)


def _write_checked(host: Host, policy: CpufreqPolicy, name: str, value: str) -> WriteResult:
    """Write a cpufreq attribute of ``policy`` and read it back: ``applied`` when it reads ``value``."""
    path = _path(policy, name)
    try:
        host.write(path, value)
    except HostIOError as e:
        return WriteResult(status_for_errno(e.errno), f"writing {value} to {path}: {e.errno_name}")
    back = host.read_attr(path).value
    if back != value:
        return WriteResult(Status.ERROR, f"{path} reads back {back or 'nothing'} after writing {value}")
    return WriteResult(Status.APPLIED)


def write_governor(host: Host, policy: CpufreqPolicy, governor: str) -> WriteResult:
    return _write_checked(host, policy, "scaling_governor", governor)


def write_epp(host: Host, policy: CpufreqPolicy, epp: str) -> WriteResult:
    return _write_checked(host, policy, "energy_performance_preference", epp)


def policy_key(policy: CpufreqPolicy) -> str:
    """The journal key and result device of a cpufreq policy: ``cpufreq:policy0``."""
    return f"cpufreq:{policy.name}"


def presets(device: CpufreqPolicy, model_presets: dict[str, Any] | None = None,
            host: Host | None = None) -> tuple[str, ...]:
    """The CPU presets: every policy takes the three (one it cannot express is ``blocked``)."""
    return CPU_PRESETS


class CpuGovernor:
    """The governor contract (:class:`~joulectl.backends.base.GovernorBackend`) on cpufreq policies."""

    def __init__(self, host: Host, cpu: CpuInventory) -> None:
        self.host = host
        self.cpu = cpu
        self.vendor = (cpu.vendor or "cpu").lower()
        #: policy path -> the state the last plan of this run started from (see :meth:`_set`)
        self._planned: dict[str, PolicyState] = {}

    def accepted(self, device: CpufreqPolicy) -> tuple[str, ...]:
        return presets(device)

    def plan(self, devices: Sequence[CpufreqPolicy], preset: str,
             journal: Journal) -> tuple[list[DeviceResult], list[Intent]]:
        intents: list[Intent] = []
        return self._set(devices, journal, preset, True, intents), intents

    def apply(self, devices: Sequence[CpufreqPolicy], preset: str, journal: Journal) -> list[DeviceResult]:
        return self._set(devices, journal, preset, False)

    def undo(self, devices: Sequence[CpufreqPolicy], journal: Journal, *,
             dry_run: bool = False) -> list[DeviceResult]:
        return self._undo(devices, journal, dry_run)

    def show(self, devices: Sequence[CpufreqPolicy], journal: Journal) -> list[ShowRow]:
        return self._show(devices, journal)

    def _result(self, policy: CpufreqPolicy, status: Status, message: str = "", **kw: Any) -> DeviceResult:
        return DeviceResult(device=policy_key(policy), vendor=self.vendor, model=self.cpu.raw_model or self.cpu.model,
                            status=status, message=message, kind="cpu", **kw)

    def _write(self, journal: Journal, policy: CpufreqPolicy, state: PolicyState, governor: str | None,
               epp: str | None) -> tuple[WriteResult, str | None, str | None]:
        """Write the governor, then the EPP (the order that avoids EBUSY), and journal what each write
        left in force as read back, not what was asked: a governor change lets the driver pin
        the EPP (``performance``) or put back the one it saved, and only the readback says
        which. Returns the outcome and the governor and EPP in force after."""
        host = self.host
        key = policy_key(policy)
        vendor, model = self.vendor, self.cpu.model
        now = {"governor": state.governor, "epp": state.epp}

        def record(name: str, setting: str, value: str | None) -> None:
            if value != now[name] and value is not None:
                journal.record(key, setting, now[name], value, vendor=vendor, model=model, kind="cpu",
                               command=GOVERNOR_COMMAND)
            now[name] = value

        def do_gov() -> WriteResult:
            if governor is None or governor == now["governor"]:
                return WriteResult(Status.UNCHANGED)
            w = write_governor(host, policy, governor)
            if w.status in OK_STATUSES:
                record("governor", "cpuGovernor", governor)
                if state.has_epp:
                    record("epp", "epp", host.read_attr(_path(policy, "energy_performance_preference")).value or None)
            return w

        def do_epp() -> WriteResult:
            if epp is None or epp == now["epp"]:
                return WriteResult(Status.UNCHANGED)
            w = write_epp(host, policy, epp)
            if w.status in OK_STATUSES:
                record("epp", "epp", epp)  # read back by write_epp
            return w

        for step in (do_gov, do_epp):
            w = step()
            if w.status not in OK_STATUSES:
                return w, now["governor"], now["epp"]
        return WriteResult(Status.APPLIED), now["governor"], now["epp"]

    def _intents(self, policy: CpufreqPolicy, state: PolicyState, governor: str | None,
                 epp: str | None) -> list[Intent]:
        """What :meth:`_write` journals for these targets, for the write-ahead save."""
        key = policy_key(policy)
        vendor, model = self.vendor, self.cpu.model
        out = []
        if governor is not None and governor != state.governor:
            out.append(Intent(key, "cpuGovernor", state.governor, governor, vendor, model, "cpu"))
            if governor == "performance" and state.epp not in (None, "performance") and epp is None:
                out.append(Intent(key, "epp", state.epp, "performance", vendor, model, "cpu"))
        if epp is not None and epp != state.epp:
            out.append(Intent(key, "epp", state.epp, epp, vendor, model, "cpu"))
        return out

    def _set(self, policies: Sequence[CpufreqPolicy], journal: Journal, preset: str,
             dry_run: bool, intents: list[Intent] | None = None) -> list[DeviceResult]:
        host = self.host
        results = []
        states = self._planned
        for policy in policies:
            # The plan starts from the inventory of this run; the apply that follows it in the
            # same run (the write-ahead plan, then the writes) from the states the plan used:
            # a preset on 128 policies read each policy's governor and EPP three times.
            if dry_run:
                state = state_from_inventory(policy) or read_state(host, policy)
                states[policy.path] = state
            else:
                planned = states.pop(policy.path) if policy.path in states else None
                state = planned or read_state(host, policy)
            if state.governor is None:
                results.append(self._result(policy, Status.BLOCKED,
                                           f"{policy.path}/scaling_governor not readable", preset=preset))
                continue
            before = describe(state.governor, state.epp)
            try:
                target = target_for(preset, state)
            except PresetBlocked as e:
                results.append(self._result(policy, Status.BLOCKED, str(e), preset=preset, before=before))
                continue
            want_epp = target.epp if target.epp != state.epp else None
            after = describe(target.governor, target.epp or (None if target.governor == "performance"
                                                                     else state.epp))
            if target.governor == state.governor and want_epp is None:
                results.append(self._result(policy, Status.UNCHANGED, "already in force", preset=preset,
                                           before=before, after=before))
                continue
            if dry_run:
                if intents is not None:
                    intents.extend(self._intents(policy, state, target.governor, target.epp))
                results.append(self._result(policy, Status.PLANNED, "", preset=preset, before=before,
                                           after=after))
                continue
            w, gov_now, epp_now = self._write(journal, policy, state, target.governor, target.epp)
            if w.status in OK_STATUSES:
                journal.record(policy_key(policy), PRESET_SETTING, None, {"preset": preset, "status": "applied"},
                               vendor=self.vendor, model=self.cpu.model,
                               kind="cpu", command=GOVERNOR_COMMAND)
            results.append(self._result(policy, w.status if w.status not in OK_STATUSES
                                        else Status.APPLIED, w.message, preset=preset, before=before,
                                        after=describe(gov_now, epp_now)))
        return results

    def _undo(self, policies: Sequence[CpufreqPolicy], journal: Journal, dry_run: bool) -> list[DeviceResult]:
        host = self.host
        results = []
        for policy in policies:
            key = policy_key(policy)
            state = read_state(host, policy)
            before = describe(state.governor, state.epp)
            # what joulectl set, and what a run killed around its write was about to set
            ours_gov = {v for v in (journal.current(key, "cpuGovernor"), *journal.pending(key, "cpuGovernor"))
                        if v is not None} if journal.set_by_joulectl(key, "cpuGovernor") else set()
            ours_epp = {v for v in (journal.current(key, "epp"), *journal.pending(key, "epp"))
                        if v is not None} if journal.set_by_joulectl(key, "epp") else set()
            if not ours_gov and not ours_epp:
                results.append(self._result(policy, Status.UNCHANGED,
                                           "nothing set by joulectl", before=before, after=before))
                continue
            # an empty or unreadable value is no operator's choice (a plain file a killed write truncated)
            changed = (bool(ours_gov) and state.governor is not None and state.governor not in ours_gov) or (
                bool(ours_epp) and state.governor != "performance" and state.epp is not None
                and state.epp not in ours_epp)
            if changed:
                if not dry_run:
                    for s in ("cpuGovernor", "epp", PRESET_SETTING):
                        if journal.has_original(key, s):
                            journal.restored(key, s, command=GOVERNOR_COMMAND)
                results.append(self._result(policy, Status.UNCHANGED,
                                           f"changed to {before} since joulectl set it: left alone",
                                           before=before, after=before))
                continue
            gov = journal.original(key, "cpuGovernor") if ours_gov else None
            epp = journal.original(key, "epp") if ours_epp else None
            if gov is not None and gov == "performance":
                # the driver pins EPP under performance; restoring the governor restores it
                epp = None
            after = describe(gov or state.governor, epp or state.epp)
            if dry_run:
                results.append(self._result(policy, Status.PLANNED, "", before=before, after=after))
                continue
            w, gov_now, epp_now = self._write(journal, policy, state, gov, epp)
            if w.status not in OK_STATUSES:
                results.append(self._result(policy, w.status, w.message, before=before))
                continue
            for s in ("cpuGovernor", "epp", PRESET_SETTING):
                if journal.has_original(key, s):
                    journal.restored(key, s, command=GOVERNOR_COMMAND)
            results.append(self._result(policy, Status.APPLIED, "governor set by joulectl restored",
                                        before=before, after=describe(gov_now, epp_now)))
        return results

    def _show(self, policies: Sequence[CpufreqPolicy], journal: Journal) -> list[ShowRow]:
        host = self.host
        rows = []
        for policy in policies:
            key = policy_key(policy)
            state = read_state(host, policy)
            preset, status = preset_of(journal, key)
            ours_gov = journal.current(key, "cpuGovernor")
            ours = journal.set_by_joulectl(key, "cpuGovernor") or journal.set_by_joulectl(key, "epp")
            row = ShowRow(key, self.vendor, self.cpu.raw_model or self.cpu.model,
                          "cpu", None, None,
                          describe(state.governor, state.epp), None,
                          f"{policy.cur_khz // 1000} MHz" if policy.cur_khz else None, CPU_PRESETS)
            if ours and (ours_gov is None or ours_gov == state.governor):
                row.set_by, row.preset, row.status = "joulectl", preset, status or str(Status.APPLIED)
            elif ours:
                row.set_by = "operator"
                row.message = f"changed since joulectl set {ours_gov}"
            rows.append(row)
        return rows


def governor(host: Host, cpu: CpuInventory) -> CpuGovernor:
    return CpuGovernor(host, cpu)
