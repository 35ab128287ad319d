"""The kernel's write semantics of every writable emulated attribute, as pure functions and data.

One module for both ways a node is served: the plain-file tick (:mod:`joulectl.sim.tick`) applies
these rules to what it reads back at the next tick, the FUSE mode applies them to each ``write``
call as it is made. Nothing here touches a file.

A *store* is what one ``write(2)`` hands the driver. sysfs copies it into a page and NUL-terminates
it, so the driver sees a C string: everything from the first NUL on is not part of it
(:func:`store_text`). Each attribute then parses the string as its driver does (sources: the
kernel files named per kind below, and ``docs/hardware.md``):

=====================  =========================================================================
kind                   parse, values, answer
=====================  =========================================================================
``rapl_limit``         ``kstrtoull(buf, 10)`` (powercap_sys.c); no range check, the raw value is
                       masked to ``limitBits`` power units (wraps); a locked limit: ``ENODATA``
``rapl_time_window``   ``kstrtoull(buf, 10)``; read back rounded to ``2^Y*(1+F/4)`` time units
                       (intel_rapl_common.c ``rapl_compute_time_window_core``)
``amdgpu_cap``         ``kstrtou32(buf, 10)``, truncated to whole watts; outside
                       ``[power1_cap_min, power1_cap_max]`` ``EINVAL``; a secondary die ``EINVAL``
``intel_pl1``          hwmon ``kstrtol(buf, 10)``; any value taken, read back clamped to the
                       hardware bounds (i915_hwmon.c); ``0`` disables the limit
``intel_pl1_interval`` ``kstrtoull(buf, 0)``; above the maximum window ``EINVAL``
``cpufreq_governor``   ``sscanf("%15s")``, case-insensitive match of an available governor
``cpufreq_max/min``    ``sscanf("%u")`` (digits up to the first non-digit); clamped to the
                       cpuinfo limits (``cpufreq_verify_within_limits``), the maximum to the
                       non-turbo maximum while turbo is off; the minimum never above the maximum
``epp``                ``sscanf("%20s")`` matched against the preferences, else ``kstrtouint``
                       of the store (0..255); not ``performance``/0 under the performance
                       policy: ``EBUSY`` (intel_pstate.c, amd-pstate.c)
``no_turbo``           ``sscanf("%u")``, any non-zero value is 1 (intel_pstate.c ``store_no_turbo``)
``boost``              ``sscanf("%d")``, 0 or 1 else ``EINVAL`` (cpufreq.c ``store_boost``)
``amd_perf_level``     prefix match (``strncmp``) in the driver's order (amdgpu_pm.c)
``amd_sclk``           a level mask: indices split at spaces/newlines (``kstrtol(.., 0)``), each
                       ``<= 31`` and within the level table, else ``EINVAL``; a *command*: the
                       attribute keeps reading the level table with ``*`` on the active level
``amd_partition``      case-insensitive match of an available partition, else ``EINVAL``
=====================  =========================================================================

Read-only attributes (mode 0444, ``energy_uj`` 0400) refuse every write with ``EACCES``, for root
too (:func:`access_errno`). A writable attribute of a kind not listed here is taken and changes
nothing (:data:`UNMODELLED`).

Plain files cannot see the length of a write that did not truncate the file (``cpupower`` writes
``800000`` over ``4000000\\n`` and leaves ``8000000\\n``): :func:`overlay_stores` lists what the
writer may have stored, and :func:`resolve` takes the longest one the driver accepts as it is.
"""

from __future__ import annotations

import errno as errno_mod
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AMD_PERF_LEVELS",
    "COMMAND_KINDS",
    "EPP_STRINGS",
    "KINDS",
    "READ_ONLY_ERRNO",
    "UNMODELLED",
    "Context",
    "Rule",
    "Verdict",
    "access_errno",
    "apply",
    "command_readback",
    "kstrtoul",
    "overlay_stores",
    "read_only",
    "resolve",
    "rule_from_manifest",
    "sclk_levels",
    "sclk_mask",
    "sclk_table",
    "store_text",
]

