"""A Parquet folder on S3 as a table: :class:`RemoteFolderSink`, its data and offsets ledger
committed together, with what atomicity S3 gives.

The layout is a local folder's (:mod:`kbatch.tables._folder`), under ``s3://bucket/prefix``::

    OUT/topic=orders/part-<run>-<i>.parquet
    OUT/topic=orders/_common_metadata                the schema of every file there, merged
    OUT/_kbatch_ledger/00000000000000000001.json     one object per commit, numbered
    OUT/_kbatch_staging/<run>/...                   objects of a run not yet committed
    OUT/_dead_letter/topic=orders/part-*.parquet     side folders (``side_folders``), same commits

S3 has no rename and no atomic multi-object change, but it has one atomic step: a PUT with
``If-None-Match: *`` creates an object only if its key is free (conditional writes, since
2024; :func:`kbatch.tables._remote.create_exclusive`). So, in every mode:

1. the run writes its files under ``OUT/_kbatch_staging/<run>/`` (hidden from Parquet readers);
2. **the commit point**: the next ledger object, ``_kbatch_ledger/<n+1>.json``, created with
   that condition. It names the files and the staging folder. A run that read commit ``n`` and
   lost the race to another run fails there with :class:`~kbatch.errors.CommitConflictError`,
   having changed nothing visible;
3. the staged objects are moved into place (server-side copies, then deletes); with
   ``--mode overwrite`` the data objects of earlier commits are deleted first.

A run killed in step 3 leaves a ledger naming objects still staged: the next sink opened on OUT
moves them (roll forward) before it reads anything, as for a local folder. Until then, and
while step 3 runs, a reader listing OUT sees part of that commit's files (never a file twice:
an object is copied to one key; an overwrite's readers may see the new files only in part, the
old ones gone). A run killed before step 2 leaves only a staging folder, which
the next run deletes once that run is dead (:mod:`kbatch.tables._leftovers`: its process gone on this
host, or its lease expired).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kbatch import storage
from kbatch.errors import CommitConflictError, TableError

from ._folder import LEDGER_DIR, STAGING_DIR, ledger_name, write_parquet
from ._folderschema import COMMON_METADATA, folder_schema, read_common_metadata, summarize
from ._hooks import reached
from ._ledger import Ledger
from ._remote import create_exclusive, is_s3, pyarrow_url
from ._runs import run_name
from ._sink import Sink, TableCommit, count_rows

__all__ = ["RemoteFolderSink"]


def _hidden(rel: str) -> bool:
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


class RemoteFolderSink(Sink):
    """A folder of Parquet files on S3, partitioned by topic, with its ledger (see the module's notes).

    Parameters
    ----------
    out : str
        ``s3://bucket/prefix``.
    mode : {"errorifexists", "overwrite", "append"}
    storage_options : dict, optional
        pyarrow's ``S3FileSystem`` options (endpoint, credentials).
    compression, max_rows_per_file, row_group_rows, partition_by_topic, format
        As :class:`~kbatch.tables.FolderSink`'s: files of any format another writer (Spark's
        executors) puts under :attr:`url` are committed alike, counted with :meth:`adopt`.
    side_folders : sequence of str
        Hidden folders of OUT (``_dead_letter``) whose files, written into the same names under
        :attr:`staging_path`, are committed with the data in the same ledger commit (and, with
        ``--mode overwrite``, replace the earlier commits' files there).
    """

    def __init__(self, out: str, mode: str, *, storage_options: Mapping[str, Any] | None = None,
                 compression: str | None = None, max_rows_per_file: int | None = None,
                 row_group_rows: int | None = None, partition_by_topic: bool = True, format: str = "parquet",
                 side_folders: Sequence[str] = ()) -> None:
        import pyarrow.fs as pafs

        if not is_s3(out):
            raise ValueError(f"{out}: a remote Parquet folder with a ledger is on S3 (s3://)")
        self.format = format
        self.url = out.rstrip("/")
        self.mode = mode
        self.options = dict(storage_options or {})
        loc = storage.locate(pyarrow_url(self.url), storage_options=self.options)
        self.fs, self.root = loc.fs, loc.path
        self.compression = compression or "snappy"
        self.max_rows_per_file = max_rows_per_file or 0
        self.row_group_rows = row_group_rows or min(1 << 20, self.max_rows_per_file or 1 << 20)
        self.partition_by_topic = partition_by_topic
        self.side_folders = tuple(side_folders)
        for name in self.side_folders:
            if not name.startswith("_") or "/" in name:
                raise ValueError(f"a side folder is one hidden folder name (starting with _), got {name!r}")
        self.run = run_name()
        self._staging = f"{STAGING_DIR}/{self.run}"
        self._file = pafs.FileType.File
        if mode == "errorifexists" and any(not rel.startswith(f"{STAGING_DIR}/") for rel, _ in self._files("")):
            raise FileExistsError(f"{self.url} exists and holds files: use --mode overwrite or append")
        self._recover()
        self._ledger, self._number = self._read_ledger()
        self._open = False
        self._writes = 0
        self._counts: dict[str, int] = {}
        self._adopted = 0

    # -- the bucket

    def _files(self, under: str) -> list[tuple[str, int]]:
        """``(path relative to OUT, size)`` of every object under ``OUT/under`` (one listing)."""
        import pyarrow.fs as pafs

        base = posixpath.join(self.root, under).rstrip("/")
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except Exception as exc:  # noqa: BLE001 - pyarrow's OSError: one line naming OUT
            raise TableError(f"cannot list {self.url}/{under}: {exc}", table=self.url) from None
        return sorted((i.path[len(self.root) + 1:], int(i.size or 0)) for i in infos if i.type == self._file)

    def _read(self, rel: str) -> dict[str, Any]:
        loc = storage.Location(self.fs, f"{self.root}/{rel}", f"{self.url}/{rel}")
        raw = storage.read_small(loc)
        try:
            if raw is None:
                raise ValueError("gone")
            d = dict(json.loads(raw))
            Ledger.from_json(json.dumps(d["ledger"]))
            return d
        except (ValueError, KeyError, TypeError) as exc:
            raise TableError(f"{loc.url}: unreadable ledger object ({exc})", table=self.url) from None

    def _last_entry(self) -> tuple[int, dict[str, Any] | None]:
        numbers = [int(rel.rsplit("/", 1)[-1][:-5]) for rel, _ in self._files(LEDGER_DIR)
                   if rel.endswith(".json") and rel.rsplit("/", 1)[-1][:-5].isdigit()]
        if not numbers:
            return 0, None
        n = max(numbers)
        return n, self._read(f"{LEDGER_DIR}/{ledger_name(n)}")

    def _read_ledger(self) -> tuple[Ledger, int]:
        n, entry = self._last_entry()
        return (Ledger.from_json(json.dumps(entry["ledger"])), n) if entry is not None else (Ledger(), 0)

    def _move_in(self, staging: str, files: Iterable[str], replaces: bool, removed: Iterable[str] = ()) -> None:
        """Step 3 of a commit (or its roll forward): the staged objects moved into place, after
        deleting the visible data objects not in ``files`` when the commit ``replaces`` them, and
        the objects it ``removed`` (a compaction's: the files it rewrote)."""
        staged = {rel[len(staging) + 1:] for rel, _ in self._files(staging)}
        if not staged:
            return  # done already (by this run, or a run that rolled it forward): the deletes come first
        wanted = set(files)
        if replaces:
            for rel, _ in self._files(""):
                if self._visible(rel) and rel not in wanted:
                    self.fs.delete_file(f"{self.root}/{rel}")
        for rel in removed:
            with contextlib.suppress(FileNotFoundError):  # deleted already (a roll forward)
                self.fs.delete_file(f"{self.root}/{rel}")
        reached("mid-commit")
        for rel in sorted(wanted & staged):
            src, dest = f"{self.root}/{staging}/{rel}", f"{self.root}/{rel}"
            try:
                self.fs.copy_file(src, dest)
                self.fs.delete_file(src)
            except FileNotFoundError:  # another run rolling the same commit forward moved it
                pass
        self._drop(staging)

    def _drop(self, under: str) -> None:
        with contextlib.suppress(OSError):  # gone already
            self.fs.delete_dir(f"{self.root}/{under}")

    def _recover(self) -> None:
        """Move the objects of the last commit still staged (a run killed after its commit point);
        the staging folders of runs that died before theirs are :func:`kbatch.tables._leftovers.recover`'s."""
        _, last = self._last_entry()
        if last is not None and last.get("staging"):
            self._move_in(str(last["staging"]), last.get("files", []), bool(last.get("replaces")),
                          last.get("removed", []))

    def _visible(self, rel: str) -> bool:
        """Whether ``rel`` (relative to OUT or to a staging folder) is a data file of a commit: not
        hidden, or in one of :attr:`side_folders`."""
        top, _, rest = rel.partition("/")
        return not _hidden(rel) or (top in self.side_folders and bool(rest) and not _hidden(rest))

    def data_files(self) -> list[tuple[str, int]]:
        """``(path relative to OUT, size)`` of every data file a reader of OUT sees (one listing)."""
        return [(rel, size) for rel, size in self._files("") if not _hidden(rel)]

    def commit_rewrite(self, files: Sequence[str], removed: Sequence[str], compacted: Sequence[str]) -> str:
        """Commit a compaction: ``files`` (staged under :attr:`staging_path`, relative to it) take the
        place of ``removed`` (data files of OUT) in ``compacted`` (``topic=`` folders), in a ledger
        commit holding the same ledger (a compaction changes no record), made as :meth:`commit`
        makes one; returns its number. The removed objects are deleted, then the new ones moved in
        (a run killed between is rolled forward by the next sink opened on OUT)."""
        n = self._number + 1
        entry = {"commit": n, "ledger": json.loads(self._ledger.to_json()), "converted": json.loads(Ledger().to_json()),
                 "files": list(files), "records": 0, "staging": self._staging, "replaces": False,
                 "compacted": list(compacted), "removed": list(removed)}
        self._commit_point(entry, "while this one compacted: nothing compacted; run again")
        self._move_in(self._staging, entry["files"], False, entry["removed"])
        self._open = False
        self._number = n
        return str(n)

    def holds_files(self) -> bool:
        """Whether OUT holds data files (readers see them), with a ledger or not."""
        return any(not _hidden(rel) for rel, _ in self._files(""))

    # -- the Sink

    def committed(self) -> Ledger:
        return self._ledger

    def last_commits(self) -> list[str]:
        return [f"commit {self._number} of {self.url}"] if self._number else []

    def open(self, schema: Any) -> None:
        self.schema = schema
        self._open = True

    @property
    def folder(self) -> str:
        """The URL of this run's staging folder, where another writer (Spark) puts files."""
        return f"{self.url}/{self._staging}"

    @property
    def staging_path(self) -> str:
        """This run's staging folder as a path of :attr:`fs` (where side folders' files are written)."""
        return f"{self.root}/{self._staging}"

    def adopt(self, records: int) -> None:
        self._adopted += records

    def write(self, batches: Iterable[Any]) -> None:
        assert self.format == "parquet", f"RemoteFolderSink writes parquet itself, not {self.format}"
        write_parquet(self, f"{self.root}/{self._staging}", count_rows(batches, self._counts),
                      f"part-{self.run.partition('@')[0]}-{self._writes}", filesystem=self.fs)
        self._writes += 1

    def commit(self, ledger: Ledger, converted: Ledger) -> list[TableCommit]:
        files = [(rel[len(self._staging) + 1:], size) for rel, size in self._files(self._staging)]
        files = [(rel, size) for rel, size in files if self._visible(rel)]  # not Spark's _SUCCESS, .crc
        files += [(rel, 0) for rel in self._schemas([rel for rel, _ in files if not _hidden(rel)])]
        replaces = self.mode == "overwrite"
        n = self._number + 1
        entry = {"commit": n, "ledger": json.loads(ledger.to_json()), "converted": json.loads(converted.to_json()),
                 "files": [f for f, _ in files], "records": sum(self._counts.values()) + self._adopted,
                 "staging": self._staging, "replaces": replaces}
        self._commit_point(entry, "after this one read the ledger: nothing of this run committed; run again to "
                                  "append what is left")
        self._move_in(self._staging, entry["files"], replaces)
        self._open = False
        self._ledger, self._number = ledger, n
        data = sum(b for f, b in files if not _hidden(f))  # the side folders' files not counted, as locally
        return [TableCommit(self.url, str(n), entry["records"], data, list(converted),
                            kind="commit")]

    def _commit_point(self, entry: dict[str, Any], lost: str) -> None:
        """Create ledger commit ``entry["commit"]`` if its name is free: the commit point of
        :meth:`commit` and :meth:`commit_rewrite`. This run's staging is dropped when it fails;
        a run that lost the race to another commit raises :class:`CommitConflictError` saying
        ``lost`` (what happened to this one)."""
        n = entry["commit"]
        reached("before-commit")
        try:
            create_exclusive(f"{self.url}/{LEDGER_DIR}/{ledger_name(n)}", json.dumps(entry).encode(), self.options)
        except CommitConflictError:
            self.abort()
            raise CommitConflictError(f"{self.url}: another run committed (ledger commit {n}) {lost}",
                                      table=self.url) from None
        except Exception:
            self.abort()
            raise

    def _schemas(self, data: list[str]) -> list[str]:
        """``_common_metadata`` written into each staged folder of Parquet ``data`` files, as a
        local folder's (:func:`kbatch.tables._folderschema.summarize`); this run aborted on a
        column no reader could merge with the files there."""
        if self.format != "parquet":
            return []
        partition = "topic" if self.partition_by_topic else None
        try:
            return summarize(data, self.staging_path, self.url, partition,
                             lambda folder: self._schema_there(folder, partition), self.fs)
        except TableError:
            self.abort()
            raise

    def _schema_there(self, folder: str, partition: str | None) -> Any:
        """The schema of the Parquet files in ``OUT/folder`` that this commit keeps (its
        ``_common_metadata``, else their footers), or None."""
        if self.mode == "overwrite":
            return None
        there = [rel for rel, _ in self._files(folder) if posixpath.dirname(rel) == folder]
        if posixpath.join(folder, COMMON_METADATA) in there:
            return read_common_metadata(f"{self.root}/{folder}/{COMMON_METADATA}", partition, self.fs)
        return folder_schema([f"{self.root}/{rel}" for rel in there if not _hidden(rel)], f"{self.url}/{folder}",
                             filesystem=self.fs)

    def abort(self) -> None:
        if self._open:
            self._drop(self._staging)
        self._open = False
