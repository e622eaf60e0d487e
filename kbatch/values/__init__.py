"""Typed values: schema registries and the wire formats of registry-framed keys and values.

Most Kafka values are Avro, Protobuf or JSON Schema behind a schema registry (Confluent's,
Karapace, Redpanda's, Apicurio in Confluent mode): each value starts with a frame naming its
writer schema. This package finds the schemas and the frames; decoding bodies into typed Arrow
columns builds on it: :func:`decode` turns Avro, Protobuf and JSON Schema values (and plain JSON)
into a typed struct column, the decoder picked by each schema's ``schemaType`` (``docs/values.md``:
the reader schema, schema evolution, Spark's type mapping or Arrow's own, recursive schemas cut at
``max_depth``, ``threads``, errors; ``fields=``: only some fields), and :func:`records_to_arrow`
(``RecordTable.to_arrow(values=registry)``) does it in one step with the other columns. An
engine that declares its output before reading (Spark: ``kbatch.spark.decode_values``) fixes the
reader schema with :func:`reader_schema` and its Arrow type with :func:`arrow_type`.

**Registries** (:class:`Registry`), all with one API (``schema(id)``, ``schema_by_guid``,
``version(subject, v)``, ``latest(subject)``, ``subjects()``, ``versions(subject)``):

- ``Registry.from_log_dirs(root)``: the registry's own ``_schemas`` topic replayed from a
  ``log.dirs`` root, a backup (``recursive=True``) or a URL, by the registry's rules (soft
  deletes, tombstones, DELETE_SUBJECT, CLEAR_SUBJECT, the first schema of an id wins, ids per
  context). Every schema ever registered stays resolvable by id; ``latest`` is the highest
  live version.
- ``Registry(url, auth=..., token=..., cafile=...)``: the REST API, with basic or bearer
  authentication, TLS, bounded retries, and one cache per process (each id fetched once; a
  registry pickled to Spark executors carries what it fetched).
- ``Registry({id: schema_text})`` and ``Registry.from_directory(path)``: no registry at all.
  The directory layout: ``<id>.avsc`` / ``<id>.proto`` / ``<id>.json`` by id;
  ``<subject>/<version>.avsc`` by subject version (its id: the id file with the same text);
  ``*.jsonl``: registry answers (``{"subject", "version", "id", "schema", "schemaType",
  "references"}``), one per line.

A :class:`Schema` carries its text, language, id, subject version and, when it has
``references``, every referenced schema in :attr:`Schema.dependencies` (dependencies first),
which is what a format compiler takes.

**Frames** (:func:`frames`, :func:`parse_frames`) over a table's arrays, no Python object per
record: ``0x00`` + big-endian int32 id + body; ``0x01`` + 16-byte GUID + body; the
``__value_schema_id`` / ``__key_schema_id`` header (0x01 + GUID, or 0x00 + id) looked for
first, the value then all body; or ``framing="raw"`` with one schema id for every body. Each
record gets a schema id (or GUID index), a body ``(start, length)`` and an error code; a record
that is not framed is reported (:meth:`Frames.check` raises :class:`ValueDecodeError` naming
its offset and byte), never guessed at.

>>> import kbatch
>>> from kbatch import values
>>> registry = values.Registry({7: '"string"'})
>>> table = kbatch.decode(kbatch.encode([b"\\x00\\x00\\x00\\x00\\x07\\x06abc", None, b"{}"]))
>>> f = values.frames(table)
>>> f.schema_id.tolist(), f.length.tolist(), f.error.tolist()
([7, -1, -1], [4, -1, -1], [0, 0, 2])
>>> registry.schema(7).text
'"string"'
>>> out = values.decode(table, registry, errors="null")
>>> out.column("value").to_pylist(), out.column("value_schema_id").to_pylist()
(['abc', None, None], [7, None, None])
>>> out.column("value_error").to_pylist()[2][:41]
'no schema registry frame: magic byte 0x7b'
>>> f.check(table.records["offset"])
Traceback (most recent call last):
  ...
kbatch.errors.ValueDecodeError: no schema registry frame: magic byte 0x7b, expected 0x00 (schema id) or ...

**Protobuf** (``docs/values.md``): a ``PROTOBUF`` schema (registry text with references, or a
base64 descriptor) is compiled by grpcio-tools' bundled protoc (:func:`compile_proto`;
:func:`load_proto` for a ``.proto`` file or a descriptor set; :class:`ProtoSchema`), and
:func:`decode` takes :class:`ProtoOptions` (Spark's ``emit.default.values``,
``enums.as.ints``, ``recursive.fields.max.depth``, the message).
"""

from __future__ import annotations

from ._dead_letter import DEAD_LETTER_COLUMNS, dead_letter_schema, dead_letters, decoded_schema, split
from ._decode import decode
from ._errors import (
    AvroSchemaError,
    JsonSchemaError,
    ProgramError,
    ProtobufSchemaError,
    RegistryError,
    SchemaNotFoundError,
    ValueDecodeError,
)
from ._framing import (
    FRAME_BAD_HEADER,
    FRAME_BAD_MAGIC,
    FRAME_ERRORS,
    FRAME_OK,
    FRAME_TOO_SHORT,
    Frames,
    find_header,
    frames,
    parse_frames,
    schema_id_header,
)
from ._reader import arrow_type, reader_schema, topic_subject
from ._records_arrow import records_to_arrow
from ._registry import Registry
from ._schema import SCHEMA_TYPES, Schema, SchemaReference, guid_of, split_subject
from ._topic import DEFAULT_TOPIC as DEFAULT_TOPIC
from .json import SAMPLE_RECORDS, arrow_to_json_schema, infer_json_schema, json_schema_type
from .json import connect_json_schema as connect_json_schema
from .protobuf import ProtoOptions, ProtoSchema, compile_proto, load_proto

__all__ = [
    "ProtoOptions",
    "ProtoSchema",
    "ProtobufSchemaError",
    "compile_proto",
    "load_proto",
    "AvroSchemaError",
    "DEAD_LETTER_COLUMNS",
    "FRAME_BAD_HEADER",
    "FRAME_BAD_MAGIC",
    "FRAME_ERRORS",
    "FRAME_OK",
    "FRAME_TOO_SHORT",
    "JsonSchemaError",
    "ProgramError",
    "SAMPLE_RECORDS",
    "SCHEMA_TYPES",
    "Frames",
    "Registry",
    "RegistryError",
    "Schema",
    "SchemaNotFoundError",
    "SchemaReference",
    "ValueDecodeError",
    "arrow_to_json_schema",
    "arrow_type",
    "dead_letter_schema",
    "dead_letters",
    "decode",
    "decoded_schema",
    "find_header",
    "frames",
    "guid_of",
    "infer_json_schema",
    "json_schema_type",
    "parse_frames",
    "reader_schema",
    "records_to_arrow",
    "schema_id_header",
    "split",
    "split_subject",
    "topic_subject",
]
