"""The one interface every table format implements: :class:`Sink`.

An engine (``kbatch convert``'s arrow engine) drives a sink in four steps and never calls a
format's library itself::

    sink = FolderSink(out, "append")          # or IcebergSink, DeltaSink
    held = sink.committed()                   # the Ledger the table(s) hold
    with sink:                                # abort() on an exception
        sink.open(schema)                     # or {topic: schema} when topics' columns differ
        sink.write(batches)                   # Arrow record batches, any topics, any number of calls
        commits = sink.commit(ledger, converted)

or, for files another writer (Spark's executors) puts in ``sink.staging()`` (split by topic
and ``sink.file_partitions()``), just ``open`` and ``commit``: the commit takes them in.

``commit`` makes the written data and the new :class:`~kbatch.tables.Ledger` visible together,
or raises :class:`~kbatch.errors.CommitConflictError` when another run committed meanwhile
(then nothing of this run is visible). A process killed at any point leaves each table at its
last commit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kbatch._progress import plural, size

from ._hooks import reached
from ._ledger import Ledger, OffsetRange
from ._partition import Transform

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self

__all__ = ["ROUTE", "EndOnError", "Sink", "TableCommit", "added_columns", "by_topic", "count_rows", "older_rows_note",
           "nullable", "staged_files"]


@dataclass
class TableCommit:
    """What one commit to one table did (a Parquet folder is one table of every topic)."""

    table: str
    #: the commit's id: an Iceberg snapshot id, a Delta version, a Parquet ledger's commit number
    snapshot: str
    records: int
    bytes: int
    #: the offsets this commit converted, per source partition
    ranges: list[OffsetRange] = field(default_factory=list)
    #: what the id is: "snapshot", "version", "commit"
    kind: str = "snapshot"
    #: ``--upsert``: the rows the commit ``inserted``, ``updated`` and ``deleted``, and the table's
    #: ``rows`` after it (``records`` is then the records read)
    upsert: dict[str, int] | None = None
    #: what the summary says once about this table (columns added that older rows read as null)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:

        if self.upsert is not None:
            u = self.upsert
            return (f"table {self.table}: {self.kind} {self.snapshot}, {plural(self.records, 'record')} read from "
                    f"{plural(len(self.ranges), 'partition')}: {u['inserted']:,} rows inserted, {u['updated']:,} "
                    f"updated, {u['deleted']:,} deleted; {plural(u['rows'], 'row')} in the table "
                    f"({size(self.bytes)} written)")
        return (f"table {self.table}: {self.kind} {self.snapshot}, {plural(self.records, 'record')} "
                f"({size(self.bytes)}) from {plural(len(self.ranges), 'partition')}")

    def as_dict(self) -> dict[str, Any]:
        out = {"table": self.table, self.kind: self.snapshot, "records": self.records, "bytes": self.bytes,
               "ranges": [r.as_dict() for r in self.ranges]}
        if self.upsert is not None:
            out["upsert"] = dict(self.upsert)
        return out


#: The column a batch of changes (``--cdc``) names each row's topic (its table) by: their tables'
#: own columns may hold a ``topic`` (a database column of that name).
ROUTE = "_kbatch_topic"


def _topics(batch: Any) -> Any:
    """The column naming each row of ``batch``'s topic: :data:`ROUTE` when it has one, else ``topic``."""
    at = batch.schema.get_field_index(ROUTE)
    return batch.column(at if at >= 0 else batch.schema.get_field_index("topic"))


def count_rows(batches: Iterable[Any], counts: dict[str, int]) -> Iterator[Any]:
    """``batches`` as they are, each one's rows added to ``counts[topic]``; the ``mid-write`` test
    hook once the first batch was taken by the writer."""
    import pyarrow.compute as pc

    first = True
    for batch in batches:
        if batch.num_rows:
            for item in pc.value_counts(_topics(batch)).to_pylist():
                counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
        yield batch
        if first:
            first = False
            reached("mid-write")


class EndOnError:
    """``batches`` for pyarrow's dataset writer: the first error ends the stream (kept, not raised
    inside the writer), and :meth:`check` raises it once the writer has returned.

    An error raised into ``pyarrow.dataset.write_dataset`` from the Python iterator it reads can
    leave the writer's C++ threads and generators alive until the interpreter exits, where they
    abort the process (``terminate called without an active exception``, status 134) after the
    error line. Ended this way the writer finishes and joins its threads first; the caller then
    raises the error and aborts the sink (the files written are deleted).

    >>> def bad():
    ...     yield 1
    ...     raise ValueError("crc")
    >>> src = EndOnError(bad())
    >>> list(src)
    [1]
    >>> src.check()
    Traceback (most recent call last):
    ValueError: crc
    """

    def __init__(self, batches: Iterable[Any]) -> None:
        self._it = iter(batches)
        self.error: BaseException | None = None

    def __iter__(self) -> EndOnError:
        return self

    def __next__(self) -> Any:
        if self.error is not None:
            raise StopIteration
        try:
            return next(self._it)
        except StopIteration:
            raise
        except BaseException as exc:  # noqa: BLE001 - kept and raised by check(), after the writer
            self.error = exc
            raise StopIteration from None

    def check(self) -> None:
        """Raise the error that ended the stream, if one did."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def by_topic(batches: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """``(topic, batch)`` for each non-empty batch, a batch of several topics split by topic (its
    ``topic`` column, or :data:`ROUTE` when it has one)."""
    import pyarrow.compute as pc

    for batch in batches:
        if not batch.num_rows:
            continue
        column = _topics(batch)
        topics = pc.unique(column).to_pylist()
        for topic in topics:
            yield topic, batch if len(topics) == 1 else batch.filter(pc.equal(column, topic))


def nullable(schema: Any) -> Any:
    """``schema`` (a ``pyarrow.Schema``) with every field, at any depth, nullable (a map's keys
    excepted): the schema of a table that later runs may widen. Iceberg and Delta cannot add a
    required field to a table holding rows, and a typed value's struct has required fields
    wherever Avro's are not nullable."""
    import pyarrow as pa

    def field(f: Any) -> Any:
        return f.with_type(kind(f.type)).with_nullable(True)

    def kind(t: Any) -> Any:
        if pa.types.is_struct(t):
            return pa.struct([field(c) for c in t])
        if pa.types.is_map(t):
            return pa.map_(t.key_field, field(t.item_field))  # a map's key stays required
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(field(t.value_field)) if pa.types.is_list(t) else pa.large_list(field(t.value_field))
        return t

    return pa.schema([field(f) for f in schema], metadata=schema.metadata)


