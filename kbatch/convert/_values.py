"""``kbatch convert --values avro|json|protobuf|auto``: typed values (and keys) in the written tables, dead
letters beside them.

The arrow engine's part of :mod:`kbatch.convert._convert` for registry-framed Avro, JSON Schema and
Protobuf values and plain JSON (issues 27, 29):

- **The language**: ``--values avro`` / ``--values protobuf`` (subjects of that language; a
  topic whose subject is of another language stays binary, said in a note), ``--values auto``
  (each topic by its subject's ``schemaType``: Avro, JSON Schema or Protobuf), ``--values json``
  (plain JSON, no frame, no registry: the schema is ``--value-schema FILE``, a JSON Schema,
  else inferred per topic from its first :data:`~kbatch.values.SAMPLE_RECORDS` values, stated in
  the summary's notes and saved by ``--save-value-schema FILE``; with ``--registry``,
  registry-framed JSON Schema values).

- **The registry**: ``--registry URL`` (the REST API), ``--registry PATH`` (another ``log.dirs``
  root holding ``_schemas``, else a directory of schema files), by default the root's own
  ``_schemas`` topic (:meth:`Registry.from_log_dirs`, with the read's ``--recursive``).
- **The reader schema of each topic** (TopicNameStrategy): the latest version of subject
  ``<topic>-value`` (``<topic>-key`` for keys), or ``--reader-schema`` for every topic's values.
  A topic without that subject keeps its bytes (binary), said in one note; internal topics
  (``_schemas``, ``__consumer_offsets``, any name starting with ``_``) are never decoded.
  Each topic's output schema is known before any record is read
  (:func:`kbatch.values.decoded_schema`): the sinks are opened with a schema per topic.
- **Dead letters**: records whose value (or key) does not decode are kept raw with why
  (:func:`kbatch.values.split`, :func:`kbatch.values.dead_letter_schema`):

  - Parquet: in ``OUT/_dead_letter/topic=<t>/`` (``--dead-letter`` may name another hidden
    folder of OUT), committed in the same ledger commit as the data: a run killed at any
    point commits both or neither;
  - Iceberg, Delta: a table ``<topic>__dead_letter`` beside each topic's table (same catalog or
    folder, storage options, Delta's partitions: :func:`kbatch.convert._convert.table_options`), created
    when a topic first has dead letters;
  - ``s3://`` OUT: Parquet's dead letters staged beside the data, named by the same ledger object;
  - ``--dead-letter PATH`` outside OUT: a Parquet folder with a ledger of its own.

  A dead-letter table apart from the data is committed just *before* the data, carrying the
  same offsets ledger; a record whose offset its dead-letter table's ledger already holds is
  not written again. So a run killed between the two commits, then run again, neither loses
  nor duplicates a dead letter.
- ``--on-value-error fail``: the first bad value stops the run (its one-line error, status 1),
  nothing committed.
- ``--flatten-values``: the value struct's fields as top-level columns ``value_<field>``.
- ``--upsert``: one row per raw key (binary keys only: compaction compares bytes), the latest
  value that decoded; a dead letter neither replaces nor deletes its key's row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbatch._version import __version__
from kbatch.errors import CommitConflictError, TableError
from kbatch.plan import INTERNAL_TOPICS, ROOT_COLUMN
from kbatch.storage import is_remote, parse_options
from kbatch.tables import FolderSink, Ledger, RemoteFolderSink, Sink, TableCommit, by_topic, is_s3, open_sink, reached

from ._errors import UsageError

if TYPE_CHECKING:  # kbatch.values needs pyarrow and numpy: imported when --values is used
    from kbatch.values import Registry, Schema

__all__ = [
    "DEAD_LETTER_DIR",
    "DEAD_LETTER_SUFFIX",
    "ValuePlan",
    "add_arguments",
    "check_arguments",
    "flatten_schema",
    "flatten_values",
    "plan_values",
    "requested",
]

#: Where the Parquet format keeps dead letters by default: a hidden folder of OUT.
DEAD_LETTER_DIR = "_dead_letter"
#: The dead-letter table of topic ``t`` in Iceberg and Delta: ``t__dead_letter``.
DEAD_LETTER_SUFFIX = "__dead_letter"
#: The commonest errors a summary names.
COMMONEST = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the typed-values options to ``kbatch convert``'s parser."""
    g = parser.add_argument_group(
        "typed values (formats parquet, iceberg, delta; --engine arrow: a local or s3:// OUT; --engine spark: local)",
        "Confluent-framed Avro values (and keys) decoded into a struct column laid out by the reader schema "
        "(Spark's from_avro types), with value_schema_id (the writer's id). Records that do not decode are "
        "dead letters, kept raw with the error: OUT/_dead_letter/ for parquet (hidden from readers of OUT, "
        "committed with the data), a table <topic>__dead_letter for iceberg and delta. See docs/values.md.")
    g.add_argument("--values", choices=("avro", "json", "protobuf", "auto"), default=None,
                   help="decode the values: avro or protobuf (Confluent framing: 0x00 + schema id, or the GUID forms; "
                        "Protobuf's message indexes after it), auto (each topic by its subject's schemaType: Avro, "
                        "JSON Schema or Protobuf), json (plain JSON without a registry: --value-schema FILE or a "
                        "schema inferred from each topic's first values; with --registry: registry-framed JSON "
                        "Schema values)")
    g.add_argument("--keys", choices=("avro", "json", "protobuf", "auto"), default=None,
                   help="decode the keys too (subject <topic>-key; json: plain JSON keys, schema inferred)")
    g.add_argument("--value-schema", default=None, metavar="FILE",
                   help="--values json: the values' JSON Schema (a file --save-value-schema wrote, or any JSON "
                        "Schema); default: inferred from each topic's first values")
    g.add_argument("--save-value-schema", default=None, metavar="FILE",
                   help="--values json: write the values' JSON Schema (inferred or given) to FILE, for --value-schema "
                        "next time (several topics: one schema per topic in one file)")
    g.add_argument("--registry", default=None, metavar="URL|PATH",
                   help="the schemas: a registry's REST URL (http[s]://...), another log.dirs root with a _schemas "
                        "topic, or a directory of schema files; default: ROOT's own _schemas topic")
    g.add_argument("--reader-schema", default=None, metavar="ID|FILE|TEXT",
                   help="the reader schema of every topic's values: a schema id, an .avsc or .proto file or Avro "
                        "schema text; "
                        "default: per topic, the latest version of subject <topic>-value (a topic without it stays "
                        "binary, said in a note)")
    g.add_argument("--dead-letter", default=None, metavar="PATH",
                   help="where records whose value does not decode go: default OUT/_dead_letter (parquet) or a table "
                        "<topic>__dead_letter beside each topic's (iceberg, delta); a hidden folder of OUT (_name) is "
                        "committed with the data, any other PATH is a Parquet folder with a ledger of its own")
    g.add_argument("--on-value-error", choices=("dead-letter", "fail"), default="dead-letter",
                   help="dead-letter (default): keep the bad record raw with its error, the run succeeds; fail: "
                        "stop at the first one (status 1), nothing committed")
    g.add_argument("--flatten-values", action="store_true",
                   help="the value struct's fields as top-level columns named value_<field> instead of one struct")


