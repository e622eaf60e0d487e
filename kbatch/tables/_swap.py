"""Two folders exchanged in one step: :func:`exchange`, how ``kbatch compact`` puts a partition
folder of a Parquet table in place of the old one.

On Linux ``renameat2(RENAME_EXCHANGE)`` swaps the two names atomically: a reader listing the
folder sees the old files or the new ones, never both, never neither. Where the system has no
such call (macOS, an old kernel, a file system that refuses it) the folders are swapped by three
renames: for a moment the old folder is gone (a reader then sees neither), never both, and a
process killed in between leaves the new folder staged, which :func:`exchange` called again
puts in place.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

__all__ = ["exchange"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2(a: Path, b: Path) -> bool:
    """Exchange ``a`` and ``b`` with Linux's ``renameat2``; False when the system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def exchange(a: Path, b: Path) -> None:
    """Give ``b`` what ``a`` holds and ``a`` what ``b`` held (two folders of one file system).
    When ``b`` is gone (a swap by renames killed midway) ``a`` is renamed to ``b``."""
    if not b.exists():
        os.rename(a, b)
        return
    if _renameat2(a, b):
        return
    aside = a.with_name(f"{a.name}.old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)
