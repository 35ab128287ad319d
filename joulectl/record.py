"""``record``: dataclasses whose methods are not compiled at import, for the start-up path.

``dataclasses.dataclass`` writes ``__init__``, ``__repr__``, ``__eq__`` (and, for frozen classes,
``__setattr__``, ``__delattr__`` and ``__hash__``) as source text and compiles each with ``exec``
when the class is created: about 0.5 ms per class. The ~27 data classes that ``joulectl cap``
imports cost ~15 ms that way, a tenth of a cron run (docs/PERFORMANCE.md). ``record`` lets
``dataclasses`` do the field bookkeeping (so ``fields``, ``asdict``, ``replace`` and subclassing
work unchanged) with every generated method turned off, then installs generic methods that read
the field list at call time: the same semantics, no compiler at import, a few microseconds more
per instance. A class of plain fields (no ``ClassVar``, ``KW_ONLY`` or ``InitVar``, no frozen
dataclass base) does not even go through ``dataclass``: the record sets the same
``__dataclass_fields__`` (``dataclasses.Field`` objects), ``__dataclass_params__`` and
``__match_args__`` itself, in half the time (a test holds every record of the package to what
``dataclass`` makes of it). Use it on modules a cron-run command imports; the rest of the package
keeps plain ``dataclass``. Type checkers see ``dataclasses.dataclass`` itself.

Supported: ``frozen``; ``field(default=..., default_factory=..., init=, repr=, compare=, hash=,
kw_only=)``; ``ClassVar`` annotations; ``__post_init__``; methods defined in the class body win
over the generated ones, as with ``dataclass``. Not supported: ``order``, ``slots``, ``InitVar``
(the decorator takes ``frozen`` only; use ``dataclass`` for the rest), and a frozen ``dataclass``
subclass of a frozen record (``dataclass`` sees a non-frozen base: the record does its freezing
itself, so that ``dataclass`` compiles no ``__setattr__``).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:

    def record(cls: type | None = None, /, *, frozen: bool = False) -> Any:
        """Decorate ``cls`` like ``@dataclass`` / ``@dataclass(frozen=True)``."""

        def wrap(c: type) -> type:
            return _process(c, frozen)

        return wrap if cls is None else wrap(cls)


__all__ = ["maker", "record"]

_T = TypeVar("_T")
_MISSING: Any = dataclasses.MISSING
#: The leading name of a string annotation, as dataclasses reads it (``_MODULE_IDENTIFIER_RE``).
_LEADING = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)")


def _special(value: Any) -> bool:
    """Whether a name an annotation starts with is one dataclass treats apart: ``ClassVar``,
    ``InitVar`` or ``KW_ONLY`` (its ``_is_classvar``, ``_is_initvar`` and ``_is_kw_only``)."""
    return (value is typing.ClassVar or value is dataclasses.InitVar or value is dataclasses.KW_ONLY
            or type(value) is dataclasses.InitVar
            or (type(value) is getattr(typing, "_GenericAlias", None) and getattr(value, "__origin__", None)
                is typing.ClassVar))


def _names_special(annotation: str, ns: dict[str, Any]) -> bool:
    """Whether the string ``annotation``'s leading name (``ClassVar``, ``dataclasses.KW_ONLY``...),
    looked up in the class's module namespace ``ns`` as dataclass looks it up, is :func:`_special`."""
    match = _LEADING.match(annotation)
    if match is None:
        return False
    head, leading = match.group(1), match.group(2)
    owner = ns.get(head) if head else None  # ``dataclasses.KW_ONLY``: looked up in that module
    return _special(ns.get(leading)) or (isinstance(owner, type(sys)) and _special(vars(owner).get(leading)))


def _plain_annotations(cls: type) -> dict[str, str]:
    """Replace, in ``cls.__annotations__``, each string annotation whose leading name is none of
    those :func:`_special` names by a non-string (``object``), and return the originals.

    ``dataclass`` tests every string annotation three times (ClassVar, InitVar, KW_ONLY) by a
    regular expression and lookups in the class's module: a third of a record's cost at import,
    for annotations (``from __future__ import annotations``) that are plain types. On a
    non-string it tests identities only; for an annotation left a string here it does its own
    tests as before. Nothing is replaced for a class whose module is not loaded."""
    module = sys.modules.get(cls.__module__)
    annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063 - the dict itself, edited in place
    if module is None or not isinstance(annotations, dict):
        return {}
    ns = module.__dict__
    swapped: dict[str, str] = {}
    for name, annotation in annotations.items():
        if not isinstance(annotation, str) or _names_special(annotation, ns):
            continue
        swapped[name] = annotation
        annotations[name] = object
    return swapped


#: What ``dataclass(init=False, repr=False, eq=False)`` leaves in ``__dataclass_params__``, the
#: same for every record (a record does its own freezing): taken from one class at first use.
_PARAMS: list[Any] = []
_FIELD: Any = getattr(dataclasses, "_FIELD", None)
#: dataclass's test of a default that must be a factory: an unhashable value (3.11+), or a list,
#: dict or set (3.10).
_UNHASHABLE_DEFAULTS = sys.version_info >= (3, 11)


