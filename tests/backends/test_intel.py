"""Intel backend: i915 and xe hwmon discovery, the PL1 file choice, rated_max, and clamped writes."""

from __future__ import annotations

import errno
from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import intel
from joulectl.host import Host, HostIOError
from joulectl.models import Status
from joulectl.ops.discover import inventory


class ClampingHost(Host):
    """The GPU clamps a PL1 to bounds sysfs does not show (here 140 W). A plain file cannot clamp
    at write time, so this fake does: the readback then differs from the request, as on hardware."""

    clamp_uw = 140_000_000

    def write(self, host_path: str, value: str) -> None:
        if host_path.endswith(("/power1_max", "/power2_max")):
            value = str(min(int(value), self.clamp_uw))
        super().write(host_path, value)


class ReadOnlyHost(Host):
    def write(self, host_path: str, value: str) -> None:
        raise HostIOError(errno.EACCES, host_path)


def test_flex170_i915_x4(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_i915_x4(root)
    host = Host(str(root))
    gpus = intel.discover(host)
    assert [g.bus_id for g in gpus] == trees.FLEX_BUSES  # the iGPU and the BMC VGA are not counted
    g = gpus[0]
    assert (g.vendor, g.driver, g.raw_model) == ("intel", "i915", "Intel Data Center GPU Flex 170")
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (None, 150, 150)
    assert g.current_cap_w == 120 and g.control.available
    assert (g.power_w, g.energy_uj) == (None, 987654321)  # no power reading: the energy counter (µJ)
    assert g.cap_file == "/sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon2/power1_max"
    inv = inventory(host)
    assert (inv.gpu_count, inv.power_domains, inv.governor_presets) == (4, 4, ())
    assert inv.gpus[0].catalog_key == "INTEL_DATA_CENTER_GPU_FLEX_170"


def test_flex170_xe_uses_power2(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_xe_x4(root)
    gpus = intel.discover(Host(str(root)))
    assert len(gpus) == 4
    assert gpus[0].driver == "xe"
    assert gpus[0].cap_file == "/sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon2/power2_max"
    assert (gpus[0].current_cap_w, gpus[0].cap_range.max_w) == (150, 150)


def test_xe_prefers_power1_when_present(root: Path, trees: ModuleType) -> None:
    trees.intel_gpu(root, "0000:4d:00.0", device=0x56C0, driver="xe", files={
        "power1_max": 100_000_000, "power1_rated_max": 120_000_000,
        "power2_max": 150_000_000, "power2_rated_max": 150_000_000})
    (g,) = intel.discover(Host(str(root)))
    assert g.cap_file is not None and g.cap_file.endswith("/power1_max")
    assert (g.current_cap_w, g.cap_range.max_w) == (100, 120)


def test_no_rated_max_blocks_control(root: Path, trees: ModuleType) -> None:
    trees.intel_no_rated_max(root)
    host = Host(str(root))
    (g,) = intel.discover(host)
    assert g.control.available is False
    assert g.control.reason == "the power limit range of the Intel GPUs is unknown"
    assert g.cap_range.max_w is None and g.current_cap_w == 150
    out = intel.set_caps(host, [(g, 100.0)])
    assert (out[0].status, out[0].message) == (Status.BLOCKED, "the power limit range of the Intel GPUs is unknown")
    assert (root / "sys/bus/pci/devices/0000:4d:00.0/hwmon/hwmon1/power1_max").read_text() == "150000000\n"


def test_max1550_two_tiles_is_one_gpu(root: Path, trees: ModuleType) -> None:
    trees.intel_max1550(root)
    inv = inventory(Host(str(root)))
    assert inv.gpu_count == 1
    assert (inv.gpus[0].raw_model, inv.gpus[0].catalog_key) == (
        "Intel Data Center GPU Max 1550", "INTEL_DATA_CENTER_GPU_MAX_1550")


def test_pl1_disabled_reads_zero(root: Path, trees: ModuleType) -> None:
    trees.intel_gpu(root, "0000:4d:00.0", device=0x56C0, driver="i915",
                    files={"power1_max": 0, "power1_rated_max": 150_000_000})
    (g,) = intel.discover(Host(str(root)))
    assert g.current_cap_w is None and g.warnings == ["PL1 is disabled (power_max reads 0)"]


def test_unknown_device_id_and_missing_pl1(root: Path, trees: ModuleType) -> None:
    trees.intel_gpu(root, "0000:4d:00.0", device=0x1234, driver="xe", files={"energy1_input": 1})
    (g,) = intel.discover(Host(str(root)))
    assert g.raw_model == "Intel GPU 0x1234"
    assert g.control.reason == "no PL1 file (power1_max/power2_max)"
    # a cap is refused with the reason discover gave (kills intel.py:171 `reason or "no PL1 file"`
    # -> `and`)
    out = intel.set_caps(Host(str(root)), [(g, 100.0)])[0]
    assert (out.status, out.message) == (Status.BLOCKED, "no PL1 file (power1_max/power2_max)")


def test_set_caps_applied_and_read_back(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_i915_x4(root)
    host = Host(str(root))
    gpus = intel.discover(host)
    out = intel.set_caps(host, [(gpus[0], 100.0), (gpus[1], 130.0)])
    assert [(o.status, o.after_w) for o in out] == [(Status.APPLIED, 100), (Status.APPLIED, 130)]


def test_set_caps_clamped_readback_is_an_error_naming_the_bus_id(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_i915_x4(root)
    host = ClampingHost(str(root))
    gpus = intel.discover(host)
    out = intel.set_caps(host, [(gpus[0], 150.0), (gpus[1], 130.0)])
    assert (out[0].status, out[0].after_w) == (Status.ERROR, 140)
    assert out[0].message == "0000:4d:00.0: read back 140 W after writing 150 W"
    assert out[1].status is Status.APPLIED  # one device's failure never stops the others


def test_set_caps_without_privilege_is_refused(root: Path, trees: ModuleType) -> None:
    trees.intel_flex170_i915_x4(root)
    host = ReadOnlyHost(str(root))
    out = intel.set_caps(host, [(intel.discover(host)[0], 100.0)])
    assert out[0].status is Status.REFUSED and "(run as root (sudo joulectl ...))" in out[0].message


@pytest.mark.parametrize(("device", "name"), [
    # Intel exposes no product name in sysfs: the PCI device id names the board (pci.ids, vendor
    # 8086), an id not in the table by the id itself (written after the seed-9173 deciding sample:
    # kills the DEVICE_NAMES mutants of backends/intel.py, e.g. :39 0x0BDA -> 0x0BDB)
    (0x56C0, "Intel Data Center GPU Flex 170"), (0x56C1, "Intel Data Center GPU Flex 140"),
    (0x0BD5, "Intel Data Center GPU Max 1550"), (0x0BDA, "Intel Data Center GPU Max 1100"),
    (0x56A0, "Intel Arc A770"), (0x56A1, "Intel Arc A750"), (0xE20B, "Intel Arc B580"), (0xE20C, "Intel Arc B570"),
    (0x1234, "Intel GPU 0x1234"),
])
def test_a_board_is_named_by_its_device_id(root: Path, trees: ModuleType, device: int, name: str) -> None:
    trees.intel_gpu(root, "0000:4d:00.0", device=device, driver="i915",
                    files={"power1_max": 120_000_000, "power1_rated_max": 150_000_000})
    (g,) = intel.discover(Host(str(root)))
    assert g.raw_model == name


@pytest.mark.parametrize(("files", "energy"), [
    # xe: PL1 on channel 2 (power2_max), the energy only on channel 1: the card's energy1_input
    ({"power2_max": 150_000_000, "power2_rated_max": 150_000_000, "energy1_input": 111}, 111),
    # PL1 on channel 1, the energy only on channel 2 (the package's energy2_input)
    ({"power1_max": 150_000_000, "power1_rated_max": 150_000_000, "energy2_input": 222}, 222),
    # both: the PL1's own channel first
    ({"power2_max": 150_000_000, "power2_rated_max": 150_000_000, "energy1_input": 111, "energy2_input": 222},
     222),
])
def test_the_energy_counter_is_the_pl1_channels_or_the_other_one(root: Path, trees: ModuleType,
                                                                 files: dict[str, int], energy: int) -> None:
    # xe hwmon (Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon): energy1_input is the card's,
    # energy2_input the package's, µJ; discover reads the PL1 channel's, else channel 1, else 2
    # (kills intel.py:139, `(1, 2)` -> `(2, 2)` and -> `(1, 3)`)
    trees.intel_gpu(root, "0000:4d:00.0", device=0x56C0, driver="xe", files=files)
    (g,) = intel.discover(Host(str(root)))
    assert g.energy_uj == energy
