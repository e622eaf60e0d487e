"""A Parquet folder as a table: :class:`FolderSink`, its data and its offsets ledger committed together.

Layout (the same as before ledgers, partitioned by topic unless told not to)::

    OUT/topic=orders/part-<run>-<i>.parquet
    OUT/topic=orders/_common_metadata                the schema of every file there, merged
    OUT/_kbatch_ledger/00000000000000000001.json     one file per commit, numbered
    OUT/_kbatch_staging/<run>/...                   files of a run not yet committed
    OUT/_dead_letter/topic=orders/part-*.parquet     side folders (``side_folders``), same commits

Each commit writes ``_common_metadata`` anew in the folders it adds Parquet files to: the
schema that reads every file there (:mod:`kbatch.tables._folderschema`); a run whose columns no
reader could merge with the files there is refused. Other names starting with ``_`` are hidden
from Parquet readers (pyarrow's datasets, Spark, Polars' hive scans, DuckDB with hive
partitioning). A ledger file holds the whole :class:`Ledger`
after its commit, the files the commit added and where they were staged.

- A new OUT (and ``--mode overwrite``) is written in a hidden folder beside OUT with its first
  ledger file, then renamed into place (:class:`kbatch.tables._staging.StagedOutput`): all or nothing.
- An append to an existing OUT stages its files in ``OUT/_kbatch_staging/<run>/``; the commit
  point is the exclusive creation of the next ledger file (``link(2)`` fails if it exists: a
  concurrent run that committed first wins, this one raises
  :class:`~kbatch.errors.CommitConflictError`). The staged files are then renamed into place;
  a run killed between the two leaves a ledger naming files still staged, and the next sink
  opened on OUT moves them (roll forward) before it reads anything. Until then readers see
  the table without that commit's rows, never twice.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbatch.errors import CommitConflictError, TableError

from ._folderschema import COMMON_METADATA, folder_schema, read_common_metadata, summarize
from ._hooks import reached
from ._ledger import Ledger
from ._runs import run_name
from ._sink import EndOnError, Sink, TableCommit, by_topic, count_rows
from ._staging import StagedOutput
from ._swap import exchange

__all__ = ["LEDGER_DIR", "STAGING_DIR", "FolderSink", "commits", "drop_staging_dir", "ledger_entry", "ledger_name",
           "link_entry", "read_ledger", "roll_forward", "write_parquet"]

LEDGER_DIR = "_kbatch_ledger"
STAGING_DIR = "_kbatch_staging"
_DIGITS = 20


def commits(out: Path) -> list[int]:
    folder = out / LEDGER_DIR
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.iterdir() if p.suffix == ".json" and p.stem.isdigit())


def ledger_entry(out: Path, n: int) -> dict[str, Any]:
    path = out / LEDGER_DIR / ledger_name(n)
    try:
        d = json.loads(path.read_text())
        Ledger.from_json(json.dumps(d["ledger"]))
        return dict(d)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TableError(f"{path}: unreadable ledger file ({exc})", table=str(out)) from None


def read_ledger(out: str | os.PathLike[str]) -> tuple[Ledger, int]:
    """The ledger of a Parquet folder written by kbatch and its commit number (0: none)."""
    out = Path(out)
    numbers = commits(out)
    if not numbers:
        return Ledger(), 0
    return Ledger.from_json(json.dumps(ledger_entry(out, numbers[-1])["ledger"])), numbers[-1]


def roll_forward(out: Path, entry: dict[str, Any]) -> None:
    """Put in place what ledger commit ``entry`` staged (its ``staging`` folder, then removed):
    a run's new files, moved one by one, or a compaction's (``kbatch compact``) folders, each
    ``compacted`` folder of OUT exchanged whole with its staged copy (:func:`kbatch.tables._swap.exchange`).
    Done already (the process was not killed), it does nothing."""
    src = out / entry["staging"]
    if "compacted" in entry:
        files = entry.get("files", [])
        for top in entry["compacted"]:
            if any((src / rel).exists() for rel in files if rel.startswith(f"{top}/")):  # not swapped yet
                exchange(src / top, out / top)
    else:
        for rel in entry.get("files", []):
            if (src / rel).exists():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(src / rel, out / rel)
    shutil.rmtree(src, ignore_errors=True)


def link_entry(folder: Path, n: int, entry: dict[str, Any], run: str) -> None:
    """Write ledger commit ``n`` (``entry``) into ``folder`` by run ``run``: the commit point,
    ``FileExistsError`` when another run created it first."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / ledger_name(n)
    tmp = folder / f".{final.name}.{run}.tmp"
    with open(tmp, "w") as f:
        json.dump(entry, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, final)  # fails if another run created it first
    finally:
        tmp.unlink(missing_ok=True)


def ledger_name(n: int) -> str:
    """The name of commit ``n``'s ledger file."""
    return f"{n:0{_DIGITS}d}.json"


