"""Eco schedules for ``joulectl cap --schedule FILE``: which cap (and governor) is in force now.

A schedule file (YAML or JSON)::

    timezone: Europe/Berlin          # optional; default the local time zone (TZ)
    windows:
      - name: night
        days: [mon-fri]              # mon..sun, ranges (fri-mon wraps), weekdays, weekend, daily
        start: "22:00"
        end: "06:00"                 # before start: the window crosses midnight
        timezone: UTC                # optional, per window
        cap: {pct: 60}               # or {watts: 300}, {restore: true}, or the string restore
        governor: efficient          # optional: a GPU or CPU preset, or {gpu: ..., cpu: ...}
        target: gpu                  # optional: gpu | cpu | all (default gpu)
    default:
      cap: {restore: true}

The first window in force wins; the ``default`` applies when none is; without a default nothing
is done. A window that crosses midnight belongs to the day it starts on (``fri 22:00-06:00``
holds until Saturday 06:00). ``start == end`` is the whole day. Validation errors name the file,
the YAML path and the problem.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from joulectl.errors import InputError
from joulectl.models import CPU_PRESETS, GPU_PRESETS
from joulectl.ops.capsetting import TARGETS, CapSetting, check_pct, check_watts

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL = {d: i for i, d in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                                     "sunday"))}
_GROUPS = {
    "weekdays": range(0, 5),
    "weekday": range(0, 5),
    "weekend": range(5, 7),
    "weekends": range(5, 7),
    "daily": range(0, 7),
    "all": range(0, 7),
    "*": range(0, 7),
}
_TIME = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")
_WINDOW_KEYS = {"name", "days", "start", "end", "timezone", "cap", "governor", "target"}
_DEFAULT_KEYS = {"cap", "governor", "target"}
_TOP_KEYS = {"timezone", "windows", "default", "apiVersion", "kind"}


@dataclass(frozen=True)
class Rule:
    """What a window (or the default) sets."""

    cap: CapSetting | None
    gpu_governor: str | None
    cpu_governor: str | None
    target: str | None


@dataclass(frozen=True)
class Window:
    name: str
    days: frozenset[int]  # 0 = Monday
    start_min: int
    end_min: int
    tz: dt.tzinfo
    tz_name: str
    rule: Rule

    def contains(self, at: dt.datetime) -> bool:
        """Whether the instant ``at`` (aware) falls in this window, in the window's time zone."""
        local = at.astimezone(self.tz)
        minute = local.hour * 60 + local.minute
        day = local.weekday()
        if self.start_min == self.end_min:  # the whole day
            return day in self.days
        if self.start_min < self.end_min:
            return day in self.days and self.start_min <= minute < self.end_min
        # crosses midnight: the part after start belongs to today, the part before end to yesterday
        return (day in self.days and minute >= self.start_min) or (
            (day - 1) % 7 in self.days and minute < self.end_min
        )


@dataclass(frozen=True)
class Schedule:
    file: str
    tz: dt.tzinfo
    tz_name: str
    windows: tuple[Window, ...]
    default: Rule | None


@dataclass(frozen=True)
class Active:
    """The rule in force at one instant, and which window gave it (``None``: none applies)."""

    file: str
    window: str | None
    at: dt.datetime
    tz_name: str
    rule: Rule | None

    @property
    def cap(self) -> CapSetting | None:
        return self.rule.cap if self.rule else None

    @property
    def gpu_governor(self) -> str | None:
        return self.rule.gpu_governor if self.rule else None

    @property
    def cpu_governor(self) -> str | None:
        return self.rule.cpu_governor if self.rule else None

    @property
    def target(self) -> str | None:
        return self.rule.target if self.rule else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "window": self.window,
            "at": self.at.isoformat(timespec="seconds"),
            "timezone": self.tz_name,
        }
        if self.rule is not None:
            if self.rule.cap is not None:
                out["cap"] = self.rule.cap.to_dict()
            if self.rule.gpu_governor or self.rule.cpu_governor:
                out["governor"] = {k: v for k, v in (("gpu", self.rule.gpu_governor),
                                                     ("cpu", self.rule.cpu_governor)) if v}
            if self.rule.target:
                out["target"] = self.rule.target
        return out

    def describe(self) -> str:
        what = "no window in force and no default: nothing to do" if self.window is None else (
            f"window {self.window!r} in force"
        )
        return f"{what} at {self.at.isoformat(timespec='seconds')} ({self.tz_name})"


# -- parsing ----------------------------------------------------------------------------------


def _zone(name: Any, file: str, where: str) -> tuple[dt.tzinfo, str]:
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"must be a time zone name such as Europe/Berlin, got {name!r}", file=file, field=where)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name.strip()), name.strip()
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name the file system refuses (too long)
        raise InputError(f"unknown time zone {name!r}", file=file, field=where) from None


