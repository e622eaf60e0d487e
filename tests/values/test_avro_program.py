"""The compiled programs and the kernel's one-pass helpers: what makes the value decoder fast
(fewer instructions per record, fewer passes per table) without changing what it decodes."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

import kbatch
from kbatch.values import Registry, Schema
from kbatch.values import decode as decode_values
from kbatch.values.avro._avrokernel import OPS, read_frames
from kbatch.values.avro._compile import AvroProgram, folded
from kbatch.values.avro._schema import parse_avro_schema

fastavro = pytest.importorskip("fastavro")

NESTED = {"type": "record", "name": "Outer", "fields": [
    {"name": "id", "type": "long"},
    {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
        {"name": "a", "type": "string"},
        {"name": "deeper", "type": {"type": "record", "name": "Deeper", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "maybe", "type": ["null", {"type": "record", "name": "Maybe", "fields": [
            {"name": "y", "type": "double"}]}]}]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
]}  # fmt: skip


def program_of(schema: object) -> tuple[AvroProgram, int]:
    p = AvroProgram(parse_avro_schema(Schema(json.dumps(schema))))
    return p, p.add_writer(parse_avro_schema(Schema(json.dumps(schema))))


def test_structs_without_validity_take_no_instruction() -> None:
    p, _ = program_of(NESTED)
    struct_cols = {ins[1] for ins in p.code if ins[0] in (OPS["STRUCT"], OPS["NULLSLOT"])}
    kinds = {i for i, _ in enumerate(p.layout.columns) if folded(p.layout, i)}
    names = {p.layout.columns[i].name for i in kinds}
    # inner, deeper, the item records and the map's entries: not nullable, with children
    assert len(kinds) == 4, names
    assert not kinds & struct_cols
    # the root and the nullable record keep theirs; so does the empty record (no child to count)
    assert 0 in struct_cols
    assert any(p.layout.columns[c].nullable and c != 0 for c in struct_cols)


def frame(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", 1) + body


def test_folded_structs_have_their_children_s_lengths() -> None:
    schema = fastavro.parse_schema(NESTED)
    rows = [
        {"id": 1, "inner": {"a": "x", "deeper": {"x": 3}, "maybe": None},
         "items": [{"sku": "s1", "qty": 1}, {"sku": "s2", "qty": 2}], "attrs": {"k": "v", "l": "w"}, "empty": {}},
        None,
        {"id": 2, "inner": {"a": "yy", "deeper": {"x": -4}, "maybe": {"y": 1.5}}, "items": [], "attrs": {},
         "empty": {}},
        {"id": 3, "inner": {"a": "", "deeper": {"x": 0}, "maybe": None}, "items": [{"sku": "s3", "qty": 3}],
         "attrs": {"m": ""}, "empty": {}},
    ]  # fmt: skip
    vals = []
    for r in rows:
        if r is None:
            vals.append(None)
            continue
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, r)
        vals.append(frame(out.getvalue()))
    table = kbatch.decode(kbatch.encode(vals * 40))  # more than 64 records: columns sized at once
    got = decode_values(table, Registry({1: json.dumps(NESTED)})).column("value")
    want = [None if r is None else dict(r, attrs=list(r["attrs"].items())) for r in rows] * 40
    assert got.to_pylist() == want
    got.validate(full=True)
    inner = got.combine_chunks().field("inner")
    assert len(inner) == len(want) and len(inner.field("deeper")) == len(want)


def test_read_frames_one_pass() -> None:
    buf = np.frombuffer(frame(b"ab") + b"\x07xyz" + b"\x01" + bytes(16) + b"q" + b"\x00\x00", dtype=np.uint8).copy()
    start = np.array([0, 7, 11, 0, 29], dtype=np.int64)
    length = np.array([7, 4, 18, -1, 2], dtype=np.int64)
    n = len(start)
    ids = np.empty(n, np.int32)
    guid_at = np.empty(n, np.int64)
    error = np.empty(n, np.uint8)
    body_start = np.empty(n, np.int64)
    body_length = np.empty(n, np.int64)
    none = np.empty(0, np.int64)
    errors, guids = read_frames(buf, start, length, none, none, ids, guid_at, error, body_start, body_length, 1, 2, 3)
    assert (errors, guids) == (2, 1)
    assert ids.tolist() == [1, -1, -1, -1, -1]
    assert error.tolist() == [0, 2, 0, 0, 1]
    assert guid_at.tolist() == [-1, -1, 12, -1, -1]
    assert body_start.tolist()[:3] == [5, 7, 28] and body_length.tolist() == [2, -1, 1, -1, -1]
    with pytest.raises(ValueError, match="outside"):
        read_frames(buf, start, length + 40, none, none, ids, guid_at, error, body_start, body_length, 1, 2, 3)


@pytest.mark.parametrize("size", range(9))
def test_short_strings_checked_at_the_end_of_the_data(size: int) -> None:
    """Strings under 8 bytes are checked with one 8-byte load where 8 bytes are readable, byte by
    byte where the value is the last thing in the buffer."""
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    registry = Registry({1: json.dumps(schema)})
    for bad_at in [None, *range(size)]:
        text = bytearray(b"a" * size)
        if bad_at is not None:
            text[bad_at] = 0xFF
        body = bytes([2 * size]) + bytes(text)
        for vals in ([frame(body)], [frame(body), frame(b"\x02b")]):
            table = kbatch.decode(kbatch.encode(vals))
            out = decode_values(table, registry, errors="null")
            errs = out.column("value_error").to_pylist()
            assert (errs[0] is not None) == (bad_at is not None), (size, bad_at, vals)
            if bad_at is None:
                assert out.column("value").to_pylist()[0] == {"s": "a" * size}
