"""``joulectl.record.record`` behaves as ``dataclasses.dataclass`` for what the package uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from joulectl.record import record

#: ClassVar under another name: dataclass finds it by the annotation's leading name in the module
Shared = ClassVar


def _pair(frozen: bool) -> tuple[type, type]:
    """The same class body under ``dataclass`` and under ``record``."""

    def body(decorate: Any) -> type:
        @decorate(frozen=frozen)
        class Sample:
            """A sample."""

            name: str
            watts: float = 1.5
            tags: list[str] = field(default_factory=list)
            note: str = field(default="n", repr=False, compare=False)
            cache: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
            unit: str = field(default="W", kw_only=True)
            KIND: ClassVar[str] = "sample"

        return Sample

    return body(dataclass), body(record)


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_repr_eq_match_dataclass(frozen: bool) -> None:
    ref, rec = _pair(frozen)
    for args, kwargs in [(("a",), {}), (("a", 2.0, ["x"]), {"note": "z", "unit": "mW"}), ((), {"name": "b"})]:
        want, got = ref(*args, **kwargs), rec(*args, **kwargs)
        assert repr(got) == repr(want).replace(ref.__qualname__, rec.__qualname__)
        assert dataclasses.asdict(got) == dataclasses.asdict(want)
        assert got.cache == {} and got.KIND == "sample"
    assert rec("a", note="x") == rec("a", note="y")  # compare=False
    assert rec("a") != rec("b") and rec("a") != ref("a")  # other class: NotImplemented, then identity
    assert rec("a").tags is not rec("a").tags  # a fresh default per instance
    assert [f.name for f in dataclasses.fields(rec)] == [f.name for f in dataclasses.fields(ref)]
    assert dataclasses.is_dataclass(rec)
    assert rec.__match_args__ == ref.__match_args__


@pytest.mark.parametrize("frozen", [False, True])
def test_argument_errors_match_dataclass(frozen: bool) -> None:
    _, rec = _pair(frozen)
    with pytest.raises(TypeError, match="missing 1 required argument: 'name'"):
        rec()
    with pytest.raises(TypeError, match="takes 5 positional arguments but 6 were given"):
        rec("a", 1.0, [], "n", "mW")  # unit is keyword-only
    with pytest.raises(TypeError, match="unexpected keyword argument 'cache'"):
        rec("a", cache={})  # init=False
    with pytest.raises(TypeError, match="multiple values for argument 'name'"):
        rec("a", name="b")


def test_frozen_hash_and_immutability() -> None:
    ref, rec = _pair(True)
    one, two = rec("a", tags=("x",)), rec("a", tags=("x",))  # type: ignore[arg-type]
    assert hash(one) == hash(two) == hash(ref("a", tags=("x",))) and len({one, two}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'watts'"):
        one.watts = 3.0
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'name'"):
        del one.name
    changed = dataclasses.replace(one, watts=9.0)
    assert changed.watts == 9.0 and one.watts == 1.5 and changed.name == "a"
    assert copy.deepcopy(one) == one
    stored = Stored("gpu0", 300.0)
    assert pickle.loads(pickle.dumps(stored)) == stored
    nan = float("nan")
    assert Stored("a", nan) == Stored("a", nan)  # tuple comparison, as dataclass: identity first


@record(frozen=True)
class Stored:
    """A module-level record, so that pickle can find the class."""

    key: str
    watts: float


def test_mutable_records_are_unhashable_and_settable() -> None:
    _, rec = _pair(False)
    item = rec("a")
    with pytest.raises(TypeError, match="unhashable"):
        hash(item)
    item.watts = 7.0
    assert item.watts == 7.0 and copy.copy(item) == item


def test_post_init_class_body_methods_and_subclasses() -> None:
    @record
    class Base:
        value: int
        doubled: int = field(default=0, init=False)

        def __post_init__(self) -> None:
            self.doubled = self.value * 2

        def __repr__(self) -> str:
            return "custom"

    assert Base(3).doubled == 6 and repr(Base(3)) == "custom"

    @dataclass
    class Child(Base):
        extra: str = "e"

    child = Child(4, "x")
    assert (child.value, child.doubled, child.extra) == (4, 8, "x")

    class Plain(Base):  # a subclass that is not itself a dataclass keeps the inherited methods
        pass

    assert Plain(1).doubled == 2 and Plain(1) != Base(1)

    @record(frozen=True)
    class Hashed:
        key: str

        def __hash__(self) -> int:
            return 42

    assert hash(Hashed("a")) == 42


def test_undocumented_class_gets_dataclass_style_doc() -> None:
    @record
    class Bare:
        a: int
        b: str = "x"

    assert Bare.__doc__ == "Bare(a, b)"


@pytest.mark.parametrize("frozen", [False, True])
def test_annotations_and_field_types_stay_the_strings_dataclass_keeps(frozen: bool) -> None:
    """record hands dataclass its plain string annotations as ``object`` (dataclass then skips
    three tests of each) and puts the strings back: ``__annotations__`` and every Field's type
    are dataclass's own, and ClassVar, under its name or another, is still no field."""
    ref, rec = _pair(frozen)
    assert rec.__annotations__ == ref.__annotations__
    assert all(isinstance(v, str) for v in rec.__annotations__.values())
    assert [(f.name, f.type, f.kw_only) for f in dataclasses.fields(rec)] == [
        (f.name, f.type, f.kw_only) for f in dataclasses.fields(ref)]

    def body(decorate: Any) -> type:
        @decorate
        class Counted:
            n: int
            LIMIT: Shared[int] = 3
            total: ClassVar[int] = 0
            ceiling: typing.ClassVar[int] = 9
            _: dataclasses.KW_ONLY
            unit: str = "W"

        return Counted

    ref2, rec2 = body(dataclass), body(record)
    assert [f.name for f in dataclasses.fields(rec2)] == [f.name for f in dataclasses.fields(ref2)] == ["n", "unit"]
    assert [f.kw_only for f in dataclasses.fields(rec2)] == [False, True]
    assert rec2.__annotations__ == ref2.__annotations__
    assert rec2(1, unit="mW").unit == "mW" and rec2.LIMIT == 3 and rec2.ceiling == 9
    with pytest.raises(TypeError):
        rec2(1, "mW")  # unit is keyword-only after KW_ONLY


