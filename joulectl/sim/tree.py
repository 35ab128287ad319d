"""Render (or resume) the node trees of a cluster spec under ``DIR/<node>/``.

A node tree is a host root joulectl runs against unmodified (``--root DIR/<node>``), and real
tools too when its ``sys/`` is bound over ``/sys``: ``sys/`` (powercap, cpufreq, cpu topology and
cpuidle, NUMA nodes, PCI functions with their config header, ids, irq and resources, hwmon, drm),
``proc/`` (cpuinfo, hostname, osrelease), ``etc/hostname``, ``dev/`` markers, ``bin/`` (the fake
vendor tools) and ``state/`` (node.json, manifest.json, nvml.json). File modes are those sysfs
shows (0444 read-only, 0644 writable, 0400 ``energy_uj``). Every attribute is its own file, never
a hard link: a write to one attribute changes no other (:mod:`joulectl.sim.sysfs_abi` holds the
formats real tools read).

Speed: the layout of a profile is computed once (:func:`joulectl.sim.template.template`) as flat
lists of directories, files and symlinks; a node is then a loop of plain ``os`` calls. Symlinks,
which cannot be written, are hard links to one shared copy per profile (a directory entry instead
of an inode).
Trees are rendered into ``DIR/.<node>.rendering`` and renamed into place, so a half-rendered tree
is never taken for a node. Overlay trees (``--overlay``: one shared copy of a profile's files,
a node's own files and writes in its upper layer) are :mod:`joulectl.sim.overlay`'s.

Resume: an existing ``DIR/<node>`` is never rendered again. Its ``state/node.json`` must name
the same node, profile, profile hash and layout version, and every entry of the layout must be
of the right kind; missing entries are created, and nothing present is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from joulectl.errors import InputError
from joulectl.sim import overlay as ov
from joulectl.sim.clusterspec import SpecNode
from joulectl.sim.room import check_room, write_error
from joulectl.sim.template import LAYOUT_VERSION, Template, node_files, template
from joulectl.sim.tools.state import load_manifest, read_nvml_state, write_nvml_state

__all__ = [
    "LAYOUT_VERSION",
    "RenderError",
    "RenderStats",
    "load_manifest",
    "read_nvml_state",
    "render_nodes",
    "template",
    "write_nvml_state",
]


class RenderError(InputError):
    """A tree that cannot be resumed (another node or profile, or an entry of the wrong kind)."""


# -- render / resume -----------------------------------------------------------------------------


@dataclass
class RenderStats:
    rendered: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    created_entries: int = 0


def _write_file(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


SIG_FILE = "state/layout-sig.json"


def dir_sigs(target: str, t: Template) -> dict[str, int]:
    """``{dir: mtime_ns}`` of the tree's root (key ``""``) and of every layout directory but
    ``state`` and those under it (which change at every run)."""
    if ov.layered_root(os.path.dirname(target)):
        sigs = ov.dir_sigs(target, t)
        if sigs is not None:
            return sigs
    return plain_dir_sigs(target, t)


def plain_dir_sigs(target: str, t: Template) -> dict[str, int]:
    """:func:`dir_sigs` by a ``stat`` of every directory."""
    st = os.lstat
    out: dict[str, int] = {"": st(target).st_mtime_ns}
    for d in t.dirs:
        if d == "state" or d.startswith("state/"):
            continue
        out[d] = st(target + "/" + d).st_mtime_ns
    return out


def _read_json(dir_fd: int, rel: str) -> Any:
    """The JSON document of ``rel`` under ``dir_fd`` (one open and read, the C decoder)."""
    fd = os.open(rel, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = [os.read(fd, 1 << 16)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 16))
    finally:
        os.close(fd)
    return json.loads(b"".join(chunks).decode("utf-8"))


SHARED_DIR = ".joulectl-shared"


def _ensure_store(root: str, t: Template, key: str) -> str | None:
    """``root/.joulectl-shared/<profile hash>``: one copy of the profile's symlinks.

    Node trees hard-link their symlinks to it, which costs a directory entry instead of an inode
    each. Only symlinks are shared: a symlink cannot be written (a write through it reaches its
    target, relative, inside the node), while every attribute is its own file, so a write to one
    node's (or one policy's) attribute changes no other. Removing the store leaves every tree
    intact. Returns None when the store cannot be made (the nodes then get their own symlinks).
    """
    base = os.path.join(root, SHARED_DIR)
    store = os.path.join(base, key)
    if os.path.exists(os.path.join(store, ".complete")):
        return store
    tmp = f"{store}.{os.getpid()}.tmp"
    old = os.umask(0)
    try:
        os.makedirs(base, exist_ok=True)
        if os.path.lexists(tmp):
            shutil.rmtree(tmp)
        os.mkdir(tmp, 0o755)
        made: set[str] = set()
        for rel in [r for r, _ in t.symlinks]:
            parent = rel.rpartition("/")[0]
            if parent and parent not in made:
                os.makedirs(os.path.join(tmp, parent), 0o755, exist_ok=True)
                made.add(parent)
        for rel, target_rel in t.symlinks:
            os.symlink(target_rel, tmp + "/" + rel)
        _write_file(tmp + "/.complete", b"", 0o444)
        try:
            os.rename(tmp, store)
        except OSError:  # another render made it first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return store if os.path.exists(os.path.join(store, ".complete")) else None
    finally:
        os.umask(old)
    return store


def _render_fresh(node: SpecNode, t: Template, target: str, store: str | None = None) -> None:
    """Render ``node`` into ``.<node>.rendering`` beside ``target`` and rename it into place. A
    write that fails (a full disk, no inode left, no permission) removes the half-rendered tree and
    raises a :class:`RenderError` naming the node, the entry and the system's error."""
    tmp = os.path.join(os.path.dirname(target), f".{node.name}.rendering")
    try:
        _render_into(node, t, tmp, store)
        os.rename(tmp, target)
    except BaseException as e:  # a failed write, or Ctrl-C: no half-rendered tree stays
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise write_error(f"node {node.name}", target, e, tmp, "the half-rendered tree was removed") from None
        raise
    try:
        _write_sigs(target, t, node)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(f"{target}/{SIG_FILE}.tmp")
        raise write_error(f"node {node.name}", target, e, target,
                          "the tree is complete, a later start checks it in full") from None