def requested(args: argparse.Namespace) -> bool:
    """Whether the command line asks for typed values or keys."""
    return bool(getattr(args, "values", None) or getattr(args, "keys", None))


def _usage(message: str) -> UsageError:
    return UsageError(message)


# ---------------------------------------------------------------------------------------------
# Planning: the registry, the reader schemas, the output schemas


def open_registry(args: argparse.Namespace) -> Registry:
    """The registry of ``--registry`` (or ROOT's ``_schemas``); a usage error when there is none."""
    from kbatch.values import Registry, RegistryError

    where = args.registry
    # --storage-option: the storage of a remote root (or --registry root), not of OUT's only
    storage = parse_options(getattr(args, "storage_option", None)) if is_remote(where or args.root) else {}
    if where is not None and where.startswith(("http://", "https://")):
        return Registry(where)
    if where is None:
        try:
            return Registry.from_log_dirs(args.root, recursive=args.recursive, storage_options=storage or None)
        except (RegistryError, FileNotFoundError) as exc:
            raise _usage(f"--values needs schemas: {exc}; pass --registry URL|PATH") from None
    try:
        return Registry.from_path(where, recursive=args.recursive, storage_options=storage or None)
    except RegistryError as exc:
        raise _usage(f"--registry {where}: {exc}") from None


def _reader_schema(text: str, registry: Registry) -> Schema:
    from kbatch.values import Schema, SchemaNotFoundError

    if text.strip().isdigit():
        try:
            return registry.schema(int(text))
        except SchemaNotFoundError as exc:
            raise _usage(f"--reader-schema {text}: {exc}") from None
    if os.path.isfile(text):
        return Schema(Path(text).read_text(), "PROTOBUF" if text.endswith(".proto") else "AVRO")
    return Schema(text)


