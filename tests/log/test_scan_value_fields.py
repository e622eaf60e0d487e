"""Projection and value-field filters inside a typed lazy scan: ``fields=`` decodes only the
fields named, and a predicate on value fields is judged on a decode of those fields alone
(:mod:`kbatch.values._scan`)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

import kbatch
from kbatch.log import LogWriter, ScanStats, open_log

pl = pytest.importorskip("polars")

from kbatch.polars import scan_kafka_log, value_where  # noqa: E402

#: each topic of support.typed_scan_root: two of its value fields
FIELDS = {"avro": ["customer", "id"], "proto": ["customer", "id"], "json": ["customer", "id"]}


@pytest.mark.parametrize("topic", ["avro", "proto", "json"])
def test_fields_give_the_full_decodes_fields(typed_root: Path, registry, topic: str) -> None:
    full = scan_kafka_log(typed_root, topic=topic, values=registry, errors="null").collect()
    for fields in (FIELDS[topic], FIELDS[topic][:1]):
        narrow = scan_kafka_log(typed_root, topic=topic, values=registry, errors="null", fields=fields).collect()
        assert narrow.schema["value"] == pl.Struct({f: full.schema["value"].to_schema()[f]  # type: ignore[union-attr]
                                                    for f in full.schema["value"].to_schema() if f in fields})
        assert narrow.drop("value", "value_error").equals(full.drop("value", "value_error"))
        # a record the narrow decode cannot read, the full one cannot either ...
        assert set(narrow.filter(pl.col("value_error").is_not_null())["offset"]) <= set(
            full.filter(pl.col("value_error").is_not_null())["offset"])
        # ... and where both read it, the fields are the full decode's
        both = pl.col("value_error").is_null()
        assert narrow.filter(both).height > 0
        got = narrow.join(full.filter(both).select("partition", "offset"), on=["partition", "offset"])
        want = full.filter(both).select("partition", "offset", pl.col("value").struct.field(*fields))
        assert got.select("partition", "offset", pl.col("value").struct.unnest()).sort("partition", "offset").equals(
            want.sort("partition", "offset").select("partition", "offset", *sorted(fields, key=list(
                full.schema["value"].to_schema()).index)))  # type: ignore[union-attr]


@pytest.mark.parametrize("topic", ["avro", "proto", "json"])
def test_a_value_predicate_equals_the_full_decode_filtered(typed_root: Path, registry, topic: str) -> None:
    customer = pl.col("value").struct.field("customer")
    ident = pl.col("value").struct.field("id")
    full = scan_kafka_log(typed_root, topic=topic, values=registry, errors="null").collect()
    for predicate in (ident > 10, (ident % 3 == 0) & (pl.col("offset") > 4), customer.str.ends_with("1"),
                      (ident > 10) | pl.col("value").is_null(), (ident < 6) & pl.col("value_error").is_null()):
        stats = ScanStats()
        got = scan_kafka_log(typed_root, topic=topic, values=registry, errors="null",
                             stats=stats).filter(predicate).collect()
        want = full.filter(predicate)
        assert got.sort("partition", "offset").equals(want.sort("partition", "offset")), predicate
        # the rows given: those the narrow decode's filter keeps, when it can judge the predicate
        # (a superset: a record whose fault lies after the fields it reads passes it, and the
        # whole decode's null then fails the query's filter)
        assert 0 < want.height < full.height
        if value_where(predicate) is None:
            assert stats.rows == full.height
        else:
            assert want.height <= stats.rows < full.height, predicate
        narrowed = scan_kafka_log(typed_root, topic=topic, values=registry, errors="null", fields=FIELDS[topic])
        if "value_error" not in str(predicate) and "is_null" not in str(predicate):
            # with fields=: the same rows, their value the projection's
            assert (narrowed.filter(predicate).select("partition", "offset").collect().sort("partition", "offset")
                    .equals(want.select("partition", "offset").sort("partition", "offset")))


def _avro_root(tmp_path: Path) -> tuple[Path, object]:
    """A topic ``t`` of Avro records {a: long, b: string}: offset 3's ``b`` is not UTF-8."""
    import fastavro

    from kbatch.values import Registry, Schema

    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"},
                                                         {"name": "b", "type": "string"}]}
    parsed = fastavro.parse_schema(schema)
    values = []
    for i in range(8):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"a": i, "b": "ok"})
        values.append(b"\x00" + struct.pack(">i", 1) + out.getvalue())
    values[3] = b"\x00" + struct.pack(">i", 1) + b"\x06" + b"\x04\xff\xfe"  # a=3, b = 2 bytes, not UTF-8
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode(values[:4]))
        w.append(kbatch.encode(values[4:], base_offset=4))
    return tmp_path, Registry({1: Schema(json.dumps(schema), subject="t-value", version=1, id=1)})


