"""Delta tables through delta-rs (``deltalake``, no JVM): :class:`DeltaSink`, one table per topic at ``OUT/<topic>``.

- The data files are Parquet written by pyarrow into the table's folder (``part-<run>-*.parquet``,
  Hive partition folders); nothing reads them until a commit's ``add`` actions name them.
- ``--partition-by`` takes columns (``partition``) and, since Delta partitions by columns only,
  time transforms as derived columns: ``day(timestamp)`` adds ``timestamp_day`` (a date, the
  default), ``hour(timestamp)`` ``timestamp_hour`` (``YYYY-MM-DD-HH``), ``month`` and ``year``
  likewise; ``bucket`` and ``truncate`` are Iceberg's only.
- Each table's commit is one Delta commit carrying the table's :class:`Ledger` in its commit info
  (``kbatch.ledger``) and, per source partition, an application transaction
  (``txn``: app id ``kbatch:<topic>-<partition>``, version = the next offset to convert). Two
  runs committing the same partitions conflict on those app ids: the second fails
  (:class:`~kbatch.errors.CommitConflictError`), never a duplicate.
- The ledger read back (:func:`read_ledger`) takes each partition's end from its application
  transaction, which checkpoints keep: after ``create_checkpoint()`` and ``cleanup_metadata()``
  have deleted the commit infos, an append still goes on exactly where the table ends. An
  overwrite sets the app transactions of the partitions it drops to -1 (none held).
- ``OUT`` may be ``s3://bucket/prefix``: the files are written through pyarrow's S3 filesystem,
  the commits through deltalake's (``--storage-option`` translated by
  :func:`kbatch.tables._remote.delta_options`); S3's conditional writes make a commit exclusive.
- A run killed before its commit leaves Parquet files no commit names (the table is unchanged);
  their names carry the run (``part-<pid>-<token>.<k>@<host>_*``, Spark's files renamed so
  when they are taken in), and the next run on OUT
  deletes them once that run is dead (:mod:`kbatch.tables._leftovers`); ``kbatch clean`` deletes any
  other file no version names.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbatch import storage
from kbatch.errors import CommitConflictError, TableError

from ._folder import STAGING_DIR
from ._hooks import reached
from ._ledger import LEDGER_KEY, Key, Ledger, OffsetRange
from ._partition import DEFAULT, Transform, parse
from ._remote import delta_options, pyarrow_url
from ._runs import run_name
from ._sink import (
    EndOnError,
    Sink,
    TableCommit,
    added_columns,
    by_topic,
    count_rows,
    nullable,
    older_rows_note,
    staged_files,
)
from ._upsert import Keyed, keyed_of, latest_per_key, reduce_changes

__all__ = ["DeltaSink", "app_id", "read_ledger", "type_change"]

_TIME_FORMATS = {"hour": "%Y-%m-%d-%H", "month": "%Y-%m"}


def app_id(r: OffsetRange) -> str:
    """The Delta application transaction id of a source partition (its version: the range's end)."""
    return f"kbatch:{r.topic}-{r.partition}" + (f"@{r.root}" if r.root else "")


def read_ledger(table: Any, keys: Iterable[Key] = ()) -> tuple[Ledger, int | None]:
    """The ledger ``table`` (a ``deltalake.DeltaTable``) holds, and the version that committed it.

    The newest commit info holding ``kbatch.ledger`` gives the ranges; each partition's app
    transaction gives its ``end``, for the partitions of that ledger and those of ``keys``
    (``(topic, partition, root)``: the partitions a run converts). Checkpoints keep app
    transactions, and log cleanup deletes commit infos: a partition known only from its app
    transaction starts at its end (where it began is not kept), and the version is the table's.
    """
    ledger, version = Ledger(), None
    for info in table.history():
        text = info.get(LEDGER_KEY)
        if text:
            ledger, version = Ledger.from_json(text), int(info["version"])
            break
    ranges = []
    for key in dict.fromkeys([*(r.key for r in ledger), *keys]):
        held = ledger.get(*key)
        end = table.transaction_version(app_id(OffsetRange(key[0], key[1], 0, 0, key[2])))
        if end is None or end < 0:  # none (a table of an older kbatch: its commit info), or dropped
            if held is not None and end is None:
                ranges.append(held)
            continue
        ranges.append(OffsetRange(key[0], key[1], held.start if held else end, end, key[2],
                                  held.cluster_id if held else None, held.missing if held else ()))
    if version is None and ranges:
        version = table.version()
    return Ledger(ranges), version


def _files(table: Any) -> dict[str, tuple[int, int]]:
    """The data files of ``table`` (a ``deltalake.DeltaTable``): path -> (bytes, rows)."""
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True)).select(["path", "size_bytes", "num_records"]).to_pylist()
    return {a["path"]: (int(a["size_bytes"] or 0), int(a["num_records"] or 0)) for a in adds}


