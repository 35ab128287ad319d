"""Reading a cluster: a ClusterSpec, or a NodeList (``kubectl get nodes -o yaml``, or
``simulate render-nodes``) with NodeHardware objects, pods and a telemetry file.

A ClusterSpec is expanded by the simulator's own module (``joulectl.sim.clusterspec``) and each
spec node is turned into the Node object ``simulate render-nodes`` prints and the NodeHardware
``discover -o yaml`` would print for it: so both inputs reach :func:`joulectl.planning.plan`
through one code path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, TypeGuard

from joulectl.errors import InputError
from joulectl.k8s import PodRef, iter_pods
from joulectl.planning.options import ClusterInput

_LIST_KINDS = ("List", "NodeList", "NodeHardwareList")
#: the kind of the items of a typed list that leaves it out
_ITEM_KIND = {"NodeList": "Node", "NodeHardwareList": "NodeHardware"}


def _items(doc: Any, label: str, index: int) -> tuple[str, list[Any] | None]:
    """Where a document is, and the items of a List (None when the document is the object itself)."""
    where = f"document {index + 1}"
    if not isinstance(doc, Mapping):
        raise InputError(f"{where} is not a Kubernetes object (a mapping with a kind)", file=label)
    kind = doc.get("kind")
    if kind in _LIST_KINDS:
        items = doc.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise InputError("items is not a list", file=label, field=f"{where}.items")
        return where, items
    return where, None


def _objects(doc: Any, label: str, index: int) -> list[tuple[str, Mapping[str, Any]]]:
    """``(where, object)`` of a document: itself, or the items of a List (each checked a mapping)."""
    where, items = _items(doc, label, index)
    if items is None:
        return [(where, doc)]
    out = []
    for i, item in enumerate(items):
        if not _is_mapping(item):
            raise InputError("not a Kubernetes object", file=label, field=f"{where}.items[{i}]")
        out.append((f"{where}.items[{i}]", item))
    return out


def _name(obj: Mapping[str, Any], label: str, where: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if _is_mapping(meta) else None
    if not isinstance(name, str) or not name.strip():
        raise InputError("missing or empty", file=label, field=f"{where}.metadata.name")
    return name


def _hardware_node(obj: Mapping[str, Any], label: str, where: str) -> str:
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) and node else _name(obj, label, where)


#: More CPUs than any node has: a capacity above it is bad input (1.0e+308 made the budget infinite).
MAX_NODE_CPUS = 1_000_000


def _check_cpu_quantity(obj: Mapping[str, Any], label: str, where: str) -> None:
    """Refuse an absurd ``status.capacity.cpu`` / ``allocatable.cpu`` (exit 2 naming the field);
    an unparsable one stays unknown, as before."""
    status = obj.get("status")
    if not _is_mapping(status):
        return
    for key in ("capacity", "allocatable"):
        resources = status.get(key)
        value = resources.get("cpu") if _is_mapping(resources) else None
        if value is None:
            continue
        cpus = _cpus(value) if isinstance(value, str) else None
        if cpus is None:
            from joulectl.k8s import parse_quantity

            try:
                cpus = parse_quantity(value)
            except ValueError:
                continue
        if cpus > MAX_NODE_CPUS:
            raise InputError(f"{value!r} is not a CPU count (more than {MAX_NODE_CPUS:,} CPUs)", file=label,
                             field=f"{where}.status.{key}.cpu")


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, without the ABC check for a plain dict (100,000 nodes ask)."""
    return type(value) is dict or isinstance(value, Mapping)


@lru_cache(maxsize=1024)
def _cpus(value: str) -> float | None:
    """A CPU quantity string parsed once (100,000 nodes carry a few distinct ones); None unparsable."""
    from joulectl.k8s import parse_quantity

    try:
        return parse_quantity(value)
    except ValueError:
        return None


