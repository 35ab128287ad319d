"""Tables on a real colour terminal (a pseudo-terminal of 80 and 120 columns): bus ids, UUIDs,
names and headers arrive whole, never re-spelt as emoji nor cut."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from .conftest import render_one

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_tty(args: list[str], columns: int) -> str:
    """``joulectl ARGS`` on a pseudo-terminal of ``columns`` x 50; what it printed, ANSI removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([sys.executable, "-m", "joulectl", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r\n", "\n")


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_one(tmp_path_factory.mktemp("tty"), "nvidia-h100-sxm-8gpu", "h100")


@pytest.mark.parametrize("columns", [80, 120])
def test_discover_table_keeps_bus_ids_and_headers_whole(h100: Path, columns: int) -> None:
    devices = json.loads(subprocess.run(
        [sys.executable, "-m", "joulectl", "--root", str(h100), "discover", "-o", "json"], capture_output=True,
        text=True, check=True, env={**os.environ, "NO_COLOR": "1"}).stdout)["status"]["gpu"]["devices"]
    bus_ids = [d["busId"] for d in devices]
    assert "0000:ab:00.0" in bus_ids  # ":ab:" is rich's emoji code for 🆎
    text = run_on_tty(["--root", str(h100), "discover"], columns)
    assert "🆎" not in text
    assert "…" not in text
    for bus in bus_ids:
        assert bus in text, (columns, bus)
    for header in ("BUS ID", "VENDOR", "DRIVER", "MODEL", "CONTROL"):
        assert header in text, (columns, header)
    # A model name is whole on one line.
    assert "NVIDIA H100 80GB HBM3" in text
