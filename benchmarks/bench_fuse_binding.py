"""Benchmark: the FUSE bindings for Python on libfuse3, one file served by each (how mfusepy was chosen).

Method: each binding serves a minimal file system (one 4096-byte attribute, ``open``, ``read``,
``write``, ``release``, ``direct_io``, single-threaded) from a child process; this process then does
``--reads`` (default 3000) ``open``/``read``/``close`` and as many ``open(O_WRONLY|O_TRUNC)``/
``write``/``close`` on it, and reports the median and 90th percentile in µs. A binding that is not
installed is reported as such. Bindings: ``mfusepy`` (ctypes, libfuse3 high-level API) and
``pyfuse3`` (Cython, libfuse3 low-level API, trio); fusepy and llfuse speak libfuse 2 only.

A third file system, ``C``, is the floor under any binding: the same file served by libfuse3's
low-level API in C (compiled here with ``gcc`` and ``pkg-config fuse3``, i.e. ``libfuse3-dev``;
reported as missing otherwise); at its unmount it prints how many requests of each kind it got,
which shows what one ``open``/``read``/``close`` costs in kernel round trips (``FLUSH`` answered
``ENOSYS`` is sent once, then never again).

Placement (``--placement``, default on): each file system again with its serving thread pinned to
CPU 0 and the reader pinned to CPU 0 ("same CPU") or CPU 1 ("other CPU"). On an idle machine the
scheduler wakes the server on the CPU the reader is not on, so "other CPU" is what an idle
machine shows; the difference is the cost of waking a halted CPU for each request.

Usage: ``python benchmarks/bench_fuse_binding.py [--reads N] [--rounds R] [--no-placement]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MFUSEPY = '''
import errno, stat, sys, time
import mfusepy as F
DATA = b"123456789\\n"
class Ops:
    use_ns = True
    def getattr(self, path, fh=None):
        now = time.time_ns()
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_mtime": now, "st_ctime": now, "st_atime": now}
        if path == "/a":
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": 4096, "st_mtime": now,
                    "st_ctime": now, "st_atime": now}
        raise F.FuseOSError(errno.ENOENT)
    def readdir(self, path, fh):
        return [".", "..", "a"]
    def open(self, path, fi):
        fi.direct_io = 1
        fi.fh = 1
        return 0
    def read(self, path, size, offset, fh):
        return DATA[offset:offset + size]
    def write(self, path, data, offset, fh):
        return len(data)
    def truncate(self, path, length, fh=None):
        return 0
    def release(self, path, fh):
        return 0
F.FUSE(Ops(), sys.argv[1], raw_fi=True, foreground=True, nothreads=True, attr_timeout=1.0, entry_timeout=1.0)
'''

PYFUSE3 = '''
import errno, stat, sys, time
import pyfuse3, trio
DATA = b"123456789\\n"
class Ops(pyfuse3.Operations):
    async def getattr(self, inode, ctx=None):
        e = pyfuse3.EntryAttributes()
        if inode == pyfuse3.ROOT_INODE:
            e.st_mode = stat.S_IFDIR | 0o755
        elif inode == 2:
            e.st_mode = stat.S_IFREG | 0o644
            e.st_size = 4096
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        e.st_atime_ns = e.st_ctime_ns = e.st_mtime_ns = time.time_ns()
        e.st_ino = inode
        e.attr_timeout = e.entry_timeout = 1.0
        return e
    async def lookup(self, parent, name, ctx=None):
        if parent == pyfuse3.ROOT_INODE and name == b"a":
            return await self.getattr(2)
        raise pyfuse3.FUSEError(errno.ENOENT)
    async def setattr(self, inode, attr, fields, fh, ctx):
        return await self.getattr(inode)
    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, direct_io=True)
    async def read(self, fh, off, size):
        return DATA[off:off + size]
    async def write(self, fh, off, buf):
        return len(buf)
    async def release(self, fh):
        pass
pyfuse3.init(Ops(), sys.argv[1], set(pyfuse3.default_options))
try:
    trio.run(pyfuse3.main)
finally:
    pyfuse3.close()
'''

C_SOURCE = r"""
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
static const char DATA[] = "123456789\n";
static long n_lookup, n_getattr, n_open, n_read, n_write, n_flush, n_release, n_setattr;
static void attr(fuse_ino_t ino, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == 1) { st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; }
    else { st->st_mode = S_IFREG | 0644; st->st_nlink = 1; st->st_size = 4096; }
}
static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    n_lookup++;
    if (parent != 1 || strcmp(name, "a")) { fuse_reply_err(req, ENOENT); return; }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = 2; e.attr_timeout = 1.0; e.entry_timeout = 1.0;
    attr(2, &e.attr);
    fuse_reply_entry(req, &e);
}
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct stat st; n_getattr++; attr(ino, &st); fuse_reply_attr(req, &st, 1.0);
}
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int to_set, struct fuse_file_info *fi) {
    struct stat st; n_setattr++; attr(ino, &st); fuse_reply_attr(req, &st, 1.0);
}
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    n_open++; fi->direct_io = 1; fi->fh = 1; fuse_reply_open(req, fi);
}
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    size_t n = sizeof DATA - 1;
    n_read++;
    if (off >= (off_t)n) { fuse_reply_buf(req, NULL, 0); return; }
    if (off + size > n) size = n - off;
    fuse_reply_buf(req, DATA + off, size);
}
static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) { n_write++; fuse_reply_write(req, size); }
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    n_flush++; fuse_reply_err(req, ENOSYS);
}
static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    n_release++; fuse_reply_err(req, 0);
}
static void op_destroy(void *u) {
    fprintf(stderr, "lookup %ld getattr %ld setattr %ld open %ld read %ld write %ld flush %ld release %ld\n",
            n_lookup, n_getattr, n_setattr, n_open, n_read, n_write, n_flush, n_release);
}
static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup, .getattr = op_getattr, .setattr = op_setattr, .open = op_open, .read = op_read,
    .write = op_write, .flush = op_flush, .release = op_release, .destroy = op_destroy};
