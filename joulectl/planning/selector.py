"""Kubernetes label selectors, as ``kubectl get nodes -l`` reads them (``k8s.io/apimachinery``
``labels.Parse``): comma-separated requirements, every one must hold.

==================  ====================================================
``key``             the label exists
``!key``            the label does not exist
``key=v``, ``==``   the label exists and is ``v``
``key!=v``          the label is not ``v`` (or is absent)
``key in (a,b)``    the label exists and is one of the values
``key notin (a,b)`` the label is none of the values (or is absent)
``key>3``, ``<``    the label exists and is an integer above (below) 3
==================  ====================================================

Keys are qualified names (``[prefix/]name``, name at most 63 characters of ``[A-Za-z0-9_.-]``
starting and ending alphanumeric; prefix a DNS subdomain); values at most 63 such characters, or
empty. Anything else is a :class:`SelectorError` naming the problem, never a selector that quietly
selects nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_INT = re.compile(r"^[+-]?\d+$")


class SelectorError(ValueError):
    """A selector that cannot be parsed."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists | !exists | = | != | in | notin | > | <
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, object]) -> bool:
        present = self.key in labels
        value = "" if not present else str(labels[self.key])
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present or not _INT.match(value):
            return False
        number, bound = int(value), int(self.values[0])
        return number > bound if self.op == ">" else number < bound

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!exists":
            return f"!{self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        return f"{self.key}{self.op}{self.values[0]}"

    def miss(self, labels: Mapping[str, object]) -> str:
        """Why ``labels`` do not match (the reason a node is not planned)."""
        if self.op in ("exists", "=", "in", ">", "<") and self.key not in labels:
            return f"does not match the selector (no label {self.key})"
        return f"does not match the selector {self}"


def _check_key(key: str, text: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if not key:
        raise SelectorError(f"a requirement has no key in {text!r}")
    if not _NAME.match(name) or (slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix))):
        raise SelectorError(f"{key!r} is not a valid label key in {text!r}")


def _check_value(value: str, text: str) -> None:
    if not _VALUE.match(value):
        raise SelectorError(f"{value!r} is not a valid label value in {text!r}")


def _split(text: str) -> list[str]:
    """The requirements of ``text``: split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise SelectorError(f"nested '(' in {text!r}")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"')' without '(' in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError(f"missing ')' in {text!r}")
    parts.append(text[start:])
    return parts


_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_OPS = ("==", "!=", "=", ">", "<")


def _requirement(part: str, text: str) -> Requirement:
    term = part.strip()
    if not term:
        raise SelectorError(f"an empty requirement in {text!r}")
    m = _SET.match(term)
    if m:
        key = m.group("key")
        _check_key(key, text)
        values = tuple(v.strip() for v in m.group("values").split(","))
        if values == ("",):
            raise SelectorError(f"{m.group('op')} needs at least one value in {text!r}")
        for v in values:
            _check_value(v, text)
        return Requirement(key, m.group("op"), tuple(sorted(set(values))))
    if term.startswith("!"):
        key = term[1:].strip()
        _check_key(key, text)
        return Requirement(key, "!exists")
    for op in _OPS:
        idx = term.find(op)
        if idx < 0:
            continue
        key, value = term[:idx].strip(), term[idx + len(op):].strip()
        _check_key(key, text)
        if op in (">", "<"):
            if not _INT.match(value):
                raise SelectorError(f"{op} needs an integer, got {value!r} in {text!r}")
            return Requirement(key, op, (str(int(value)),))
        _check_value(value, text)
        return Requirement(key, "!=" if op == "!=" else "=", (value,))
    if " " in term or "(" in term or ")" in term:
        raise SelectorError(f"cannot parse {term!r} (expected key, !key, key=value, key!=value, "
                            f"key in (a,b), key notin (a,b)) in {text!r}")
    _check_key(term, text)
    return Requirement(term, "exists")


def parse(texts: Iterable[str]) -> tuple[Requirement, ...]:
    """The requirements of every selector text (they all must hold)."""
    out: list[Requirement] = []
    for text in texts:
        out.extend(_requirement(part, text) for part in _split(text))
    return tuple(out)


def from_mapping(selector: Mapping[str, str | None]) -> tuple[Requirement, ...]:
    """``{key: value}`` (None: the key exists), the older form of ``PlanOptions.selector``."""
    return tuple(Requirement(k, "exists") if v is None else Requirement(k, "=", (v,)) for k, v in selector.items())


def miss(requirements: Iterable[Requirement], labels: Mapping[str, object]) -> str | None:
    """The first requirement ``labels`` fail, as a reason; None when they match."""
    for r in requirements:
        if not r.matches(labels):
            return r.miss(labels)
    return None
