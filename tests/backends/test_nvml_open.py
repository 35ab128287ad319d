"""NVML: a GPU whose handle cannot be opened is listed, blocked, and the others still work.

Written for a mutant that survived the backend tests (docs/TESTING.md): ``Control(False, ...)`` of
that GPU turned into ``Control(True, ...)``.
"""

from __future__ import annotations

from pathlib import Path

import pynvml
from pytest_mock import MockerFixture

from joulectl.backends import nvidia
from joulectl.host import Host
from tests.backends.test_nvml import NVML_ENV, Board, install


def test_a_gpu_that_cannot_be_opened_is_blocked(tmp_path: Path, mocker: MockerFixture) -> None:
    mocks = install(mocker, [Board("00000000:18:00.0"), Board("00000000:2A:00.0")])

    def by_index(i: int) -> str:
        if i == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return f"h{i}"

    mocks["by_index"].side_effect = by_index
    ok, lost = nvidia.discover(Host(str(tmp_path), env=NVML_ENV))
    assert (ok.bus_id, ok.control.available) == ("0000:18:00.0", True)
    assert (lost.index, lost.bus_id, lost.raw_model) == (1, "nvidia-index-1", None)
    assert lost.control.available is False
    assert lost.control.reason == "GPU 1 cannot be opened: nvmlDeviceGetHandleByIndex: GPU is lost"
