"""Plain data shared by backends, ops and render: what a node has and what a command did.

Units live in names: ``_w`` watts, ``_mhz`` MHz, ``_uj`` microjoules. Backends fill these; ops
turn them into results; render prints them. ``None`` always means "unknown", and the matching
``reason`` or ``control.reason`` field says why.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any

from joulectl.record import record


class Status(str, Enum):
    """Per-device outcome of a mutating command (SPEC §2)."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    APPLIED_UNVERIFIED = "applied-unverified"
    SKIPPED = "skipped"
    BLOCKED = "blocked"
    UNSUPPORTED = "unsupported"
    REFUSED = "refused"
    ERROR = "error"
    PLANNED = "planned"

    def __str__(self) -> str:
        return self.value


#: Statuses that count as success for the exit code.
OK_STATUSES = frozenset(
    {Status.APPLIED, Status.UNCHANGED, Status.APPLIED_UNVERIFIED, Status.SKIPPED, Status.PLANNED}
)

GPU_PRESETS = ("auto", "sustained", "efficient", "low", "peak")
CPU_PRESETS = ("performance", "balanced", "efficiency")


@record(frozen=True)
class PowerRange:
    """A settable power range in watts; any bound may be unknown."""

    min_w: float | None = None
    max_w: float | None = None
    default_w: float | None = None

    @property
    def known(self) -> bool:
        return self.max_w is not None


@record(frozen=True)
class Control:
    """Whether a capability can be used, and why not."""

    available: bool
    reason: str | None = None


@record
class GpuDevice:
    """One GPU as discovered: identity, limits, current state and how it is controlled.

    ``holds_limit`` is False for a device limited through a primary die (MI250X secondary GCD);
    ``primary_bus_id`` then names the primary. Backend-private details (hwmon directory, cap
    file, clock tables) live in the typed optional fields below.
    """

    index: int
    bus_id: str
    vendor: str  # nvidia | amd | intel
    driver: str  # nvidia | amdgpu | i915 | xe
    raw_model: str | None
    model: str | None
    catalog_key: str | None = None
    uuid: str | None = None
    cap_range: PowerRange = field(default_factory=PowerRange)
    #: the requested (software) power limit: ``power.limit``, NVML ``PowerManagementLimit``
    current_cap_w: float | None = None
    #: the limit in force after every limiter (NVIDIA ``enforced.power.limit``); None where the
    #: vendor has no separate reading
    enforced_cap_w: float | None = None
    power_w: float | None = None
    holds_limit: bool = True
    primary_bus_id: str | None = None
    partition: str | None = None
    mig: str | None = None
    control: Control = field(default_factory=lambda: Control(False, "not probed"))
    governor_presets: tuple[str, ...] = ()
    architecture: str | None = None
    persistence_mode: str | None = None
    #: hwmon directory (host path) for amdgpu, i915 and xe.
    hwmon: str | None = None
    #: file the cap is written to (host path) for sysfs backends.
    cap_file: str | None = None
    #: supported clocks: memory MHz -> graphics MHz, highest first.
    supported_clocks: dict[int, list[int]] | None = None
    #: current clocks and locks as read: graphics_mhz, memory_mhz, ...
    clocks: dict[str, Any] = field(default_factory=dict)
    #: AMD performance level and sclk levels (MHz) as read.
    perf_level: str | None = None
    sclk_levels_mhz: list[int] | None = None
    warnings: list[str] = field(default_factory=list)
    #: energy counter in µJ where the device has one and no power reading (Intel ``energy<N>_input``).
    energy_uj: int | None = None
    #: limits the device reports that are not the cap joulectl sets (watts): ``pl2``, ``critical``.
    other_limits_w: dict[str, float] = field(default_factory=dict)
    #: the driver may rewrite ``cap_range.default_w`` with the cap in force (amdgpu swsmu after a
    #: resume or reset): discover then compares it with the journal.
    default_tracks_cap: bool = False


@record(frozen=True)
class PowercapConstraint:
    """One ``constraint_<i>_*`` set of a powercap zone."""

    index: int
    name: str | None  # long_term | short_term | peak_power
    limit_w: float | None
    min_w: float | None
    max_w: float | None
    time_window_us: int | None
    limit_path: str
    #: errno name when the limit could not be read (ENODATA: locked by firmware).
    limit_reason: str | None = None


