"""A real Prometheus server scrapes a running simulator; PromQL through its HTTP API matches the
emulated power.

``rate(x[1m])`` is only the counter's slope once the series covers the whole minute (Prometheus
extrapolates a partial window), so the test scrapes for a little over a minute: it is marked slow,
and CI runs it (``.ci/run`` installs Debian's ``prometheus``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from joulectl.sim.serve.face import NetworkFace

from .conftest import run_in_thread, write_spec

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {name: prom}
spec:
  defaults:
    baseLoad: {cpuUtil: 0.7, gpuUtil: 0.8, memoryIntensity: 0.2}
  facility: {ambientC: 20, amplitudeC: 0, periodH: 24}
  pools:
  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}
  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}
"""

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None and not os.environ.get("CI"),
                       reason="Debian's prometheus is not installed (.ci/run installs it in CI)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]  # type: ignore[no-any-return]


def _value(result: list[dict[str, Any]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_prometheus_scrapes_metrics_and_an_exporter_page_and_rate_matches_power(tmp_path: Path) -> None:
    assert PROMETHEUS is not None, "prometheus is missing in CI: .ci/run must install Debian's prometheus"
    spec = write_spec(tmp_path, SPEC)
    root = tmp_path / "root"
    face = NetworkFace(str(root), listen=("127.0.0.1", 0))
    stop = threading.Event()
    thread, result = run_in_thread(spec, root, face, ticks=300, tick_s=1.0, stop=stop)
    deadline = time.monotonic() + 60
    while face.server is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert face.server is not None, result.get("error")
    target = f"127.0.0.1:{face.server.port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
- job_name: sim
  metrics_path: /metrics
  static_configs: [{{targets: ["{target}"]}}]
- job_name: dcgm
  metrics_path: /exporters/dcgm-exporter/h100-0/metrics
  static_configs: [{{targets: ["{target}"]}}]
""")
    port = _free_port()
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # Two scrapes of both jobs first, then a whole minute of samples for rate()'s window.
        deadline = time.monotonic() + 60
        scrapes = 0.0
        while time.monotonic() < deadline:
            try:
                scrapes = min(_value(_query(port, 'count_over_time(up{job="sim"}[5m])')),
                              _value(_query(port, 'count_over_time(up{job="dcgm"}[5m])')))
            except (OSError, AssertionError):
                scrapes = 0.0
            if scrapes >= 2:
                break
            time.sleep(0.5)
        assert scrapes >= 2, "Prometheus did not scrape both endpoints twice"
        assert _value(_query(port, 'min(up)')) == 1.0
        time.sleep(63)
        for node in ("xeon-0", "h100-0"):
            rate = _value(_query(port, f'rate(hw_host_energy_joules_total{{node="{node}"}}[1m])'))
            power = _value(_query(port, f'avg_over_time(joulie_sim_node_power_watts{{node="{node}"}}[1m])'))
            assert rate == pytest.approx(power, rel=0.02), node
        dcgm_rate = _value(_query(port, "sum(rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m])) / 1000"))
        dcgm_power = _value(_query(port, "sum(avg_over_time(DCGM_FI_DEV_POWER_USAGE[1m]))"))
        assert dcgm_rate == pytest.approx(dcgm_power, rel=0.02)
        gpus = _query(port, 'DCGM_FI_DEV_POWER_USAGE{Hostname="h100-0"}')
        assert len(gpus) == 8
    finally:
        prom.terminate()
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
        stop.set()
        thread.join(30)
        face.close()
        assert not thread.is_alive()
        assert "error" not in result, result.get("error")
