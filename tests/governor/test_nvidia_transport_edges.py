"""The NVIDIA clock transports and clock tables at their edges: nvidia-smi's failure words, cut
lines and malformed tables, NVML's utilization and a clock it cannot read, the catalog fallback and
a preset's message. Written for the survivors of a bulk mutation run over
backends/nvidia_clock_io.py and backends/nvidia_clocks.py (docs/TESTING.md, 2 December); each
test names the mutant it was seen failing on."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from govkit import nvidia_gpu
from pytest_mock import MockerFixture

from joulectl.backends.nvidia_clock_io import NvmlTransport, SmiTransport
from joulectl.backends.nvidia_clocks import (
    ClockLock,
    ClockSample,
    PresetBlocked,
    architecture_key,
    parse_supported_clocks,
    plan_preset,
)
from joulectl.models import Status
from tests.backends.test_nvml import Board, install
from tests.governor.test_nvidia import _CannedSmi

HANDLE = "Unable to determine the device handle for GPU 00000000:10:00.0: Unknown Error"


@pytest.mark.parametrize(("out", "detail"), [
    # nvidia-smi prints its errors on stdout (exit 255: "other errors", nvidia-smi(1) RETURN VALUE)
    (HANDLE + "\n", HANDLE),
    # a tool that fails without a word: the exit code is what is left to say
    ("", "exit 255"),
])
def test_a_failed_clock_lock_says_the_tools_first_words(tmp_path: Path, out: str, detail: str) -> None:
    # mutant backends/nvidia_clock_io.py:74 (`_first_line(res.stdout) or f"exit ..."` -> `and`:
    # the stdout line replaced by "exit 255", and an empty detail for a silent tool)
    host = _CannedSmi(str(tmp_path), out, code=255)
    res = SmiTransport(host).lock(nvidia_gpu(0), "graphics", ClockLock(1980, 1980))
    assert (res.status, res.message) == (Status.ERROR, f"graphics clock lock: nvidia-smi failed (exit 255): {detail}")


def test_a_clock_sample_line_cut_short_is_skipped(tmp_path: Path) -> None:
    # a line of two cells (bus id and SM clock, the rest lost) holds no memory clock: it is left
    # out, the next GPU's line is read (mutant backends/nvidia_clock_io.py:105, `len(cells) < 3 or
    # ...` -> `and`: the short line was taken and raised IndexError)
    host = _CannedSmi(str(tmp_path), "00000000:10:00.0, 1980\n00000000:11:00.0, 1755, 2619, 12\n")
    assert SmiTransport(host).sample_clocks([]) == {"0000:11:00.0": ClockSample(1755, 2619, 12)}


def test_nvml_clock_samples_carry_the_utilization(mocker: MockerFixture) -> None:
    # nvmlDeviceGetUtilizationRates(handle).gpu: percent of time a kernel ran (NVML API reference,
    # nvmlUtilization_t); a GPU whose rates or SM clock NVML cannot give has them unknown (mutants
    # backends/nvidia_clock_io.py:195, `util is not None` -> `is`, and :197, `gpu_pct is None` ->
    # `is not`: the utilization was always unknown, or raised TypeError)
    mocks = install(mocker, [Board("00000000:10:00.0"), Board("00000000:11:00.0")])

    def clock(h: str, kind: int) -> int:
        if h == "h1" and kind == pynvml.NVML_CLOCK_SM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1980 if kind == pynvml.NVML_CLOCK_SM else 2619

    def rates(h: str) -> SimpleNamespace:
        if h == "h1":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=37, memory=5)

    mocks["clock"].side_effect = clock
    mocker.patch("pynvml.nvmlDeviceGetUtilizationRates", autospec=True, side_effect=rates)
    out = NvmlTransport().sample_clocks([nvidia_gpu(0), nvidia_gpu(1)])
    assert out == {"0000:10:00.0": ClockSample(1980, 2619, 37), "0000:11:00.0": ClockSample(None, 2619, None)}
    assert (out["0000:10:00.0"].busy, out["0000:11:00.0"].busy) == (True, None)


def test_a_model_the_catalog_knows_only_by_its_raw_name_has_its_architecture() -> None:
    # discover gave no architecture and its model name is not a catalog key, but the raw name
    # nvidia-smi printed is (the H100 SXM's "NVIDIA H100 80GB HBM3": Hopper) (mutant
    # backends/nvidia_clocks.py:108, `gpu(model) or gpu(raw_model)` -> `and`)
    gpu = dataclasses.replace(nvidia_gpu(0, arch=None, model="NVIDIA H100 80GB HBM3"), model="H100 (renamed)")
    assert architecture_key(gpu) == "hopper"


def test_a_graphics_line_without_a_clock_or_a_memory_clock_is_skipped() -> None:
    # a "Graphics : N/A" line, and a Graphics line ahead of the section's first Memory line, give
    # no clock (real SUPPORTED_CLOCKS output lists each graphics clock under its memory clock)
    # (mutants backends/nvidia_clocks.py:155, `key == "Graphics" and num and mem is not None`,
    # either `and` -> `or`: the first raised AttributeError, the second KeyError)
    text = ("GPU 00000000:10:00.0\n    Supported Clocks\n            Graphics : 1410 MHz\n"
            "        Memory : 2619 MHz\n            Graphics : N/A\n            Graphics : 1980 MHz\n")
    assert parse_supported_clocks(text) == {"0000:10:00.0": {2619: [1980]}}


def test_a_sustained_preset_on_an_unsupported_memory_clock_lists_them_highest_first() -> None:
    # the message lists the GPU's memory clocks as SUPPORTED_CLOCKS does, highest first (mutant
    # backends/nvidia_clocks.py:193, `sorted(table, reverse=True)` -> `reverse=False`)
    table = {405: [645, 210], 9001: [2520, 210], 5001: [1890, 210]}
    with pytest.raises(PresetBlocked) as err:
        plan_preset(table, "sustained", {"graphicsMHz": 1890, "memoryMHz": 6000})
    assert str(err.value) == "memoryMHz 6000 of the model preset is not a supported memory clock (9001, 5001, 405)"


@pytest.mark.parametrize(("text", "lock"), [
    ("1980", ClockLock(1980, 1980)),        # one clock: a lock at it
    ("1980,210", ClockLock(210, 1980)),     # either order
    (" 210 , 1980 ", ClockLock(210, 1980)),
    ("210,1410,1980", None), ("fast", None), ("", None),
])
def test_a_journaled_clock_lock_is_read_back(text: str, lock: ClockLock | None) -> None:
    # the journal keeps a lock as nvidia-smi -lgc takes it, "min,max"; a single clock is the lock
    # -lgc 1980 sets (min = max) (unreached before: backends/nvidia_clocks.py:61)
    assert ClockLock.parse(text) == lock
