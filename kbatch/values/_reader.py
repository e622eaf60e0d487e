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

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ._decode import value_type
from ._errors import AvroSchemaError, JsonSchemaError, ProtobufSchemaError
from ._schema import Schema
from .protobuf import ProtoOptions, ProtoSchema

__all__ = ["arrow_type", "reader_schema", "topic_subject"]


def topic_subject(topic: str, column: str = "value") -> str:
    """The subject of a topic's values (or keys) under Confluent's default ``TopicNameStrategy``:
    ``<topic>-value`` / ``<topic>-key``."""
    if column not in ("value", "key"):
        raise ValueError(f"column must be 'value' or 'key', got {column!r}")
    return f"{topic}-{column}"


#: ``format=`` -> the ``schemaType`` it reads (``auto``: any)
_KINDS = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
_SCHEMA_ERRORS: dict[str, type[ValueError]] = {"AVRO": AvroSchemaError, "JSON": JsonSchemaError,
                                               "PROTOBUF": ProtobufSchemaError}


def reader_schema(registry: Any, given: Schema | ProtoSchema | int | str | None = None, *,
                  subject: str | None = None, format: str = "avro") -> Schema | ProtoSchema:
    """The reader schema to lay values out by, fixed before reading them.

    Parameters
    ----------
    registry : kbatch.values.Registry or None
        Where ids and subjects are looked up (None: only schema text or a Schema is taken, as
        for plain JSON).
    given : Schema, ProtoSchema, int, str or None
        A :class:`Schema`, a compiled :class:`ProtoSchema`, a schema id, or schema text in
        ``format``'s language (Avro for ``"avro"`` and ``"auto"``). When None, ``subject``'s
        latest version.
    subject : str, optional
        The subject whose latest version to take when ``given`` is None (for a topic's values:
        :func:`topic_subject`).
    format : {"avro", "json", "protobuf", "auto"}
        The language the schema must be of (``"auto"``: any of them, by its ``schemaType``).

    Raises
    ------
    AvroSchemaError, JsonSchemaError, ProtobufSchemaError
        Neither given; or the schema is not of ``format``'s language.
    SchemaNotFoundError
        No such id or subject.
    """
    if format not in ("auto", *_KINDS):
        raise ValueError(f"format must be auto, avro, json or protobuf, got {format!r}")
    want = _KINDS.get(format)
    error = _SCHEMA_ERRORS[want or "AVRO"]
    if isinstance(given, bool):
        raise TypeError("a reader schema is a Schema, a schema id or schema text")
    schema: Schema | ProtoSchema
    if isinstance(given, (Schema, ProtoSchema)):
        schema = given
    elif isinstance(given, int):
        schema = _registry(registry, given).schema(given)
    elif isinstance(given, str):
        text = given.strip()
        schema = _registry(registry, text).schema(int(text)) if text.isdigit() else Schema(given, want or "AVRO")
    elif given is not None:
        raise TypeError(f"a reader schema is a Schema, a schema id or schema text, got {type(given).__name__}")
    elif subject and registry is not None:
        schema = registry.latest(subject)
    else:
        language = {"AVRO": "Avro schema", "JSON": "JSON Schema", "PROTOBUF": ".proto"}[want or "AVRO"]
        raise error(f"name a reader schema (an id, a Schema or {language} text) or the subject whose "
                    f"latest version lays the values out")
    if want is not None and schema.schema_type != want:
        at = getattr(schema, "id", None)
        raise error(f"reader schema {at if at is not None else ''} is "
                    f"{schema.schema_type}, not {want}".replace("  ", " "))
    return schema


def _registry(registry: Any, given: object) -> Any:
    if registry is None:
        raise TypeError(f"reader schema {given}: an id needs a registry")
    return registry


def arrow_type(reader: Schema | ProtoSchema | str, mapping: str = "spark", max_depth: int | None = None,
               protobuf: ProtoOptions | None = None, *, fields: Sequence[str] | None = None) -> pa.DataType:
    """The Arrow type :func:`~kbatch.values.decode` gives values laid out by ``reader`` (a
    :class:`Schema` of any language it decodes, a compiled ``ProtoSchema``, or Avro schema text)
    under ``mapping`` and ``max_depth`` (recursive records kept that deep; None refuses them); the
    column itself is nullable. A Protobuf reader is laid out by ``protobuf`` (its message, else the
    reader's root message; ``enums_as_ints``, ...), by default ``ProtoOptions()``. ``fields``: only
    these fields (:func:`~kbatch.values.decode`'s projection)."""
    schema = Schema(reader) if isinstance(reader, str) else reader
    return value_type(schema, mapping, max_depth, protobuf, fields)
