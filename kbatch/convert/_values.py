"""The typed values of a ``kbatch convert --values`` run: decoded as the records pass, dead letters kept apart.

:class:`ValuePlan` (made before any work by :func:`kbatch.convert._value_plan.plan_values`, which
says what is decoded and how) decodes each topic's batches into that topic's output schema
(:func:`kbatch.values.split`), keeps the records whose value (or key) does not decode as dead
letters (:class:`DeadLetterFiles`: Parquet files by topic) and commits them with the data (a
hidden folder of a Parquet OUT) or just before it (the ``<topic>__dead_letter`` tables of
Iceberg and Delta, a ``--dead-letter PATH`` folder); ``--flatten-values`` lays the value struct
out as top-level columns (:func:`flatten_values`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbatch import values
from kbatch.errors import CommitConflictError, TableError
from kbatch.plan import ROOT_COLUMN
from kbatch.storage import is_remote
from kbatch.tables import FolderSink, Ledger, RemoteFolderSink, Sink, TableCommit, by_topic, open_sink, reached
from kbatch.values import Registry, Schema

from ._errors import UsageError

__all__ = [
    "COMMONEST",
    "DEAD_LETTER_DIR",
    "DEAD_LETTER_SUFFIX",
    "DeadLetterFiles",
    "TopicDecode",
    "ValuePlan",
    "flatten_schema",
    "flatten_values",
    "usage",
]

#: Where the Parquet format keeps dead letters by default: a hidden folder of OUT.
DEAD_LETTER_DIR = "_dead_letter"
#: The dead-letter table of topic ``t`` in Iceberg and Delta: ``t__dead_letter``.
DEAD_LETTER_SUFFIX = "__dead_letter"
#: The commonest errors a summary names.
COMMONEST = 3


def usage(message: str) -> UsageError:
    return UsageError(message)


def flatten_schema(schema: Any) -> Any:
    """``schema`` with a struct ``value`` column replaced by its fields, named ``value_<field>``
    (every one nullable: a null value, a tombstone, has null fields)."""
    import pyarrow as pa

    at = schema.get_field_index("value")
    if at < 0 or not pa.types.is_struct(schema.field(at).type):
        return schema
    fields = [f.with_name(f"value_{f.name}").with_nullable(True) for f in schema.field(at).type]
    clash = sorted({f.name for f in fields} & set(schema.names))
    if clash:
        raise usage(f"--flatten-values: the column(s) {', '.join(clash)} would be there twice")
    return pa.schema(list(schema)[:at] + fields + list(schema)[at + 1:], metadata=schema.metadata)


def flatten_values(table: Any) -> Any:
    """``table`` (a ``pyarrow.Table``) with its struct ``value`` column as ``value_<field>`` columns."""
    import pyarrow as pa

    at = table.schema.get_field_index("value")
    if at < 0 or not pa.types.is_struct(table.schema.field(at).type):
        return table
    schema = flatten_schema(table.schema)
    parts = table.column(at).flatten()  # a null struct's fields are null
    columns = table.columns[:at] + parts + table.columns[at + 1:]
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class TopicDecode:
    """How one topic's raw records are decoded (:meth:`ValuePlan.topic_decode`): by this process
    (:meth:`ValuePlan.decode`) and by Spark's executors (it pickles), one definition for both."""

    #: (value reader, key reader): a None reader leaves that column binary
    readers: tuple[Schema | None, Schema | None]
    fail: bool
    #: the decode's format= ("json": plain JSON, no registry)
    format: str
    #: Protobuf readers' options (:class:`kbatch.values.ProtoOptions`), or None
    protobuf: Any
    flatten: bool

    def __call__(self, topic: str, part: Any, registry: Registry | None, cdc: Any = None) -> tuple[Any, Any, Any]:
        """``part`` (raw records of ``topic``) decoded: ``(rows, dead letters, not changes)``. With
        ``cdc`` (a :class:`kbatch.convert._cdc.CdcPlan`), the rows are its changes and the records
        that are none its dead letters (``None`` without). With ``fail``, the first bad record raises."""
        good, dead = values.split(part, registry, values=self.readers[0], keys=self.readers[1],
                                  on_error="raise" if self.fail else "dead-letter", format=self.format,
                                  protobuf=self.protobuf)
        more = None
        if cdc is not None:
            good, more = cdc.apply(topic, part, good, fail=self.fail)
        return (flatten_values(good) if self.flatten else good), dead, more


