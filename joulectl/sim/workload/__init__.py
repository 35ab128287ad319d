"""What-if replays: a workload trace run on a fleet under several plans, in simulated time.

- :mod:`~joulectl.sim.workload.traces`: the three ways a trace comes in (Joulie JSONL, Kubernetes
  manifests with arrival and duration annotations, the CSV of public cluster traces) -> :class:`Task`.
- :mod:`~joulectl.sim.workload.fleet`: the fleet (a ClusterSpec, or Nodes emulated from the catalog),
  the plans, and each plan applied through ``cap --from-twin`` onto emulated nodes, its limits read back.
- :mod:`~joulectl.sim.workload.placement`: the schedule-check filter and score code, with what is in use.
- :mod:`~joulectl.sim.workload.speed`: node power and task speed under the limits in force (§5 formulas).
- :mod:`~joulectl.sim.workload.replay`: the event-driven replay, energy integrated between events.
- :mod:`~joulectl.sim.workload.compare`: the ``WhatIfComparison`` document and its table.
- :mod:`~joulectl.sim.workload.report`: the HTML report (optional extra ``joulectl[report]``).
- :mod:`~joulectl.sim.workload.drive`: the same workload driving ``simulate run --trace``.
"""
