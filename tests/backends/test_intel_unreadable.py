"""An i915 PL1 file that reads empty (a failed hwmon read, docs/hardware.md §2.1) or holds
garbage: the GPU stays listed, its cap unknown, and the warning names the file and why. Written
for a mutant that survived the backend tests (docs/TESTING.md)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import intel
from joulectl.host import Host


@pytest.mark.parametrize(("content", "warning"), [
    ("", "power1_max unreadable (empty)"),
    ("\n", "power1_max unreadable (empty)"),
])
def test_an_empty_pl1_file(root: Path, trees: ModuleType, content: str, warning: str) -> None:
    trees.intel_gpu(root, "0000:4d:00.0", device=0x56C0, driver="i915",
                    files={"power1_max": 1, "power1_rated_max": 150_000_000})
    (root / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon1/power1_max").write_text(content)
    (g,) = intel.discover(Host(str(root)))
    assert (g.bus_id, g.current_cap_w, g.warnings) == ("0000:4d:00.0", None, [warning])