def added_columns(old: Any, new: Any) -> list[str]:
    """The columns and struct fields of ``new`` that ``old`` lacks (``pyarrow.Schema``), as dotted
    paths (``value.channel``), a field whose struct is new itself left out."""
    import pyarrow as pa

    def walk(olds: Any, news: Any, prefix: str) -> list[str]:
        have = {f.name: f for f in olds}
        out = []
        for f in news:
            if f.name not in have:
                out.append(prefix + f.name)
            elif pa.types.is_struct(f.type) and pa.types.is_struct(have[f.name].type):
                out += walk(list(have[f.name].type), list(f.type), f"{prefix}{f.name}.")
        return out

    return walk(list(old), list(new), "")


def older_rows_note(table: str, columns: list[str]) -> str:
    """The summary's note on ``columns`` added to ``table``, which holds rows: they read null there."""
    return (f"table {table}: the rows written before this run read null in {', '.join(columns)} (added now): "
            "the table keeps no value for older rows, a reader schema's default included")


def staged_files(folder: Path) -> list[tuple[str, str, Path]]:
    """``(topic, the folders under kbatch_topic=<topic>/, the file)`` of every data file another
    writer put in ``folder`` (hidden names, ``_*`` and ``.*``, left out)."""
    from urllib.parse import unquote

    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).parts
        if path.is_file() and not any(p.startswith(("_", ".")) for p in rel) and rel[0].startswith("kbatch_topic="):
            out.append((unquote(rel[0].split("=", 1)[1]), "/".join(rel[1:-1]), path))
    return out


class Sink(ABC):
    """Where converted records go: one or more tables that commit with their offsets ledger."""

    #: the format's name (``--format``)
    format: str = ""
    #: what :meth:`open` was given: one ``pyarrow.Schema`` or topic -> ``pyarrow.Schema``
    schema: Any = None

    @abstractmethod
    def committed(self) -> Ledger:
        """The ledger of what the table(s) hold now (empty for a new table)."""

    @abstractmethod
    def last_commits(self) -> list[str]:
        """The last commit of each table, in words ("snapshot 123 of kafka.orders"); empty when none."""

    @abstractmethod
    def open(self, schema: Any) -> None:
        """Get ready to take batches of ``schema``: a ``pyarrow.Schema`` (the Kafka source's
        columns) for every topic, or a mapping topic -> ``pyarrow.Schema`` when topics differ
        (typed values: each topic's value struct is its reader schema's)."""

    def schema_of(self, topic: str) -> Any:
        """The ``pyarrow.Schema`` of ``topic``'s rows (after :meth:`open`)."""
        schema = self.schema
        if isinstance(schema, Mapping):
            try:
                return schema[topic]
            except KeyError:
                raise ValueError(f"no schema was given for topic {topic!r}") from None
        return schema

    @abstractmethod
    def write(self, batches: Iterable[Any]) -> None:
        """Write ``batches`` (``pyarrow.RecordBatch``, of any topics) where no reader sees them yet."""

    @abstractmethod
    def commit(self, ledger: Ledger, converted: Ledger) -> list[TableCommit]:
        """Make everything written visible with ``ledger`` (what the tables hold after this commit);
        ``converted`` is what this run added (its offsets per partition), for the report."""

    @abstractmethod
    def abort(self) -> None:
        """Drop everything written since :meth:`open`; the tables stay at their last commit."""

    # Files written by another writer (Spark's executors), committed by this process

    def staging(self) -> Path:
        """A local folder where another writer puts Parquet files, in ``kbatch_topic=<topic>/``
        folders, then one folder level per :meth:`file_partitions` item; :meth:`commit` takes
        every file there into the tables."""
        raise NotImplementedError(f"{self.format} tables take Arrow batches only")

    def file_partitions(self) -> list[tuple[str, Transform]]:
        """The folder levels under ``kbatch_topic=<topic>/`` that :meth:`staging`'s files are split
        by: ``(column, transform)``, the column holding the transform's value."""
        return []

    def adopt(self, records: int) -> None:  # noqa: B027 - optional: the formats that count files themselves
        """Count ``records`` that another writer put where this sink commits them."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if tp is not None:
            self.abort()
