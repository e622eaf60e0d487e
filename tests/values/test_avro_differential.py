"""kbatch.values.decode against fastavro: random schemas and values, evolution pairs, corruption."""

from __future__ import annotations

import json
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.avro_evolve import evolve
from support.avro_random import (
    Undecodable,
    all_names,
    arrow_plain,
    encode,
    expected,
    expected_arrow,
    random_schema,
    random_value,
    read,
)

import kbatch
from kbatch import values

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + body


def table_of(bodies: list[bytes | None], schema_id: int = 1) -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode([None if b is None else framed(schema_id, b) for b in bodies]))


@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4))
@SETTINGS
def test_random_schemas_decode_as_fastavro_reads_them(seed: int, depth: int) -> None:
    rng = random.Random(seed)
    schema = random_schema(rng, depth)
    names = all_names(schema)
    raw = [random_value(rng, schema, names) for _ in range(rng.randint(1, 12))]
    bodies: list[bytes | None] = [encode(schema, v) for v in raw]
    want = [expected(read(b, schema), schema, names) for b in bodies if b is not None]
    bodies.insert(rng.randint(0, len(bodies)), None)  # a null value among them
    want.insert(bodies.index(None), None)
    registry = values.Registry({1: json.dumps(schema)})
    out = values.decode(table_of(bodies), registry)
    column = out.column("value")
    column.validate(full=True)
    assert column.to_pylist() == want
    assert out.column("value_schema_id").to_pylist() == [None if b is None else 1 for b in bodies]


@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4))
@SETTINGS
def test_random_schemas_decode_under_the_arrow_mapping_as_fastavro_reads_them(seed: int, depth: int) -> None:
    rng = random.Random(seed)
    schema = random_schema(rng, depth)
    names = all_names(schema)
    bodies = [encode(schema, random_value(rng, schema, names)) for _ in range(rng.randint(1, 12))]
    want = []
    for b in bodies:
        try:
            want.append(expected_arrow(read(b, schema), schema, names))
        except Undecodable:
            want.append(None)
    out = values.decode(table_of(list(bodies)), values.Registry({1: json.dumps(schema)}), mapping="arrow",
                        errors="null")
    column = out.column("value").combine_chunks()
    column.validate(full=True)
    assert arrow_plain(column) == want
    assert [e is not None for e in out.column("value_error").to_pylist()] == [w is None for w in want]


# ---------------------------------------------------------------- evolution

@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 3))
@SETTINGS
def test_evolution_pairs_decode_as_fastavro_resolves_them(seed: int, depth: int) -> None:
    rng = random.Random(seed)
    writer = random_schema(rng, depth)
    reader = evolve(writer, rng)
    wnames, rnames = all_names(writer), all_names(reader)
    raw = [random_value(rng, writer, wnames) for _ in range(rng.randint(1, 8))]
    bodies: list[bytes | None] = [encode(writer, v) for v in raw]
    want = [expected(read(b, writer, reader), reader, rnames) for b in bodies if b is not None]
    registry = values.Registry({1: json.dumps(writer)})
    out = values.decode(table_of(bodies), registry, reader_schema=json.dumps(reader))
    out.column("value").validate(full=True)
    assert out.column("value").to_pylist() == want


def test_two_writer_versions_interleaved_decode_into_one_table() -> None:
    v1 = {"type": "record", "name": "x.R", "fields": [{"name": "id", "type": "int"}, {"name": "old", "type": "string"}]}
    v2 = {"type": "record", "name": "x.R", "fields": [
        {"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"], "default": None}]}
    registry = values.Registry({1: json.dumps(v1), 2: json.dumps(v2)})
    bodies = [framed(1, encode(v1, {"id": 1, "old": "o"})), framed(2, encode(v2, {"id": 2, "tag": "t"})),
              framed(1, encode(v1, {"id": 3, "old": "p"}))]
    out = values.decode(kbatch.decode(kbatch.encode(bodies)), registry, reader_schema=2)
    assert out.column("value").to_pylist() == [{"id": 1, "tag": None}, {"id": 2, "tag": "t"}, {"id": 3, "tag": None}]
    assert out.column("value_schema_id").to_pylist() == [1, 2, 1]


def test_an_incompatible_writer_fails_its_records_only() -> None:
    reader = {"type": "record", "name": "x.R", "fields": [{"name": "id", "type": "long"}]}
    other = {"type": "record", "name": "x.R", "fields": [{"name": "name", "type": "string"}]}  # id has no default
    registry = values.Registry({1: json.dumps(reader), 2: json.dumps(other)})
    bodies = [framed(1, encode(reader, {"id": 5})), framed(2, encode(other, {"name": "n"}))]
    table = kbatch.decode(kbatch.encode(bodies))
    out = values.decode(table, registry, reader_schema=1, errors="null")
    assert out.column("value").to_pylist() == [{"id": 5}, None]
    error = out.column("value_error").to_pylist()[1]
    assert "has no default" in error and "value.id" in error and "schema id 2" in error
    with pytest.raises(values.ValueDecodeError, match="cannot resolve") as info:
        values.decode(table, registry, reader_schema=1)
    assert info.value.offset == 1 and info.value.schema_id == 2


# ---------------------------------------------------------------- corruption

@given(seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_corrupt_values_give_errors_never_crashes(seed: int) -> None:
    rng = random.Random(seed)
    schema = random_schema(rng, 3)
    names = all_names(schema)
    bodies: list[bytes | None] = []
    for _ in range(10):
        body = bytearray(encode(schema, random_value(rng, schema, names)))
        r = rng.random()
        if r < 0.4 and body:
            del body[rng.randrange(len(body)):]  # truncated
        elif r < 0.8 and body:
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)  # flipped
        else:
            body += rng.randbytes(rng.randint(1, 8))  # garbage after the value, or a random body
            if rng.random() < 0.5:
                body = bytearray(rng.randbytes(rng.randint(0, 40)))
        bodies.append(bytes(body))
    registry = values.Registry({1: json.dumps(schema)})
    table = table_of(bodies)
    out = values.decode(table, registry, errors="null")
    out.column("value").validate(full=True)
    # (values are not turned into Python: a flipped byte may make a date Python cannot hold)
    null, error = out.column("value").is_null().to_pylist(), out.column("value_error").to_pylist()
    for is_null, e in zip(null, error, strict=True):
        assert e is None or (is_null and " - at value" in e)
    try:
        values.decode(table, registry)
    except values.ValueDecodeError as exc:
        assert exc.offset >= 0 and exc.schema_id == 1 and exc.path.startswith("value")
        assert str(exc) == error[exc.offset]
