"""Typed values in Spark: :func:`decode_values` and the ``kafka-log`` source's ``valueFormat=avro``.

Both decode with :func:`kbatch.values.decode`, one Arrow batch at a time, in the executors. What
Spark must know before it reads (the output's schema) comes from the reader schema, fixed on the
driver (:func:`kbatch.values.reader_schema`): a schema named by id or text, or the latest version
of the topic's subject (``<topic>-value``, Confluent's ``TopicNameStrategy``). The registry goes
to the executors once (a broadcast, or with the reader object of the data source), carrying what
the driver already fetched; an executor fetches a writer schema it meets at most once per
process (:class:`kbatch.values.Registry`'s cache), never per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kbatch import values
from kbatch.values import Registry, Schema

__all__ = ["Decoding", "SourceValues", "decode_batch", "decode_values", "decoded_struct", "open_registry",
           "ship", "source_values", "spark_type"]

ERRORS = ("raise", "null")
FORMATS = ("binary", "avro")


def spark_type(arrow: pa.DataType) -> Any:
    """The Spark type of an Arrow type (a timestamp without time zone is ``TimestampNTZType``)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow, prefer_timestamp_ntz=True)


@dataclass(frozen=True)
class Decoding:
    """One column to decode (``"value"`` or ``"key"``): its reader schema, error mode and mapping."""

    column: str
    reader: Schema
    errors: str = "raise"
    mapping: str = "spark"
    max_depth: int | None = None

    def __post_init__(self) -> None:
        if self.column not in ("value", "key"):
            raise ValueError(f"column must be 'value' or 'key', got {self.column!r}")
        if self.errors not in ERRORS:
            raise ValueError(f"errors must be 'raise' or 'null', got {self.errors!r}")

    def arrow_fields(self) -> list[pa.Field]:
        """The columns that replace :attr:`column`: the struct, ``<column>_schema_id`` and, with
        ``errors="null"``, ``<column>_error``, as :func:`kbatch.values.decode` gives them."""
        out = [pa.field(self.column, values.arrow_type(self.reader, self.mapping, self.max_depth)),
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
        table = values.decode(table, registry, d.column, d.reader, d.errors, d.mapping,  # type: ignore[arg-type]
                              max_depth=d.max_depth)
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)


def decode_values(
    df: Any,
    registry: Registry,
    column: str = "value",
    reader_schema: Schema | int | str | None = None,
    errors: str = "raise",
    mapping: str = "spark",
    *,
    topic: str | None = None,
    max_depth: int | None = None,
) -> Any:
    """Decode a DataFrame's Avro values (or keys) into a typed struct column, with ``mapInArrow``.

    The DataFrame has kbatch's Kafka columns (the ``kafka-log`` source's, or Spark's Kafka
    source's): ``column`` binary, and ``headers`` (for the header framing), ``offset``,
    ``partition``, ``topic`` when present (error messages name them). Each Arrow batch is
    decoded by :func:`kbatch.values.decode` in the executors.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    registry : kbatch.values.Registry
        Sent to the executors once (a broadcast; with Spark Connect, in the function's
        closure), with the schemas the driver fetched.
    column : {"value", "key"}
    reader_schema : Schema, int, str or None
        The output's layout: a :class:`~kbatch.values.Schema`, a schema id, or Avro schema
        text. Spark needs it before reading, so when None ``topic`` must be given: the latest
        version of its subject (``<topic>-value`` / ``<topic>-key``) is taken.
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

    Returns
    -------
    pyspark.sql.DataFrame
        ``df`` with ``column`` replaced by the struct, then ``<column>_schema_id`` (int, the
        writer schema id) and, with ``errors="null"``, ``<column>_error`` (string).

    Raises
    ------
    kbatch.values.AvroSchemaError
        No reader schema named (and no topic), or one that is not Avro.
    """
    if mapping != "spark":
        raise ValueError(f"Spark takes mapping='spark' (from_avro's types), got {mapping!r}")
    subject = values.topic_subject(topic, column) if topic is not None else None
    reader = values.reader_schema(registry, reader_schema, subject=subject)
    decoding = Decoding(column, reader, errors, mapping, max_depth)
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

    registry: Registry
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
    """The ``kafka-log`` options ``valueFormat`` / ``keyFormat`` (``binary``, the default, or
    ``avro``) and the rest (keys lower-cased), or None when nothing is decoded.

    The reader schema: ``readerSchema`` (``keyReaderSchema`` for keys), a schema id or Avro
    schema text; by default the latest version of the subject of the one topic read
    (``topics()``, called only then). ``valueErrors`` / ``keyErrors``: ``raise`` (default)
    or ``null``. ``recursiveFieldMaxDepth``: how deep recursive records are kept (as
    ``from_avro``'s option).
    """
    wanted = [(column, _choice(raw, f"{column}Format", FORMATS, "binary")) for column in ("key", "value")]
    columns = [c for c, f in wanted if f == "avro"]
    if not columns:
        for name in ("readerschema", "keyreaderschema", "valueerrors", "keyerrors", "schemaregistry.url",
                     "schemaregistry.path", "recursivefieldmaxdepth"):
            if name in raw:
                raise ValueError(f"option {name} is for valueFormat=avro or keyFormat=avro")
        return None
    registry = open_registry(raw, root, recursive=recursive, storage_options=storage_options)
    value_errors = _choice(raw, "valueErrors", ERRORS, "raise")
    depth = raw.get("recursivefieldmaxdepth")
    try:
        max_depth = None if depth is None else int(depth)
    except ValueError:
        raise ValueError(f"option recursiveFieldMaxDepth must be an integer, got {depth!r}") from None
    decodings = []
    for column in columns:
        given = raw.get("readerschema" if column == "value" else "keyreaderschema")
        subject = None
        if given is None:
            names = sorted(set(topics()))
            if len(names) != 1:
                option = "readerSchema" if column == "value" else "keyReaderSchema"
                raise ValueError(f"{column}Format=avro: name the reader schema ({option}: an id or Avro schema "
                                 f"text) or read one topic (subscribe), whose subject's latest version is taken; "
                                 f"topics read: {', '.join(names) or 'none'}")
            subject = values.topic_subject(names[0], column)
        errors = value_errors if column == "value" else _choice(raw, "keyErrors", ERRORS, value_errors)
        decodings.append(Decoding(column, values.reader_schema(registry, given, subject=subject), errors,
                                  max_depth=max_depth))
    return SourceValues(registry, tuple(decodings))