@dataclass
class ValuePlan:
    """What ``--values`` / ``--keys`` decode, how, and where dead letters go; counts as it runs."""

    registry: Registry | None
    #: topic -> (value reader, key reader): the decoded topics (a None reader: that column stays binary)
    readers: dict[str, tuple[Schema | None, Schema | None]]
    #: topic -> the rows' output schema (every selected topic)
    schemas: dict[str, Any]
    #: the raw records' schema, and the dead letters'
    source: Any
    dead_schema: Any
    flatten: bool
    fail: bool
    #: the run's --format, OUT and --mode
    format: str
    out: str
    mode: str
    #: --dead-letter outside OUT (a Parquet folder of its own), or None
    dead_letter: str | None
    notes: list[str] = field(default_factory=list)
    #: (topic, partition, root) -> dead letters this run
    dead: Counter[tuple[str, int, str | None]] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    #: dead letters of this run that a dead-letter table held already (an earlier run killed
    #: between its two commits): not written again
    already: int = 0
    examples: dict[str, str] = field(default_factory=dict)
    #: what was committed of the dead letters (the tables apart from the data)
    commits: list[TableCommit] = field(default_factory=list)
    #: a hidden folder of OUT committed with the data (parquet), or None (a sink apart)
    side_folder: str | None = None
    #: the Iceberg or Delta sink's own options, the data tables' (catalog, Delta's partitions,
    #: storage options): set by the convert (:func:`kbatch.convert._sinks.table_options`)
    catalog: dict[str, Any] = field(default_factory=dict)
    partition_by: list[str] | None = None
    compression: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    _apart: Sink | None = None
    _held: Ledger = field(default_factory=Ledger)
    _files: DeadLetterFiles | None = None
    _spool: Path | None = None
    #: the decode's format= ("json": plain JSON, no registry)
    value_format: str = "auto"
    #: ``--cdc``: the decoded records made changes (:class:`kbatch.convert._cdc.CdcPlan`), or None
    cdc: Any = None
    #: how Protobuf values and keys decode (:class:`kbatch.values.ProtoOptions`; None: the defaults)
    protobuf: Any = None

    @property
    def where(self) -> str:
        """Where the dead letters are, in words."""
        if self.side_folder is not None:
            return f"{self.out.rstrip('/')}/{self.side_folder}" if is_remote(self.out) \
                else str(Path(self.out) / self.side_folder)
        if self.dead_letter is not None:
            return self.dead_letter
        return ", ".join(c.table for c in self.commits) or f"tables <topic>{DEAD_LETTER_SUFFIX}"

    def total(self) -> int:
        return sum(self.dead.values())

    def commonest(self) -> list[dict[str, Any]]:
        """The commonest errors: reason, count and the first record that had it."""
        return [{"reason": r, "count": n, "example": self.examples[r]} for r, n in self.reasons.most_common(COMMONEST)]

    # ------------------------------------------------------------------ the run

    def start(self, sink: Sink) -> None:
        """Get ready to write dead letters (after ``sink.open``)."""
        if self.fail:
            return
        if self.side_folder is not None:
            if isinstance(sink, RemoteFolderSink):  # written into the run's staging folder on S3
                self._files = DeadLetterFiles(f"{sink.staging_path}/{self.side_folder}", self.dead_schema,
                                              filesystem=sink.fs)
                return
            assert isinstance(sink, FolderSink)
            self._files = DeadLetterFiles(sink.folder / self.side_folder, self.dead_schema)
            return
        mode = "overwrite" if self.mode == "overwrite" else "append"  # dead letters of earlier runs: kept
        if self.dead_letter is not None:
            self._apart = FolderSink(self.dead_letter, mode, compression=self.compression)
        else:
            self._apart = open_sink(self.format, self.out, mode, topics=sorted(self.readers),
                                    partition_by=self.partition_by, columns=self.dead_schema.names,
                                    compression=self.compression, table_suffix=DEAD_LETTER_SUFFIX,
                                    properties=self.properties, **self.catalog)
        self._held = self._apart.committed() if mode == "append" else Ledger()
        self._spool = Path(tempfile.mkdtemp(prefix="kbatch-dead-letter-"))
        self._files = DeadLetterFiles(self._spool, self.dead_schema)

    def decode(self, batches: Iterable[Any]) -> Iterator[Any]:
        """``batches`` of raw records as batches of each topic's output schema; the dead letters
        set aside (or, with ``fail``, the first bad record's :class:`ValueDecodeError` raised)."""
        for batch in batches:
            for topic, part in by_topic([batch]):
                decode = self.topic_decode(topic)
                if decode is None:
                    yield part
                    continue
                good, dead, more = decode(topic, part, self.registry, self.cdc)
                for letters in (more, dead):
                    if letters is not None and self.cdc is not None:  # those after an --as-of cut: a later run's
                        letters = self.cdc.before_cut(letters)
                    if letters is not None and letters.num_rows:
                        self.set_aside(letters)
                yield from good.to_batches()

    def topic_decode(self, topic: str) -> TopicDecode | None:
        """How ``topic``'s records are decoded, or None (not decoded: the raw records as they are)."""
        readers = self.readers.get(topic)
        return None if readers is None else TopicDecode(readers, self.fail, self.value_format, self.protobuf,
                                                        self.flatten)

    def set_aside(self, dead: Any) -> None:
        """Keep ``dead`` (a table of :attr:`dead_schema`) for the commit, counted per partition and
        reason; those an earlier run's dead-letter commit holds already are counted apart, not kept."""
        import pyarrow as pa

        roots = dead.column(ROOT_COLUMN).to_pylist() if ROOT_COLUMN in dead.column_names else [None] * dead.num_rows
        keep = []
        for row, root in zip(dead.select(["topic", "partition", "offset", "reason"]).to_pylist(), roots,
                             strict=True):
            held = self._held.get(row["topic"], row["partition"], root)
            fresh = held is None or not held.passed(row["offset"])  # an earlier run's commit holds it already
            keep.append(fresh)
            self.already += not fresh
            if fresh:
                self.dead[(row["topic"], row["partition"], root)] += 1
                self.reasons[row["reason"]] += 1
                self.examples.setdefault(row["reason"],
                                         f"{row['topic']}-{row['partition']} offset {row['offset']}")
        if not all(keep):
            dead = dead.filter(pa.array(keep))
        if dead.num_rows:
            assert self._files is not None
            self._files.write(dead)

    def commit(self, converted: Ledger) -> None:
        """Commit the dead letters kept apart from the data (before the data's commit): the
        dead-letter tables' ledgers advanced by ``converted``'s ranges of the topics with dead letters."""
        if self._files is not None:
            self._files.close()
        if self._apart is None:
            return
        topics = {t for t, _, _ in self.dead}
        if self.mode == "overwrite":
            topics |= set(self._apart.committed().topics())  # earlier dead letters replaced, even by none
        if not topics:
            self._apart.abort()
            return
        mine = Ledger(r for r in converted if r.topic in topics)
        with self._apart as sink:
            sink.open(self.dead_schema)
            assert self._files is not None
            sink.write(self._files.batches())
            self.commits = sink.commit(self._held.advanced(mine), mine)
        self._apart = None  # committed: nothing to abort
        reached("between-commits")

    def explain(self, exc: TableError) -> TableError:
        """``exc`` (a table that refused this run's columns) naming the reader schema this run
        decoded that table's topic with: the table's schema (its id, or Delta's version) and the
        reader's id, side by side."""
        if isinstance(exc, CommitConflictError):
            return exc
        table = exc.table.rstrip("/")
        for topic, (reader, _) in self.readers.items():
            if reader is not None and (table == topic or table.endswith((f".{topic}", f"/{topic}"))):
                named = (f"{reader.subject} version {reader.version} (schema id {reader.id})" if reader.subject
                         else f"--reader-schema{f' (schema id {reader.id})' if reader.id else ''}")
                return TableError(f"{exc}; this run's values were decoded with {named}: evolve the subject "
                                  "compatibly, or convert to a new table", table=exc.table)
        return exc

    def summary_notes(self) -> list[str]:
        """The plan's notes, and what this run found already committed."""
        if not self.already:
            return self.notes
        plural = "s" if self.already != 1 else ""
        return [*self.notes, (f"{self.already} dead letter{plural} of this run's records committed already "
                              "(by a run killed before its data's commit): not written again")]

    def close(self) -> None:
        """Drop what is left (spooled files; an uncommitted dead-letter sink)."""
        if self._files is not None:
            self._files.close()
        if self._apart is not None:
            with contextlib.suppress(Exception):
                self._apart.abort()
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
            self._spool = None


