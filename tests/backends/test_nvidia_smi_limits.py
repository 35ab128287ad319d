"""Which ``nvidia-smi -q -x`` element is the requested power limit, one element at a time.

The documents are written out here, in the two schemas nvidia-smi's DTDs define (docs/hardware.md,
"nvidia-smi"): ``<gpu_power_readings>`` (``requested_power_limit`` is the software limit that
``-pl`` sets, ``current_power_limit`` the enforced one) and the legacy ``<power_readings>``
(``power_limit`` and ``enforced_power_limit``). A printed token is unknown: the enforced limit
beside it is another limit, so the GPU has no known requested limit and is not settable. Only a
document that lacks the requested element altogether falls back to the enforced one.
"""

from __future__ import annotations

import pytest

from joulectl.backends.nvidia import parse_smi_xml

NEW = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>550.54.15</driver_version>
<gpu id="00000000:4F:00.0"><product_name>NVIDIA L40S</product_name>
<gpu_power_readings>{readings}<default_power_limit>350.00 W</default_power_limit>
<min_power_limit>100.00 W</min_power_limit><max_power_limit>350.00 W</max_power_limit>
</gpu_power_readings></gpu></nvidia_smi_log>
"""
LEGACY = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>470.82.01</driver_version>
<gpu id="00000000:4F:00.0"><product_name>Tesla T4</product_name>
<power_readings><power_management>Supported</power_management>{readings}
<default_power_limit>70.00 W</default_power_limit><min_power_limit>60.00 W</min_power_limit>
<max_power_limit>70.00 W</max_power_limit></power_readings></gpu></nvidia_smi_log>
"""
UNKNOWN = "the power limit is unknown (the driver reports N/A): no settable power limit"


@pytest.mark.parametrize(("readings", "cap", "enforced", "reason"), [
    ("<current_power_limit>300.00 W</current_power_limit><requested_power_limit>320.00 W</requested_power_limit>",
     320.0, 300.0, None),
    ("<current_power_limit>300.00 W</current_power_limit><requested_power_limit>N/A</requested_power_limit>",
     None, 300.0, UNKNOWN),
    ("<current_power_limit>300.00 W</current_power_limit><requested_power_limit>[N/A]</requested_power_limit>",
     None, 300.0, UNKNOWN),
    ("<current_power_limit>300.00 W</current_power_limit><requested_power_limit></requested_power_limit>",
     None, 300.0, UNKNOWN),
    ("<current_power_limit>300.00 W</current_power_limit>", 300.0, 300.0, None),  # no requested element
    ("<current_power_limit>N/A</current_power_limit><requested_power_limit>320.00 W</requested_power_limit>",
     320.0, None, None),
    ("", None, None, UNKNOWN),
])
def test_new_schema_requested_limit(readings: str, cap: float | None, enforced: float | None,
                                    reason: str | None) -> None:
    (g,) = parse_smi_xml(NEW.format(readings=readings))
    assert (g.current_cap_w, g.enforced_cap_w, g.control.available, g.control.reason) == (
        cap, enforced, reason is None, reason)
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (100.0, 350.0, 350.0)


@pytest.mark.parametrize(("readings", "cap", "enforced", "reason"), [
    ("<power_limit>65.00 W</power_limit><enforced_power_limit>65.00 W</enforced_power_limit>", 65.0, 65.0, None),
    ("<power_limit>N/A</power_limit><enforced_power_limit>65.00 W</enforced_power_limit>", None, 65.0, UNKNOWN),
    ("<enforced_power_limit>65.00 W</enforced_power_limit>", 65.0, 65.0, None),
])
def test_legacy_schema_requested_limit(readings: str, cap: float | None, enforced: float | None,
                                       reason: str | None) -> None:
    (g,) = parse_smi_xml(LEGACY.format(readings=readings))
    assert (g.current_cap_w, g.enforced_cap_w, g.control.available, g.control.reason) == (
        cap, enforced, reason is None, reason)
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (60.0, 70.0, 70.0)


@pytest.mark.parametrize(("field", "range_", "reason"), [
    ("min_power_limit", (None, 350.0, 350.0),
     "the power limit range is unknown (the driver reports N/A): no settable power limit"),
    ("max_power_limit", (100.0, None, 350.0),
     "the power limit range is unknown (the driver reports N/A): no settable power limit"),
    ("default_power_limit", (100.0, 350.0, 350.0), None),  # the default falls back to the maximum
])
def test_one_range_token(field: str, range_: tuple[float | None, ...], reason: str | None) -> None:
    doc = NEW.format(readings="<current_power_limit>350.00 W</current_power_limit>"
                              "<requested_power_limit>350.00 W</requested_power_limit>")
    start = doc.index(f"<{field}>") + len(field) + 2
    doc = doc[:start] + "N/A" + doc[doc.index(f"</{field}>"):]
    (g,) = parse_smi_xml(doc)
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == range_
    assert (g.control.available, g.control.reason) == (reason is None, reason)
