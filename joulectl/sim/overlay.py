"""Overlay node trees (``simulate render --overlay``): one copy of a profile's files, shared read-only.

A plain tree is a file per attribute (issue 14): a full ``intel-xeon-2s-rapl`` node is 6,927
inodes, and creating them costs the kernel about 20-75 µs each here, so 1,000 nodes take minutes
(docs/PERFORMANCE.md, "render at fleet scale"). An overlay tree is an overlayfs mount at
``DIR/<node>``: the lower layer is the profile's layout, written once under
``DIR/.joulectl-layers/lower/<profile hash>/``; the upper layer, ``DIR/.joulectl-layers/nodes/
<node>/upper``, holds the files that differ per node (hostname, ``state/``) and everything the
node's writers change: the kernel copies a file up at its first write, so a write to one node's
attribute changes no other node and no other attribute, as in a plain tree. Modes, inode numbers
(stable across the copy-up), hard links made in the node, renames and inotify events are the
kernel's own. A node costs a few directories, its own files and a ``mount`` call.

Mounting needs the privilege to mount (root, or ``CAP_SYS_ADMIN`` in the mount namespace). The
mounts are not kept across a reboot or outside the mount namespace that made them: every
``simulate render`` and ``simulate run`` mounts the overlay trees of its spec that are not
mounted before it checks them, and ``simulate unmount --root DIR`` detaches them all (before
``rm -r DIR``: a removal through a mount removes the node's files from its upper layer only).
A root rendered with ``--overlay`` keeps rendering its new trees that way (the marker
``DIR/.joulectl-layers/overlay``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from typing import TYPE_CHECKING

from joulectl.errors import RefusedError
from joulectl.sim import libc, room

if TYPE_CHECKING:
    from joulectl.sim.clusterspec import SpecNode
    from joulectl.sim.template import Template

__all__ = ["LAYERS_DIR", "check_mounts", "dir_sigs", "is_layered", "layered_root", "lower_layer", "mark_root",
           "mount_node", "mounted", "node_layer", "node_layers", "render_node", "unmount_all", "wants_overlay"]

#: Under the render root: the profiles' lower layers, the nodes' upper and work directories.
LAYERS_DIR = room.LAYERS_DIR
#: ``DIR/.joulectl-layers/overlay``: the root renders its new trees as overlays.
MARKER = "overlay"
#: Characters overlayfs takes as separators in its options (``lowerdir=a:b,upperdir=...``).
_SEPARATORS = (",", ":", "\\")


def layers(root: str) -> str:
    return os.path.join(root, LAYERS_DIR)


def node_layer(root: str, name: str) -> str:
    """``DIR/.joulectl-layers/nodes/<node>``: the node's ``upper``, ``work`` and ``lower`` link."""
    return os.path.join(root, LAYERS_DIR, "nodes", name)


def layered_root(root: str) -> bool:
    """Whether ``root`` holds any overlay tree (or was rendered with ``--overlay``)."""
    return os.path.isdir(layers(root))


def is_layered(root: str, name: str) -> bool:
    return os.path.isdir(node_layer(root, name))


def mark_root(root: str) -> None:
    os.makedirs(layers(root), exist_ok=True)
    path = os.path.join(layers(root), MARKER)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("new node trees of this root are overlay mounts (joulectl simulate render --overlay)\n")


def wants_overlay(root: str) -> bool:
    return os.path.exists(os.path.join(layers(root), MARKER))


def mounted(target: str) -> bool:
    """Whether something is mounted at ``target`` (its device differs from its parent's): a
    ``stat`` each, where :func:`joulectl.sim.fuse.mount.mounted` reads the whole mount table (a
    line per node of a 10,000-node root)."""
    try:
        return os.stat(target).st_dev != os.stat(os.path.dirname(target)).st_dev
    except OSError:
        return False


def _check_path(root: str, *paths: str) -> None:
    """Refuse paths overlayfs cannot take in its options (absolute, as the mount is given them)."""
    from joulectl.sim.tree import RenderError

    for path in (os.path.abspath(root), *paths):
        bad = [c for c in _SEPARATORS if c in path]
        if bad:
            raise RenderError(f"an overlay tree's path cannot hold {bad[0]!r} (overlayfs takes it as a separator "
                              f"in its options: {path}): use another --root or render without --overlay", file=root,
                              field="--root")