#: Writable kinds with a rule here. Any other writable attribute is taken and changes nothing.
KINDS = (
    "rapl_limit", "rapl_time_window", "amdgpu_cap", "intel_pl1", "intel_pl1_interval", "cpufreq_governor",
    "cpufreq_max", "cpufreq_min", "epp", "no_turbo", "boost", "amd_perf_level", "amd_sclk", "amd_partition",
    "intel_gt_min", "intel_gt_max",
)
UNMODELLED = "other"
#: Attributes whose write is a command: what reads back is not what was written (:func:`command_readback`).
COMMAND_KINDS = frozenset({"amd_sclk"})
EPP_STRINGS = ("default", "performance", "balance_performance", "balance_power", "power")
#: amdgpu's levels in the order its store compares them (``strncmp`` prefix match, amdgpu_pm.c).
AMD_PERF_LEVELS = (
    "auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
    "profile_peak", "perf_determinism",
)
_AMD_MATCH_ORDER = ("low", "high", "auto", "manual", "profile_exit", "profile_standard", "profile_min_sclk",
                    "profile_min_mclk", "profile_peak", "perf_determinism")
#: The errno a write to a read-only attribute fails with (sysfs checks the mode, root included).
READ_ONLY_ERRNO = errno_mod.EACCES
#: intel_rapl's time unit, µs: ``1000000 / (1 << 10)`` (MSR_RAPL_POWER_UNIT bits 19:16 = 0xA).
RAPL_TIME_UNIT_US = 976


@dataclass
class Rule:
    """The validation rule of one writable attribute, as the kernel applies it (µW, kHz, ms)."""

    min_uw: int | None = None
    max_uw: int | None = None
    limit_bits: int | None = None
    unit_uw: int = 125_000
    locked: bool = False
    pinned_uw: int | None = None
    clamp_uw: tuple[int, int] | None = None
    allowed: tuple[str, ...] = ()
    secondary: bool = False
    min_khz: int | None = None
    max_khz: int | None = None
    default: str | None = None
    base_khz: int | None = None
    max_ms: int | None = None
    #: Intel GT frequency bounds (MHz): RPn and RP0
    rpn_mhz: int | None = None
    rp0_mhz: int | None = None