def _skipped(topic: str) -> bool:
    """Internal topics are never decoded: Kafka's, and the registry's own (``_schemas``, ``_confluent-*``)."""
    return topic in INTERNAL_TOPICS or topic.startswith("_")


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
        raise _usage(f"--flatten-values: the column(s) {', '.join(clash)} would be there twice")
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


#: A saved schema file of several topics: ``{TOPICS_KEY: {topic: JSON Schema}}``.
TOPICS_KEY = "x-kbatch-topics"


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
    #: storage options): set by the convert (:func:`kbatch.convert._convert.table_options`)
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
        from kbatch import values

        for batch in batches:
            for topic, part in by_topic([batch]):
                readers = self.readers.get(topic)
                if readers is None:
                    yield part
                    continue
                good, dead = values.split(part, self.registry, values=readers[0], keys=readers[1],
                                          on_error="raise" if self.fail else "dead-letter", format=self.value_format)
                if dead.num_rows:
                    self.set_aside(dead)
                if self.flatten:
                    good = flatten_values(good)
                yield from good.to_batches()

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


def check_arguments(args: argparse.Namespace) -> None:
    """The typed-values options checked on their own (before any work); raise the convert's ``UsageError``."""
    if not requested(args):
        given = [name for name, on in (("--registry", args.registry), ("--reader-schema", args.reader_schema),
                                       ("--value-schema", args.value_schema),
                                       ("--save-value-schema", args.save_value_schema),
                                       ("--dead-letter", args.dead_letter),
                                       ("--on-value-error", args.on_value_error != "dead-letter"),
                                       ("--flatten-values", args.flatten_values)) if on]
        if given:
            raise _usage(f"{', '.join(given)} need --values avro (or --keys avro)")
        return
    if args.format not in ("parquet", "iceberg", "delta"):
        raise _usage(f"--values writes --format parquet, iceberg or delta, not {args.format}")
    if args.engine == "spark" and is_remote(args.out):
        raise _usage("--values with --engine spark writes to a local OUT; an s3:// OUT is written by --engine arrow")
    if is_remote(args.out) and not is_s3(args.out):
        raise _usage("--values writes to a local or s3:// OUT (the dead letters committed with the data's ledger)")
    if getattr(args, "upsert", False) and args.keys:
        raise _usage("--upsert keeps one row per key by its raw bytes (what log compaction compares): it takes "
                     "binary keys, not --keys (decoded keys may differ in bytes yet be equal, or the reverse)")
    if getattr(args, "upsert", False) and args.flatten_values:
        raise _usage("--upsert tells a tombstone by its null value column: it takes the value struct, not "
                     "--flatten-values")
    if args.reader_schema is not None and not args.values:
        raise _usage("--reader-schema is the values' reader schema: it needs --values avro")
    if args.flatten_values and not args.values:
        raise _usage("--flatten-values needs --values avro")
    for option, given in (("--value-schema", args.value_schema), ("--save-value-schema", args.save_value_schema)):
        if given is not None and args.values != "json":
            raise _usage(f"{option} is the schema of JSON values: it needs --values json")
    if args.value_schema is not None and not os.path.isfile(args.value_schema):
        raise _usage(f"--value-schema {args.value_schema}: no such file")
    if args.values == "json" and args.keys not in (None, "json"):
        raise _usage("--values json (plain JSON) takes --keys json only")
    if args.keys == "json" and args.values not in (None, "json"):
        raise _usage("--keys json (plain JSON) goes with --values json")


