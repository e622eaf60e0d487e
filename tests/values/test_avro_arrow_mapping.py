"""``mapping="arrow"``: Arrow's own types (dictionary enums, 16-byte uuids, timestamps and times
in their unit, intervals, fixed-size binaries, dense unions), value for value against what
fastavro reads from the same bytes."""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid

import pyarrow as pa
import pytest
from support.avro_values import framed, read, registry_of, table_of, write

from kbatch import values

fastavro = pytest.importorskip("fastavro")
from fastavro.utils import generate_many  # noqa: E402

ALL = {"type": "record", "name": "R", "fields": [
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "uf", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}},
    {"name": "tm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "tn", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
    {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "ltu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "ltn", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
    {"name": "tim", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tiu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "d", "type": {"type": "int", "logicalType": "date"}},
    {"name": "dur", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}},
    {"name": "f", "type": {"type": "fixed", "name": "F", "size": 3}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "un", "type": ["int", "string",
                            {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}]},
    {"name": "unn", "type": ["null", "int", "string"]},
    {"name": "arr", "type": {"type": "array", "items": ["long", "E"]}},
    {"name": "oe", "type": ["null", "E"]},
]}  # fmt: skip


def records(n: int) -> list[dict]:
    """fastavro's random records of ALL, durations within Arrow's int32 months and days (a
    larger one is an error: see below) and decimals within their precision."""
    out = list(generate_many(ALL, n))
    for i, r in enumerate(out):
        r["dur"] = struct.pack("<III", i * 7 % 1000, i * 13 % 500, i * 977)
        r["dec"] = decimal.Decimal(i * 7919 - 1_000_000).scaleb(-2)
    return out


def _expected(field: str, v: object) -> object:
    """fastavro's value as the Arrow mapping's ``to_pylist`` gives it."""
    if isinstance(v, uuid.UUID):
        return v.bytes
    if field == "dur":
        assert isinstance(v, bytes)
        months, days, millis = struct.unpack("<III", v)
        return (months, days, millis * 1_000_000)
    return v


def _actual(field: str, column: pa.Array) -> list[object]:
    if field in ("tn", "ltn"):  # nanoseconds: as fastavro gives them, an int
        return column.cast(pa.int64()).to_pylist()
    if field == "dur":
        return [None if x is None else (x.months, x.days, x.nanoseconds) for x in column.to_pylist()]
    return column.to_pylist()


def test_every_type_under_the_arrow_mapping_has_arrows_own_type() -> None:
    out = values.decode(table_of([framed(1, write(ALL, records(1)[0]))]), registry_of(ALL),
                        mapping="arrow")
    t = out.schema.field("value").type
    want = {"e": pa.dictionary(pa.int32(), pa.string()), "u": pa.binary(16), "uf": pa.binary(16),
            "tm": pa.timestamp("ms", "UTC"), "tu": pa.timestamp("us", "UTC"), "tn": pa.timestamp("ns", "UTC"),
            "ltm": pa.timestamp("ms"), "ltu": pa.timestamp("us"), "ltn": pa.timestamp("ns"),
            "tim": pa.time32("ms"), "tiu": pa.time64("us"), "d": pa.date32(),
            "dur": pa.month_day_nano_interval(), "f": pa.binary(3), "dec": pa.decimal128(9, 2)}
    for name, typ in want.items():
        assert t.field(name).type == typ, name
    assert t.field("un").type == pa.dense_union([
        pa.field("int", pa.int32()), pa.field("string", pa.string()),
        pa.field("In", pa.struct([pa.field("x", pa.int32(), nullable=False)]))])
    assert t.field("unn").type == pa.dense_union([
        pa.field("int", pa.int32()), pa.field("string", pa.string()), pa.field("null", pa.null())])
    assert t.field("oe").type == pa.dictionary(pa.int32(), pa.string()) and t.field("oe").nullable