int main(int argc, char **argv) {
    char *fargv[] = {argv[0], NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se || fuse_set_signal_handlers(se) || fuse_session_mount(se, argv[1])) return 1;
    int r = fuse_session_loop(se);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return r;
}
"""


def _build_c(work: Path) -> list[str] | str:
    """The C file system's command line, or why it cannot be built here."""
    gcc, pkg = shutil.which("gcc"), shutil.which("pkg-config")
    if gcc is None or pkg is None:
        return "needs gcc and pkg-config"
    flags = subprocess.run([pkg, "--cflags", "--libs", "fuse3"], capture_output=True, text=True, check=False)
    if flags.returncode != 0:
        return "needs libfuse3-dev (pkg-config fuse3 failed)"
    src, exe = work / "ll.c", work / "ll"
    src.write_text(C_SOURCE)
    built = subprocess.run([gcc, "-O2", "-o", str(exe), str(src), *flags.stdout.split()], capture_output=True,
                           text=True, check=False)
    if built.returncode != 0:
        return f"gcc failed: {built.stderr.strip().splitlines()[-1:]}"
    return [str(exe)]


def _pin(pid: int, cpu: int | None) -> None:
    os.sched_setaffinity(pid, set(range(os.cpu_count() or 1)) if cpu is None else {cpu})


def _timed(path: str, n: int, write: bool) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        if write:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.write(fd, b"5\n")
        else:
            fd = os.open(path, os.O_RDONLY)
            os.read(fd, 4096)
        os.close(fd)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


class _Served:
    """One file system served from a child process at a temporary mount point."""

    def __init__(self, name: str, cmd: list[str], work: Path) -> None:
        self.name = name
        self.mnt = work / f"mnt-{name}"
        self.mnt.mkdir()
        self.proc = subprocess.Popen([*cmd, str(self.mnt)], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not (self.mnt / "a").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"{name} did not mount")
            time.sleep(0.01)

    @property
    def attr(self) -> str:
        return str(self.mnt / "a")

    def stop(self) -> str:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
        _out, err = self.proc.communicate(timeout=30)
        return err.strip()


def _cmds(work: Path) -> list[tuple[str, list[str] | str]]:
    out: list[tuple[str, list[str] | str]] = [("C", _build_c(work))]
    for name, code in (("mfusepy", MFUSEPY), ("pyfuse3", PYFUSE3)):
        out.append((name, [sys.executable, "-c", code] if importlib.util.find_spec(name) else "not installed"))
    return out


def _med(values: list[float]) -> str:
    return f"median {statistics.median(values):6.1f} p90 {sorted(values)[int(0.9 * len(values))]:6.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-placement", dest="placement", action="store_false")
    args = ap.parse_args()
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load {' '.join(fh.read().split()[:3])}; µs per open+read+close / open(O_TRUNC)+write+close")
    with tempfile.TemporaryDirectory(prefix="bench-fuse-binding-") as d:
        work = Path(d)
        cmds = _cmds(work)
        for _ in range(args.rounds):
            for name, cmd in cmds:
                if isinstance(cmd, str):
                    print(f"  {name:8s} {cmd}")
                    continue
                fs = _Served(name, cmd, work)
                try:
                    r, w = _timed(fs.attr, args.reads, False), _timed(fs.attr, args.reads, True)
                finally:
                    counts = fs.stop()
                    fs.mnt.rmdir()
                print(f"  {name:8s} read {_med(r)}   write {_med(w)}" + (f"   requests: {counts}" if counts else ""))
        two = {0, 1} <= os.sched_getaffinity(0)
        if args.placement and two:
            print("placement, read µs: server thread on CPU 0, reader on CPU 0 (same) / CPU 1 (other), "
                  "alternating in blocks of 100")
            for name, cmd in cmds:
                if isinstance(cmd, str):
                    continue
                fs = _Served(name, cmd, work)
                same: list[float] = []
                other: list[float] = []
                try:
                    _pin(fs.proc.pid, 0)  # the serving loop is the main thread of each
                    for _ in range(max(1, args.reads // 100)):
                        _pin(0, 0)
                        same.extend(_timed(fs.attr, 100, False))
                        _pin(0, 1)
                        other.extend(_timed(fs.attr, 100, False))
                finally:
                    _pin(0, None)
                    fs.stop()
                    fs.mnt.rmdir()
                print(f"  {name:8s} same CPU {_med(same)}   other CPU {_med(other)}")


if __name__ == "__main__":
    main()
