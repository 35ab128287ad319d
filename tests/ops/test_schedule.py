"""ops.schedule: eco windows, days, midnight crossings, time zones, validation messages."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from joulectl.errors import ExitCode, InputError
from joulectl.ops.cap import CapSetting
from joulectl.ops.schedule import describe_dict, load_schedule, parse_schedule, resolve

DOC = {
    "timezone": "Europe/Berlin",
    "windows": [
        {"name": "night", "days": ["mon-fri"], "start": "22:00", "end": "06:00", "cap": {"pct": 60},
         "governor": "efficient"},
        {"name": "weekend", "days": ["sat", "sun"], "start": "00:00", "end": "24:00", "cap": {"pct": 50}},
        {"name": "tokyo-lunch", "days": "daily", "start": "12:00", "end": "13:00", "timezone": "Asia/Tokyo",
         "cap": {"watts": 300}, "target": "all"},
    ],
    "default": {"cap": "restore"},
}


def window_at(at: str, doc: dict[str, object] | None = None) -> str | None:
    return resolve(parse_schedule(doc or DOC, "eco.yaml"), at).window


@pytest.mark.parametrize(
    ("at", "window"),
    [
        ("2026-01-05T22:00:00+01:00", "night"),  # Monday 22:00 Berlin: start is inclusive
        ("2026-01-05T21:59:59+01:00", "default"),
        ("2026-01-06T05:59:00+01:00", "night"),  # Tuesday early: Monday's window, across midnight
        ("2026-01-06T06:00:00+01:00", "default"),  # end is exclusive
        ("2026-01-05T05:00:00+01:00", "default"),  # Monday early belongs to Sunday: not in mon-fri
        ("2026-01-10T07:00:00+01:00", "weekend"),  # Saturday
        ("2026-01-09T23:00:00+01:00", "night"),  # Friday night
        ("2026-01-11T23:59:00+01:00", "weekend"),  # Sunday all day (00:00-24:00)
        ("2026-01-05T21:30:00Z", "night"),  # 22:30 in Berlin, given in UTC
        ("2026-07-06T20:30:00Z", "night"),  # summer: Berlin is UTC+2, 22:30 local
        ("2026-07-06T19:30:00Z", "default"),  # 21:30 local in summer
        ("2026-01-07T11:30:00+01:00", "default"),  # 19:30 in Tokyo
        ("2026-01-07T04:30:00+01:00", "night"),  # 12:30 in Tokyo, but Tuesday's night is listed first
        ("2026-01-07T07:30:00+01:00", "default"),
        ("2026-01-07T04:30:00+01:00", "night"),
    ],
)
def test_window_selection(at: str, window: str) -> None:
    assert window_at(at) == window


def test_window_in_its_own_time_zone() -> None:
    doc = dict(DOC, windows=[DOC["windows"][2]])  # type: ignore[index]
    assert window_at("2026-01-07T04:30:00+01:00", doc) == "tokyo-lunch"  # 12:30 in Tokyo
    assert window_at("2026-01-07T05:00:00+01:00", doc) == "default"  # 13:00 in Tokyo: end is exclusive


def test_saturday_morning_is_fridays_night() -> None:
    # the first window in force wins: Friday's 22:00-06:00 runs into Saturday
    assert window_at("2026-01-10T05:00:00+01:00") == "night"


def test_naive_at_is_read_in_the_schedule_zone() -> None:
    active = resolve(parse_schedule(DOC, "eco.yaml"), "2026-01-05T23:00:00")
    assert active.window == "night" and active.at.isoformat() == "2026-01-05T23:00:00+01:00"
    assert active.cap == CapSetting(pct=60) and active.gpu_governor == "efficient"


def test_window_zone_is_reported() -> None:
    doc = dict(DOC, windows=[DOC["windows"][2]])  # type: ignore[index]
    active = resolve(parse_schedule(doc, "eco.yaml"), "2026-01-07T03:30:00Z")
    assert active.to_dict() == {
        "file": "eco.yaml", "window": "tokyo-lunch", "at": "2026-01-07T12:30:00+09:00",
        "timezone": "Asia/Tokyo", "cap": {"watts": 300.0}, "target": "all",
    }
    assert describe_dict(active.to_dict()) == (
        "eco.yaml: window 'tokyo-lunch' in force at 2026-01-07T12:30:00+09:00 (Asia/Tokyo) (cap watts 300.0)")


def test_no_default_and_no_window() -> None:
    doc = dict(DOC)
    del doc["default"]
    active = resolve(parse_schedule(doc, "eco.yaml"), "2026-01-07T12:00:00+01:00")
    assert active.window is None and active.cap is None
    assert describe_dict(active.to_dict()) == (
        "eco.yaml: no window in force and no default: nothing to do at 2026-01-07T12:00:00+01:00 "
        "(Europe/Berlin)")


def test_now_is_used_without_at() -> None:
    active = resolve(parse_schedule({"default": {"cap": {"pct": 70}}}, "eco.yaml"))
    assert active.window == "default"
    assert abs((active.at - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 300


@pytest.mark.parametrize(
    ("days", "expect"),
    [
        (["fri-mon"], {4, 5, 6, 0}),
        (["weekdays"], {0, 1, 2, 3, 4}),
        ("sat,sunday", {5, 6}),
        (["Monday", "wed"], {0, 2}),
        (None, set(range(7))),
    ],
)
def test_days(days: object, expect: set[int]) -> None:
    w = {"name": "w", "start": "01:00", "end": "02:00", "cap": {"pct": 50}}
    if days is not None:
        w["days"] = days  # type: ignore[assignment]
    sched = parse_schedule({"timezone": "UTC", "windows": [w]}, "f.yaml")
    assert set(sched.windows[0].days) == expect


def test_yaml_sexagesimal_times_and_file_loading(tmp_path: Path) -> None:
    p = tmp_path / "eco.yaml"
    p.write_text("timezone: UTC\nwindows:\n- {name: n, start: 22:00, end: 06:00, cap: {pct: 60}}\n")
    sched = load_schedule(str(p))
    assert (sched.windows[0].start_min, sched.windows[0].end_min) == (22 * 60, 6 * 60)
    assert resolve(sched, "2026-01-05T23:00:00Z").window == "n"


def _win(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"name": "w", "days": ["mon"], "start": "01:00", "end": "02:00", "cap": {"pct": 50}}
    base.update(kw)
    return {"timezone": "UTC", "windows": [base]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"timezone": "Mars/Base", "default": {"cap": {"pct": 5}}}, "timezone: unknown time zone 'Mars/Base'"),
        (_win(days=["funday"]), "windows[0].days[0]: unknown day 'funday' (use mon..sun, a range such as "
         "mon-fri, weekdays, weekend or daily)"),
        (_win(start="25:00"), 'windows[0].start: must be a time "HH:MM" (00:00 to 24:00), got \'25:00\''),
        (_win(end="24:30"), 'windows[0].end: must be a time "HH:MM" (00:00 to 24:00), got \'24:30\''),
        (_win(cap={"pct": 0}), "windows[0].cap.pct: must be in (0, 100], got 0"),
        (_win(cap={"watts": 0}), "windows[0].cap.watts: must be at least 1 W, got 0"),
        (_win(cap={"pct": 50, "watts": 100}), "windows[0].cap: give exactly one of pct, watts, restore "
         "(got pct, watts)"),
        (_win(cap={"percent": 50}), "windows[0].cap.percent: unknown key 'percent' (expected pct, watts or "
         "restore)"),
        (_win(cap={"restore": "yes"}), "windows[0].cap.restore: must be true, got 'yes'"),
        (_win(cap=None), "windows[0]: sets nothing: give a cap, a governor or both"),
        (_win(governor="turbo"), "windows[0].governor: unknown preset 'turbo' (GPU: auto, sustained, "
         "efficient, low, peak; CPU: performance, balanced, efficiency)"),
        (_win(governor={"gpu": "balanced"}), "windows[0].governor.gpu: unknown GPU preset 'balanced' (one of "
         "auto, sustained, efficient, low, peak)"),
        (_win(target="tpu"), "windows[0].target: must be one of gpu, cpu, all, got 'tpu'"),
        (_win(timezone="Nowhere"), "windows[0].timezone: unknown time zone 'Nowhere'"),
        # a name longer than the file system's NAME_MAX: zoneinfo's open fails with ENAMETOOLONG
        ({"timezone": "a" * 300, "default": {"cap": {"pct": 5}}}, f"timezone: unknown time zone {'a' * 300!r}"),
        (_win(strat="01:00"), "windows[0].strat: unknown key (expected one of cap, days, end, governor, name, "
         "start, target, timezone)"),
        ({"windows": [{"name": "w", "end": "02:00", "cap": {"pct": 5}}]},
         'windows[0].start: missing (a time "HH:MM")'),
        ({"timezone": "UTC", "windows": "night"}, "windows: must be a list of windows"),
        ({"timezone": "UTC"}, "windows: no windows and no default: the schedule sets nothing"),
        ({"timezone": "UTC", "windows": [_win()["windows"][0], _win()["windows"][0]]},  # type: ignore[index]
         "windows[1].name: duplicate window name 'w'"),
        ({"default": {"cap": {"pct": 5}, "days": ["mon"]}}, "default.days: unknown key (expected one of cap, "
         "governor, target)"),
        (["a"], "expected a mapping with windows and default, found list"),
    ],
)
def test_validation_names_file_path_and_problem(doc: object, message: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_schedule(doc, "eco.yaml")
    assert str(exc.value) == f"eco.yaml: {message}"
    assert exc.value.exit_code == ExitCode.USAGE


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_schedule(str(tmp_path / "none.yaml"))
    assert str(exc.value) == f"{tmp_path / 'none.yaml'}: schedule file not found"
    bad = tmp_path / "bad.yaml"
    bad.write_text("windows: [\n")
    with pytest.raises(InputError) as exc2:
        load_schedule(str(bad))
    assert str(exc2.value).startswith(f"{bad}: invalid YAML: line ")


def test_example_schedule_is_valid() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "eco-schedule.yaml"
    sched = load_schedule(str(path))
    assert [w.name for w in sched.windows] == ["weeknight", "weekend", "grid-peak"]
    assert resolve(sched, "2026-03-03T23:00:00+01:00").window == "weeknight"
    assert resolve(sched, "2026-03-03T17:30:00+01:00").window == "grid-peak"
    office = resolve(sched, "2026-03-03T10:00:00+01:00")
    assert office.window == "default" and office.cap == CapSetting(restore=True) and office.target == "all"
