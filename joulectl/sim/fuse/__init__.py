"""FUSE mode of ``simulate run``: one mount at ``DIR/fuse`` serving every node as a host root.

* :mod:`joulectl.sim.fuse.mount`: the binding check, finding and cleaning a stale mount.
* :mod:`joulectl.sim.fuse.live`: a node served live (reads computed when made, writes answered
  when made) and the pool the tick loop steps.
* :mod:`joulectl.sim.fuse.view`: the file system (``mfusepy`` operations over libfuse3).
* :mod:`joulectl.sim.fuse.serve`: the run: mount, tick thread, unmount on a signal or at the end.

Nothing here is imported unless ``--fuse`` is given.
"""