def plan_values(args: argparse.Namespace, topics: list[str], source: Any, logs: Iterable[Any] = ()) -> ValuePlan | None:
    """The plan of ``--values`` / ``--keys`` for the selected ``topics`` read as ``source`` (the raw
    records' ``pyarrow.Schema``); None when neither is asked. ``logs``: the partitions to read,
    where plain JSON schemas are inferred from. Raises the convert's ``UsageError``."""
    check_arguments(args)
    if not requested(args):
        return None
    if args.values == "json" and args.registry is None:
        return _plain_json_plan(args, topics, source, list(logs))
    from kbatch.values import (
        AvroSchemaError,
        JsonSchemaError,
        ProtobufSchemaError,
        SchemaNotFoundError,
        decoded_schema,
    )

    registry = open_registry(args)
    fixed = _reader_schema(args.reader_schema, registry) if args.reader_schema is not None else None
    if args.value_schema is not None:
        fixed = _json_schema_file(args.value_schema, None)
    wanted = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
    other: dict[str, list[str]] = {}
    readers: dict[str, tuple[Schema | None, Schema | None]] = {}
    binary: dict[str, list[str]] = {"value": [], "key": []}
    internal = []
    for topic in topics:
        if _skipped(topic):
            internal.append(topic)
            continue
        pair: list[Schema | None] = []
        for column, on in (("value", args.values), ("key", args.keys)):
            reader = fixed if column == "value" else None
            if on and reader is None:
                try:
                    reader = registry.latest(f"{topic}-{column}")
                except SchemaNotFoundError:
                    binary[column].append(topic)
            kind = wanted.get(on or "", "")
            refused = reader is not None and (reader.schema_type not in ("AVRO", "JSON", "PROTOBUF")
                                              or (kind and reader.schema_type != kind))
            if reader is not None and refused:
                other.setdefault(reader.schema_type, []).append(f"{topic} ({column}s)")
                reader = None
            pair.append(reader if on else None)
        if pair[0] is not None or pair[1] is not None:
            readers[topic] = (pair[0], pair[1])
    schemas: dict[str, Any] = {}
    notes = []
    for topic in topics:
        if topic not in readers:
            schemas[topic] = source
            continue
        v, k = readers[topic]
        try:
            schema = decoded_schema(source, values=v, keys=k, registry=registry)
        except (AvroSchemaError, JsonSchemaError, ProtobufSchemaError) as exc:
            what = "--reader-schema" if fixed is not None else f"the latest schema of {topic}"
            raise _usage(f"{what}: {exc}") from None
        schemas[topic] = flatten_schema(schema) if args.flatten_values else schema
        for column, reader in (("values", v), ("keys", k)):
            if reader is not None:
                named = f"{reader.subject} version {reader.version}" if reader.subject else "--reader-schema"
                notes.append(f"{topic}: {column} decoded with {named}" + (f" (id {reader.id})" if reader.id else ""))
    for column, names in binary.items():
        if names:
            notes.append(f"{column}s left binary (no subject <topic>-{column} in the registry"
                         f"{' and no --reader-schema' if column == 'value' else ''}): {', '.join(names)}")
    for kind, names in other.items():
        notes.append(f"left binary, their subject's schemas being {kind} (not --values {args.values}): "
                     f"{', '.join(names)}")
    if internal:
        notes.append(f"internal topics never decoded: {', '.join(internal)}")
    return _finish(args, registry, readers, schemas, source, notes, "json" if args.values == "json" else "auto")


def _finish(args: argparse.Namespace, registry: Registry | None,
            readers: dict[str, tuple[Schema | None, Schema | None]], schemas: dict[str, Any], source: Any,
            notes: list[str], value_format: str) -> ValuePlan:
    from kbatch.values import dead_letter_schema

    if args.no_partition_by_topic and len({str(s) for s in schemas.values()}) > 1:
        raise _usage("--no-partition-by-topic with --values: the selected topics' columns differ (each its reader "
                     "schema's), so they cannot share one folder; convert them apart (--subscribe)")
    side, apart = _dead_letter_place(args)
    return ValuePlan(registry, readers, schemas, source, dead_letter_schema(source), args.flatten_values,
                     args.on_value_error == "fail", args.format, args.out, args.mode, apart, notes=notes,
                     side_folder=side, partition_by=args.partition_by, compression=args.compression,
                     properties={"kbatch.version": __version__, "kbatch.source-root": str(args.root)},
                     value_format=value_format)


def _json_schema_file(path: str, topic: str | None) -> Schema:
    """The JSON Schema of ``--value-schema FILE`` (for ``topic``, in a file of several topics)."""
    from kbatch.values import Schema

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise _usage(f"--value-schema {path}: {exc}") from None
    if isinstance(doc, dict) and TOPICS_KEY in doc:
        if topic is None or topic not in doc[TOPICS_KEY]:
            raise _usage(f"--value-schema {path} holds the schemas of {', '.join(sorted(doc[TOPICS_KEY]))}, "
                         f"not of {topic}")
        doc = doc[TOPICS_KEY][topic]
    return Schema(json.dumps(doc), "JSON")


