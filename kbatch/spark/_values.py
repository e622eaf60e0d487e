"""Typed values in Spark: :func:`decode_values` and the ``kafka-log`` source's ``valueFormat``
(``avro``, ``json``, ``protobuf``).

Both decode with :func:`kbatch.values.decode`, one Arrow batch at a time, in the executors. What
Spark must know before it reads (the output's schema) comes from the reader schema, fixed on the
driver (:func:`kbatch.values.reader_schema`): a schema named by id or text, or the latest version
of the topic's subject (``<topic>-value``, Confluent's ``TopicNameStrategy``). The registry goes
to the executors once (a broadcast, or with the reader object of the data source), carrying what
the driver already fetched; an executor fetches a writer schema it meets at most once per
process (:class:`kbatch.values.Registry`'s cache), never per batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from kbatch import values
from kbatch.values import ProtoOptions, ProtoSchema, Registry, Schema

__all__ = ["Decoding", "SourceValues", "decode_batch", "decode_values", "decoded_struct", "open_registry",
           "ship", "source_values", "spark_type"]

ERRORS = ("raise", "null")
FORMATS = ("binary", "avro", "json", "protobuf")
#: the ``kafka-log`` options that are Spark ``from_protobuf``'s, and the ProtoOptions field each sets
PROTOBUF_OPTIONS = {"enums.as.ints": "enums_as_ints", "emit.default.values": "emit_default_values",
                    "recursive.fields.max.depth": "recursive_depth", "messagename": "message",
                    "convert.any.fields.to.json": "any_as_json"}


def spark_type(arrow: pa.DataType) -> Any:
    """The Spark type of an Arrow type (a timestamp without time zone is ``TimestampNTZType``)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow, prefer_timestamp_ntz=True)


@dataclass(frozen=True)
class Decoding:
    """One column to decode (``"value"`` or ``"key"``): its reader schema, error mode and mapping;
    the values' ``format`` (``auto``: by the reader's ``schemaType``), Protobuf's options, and
    ``plain``: JSON with no frame and no registry (the reader is its JSON Schema)."""

    column: str
    reader: Schema | ProtoSchema
    errors: str = "raise"
    mapping: str = "spark"
    max_depth: int | None = None
    format: str = "auto"
    protobuf: ProtoOptions | None = None
    plain: bool = False

    def __post_init__(self) -> None:
        if self.column not in ("value", "key"):
            raise ValueError(f"column must be 'value' or 'key', got {self.column!r}")
        if self.errors not in ERRORS:
            raise ValueError(f"errors must be 'raise' or 'null', got {self.errors!r}")

    def arrow_fields(self) -> list[pa.Field]:
        """The columns that replace :attr:`column`: the struct, ``<column>_schema_id`` and, with
        ``errors="null"``, ``<column>_error``, as :func:`kbatch.values.decode` gives them."""
        out = [pa.field(self.column, values.arrow_type(self.reader, self.mapping, self.max_depth, self.protobuf)),
               pa.field(f"{self.column}_schema_id", pa.int32())]
        if self.errors == "null":
            out.append(pa.field(f"{self.column}_error", pa.string()))
        return out


def decoded_struct(schema: Any, decodings: Sequence[Decoding]) -> Any:
    """``schema`` (a Spark ``StructType`` holding the decoded columns as binary) with each
    decoded column replaced by :meth:`Decoding.arrow_fields` in Spark's types.

    Raises
    ------
    ValueError
        A decoded column is missing, or a column it adds is already there.
    """
    from pyspark.sql.types import StructField, StructType

    names = schema.fieldNames()
    by_column = {d.column: d for d in decodings}
    for decoding in decodings:
        if decoding.column not in names:
            raise ValueError(f"no column {decoding.column!r} to decode in {names}")
        for f in decoding.arrow_fields()[1:]:
            if f.name in names:
                raise ValueError(f"column {f.name!r} is already there: rename it before decoding "
                                 f"{decoding.column!r}")
    fields = []
    for f in schema.fields:
        d = by_column.get(f.name)
        if d is None:
            fields.append(f)
        else:
            fields += [StructField(a.name, spark_type(a.type), True) for a in d.arrow_fields()]
    return StructType(fields)


