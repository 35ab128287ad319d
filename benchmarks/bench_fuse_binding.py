"""Benchmark: the FUSE bindings for Python on libfuse3, one file served by each (how mfusepy was chosen).

Method: each binding serves a minimal file system (one 4096-byte attribute, ``open``, ``read``,
``write``, ``release``, ``direct_io``, single-threaded) from a child process; this process then does
``--reads`` (default 3000) ``open``/``read``/``close`` and as many ``open(O_WRONLY|O_TRUNC)``/
``write``/``close`` on it, and reports the median and 90th percentile in µs. A binding that is not
installed is reported as such. Bindings: ``mfusepy`` (ctypes, libfuse3 high-level API) and
``pyfuse3`` (Cython, libfuse3 low-level API, trio); fusepy and llfuse speak libfuse 2 only.

Usage: ``python benchmarks/bench_fuse_binding.py [--reads N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
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


def _run(name: str, code: str, reads: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
        mnt = Path(d) / "mnt"
        mnt.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", code, str(mnt)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not (mnt / "a").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not mount: {proc.stderr.read() if proc.stderr else ''}")
                time.sleep(0.01)
            return _timed(str(mnt / "a"), reads, False), _timed(str(mnt / "a"), reads, True)
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)], check=False, capture_output=True)
            proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load {' '.join(fh.read().split()[:3])}; µs per open+read+close / open(O_TRUNC)+write+close")
    for _ in range(args.rounds):
        for name, code in (("mfusepy", MFUSEPY), ("pyfuse3", PYFUSE3)):
            if importlib.util.find_spec(name) is None:
                print(f"  {name:8s} not installed")
                continue
            r, w = _run(name, code, args.reads)
            print(f"  {name:8s} read median {statistics.median(r):6.1f} p90 {sorted(r)[int(0.9 * len(r))]:6.1f}   "
                  f"write median {statistics.median(w):6.1f} p90 {sorted(w)[int(0.9 * len(w))]:6.1f}")


if __name__ == "__main__":
    main()