def _sample(logs: list[Any], topic: str, column: str, count: int) -> tuple[bytes, Any, Any]:
    """The first ``count`` non-null ``column``s of ``topic`` (its partitions in order) as
    ``(data, starts, lengths)``."""
    import numpy as np

    bodies: list[bytes] = []
    for log in sorted((d for d in logs if d.topic == topic), key=lambda d: d.partition):
        for table in log.iter_tables(chunk_bytes=1 << 20, on_corruption="skip"):
            bodies += [b for b in (table.values() if column == "value" else table.keys()) if b is not None]
            if len(bodies) >= count:
                break
        if len(bodies) >= count:
            break
    bodies = bodies[:count]
    lengths = np.array([len(b) for b in bodies], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if bodies else lengths
    return b"".join(bodies), starts, lengths


def _plain_json_plan(args: argparse.Namespace, topics: list[str], source: Any, logs: list[Any]) -> ValuePlan:
    """``--values json`` without a registry: each topic's schema given or inferred, stated in a note."""
    from kbatch.values import SAMPLE_RECORDS, JsonSchemaError, Schema, decoded_schema, infer_json_schema

    readers: dict[str, tuple[Schema | None, Schema | None]] = {}
    schemas: dict[str, Any] = {}
    notes: list[str] = []
    saved: dict[str, Any] = {}
    for topic in topics:
        if _skipped(topic):
            schemas[topic] = source
            continue
        pair: list[Schema | None] = []
        for column, on in (("value", args.values), ("key", args.keys)):
            if not on:
                pair.append(None)
                continue
            if column == "value" and args.value_schema is not None:
                reader = _json_schema_file(args.value_schema, topic)
                how = f"--value-schema {args.value_schema}"
            else:
                data, starts, lengths = _sample(logs, topic, column, SAMPLE_RECORDS)
                if not len(lengths):  # nothing to infer from (and nothing to decode): left binary
                    notes.append(f"{topic}: {column}s left binary (no {column} to infer a JSON Schema from)")
                    pair.append(None)
                    continue
                try:
                    doc = infer_json_schema(data, starts, lengths, column=column)
                except JsonSchemaError as exc:
                    raise _usage(f"{topic}: {exc}; give --value-schema") from None
                reader = Schema(json.dumps(doc), "JSON")
                how = f"a schema inferred from its first {SAMPLE_RECORDS} {column}s: {json.dumps(doc['properties'])}"
            if column == "value":
                saved[topic] = json.loads(reader.text)
            notes.append(f"{topic}: {column}s plain JSON, {how}")
            pair.append(reader)
        if pair[0] is None and pair[1] is None:
            schemas[topic] = source
            continue
        readers[topic] = (pair[0], pair[1])
        try:
            schema = decoded_schema(source, values=pair[0], keys=pair[1], format="json")
        except JsonSchemaError as exc:
            raise _usage(f"{topic}: {exc}") from None
        schemas[topic] = flatten_schema(schema) if args.flatten_values else schema
    if args.save_value_schema is not None:
        doc = next(iter(saved.values())) if len(saved) == 1 else {TOPICS_KEY: saved}
        Path(args.save_value_schema).write_text(json.dumps(doc, indent=2) + "\n")
        notes.append(f"values' JSON Schema saved to {args.save_value_schema}")
    return _finish(args, None, readers, schemas, source, notes, "json")


def _dead_letter_place(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(hidden folder of OUT, folder apart)`` of the dead letters (both None: the tables beside)."""
    if args.dead_letter is None:
        return (DEAD_LETTER_DIR, None) if args.format == "parquet" else (None, None)
    if is_remote(args.dead_letter):
        raise _usage("--dead-letter: a local path (for now)")
    path, out = Path(args.dead_letter).resolve(), Path(args.out).resolve()
    root = None if is_remote(args.root) else Path(args.root).resolve()
    if root is not None and (path == root or root in path.parents or path in root.parents):
        raise _usage(f"--dead-letter {args.dead_letter} and the log root {args.root} overlap")
    if path == out or path in out.parents:
        raise _usage(f"--dead-letter {args.dead_letter} holds OUT: name a folder beside it")
    if out in path.parents:
        rel = path.relative_to(out).parts
        if args.format != "parquet" or len(rel) != 1 or not rel[0].startswith("_"):
            raise _usage(f"--dead-letter inside OUT is a hidden folder of a parquet OUT (OUT/_name), not "
                         f"{args.dead_letter}")
        return rel[0], None
    return None, str(path)
