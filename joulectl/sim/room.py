"""Room for new node trees: the inodes and bytes a render takes, checked before it starts.

Every attribute of a node tree is its own file (issue 14): a full ``intel-xeon-2s-rapl`` node is
6,927 entries, so 10,000 of them need 69 million inodes, and an ext4 filesystem has a fixed
number (16.8 million on a 256 GB disk made with the defaults). A render that runs out of inodes
or space half-way stops with the kernel's ``ENOSPC`` on some file; this check says so before
anything is written, in one line (issue 20: every kernel limit the design needs is checked at the
start). The figures are lower bounds (a file's data, not the blocks it takes), so a render this
lets start can still run out of space; then :func:`joulectl.sim.tree.render_nodes` removes the
half-rendered tree and says which write failed.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from joulectl.sim.clusterspec import SpecNode
from joulectl.sim.template import node_files, template

#: Under a render root: overlay trees' layers (:data:`joulectl.sim.overlay.LAYERS_DIR`).
LAYERS_DIR = ".joulectl-layers"


def lower_path(root: str, key: str) -> str:
    """``DIR/.joulectl-layers/lower/<key>``: the lower layer of the profile whose hash is ``key``
    (:func:`joulectl.sim.overlay.lower_layer` writes it; here, where the room check looks for it)."""
    return os.path.join(root, LAYERS_DIR, "lower", key)

if TYPE_CHECKING:
    from joulectl.sim.tree import RenderError

__all__ = ["check_room", "need", "write_error"]


def need(fresh: list[SpecNode], per_profile: dict[str, int], *, overlay_root: str | None = None) -> tuple[int, int]:
    """(inodes, bytes of file data) that rendering ``fresh`` takes at least: per tree its own
    directory, every directory and file of the layout, the files that differ per node and the
    resume signatures; symlinks where a profile has one tree (the others hard-link one shared
    copy per profile: a directory entry, no inode). ``per_profile``: fresh trees per profile hash.

    With ``overlay_root`` (overlay trees under it, :mod:`joulectl.sim.overlay`): each profile's
    lower layer not yet written there, once, and per node its layer directories, its own files and
    their directories, the mount point and the resume signatures."""
    per_tree: dict[str, tuple[int, int]] = {}
    inodes = data = 0
    for node in fresh:
        key = node.profile.profile_hash()
        if key not in per_tree:
            t = template(node.profile)
            own = node_files(node, t)
            layout = (len(t.dirs) + len(t.files), sum(len(d) for _, d, _ in t.files))
            sigs = sum(len(d) + 23 for d in t.dirs)  # the signatures' ``"<dir>":<mtime_ns>,`` each directory
            own_data = sum(len(d) for _, d, _ in own)
            if overlay_root is not None:
                if not os.path.isdir(lower_path(overlay_root, key)):
                    inodes += 1 + layout[0] + len(t.symlinks)  # the lower layer, once
                    data += layout[1]
                parents = {os.path.dirname(rel) for rel, _, _ in own}
                parents |= {p.rsplit("/", i)[0] for p in list(parents) for i in range(1, p.count("/") + 1)}
                parents.discard("")
                # layer, upper, work, lower link, mount point; own files, their directories; signatures
                per_tree[key] = (5 + len(parents) + len(own) + 1, own_data + sigs)
            else:
                shared = len(t.symlinks) if per_profile.get(key, 0) > 1 else 0
                inodes += shared  # the profile's shared copy, once
                per_tree[key] = (2 + layout[0] + len(own) + (0 if shared else len(t.symlinks)),
                                 layout[1] + own_data + sigs)
        tree_inodes, tree_data = per_tree[key]
        inodes += tree_inodes
        data += tree_data
    return inodes, data


def check_room(root: str, fresh: list[SpecNode], per_profile: dict[str, int], *, overlay: bool = False) -> None:
    """Stop a render, with one line, when the filesystem of ``root`` has fewer free inodes (where
    it counts them: not btrfs) or bytes than :func:`need` says the new trees take. Root may use
    the blocks and inodes reserved for it; anyone else what ``df`` shows as available."""
    from joulectl.sim.tree import RenderError

    try:
        sv = os.statvfs(root)
    except OSError:
        return  # the render says what is wrong with the directory
    if overlay:
        from joulectl.sim.overlay import check_mounts

        check_mounts(root, len(fresh))
    inodes, data = need(fresh, per_profile, overlay_root=root if overlay else None)
    privileged = os.geteuid() == 0
    trees = f"{len(fresh)} new node tree{'s' if len(fresh) != 1 else ''}"
    free_inodes = sv.f_ffree if privileged else sv.f_favail
    if sv.f_files and inodes > free_inodes:
        raise RenderError(
            f"{trees} need at least {inodes:,} inodes{'' if overlay else ' (a file per attribute)'}, "
            f"the filesystem has {free_inodes:,} "
            "free (df -i): render fewer nodes, free inodes, or use a filesystem with more (mkfs.ext4 -N, tmpfs "
            "nr_inodes=)", file=root, field="--root")
    free_bytes = (sv.f_bfree if privileged else sv.f_bavail) * sv.f_frsize
    if data > free_bytes:
        raise RenderError(
            f"{trees} need at least {data:,} bytes, the filesystem has {free_bytes:,} free (df -h): render "
            "fewer nodes or free space", file=root, field="--root")


def write_error(who: str, target: str, e: OSError, under: str, outcome: str) -> RenderError:
    """One line for a write of a render that failed: what was being written (``who``: ``node
    <name>``, or a profile's shared layer), the entry (relative to ``under``) and the system's
    error, a pointer to ``df`` when the disk or the inodes ran out, and what was left
    (``outcome``)."""
    from joulectl.sim.tree import RenderError

    name = e.filename if isinstance(e.filename, str) else ""
    what = f" writing {name[len(under) + 1:]}" if name.startswith(under + "/") else ""
    room = " (df -h, df -i)" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return RenderError(f"{who}: {e.strerror or e}{what}{room}: {outcome}", file=target)