def local_zone() -> tuple[dt.tzinfo, str]:
    """The process's local time zone (``TZ``, else the system's)."""
    import os

    tz_env = os.environ.get("TZ", "").lstrip(":")
    if tz_env:
        try:
            from zoneinfo import ZoneInfo

            return ZoneInfo(tz_env), tz_env
        except Exception:  # an odd TZ value (POSIX rule string): fall back to the offset
            pass
    now = dt.datetime.now().astimezone()
    tz = now.tzinfo or dt.timezone.utc
    return tz, now.tzname() or "local"


def _day(token: str, file: str, where: str) -> int:
    t = token.strip().lower()
    if t[:3] in DAY_NAMES and (t in DAY_NAMES or t in _FULL):
        return DAY_NAMES.index(t[:3])
    raise InputError(f"unknown day {token!r} (use mon..sun, a range such as mon-fri, weekdays, weekend "
                     "or daily)", file=file, field=where)


def _days(value: Any, file: str, where: str) -> frozenset[int]:
    if value is None:
        return frozenset(range(7))
    items: list[Any]
    if isinstance(value, str):
        items = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list):
        items = value
    else:
        raise InputError(f"must be a list of days such as [mon-fri], got {value!r}", file=file, field=where)
    if not items:
        raise InputError("must name at least one day", file=file, field=where)
    days: set[int] = set()
    for i, item in enumerate(items):
        w = f"{where}[{i}]" if isinstance(value, list) else where
        if not isinstance(item, str):
            raise InputError(f"must be a day name, got {item!r}", file=file, field=w)
        t = item.strip().lower()
        if t in _GROUPS:
            days.update(_GROUPS[t])
        elif "-" in t:
            a, b = (_day(x, file, w) for x in t.split("-", 1))
            d = a
            days.add(d)
            while d != b:
                d = (d + 1) % 7
                days.add(d)
        else:
            days.add(_day(t, file, w))
    return frozenset(days)


def _time(value: Any, file: str, where: str) -> int:
    # YAML 1.1 reads an unquoted 22:00 as the sexagesimal integer 1320 (minutes)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 24 * 60:
        return value
    text = value if isinstance(value, str) else None
    m = _TIME.match(text.strip()) if text else None
    if m is None or (int(m.group(1)) == 24 and m.group(2) != "00"):
        raise InputError(f'must be a time "HH:MM" (00:00 to 24:00), got {value!r}', file=file, field=where)
    return int(m.group(1)) * 60 + int(m.group(2))


def _cap(value: Any, file: str, where: str) -> CapSetting:
    if value == "restore":
        return CapSetting(restore=True)
    if not isinstance(value, dict):
        raise InputError(f"must be {{pct: P}}, {{watts: W}} or {{restore: true}}, got {value!r}",
                         file=file, field=where)
    unknown = sorted(set(value) - {"pct", "watts", "restore"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} (expected pct, watts or restore)", file=file,
                         field=f"{where}.{unknown[0]}")
    given = [k for k in ("pct", "watts", "restore") if k in value]
    if len(given) != 1:
        raise InputError(f"give exactly one of pct, watts, restore (got {', '.join(given) or 'none'})",
                         file=file, field=where)
    key = given[0]
    if key == "restore":
        if value["restore"] is not True:
            raise InputError(f"must be true, got {value['restore']!r}", file=file, field=f"{where}.restore")
        return CapSetting(restore=True)
    if key == "pct":
        return CapSetting(pct=check_pct(value["pct"], f"{where}.pct", file))
    return CapSetting(watts=check_watts(value["watts"], f"{where}.watts", file))


def _governor(value: Any, file: str, where: str) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        if value in GPU_PRESETS:
            return value, None
        if value in CPU_PRESETS:
            return None, value
        raise InputError(
            f"unknown preset {value!r} (GPU: {', '.join(GPU_PRESETS)}; CPU: {', '.join(CPU_PRESETS)})",
            file=file, field=where,
        )
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"gpu", "cpu"})
        if unknown:
            raise InputError(f"unknown key {unknown[0]!r} (expected gpu or cpu)", file=file,
                             field=f"{where}.{unknown[0]}")
        g, c = value.get("gpu"), value.get("cpu")
        if g is not None and g not in GPU_PRESETS:
            raise InputError(f"unknown GPU preset {g!r} (one of {', '.join(GPU_PRESETS)})", file=file,
                             field=f"{where}.gpu")
        if c is not None and c not in CPU_PRESETS:
            raise InputError(f"unknown CPU preset {c!r} (one of {', '.join(CPU_PRESETS)})", file=file,
                             field=f"{where}.cpu")
        return g, c
    raise InputError(f"must be a preset name or {{gpu: ..., cpu: ...}}, got {value!r}", file=file, field=where)


def _rule(data: dict[str, Any], file: str, where: str) -> Rule:
    cap = _cap(data["cap"], file, f"{where}.cap") if data.get("cap") is not None else None
    g, c = _governor(data.get("governor"), file, f"{where}.governor")
    target = data.get("target")
    if target is not None and target not in TARGETS:
        raise InputError(f"must be one of {', '.join(TARGETS)}, got {target!r}", file=file, field=f"{where}.target")
    if cap is None and g is None and c is None:
        raise InputError("sets nothing: give a cap, a governor or both", file=file, field=where)
    return Rule(cap=cap, gpu_governor=g, cpu_governor=c, target=target)


