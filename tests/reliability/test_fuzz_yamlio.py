"""Fuzzing of the YAML/JSON input layer (joulectl/yamlio.py): every input ends in documents or in
one InputError naming the file; never a traceback, a hang, a crash of the interpreter or an
unbounded allocation. Alias bombs, deep nesting and oversized files are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import REPO, examples, run_python

from joulectl import yamlio
from joulectl.errors import ExitCode, InputError

FUZZ = settings(max_examples=examples(1500), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Fragments that make a random text YAML-shaped more often than plain random text.
YAML_TOKENS = [
    "a", "b", "key", ":", ": ", "- ", "-", "? ", "\n", "\n  ", "\n    ", "  ", "\t", "[", "]", "{", "}", ",",
    "&x ", "*x", "&y ", "*y", "!!str ", "!!int ", "!!float ", "!!binary ", "!!set ", "!!map ", "!!seq ",
    "!!python/object:os.system ", "!custom ", "'", '"', "|", ">", "#", "---", "...", "%YAML 1.1\n",
    "<<: ", "null", "~", "true", "no", "0x1F", "1e999", ".nan", "-.inf", "2020-02-30", "12:30:00",
    "\x00", "\ufeff", "\u2028", "\udcff", "9" * 5000, "\\", "%", "@", "`",
]
yamlish = st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


def _parse(text: str) -> list[Any] | InputError:
    try:
        docs = yamlio.parse_documents(text, "fuzz.yaml")
    except InputError as e:
        assert e.exit_code == ExitCode.USAGE
        assert str(e).startswith("fuzz.yaml: "), str(e)
        assert "\n" not in str(e), str(e)
        return e
    assert isinstance(docs, list)
    assert all(d is not None for d in docs)
    return docs


@FUZZ
@given(st.text(max_size=400))
def test_random_text_parses_or_is_one_input_error(text: str) -> None:
    _parse(text)


@FUZZ
@given(yamlish)
def test_yaml_shaped_text_parses_or_is_one_input_error(text: str) -> None:
    _parse(text)


@settings(max_examples=examples(500), deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=5) | st.lists(json_values, max_size=5))
def test_json_and_yaml_round_trip(value: Any) -> None:
    """A JSON or YAML object or list (what input files hold) comes back as the same data."""
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1), yaml.safe_dump(value)):
        assert _parse(text) == [value], text


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(1, 30), st.integers(2, 12))
def test_alias_expansion_is_bounded(levels: int, breadth: int) -> None:
    """A 'billion laughs' document is parsed exactly when it has at most MAX_ALIASES aliases and
    expands to at most its size + MAX_ALIAS_EXPANSION elements; otherwise it is refused with one line."""
    lines = ["a0: &a0 [" + ",".join(["lol"] * breadth) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * breadth) + "]")
    text = "\n".join(lines)
    result = _parse(text)
    expanded = [breadth]
    for _ in range(1, levels):
        expanded.append(breadth + breadth * expanded[-1])
    elements = levels + sum(expanded)
    if (levels - 1) * breadth > yamlio.MAX_ALIASES:
        assert isinstance(result, InputError)
        assert f"more than {yamlio.MAX_ALIASES} aliases" in str(result)
    elif elements > len(text) + yamlio.MAX_ALIAS_EXPANSION:
        assert isinstance(result, InputError)
        assert "elements (alias bomb?)" in str(result)
    else:
        assert isinstance(result, list)
        assert len(result[0]) == levels


def test_billion_laughs_is_refused() -> None:
    text = "a0: &a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "\n".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)
    )
    result = _parse(text)
    assert isinstance(result, InputError)
    assert "elements (alias bomb?)" in str(result)


def test_more_aliases_than_the_limit_are_refused() -> None:
    text = "a: &a 1\nb: [" + ",".join(["*a"] * (yamlio.MAX_ALIASES + 1)) + "]"
    result = _parse(text)
    assert isinstance(result, InputError)
    assert f"more than {yamlio.MAX_ALIASES} aliases" in str(result)


#: Deeply nested documents, as Python expressions of the depth ``n`` (built in a child process).
DEEP_SHAPES = {
    "flow-seq": '"[" * n + "]" * n',
    "flow-seq-unclosed": '"[" * n + " x"',
    "flow-map": '"{a: " * n + "1" + "}" * n',
    "json-object": "'{\"a\":' * n + '1' + '}' * n",
    "compact-seq": '"- " * n + "x"',
    "tagged-seq": '"!!seq [" * n + "]" * n',
    "anchored": '"&a [" * n + "]" * n',
}


@pytest.mark.parametrize("shape", sorted(DEEP_SHAPES))
def test_deep_nesting_is_one_input_error_not_a_crash(shape: str) -> None:
    """libyaml's C composer recurses on the C stack and crashed the interpreter (SIGSEGV) at a few
    ten thousand levels: run in a subprocess so that a regression fails here instead of killing pytest."""
    code = (
        "from joulectl import yamlio\n"
        "from joulectl.errors import InputError\n"
        "for n in (300, 3000, 30000, 100000):\n"
        f"    text = {DEEP_SHAPES[shape]}\n"
        "    try:\n"
        "        yamlio.parse_documents(text, 'deep.yaml')\n"
        "        print(n, 'parsed')\n"
        "    except InputError as e:\n"
        "        print(n, e)\n"
    )
    proc = run_python(code, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    assert [ln.split(" ", 1)[0] for ln in lines] == ["300", "3000", "30000", "100000"], proc.stdout
    for line in lines:
        assert line.split(" ", 1)[1].startswith("deep.yaml: "), line


def test_block_indentation_nesting_is_refused() -> None:
    text = "".join(" " * i + "-\n" for i in range(3000))
    result = _parse(text)
    assert isinstance(result, InputError)
    assert str(result) == f"fuzz.yaml: nested deeper than {yamlio.MAX_DEPTH} levels"


def test_unsafe_tags_are_not_constructed() -> None:
    result = _parse("!!python/object/apply:os.system ['touch /tmp/joulectl-pwned']")
    assert isinstance(result, InputError)
    assert "could not determine a constructor" in str(result)
    assert not Path("/tmp/joulectl-pwned").exists()


# -- files -------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_load_documents_of_arbitrary_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.getbasetemp() / "in.yaml"
    path.write_bytes(data)
    try:
        docs = yamlio.load_documents(str(path))
    except InputError as e:
        assert str(e).startswith(f"{path}: "), str(e)
        assert "\n" not in str(e)
    else:
        assert isinstance(docs, list)


def test_non_utf8_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(path))
    assert str(e.value) == f"{path}: not UTF-8 text (byte 9)"


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "MAX_INPUT_BYTES", 1 << 20)
    path = tmp_path / "big.yaml"
    with path.open("w") as fh:
        for i in range(200_000):
            fh.write(f"- item{i}\n")
    assert path.stat().st_size > 1 << 20
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(path))
    assert str(e.value) == f"{path}: file is larger than 1 MiB; refusing to parse it"


def test_oversized_stdin_is_refused_through_the_environment_limit() -> None:
    """``JOULECTL_MAX_INPUT_BYTES`` bounds what is read from stdin (a multi-megabyte document)."""
    proc = run_python(
        "from joulectl.yamlio import load_one\n"
        "from joulectl.errors import InputError\n"
        "try:\n    load_one('-', what='cluster spec')\n"
        "except InputError as e:\n    print(e)\n",
        env={"JOULECTL_MAX_INPUT_BYTES": str(2 << 20)},
        stdin="x: " + "y" * (5 << 20) + "\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "<stdin>: cluster spec is larger than 2 MiB; refusing to parse it\n"


def test_empty_and_multi_document_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n---\n")
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(empty), what="node list")
    assert str(e.value) == f"{empty}: node list is empty"
    multi = tmp_path / "multi.yaml"
    multi.write_text("a: 1\n---\nb: 2\n")
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(multi))
    assert str(e.value) == f"{multi}: expected one document, found 2"


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(tmp_path / "missing.yaml"))
    assert str(e.value) == f"{tmp_path / 'missing.yaml'}: file not found"
    with pytest.raises(InputError) as e:
        yamlio.load_one(str(tmp_path))
    assert str(e.value) == f"{tmp_path}: is a directory, expected a file"


@settings(max_examples=examples(800), deadline=None)
@given(json_values | st.text(max_size=50))
def test_load_json_map_accepts_only_objects(tmp_path_factory: pytest.TempPathFactory, value: Any) -> None:
    path = tmp_path_factory.getbasetemp() / "map.json"
    text = json.dumps(value) if not isinstance(value, str) or value.startswith("{") else value
    path.write_text(text)
    try:
        data = yamlio.load_json_map(str(path), what="model caps")
    except InputError as e:
        assert str(e).startswith(f"{path}: ")
        assert "\n" not in str(e)
    else:
        assert isinstance(data, dict)
        assert data == json.loads(text)


@pytest.mark.nightly
def test_documents_near_the_size_limit_parse_or_are_refused(tmp_path: Path) -> None:
    """Nightly: a 32 MiB flow list and a 16 MiB block document (under the 64 MiB default limit)
    and one just over the limit: results or one InputError, never a crash (in a child process)."""
    code = (
        "import sys\n"
        "from joulectl import yamlio\n"
        "from joulectl.errors import InputError\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        docs = yamlio.load_documents(path)\n"
        "        print(path, 'parsed', len(docs))\n"
        "    except InputError as e:\n"
        "        print(path, 'refused', e)\n"
    )
    flow, block, over = tmp_path / "flow.json", tmp_path / "block.yaml", tmp_path / "over.yaml"
    flow.write_text("[" + ",".join(["1"] * (16 << 20)) + "]")
    with block.open("w") as fh:
        for i in range(1 << 20):
            fh.write(f"- key{i}: value\n")
    with over.open("wb") as fh:
        fh.write(b"a: '" + b"x" * (yamlio.MAX_INPUT_BYTES + 10) + b"'\n")
    env = {**os.environ, "PYTHONPATH": REPO}
    child = subprocess.run([sys.executable, "-c", code, str(flow), str(block), str(over)], capture_output=True,
                           text=True, env=env, timeout=3600, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert lines[0].endswith("parsed 1") and lines[1].endswith("parsed 1")
    assert "refused" in lines[2] and "larger than 64 MiB" in lines[2]
