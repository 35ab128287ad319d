"""Safe loading of YAML and JSON input files, with errors that name the file.

YAML is always loaded with a safe loader. Inputs over :data:`MAX_INPUT_BYTES` are refused, and so
are documents with more than :data:`MAX_ALIASES` aliases (an alias bomb expands to a structure
whose traversal never ends). ``-`` reads stdin. JSON files are parsed with :mod:`json` (fast).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from joulectl.errors import InputError

MAX_INPUT_BYTES = int(os.environ.get("JOULECTL_MAX_INPUT_BYTES", str(64 << 20)))
MAX_ALIASES = 1000
MAX_DEPTH = 200
#: Above this nesting bound the C loader is not used: libyaml's composer recurses on the C stack
#: and crashes the interpreter (SIGSEGV) at a few ten thousand levels; the Python loader raises
#: RecursionError instead, which becomes an InputError.
C_LOADER_MAX_NESTING = 2000
#: Elements a document may expand to beyond its own size (aliases share subtrees).
MAX_ALIAS_EXPANSION = 1_000_000
_ANCHOR = re.compile(r"(?:^|[\s\[{,:-])&[^\s,\[\]{}]+")


def read_text(path: str, *, what: str = "file") -> str:
    """Read an input file (``-`` for stdin) as text, refusing huge or unreadable ones."""
    label = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            if os.path.isdir(path):
                raise InputError(f"is a directory, expected a {what}", file=label)
            from joulectl.host import NotRegularError, open_regular

            try:
                fd = open_regular(path, os.O_RDONLY, label)
            except NotRegularError as e:  # a FIFO would block the run for ever
                raise InputError(f"{e.strerror}; expected a {what} (pass a stream on stdin with -)",
                                 file=label) from None
            with open(fd, "rb", closefd=True) as fh:
                data = fh.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=label) from None
    except PermissionError:
        raise InputError(f"{what} is not readable (permission denied)", file=label) from None
    except OSError as e:
        raise InputError(f"{what} could not be read: {e.strerror}", file=label) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"{what} is larger than {MAX_INPUT_BYTES >> 20} MiB; refusing to parse it", file=label
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", file=label) from None


_BLOCK_PREFIX = re.compile(r"^(?:[ \t?:-]|![^\s]*){" + str(C_LOADER_MAX_NESTING) + "}", re.MULTILINE)


def _deeply_nested(text: str) -> bool:
    """Whether a YAML text may nest deeper than :data:`C_LOADER_MAX_NESTING`: block nesting needs
    an indentation column or a ``-``/``?`` indicator per level at the start of a line, flow nesting
    an open bracket per level (brackets inside strings only make the bound looser)."""
    if _BLOCK_PREFIX.search(text):
        return True
    if text.count("[") + text.count("{") <= C_LOADER_MAX_NESTING:
        return False
    depth = 0
    for ch in re.sub(r"[^\[\]{}]+", "", text):
        depth = depth + 1 if ch in "[{" else max(0, depth - 1)
        if depth > C_LOADER_MAX_NESTING:
            return True
    return False


class DuplicateKey(Exception):
    """A mapping with a key twice (raised by the loaders, turned into an :class:`InputError`)."""

    def __init__(self, key: Any, first: int | None, second: int | None) -> None:
        self.key, self.first, self.second = key, first, second
        super().__init__(self.text())

    def text(self) -> str:
        where = f" on lines {self.first} and {self.second}" if self.first and self.second else ""
        return f"duplicate key {self.key!r}{where} (a key may appear once per mapping)"


_LOADERS: dict[str, Any] = {}


def _strict(base: Any) -> Any:
    """``base`` (a PyYAML loader class) refusing duplicate keys, as the Kubernetes API does, instead
    of letting the last one win. Merge keys (``<<``) still override, as YAML defines them."""
    import yaml

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    line = key_node.start_mark.line + 1
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the constructor says so
                        continue
                    if first is not None:
                        raise DuplicateKey(key, first, line)
                    seen[key] = line
            return super().construct_mapping(node, deep)

    return StrictLoader


def _loader(text: str) -> Any:
    import yaml

    if _ANCHOR.search(text):
        return _counting_loader()
    name = "python" if _deeply_nested(text) or not hasattr(yaml, "CSafeLoader") else "c"
    if name not in _LOADERS:
        _LOADERS[name] = _strict(yaml.SafeLoader if name == "python" else yaml.CSafeLoader)
    return _LOADERS[name]


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` ``object_pairs_hook``: a dict, or :class:`DuplicateKey` (lines found later)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key, None, None)
            seen.add(key)
    return out


def _json_duplicate(e: DuplicateKey, text: str, label: str) -> InputError:
    """The error of a JSON duplicate key, with the lines of its first two occurrences (a scan of
    the text for the quoted key before a colon: exact for every text :mod:`json` accepts but for a
    string value that holds the same quoted key and a colon, where the lines are a guess)."""
    pattern = re.compile(re.escape(json.dumps(e.key)) + r"\s*:")
    lines = [text.count("\n", 0, m.start()) + 1 for m in pattern.finditer(text)][:2]
    if len(lines) == 2:
        e = DuplicateKey(e.key, lines[0], lines[1])
    return InputError(e.text(), file=label)


def loads_json(text: str, label: str) -> Any:
    """``json.loads`` refusing duplicate keys; ``ValueError`` for invalid JSON, ``RecursionError``
    for nesting past the interpreter's stack, an :class:`InputError` for a duplicate key."""
    try:
        return json.loads(text, object_pairs_hook=_json_object)
    except DuplicateKey as e:
        raise _json_duplicate(e, text, label) from None


