"""``nvidia.is_available``: any one sign of an NVIDIA GPU is enough to run the tool.

The signs (backends/nvidia.py; docs/hardware.md 5 for the tools): a PCI function of vendor 0x10de with a
display class, the driver's control node ``/dev/nvidiactl``, ``nvidia-smi`` on the tool path, or
NVML forced by ``JOULECTL_NVIDIA_TRANSPORT=nvml``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from joulectl.backends import nvidia
from joulectl.host import Host


def test_no_sign_no_nvidia(root: Path) -> None:
    assert nvidia.is_available(Host(str(root))) is False


def test_a_pci_function_alone_is_enough(root: Path, trees: ModuleType) -> None:
    # (kills backends/nvidia.py:80 `... or host.exists("/dev/nvidiactl")` -> `and`)
    trees.pci_device(root, "0000:17:00.0", 0x10DE, 0x2330, 0x030200, "nvidia")
    assert nvidia.is_available(Host(str(root))) is True


def test_the_control_node_alone_is_enough(root: Path, trees: ModuleType) -> None:
    trees.write(root, "/dev/nvidiactl", "")
    assert nvidia.is_available(Host(str(root))) is True


def test_a_tool_failure_is_named_by_its_first_line_of_200_characters_at_most() -> None:
    # (kills backends/nvidia.py:249 `[:200]` -> `[:201]`, found after the deciding sample was drawn)
    assert nvidia._first_line("", "  \n" + "x" * 250 + "\nsecond") == "x" * 200
    assert nvidia._first_line("\n", " \t\n") == "no output"
    assert nvidia._first_line("Failed to initialize NVML: Driver/library version mismatch\n", "") == (
        "Failed to initialize NVML: Driver/library version mismatch")
