"""The simulator's HTTP endpoints, a WSGI application served by waitress in a background thread
(of the server process, :mod:`joulectl.sim.serve.child`).

``GET /metrics`` (Prometheus text 0.0.4 or OpenMetrics 1.0 by ``Accept``), ``GET /telemetry/<node>``
(and ``GET /telemetry``: every node of one tick),
``POST /control/<node>`` (409: an emulated node's limits are written to its files),
``GET /exporters/<format>/<node>/metrics`` and ``GET /healthz``. Every answer comes from the latest
:class:`~joulectl.sim.serve.snapshot.Snapshot`; no request steps a node or touches a tree.

Why waitress: a production WSGI server in pure Python with no dependencies (start-up stays
cheap and it installs anywhere joulectl does), maintained by the Pylons project, and built around
an asyncore channel loop that buffers each response and times out idle channels, so a slow or
stuck client holds one channel, never a worker thread nor the tick loop. The standard library's
``http.server`` is documented as not for production; aiohttp or uvicorn would bring an event loop
and several packages for four read-only routes.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from joulectl.errors import InputError, JoulectlError
from joulectl.sim.serve import exporters
from joulectl.sim.serve.snapshot import Hub, Snapshot, telemetry_doc

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
JSON_TYPE = "application/json"
#: The largest request body read (a control request is a few hundred bytes).
MAX_BODY = 64 * 1024

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_STATUS = {200: "200 OK", 400: "400 Bad Request", 404: "404 Not Found", 405: "405 Method Not Allowed",
           409: "409 Conflict", 413: "413 Content Too Large", 503: "503 Service Unavailable"}
_EXPORTER = re.compile(r"^/exporters/([^/]+)/([^/]+)/metrics$")


def parse_listen(value: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``[v6]:PORT`` or ``PORT`` (127.0.0.1) into (host, port)."""
    text = value.strip()
    host, port_s = "127.0.0.1", text
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1:end + 2] != ":":
            raise InputError(f"expected [ADDR]:PORT, got {value!r}", field="--listen")
        host, port_s = text[1:end], text[end + 2:]
    elif ":" in text:
        host, _, port_s = text.rpartition(":")
        host = host or "127.0.0.1"
    if not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise InputError(f"expected ADDR:PORT with a port of 0 to 65535, got {value!r}", field="--listen")
    return host, int(port_s)


def wants_openmetrics(accept: str) -> bool:
    """Whether ``Accept`` ranks OpenMetrics at least as high as the Prometheus text format."""
    best_om, best_text = 0.0, 0.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if media == "application/openmetrics-text":
            best_om = max(best_om, q)
        elif media in ("text/plain", "text/*", "*/*"):
            best_text = max(best_text, q)
    return best_om > 0 and best_om >= best_text


def to_openmetrics(text: str) -> str:
    """The Prometheus text exposition ``text`` as OpenMetrics 1.0.

    The series are the same; OpenMetrics names a counter family without its ``_total`` suffix in
    HELP and TYPE (the samples keep it) and ends with ``# EOF``.
    """
    counters = set()
    for line in text.splitlines():
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            counters.add(line.split(" ")[2])
    out = []
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            kind, name, rest = line[2:6], line.split(" ")[2], line.split(" ", 3)[3:]
            if name in counters and name.endswith("_total"):
                line = " ".join(["#", kind, name[: -len("_total")], *rest])
        out.append(line)
    return "\n".join(out) + "\n# EOF\n"


