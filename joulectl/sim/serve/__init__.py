"""The simulator's network face: immutable per-tick snapshots, an HTTP server over them (telemetry,
control, Prometheus and exporter formats) and an OTLP/HTTP pusher.

The tick loop publishes one :class:`~joulectl.sim.serve.snapshot.Snapshot` per tick by swapping a
single reference; every request and every push reads one snapshot from start to end, so a reader
never sees half a tick and no request ever steps a node.
"""
