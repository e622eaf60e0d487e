"""Iceberg tables through pyiceberg (no JVM): :class:`IcebergSink`, one table per topic.

- Catalog: by default an embedded SQL catalog on SQLite at ``OUT/catalog.db`` with the
  warehouse at ``OUT``; or any catalog pyiceberg's ``load_catalog(name, **options)`` loads
  (REST, SQL, Glue, Hive; credentials as pyiceberg finds them), ``warehouse=OUT`` unless the
  options give one. Tables are ``<namespace>.<topic>`` (namespace ``kafka`` by default).
- A new table gets the Kafka source's columns, the partition spec of ``--partition-by``
  (:mod:`kbatch.tables._partition`) and the properties ``kbatch.version`` and
  ``kbatch.source-root``.
- Each table's commit is one catalog commit (one pyiceberg ``Transaction``): the appends of the
  run, the last one's snapshot summary holding the table's :class:`Ledger` under
  ``kbatch.ledger``. The ledger read back is the newest one in the current snapshot's ancestry.
- Exactly once: the transaction asserts the table's main branch is still the snapshot the
  ledger was read from. pyiceberg would retry a failed commit on top of the newer snapshot
  (``commit.retry.num-retries``), which would append the same offsets twice: retries are off
  for kbatch's transactions, so a concurrent run's commit fails with
  :class:`~kbatch.errors.CommitConflictError` instead.
- ``OUT`` may be ``s3://bucket/prefix`` (the warehouse): pyiceberg's FileIO gets
  ``--storage-option``'s endpoint and credentials (:func:`kbatch.tables._remote.iceberg_properties`;
  ``--catalog-option s3.*=...`` win). The default SQLite catalog cannot live in a bucket (SQLite
  needs a local file with locks), and a catalog lost is the table's commits lost: with an
  ``s3://`` OUT, the catalog's place is given, ``--catalog-option uri=sqlite:////path/catalog.db``
  (or a database URL), or a catalog with ``--catalog``.
- A run killed before its commit leaves data files no snapshot references (Iceberg's orphan
  files; the table is unchanged); ``remove_orphan_files`` maintenance deletes them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

from kbatch.errors import CommitConflictError, TableError

from ._hooks import reached
from ._iceberg_files import append_files, write_files
from ._ledger import LEDGER_KEY, Ledger
from ._outlock import OutLock
from ._partition import DEFAULT, Transform, parse
from ._remote import iceberg_properties
from ._runs import run_name
from ._sink import (
    Sink,
    TableCommit,
    added_columns,
    by_topic,
    count_rows,
    nullable,
    older_rows_note,
    staged_files,
)
from ._upsert import Changes, Keyed, join_keys, keyed_of, reduce_changes

__all__ = ["CATALOG_NAME", "DEFAULT_NAMESPACE", "IcebergSink", "default_catalog", "no_retries", "read_ledger"]

DEFAULT_NAMESPACE: Final = "kafka"
#: The name of the default (SQLite) catalog, under which its tables are stored in ``catalog.db``.
CATALOG_NAME: Final = "kbatch"
#: Rows of a topic buffered before they are appended (pyiceberg writes a partitioned table from
#: whole Arrow tables).
CHUNK_BYTES: Final = 128 << 20
#: The folder names another writer splits staged files by: ``kbatch_<partition field>=<value>``.
STAGED_PREFIX: Final = "kbatch_"


def read_ledger(table: Any) -> tuple[Ledger, int | None]:
    """The newest kbatch ledger in ``table``'s current snapshot's ancestry and that snapshot's id."""
    meta = table.metadata
    snap = meta.current_snapshot()
    while snap is not None:
        text = snap.summary.get(LEDGER_KEY) if snap.summary is not None else None
        if text:
            return Ledger.from_json(text), snap.snapshot_id
        snap = meta.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return Ledger(), None


