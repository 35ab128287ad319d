"""``model_preset_for``: the GPU_GOVERNOR_MODEL_PRESETS_JSON entry of a GPU's model (docs/governor.md),
keys matched as the catalog matches names, entries that are not objects ignored. Written for a
mutant of backends/base.py that survived (docs/TESTING.md)."""

from __future__ import annotations

from joulectl.backends.base import model_preset_for
from joulectl.models import Control, GpuDevice, PowerRange


def _h100() -> GpuDevice:
    model = "NVIDIA H100 80GB HBM3"
    return GpuDevice(index=0, bus_id="0000:18:00.0", vendor="nvidia", driver="nvidia", raw_model=model, model=model,
                     cap_range=PowerRange(200, 700, 700), current_cap_w=700, control=Control(True))


def test_the_entry_of_the_gpus_own_model_not_the_first_object() -> None:
    presets = {"NVIDIA A100-SXM4-80GB": {"sustained": {"graphics_mhz": 1200}},
               "NVIDIA-H100-80GB-HBM3-SHARED": {"sustained": {"graphics_mhz": 1500}}}
    assert model_preset_for(_h100(), presets) == {"sustained": {"graphics_mhz": 1500}}


def test_an_entry_that_is_not_an_object_is_no_entry() -> None:
    assert model_preset_for(_h100(), {"NVIDIA H100 80GB HBM3": 1500}) is None
    assert model_preset_for(_h100(), {"NVIDIA A100-SXM4-80GB": {"sustained": {"graphics_mhz": 1200}}}) is None
    assert model_preset_for(_h100(), {}) is None
    assert model_preset_for(_h100(), None) is None