def _render_into(node: SpecNode, t: Template, tmp: str, store: str | None) -> None:
    write_layout(tmp, t, store)
    old = os.umask(0)
    try:
        for rel, data, mode in node_files(node, t):
            _write_file(tmp + "/" + rel, data, mode)
    finally:
        os.umask(old)


def write_layout(tmp: str, t: Template, store: str | None) -> None:
    """The profile's layout (directories, files, symlinks: all but the per-node files) into the
    new directory ``tmp``; symlinks hard-linked from ``store`` when there is one."""
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    old = os.umask(0)
    try:
        os.mkdir(tmp, 0o755)
        pre = tmp + "/"
        mkdir = os.mkdir
        for d in t.dirs:
            mkdir(pre + d, 0o755)
        op, wr, cl = os.open, os.write, os.close
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        for rel, data, mode in t.files:
            fd = op(pre + rel, flags, mode)
            if data:
                wr(fd, data)
            cl(fd)
        if store:
            ln = os.link
            spre = store + "/"
            for rel, target_rel in t.symlinks:
                try:
                    ln(spre + rel, pre + rel, follow_symlinks=False)
                except OSError:
                    os.symlink(target_rel, pre + rel)
        else:
            sl = os.symlink
            for rel, target_rel in t.symlinks:
                sl(target_rel, pre + rel)
    finally:
        os.umask(old)


def _write_sigs(target: str, t: Template, node: SpecNode) -> None:
    path = target + "/" + SIG_FILE
    tmp = path + ".tmp"
    sigs: dict[str, Any] = dict(dir_sigs(target, t))
    st = os.lstat(target + "/" + META_SIG)
    sigs[META_SIG] = [st.st_mtime_ns, st.st_size, st.st_ino, *_meta_identity(node)]
    text = json.dumps(sigs, separators=(",", ":"))  # the C encoder (json.dump is the Python one)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "l"
    if entry.is_dir(follow_symlinks=False):
        return "d"
    return "f"