def _derive(batch: Any, partition: Sequence[Transform]) -> Any:
    """``batch`` with the derived partition columns appended."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for t in partition:
        if t.name == "identity":
            continue
        col = batch.column(batch.schema.get_field_index(t.column))
        if pa.types.is_timestamp(col.type) and col.type.tz is not None:
            # the same instants as UTC wall time: Arrow then looks up no time zone per value (a
            # tenth of a Delta run's CPU went to that for the default day(timestamp))
            col = col.cast(pa.timestamp(col.type.unit))
        if t.name == "day":
            value = pc.cast(col, pa.date32())
        elif t.name == "year":
            value = pc.year(col)
        else:
            value = pc.strftime(col, format=_TIME_FORMATS[t.name])
        batch = batch.append_column(t.field_name, value)
    return batch


def _fit(batch: Any, schema: Any) -> Any:
    """``batch`` with ``schema``'s fields (the same types, nullable where the batch's are not)."""
    return batch if batch.schema.equals(schema) else batch.cast(schema)


def _same_but_size(a: Any, b: Any) -> bool:
    """Types that differ only in offsets' width (Delta gives back large_binary for binary, ...)."""
    import pyarrow as pa

    def norm(t: Any) -> Any:
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_binary_view(t):
            return pa.binary()
        if pa.types.is_large_list(t) or pa.types.is_list(t) or pa.types.is_list_view(t):
            return pa.list_(norm(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, norm(f.type)) for f in t])
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz="UTC" if t.tz else None)
        return t

    return bool(norm(a).equals(norm(b)))


def type_change(old: Any, new: Any, path: str) -> str | None:
    """Where ``new`` (this run's type of the column at ``path``) changes a field's type of ``old``
    (the table's), as ``"path: old -> new"``; None when it only adds fields (to structs, at any
    depth) or differs in offsets' width. Delta's schema merge would take some such changes without
    rewriting the table's files, leaving files whose types differ from the table's."""
    import pyarrow as pa

    if old.equals(new) or _same_but_size(old, new):
        return None
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        for f in new:
            i = old.get_field_index(f.name)
            if i >= 0:
                found = type_change(old.field(i).type, f.type, f"{path}.{f.name}")
                if found:
                    return found
        return None
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_list_view)
    if any(t(old) for t in lists) and any(t(new) for t in lists):
        return type_change(old.value_type, new.value_type, f"{path}[]")
    if pa.types.is_map(old) and pa.types.is_map(new):
        return type_change(old.item_type, new.item_type, f"{path}{{}}")
    return f"{path}: {old} -> {new}"