@dataclass(frozen=True)
class Context:
    """What else is in force on the device when a store is made.

    ``governor``: the policy's governor (the EPP ``EBUSY`` rule); ``turbo``: False while
    ``no_turbo=1`` or ``boost=0`` (the cpufreq maximum then stops at the non-turbo maximum);
    ``other_khz``: the policy's other limit (``scaling_max_freq`` for a minimum), or None;
    ``other_mhz``: an Intel GT's other frequency bound in force (the maximum for a minimum);
    ``perf_level``: the GPU's ``power_dpm_force_performance_level`` (a ``pp_dpm_*`` level mask
    is taken in ``manual`` only), or None when unknown.
    """

    governor: str | None = None
    turbo: bool = True
    other_khz: int | None = None
    other_mhz: int | None = None
    perf_level: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The kernel's answer to one store: the text the attribute reads back, or the errno it fails with.

    ``note`` is ``"clamped"`` or ``"wrapped"`` when the value in force differs from the one
    stored, else a reason for a refusal (or ``""``).
    """

    text: str | None
    errno: int = 0
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.text is not None

    @property
    def as_stored(self) -> bool:
        """Taken without being clamped or wrapped."""
        return self.text is not None and self.note not in ("clamped", "wrapped")


def _refuse(err: int, note: str) -> Verdict:
    return Verdict(None, err, note)


# -- parsing as the kernel parses ----------------------------------------------------------------


def store_text(data: bytes | str) -> str:
    """The C string a driver sees for one store: the bytes up to the first NUL."""
    if isinstance(data, bytes):
        data = data.split(b"\0", 1)[0].decode("utf-8", "replace")
    return data.split("\0", 1)[0]


_KSTRTO = re.compile(r"\+?([0-9]+)\n?")
_KSTRTO_SIGNED = re.compile(r"([+-]?[0-9]+)\n?")
_KSTRTO_BASE0 = re.compile(r"\+?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\n?")
_SSCANF_U = re.compile(r"\s*([+-]?)([0-9]+)")


def kstrtoul(s: str, base: int = 10, bits: int = 64) -> int | None:
    """``kstrtoull``/``kstrtou32``: an optional ``+``, digits, at most one trailing newline, nothing else.

    ``base`` 10 or 0 (``0x`` hex, leading ``0`` octal). None where the kernel returns ``-EINVAL``
    (or ``-ERANGE`` past ``bits``).
    """
    m = (_KSTRTO if base == 10 else _KSTRTO_BASE0).fullmatch(s)
    if not m:
        return None
    digits = m.group(1)
    value = int(digits, 0) if base == 0 and digits.lower().startswith("0x") else (
        int(digits, 8) if base == 0 and len(digits) > 1 and digits.startswith("0") else int(digits, 10))
    return value if value < (1 << bits) else None


def kstrtol(s: str) -> int | None:
    """``kstrtol(buf, 10)``: as :func:`kstrtoul` with an optional sign."""
    m = _KSTRTO_SIGNED.fullmatch(s)
    return int(m.group(1)) if m else None


def sscanf_uint(s: str) -> int | None:
    """``sscanf(buf, "%u")``: leading whitespace, digits up to the first non-digit (None: no digits)."""
    m = _SSCANF_U.match(s)
    if not m:
        return None
    value = int(m.group(2))
    return -value if m.group(1) == "-" else value


def sscanf_word(s: str, width: int) -> str:
    """``sscanf(buf, "%<width>s")``: the first whitespace-delimited word, at most ``width`` chars."""
    parts = s.split()
    return parts[0][:width] if parts else ""


# -- the rules -----------------------------------------------------------------------------------


def _rapl_window(us: int) -> int:
    """A time window as intel_rapl stores and shows it: ``2^Y*(1+F/4)`` time units, µs."""
    units = us // RAPL_TIME_UNIT_US
    if units <= 0:
        return 0
    y = units.bit_length() - 1
    if y > 0x1F:
        y, f = 0x1F, 3
    else:
        f = (4 * (units - (1 << y))) // (1 << y)
    return (1 << y) * (4 + f) * RAPL_TIME_UNIT_US // 4


def _rapl_limit(r: Rule, s: str) -> Verdict:
    if r.locked:
        return _refuse(errno_mod.ENODATA, "limit locked by BIOS")
    uw = kstrtoul(s)
    if uw is None:
        return _refuse(errno_mod.EINVAL, "not a decimal integer")
    unit = max(1, r.unit_uw)
    # No range check in intel_rapl: the value is converted to power units and masked to the
    # field, so a limit past limitBits wraps as on hardware.
    shown = uw
    if r.limit_bits:
        shown = ((uw // unit) % (1 << r.limit_bits)) * unit
    return Verdict(f"{shown}\n", note="wrapped" if shown // unit != uw // unit else "")


def _amdgpu_cap(r: Rule, s: str) -> Verdict:
    if r.secondary:
        return _refuse(errno_mod.EINVAL, "power limit can be set only through the primary die")
    value = kstrtoul(s, bits=32)
    if value is None:
        return _refuse(errno_mod.EINVAL, "not a 32-bit decimal integer")
    uw = value // 1_000_000 * 1_000_000
    if r.pinned_uw is not None and uw != r.pinned_uw:
        return _refuse(errno_mod.EINVAL, "cap is pinned")
    if (r.min_uw is not None and uw < r.min_uw) or (r.max_uw is not None and uw > r.max_uw):
        return _refuse(errno_mod.EINVAL, "out of range")
    return Verdict(f"{uw}\n")


def _intel_pl1(r: Rule, s: str) -> Verdict:
    uw = kstrtol(s)
    if uw is None:
        return _refuse(errno_mod.EINVAL, "not a decimal integer")
    if uw < 0:
        return _refuse(errno_mod.EINVAL, "negative power limit (assumption: refused)")
    if uw and r.clamp_uw:
        lo, hi = r.clamp_uw
        if uw < lo or uw > hi:
            return Verdict(f"{min(max(uw, lo), hi)}\n", note="clamped")
    return Verdict(f"{uw}\n")


def _cpufreq_limit(kind: str, r: Rule, s: str, ctx: Context) -> Verdict:
    khz = sscanf_uint(s)
    if khz is None or khz < 0:
        return _refuse(errno_mod.EINVAL, "not a decimal integer")
    lo = r.min_khz
    hi = r.max_khz
    if not ctx.turbo and r.base_khz is not None:
        hi = r.base_khz if hi is None else min(hi, r.base_khz)
    if kind == "cpufreq_min" and ctx.other_khz is not None:
        hi = ctx.other_khz if hi is None else min(hi, ctx.other_khz)
    got = khz
    if lo is not None:
        got = max(got, lo)
    if hi is not None:
        got = min(got, hi)
    return Verdict(f"{got}\n", note="clamped" if got != khz else "")


def _governor(r: Rule, s: str) -> Verdict:
    word = sscanf_word(s, 15)
    for name in r.allowed:
        if name.lower() == word.lower():
            return Verdict(f"{name}\n")
    return _refuse(errno_mod.EINVAL, "not an available governor")


def _epp(r: Rule, s: str, ctx: Context) -> Verdict:
    word = sscanf_word(s, 20)
    allowed = r.allowed or EPP_STRINGS
    if word in allowed:
        text, zero = word, word == "performance"
    else:
        value = kstrtoul(s, bits=32)
        if value is None:
            return _refuse(errno_mod.EINVAL, "not an available preference")
        if value > 255:
            return _refuse(errno_mod.EINVAL, "EPP above 255")
        text, zero = str(value), value == 0
    if ctx.governor == "performance" and not zero:
        return _refuse(errno_mod.EBUSY, "EPP cannot be set under the performance policy")
    return Verdict(f"{text}\n")


def _perf_level(r: Rule, s: str) -> Verdict:
    for name in _AMD_MATCH_ORDER:
        if s.startswith(name):
            if name == "profile_exit":
                # Leaves the profile level; amdgpu restores the level before it (assumption: auto).
                return Verdict("auto\n")
            if r.allowed and name not in r.allowed:
                break
            return Verdict(f"{name}\n")
    return _refuse(errno_mod.EINVAL, "not a performance level")


def sclk_mask(s: str) -> list[int] | None:
    """``amdgpu_read_mask``: level indices split at spaces and newlines, an empty field ends the list.

    None where the driver returns ``-EINVAL`` (an index that is not a number or above 31).
    """
    levels: list[int] = []
    for part in re.split(r"[ \n]", s[:31]):
        if not part:
            break
        value = kstrtoul(part, base=0)
        if value is None or value > 31:
            return None
        levels.append(value)
    return levels


def _sclk(r: Rule, s: str, ctx: Context) -> Verdict:
    """amdgpu ``amdgpu_set_pp_dpm_clock``: the mask is parsed first (``amdgpu_read_mask``), then
    ``smu_force_ppclk_levels`` refuses it unless the level is ``manual`` ("force clock level is
    for dpm manual mode only", ``-EINVAL``) and the ASIC refuses an index past its table."""
    mask = sclk_mask(s)
    n = len(r.allowed) or 32
    if not mask:
        return _refuse(errno_mod.EINVAL, "no clock level")
    if ctx.perf_level is not None and ctx.perf_level != "manual":
        return _refuse(errno_mod.EINVAL, "force clock level is for dpm manual mode only")
    if any(i >= n for i in mask):
        return _refuse(errno_mod.EINVAL, "clock level specified is over max allowed")
    return Verdict(" ".join(str(i) for i in sorted(set(mask))))


def apply(kind: str, rule: Rule, data: bytes | str, ctx: Context | None = None) -> Verdict:
    """What the kernel does with one store of ``data`` to an attribute of ``kind``.

    The verdict's text is what the attribute reads back (for a command attribute, the command
    as normalised: render its read side with :func:`command_readback`).
    """
    ctx = ctx or Context()
    s = store_text(data)
    r = rule
    if kind == "rapl_limit":
        return _rapl_limit(r, s)
    if kind == "amdgpu_cap":
        return _amdgpu_cap(r, s)
    if kind == "intel_pl1":
        return _intel_pl1(r, s)
    if kind == "cpufreq_governor":
        return _governor(r, s)
    if kind == "epp":
        return _epp(r, s, ctx)
    if kind in ("cpufreq_max", "cpufreq_min"):
        return _cpufreq_limit(kind, r, s, ctx)
    if kind == "rapl_time_window":
        if r.locked:
            return _refuse(errno_mod.ENODATA, "limit locked by BIOS")
        us = kstrtoul(s)
        if us is None:
            return _refuse(errno_mod.EINVAL, "not a decimal integer")
        shown = _rapl_window(us)
        return Verdict(f"{shown}\n", note="clamped" if shown != us else "")
    if kind == "intel_pl1_interval":
        ms = kstrtoul(s, base=0)
        if ms is None:
            return _refuse(errno_mod.EINVAL, "not an integer")
        if r.max_ms is not None and ms > r.max_ms:
            return _refuse(errno_mod.EINVAL, "above the maximum window")
        return Verdict(f"{ms}\n")
    if kind == "amd_partition":
        word = s.strip().upper()
        if word not in {a.upper() for a in r.allowed}:
            return _refuse(errno_mod.EINVAL, "not an available partition")
        return Verdict(f"{word}\n")
    if kind == "no_turbo":
        value = sscanf_uint(s)
        if value is None:
            return _refuse(errno_mod.EINVAL, "not an integer")
        return Verdict("1\n" if value else "0\n")
    if kind == "boost":
        value = sscanf_uint(s)
        if value not in (0, 1):
            return _refuse(errno_mod.EINVAL, "only 0 or 1")
        return Verdict(f"{value}\n")
    if kind == "amd_perf_level":
        return _perf_level(r, s)
    if kind == "amd_sclk":
        return _sclk(r, s, ctx)
    if kind in ("intel_gt_min", "intel_gt_max"):
        return _intel_gt(kind, r, s, ctx)
    return Verdict(s)


def _intel_gt(kind: str, r: Rule, s: str, ctx: Context) -> Verdict:
    """i915 ``intel_rps_set_{min,max}_frequency`` and xe ``xe_guc_pc_set_{min,max}_freq``: a
    decimal MHz within RPn..RP0 that keeps min <= max, EINVAL otherwise."""
    mhz = kstrtoul(s, bits=32)
    if mhz is None:
        return _refuse(errno_mod.EINVAL, "not a decimal integer")
    if (r.rpn_mhz is not None and mhz < r.rpn_mhz) or (r.rp0_mhz is not None and mhz > r.rp0_mhz):
        return _refuse(errno_mod.EINVAL, "outside RPn..RP0")
    other = ctx.other_mhz
    if other is not None and (mhz > other if kind == "intel_gt_min" else mhz < other):
        return _refuse(errno_mod.EINVAL, "minimum above maximum")
    return Verdict(f"{mhz}\n")


# -- read side -----------------------------------------------------------------------------------


def read_only(mode: int) -> bool:
    """An attribute of this mode refuses writes (0444, and 0400 ``energy_uj``), root included."""
    return not mode & 0o222


def access_errno(mode: int) -> int:
    """The errno an open for writing of an attribute of ``mode`` fails with (0: allowed)."""
    return READ_ONLY_ERRNO if read_only(mode) else 0


def sclk_table(levels_mhz: Sequence[int], active: int) -> str:
    """``pp_dpm_sclk`` as amdgpu prints it: ``N: <MHz>Mhz`` with ``*`` on the current level."""
    return "".join(f"{i}: {mhz}Mhz{' *' if i == active else ''}\n" for i, mhz in enumerate(levels_mhz))


_SCLK_LINE = re.compile(r"^\s*(\d+):\s*(\d+)\s*[Mm]hz", re.MULTILINE)


def sclk_levels(text: str) -> tuple[int, ...]:
    """The level table (MHz) a ``pp_dpm_sclk`` read shows; ``()`` when the text is not a table."""
    return tuple(int(mhz) for _, mhz in _SCLK_LINE.findall(text))


def command_readback(kind: str, rule: Rule, command: str, active: int | None = None) -> str:
    """What a command attribute reads after ``command`` (a normalised :func:`apply` text) is in force.

    ``pp_dpm_sclk``: the level table with ``*`` on ``active`` (default: the highest level of the
    mask, the one the clock runs at under load). Any other kind reads back its value.
    """
    if kind == "amd_sclk":
        levels = [int(x) for x in rule.allowed]
        if not levels:
            return command
        mask = [int(x) for x in command.split() if x.isdigit()] or list(range(len(levels)))
        return sclk_table(levels, max(mask) if active is None else active)
    return command


# -- plain files: what a writer that did not truncate stored -------------------------------------


def overlay_stores(content: bytes, old: bytes) -> list[bytes]:
    """What one write may have stored, given the file's ``content`` now and the ``old`` content.

    A writer that opened the file without ``O_TRUNC`` (as sysfs allows) overwrote its first bytes
    only: the content is the store followed by the old content's tail. Returns the possible
    stores, longest first; a content shorter than the old one was truncated, so it is the store.
    """
    if len(content) < len(old) or not old:
        return [content]
    if len(content) > len(old):
        return [content]
    out = [content]
    for k in range(len(content) - 1, 0, -1):
        if content[k] != old[k]:
            break
        out.append(content[:k])
    return out


#: Attributes that take words: a refused content may be a shorter word over the old one's tail.
WORD_KINDS = frozenset({"cpufreq_governor", "epp", "amd_perf_level", "amd_partition", "amd_sclk"})
#: Numbers a tool writes without truncating (cpupower's ``sysfs_cpufreq_write_one_value``): a
#: clamped content may be a shorter number over the old one's tail. Other numbers are written by
#: truncating writers (shells, joulectl) or padded with NULs (powercap-set): taken whole.
OVERLAY_NUMBER_KINDS = frozenset({"cpufreq_max", "cpufreq_min"})


def resolve(kind: str, rule: Rule, content: bytes, old: bytes, ctx: Context | None = None) -> tuple[bytes, Verdict]:
    """The store a plain file's ``content`` most likely was, and the kernel's verdict on it.

    The whole content is the store unless the driver would not take it as it is: then a shorter
    :func:`overlay_stores` candidate the driver takes as stored wins, for a word when the whole
    content would be refused (``powersavece``), for a cpufreq limit when it would be clamped
    (``8000000`` left by ``800000`` over ``4000000``). Any other number is taken whole: a 500 W
    Flex 170 cap written with ``echo`` is clamped, never read as 50 W.
    """
    whole = apply(kind, rule, content, ctx)
    if whole.as_stored:
        return content, whole
    if kind in WORD_KINDS:
        pass
    elif kind not in OVERLAY_NUMBER_KINDS or whole.text is None:
        return content, whole
    for store in overlay_stores(content, old)[1:]:
        verdict = apply(kind, rule, store, ctx)
        if verdict.as_stored:
            return store, verdict
    return content, whole


# -- the manifest --------------------------------------------------------------------------------


def rule_from_manifest(raw: dict[str, object]) -> Rule:
    """A manifest rule (camelCase keys, µW/kHz, as the renderer writes them) as a :class:`Rule`."""

    def opt_int(key: str) -> int | None:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    clamp = raw.get("clampUw")
    allowed = raw.get("allowed") or ()
    default = raw.get("default")
    unit = opt_int("unitUw")
    return Rule(
        min_uw=opt_int("minUw"), max_uw=opt_int("maxUw"), limit_bits=opt_int("limitBits"),
        unit_uw=unit or 125_000, locked=bool(raw.get("locked", False)), pinned_uw=opt_int("pinnedUw"),
        clamp_uw=(int(clamp[0]), int(clamp[1])) if isinstance(clamp, list) and len(clamp) == 2 else None,
        allowed=tuple(str(a) for a in allowed) if isinstance(allowed, (list, tuple)) else (),
        secondary=bool(raw.get("secondary", False)), min_khz=opt_int("minKhz"), max_khz=opt_int("maxKhz"),
        default=(str(default) if str(default).endswith("\n") else f"{default}\n") if default is not None else None,
        base_khz=opt_int("baseKhz"), max_ms=opt_int("maxMs"), rpn_mhz=opt_int("rpnMhz"), rp0_mhz=opt_int("rp0Mhz"),
    )
