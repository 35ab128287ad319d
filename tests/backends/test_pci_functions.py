"""``pci.gpu_functions``: the functions of a vendor whose PCI base class is a display controller
(0x03) or a processing accelerator (0x12), from sysfs ``vendor`` and ``class``
(Documentation/ABI/testing/sysfs-bus-pci; class codes: PCI Code and ID Assignment
Specification). A GPU board's HDMI/DP audio function (class 0x040300) and a function whose class
cannot be read are not GPUs. Written for a mutant of backends/pci.py that survived the seed-6151
deciding sample (docs/TESTING.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulectl.backends import pci
from joulectl.host import Host
from joulectl.models import Status


def _function(root: Path, bus_id: str, vendor: str, cls: str | None) -> None:
    d = root / "sys" / "bus" / "pci" / "devices" / bus_id
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text("0x2330\n")
    if cls is not None:
        (d / "class").write_text(cls + "\n")


def test_only_display_and_accelerator_functions_of_the_vendor_are_gpus(tmp_path: Path) -> None:
    _function(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # 3D controller
    _function(tmp_path, "0000:18:00.1", "0x10de", "0x040300")  # its HD audio function
    _function(tmp_path, "0000:19:00.0", "0x10de", "0x120000")  # processing accelerator
    _function(tmp_path, "0000:1a:00.0", "0x10de", None)        # class unreadable
    _function(tmp_path, "0000:1b:00.0", "0x1002", "0x030000")  # another vendor's VGA controller
    found = pci.gpu_functions(Host(str(tmp_path)), 0x10DE)
    assert [(d.bus_id, d.class_code) for d in found] == [("0000:18:00.0", 0x030200), ("0000:19:00.0", 0x120000)]


def test_the_first_hwmon_of_a_device_is_the_lowest_numbered(tmp_path: Path) -> None:
    # the hwmon class numbers its devices hwmon0, hwmon1, ... in registration order
    # (drivers/hwmon/hwmon.c, ida_alloc): of two matching ones under a device the first is
    # hwmon9, not hwmon10, which sorts first as text (kills pci.py:91 `e[5:]` -> `e[6:]`)
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:4d:00.0"
    for n, name in ((10, "xe"), (9, "xe"), (2, "nvme")):
        (dev / "hwmon" / f"hwmon{n}").mkdir(parents=True)
        (dev / "hwmon" / f"hwmon{n}" / "name").write_text(name + "\n")
    found = pci.find_hwmon(Host(str(tmp_path)), "/sys/bus/pci/devices/0000:4d:00.0", ("i915", "xe"))
    assert found == ("/sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon9", "xe")


@pytest.mark.parametrize(("lo", "hi", "text"), [
    (None, None, "unknown"), (None, 150.0, "at most 150 W"), (100.0, None, "at least 100 W"),
    (100.0, 300.0, "100-300 W"), (0.5, 2.25, "0.5-2.25 W"),
])
def test_a_power_range_in_words(lo: float | None, hi: float | None, text: str) -> None:
    # what an EINVAL message says of the range the driver shows (kills pci.py:115, each of the
    # three mutants of `min_w is None and max_w is None`)
    assert pci.range_text(lo, hi) == text


class _Blank(Host):
    """A limit file that takes the store and then reads back empty."""

    def write(self, host_path: str, value: str) -> None:
        super().write(host_path, "")


def test_a_write_that_reads_back_empty_is_unverified_and_says_so(tmp_path: Path) -> None:
    # an empty readback cannot confirm the store: applied-unverified, naming the file and why (the
    # reader's reason, "empty") (unreached before: pci.py:161 `attr.reason or 'nothing'`)
    path = tmp_path / "sys" / "class" / "hwmon" / "hwmon3" / "power1_cap"
    path.parent.mkdir(parents=True)
    path.write_text("300000000\n")
    out = pci.write_uw_verified(_Blank(str(tmp_path)), "0000:c1:00.0", "/sys/class/hwmon/hwmon3/power1_cap", 250.0,
                                min_w=0.0, max_w=300.0)
    assert (out.device, out.status, out.message) == (
        "0000:c1:00.0", Status.APPLIED_UNVERIFIED, "written, but power1_cap reads back empty")


def test_one_inventory_reads_each_functions_vendor_once(tmp_path: Path) -> None:
    """The NVIDIA probe, the AMD and the Intel backend each look for their vendor's functions; one
    inventory reads every function's ``vendor`` once for all three (a GPU server has a few hundred
    PCI functions), and the next inventory reads them again: a function whose vendor changed
    (a hot-plug, here an edit) is seen by it."""
    from joulectl.ops.inventory import inventory

    _function(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    _function(tmp_path, "0000:1b:00.0", "0x1002", "0x030000")
    _function(tmp_path, "0000:00:1f.0", "0x8086", "0x060100")  # an ISA bridge
    host = Host(str(tmp_path))
    reads: list[str] = []
    read_int = host.read_int

    def counting(path: str, **kw: object) -> int | None:
        if path.endswith("/vendor"):
            reads.append(path)
        return read_int(path, **kw)  # type: ignore[arg-type]

    host.read_int = counting  # type: ignore[method-assign]
    inventory(host, cpu=False)
    assert sorted(reads) == sorted(f"/sys/bus/pci/devices/{n}/vendor" for n in
                                   ("0000:18:00.0", "0000:1b:00.0", "0000:00:1f.0"))
    assert [d.bus_id for d in pci.gpu_functions(host, 0x1002)] == ["0000:1b:00.0"]  # the same scan
    assert len(reads) == 3
    (tmp_path / "sys/bus/pci/devices/0000:1b:00.0/vendor").write_text("0x8086\n")
    reads.clear()
    inventory(host, cpu=False)
    assert len(reads) == 3
    assert [d.bus_id for d in pci.gpu_functions(host, 0x1002)] == []