def _cpus_fine(status: Any) -> bool:
    """True when ``status`` is a dict whose capacity and allocatable CPU counts, where given, are
    strings of at most :data:`MAX_NODE_CPUS` (what a cluster's export has): else
    :func:`_check_cpu_quantity` judges."""
    if type(status) is not dict:
        return False
    for key in ("capacity", "allocatable"):
        resources = status.get(key)
        if resources is None:
            continue
        if type(resources) is not dict:
            return False
        value = resources.get("cpu")
        if value is None:
            continue
        cpus = _cpus(value) if type(value) is str else None
        if cpus is None or cpus > MAX_NODE_CPUS:
            return False
    return True


def read_nodes(
    docs: Iterable[Any], label: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Nodes and NodeHardware objects of a ``--nodes`` file (Node, NodeList, List; NodeHardware)."""
    nodes: list[dict[str, Any]] = []
    hardware: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()

    def read(obj: Mapping[str, Any], where: str, default: str | None) -> None:
        kind = obj.get("kind", default)
        if kind == "Node":
            name = _name(obj, label, where)
            if name in seen:
                raise InputError(f"node {name!r} is listed twice", file=label, field=f"{where}.metadata.name")
            seen.add(name)
            _check_cpu_quantity(obj, label, where)
            nodes.append(dict(obj))
        elif kind == "NodeHardware":
            hardware[_hardware_node(obj, label, where)] = dict(obj)
        else:
            raise InputError(
                f"kind {kind!r} is not a Node, NodeList or NodeHardware", file=label, field=f"{where}.kind"
            )

    for index, doc in enumerate(docs):
        default = _ITEM_KIND.get(str(doc.get("kind"))) if isinstance(doc, Mapping) else None
        where, items = _items(doc, label, index)
        if items is None or not all(type(item) is dict for item in items):
            for at, obj in _objects(doc, label, index):
                read(obj, at, default)
            continue
        # a List of dicts (an export): a plain Node is taken here, anything else as above, with
        # its place in the list named only when there is something to say
        for i, obj in enumerate(items):
            meta = obj.get("metadata")
            name = meta.get("name") if type(meta) is dict else None
            if (obj.get("kind", default) == "Node" and type(name) is str and name not in seen and name.strip()
                    and _cpus_fine(obj.get("status"))):
                seen.add(name)
                nodes.append(obj.copy())
            else:
                read(obj, f"{where}.items[{i}]", default)
    if not nodes:
        raise InputError("no nodes (expected a NodeList with items, or Node objects)", file=label)
    return nodes, hardware


def read_hardware(docs: Iterable[Any], label: str) -> dict[str, dict[str, Any]]:
    """NodeHardware objects of a ``--hardware`` file, by node name."""
    hardware: dict[str, dict[str, Any]] = {}
    for index, doc in enumerate(docs):
        default = _ITEM_KIND.get(str(doc.get("kind"))) if isinstance(doc, Mapping) else None
        for where, obj in _objects(doc, label, index):
            kind = obj.get("kind", default)
            if kind != "NodeHardware":
                hint = " (give Nodes with --nodes)" if kind in ("Node", "NodeList") else ""
                raise InputError(f"kind {kind!r} is not a NodeHardware{hint}", file=label, field=f"{where}.kind")
            hardware[_hardware_node(obj, label, where)] = dict(obj)
    return hardware


def read_pods(docs: Iterable[Any], label: str) -> list[PodRef]:
    """Pods and workload pod templates of a ``--pods`` file."""
    pods: list[PodRef] = []
    for index, doc in enumerate(docs):
        try:
            pods.extend(iter_pods(doc, label))
        except ValueError as e:
            raise InputError(str(e), file=label, field=f"document {index + 1}") from None
    return pods


def _facility(facility: Any) -> dict[str, Any] | None:
    """A ClusterSpec facility as ``{ambientC, coolingZones: [{name, offsetC}]}``."""
    if facility is None:
        return None
    as_dict = getattr(facility, "as_dict", None)
    if callable(as_dict):
        facility = as_dict()

    def get(obj: Any, *names: str) -> Any:
        for n in names:
            if isinstance(obj, Mapping) and n in obj:
                return obj[n]
            if hasattr(obj, n):
                return getattr(obj, n)
        return None

    ambient = get(facility, "ambientC", "ambient_c", "ambient")
    zones = []
    for z in get(facility, "coolingZones", "cooling_zones") or []:
        zones.append({"name": str(get(z, "name")), "offsetC": float(get(z, "offsetC", "offset_c") or 0.0)})
    return {"ambientC": float(ambient) if isinstance(ambient, (int, float)) else None, "coolingZones": zones}


def _name_paths(obj: Any, name: str, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of ``obj`` whose value is the string ``name``."""
    if isinstance(obj, str):
        return [path] if obj == name else []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    return [p for k, v in items for p in _name_paths(v, name, (*path, k))]


#: The ``status.nodeInfo`` ids of a Node that differ from node to node (``joulectl.sim.k8s.node_ids``).
_ID_KEYS = ("bootID", "machineID", "systemUUID")


def _path_tree(leaves: dict[tuple[Any, ...], str]) -> dict[Any, Any]:
    """``{path: value key}`` as a tree of keys: ``{key: subtree, or the value key at a leaf}``."""
    tree: dict[Any, Any] = {}
    for path, value in leaves.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def _rebuilt(obj: Any, tree: dict[Any, Any], values: dict[str, str]) -> Any:
    """``obj`` with ``values[tree leaf]`` at the tree's leaves: the dicts and lists on the way
    copied (shallowly), everything else shared."""
    out = obj.copy()
    for key, sub in tree.items():
        out[key] = values[sub] if type(sub) is str else _rebuilt(obj[key], sub, values)
    return out


class _PoolTemplate:
    """The Node and NodeHardware of a pool's first node, renamed for the others: the nodes of a pool
    differ only where their name appears and in the Node's ``status.nodeInfo`` ids (derived from the
    name; checked on the second node; a pool where that is not so is built node by node). Shared
    parts are shared objects, so the planner computes the hardware facts of a pool once."""

    def __init__(self, first: Any, node_object: Any, node_hardware: Any, ids: bool = True) -> None:
        from joulectl.sim.k8s import node_ids

        self.node_ids = node_ids
        self.ids = ids
        self.name = first.name
        self.node = self.full_node(first, node_object)
        self.hardware = node_hardware(first)
        node_leaves = dict.fromkeys(_name_paths(self.node, self.name), "name")
        status = self.node.get("status")
        info = status.get("nodeInfo") if isinstance(status, dict) else None
        if isinstance(info, dict):
            node_leaves.update({("status", "nodeInfo", key): key for key in _ID_KEYS if key in info})
        self.with_ids = any(v != "name" for v in node_leaves.values())
        self.node_tree = _path_tree(node_leaves)
        self.hw_tree = _path_tree(dict.fromkeys(_name_paths(self.hardware, self.name), "name"))
        self.checked = False
        self.ok = True

    def full_node(self, spec_node: Any, node_object: Any) -> dict[str, Any]:
        """The Node of ``spec_node`` built in full; without the nodeInfo ids unless asked for."""
        node: dict[str, Any] = node_object(spec_node)
        status = node.get("status")
        info = status.get("nodeInfo") if isinstance(status, dict) else None
        if self.ids or not isinstance(info, dict):
            return node
        assert isinstance(status, dict)
        info = {k: v for k, v in info.items() if k not in _ID_KEYS}
        return {**node, "status": {**status, "nodeInfo": info}}

    def build(self, spec_node: Any, node_object: Any, node_hardware: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if spec_node.name == self.name:
            return self.node, self.hardware
        if not self.ok:
            return self.full_node(spec_node, node_object), node_hardware(spec_node)
        name = spec_node.name
        values = {"name": name, **self.node_ids(name)} if self.with_ids else {"name": name}
        node = _rebuilt(self.node, self.node_tree, values) if self.node_tree else self.node
        hardware = _rebuilt(self.hardware, self.hw_tree, values) if self.hw_tree else self.hardware
        if not self.checked:
            self.checked = True
            full_node, full_hw = self.full_node(spec_node, node_object), node_hardware(spec_node)
            if (node, hardware) != (full_node, full_hw):
                self.ok = False
                return full_node, full_hw
        return node, hardware


def load_spec_cluster(path: str, profiles_dir: str | None, *, node_ids: bool = True) -> ClusterInput:
    """A ClusterSpec as Node objects and NodeHardware, expanded by the simulator's modules.

    ``node_ids=False`` leaves the per-node ids out of each Node's ``status.nodeInfo`` (``bootID``,
    ``machineID``, ``systemUUID``: three SHA-1s and two copied dicts a node, which nothing a plan
    prints reads)."""
    from joulectl.planning.planner import no_gc
    from joulectl.sim.clusterspec import load_spec
    from joulectl.sim.k8s import node_hardware, node_object

    with no_gc():
        spec = load_spec(path, profiles_dir=profiles_dir)
        nodes: list[dict[str, Any]] = []
        hardware: dict[str, dict[str, Any]] = {}
        templates: dict[str, _PoolTemplate] = {}
        for spec_node in spec.nodes:
            template = templates.get(spec_node.pool)
            if template is None:
                template = templates[spec_node.pool] = _PoolTemplate(spec_node, node_object, node_hardware,
                                                                     node_ids)
            node, hw = template.build(spec_node, node_object, node_hardware)
            nodes.append(node)
            hardware[spec_node.name] = hw
    if not nodes:
        raise InputError("the cluster spec has no nodes", file=path)
    return ClusterInput(nodes=nodes, hardware=hardware, facility=_facility(getattr(spec, "facility", None)),
                        source=path)


def load_cluster(
    *,
    spec: str | None = None,
    nodes: str | None = None,
    hardware: Iterable[str] = (),
    pods: str | None = None,
    telemetry: str | None = None,
    profiles_dir: str | None = None,
    node_ids: bool = True,
) -> ClusterInput:
    """Read a cluster from a ClusterSpec (``spec``) or a NodeList file (``nodes``), plus NodeHardware
    files, a pods file and a telemetry file. Every problem is an :class:`InputError` naming the file.
    ``node_ids=False``: a ClusterSpec's Nodes without their ``status.nodeInfo`` ids
    (:func:`load_spec_cluster`)."""
    from joulectl.yamlio import load_documents, read_text

    if (spec is None) == (nodes is None):
        raise InputError(
            "give a cluster spec or --nodes NODES.yaml" if spec is None else "give a cluster spec or --nodes, not both"
        )
    from joulectl.planning.planner import no_gc

    if spec is not None:
        cluster = load_spec_cluster(spec, profiles_dir, node_ids=node_ids)
    else:
        assert nodes is not None
        with no_gc():
            node_objs, node_hw = read_nodes(_node_documents(nodes), _label(nodes))
        cluster = ClusterInput(nodes=node_objs, hardware=node_hw, source=nodes)
    for path in hardware:
        cluster.hardware.update(read_hardware(load_documents(path, what="NodeHardware file"), _label(path)))
    if pods is not None:
        cluster.pods = read_pods(load_documents(pods, what="pods file"), _label(pods))
    if telemetry is not None:
        from joulectl.planning.telemetry import parse_telemetry

        result = parse_telemetry(read_text(telemetry, what="telemetry file"), _label(telemetry))
        cluster.telemetry = result.power_w
        cluster.trends = result.trend_w_per_min
        cluster.telemetry_given = True
    return cluster


def _node_documents(path: str) -> list[Any]:
    """The documents of a ``--nodes`` file. A JSON export (``kubectl get nodes -o json``) is parsed
    by :mod:`json` alone: it has no aliases to expand, :func:`json.loads` refuses nesting past the
    interpreter's recursion limit, and the planner reads nodes shallowly, so the whole-tree depth
    walk of :func:`joulectl.yamlio.parse_documents` (a quarter of a 100,000-node plan) buys
    nothing here. YAML goes through :func:`joulectl.yamlio.parse_documents`."""
    import json

    from joulectl.yamlio import parse_documents, read_text

    text = read_text(path, what="node list")
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except RecursionError:
            raise InputError("nested too deeply", file=_label(path)) from None
        except ValueError:
            pass  # flow-style YAML
    return parse_documents(text, _label(path))


def _label(path: str) -> str:
    return "<stdin>" if path == "-" else path