class App:
    """The WSGI application over a :class:`Hub`."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            status, headers, body = self.route(environ)
        except Exception as exc:  # a bug must answer 500 in JSON, never a traceback to the client
            status, headers, body = 500, [], _json({"error": f"internal error: {type(exc).__name__}"})
            headers = [("Content-Type", JSON_TYPE)]
        headers = [*headers, ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        start_response(_STATUS.get(status, f"{status} Error"), headers)
        return [body]

    def route(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = str(environ.get("PATH_INFO", "/"))
        if path == "/healthz":
            return self._only(method, ("GET", "HEAD")) or self._healthz()
        if path == "/metrics":
            return self._only(method, ("GET", "HEAD")) or self._metrics(str(environ.get("HTTP_ACCEPT", "")))
        if path in ("/telemetry", "/telemetry/"):
            return self._only(method, ("GET", "HEAD")) or self._all_telemetry()
        if path.startswith("/telemetry/"):
            return self._only(method, ("GET", "HEAD")) or self._telemetry(path[len("/telemetry/"):])
        if path.startswith("/control/"):
            return self._only(method, ("POST",)) or self._control(path[len("/control/"):], environ)
        m = _EXPORTER.match(path)
        if m:
            return self._only(method, ("GET", "HEAD")) or self._exporter(m.group(1), m.group(2))
        return _error(404, f"no such endpoint: {path}")

    @staticmethod
    def _only(method: str, allowed: tuple[str, ...]) -> tuple[int, list[tuple[str, str]], bytes] | None:
        if method in allowed:
            return None
        status, headers, body = _error(405, f"method {method} not allowed (use {', '.join(allowed)})")
        return status, [*headers, ("Allow", ", ".join(allowed))], body

    def _snapshot(self) -> Snapshot | None:
        return self.hub.current

    def _healthz(self) -> tuple[int, list[tuple[str, str]], bytes]:
        snap = self._snapshot()
        return 200, [("Content-Type", JSON_TYPE)], _json({
            "status": "ok", "nodes": len(self.hub.metas), "tick": snap.tick if snap else 0,
            "ready": snap is not None})

    def _metrics(self, accept: str) -> tuple[int, list[tuple[str, str]], bytes]:
        snap = self._snapshot()
        if snap is None:
            return _error(503, "no tick has run yet")
        if wants_openmetrics(accept):
            body = snap.rendered("openmetrics", lambda: to_openmetrics(snap.prometheus_text).encode())
            return 200, [("Content-Type", OPENMETRICS_TYPE)], body
        body = snap.rendered("prometheus", snap.prometheus_text.encode)
        return 200, [("Content-Type", PROMETHEUS_TYPE)], body

    def _node(self, name: str) -> tuple[Snapshot | None, tuple[int, list[tuple[str, str]], bytes] | None]:
        meta = self.hub.metas.get(name)
        if meta is None:
            return None, _error(404, f"no emulated node named {name!r}")
        snap = self._snapshot()
        if snap is None or name not in snap.samples:
            return None, _error(503, "no tick has run yet")
        return snap, None

    def _telemetry(self, name: str) -> tuple[int, list[tuple[str, str]], bytes]:
        snap, err = self._node(name)
        if err is not None or snap is None:
            return err or _error(503, "no tick has run yet")
        meta = self.hub.metas[name]
        body = snap.rendered(("telemetry", name), lambda: _json(telemetry_doc(snap, meta)))
        return 200, [("Content-Type", JSON_TYPE)], body

    def _all_telemetry(self) -> tuple[int, list[tuple[str, str]], bytes]:
        snap = self._snapshot()
        if snap is None:
            return _error(503, "no tick has run yet")

        def make() -> bytes:
            docs = [telemetry_doc(snap, meta) for name, meta in sorted(self.hub.metas.items())
                    if name in snap.samples]
            return _json({"tick": snap.tick, "nodes": docs})

        return 200, [("Content-Type", JSON_TYPE)], snap.rendered("telemetry-all", make)

    def _control(self, name: str, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        if name not in self.hub.metas:
            return _error(404, f"no emulated node named {name!r}")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _error(400, "Content-Length is not a number")
        if length > MAX_BODY:
            return _error(413, f"a control request is at most {MAX_BODY} bytes")
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        try:
            doc = json.loads(raw) if raw else None
        except ValueError as exc:
            return _error(400, f"the body is not JSON ({exc.args[0] if exc.args else exc})")
        if not isinstance(doc, dict) or not isinstance(doc.get("action"), str):
            return _error(400, 'expected a JSON object with an "action" string')
        return _error(409, f"{name} is an emulated node: its limits are written to its files "
                           "(joulectl --root <tree> cap|governor), not through /control")

    def _exporter(self, fmt: str, name: str) -> tuple[int, list[tuple[str, str]], bytes]:
        render = exporters.RENDERERS.get(fmt)
        if render is None:
            return _error(404, f"no exporter format {fmt!r} (one of {', '.join(exporters.FORMATS)})")
        snap, err = self._node(name)
        if err is not None or snap is None:
            return err or _error(503, "no tick has run yet")
        meta = self.hub.metas[name]
        body = snap.rendered(("exporter", fmt, name), lambda: render(snap, meta))
        return 200, [("Content-Type", PROMETHEUS_TYPE)], body


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _error(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", JSON_TYPE)], _json({"error": message, "status": status})


class Server:
    """The app in a daemon thread of this process, on ``host:port`` (port 0: any free port, see
    :attr:`port`) or on ``sock``, a listening socket made elsewhere (the server process's)."""

    def __init__(self, hub: Hub, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None,
                 threads: int = 4) -> None:
        try:
            from waitress.server import create_server
        except ImportError:
            raise JoulectlError("--listen needs waitress: pip install 'joulectl[serve]'") from None
        where: dict[str, Any] = {"sockets": [sock]} if sock is not None else {"host": host, "port": port}
        try:
            self._server: Any = create_server(App(hub), threads=threads, ident="joulectl-sim", channel_timeout=30,
                                              connection_limit=256, expose_tracebacks=False, **where)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}", field="--listen") from None
        import logging

        # waitress warns "Task queue depth is N" on stderr whenever a request waits for a thread:
        # under a scraper's burst that is normal queueing, not a fault the operator can act on
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        self.host = str(self._server.effective_host)
        self.port = int(self._server.effective_port)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="joulectl-sim-http", daemon=True)

    def _serve(self) -> None:
        """waitress's channel loop, stopped between two polls (so no socket closes under a poll)."""
        srv = self._server
        try:
            while not self._stopping.is_set():
                srv.asyncore.loop(timeout=0.2, map=srv._map, use_poll=True, count=1)
        finally:
            for channel in list(srv._map.values()):
                if channel is not srv and channel is not srv.trigger:
                    try:
                        channel.close()
                    except OSError:
                        pass
            srv.close()
            srv.task_dispatcher.shutdown()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Server:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.ident is None:  # never started: nothing polls the sockets
            self._server.close()
            return
        self._stopping.set()
        self._server.pull_trigger()
        self._thread.join(timeout=5)
