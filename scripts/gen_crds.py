"""Write joulectl's CRDs (examples/k8s/crds/): Joulie's NodeHardware and NodeTwin, extended with
every field joulectl writes.

Each schema starts from Joulie's (tests/fixtures/crds/, copies of the shared CRDs: every field of
it is kept with its type, so the result is a compatible superset) and is widened by the objects
joulectl prints over a corpus: ``discover -o json`` on every builtin hardware profile (each GPU
exposure of examples/sim/gpu-exposures.yaml too) and on every tree under tests/fixtures/real, and
``plan -o json`` of examples/cluster.yaml under each policy and with every optional flag. A value
seen as null makes the field ``nullable``. ``tests/k8s/test_crds.py`` checks that nothing any of
joulectl's outputs holds would be pruned or refused by these schemas; when it fails, run this
script again (``python scripts/gen_crds.py``) and review the diff.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
JOULIE = REPO / "tests" / "fixtures" / "crds"
OUT = REPO / "examples" / "k8s" / "crds"

#: Printer columns (kubectl get): the columns of joulectl's own tables.
COLUMNS = {
    "nodehardwares.joulie.io": [
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
        {"name": "CPU", "type": "string", "jsonPath": ".status.cpu.model"},
        {"name": "Sockets", "type": "integer", "jsonPath": ".status.cpu.sockets"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpu.count"},
        {"name": "GPU model", "type": "string", "jsonPath": ".status.gpu.model"},
        {"name": "GPU cap", "type": "number", "jsonPath": ".status.gpu.currentCapWatts"},
        {"name": "GPU control", "type": "boolean", "jsonPath": ".status.capabilities.gpuControl"},
        {"name": "CPU control", "type": "boolean", "jsonPath": ".status.capabilities.cpuControl"},
        {"name": "Quality", "type": "string", "jsonPath": ".status.quality.overall"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "nodetwins.joulie.io": [
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
        {"name": "Profile", "type": "string", "jsonPath": ".spec.profile"},
        {"name": "CPU cap %", "type": "number", "jsonPath": ".spec.cpu.packagePowerCapPctOfMax"},
        {"name": "GPU cap %", "type": "number", "jsonPath": ".spec.gpu.powerCap.capPctOfMax"},
        {"name": "Governor", "type": "string", "jsonPath": ".spec.gpu.governor"},
        {"name": "Class", "type": "string", "jsonPath": ".status.schedulableClass"},
        {"name": "Capped W", "type": "number", "jsonPath": ".status.powerMeasurement.nodeCappedPowerW"},
        {"name": "Draining", "type": "boolean", "jsonPath": ".spec.scheduling.draining"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}

_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def widen(schema: dict[str, Any], value: Any) -> None:
    """Widen ``schema`` in place so that it admits ``value`` (types, properties, items)."""
    if value is None:
        schema["nullable"] = True
        return
    if isinstance(value, dict):
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        for key, item in value.items():
            widen(props.setdefault(key, {}), item)
        return
    if isinstance(value, list):
        schema.setdefault("type", "array")
        items = schema.setdefault("items", {})
        for item in value:
            widen(items, item)
        return
    kind = _TYPES[type(value)]
    have = schema.get("type")
    if have is None:
        # A field Joulie's schema does not have: any number (watts, MHz, scores may be fractional
        # on another node even where the corpus saw whole values).
        schema["type"] = "number" if kind == "integer" else kind
    elif have != kind:
        if {have, kind} == {"integer", "number"}:
            schema["type"] = "number"
        else:
            raise SystemExit(f"type conflict: schema {have}, value {value!r}")


def _finish(schema: dict[str, Any]) -> None:
    """An array never seen with items gets string items (a structural schema needs one)."""
    if schema.get("type") == "array" and not schema.get("items"):
        schema["items"] = {"type": "string"}
    for sub in schema.get("properties", {}).values():
        _finish(sub)
    if isinstance(schema.get("items"), dict):
        _finish(schema["items"])


def _joulectl(*args: str) -> Any:
    env = {**os.environ, "NO_COLOR": "1", "JOULECTL_NVIDIA_TRANSPORT": "smi"}
    proc = subprocess.run([sys.executable, "-m", "joulectl", *args], capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 5):
        raise SystemExit(f"joulectl {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def hardware_corpus(work: Path) -> list[Any]:
    """NodeHardware objects: every builtin profile and GPU exposure, and every real capture tree."""
    from joulectl.sim.profiles import builtin_profile_names

    names = builtin_profile_names()
    spec = {"apiVersion": "sim.joulie.io/v1alpha1", "kind": "ClusterSpec", "metadata": {"name": "crd"},
            "spec": {"pools": [{"name": f"p{i}", "profile": n, "count": 1} for i, n in enumerate(names)]}}
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    objs = []
    for spec_file, root in ((work / "spec.yaml", work / "all"), (REPO / "examples/sim/gpu-exposures.yaml",
                                                                 work / "exposures")):
        subprocess.run([sys.executable, "-m", "joulectl", "simulate", "render", str(spec_file), "--root", str(root)],
                       check=True, capture_output=True)
        for node in sorted(p for p in root.iterdir() if (p / "state" / "node.json").exists()):
            objs.append(_joulectl("--root", str(node), "discover", "-o", "json"))
    real = REPO / "tests" / "fixtures" / "real"
    if real.is_dir():
        for tree in sorted(p for p in real.iterdir() if p.is_dir()):
            objs.append(_joulectl("--root", str(tree), "discover", "-o", "json"))
    return objs


def twin_corpus() -> list[Any]:
    """NodeTwin objects of examples/cluster.yaml under both policies and the optional flags."""
    spec = str(REPO / "examples" / "cluster.yaml")
    variants = [
        [], ["--policy", "queue-aware"], ["--absolute-caps"], ["--gpu-governor", "eco=efficient"],
        ["--gpu-governor", "eco=efficient", "--gpu-governor", "performance=peak", "--absolute-caps",
         "--cpu-eco-cap-on-uncappable-gpu-nodes"],
    ]
    objs: list[Any] = []
    for extra in variants:
        out = _joulectl("plan", spec, "-o", "json", *extra)
        objs.extend(out if isinstance(out, list) else out.get("items", [out]))
    return objs


def build(name: str, corpus: list[Any]) -> dict[str, Any]:
    crd = yaml.safe_load((JOULIE / f"joulie.io_{name}.yaml").read_text())
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for obj in corpus:
        body = copy.deepcopy(obj)
        for key in ("apiVersion", "kind", "metadata"):
            body.pop(key, None)  # the API server's own (ObjectMeta is not in the CRD schema)
        widen(schema, body)
    _finish(schema)
    version["additionalPrinterColumns"] = COLUMNS[crd["metadata"]["name"]]
    version.setdefault("subresources", {"status": {}})
    crd["metadata"].setdefault("annotations", {})["joulectl.io/generated-by"] = "scripts/gen_crds.py"
    return crd


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        hw = hardware_corpus(Path(tmp))
    for name, corpus in (("nodehardwares", hw), ("nodetwins", twin_corpus())):
        crd = build(name, corpus)
        text = "# Generated by scripts/gen_crds.py from Joulie's CRD and joulectl's outputs: do not edit.\n"
        text += yaml.safe_dump(crd, sort_keys=False, width=120)
        (OUT / f"joulie.io_{name}.yaml").write_text(text)
        print(f"{OUT / f'joulie.io_{name}.yaml'}: {len(corpus)} objects")


if __name__ == "__main__":
    main()
