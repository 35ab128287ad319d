"""Fixtures of the what-if tests: files written under tmp_path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, Any], str]:
    """Write text, a list of JSON records (.jsonl) or YAML documents (.yaml) under tmp_path."""

    def put(name: str, content: Any) -> str:
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content)
        elif name.endswith(".jsonl"):
            path.write_text("".join(json.dumps(r) + "\n" for r in content))
        else:
            path.write_text(yaml.safe_dump_all(content, sort_keys=False))
        return str(path)

    return put