def decode_batch(batch: pa.RecordBatch, registry: Registry | None, decodings: Sequence[Decoding]) -> pa.RecordBatch:
    """One Arrow batch with kbatch's Kafka columns, its ``decodings`` applied
    (:func:`kbatch.values.decode`)."""
    table = pa.Table.from_batches([batch])
    for d in decodings:
        table = values.decode(table, None if d.plain else registry, d.column, d.reader, d.errors,  # type: ignore[arg-type]
                              d.mapping, max_depth=d.max_depth, format=d.format, protobuf=d.protobuf)
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)


def decode_values(
    df: Any,
    registry: Registry | None,
    column: str = "value",
    reader_schema: Schema | ProtoSchema | int | str | None = None,
    errors: str = "raise",
    mapping: str = "spark",
    *,
    topic: str | None = None,
    max_depth: int | None = None,
    format: str = "auto",
    protobuf: ProtoOptions | None = None,
) -> Any:
    """Decode a DataFrame's Avro, JSON Schema or Protobuf values (or keys), or plain JSON, into a
    typed struct column, with ``mapInArrow``.

    The DataFrame has kbatch's Kafka columns (the ``kafka-log`` source's, or Spark's Kafka
    source's): ``column`` binary, and ``headers`` (for the header framing), ``offset``,
    ``partition``, ``topic`` when present (error messages name them). Each Arrow batch is
    decoded by :func:`kbatch.values.decode` in the executors.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    registry : kbatch.values.Registry or None
        Sent to the executors once (a broadcast; with Spark Connect, in the function's
        closure), with the schemas the driver fetched. None: plain JSON (``format="json"``
        and a JSON Schema as ``reader_schema``).
    column : {"value", "key"}
    reader_schema : Schema, ProtoSchema, int, str or None
        The output's layout: a :class:`~kbatch.values.Schema`, a compiled
        :class:`~kbatch.values.ProtoSchema`, a schema id, or schema text (Avro; JSON Schema or
        ``.proto`` text with ``format="json"`` / ``"protobuf"``). Spark needs it before
        reading, so when None ``topic`` must be given: the latest version of its subject
        (``<topic>-value`` / ``<topic>-key``) is taken.
    errors : {"raise", "null"}
        ``"raise"``: the task fails with :class:`~kbatch.errors.ValueDecodeError` for the first
        value that does not decode. ``"null"``: its value is null and ``<column>_error`` says
        why.
    mapping : {"spark"}
        Spark's types (those of ``from_avro``): the only mapping Spark takes.
    topic : str, optional
        The topic whose subject's latest schema lays the values out when ``reader_schema`` is
        None.
    max_depth : int, optional
        How deep a recursive record is kept (``from_avro``'s ``recursiveFieldMaxDepth``);
        None refuses a recursive reader schema.
    format : {"auto", "avro", "json", "protobuf"}
        The values' language (``"auto"``: the reader schema's ``schemaType``); the reader schema
        must be of it.
    protobuf : ProtoOptions, optional
        For Protobuf values: ``from_protobuf``'s options (``enums.as.ints``,
        ``emit.default.values``, ``recursive.fields.max.depth``, ``convert.any.fields.to.json``)
        and the message.

    Returns
    -------
    pyspark.sql.DataFrame
        ``df`` with ``column`` replaced by the struct, then ``<column>_schema_id`` (int, the
        writer schema id) and, with ``errors="null"``, ``<column>_error`` (string).

    Raises
    ------
    kbatch.values.AvroSchemaError, JsonSchemaError, ProtobufSchemaError
        No reader schema named (and no topic), or one not of ``format``'s language.
    """
    if mapping != "spark":
        raise ValueError(f"Spark takes mapping='spark' (from_avro's types), got {mapping!r}")
    plain = registry is None
    if plain and format != "json":
        raise ValueError("a registry is needed, except for plain JSON values (format='json')")
    if plain and reader_schema is None:
        raise values.JsonSchemaError("plain JSON in Spark needs its JSON Schema as reader_schema (the output's "
                                     "type is fixed before reading)")
    subject = values.topic_subject(topic, column) if topic is not None else None
    reader = values.reader_schema(registry, reader_schema, subject=subject, format=format)
    decoding = Decoding(column, reader, errors, mapping, max_depth, format, protobuf, plain)
    out = decoded_struct(df.schema, [decoding])
    shipped = ship(df, registry)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reg = shipped()
        for batch in batches:
            yield decode_batch(batch, reg, [decoding])

    return df.mapInArrow(decode, out)


