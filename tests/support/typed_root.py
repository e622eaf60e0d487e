"""A ``log.dirs`` root of Confluent-framed Avro records and its registry's ``_schemas`` topic, and
what fastavro reads from those records: the fixture of the typed-values tests (Spark, convert).

Topic ``orders`` (partition 0 and 1): values of two writer versions of ``orders-value``
interleaved (ids 1 and 2; version 2 adds a field with a default and a nested record), keys framed
with ``orders-key`` (id 3, a string). Topic ``mixed``: good values and bad ones (truncated, an
unknown id, no magic byte) and a tombstone.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import kbatch
from support import schemas_topic
from support.avro_root import avro, framed
from support.avro_root import read_avro as read_body

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SENT"]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"],
    {"name": "channel", "type": "string", "default": "web"},
    {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": None}]}],
     "default": None},
]}  # fmt: skip
KEY = "string"
#: schema ids in ``_schemas``
V1_ID, V2_ID, KEY_ID = 1, 2, 3


def read_avro(framed_value: bytes | None, writers: dict[int, Any], reader: Any) -> Any:
    """What fastavro reads from a Confluent-framed value, with ``reader`` as the reader schema."""
    if framed_value is None:
        return None
    schema_id = struct.unpack(">i", framed_value[1:5])[0]
    return read_body(framed_value[5:], writers[schema_id], reader)


def order(i: int, version: int) -> dict[str, Any]:
    import datetime
    import decimal

    value: dict[str, Any] = {
        "id": i, "status": ["NEW", "PAID", "SENT"][i % 3], "amount": decimal.Decimal(f"{i}.{i % 100:02d}"),
        "at": datetime.datetime(2026, 11, 27, 10, i % 60, tzinfo=datetime.timezone.utc),
        "tags": [f"t{j}" for j in range(i % 3)], "note": None if i % 2 else f"n{i}",
    }
    if version == 2:
        value["channel"] = ["web", "app"][i % 2]
        value["ship"] = None if i % 4 == 0 else {"city": f"c{i}", "zip": None if i % 3 else i}
    return value


def write_typed_root(root: Path, n: int = 40) -> dict[str, Any]:
    """Write the root; returns ``{(topic, partition): [(offset, key bytes, value bytes), ...]}``
    under ``"records"`` and the schemas by id under ``"writers"``."""
    texts = {V1_ID: json.dumps(V1), V2_ID: json.dumps(V2), KEY_ID: json.dumps(KEY)}
    schemas_topic.write_topic(root, [
        schemas_topic.schema("orders-value", 1, V1_ID, texts[V1_ID]),
        schemas_topic.schema("orders-value", 2, V2_ID, texts[V2_ID]),
        schemas_topic.schema("orders-key", 1, KEY_ID, texts[KEY_ID]),
        schemas_topic.schema("mixed-value", 1, V2_ID, texts[V2_ID]),
    ])
    records: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]] = {}
    for partition in (0, 1):
        rows = []
        for i in range(n):
            k = partition * n + i
            version = 1 if i % 2 else 2  # two writer versions interleaved
            value = framed(V1_ID if version == 1 else V2_ID, avro(V1 if version == 1 else V2, order(k, version)))
            rows.append((i, framed(KEY_ID, avro(KEY, f"k{k}")), value))
        records[("orders", partition)] = rows
    good = [framed(V2_ID, avro(V2, order(i, 2))) for i in range(4)]
    bad: list[bytes | None] = [
        good[0],
        good[1][:-3],                   # truncated
        framed(99, good[2][5:]),        # an unknown schema id
        b"{}",                          # no magic byte
        None,                           # a tombstone: a null value, not an error
        good[3],
    ]
    records[("mixed", 0)] = [(i, None, v) for i, v in enumerate(bad)]
    for (topic, partition), rows in records.items():
        with kbatch.LogWriter(root, topic, partition) as w:
            for offset, key, value in rows:
                w.append(kbatch.encode([value], [key], base_offset=offset, timestamps=[1_700_000_000_000 + offset]))
    return {"records": records, "writers": {V1_ID: V1, V2_ID: V2, KEY_ID: KEY}}
