"""Output that appears whole or not at all: write into a temporary folder, move it in on success.

``kbatch convert`` writes every file into a hidden folder beside the target
(``.<name>.kbatch-<run>.tmp``, on the same file system, so moves are renames; ``<run>`` names
the process and host, :func:`kbatch.tables._runs.run_name`) and
only on success puts it in place:

    errorifexists   the target must not exist (or be an empty folder); rename into place
    overwrite       the old target is renamed aside, the new one into place, the old removed
    append          each new file is moved into the existing target (names are unique per
                    run, so nothing there is replaced but Spark's ``_SUCCESS`` marker)

On failure the temporary folder is deleted: a failed run leaves the target as it was. A run
killed before it could delete it leaves the folder to the next run on the target, which
removes it (:func:`kbatch.tables._leftovers.recover`).

>>> import pathlib, tempfile
>>> out = pathlib.Path(tempfile.mkdtemp()) / "out"
>>> with StagedOutput(out, "errorifexists") as tmp:
...     _ = (tmp / "a.txt").write_text("x")
>>> sorted(p.name for p in out.iterdir())
['a.txt']
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import TracebackType

from ._runs import run_name

__all__ = ["MODES", "StagedOutput", "check_target", "has_data_files"]

MODES = ("errorifexists", "overwrite", "append")


def has_data_files(folder: Path) -> bool:
    """Whether ``folder`` holds a file that readers see (not ``_*`` or ``.*``, at any depth)."""
    for _dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
        if any(not f.startswith((".", "_")) for f in filenames):
            return True
    return False


def check_target(out: Path, mode: str) -> None:
    """Raise ``FileExistsError``/``ValueError`` when ``mode`` cannot write ``out`` (before any work)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if mode == "errorifexists" and out.is_dir() and any(out.iterdir()):
        raise FileExistsError(f"{out} already exists and is not empty (use --mode overwrite or --mode append)")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"cannot write in {parent}")


class StagedOutput:
    """A context manager: yields the temporary folder, commits on a clean exit, deletes on error."""

    def __init__(self, out: str | os.PathLike[str], mode: str) -> None:
        self.out = Path(out)
        self.mode = mode
        check_target(self.out, mode)
        self.run = run_name()
        self.tmp = self.out.parent / f".{self.out.name}.kbatch-{self.run}.tmp"

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        return self.tmp

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if tp is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"<StagedOutput {self.out} ({self.mode}) via {self.tmp.name}>"

    def abort(self) -> None:
        """Delete the temporary folder and everything in it."""
        shutil.rmtree(self.tmp, ignore_errors=True)

    def discard(self) -> None:
        """Drop what was written (e.g. nothing to write); the target stays as it was."""
        self.abort()

    def commit(self) -> None:
        """Put the temporary folder's content in place (see the module's table)."""
        if not self.tmp.exists():
            return
        check_target(self.out, self.mode)  # nobody wrote there meanwhile
        if self.mode == "append" and self.out.is_dir():
            for dirpath, _dirnames, filenames in os.walk(self.tmp):
                rel = Path(dirpath).relative_to(self.tmp)
                (self.out / rel).mkdir(parents=True, exist_ok=True)
                for name in filenames:
                    dest = self.out / rel / name
                    if dest.exists() and not name.startswith(("_", ".")):
                        raise FileExistsError(f"{dest} exists: not replaced (the new files stay in {self.tmp})")
                    os.replace(Path(dirpath) / name, dest)
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.out.exists():  # overwrite, or an empty folder
            old = self.out.parent / f".{self.out.name}.kbatch-{self.run}.old"
            os.rename(self.out, old)
            os.rename(self.tmp, self.out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.tmp, self.out)