def ship(df: Any, registry: Registry | None) -> Callable[[], Registry | None]:
    """The registry for the executors: a broadcast (unpickled once per Python worker), or with
    Spark Connect (no SparkContext) the registry itself, in the closure."""
    try:
        broadcast = df.sparkSession.sparkContext.broadcast(registry)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: the closure carries it
        return lambda: registry
    return lambda: broadcast.value


# ---------------------------------------------------------------------------------------------
# The kafka-log source's options


@dataclass(frozen=True)
class SourceValues:
    """What a ``kafka-log`` read decodes: the registry and a :class:`Decoding` per column."""

    registry: Registry | None
    decodings: tuple[Decoding, ...]

    def struct(self, schema: Any) -> Any:
        """The source's ``schema`` with the decoded columns (:func:`decoded_struct`)."""
        return decoded_struct(schema, self.decodings)

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch decoded (in the executor that reads it)."""
        for batch in batches:
            yield decode_batch(batch, self.registry, self.decodings)


def _choice(raw: Mapping[str, str], name: str, allowed: Sequence[str], default: str) -> str:
    value = raw.get(name.lower(), default).strip().lower()
    if value not in allowed:
        raise ValueError(f"option {name} must be {' or '.join(allowed)}, got {raw[name.lower()]!r}")
    return value


def open_registry(raw: Mapping[str, str], root: str, *, recursive: bool = False,
                  storage_options: dict[str, Any] | None = None) -> Registry:
    """The registry the options name (keys lower-cased): ``schemaRegistry.url`` (REST, with
    ``schemaRegistry.basic.auth.user.info`` ``user:password``, ``schemaRegistry.bearer.auth.token``,
    ``schemaRegistry.ssl.ca.location``), ``schemaRegistry.path`` (a ``log.dirs`` root holding
    ``_schemas``, else a directory of schema files: :meth:`Registry.from_path`), or by default
    ``root``'s own ``_schemas``."""
    url, path = raw.get("schemaregistry.url"), raw.get("schemaregistry.path")
    if url and path:
        raise ValueError("give schemaRegistry.url or schemaRegistry.path, not both")
    if url:
        info = raw.get("schemaregistry.basic.auth.user.info")
        auth = tuple(info.split(":", 1)) if info else None
        if auth is not None and len(auth) != 2:
            raise ValueError("option schemaRegistry.basic.auth.user.info must be user:password")
        return Registry(url, auth=auth, token=raw.get("schemaregistry.bearer.auth.token"),
                        cafile=raw.get("schemaregistry.ssl.ca.location"))
    if path:
        return Registry.from_path(path, recursive=recursive, storage_options=storage_options)
    return Registry.from_log_dirs(root, recursive=recursive, storage_options=storage_options)