_KIND_NAME = {"d": "a directory", "f": "a file", "l": "a symlink"}


def _resume(node: SpecNode, t: Template, target: str) -> int:
    """Check an existing tree and create what is missing; returns the number of entries created.

    A directory whose mtime is the one ``state/layout-sig.json`` recorded had no entry added,
    removed or renamed since (the kernel sets a directory's mtime at each), so only the others are
    listed and compared with the layout. Every path is taken relative to the tree's directory."""
    label = f"{target}"
    try:
        root_fd = os.open(target, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise RenderError(f"node {node.name}: {target} exists and is not a directory ({e.strerror})",
                          file=target) from None
    try:
        return _resume_at(node, t, target, label, root_fd)
    finally:
        os.close(root_fd)


#: The key of ``state/node.json``'s signature in :data:`SIG_FILE`: (mtime_ns, size, inode) and the
#: node, profile, profile hash and layout version it was checked to hold (no directory has the name).
META_SIG = "state/node.json"


def _meta_identity(node: SpecNode) -> list[Any]:
    prof = node.profile
    return [node.name, prof.name, prof.profile_hash(), LAYOUT_VERSION]


def _resume_at(node: SpecNode, t: Template, target: str, label: str, root_fd: int) -> int:
    try:
        sigs: dict[str, Any] = _read_json(root_fd, SIG_FILE)
        if not isinstance(sigs, dict):
            sigs = {}
    except (OSError, ValueError):
        sigs = {}
    # node.json unchanged since it was checked to name this node, profile and layout (the same
    # mtime, size and inode): not read again.
    meta_sig = sigs.get(META_SIG)
    meta_ok = False
    if isinstance(meta_sig, list) and meta_sig[3:] == _meta_identity(node):
        try:
            st = os.lstat(META_SIG, dir_fd=root_fd)
            meta_ok = meta_sig[:3] == [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            pass
    if not meta_ok:
        _check_meta(node, target, label, root_fd)
    own_files: dict[str, tuple[bytes, int]] | None = None  # built only when one is missing
    files, links = t.lookup()
    created = 0
    old = os.umask(0)
    changed = False
    lstat = os.lstat
    expected = t.expected
    # an overlay tree's directories as a stat of each would show them (:func:`ov.dir_sigs`)
    current = ov.dir_sigs(target, t) if ov.layered_root(os.path.dirname(target)) else None
    made: set[str] = set()  # directories this check created (then listed: their signatures are old)
    try:
        for d in ["", *t.dirs]:
            sig = sigs.get(d)
            if sig is not None:
                if current is not None:
                    if d not in made and current.get(d) == sig:
                        continue
                else:
                    try:
                        if lstat(d or ".", dir_fd=root_fd).st_mtime_ns == sig:
                            continue  # no entry was added, removed or replaced since the tree was checked
                    except OSError:
                        pass
            changed = changed or not (d == "state" or d.startswith("state/"))
            want = expected.get(d)
            if not want:
                continue  # nothing to find in it (state/.tmp): its parent's listing checked its kind
            full = target + "/" + d if d else target
            try:
                present = {e.name: _kind(e) for e in os.scandir(full)}
            except FileNotFoundError:
                present = {}  # created just now by the loop below for its parent
            except NotADirectoryError:
                raise RenderError(f"node {node.name}: /{d} should be a directory", file=label) from None
            for name, kind in want.items():
                have = present.get(name)
                rel = f"{d}/{name}" if d else name
                if have is None:
                    path = os.path.join(target, rel)
                    if kind == "d":
                        os.mkdir(path, 0o755)
                        made.add(rel)
                    elif rel in links:
                        os.symlink(links[rel], path)
                    elif rel in files:
                        data, mode = files[rel]
                        _write_file(path, data, mode)
                    else:
                        if own_files is None:
                            own_files = {r: (dt, md) for r, dt, md in node_files(node, t)}
                        data, mode = own_files[rel]
                        _write_file(path, data, mode)
                    created += 1
                elif have != kind:
                    raise RenderError(
                        f"node {node.name}: /{rel} is {_KIND_NAME[have]} where the layout has "
                        f"{_KIND_NAME[kind]}; remove {target} to render the node fresh", file=label,
                    )
        tmpdir = os.path.join(target, "state", ".tmp")
        for entry in os.scandir(tmpdir):
            if entry.name.startswith("ensure-") and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    finally:
        os.umask(old)
    if changed or not meta_ok:
        _write_sigs(target, t, node)
    return created


def _check_meta(node: SpecNode, target: str, label: str, root_fd: int) -> None:
    """``state/node.json`` names the node, profile, profile values and layout of ``node``."""
    try:
        meta = _read_json(root_fd, META_SIG)
    except FileNotFoundError:
        raise RenderError(
            f"node {node.name}: the tree exists but has no state/node.json (not rendered by joulectl "
            "simulate); remove it to render the node fresh", file=label,
        ) from None
    except (OSError, ValueError) as e:
        raise RenderError(f"node {node.name}: state/node.json is unreadable ({e})", file=label) from None
    keys = ("node", "profile", "profileHash", "layoutVersion")
    for key, expect in zip(keys, _meta_identity(node), strict=True):
        if not isinstance(meta, dict) or meta.get(key) != expect:
            got = meta.get(key) if isinstance(meta, dict) else None
            raise RenderError(
                f"node {node.name}: the tree was rendered for {key} {got!r}, the spec says {expect!r}; "
                f"remove {target} to render the node fresh (its counters restart at zero)", file=label,
            )


_POOL_NODES: list[SpecNode] = []
_POOL_ROOT = ""
_POOL_STORES: dict[str, str | None] = {}
_POOL_OVERLAY = False


def _render_one(node: SpecNode, root: str, stores: dict[str, str | None], overlay: bool) -> None:
    """A fresh tree: plain (``stores``: the profiles' shared symlinks) or an overlay mount."""
    target = os.path.join(root, node.name)
    if overlay:
        ov.render_node(node, template(node.profile), root, target)
    else:
        _render_fresh(node, template(node.profile), target, stores.get(node.profile.profile_hash()))


def _pool_render(i: int) -> tuple[str, str]:
    node = _POOL_NODES[i]
    _render_one(node, _POOL_ROOT, _POOL_STORES, _POOL_OVERLAY)
    return node.name, "rendered"


def _pool_init() -> None:
    """A render worker leaves Ctrl-C to the parent (which stops the pool): no traceback per worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _mount_existing(root: str, name: str, target: str) -> None:
    """Mount an overlay tree that is not (after a reboot, in another mount namespace), its mount
    point made again when it went."""
    if ov.mounted(target):
        return
    if not os.path.lexists(target):
        os.mkdir(target, 0o755)
    ov.mount_node(root, name, target)


def _auto_workers(fresh: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8)) if fresh >= 16 else 1


def render_nodes(
    nodes: Iterable[SpecNode],
    root: str,
    *,
    progress: Callable[[str, str], None] | None = None,
    workers: int | None = None,
    check_workers: int | None = None,
    overlay: bool = False,
) -> RenderStats:
    """Render every node under ``root/<node>`` (resuming the trees that exist).

    Existing trees are checked and completed first, on ``check_workers`` forked processes
    (default: :func:`joulectl.sim.resume_check.check_workers`), the error of the first damaged
    tree in node order raised as a check one by one raises it; then the fresh trees are rendered,
    on ``workers`` forked processes (default: one per CPU when there are 16 or more).
    ``progress(name, what)`` is called with ``what`` ``"resumed"`` or ``"rendered"`` after every
    tree, and ``"prepared"`` (``name`` the profile) after each profile's shared store, which the
    fresh trees of that profile wait for.

    ``overlay``: render the fresh trees as overlay mounts (:mod:`joulectl.sim.overlay`), as every
    later render of this root does; overlay trees not mounted are mounted before their check.
    """
    global _POOL_NODES, _POOL_ROOT, _POOL_STORES, _POOL_OVERLAY
    if os.path.exists(root) and not os.path.isdir(root):
        raise RenderError("is not a directory", file=root, field="--root")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise RenderError(f"cannot create the directory: {e.strerror}", file=root, field="--root") from None
    stats = RenderStats()
    fresh: list[SpecNode] = []
    existing: list[tuple[SpecNode, Template, str]] = []
    if overlay:
        ov.mark_root(root)
    layered = ov.layered_root(root)
    for node in nodes:
        t = template(node.profile)
        target = os.path.join(root, node.name)
        if layered and ov.is_layered(root, node.name):
            _mount_existing(root, node.name, target)
        try:
            st_mode = os.lstat(target).st_mode
        except FileNotFoundError:
            st_mode = None
        if st_mode is not None:
            if not stat.S_ISDIR(st_mode):
                if not existing:
                    raise RenderError(f"node {node.name}: {target} exists and is not a directory", file=target)
                # the trees before it are checked first, as they would have been one by one
                existing.append((node, t, target))
                break
            existing.append((node, t, target))
        else:
            fresh.append(node)
    if existing:
        from joulectl.sim import resume_check

        n_check = check_workers if check_workers is not None else resume_check.check_workers(existing)
        stats.created_entries += resume_check.resume_all(existing, progress, n_check)
        stats.resumed.extend(node.name for node, _t, _target in existing)
    per_profile: dict[str, int] = {}
    for node in fresh:
        key = node.profile.profile_hash()
        per_profile[key] = per_profile.get(key, 0) + 1
    as_overlay = bool(layered and fresh and ov.wants_overlay(root))
    if fresh:
        check_room(root, fresh, per_profile, overlay=as_overlay)
    stores: dict[str, str | None] = {}
    for node in fresh:
        key = node.profile.profile_hash()
        if key not in stores:
            if as_overlay:  # the profile's lower layer, before the workers share it
                stores[key] = ov.lower_layer(root, template(node.profile), key, node.profile.name)
            else:
                stores[key] = _ensure_store(root, template(node.profile), key) if per_profile[key] > 1 else None
            if progress:
                progress(node.profile.name, "prepared")
    n_workers = _auto_workers(len(fresh)) if workers is None else max(1, workers)
    if n_workers > 1 and len(fresh) > 1:
        import multiprocessing

        _POOL_NODES, _POOL_ROOT, _POOL_STORES, _POOL_OVERLAY = fresh, root, stores, as_overlay
        ctx = multiprocessing.get_context("fork")
        try:
            with ctx.Pool(n_workers, initializer=_pool_init) as pool:
                # one node per task: the progress moves with every tree, not every fourth
                for name, what in pool.imap_unordered(_pool_render, range(len(fresh)), chunksize=1):
                    stats.rendered.append(name)
                    if progress:
                        progress(name, what)
        except BaseException:
            # A failed tree (or Ctrl-C) ends the pool, whose workers die mid-tree: their half-rendered
            # trees are removed (the complete ones stay, and a later render resumes them).
            for node in fresh:
                shutil.rmtree(os.path.join(root, f".{node.name}.rendering"), ignore_errors=True)
                if as_overlay:  # (a layer renamed into place whose mount was not made is mounted by a resume)
                    shutil.rmtree(ov.node_layer(root, node.name) + ".rendering", ignore_errors=True)
            raise
        finally:
            _POOL_NODES, _POOL_ROOT, _POOL_STORES, _POOL_OVERLAY = [], "", {}, False
        order = {n.name: i for i, n in enumerate(fresh)}
        stats.rendered.sort(key=order.__getitem__)
    else:
        for node in fresh:
            _render_one(node, root, stores, as_overlay)
            stats.rendered.append(node.name)
            if progress:
                progress(node.name, "rendered")
    return stats