def test_values_equal_fastavros_reading() -> None:
    rs = records(300)
    rs[0] = {**rs[0], "unn": None, "oe": None, "un": {"x": -3}, "arr": []}
    bodies = [write(ALL, r) for r in rs]
    table = table_of([framed(1, b) for b in bodies[:150]] + [None] + [framed(1, b) for b in bodies[150:]])
    out = values.decode(table, registry_of(ALL), mapping="arrow").column("value").combine_chunks()
    assert out.null_count == 1 and not out[150].is_valid
    keep = pa.array([i != 150 for i in range(len(out))])
    out = out.filter(keep)
    for name in (f["name"] for f in ALL["fields"]):
        want = [_expected(name, read(ALL, b)[name]) for b in bodies]
        assert _actual(name, out.field(name)) == want, name


def test_an_invalid_uuid_string_is_an_error_for_its_record() -> None:
    uuid_type = {"type": "string", "logicalType": "uuid"}
    schema = {"type": "record", "name": "R", "fields": [{"name": "u", "type": uuid_type}]}
    plain = {"type": "record", "name": "R", "fields": [{"name": "u", "type": "string"}]}
    good = str(uuid.UUID(int=7)).upper()
    bodies = [write(plain, {"u": good}), write(plain, {"u": "not-a-uuid"}), write(plain, {"u": good[:-1] + "g"})]
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry_of(schema), mapping="arrow",
                        errors="null")
    assert out.column("value").to_pylist() == [{"u": uuid.UUID(int=7).bytes}, None, None]
    errors = out.column("value_error").to_pylist()
    assert errors[0] is None and "uuid string" in errors[1] and "value.u" in errors[2]
    # Spark's mapping keeps the text as it is
    spark = values.decode(table_of([framed(1, bodies[1])]), registry_of(schema))
    assert spark.column("value").to_pylist() == [{"u": "not-a-uuid"}]


def test_a_duration_past_int32_months_is_an_error_not_a_wrapped_value() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "d", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}}]}
    body = struct.pack("<III", 2**31, 1, 2)
    out = values.decode(table_of([framed(1, body)]), registry_of(schema), mapping="arrow", errors="null")
    assert out.column("value").to_pylist() == [None]
    assert "32-bit" in out.column("value_error")[0].as_py()


def test_the_spark_mapping_is_unchanged() -> None:
    out = values.decode(table_of([framed(1, write(ALL, records(1)[0]))]), registry_of(ALL))
    t = out.schema.field("value").type
    assert t.field("e").type == pa.string() and t.field("u").type == pa.string()
    assert t.field("tm").type == pa.timestamp("us", "UTC") and t.field("tn").type == pa.int64()
    assert t.field("un").type == pa.struct([("member0", pa.int32()), ("member1", pa.string()),
                                            ("member2", pa.struct([pa.field("x", pa.int32(), nullable=False)]))])


def test_mapping_is_checked() -> None:
    with pytest.raises(ValueError, match="mapping must be 'spark' or 'arrow'"):
        values.decode(table_of([framed(1, b"\x02")]), registry_of("int"), mapping="pandas")


def test_timestamps_keep_their_unit() -> None:
    schema = {"type": "long", "logicalType": "timestamp-millis"}
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.timezone.utc)
    out = values.decode(table_of([framed(1, write(schema, when))]), registry_of(schema), mapping="arrow")
    assert out.column("value").type == pa.timestamp("ms", "UTC")
    assert out.column("value").cast(pa.int64()).to_pylist() == [int(when.timestamp() * 1000)]


def test_a_time_outside_a_day_is_an_error_under_the_arrow_mapping() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "time-micros"}}]}  # fmt: skip
    raw = {"type": "record", "name": "R", "fields": [{"name": "ms", "type": "int"}, {"name": "us", "type": "long"}]}
    bodies = [write(raw, {"ms": 86_399_999, "us": 0}), write(raw, {"ms": 86_400_000, "us": 0}),
              write(raw, {"ms": 0, "us": -1})]
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry_of(schema), mapping="arrow",
                        errors="null")
    out.column("value").validate(full=True)
    assert out.column("value").to_pylist() == [{"ms": datetime.time(23, 59, 59, 999000), "us": datetime.time(0)},
                                               None, None]
    errors = out.column("value_error").to_pylist()
    assert "time of day" in errors[1] and "value.ms" in errors[1] and "value.us" in errors[2]
    spark = values.decode(table_of([framed(1, bodies[2])]), registry_of(schema))  # Spark's: the int as it is
    assert spark.column("value").to_pylist() == [{"ms": 0, "us": -1}]
