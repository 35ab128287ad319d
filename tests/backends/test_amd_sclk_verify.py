"""``gov_amd.verify_sclk``: after a mask is written to ``pp_dpm_sclk``, amdgpu marks the level in
use with ``*`` (docs/hardware.md 1.5: ``amdgpu_pm.c``, ``amdgpu_read_mask``); a level outside the
mask is not yet verified. Expected texts written out. Written for an unreached mutant of backends/gov_amd.py
(docs/TESTING.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulectl.backends import gov_amd
from joulectl.host import Host
from joulectl.models import Control, GpuDevice, PowerRange, Status

BUS = "0000:c1:00.0"


def _gpu() -> GpuDevice:
    model = "AMD Instinct MI300X"
    return GpuDevice(index=0, bus_id=BUS, vendor="amd", driver="amdgpu", raw_model=model, model=model,
                     cap_range=PowerRange(0, 750, 750), current_cap_w=750, control=Control(True))


@pytest.mark.parametrize(("table", "status", "message", "after"), [
    ("0: 500Mhz *\n1: 1100Mhz\n2: 1700Mhz\n3: 2100Mhz\n", Status.APPLIED_UNVERIFIED,
     "sclk level 0 (500 MHz) still in use, outside the mask", None),
    ("0: 500Mhz\n1: 1100Mhz *\n2: 1700Mhz\n3: 2100Mhz\n", Status.APPLIED, "", "sclk level 1 (1100 MHz)"),
    ("0: 500Mhz\n1: 1100Mhz\n2: 1700Mhz\n3: 2100Mhz\n", Status.APPLIED_UNVERIFIED,
     "sclk level in use not readable yet", None),
])
def test_the_level_in_use_decides_whether_the_mask_is_verified(
        tmp_path: Path, table: str, status: Status, message: str, after: str | None) -> None:
    d = tmp_path / "sys" / "bus" / "pci" / "devices" / BUS
    d.mkdir(parents=True)
    (d / "pp_dpm_sclk").write_text(table)
    got = gov_amd.verify_sclk(Host(str(tmp_path)), _gpu(), [1, 2])
    assert (got.status, got.message, got.after) == (status, message, after)
