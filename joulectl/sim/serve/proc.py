"""The HTTP server in its own process, fed one encoded snapshot per tick (the tick loop's side).

The tick loop and the server used to share one interpreter, so every request took the tick
loop's interpreter lock; at 1,000 nodes and 200 requests/s that made ticks late. Now
:class:`ServerProcess` binds the listening socket here (a bad address or a port in use is a
usage error at the start, and the port survives a restart of the server), starts
``python -m joulectl.sim.serve.child`` with that socket, and writes each tick's snapshot to the
child's stdin as one frame: an 8-byte big-endian length and a pickle. A thread of its own writes
the frames and keeps only the newest one unsent, so a slow or stuck server process never blocks
the tick loop (it misses intermediate ticks, never half of one: the child swaps in a whole
snapshot). The child ends when its stdin closes: at :meth:`ServerProcess.close`, and when this
process dies in any way (SIGTERM, SIGINT, kill -9), since the kernel closes the pipe then; it
also watches its parent's pid, for fork-children of this process that would keep the pipe open.
A server process that dies during the run is restarted on the same socket (one warning line
each), at most :attr:`ServerProcess.max_restarts` times; after that the run goes on without
serving (one line).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from joulectl.errors import InputError, JoulectlError

#: The frame header: the pickle's length.
HEADER = struct.Struct(">Q")


def frame(message: tuple[Any, ...]) -> bytes:
    """One message for the server process: its length, then its pickle."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def exit_text(code: int) -> str:
    """How a process ended, from its return code."""
    if code < 0:
        try:
            import signal

            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Feed:
    """Writes frames to one server process from a thread of its own; only the newest unsent
    frame is kept (a tick the process could not take in time is skipped, never split)."""

    def __init__(self, pipe: Any, first: bytes) -> None:
        self._pipe = pipe
        self._first = first
        self._next: bytes | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="joulectl-sim-feed", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        with self._cond:
            self._next = data
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the frame being written (waiting at most ``timeout`` s for the thread)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        fd = self._pipe.fileno()
        data: bytes | None = self._first
        try:
            while data is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]  # the lock is released while the pipe is full
                with self._cond:
                    self._cond.wait_for(lambda: self._next is not None or self._closed)
                    data, self._next = (None, None) if self._closed else (self._next, None)
        except OSError:  # the process died: the tick loop's next publish notices and reports it
            pass
        finally:
            try:
                self._pipe.close()
            except OSError:
                pass


class ServerProcess:
    """The HTTP endpoints on ``host:port`` (0: any free port, see :attr:`port`) in a child process."""

    #: How many times a server process that died is started again before the run stops serving.
    max_restarts = 3

    def __init__(self, metas: Mapping[str, Any], host: str, port: int, *, threads: int = 4,
                 warn: Callable[[str], None] | None = None) -> None:
        if importlib.util.find_spec("waitress") is None:
            raise JoulectlError("--listen needs waitress: pip install 'joulectl[serve]'")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._sock = socket.create_server((host, port), family=family, backlog=1024)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--listen") from None
        except OverflowError:
            raise InputError(f"cannot listen on {host}:{port}: no such port", field="--listen") from None
        name = self._sock.getsockname()
        self.host, self.port = str(name[0]), int(name[1])
        self.threads = threads
        self.restarts = 0
        self.serving = True
        self._warn = warn
        self._metas = frame(("metas", dict(metas)))
        self._proc: subprocess.Popen[bytes] | None = None
        self._feed: _Feed | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process's pid (None once the run stopped serving)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> ServerProcess:
        fd = self._sock.fileno()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "joulectl.sim.serve.child", str(fd), str(self.threads), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(fd,), close_fds=True)
        self._feed = _Feed(self._proc.stdin, self._metas)
        return self

    def publish(self, data: bytes) -> None:
        """Hand one encoded snapshot (:func:`frame`) to the server process; never waits for it.
        A server process found dead is reported and started again (or serving stops)."""
        with self._lock:
            if not self.serving or self._proc is None or self._feed is None:
                return
            code = self._proc.poll()
            if code is not None:
                self._restart(code)
                if not self.serving or self._feed is None:
                    return
            self._feed.put(data)

    def _restart(self, code: int) -> None:
        old = self._proc.pid if self._proc is not None else "?"
        if self._feed is not None:
            self._feed.close(timeout=0)
        if self.restarts >= self.max_restarts:
            self.serving = False
            self._proc = self._feed = None
            self._sock.close()
            self._say(f"simulate run: the HTTP server process (pid {old}) died ({exit_text(code)}) after "
                      f"{self.restarts} restart(s); {self.url} is no longer served, the run goes on")
            return
        self.restarts += 1
        self.start()
        self._say(f"simulate run: the HTTP server process (pid {old}) died ({exit_text(code)}); restarted it "
                  f"on {self.url} (pid {self.pid})")

    def _say(self, message: str) -> None:
        if self._warn is not None:
            self._warn(message)

    def close(self) -> None:
        """Stop the server process (its stdin closes; killed if it has not ended in 5 s)."""
        with self._lock:
            self.serving = False
            proc, feed = self._proc, self._feed
            self._proc = self._feed = None
        if feed is not None:
            feed.close(timeout=1.0)  # its thread closes the pipe: the server process sees the end
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # stuck: the pipe's writer then fails and ends too
                proc.kill()
                proc.wait()
        if feed is not None:
            feed.close(timeout=5.0)
        try:
            self._sock.close()
        except OSError:
            pass
