"""AMD backend: amdgpu hwmon discovery (MI300X, MI250X dies, APU, W7900) and power1_cap writes."""

from __future__ import annotations

import errno
from pathlib import Path
from types import ModuleType

import pytest
from hostdoubles import FaultyHost

from joulectl.backends import amd
from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops.discover import inventory


class TruncatingHost(Host):
    """amdgpu keeps whole watts (``value / 1000000``): a sub-watt request reads back truncated.
    A plain file stores what it is given, so the truncation is made here, at write time."""

    def write(self, host_path: str, value: str) -> None:
        if host_path.endswith("/power1_cap"):
            value = str(int(value) // 1_000_000 * 1_000_000)
        super().write(host_path, value)


def test_mi300x_x8(root: Path, trees: ModuleType) -> None:
    trees.amd_mi300x_x8(root)
    host = Host(str(root))
    assert amd.is_available(host)
    gpus = amd.discover(host)
    assert [g.bus_id for g in gpus] == trees.MI300X_BUSES
    g = gpus[0]
    assert (g.vendor, g.driver, g.raw_model) == ("amd", "amdgpu", "AMD Instinct MI300X OAM")
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (350, 750, 750)
    assert (g.current_cap_w, g.power_w, g.holds_limit, g.partition) == (750, 140, True, "SPX")
    assert g.uuid == "0x3f2a4b5c6d7e8f00"
    assert g.hwmon == "/sys/bus/pci/devices/0000:05:00.0/hwmon/hwmon3"
    assert gpus[7].hwmon == "/sys/bus/pci/devices/0000:e5:00.0/hwmon/hwmon17"
    assert g.cap_file == g.hwmon + "/power1_cap"
    assert (g.perf_level, g.sclk_levels_mhz, g.clocks) == ("auto", [500, 1300, 2100], {"graphics_mhz": 1300,
                                                                                     "memory_mhz": 1300})
    assert all(d.control.available for d in gpus)
    inv = inventory(host)
    assert host.tool_calls == []  # no vendor tool is run for AMD
    assert (inv.gpu_count, inv.power_domains) == (8, 8)
    assert [d.index for d in inv.gpus] == list(range(8))
    assert inv.gpus[0].catalog_key == "AMD_INSTINCT_MI300X"
    assert inv.gpus[0].architecture == "cdna3"
    assert inv.governor_presets == ("auto", "sustained", "efficient", "low", "peak")


def test_default_is_power1_cap_default_not_the_maximum(root: Path, trees: ModuleType) -> None:
    # issue 13: power1_cap_default is the stock limit (RX 9070: cap 200 W, default 220 W, max 220 W+)
    trees.amd_2s_host(root)
    trees.amdgpu(root, "0000:05:00.0", device=0x7550, cap_uw=200_000_000, cap_default_uw=220_000_000,
                 cap_max_uw=242_000_000)
    (g,) = amd.discover(Host(str(root)))
    assert (g.current_cap_w, g.cap_range.default_w, g.cap_range.max_w) == (200, 220, 242)
    assert g.warnings == []


def test_four_mi250x_count_8_domains_4(root: Path, trees: ModuleType) -> None:
    trees.amd_mi250x_x4(root)
    inv = inventory(Host(str(root)))
    assert (inv.gpu_count, inv.power_domains) == (8, 4)
    secondaries = [g for g in inv.gpus if not g.holds_limit]
    assert [(g.bus_id, g.primary_bus_id) for g in secondaries] == [
        ("0000:c6:00.0", "0000:c1:00.0"), ("0000:ce:00.0", "0000:c9:00.0"),
        ("0000:d6:00.0", "0000:d1:00.0"), ("0000:de:00.0", "0000:d9:00.0"),
    ]
    s = secondaries[0]
    assert s.current_cap_w is None  # the secondary's 0 is not a real value
    # still reported, never written; power1_cap_min 0 is an unknown minimum (issue 13)
    assert (s.cap_range.min_w, s.cap_range.max_w) == (None, 560)
    assert s.control.available is False and s.control.reason == "limited through primary 0000:c1:00.0"
    assert inv.gpus[0].current_cap_w == 500 and inv.gpus[0].catalog_key == "AMD_INSTINCT_MI250X"


def test_secondary_without_primary_says_so(root: Path, trees: ModuleType) -> None:
    trees.amd_2s_host(root)
    trees.amdgpu(root, "0000:c6:00.0", device=0x740C, cap_uw=0, cap_max_uw=560_000_000)
    (g,) = amd.discover(Host(str(root)))
    assert g.primary_bus_id is None and not g.holds_limit
    # not settable (kills backends/amd.py:200 `Control(False, ...)` -> `True`: the reason alone passed)
    assert (g.control.available, g.control.reason) == (
        False, "secondary die (power1_cap reads 0) and no primary die found")


def test_a_secondary_is_never_paired_with_a_board_of_another_device_id(root: Path, trees: ModuleType) -> None:
    # the primary rule counts only dies with the secondary's PCI device id (module docstring,
    # docs/hardware.md §1.3): a W7900 (0x7448) on an earlier bus is no primary of an MI250X die
    # (0x740C) whose primary is missing (kills backends/amd.py:195 `d == dev_id and g.holds_limit`
    # -> `or`)
    trees.amd_2s_host(root)
    trees.amdgpu(root, "0000:03:00.0", device=0x7448, cap_uw=241_000_000, cap_max_uw=241_000_000)
    trees.amdgpu(root, "0000:c6:00.0", device=0x740C, cap_uw=0, cap_max_uw=560_000_000)
    w7900, die = amd.discover(Host(str(root)))
    assert (w7900.bus_id, w7900.holds_limit, w7900.primary_bus_id) == ("0000:03:00.0", True, None)
    assert (die.bus_id, die.holds_limit, die.primary_bus_id) == ("0000:c6:00.0", False, None)
    assert die.control.reason == "secondary die (power1_cap reads 0) and no primary die found"


@pytest.mark.parametrize(("device", "name"), [
    # the board's product_name (FRU) empty: named by its PCI device id (the pci.ids names of
    # vendor 1002, and AMD's Instinct product names); an id not in the table by the id itself
    (0x74A1, "AMD Instinct MI300X"), (0x74A5, "AMD Instinct MI325X"), (0x74A0, "AMD Instinct MI300A"),
    (0x740C, "AMD Instinct MI250X/MI250"), (0x740F, "AMD Instinct MI210"), (0x7448, "AMD Radeon PRO W7900"),
    (0x73FF, "AMD Radeon RX 6600/6600 XT/6600M"), (0x687F, "AMD Radeon RX Vega 56/64"),
    (0x7480, "AMD Radeon RX 7600/7600S/7700S"), (0x7550, "AMD Radeon RX 9070/9070 XT"),
    (0x1234, "AMD GPU 0x1234"),
])
def test_a_board_without_a_product_name_is_named_by_its_device_id(root: Path, trees: ModuleType, device: int,
                                                                  name: str) -> None:
    # (kills the device-id mutants of backends/amd.py's DEVICE_NAMES, e.g. :56 0x7480 -> 0x7481)
    trees.amd_2s_host(root)
    trees.amdgpu(root, "0000:03:00.0", device=device, cap_uw=200_000_000, cap_max_uw=250_000_000, product="")
    (g,) = amd.discover(Host(str(root)))
    assert g.raw_model == name


def test_a_primary_already_paired_is_never_paired_again(root: Path, trees: ModuleType) -> None:
    # two secondary dies (cap 0) before one primary, one device id: the first secondary takes the
    # following primary (none precedes it), the second finds none left (module docstring's rule;
    # kills backends/amd.py:197 `i > pos and not paired` -> `or`)
    trees.amd_2s_host(root)
    for bdf, cap in (("0000:c1:00.0", 0), ("0000:c6:00.0", 0), ("0000:c9:00.0", 500_000_000)):
        trees.amdgpu(root, bdf, device=0x740C, cap_uw=cap, cap_max_uw=560_000_000)
    first, second, primary = amd.discover(Host(str(root)))
    assert [(g.bus_id, g.primary_bus_id) for g in (first, second, primary)] == [
        ("0000:c1:00.0", "0000:c9:00.0"), ("0000:c6:00.0", None), ("0000:c9:00.0", None)]
    assert second.control.reason == "secondary die (power1_cap reads 0) and no primary die found"


def test_apu_igpu_not_counted_beside_w7900(root: Path, trees: ModuleType) -> None:
    trees.amd_apu_and_w7900(root)
    inv = inventory(Host(str(root)))
    assert [g.bus_id for g in inv.gpus] == ["0000:03:00.0"]
    g = inv.gpus[0]
    assert (g.raw_model, g.catalog_key) == ("AMD Radeon PRO W7900", "AMD_RADEON_PRO_W7900")  # by PCI id
    assert (g.current_cap_w, g.cap_range.max_w, g.power_w) == (241, 241, 35)
    assert g.sclk_levels_mhz == [500, 1800, 2495] and g.clocks["graphics_mhz"] == 500


def test_empty_reads_are_unknown_and_hwmon_found_by_name(root: Path, trees: ModuleType) -> None:
    trees.amd_2s_host(root)
    base = trees.amdgpu(root, "0000:05:00.0", device=0x74A1, hwmon_n=7, cap_uw="", cap_max_uw="",
                        cap_min_uw=0, product="AMD Instinct MI300X")
    trees.hwmon(root, base, 0, "nvme", {"power1_cap": 1})  # another driver's hwmon, lower N
    (g,) = amd.discover(Host(str(root)))
    assert g.hwmon == f"{base}/hwmon/hwmon7"
    assert g.current_cap_w is None and g.holds_limit  # unknown is not a secondary die
    assert g.warnings == ["power1_cap unreadable (empty)"]
    assert g.control.available is False and g.control.reason == "power1_cap_max unreadable (empty)"


def test_reasons_of_attributes_read_in_one_batch(root: Path, trees: ModuleType) -> None:
    """discover reads a GPU's hwmon and device attributes a directory at a time: an attribute that
    cannot be read still says why (its errno), one that is not there is missing, not unreadable."""
    trees.amd_2s_host(root)
    base = trees.amdgpu(root, "0000:05:00.0", device=0x74A1, hwmon_n=7, product="AMD Instinct MI300X",
                        cap_uw=750_000_000, cap_min_uw=350_000_000, cap_max_uw=750_000_000,
                        cap_default_uw=750_000_000)
    hw = root / base.lstrip("/") / "hwmon/hwmon7"
    for name in ("power1_cap_max", "power1_cap_min"):
        (hw / name).unlink()
        (hw / name).mkdir()  # read(2) fails with EISDIR
    (hw / "power1_cap_default").unlink()
    (g,) = amd.discover(Host(str(root)))
    assert g.control.reason == "power1_cap_max unreadable (EISDIR)"
    assert g.warnings == ["power1_cap_min unreadable (EISDIR)"]
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (None, None, None)
    assert (g.raw_model, g.current_cap_w) == ("AMD Instinct MI300X", 750)


def test_no_amdgpu_hwmon_no_gpu(root: Path, trees: ModuleType) -> None:
    trees.amd_2s_host(root)
    trees.pci_device(root, "0000:05:00.0", 0x1002, 0x74A1, 0x120000, "vfio-pci")  # passed through to a VM
    trees.pci_device(root, "0000:06:00.0", 0x1002, 0x1234, 0x020000, None)  # not a GPU class
    host = Host(str(root))
    assert amd.is_available(host)  # the cheap probe sees an AMD GPU-class function ...
    assert amd.discover(host) == []  # ... but without an amdgpu hwmon it is not counted
    assert inventory(host).gpu_count == 0


def test_parse_dpm_levels() -> None:
    assert amd.parse_dpm_levels("0: 500Mhz \n1: 1700Mhz *\nS: 19Mhz \n") == ([500, 1700], 1700)
    assert amd.parse_dpm_levels("") == ([], None)


def test_set_caps_writes_microwatts_and_reads_back(root: Path, trees: ModuleType) -> None:
    trees.amd_mi250x_x4(root)
    host = Host(str(root))
    gpus = amd.discover(host)
    out = amd.set_caps(host, [(gpus[0], 300.0), (gpus[1], 300.0)])
    assert [(o.device, o.status, o.after_w) for o in out] == [
        ("0000:c1:00.0", Status.APPLIED, 300), ("0000:c6:00.0", Status.SKIPPED, None)
    ]
    assert out[1].message == "limited through primary 0000:c1:00.0"
    assert (root / "sys/bus/pci/devices/0000:c1:00.0/hwmon/hwmon1/power1_cap").read_text() == "300000000"
    assert (root / "sys/bus/pci/devices/0000:c6:00.0/hwmon/hwmon2/power1_cap").read_text() == "0\n"


def test_set_caps_errors(root: Path, trees: ModuleType) -> None:
    trees.amd_mi300x_x8(root)
    host = FaultyHost(str(root), {})
    gpus = amd.discover(host)
    host.faults = {gpus[0].cap_file or "": errno.EINVAL, gpus[1].cap_file or "": errno.EPERM,
                   gpus[2].cap_file or "": errno.EIO}
    out = amd.set_caps(host, [(gpus[0], 900.0), (gpus[1], 500.0), (gpus[2], 500.0)])
    assert [o.status for o in out] == [Status.BLOCKED, Status.REFUSED, Status.ERROR]
    assert out[0].message == "EINVAL: the driver refused 900 W (range 350-750 W)"
    assert out[1].message.startswith("EPERM writing /sys/bus/pci/devices/0000:26:00.0/hwmon/hwmon5/power1_cap: ")
    assert out[1].message.endswith("no privilege (run as root (sudo joulectl ...))")
    assert out[2].message.startswith("EIO writing ")


def test_set_caps_truncated_readback_is_an_error(root: Path, trees: ModuleType) -> None:
    trees.amd_mi300x_x8(root)
    host = TruncatingHost(str(root))
    out = amd.set_caps(host, [(amd.discover(host)[0], 500.5)])
    assert (out[0].status, out[0].after_w) == (Status.ERROR, 500)
    assert out[0].message == "0000:05:00.0: read back 500 W after writing 500.5 W"
