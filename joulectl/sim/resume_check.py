"""The resume check of many existing trees, split over forked processes (:func:`resume_all`).

A tree's check (:func:`joulectl.sim.tree._resume`) lists the directories whose times changed; at fleet scale
(10,000 trees, millions of directories) the trees are shared out over one forked process per CPU,
each taking every n-th tree, and the first tree in node order that fails raises its error, as a
check one by one would.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Callable
from typing import Any

from joulectl.sim.clusterspec import SpecNode
from joulectl.sim.template import Template
from joulectl.sim.tree import RenderError, _resume

__all__ = ["CHECK_SPLIT_DIRS", "check_workers", "resume_all"]


#: A resume check is split over forked processes when the trees to check hold at least this many
#: directories per process (one ``lstat`` each, 3-5 µs here; a fork of the run costs about 10 ms).
CHECK_SPLIT_DIRS = 20_000
_CHECK_ITEMS: list[tuple[SpecNode, Template, str]] = []


def check_workers(existing: list[tuple[SpecNode, Template, str]]) -> int:
    """Processes for the resume check: one per CPU (at most 8) while each has
    :data:`CHECK_SPLIT_DIRS` directories or more to stat, whatever the load: the split costs only
    the forks, and each process takes its share of the CPU time the check needs anyway."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    dirs = sum(len(t.dirs) + 1 for _node, t, _target in existing)
    return max(1, min(cpus, 8, dirs // CHECK_SPLIT_DIRS))


def _check_one(item: tuple[SpecNode, Template, str]) -> int:
    node, t, target = item
    try:
        st_mode: int | None = os.lstat(target).st_mode
    except FileNotFoundError:
        st_mode = None
    if st_mode is None or not stat.S_ISDIR(st_mode):
        raise RenderError(f"node {node.name}: {target} exists and is not a directory", file=target)
    return _resume(node, t, target)


def _check_share(k: int, n: int) -> tuple[str, Any]:
    """The trees ``k::n`` of :data:`_CHECK_ITEMS`: the entries created per tree, or (``render`` or
    ``other``) the index and error of the first tree that failed (no further tree checked)."""
    done: list[int] = []
    try:
        for i in range(k, len(_CHECK_ITEMS), n):
            done.append(_check_one(_CHECK_ITEMS[i]))
    except RenderError as exc:
        return "render", (k + n * len(done), done, exc.problem, exc.file, exc.field, exc.hint)
    except Exception as exc:  # raised in the parent as it is (an OSError the check does not expect)
        return "other", (k + n * len(done), done, exc)
    return "ok", done


def _fork_share(k: int, n: int) -> tuple[int, int]:
    """A forked process checking share ``k`` of ``n``; (pid, read end of its result pipe).

    The child writes its pickled result and leaves by ``os._exit``: no buffer, lock or handler of
    the parent (a thread's, in a test or a served run) is touched."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its result is what the tests check)
        code = 0
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's
            result = _check_share(k, n)
            try:
                data = pickle.dumps(result)
            except Exception as exc:  # an error that does not pickle
                data = pickle.dumps(("other", (result[1][0], result[1][1], RuntimeError(repr(exc)))))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _read_share(pid: int, r: int) -> tuple[str, Any]:
    import pickle

    chunks = []
    try:
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not chunks:
        return "other", (0, [], RenderError("a resume check process ended unexpectedly"))
    result: tuple[str, Any] = pickle.loads(b"".join(chunks))
    return result


def resume_all(items: list[tuple[SpecNode, Template, str]], progress: Callable[[str, str], None] | None,
                n: int) -> int:
    """Check and complete the existing trees ``items`` on ``n`` processes (this one and ``n - 1``
    forked, each taking every ``n``-th tree); the entries created. The first tree in order that
    fails raises its error, as one by one: the others' checks stop at their first failure too."""
    n = max(1, min(n, len(items)))
    if n == 1:
        created = 0
        for item in items:
            created += _check_one(item)
            if progress:
                progress(item[0].name, "resumed")
        return created
    global _CHECK_ITEMS
    _CHECK_ITEMS = items
    children: list[tuple[int, int]] = []
    results: list[tuple[str, Any]] = []
    try:
        for k in range(1, n):
            children.append(_fork_share(k, n))
        results.append(_check_share(0, n))
        while children:
            results.append(_read_share(*children[0]))
            children.pop(0)
    finally:
        _CHECK_ITEMS = []
        for pid, r in children:  # an interrupt while the others ran: they are stopped
            os.close(r)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    created = 0
    first: tuple[int, BaseException] | None = None
    for k, (kind, payload) in enumerate(results):
        done: list[int] = payload if kind == "ok" else payload[1]
        created += sum(done)
        if progress:
            for j in range(len(done)):
                progress(items[k + n * j][0].name, "resumed")
        if kind == "ok":
            continue
        exc: BaseException
        if kind == "render":
            _i, _done, problem, file, fld, hint = payload
            exc = RenderError(problem, file=file, field=fld, hint=hint)
        else:
            exc = payload[2]
        if first is None or payload[0] < first[0]:
            first = (payload[0], exc)
    if first is not None:
        raise first[1]
    return created
