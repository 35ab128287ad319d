"""``discover --watch`` frames: power from energy counters over the refresh interval, wraps included.
The clock and the sleep are injected, so nothing here depends on real time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from joulectl.host import Host
from joulectl.models import NodeInventory
from joulectl.ops.discover import inventory, watch_frames


def test_cpu_and_intel_power_from_energy_counters(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_i915_x4(root)
    host = Host(str(root))
    pkg0 = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    pkg1 = root / "sys/class/powercap/intel-rapl:1/energy_uj"
    gpu0 = root / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon2/energy1_input"
    pkg0.write_text("1000000000\n")
    pkg1.write_text("262143000000\n")  # just below max_energy_range_uj (262143328850)
    gpu0.write_text("500000000\n")
    times: Iterator[float] = iter([100.0, 102.0])
    slept: list[float] = []

    def take() -> NodeInventory:
        return inventory(host)

    frames = watch_frames(take, 2.0, 2, sleep=slept.append, clock=lambda: next(times))
    first = next(frames)
    assert "intel-rapl:0  cpu       package-0                       -" in first
    pkg0.write_text("1400000000\n")  # +400 J in 2 s
    pkg1.write_text("99671150\n")  # wrapped: 328850 + 99671150 µJ = +100 J in 2 s
    gpu0.write_text("700000000\n")  # +200 J in 2 s
    second = next(frames)
    assert slept == [2.0]
    assert "intel-rapl:0  cpu       package-0                       200.0 W" in second
    assert "intel-rapl:1  cpu       package-1                       50.0 W" in second
    assert "0000:4d:00.0  intel     Intel Data Center GPU Flex 170  100.0 W  120 W" in second
    assert list(frames) == []  # count=2: done
