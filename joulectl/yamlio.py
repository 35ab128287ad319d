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
            with open(path, "rb") as fh:
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


def _loader(text: str) -> Any:
    import yaml

    if _ANCHOR.search(text):
        return _counting_loader()
    if _deeply_nested(text):
        return yaml.SafeLoader
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _counting_loader() -> Any:
    import yaml

    class CountingLoader(yaml.SafeLoader):
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
            doc = json.loads(text)
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
    text = read_text(path, what=what)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(f"invalid JSON: {e}", file=label) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", file=label)
    return data
