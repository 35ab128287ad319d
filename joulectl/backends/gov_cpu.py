"""CPU governor: the cpufreq governor and EPP of every policy.

Presets (SPEC §5):

- ``performance``: governor ``performance`` (the driver pins EPP to performance itself).
- ``balanced``: governor ``powersave`` under an EPP driver in active mode (``intel_pstate``,
  ``amd-pstate-epp``), ``schedutil`` otherwise; EPP ``balance_performance`` where the policy
  has EPP.
- ``efficiency``: governor ``powersave`` and EPP ``power``.

Ordering avoids EBUSY: intel_pstate and amd-pstate refuse an EPP other than ``performance``
while the governor is ``performance``, so the EPP is written while the governor is not
``performance``: governor first when leaving ``performance``, EPP first when going to it (on a
restore). Every write is read back.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from joulectl.backends.base import governor_status_for_errno
from joulectl.host import Host, HostIOError
from joulectl.models import CpufreqPolicy, Status

#: cpufreq drivers whose ``powersave`` is an EPP-guided algorithm rather than the minimum clock.
EPP_ACTIVE_DRIVERS = frozenset({"intel_pstate", "amd-pstate-epp"})

#: EAGAIN: intel_pstate's EPP store when no driver is registered (hardware-interfaces.md).
_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBUSY, errno.EAGAIN})


@dataclass(frozen=True)
class CpuTarget:
    """What a preset wants on one policy; ``epp`` None leaves EPP as the driver sets it."""

    governor: str
    epp: str | None


@dataclass(frozen=True)
class PolicyState:
    governor: str | None
    epp: str | None
    available_governors: list[str]
    available_epp: list[str]
    driver: str | None
    has_epp: bool


@dataclass(frozen=True)
class WriteResult:
    status: Status
    message: str = ""


class PresetBlocked(Exception):
    """The preset cannot be expressed on this policy."""


def _path(policy: CpufreqPolicy, name: str) -> str:
    return f"{policy.path.rstrip('/')}/{name}"


def read_state(host: Host, policy: CpufreqPolicy) -> PolicyState:
    """The policy's governor and EPP as they are now (fresh reads, not the inventory's)."""
    gov = host.read_attr(_path(policy, "scaling_governor")).value or None
    epp_attr = host.read_attr(_path(policy, "energy_performance_preference"))
    avail_gov = host.read_attr(_path(policy, "scaling_available_governors")).value
    avail_epp = host.read_attr(_path(policy, "energy_performance_available_preferences")).value
    driver = host.read_attr(_path(policy, "scaling_driver")).value or policy.driver
    return PolicyState(
        governor=gov,
        epp=epp_attr.value or None,
        available_governors=avail_gov.split() if avail_gov else list(policy.available_governors),
        available_epp=avail_epp.split() if avail_epp else list(policy.available_epp),
        driver=driver,
        has_epp=host.exists(_path(policy, "energy_performance_preference")),
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


def epp_first(target_governor: str) -> bool:
    """Write the EPP before the governor when going to ``performance`` (EBUSY otherwise)."""
    return target_governor == "performance"
