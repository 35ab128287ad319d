"""The fleet a what-if runs on, the plans it compares, and each plan applied through the real cap path.

A fleet is a ClusterSpec, or a ``kubectl get nodes -o yaml`` export whose nodes are emulated by the
builtin hardware profile of their catalogued GPU (or CPU) model. Nodes of one hardware shape (one
resolved profile) share one emulated tree per plan and cap intent: the plan's NodeTwin is applied
to that tree by ``cap --from-twin`` (:func:`joulectl.ops.cap.execute`, which also sets the twin's
GPU governor through the governor code), and the limits in force are read back by the emulator's
own readback (:class:`joulectl.sim.tick.NodeRuntime`), so the replay runs what the hardware would
hold. A device that refuses the cap keeps the limit it reads back (for ``uncapped`` plans: none)
and the plan says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.sim import physics as ph
from joulectl.sim.clusterspec import Facility, SpecNode

UNCAPPED = "uncapped"


@dataclass
class FleetNode:
    """One node: its Kubernetes Node and NodeHardware objects and the spec node that emulates it."""

    name: str
    node: dict[str, Any]
    hardware: dict[str, Any]
    spec_node: SpecNode
    shape: str  # the resolved profile's hash: nodes of one shape share an emulated tree


@dataclass
class Shape:
    """The hardware of one node shape, as the emulator models it (from a rendered tree)."""

    key: str
    profile: str
    packages: tuple[ph.CpuParams, ...]
    cap_ranges: tuple[tuple[float, float] | None, ...]
    dram: bool
    gpus: tuple[ph.GpuParams, ...]
    gpu_models: tuple[str, ...]


@dataclass
class Fleet:
    nodes: list[FleetNode]
    shapes: dict[str, Shape]
    facility: Facility
    source: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Limits:
    """The limits in force on one node shape under one plan, as read back from its emulated tree."""

    cpu_caps_w: tuple[float | None, ...]  # per package (None: no RAPL limit)
    gpu_caps_w: tuple[float, ...]  # per GPU, watts (the maximum when there is no limit)
    gpu_clock: tuple[float, ...]  # per GPU, fraction of the top graphics clock a governor leaves
    notes: tuple[str, ...] = ()


@dataclass
class Plan:
    name: str
    source: str
    twins: dict[str, dict[str, Any]]  # node name -> its NodeTwin (empty for uncapped)


# -- the fleet ---------------------------------------------------------------------------------------


def _shape_of(spec_node: SpecNode) -> str:
    return spec_node.profile.profile_hash()


def fleet_from_spec(path: str, profiles_dir: str | None = None) -> Fleet:
    """Every node of a ClusterSpec."""
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.k8s import node_hardware, node_object

    spec = load_spec(path, profiles_dir)
    if not spec.nodes:
        raise InputError("the cluster spec has no nodes", file=path)
    nodes = [FleetNode(n.name, node_object(n), node_hardware(n), n, _shape_of(n)) for n in spec.nodes]
    return Fleet(nodes, {}, spec.facility, path)


def _profile_index(profiles_dir: str | None) -> tuple[Any, dict[str, list[str]]]:
    """Builtin (and local) profiles by the catalog key of their GPU, or ``cpu:<key>`` without GPUs."""
    from joulectl import catalog
    from joulectl.sim.profiles import ProfileSet

    ps = ProfileSet(profiles_dir)
    index: dict[str, list[str]] = {}
    for name in ps.names():
        prof = ps.get(name)
        if prof.gpu_count:
            entry = catalog.load().gpu(str(prof.gpus.get("model", "")))
            key = entry.key if entry else ""
        else:
            cpu = prof.cpu
            entry_c = catalog.load().cpu(cpu.get("catalogKey") or cpu.get("model"))
            key = f"cpu:{entry_c.key if entry_c else ''}" if not cpu.get("virtual") else "cpu:virtual"
        index.setdefault(key, []).append(name)
    return ps, index


def fleet_from_nodes(path: str, profiles_dir: str | None = None) -> Fleet:
    """The nodes of a NodeList, each emulated by the profile of its catalogued GPU (or CPU) model."""
    from joulectl import catalog
    from joulectl.k8s import gpu_config, labels_of, node_gpu_count
    from joulectl.planning.inputs import read_nodes
    from joulectl.sim.k8s import node_hardware
    from joulectl.yamlio import load_documents

    label = "<stdin>" if path == "-" else path
    objs, _hw = read_nodes(load_documents(path, what="node list"), label)
    ps, index = _profile_index(profiles_dir)
    nodes: list[FleetNode] = []
    notes: list[str] = []
    profiles: dict[str, Any] = {}
    for obj in objs:
        name = str(obj["metadata"]["name"])
        labels = labels_of(obj)
        count, _ = node_gpu_count(obj, None)
        key = ""
        if count > 0:
            # the built-in product labels, then --gpu-product-label's (the catalog drops GFD suffixes)
            label_keys = gpu_config().label_keys
            for lk in label_keys:
                entry = catalog.load().gpu(labels.get(lk))
                if entry is not None:
                    key = entry.key
                    break
            if not key:
                product = next((labels[k] for k in label_keys if labels.get(k)), "unknown")
                raise InputError(f"GPU model {product!r} is not in the catalog: the node cannot be emulated",
                                 file=label, field=f"node {name}")
            candidates = index.get(key)
            if not candidates:
                raise InputError(f"no hardware profile emulates {key} GPUs (builtin or --profiles-dir)",
                                 file=label, field=f"node {name}")
        else:
            entry_c = catalog.load().cpu(labels.get("joulie.io/hw.cpu-model")
                                         or labels.get("feature.node.kubernetes.io/cpu-model.name"))
            candidates = index.get(f"cpu:{entry_c.key}") if entry_c else None
            if not candidates:
                candidates = [n for k, v in sorted(index.items()) if k.startswith("cpu:") and k != "cpu:virtual"
                              for n in sorted(v)][:1]
                notes.append(f"node {name}: CPU model not emulated by a profile; emulated as {candidates[0]}")
        prof_name = sorted(candidates)[0]
        prof = profiles.get(prof_name) or profiles.setdefault(prof_name, ps.get(prof_name))
        if count and prof.gpu_count != count:
            notes.append(f"node {name}: {count} GPUs, emulated with the {prof.gpu_count} of profile {prof_name}")
        spec_node = SpecNode(name=name, pool=prof_name, profile=prof, labels=dict(labels), annotations={},
                             rack=None, cooling_zone=None, base_load={}, overrides={}, kwok=True)
        nodes.append(FleetNode(name, dict(obj), node_hardware(spec_node), spec_node, _shape_of(spec_node)))
    return Fleet(nodes, {}, Facility(), label, notes)


# -- plans -------------------------------------------------------------------------------------------


def parse_plan_arg(value: str) -> tuple[str, str]:
    """``uncapped``, ``FILE`` (label = file stem) or ``LABEL=FILE``: (label, file or "")."""
    text = value.strip()
    if text == UNCAPPED:
        return UNCAPPED, ""
    label, sep, path = text.partition("=")
    if sep and label and path and not os.path.exists(text):
        return label.strip(), path.strip()
    stem = os.path.splitext(os.path.basename(text))[0]
    return stem, text


def load_plans(values: Sequence[str], fleet: Fleet) -> list[Plan]:
    """The ``--plan`` arguments, with each twin matched to its node (by ``spec.nodeName`` or name)."""
    from joulectl.scheduling.check import load_twins, match_twins

    if not values:
        raise InputError("give at least one --plan (uncapped, FILE or LABEL=FILE)", field="--plan")
    plans: list[Plan] = []
    for value in values:
        name, path = parse_plan_arg(value)
        if any(p.name == name for p in plans):
            raise InputError(f"two plans are named {name!r}: give one of them a label (LABEL=FILE)", field="--plan")
        if not path:
            plans.append(Plan(name, UNCAPPED, {}))
            continue
        if not os.path.exists(path):
            raise InputError("no such file (a plan is uncapped, FILE or LABEL=FILE)", file=path, field="--plan")
        twins = load_twins(path)
        matched = match_twins([n.node for n in fleet.nodes], twins)
        if not matched:
            raise InputError("no NodeTwin of the plan names a node of the fleet", file=path, field="--plan")
        plans.append(Plan(name, path, {k: dict(v) for k, v in matched.items()}))
    return plans


# -- the real cap path ----------------------------------------------------------------------------------


def _intent_key(twin: Mapping[str, Any] | None) -> str:
    if twin is None:
        return ""
    spec = twin.get("spec") or {}
    return json.dumps({"gpu": spec.get("gpu"), "cpu": spec.get("cpu")}, sort_keys=True, default=str)


def _read_model(tree: str, spec_node: SpecNode) -> Any:
    from joulectl.sim import layout

    return layout.model_for(tree, spec_node.name, spec_node.profile)


def shape_of_model(key: str, spec_node: SpecNode, model: Any) -> Shape:
    """The shape's power models (per package, per GPU) from the emulator's model of its tree."""
    from joulectl import catalog

    entry = catalog.load().gpu(str(spec_node.profile.gpus.get("model", ""))) if model.gpus else None
    gpu_model = entry.key if entry else str(spec_node.profile.gpus.get("model", ""))
    return Shape(key, spec_node.profile.name, tuple(p.params for p in model.packages),
                 tuple(p.cap_range_w for p in model.packages), bool(model.dram), tuple(g.params for g in model.gpus),
                 tuple(gpu_model for _ in model.gpus))


def _readback(tree: str, spec_node: SpecNode, model: Any) -> tuple[tuple[float | None, ...], tuple[float, ...],
                                                                   tuple[float, ...]]:
    """The limits the emulator holds for the tree: its own readback and one step (GPUs busy, so an
    idle GPU with persistence off does not drop its limit)."""
    from joulectl.sim.nvml_io import NvmlIO
    from joulectl.sim.tick import BaseLoad, NodeRuntime

    rt = NodeRuntime(tree, model, BaseLoad(cpu_util=0.0, gpu_util=1.0, memory_intensity=0.0),
                     nvml_io=NvmlIO() if model.nvml else None)
    now = 1_000_000.0
    rt.readback(now)
    sample = rt.step(now, 1.0)
    cpu = tuple(sample.caps_w.get(f"pkg{p.index}") for p in model.packages)
    gpu = tuple(float(sample.caps_w.get(f"gpu{g.index}") or g.params.max_w) for g in model.gpus)
    clock = tuple(float(rt.ledger.state.get(f"c.gpu{g.index}", 1.0)) for g in model.gpus)
    return cpu, gpu, clock


def _apply(tree: str, spec_node: SpecNode, twin: Mapping[str, Any], plan: str) -> list[str]:
    """``cap --from-twin`` of the twin onto the tree; a note per device that did not take it."""
    from joulectl.host import Host
    from joulectl.models import Status
    from joulectl.ops import cap as cap_ops

    doc = json.loads(json.dumps(twin, default=str))
    doc.setdefault("spec", {})["nodeName"] = spec_node.name
    path = os.path.join(tree, "state", "whatif-twin.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    req = cap_ops.build_request(from_twin=path, node_name=spec_node.name, wait_s=0.0)
    try:
        report = cap_ops.execute(Host(tree), req)
    except InputError:
        raise
    except Exception as e:  # a node the cap cannot act on at all (no device): it runs as it is
        return [f"plan {plan}: {spec_node.profile.name}: cap did not run ({e}): replayed with the limits in force"]
    ok = {Status.APPLIED, Status.UNCHANGED, Status.APPLIED_UNVERIFIED, Status.SKIPPED, Status.PLANNED}
    notes = []
    for row in [*report.results, *report.governor_results]:
        if row.status not in ok:
            what = f"governor {row.preset}" if getattr(row, "preset", None) else "cap"
            notes.append(f"plan {plan}: {spec_node.profile.name} {row.device}: {what} {row.status.value}"
                         f"{': ' + row.message if row.message else ''}; replayed with the limit read back")
    return notes


def apply_plans(fleet: Fleet, plans: Sequence[Plan], *, workdir: str | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Limits]]:
    """plan name -> node name -> :class:`Limits`, one emulated tree per (shape, cap intent)."""
    rep: dict[str, FleetNode] = {}
    for n in fleet.nodes:
        rep.setdefault(n.shape, n)
    if workdir is None and os.access("/dev/shm", os.W_OK):
        workdir = "/dev/shm"  # the trees live for seconds: memory, not disk
    with tempfile.TemporaryDirectory(prefix="joulectl-whatif-", dir=workdir) as tmp:
        from joulectl.sim.tree import render_nodes

        # the hardware of every shape, from a tree rendered for it
        for key, node in rep.items():
            root = os.path.join(tmp, "shape", key[:16])
            render_nodes([node.spec_node], root)
            model = _read_model(os.path.join(root, node.name), node.spec_node)
            fleet.shapes[key] = shape_of_model(key, node.spec_node, model)
        out: dict[str, dict[str, Limits]] = {}
        for pi, plan in enumerate(plans):
            cache: dict[tuple[str, str], Limits] = {}
            per_node: dict[str, Limits] = {}
            for n in fleet.nodes:
                twin = plan.twins.get(n.name)
                ck = (n.shape, _intent_key(twin) if plan.source != UNCAPPED else UNCAPPED)
                limits = cache.get(ck)
                if limits is None:
                    limits = _limits(fleet.shapes[n.shape], n, twin, plan, os.path.join(tmp, f"p{pi}", str(len(cache))))
                    cache[ck] = limits
                    if progress is not None:
                        progress(f"{plan.name}: {n.spec_node.profile.name}")
                per_node[n.name] = limits
            out[plan.name] = per_node
    return out


def _limits(shape: Shape, node: FleetNode, twin: Mapping[str, Any] | None, plan: Plan, root: str) -> Limits:
    if plan.source == UNCAPPED:
        # no limit in force anywhere: every GPU at its maximum, no RAPL limit
        return Limits(tuple(None for _ in shape.packages), tuple(g.max_w for g in shape.gpus),
                      tuple(1.0 for _ in shape.gpus))
    from joulectl.sim.tree import render_nodes

    render_nodes([node.spec_node], root)
    tree = os.path.join(root, node.name)
    notes = _apply(tree, node.spec_node, twin, plan.name) if twin is not None else []
    model = _read_model(tree, node.spec_node)
    cpu, gpu, clock = _readback(tree, node.spec_node, model)
    return Limits(cpu, gpu, clock, tuple(notes))
