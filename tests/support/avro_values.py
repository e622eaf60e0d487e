"""Avro values as a schema registry's producers write them, for the tests of ``kbatch.values``:
bodies written by fastavro (the peer), framed as Confluent's serializer frames them, in a table."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import kbatch


def framed(schema_id: int, body: bytes) -> bytes:
    """Confluent's frame: 0x00, the schema id (int32 big-endian), the body."""
    return b"\x00" + struct.pack(">i", schema_id) + body


def write(schema: Any, value: Any) -> bytes:
    """``value`` written by fastavro's ``schemaless_writer`` with ``schema``."""
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def read(schema: Any, body: bytes) -> Any:
    """``body`` read back by fastavro's ``schemaless_reader``."""
    import fastavro

    return fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(schema), None)


def table_of(vals: list[bytes | None], **kw: Any) -> kbatch.RecordTable:
    """A RecordTable of these values (``kw``: kbatch.encode's keys, headers, ...)."""
    return kbatch.decode(kbatch.encode(vals, **kw))


def registry_of(schema: Any, schema_id: int = 1) -> Any:
    """A registry of one schema."""
    from kbatch.values import Registry

    return Registry({schema_id: json.dumps(schema)})
