"""The one module that imports ``pynvml`` (nvidia-ml-py), lazily.

Facts this module relies on, with their sources: docs/hardware.md §5.1-5.2 (NVML calls in mW, return
codes, pynvml's exceptions and ``_v2`` gotcha).

Every NVML call goes through :meth:`Nvml.call`, which turns ``pynvml.NVMLError`` into
:class:`NvmlError` carrying the joulectl :class:`~joulectl.models.Status` from the one table
:data:`ERROR_STATUS`. All NVML power values are milliwatts and clocks MHz; the callers convert
through :mod:`joulectl.units`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from joulectl.models import Status

#: NVML return codes (by pynvml constant name) -> status of a failed write. Anything else: error.
ERROR_STATUS: dict[str, Status] = {
    "NVML_ERROR_NO_PERMISSION": Status.REFUSED,
    "NVML_ERROR_INVALID_ARGUMENT": Status.BLOCKED,
    "NVML_ERROR_NOT_SUPPORTED": Status.UNSUPPORTED,
    "NVML_ERROR_FUNCTION_NOT_FOUND": Status.UNSUPPORTED,
}


class NvmlError(Exception):
    """An NVML call failed: ``status`` from :data:`ERROR_STATUS`, ``code`` the NVML constant name."""

    def __init__(self, function: str, code: str, message: str, status: Status) -> None:
        self.function = function
        self.code = code
        self.status = status
        super().__init__(f"{function}: {message}")


class NvmlUnavailable(Exception):
    """pynvml is not installed, or ``nvmlInit`` failed (no driver, no library)."""


class Nvml:
    """A lazily initialised NVML session: ``with Nvml() as nv: nv.call("nvmlDeviceGetCount")``."""

    def __init__(self) -> None:
        self._lib: ModuleType | None = None

    @property
    def lib(self) -> ModuleType:
        if self._lib is None:
            raise NvmlUnavailable("NVML is not initialised")
        return self._lib

    def __enter__(self) -> Nvml:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - a runtime dependency
            raise NvmlUnavailable(f"pynvml (nvidia-ml-py) cannot be imported: {e}") from e
        self._lib = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            self._lib = None
            raise NvmlUnavailable(f"nvmlInit failed: {e}") from e
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lib is not None:
            try:
                self._lib.nvmlShutdown()
            except self._lib.NVMLError:
                pass
            self._lib = None

    def call(self, function: str, *args: Any) -> Any:
        """Call ``pynvml.<function>(*args)``; an NVML failure becomes :class:`NvmlError`."""
        lib = self.lib
        fn: Callable[..., Any] = getattr(lib, function)
        try:
            return fn(*args)
        except lib.NVMLError as e:
            code = self._code_name(e)
            raise NvmlError(function, code, str(e), ERROR_STATUS.get(code, Status.ERROR)) from e

    def try_call(self, function: str, *args: Any) -> tuple[Any, str | None]:
        """``call``, degrading a failure to ``(None, reason)`` for reads."""
        try:
            return self.call(function, *args), None
        except NvmlError as e:
            return None, str(e)

    def constant(self, name: str) -> Any:
        return getattr(self.lib, name)

    def architecture_name(self, arch: int) -> str | None:
        """``NVML_DEVICE_ARCH_HOPPER`` -> ``hopper`` (lowercase), by pynvml's own constants."""
        for name in dir(self.lib):
            if name.startswith("NVML_DEVICE_ARCH_") and getattr(self.lib, name) == arch:
                suffix = name[len("NVML_DEVICE_ARCH_"):].lower()
                return None if suffix == "unknown" else suffix
        return None

    def _code_name(self, err: Exception) -> str:
        value = getattr(err, "value", None)
        for name in dir(self.lib):
            if name.startswith("NVML_ERROR_") and getattr(self.lib, name) == value:
                return name
        return f"NVML_ERROR_{value}"


def text(value: Any) -> str | None:
    """A pynvml string result (bytes from older bindings, str from newer)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00").strip()
    return str(value).strip()