def default_catalog(out: str | os.PathLike[str]) -> Any:
    """The SQL catalog ``kbatch convert --format iceberg`` writes to by default: SQLite at
    ``OUT/catalog.db``, warehouse ``OUT`` (``pyiceberg.catalog.sql.SqlCatalog``)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(CATALOG_NAME, **_default_options(Path(out).resolve()))


def _default_options(path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{path / 'catalog.db'}", "warehouse": path.as_uri()}


def no_retries(table: Any) -> Any:
    """``table`` whose transactions fail instead of retrying on a newer snapshot (this object
    only: the table's stored properties are not changed)."""
    props = {**table.metadata.properties, "commit.retry.num-retries": "0"}
    table.metadata = table.metadata.model_copy(update={"properties": props})
    return table


def _iceberg_transform(t: Transform) -> Any:
    from pyiceberg import transforms as T

    simple = {"identity": T.IdentityTransform, "year": T.YearTransform, "month": T.MonthTransform,
              "day": T.DayTransform, "hour": T.HourTransform}
    if t.name in simple:
        return simple[t.name]()
    width = int(t.width or 0)
    return T.BucketTransform(width) if t.name == "bucket" else T.TruncateTransform(width)


class IcebergSink(Sink):
    """Iceberg tables, one per topic (see the module's notes).

    Parameters
    ----------
    out : path or str
        The warehouse (and, with the default catalog, where ``catalog.db`` is), or
        ``s3://bucket/prefix`` (the default catalog's ``uri`` then in ``catalog_options``).
    mode : {"errorifexists", "overwrite", "append"}
    topics : sequence of str
        The topics the run converts (their tables' ledgers are read at once).
    catalog : str, optional
        A catalog name for ``pyiceberg.catalog.load_catalog``; default: the SQLite one in OUT.
    catalog_options : dict, optional
    namespace : str, default "kafka"
    partition_by : sequence of str, optional
        ``--partition-by`` items (default ``day(timestamp)``).
    properties : dict, optional
        Table properties of new tables (kbatch's version and the source root).
    columns : sequence of str, optional
        The columns the run writes, to check ``partition_by`` against before any work.
    compression : str, optional
        The Parquet codec of new tables (``write.parquet.compression-codec``; default zstd).
    upsert : bool, Keyed or dict of Keyed, default False
        One row per key: the run's latest record per key replaces the table's row, a tombstone
        deletes it (:mod:`kbatch.tables._upsert`; the run's records are held in memory). A
        :class:`~kbatch.tables.Keyed` with an ``op`` column: the rows are changes by a primary
        key (``--cdc``; a dict: each topic's), a truncate removing the table's files in the same snapshot.
    table_suffix : str, default ""
        Each topic's table is ``<namespace>.<topic><table_suffix>`` (``"__dead_letter"``: the
        tables of the records whose values did not decode).
    storage_options : dict, optional
        pyarrow's filesystem options for a remote OUT, passed to pyiceberg's FileIO.
    """

    format = "iceberg"

    def __init__(self, out: str | os.PathLike[str], mode: str, *, topics: Sequence[str] = (),
                 catalog: str | None = None, catalog_options: dict[str, str] | None = None,
                 namespace: str | None = None, partition_by: Sequence[str] | None = None,
                 properties: dict[str, str] | None = None, columns: Sequence[str] | None = None,
                 compression: str | None = None, upsert: bool | Keyed | Mapping[str, Keyed] = False,
                 table_suffix: str = "",
                 storage_options: dict[str, Any] | None = None) -> None:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        self.out = str(out)
        self.mode = mode
        self.table_suffix = table_suffix
        self.namespace = namespace or DEFAULT_NAMESPACE
        self.upsert = bool(upsert)
        self._keyed = upsert
        self._applied: dict[str, dict[str, int]] = {}  # --upsert: rows inserted, updated, deleted
        self.partition = parse(partition_by or DEFAULT, columns)
        self.properties = dict(properties or {})
        if compression:  # else pyiceberg's default, zstd
            codec = "uncompressed" if compression == "none" else compression
            self.properties["write.parquet.compression-codec"] = codec
        options = dict(catalog_options or {})
        local = "://" not in self.out
        self._lock: OutLock | None = None  # the default catalog's OUT, shared with the runs writing to it
        if not local:
            options = {**iceberg_properties(self.out, storage_options or {}), **options}
        if catalog is None and not local:
            if "uri" not in options:
                raise ValueError(f"--format iceberg to {self.out}: the default SQLite catalog cannot be kept in an "
                                 "object store; give its place: --catalog-option uri=sqlite:////path/to/catalog.db "
                                 "(or a database URL), or --catalog NAME")
            options = {"type": "sql", "warehouse": self.out, **options}
            if str(options["uri"]).startswith("sqlite:///"):  # its folder made, as OUT is for a local one
                Path(str(options["uri"])[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        elif catalog is None:
            path = Path(self.out).resolve()
            self._lock = OutLock(path)
            options = {**_default_options(path), **options}
        elif "warehouse" not in options:
            options["warehouse"] = Path(self.out).resolve().as_uri() if local else self.out
        with self._lock.alone("catalog.db") if self._lock is not None else contextlib.nullcontext():
            self.catalog = load_catalog(catalog or CATALOG_NAME, **options)  # makes its tables once
        self._tables: dict[str, Any] = {}
        self._held: dict[str, tuple[Ledger, int | None]] = {}
        for topic in topics:
            try:
                table = no_retries(self.catalog.load_table(self.identifier(topic)))
            except NoSuchTableError:
                continue
            self._tables[topic] = table
            self._held[topic] = read_ledger(table)
            if mode == "errorifexists" and table.metadata.current_snapshot() is not None:
                raise FileExistsError(f"table {self.identifier(topic)} exists and holds data "
                                      "(use --mode append or overwrite)")
        self._txns: dict[str, Any] = {}
        self._buffers: dict[str, list[Any]] = {}
        self._counts: dict[str, int] = {}
        self._base: dict[str, int | None] = {}
        self._staging: Path | None = None
        #: the data files this run wrote, by topic, not yet committed (deleted by an abort)
        self._files: dict[str, list[tuple[str, Any]]] = {}
        self._notes: dict[str, list[str]] = {}  # by topic, for the commit's report
        self._run = f"{os.getpid()}-{os.urandom(4).hex()}"

    def identifier(self, topic: str) -> str:
        return f"{self.namespace}.{topic}{self.table_suffix}"

    def committed(self) -> Ledger:
        return Ledger.union(ledger for ledger, _ in self._held.values())

    def last_commits(self) -> list[str]:
        return [f"snapshot {snap} of {self.identifier(t)}" for t, (_, snap) in sorted(self._held.items())
                if snap is not None]

    def open(self, schema: Any) -> None:
        self.schema = schema

    def _table(self, topic: str) -> Any:
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        if topic not in self._tables:
            self.catalog.create_namespace_if_not_exists(self.namespace)
            try:
                txn = self.catalog.create_table_transaction(self.identifier(topic), schema=self._optional(topic),
                                                            properties=self.properties)
                if self.partition:
                    with txn.update_spec() as spec:
                        for t in self.partition:
                            spec.add_field(t.column, _iceberg_transform(t), t.field_name)
                txn.commit_transaction()
            except (TableAlreadyExistsError, CommitFailedException):  # the SQL catalog says the latter
                name = self.identifier(topic)
                raise CommitConflictError(f"table {name} was created by another run meanwhile: nothing of this "
                                          "run committed; run again", table=name) from None
            self._tables[topic] = no_retries(self.catalog.load_table(self.identifier(topic)))
        return self._tables[topic]

    def _optional(self, topic: str) -> Any:
        """``topic``'s schema with every field optional, nested ones too: Iceberg cannot add a
        required field to a table that holds rows, so a typed value's struct (whose fields are
        required where Avro's are not nullable) must be optional throughout to gain the fields a
        later reader schema adds. Rows keep their Arrow types; a required field written to an
        optional column is allowed."""
        return nullable(self.schema_of(topic))

    def _txn(self, topic: str) -> Any:
        if topic not in self._txns:
            table = self._table(topic)
            snap = table.metadata.current_snapshot()
            self._base[topic] = snap.snapshot_id if snap is not None else None
            txn = table.transaction()
            self._evolve(topic, table, txn)
            if self.mode == "overwrite" and snap is not None:
                from pyiceberg.expressions import AlwaysTrue

                txn.delete(AlwaysTrue())
            self._txns[topic] = txn
        return self._txns[topic]

    def _evolve(self, topic: str, table: Any, txn: Any) -> None:
        """Columns this run writes that the table lacks are added by name, in the same commit
        (``union_by_name``: old files untouched); a column whose type changed stops the run."""
        from pyiceberg.exceptions import ValidationError

        try:
            with txn.update_schema() as update:  # nothing to commit when the columns are the same
                update.union_by_name(self._optional(topic))
        except (ValueError, ValidationError) as exc:
            raise TableError(f"table {self.identifier(topic)}: this run's columns do not fit the table's schema "
                             f"{table.schema().schema_id}: {exc}", table=self.identifier(topic)) from None
        # pyiceberg writes format v2 tables, whose columns have no initial-default (v3's) for older rows
        added = added_columns(table.schema().as_arrow(), txn.table_metadata.schema().as_arrow())
        if added and table.metadata.current_snapshot() is not None:
            self._notes[topic] = [older_rows_note(self.identifier(topic), added)]

    def _flush(self, topic: str) -> None:
        """Write ``topic``'s buffered rows as data files of its table (no snapshot yet: the commit
        appends them, :mod:`kbatch.tables._iceberg_files`)."""
        import pyarrow as pa

        batches = self._buffers.pop(topic, [])
        self._txn(topic)  # the table made and its schema evolved before the files are written
        if batches:
            self._write(topic, pa.Table.from_batches(batches, schema=self.schema_of(topic)))

    def _write(self, topic: str, rows: Any) -> None:
        """Write ``rows`` (a ``pyarrow.Table``) as data files of ``topic``'s table, for the commit."""
        txn = self._txns[topic]
        codec = txn.table_metadata.properties.get("write.parquet.compression-codec", "zstd")
        name = f"{self._run}-{len(self._files.get(topic, [])):05d}"
        files = write_files(txn.table_metadata, self._tables[topic].io, rows, name,
                            "none" if codec == "uncompressed" else codec)
        self._files.setdefault(topic, []).extend(files)

    def _upsert(self, topic: str) -> list[Any]:
        """Replace or insert the latest row of each key of the run, delete the keys it ends with a
        tombstone, as kbatch's own files (pyiceberg's ``upsert`` would rewrite the rows kept, a
        null list of structs as ``[]``): the table's files holding one of the run's keys are
        read, their other rows written again with the run's live rows; the files replaced are
        returned (the commit's snapshot removes them). The rows inserted, updated and deleted are
        kept for the report."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyiceberg.expressions import AlwaysTrue, In

        batches = self._buffers.pop(topic, [])
        schema = self.schema_of(topic)
        keyed = keyed_of(self._keyed, topic)
        names = list(keyed.keys)
        if keyed.op is None:
            changes = reduce_changes(pa.Table.from_batches(batches, schema=schema), keyed)
        elif batches:
            changes = reduce_changes(pa.Table.from_batches(batches), keyed)
            changes = Changes(changes.live.cast(schema), changes.dead, changes.truncate)
        else:
            changes = Changes(schema.empty_table(), schema.empty_table().select(names), False)
        live, dead = changes.live, changes.dead
        self._txn(topic)
        table = self._tables[topic]
        keys = pa.concat_tables([live.select(names), dead.cast(live.select(names).schema)])
        replaced, kept, found = [], [], []
        snapshot = table.metadata.current_snapshot()
        if (len(keys) or changes.truncate) and snapshot is not None:
            first = keys.column(names[0]).combine_chunks()
            where = AlwaysTrue() if changes.truncate else cast(Any, In)(names[0], first.to_pylist())
            for task in table.scan(row_filter=where).plan_files():
                with table.io.new_input(task.file.file_path).open() as f:
                    rows = pq.read_table(f)  # as the file holds them: its nulls kept
                probe = rows.select(names)  # an older writer's large_binary key compared as this run's type
                probe = probe.set_column(0, names[0], probe.column(0).cast(first.type))
                hit = (pa.array([True] * rows.num_rows, pa.bool_()) if changes.truncate
                       else join_keys(probe, keys, names))
                if not pc.any(hit).as_py():
                    continue
                replaced.append(task.file)
                kept.append(rows.filter(pc.invert(hit)))
                found.append(probe.filter(hit))
        held = pa.concat_tables(found) if found else keys.schema.empty_table()
        if changes.truncate:
            updated, deleted = 0, held.num_rows
        else:
            updated = pc.sum(join_keys(live, held, names)).as_py() or 0
            deleted = pc.sum(join_keys(held, dead, names)).as_py() or 0
        self._applied[topic] = {"inserted": live.num_rows - updated, "updated": updated, "deleted": deleted}
        for rows in (*kept, live):  # each file's rows kept with its own columns
            if rows.num_rows:
                self._write(topic, rows)
        return replaced

    def write(self, batches: Iterable[Any]) -> None:
        """Buffer each topic's batches; a topic's buffer is appended (a snapshot of the commit) when
        it reaches :data:`CHUNK_BYTES`, and the largest others when all together do; what is
        left is appended at :meth:`commit` with the ledger (one snapshot per table, for most runs)."""
        held: dict[str, int] = {}
        for batch in count_rows(batches, self._counts):
            for topic, part in by_topic([batch]):
                self._buffers.setdefault(topic, []).append(part)
                held[topic] = held.get(topic, 0) + part.nbytes
                if self.upsert:
                    continue  # the whole run is reduced per key at the commit
                if held[topic] >= CHUNK_BYTES:
                    self._flush(topic)
                    held[topic] = 0
                while sum(held.values()) >= CHUNK_BYTES:
                    largest = max((t for t in held if t != topic), key=held.__getitem__)
                    self._flush(largest)
                    held[largest] = 0

    def staging(self) -> Path:
        if "://" in self.out:
            raise NotImplementedError("files staged by another writer need a local OUT")
        if self._staging is None:
            self._staging = Path(self.out) / "_kbatch_staging" / run_name()
            self._staging.mkdir(parents=True)
        return self._staging

    def file_partitions(self) -> list[tuple[str, Transform]]:
        # the files keep every column and are split by a copy of each transform's value (Iceberg's
        # own: hours since the epoch for hour, the murmur3 bucket for bucket); the commit takes a
        # bucket from the folder, the others from the files' statistics (kbatch.tables._iceberg_files)
        return [(f"{STAGED_PREFIX}{t.field_name}", t) for t in self.partition]

    def _take_staged(self) -> dict[str, list[tuple[str, dict[str, str]]]]:
        """Move the files another writer staged into their tables' ``data`` folders; by topic, their
        URIs and folder values (by partition field name)."""
        from urllib.parse import unquote, urlparse

        out: dict[str, list[tuple[str, dict[str, str]]]] = {}
        if self._staging is None:
            return out
        for topic, dirs, path in staged_files(self._staging):
            location = urlparse(self._table(topic).metadata.location)
            # the writer's folders kept: one task's files in two partitions may have one name
            dest = Path(unquote(location.path)) / "data" / dirs / path.name
            if dest.exists():
                raise FileExistsError(f"{dest} exists: not replaced")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
            folders = {k.removeprefix(STAGED_PREFIX): unquote(v) for k, v in
                       (part.split("=", 1) for part in dirs.split("/") if "=" in part)}
            out.setdefault(topic, []).append((f"file://{dest}", folders))  # unquoted, as pyiceberg writes its own
        self._drop_staging()
        return out

    def _drop_staging(self) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
            with contextlib.suppress(OSError):
                (Path(self.out) / "_kbatch_staging").rmdir()

    def commit(self, ledger: Ledger, converted: Ledger) -> list[TableCommit]:
        from pyiceberg.exceptions import CommitFailedException

        staged = self._take_staged()
        topics = sorted(set(converted.topics()) | set(self._buffers) | set(self._txns) | set(staged)
                        | set(self._files))
        for topic in topics:
            props = {LEDGER_KEY: ledger.for_topic(topic).to_json(),
                     **{k: v for k, v in self.properties.items() if k == "kbatch.version"}}
            replaced = self._upsert(topic) if self.upsert else []
            self._flush(topic)
            files = [*self._files.get(topic, []), *staged.get(topic, [])]
            append_files(self._txn(topic), self._tables[topic].io, files, props, replaced)
        reached("before-commit")
        out = []
        for topic in topics:
            name = self.identifier(topic)
            try:
                table = self._txns.pop(topic).commit_transaction()
                self._files.pop(topic, None)  # the table's now
                if self._lock is not None:
                    self._lock.made = False  # OUT holds a commit now: an abort must not remove it
            except CommitFailedException:
                self.abort()
                try:
                    snap = self.catalog.load_table(name).metadata.current_snapshot()
                    theirs = f"snapshot {snap.snapshot_id} of table {name}" if snap is not None else f"to table {name}"
                except Exception:  # noqa: BLE001 - the table cannot be read now: the message without its snapshot
                    theirs = f"to table {name}"
                raise CommitConflictError(f"another run committed {theirs} after this one read it: nothing of this "
                                          "run was committed to it; run again to append what is left",
                                          table=name) from None
            snap = table.metadata.current_snapshot()
            records = size = 0
            s = snap
            while s is not None and s.snapshot_id != self._base.get(topic):
                records += int(s.summary.get("added-records", 0) or 0)
                size += int(s.summary.get("added-files-size", 0) or 0)
                s = table.metadata.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id else None
            self._held[topic] = (ledger.for_topic(topic), snap.snapshot_id)
            upsert = self._applied.pop(topic, None)
            if upsert is not None:  # the records read; the rows changed and the table's rows after
                records = self._counts.get(topic, 0)
                upsert["rows"] = int(snap.summary.get("total-records", 0) or 0)
            out.append(TableCommit(name, str(snap.snapshot_id), records, size, list(converted.for_topic(topic)),
                                   upsert=upsert, notes=self._notes.pop(topic, [])))
        if self._lock is not None:
            self._lock.close()
        return out

    def abort(self) -> None:
        self._drop_staging()
        self._txns.clear()
        self._buffers.clear()
        for topic, files in self._files.items():  # written by this run, in no snapshot
            for uri, _ in files:
                with contextlib.suppress(Exception):
                    self._tables[topic].io.delete(uri)
        self._files.clear()
        if self._lock is not None:
            # a first run that failed: OUT as it was (none), unless another run uses it or committed
            if self._lock.made and not self._anything_committed():
                self._lock.remove_if_alone()
            self._lock.close()

    def _anything_committed(self) -> bool:
        """Whether a table of the namespace has a snapshot (this run's or another's)."""
        try:
            names = self.catalog.list_tables(self.namespace)
            return any(self.catalog.load_table(n).metadata.current_snapshot() is not None for n in names)
        except Exception:  # noqa: BLE001 - a catalog that cannot say: keep OUT
            return True
