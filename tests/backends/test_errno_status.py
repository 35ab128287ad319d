"""The errno tables of cap and governor writes, written out from the SPEC (never from the code).

SPEC §4 (cap): EACCES, EPERM, EROFS -> refused; EINVAL -> blocked with the range; ENODATA on a
powercap constraint -> blocked ("limit locked by firmware"); not supported -> unsupported; any
other failure -> error. SPEC §5 (governor, AMD and cpufreq): EINVAL, EOPNOTSUPP, EBUSY ->
unsupported (a refused level is not a range); EACCES, EPERM, EROFS -> refused. The errno
meanings are the kernel's (``include/uapi/asm-generic/errno-base.h`` and ``errno.h``): ERANGE is
what hwmon returns for an out-of-range value, ENOSYS/EOPNOTSUPP an attribute without a handler,
EAGAIN the cpufreq EPP write racing a governor change (docs/hardware.md).
"""

from __future__ import annotations

import errno

import pytest

from joulectl.backends import base, gov_amd, gov_cpu
from joulectl.models import Status

CAP = [
    (errno.EACCES, Status.REFUSED), (errno.EPERM, Status.REFUSED), (errno.EROFS, Status.REFUSED),
    (errno.EINVAL, Status.BLOCKED), (errno.ENODATA, Status.BLOCKED), (errno.ERANGE, Status.BLOCKED),
    (errno.EOPNOTSUPP, Status.UNSUPPORTED), (errno.ENOTSUP, Status.UNSUPPORTED),
    (errno.EBUSY, Status.UNSUPPORTED), (errno.ENOSYS, Status.UNSUPPORTED),
    (errno.EIO, Status.ERROR), (errno.ENXIO, Status.ERROR), (errno.ENOENT, Status.ERROR),
    (errno.EAGAIN, Status.ERROR), (errno.ENOSPC, Status.ERROR), (0, Status.ERROR),
]
AMD_GOVERNOR = [
    (errno.EACCES, Status.REFUSED), (errno.EPERM, Status.REFUSED), (errno.EROFS, Status.REFUSED),
    (errno.EINVAL, Status.UNSUPPORTED), (errno.EOPNOTSUPP, Status.UNSUPPORTED),
    (errno.ENOTSUP, Status.UNSUPPORTED), (errno.EBUSY, Status.UNSUPPORTED),
    (errno.EAGAIN, Status.ERROR), (errno.EIO, Status.ERROR), (errno.ENODATA, Status.ERROR),
    (errno.ERANGE, Status.ERROR),
]
CPU_GOVERNOR = [
    (errno.EACCES, Status.REFUSED), (errno.EPERM, Status.REFUSED), (errno.EROFS, Status.REFUSED),
    (errno.EINVAL, Status.UNSUPPORTED), (errno.EOPNOTSUPP, Status.UNSUPPORTED),
    (errno.ENOTSUP, Status.UNSUPPORTED), (errno.EBUSY, Status.UNSUPPORTED), (errno.EAGAIN, Status.UNSUPPORTED),
    (errno.EIO, Status.ERROR), (errno.ENODATA, Status.ERROR), (errno.ERANGE, Status.ERROR),
]


@pytest.mark.parametrize(("err", "status"), CAP)
def test_cap_errno(err: int, status: Status) -> None:
    assert base.status_for_errno(err) is status


@pytest.mark.parametrize(("err", "status"), AMD_GOVERNOR)
def test_amd_governor_errno(err: int, status: Status) -> None:
    assert gov_amd.status_for_errno(err) is status


@pytest.mark.parametrize(("err", "status"), CPU_GOVERNOR)
def test_cpu_governor_errno(err: int, status: Status) -> None:
    assert gov_cpu.status_for_errno(err) is status
