"""Arrow types for Kafka messages: a definition's fields become typed columns.

int8..int64, uint16/uint32, float64 and bool keep their widths; ``string`` is a
string; ``bytes`` is binary; ``uuid`` is Kafka's text form of a Uuid (base64url
without padding, as ``kafka-topics.sh`` and ``partition.metadata`` print it);
arrays are lists and structs are structs. The columns of a message are the union of
its fields over all its versions (absent ones null).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from kbatch.protocol import Message

__all__ = ["kafka_uuid", "message_schema", "to_row"]


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: base64url of the 16 bytes, no padding.

    >>> kafka_uuid(uuid.UUID(int=1))
    'AAAAAAAAAAAAAAAAAAAAAQ'
    """
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _all_fields(msg: Message) -> list[Any]:
    return list(msg.spec.fields)


def _type(f: Any) -> Any:
    import pyarrow as pa

    prim = {"bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "uint16": pa.uint16(),
            "int32": pa.int32(), "uint32": pa.uint32(), "int64": pa.int64(), "float64": pa.float64(),
            "string": pa.string(), "bytes": pa.binary(), "records": pa.binary(), "uuid": pa.string()}
    elem = pa.struct([(s.key, _type(s)) for s in f.fields or ()]) if f.kind == "struct" else prim[f.kind]
    return pa.list_(elem) if f.array else elem


def message_schema(msg: Message) -> Any:
    """The Arrow fields of ``msg`` (every field of every version)."""
    import pyarrow as pa

    return pa.schema([(f.key, _type(f)) for f in _all_fields(msg)])


def _convert(f: Any, value: Any) -> Any:
    if value is None:
        return None
    if f.array:
        return [_elem(f, v) for v in value]
    return _elem(f, value)


def _elem(f: Any, value: Any) -> Any:
    if f.kind == "uuid":
        return kafka_uuid(value)
    if f.kind == "struct":
        return {s.key: _convert(s, value.get(s.key)) for s in f.fields or ()}
    if f.kind in ("bytes", "records") and value is not None:
        return bytes(value)
    return value


def to_row(msg: Message, value: dict[str, Any]) -> dict[str, Any]:
    """A decoded message as a row of :func:`message_schema` (UUIDs as text, bytes as bytes)."""
    return {f.key: _convert(f, value.get(f.key)) for f in _all_fields(msg)}
