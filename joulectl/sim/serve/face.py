"""What ``simulate run --listen/--otlp-endpoint`` adds to the tick loop, in one object.

:meth:`NetworkFace.on_start` builds the node metadata and starts the HTTP server process
(:mod:`joulectl.sim.serve.proc`; and writes ``<root>/serve.json`` so that ``simulate status
--watch`` finds it); :meth:`NetworkFace.on_tick` builds each tick's snapshot, hands it encoded to
the server process and queues its OTLP export; :meth:`NetworkFace.close` stops both and removes
``serve.json``. Both hooks run in the tick loop's thread and never wait on a client, on the
server process or on the network; no request runs in the tick loop's interpreter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from joulectl.sim.identity import node_metas
from joulectl.sim.serve.snapshot import Hub

SERVE_FILE = "serve.json"


class NetworkFace:
    """The HTTP endpoints and the OTLP pusher of one run (either may be off)."""

    def __init__(self, root: str, *, listen: tuple[str, int] | None = None, otlp_url: str | None = None,
                 otlp_protocol: str = "http/protobuf", warn: Callable[[str], None] | None = None,
                 announce: Callable[[str], None] | None = None) -> None:
        self.root = os.path.abspath(root)
        self.listen = listen
        self.hub: Hub | None = None
        self.server: Any = None
        self.pusher: Any = None
        self._warn = warn
        self._announce = announce
        if otlp_url is not None:
            from joulectl.sim.serve.otlp import Pusher

            self.pusher = Pusher(otlp_url, otlp_protocol, warn=warn)

    def on_start(self, spec: Any, models: list[Any]) -> None:
        self.hub = Hub(node_metas(spec, models))
        if self.listen is not None:
            from joulectl.sim.serve.proc import ServerProcess

            self.server = ServerProcess(self.hub.metas, *self.listen, warn=self._warn).start()
            _write_serve_file(self.root, self.server.url)
            if self._announce is not None:
                self._announce(f"serving {self.server.url} (/metrics, /telemetry/<node>, /exporters/<format>/"
                               "<node>/metrics, /healthz)")

    def on_tick(self, out: Any) -> None:
        if self.hub is not None:
            snap = self.hub.publish(out.tick, out.samples, out.facility, out.prometheus_text)
            if self.server is not None and self.server.serving:
                from joulectl.sim.serve.proc import frame

                self.server.publish(frame(("snap", snap.tick, snap.time_s, snap.samples, snap.facility,
                                           snap.prometheus_text, snap.idle_j, snap.rate_w)))
        if self.pusher is not None:
            self.pusher.submit_tick(out.otlp_lines, out.events)

    def close(self) -> None:
        if self.server is not None:
            try:
                os.unlink(os.path.join(self.root, SERVE_FILE))
            except OSError:
                pass
            self.server.close()
            self.server = None
        if self.pusher is not None:
            self.pusher.close()
            if self.pusher.dropped and self._warn is not None:
                self._warn(f"simulate run: {self.pusher.dropped} OTLP export(s) dropped while the endpoint was "
                           "unreachable")
            self.pusher = None


def _write_serve_file(root: str, url: str) -> None:
    path = os.path.join(root, SERVE_FILE)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"url": url, "pid": os.getpid()}, fh)
    os.replace(tmp, path)


def serving_url(root: str) -> str | None:
    """The URL of the run serving ``root`` (from ``serve.json``), or None when none is running."""
    try:
        with open(os.path.join(os.path.abspath(root), SERVE_FILE), encoding="utf-8") as fh:
            doc = json.load(fh)
        pid = int(doc["pid"])
        url = str(doc["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return url
