"""The reader schema chosen before any value is read, and the Arrow type it lays values out as.

:func:`~kbatch.values.decode` may pick its reader schema from the values it meets; an engine
that must declare its output before it reads (Spark's ``mapInArrow``, a data source's
``schema()``, a Parquet writer opened first) picks it here instead, once, on the driver:

>>> from kbatch import values
>>> reg = values.Registry({7: '{"type": "record", "name": "R", "fields": [{"name": "x", "type": "long"}]}'})
>>> reader = values.reader_schema(reg, 7)
>>> values.arrow_type(reader)
StructType(struct<x: int64 not null>)
>>> values.reader_schema(reg)
Traceback (most recent call last):
  ...
kbatch.values.AvroSchemaError: name a reader schema (an id, a Schema or Avro schema text) or the subject ...
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ._decode import value_type
from ._errors import AvroSchemaError
from ._proto_schema import ProtoSchema
from ._schema import Schema

__all__ = ["arrow_type", "reader_schema", "topic_subject"]


def topic_subject(topic: str, column: str = "value") -> str:
    """The subject of a topic's values (or keys) under Confluent's default ``TopicNameStrategy``:
    ``<topic>-value`` / ``<topic>-key``."""
    if column not in ("value", "key"):
        raise ValueError(f"column must be 'value' or 'key', got {column!r}")
    return f"{topic}-{column}"


def reader_schema(registry: Any, given: Schema | int | str | None = None, *, subject: str | None = None) -> Schema:
    """The reader schema to lay values out by, fixed before reading them.

    Parameters
    ----------
    registry : kbatch.values.Registry
        Where ids and subjects are looked up.
    given : Schema, int, str or None
        A :class:`Schema`, a schema id, or Avro schema text. When None, ``subject``'s latest
        version.
    subject : str, optional
        The subject whose latest version to take when ``given`` is None (for a topic's values:
        :func:`topic_subject`).

    Raises
    ------
    AvroSchemaError
        Neither given; or the schema is not Avro.
    SchemaNotFoundError
        No such id or subject.
    """
    if isinstance(given, bool):
        raise TypeError("a reader schema is a Schema, a schema id or schema text")
    if isinstance(given, Schema):
        schema = given
    elif isinstance(given, int):
        schema = registry.schema(given)
    elif isinstance(given, str):
        text = given.strip()
        schema = registry.schema(int(text)) if text.isdigit() else Schema(given)
    elif given is not None:
        raise TypeError(f"a reader schema is a Schema, a schema id or schema text, got {type(given).__name__}")
    elif subject:
        schema = registry.latest(subject)
    else:
        raise AvroSchemaError("name a reader schema (an id, a Schema or Avro schema text) or the subject whose "
                              "latest version lays the values out")
    if schema.schema_type != "AVRO":
        raise AvroSchemaError(f"reader schema {schema.id if schema.id is not None else ''} is "
                              f"{schema.schema_type}, not AVRO".replace("  ", " "))
    return schema


def arrow_type(reader: Schema | ProtoSchema | str, mapping: str = "spark", max_depth: int | None = None) -> pa.DataType:
    """The Arrow type :func:`~kbatch.values.decode` gives values laid out by ``reader`` (a
    :class:`Schema` of any language it decodes, a compiled ``ProtoSchema``, or Avro schema text)
    under ``mapping`` and ``max_depth`` (recursive records kept that deep; None refuses them); the
    column itself is nullable. A Protobuf reader is laid out by its root message with the default
    ``ProtoOptions``."""
    schema = Schema(reader) if isinstance(reader, str) else reader
    return value_type(schema, mapping, max_depth)
