"""Projection (issue 37 item 2): ``values.decode(..., fields=[...])`` decodes only the value fields a
query uses. For random Avro schemas (and evolution pairs, and corrupt values) and random JSON
values, the projected decode equals the whole decode's selected fields, types and values; the
fields left out are walked, not decoded (Avro: by the program's SKIP instructions), so a value
whose bytes cannot be walked is still an error; unknown names are errors naming the fields there
are; dead letters, ``records_to_arrow``, ``decoded_schema`` and ``arrow_type`` take ``fields``.
Protobuf: ``test_projection_protobuf.py``."""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.avro_evolve import evolve
from support.avro_random import all_names, encode, random_schema, random_value
from support.projection import assert_projected, avro_paths, draw_fields, same, select, struct_paths

import kbatch
from kbatch import values
from kbatch.values import Registry, Schema
from kbatch.values._decode import reader_program
from kbatch.values._fields import field_tree
from kbatch.values.avro import OPS

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + body


def table_of(bodies: list[bytes | None], schema_id: int = 1) -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode([None if b is None else framed(schema_id, b) for b in bodies]))


def both(table: Any, registry: Registry, fields: list[str], **kw: Any) -> tuple[pa.Table, pa.Table]:
    """The whole decode and the projected one, errors as nulls."""
    return (values.decode(table, registry, errors="null", **kw),
            values.decode(table, registry, errors="null", fields=fields, **kw))


# ---------------------------------------------------------------- Avro: random schemas

@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4), mapping=st.sampled_from(["spark", "arrow"]))
@SETTINGS
def test_random_avro_schemas_projected_equal_the_whole_decode_s_fields(seed: int, depth: int, mapping: str) -> None:
    rng = random.Random(seed)
    schema = random_schema(rng, depth)
    names = all_names(schema)
    bodies: list[bytes | None] = [encode(schema, random_value(rng, schema, names)) for _ in range(rng.randint(1, 12))]
    bodies.insert(rng.randint(0, len(bodies)), None)  # a null value among them
    fields = draw_fields(rng, avro_paths(schema, names))
    whole, part = both(table_of(bodies), Registry({1: json.dumps(schema)}), fields, mapping=mapping)
    assert_projected(whole, part, fields)
    assert part.column("value").type == values.arrow_type(json.dumps(schema), mapping, fields=fields)


@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 3))
@SETTINGS
def test_evolution_pairs_with_projection(seed: int, depth: int) -> None:
    rng = random.Random(seed)
    writer = random_schema(rng, depth)
    reader = evolve(writer, rng, wide=rng.random() < 0.3)
    wnames, rnames = all_names(writer), all_names(reader)
    bodies: list[bytes | None] = [encode(writer, random_value(rng, writer, wnames)) for _ in range(rng.randint(1, 8))]
    fields = draw_fields(rng, avro_paths(reader, rnames))
    try:
        whole, part = both(table_of(bodies), Registry({1: json.dumps(writer)}), fields,
                           reader_schema=json.dumps(reader))
    except values.AvroSchemaError:  # a reader without a layout (not this test's concern)
        return
    assert_projected(whole, part, fields)


