"""``kbatch convert --values avro|json|protobuf|auto``: typed values (and keys) in the written tables, dead
letters beside them.

The arrow engine's part of :mod:`kbatch.convert` for registry-framed Avro, JSON Schema and
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
    folder, storage options, Delta's partitions: :func:`kbatch.convert._sinks.table_options`), created
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

This module holds the options, their checks and the plan (:func:`plan_values`: the registry,
each topic's reader and output schemas, where dead letters go); the run's part, decoding and
the dead letters' commits, is :mod:`kbatch.convert._values`.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbatch._version import __version__
from kbatch.plan import INTERNAL_TOPICS
from kbatch.storage import is_remote, parse_options
from kbatch.tables import is_s3
from kbatch.values import (
    SAMPLE_RECORDS,
    AvroSchemaError,
    JsonSchemaError,
    ProtobufSchemaError,
    ProtoOptions,
    Registry,
    RegistryError,
    Schema,
    SchemaNotFoundError,
    connect_json_schema,
    dead_letter_schema,
    decoded_schema,
    infer_json_schema,
)

from ._values import DEAD_LETTER_DIR, ValuePlan, flatten_schema, usage

__all__ = ["TOPICS_KEY", "add_arguments", "check_arguments", "open_registry", "plan_values", "requested"]


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


# ---------------------------------------------------------------------------------------------
# Planning: the registry, the reader schemas, the output schemas


def open_registry(args: argparse.Namespace) -> Registry:
    """The registry of ``--registry`` (or ROOT's ``_schemas``); a usage error when there is none."""
    where = args.registry
    # --storage-option: the storage of a remote root (or --registry root), not of OUT's only
    storage = parse_options(getattr(args, "storage_option", None)) if is_remote(where or args.root) else {}
    if where is not None and where.startswith(("http://", "https://")):
        return Registry(where)
    if where is None:
        try:
            return Registry.from_log_dirs(args.root, recursive=args.recursive, storage_options=storage or None)
        except (RegistryError, FileNotFoundError) as exc:
            raise usage(f"--values needs schemas: {exc}; pass --registry URL|PATH") from None
    try:
        return Registry.from_path(where, recursive=args.recursive, storage_options=storage or None)
    except RegistryError as exc:
        raise usage(f"--registry {where}: {exc}") from None


def _reader_schema(text: str, registry: Registry) -> Schema:
    if text.strip().isdigit():
        try:
            return registry.schema(int(text))
        except SchemaNotFoundError as exc:
            raise usage(f"--reader-schema {text}: {exc}") from None
    if os.path.isfile(text):
        return Schema(Path(text).read_text(), "PROTOBUF" if text.endswith(".proto") else "AVRO")
    return Schema(text)


def _skipped(topic: str) -> bool:
    """Internal topics are never decoded: Kafka's, and the registry's own (``_schemas``, ``_confluent-*``)."""
    return topic in INTERNAL_TOPICS or topic.startswith("_")


#: A saved schema file of several topics: ``{TOPICS_KEY: {topic: JSON Schema}}``.
TOPICS_KEY = "x-kbatch-topics"


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
            raise usage(f"{', '.join(given)} need --values avro (or --keys avro)")
        return
    if args.format not in ("parquet", "iceberg", "delta"):
        raise usage(f"--values writes --format parquet, iceberg or delta, not {args.format}")
    if args.engine == "spark" and is_remote(args.out):
        raise usage("--values with --engine spark writes to a local OUT; an s3:// OUT is written by --engine arrow")
    if is_remote(args.out) and not is_s3(args.out):
        raise usage("--values writes to a local or s3:// OUT (the dead letters committed with the data's ledger)")
    if getattr(args, "upsert", False) and args.keys:
        raise usage("--upsert keeps one row per key by its raw bytes (what log compaction compares): it takes "
                    "binary keys, not --keys (decoded keys may differ in bytes yet be equal, or the reverse)")
    if getattr(args, "upsert", False) and args.flatten_values:
        raise usage("--upsert tells a tombstone by its null value column: it takes the value struct, not "
                    "--flatten-values")
    if args.reader_schema is not None and not args.values:
        raise usage("--reader-schema is the values' reader schema: it needs --values avro")
    if args.flatten_values and not args.values:
        raise usage("--flatten-values needs --values avro")
    for option, given in (("--value-schema", args.value_schema), ("--save-value-schema", args.save_value_schema)):
        if given is not None and args.values != "json":
            raise usage(f"{option} is the schema of JSON values: it needs --values json")
    if args.value_schema is not None and not os.path.isfile(args.value_schema):
        raise usage(f"--value-schema {args.value_schema}: no such file")
    if args.values == "json" and args.keys not in (None, "json"):
        raise usage("--values json (plain JSON) takes --keys json only")
    if args.keys == "json" and args.values not in (None, "json"):
        raise usage("--keys json (plain JSON) goes with --values json")


def plan_values(args: argparse.Namespace, topics: list[str], source: Any, logs: Iterable[Any] = ()) -> ValuePlan | None:
    """The plan of ``--values`` / ``--keys`` for the selected ``topics`` read as ``source`` (the raw
    records' ``pyarrow.Schema``); None when neither is asked. ``logs``: the partitions to read,
    where plain JSON schemas are inferred from. Raises the convert's ``UsageError``."""
    check_arguments(args)
    if not requested(args):
        return None
    if args.values == "json" and args.registry is None:
        return _plain_json_plan(args, topics, source, list(logs))
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
            schema = decoded_schema(source, values=v, keys=k, registry=registry, protobuf=_proto_options(args))
        except (AvroSchemaError, JsonSchemaError, ProtobufSchemaError) as exc:
            what = "--reader-schema" if fixed is not None else f"the latest schema of {topic}"
            raise usage(f"{what}: {exc}") from None
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


def _proto_options(args: argparse.Namespace) -> ProtoOptions | None:
    """How Protobuf values and keys decode: with ``--cdc``, as Kafka Connect's ``ProtobufConverter``
    reads them back (``ProtobufData.toConnectData``): an absent implicit-presence proto3 field is
    its default (a primary key ``0``, written as no bytes at all, is 0, not null); fields with
    presence (messages: ``before``, ``after``; ``optional``; wrappers) stay null when absent.
    Otherwise None (Spark's ``from_protobuf`` defaults: absent is null)."""
    return ProtoOptions(emit_default_values=True) if getattr(args, "cdc", None) is not None else None


def _finish(args: argparse.Namespace, registry: Registry | None,
            readers: dict[str, tuple[Schema | None, Schema | None]], schemas: dict[str, Any], source: Any,
            notes: list[str], value_format: str) -> ValuePlan:
    if args.no_partition_by_topic and len({str(s) for s in schemas.values()}) > 1:
        raise usage("--no-partition-by-topic with --values: the selected topics' columns differ (each its reader "
                    "schema's), so they cannot share one folder; convert them apart (--subscribe)")
    side, apart = _dead_letter_place(args)
    return ValuePlan(registry, readers, schemas, source, dead_letter_schema(source), args.flatten_values,
                     args.on_value_error == "fail", args.format, args.out, args.mode, apart, notes=notes,
                     side_folder=side, partition_by=args.partition_by, compression=args.compression,
                     properties={"kbatch.version": __version__, "kbatch.source-root": str(args.root)},
                     value_format=value_format, protobuf=_proto_options(args))


def _json_schema_file(path: str, topic: str | None) -> Schema:
    """The JSON Schema of ``--value-schema FILE`` (for ``topic``, in a file of several topics)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise usage(f"--value-schema {path}: {exc}") from None
    if isinstance(doc, dict) and TOPICS_KEY in doc:
        if topic is None or topic not in doc[TOPICS_KEY]:
            raise usage(f"--value-schema {path} holds the schemas of {', '.join(sorted(doc[TOPICS_KEY]))}, "
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


def _connect_schema(args: argparse.Namespace, data: bytes, starts: Any, lengths: Any) -> dict[str, Any] | None:
    """``--cdc``: the JSON Schema of Kafka Connect JSON values with their schema embedded
    (``{"schema", "payload"}``: Debezium's JSON), or None when the sampled values are not."""
    if getattr(args, "cdc", None) is None:
        return None
    view = memoryview(data)
    return connect_json_schema(bytes(view[int(s):int(s) + int(n)]) for s, n in zip(starts, lengths, strict=True))


def _plain_json_plan(args: argparse.Namespace, topics: list[str], source: Any, logs: list[Any]) -> ValuePlan:
    """``--values json`` without a registry: each topic's schema given or inferred, stated in a note."""
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
                    doc = _connect_schema(args, data, starts, lengths)
                    if doc is not None:
                        how = f"Kafka Connect JSON, the schema embedded in its first {SAMPLE_RECORDS} {column}s"
                    else:
                        doc = infer_json_schema(data, starts, lengths, column=column)
                        how = (f"a schema inferred from its first {SAMPLE_RECORDS} {column}s: "
                               f"{json.dumps(doc['properties'])}")
                except JsonSchemaError as exc:
                    raise usage(f"{topic}: {exc}; give --value-schema") from None
                reader = Schema(json.dumps(doc), "JSON")
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
            raise usage(f"{topic}: {exc}") from None
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
        raise usage("--dead-letter: a local path (for now)")
    path, out = Path(args.dead_letter).resolve(), Path(args.out).resolve()
    root = None if is_remote(args.root) else Path(args.root).resolve()
    if root is not None and (path == root or root in path.parents or path in root.parents):
        raise usage(f"--dead-letter {args.dead_letter} and the log root {args.root} overlap")
    if path == out or path in out.parents:
        raise usage(f"--dead-letter {args.dead_letter} holds OUT: name a folder beside it")
    if out in path.parents:
        rel = path.relative_to(out).parts
        if args.format != "parquet" or len(rel) != 1 or not rel[0].startswith("_"):
            raise usage(f"--dead-letter inside OUT is a hidden folder of a parquet OUT (OUT/_name), not "
                        f"{args.dead_letter}")
        return rel[0], None
    return None, str(path)