def write_parquet(sink: Any, folder: str, batches: Iterable[Any], name: str, filesystem: Any = None) -> int:
    """``batches`` as Parquet files ``<name>-<k>-<i>.parquet`` in ``folder`` (of ``filesystem``;
    local without), by ``sink``'s settings: its schema (or a schema per topic, each topic's files
    written apart), codec, file and row group sizes, ``topic=`` folders. Returns how many
    ``write_dataset`` calls it made (``k`` runs from 0)."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    codec = None if sink.compression == "none" else sink.compression
    batches = source = EndOnError(batches)  # an error raised after the writer returned
    partitioning = None
    if sink.partition_by_topic:
        partitioning = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
    if isinstance(sink.schema, Mapping):  # a schema per topic: each topic's files written apart
        groups: Iterable[tuple[Any, Iterable[Any]]] = itertools.groupby(by_topic(batches), key=lambda tb: tb[0])
        parts: Iterable[tuple[Any, Iterable[Any]]] = ((sink.schema_of(t), (b for _, b in g)) for t, g in groups)
    else:
        parts = [(sink.schema, batches)]
    calls = 0
    for schema, group in parts:
        pads.write_dataset(
            pa.RecordBatchReader.from_batches(schema, group),
            folder,
            filesystem=filesystem,
            format="parquet",
            partitioning=partitioning,
            basename_template=f"{name}-{calls}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore",
            file_options=pads.ParquetFileFormat().make_write_options(compression=codec),
            max_rows_per_file=sink.max_rows_per_file,
            max_rows_per_group=sink.row_group_rows,
            min_rows_per_group=min(sink.row_group_rows, 1 << 16),
            max_open_files=4096,
            preserve_order=True,
        )
        calls += 1
    source.check()
    return calls



def drop_staging_dir(out: Path) -> None:
    """Remove ``OUT/_kbatch_staging`` when no run has a folder in it (OUT as it was)."""
    with contextlib.suppress(OSError):  # another run's folder is there
        (out / STAGING_DIR).rmdir()

class FolderSink(Sink):
    """A folder of Parquet files partitioned by topic, with its ledger (see the module's notes).

    Parameters
    ----------
    out : path
        The folder.
    mode : {"errorifexists", "overwrite", "append"}
    compression : str, optional
        Parquet codec (default snappy; "none").
    max_rows_per_file, row_group_rows : int, optional
    partition_by_topic : bool, default True
    format : {"parquet", "orc", "json"}
        What the files are: :meth:`write` writes Parquet; files of any format written into
        :attr:`folder` by another writer (Spark's executors, an ORC writer) are committed
        alike, counted with :meth:`adopt`.
    side_folders : sequence of str
        Hidden folders (``_dead_letter``) of :attr:`folder` whose files another writer puts
        there, committed with the data in the same ledger commit (readers of OUT skip them).
    """

    def __init__(self, out: str | os.PathLike[str], mode: str, *, compression: str | None = None,
                 max_rows_per_file: int | None = None, row_group_rows: int | None = None,
                 partition_by_topic: bool = True, format: str = "parquet",
                 side_folders: Sequence[str] = ()) -> None:
        self.format = format
        self.side_folders = tuple(side_folders)
        for name in self.side_folders:
            if not name.startswith("_") or "/" in name:
                raise ValueError(f"a side folder is one hidden folder name (starting with _), got {name!r}")
        self.out = Path(out)
        self.mode = mode
        self.compression = compression or "snappy"
        self.max_rows_per_file = max_rows_per_file or 0
        self.row_group_rows = row_group_rows or min(1 << 20, self.max_rows_per_file or 1 << 20)
        self.partition_by_topic = partition_by_topic
        self.run = run_name()
        self.incremental = mode == "append" and self.out.is_dir() and any(self.out.iterdir())
        if self.incremental:
            self._recover()
        self._ledger, self._number = read_ledger(self.out) if self.out.is_dir() else (Ledger(), 0)
        self._staged: StagedOutput | None = None
        self._folder: Path | None = None
        self._writes = 0
        self._counts: dict[str, int] = {}
        self._adopted = 0

    def committed(self) -> Ledger:
        return self._ledger

    def last_commits(self) -> list[str]:
        return [f"commit {self._number} of {self.out}"] if self._number else []

    def _recover(self) -> None:
        """Move the files of the last commit still staged (a run killed after its commit point);
        the staging folders of runs that died before theirs are :func:`kbatch.tables._leftovers.recover`'s."""
        numbers = commits(self.out)
        pending: str | None = None
        if numbers:
            last = ledger_entry(self.out, numbers[-1])
            pending = last.get("staging")
            if pending:
                roll_forward(self.out, last)
                self._drop_staging_dir()

    def open(self, schema: Any) -> None:
        self.schema = schema
        if self.incremental:
            self._folder = self.out / STAGING_DIR / self.run
            self._folder.mkdir(parents=True)
        else:
            # an empty OUT in append mode is replaced by one rename too (StagedOutput's append
            # moves file by file, the ledger perhaps before the data)
            try:
                self._staged = StagedOutput(self.out, "errorifexists" if self.mode == "append" else self.mode)
            except FileExistsError:
                if self.mode != "append":
                    raise
                raise self._created_meanwhile() from None
            self._folder = self._staged.__enter__()

    @property
    def folder(self) -> Path:
        """Where this run's files go until the commit (a hidden folder; after :meth:`open`)."""
        assert self._folder is not None, "open() first"
        return self._folder

    def adopt(self, records: int) -> None:
        """Count ``records`` written into :attr:`folder` by another writer; :meth:`commit` commits
        every file found there (names not starting with ``_`` or ``.``)."""
        self._adopted += records

    def write(self, batches: Iterable[Any]) -> None:
        assert self.format == "parquet", f"FolderSink writes parquet itself, not {self.format}"
        write_parquet(self, str(self.folder), count_rows(batches, self._counts),
                      f"part-{self.run.partition('@')[0]}-{self._writes}")
        self._writes += 1

    def commit(self, ledger: Ledger, converted: Ledger) -> list[TableCommit]:
        folder = self.folder
        data = self._data_files()
        files = sorted(data + self._data_files(self.side_folders) + self._schemas(data))
        n = self._number + 1 if self.incremental else 1
        entry = {"commit": n, "ledger": json.loads(ledger.to_json()), "converted": json.loads(converted.to_json()),
                 "files": [f for f, _ in files], "records": sum(self._counts.values()) + self._adopted}
        reached("before-commit")
        if self.incremental:
            entry["staging"] = f"{STAGING_DIR}/{self.run}"
            self._link_entry(self.out / LEDGER_DIR, n, entry)  # the commit point
            reached("mid-commit")
            for rel, _ in files:
                (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(folder / rel, self.out / rel)
            shutil.rmtree(folder, ignore_errors=True)
            self._drop_staging_dir()
        else:
            assert self._staged is not None
            if self.mode == "append" and self.out.is_dir() and any(self.out.iterdir()):
                self.abort()
                raise self._created_meanwhile()
            self._link_entry(folder / LEDGER_DIR, n, entry)
            try:
                self._staged.commit()  # the commit point: one rename
            except FileExistsError:  # another run's first commit came between the check and the rename
                if self.mode != "append":
                    raise
                self.abort()
                raise self._created_meanwhile() from None
        self._folder = None
        self._ledger, self._number = ledger, n
        return [TableCommit(str(self.out), str(n), entry["records"], sum(b for _, b in data), list(converted),
                            kind="commit")]

    def _created_meanwhile(self) -> CommitConflictError:
        """The error of a first run in append mode whose OUT another run created meanwhile."""
        return CommitConflictError(f"{self.out} was created by another run meanwhile: nothing committed; "
                                   "run again to append what is left", table=str(self.out))

    def _schemas(self, data: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Write ``_common_metadata`` into each folder of this run's Parquet ``data`` files
        (:func:`kbatch.tables._folderschema.summarize`); return them as ``(relative path, bytes)``.
        Raises :class:`~kbatch.errors.TableError` (this run aborted) for a column no reader could
        merge with the files there."""
        if self.format != "parquet":
            return []
        try:
            written = summarize([rel for rel, _ in data], str(self.folder), str(self.out),
                                "topic" if self.partition_by_topic else None,
                                lambda folder: self._schema_there(self.out / folder))
        except TableError:
            self.abort()
            raise
        return [(rel, (self.folder / rel).stat().st_size) for rel in written]

    def _schema_there(self, there: Path) -> Any:
        """The schema of the Parquet files already in folder ``there`` of OUT (its
        ``_common_metadata``, else their footers: a folder an earlier version wrote), or None."""

        if not self.incremental or not there.is_dir():
            return None
        summary = there / COMMON_METADATA
        if summary.is_file():
            return read_common_metadata(summary, "topic" if self.partition_by_topic else None)
        files = sorted(p for p in there.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
        return folder_schema(files, str(there))

    def _data_files(self, under: Sequence[str] = ("",)) -> list[tuple[str, int]]:
        """``(path relative to the staging folder, bytes)`` of every file readers will see (in the
        folders ``under`` it: the data by default, or :attr:`side_folders`)."""
        out = []
        for top in under:
            out += self._files_in(top)
        return sorted(out)

    def _files_in(self, top: str) -> list[tuple[str, int]]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.folder / top):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
            for name in filenames:
                if not name.startswith((".", "_")):
                    path = Path(dirpath) / name
                    out.append((path.relative_to(self.folder).as_posix(), path.stat().st_size))
        return sorted(out)

    def _link_entry(self, folder: Path, n: int, entry: dict[str, Any]) -> None:
        try:
            link_entry(folder, n, entry, self.run)
        except FileExistsError:
            self.abort()
            raise CommitConflictError(
                f"{self.out}: another run committed (ledger commit {n}) after this one read the ledger: "
                "nothing of this run committed; run again to append what is left", table=str(self.out)) from None

    def abort(self) -> None:
        if self._staged is not None:
            self._staged.abort()
            self._staged = None
        elif self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._drop_staging_dir()
        self._folder = None

    def _drop_staging_dir(self) -> None:
        drop_staging_dir(self.out)