def source_values(raw: Mapping[str, str], root: str, topics: Callable[[], Sequence[str]], *,
                  recursive: bool = False, storage_options: dict[str, Any] | None = None) -> SourceValues | None:
    """The ``kafka-log`` options ``valueFormat`` / ``keyFormat`` (``binary``, the default,
    ``avro``, ``json`` or ``protobuf``) and the rest (keys lower-cased), or None when nothing is
    decoded.

    The reader schema: ``readerSchema`` (``keyReaderSchema`` for keys), a schema id, or schema
    text in the format's language (Avro, JSON Schema, ``.proto``) or a local file holding it (for
    Protobuf with ``messageName``: a ``.proto`` file with its imports beside it, or a descriptor
    set file, as ``from_protobuf``'s ``descFilePath``); by
    default the latest version of the subject of the one topic read (``topics()``, called only
    then). ``json`` with ``valueSchema`` (``keySchema``: JSON Schema text or a file): plain JSON,
    no frame and no registry. ``valueErrors`` / ``keyErrors``: ``raise`` (default) or ``null``.
    ``recursiveFieldMaxDepth``: how deep recursive records are kept (as ``from_avro``'s option).
    Protobuf: ``from_protobuf``'s ``enums.as.ints``, ``emit.default.values``,
    ``recursive.fields.max.depth``, ``convert.any.fields.to.json`` and ``messageName``.
    """
    wanted = [(column, _choice(raw, f"{column}Format", FORMATS, "binary")) for column in ("key", "value")]
    formats = {c: f for c, f in wanted if f != "binary"}
    if not formats:
        for name in ("readerschema", "keyreaderschema", "valueerrors", "keyerrors", "schemaregistry.url",
                     "schemaregistry.path", "recursivefieldmaxdepth", "valueschema", "keyschema", *PROTOBUF_OPTIONS):
            if name in raw:
                raise ValueError(f"option {name} is for valueFormat or keyFormat avro, json or protobuf")
        return None
    for column in ("value", "key"):
        if f"{column}schema" in raw and formats.get(column) != "json":
            raise ValueError(f"option {column}Schema (a plain JSON schema) is for {column}Format=json")
    if any(name in raw for name in PROTOBUF_OPTIONS) and "protobuf" not in formats.values():
        raise ValueError("options enums.as.ints, emit.default.values, recursive.fields.max.depth and messageName "
                         "are for valueFormat=protobuf or keyFormat=protobuf")
    plain = {c for c in formats if f"{c}schema" in raw}
    registry = None if set(formats) <= plain else open_registry(raw, root, recursive=recursive,
                                                                storage_options=storage_options)
    value_errors = _choice(raw, "valueErrors", ERRORS, "raise")
    depth = raw.get("recursivefieldmaxdepth")
    try:
        max_depth = None if depth is None else int(depth)
    except ValueError:
        raise ValueError(f"option recursiveFieldMaxDepth must be an integer, got {depth!r}") from None
    protobuf = _protobuf_options(raw) if "protobuf" in formats.values() else None
    message = protobuf.message if protobuf is not None else None
    decodings = []
    for column, fmt in formats.items():
        errors = value_errors if column == "value" else _choice(raw, "keyErrors", ERRORS, value_errors)
        if column in plain:
            plain_schema = _schema_text(raw[f"{column}schema"])
            decodings.append(Decoding(column, values.reader_schema(None, plain_schema, format="json"), errors,
                                      format="json", plain=True))
            continue
        option = "readerSchema" if column == "value" else "keyReaderSchema"
        text = raw.get(option.lower())
        given: str | ProtoSchema | None = text
        subject = None
        if text is None:
            names = sorted(set(topics()))
            if len(names) != 1:
                raise ValueError(f"{column}Format={fmt}: name the reader schema ({option}: an id or schema "
                                 f"text) or read one topic (subscribe), whose subject's latest version is taken; "
                                 f"topics read: {', '.join(names) or 'none'}")
            subject = values.topic_subject(names[0], column)
        elif fmt == "protobuf" and _is_file(text) and (message or not text.strip().endswith(".proto")):
            if not message:
                raise ValueError(f"{option} {text}: a descriptor set needs messageName (as from_protobuf's)")
            given = values.load_proto(text.strip(), message)  # with its imports, or a descriptor set
        else:
            given = _schema_text(text)
        decodings.append(Decoding(column, values.reader_schema(registry, given, subject=subject, format=fmt), errors,
                                  max_depth=max_depth, format=fmt,
                                  protobuf=protobuf if fmt == "protobuf" else None))
    return SourceValues(registry, tuple(decodings))


def _protobuf_options(raw: Mapping[str, str]) -> ProtoOptions:
    """``from_protobuf``'s options among ``raw`` (keys lower-cased) as :class:`ProtoOptions`."""
    got: dict[str, Any] = {}
    for name, field in PROTOBUF_OPTIONS.items():
        if name not in raw:
            continue
        text = raw[name].strip()
        if field == "message":
            got[field] = text
        elif field == "recursive_depth":
            try:
                got[field] = int(text)
            except ValueError:
                raise ValueError(f"option {name} must be an integer, got {text!r}") from None
        elif text.lower() in ("true", "false"):
            got[field] = text.lower() == "true"
        else:
            raise ValueError(f"option {name} must be true or false, got {text!r}")
    return ProtoOptions(**got)


def _is_file(given: str) -> bool:
    text = given.strip()
    return not text.isdigit() and not text.startswith(("{", "[", '"')) and "\n" not in text and os.path.isfile(text)


def _schema_text(given: str) -> str:
    """A schema option's text: itself (an id or schema text), or the local file it names."""
    return Path(given.strip()).read_text(encoding="utf-8") if _is_file(given) else given
