"""``pci.gpu_functions``: the functions of a vendor whose PCI base class is a display controller
(0x03) or a processing accelerator (0x12), from sysfs ``vendor`` and ``class``
(Documentation/ABI/testing/sysfs-bus-pci; class codes: PCI Code and ID Assignment
Specification). A GPU board's HDMI/DP audio function (class 0x040300) and a function whose class
cannot be read are not GPUs. Written for a mutant of backends/pci.py that survived the seed-6151
deciding sample (docs/TESTING.md)."""

from __future__ import annotations

from pathlib import Path

from joulectl.backends import pci
from joulectl.host import Host


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
