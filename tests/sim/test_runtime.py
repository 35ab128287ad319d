"""`simulate run` / `simulate status` through the runtime API, on trees the renderer makes."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from joulectl.errors import InputError
from joulectl.sim import ledger as lg
from joulectl.sim import runtime
from joulectl.sim.tools.state import nvml_transaction, read_nvml_state

SPEC = """\
apiVersion: sim.joulie.io/v1alpha1
kind: ClusterSpec
metadata: {{name: t}}
spec:
  defaults:
    baseLoad: {{cpuUtil: 1.0, gpuUtil: {gpu_util}, memoryIntensity: 0.2}}
  facility: {{ambientC: 20, amplitudeC: 5, periodH: 24, coolingZones: [{{name: zone-a, offsetC: 0}}]}}
  pools:
{pools}
"""


def write_spec(tmp_path: Path, pools: str, gpu_util: float = 1.0, name: str = "spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(SPEC.format(pools=pools, gpu_util=gpu_util))
    return str(path)


def energy(root: Path, node: str) -> dict[str, int]:
    led = lg.load(str(root / node))
    assert led is not None
    return led.energy


def test_run_renders_then_resumes_and_counters_continue(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 2, coolingZone: zone-a}")
    root = tmp_path / "root"
    first = runtime.run(spec, str(root), ticks=3, fast=True, workers=1)
    assert (first.nodes, first.rendered, first.resumed, first.ticks) == (2, 2, 0, 3)
    after_first = energy(root, "vm-0")["host"]
    assert after_first > 0
    second = runtime.run(spec, str(root), ticks=2, fast=True, workers=2)
    assert (second.rendered, second.resumed, second.ticks, second.workers) == (0, 2, 2, 2)
    after_second = energy(root, "vm-0")["host"]
    # Two more one-second ticks of the same load: the counter continues, it does not restart.
    assert after_second == pytest.approx(after_first * 5 / 3, rel=0.01)
    led = lg.load(str(root / "vm-0"))
    assert led is not None and led.tick == 5


def test_status_reports_power_energy_caps_and_governors(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=2, fast=True, workers=1)
    status = runtime.status(str(root))
    assert status["kind"] == "SimulationStatus"
    [node] = status["nodes"]
    assert node["node"] == "intel-0"
    assert node["profile"] == "intel-xeon-2s-rapl"
    assert node["ticks"] == 2
    assert node["powerWatts"] > 0
    assert node["energyJoules"] == pytest.approx(2 * node["powerWatts"], rel=0.01)
    assert node["capsWatts"] == {"pkg0": 270.0, "pkg1": 270.0}
    assert node["governors"]["cpu"] == ["powersave"]
    assert node["governors"]["epp"] == ["balance_performance"]
    assert set(node["energy"]) >= {"pkg0", "pkg1", "dram0", "dram1", "psys"}
    # A value written after the run's clean stop is read again; the rest comes from the start-up cache.
    (root / "intel-0" / "sys/devices/system/cpu/cpufreq/policy7/scaling_governor").write_text("performance\n")
    [node] = runtime.status(str(root))["nodes"]
    assert node["governors"]["cpu"] == ["performance", "powersave"]


def test_status_of_a_directory_without_trees_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        runtime.status(str(tmp_path))
    assert "--root: no rendered node trees here" in str(err.value)
    with pytest.raises(InputError) as err:
        runtime.status(str(tmp_path / "missing"))
    assert "--root: not a directory" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick_s": 0.0}, "--tick: must be a positive number of seconds"),
        ({"ticks": -1}, "--ticks: must not be negative"),
        ({"duration_s": -2.0}, "--duration: must be a non-negative number of seconds"),
        ({"workers": 0}, "--workers: must be at least 1"),
    ],
)
def test_bad_run_arguments(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    spec = write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 1}")
    with pytest.raises(InputError) as err:
        runtime.run(spec, str(tmp_path / "root"), **kwargs)
    assert message in str(err.value)


def test_tree_of_another_profile_stops_the_start_naming_the_node(tmp_path: Path) -> None:
    root = tmp_path / "root"
    runtime.run(write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 1}"), str(root), ticks=1,
                fast=True)
    other = write_spec(tmp_path, "  - {name: vm, profile: intel-xeon-2s-rapl, count: 1}", name="other.yaml")
    with pytest.raises(InputError) as err:
        runtime.run(other, str(root), ticks=1, fast=True)
    assert "node vm-0" in str(err.value)
    assert "intel-xeon-2s-rapl" in str(err.value)


def test_tree_with_an_entry_of_the_wrong_kind_stops_the_start(tmp_path: Path) -> None:
    root = tmp_path / "root"
    spec = write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 1}")
    runtime.run(spec, str(root), ticks=1, fast=True)
    (root / "vm-0" / "etc" / "hostname").unlink()
    (root / "vm-0" / "etc" / "hostname").mkdir()
    with pytest.raises(InputError) as err:
        runtime.run(spec, str(root), ticks=1, fast=True)
    assert "node vm-0" in str(err.value)
    assert "/etc/hostname" in str(err.value)


def test_duration_in_fast_mode_counts_ticks(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 1}")
    summary = runtime.run(spec, str(tmp_path / "root"), duration_s=2.5, tick_s=0.5, fast=True)
    assert summary.ticks == 5


def test_workers_split_nodes_with_the_same_results(tmp_path: Path) -> None:
    pools = "  - {name: vm, profile: vm-no-powercap, count: 3}"
    one = tmp_path / "one"
    two = tmp_path / "two"
    runtime.run(write_spec(tmp_path, pools), str(one), ticks=4, fast=True, workers=1)
    summary = runtime.run(write_spec(tmp_path, pools), str(two), ticks=4, fast=True, workers=2)
    assert summary.workers == 2
    for node in ("vm-0", "vm-1", "vm-2"):
        assert energy(one, node) == energy(two, node)


def _node_telemetry(root: Path) -> tuple[list[str], list[str]]:
    """A tick's node series: metrics.prom without the run's and the facility's lines (the tick's
    wall time, and an ambient of the run's start time), otlp.jsonl's node lines with their times
    masked."""
    prom = [line for line in (root / "metrics.prom").read_text().splitlines()
            if not line.startswith(("joulie_sim_emulate_tick_duration", "joulie_sim_facility"))]
    otlp = [re.sub(r'"(start)?[tT]imeUnixNano":"\d+"', '"t":"T"', line)
            for line in (root / "telemetry/otlp.jsonl").read_text().splitlines() if '"sim.joulie.io/scope"' not in line]
    return prom, otlp


def test_workers_render_the_telemetry_the_main_process_renders(tmp_path: Path) -> None:
    # Two workers render their nodes' OTLP lines and Prometheus series themselves (issue 20: in the
    # main process that was a quarter of a 10,000-node tick): the files are what one process
    # writes, node for node, in the same order (virtual nodes, GPU series with their identity
    # labels, RAPL's psys included).
    pools = ("  - {name: vm, profile: vm-no-powercap, count: 2}\n"
             "  - {name: amd, profile: amd-instinct-mi250x-4gpu, count: 1}\n"
             "  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}\n"
             "  - {name: xeon, profile: intel-xeon-2s-rapl, count: 1}")
    one, two = tmp_path / "one", tmp_path / "two"
    runtime.run(write_spec(tmp_path, pools), str(one), ticks=2, fast=True, workers=1)
    assert runtime.run(write_spec(tmp_path, pools), str(two), ticks=2, fast=True, workers=2).workers == 2
    prom, otlp = _node_telemetry(two)
    # (one process writes its nodes in the spec's order, workers' in name order, as before)
    assert (sorted(prom), sorted(otlp)) == tuple(sorted(x) for x in _node_telemetry(one))
    assert [line for line in prom if line.startswith("#")] == [
        line for line in _node_telemetry(one)[0] if line.startswith("#")]
    assert len(otlp) == 3  # one line a node but the virtual ones
    assert any('hw_power_watts{node="l40s-0",hw_id="gpu0"' in line for line in prom)
    assert any(line.startswith('joulie_sim_node_power_watts{node="vm-1"}') for line in prom)
    assert any(line.startswith("joulie_sim_rapl_psys_energy_joules_total") for line in prom) == any(
        '"joulie.sim.rapl.psys.energy"' in line for line in otlp)


def test_a_pools_rendered_telemetry_is_its_samples_in_their_order(tmp_path: Path) -> None:
    from joulectl.sim import telemetry
    from joulectl.sim.clusterspec import load_spec

    pools = ("  - {name: vm, profile: vm-no-powercap, count: 3}\n"
             "  - {name: l40s, profile: nvidia-l40s-4gpu, count: 2}")
    spec_path = write_spec(tmp_path, pools)
    runtime.run(spec_path, str(tmp_path / "root"), ticks=1, fast=True, workers=1)
    spec = load_spec(spec_path)
    entries = runtime.build_entries(spec, str(tmp_path / "root"))
    ids = telemetry.gpu_identities(spec, [e.model for e in entries])
    pool = runtime._Pool([entries[0::2], entries[1::2]], runtime._nvml_io(), "poll", ids)
    try:
        samples, _ = pool.tick(1.8e9, 1.0)
        profiles = {e.model.node: e.model.profile for e in entries}
        assert [s.node for s in samples] == sorted(s.node for s in samples)
        assert pool.rendered == telemetry.render_nodes(samples, profiles, ids)
        assert pool.rendered is not None and pool.rendered[0][0] is not None  # l40s-0's line
    finally:
        pool.close()


def test_a_pool_takes_the_shard_that_answers_first_and_keeps_the_shard_order(tmp_path: Path) -> None:
    # The main process unpickles a shard's answer as soon as it is there (another worker may still
    # compute): the second shard answering first changes nothing: samples in name order, each
    # with its telemetry, events in shard order (events.jsonl stays the same run to run).
    import multiprocessing
    import threading

    from joulectl.sim.tick import Event, Sample

    def answer(nodes: list[str], event: str) -> tuple[str, Any]:
        samples = [Sample(n, 1.0, 10.0, 10.0, 0.0, {}, {}, {}, {}) for n in nodes]
        return ("ok", (samples, [Event(1.0, nodes[0], event, {})],
                       ([f"line {n}" for n in nodes], tuple([f"{k} {n}" for n in nodes] for k in range(5)))))

    pool = object.__new__(runtime._Pool)
    pool.local = None
    ends = [multiprocessing.Pipe() for _ in range(2)]
    pool.procs = [(None, main_end) for main_end, _ in ends]
    ends[1][1].send(answer(["b", "d"], "second"))  # shard 1 is ready before the tick is even sent
    late = threading.Timer(0.2, lambda: ends[0][1].send(answer(["a", "c", "e"], "first")))
    late.start()
    try:
        samples, events = pool.tick(1.0, 1.0)
    finally:
        late.join()
    assert [s.node for s in samples] == ["a", "b", "c", "d", "e"]
    assert [e.name for e in events] == ["first", "second"]
    assert pool.rendered is not None
    assert pool.rendered[0] == [f"line {n}" for n in "abcde"]
    assert pool.rendered[1][4] == [f"4 {n}" for n in "abcde"]
    for _main_end, worker_end in ends:
        assert worker_end.recv()[0] == "tick"


def test_the_nodes_are_frozen_out_of_the_collector_in_every_process_for_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # gc.freeze: a full collection of a worker holding 5,000 nodes walked ~400,000 objects (0.1-0.17 s,
    # the slowest ticks of a 10,000-node run); each worker freezes its shard once built, the main
    # process its models once the workers run, and the run unfreezes at its end (a caller that lives
    # on collects as before). Workers are forked: each process appends to the log itself.
    import gc as real_gc

    log = tmp_path / "gc.log"

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_gc, name)

        def freeze(self) -> None:
            with open(log, "a", encoding="ascii") as fh:
                fh.write(f"freeze {os.getpid()} {real_gc.isenabled()}\n")
            real_gc.freeze()

        def unfreeze(self) -> None:
            with open(log, "a", encoding="ascii") as fh:
                fh.write(f"unfreeze {os.getpid()}\n")
            real_gc.unfreeze()

    monkeypatch.setattr(runtime, "gc", Recording())
    pools = "  - {name: vm, profile: vm-no-powercap, count: 3}"
    summary = runtime.run(write_spec(tmp_path, pools), str(tmp_path / "root"), ticks=2, fast=True, workers=2)
    assert summary.workers == 2
    lines = [line.split() for line in log.read_text().splitlines()]
    me = str(os.getpid())
    workers = [pid for kind, pid, *_ in lines if kind == "freeze" and pid != me]
    assert len(set(workers)) == 2 and len(workers) == 2  # once in each worker
    assert [line[0] for line in lines if line[1] == me] == ["freeze", "unfreeze"]  # and the main process
    assert all(line[2] == "False" for line in lines if line[0] == "freeze")  # before collection is on again
    assert real_gc.get_freeze_count() == 0 and real_gc.isenabled()


def test_ctrl_c_stops_after_the_current_tick(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: vm, profile: vm-no-powercap, count: 1}")
    seen: list[int] = []

    def progress(done: int, total: int | None, samples: list[Any]) -> None:
        seen.append(done)
        if done == 2:
            os.kill(os.getpid(), signal.SIGINT)

    summary = runtime.run(spec, str(tmp_path / "root"), tick_s=0.05, progress=progress)
    assert summary.interrupted
    assert summary.ticks == 2
    assert seen == [1, 2]
    led = lg.load(str(tmp_path / "root" / "vm-0"))
    assert led is not None and led.tick == 2


def _gpu_power(root: Path, node: str, gpu: int) -> float:
    led = lg.load(str(root / node))
    assert led is not None
    return led.state[f"P.gpu{gpu}"]


def test_cap_set_through_nvml_state_shows_in_next_tick(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    full = _gpu_power(root, "h100-0", 0)
    with nvml_transaction(str(root / "h100-0")) as state:  # what `nvidia-smi -i 0 -pl 300` writes
        state["gpus"][0]["power"]["limitMw"] = 300_000
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert _gpu_power(root, "h100-0", 0) == pytest.approx(300.0, abs=1.0)
    assert _gpu_power(root, "h100-0", 1) == pytest.approx(full)
    dev = read_nvml_state(str(root / "h100-0"))["gpus"][0]
    assert dev["power"]["drawMw"] == pytest.approx(300_000, abs=1000)
    assert dev["power"]["enforcedLimitMw"] == 300_000
    assert dev["power"]["energyMj"] == energy(root, "h100-0")["gpu0"]
    assert dev["power"]["energyMj"] > 0
    [node] = runtime.status(str(root))["nodes"]
    assert node["capsWatts"]["gpu0"] == 300.0
    assert node["capsWatts"]["gpu1"] == 700.0
    assert node["energy"]["gpu0"] == pytest.approx(dev["power"]["energyMj"] / 1000, abs=0.01)


def test_graphics_and_memory_clock_locks_bound_clocks_and_power(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: l40s, profile: nvidia-l40s-4gpu, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    full = _gpu_power(root, "l40s-0", 0)
    with nvml_transaction(str(root / "l40s-0")) as state:
        state["gpus"][0]["clocks"]["lockedGraphics"] = {"minMhz": 210, "maxMhz": 1200}
        state["gpus"][1]["clocks"]["lockedMemory"] = {"minMhz": 405, "maxMhz": 405}
    runtime.run(spec, str(root), ticks=1, fast=True)
    gpus = read_nvml_state(str(root / "l40s-0"))["gpus"]
    assert gpus[0]["clocks"]["smMhz"] <= 1200
    assert gpus[1]["clocks"]["smMhz"] <= 645  # smMaxByMem: 405 MHz memory offers graphics up to 645 MHz
    assert gpus[1]["clocks"]["memoryMhz"] == 405
    assert gpus[2]["clocks"]["smMhz"] > 1200
    assert _gpu_power(root, "l40s-0", 0) < full
    assert _gpu_power(root, "l40s-0", 1) < _gpu_power(root, "l40s-0", 0)


def test_persistence_off_idle_gpu_drops_its_limit_to_default(tmp_path: Path) -> None:
    pools = ("  - {name: nopm, profile: nvidia-h100-sxm-8gpu, count: 1,"
             " overrides: {gpus: {persistenceMode: disabled}}}\n"
             "  - {name: pm, profile: nvidia-h100-sxm-8gpu, count: 1}")
    spec = write_spec(tmp_path, pools, gpu_util=0.0)
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    for node in ("nopm-0", "pm-0"):
        with nvml_transaction(str(root / node)) as state:
            state["gpus"][2]["power"]["limitMw"] = 400_000
            state["gpus"][3]["power"]["limitMw"] = 699_999  # 1 mW under the default: reset too
    runtime.run(spec, str(root), ticks=2, fast=True)
    assert read_nvml_state(str(root / "nopm-0"))["gpus"][2]["power"]["limitMw"] == 700_000
    assert read_nvml_state(str(root / "nopm-0"))["gpus"][3]["power"]["limitMw"] == 700_000
    assert read_nvml_state(str(root / "pm-0"))["gpus"][2]["power"]["limitMw"] == 400_000
    assert read_nvml_state(str(root / "pm-0"))["gpus"][3]["power"]["limitMw"] == 699_999
    events = [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]
    resets = [e for e in events if e["name"] == "joulie.sim.cap.reset"]
    assert [(e["node"], e["attributes"]["gpu"], e["attributes"]["from_mw"], e["attributes"]["to_mw"])
            for e in resets] == [("nopm-0", 2, 400_000, 700_000), ("nopm-0", 3, 699_999, 700_000)]


def test_refused_sysfs_write_on_a_rendered_tree_is_logged(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  - {name: w7900, profile: amd-radeon-pro-w7900, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    manifest = json.loads((root / "w7900-0" / "state" / "manifest.json").read_text())
    [cap] = [w for w in manifest["writable"] if w["kind"] == "amdgpu_cap"]
    path = root / "w7900-0" / cap["path"]
    before = path.read_text()
    path.write_text("200000000\n")  # the W7900 takes 241 W only
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert path.read_text() == before
    events = [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]
    [event] = [e for e in events if e["name"] == "joulie.sim.write.rejected"]
    assert event["node"] == "w7900-0"
    assert event["attributes"]["error.type"] == "einval"
    assert event["attributes"]["file"] == "/" + cap["path"]
    assert event["time"].endswith("Z")


@pytest.mark.slow
def test_every_builtin_profile_runs_and_resumes(tmp_path: Path) -> None:
    from joulectl.sim.profiles import builtin_profile_names

    names = builtin_profile_names()
    assert len(names) >= 10
    pools = "\n".join(f"  - {{name: p{i}, profile: {name}, count: 1}}" for i, name in enumerate(names))
    spec = write_spec(tmp_path, pools, gpu_util=0.5)
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=2, fast=True, workers=2)
    summary = runtime.run(spec, str(root), ticks=1, fast=True, workers=1)
    assert summary.resumed == len(names)
    assert summary.events == 0  # nothing rendered is refused by its own rules
    status = {n["node"]: n for n in runtime.status(str(root))["nodes"]}
    for i, name in enumerate(names):
        node = status[f"p{i}-0"]
        assert node["profile"] == name
        assert node["ticks"] == 3
        assert node["powerWatts"] > 0
        assert node["energyJoules"] == pytest.approx(3 * node["powerWatts"], rel=0.05)
        assert os.path.getsize(root / f"p{i}-0" / "state" / "ledger.json") >= lg.INPLACE_BYTES


def test_cap_and_persistence_through_the_fake_nvidia_smi(tmp_path: Path) -> None:
    import subprocess

    spec = write_spec(tmp_path, "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    smi = str(root / "h100-0" / "bin" / "nvidia-smi")
    done = subprocess.run([smi, "-i", "0", "-pl", "250"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert _gpu_power(root, "h100-0", 0) == pytest.approx(250.0, abs=1.0)
    query = subprocess.run([smi, "-i", "0", "--query-gpu=power.limit,power.draw", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
    limit, draw = (float(x) for x in query.stdout.split(","))
    assert limit == 250.0
    assert draw == pytest.approx(250.0, abs=1.0)
    # Persistence mode off, then idle: the limit goes back to its default at the next tick.
    assert subprocess.run([smi, "-i", "0", "-pm", "0"], capture_output=True, timeout=30).returncode == 0
    runtime.run(write_spec(tmp_path, "  - {name: h100, profile: nvidia-h100-sxm-8gpu, count: 1}", gpu_util=0.0),
                str(root), ticks=1, fast=True)
    assert read_nvml_state(str(root / "h100-0"))["gpus"][0]["power"]["limitMw"] == 700_000
    names = [json.loads(x)["name"] for x in (root / "events.jsonl").read_text().splitlines()]
    assert names == ["joulie.sim.cap.reset"]


def test_cpufreq_policies_belong_to_their_socket(tmp_path: Path) -> None:
    from joulectl.sim import layout
    from joulectl.sim.profiles import ProfileSet

    spec = write_spec(tmp_path, "  - {name: intel, profile: intel-xeon-2s-rapl, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    model = layout.model_for(str(root / "intel-0"), "intel-0", ProfileSet().get("intel-xeon-2s-rapl"))
    # 2 sockets x 32 cores x 2 threads: CPUs 0-31 and 64-95 are socket 0 (Linux numbering).
    pkg0, pkg1 = (set(p.policies) for p in model.packages)
    assert pkg0 == {f"policy{i}" for i in [*range(0, 32), *range(64, 96)]}
    assert pkg1 == {f"policy{i}" for i in [*range(32, 64), *range(96, 128)]}
    # Lowering every socket-1 policy's maximum frequency lowers socket 1's power only.
    manifest = json.loads((root / "intel-0" / "state" / "manifest.json").read_text())
    for w in manifest["writable"]:
        if w["kind"] == "cpufreq_max" and w["component"] in pkg1:
            (root / "intel-0" / w["path"]).write_text("1200000\n")
    runtime.run(spec, str(root), ticks=1, fast=True)
    led = lg.load(str(root / "intel-0"))
    assert led is not None
    assert led.state["P.pkg1"] < led.state["P.pkg0"]


def test_cap_through_the_fake_rocm_smi_shows_in_next_tick(tmp_path: Path) -> None:
    import subprocess

    spec = write_spec(tmp_path, "  - {name: mi300x, profile: amd-instinct-mi300x-8gpu, count: 1}")
    root = tmp_path / "root"
    runtime.run(spec, str(root), ticks=1, fast=True)
    before = _gpu_power(root, "mi300x-0", 0)
    smi = str(root / "mi300x-0" / "bin" / "rocm-smi")
    done = subprocess.run([smi, "-d", "0", "--setpoweroverdrive", "400"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    runtime.run(spec, str(root), ticks=1, fast=True)
    assert before > 400.0
    assert _gpu_power(root, "mi300x-0", 0) == pytest.approx(400.0, abs=1.0)
    assert _gpu_power(root, "mi300x-0", 1) == pytest.approx(before)
    [node] = runtime.status(str(root))["nodes"]
    assert node["capsWatts"]["gpu0"] == 400.0
