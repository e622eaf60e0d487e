"""A ``log.dirs`` root of registry-framed Avro, Protobuf and JSON Schema records with the
registry's ``_schemas`` topic, for the tests of typed values in lazy scans.

:func:`write_typed_scan_root` writes, beside ``_schemas-0``, topics ``avro``, ``proto`` and
``json``, partitions 0 and 1 each: batches of 1-6 records in every codec, timestamps rising with
records out of order inside a batch, a transaction aborted now and then (read_committed differs),
and among the good values bad ones (an unknown schema id, a body that does not decode, no magic
byte) and tombstones. Topic ``avro``: values of two writer versions of ``avro-value`` (ids 1 and
2), some framed by the ``__value_schema_id`` header instead of a prefix, keys framed with
``avro-key`` (id 3, a string), a few of them bad. Topic ``json``: JSON Schema values (id 5) and
keys (id 6). Topic ``proto``: Protobuf values (id 4); its keys are plain bytes, with no subject.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

import kbatch
from support import schemas_topic
from support.avro_root import KEY, V1, V2, avro, framed, order

PROTO = """
syntax = "proto3";
package scan;
message Order {
  message Item { string sku = 1; int32 qty = 2; }
  int64 id = 1;
  string customer = 2;
  repeated Item items = 3;
  map<string, int64> counts = 4;
  bool flag = 5;
}
"""
JSON_VALUE = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "price": {"type": "number"},
        "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}
JSON_KEY = {"type": "object", "properties": {"k": {"type": "string"}}}
TOPICS = ("avro", "proto", "json")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len(field: int, body: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def proto_order(i: int) -> bytes:
    """An ``Order`` message (proto3 wire format) made by hand."""
    out = _varint(1 << 3) + _varint(i) + _len(2, f"c{i}".encode())
    for j in range(i % 3):
        out += _len(3, _len(1, f"s{i}-{j}".encode()) + _varint(2 << 3) + _varint(j + 1))
    for j in range(i % 2):
        out += _len(4, _len(1, f"k{j}".encode()) + _varint(2 << 3) + _varint(i * 10 + j))
    if i % 4 == 1:
        out += _varint(5 << 3) + b"\x01"
    return out


def json_order(i: int) -> bytes:
    doc: dict = {"id": i, "customer": f"c{i}", "at": f"2026-11-27T10:{i % 60:02d}:00Z", "price": i / 4,
                 "note": None if i % 2 else f"n{i}", "items": [{"sku": f"s{j}"} for j in range(i % 3)]}
    if i % 3:
        doc["attrs"] = {"a": i, "b": -i}
    return json.dumps(doc).encode()


def _value(topic: str, i: int) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """Record ``i``'s value and headers in ``topic``: good mostly, bad or a tombstone now and then."""
    bad = i % 11 == 5
    kind = (i // 11) % 3
    if i % 13 == 7:
        return None, []
    if topic == "avro":
        version = 1 + (i % 2)
        body = avro(V1 if version == 1 else V2, order(i, version))
        if bad:
            return [framed(99, body), framed(1, body[:-3] if len(body) > 3 else b"\x80"), b"{}"][kind], []
        if i % 19 == 9:  # the schema id in the header, the value all body
            return body, [("__value_schema_id", b"\x00" + struct.pack(">i", version))]
        return framed(version, body), []
    if topic == "proto":
        if bad:
            return [framed(98, b"\x00" + proto_order(i)), framed(4, b"\x00\x12\x05ab"), b"plain"][kind], []
        return framed(4, b"\x00" + proto_order(i)), []
    if bad:
        return [framed(97, json_order(i)), framed(5, b'{"id": "x"}'), b"[]"][kind], []
    return framed(5, json_order(i)), []


def _key(topic: str, i: int) -> bytes:
    if topic == "avro":
        return b"nokey" if i % 17 == 3 else framed(3, avro(KEY, f"k{i}"))
    if topic == "json":
        return framed(6, json.dumps({"k": f"k{i}"}).encode())
    return b"k%d" % i


def write_typed_scan_root(root: Path, seed: int = 0) -> Path:
    """The root described in the module's docstring; returns it."""
    root.mkdir(parents=True, exist_ok=True)
    schemas_topic.write_topic(root, [
        schemas_topic.schema("avro-value", 1, 1, json.dumps(V1)),
        schemas_topic.schema("avro-value", 2, 2, json.dumps(V2)),
        schemas_topic.schema("avro-key", 1, 3, json.dumps(KEY)),
        schemas_topic.schema("proto-value", 1, 4, PROTO, schema_type="PROTOBUF"),
        schemas_topic.schema("json-value", 1, 5, json.dumps(JSON_VALUE), schema_type="JSON"),
        schemas_topic.schema("json-key", 1, 6, json.dumps(JSON_KEY), schema_type="JSON"),
    ])  # fmt: skip
    rng = np.random.default_rng(seed)
    for topic in TOPICS:
        for partition in (0, 1):
            _write_partition(root, topic, partition, rng)
    return root


def _write_partition(root: Path, topic: str, partition: int, rng: np.random.Generator) -> None:
    ts = BASE_TS
    offset = 0
    i = 100 * partition
    with kbatch.LogWriter(root, topic, partition, segment_bytes=1500, index_interval_bytes=100) as w:
        for b in range(12):
            n = int(rng.integers(1, 7))
            ts += int(rng.choice([1, 5, 20]))
            stamps = (ts - rng.integers(0, 10, n)).tolist()
            stamps[int(rng.integers(n))] = ts
            rows = [_value(topic, i + k) for k in range(n)]
            keys = [_key(topic, i + k) for k in range(n)]
            txn = {}
            aborted = b % 5 == 3
            if aborted:
                txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
            offset = w.append(kbatch.encode([v for v, _ in rows], keys=keys, headers=[h for _, h in rows],
                                            timestamps=stamps, base_offset=offset,
                                            compression=str(rng.choice(CODECS)), **txn))
            if aborted:
                offset = w.append(kbatch.encode_control("abort", 7, 0, base_offset=offset, timestamp=ts))
            i += n
