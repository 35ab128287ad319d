"""kubectl's JSONPath (``-o jsonpath=TEMPLATE``, ``-o custom-columns=SPEC``), the subset kubectl documents.

Template: text outside ``{}`` is printed as it is; inside, ``$`` or ``@`` (the current object),
``.field`` (``\\.`` escapes a dot in a key, ``['key']`` quotes one), ``..field`` (recursive
descent), ``*`` / ``[*]``, ``[n]``, ``[-n]``, ``[start:end:step]``, unions ``[a,b]``, filters
``[?(@.f == "x")]`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, or existence ``[?(@.f)]``),
``{range EXPR}...{end}`` and quoted text ``{"\\n"}``. As in kubectl, a missing key prints
nothing; several results of one expression are joined by a space; strings print raw, numbers and
booleans as JSON, lists and maps as compact JSON. A bad template raises :class:`TemplateError`
naming the problem (the CLI makes it exit 2).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


class TemplateError(ValueError):
    """A template that does not parse: the message names the problem."""


_MISSING = object()


@dataclass
class _Text:
    text: str


@dataclass
class _Expr:
    steps: list[Any]
    source: str


@dataclass
class _Range:
    expr: _Expr
    body: list[Any] = field(default_factory=list)


# --- steps ------------------------------------------------------------------------------------------

@dataclass
class _Field:
    name: str  # "*" = every value


@dataclass
class _Recursive:
    name: str


@dataclass
class _Index:
    indexes: list[int]


@dataclass
class _Slice:
    start: int | None
    end: int | None
    step: int | None


@dataclass
class _Names:
    names: list[str]


@dataclass
class _Filter:
    left: _Expr
    op: str | None
    right: Any  # an _Expr or a literal


_NAME = re.compile(r"(?:\\.|[A-Za-z0-9_\-/:~$])+")


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> TemplateError:
        return TemplateError(message)

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def expr(self, stop: str) -> _Expr:
        """Steps up to (not including) a character of ``stop`` at depth 0."""
        start = self.pos
        steps: list[Any] = []
        self.skip_space()
        if self.peek() in ("$", "@"):
            self.pos += 1
        while self.pos < len(self.text) and self.text[self.pos] not in stop:
            c = self.text[self.pos]
            if self.peek(2) == "..":
                self.pos += 2
                m = _NAME.match(self.text, self.pos)
                if not m:
                    raise self.fail(f"a name must follow '..' at {self.text[self.pos:self.pos + 10]!r}")
                steps.append(_Recursive(_unescape(m.group(0))))
                self.pos = m.end()
            elif c == ".":
                self.pos += 1
                if self.peek() == "*":
                    self.pos += 1
                    steps.append(_Field("*"))
                    continue
                m = _NAME.match(self.text, self.pos)
                if not m:
                    if self.pos >= len(self.text) or self.text[self.pos] in stop:
                        continue  # "{.}" is the current object
                    raise self.fail(f"unrecognized character in field name: {self.text[self.pos]!r}")
                steps.append(_Field(_unescape(m.group(0))))
                self.pos = m.end()
            elif c == "[":
                steps.append(self.bracket())
            elif c == "*":
                self.pos += 1
                steps.append(_Field("*"))
            elif c in " \t":
                self.skip_space()
            else:
                m = _NAME.match(self.text, self.pos)
                if m and not steps and self.pos == start:
                    steps.append(_Field(_unescape(m.group(0))))  # "{items[0]}" as kubectl takes it
                    self.pos = m.end()
                    continue
                raise self.fail(f"unrecognized character in action: {c!r}")
        return _Expr(steps, self.text[start:self.pos].strip())

    def bracket(self) -> Any:
        end = self._matching("[", "]")
        inner = self.text[self.pos + 1:end].strip()
        self.pos = end + 1
        if inner.startswith("?"):
            return self.filter(inner[1:].strip())
        if inner == "*":
            return _Field("*")
        if not inner:
            raise self.fail("empty brackets []")
        if inner[0] in "'\"":
            names = [self.quoted(part.strip()) for part in _split_top(inner, ",")]
            return _Names(names)
        if ":" in inner:
            parts = inner.split(":")
            if len(parts) > 3:
                raise self.fail(f"invalid array slice [{inner}]")
            try:
                nums = [int(p) if p.strip() else None for p in parts] + [None] * (3 - len(parts))
            except ValueError:
                raise self.fail(f"invalid array slice [{inner}]") from None
            if nums[2] == 0:
                raise self.fail(f"invalid array slice [{inner}]: step 0")
            return _Slice(nums[0], nums[1], nums[2])
        try:
            return _Index([int(p) for p in inner.split(",")])
        except ValueError:
            raise self.fail(f"invalid array index [{inner}]") from None

    def quoted(self, text: str) -> str:
        if len(text) < 2 or text[0] != text[-1] or text[0] not in "'\"":
            raise self.fail(f"unterminated quoted name {text!r}")
        return text[1:-1]

    def filter(self, inner: str) -> _Filter:
        if not (inner.startswith("(") and inner.endswith(")")):
            raise self.fail(f"a filter is [?(...)], got [?{inner}]")
        body = inner[1:-1].strip()
        m = re.search(r"(==|!=|<=|>=|<|>)", body)
        left_text, op, right_text = (body, None, "") if m is None else (body[:m.start()], m.group(1), body[m.end():])
        left = _Parser(left_text.strip()).expr("")
        if op is None:
            return _Filter(left, None, None)
        right_text = right_text.strip()
        right: Any
        if right_text[:1] in "'\"":
            right = self.quoted(right_text)
        elif right_text[:1] in "@$":
            right = _Parser(right_text).expr("")
        else:
            try:
                right = json.loads(right_text)
            except ValueError:
                raise self.fail(f"cannot compare with {right_text!r} in filter") from None
        return _Filter(left, op, right)

    def _matching(self, open_: str, close: str) -> int:
        depth = 0
        quote = ""
        for i in range(self.pos, len(self.text)):
            c = self.text[i]
            if quote:
                if c == quote:
                    quote = ""
                continue
            if c in "'\"":
                quote = c
            elif c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return i
        raise self.fail("unterminated array" if open_ == "[" else f"unclosed {open_}")


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, quote, cur = [], 0, "", ""
    for c in text:
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += c
    parts.append(cur)
    return parts


def parse(template: str) -> list[Any]:
    """The nodes of a template (text, expressions, ranges); :class:`TemplateError` when bad."""
    nodes: list[Any] = []
    stack: list[_Range] = []
    i = 0

    def add(node: Any) -> None:
        (stack[-1].body if stack else nodes).append(node)

    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            add(_Text(template[i:]))
            break
        if start > i:
            add(_Text(template[i:start]))
        end = _action_end(template, start)
        action = template[start + 1:end].strip()
        i = end + 1
        if action.startswith('"') or action.startswith("'"):
            if len(action) < 2 or action[-1] != action[0]:
                raise TemplateError(f"unterminated quoted string in {{{action}}}")
            try:
                add(_Text(json.loads('"' + action[1:-1].replace('"', '\\"') + '"')))
            except ValueError:
                raise TemplateError(f"bad escape in {{{action}}}") from None
        elif action == "end":
            if not stack:
                raise TemplateError("not in range, nothing to end")
            done = stack.pop()
            add(done)
        elif action.startswith("range ") or action == "range":
            p = _Parser(action[5:])
            stack.append(_Range(p.expr("")))
        elif not action:
            raise TemplateError("empty action {}")
        else:
            p = _Parser(action)
            add(p.expr(""))
    if stack:
        raise TemplateError("unclosed range: {range ...} needs an {end}")
    return nodes


def _action_end(template: str, start: int) -> int:
    quote = ""
    depth = 0
    for i in range(start + 1, len(template)):
        c = template[i]
        if quote:
            if c == "\\":
                continue
            if c == quote and template[i - 1] != "\\":
                quote = ""
            continue
        if c in "'\"":
            quote = c
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "}" and depth <= 0:
            return i
    raise TemplateError("unclosed action: a '{' has no '}'")


# --- evaluation -------------------------------------------------------------------------------------

def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _descend(value: Any, name: str, out: list[Any]) -> None:
    """``..name``: depth first, each object before what it holds (kubectl's order)."""
    if isinstance(value, dict) and name in value:
        out.append(value[name])
    for child in _children(value):
        _descend(child, name, out)


def _step(values: list[Any], step: Any) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(step, _Field):
            if step.name == "*":
                out.extend(_children(v))
            elif isinstance(v, dict) and step.name in v:
                out.append(v[step.name])
        elif isinstance(step, _Names):
            if isinstance(v, dict):
                out.extend(v[n] for n in step.names if n in v)
        elif isinstance(step, _Recursive):
            _descend(v, step.name, out)
        elif isinstance(step, _Index):
            if isinstance(v, list):
                for i in step.indexes:
                    if -len(v) <= i < len(v):
                        out.append(v[i])
        elif isinstance(step, _Slice):
            if isinstance(v, list):
                out.extend(v[step.start:step.end:step.step])
        elif isinstance(step, _Filter):
            for item in _children(v) if isinstance(v, list) else []:
                if _keep(item, step):
                    out.append(item)
    return out


def _keep(item: Any, f: _Filter) -> bool:
    left = evaluate(f.left, item)
    if f.op is None:
        return bool(left)
    right = evaluate(f.right, item) if isinstance(f.right, _Expr) else [f.right]
    if not left or not right:
        return False
    a, b = left[0], right[0]
    try:
        if f.op == "==":
            return bool(a == b)
        if f.op == "!=":
            return bool(a != b)
        if isinstance(a, str) != isinstance(b, str):
            return False
        return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[f.op])
    except TypeError:
        return False