@given(seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_corrupt_values_projected_fail_only_where_the_whole_decode_does(seed: int) -> None:
    """A projected decode walks the fields it leaves out: a value it cannot walk (cut short, a
    union index out of range, a length past the end) the whole decode cannot read either; a value
    the whole decode reads, the projection reads the same."""
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
            body = bytearray(rng.randbytes(rng.randint(0, 40)))
        bodies.append(bytes(body))
    fields = draw_fields(rng, avro_paths(schema, names))
    registry = Registry({1: json.dumps(schema)})
    table = table_of(bodies)
    whole = values.decode(table, registry, errors="null")
    part = values.decode(table, registry, errors="null", fields=fields)
    part.column("value").validate(full=True)
    whole_errors, part_errors = whole.column("value_error").to_pylist(), part.column("value_error").to_pylist()
    for w, p in zip(whole_errors, part_errors, strict=True):
        assert p is None or w is not None
    ok = pa.array([e is None for e in whole_errors])
    # (compared as Arrow, not Python: a flipped byte may make a date Python cannot hold)
    assert same(part.column("value").combine_chunks().filter(ok), select(whole.column("value"), fields).filter(ok))


# ---------------------------------------------------------------- Avro: what a skipped field still checks

ORDER = {"type": "record", "name": "shop.Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "coupon", "type": ["null", "string"]},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}, {"name": "city", "type": "string"},
        {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
            {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}]}]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
]}  # fmt: skip
VALUE = {"id": 7, "customer": "ann", "status": "PAID", "coupon": None,
         "address": {"street": "1 Main", "city": "Oslo", "geo": {"lat": 1.5, "lon": 2.5}},
         "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "attrs": {"k": "v"}, "total": b"\x01\x00"}


def order_table(*bodies: bytes) -> kbatch.RecordTable:
    return table_of(list(bodies))


REG = Registry({1: json.dumps(ORDER)})


def test_the_order_projected() -> None:
    good = encode(ORDER, VALUE)
    out = values.decode(order_table(good, good), REG, fields=["total", "address.geo.lat", "customer"])
    assert str(out.schema.field("value").type) == ("struct<customer: string not null, address: struct<geo: "
                                                   "struct<lat: double not null>> not null, total: "
                                                   "decimal128(10, 2) not null>")
    assert out.column("value").to_pylist()[0] == {"customer": "ann", "address": {"geo": {"lat": 1.5}},
                                                  "total": __import__("decimal").Decimal("2.56")}


def kind(error: str) -> str:
    """An error message's kind: its reason without the details and the place."""
    return error.split(" - at ")[0].split(":")[0].split(" (")[0]


@pytest.mark.parametrize("cut", [1, 3, 8, 20])
def test_a_value_cut_short_in_a_field_left_out_is_still_an_error(cut: int) -> None:
    good = encode(ORDER, VALUE)
    body = good[:len(good) - cut]
    out = values.decode(order_table(good, body), REG, fields=["customer"], errors="null")
    assert out.column("value").to_pylist()[0] == {"customer": "ann"}
    assert out.column("value").to_pylist()[1] is None
    error = out.column("value_error").to_pylist()[1]
    whole = values.decode(order_table(good, body), REG, errors="null").column("value_error").to_pylist()[1]
    # the same kind of error, found by the walk (a merged run of fixed bytes may want more at once)
    assert kind(error) == kind(whole)
    assert error.split(" - at ")[1].startswith("value")


def test_a_skipped_union_index_out_of_range_is_an_error_naming_the_skipped_run() -> None:
    good = bytearray(encode(ORDER, VALUE))
    at = 1 + 1 + 3 + 1  # id, customer (length + 3), status: the coupon's branch index
    good[at] = 0x0A  # index 5
    out = values.decode(order_table(bytes(good)), REG, fields=["customer"], errors="null")
    error = out.column("value_error").to_pylist()[0]
    assert error.startswith("union branch index out of range: index 5") and " - at value (offset 0" in error
    whole = values.decode(order_table(bytes(good)), REG, errors="null").column("value_error").to_pylist()[0]
    assert whole.startswith("union branch index out of range: index 5") and " - at value.coupon " in whole


def test_contents_left_out_are_not_decoded() -> None:
    """What the projection does not decode it does not check: invalid UTF-8 in a string, an enum
    index past the symbols, in a field left out, make no error (the whole decode's errors); the
    structure (lengths, counts, union indexes) is checked."""
    good = encode(ORDER, dict(VALUE, address=dict(VALUE["address"], street="x")))
    bad_utf8 = good.replace(b"\x02x", b"\x02\xff", 1)
    bad_enum = bytearray(good)
    bad_enum[1 + 1 + 3] = 0x08  # status index 4 of 2 symbols
    table = order_table(bad_utf8, bytes(bad_enum))
    whole = values.decode(table, REG, errors="null").column("value_error").to_pylist()
    assert "invalid UTF-8" in whole[0] and "enum symbol index out of range" in whole[1]
    part = values.decode(table, REG, errors="null", fields=["customer", "address.city"])
    assert part.column("value_error").to_pylist() == [None, None]
    assert part.column("value").to_pylist() == [{"customer": "ann", "address": {"city": "Oslo"}}] * 2


def test_a_skipped_map_block_of_a_wrong_byte_size_is_an_error() -> None:
    lists = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
                                                       {"name": "m", "type": {"type": "map", "values": "long"}}]}

    def body(size: int) -> bytes:  # a: 5; m: one block of -1 items said to take `size` bytes ("k": 3, 3 bytes)
        return b"\x0a" + encode({"type": "long"}, -1) + encode({"type": "long"}, size) + b"\x02k\x06" + b"\x00"

    out = values.decode(order_table(body(3), body(4), body(2)), Registry({1: json.dumps(lists)}), fields=["a"],
                        errors="null")
    assert out.column("value").to_pylist() == [{"a": 5}, None, None]
    errors = out.column("value_error").to_pylist()
    assert errors[0] is None and "block's byte size differs" in errors[1] and "block's byte size differs" in errors[2]
    assert " - at value.m " in errors[1]  # a run of one field left out: its name


