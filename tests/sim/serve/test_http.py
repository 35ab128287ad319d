"""The simulator's HTTP endpoints over a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus

from joulectl.sim import ledger as lg
from joulectl.sim import runtime
from joulectl.sim.serve.face import NetworkFace, serving_url
from joulectl.sim.serve.http import parse_listen, to_openmetrics, wants_openmetrics

from .conftest import Served, run_in_thread, serve, write_spec


def test_healthz(served: Served) -> None:
    status, doc = served.get_json("/healthz")
    assert status == 200
    assert doc == {"status": "ok", "nodes": 4, "tick": 3, "ready": True}


def test_metrics_is_the_metrics_file_in_the_prometheus_text_format(served: Served) -> None:
    status, headers, body = served.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert body.decode() == (served.root / "metrics.prom").read_text()
    names = {f.name for f in parse_prometheus(body.decode())}
    assert {"hw_host_energy_joules", "hw_energy_joules", "hw_power_watts", "joulie_sim_node_power_watts"} <= names


def test_metrics_negotiates_openmetrics(served: Served) -> None:
    status, headers, body = served.request(
        "GET", "/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    assert status == 200
    assert headers["content-type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    text = body.decode()
    assert text.endswith("# EOF\n")
    # The strict OpenMetrics parser takes it, with the same series as the text format.
    om = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_openmetrics(text) for s in f.samples}
    prom_text = (served.root / "metrics.prom").read_text()
    prom = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_prometheus(prom_text) for s in f.samples}
    assert om == prom
    families = {f.name: f.type for f in parse_openmetrics(text)}
    assert families["hw_host_energy_joules"] == "counter"


@pytest.mark.parametrize(("accept", "expected"), [
    ("", False),
    ("*/*", False),
    ("text/plain", False),
    ("application/openmetrics-text", True),
    ("application/openmetrics-text; version=1.0.0; q=0.9, text/plain; q=0.9", True),
    ("application/openmetrics-text;q=0.3,text/plain;q=0.7", False),
    ("application/openmetrics-text;q=0", False),
    # What Prometheus 2.42 sends (scrape_protocols default):
    ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", True),
])
def test_accept_negotiation(accept: str, expected: bool) -> None:
    assert wants_openmetrics(accept) is expected


def test_openmetrics_conversion_renames_counter_families_only() -> None:
    text = ("# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
            "# HELP b_watts B.\n# TYPE b_watts gauge\nb_watts 2.5\n")
    assert to_openmetrics(text) == ("# HELP a A.\n# TYPE a counter\na_total 1\n"
                                    "# HELP b_watts B.\n# TYPE b_watts gauge\nb_watts 2.5\n# EOF\n")


def test_telemetry_of_a_node(served: Served) -> None:
    status, doc = served.get_json("/telemetry/h100-0")
    assert status == 200
    led = lg.load(str(served.root / "h100-0"))
    assert led is not None
    assert doc["node"] == "h100-0"
    assert doc["tick"] == 3
    assert doc["hardwareModel"] == "nvidia-h100-sxm-8gpu"
    assert doc["packagePowerWatts"] == led.state["P"]
    gpu = doc["gpu"]
    assert (gpu["present"], gpu["vendor"], gpu["product"], gpu["count"]) == (
        True, "nvidia", "NVIDIA H100 80GB HBM3", 8)
    assert len(gpu["capWattsPerGpuApplied"]) == len(gpu["capWattsPerGpuTarget"]) == 8
    assert gpu["capWattsPerGpuTarget"] == [700.0] * 8
    assert gpu["devices"][0]["busId"] == "0000:18:00.0"
    assert gpu["devices"][0]["uuid"] == "GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00"
    assert gpu["powerWattsTotal"] == pytest.approx(sum(d["powerWatts"] for d in gpu["devices"]), abs=0.1)
    assert doc["cpu"]["powerWatts"] + gpu["powerWattsTotal"] == pytest.approx(doc["packagePowerWatts"], abs=0.02)
    assert set(doc) >= {"packagePowerWatts", "cpu", "gpu", "hardwareModel", "pods", "ts"}
    assert doc["ts"].endswith("Z")


def test_telemetry_of_every_node_is_one_tick(served: Served) -> None:
    status, doc = served.get_json("/telemetry")
    assert status == 200
    assert [n["node"] for n in doc["nodes"]] == ["h100-0", "mi300x-0", "vm-0", "xeon-0"]
    assert {n["tick"] for n in doc["nodes"]} == {3}


def test_reading_telemetry_never_steps_a_node(served: Served) -> None:
    before = (served.root / "xeon-0" / "state").stat().st_mtime_ns, lg.load(str(served.root / "xeon-0"))
    bodies = {served.request("GET", "/telemetry/xeon-0")[2] for _ in range(50)}
    assert len(bodies) == 1
    after = lg.load(str(served.root / "xeon-0"))
    assert before[1] is not None and after is not None
    assert (after.tick, after.energy) == (before[1].tick, before[1].energy)


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), [
    ("GET", "/telemetry/nope", None, 404, "no emulated node named 'nope'"),
    ("GET", "/exporters/dcgm-exporter/nope/metrics", None, 404, "no emulated node named 'nope'"),
    ("GET", "/exporters/nvitop/h100-0/metrics", None, 404, "no exporter format 'nvitop'"),
    ("GET", "/nowhere", None, 404, "no such endpoint: /nowhere"),
    ("POST", "/control/nope", b'{"action": "rapl.set_power_cap_watts", "value": 200}', 404,
     "no emulated node named 'nope'"),
    ("POST", "/control/xeon-0", b"{not json", 400, "the body is not JSON"),
    ("POST", "/control/xeon-0", b"[1, 2]", 400, 'expected a JSON object with an "action" string'),
    ("POST", "/control/xeon-0", b"", 400, 'expected a JSON object with an "action" string'),
    ("POST", "/control/xeon-0", b'{"action": "rapl.set_power_cap_watts", "value": 200}', 409,
     "xeon-0 is an emulated node: its limits are written to its files"),
    ("GET", "/control/xeon-0", None, 405, "method GET not allowed (use POST)"),
    ("DELETE", "/metrics", None, 405, "method DELETE not allowed (use GET, HEAD)"),
])
def test_errors_are_json_with_their_status(served: Served, method: str, path: str, body: bytes | None,
                                           status: int, message: str) -> None:
    got, headers, raw = served.request(method, path, body=body,
                                       headers={"Content-Type": "application/json"} if body is not None else None)
    assert got == status
    assert headers["content-type"] == "application/json"
    doc = json.loads(raw)
    assert doc["status"] == status
    assert doc["error"].startswith(message)
    assert "Traceback" not in raw.decode()
    if status == 405:
        assert "allow" in headers


def test_a_malformed_request_line_is_400_not_a_traceback(served: Served) -> None:
    with socket.create_connection((served.host, served.port), timeout=5) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        reply = sock.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.0 400") or reply.startswith("HTTP/1.1 400")
    assert "Traceback" not in reply


def test_an_oversized_control_body_is_refused(served: Served) -> None:
    status, _h, raw = served.request("POST", "/control/xeon-0", body=b"x" * (64 * 1024 + 1))
    assert status == 413
    assert json.loads(raw)["error"] == "a control request is at most 65536 bytes"


def test_before_the_first_tick_metrics_are_503(tmp_path: Path) -> None:
    from joulectl.sim.serve.proc import ServerProcess

    server = ServerProcess({}, "127.0.0.1", 0).start()
    try:
        s = Served(tmp_path, "", NetworkFace(str(tmp_path)), server.host, server.port)
        status, doc = s.get_json("/metrics")
        assert (status, doc["error"]) == (503, "no tick has run yet")
        assert s.get_json("/healthz") == (200, {"status": "ok", "nodes": 0, "tick": 0, "ready": False})
    finally:
        server.close()


@pytest.mark.parametrize(("value", "expected"), [
    ("9100", ("127.0.0.1", 9100)),
    (":9100", ("127.0.0.1", 9100)),
    ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("[::1]:8080", ("::1", 8080)),
])
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["localhost", "1.2.3.4:99999", "[::1]8080", "host:-1", ""])
def test_bad_listen_is_a_usage_error_through_the_cli(cli: Callable[..., Any], tmp_path: Path, value: str) -> None:
    spec = write_spec(tmp_path)
    r = cli("simulate", "run", spec, "--root", tmp_path / "r", "--ticks", "1", "--fast", "--listen", value)
    assert r.exit_code == 2
    assert r.stderr.startswith("joulectl: error: --listen: expected")
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "r").exists()


def test_a_port_in_use_is_a_usage_error(cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = cli("simulate", "run", spec, "--root", tmp_path / "r", "--ticks", "1", "--fast", "--listen",
                f"127.0.0.1:{port}")
    assert r.exit_code == 2
    assert f"--listen: cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr


def test_serve_file_names_the_running_server_and_is_removed_at_the_end(tmp_path: Path) -> None:
    s = serve(tmp_path)
    try:
        assert serving_url(str(s.root)) == f"http://127.0.0.1:{s.port}"
    finally:
        s.face.close()
    assert serving_url(str(s.root)) is None
    assert not (s.root / "serve.json").exists()


def test_readers_during_ticks_never_see_half_a_tick(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    root = tmp_path / "root"
    face = NetworkFace(str(root), listen=("127.0.0.1", 0))
    thread, result = run_in_thread(spec, root, face, ticks=30, tick_s=0.05)
    seen: list[tuple[int, set[str], set[int]]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        import http.client

        while thread.is_alive():
            if face.server is None:
                time.sleep(0.01)
                continue
            try:
                conn = http.client.HTTPConnection("127.0.0.1", face.server.port, timeout=5)
                conn.request("GET", "/telemetry")
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
            except OSError as exc:  # the server closes at the end of the run
                if thread.is_alive():
                    errors.append(exc)
                return
            if resp.status != 200:
                continue
            doc = json.loads(body)
            seen.append((doc["tick"], {n["ts"] for n in doc["nodes"]}, {n["tick"] for n in doc["nodes"]}))

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for r in readers:
        r.start()
    thread.join(60)
    for r in readers:
        r.join(10)
    face.close()
    assert "error" not in result, result.get("error")
    assert result["summary"].ticks == 30
    assert not errors
    assert len(seen) > 10
    for tick, stamps, ticks in seen:
        # Every node of one answer is of the same tick, at the same time.
        assert ticks == {tick}
        assert len(stamps) == 1
    assert max(t for t, _s, _k in seen) > min(t for t, _s, _k in seen)


def test_stuck_clients_do_not_stall_the_tick_loop(tmp_path: Path) -> None:
    """Eight clients hold connections (half a request line; answers never read) while the loop
    ticks: it keeps ticking and /healthz keeps answering. Counts, not wall-time bounds: the loop
    must make 5 ticks while 6 health checks are answered, within 3,000 checks."""
    import http.client

    spec = write_spec(tmp_path)
    root = tmp_path / "root"
    face = NetworkFace(str(root), listen=("127.0.0.1", 0))
    stop = threading.Event()
    thread, result = run_in_thread(spec, root, face, ticks=1_000_000, tick_s=0.05, stop=stop)
    while (face.hub is None or face.hub.current is None) and thread.is_alive():
        time.sleep(0.01)
    assert face.server is not None and face.hub is not None and face.hub.current is not None, result.get("error")
    port = face.server.port
    stuck = []
    try:
        # Half a request line, and full requests whose answers are never read, held open.
        for i in range(8):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.sendall(b"GET /metr" if i % 2 else b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            stuck.append(sock)
        first = face.hub.current.tick
        served_ok = checks = 0
        while (served_ok < 6 or face.hub.current.tick - first < 5) and checks < 3000:
            assert thread.is_alive(), result.get("error")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/healthz")
            served_ok += conn.getresponse().status == 200
            conn.close()
            checks += 1
            time.sleep(0.02)
        assert served_ok >= 6 and face.hub.current.tick - first >= 5, (served_ok, face.hub.current.tick - first)
    finally:
        stop.set()
        thread.join(60)
        for sock in stuck:
            sock.close()
        face.close()
    assert "error" not in result, result.get("error")
    assert result["summary"].ticks >= 5


def test_stop_event_ends_a_run_in_another_thread_after_its_tick(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    face = NetworkFace(str(tmp_path / "root"))
    stop = threading.Event()
    ticks: list[int] = []
    thread, result = run_in_thread(spec, tmp_path / "root", face, ticks=1000, tick_s=0.02, stop=stop)

    def watch() -> None:
        while thread.is_alive() and (face.hub is None or face.hub.current is None or face.hub.current.tick < 3):
            time.sleep(0.005)
        stop.set()
        if face.hub is not None and face.hub.current is not None:
            ticks.append(face.hub.current.tick)

    watch()
    thread.join(30)
    assert not thread.is_alive()
    summary = result["summary"]
    assert summary.interrupted is True
    assert 3 <= summary.ticks <= ticks[0] + 1


def test_the_network_face_is_imported_only_when_asked_for(tmp_path: Path) -> None:
    """``--version`` and a run without --listen/--otlp-endpoint import neither the server, nor
    waitress, nor the protobuf messages."""
    import os
    import subprocess
    import sys

    spec = write_spec(tmp_path)
    code = (
        "import sys\nfrom joulectl.cli import run\n"
        "args = sys.argv[1:]\n"
        "code = run(args)\n"
        "heavy = sorted(m for m in ('waitress', 'google.protobuf', 'opentelemetry', 'joulectl.sim.serve')"
        " if m in sys.modules)\n"
        "print('HEAVY', code, heavy, file=sys.stderr)\n"
    )
    for args in (["--version"], ["simulate", "run", spec, "--root", str(tmp_path / "r"), "--ticks", "1", "--fast"]):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              env={**os.environ, "NO_COLOR": "1"}, timeout=120)
        assert "HEAVY 0 []" in proc.stderr, (args, proc.stderr)


def test_status_watch_reads_the_served_snapshot_not_the_trees(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """``simulate status --watch`` asks the running server (``serve.json`` names it) for its
    snapshot: two more ticks run on the trees without the server show in ``simulate status``
    (tick 5) but not in the watch, which shows the snapshot the server holds (tick 3)."""
    s = serve(tmp_path)
    try:
        runtime.run(s.spec, str(s.root), ticks=2, fast=True, workers=1)
        status, doc = s.get_json("/healthz")
        assert (status, doc["tick"]) == (200, 3)
        trees = cli("simulate", "status", "--root", s.root, "-o", "json")
        assert trees.exit_code == 0, trees.stderr
        assert {n["ticks"] for n in json.loads(trees.stdout)["nodes"]} == {5}
        watch = cli("simulate", "status", "--root", s.root, "--watch", "0.1", "--count", "1")
        assert watch.exit_code == 0, watch.stderr
        rows = [line.split() for line in watch.stdout.splitlines()[1:] if line.strip()]
        header = watch.stdout.splitlines()[0].split()
        assert rows and {r[header.index("TICKS")] for r in rows} == {"3"}, watch.stdout
    finally:
        s.face.close()
