"""NVIDIA through nvidia-smi: ``-q -x`` in both schemas, tokens, MIG, tool failures, and ``-pl``
with one call per distinct value plus one readback query. The tool is a small script in
``<root>/bin`` that prints fixture output, as the real one would."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from joulectl.backends import nvidia
from joulectl.backends.base import BackendUnavailable
from joulectl.host import Host
from joulectl.models import Status
from joulectl.ops.discover import inventory

SMI_ENV = {"JOULECTL_NVIDIA_TRANSPORT": "smi", "PATH": "/usr/bin:/bin"}


def smi_host(root: Path, timeout: float = 3.0) -> Host:
    return Host(str(root), tool_timeout=timeout, env=SMI_ENV)


@pytest.mark.parametrize("schema", ["legacy", "new"])
def test_h100_x8_both_schemas(root: Path, trees: ModuleType, schema: str) -> None:
    trees.nvidia_h100_x8_smi(root, schema=schema)
    host = smi_host(root)
    inv = inventory(host)
    assert host.tool_calls == [("nvidia-smi", "-q", "-x")]  # one call for the whole inventory
    assert [g.bus_id for g in inv.gpus] == trees.H100_BUSES
    assert [g.index for g in inv.gpus] == list(range(8))
    g = inv.gpus[0]
    assert (g.vendor, g.driver, g.raw_model, g.model, g.catalog_key) == (
        "nvidia", "nvidia", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA_H100_SXM")
    assert (g.cap_range.min_w, g.cap_range.max_w, g.cap_range.default_w) == (200, 700, 700)
    assert (g.current_cap_w, g.power_w) == (700, 71.52)
    assert g.uuid == "GPU-00000000-1c1c-4f4f-8a8a-abcdef000000"
    assert (g.mig, g.persistence_mode, g.architecture) == ("disabled", "Enabled", "hopper")
    assert g.supported_clocks == {2619: trees.H100_GRAPHICS, 1593: [1410, 1200, 990, 345]}
    assert g.clocks == {"graphics_mhz": 1755, "memory_mhz": 2619}
    assert g.control.available
    assert g.governor_presets == ("auto", "efficient", "low", "peak")
    assert (inv.gpu_count, inv.power_domains, inv.gpu_errors) == (8, 8, {})


def test_limits_printed_as_tokens_are_unknown(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    gpus = [
        trees.smi_gpu_xml(trees.H100_BUSES[0], 0, schema="new"),
        trees.smi_gpu_xml(trees.H100_BUSES[1], 1, schema="new", product="NVIDIA L40S", architecture="Ada Lovelace",
                          limit="N/A", default="[Not Supported]", min_limit="[N/A]", max_limit="[N/A]", draw="[N/A]"),
    ]
    trees.smi_printing(root, trees.smi_document(gpus, schema="new"))
    ok, na = inventory(smi_host(root)).gpus
    assert ok.control.available
    assert (na.current_cap_w, na.power_w, na.cap_range.min_w, na.cap_range.max_w, na.cap_range.default_w) == (
        None, None, None, None, None)
    assert na.control.available is False
    assert na.control.reason == (
        "the power limit range is unknown (the driver reports N/A): no settable power limit")
    assert na.architecture == "ada_lovelace"


def test_mig_enabled_counts_physical_gpus(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    gpus = [trees.smi_gpu_xml(b, i, schema="new", mig="Enabled", mig_devices=7)
            for i, b in enumerate(trees.H100_BUSES[:2])]
    trees.smi_printing(root, trees.smi_document(gpus, schema="new"))
    inv = inventory(smi_host(root))
    assert inv.gpu_count == 2 and [g.mig for g in inv.gpus] == ["enabled", "enabled"]


def test_parse_value_is_liberal() -> None:
    assert nvidia.parse_value("700.00 W") == 700.0
    assert nvidia.parse_value(" 1980 MHz ") == 1980.0
    assert nvidia.parse_value("350") == 350.0
    for token in ("N/A", "[N/A]", "[Not Supported]", "Unknown Error", "", None):
        assert nvidia.parse_value(token) is None


def test_missing_tool_is_reported_per_vendor(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES)
    host = smi_host(root)
    assert nvidia.is_available(host)  # the PCI functions and /dev/nvidiactl say NVIDIA is there
    inv = inventory(host)
    assert inv.gpus == []
    assert inv.gpu_errors == {"nvidia": f"nvidia-smi not found in {root}/bin"}
    assert inv.cpu.sockets == 2  # everything else is still reported


def test_failing_tool(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
                           "exit 9\n")
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(smi_host(root))
    assert str(e.value) == ("nvidia-smi -q -x failed (exit 9): NVIDIA-SMI has failed because it couldn't "
                            "communicate with the NVIDIA driver.")


def test_garbage_output(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, 'echo "Segmentation fault"\n')
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(smi_host(root))
    assert str(e.value).startswith("nvidia-smi -q -x printed output that is not XML (")


def test_wrong_document(root: Path, trees: ModuleType) -> None:
    with pytest.raises(BackendUnavailable, match=r"printed <html>, not <nvidia_smi_log>"):
        nvidia.parse_smi_xml("<html/>")


def test_timeout(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    trees.smi_script(root, "exec sleep 5\n")
    with pytest.raises(BackendUnavailable) as e:
        nvidia.discover(smi_host(root, timeout=0.3))
    assert str(e.value) == "nvidia-smi timed out after 0.3 s"


# -- set_caps ---------------------------------------------------------------------------------------


def stateful_smi(root: Path, trees: ModuleType, buses: list[str], *, pl_body: str | None = None,
                 query_body: str | None = None) -> Path:
    """A fake nvidia-smi that keeps each GPU's power.limit in ``<root>/state/<bus>``, answers ``-pl``
    as the real tool does ("Power limit for GPU ... was set to ...", "All done."), logs every call
    and answers the ``--query-gpu=pci.bus_id,power.limit,enforced.power.limit`` readback from the state."""
    state = root / "state"
    state.mkdir(exist_ok=True)
    for b in buses:
        (state / trees.smi_id(b)).write_text("700.00\n")
    doc = trees.write(root, "/fixtures/q.xml", trees.smi_document(
        [trees.smi_gpu_xml(b, i, schema="new") for i, b in enumerate(buses)], schema="new"))
    default_pl = (
        '    old=$(cat "$S/$id"); echo "$w" > "$S/$id"\n'
        '    printf "Power limit for GPU %s was set to %s W from %s W.\\n" "$id" "$w" "$old"\n'
    )
    default_query = 'for f in "$S"/0*; do printf "%s, %s\\n" "$(basename "$f")" "$(cat "$f")"; done\n'
    body = (
        f'S="{state}"\necho "$*" >> "$S/calls"\n'
        'case "$1" in\n'
        f'  -q) cat "{doc}" ;;\n'
        '  -i)\n    w="$4"; IFS=,\n    for id in $2; do\n'
        f"{pl_body if pl_body is not None else default_pl}"
        '    done\n    echo "All done."\n    ;;\n'
        f'  --query-gpu=*)\n    {query_body if query_body is not None else default_query}    ;;\n'
        "esac\n"
    )
    trees.smi_script(root, body)
    return state


def test_set_caps_one_call_per_distinct_value_then_one_readback(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:4])
    state = stateful_smi(root, trees, trees.H100_BUSES[:4])
    host = smi_host(root)
    gpus = nvidia.discover(host)
    host.tool_calls.clear()
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0), (gpus[2], 500.0), (gpus[3], 420.0)])
    assert [(o.device, o.status, o.after_w) for o in out] == [
        (trees.H100_BUSES[0], Status.APPLIED, 420), (trees.H100_BUSES[1], Status.APPLIED, 420),
        (trees.H100_BUSES[2], Status.APPLIED, 500), (trees.H100_BUSES[3], Status.APPLIED, 420),
    ]
    assert host.tool_calls == [
        ("nvidia-smi", "-i", "00000000:18:00.0,00000000:2A:00.0,00000000:5D:00.0", "-pl", "420"),
        ("nvidia-smi", "-i", "00000000:3A:00.0", "-pl", "500"),
        ("nvidia-smi", "--query-gpu=pci.bus_id,power.limit,enforced.power.limit", "--format=csv,noheader,nounits"),
    ]
    assert (state / "00000000:3A:00.0").read_text() == "500\n"


def test_set_caps_not_supported_warning_exit_0(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    stateful_smi(root, trees, trees.H100_BUSES[:1], pl_body=(
        '    echo "Changing power management limit is not supported for GPU: $id."\n'
        '    echo "Treating as warning and moving on."\n'))
    host = smi_host(root)
    out = nvidia.set_caps(host, [(nvidia.discover(host)[0], 420.0)])
    assert out[0].status is Status.UNSUPPORTED
    assert out[0].message == ("nvidia-smi: Changing power management limit is not supported for GPU: "
                              "00000000:18:00.0.")
    assert not any("--query-gpu" in c[1] for c in host.tool_calls)  # nothing applied, nothing to read back


def test_set_caps_insufficient_permissions(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    state = stateful_smi(root, trees, trees.H100_BUSES[:2])
    host = smi_host(root)
    gpus = nvidia.discover(host)
    trees.smi_script(root, 'echo "Insufficient Permissions" >&2\nexit 4\n')
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0)])
    assert [o.status for o in out] == [Status.REFUSED, Status.REFUSED]
    assert out[0].message == "nvidia-smi: Insufficient Permissions (run as root (sudo joulectl ...))"
    assert (state / "00000000:18:00.0").read_text() == "700.00\n"


def test_set_caps_invalid_value_is_blocked_with_range(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    stateful_smi(root, trees, trees.H100_BUSES[:1], pl_body=(
        '    echo "Provided power limit $w.00 W is not a valid power limit which should be between 200.00 W and'
        ' 700.00 W for GPU $id"\n'
        '    echo "Terminating early due to previous errors."; exit 2\n'))
    host = smi_host(root)
    out = nvidia.set_caps(host, [(nvidia.discover(host)[0], 800.0)])
    assert (out[0].status, out[0].message) == (
        Status.BLOCKED, "nvidia-smi: 800 W is not a valid power limit (range 200.00-700.00 W)")


def test_set_caps_garbage_and_unexpected_exit_are_errors(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    stateful_smi(root, trees, trees.H100_BUSES[:1], pl_body='    echo "%%garbage%%"\n')
    host = smi_host(root)
    gpu = nvidia.discover(host)[0]
    out = nvidia.set_caps(host, [(gpu, 420.0)])
    assert (out[0].status, out[0].message) == (
        Status.ERROR, "nvidia-smi -pl printed no result for 0000:18:00.0: %%garbage%%")
    trees.smi_script(root, 'echo "Unknown Error" >&2\nexit 15\n')
    out = nvidia.set_caps(host, [(gpu, 420.0)])
    assert (out[0].status, out[0].message) == (Status.ERROR, "nvidia-smi -pl exited 15: Unknown Error")


def test_set_caps_timeout_is_an_error(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    stateful_smi(root, trees, trees.H100_BUSES[:1])
    gpu = nvidia.discover(smi_host(root))[0]
    trees.smi_script(root, "exec sleep 5\n")
    out = nvidia.set_caps(smi_host(root, timeout=0.3), [(gpu, 420.0)])
    assert (out[0].status, out[0].message) == (Status.ERROR, "nvidia-smi -pl: nvidia-smi timed out after 0.3 s")


def test_set_caps_readback_differs_or_unknown(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    stateful_smi(root, trees, trees.H100_BUSES[:2], query_body=(
        'printf "00000000:18:00.0, 400.00\\n00000000:2A:00.0, [N/A]\\n"\n'))
    host = smi_host(root)
    gpus = nvidia.discover(host)
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0)])
    assert (out[0].status, out[0].after_w, out[0].message) == (
        Status.ERROR, 400, "0000:18:00.0: read back 400 W after writing 420 W")
    assert (out[1].status, out[1].message) == (
        Status.APPLIED_UNVERIFIED, "written, readback: power.limit of 0000:2a:00.0 is unknown")


def test_power_management_not_supported(root: Path, trees: ModuleType) -> None:
    xml = trees.smi_gpu_xml(trees.H100_BUSES[0], 0, schema="legacy", product="Tesla T4", architecture="Turing",
                            limit="70.00 W", default="70.00 W", min_limit="60.00 W", max_limit="70.00 W")
    xml = xml.replace("<power_management>Supported</power_management>",
                      "<power_management>[Not Supported]</power_management>")
    (g,) = nvidia.parse_smi_xml(trees.smi_document([xml], schema="legacy"))
    assert g.control.available is False
    assert g.control.reason == "power management is not supported on this GPU"
    assert g.architecture == "turing"


def test_gpu_without_power_readings_or_bus_attribute(trees: ModuleType) -> None:
    doc = ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu>\n<product_name>NVIDIA A40</product_name>\n'
           "<pci><pci_bus_id>00000000:3B:00.0</pci_bus_id></pci>\n<supported_clocks>N/A</supported_clocks>\n"
           "</gpu>\n</nvidia_smi_log>\n")
    (g,) = nvidia.parse_smi_xml(doc)
    assert g.bus_id == "0000:3b:00.0"
    assert g.warnings == ["no power readings in nvidia-smi -q -x"]
    assert g.supported_clocks is None and g.control.available is False


def test_overflowing_numbers_read_as_unknown() -> None:
    """A 400-digit clock or limit is not a float (inf): unknown, like a token (was OverflowError)."""
    huge = "9" * 400
    assert nvidia.parse_value(huge) is None and nvidia.parse_value(f"{huge} MHz") is None
    doc = ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu id="00000000:07:00.0">\n'
           f"<product_architecture>{huge}</product_architecture>\n"
           f"<gpu_power_readings><current_power_limit>{huge} W</current_power_limit>"
           "<min_power_limit>200.00 W</min_power_limit><max_power_limit>700.00 W</max_power_limit>"
           "</gpu_power_readings>\n"
           f"<clocks><graphics_clock>{huge} MHz</graphics_clock><mem_clock>2619 MHz</mem_clock></clocks>\n"
           f"<supported_clocks><supported_mem_clock><value>{huge} MHz</value>"
           "<supported_graphics_clock>1980 MHz</supported_graphics_clock></supported_mem_clock>"
           "<supported_mem_clock><value>2619 MHz</value>"
           f"<supported_graphics_clock>{huge} MHz</supported_graphics_clock>"
           "<supported_graphics_clock>1980 MHz</supported_graphics_clock></supported_mem_clock>"
           "</supported_clocks>\n</gpu>\n</nvidia_smi_log>\n")
    (g,) = nvidia.parse_smi_xml(doc)
    assert g.clocks == {"memory_mhz": 2619}
    assert g.supported_clocks == {2619: [1980]}
    assert g.current_cap_w is None and g.architecture is None
    assert g.control.reason == "the power limit is unknown (the driver reports N/A): no settable power limit"


def test_overflowing_clock_does_not_fail_discover(root: Path, trees: ModuleType) -> None:
    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    xml = trees.smi_gpu_xml(trees.H100_BUSES[0], 0, schema="new", clocks={2619: [1980, 1755]})
    xml = xml.replace("<graphics_clock>1755 MHz<", f"<graphics_clock>{'1' * 400} MHz<")
    xml = xml.replace("<supported_graphics_clock>1980 MHz<", f"<supported_graphics_clock>{'2' * 400} MHz<")
    trees.smi_printing(root, trees.smi_document([xml], schema="new"))
    (g,) = inventory(smi_host(root)).gpus
    assert g.clocks == {"memory_mhz": 2619}
    assert g.supported_clocks == {2619: [1755]}
    assert g.control.available and g.current_cap_w == 700


@pytest.mark.parametrize("attr", [' id="  "', ' id=""', ""])
def test_blank_gpu_id_is_a_missing_id(attr: str) -> None:
    doc = (f'<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu><product_name>x</product_name></gpu>\n'
           f"<gpu{attr}><pci><pci_bus_id>  </pci_bus_id></pci></gpu>\n</nvidia_smi_log>\n")
    assert [g.bus_id for g in nvidia.parse_smi_xml(doc)] == ["nvidia-index-0", "nvidia-index-1"]


@pytest.mark.slow
def test_set_caps_round_trip_with_the_simulators_nvidia_smi(tmp_path: Path) -> None:
    from joulectl.cli import run

    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: sim.joulie.io/v1alpha1\nkind: ClusterSpec\nmetadata: {name: rt}\nspec:\n"
                    "  pools:\n  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}\n")
    assert run(["simulate", "render", str(spec), "--root", str(tmp_path / "sim")]) == 0
    host = smi_host(tmp_path / "sim" / "h100-0")
    gpus = nvidia.discover(host)
    assert len(gpus) == 8 and host.tool_calls == [("nvidia-smi", "-q", "-x")]
    host.tool_calls.clear()
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0), (gpus[2], 500.0), (gpus[3], 900.0)])
    assert [(o.status, o.after_w) for o in out[:3]] == [(Status.APPLIED, 420), (Status.APPLIED, 420),
                                                        (Status.APPLIED, 500)]
    assert (out[3].status, out[3].message) == (
        Status.BLOCKED, "nvidia-smi: 900 W is not a valid power limit (range 200.00-700.00 W)")
    assert len(host.tool_calls) == 4  # one -pl per distinct value, one readback
    assert [g.current_cap_w for g in nvidia.discover(host)[:4]] == [420, 420, 500, 700]


# -- the message table: real wordings of -pl -------------------------------------------------------


def test_set_caps_not_supported_in_current_scope_is_unsupported(root: Path, trees: ModuleType) -> None:
    """R535+ on a platform that owns the limit (cloud SXM): the "in current scope" wording, exit 0."""
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    stateful_smi(root, trees, trees.H100_BUSES[:2], pl_body=(
        '    echo "Changing power management limit is not supported in current scope for GPU: $id."\n'))
    host = smi_host(root)
    gpus = nvidia.discover(host)
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0)])
    assert [(o.status, o.message) for o in out] == [
        (Status.UNSUPPORTED, "nvidia-smi: Changing power management limit is not supported in current scope for "
                             "GPU: 00000000:18:00.0."),
        (Status.UNSUPPORTED, "nvidia-smi: Changing power management limit is not supported in current scope for "
                             "GPU: 00000000:2A:00.0."),
    ]


def test_set_caps_failed_insufficient_permissions_wording(root: Path, trees: ModuleType) -> None:
    """The unprivileged wording names the first GPU and stops (exit 4): the GPU it never reached is
    refused by the exit code."""
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    stateful_smi(root, trees, trees.H100_BUSES[:2])
    host = smi_host(root)
    gpus = nvidia.discover(host)
    trees.smi_script(root, 'echo "Failed to set power management limit for GPU 00000000:18:00.0: Insufficient '
                           'Permissions"\necho "Terminating early due to previous errors."\nexit 4\n')
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0)])
    assert [(o.status, o.message) for o in out] == [
        (Status.REFUSED, "nvidia-smi: Insufficient Permissions (run as root (sudo joulectl ...))")] * 2


def test_a_message_naming_the_gpu_beats_one_naming_none(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    stateful_smi(root, trees, trees.H100_BUSES[:2])
    host = smi_host(root)
    gpus = nvidia.discover(host)
    trees.smi_script(root, 'case "$1" in --query-gpu=*) echo "00000000:18:00.0, 420.00, 420.00"; exit 0;; esac\n'
                           'echo "Power limit for GPU 00000000:18:00.0 was set to 420.00 W from 700.00 W."\n'
                           'echo "Insufficient Permissions" >&2\nexit 4\n')
    out = nvidia.set_caps(host, [(gpus[0], 420.0), (gpus[1], 420.0)])
    assert [(o.status, o.after_w) for o in out] == [(Status.APPLIED, 420), (Status.REFUSED, None)]


def test_exit_3_without_a_message_is_unsupported(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:1])
    stateful_smi(root, trees, trees.H100_BUSES[:1])
    host = smi_host(root)
    gpu = nvidia.discover(host)[0]
    trees.smi_script(root, 'echo "The requested operation is not available on target device" >&2\nexit 3\n')
    (o,) = nvidia.set_caps(host, [(gpu, 420.0)])
    assert (o.status, o.message) == (
        Status.UNSUPPORTED, "nvidia-smi -pl exited 3: The requested operation is not available on target device")


def test_enforced_limit_below_the_request_is_applied_naming_it(root: Path, trees: ModuleType) -> None:
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    stateful_smi(root, trees, trees.H100_BUSES[:2], query_body=(
        'printf "00000000:18:00.0, 600.00, 500.00\\n00000000:2A:00.0, 600.00, 600.00\\n"\n'))
    host = smi_host(root)
    gpus = nvidia.discover(host)
    out = nvidia.set_caps(host, [(gpus[0], 600.0), (gpus[1], 600.0)])
    assert [(o.status, o.after_w, o.message) for o in out] == [
        (Status.APPLIED, 600, "requested 600 W; enforced limit 500 W (another limiter holds the GPU below it)"),
        (Status.APPLIED, 600, ""),
    ]


@pytest.mark.parametrize("schema", ["legacy", "new"])
def test_discover_reads_enforced_beside_requested(root: Path, trees: ModuleType, schema: str) -> None:
    """A real H100 host: -q shows Current 500.00 W, Requested 700.00 W."""
    from joulectl.ops.discover import node_hardware, table_text

    trees.intel_2s_host(root)
    trees.nvidia_pci(root, trees.H100_BUSES[:2])
    held = trees.smi_gpu_xml(trees.H100_BUSES[0], 0, schema=schema)
    tag = "current_power_limit" if schema == "new" else "enforced_power_limit"
    held = held.replace(f"<{tag}>700.00 W</{tag}>", f"<{tag}>500.00 W</{tag}>")
    free = trees.smi_gpu_xml(trees.H100_BUSES[1], 1, schema=schema)
    trees.smi_printing(root, trees.smi_document([held, free], schema=schema))
    inv = inventory(smi_host(root))
    assert [(g.current_cap_w, g.enforced_cap_w) for g in inv.gpus] == [(700, 500), (700, 700)]
    gpu = node_hardware(inv)["status"]["gpu"]
    assert (gpu["currentCapWatts"], gpu["enforcedCapWatts"]) == (700, 500)
    assert [(d["currentCapWatts"], d["enforcedCapWatts"]) for d in gpu["devices"]] == [(700, 500), (700, 700)]
    rows = [line for line in table_text(inv).splitlines() if "0000:18:00.0" in line or "0000:2a:00.0" in line]
    assert "700 W (enforced 500 W)" in rows[0]
    assert "enforced" not in rows[1]


def test_the_exit_code_breaks_a_tie_between_messages_naming_the_gpu() -> None:
    from joulectl.backends.nvidia_messages import decide

    text = ("Changing power management limit is not supported in current scope for GPU: 00000000:18:00.0.\n"
            "Failed to set power management limit for GPU 00000000:18:00.0: Insufficient Permissions\n")
    assert decide(text, 4, ["0000:18:00.0"])["0000:18:00.0"].status is Status.REFUSED
    assert decide(text, 0, ["0000:18:00.0"])["0000:18:00.0"].status is Status.UNSUPPORTED
    assert decide("All done.\n", 0, ["0000:18:00.0"]) == {"0000:18:00.0": None}


def test_every_row_of_the_message_table_cites_its_driver_range_and_source() -> None:
    from joulectl.backends.nvidia_messages import ROWS

    assert len({r.key for r in ROWS}) == len(ROWS)
    assert all(r.drivers and r.source and r.exits for r in ROWS)
    assert [r.drivers for r in ROWS if r.key == "not-supported-in-scope"] == ["R535 and later"]
    # nvidia-smi(1), RETURN VALUE: "0 - Success" with warnings included: the lines that follow a
    # warning or end every set command come with exit 0 (mutant backends/nvidia_messages.py:82,
    # the warning row's {0} -> {1}, of the 2 December sample: decide never reads the exit codes
    # of these rows, which decide nothing, so only the table shows it)
    exits = {r.key: r.exits for r in ROWS}
    assert exits["warning-moving-on"] == {0}
    assert exits["persistence-warning"] == {0}
    # "All done." ends a set command whether it succeeded (0) or stopped on an invalid argument
    # (2), an operation the device lacks (3) or missing permissions (4); "Terminating early due to
    # previous errors." only follows those failures (mutants nvidia_messages.py:79 and :80, each
    # code moved by one, of the 2 December bulk run)
    assert exits["all-done"] == {0, 2, 3, 4}
    assert exits["terminating"] == {2, 3, 4}


def test_the_exit_code_breaks_a_tie_between_two_messages_that_name_no_gpu() -> None:
    # nvidia-smi exits 0 with a "not supported" warning (and 3 when the operation is unavailable),
    # 4 for permissions (nvidia-smi(1), RETURN VALUE): the row whose exit codes hold the tool's wins
    from joulectl.backends import nvidia_messages

    text = "Insufficient Permissions\nSetting applications clocks is not supported\n"
    bus_id = "00000000:10:00.0"
    assert nvidia_messages.decide(text, 0, [bus_id])[bus_id].status is Status.UNSUPPORTED  # type: ignore[union-attr]
    assert nvidia_messages.decide(text, 3, [bus_id])[bus_id].status is Status.UNSUPPORTED  # type: ignore[union-attr]
    assert nvidia_messages.decide(text, 4, [bus_id])[bus_id].status is Status.REFUSED  # type: ignore[union-attr]


def test_the_message_table_is_frozen_and_hashable() -> None:
    # one table serves every call (and every device of a run): a row can neither be changed nor
    # be an unhashable mutable record (written for a survivor of the seed-6151 sample)
    import dataclasses

    from joulectl.backends.nvidia_messages import ROWS

    row = ROWS[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.key = "changed"  # type: ignore[misc]
    assert row.key == "power-limit-set"
    assert len(set(ROWS)) == len(ROWS)


def test_the_readback_takes_only_lines_of_a_bus_id_and_a_limit(root: Path, trees: ModuleType) -> None:
    # --query-gpu=pci.bus_id,power.limit,enforced.power.limit --format=csv,noheader,nounits prints
    # "<bus id>, <W>, <W>" per GPU; a line cut to the bus id, or a warning holding commas, is no
    # reading (kills backends/nvidia.py:532 `or` -> `and`)
    trees.smi_script(root, 'printf "00000000:18:00.0, 400.00, 400.00\\n00000000:2A:00.0\\n'
                           'WARNING: infoROM is corrupted at gpu 0000:2A:00.0, power readings may be off\\n"\n')
    values, problem = nvidia._smi_readback(Host(str(root)))
    assert (values, problem) == ({"0000:18:00.0": (400.0, 400.0)}, None)