def test_a_skipped_array_of_one_size_is_jumped_block_by_block() -> None:
    doubles = {"type": "record", "name": "R", "fields": [{"name": "d", "type": {"type": "array", "items": "double"}},
                                                         {"name": "b", "type": "long"}]}
    reg = Registry({1: json.dumps(doubles)})
    two = struct.pack("<dd", 1.5, 2.5)
    plain = b"\x04" + two + b"\x02" + two[:8] + b"\x00\x06"  # blocks of 2 and 1, then b = 3
    sized = b"\x03" + b"\x20" + two + b"\x00\x06"  # a block of -2 items said to take 16 bytes
    missized = b"\x03" + b"\x1e" + two + b"\x00\x06"  # ... said 15
    short = b"\x04" + two[:15]
    out = values.decode(order_table(plain, sized, missized, short), reg, fields=["b"], errors="null")
    assert out.column("value").to_pylist() == [{"b": 3}, {"b": 3}, None, None]
    errors = out.column("value_error").to_pylist()
    assert "block's byte size differs" in errors[2] and "item count larger than the bytes left" in errors[3]
    whole = values.decode(order_table(plain, sized, missized, short), reg, errors="null")
    assert [e is None for e in whole.column("value_error").to_pylist()] == [True, True, False, False]


def test_a_skipped_array_of_nulls_is_bounded_by_max_items() -> None:
    nulls = {"type": "record", "name": "R", "fields": [{"name": "n", "type": {"type": "array", "items": "null"}},
                                                       {"name": "b", "type": "long"}]}
    body = encode({"type": "long"}, 1000) + b"\x00" + encode({"type": "long"}, 3)
    reg = Registry({1: json.dumps(nulls)})
    assert values.decode(order_table(body), reg, fields=["b"], max_items=1000).column("value").to_pylist() == \
        [{"b": 3}]
    out = values.decode(order_table(body), reg, fields=["b"], max_items=999, errors="null")
    assert "more items than max_items" in out.column("value_error").to_pylist()[0]


def test_a_recursive_type_left_out_is_skipped_by_its_subroutine() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"},
                                                         {"name": "next", "type": ["null", "Node"]}]}
    reg = Registry({1: json.dumps(node)})
    value = {"v": 1, "next": {"v": 2, "next": {"v": 3, "next": None}}}
    body = encode(node, value)
    # only v: the reader is no longer recursive, no max_depth needed
    assert values.decode(order_table(body), reg, fields=["v"]).column("value").to_pylist() == [{"v": 1}]
    whole = values.decode(order_table(body), reg, max_depth=2)
    part = values.decode(order_table(body), reg, max_depth=2, fields=["next.v"])
    assert part.column("value").to_pylist() == [{"next": {"v": 2}}]
    assert part.column("value").combine_chunks().equals(select(whole.column("value"), ["next.v"]))
    with pytest.raises(values.AvroSchemaError, match="max_depth"):
        values.decode(order_table(body), reg, fields=["next"])
    cut = values.decode(order_table(body[:-1]), reg, fields=["v"], errors="null")
    assert "truncated value" in cut.column("value_error").to_pylist()[0]


