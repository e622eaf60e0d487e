"""A local OUT shared by the runs that write to it at the same time: :class:`OutLock`.

Every run holds a shared ``flock`` on OUT's folder for as long as it uses OUT. A first run that
fails removes the OUT it made only when it gets the exclusive lock without waiting, that is when
no other run has OUT open: never a folder another run is writing to. A run that opens OUT checks,
once it holds the lock, that the folder is still the one it locked (a run may have removed it
meanwhile) and otherwise starts again. What must not run twice at once (the SQLite catalog
making its tables in ``catalog.db``) runs under :meth:`OutLock.alone`, an exclusive lock on that
file: runs wait for each other's set-up only, not for each other's whole run.

Where ``fcntl`` is missing (Windows) nothing is locked and a failed first run leaves OUT.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

fcntl: Any
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

__all__ = ["OutLock"]


class OutLock:
    """The folder ``path`` made if missing (``made``: by this run) and held (shared) until
    :meth:`close`, at the end of the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        while True:
            try:
                path.mkdir(parents=True)
                self.made = True
            except FileExistsError:
                self.made = False
            if fcntl is None:
                return
            fd = os.open(path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return
            os.close(fd)  # removed by a failed first run while this one waited: make it again

    @contextlib.contextmanager
    def alone(self, name: str) -> Iterator[None]:
        """Hold an exclusive lock on OUT's file ``name`` (made if missing, empty) meanwhile."""
        if fcntl is None:
            yield
            return
        fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def remove_if_alone(self) -> bool:
        """Remove OUT if this run made it and no other run has it open; whether it did."""
        if not self.made or self._fd is None or fcntl is None:
            return False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another run holds OUT
        shutil.rmtree(self.path, ignore_errors=True)
        self.close()
        return True

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