def test_a_value_predicate_decodes_whole_only_the_records_it_keeps(tmp_path: Path) -> None:
    from kbatch.values import ValueDecodeError

    root, registry = _avro_root(tmp_path)
    a = pl.col("value").struct.field("a")
    lf = scan_kafka_log(root, values=registry)
    with pytest.raises(ValueDecodeError, match="offset 3"):  # read whole, the record at offset 3 fails
        lf.collect()
    # a filter on `a` rules it out on a decode of `a` alone: its `b` is never decoded
    assert lf.filter(a >= 4).select("offset").collect()["offset"].to_list() == [4, 5, 6, 7]
    assert lf.filter(a != 3).select(a).collect()["a"].to_list() == [0, 1, 2, 4, 5, 6, 7]
    with pytest.raises(ValueDecodeError, match="offset 3"):  # one it keeps is decoded whole
        lf.filter(a <= 3).collect()
    # a predicate that reads the value whole is judged on the full decode
    with pytest.raises(ValueDecodeError, match="offset 3"):
        lf.filter((a >= 4) | pl.col("value").is_null()).collect()
    got = scan_kafka_log(root, values=registry, errors="null").filter(a >= 2).collect()
    assert got["offset"].to_list() == [2, 4, 5, 6, 7]  # (3: null in the full decode, so not >= 2)
    assert scan_kafka_log(root, values=registry, errors="null").filter(
        pl.col("value_error").is_not_null()).collect()["offset"].to_list() == [3]
    assert scan_kafka_log(root, values=registry, fields=["a"]).filter(a == 3).collect()["value"].to_list() == [
        {"a": 3}]  # projected away, `b` is not checked


def test_value_where_takes_only_field_uses(tmp_path: Path) -> None:
    value = pl.col("value")
    assert value_where(None) is None
    assert value_where(pl.col("offset") > 3) is None
    where = value_where((value.struct.field("b") == "x") & (value.struct.field("a").struct.field("c") > 1))
    assert where is not None and where.fields == ["a", "b"]
    for predicate in (value.is_null(), value.struct.field("a").is_null() | value.is_not_null(),
                      (value.struct.field("a") > 1) & pl.col("value_error").is_null(),
                      (value.struct.field("a") > 1) & (pl.col("value_schema_id") == 1)):
        assert value_where(predicate) is None, predicate
    assert value_where((value.struct.field("a") > 1) & (pl.col("key") == b"k")).fields == ["a"]  # raw key
    assert value_where((value.struct.field("a") > 1) & (pl.col("key") == b"k"), keys_decoded=True) is None


def test_fields_are_checked_before_reading(tmp_path: Path) -> None:
    root, registry = _avro_root(tmp_path)
    with pytest.raises(ValueError, match="fields= projects the decoded values"):
        scan_kafka_log(root, fields=["a"])
    with pytest.raises(ValueError, match=r"value has no field 'c' .*a, b"):
        scan_kafka_log(root, values=registry, fields=["c"])
    with pytest.raises(ValueError, match="fields= projects the decoded values"):
        open_log(root / "t-0").scan_records(["offset"], fields=["a"])
    got = open_log(root / "t-0").scan_records(["offset", "value"], [("offset", ">=", 4)], values=registry,
                                              fields=["a"]).read_all()
    assert got.column("value").to_pylist() == [{"a": i} for i in range(4, 8)]


def test_duckdb_views_decode_only_the_fields_given(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import register

    root, registry = _avro_root(tmp_path)
    con = duckdb.connect()
    register(con, "t", root, values=registry, fields=["a"])
    assert con.sql("SELECT value.a FROM t WHERE value.a > 5 ORDER BY 1").fetchall() == [(6,), (7,)]
    assert [d[0] for d in con.sql("SELECT value.* FROM t").description] == ["a"]
