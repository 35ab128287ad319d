"""The server process: ``python -m joulectl.sim.serve.child FD THREADS PARENT_PID``.

Serves the endpoints of :mod:`joulectl.sim.serve.http` with waitress on the listening socket
``FD`` (inherited from the run, :class:`joulectl.sim.serve.proc.ServerProcess`), from snapshots
read on stdin: frames of an 8-byte big-endian length and a pickle, first ``("metas", {node:
NodeMeta})``, then one ``("snap", tick, time_s, samples, facility, prometheus_text, idle_j,
rate_w)`` per tick the run published. Each snapshot is swapped in whole, so a request reads one
tick. The process ends when stdin ends (the run closed it or died) or when its parent is gone;
Ctrl-C in a terminal is the run's to handle (the run then closes stdin), so SIGINT is ignored.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import sys
import threading
from typing import IO, Any

from joulectl.sim.serve.proc import HEADER

#: How often (s) the process checks that the run that started it is alive.
PARENT_POLL_S = 0.5


def _read(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _watch_parent(parent: int) -> None:
    stop = threading.Event()
    while not stop.wait(PARENT_POLL_S):
        if os.getppid() != parent:
            os._exit(0)


def serve(fd: int, threads: int, parent: int, stream: IO[bytes]) -> int:
    from joulectl.sim.serve.http import Server
    from joulectl.sim.serve.snapshot import Hub, Snapshot

    threading.Thread(target=_watch_parent, args=(parent,), name="joulectl-sim-parent", daemon=True).start()
    head = _read(stream, HEADER.size)
    body = _read(stream, HEADER.unpack(head)[0]) if head is not None else None
    if body is None:
        return 0  # the run ended before it sent anything
    kind, metas = pickle.loads(body)
    if kind != "metas":
        raise ValueError(f"expected the node metadata first, got {kind!r}")
    hub = Hub(metas)
    server = Server(hub, sock=socket.socket(fileno=fd), threads=threads).start()
    try:
        while True:
            head = _read(stream, HEADER.size)
            body = _read(stream, HEADER.unpack(head)[0]) if head is not None else None
            if body is None:
                return 0
            message: tuple[Any, ...] = pickle.loads(body)
            if message[0] == "snap":
                _kind, tick, time_s, samples, facility, text, idle, rate = message
                hub.install(Snapshot(tick, time_s, samples, facility, text, idle, rate))
    finally:
        server.close()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fd, threads, parent = (int(a) for a in argv)
        return serve(fd, threads, parent, sys.stdin.buffer)
    except Exception as exc:  # one line for the run's stderr, never a traceback
        sys.stderr.write(f"joulectl: error: HTTP server process: {type(exc).__name__}: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
