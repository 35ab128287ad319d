"""Issue 12, item 7: one bad attribute never stops every device. Absurd sysfs numbers (400 digits,
2^62 µW, negative maxima, ``560_000_000``, other scripts' digits) are unknown with a reason, for
that device only; through the real CLI on rendered nodes, and the one parser itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cron_support import hwmon, jl, node_copy, read_w, rendered, rows
from reliability_support import assert_clean_exit

from joulectl.host import Host
from joulectl.units import MAX_POWER_UW, parse_sysfs_int

MI250X_PRIMARY = "0000:c1:00.0"
FLEX = "0000:4d:00.0"
DIGITS_400 = "9" * 400


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory.mktemp("cron-values"))


@pytest.mark.parametrize(("text", "reason"), [
    (DIGITS_400, "absurdly large: 400 digits"),
    (str(1 << 62), "absurdly large: 4611686018427387904"),
    ("-560000000", "negative: -560000000"),
    ("560_000_000", "not a number: '560_000_000'"),
    ("\u0665\u0666\u0660000000", "not a number"),  # Arabic-Indic digits: int() would take them
    ("\uff15\uff16\uff10000000", "not a number"),  # full-width digits
])
def test_an_absurd_amd_maximum_is_unknown_for_that_die_only(cluster: Path, tmp_path: Path, text: str,
                                                            reason: str) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    hwmon(node, MI250X_PRIMARY, "power1_cap_max").write_text(text + "\n")
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr
    dev = next(g for g in json.loads(d.stdout)["status"]["gpu"]["devices"] if g["busId"] == MI250X_PRIMARY)
    assert dev["control"]["available"] is False
    assert reason in dev["control"]["reason"]
    r = jl(node, "cap", "--pct", "60", "-o", "json")
    assert_clean_exit(r.returncode, r.stderr, {5})
    by_dev = {x["device"]: x for x in rows(r)}
    assert by_dev[MI250X_PRIMARY]["status"] == "blocked"
    assert {by_dev[b]["status"] for b in ("0000:c9:00.0", "0000:d1:00.0", "0000:d9:00.0")} == {"applied"}
    assert read_w(hwmon(node, MI250X_PRIMARY, "power1_cap")) == 560  # never a 2.7 TW cap


@pytest.mark.parametrize("attr", ["power1_cap", "power1_cap_min", "power1_average"])
def test_a_400_digit_amd_attribute_never_stops_the_others(cluster: Path, tmp_path: Path, attr: str) -> None:
    node = node_copy(cluster, "mi250x-0", tmp_path)
    hwmon(node, MI250X_PRIMARY, attr).write_text(DIGITS_400 + "\n")
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr  # was exit 1: OverflowError in units.uw_to_w
    assert len(json.loads(d.stdout)["status"]["gpu"]["devices"]) == 8
    r = jl(node, "cap", "--watts", "400", "-o", "json")
    assert_clean_exit(r.returncode, r.stderr, {0, 5})
    assert {x["status"] for x in rows(r) if x["device"] == "0000:c9:00.0"} == {"applied"}


def test_a_400_digit_intel_rated_max_is_unknown(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "flex-0", tmp_path)
    rated = next((node / "sys/bus/pci/devices" / FLEX / "hwmon").iterdir()) / "power1_rated_max"
    rated.write_text(DIGITS_400 + "\n")
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr
    r = jl(node, "cap", "--pct", "60", "-o", "json")
    assert_clean_exit(r.returncode, r.stderr, {5})
    by_dev = {x["device"]: x for x in rows(r)}
    assert by_dev[FLEX]["status"] == "blocked"
    assert sum(1 for x in rows(r) if x["status"] == "applied") == 3


@pytest.mark.parametrize("attr", ["constraint_0_max_power_uw", "constraint_0_power_limit_uw", "energy_uj"])
def test_a_400_digit_rapl_attribute_is_unknown(cluster: Path, tmp_path: Path, attr: str) -> None:
    node = node_copy(cluster, "xeon-0", tmp_path)
    (node / "sys/class/powercap/intel-rapl:0" / attr).write_text(DIGITS_400 + "\n")
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr
    r = jl(node, "cap", "--cpu", "--watts", "200", "-o", "json")
    assert_clean_exit(r.returncode, r.stderr, {0, 5})
    assert {x["status"] for x in rows(r) if x["device"] == "intel-rapl:1"} == {"applied"}


def test_a_400_digit_cpufreq_attribute_is_unknown(cluster: Path, tmp_path: Path) -> None:
    node = node_copy(cluster, "xeon-0", tmp_path)
    policy = node / "sys/devices/system/cpu/cpufreq/policy0"
    for name in ("scaling_max_freq", "cpuinfo_max_freq", "base_frequency"):
        if (policy / name).exists():
            (policy / name).write_text(DIGITS_400 + "\n")
    d = jl(node, "discover", "-o", "json")
    assert d.returncode == 0, d.stderr
    g = jl(node, "governor", "show", "--cpu")
    assert_clean_exit(g.returncode, g.stderr, {0})


@pytest.mark.parametrize(("text", "kwargs", "value"), [
    ("560000000", {}, 560000000),
    ("560000000 extra", {}, 560000000),
    ("  42\n", {}, 42),
    ("0x10de", {"base": 16}, 0x10DE),
    ("10DE", {"base": 16}, 0x10DE),
    (str(MAX_POWER_UW), {"limit": MAX_POWER_UW}, MAX_POWER_UW),
    (str((1 << 64) - 1), {}, (1 << 64) - 1),
])
def test_parse_sysfs_int_takes_plain_numbers(text: str, kwargs: dict[str, int], value: int) -> None:
    assert parse_sysfs_int(text, **kwargs) == value


@pytest.mark.parametrize(("text", "kwargs", "reason"), [
    ("", {}, "not a number: ''"),
    ("+5", {}, "not a number: '+5'"),
    ("5.0", {}, "not a number: '5.0'"),
    ("1_000", {}, "not a number: '1_000'"),
    ("-1", {}, "negative: -1"),
    ("\u0661\u0662", {}, "not a number"),
    (str(1 << 64), {}, "absurdly large: 18446744073709551616"),
    (str(MAX_POWER_UW + 1), {"limit": MAX_POWER_UW}, "absurdly large: 100000000001"),
    ("0x", {"base": 16}, "not a number: '0x'"),
    ("9" * 10_000, {}, "absurdly large: 10000 digits"),
])
def test_parse_sysfs_int_refuses_the_rest_with_a_reason(text: str, kwargs: dict[str, int], reason: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        parse_sysfs_int(text, **kwargs)
    assert reason in str(e.value)


def test_host_read_uint_says_why(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("-560000000\n")
    (tmp_path / "b").write_text(str(1 << 62) + "\n")
    host = Host(str(tmp_path))
    assert host.read_uint("/a") == (None, "negative: -560000000")
    assert host.read_uw("/b") == (None, "absurdly large: 4611686018427387904")
    assert host.read_int("/b") == 1 << 62  # a u64, as an energy counter may be
    assert host.read_uint("/missing") == (None, "ENOENT")
