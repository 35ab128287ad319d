"""Measured power from telemetry files: Prometheus text, OTLP JSON lines, a JSON map."""

from __future__ import annotations

import json
from typing import Any

import pytest

from joulectl.errors import InputError
from joulectl.planning.telemetry import parse_telemetry

PROM = """\
# HELP hw_host_energy_joules_total Energy consumed by the whole host.
# TYPE hw_host_energy_joules_total counter
hw_host_energy_joules_total{node="gpu-0"} 123456.000000
# TYPE hw_power_watts gauge
hw_power_watts{node="gpu-0",hw_id="0000:07:00.0",hw_type="gpu"} 400.500
hw_power_watts{node="gpu-0",hw_id="0000:08:00.0",hw_type="gpu"} 399.500
# TYPE joulie_sim_node_power_watts gauge
joulie_sim_node_power_watts{node="gpu-0"} 1500.00
joulie_sim_node_power_watts{node="cpu-0"} 250.25
joulie_sim_emulate_tick_duration_seconds 0.012
joulie_sim_facility_pue 1.190
"""


def test_prometheus_node_power_gauge_wins() -> None:
    t = parse_telemetry(PROM, "metrics.prom")
    assert t.power_w == {"gpu-0": 1500.0, "cpu-0": 250.25}
    assert t.trend_w_per_min == {"gpu-0": 0.0, "cpu-0": 0.0}


def test_prometheus_components_without_a_host_gauge() -> None:
    text = "\n".join(
        [
            'hw_power_watts{k8s_node_name="n1",hw_id="g0",hw_type="gpu"} 300',
            'hw_power_watts{k8s_node_name="n1",hw_id="g1",hw_type="gpu"} 200',
            'hw_power_watts{k8s_node_name="n1",hw_id="dimm",hw_type="memory"} 50',
            'hw_power_watts{k8s_node_name="n1",hw_id="p0",hw_type="cpu"} 150',
            'DCGM_FI_DEV_POWER_USAGE{Hostname="n2",gpu="0"} 250.5',
            'something_else{node="n3"} 7',
        ]
    )
    assert parse_telemetry(text, "x.prom").power_w == {"n1": 650.0, "n2": 250.5}


def test_prometheus_energy_rate_from_timestamped_samples() -> None:
    text = (
        'hw_host_energy_joules_total{node="n1"} 1000 1700000000000\n'
        'hw_host_energy_joules_total{node="n1"} 31000 1700000060000\n'
        'hw_host_energy_joules_total{node="n1"} 67000 1700000120000\n'
    )
    t = parse_telemetry(text, "x.prom")
    assert t.power_w == {"n1": pytest.approx(600.0)}
    assert t.trend_w_per_min == {"n1": pytest.approx(100.0)}  # 500 W -> 600 W over one minute


def _attr(k: str, v: str) -> dict[str, Any]:
    return {"key": k, "value": {"stringValue": v}}


def otlp_line(node: str, t_s: float, host_j: float, gpu_w: list[float], cpu_j: float, start_s: float = 0.0) -> str:
    def point(value: float, **attrs: str) -> dict[str, Any]:
        return {
            "attributes": [_attr(k.replace("_", "."), v) for k, v in attrs.items()],
            "startTimeUnixNano": str(int(start_s * 1e9)),
            "timeUnixNano": str(int(t_s * 1e9)),
            "asDouble": value,
        }

    metrics = [
        {"name": "hw.host.energy", "unit": "J", "sum": {"dataPoints": [point(host_j, hw_id=node)]}},
        {"name": "hw.energy", "unit": "J", "sum": {"dataPoints": [point(cpu_j, hw_id="package-0", hw_type="cpu")]}},
        {"name": "hw.power", "unit": "W", "gauge": {
            "dataPoints": [point(w, hw_id=f"gpu{i}", hw_type="gpu") for i, w in enumerate(gpu_w)]}},
    ]
    doc = {"resourceMetrics": [{"resource": {"attributes": [_attr("host.name", node)]},
                                "scopeMetrics": [{"scope": {"name": "x"}, "metrics": metrics}]}]}
    return json.dumps(doc)


def test_otlp_single_export_sums_gpu_power_and_cpu_average() -> None:
    # one sample per node (the simulator's latest export): host energy has no rate, so the node is its
    # GPU gauges plus the CPU energy averaged since the counter's start
    lines = [
        otlp_line("gpu-0", 100.0, 150_000.0, [500.0, 520.0], 20_000.0),
        json.dumps({"resourceMetrics": [{"resource": {"attributes": [_attr("host.name", "facility")]},
                                         "scopeMetrics": [{"metrics": [{"name": "joulie.sim.facility.pue",
                                                                        "unit": "1", "gauge": {"dataPoints": [
                                                                            {"asDouble": 1.2}]}}]}]}]}),
    ]
    t = parse_telemetry("\n".join(lines) + "\n", "otlp.jsonl")
    assert t.power_w == {"gpu-0": pytest.approx(500 + 520 + 200)}


def test_otlp_series_uses_the_host_energy_rate_and_trend() -> None:
    lines = [
        otlp_line("n1", 0.0, 0.0, [100.0], 0.0),
        otlp_line("n1", 30.0, 30_000.0, [100.0], 0.0),  # 1000 W
        otlp_line("n1", 60.0, 66_000.0, [100.0], 0.0),  # 1200 W
    ]
    t = parse_telemetry("\n".join(lines), "otlp.jsonl")
    assert t.power_w == {"n1": pytest.approx(1200.0)}
    assert t.trend_w_per_min == {"n1": pytest.approx(400.0)}  # +200 W in 30 s


def test_json_map() -> None:
    assert parse_telemetry('{"a": 100, "b": 2.5}', "p.json").power_w == {"a": 100.0, "b": 2.5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "p: no node power found"),
        ("# only comments\nfoo_bar 1\n", "p: no node power found"),
        ('{"resourceMetrics": []}\nnot json\n', "p: line 2: invalid JSON"),
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_telemetry(text, "p")
    assert str(e.value).startswith(message)
