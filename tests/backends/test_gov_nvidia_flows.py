"""The NVIDIA governor's flows against nvidia-smi's own words: tables fetched once for every GPU,
dry runs and their intents, a preset refused half-way, operator locks in the before/after text,
undo targets and show's verdicts. nvidia-smi is an in-process script that prints what the real tool
prints (nvidia-smi(1); the message table of backends/nvidia_messages.py; public -lgc/-lmc
transcripts). Written for the survivors of a bulk mutation run over backends/gov_nvidia.py
(docs/TESTING.md, 2 December); each test names the mutants it was seen failing on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_mock import MockerFixture

from joulectl.backends import gov_nvidia, nvidia_messages
from joulectl.backends.base import OPERATOR
from joulectl.host import Host, ToolResult
from joulectl.models import Control, GpuDevice, PowerRange, Status
from joulectl.ops.journal import Intent, Journal
from tests.backends.test_nvml import Board, install

H100 = {2619: [1980, 1755, 1410, 1200, 345], 1593: [1200, 345]}
G0, G1 = "0000:10:00.0", "0000:11:00.0"


def _smi(bus: str) -> str:
    return "0000" + bus.upper()


class ScriptedSmi(Host):
    """A host whose nvidia-smi answers from ``gpus`` (bus -> table, locks, clocks) as the real
    tool does; ``answers[(bus, flag)]`` replaces the answer of the next such call: ``"refused"``
    or ``"unsupported"``."""

    def __init__(self, root: Path, gpus: dict[str, dict[str, Any]]) -> None:
        super().__init__(str(root))
        self.gpus = gpus
        self.answers: dict[tuple[str, str], str] = {}

    def run(self, argv: Any, *, timeout: float | None = None) -> ToolResult:
        argv = tuple(argv)
        self.tool_calls.append(argv)
        out, code = self._answer(list(argv[1:]))
        return ToolResult(argv, code, out, "", 0.0)

    def _answer(self, args: list[str]) -> tuple[str, int]:
        if args[:3] == ["-q", "-d", "SUPPORTED_CLOCKS"]:
            lines = ["==============NVSMI LOG==============", "", f"Attached GPUs : {len(self.gpus)}"]
            for bus, g in self.gpus.items():
                lines += [f"GPU {_smi(bus)}", "    Supported Clocks"]
                for mem in sorted(g["table"], reverse=True):
                    lines.append(f"        Memory                            : {mem} MHz")
                    lines += [f"            Graphics                      : {c} MHz" for c in g["table"][mem]]
            return "\n".join(lines) + "\n", 0
        if args and args[0].startswith("--query-gpu="):
            return "".join(f"{_smi(b)}, {g.get('sm', '[N/A]')}, {g.get('mem', '[N/A]')}, {g.get('util', 0)}\n"
                           for b, g in self.gpus.items()), 0
        bus, flag = args[1].lower()[4:], args[2]
        answer = self.answers.pop((bus, flag), None)
        if answer == "refused":
            return f"The current user does not have permission to change clocks for GPU {_smi(bus)}.\n" \
                   "Terminating early due to previous errors.\n", 4
        if answer == "unsupported":
            what = "memory" if flag in ("-lmc", "-rmc") else "gpu"
            return f"Setting locked {what} clocks is not supported for GPU {_smi(bus)}.\n" \
                   "Treating as warning and moving on.\nAll done.\n", 0
        g = self.gpus[bus]
        if flag in ("-lgc", "-lmc"):
            lo, hi = (int(x) for x in args[3].split(","))
            g["lgc" if flag == "-lgc" else "lmc"] = (lo, hi)
            kind = "GPU clocks set to \"(gpuClkMin" if flag == "-lgc" else "Memory clocks set to \"(memClkMin"
            key = "gpuClkMax" if flag == "-lgc" else "memClkMax"
            return f"{kind} {lo}, {key} {hi})\" for GPU {_smi(bus)}\nAll done.\n", 0
        g["lgc" if flag == "-rgc" else "lmc"] = None
        return "All done.\n", 0

    def locks(self, flag: str) -> list[tuple[str, ...]]:
        return [c for c in self.tool_calls if len(c) > 3 and c[3] == flag]


def gpu(bus: str = G0, *, table: dict[int, list[int]] | None = H100, model: str | None = "NVIDIA H100 80GB HBM3",
        clocks: dict[str, Any] | None = None) -> GpuDevice:
    return GpuDevice(index=int(bus[5:7], 16) - 0x10, bus_id=bus, vendor="nvidia", driver="nvidia",
                     raw_model="NVIDIA H100 80GB HBM3", model=model, cap_range=PowerRange(200, 700, 700),
                     current_cap_w=700, control=Control(True), architecture="hopper",
                     supported_clocks=dict(table) if table else None, clocks=dict(clocks or {}))


def node(tmp_path: Path, *buses: str) -> ScriptedSmi:
    return ScriptedSmi(tmp_path, {b: {"table": H100, "sm": 1980, "mem": 2619, "util": 90} for b in buses or (G0,)})


def test_gpus_without_tables_get_them_in_one_query(tmp_path: Path) -> None:
    # discover read no SUPPORTED_CLOCKS for either GPU: one `nvidia-smi -q -d SUPPORTED_CLOCKS`
    # gives both tables, and both get peak, their highest graphics clock
    host = node(tmp_path, G0, G1)
    rows = gov_nvidia.NvidiaGovernor(host).apply([gpu(G0, table=None), gpu(G1, table=None)], "peak", Journal())
    assert [(r.device, r.status, r.after) for r in rows] == [
        (G0, Status.APPLIED_UNVERIFIED, "graphics 1980 MHz"), (G1, Status.APPLIED_UNVERIFIED, "graphics 1980 MHz")]
    assert sum(1 for c in host.tool_calls if "SUPPORTED_CLOCKS" in c) == 1
    assert host.locks("-lgc") == [("nvidia-smi", "-i", "00000000:10:00.0", "-lgc", "1980,1980"),
                                  ("nvidia-smi", "-i", "00000000:11:00.0", "-lgc", "1980,1980")]


def test_gpus_without_tables_get_them_from_nvml_in_one_session(tmp_path: Path, mocker: MockerFixture) -> None:
    # through NVML the tables are asked GPU by GPU (nvmlDeviceGetSupportedMemoryClocks, then
    # ...GraphicsClocks per memory clock), for every GPU of the run that has none, at the first
    # need: both get peak (kills gov_nvidia.py:144 `[...] or [dev]` -> `and` and :150 `not in
    # known` -> `in`: only the first GPU's table was fetched, the second was blocked)
    mocks = install(mocker, [Board("00000000:10:00.0"), Board("00000000:11:00.0")])
    lock = mocker.patch("pynvml.nvmlDeviceSetGpuLockedClocks", autospec=True)
    backend = gov_nvidia.NvidiaGovernor(Host(str(tmp_path), env={"JOULECTL_NVIDIA_TRANSPORT": "nvml"}))
    rows = backend.apply([gpu(G0, table=None), gpu(G1, table=None)], "peak", Journal())
    # install()'s boards: memory 2619 MHz offers 1980, 1965 and 345 MHz
    assert [(r.device, r.status, r.after) for r in rows] == [
        (G0, Status.APPLIED_UNVERIFIED, "graphics 1980 MHz"), (G1, Status.APPLIED_UNVERIFIED, "graphics 1980 MHz")]
    assert [c.args for c in lock.call_args_list] == [("h0", 1980, 1980), ("h1", 1980, 1980)]
    assert mocks["mem_clocks"].call_count == 2


def test_a_sustained_preset_without_a_catalog_model_names_the_raw_model(tmp_path: Path) -> None:
    # (kills gov_nvidia.py:219, both `or` of `dev.model or dev.raw_model or ""` -> `and`)
    (row,) = gov_nvidia.NvidiaGovernor(node(tmp_path)).apply([gpu(model=None)], "sustained", Journal())
    assert (row.status, row.message) == (
        Status.BLOCKED, "no sustained clock for NVIDIA H100 80GB HBM3 in the model presets (--model-presets FILE)")


def test_a_preset_in_force_says_whether_it_was_verified(tmp_path: Path) -> None:
    # a second peak finds its lock journaled: "already in force" once show verified it, and the
    # hint while it is unverified (kills gov_nvidia.py:248 `isinstance(rec, dict) and ...` -> `or`)
    host, journal = node(tmp_path), Journal()
    backend = gov_nvidia.NvidiaGovernor(host)
    backend.apply([gpu()], "peak", journal)
    (row,) = backend.apply([gpu()], "peak", journal)
    assert (row.status, row.message) == (Status.UNCHANGED, "already set; " + gov_nvidia.UNVERIFIED_HINT)
    journal.record(G0, "governorPreset", None, {"preset": "peak", "status": "applied"}, vendor="nvidia",
                   command="governor")
    (row,) = backend.apply([gpu()], "peak", journal)
    assert (row.status, row.message) == (Status.UNCHANGED, "already in force")


def test_a_dry_run_lists_the_locks_it_would_set_as_intents(tmp_path: Path) -> None:
    # after low (graphics 345-1200 MHz and memory 1593 MHz locked by joulectl), efficient would
    # lock graphics 345-1410 MHz (75 % of 1980 is 1485: the highest clock under it) and undo the
    # memory lock: the write-ahead intents name the lock to set, not the undo (kills
    # gov_nvidia.py:252 `intents is not None` -> `is`, and :254 `w is not None` -> `is`)
    host, journal = node(tmp_path), Journal()
    backend = gov_nvidia.NvidiaGovernor(host)
    backend.apply([gpu()], "low", journal)
    assert (journal.current(G0, "gpuLockedClocks"), journal.current(G0, "memoryLockedClocks")) == (
        "345,1200", "1593,1593")
    rows, intents = backend.plan([gpu()], "efficient", journal)
    assert [(r.status, r.message) for r in rows] == [
        (Status.PLANNED, "would lock graphics 345-1410 MHz, undo joulectl's memory lock via nvidia-smi")]
    assert intents == [Intent(G0, "gpuLockedClocks", None, "345,1410", "nvidia", "NVIDIA H100 80GB HBM3")]


def test_low_refused_at_its_memory_lock_undoes_its_graphics_lock(tmp_path: Path) -> None:
    # low is -lgc then -lmc; the -lmc refused (exit 4) after the -lgc was taken: the preset is not
    # in force, so the graphics lock joulectl just set is reset (-rgc) and nothing is journaled
    # (kills gov_nvidia.py:271 `wrote = True` -> `False`: the graphics lock was left)
    host, journal = node(tmp_path), Journal()
    host.answers[(G0, "-lmc")] = "refused"
    (row,) = gov_nvidia.NvidiaGovernor(host).apply([gpu()], "low", journal)
    assert (row.status, row.message) == (
        Status.REFUSED, "memory clock lock: insufficient permissions; graphics lock set by joulectl undone")
    assert [c[3] for c in host.tool_calls if len(c) > 3] == ["-lgc", "-lmc", "-rgc"]
    assert journal.current(G0, "gpuLockedClocks") is None and host.gpus[G0]["lgc"] is None


def test_an_unsupported_lock_undoes_the_locks_joulectl_holds(tmp_path: Path) -> None:
    # peak replaced the operator's graphics lock 1410 MHz with 1980 MHz; low's -lgc then answers
    # "not supported" (exit 0, a warning): low cannot be put in force, so joulectl's peak lock is
    # undone too (back to the operator's 1410 MHz), and after says what is left, the operator's
    # locks as discover read them (kills gov_nvidia.py:274 `!= UNSUPPORTED and not wrote` -> `or`,
    # and :286/:287 `journal.current(...) or operator_lock(...)` -> `and`)
    host, journal = node(tmp_path), Journal()
    backend = gov_nvidia.NvidiaGovernor(host)
    dev = gpu(clocks={"locked_graphics": "1410,1410", "locked_memory": [1593, 1593]})
    backend.apply([dev], "peak", journal)
    host.answers[(G0, "-lgc")] = "unsupported"
    (row,) = backend.apply([dev], "low", journal)
    assert row.status is Status.UNSUPPORTED
    assert row.message == ("graphics clock lock: Setting locked gpu clocks is not supported for GPU "
                           "00000000:10:00.0; graphics lock set by joulectl undone")
    assert (row.before, row.after) == ("graphics 1980 MHz, memory 1593 MHz", "graphics 1410 MHz, memory 1593 MHz")
    assert [c[3:] for c in host.tool_calls if len(c) > 3] == [("-lgc", "1980,1980"), ("-lgc", "345,1200"),
                                                              ("-lgc", "1410,1410")]
    assert journal.current(G0, "gpuLockedClocks") is None


def test_an_undo_leaves_the_operators_locks_and_says_so(tmp_path: Path) -> None:
    # locks nvidia-smi shows that joulectl never set are the operator's: a reset leaves them and
    # describes them (kills gov_nvidia.py:304/:305 `journal.current(...) or operator_lock(...)` ->
    # `and`)
    dev = gpu(clocks={"locked_graphics": "1410,1410", "locked_memory": [1593, 1593]})
    (row,) = gov_nvidia.NvidiaGovernor(node(tmp_path)).undo([dev], Journal())
    assert (row.status, row.message, row.before, row.after) == (
        Status.UNCHANGED, f"graphics and memory clocks {OPERATOR}", "graphics 1410 MHz, memory 1593 MHz",
        "graphics 1410 MHz, memory 1593 MHz")


def test_an_undo_goes_back_to_what_each_lock_replaced(tmp_path: Path) -> None:
    # joulectl's peak replaced the operator's graphics lock 1410 MHz; the operator's memory lock
    # 1593 MHz was never joulectl's: the undo puts graphics back to 1410 MHz and keeps memory
    # (kills gov_nvidia.py:312 `d in ours` -> `not in`)
    host, journal = node(tmp_path), Journal()
    backend = gov_nvidia.NvidiaGovernor(host)
    dev = gpu(clocks={"locked_graphics": "1410,1410", "locked_memory": "1593,1593"})
    backend.apply([dev], "peak", journal)
    (row,) = backend.undo([dev], journal, dry_run=True)
    assert (row.status, row.after) == (Status.PLANNED, "graphics 1410 MHz, memory 1593 MHz")
    (row,) = backend.undo([dev], journal)
    assert (row.status, row.message, row.after) == (
        Status.APPLIED, "graphics locks set by joulectl undone", "graphics 1410 MHz, memory 1593 MHz")
    assert host.locks("-lgc")[-1] == ("nvidia-smi", "-i", "00000000:10:00.0", "-lgc", "1410,1410")


def test_show_names_the_raw_model_and_an_unreadable_clock(tmp_path: Path) -> None:
    # a GPU the catalog does not name shows the driver's name; a lock whose SM clock reads [N/A]
    # in the clock query is not verified (kills gov_nvidia.py:341 `dev.model or dev.raw_model` ->
    # `and`, and :356 `sample is None or sample.graphics_mhz is None` -> `and`)
    host, journal = node(tmp_path), Journal()
    backend = gov_nvidia.NvidiaGovernor(host)
    backend.apply([gpu(model=None)], "peak", journal)
    del host.gpus[G0]["sm"]
    (row,) = gov_nvidia.NvidiaGovernor(host).show([gpu(model=None)], journal)
    assert (row.model, row.set_by, row.in_force, row.message) == (
        "NVIDIA H100 80GB HBM3", "joulectl", "graphics 1980 MHz", "clocks not readable: lock not verified")


_SMI_BUS = "00000000:10:00.0"
#: One line of each deciding row of backends/nvidia_messages.py, as nvidia-smi prints it, with the
#: exit codes nvidia-smi(1) gives with it (RETURN VALUE: 0 success, warnings included; 2 invalid
#: argument; 3 not available on the target device; 4 insufficient permissions).
_LINES = {
    "power-limit-set": (f"Power limit for GPU {_SMI_BUS} was set to 420.00 W from 700.00 W.", (0,)),
    "gpu-clocks-set": (f'GPU clocks set to "(gpuClkMin 1410, gpuClkMax 1410)" for GPU {_SMI_BUS}', (0,)),
    "memory-clocks-set": (f'Memory clocks set to "(memClkMin 1593, memClkMax 1593)" for GPU {_SMI_BUS}', (0,)),
    "not-supported-in-scope": (f"Changing power management limit is not supported in current scope for GPU "
                               f"{_SMI_BUS}.", (0, 3)),
    "not-supported": (f"Setting locked memory clocks is not supported for GPU {_SMI_BUS}.", (0, 3)),
    "invalid-power-limit": (f"Provided power limit 900.00 W is not a valid power limit which should be between "
                            f"200.00 W and 700.00 W for GPU {_SMI_BUS}", (2,)),
    "failed-insufficient-permissions": (f"Failed to set power management limit for GPU {_SMI_BUS}: "
                                        "Insufficient Permissions", (4,)),
    "no-permission-to-change-clocks": (f"The current user does not have permission to change clocks for GPU "
                                       f"{_SMI_BUS}.", (4,)),
}
_GENERIC = {  # rows that name no GPU
    "insufficient-permissions": ("Insufficient Permissions", (4,)),
    "not-supported-any": ("Operation not supported", (0, 3)),
}


def _rival(exits: tuple[int, ...], lines: dict[str, tuple[str, tuple[int, ...]]]) -> str:
    """A line of another row that names the GPU as ``exits``' row does and agrees with none of them."""
    return next(text for text, theirs in lines.values() if not set(theirs) & set(exits))


@pytest.mark.parametrize(("key", "generic"), [(k, False) for k in _LINES] + [(k, True) for k in _GENERIC])
def test_the_exit_code_decides_between_two_messages_for_one_gpu(key: str, generic: bool) -> None:
    # the tie-break of nvidia_messages.decide: of two messages for one GPU the one whose exit codes
    # include the tool's wins, wherever it stands (kills each row's exit-code mutants, e.g.
    # nvidia_messages.py:53 power-limit-set {0} -> {1}, :59 memory-clocks-set {0} -> {1})
    lines = _GENERIC if generic else _LINES
    text, exits = lines[key]
    for code in exits:
        out = nvidia_messages.decide(_rival(exits, lines) + "\n" + text + "\n", code, [G0])[G0]
        assert out is not None and (out.row, out.line) == (key, text), code