def _params() -> Any:
    if not _PARAMS:
        @dataclasses.dataclass(init=False, repr=False, eq=False)
        class Params:
            """Documented: else dataclass builds the docstring by inspect.signature (2 ms)."""

        _PARAMS.append(Params.__dataclass_params__)  # type: ignore[attr-defined]
    return _PARAMS[0]


def _plain_fields(cls: type) -> tuple[dataclasses.Field[Any], ...] | None:
    """Set ``cls``'s ``__dataclass_fields__``, ``__dataclass_params__`` and ``__match_args__`` as
    ``dataclass(cls, init=False, repr=False, eq=False)`` would, and return its fields; None (and
    nothing changed) where the class has anything but plain fields (an annotation :func:`_special`
    names or that ``dataclass`` would test as one, a dataclass base that is frozen or whose fields
    are not plain). ``dataclass`` itself costs about 50 us a class in tests and lookups that plain
    fields do not need: a few milliseconds of every command's start-up (issue 20)."""
    if _FIELD is None:  # a Python whose dataclasses lack the marker: dataclass does it
        return None
    own = cls.__dict__
    annotations = own.get("__annotations__", {})
    if not isinstance(annotations, dict) or "__slots__" in own or type(cls) is not type:
        return None  # (a metaclass, an ABC's among them, gets dataclass's own treatment)
    all_fields: dict[str, dataclasses.Field[Any]] = {}
    for base in cls.__mro__[-1:0:-1]:
        base_fields = base.__dict__.get("__dataclass_fields__")
        if base_fields is None:
            continue
        params = base.__dict__.get("__dataclass_params__")
        if params is None or params.frozen or any(f._field_type is not _FIELD for f in base_fields.values()):
            return None
        all_fields.update(base_fields)
    module = sys.modules.get(cls.__module__)
    ns = module.__dict__ if module is not None else {}
    plain: set[str] = set()  # string annotations found plain (a class repeats ``str | None``)
    for annotation in annotations.values():
        if isinstance(annotation, str):
            if annotation in plain:
                continue
            plain.add(annotation)
            if module is None or _names_special(annotation, ns):
                return None
        elif _special(annotation):
            return None
    field_type, field_class, unhashable_rule = _FIELD, dataclasses.Field, _UNHASHABLE_DEFAULTS
    for name, annotation in annotations.items():
        default = getattr(cls, name, _MISSING)  # inherited too, as dataclass reads it
        in_class = isinstance(default, field_class)
        f = default if in_class else dataclasses.field(default=default)
        f.name = name
        f.type = annotation
        f._field_type = field_type  # type: ignore[attr-defined]
        if f.kw_only is _MISSING:  # type: ignore[attr-defined]
            f.kw_only = False  # type: ignore[attr-defined]
        value = f.default
        if value is not _MISSING and (value.__class__.__hash__ is None if unhashable_rule
                                      else isinstance(value, (list, dict, set))):
            raise ValueError(f"mutable default {type(value)} for field {name} is not allowed: use default_factory")
        all_fields[name] = f
        if in_class:  # the Field in the class body gives way to its default, as dataclass does
            if value is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value)
    for name, value in own.items():
        if isinstance(value, field_class) and name not in annotations:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    cls.__dataclass_fields__ = all_fields  # type: ignore[attr-defined]
    cls.__dataclass_params__ = _params()  # type: ignore[attr-defined]
    fields = tuple(all_fields.values())
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(f.name for f in fields if f.init and not f.kw_only)  # type: ignore[misc,attr-defined]
    return fields


