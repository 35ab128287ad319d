"""Cluster planning: which nodes stay at performance, their caps, and their NodeTwin objects.

Pure functions over plain data (Kubernetes Node and NodeHardware objects as dicts); no Host, no
typer or rich. Used by ``joulectl plan`` and ``joulectl schedule-check --spec``::

    cluster = load_cluster(spec="cluster.yaml")          # or nodes="nodes.yaml", hardware=[...]
    result = plan(cluster, PlanOptions(policy="static", performance_fraction=0.5))
    result.twins      # NodeTwin objects (joulie.io/v1alpha1)
"""

from __future__ import annotations

from joulectl.planning.inputs import load_cluster
from joulectl.planning.options import ClusterInput, PlanOptions
from joulectl.planning.planner import PlanResult, plan

__all__ = ["ClusterInput", "PlanOptions", "PlanResult", "load_cluster", "plan"]