def mount_node(root: str, name: str, target: str) -> None:
    """Mount node ``name``'s overlay at ``target`` (its layers under ``root``). Raises
    :class:`~joulectl.errors.RefusedError` without the privilege to mount, a
    :class:`~joulectl.sim.tree.RenderError` for any other failure."""
    from joulectl.sim.tree import RenderError

    layer = os.path.abspath(node_layer(root, name))
    try:
        lower = os.path.realpath(os.path.join(layer, "lower"), strict=True)
    except OSError as e:
        raise RenderError(f"node {name}: its overlay's lower layer is missing ({e.strerror}); remove {layer} "
                          f"and {target} to render the node fresh", file=target) from None
    _check_path(root, layer, lower)
    options = f"lowerdir={lower},upperdir={layer}/upper,workdir={layer}/work"
    # ``volatile``: no sync of the upper layer, as a plain tree's writes are not synced (a copy-up
    # costs a third: the first tick copies up every file it writes, 140 on a full Intel node).
    # The kernel leaves ``work/work/incompat/volatile`` at every mount and refuses the next one
    # while it is there (the layer may have lost unsynced writes in a crash, as a plain tree may).
    shutil.rmtree(f"{layer}/work/work/incompat", ignore_errors=True)
    err = 0
    for extra in (",volatile", ""):  # (Linux before 5.10 has no volatile)
        err = libc.mount("overlay", target, "overlay", options + extra)
        if err != errno.EINVAL:
            break
    if not err:
        return
    why = os.strerror(err)
    if err in (errno.EPERM, errno.EACCES):
        raise RefusedError(f"{target}: cannot mount node {name}'s overlay ({why}): overlay trees need the "
                           "privilege to mount (root or CAP_SYS_ADMIN); render without --overlay")
    if err == errno.ENODEV:
        why += ": this kernel has no overlayfs (modprobe overlay)"
    elif err == errno.ENOSPC:  # the mount namespace holds fs.mount-max mounts
        limit = mount_limit()
        why += (f": the kernel's mount table is full (fs.mount-max {limit:,}; sysctl -w "
                f"fs.mount-max={2 * limit}), or unmount other trees" if limit else "")
    raise RenderError(f"node {name}: cannot mount its overlay ({why})", file=target)