def evaluate(expr: _Expr, data: Any) -> list[Any]:
    values = [data]
    for step in expr.steps:
        values = _step(values, step)
    return values


def text(value: Any) -> str:
    """A value as kubectl prints it."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _render(nodes: list[Any], data: Any, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Expr):
            out.append(" ".join(text(v) for v in evaluate(node, data)))
        else:
            results = evaluate(node.expr, data)
            if len(results) == 1 and isinstance(results[0], list) and not _spreads(node.expr):
                results = results[0]  # {range .items} walks the list, as {range .items[*]} does
            for v in results:
                _render(node.body, v, out)


def _spreads(expr: _Expr) -> bool:
    """Whether the last step of ``expr`` already yields the elements (``[*]``, a slice, a filter)."""
    last = expr.steps[-1] if expr.steps else None
    return isinstance(last, (_Slice, _Filter, _Recursive)) or (isinstance(last, _Field) and last.name == "*")


def execute(template: str, data: Any) -> str:
    """Render ``template`` over ``data``."""
    out: list[str] = []
    _render(parse(template), data, out)
    return "".join(out)


def single(expression: str) -> _Expr:
    """One expression (a custom-columns field: ``.a.b`` or ``{.a.b}``)."""
    e = expression.strip()
    if e.startswith("{") and e.endswith("}"):
        e = e[1:-1]
    if not e:
        raise TemplateError("empty expression")
    p = _Parser(e)
    expr = p.expr("")
    return expr
