"""A simulator run that serves its snapshots on 127.0.0.1 (a free port), for the network tests."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim import runtime
from joulectl.sim.serve.face import NetworkFace

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: serve}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.8, gpuUtil: 0.9, memoryIntensity: 0.2}
  facility: {ambientC: 20, amplitudeC: 0, periodH: 24}
  pools:
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}
  - {name: vm, profile: vm-no-powercap, count: 1}
"""


@dataclass
class Served:
    """A run's root, its network face and the address it serves."""

    root: Path
    spec: str
    face: NetworkFace
    host: str
    port: int

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get_json(self, path: str) -> tuple[int, Any]:
        status, _h, body = self.request("GET", path)
        return status, json.loads(body)


def write_spec(tmp_path: Path, text: str = SPEC) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


def serve(tmp_path: Path, *, ticks: int = 3, spec_text: str = SPEC, **run_kwargs: Any) -> Served:
    """Run ``ticks`` fast ticks with ``--listen 127.0.0.1:0``; the server keeps serving the last one."""
    spec = write_spec(tmp_path, spec_text)
    root = tmp_path / "root"
    face = NetworkFace(str(root), listen=("127.0.0.1", 0))
    runtime.run(spec, str(root), ticks=ticks, fast=True, workers=1, on_start=face.on_start, on_tick=face.on_tick,
                **run_kwargs)
    assert face.server is not None
    served = Served(root, spec, face, face.server.host, face.server.port)
    wait_for_tick(served, ticks)
    return served


def wait_for_tick(served: Served, tick: int, checks: int = 2000) -> None:
    """Poll ``/healthz`` until the server process serves ``tick`` (it gets each snapshot from the
    run's process a moment after the tick ends)."""
    for _ in range(checks):
        try:
            status, doc = served.get_json("/healthz")
        except OSError:
            status, doc = 0, {}
        if status == 200 and doc.get("tick", 0) >= tick:
            return
        time.sleep(0.005)
    raise AssertionError(f"the server never served tick {tick}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("serve"))
    yield s
    s.face.close()


def run_in_thread(spec: str, root: Path, face: NetworkFace, *, ticks: int, tick_s: float,
                  stop: threading.Event | None = None) -> tuple[threading.Thread, dict[str, Any]]:
    """A real-time run in a background thread; ``result["summary"]`` once it ends (``stop`` ends it
    after the current tick)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["summary"] = runtime.run(spec, str(root), ticks=ticks, tick_s=tick_s, workers=1,
                                            on_start=face.on_start, on_tick=face.on_tick, stop_event=stop)
        except BaseException as exc:  # reported by the test
            result["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, result