class DeadLetterFiles:
    """Dead letters as Parquet files in ``folder/topic=<t>/``, one writer per topic, as they come.

    The layout of the data's folders (Hive partitions): the ``topic`` column is the folder's name,
    not in the files, so that ``pyarrow.dataset`` / Spark read ``folder`` with ``topic`` back."""

    def __init__(self, folder: Path | str, schema: Any, filesystem: Any = None) -> None:
        self.folder = folder
        self.filesystem = filesystem  # a pyarrow filesystem (``folder`` a path of it), or None: local
        self.schema = schema
        self.token = uuid.uuid4().hex[:8]
        self._at = schema.get_field_index("topic")
        self._file_schema = schema.remove(self._at)
        self._writers: dict[str, Any] = {}
        self.paths: dict[str, str] = {}

    def write(self, dead: Any) -> None:
        import pyarrow.parquet as pq

        for topic, part in by_topic(dead.to_batches()):
            w = self._writers.get(topic)
            if w is None:
                path = f"{self.folder}/topic={topic}/part-{os.getpid()}-{self.token}.parquet"
                if self.filesystem is None:
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                w = self._writers[topic] = pq.ParquetWriter(path, self._file_schema, filesystem=self.filesystem)
                self.paths[topic] = path
            w.write_batch(part.drop_columns(["topic"]))

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    def batches(self) -> Iterator[Any]:
        """What was written, as batches of :attr:`schema` (``topic`` put back)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for topic, path in self.paths.items():
            for batch in pq.ParquetFile(path, filesystem=self.filesystem).iter_batches():
                column = pa.array([topic] * batch.num_rows, pa.string())
                yield pa.RecordBatch.from_arrays([*batch.columns[:self._at], column, *batch.columns[self._at:]],
                                                 schema=self.schema)
