"""nvidia-smi output parsers fuzzed: ``-q -x`` XML (both power schemas), ``--query-gpu`` CSV
(cap readback, clock samples) and ``-q -d SUPPORTED_CLOCKS`` text. Any output ends in devices or
in BackendUnavailable (discover reports it per vendor); never another exception. An XML entity
bomb is refused by the parser (expat's amplification limit)."""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl.backends import nvidia, nvidia_clock_io, nvidia_clocks
from joulectl.backends.base import BackendUnavailable
from joulectl.host import Host, ToolResult

FUZZ = settings(max_examples=examples(1000), deadline=None)
STRUCT = settings(max_examples=examples(400), deadline=None)

# Values as nvidia-smi prints them, plus garbage, plus digit strings too long for a float (400 digits
# used to overflow int(float(...)) in parse_smi_xml's clock parsing; they now read as unknown).
VALUES = st.one_of(
    st.sampled_from(["N/A", "[N/A]", "[Not Supported]", "Unknown Error", "", " ", "Enabled", "Disabled",
                     "Ampere", "Hopper", "Ada Lovelace", "Pascal", "Supported", "00000000:1A:00.0", "GPU-x"]),
    st.builds(lambda n, unit: f"{n}{unit}", st.decimals(min_value=-10**6, max_value=10**6, places=2, allow_nan=False),
              st.sampled_from([" W", " MHz", "", "W", " mW", " %"])),
    st.integers(-(10**12), 10**12).map(str),
    st.builds(lambda n, unit: f"{'9' * n}{unit}", st.integers(300, 420), st.sampled_from([" MHz", " W", ""])),
    st.text(max_size=12),
)
POWER_FIELDS = ["power_limit", "enforced_power_limit", "requested_power_limit", "current_power_limit",
                "default_power_limit", "min_power_limit", "max_power_limit", "power_draw", "average_power_draw",
                "instant_power_draw", "power_management"]


@st.composite
def gpu_xml(draw: st.DrawFn) -> str:
    parts = []
    for tag in draw(st.lists(st.sampled_from(["product_name", "uuid", "product_architecture", "persistence_mode"]),
                             max_size=4)):
        parts.append(f"<{tag}>{escape(draw(VALUES))}</{tag}>")
    block = draw(st.sampled_from(["gpu_power_readings", "power_readings", None]))
    if block:
        fields = draw(st.lists(st.sampled_from(POWER_FIELDS), max_size=8))
        parts.append(f"<{block}>" + "".join(f"<{f}>{escape(draw(VALUES))}</{f}>" for f in fields) + f"</{block}>")
    if draw(st.booleans()):
        parts.append("<clocks>" + "".join(f"<{t}>{escape(draw(VALUES))}</{t}>" for t in
                                          draw(st.lists(st.sampled_from(["graphics_clock", "mem_clock"]), max_size=2)))
                     + "</clocks>")
    if draw(st.booleans()):
        mems = draw(st.lists(st.tuples(VALUES, st.lists(VALUES, max_size=4)), max_size=3))
        parts.append("<supported_clocks>" + "".join(
            f"<supported_mem_clock><value>{escape(m)}</value>"
            + "".join(f"<supported_graphics_clock>{escape(g)}</supported_graphics_clock>" for g in gs)
            + "</supported_mem_clock>" for m, gs in mems) + "</supported_clocks>")
    if draw(st.booleans()):
        parts.append(f"<mig_mode><current_mig>{escape(draw(VALUES))}</current_mig></mig_mode>")
    if draw(st.booleans()):
        parts.append(f"<pci><pci_bus_id>{escape(draw(VALUES))}</pci_bus_id></pci>")
    gpu_id = draw(st.one_of(st.none(), VALUES))
    attr = f' id="{escape(gpu_id, {chr(34): "&quot;"})}"' if gpu_id is not None else ""
    return f"<gpu{attr}>" + "".join(parts) + "</gpu>"


smi_documents = st.one_of(
    st.lists(gpu_xml(), max_size=4).map(lambda gs: "<?xml version=\"1.0\" ?><nvidia_smi_log>"
                                        + "".join(gs) + "</nvidia_smi_log>"),
    st.text(max_size=200),
    st.sampled_from(["", "<nvidia_smi_log/>", "<other/>", "<nvidia_smi_log><gpu>", "NVIDIA-SMI has failed"]),
)


@STRUCT
@given(smi_documents)
def test_parse_smi_xml_gives_devices_or_backend_unavailable(xml_text: str) -> None:
    try:
        gpus = nvidia.parse_smi_xml(xml_text)
    except BackendUnavailable as e:
        assert str(e).startswith("nvidia-smi -q -x printed")
        return
    for i, gpu in enumerate(gpus):
        # A blank id="  " is a missing id: the index fallback, never an empty bus id.
        assert gpu.index == i and gpu.vendor == "nvidia" and gpu.bus_id
        assert gpu.control is not None
        for mem, gfx in (gpu.supported_clocks or {}).items():
            assert isinstance(mem, int) and all(isinstance(g, int) for g in gfx)


