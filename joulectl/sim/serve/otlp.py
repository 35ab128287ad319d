"""Push the simulator's telemetry over OTLP/HTTP: metrics every tick, events as log records.

The tick loop hands each tick's export to :meth:`Pusher.submit_tick`, which only appends to a
bounded queue; one background thread encodes and POSTs. When the collector is unreachable the
thread retries with exponential backoff, the queue keeps the newest exports (the oldest are
dropped first, and counted), one warning line is printed per outage, and the tick loop never
waits. Encoding: OTLP protobuf (``http/protobuf``, the default) through opentelemetry-proto's
generated messages, or OTLP JSON (``http/json``), the same documents the run writes to
``telemetry/otlp.jsonl``.

The OpenTelemetry SDK's exporters are built for the SDK's own metric pipeline (instruments,
readers, aggregation at export time); the simulator already has its data points with their own
timestamps, so it uses the official protocol messages and sends them itself.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from joulectl.errors import InputError
from joulectl.sim.telemetry import SCOPE
from joulectl.sim.tick import Event

PROTOCOLS = ("http/protobuf", "http/json")
#: Statuses worth retrying (OTLP/HTTP specification: 429, 502, 503, 504).
RETRYABLE = (429, 502, 503, 504)


@dataclass(frozen=True)
class Batch:
    """One POST: the signal (``metrics`` or ``logs``) and its OTLP JSON document."""

    signal: str
    doc: dict[str, Any]


def endpoints(url: str) -> dict[str, str]:
    """The metrics and logs URLs of an OTLP/HTTP base URL (as OTEL_EXPORTER_OTLP_ENDPOINT: the
    signal paths ``/v1/metrics`` and ``/v1/logs`` are appended; a URL that already ends in one of
    them is taken as its base)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"expected an http:// or https:// URL, got {url!r}", field="--otlp-endpoint")
    base = url.rstrip("/")
    for suffix in ("/v1/metrics", "/v1/logs"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return {"metrics": f"{base}/v1/metrics", "logs": f"{base}/v1/logs"}


def metrics_doc(lines: Iterable[str]) -> dict[str, Any]:
    """One ``ExportMetricsServiceRequest`` holding every node's resource of one tick."""
    resources: list[Any] = []
    for line in lines:
        resources.extend(json.loads(line).get("resourceMetrics", []))
    return {"resourceMetrics": resources}


def logs_doc(events: Sequence[Event]) -> dict[str, Any]:
    """An ``ExportLogsServiceRequest`` with one log record per event, one resource per node."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        attrs = [{"key": "event.name", "value": {"stringValue": e.name}}]
        for k, v in e.attributes.items():
            attrs.append({"key": str(k), "value": _any_value(v)})
        ns = str(int(e.time_s * 1e9))
        by_node.setdefault(e.node, []).append({
            "timeUnixNano": ns, "observedTimeUnixNano": ns, "severityNumber": 9, "severityText": "INFO",
            "body": {"stringValue": e.name}, "attributes": attrs})
    return {"resourceLogs": [
        {"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": node}},
                                     {"key": "service.name", "value": {"stringValue": "joulectl-sim"}}]},
         "scopeLogs": [{"scope": SCOPE, "logRecords": records}]}
        for node, records in sorted(by_node.items())]}


def _any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if v is None:
        return {"stringValue": ""}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v, sort_keys=True)}


def encode(batch: Batch, protocol: str) -> tuple[bytes, str]:
    """The request body and its content type."""
    if protocol == "http/json":
        return json.dumps(batch.doc, separators=(",", ":")).encode(), "application/json"
    from google.protobuf import json_format

    if batch.signal == "metrics":
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        msg: Any = ExportMetricsServiceRequest()
    else:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

        msg = ExportLogsServiceRequest()
    json_format.ParseDict(batch.doc, msg, ignore_unknown_fields=True)
    return msg.SerializeToString(), "application/x-protobuf"


class Pusher:
    """A bounded queue of exports and the thread that sends them."""

    def __init__(self, url: str, protocol: str = "http/protobuf", *, queue_max: int = 120,
                 timeout_s: float = 5.0, warn: Callable[[str], None] | None = None,
                 backoff_s: tuple[float, float] = (0.5, 10.0)) -> None:
        if protocol not in PROTOCOLS:
            raise InputError(f"must be one of {', '.join(PROTOCOLS)} (got {protocol!r})", field="--otlp-protocol")
        if protocol == "http/protobuf":
            try:
                import google.protobuf  # noqa: F401
                import opentelemetry.proto  # noqa: F401
            except ImportError:
                raise InputError("http/protobuf needs opentelemetry-proto: pip install 'joulectl[serve]' "
                                 "(or use --otlp-protocol http/json)", field="--otlp-protocol") from None
        self.urls = endpoints(url)
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self._warn = warn or (lambda msg: None)
        self._queue: collections.deque[Batch] = collections.deque(maxlen=max(1, queue_max))
        self._cond = threading.Condition()
        self._closing = False
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self.outages = 0
        self._down = False
        self._thread = threading.Thread(target=self._loop, name="joulectl-sim-otlp", daemon=True)
        self._thread.start()

    def submit_tick(self, otlp_lines: Sequence[str], events: Sequence[Event]) -> None:
        """Queue one tick's metrics (and its events as logs); never blocks on the network."""
        self._put(Batch("metrics", metrics_doc(otlp_lines)))
        if events:
            self._put(Batch("logs", logs_doc(events)))

    def _put(self, batch: Batch) -> None:
        with self._cond:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1  # the deque drops its oldest entry
            self._queue.append(batch)
            self._cond.notify()

    def _loop(self) -> None:
        delay = self.backoff_s[0]
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue[0]
            ok, retry = self._send(batch)
            with self._cond:
                if (ok or not retry) and self._queue and self._queue[0] is batch:
                    self._queue.popleft()
                if ok:
                    self.sent += 1
                    delay = self.backoff_s[0]
                    continue
                if not retry:
                    self.failed += 1
                    continue
                if self._closing:
                    return
                self._cond.wait(delay)
                delay = min(delay * 2, self.backoff_s[1])

    def _send(self, batch: Batch) -> tuple[bool, bool]:
        """(sent, worth retrying)."""
        body, ctype = encode(batch, self.protocol)
        req = urllib.request.Request(self.urls[batch.signal], data=body, method="POST",
                                     headers={"Content-Type": ctype, "User-Agent": "joulectl-sim"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code in RETRYABLE:
                self._outage(f"HTTP {exc.code}")
                return False, True
            self._warn(f"simulate run: OTLP {batch.signal} export refused by {self.urls[batch.signal]} "
                       f"(HTTP {exc.code}); that export is dropped")
            return False, False
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            self._outage(str(reason))
            return False, True
        if self._down:
            self._down = False
        return True, False

    def _outage(self, reason: str) -> None:
        if not self._down:
            self._down = True
            self.outages += 1
            self._warn(f"simulate run: OTLP endpoint {self.urls['metrics']} unreachable ({reason}); retrying, "
                       f"keeping the newest {self._queue.maxlen} exports")

    def close(self, flush_s: float = 2.0) -> None:
        """Send what is queued for up to ``flush_s`` seconds, then stop the thread."""
        deadline = time.monotonic() + flush_s
        while time.monotonic() < deadline:
            with self._cond:
                if not self._queue or self._down:
                    break
            time.sleep(0.02)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=max(0.1, self.timeout_s + 0.5))