def test_one_program_per_reader_and_fields_each_verified() -> None:
    reader = Schema(json.dumps(ORDER))
    a = reader_program(reader, "spark", None, field_tree(["customer"]))
    assert reader_program(reader, "spark", None, field_tree(["customer"])) is a
    assert reader_program(reader, "spark", None, field_tree(["customer", "customer"])) is a
    assert reader_program(reader, "spark", None, field_tree(["id"])) is not a
    assert reader_program(reader, "spark", None, None) is not a
    a.add_writer_schema(reader)
    program = a.arrays()[0]
    assert OPS["SKIP"] in program.reshape(-1, 4)[:, 0]


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize(("fields", "error", "match"), [
    (["adress"], ValueError, (r"fields: value has no field 'adress' \(its fields: id, customer, status, coupon, "
                             r"address, items, attrs, total\)")),
    (["address.town"], ValueError, r"value.address has no field 'town' \(its fields: street, city, geo\)"),
    (["address.geo.alt"], ValueError, r"value.address.geo has no field 'alt' \(its fields: lat, lon\)"),
    (["items.sku"], ValueError, r"value.items is an array, not a record: it has no field 'sku'"),
    (["status.x"], ValueError, r"value.status is an enum shop.Status, not a record"),
    (["coupon.x"], ValueError, r"value.coupon is a union of null, string, not a record"),
    ([], ValueError, "name at least one field"),
    (["a..b"], ValueError, r"'a..b' is not a field name or a dotted path"),
    ("customer", TypeError, "a sequence of field names"),
    ([1], TypeError, "each field is a str"),
])  # fmt: skip
def test_unknown_fields_are_errors_naming_the_fields_there_are(fields: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        values.decode(order_table(encode(ORDER, VALUE)), REG, fields=fields)


def test_a_reader_that_is_not_a_record_has_no_fields() -> None:
    with pytest.raises(ValueError, match="value is a string, not a record: it has no field 'x'"):
        values.decode(order_table(b"\x02a"), Registry({1: '"string"'}), fields=["x"])


# ---------------------------------------------------------------- the other entry points

def test_split_records_to_arrow_and_the_schemas_take_fields() -> None:
    good = encode(ORDER, VALUE)
    bad_utf8 = encode(ORDER, dict(VALUE, coupon="x")).replace(b"\x02x", b"\x02\xff", 1)  # in coupon
    cut = good[:-2]  # in total
    table = order_table(good, bad_utf8, cut)
    fields = ["customer", "address.city"]
    raw = table.to_arrow()
    good_rows, dead = values.split(raw, REG, values=1, fields=fields)
    # the bad UTF-8 is in a field left out: a good row; a value cut short is a dead letter
    assert good_rows.column("value").to_pylist() == [{"customer": "ann", "address": {"city": "Oslo"}}] * 2
    assert dead.column("offset").to_pylist() == [2] and "truncated value" in dead.column("reason").to_pylist()[0]
    assert good_rows.schema == values.decoded_schema(raw.schema, values=1, registry=REG, fields=fields)
    _whole_good, whole_dead = values.split(raw, REG, values=1)
    assert whole_dead.column("offset").to_pylist() == [1, 2]
    out = values.records_to_arrow(table, REG, errors="null", fields=fields)
    assert out.column("value").to_pylist()[:2] == good_rows.column("value").to_pylist()
    assert REG.records_to_arrow(table, REG, errors="null", fields=fields).equals(out)
    assert out.schema.field("value").type == values.arrow_type(REG.schema(1), fields=fields)


def test_keys_take_fields_too() -> None:
    body = framed(1, encode(ORDER, VALUE))
    table = kbatch.decode(kbatch.encode([b"x"], keys=[body]))
    out = values.decode(table, REG, column="key", fields=["id"])
    assert out.column("key").to_pylist() == [{"id": 7}]


# ---------------------------------------------------------------- JSON

JSON_SCHEMAS = {
    "flat": {"type": "object", "properties": {
        "i": {"type": "integer"}, "f": {"type": "number"}, "s": {"type": "string"}, "b": {"type": "boolean"}}},
    "nested": {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"},
        "xs": {"type": "array", "items": {"type": ["integer", "null"]}},
        "o": {"type": "object", "properties": {"t": {"type": "string"}, "day": {"type": "string", "format": "date"},
                                               "p": {"type": "object", "properties": {"q": {"type": "number"}}}}}}},
    "map": {"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": {"type": "string"}}, "n": {"type": "integer"},
        "o": {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}},
                                               "k": {"type": "string"}}}}},
}  # fmt: skip
_TEXT = st.text(max_size=6)