def _check_keys(data: dict[str, Any], allowed: set[str], file: str, where: str) -> None:
    for key in data:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            raise InputError(f"unknown key (expected one of {', '.join(sorted(allowed))})", file=file,
                             field=f"{prefix}{key}")


def parse_schedule(doc: Any, file: str) -> Schedule:
    """Validate a schedule document; every error names ``file``, the YAML path and the problem."""
    if not isinstance(doc, dict):
        raise InputError(f"expected a mapping with windows and default, found {type(doc).__name__}", file=file)
    _check_keys(doc, _TOP_KEYS, file, "")
    if "timezone" in doc:
        tz, tz_name = _zone(doc["timezone"], file, "timezone")
    else:
        tz, tz_name = local_zone()
    raw_windows = doc.get("windows", [])
    if raw_windows is None:
        raw_windows = []
    if not isinstance(raw_windows, list):
        raise InputError("must be a list of windows", file=file, field="windows")
    windows: list[Window] = []
    names: set[str] = set()
    for i, w in enumerate(raw_windows):
        where = f"windows[{i}]"
        if not isinstance(w, dict):
            raise InputError(f"must be a mapping, got {w!r}", file=file, field=where)
        _check_keys(w, _WINDOW_KEYS, file, where)
        name = w.get("name", f"window-{i}")
        if not isinstance(name, str) or not name:
            raise InputError("must be a non-empty string", file=file, field=f"{where}.name")
        if name in names:
            raise InputError(f"duplicate window name {name!r}", file=file, field=f"{where}.name")
        names.add(name)
        for key in ("start", "end"):
            if key not in w:
                raise InputError('missing (a time "HH:MM")', file=file, field=f"{where}.{key}")
        start = _time(w["start"], file, f"{where}.start")
        end = _time(w["end"], file, f"{where}.end")
        wtz, wtz_name = _zone(w["timezone"], file, f"{where}.timezone") if "timezone" in w else (tz, tz_name)
        windows.append(Window(
            name=name, days=_days(w.get("days"), file, f"{where}.days"), start_min=start % (24 * 60),
            end_min=end % (24 * 60), tz=wtz, tz_name=wtz_name, rule=_rule(w, file, where),
        ))
    default = None
    if doc.get("default") is not None:
        d = doc["default"]
        if not isinstance(d, dict):
            raise InputError(f"must be a mapping with cap and/or governor, got {d!r}", file=file, field="default")
        _check_keys(d, _DEFAULT_KEYS, file, "default")
        default = _rule(d, file, "default")
    if not windows and default is None:
        raise InputError("no windows and no default: the schedule sets nothing", file=file, field="windows")
    return Schedule(file=file, tz=tz, tz_name=tz_name, windows=tuple(windows), default=default)


def load_schedule(path: str) -> Schedule:
    """Read and validate a schedule file (``-`` = stdin)."""
    from joulectl.yamlio import load_one

    label = "<stdin>" if path == "-" else path
    return parse_schedule(load_one(path, what="schedule file"), label)


def parse_at(text: str) -> dt.datetime:
    """An ``--at`` value: ISO 8601, with or without an offset (``Z`` accepted)."""
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        return dt.datetime.fromisoformat(t)
    except ValueError:
        raise InputError(f"not an ISO 8601 time such as 2026-01-05T23:30:00+01:00: {text!r}",
                         field="--at") from None


def resolve(schedule: Schedule, at: str | dt.datetime | None = None) -> Active:
    """The rule in force at ``at`` (now when None). A naive ``at`` is read in the schedule's zone."""
    if at is None:
        when = dt.datetime.now(dt.timezone.utc)
    else:
        when = parse_at(at) if isinstance(at, str) else at
    if when.tzinfo is None:
        when = when.replace(tzinfo=schedule.tz)
    for w in schedule.windows:
        if w.contains(when):
            return Active(schedule.file, w.name, when.astimezone(w.tz), w.tz_name, w.rule)
    local = when.astimezone(schedule.tz)
    if schedule.default is not None:
        return Active(schedule.file, "default", local, schedule.tz_name, schedule.default)
    return Active(schedule.file, None, local, schedule.tz_name, None)


def describe_dict(d: dict[str, Any]) -> str:
    """The stderr line for a run's ``schedule`` block (see :meth:`Active.to_dict`)."""
    window = d.get("window")
    what = "no window in force and no default: nothing to do" if window is None else f"window {window!r} in force"
    setting = ""
    if "cap" in d:
        cap = d["cap"]
        setting = " (cap " + ", ".join(f"{k} {v}" if k != "restore" else "restore" for k, v in cap.items()) + ")"
    return f"{d.get('file')}: {what} at {d.get('at')} ({d.get('timezone')}){setting}"
