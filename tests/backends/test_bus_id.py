"""``normalize_bus_id``: every spelling of a PCI address becomes the one sysfs uses.

sysfs names a PCI function ``DDDD:BB:DD.F`` in lower case, 4-digit domain
(/sys/bus/pci/devices/0000:07:00.0); nvidia-smi prints ``00000000:07:00.0`` (8-digit domain, upper
case: the real captures in tests/fixtures/real); lspci without ``-D`` prints ``07:00.0`` (no domain,
domain 0).
"""

from __future__ import annotations

import pytest

from joulectl.backends.base import normalize_bus_id, nvml_bus_id


@pytest.mark.parametrize(("raw", "sysfs"), [
    ("00000000:07:00.0", "0000:07:00.0"),  # nvidia-smi
    ("00000000:C1:00.0\n", "0000:c1:00.0"),
    ("0000:c1:00.0", "0000:c1:00.0"),  # already sysfs
    ("00000001:4E:00.0", "0001:4e:00.0"),  # a second PCI domain keeps its number
    ("07:00.0", "0000:07:00.0"),  # lspci's short form: domain 0 (kills base.py:107 `== 1` -> `== 2`)
    ("C1:00.0", "0000:c1:00.0"),
    ("gpu-0", "gpu-0"),  # no PCI address: left as it is, lower case
])
def test_every_spelling_becomes_the_sysfs_name(raw: str, sysfs: str) -> None:
    assert normalize_bus_id(raw) == sysfs


@pytest.mark.parametrize(("raw", "nvml"), [
    ("0000:07:00.0", "00000000:07:00.0"),   # sysfs -> NVML / nvidia-smi / dcgm-exporter's pci_bus_id
    ("0000:c1:00.0", "00000000:C1:00.0"),   # upper case, as nvidia-smi prints it
    ("0001:4e:00.0", "00000001:4E:00.0"),   # a second PCI domain keeps its number, 8 digits
    ("c1:00.0", "00000000:C1:00.0"),        # lspci's short form: domain 0
    ("00000000:07:00.0", "00000000:07:00.0"),
    ("gpu-0", "GPU-0"),                     # no PCI address: left as it is, upper case
])
def test_the_nvml_spelling_is_the_inverse(raw: str, nvml: str) -> None:
    # nvmlDeviceGetPciInfo's busId and nvidia-smi's "GPU 00000000:C1:00.0" (8-digit domain, upper
    # case: the real captures in tests/fixtures/real); the sysfs name of it is `raw` normalised
    # (unreached before: backends/base.py:116-119)
    assert nvml_bus_id(raw) == nvml
    if ":" in raw:
        assert normalize_bus_id(nvml_bus_id(raw)) == normalize_bus_id(raw)
