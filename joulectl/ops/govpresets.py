"""Governor presets input: the model presets map of ``sustained`` and which target a preset names.

The map comes from ``--model-presets FILE`` (alias ``--governor-model-presets``) or
``$GPU_GOVERNOR_MODEL_PRESETS_JSON``: ``{"<product>": {"graphicsMHz": N[, "memoryMHz": M]}}``.
"""

from __future__ import annotations

import os
from typing import Any

from joulectl.errors import InputError
from joulectl.models import CPU_PRESETS, GPU_PRESETS

MODEL_PRESETS_ENV = "GPU_GOVERNOR_MODEL_PRESETS_JSON"


def parse_model_presets(data: Any, label: str) -> dict[str, dict[str, int]]:
    """Validate a model presets map: ``{"<product>": {"graphicsMHz": N[, "memoryMHz": M]}}``.

    Keys are GPU products without GFD suffixes (``NVIDIA H100 80GB HBM3``); a bare number is
    shorthand for ``{"graphicsMHz": N}``. Bad input is one :class:`InputError` naming the field.
    """
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", file=label)
    out: dict[str, dict[str, int]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key.strip():
            raise InputError("a model name must be a non-empty string", file=label, field=repr(key))
        entry = {"graphicsMHz": value} if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(entry, dict):
            raise InputError(
                f"expected an object like {{\"graphicsMHz\": 1755}}, found {type(value).__name__}",
                file=label, field=key,
            )
        unknown = sorted(set(entry) - {"graphicsMHz", "memoryMHz"})
        if unknown:
            raise InputError("unknown field (known: graphicsMHz, memoryMHz)", file=label,
                             field=f"{key}.{unknown[0]}")
        if "graphicsMHz" not in entry:
            raise InputError("missing (the sustained graphics clock in MHz)", file=label,
                             field=f"{key}.graphicsMHz")
        clean: dict[str, int] = {}
        for name in ("graphicsMHz", "memoryMHz"):
            if name not in entry:
                continue
            v = entry[name]
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InputError(f"must be a positive whole number of MHz, found {v!r}", file=label,
                                 field=f"{key}.{name}")
            clean[name] = v
        out[key] = clean
    return out


def load_model_presets(path: str | None) -> dict[str, dict[str, int]] | None:
    """The model presets from ``--model-presets FILE``, else ``$GPU_GOVERNOR_MODEL_PRESETS_JSON``
    (the map itself as JSON text), else None."""
    if path:
        from joulectl.yamlio import load_json_map

        label = "<stdin>" if path == "-" else path
        return parse_model_presets(load_json_map(path, what="model presets file"), label)
    text = os.environ.get(MODEL_PRESETS_ENV, "").strip()
    if not text:
        return None
    from joulectl.yamlio import parse_json_map

    return parse_model_presets(parse_json_map(text, f"${MODEL_PRESETS_ENV}"), f"${MODEL_PRESETS_ENV}")


def resolve_target(preset: str, gpu: bool, cpu: bool) -> str:
    """``gpu`` or ``cpu``: the requested target whose presets include ``preset`` (exit 2 else)."""
    if gpu and preset in GPU_PRESETS:
        return "gpu"
    if cpu and preset in CPU_PRESETS:
        return "cpu"
    if gpu and not cpu:
        raise InputError(f"unknown GPU preset {preset!r} (GPU presets: {', '.join(GPU_PRESETS)})",
                         field="PRESET")
    if cpu and not gpu:
        raise InputError(f"unknown CPU preset {preset!r} (CPU presets: {', '.join(CPU_PRESETS)})",
                         field="PRESET")
    raise InputError(
        f"unknown preset {preset!r} (GPU presets: {', '.join(GPU_PRESETS)}; "
        f"CPU presets: {', '.join(CPU_PRESETS)})",
        field="PRESET",
    )
