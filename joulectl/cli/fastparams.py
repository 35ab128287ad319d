"""Plain option values without pydantic: keeps every command's start-up near ``import typer``.

typer 0.29 coerces every option value through a pydantic ``TypeAdapter``; the first one imports
pydantic (and pydantic-core, asyncio ...), which costs more than importing typer itself, on every
command. joulectl's options are plain ``str``, ``int``, ``float`` and ``bool`` (optionally
``| None``, or lists of them), so :func:`install` gives such parameters a small coercer with the same
results, and error messages that read as one line ("'x' is not a whole number", "0 is less than the
minimum 1"). Anything else (lists, enums, paths, custom parsers or click types) keeps typer's own
coercion. If typer's internals are not what this expects, nothing is installed. It also keeps
each function's signature as typer reads it, which typer would read twice per command.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

_PLAIN = (bool, int, float, str)
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _plain_type(annotation: Any) -> tuple[type, bool] | None:
    """(``str``/``int``/``float``/``bool``, is a list) for ``T``, ``T | None``, ``list[T]`` and
    ``list[T] | None``; None for anything else."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            return None
        annotation = rest[0]
        origin = get_origin(annotation)
    if annotation in _PLAIN:
        return annotation, False
    if origin is list:
        (item,) = get_args(annotation) or (None,)
        if item in _PLAIN:
            return item, True
    return None


def _fmt(bound: Any) -> str:
    return str(bound)


def _shown(raw: Any, value: Any) -> str:
    """A value in an error as the user typed it."""
    return raw if isinstance(raw, str) else str(value)


def install() -> bool:
    """Route plain parameters of every typer command to the fast coercer. Returns whether it did."""
    try:
        from typer import BadParameter
        from typer._coercion import RuntimeParam
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - another typer layout: keep its coercion
        return False
    original = getattr(_TyperParameter, "get_runtime_param", None)
    if original is None or getattr(original, "_joulectl_fast", False):
        return False

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):  # type: ignore[misc]
        target: type
        is_list: bool = False

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.is_list:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self._one(item, param, ctx) for item in items]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            out = self._convert(value, param, ctx)
            info = self.parameter_info
            if self.target in (int, float):
                if info.min is not None and out < info.min:
                    if info.clamp:
                        return type(out)(info.min)
                    raise BadParameter(f"{_shown(value, out)} is less than the minimum {_fmt(info.min)}",
                                       ctx=ctx, param=param)
                if info.max is not None and out > info.max:
                    if info.clamp:
                        return type(out)(info.max)
                    raise BadParameter(f"{_shown(value, out)} is more than the maximum {_fmt(info.max)}",
                                       ctx=ctx, param=param)
            return out

        def _convert(self, value: Any, param: Any, ctx: Any) -> Any:
            t = self.target
            if t is str:
                return value if isinstance(value, str) else str(value)
            if t is bool:
                if isinstance(value, bool):
                    return value
                text = str(value).strip().lower()
                if text in _TRUE:
                    return True
                if text in _FALSE:
                    return False
                raise BadParameter(f"{value!r} is not a boolean (true or false)", ctx=ctx, param=param)
            if isinstance(value, bool):
                return t(value)
            if t is int:
                if isinstance(value, int):
                    return value
                try:
                    return int(str(value).strip())
                except ValueError:
                    raise BadParameter(f"{value!r} is not a whole number", ctx=ctx, param=param) from None
            if isinstance(value, (int, float)):
                return float(value)
            try:
                return float(str(value).strip())
            except ValueError:
                raise BadParameter(f"{value!r} is not a number", ctx=ctx, param=param) from None

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            info = desc.parameter_info
            plain_type = _plain_type(desc.annotation)
            plain = (
                plain_type is not None
                and desc.file_annotation is None
                and getattr(info, "parser", None) is None
                and getattr(info, "click_type", None) is None
                and not getattr(info, "count", False)
                and not desc.is_choice
            )
            if plain and plain_type is not None:
                self._runtime_param = PlainRuntimeParam(
                    parameter_info=info, annotation=desc.annotation, target=plain_type[0], is_list=plain_type[1]
                )
            else:
                return original(self)
        return self._runtime_param

    get_runtime_param._joulectl_fast = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    _memoize_signatures()
    return True


def _memoize_signatures() -> None:
    """typer reads a command's signature (``inspect.signature`` and ``get_type_hints``) twice when
    it builds the command, and the group callback's twice too: 0.4-0.6 ms of a cap. The result
    depends on the function alone and typer only reads it, so each function's is kept for the
    process. Nothing is changed where typer's layout is not the one this expects."""
    import typer.main as typer_main

    read = getattr(typer_main, "get_params_from_function", None)
    if read is None or getattr(read, "_joulectl_memo", False):
        return
    kept: dict[Any, Any] = {}

    def get_params_from_function(func: Any) -> Any:
        params = kept.get(func)
        if params is None:
            params = kept[func] = read(func)
        return params

    get_params_from_function._joulectl_memo = True  # type: ignore[attr-defined]
    setattr(typer_main, "get_params_from_function", get_params_from_function)  # noqa: B010 - not exported
