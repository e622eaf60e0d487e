"""kbatch.values.decode: the Spark mapping, errors with their path and byte, resolution details,
references, Arrow tables, keys, and values written by confluent-kafka's AvroSerializer."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.registry_server import RegistryServer

import kbatch
from kbatch import values
from kbatch.values import AvroSchemaError, Registry, ValueDecodeError

fastavro = pytest.importorskip("fastavro")

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "price", "type": "string"}]}}}]}  # fmt: skip


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + body


def write(schema: object, value: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def table_of(vals: list[bytes | None], **kw: object) -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode(vals, **kw))


def decode_one(schema: object, body: bytes, **kw: object) -> object:
    out = values.decode(table_of([framed(1, body)]), Registry({1: json.dumps(schema)}), **kw)
    return out.column("value").to_pylist()[0]


def error_of(schema: object, body: bytes) -> ValueDecodeError:
    with pytest.raises(ValueDecodeError) as info:
        values.decode(table_of([framed(1, body)]), Registry({1: json.dumps(schema)}))
    return info.value


# ---------------------------------------------------------------- the Spark mapping

LOGICAL = {"type": "record", "name": "L", "fields": [
    {"name": "d", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}},
    {"name": "decf", "type": {"type": "fixed", "name": "DF", "size": 8, "logicalType": "decimal", "precision": 18,
                              "scale": 2}},
    {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "uf", "type": {"type": "fixed", "name": "UF", "size": 16, "logicalType": "uuid"}},
    {"name": "dur", "type": {"type": "fixed", "name": "DUR", "size": 12, "logicalType": "duration"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}},
    {"name": "m", "type": {"type": "map", "values": "int"}},
    {"name": "il", "type": ["int", "long", "null"]},
    {"name": "fd", "type": ["float", "double"]},
    {"name": "u3", "type": ["null", "string", "long", "boolean"]},
]}  # fmt: skip


def test_logical_types_as_fastavro_reads_them_under_sparks_mapping() -> None:
    utc = datetime.timezone.utc
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {
        "d": datetime.date(2024, 2, 29), "tm": datetime.time(1, 2, 3, 4000), "tu": datetime.time(1, 2, 3, 5),
        "ts_ms": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=utc),
        "ts_us": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        "lts_ms": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000), "lts_us": datetime.datetime(2000, 1, 1, 0, 0, 0, 1),
        "dec": decimal.Decimal("-123456.789"), "decf": decimal.Decimal("12345678901234.56"),
        "u": u, "uf": u.bytes, "dur": b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00", "e": "B", "f": b"hi",
        "m": {"a": 1}, "il": 7, "fd": 2.5, "u3": True,
    }  # fmt: skip
    out = values.decode(table_of([framed(1, write(LOGICAL, value))]), Registry({1: json.dumps(LOGICAL)}))
    got = out.column("value").to_pylist()[0]
    ref = fastavro.schemaless_reader(io.BytesIO(write(LOGICAL, value)), fastavro.parse_schema(LOGICAL))
    assert got == {
        "d": ref["d"], "tm": 3723004, "tu": 3723000005, "ts_ms": ref["ts_ms"], "ts_us": ref["ts_us"],
        "lts_ms": ref["lts_ms"], "lts_us": ref["lts_us"], "dec": ref["dec"], "decf": ref["decf"],
        "u": str(u), "uf": str(u), "dur": value["dur"], "e": "B", "f": b"hi", "m": [("a", 1)], "il": 7,
        "fd": 2.5, "u3": {"member0": None, "member1": None, "member2": True},
    }  # fmt: skip
    t = out.schema.field("value").type
    assert t.field("ts_ms").type == pa.timestamp("us", tz="UTC") and t.field("lts_us").type == pa.timestamp("us")
    assert t.field("dec").type == pa.decimal128(9, 3) and t.field("d").type == pa.date32()
    assert t.field("uf").type == pa.string() and t.field("dur").type == pa.binary() and t.field("e").type == pa.string()
    assert t.field("il").type == pa.int64() and t.field("il").nullable and not t.field("fd").nullable
    assert t.field("fd").type == pa.float64()
    assert t.field("u3").type == pa.struct([("member0", pa.string()), ("member1", pa.int64()),
                                            ("member2", pa.bool_())])
    assert out.schema.field("value_schema_id").type == pa.int32()


def test_a_recursive_schema_is_refused() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(AvroSchemaError, match="recursive type 'Node'"):
        decode_one(node, b"\x00")


# ---------------------------------------------------------------- errors: what, where, which byte

def test_a_truncated_value_names_its_field_path_and_byte() -> None:
    body = write(ORDER, {"id": 5, "items": [{"sku": "a", "price": "1"}, {"sku": "b", "price": "2"},
                                            {"sku": "c", "price": "30"}]})
    exc = error_of(ORDER, body[:-2])
    assert exc.path == "value.items[2].price"
    assert exc.position == 5 + len(body) - 4  # the frame, then the body up to the price's length
    assert exc.schema_id == 1 and exc.offset == 0
    assert str(exc).startswith("truncated value") and "value.items[2].price" in str(exc)


@pytest.mark.parametrize(("schema", "body", "reason"), [
    (["null", "string"], b"\x04", "union branch index out of range: index 2, the writer's union has 2 branches"),
    ("string", b"\x04\xff\xfe", "invalid UTF-8"),
    ("string", b"\x04\xed\xa0", "invalid UTF-8"),  # a surrogate
    ("bytes", b"\x03", "negative length"),
    ({"type": "array", "items": "long"}, b"\x7e\x02", "item count larger than the bytes left"),
    ({"type": "array", "items": "null"}, b"\xfe\xff\xff\xff\x0f", "more items than max_items"),
    ({"type": "map", "values": "double"}, b"\x02\x00\x00\x00", "item count larger than the bytes left"),
    ({"type": "map", "values": "string"}, b"\x02\x00\x08ab", "truncated value"),
    ("boolean", b"\x02", "boolean byte is neither 0 nor 1"),
    ("int", b"\x80\x80\x80\x80\x20", "int out of the 32-bit range"),
    ("long", b"\xff" * 10 + b"\x01", "varint longer than 10 bytes"),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, b"\x02", "enum symbol index out of range"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 0}, b"\x04\x03\xe8",
     "decimal has more digits than its precision"),
    ({"type": "long", "logicalType": "timestamp-millis"}, b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01",
     "timestamp out of the 64-bit microsecond range"),
    ("double", b"\x00\x00", "truncated value"),
])  # fmt: skip
def test_bad_values_are_errors(schema: object, body: bytes, reason: str) -> None:
    exc = error_of(schema, body)
    assert exc.reason.startswith(reason.split(":")[0]) and reason in str(exc)
    assert exc.position >= 5 and exc.path.startswith("value")


def test_errors_null_keeps_the_other_records_and_says_why() -> None:
    good = framed(1, write(ORDER, {"id": 1, "items": []}))
    vals = [good, framed(1, b"\x02\x7e"), None, framed(9, b""), b"{}", good]
    out = values.decode(table_of(vals), Registry({1: json.dumps(ORDER)}), errors="null")
    assert out.column("value").to_pylist() == [{"id": 1, "items": []}, None, None, None, None,
                                               {"id": 1, "items": []}]
    errors = out.column("value_error").to_pylist()
    assert errors[0] is None and errors[2] is None and errors[5] is None
    assert errors[1].startswith("item count larger than the bytes left (63) - at value.items (offset 1, schema id 1")
    assert errors[3].startswith("unknown schema id 9")
    assert errors[4].startswith("no schema registry frame")
    assert out.column("value_schema_id").to_pylist() == [1, 1, None, 9, None, 1]
    with pytest.raises(ValueDecodeError, match=r"offset 1, schema id 1, byte 6\)"):
        values.decode(table_of(vals), Registry({1: json.dumps(ORDER)}))


@given(st.lists(st.sampled_from(["good", "bad", "null", "empty"]), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_each_record_decodes_as_alone_whatever_fails_around_it(kinds: list[str]) -> None:
    """The kernel runs its records one after the other in one loop: a record after a bad one, a
    null or a truncated one decodes (and fails) exactly as it does alone."""
    bodies = {"good": write(ORDER, {"id": 7, "items": [{"sku": "a", "price": "1.5"}, {"sku": "bc", "price": ""}]}),
              "bad": b"\x02\x04\x02a\x02\xff", "empty": b""}
    vals = [None if k == "null" else framed(1, bodies[k]) for k in kinds]
    reg = Registry({1: json.dumps(ORDER)})
    out = values.decode(table_of(vals), reg, reader_schema=json.dumps(ORDER), errors="null")
    alone = [values.decode(table_of([v]), reg, reader_schema=json.dumps(ORDER), errors="null") for v in vals]
    assert out.column("value").to_pylist() == [a.column("value").to_pylist()[0] for a in alone]
    errors = [a.column("value_error").to_pylist()[0] for a in alone]  # each names its own offset
    assert out.column("value_error").to_pylist() == [
        e and e.replace("(offset 0,", f"(offset {i},") for i, e in enumerate(errors)]
    if "bad" in kinds or "empty" in kinds:
        first = min(i for i, k in enumerate(kinds) if k in ("bad", "empty"))
        with pytest.raises(ValueDecodeError, match=rf"\(offset {first}, schema id 1"):
            values.decode(table_of(vals), reg, reader_schema=json.dumps(ORDER))


# ---------------------------------------------------------------- resolution

ENUM_W = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}


@pytest.mark.parametrize(("reader", "want"), [
    ({"type": "enum", "name": "Color", "symbols": ["GREEN", "RED", "OTHER"], "default": "OTHER"},
     ["RED", "GREEN", "OTHER"]),
    ({"type": "enum", "name": "Color", "symbols": ["GREEN", "RED"]}, ["RED", "GREEN", None]),
])  # fmt: skip
def test_enum_symbols_map_by_name_with_the_readers_default(reader: object, want: list[str | None]) -> None:
    vals = [framed(1, write(ENUM_W, s)) for s in ("RED", "GREEN", "BLUE")]
    out = values.decode(table_of(vals), Registry({1: json.dumps(ENUM_W)}), reader_schema=json.dumps(reader),
                        errors="null")
    assert out.column("value").to_pylist() == want
    if None in want:
        assert "enum symbol unknown to the reader schema" in out.column("value_error").to_pylist()[2]


def test_aliases_rename_fields_and_types() -> None:
    writer = {"type": "record", "name": "a.Old", "fields": [{"name": "n", "type": "int"}]}
    reader = {"type": "record", "name": "b.New", "aliases": ["a.Old"],
              "fields": [{"name": "count", "type": "long", "aliases": ["n"]}]}
    out = values.decode(table_of([framed(1, write(writer, {"n": 4}))]), Registry({1: json.dumps(writer)}),
                        reader_schema=json.dumps(reader))
    assert out.column("value").to_pylist() == [{"count": 4}]


def test_a_writer_union_branch_the_reader_lacks_fails_only_its_records() -> None:
    writer = ["null", "string", "long"]
    reader = ["null", "string"]
    vals = [framed(1, write(writer, v)) for v in ("a", None, 5)]
    out = values.decode(table_of(vals), Registry({1: json.dumps(writer)}), reader_schema=json.dumps(reader),
                        errors="null")
    assert out.column("value").to_pylist() == ["a", None, None]
    assert out.column("value_error").to_pylist()[2].startswith(
        "cannot resolve the writer schema against the reader schema: writer type long matches no branch")


def test_the_reader_is_the_subjects_latest_by_default(tmp_path) -> None:
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    v2 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
                                                     {"name": "b", "type": "string", "default": "x"}]}
    (tmp_path / "t-value").mkdir()
    for i, schema in ((1, v1), (2, v2)):
        (tmp_path / f"{i}.avsc").write_text(json.dumps(schema))
        (tmp_path / "t-value" / f"{i}.avsc").write_text(json.dumps(schema))
    registry = Registry.from_directory(tmp_path)
    out = values.decode(table_of([framed(1, write(v1, {"a": 3}))]), registry)
    assert out.column("value").to_pylist() == [{"a": 3, "b": "x"}]
    # named: the writer's own layout
    out = values.decode(table_of([framed(1, write(v1, {"a": 3}))]), registry, reader_schema=1)
    assert out.column("value").to_pylist() == [{"a": 3}]


def test_references_to_other_subjects_named_types() -> None:
    money = {"type": "record", "name": "shop.Money", "fields": [{"name": "cents", "type": "long"}]}
    payment = {"type": "record", "name": "shop.Payment", "fields": [{"name": "amount", "type": "shop.Money"}]}
    writer = {"type": "record", "name": "shop.Payment", "fields": [
        {"name": "amount", "type": money}]}  # the same type, inline, for fastavro
    with RegistryServer() as server:
        server.state.register("money", json.dumps(money))
        pid = server.state.register("payment", json.dumps(payment),
                                    references=[{"name": "shop.Money", "subject": "money", "version": 1}])
        reg = Registry(server.url)
        assert [name for name, _ in reg.schema(pid).dependencies] == ["shop.Money"]
        out = values.decode(table_of([framed(pid, write(writer, {"amount": {"cents": 250}}))]), reg)
    assert out.column("value").to_pylist() == [{"amount": {"cents": 250}}]


# ---------------------------------------------------------------- inputs: Arrow tables, keys

def test_an_arrow_table_with_the_schema_id_in_a_header() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    header = [("__value_schema_id", b"\x00\x00\x00\x00\x05")]
    table = table_of([write(schema, {"s": "by header"}), framed(5, write(schema, {"s": "by prefix"}))],
                     headers=[header, []])
    arrow = table.to_arrow(topic="t", partition=3)
    out = values.decode(arrow, Registry({5: json.dumps(schema)}))
    assert out.column("value").to_pylist() == [{"s": "by header"}, {"s": "by prefix"}]
    assert out.column("value_schema_id").to_pylist() == [5, 5]
    assert out.column_names[:3] == ["key", "value", "value_schema_id"]
    bad = table_of([framed(5, b"\x09")]).to_arrow(topic="t", partition=3)
    with pytest.raises(ValueDecodeError, match=r"topic t, partition 3, offset 0, schema id 5, byte 5"):
        values.decode(bad, Registry({5: json.dumps(schema)}))


def test_keys_decode_as_values_do() -> None:
    table = table_of([b"v"], keys=[framed(3, write("long", 42))])
    out = values.decode(table, Registry({3: '"long"'}), column="key")
    assert out.column("key").to_pylist() == [42] and out.column("key_schema_id").to_pylist() == [3]


def test_raw_values_with_one_schema() -> None:
    out = values.decode(table_of([write("string", "plain")]), Registry({4: '"string"'}), framing="raw", schema_id=4)
    assert out.column("value").to_pylist() == ["plain"]
    assert out.column("value_schema_id").to_pylist() == [None]


# ---------------------------------------------------------------- a real peer of the wire format

def test_values_written_by_confluent_kafkas_avro_serializer() -> None:
    sr = pytest.importorskip("confluent_kafka.schema_registry")
    avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
    serialization = pytest.importorskip("confluent_kafka.serialization")
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None}]}  # fmt: skip
    at = datetime.datetime(2026, 11, 27, 8, 0, tzinfo=datetime.timezone.utc)
    rows = [{"id": i, "tags": ["a"] * (i % 3), "at": at, "note": None if i % 2 else f"n{i}"} for i in range(20)]
    with RegistryServer() as server:
        client = sr.SchemaRegistryClient({"url": server.url})
        ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE)
        ser = avro.AvroSerializer(client, json.dumps(schema))
        vals = [ser(row, ctx) for row in rows]
        out = values.decode(table_of(vals), Registry(server.url))
    assert out.column("value").to_pylist() == rows


@given(st.lists(st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode)), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_strings_are_valid_utf8_exactly_when_python_says_so(raw: list[bytes]) -> None:
    bodies = [framed(1, write("bytes", b)) for b in raw]  # bytes written, read as a string
    out = values.decode(table_of(bodies), Registry({1: '"bytes"'}), reader_schema='"string"', errors="null")
    want = []
    for b in raw:
        try:
            want.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            want.append(None)
    assert out.column("value").to_pylist() == want
    assert [e is not None for e in out.column("value_error").to_pylist()] == [w is None for w in want]


def test_values_framed_by_guid_in_a_header_by_confluent_kafkas_serializer() -> None:
    sr = pytest.importorskip("confluent_kafka.schema_registry")
    avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
    serialization = pytest.importorskip("confluent_kafka.serialization")
    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    with RegistryServer() as server:
        client = sr.SchemaRegistryClient({"url": server.url})
        plain = avro.AvroSerializer(client, json.dumps(schema))
        by_header = avro.AvroSerializer(client, json.dumps(schema),
                                        conf={"schema.id.serializer": sr.header_schema_id_serializer})
        ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE, [])
        guided = by_header({"id": 2}, ctx)
        first = plain({"id": 1}, serialization.SerializationContext("orders", serialization.MessageField.VALUE))
        table = table_of([first, guided], headers=[[], ctx.headers])
        out = values.decode(table, Registry(server.url))
        sid = next(iter(server.state.by_id))
    assert out.column("value").to_pylist() == [{"id": 1}, {"id": 2}]
    # the GUID's schema id is shown when the registry's answer carries it (this one's does not)
    assert out.column("value_schema_id").to_pylist() == [sid, None]
