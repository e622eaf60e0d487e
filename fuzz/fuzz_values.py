"""Fuzz ``kbatch.values.decode``: random bytes against fixed Avro schemas (and evolution pairs),
random schemas against random bytes, random bytes against a Protobuf schema (its kernel, the
message indexes, the merge slow path), and random bytes as JSON values of fixed JSON Schemas.

Input layout::

    which   uint8   which < 0x70: fixed (writer, reader) pair number ``which % len(PAIRS)``;
                    0x70 <= which < 0x80: Protobuf (``PROTO``), the data's parts are message
                    indexes and bodies (framed with schema id 2), options from ``which``'s bits;
                    which >= 0xF0: JSON Schema number ``which % len(JSON_SCHEMAS)`` (the
                    values are JSON text);
                    else a random schema from the 4 bytes that follow (a seed for
                    ``tests/support/avro_random.random_schema``), read as itself
    [seed]  4 bytes with a random schema
    data    bytes   split into up to 8 values at the bytes 0xF1 (each framed with schema id 1)

Bit 0x40 of ``which`` chooses Arrow's type mapping (``mapping="arrow"``: dictionaries, dense
unions, fixed-width uuids, checked times) over Spark's; recursive pairs decode with
``max_depth=2``.

Oracle: ``errors="null"`` never raises, gives one row per value, and an Arrow array that
validates; each error row's message names ``value`` and a byte; ``errors="raise"`` raises
only ``ValueDecodeError``, and exactly the first error row's message.

Run ``python fuzz/fuzz_values.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import kbatch
    from kbatch import values

import oracle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.avro_random import random_schema

ITEM = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}
ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "status", "type": {"type": "enum", "name": "S", "symbols": ["A", "B", "C"], "default": "A"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"]},
    {"name": "items", "type": {"type": "array", "items": ITEM}},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "double", "boolean"]}},
    {"name": "id2", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}},
    {"name": "nested", "type": ["null", {"type": "record", "name": "N", "fields": [
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "nulls", "type": {"type": "array", "items": "null"}}]}]}]}  # fmt: skip
ORDER_NEXT = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "double"},
    {"name": "status", "type": {"type": "enum", "name": "S", "symbols": ["B", "A"], "default": "A"}},
    {"name": "extra", "type": {"type": "array", "items": "string"}, "default": ["x"]},
    {"name": "note", "type": ["null", "bytes"]},
    {"name": "items", "type": {"type": "array", "items": ITEM}}]}  # fmt: skip
NODE = {"type": "record", "name": "Node", "fields": [
    {"name": "v", "type": ["int", {"type": "string", "logicalType": "uuid"},
                           {"type": "fixed", "name": "F", "size": 4}]},
    {"name": "kids", "type": {"type": "array", "items": "Node"}}, {"name": "next", "type": ["null", "Node"]},
    {"name": "t", "type": {"type": "long", "logicalType": "time-micros"}}]}  # fmt: skip
PROTO = """syntax = "proto3"; package f;
import "google/protobuf/timestamp.proto"; import "google/protobuf/wrappers.proto";
enum E { Z = 0; A = 1; B = -2; }
message Item { string sku = 1; sint64 qty = 2; repeated fixed32 f = 3; }
message Tree { int32 v = 1; repeated Tree kids = 2; Tree left = 3; }
message Order {
  int64 id = 1; string name = 2; E e = 3; repeated Item items = 4; map<string, Item> byname = 5;
  google.protobuf.Timestamp at = 6; google.protobuf.StringValue w = 7; optional double d = 8;
  repeated int32 packed = 9; oneof o { bytes b = 10; Item it = 11; } Tree tree = 12; bool ok = 13;
  float fl = 14; uint64 u = 15; message N { repeated E es = 1; } N n = 16; map<sint32, E> codes = 17;
  map<bool, google.protobuf.Timestamp> when = 18;
}"""
PAIRS = [(ORDER, ORDER), (ORDER, ORDER_NEXT), ("string", "string"), (["null", "long", "string"], ["string", "null"]),
         ({"type": "map", "values": {"type": "array", "items": "float"}},) * 2, (NODE, NODE)]


JSON_SCHEMAS = [
    {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "s": {"type": ["string", "null"]}, "f": {"type": "number"},
        "at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
        "xs": {"type": "array", "items": {"$ref": "#/$defs/X"}}},
     "$defs": {"X": {"type": "object", "properties": {"b": {"type": "boolean"}, "n": {"type": "integer"}}}}},
    {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}},
                                      "k": {"type": "string"}}},
]  # fmt: skip


def json_input(which: int, data: bytes) -> None:
    """Random bytes as JSON values: the same oracle, and every error row names ``value``."""
    bodies = [b"\x00\x00\x00\x00\x01" + part for part in data.split(b"\xf1")[:8]]
    table = kbatch.decode(kbatch.encode(bodies))
    registry = values.Registry({1: values.Schema(json.dumps(JSON_SCHEMAS[which % len(JSON_SCHEMAS)]), "JSON")})
    out = values.decode(table, registry, errors="null")
    oracle.check(out.num_rows == len(bodies), "one row per value")
    out.column("value").validate(full=True)
    errors = out.column("value_error").to_pylist()
    for e in errors:
        oracle.check(e is None or " - at value" in e, f"an error without its place: {e!r}")
    try:
        values.decode(table, registry)
    except values.ValueDecodeError as exc:
        first = next(e for e in errors if e is not None)
        oracle.check(str(exc) == first, f"raise and null disagree: {exc} / {first}")
    else:
        oracle.check(all(e is None for e in errors), "errors='raise' raised nothing for an error row")


def TestOneInput(raw: bytes) -> None:
    if not raw:
        return
    which, data = raw[0], raw[1:]
    if 0x70 <= which < 0x80:
        _proto(which, data)
        return
    if which >= 0xF0:
        json_input(which, data)
        return
    if which < 0x80:
        writer, reader = PAIRS[which % len(PAIRS)]
    else:
        if len(data) < 4:
            return
        writer = reader = random_schema(random.Random(int.from_bytes(data[:4], "little")), 3)
        data = data[4:]
    bodies = [b"\x00\x00\x00\x00\x01" + part for part in data.split(b"\xf1")[:8]]
    table = kbatch.decode(kbatch.encode(bodies))
    registry = values.Registry({1: json.dumps(writer)})
    options = {"mapping": "arrow" if raw[0] & 0x40 else "spark", "max_depth": 2, "max_items": 1 << 12}
    out = values.decode(table, registry, reader_schema=json.dumps(reader), errors="null", **options)
    oracle.check(out.num_rows == len(bodies), "one row per value")
    out.column("value").validate(full=options["mapping"] == "arrow")
    errors = out.column("value_error").to_pylist()
    for e in errors:
        oracle.check(e is None or (" - at value" in e and "byte " in e), f"an error without its place: {e!r}")
    try:
        values.decode(table, registry, reader_schema=json.dumps(reader), **options)
    except values.ValueDecodeError as exc:
        first = next(e for e in errors if e is not None)
        oracle.check(str(exc) == first, f"raise and null disagree: {exc} / {first}")
    else:
        oracle.check(all(e is None for e in errors), "errors='raise' raised nothing for an error row")


def _proto(which: int, data: bytes) -> None:
    bodies = [b"\x00\x00\x00\x00\x02" + part for part in data.split(b"\xf1")[:8]]
    table = kbatch.decode(kbatch.encode(bodies))
    registry = values.Registry({2: values.Schema(PROTO, "PROTOBUF", id=2)})
    options = values.ProtoOptions(emit_default_values=bool(which & 1), enums_as_ints=bool(which & 2),
                                  recursive_depth=1 + (which >> 2) % 3)
    out = values.decode(table, registry, errors="null", protobuf=options)
    oracle.check(out.num_rows == len(bodies), "one row per value")
    out.column("value").validate(full=True)
    errors = out.column("value_error").to_pylist()
    for e in errors:
        oracle.check(e is None or (" - at value" in e and "byte " in e), f"an error without its place: {e!r}")
    try:
        values.decode(table, registry, protobuf=options)
    except values.ValueDecodeError as exc:
        first = next(e for e in errors if e is not None)
        oracle.check(str(exc) == first, f"raise and null disagree: {exc} / {first}")
    else:
        oracle.check(all(e is None for e in errors), "errors='raise' raised nothing for an error row")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