@record
class PowercapZone:
    """A powercap (RAPL) zone: package, dram, psys, core or uncore."""

    path: str  # host path of the zone directory
    zone_id: str  # e.g. intel-rapl:0 or intel-rapl:0:1
    name: str  # e.g. package-0, dram, psys
    kind: str  # package | dram | psys | core | uncore | other
    socket: int | None
    enabled: bool | None
    energy_readable: bool
    energy_uj: int | None
    max_energy_range_uj: int | None
    constraints: list[PowercapConstraint] = field(default_factory=list)
    energy_reason: str | None = None
    #: how the kernel reaches the limits: ``msr`` (intel-rapl), ``mmio`` (intel-rapl-mmio), or the
    #: powercap control type for others.
    interface: str = ""
    #: with two interfaces for one package (MSR and MMIO): True on the zone whose PL1 is the lower,
    #: the one the package obeys; None when the package has one zone.
    binds: bool | None = None

    @property
    def long_term(self) -> PowercapConstraint | None:
        return next((c for c in self.constraints if c.name == "long_term"), None)

    @property
    def locked(self) -> bool:
        """PL1 visible but not writable: firmware lock (``enabled`` 0 or an ENODATA limit)."""
        lt = self.long_term
        return lt is not None and (self.enabled is False or lt.limit_reason == "ENODATA")


@record
class CpufreqPolicy:
    """One cpufreq policy directory: ``cpufreq/policyN``, or on kernels without policies (before
    4.x) the per-CPU ``cpuN/cpufreq`` (``layout`` ``legacy``). ``path`` is the directory every
    attribute of the policy is read from and written to."""

    name: str  # policy0, or cpu0 in the legacy layout
    path: str
    cpus: list[int]
    driver: str | None
    governor: str | None
    available_governors: list[str]
    epp: str | None
    available_epp: list[str]
    min_khz: int | None
    max_khz: int | None
    base_khz: int | None
    cur_khz: int | None
    layout: str = "policy"  # policy | legacy


@record
class CpuInventory:
    """The node's CPUs: identity, topology, cpufreq and powercap."""

    vendor: str | None
    raw_model: str | None
    model: str | None
    catalog_key: str | None
    exactness: str  # exact | proxy | generic
    sockets: int
    cores: int
    threads: int
    driver: str | None
    available_governors: list[str]
    governors: list[str]
    epp: list[str]
    available_epp: list[str]
    turbo: bool | None
    min_mhz: float | None
    nominal_mhz: float | None
    max_mhz: float | None
    zones: list[PowercapZone]
    policies: list[CpufreqPolicy]
    cap_range_per_socket: PowerRange
    control: Control
    telemetry: Control
    governor_control: Control
    virtual: bool
    warnings: list[str] = field(default_factory=list)
    #: amd-pstate ``amd_pstate_lowest_nonlinear_freq`` in MHz (NodeHardware landmarks).
    lowest_nonlinear_mhz: float | None = None
    #: acpi-cpufreq with boost (AMD CPB): ``cpuinfo_max_freq`` is the highest non-boost clock, and
    #: ``max_mhz`` (the boost maximum) is unknown.
    max_nonboost_mhz: float | None = None

    @property
    def package_zones(self) -> list[PowercapZone]:
        return [z for z in self.zones if z.kind == "package"]


@record
class HostInfo:
    """The node itself: host name, kernel release and whether it is a virtual machine."""

    hostname: str
    kernel: str | None
    virtual: bool


@record
class NodeInventory:
    """Everything ``discover`` reports about one node."""

    host: HostInfo
    cpu: CpuInventory
    gpus: list[GpuDevice]
    #: per vendor backend: why GPUs of that vendor could not be listed (tool missing, timeout ...).
    gpu_errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def power_domains(self) -> int:
        return sum(1 for g in self.gpus if g.holds_limit)

    @property
    def governor_presets(self) -> tuple[str, ...]:
        """Presets every GPU of the node accepts (SPEC §5)."""
        if not self.gpus:
            return ()
        common = set(self.gpus[0].governor_presets)
        for g in self.gpus[1:]:
            common &= set(g.governor_presets)
        return tuple(p for p in GPU_PRESETS if p in common)


@record
class DeviceResult:
    """One row of a mutating command's result (SPEC §2)."""

    device: str  # PCI bus id or zone id
    vendor: str
    model: str | None
    status: Status
    message: str = ""
    before_w: float | None = None
    target_w: float | None = None
    after_w: float | None = None
    #: governor commands: the preset and what was in force before/after.
    preset: str | None = None
    before: str | None = None
    after: str | None = None
    kind: str = "gpu"  # gpu | cpu