def test_xml_entity_bomb_is_refused() -> None:
    entities = "".join(f'<!ENTITY a{i} "' + (f"&a{i - 1};" if i else "lol") * 10 + '">' for i in range(10))
    bomb = (f'<?xml version="1.0"?><!DOCTYPE l [{entities}]><nvidia_smi_log><gpu id="00000000:01:00.0">'
            "<product_name>&a9;</product_name></gpu></nvidia_smi_log>")
    with pytest.raises(BackendUnavailable, match=r"not XML .*amplification"):
        nvidia.parse_smi_xml(bomb)


@FUZZ
@given(st.text(max_size=16) | st.sampled_from(["700.00 W", "[N/A]", "1980 MHz", " 350 ", "-5 W", "1.5.5"]))
def test_parse_value(text: str) -> None:
    v = nvidia.parse_value(text)
    assert v is None or isinstance(v, float)


class CannedHost(Host):
    """A Host whose every tool run prints ``stdout`` and exits ``code`` (a fake of the tool)."""

    canned: tuple[str, int] = ("", 0)

    def run(self, argv: Any, *, timeout: float | None = None) -> ToolResult:
        self.tool_calls.append(tuple(argv))
        return ToolResult(tuple(argv), self.canned[1], self.canned[0], "", 0.0)


bus_ids = st.sampled_from(["00000000:1A:00.0", "0000:1a:00.0", "1A:00.0", "00000000:ZZ:00.0", "", "GPU 0"])
csv_lines = st.lists(
    st.lists(bus_ids | VALUES, max_size=4).map(", ".join) | st.text(max_size=30), max_size=6
).map("\n".join)


@pytest.fixture(scope="module")
def canned(tmp_path_factory: pytest.TempPathFactory) -> CannedHost:
    return CannedHost(str(tmp_path_factory.mktemp("canned")))


@STRUCT
@given(csv_lines, st.sampled_from([0, 0, 1, 9, -11]))
def test_readback_csv(canned: CannedHost, text: str, code: int) -> None:
    canned.canned = (text, code)
    values, why = nvidia._smi_readback(canned)
    if code != 0:
        assert values == {} and why is not None
    for bus, limits in values.items():
        assert bus.count(":") == 2 and len(limits) == 2  # (requested, enforced)
        assert all(w is None or isinstance(w, float) for w in limits)


smi_messages = st.lists(
    st.sampled_from([
        "Power limit for GPU 00000000:1A:00.0 was set to 420.00 W from 700.00 W.",
        "Changing power management limit is not supported in current scope for GPU: 00000000:1A:00.0.",
        "Failed to set power management limit for GPU 00000000:1A:00.0: Insufficient Permissions",
        "The current user does not have permission to change clocks for GPU 0000:1a:00.0.",
        "Provided power limit 9.00 W is not a valid power limit which should be between 200.00 W and 700.00 W",
        "Treating as warning and moving on.", "Terminating early due to previous errors.", "All done.",
        "Insufficient Permissions", "not supported", "GPU 00000000:ZZ:00.0",
    ]) | st.text(max_size=40),
    max_size=8,
).map("\n".join)


@FUZZ
@given(smi_messages, st.sampled_from([0, 2, 3, 4, 6, 9, 255, -9]))
def test_message_table_decides_every_gpu_or_says_nothing(text: str, code: int) -> None:
    from joulectl.backends.nvidia_messages import decide

    verdicts = decide(text, code, ["0000:1a:00.0", "0000:2b:00.0"])
    assert set(verdicts) == {"0000:1a:00.0", "0000:2b:00.0"}
    for v in verdicts.values():
        assert v is None or v.row


@STRUCT
@given(csv_lines, st.sampled_from([0, 0, 3]))
def test_clock_samples_csv(canned: CannedHost, text: str, code: int) -> None:
    canned.canned = (text, code)
    out = nvidia_clock_io.SmiTransport(canned).sample_clocks([])
    for sample in out.values():
        for mhz in (sample.graphics_mhz, sample.memory_mhz, sample.utilization_pct):
            assert mhz is None or isinstance(mhz, int)


supported_clocks_text = st.lists(
    st.sampled_from(["GPU 00000000:1A:00.0", "GPU 0000:3B:00.0", "    Supported Clocks", "        Memory : 2619 MHz",
                     "        Memory : N/A", "            Graphics : 1980 MHz", "            Graphics : 345 MHz",
                     "Graphics : x", "Memory:", "GPU", ""]) | st.text(max_size=20),
    max_size=20,
).map("\n".join)


@FUZZ
@given(supported_clocks_text)
def test_parse_supported_clocks_text(text: str) -> None:
    tables = nvidia_clocks.parse_supported_clocks(text)
    for bus, table in tables.items():
        assert bus.count(":") == 2 and isinstance(table, dict)
        for mem, gfx in table.items():
            assert isinstance(mem, int) and all(isinstance(g, int) for g in gfx)