def _json_value(schema: dict) -> st.SearchStrategy:
    if "properties" in schema:
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: _json_value(v) for k, v in schema["properties"].items() if k in required},
            optional={k: st.one_of(st.none(), _json_value(v)) for k, v in schema["properties"].items()
                      if k not in required})
    if schema.get("type") == "object":
        return st.dictionaries(_TEXT, _json_value(schema["additionalProperties"]), max_size=3)
    if schema.get("format") == "date":
        return st.dates().map(str)
    kind = schema["type"] if isinstance(schema["type"], str) else schema["type"][0]
    if kind == "array":
        return st.lists(_json_value(schema["items"]), max_size=3)
    base = {"integer": st.integers(-(2**63), 2**63 - 1), "number": st.floats(allow_nan=False, allow_infinity=False),
            "string": _TEXT, "boolean": st.booleans()}[kind]
    return st.one_of(st.none(), base) if isinstance(schema["type"], list) else base


@pytest.mark.parametrize("kind", list(JSON_SCHEMAS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_json_values_projected_equal_the_whole_decode_s_fields(kind: str, data: st.DataObject) -> None:
    schema = JSON_SCHEMAS[kind]
    rows = data.draw(st.lists(_json_value(schema), min_size=1, max_size=20))
    bodies = [json.dumps(r).encode() for r in rows]
    if data.draw(st.booleans()):
        bodies.insert(data.draw(st.integers(0, len(bodies))), b'{"i": "x", "n": "y", "id": "z"}')  # a bad one
    paths = struct_paths(values.json_schema_type(schema))
    fields = draw_fields(random.Random(data.draw(st.integers(0, 2**32 - 1))), paths)
    registry = Registry({1: Schema(json.dumps(schema), "JSON", id=1)})
    whole, part = both(table_of(bodies), registry, fields)
    assert_projected(whole, part, fields)
    # plain JSON (no registry, no frame): the schema given, or inferred
    plain = kbatch.decode(kbatch.encode(bodies))
    whole, part = both(plain, None, fields, format="json", reader_schema=json.dumps(schema))
    assert_projected(whole, part, fields)


def test_json_fields_left_out_are_not_typed() -> None:
    """``pyarrow.json`` is given the kept fields' type only: a field left out is still parsed as
    JSON (a syntax error anywhere is the record's error) but not checked against its type."""
    schema = JSON_SCHEMAS["nested"]
    registry = Registry({1: Schema(json.dumps(schema), "JSON", id=1)})
    bodies = [b'{"id": 1, "o": {"t": 5}}', b'{"id": 2, "o": {"t": "a"}, "xs": [1,}']
    part = values.decode(table_of(bodies), registry, errors="null", fields=["id"])
    assert part.column("value").to_pylist() == [{"id": 1}, None]
    assert "JSON parse error" in part.column("value_error").to_pylist()[1]
    whole = values.decode(table_of(bodies), registry, errors="null")
    assert "changed from string to number - at value.o.t" in whole.column("value_error").to_pylist()[0]
    with pytest.raises(ValueError, match=r"value.o has no field 'x' \(its fields: t, day, p\)"):
        values.decode(table_of(bodies), registry, fields=["o.x"])
    with pytest.raises(ValueError, match=r"value.xs is a list<item: int64>, not a record"):
        values.decode(table_of(bodies), registry, fields=["xs.x"])