@pytest.mark.parametrize("frozen", [False, True])
def test_a_call_naming_every_field_sets_them_as_dataclass_does(frozen: bool) -> None:
    # The hot path (hundreds of cpufreq policies): every field named, set straight into the
    # instance's dict, in field order whatever the call's order; frozen stays frozen; a subclass
    # that makes a field a property still has its setter called, as dataclass's __init__ would.
    def body(decorate: Any) -> type:
        @decorate(frozen=frozen)
        class Policy:
            name: str
            watts: float
            layout: str = "policy"

        return Policy

    ref, rec = body(dataclass), body(record)
    want, got = ref(layout="legacy", watts=2.0, name="p0"), rec(layout="legacy", watts=2.0, name="p0")
    assert list(vars(got).items()) == list(vars(want).items()) == [("name", "p0"), ("watts", 2.0), ("layout", "legacy")]
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.name = "p1"
    seen: list[Any] = []

    def sub(base: type) -> type:
        class Traced(base):  # type: ignore[valid-type, misc]
            @property
            def watts(self) -> float:
                return float(self.__dict__["_w"])

            @watts.setter
            def watts(self, value: float) -> None:
                seen.append(value)
                self.__dict__["_w"] = value

        return Traced

    if not frozen:  # (a frozen dataclass's __init__ sets through object.__setattr__: the same setter)
        assert sub(rec)(name="p0", watts=3.0, layout="policy").watts == 3.0
        assert sub(ref)(name="p0", watts=3.0, layout="policy").watts == 3.0
        assert seen == [3.0, 3.0]


def _field_view(cls: type) -> list[tuple[Any, ...]]:
    return [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.kw_only,
             dict(f.metadata), f._field_type) for f in dataclasses.fields(cls)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("frozen", [False, True])
