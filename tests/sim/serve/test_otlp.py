"""OTLP/HTTP push: a receiver in the test decodes what was pushed with opentelemetry-proto."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from joulectl.errors import InputError
from joulectl.sim import runtime
from joulectl.sim.serve.face import NetworkFace
from joulectl.sim.serve.otlp import Pusher, endpoints
from joulectl.sim.tick import Event

from .conftest import write_spec


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: answers ``statuses`` in turn (then 200) and keeps bodies."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.statuses = list(statuses or [])
        recv = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = recv.statuses.pop(0) if recv.statuses else 200
                if status == 200:
                    recv.requests.append((self.path, self.headers.get("Content-Type", ""), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _attrs(kvs: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in kvs}


def test_a_run_pushes_every_tick_as_protobuf(tmp_path: Path, receiver: Receiver) -> None:
    spec = write_spec(tmp_path)
    face = NetworkFace(str(tmp_path / "root"), otlp_url=receiver.url)
    runtime.run(spec, str(tmp_path / "root"), ticks=3, fast=True, workers=1, on_start=face.on_start,
                on_tick=face.on_tick)
    face.close()
    metrics = [(p, c, b) for p, c, b in receiver.requests if p == "/v1/metrics"]
    assert len(metrics) == 3
    assert {c for _p, c, _b in metrics} == {"application/x-protobuf"}
    req = ExportMetricsServiceRequest.FromString(metrics[-1][2])
    hosts = {_attrs(rm.resource.attributes).get("host.name") for rm in req.resource_metrics}
    # The VM node exports nothing (no real collector could measure it); the facility is a resource
    # of its own, without a host.name.
    assert hosts == {"xeon-0", "h100-0", "mi300x-0", None}
    xeon = next(rm for rm in req.resource_metrics if _attrs(rm.resource.attributes).get("host.name") == "xeon-0")
    names = {m.name: m for m in xeon.scope_metrics[0].metrics}
    assert set(names) == {"hw.host.energy", "hw.energy", "joulie.sim.rapl.psys.energy"}
    host = names["hw.host.energy"]
    assert host.unit == "J"
    assert host.sum.is_monotonic and host.sum.aggregation_temporality == 2
    # The pushed value is the run's own counter (otlp.jsonl holds the same export).
    line = next(json.loads(x) for x in (tmp_path / "root" / "telemetry" / "otlp.jsonl").read_text().splitlines()
                if '"xeon-0"' in x)
    want = line["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"][0]["asDouble"]
    assert host.sum.data_points[0].as_double == want


def test_json_protocol_posts_the_otlp_json_documents(tmp_path: Path, receiver: Receiver) -> None:
    spec = write_spec(tmp_path)
    face = NetworkFace(str(tmp_path / "root"), otlp_url=receiver.url + "/v1/metrics", otlp_protocol="http/json")
    runtime.run(spec, str(tmp_path / "root"), ticks=2, fast=True, workers=1, on_start=face.on_start,
                on_tick=face.on_tick)
    face.close()
    bodies = [json.loads(b) for p, c, b in receiver.requests if p == "/v1/metrics"]
    assert len(bodies) == 2
    assert {c for p, c, _b in receiver.requests} == {"application/json"}
    from google.protobuf import json_format

    msg = json_format.ParseDict(bodies[0], ExportMetricsServiceRequest())
    assert len(msg.resource_metrics) == 4


def test_events_are_pushed_as_log_records(receiver: Receiver) -> None:
    pusher = Pusher(receiver.url)
    pusher.submit_tick([], [Event(1_700_000_000.5, "xeon-0", "joulie.sim.write.rejected",
                                  {"path": "sys/x", "errno": 22, "value": "abc"})])
    pusher.close()
    logs = [b for p, _c, b in receiver.requests if p == "/v1/logs"]
    assert len(logs) == 1
    req = ExportLogsServiceRequest.FromString(logs[0])
    rl = req.resource_logs[0]
    assert _attrs(rl.resource.attributes)["host.name"] == "xeon-0"
    rec = rl.scope_logs[0].log_records[0]
    assert rec.time_unix_nano == 1_700_000_000_500_000_000
    assert rec.body.string_value == "joulie.sim.write.rejected"
    attrs = {kv.key: kv.value for kv in rec.attributes}
    assert attrs["event.name"].string_value == "joulie.sim.write.rejected"
    assert attrs["errno"].int_value == 22
    assert attrs["value"].string_value == "abc"


def test_an_outage_warns_once_keeps_the_newest_exports_and_recovers() -> None:
    # Three 503 answers (one outage), then the collector takes everything.
    receiver = Receiver(statuses=[503, 503, 503])
    warnings: list[str] = []
    pusher = Pusher(receiver.url, queue_max=5, warn=warnings.append, backoff_s=(0.01, 0.02))
    try:
        for i in range(3):
            pusher.submit_tick([json.dumps({"resourceMetrics": [{"tick": i}]})], [])
        deadline = time.monotonic() + 10
        while pusher.sent < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        pusher.close()
        receiver.close()
    assert pusher.sent == 3
    assert pusher.outages == 1
    assert len(warnings) == 1
    assert warnings[0].startswith(f"simulate run: OTLP endpoint {receiver.url}/v1/metrics unreachable (HTTP 503)")


def test_an_unreachable_collector_never_blocks_and_loses_at_most_the_queue() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    warnings: list[str] = []
    pusher = Pusher(f"http://127.0.0.1:{port}", protocol="http/json", queue_max=10, warn=warnings.append,
                    backoff_s=(0.05, 0.1))
    for i in range(200):
        pusher.submit_tick([json.dumps({"resourceMetrics": [{"tick": i}]})], [])
    pusher.close(flush_s=0.1)
    # The queue holds the newest 10; the rest was dropped, and nothing was sent.
    assert pusher.sent == 0
    assert pusher.dropped == 190
    assert len(warnings) == 1
    assert "unreachable" in warnings[0]


def test_a_refused_export_is_dropped_with_a_warning() -> None:
    receiver = Receiver(statuses=[400])
    warnings: list[str] = []
    pusher = Pusher(receiver.url, protocol="http/json", warn=warnings.append)
    pusher.submit_tick([json.dumps({"resourceMetrics": []})], [])
    pusher.submit_tick([json.dumps({"resourceMetrics": []})], [])
    pusher.close()
    receiver.close()
    assert (pusher.sent, pusher.failed) == (1, 1)
    assert warnings == [f"simulate run: OTLP metrics export refused by {receiver.url}/v1/metrics (HTTP 400); "
                        "that export is dropped"]


@pytest.mark.parametrize(("url", "expected"), [
    ("http://c:4318", {"metrics": "http://c:4318/v1/metrics", "logs": "http://c:4318/v1/logs"}),
    ("http://c:4318/", {"metrics": "http://c:4318/v1/metrics", "logs": "http://c:4318/v1/logs"}),
    ("https://c/otlp/v1/metrics", {"metrics": "https://c/otlp/v1/metrics", "logs": "https://c/otlp/v1/logs"}),
])
def test_endpoints(url: str, expected: dict[str, str]) -> None:
    assert endpoints(url) == expected


@pytest.mark.parametrize("url", ["c:4318", "ftp://c/", "http://"])
def test_a_bad_endpoint_is_an_input_error(url: str) -> None:
    with pytest.raises(InputError, match="--otlp-endpoint: expected an http:// or https:// URL"):
        endpoints(url)


def test_a_bad_protocol_through_the_cli(cli: Any, tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    r = cli("simulate", "run", spec, "--root", tmp_path / "r", "--ticks", "1", "--fast", "--otlp-endpoint",
            "http://127.0.0.1:9", "--otlp-protocol", "grpc")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("joulectl: error: --otlp-protocol: must be one of http/protobuf, http/json "
                                "(got 'grpc')")