def _counting_loader() -> Any:
    import yaml

    class CountingLoader(_strict(yaml.SafeLoader)):  # type: ignore[misc]
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                CountingLoader.aliases += 1
                if CountingLoader.aliases > MAX_ALIASES:
                    raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases (alias bomb?)")
            return super().compose_node(parent, index)

    return CountingLoader


def _check_depth(data: Any, label: str, max_elements: int = 50_000_000) -> None:
    """Refuse documents nested deeper than MAX_DEPTH or expanding past ``max_elements``.

    Only containers go on the stack: scalars are counted, never visited (a 10,000-node NodeList
    is millions of scalars).
    """
    if not isinstance(data, (dict, list)):
        return
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=label)
        values = node.values() if isinstance(node, dict) else node
        seen += len(node)
        if seen > max_elements:
            raise InputError(
                f"document expands to more than {max_elements} elements (alias bomb?)", file=label
            )
        child_depth = depth + 1
        stack.extend((v, child_depth) for v in values if isinstance(v, (dict, list)))


def parse_documents(text: str, label: str) -> list[Any]:
    """Parse YAML (or JSON) text into its documents; empty documents are dropped."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = loads_json(text, label)
        except RecursionError:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=label) from None
        except ValueError:
            pass  # flow-style YAML is not JSON; fall through to the YAML parser
        else:
            _check_depth(doc, label)
            return [doc]
    import yaml

    try:
        docs = [d for d in yaml.load_all(text, Loader=_loader(text)) if d is not None]
    except DuplicateKey as e:
        raise InputError(e.text(), file=label) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise InputError(f"invalid YAML: {where}{e.problem or e.context}", file=label) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=label) from None
    except Exception as e:  # the safe constructors fail with IndexError, ValueError... on bad scalars
        raise InputError(f"invalid YAML: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                         file=label) from None
    # Without aliases a document has fewer elements than characters; aliases may share subtrees,
    # which a reader then walks once per reference: bound the expansion.
    max_elements = len(text) + MAX_ALIAS_EXPANSION
    for d in docs:
        _check_depth(d, label, max_elements)
    return docs


def load_documents(path: str, *, what: str = "file") -> list[Any]:
    """All documents of a YAML or JSON file."""
    label = "<stdin>" if path == "-" else path
    return parse_documents(read_text(path, what=what), label)


def load_one(path: str, *, what: str = "file") -> Any:
    """The single document of a YAML or JSON file; an empty file is an error."""
    label = "<stdin>" if path == "-" else path
    docs = load_documents(path, what=what)
    if not docs:
        raise InputError(f"{what} is empty", file=label)
    if len(docs) > 1:
        raise InputError(f"expected one document, found {len(docs)}", file=label)
    return docs[0]


def load_json_map(path: str, *, what: str) -> dict[str, Any]:
    """A JSON object file (model caps, model presets); invalid JSON is an error, not ``{}``."""
    label = "<stdin>" if path == "-" else path
    return parse_json_map(read_text(path, what=what), label)


def parse_json_map(text: str, label: str) -> dict[str, Any]:
    """A JSON object from text (a file's, or an environment variable's): invalid JSON, nesting past
    :data:`MAX_DEPTH` and duplicate keys are errors naming ``label``, never ``{}`` or a crash."""
    try:
        data = loads_json(text, label)
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=label) from None
    except ValueError as e:
        raise InputError(f"invalid JSON: {e}", file=label) from None
    _check_depth(data, label)
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", file=label)
    return data