def test_plain_fields_are_dataclass_s_own_without_dataclass(frozen: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A class of plain fields (no ClassVar, KW_ONLY or InitVar) gets its fields, parameters and
    ``__match_args__`` from record itself, not from ``dataclass``: each the same as dataclass's."""
    def body(decorate: Any) -> type:
        @decorate(frozen=frozen)
        class Plain:
            name: str
            watts: float = 1.5
            tags: list[str] = field(default_factory=list, metadata={"unit": "W"})
            note: str = field(default="n", repr=False, compare=False, hash=True)
            gone: int = field(default_factory=int, init=False)
            unit: str = field(default="W", kw_only=True)

        return Plain

    calls: list[type] = []
    real = dataclasses.dataclass

    def counting(cls: Any = None, /, **kwargs: Any) -> Any:
        if cls is not None:
            calls.append(cls)
        return real(cls, **kwargs) if cls is not None else real(**kwargs)

    ref = body(dataclass)
    monkeypatch.setattr(dataclasses, "dataclass", counting)
    rec = body(record)
    assert [c for c in calls if c.__name__ == "Plain"] == []  # dataclass never saw it
    assert _field_view(rec) == _field_view(ref)
    assert rec.__match_args__ == ref.__match_args__ == ("name", "watts", "tags", "note")
    assert rec.__dataclass_params__.frozen is False and rec.__dataclass_params__.init is False
    assert rec.__annotations__ == ref.__annotations__
    for name in ("watts", "note", "unit"):  # a default stays a class attribute, a Field is replaced by it
        assert getattr(rec, name) == getattr(ref, name)
    assert "tags" not in vars(rec) and "tags" not in vars(ref)  # a factory's field: no class attribute
    item = rec("a", unit="mW")
    assert (item.tags, item.gone, item.unit) == ([], 0, "mW")
    assert dataclasses.asdict(item) == dataclasses.asdict(ref("a", unit="mW"))
    assert dataclasses.replace(item, watts=2.0).watts == 2.0
    assert copy.deepcopy(item) == item


def test_plain_fields_inherit_and_fail_as_dataclass_does() -> None:
    @record
    class Base:
        a: int
        b: str = "x"

    @record(frozen=True)
    class Sub(Base):
        c: float = 0.0
        b: str = "y"

    @dataclass
    class RefBase:
        a: int
        b: str = "x"

    @dataclass
    class RefSub(RefBase):
        c: float = 0.0
        b: str = "y"

    assert [f.name for f in dataclasses.fields(Sub)] == [f.name for f in dataclasses.fields(RefSub)] == ["a", "b", "c"]
    assert Sub(1).b == "y" and Sub(1, "z", 2.0) == Sub(a=1, b="z", c=2.0)

    for decorate in (dataclass, record):
        with pytest.raises(ValueError, match="mutable default <class 'list'> for field items is not allowed"):
            @decorate
            class Mutable:
                items: list[int] = []  # noqa: RUF012 - the error under test

        with pytest.raises(TypeError, match="'stray' is a field but has no type annotation"):
            @decorate
            class Stray:
                a: int
                stray = field(default=1)

    @dataclass(frozen=True)
    class FrozenBase:
        a: int

    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        @record
        class OnFrozen(FrozenBase):  # dataclass's own check, as before: record hands such a class to it
            b: int = 0


_DUMP = r"""
import dataclasses, importlib, json, pkgutil, sys
import joulectl, joulectl.record as r
if sys.argv[1] == "dataclass":
    r._FIELD = None  # every record through dataclass's own bookkeeping, as before
def rep(x):
    if x is dataclasses.MISSING:
        return "MISSING"
    return x.__qualname__ if callable(x) and hasattr(x, "__qualname__") else repr(x)
out = {}
for info in pkgutil.walk_packages(joulectl.__path__, "joulectl."):
    path = getattr(info.module_finder, "path", "")
    try:
        with open(f"{path}/{info.name.rsplit('.', 1)[1]}.py", encoding="utf-8") as fh:
            if "@record" not in fh.read():
                continue
    except OSError:
        continue
    mod = importlib.import_module(info.name)
    for name, cls in sorted(vars(mod).items()):
        if isinstance(cls, type) and cls.__module__ == mod.__name__ and dataclasses.is_dataclass(cls):
            out[f"{mod.__name__}.{name}"] = [
                repr(cls.__dataclass_params__), repr(getattr(cls, "__match_args__", None)), sorted(vars(cls)),
                [(f.name, repr(f.type), rep(f.default), rep(f.default_factory), f.init, f.repr, f.hash,
                  f.compare, f.kw_only, repr(dict(f.metadata)), repr(f._field_type),
                  rep(getattr(cls, f.name, "<none>"))) for f in dataclasses.fields(cls)]]
print(json.dumps(out, sort_keys=True))
"""


def test_every_record_of_the_package_is_what_dataclass_made_it() -> None:
    """Every record class joulectl defines, built by record's own bookkeeping and by
    ``dataclass``'s (as before the start-up work): the same fields, parameters, match arguments
    and class attributes. Run in two fresh interpreters (a class is built once per process)."""
    import subprocess
    import sys

    runs = [subprocess.run([sys.executable, "-c", _DUMP, way], capture_output=True, text=True, check=True).stdout
            for way in ("record", "dataclass")]
    import json

    fast, slow = (json.loads(r) for r in runs)
    assert len(fast) >= 40 and fast.keys() == slow.keys()
    for name in fast:
        assert fast[name] == slow[name], name


def test_an_inherited_class_attribute_is_the_default_dataclass_reads() -> None:
    class Defaults:
        unit = "W"

    for decorate in (dataclass, record):
        @decorate
        class Reading(Defaults):
            watts: float
            unit: str  # no default here: dataclass takes the inherited class attribute

        assert Reading(1.0).unit == "W" and [f.default for f in dataclasses.fields(Reading)][1] == "W"


@pytest.mark.parametrize("frozen", [False, True])
def test_maker_makes_what_the_keyword_call_makes(frozen: bool) -> None:
    from joulectl.record import maker

    @record(frozen=frozen)
    class Policy:
        name: str
        khz: int | None
        layout: str = "policy"

    make = maker(Policy)
    values = {"name": "policy0", "khz": 2400000, "layout": "legacy"}
    got, want = make(dict(values)), Policy(**values)
    assert type(got) is Policy and got == want and repr(got) == repr(want)
    assert list(vars(got).items()) == list(vars(want).items())
    if frozen:
        assert hash(got) == hash(want)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.name = "x"
    # another order, a missing or an unknown field: the keyword call decides (its errors too)
    assert make({"khz": 1, "name": "p", "layout": "policy"}) == Policy(name="p", khz=1)
    with pytest.raises(TypeError, match="missing 1 required argument: 'khz'"):
        make({"name": "p", "layout": "policy"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'extra'"):
        make({"name": "p", "khz": 1, "layout": "policy", "extra": 0})


def test_maker_leaves_a_class_that_does_more_to_its_init() -> None:
    from joulectl.record import maker

    @record
    class Posted:
        a: int
        doubled: int = field(default=0, init=False)

        def __post_init__(self) -> None:
            self.doubled = self.a * 2

    @record
    class Own:
        a: int

        def __init__(self, a: int) -> None:
            self.a = a + 1

    @record
    class Factory:
        a: int
        tags: list[str] = field(default_factory=list)

    class Described:
        def __set_name__(self, owner: type, name: str) -> None:
            self.name = "_" + name

        def __get__(self, obj: Any, owner: type | None = None) -> Any:
            return self if obj is None else getattr(obj, self.name)

        def __set__(self, obj: Any, value: int) -> None:
            setattr(obj, self.name, value * 10)

    @record
    class WithDescriptor:
        a: int = Described()  # type: ignore[assignment]

    assert maker(Posted)({"a": 2}).doubled == 4
    assert maker(Own)({"a": 1}).a == 2
    assert maker(Factory)({"a": 1, "tags": ["x"]}).tags == ["x"]
    assert maker(WithDescriptor)({"a": 3}).a == 30
