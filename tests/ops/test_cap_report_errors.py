"""The error a cap run ends with, for a report built by hand (literal messages, SPEC §2).

Written for mutants that survived the cap tests (docs/TESTING.md): one escape says no "(and 0
more)", a restore after a restore leaves the operator's cap in force.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulectl.errors import ExitCode
from joulectl.host import Host
from joulectl.models import DeviceResult, Status
from joulectl.ops.cap import CapReport
from tests.ops.test_cap import Node, gpu, run


def _row(device: str, status: Status) -> DeviceResult:
    return DeviceResult(device=device, vendor="amd", model="MI250X", status=status)


@pytest.mark.parametrize(("escapes", "more"), [
    (["/sys/bus/pci/devices/0000:c1:00.0/hwmon/hwmon2/power1_cap"], ""),
    (["/a", "/b"], " (and 1 more)"),
    (["/a", "/b", "/c"], " (and 2 more)"),
])
def test_escapes_name_the_first_path_and_count_the_rest(escapes: list[str], more: str) -> None:
    report = CapReport(node="n", results=[_row("0000:c1:00.0", Status.ERROR), _row("0000:c9:00.0", Status.APPLIED)],
                       escapes=escapes)
    err = report.error()
    assert err is not None and err.exit_code == ExitCode.USAGE
    assert str(err) == (f"{escapes[0]}: resolves outside the host root{more}: never read nor written; "
                        "1 of 2 targets done (see MESSAGE)")


@pytest.fixture
def host(tmp_path: Path) -> Host:
    root = tmp_path / "root"
    root.mkdir()
    return Host(str(root))


def test_a_restore_after_a_restore_leaves_the_cap_in_force(host: Host) -> None:
    node = Node([gpu(0, cap=700)])
    assert run(host, node, watts=300).results[0].status is Status.APPLIED
    assert run(host, node, restore=True).results[0].after_w == 700
    node.writer.values["0000:10:00.0"] = 500.0  # the operator, by hand, after joulectl's restore
    again = run(host, node, restore=True).results[0]
    assert (again.status, again.message, again.target_w) == (
        Status.UNCHANGED, "restored: the cap in force is the operator's, left as it is", 500.0)
    assert node.writer.values["0000:10:00.0"] == 500.0