class DeltaSink(Sink):
    """Delta tables, one per topic at ``OUT/<topic>`` (see the module's notes).

    Parameters
    ----------
    out : path or str
        A folder, or ``s3://bucket/prefix``.
    mode : {"errorifexists", "overwrite", "append"}
    topics : sequence of str
        The topics the run converts (their tables' ledgers are read at once).
    partitions : sequence of (topic, partition, root)
        The source partitions the run converts, whose app transactions are read with the ledger.
    storage_options : dict, optional
        pyarrow's filesystem options for a remote OUT (endpoint, credentials).
    partition_by : sequence of str, optional
        ``--partition-by`` items (default ``day(timestamp)``).
    properties : dict, optional
        ``kbatch.version`` and ``kbatch.source-root``: in each commit's info and a new table's
        description (Delta's table configuration takes only known keys).
    columns : sequence of str, optional
        The columns the run writes, to check ``partition_by`` against before any work.
    compression : str, optional
        The Parquet codec (default snappy; "none").
    upsert : bool, Keyed or dict of Keyed, default False
        One row per key, through a Delta merge: the run's latest record per key replaces the
        table's row, a tombstone deletes it (the run's records are held in memory). A
        :class:`~kbatch.tables.Keyed` with an ``op`` column: the rows are changes by a primary
        key (``--cdc``; a dict: each topic's, :mod:`kbatch.tables._upsert`), a truncate deleting the table's rows in
        the same commit.
    table_suffix : str, default ""
        Each topic's table is at ``OUT/<topic><table_suffix>`` (``"__dead_letter"``: the
        tables of the records whose values did not decode).
    """

    format = "delta"

    def __init__(self, out: str | os.PathLike[str], mode: str, *, topics: Sequence[str] = (),
                 partition_by: Sequence[str] | None = None, properties: dict[str, str] | None = None,
                 columns: Sequence[str] | None = None, compression: str | None = None,
                 upsert: bool | Keyed | Mapping[str, Keyed] = False, table_suffix: str = "",
                 partitions: Sequence[Key] = (),
                 storage_options: dict[str, Any] | None = None) -> None:
        from deltalake import DeltaTable

        self.out = Path(out)
        self.table_suffix = table_suffix
        self.url = os.fspath(out).rstrip("/")
        self.remote = storage.is_remote(self.url)
        self.storage = delta_options(self.url, storage_options or {}) if self.remote else None
        loc = storage.locate(pyarrow_url(self.url), storage_options=storage_options or None) if self.remote else None
        self.fs: Any = loc.fs if loc is not None else None
        self.root = loc.path if loc is not None else str(self.out)
        self._keys = list(partitions)
        self.mode = mode
        self.partition = parse(partition_by or DEFAULT, columns)
        for t in self.partition:
            if t.name in ("bucket", "truncate"):
                raise ValueError(f"--partition-by {t.name}({t.width}, {t.column}): Delta partitions by columns; "
                                 "use a column, or day()/hour()/month()/year() of the timestamp")
        self.properties = dict(properties or {})
        self.upsert = bool(upsert)
        self._keyed = upsert
        self._pending: dict[str, list[Any]] = {}
        self.compression = None if compression == "none" else (compression or "snappy")
        self.run = run_name()  # in the data files' names: the next run knows a dead run's (kbatch.tables._leftovers)
        self._tables: dict[str, Any] = {}
        self._held: dict[str, tuple[Ledger, int | None]] = {}
        for topic in topics:
            uri = self.uri(topic)
            if DeltaTable.is_deltatable(uri, storage_options=self.storage):
                table = DeltaTable(uri, storage_options=self.storage)
                self._tables[topic] = table
                self._held[topic] = read_ledger(table, self._topic_keys(topic))
        self._actions: dict[str, list[Any]] = {}
        self._counts: dict[str, int] = {}
        self._notes: dict[str, list[str]] = {}  # by topic, for the commit's report
        self._written: list[str] = []  # files of the filesystem (self.fs; local paths without)
        self._writes = 0
        self._staging: Path | None = None

    def uri(self, topic: str) -> str:
        """The table of ``topic``: ``OUT/<topic><table_suffix>``."""
        name = f"{topic}{self.table_suffix}"
        return f"{self.url}/{name}" if self.remote else str(self.out / name)

    def _topic_keys(self, topic: str) -> list[Key]:
        return [k for k in self._keys if k[0] == topic]

    def _delete(self, path: str) -> None:
        if self.fs is None:
            Path(path).unlink(missing_ok=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(path)

    def committed(self) -> Ledger:
        return Ledger.union(ledger for ledger, _ in self._held.values())

    def last_commits(self) -> list[str]:
        return [f"version {v} of {self.uri(t)}" for t, (_, v) in sorted(self._held.items()) if v is not None]

    def open(self, schema: Any) -> None:
        import pyarrow as pa

        def derived(s: Any) -> Any:  # every field nullable: a later run's reader may add fields
            return nullable(_derive(pa.RecordBatch.from_pylist([], schema=s), self.partition).schema)

        self.schema = {t: derived(s) for t, s in schema.items()} if isinstance(schema, Mapping) else derived(schema)
        self.partition_columns = [t.field_name for t in self.partition]

    def write(self, batches: Iterable[Any]) -> None:
        import itertools

        import pyarrow as pa
        import pyarrow.dataset as pads

        if self.upsert:  # merged at the commit
            for topic, batch in by_topic(count_rows(batches, self._counts)):
                if keyed_of(self._keyed, topic).op is None:
                    batch = _fit(_derive(batch, self.partition), self.schema_of(topic))
                self._pending.setdefault(topic, []).append(batch)  # changes: fitted once reduced
            return
        source = EndOnError(batches)  # an error raised after the writer returned (see EndOnError)
        for topic, group in itertools.groupby(by_topic(count_rows(source, self._counts)), key=lambda tb: tb[0]):
            folder = f"{self.root}/{topic}{self.table_suffix}"
            actions = self._actions.setdefault(topic, [])

            def visit(written: Any, folder: str = folder, actions: list[Any] = actions) -> None:
                from deltalake.transaction import AddAction

                path = Path(written.path).as_posix() if self.fs is None else written.path
                self._written.append(path)
                rel = path[len(folder) + 1:]
                values = dict(part.split("=", 1) for part in rel.split("/")[:-1])
                stats = json.dumps({"numRecords": written.metadata.num_rows})
                size = written.size or (Path(path).stat().st_size if self.fs is None else 0)
                actions.append(AddAction(rel, size, values, int(time.time() * 1000), True, stats))

            partitioning = None
            if self.partition_columns:
                partitioning = pads.partitioning(
                    pa.schema([self.schema_of(topic).field(c) for c in self.partition_columns]), flavor="hive")
            schema = self.schema_of(topic)
            reader = pa.RecordBatchReader.from_batches(schema, (_fit(_derive(b, self.partition), schema)
                                                                for _, b in group))
            pads.write_dataset(reader, folder, filesystem=self.fs, format="parquet", partitioning=partitioning,
                               basename_template=f"part-{self.run}_{self._writes}-{{i}}.parquet",
                               existing_data_behavior="overwrite_or_ignore", file_visitor=visit,
                               file_options=pads.ParquetFileFormat().make_write_options(compression=self.compression),
                               max_rows_per_group=1 << 20, min_rows_per_group=1 << 16)
            self._writes += 1
        source.check()

    def staging(self) -> Path:
        if self.remote:
            raise NotImplementedError("files staged by another writer need a local OUT")
        if self._staging is None:
            self._staging = self.out / STAGING_DIR / self.run
            self._staging.mkdir(parents=True)
        return self._staging

    def file_partitions(self) -> list[tuple[str, Transform]]:
        return [(t.field_name, t) for t in self.partition]

    def _take_staged(self) -> None:
        """Move the files another writer staged into their tables' folders, as ``add`` actions."""
        import shutil
        from urllib.parse import unquote

        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction

        if self._staging is None:
            return
        for topic, dirs, path in staged_files(self._staging):
            name = f"part-{self.run}_s-{path.name}"  # the run in the name, as the arrow engine's files
            rel = f"{dirs}/{name}" if dirs else name
            dest = Path(self.uri(topic)) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
            self._written.append(dest.as_posix())
            values = {k: unquote(v) for k, v in (part.split("=", 1) for part in dirs.split("/") if part)}
            stats = json.dumps({"numRecords": pq.read_metadata(dest).num_rows})
            self._actions.setdefault(topic, []).append(
                AddAction(rel, dest.stat().st_size, values, int(time.time() * 1000), True, stats))
        shutil.rmtree(self._staging, ignore_errors=True)
        self._staging = None
        with contextlib.suppress(OSError):
            (self.out / STAGING_DIR).rmdir()

    def commit(self, ledger: Ledger, converted: Ledger) -> list[TableCommit]:
        from deltalake import CommitProperties, DeltaTable, Schema, Transaction
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.transaction import create_table_with_add_actions

        self._take_staged()
        reached("before-commit")
        out = []
        for topic in sorted(set(converted.topics()) | set(self._actions) | set(self._pending)):
            mine = ledger.for_topic(topic)
            # an overwrite drops the partitions it does not convert: their app transactions say so
            dropped = [r for r in self._held.get(topic, (Ledger(), None))[0] if mine.get(*r.key) is None] \
                if self.mode == "overwrite" else []
            props = CommitProperties(
                custom_metadata={LEDGER_KEY: mine.to_json(), **self.properties},
                app_transactions=[Transaction(app_id(r), r.end) for r in mine] +
                                 [Transaction(app_id(r), -1) for r in dropped],
                max_commit_retries=0,
            )
            actions = self._actions.pop(topic, [])
            uri = self.uri(topic)
            try:
                if self.upsert:
                    before = _files(self._tables[topic]) if topic in self._tables else {}
                    changed = self._merge(topic, props)
                    table = DeltaTable(uri, storage_options=self.storage)
                    self._tables[topic] = table
                    self._held[topic] = (mine, table.version())
                    after = _files(table)
                    written = sum(size for path, (size, _) in after.items() if path not in before)
                    upsert = {**changed, "rows": sum(rows for _, rows in after.values())}
                    out.append(TableCommit(uri, str(table.version()), self._counts.get(topic, 0), written,
                                           list(converted.for_topic(topic)), kind="version", upsert=upsert,
                                           notes=self._notes.pop(topic, [])))
                    continue
                if topic in self._tables:
                    self._evolve(topic)
                    self._tables[topic].create_write_transaction(
                        actions, "overwrite" if self.mode == "overwrite" else "append", self.schema_of(topic),
                        self.partition_columns or None, commit_properties=props)
                else:
                    create_table_with_add_actions(uri, Schema.from_arrow(self.schema_of(topic)), actions, mode="error",
                                                  partition_by=self.partition_columns or None,
                                                  description=self._description(), storage_options=self.storage,
                                                  commit_properties=props)
            except (CommitFailedError, DeltaError) as exc:
                self.abort()
                if not isinstance(exc, CommitFailedError) and "already exists" not in str(exc):
                    raise TableError(f"table {uri}: {exc}", table=uri) from None
                raise self._conflict(uri) from None  # a concurrent commit, or a table made after this run looked
            table = DeltaTable(uri, storage_options=self.storage)
            self._tables[topic] = table
            self._held[topic] = (mine, table.version())
            out.append(TableCommit(uri, str(table.version()), sum(json.loads(a.stats)["numRecords"] for a in actions),
                                   sum(a.size for a in actions), list(converted.for_topic(topic)), kind="version",
                                   notes=self._notes.pop(topic, [])))
            name = topic + self.table_suffix
            folder = f"{Path(self.root, name).as_posix() if self.fs is None else f'{self.root}/{name}'}/"
            self._written = [p for p in self._written if not p.startswith(folder)]
        return out

    def _evolve(self, topic: str) -> None:
        """Add the columns this run writes that the table lacks, and the fields a struct column
        gained (a typed value whose reader schema added a field), in a commit of their own before
        the data's; a column whose type changed otherwise stops the run. The table is read again
        after it, so the data's commit is checked against it: a ledger that moved meanwhile
        (another run) is a CommitConflictError."""
        import pyarrow as pa
        from deltalake import DeltaTable, Field, write_deltalake
        from deltalake.exceptions import DeltaError

        table = self._tables[topic]
        theirs = pa.schema(table.schema().to_arrow())  # arro3's, through the Arrow C interface
        uri = self.uri(topic)
        schema = self.schema_of(topic)
        changed = []
        for f in schema:
            i = theirs.get_field_index(f.name)
            if i >= 0 and not theirs.field(i).type.equals(f.type) and not _same_but_size(theirs.field(i).type, f.type):
                if not (pa.types.is_struct(f.type) and pa.types.is_struct(theirs.field(i).type)):
                    raise TableError(f"table {uri}: column {f.name} is {theirs.field(i).type} in the table, "
                                     f"{f.type} in this run", table=uri)
                changed.append((f, theirs.field(i)))
        new = [f for f in schema if theirs.get_field_index(f.name) < 0]
        if not new and not changed:
            return
        added = added_columns(theirs, schema)  # Delta keeps no default for the rows written before
        if added:
            self._notes[topic] = [older_rows_note(uri, added)]
        for f, old in changed:  # fields added: merged; a field's type changed: refused
            found = type_change(old.type, f.type, f.name)
            if found:
                raise TableError(f"table {uri} (version {table.version()}): a field's type changed: {found} (the "
                                 "table's type, then this run's): an incompatible schema change, nothing of this "
                                 "run committed to it", table=uri)
        if changed:  # Delta's schema merge: fields added by name, any other change refused
            try:
                write_deltalake(uri, schema.empty_table(), mode="append", schema_mode="merge",
                                storage_options=self.storage)
            except DeltaError as exc:
                f, old = changed[0]
                raise TableError(f"table {uri}: column {f.name} is {old.type} in the table, {f.type} in this run, "
                                 f"which Delta cannot merge ({exc})", table=uri) from None
        else:
            table.alter.add_columns([Field.from_arrow(f) for f in new])
        again = DeltaTable(uri, storage_options=self.storage)
        held, _ = self._held.get(topic, (Ledger(), None))
        if read_ledger(again, self._topic_keys(topic))[0] != held:
            raise self._conflict(uri)
        self._tables[topic] = again

    def _conflict(self, uri: str) -> CommitConflictError:
        """The error of a commit another run made first: its version, and what to do (no library text)."""
        from deltalake import DeltaTable

        try:
            theirs = f"version {DeltaTable(uri, storage_options=self.storage).version()} of table {uri}"
        except Exception:  # noqa: BLE001 - the table cannot be read now: the message without its version
            theirs = f"to table {uri}"
        return CommitConflictError(f"another run committed {theirs} after this one read it: nothing of this run "
                                   "was committed to it; run again to append what is left", table=uri)

    def _merge(self, topic: str, props: Any) -> dict[str, int]:
        """Merge the run's latest record per key into the topic's table (created empty first if
        new); the rows it ``inserted``, ``updated`` and ``deleted``."""
        import pyarrow as pa
        from deltalake import DeltaTable

        schema = self.schema_of(topic)
        uri = self.uri(topic)
        if topic not in self._tables:
            DeltaTable.create(uri, schema, mode="error", partition_by=self.partition_columns or None,
                              description=self._description(), storage_options=self.storage)
        if topic in self._tables:  # a column (or value field) this run's schema added: added to the table first
            self._evolve(topic)
        if keyed_of(self._keyed, topic).op is not None:
            return self._apply_changes(DeltaTable(uri, storage_options=self.storage), topic, props)
        table = DeltaTable(uri, storage_options=self.storage)
        live, dead = latest_per_key(pa.Table.from_batches(self._pending.pop(topic, []), schema=schema))
        source = pa.concat_tables([live, live.schema.empty_table() if not dead else
                                   pa.Table.from_pylist([{"key": k} for k in dead], schema=schema)])
        metrics = (table.merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t",
                               commit_properties=props)
                   .when_matched_delete(predicate="s.value IS NULL")
                   .when_matched_update_all()
                   .when_not_matched_insert_all(predicate="s.value IS NOT NULL")
                   .execute())
        return {what: int(metrics.get(f"num_target_rows_{what}", 0)) for what in ("inserted", "updated", "deleted")}

    def _apply_changes(self, table: Any, topic: str, props: Any) -> dict[str, int]:
        """``--cdc``: the run's changes merged by the primary key in one commit: rows inserted or
        replaced, keys deleted, and after a truncate every other row of the table deleted."""
        import pyarrow as pa

        schema = self.schema_of(topic)
        batches = self._pending.pop(topic, [])
        keyed = keyed_of(self._keyed, topic)
        keys = list(keyed.keys)
        if batches:
            changes = reduce_changes(pa.Table.from_batches(batches), keyed)
            live = pa.Table.from_batches([_fit(_derive(b, self.partition), schema)
                                          for b in changes.live.to_batches()], schema=schema)
            dead, truncate = changes.dead, changes.truncate
        else:
            live, dead, truncate = schema.empty_table(), pa.table({k: pa.array([], schema.field(k).type)
                                                                    for k in keys}), False
        gone = pa.table({f.name: dead.column(f.name).cast(f.type) if f.name in keys else pa.nulls(dead.num_rows, f.type)
                         for f in schema})
        flag = "kbatch_delete"
        source = pa.concat_tables([live.append_column(flag, pa.array([False] * live.num_rows, pa.bool_())),
                                   gone.append_column(flag, pa.array([True] * gone.num_rows, pa.bool_()))])
        columns = {f"`{c}`": f"s.`{c}`" for c in schema.names}
        merge = (table.merge(source, predicate=" AND ".join(f"t.`{k}` = s.`{k}`" for k in keys), source_alias="s",
                             target_alias="t", commit_properties=props)
                 .when_matched_delete(predicate=f"s.{flag}")
                 .when_matched_update(updates=columns)
                 .when_not_matched_insert(updates=columns, predicate=f"NOT s.{flag}"))
        if truncate:
            merge = merge.when_not_matched_by_source_delete()
        metrics = merge.execute()
        return {what: int(metrics.get(f"num_target_rows_{what}", 0)) for what in ("inserted", "updated", "deleted")}

    def _description(self) -> str:
        return (f"Kafka topic records written by kbatch {self.properties.get('kbatch.version', '')} from "
                f"{self.properties.get('kbatch.source-root', '?')}")

    def abort(self) -> None:
        if self._staging is not None:
            import shutil

            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
            with contextlib.suppress(OSError):
                (self.out / STAGING_DIR).rmdir()
        for path in self._written:  # not committed: no reader sees them, but they take room
            self._delete(path)
        self._written = []
        self._actions.clear()
        self._pending.clear()