def _process(cls: type, frozen: bool) -> type:
    own = cls.__dict__
    qualname = cls.__qualname__
    class_hash = own.get("__hash__", _MISSING)
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in own))
    undocumented = not own.get("__doc__")
    if undocumented:  # else dataclass builds the docstring with inspect.signature, slowly
        cls.__doc__ = qualname
    own_init = "__init__" in own  # (``own`` is the class's live namespace: read before methods go in)
    fields = _plain_fields(cls)
    if fields is None:  # a ClassVar, KW_ONLY, InitVar or a frozen dataclass base: dataclass's own bookkeeping
        swapped = _plain_annotations(cls)
        try:
            dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # fields only: nothing is compiled
        finally:
            cls.__annotations__.update(swapped)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        for f in fields:
            if f.name in swapped:
                f.type = swapped[f.name]
    # What the generated methods read, in one pass over the fields (a record class's creation is
    # part of every command's start-up): ``plan`` holds (name, default, factory) in field order,
    # fields outside __init__ only when they have a factory (a plain default stays a class
    # attribute, as dataclass leaves it).
    init_list: list[str] = []
    positional_list: list[str] = []
    plan_list: list[tuple[str, Any, Any]] = []
    repr_list: list[str] = []
    compare_list: list[str] = []
    hash_list: list[str] = []
    every_init = True  # every planned field a keyword of __init__ (none filled by a factory alone)
    for f in fields:
        name = f.name
        if f.init:
            init_list.append(name)
            if not f.kw_only:
                positional_list.append(name)
            plan_list.append((name, f.default, f.default_factory))
        elif f.default_factory is not _MISSING:
            plan_list.append((name, f.default, f.default_factory))
            every_init = False
        if f.repr:
            repr_list.append(name)
        if f.compare:
            compare_list.append(name)
        if f.compare if f.hash is None else f.hash:
            hash_list.append(name)
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(init_list)})"
    positional = tuple(positional_list)
    init_names = frozenset(init_list)
    plan: tuple[tuple[str, Any, Any], ...] = tuple(plan_list)
    repr_names, compare_names, hash_names = tuple(repr_list), tuple(compare_list), tuple(hash_list)
    post_init = hasattr(cls, "__post_init__")
    set_attr = object.__setattr__

    # Every field a keyword of __init__, none filled by a factory: a call naming all of them
    # (the usual one on the hot paths, hundreds of cpufreq policies) just sets them in order.
    every = tuple(init_list) if every_init else None
    # ... straight into the instance's dict (half the time of a setattr call per field) unless a
    # field's name is a data descriptor of the class, whose __set__ a setattr must call.
    direct = every is not None and not any(hasattr(type(getattr(cls, name, None)), "__set__") for name in every)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if every is not None and not args and kwargs.keys() == init_names:
            if direct and type(self) is cls:  # (a subclass may make a field a property)
                values = self.__dict__
                for name in every:
                    values[name] = kwargs[name]
            else:
                for name in every:
                    set_attr(self, name, kwargs[name])
            if post_init:
                self.__post_init__()
            return
        if len(args) > len(positional):
            raise TypeError(
                f"{qualname}.__init__() takes {len(positional) + 1} positional arguments"
                f" but {len(args) + 1} were given"
            )
        given = dict(zip(positional, args, strict=False))
        for name, value in kwargs.items():
            if name not in init_names:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {name!r}")
            if name in given:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
            given[name] = value
        for name, default, factory in plan:
            if name in given:
                value = given[name]
            elif factory is not _MISSING:
                value = factory()
            elif default is not _MISSING:
                value = default
            else:
                raise TypeError(f"{qualname}.__init__() missing 1 required argument: {name!r}")
            set_attr(self, name, value)
        if post_init:
            self.__post_init__()

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in repr_names)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        # tuples, as dataclass compares: identical values are equal (a NaN field equals itself)
        return tuple(getattr(self, n) for n in compare_names) == tuple(getattr(other, n) for n in compare_names)

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, name) for name in hash_names))

    field_names = frozenset(f.name for f in fields)

    def __setattr__(self: object, name: str, value: Any) -> None:
        if type(self) is cls or name in field_names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]  # mypy: super() of a variable

    def __delattr__(self: object, name: str) -> None:
        if type(self) is cls or name in field_names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]  # mypy: super() of a variable

    methods: dict[str, Any] = {"__init__": __init__, "__repr__": __repr__, "__eq__": __eq__}
    if frozen:
        methods.update(__setattr__=__setattr__, __delattr__=__delattr__)
    for name, method in methods.items():
        if name not in own:
            method.__qualname__ = f"{qualname}.{name}"
            setattr(cls, name, method)
    if not explicit_hash:
        # dataclass's rule for eq=True: frozen classes hash their fields, mutable ones are unhashable.
        if frozen:
            __hash__.__qualname__ = f"{qualname}.__hash__"
        cls.__hash__ = __hash__ if frozen else None  # type: ignore[assignment]
    # What :func:`maker` may fill straight in: the generated __init__'s every-field case, nothing after it.
    cls._record_fill = every if direct and not post_init and not own_init else None  # type: ignore[attr-defined]
    return cls


def maker(cls: type[_T]) -> Callable[[dict[str, Any]], _T]:
    """A constructor of the record class ``cls`` for a path that makes hundreds of instances (a
    384-thread host's cpufreq policies): ``make(values)``, ``values`` a dict of every field of
    ``__init__`` by name in field order, is ``cls(**values)`` without the keyword call and its
    checks (a policy 2.5 -> 1.2 us): ``values`` fills the new instance's dict as that call's
    ``__init__`` would. Any other dict, and a class whose ``__init__`` does more (its own, a
    ``__post_init__``, a field that is a descriptor, a field outside ``__init__`` made by a
    factory), goes through ``cls(**values)``."""
    fill = cls.__dict__.get("_record_fill")
    if fill is None:
        return lambda values: cls(**values)
    new = object.__new__

    def make(values: dict[str, Any]) -> _T:
        if tuple(values) != fill:
            return cls(**values)
        obj = new(cls)
        obj.__dict__.update(values)
        return obj

    return make