def mount_limit() -> int | None:
    """The kernel's ``fs.mount-max``: the mounts a mount namespace may hold (None: unknown)."""
    try:
        with open("/proc/sys/fs/mount-max", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def mounts_in_use() -> int | None:
    """The mounts of this process's mount namespace (lines of ``/proc/self/mountinfo``)."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return None


def check_mounts(root: str, new: int) -> None:
    """Stop a render, in one line, when ``new`` overlay mounts would pass ``fs.mount-max``."""
    from joulectl.sim.tree import RenderError

    limit, in_use = mount_limit(), mounts_in_use()
    if limit is None or in_use is None or in_use + new <= limit:
        return
    raise RenderError(
        f"{new:,} new overlay trees need a mount each, and {in_use:,} of the kernel's fs.mount-max {limit:,} "
        f"are in use: raise it (sysctl -w fs.mount-max={in_use + new + 1000}), render fewer nodes, or render "
        "without --overlay", file=root, field="--root")


def node_layers(root: str) -> list[str]:
    """The nodes of ``root`` that are overlay trees (their layers), mounted or not."""
    try:
        names = os.listdir(os.path.join(layers(root), "nodes"))
    except OSError:
        return []
    return sorted(n for n in names if not n.endswith(".rendering"))


def unmount_all(root: str) -> int:
    """Detach every overlay tree mounted under ``root``; how many were."""
    done = 0
    for name in node_layers(root):
        target = os.path.join(root, name)
        if mounted(target):
            libc.detach(target)
            done += 1
    return done


#: lower layer path -> its directories' mtimes (:func:`joulectl.sim.tree.dir_sigs` of the layer).
_LOWER_SIGS: dict[str, dict[str, int]] = {}


def dir_sigs(target: str, t: Template) -> dict[str, int] | None:
    """:func:`joulectl.sim.tree.dir_sigs` of the overlay tree at ``target`` without a ``stat``
    through the mount per directory (about 9 µs each, 1,076 directories on a full Intel node), or
    None when ``target`` is no overlay tree of its root.

    A directory that exists in the lower layer only shows the lower's times, the same for every
    node of the profile (read once per process); one the upper layer holds (the node's own files,
    and every directory the kernel copied up for a write, a creation, a removal or a rename in the
    node) shows the upper's, read through the mount. Any change of a node's entries happens in a
    directory of its upper layer, so this is what a ``stat`` of every directory would give."""
    from joulectl.sim.tree import plain_dir_sigs

    root, name = os.path.split(target)
    layer = node_layer(root, name)
    try:
        lower = os.path.realpath(layer + "/lower", strict=True)
    except OSError:
        return None
    base = _LOWER_SIGS.get(lower)
    if base is None:
        base = _LOWER_SIGS[lower] = plain_dir_sigs(lower, t)
    out = dict(base)
    upper = layer + "/upper"
    for dirpath, _dirs, _files in os.walk(upper):
        rel = dirpath[len(upper) + 1:]
        if rel in out:
            out[rel] = os.lstat(f"{target}/{rel}" if rel else target).st_mtime_ns
    return out


def lower_layer(root: str, t: Template, key: str, profile: str) -> str:
    """``DIR/.joulectl-layers/lower/<key>``: the layout of ``profile``, written once (into a
    temporary directory renamed into place, so a half-written layer is never used). A write that
    fails raises a :class:`~joulectl.sim.tree.RenderError` naming the entry and the error."""
    from joulectl.sim.room import write_error
    from joulectl.sim.tree import write_layout

    path = room.lower_path(root, key)
    if os.path.isdir(path):
        return path
    tmp = f"{path}.{os.getpid()}.rendering"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        write_layout(tmp, t, None)
        try:
            os.rename(tmp, path)
        except OSError:  # another render made it first
            if not os.path.isdir(path):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise write_error(f"profile {profile}'s shared lower layer", path, e, tmp,
                              "nothing of it was left") from None
        raise
    return path


def render_node(node: SpecNode, t: Template, root: str, target: str) -> None:
    """Render ``node`` as an overlay tree at ``target``: its layer (upper holding the per-node
    files), the mount point, the mount, the resume signatures. A failure leaves nothing of it."""
    from joulectl.sim.room import write_error
    from joulectl.sim.template import node_files
    from joulectl.sim.tree import _write_file, _write_sigs

    _check_path(root)
    key = node.profile.profile_hash()
    layer = node_layer(root, node.name)
    tmp = layer + ".rendering"
    made_target = False
    try:
        lower = lower_layer(root, t, key, node.profile.name)
        shutil.rmtree(tmp, ignore_errors=True)
        old = os.umask(0)
        try:
            os.makedirs(os.path.dirname(tmp), 0o755, exist_ok=True)
            os.mkdir(tmp, 0o755)
            os.mkdir(tmp + "/upper", 0o755)
            os.mkdir(tmp + "/work", 0o755)
            made = {""}
            for rel, data, mode in node_files(node, t):
                parts = rel.split("/")[:-1]
                for i in range(1, len(parts) + 1):  # each directory 0755, as the lower has it
                    parent = "/".join(parts[:i])
                    if parent not in made:
                        os.mkdir(f"{tmp}/upper/{parent}", 0o755)
                        made.add(parent)
                _write_file(f"{tmp}/upper/{rel}", data, mode)
            os.symlink(os.path.relpath(lower, layer), tmp + "/lower")
            os.rename(tmp, layer)
            os.mkdir(target, 0o755)
            made_target = True
        finally:
            os.umask(old)
        mount_node(root, node.name, target)
        _write_sigs(target, t, node)
    except BaseException as e:
        if mounted(target):
            with contextlib.suppress(OSError):
                libc.detach(target)
        if made_target:
            with contextlib.suppress(OSError):
                os.rmdir(target)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(layer, ignore_errors=True)
        if isinstance(e, OSError):
            # the entry named relative to the layer being made, or to the tree once mounted
            under = tmp if isinstance(e.filename, str) and e.filename.startswith(tmp + "/") else target
            raise write_error(f"node {node.name}", target, e, under, "nothing of the node was left") from None
        raise
