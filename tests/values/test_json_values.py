"""JSON values: JSON Schema -> Arrow types, decoding registry-framed JSON Schema values (written by
confluent-kafka's JSONSerializer too) and plain JSON, differential against orjson, per-record errors,
maps, $ref, the dispatch by schemaType, and kbatch convert --values json / auto."""

from __future__ import annotations

import datetime
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import schemas_topic
from support.dumprun import dump
from support.registry_server import RegistryServer
from support.tables import convert_cli, summary_of

import kbatch
from kbatch import values
from kbatch.values import JsonSchemaError, Registry, Schema, ValueDecodeError
from kbatch.values.json import _decode as json_decode
from kbatch.values.json._decode import BLOCK_RECORDS

orjson = pytest.importorskip("orjson")

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["id", "customer"],
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "string"},
        "status": {"type": "string", "enum": ["NEW", "PAID"]},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "ref": {"type": "string", "format": "uuid"},
        "price": {"type": "number"},
        "note": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        "attrs": {"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
    },
    "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + body


def table_of(vals: list[bytes | None]) -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode(vals, max_batch_records=50))


def registry(schema: dict = ORDER) -> Registry:
    return Registry({1: Schema(json.dumps(schema), "JSON", id=1)})


# ---------------------------------------------------------------- JSON Schema -> Arrow


def test_the_type_mapping() -> None:
    t = values.json_schema_type(ORDER)
    item = pa.struct([("sku", pa.string()), ("qty", pa.int64())])
    assert t == pa.struct([
        pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.string(), nullable=False),
        ("status", pa.string()), ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32()), ("ref", pa.string()),
        ("price", pa.float64()), ("note", pa.string()), ("items", pa.list_(pa.field("item", item, nullable=False))),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ])  # fmt: skip
    # draft 4's definitions, $ref at the root, anyOf with null, a list type with null
    draft4 = {"definitions": {"R": {"type": "object", "required": ["a"], "properties": {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "b": {"type": ["boolean", "null"]}}}},
        "$ref": "#/definitions/R"}  # fmt: skip
    assert values.json_schema_type(draft4) == pa.struct([("a", pa.int64()), ("b", pa.bool_())])


def test_a_reference_to_another_subject() -> None:
    item = Schema(json.dumps(ORDER["$defs"]["Item"]), "JSON", id=5)
    order = Schema(json.dumps({"type": "object", "properties": {"item": {"$ref": "item.json"}}}), "JSON",
                   dependencies=(("item.json", item),))
    assert values.json_schema_type(order) == pa.struct([("item", pa.struct([("sku", pa.string()),
                                                                               ("qty", pa.int64())]))])


@pytest.mark.parametrize(("schema", "pointer", "reason"), [
    ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "/properties/a/type", "several types"),
    ({"type": "object", "properties": {"a": {}}}, "/properties/a", "allows any value"),
    ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "/properties/a/not", "'not'"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": [{"type": "string"}]}}},
     "/properties/a/items", "tuple items"),
    ({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}},
     "/properties/a/oneOf", "2 non-null schemas"),
    ({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"},
     "/$defs/N/properties/next/$ref", "recursive"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "/properties/a/$ref", "nothing at"),
    ({"type": "string"}, "", "must be JSON objects"),
])  # fmt: skip
def test_unsupported_constructs_name_their_json_pointer(schema: dict, pointer: str, reason: str) -> None:
    with pytest.raises(JsonSchemaError) as info:
        values.json_schema_type(schema)
    assert info.value.pointer == pointer and reason in str(info.value)
    assert str(info.value).endswith(f"- at #{pointer}")
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- decoding


def test_registry_framed_values_decode() -> None:
    rows = [
        {"id": 1, "customer": "a", "at": "2026-11-27T08:00:00.5Z", "day": "2026-11-27", "price": 2.5,
         "items": [{"sku": "x", "qty": 2}], "attrs": {"k": 1, "n": None}, "extra": {"ignored": True}},
        {"id": 2, "customer": "b", "note": None, "attrs": {}},
    ]  # fmt: skip
    out = values.decode(table_of([framed(1, json.dumps(r).encode()) for r in rows] + [None]), registry())
    got = out.column("value").to_pylist()
    assert got[0]["at"] == datetime.datetime(2026, 11, 27, 8, 0, 0, 500000, tzinfo=datetime.timezone.utc)
    assert got[0]["day"] == datetime.date(2026, 11, 27)
    assert got[0]["items"] == [{"sku": "x", "qty": 2}]
    assert got[0]["attrs"] == [("k", 1), ("n", None)]  # a native map: null values kept, keys in order
    assert got[1]["attrs"] == [] and got[1]["items"] is None and got[1]["note"] is None
    assert got[2] is None  # a tombstone
    assert out.column("value_schema_id").to_pylist() == [1, 1, None]
    assert out.schema.field("value").type == values.json_schema_type(ORDER)


@pytest.mark.parametrize("duckdb", [True, False])
def test_maps_by_duckdb_or_orjson_are_the_same(duckdb: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not duckdb:
        monkeypatch.setattr(json_decode, "_duckdb", None)
    elif json_decode._duckdb is None:
        pytest.skip("no DuckDB")
    bodies = [b'{"id": 1, "customer": "a", "attrs": {"k": 1, "n": null, "k2": -9223372036854775808}}',
              b'{"id": 2, "customer": "b", "attrs": {"x": 2.5}}', b'{"id": 3, "customer": "c", "attrs": {"x": "3"}}',
              b'{"id": 4, "customer": "d", "attrs": null}', b'{"id": 5, "customer": "e"}']
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry(), errors="null")
    assert [v and v["attrs"] for v in out.column("value").to_pylist()] == [
        [("k", 1), ("n", None), ("k2", -(2**63))], None, None, None, None]
    assert [e is not None for e in out.column("value_error").to_pylist()] == [False, True, True, False, False]


def test_pretty_printed_values_decode() -> None:
    row = {"id": 3, "customer": "pretty", "items": [{"sku": "a\nb", "qty": 1}]}
    bodies = [json.dumps(row, indent=2).encode(), b"  \n" + json.dumps(row).encode(), json.dumps(row).encode()]
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry())
    assert [r["items"] for r in out.column("value").to_pylist()] == [row["items"]] * 3


def test_values_written_by_confluent_kafkas_json_serializer() -> None:
    sr = pytest.importorskip("confluent_kafka.schema_registry")
    js = pytest.importorskip("confluent_kafka.schema_registry.json_schema")
    serialization = pytest.importorskip("confluent_kafka.serialization")
    schema = {"type": "object", "title": "Order", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]}}}  # fmt: skip
    rows = [{"id": i, "tags": ["a"] * (i % 3), "note": None if i % 2 else f"n{i}"} for i in range(20)]
    with RegistryServer() as server:
        client = sr.SchemaRegistryClient({"url": server.url})
        ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE)
        ser = js.JSONSerializer(json.dumps(schema), client)
        vals = [ser(row, ctx) for row in rows]
        reg = Registry(server.url)
        out = values.decode(table_of(vals), reg)
        assert reg.schema(int.from_bytes(vals[0][1:5], "big")).schema_type == "JSON"
        # the GUID in a header (the newer framing): the value is all JSON
        by_header = js.JSONSerializer(json.dumps(schema), client,
                                      conf={"schema.id.serializer": sr.header_schema_id_serializer})
        hctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE, [])
        guided = by_header(rows[1], hctx)
        assert guided.startswith(b"{")
        both = kbatch.decode(kbatch.encode([vals[0], guided], headers=[[], hctx.headers]))
        out2 = values.decode(both, reg)
    assert out.column("value").to_pylist() == rows
    assert out2.column("value").to_pylist() == rows[:2]


# ---------------------------------------------------------------- differential against orjson

SCHEMAS = {
    "flat": {"type": "object", "properties": {
        "i": {"type": "integer"}, "f": {"type": "number"}, "s": {"type": "string"}, "b": {"type": "boolean"}}},
    "nested": {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"},
        "xs": {"type": "array", "items": {"type": ["integer", "null"]}},
        "o": {"type": "object", "properties": {"t": {"type": "string"}, "ys": {"type": "array",
                                                                            "items": {"type": "number"}}}}}},
    "map": {"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": {"type": "string"}}, "n": {"type": "integer"}}},
}  # fmt: skip
_INT = st.integers(-(2**63), 2**63 - 1)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False, width=64)
_TEXT = st.text(max_size=12)


def _value(schema: dict) -> st.SearchStrategy:
    if "properties" in schema:
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: _value(v) for k, v in schema["properties"].items() if k in required},
            optional={k: st.one_of(st.none(), _value(v)) for k, v in schema["properties"].items() if k not in required})
    if schema.get("type") == "object":
        return st.dictionaries(_TEXT, _TEXT, max_size=4)
    kind = schema["type"] if isinstance(schema["type"], str) else schema["type"][0]
    if kind == "array":
        return st.lists(_value(schema["items"]), max_size=4)
    base = {"integer": _INT, "number": _FLOAT, "string": _TEXT, "boolean": st.booleans()}[kind]
    return st.one_of(st.none(), base) if isinstance(schema["type"], list) else base


def _normalised(value: object, t: pa.DataType) -> object:
    """orjson's value as Arrow gives it back: absent fields null, numbers as the field's type,
    maps as (key, value) lists."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        assert isinstance(value, dict)
        return {f.name: _normalised(value.get(f.name), f.type) for f in t}
    if pa.types.is_map(t):
        assert isinstance(value, dict)
        return [(k, _normalised(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_list(t):
        assert isinstance(value, list)
        return [_normalised(v, t.value_type) for v in value]
    if pa.types.is_floating(t):
        return float(value)  # type: ignore[arg-type]
    return value


@pytest.mark.parametrize("kind", list(SCHEMAS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decoding_equals_orjson_normalised(kind: str, data: st.DataObject) -> None:
    schema = SCHEMAS[kind]
    rows = data.draw(st.lists(_value(schema), min_size=1, max_size=30))
    pretty = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    bodies = [json.dumps(r, indent=1 if p else None, ensure_ascii=data.draw(st.booleans())).encode()
              for r, p in zip(rows, pretty, strict=True)]
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry(schema))
    t = values.json_schema_type(schema)
    assert out.column("value").to_pylist() == [_normalised(orjson.loads(b), t) for b in bodies]


# ---------------------------------------------------------------- errors, record by record

BAD = [
    (b'{"id": 1, "customer": "x", "price": "cheap"}', "changed from number to string", "value.price"),
    (b'{"id": 1, "customer": "x",}', "JSON parse error", "value"),
    (b'{"customer": "x"}', "a required field was absent", "value"),
    (b'[1, 2]', "changed from object to array", "value"),
    (b'', "empty value", "value"),
    (b'null', "a JSON null", "value"),  # a fuzz finding: pyarrow's reader crashed the process on it
    (b' null, ', "a JSON null", "value"),
    (b'{"id": 1, "customer": "x"} {"id": 2, "customer": "y"}', "2 JSON values", "value"),
    (b'{"id": 1, "customer": "\xff"}', "invalid UTF-8", "value"),
    (b'{"id": 1, "customer": "a\nb"}', "Invalid encoding in string", "value"),
    (b'{"id": 1, "customer": "x", "day": "2026-02-30"}', "not a valid date", "value.day"),
    (b'{"id": 1, "customer": "x", "attrs": {"k": "v"}}', "int64", "value.attrs"),
    (b'{"id": 1, "customer": "x", "items": [{"qty": 1.5}]}', "couldn't parse:1.5", "value"),
]  # fmt: skip


@pytest.mark.parametrize("n", [30, 3 * BLOCK_RECORDS + 7])
def test_each_bad_record_gets_its_own_error_and_its_neighbours_decode(n: int) -> None:
    good = [json.dumps({"id": i, "customer": f"c{i}", "items": [{"sku": "s", "qty": i}]}).encode() for i in range(n)]
    vals = list(good)
    where = {}
    for k, (body, _, _) in enumerate(BAD):
        at = (k + 1) * n // (len(BAD) + 1) + k
        vals.insert(at, body)
        where[at] = k
    out = values.decode(table_of([framed(1, v) for v in vals]), registry(), errors="null")
    got, errs = out.column("value").to_pylist(), out.column("value_error").to_pylist()
    assert [g["id"] for i, g in enumerate(got) if i not in where] == list(range(n))
    for at, k in where.items():
        _, reason, path = BAD[k]
        assert got[at] is None and reason in errs[at] and f"- at {path} (offset {at}, schema id 1)" in errs[at], \
            (BAD[k], errs[at])
    assert sum(e is not None for e in errs) == len(BAD)
    with pytest.raises(ValueDecodeError) as info:
        values.decode(table_of([framed(1, v) for v in vals]), registry())
    first = min(where)
    assert info.value.offset == first and BAD[where[first]][1] in info.value.reason


def test_dead_letters_of_json_values() -> None:
    raw = table_of([framed(1, b'{"id": 1, "customer": "a"}'), framed(1, b'{"id": "x"}'), b'{"id": 3}']).to_arrow()
    good, dead = values.split(raw, registry(), values=1)
    assert good.column("value").to_pylist()[0]["id"] == 1
    assert dead.column("offset").to_pylist() == [1, 2]
    assert dead.column("path").to_pylist() == ["value.id", "value"]
    assert dead.column("value").to_pylist()[1] == b'{"id": 3}'  # kept raw


def test_writers_of_another_language_are_errors_of_their_records() -> None:
    reg = Registry({1: Schema(json.dumps(ORDER), "JSON", id=1), 2: '"string"'})
    vals = [framed(1, b'{"id": 1, "customer": "a"}'), framed(2, b"\x06abc")]
    out = values.decode(table_of(vals), reg, reader_schema=1, errors="null")
    assert out.column("value").to_pylist()[0]["id"] == 1
    assert out.column("value_error").to_pylist()[1].startswith("written with a AVRO schema, the reader schema is JSON")
    avro = values.decode(table_of(vals), reg, reader_schema=2, errors="null")  # the other way round
    assert avro.column("value").to_pylist() == [None, "abc"]
    with pytest.raises(ValueError, match="format='avro' but the reader schema is JSON"):
        values.decode(table_of(vals), reg, reader_schema=1, format="avro")


# ---------------------------------------------------------------- plain JSON


def test_plain_json_inferred_saved_and_reused() -> None:
    bodies = [json.dumps({"id": i, "name": f"n{i}", "score": i / 2, "tags": ["a"], "at": "2026-01-01"}).encode()
              for i in range(5)] + [b'{"id": "oops"}', b"not json"]
    t = table_of(bodies)
    out = values.decode(t, None, format="json", errors="null")
    vt = out.schema.field("value").type
    assert vt == pa.struct([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                            ("tags", pa.list_(pa.string())), ("at", pa.string())])  # Spark's: no time inferred
    assert out.column("value").to_pylist()[1] == {"id": 1, "name": "n1", "score": 0.5, "tags": ["a"],
                                                  "at": "2026-01-01"}
    errs = out.column("value_error").to_pylist()
    assert errs[:5] == [None] * 5 and "offset 5" in errs[5] and "offset 6" in errs[6]
    assert out.column("value_schema_id").null_count == len(bodies)
    f = values.frames(t, framing="raw")
    saved = json.dumps(values.infer_json_schema(f.data, f.start, f.length))
    again = values.decode(t, None, format="json", reader_schema=saved, errors="null")
    assert again.column("value").to_pylist() == out.column("value").to_pylist()
    with pytest.raises(ValueError, match="a registry is needed"):
        values.decode(t, None)


# ---------------------------------------------------------------- kbatch convert


def _json_root(root: Path) -> None:
    schemas_topic.write_topic(root, [
        schemas_topic.schema("orders-value", 1, 1, json.dumps(ORDER), schema_type="JSON"),
        schemas_topic.schema("avros-value", 1, 2, json.dumps({"type": "record", "name": "A", "fields": [
            {"name": "a", "type": "long"}]})),
    ])  # fmt: skip
    with kbatch.LogWriter(root, "orders", 0) as w:
        w.append(kbatch.encode([framed(1, json.dumps({"id": i, "customer": f"c{i}"}).encode()) for i in range(6)]
                               + [framed(1, b'{"id": "bad"}')], base_offset=0))
    with kbatch.LogWriter(root, "avros", 0) as w:
        w.append(kbatch.encode([framed(2, b"\x02"), framed(2, b"\x04")], base_offset=0))
    with kbatch.LogWriter(root, "plain", 0) as w:
        w.append(kbatch.encode([json.dumps({"n": i, "s": "x"}).encode() for i in range(4)] + [b"{"], base_offset=0))
    with kbatch.LogWriter(root, "tombstones", 0) as w:
        w.append(kbatch.encode([None, None], keys=[b"a", b"b"], base_offset=0))


def _read(folder: Path, topic: str) -> pa.Table:
    return pads.dataset(str(folder / f"topic={topic}"), format="parquet").to_table().sort_by("offset")


def test_convert_values_auto_decodes_each_topic_by_its_schema_type(tmp_path: Path) -> None:
    _json_root(tmp_path / "root")
    out = tmp_path / "out"
    summary = summary_of(convert_cli(str(tmp_path / "root"), str(out), "--values", "auto",
                                     "--subscribe", "orders,avros"))
    orders = _read(out, "orders")
    assert [v["id"] for v in orders.column("value").to_pylist()] == list(range(6))
    assert _read(out, "avros").column("value").to_pylist() == [{"a": 1}, {"a": 2}]
    dead = _read(out / "_dead_letter", "orders")
    assert dead.column("offset").to_pylist() == [6] and dead.column("path").to_pylist() == ["value.id"]
    assert summary["dead_letters"] == 1


def test_convert_values_json_infers_saves_and_reuses_the_schema(tmp_path: Path) -> None:
    _json_root(tmp_path / "root")
    saved = tmp_path / "plain.schema.json"
    summary = summary_of(convert_cli(str(tmp_path / "root"), str(tmp_path / "out"), "--values", "json",
                                     "--subscribe", "plain,tombstones", "--save-value-schema", str(saved)))
    assert "tombstones: values left binary (no value to infer a JSON Schema from)" in summary["notes"]
    assert any("plain: values plain JSON, a schema inferred from its first 1000 values" in n
               for n in summary["notes"])
    assert json.loads(saved.read_text())["properties"]["n"] == {"type": ["integer", "null"]}
    plain = _read(tmp_path / "out", "plain")
    assert plain.column("value").to_pylist() == [{"n": i, "s": "x"} for i in range(4)]
    assert summary["dead_letters"] == 1  # b"{"
    again = summary_of(convert_cli(str(tmp_path / "root"), str(tmp_path / "out2"), "--values", "json",
                                   "--subscribe", "plain", "--value-schema", str(saved)))
    assert any(f"--value-schema {saved}" in n for n in again["notes"])
    assert _read(tmp_path / "out2", "plain").column("value").to_pylist() == plain.column("value").to_pylist()


def test_raise_names_the_first_bad_record_whichever_path_finds_it() -> None:
    """A fuzz finding: a bad body that does not start with "{" (parsed alone) before a bad one in
    the bulk was skipped by errors="raise", which then named the later one."""
    vals = [framed(1, b"\xff\xff"), framed(1, b'{"id": 1, "customer": "x"}'), framed(1, b'{"id": "\xff"}')]
    null = values.decode(table_of(vals), registry(), errors="null").column("value_error").to_pylist()
    with pytest.raises(ValueDecodeError) as info:
        values.decode(table_of(vals), registry())
    assert info.value.offset == 0 and str(info.value) == null[0]


def test_convert_json_options_are_checked(tmp_path: Path) -> None:
    _json_root(tmp_path / "root")
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(ORDER))
    for extra, message in [
        (["--values", "avro", "--value-schema", str(schema)], "--value-schema is the schema of JSON values"),
        (["--values", "json", "--value-schema", str(tmp_path / "missing.json")], "no such file"),
        (["--values", "json", "--keys", "avro"], "--values json (plain JSON) takes --keys json only"),
    ]:
        proc = convert_cli(str(tmp_path / "root"), str(tmp_path / "out"), *extra)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.returncode, proc.stderr)


# ---------------------------------------------------------------- kbatch dump --value-decoder json


def test_dump_prints_json_schema_values_typed(tmp_path: Path) -> None:
    _json_root(tmp_path)
    log = tmp_path / "orders-0" / "00000000000000000000.log"
    rc, out, _ = dump("--files", str(log), "--value-decoder", "json")
    records = [line for line in out if line.startswith("| offset:")]
    assert records[0].endswith(' payload: {"id":0,"customer":"c0","status":null,"at":null,"day":null,"ref":null,'
                               '"price":null,"note":null,"items":null,"attrs":null}'), records[0]
    assert "payload: Error: JSON parse error: Column(/id) changed from number to string - at value.id (offset 6" \
        in records[6]
    assert rc == 1  # a value that did not decode
    rc, out, _ = dump("--files", str(log), "--value-decoder", "json", "--json")
    first = next(json.loads(line) for line in out if json.loads(line).get("type") == "record")
    assert first["payload"]["customer"] == "c0" and first["payload_encoding"] == "json"
    avro_log = tmp_path / "avros-0" / "00000000000000000000.log"  # Avro values: errors, not guesses
    rc, out, _ = dump("--files", str(avro_log), "--value-decoder", "json")
    assert rc == 1 and all("payload: Error: format='json' but the reader schema is AVRO" in line
                           for line in out if line.startswith("| offset:"))


def test_to_arrow_with_a_registry_decodes_json_schema_values() -> None:
    t = table_of([framed(1, b'{"id": 1, "customer": "a"}'), None])
    out = t.to_arrow(values=registry())
    assert out.column("value").to_pylist()[0]["customer"] == "a"
    assert out.column("value_schema_id").to_pylist() == [1, None]


def test_a_value_longer_than_pyarrows_block_decodes() -> None:
    big = {"id": 2, "customer": "x" * (3 << 20)}  # 3 MiB: longer than pyarrow.json's 1 MiB blocks
    vals = [framed(1, json.dumps(r).encode()) for r in ({"id": 1, "customer": "a"}, big, {"id": 3, "customer": "c"})]
    out = values.decode(table_of(vals), registry())
    assert [v["id"] for v in out.column("value").to_pylist()] == [1, 2, 3]
    assert len(out.column("value").to_pylist()[1]["customer"]) == 3 << 20


@pytest.mark.parametrize("first", [b"null", b" \tnull", b"nullx"])
def test_plain_json_inference_of_a_null_value_does_not_crash(first: bytes) -> None:
    # issue 34 item 3: pyarrow.json's reader crashed the process on a text starting with null; the
    # inference path reached it unguarded (run in a child so that a crash fails the test)
    code = f"""
import numpy as np
from kbatch import values
bodies = [{first!r}, b'{{"a": 1}}', {first!r}]
data = b"".join(bodies)
lengths = np.array([len(b) for b in bodies])
starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
print(values.infer_json_schema(data, starts, lengths)["properties"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "{'a': {'type': ['integer', 'null']}}" in done.stdout


def test_plain_json_inference_leaves_out_values_that_are_not_utf8() -> None:
    # issue 34 item 5: a non-UTF-8 object key reached pyarrow's field names: UnicodeDecodeError
    bodies = [b'{"\xff": 1}', b'{"a": {"\xff\xfe": 1}}', b'{"a": 1, "b": "x"}']
    starts = np.cumsum([0] + [len(b) for b in bodies[:-1]])
    lengths = np.array([len(b) for b in bodies])
    got = values.infer_json_schema(b"".join(bodies), starts, lengths)
    assert got["properties"] == {"a": {"type": ["integer", "null"]}, "b": {"type": ["string", "null"]}}
    with pytest.raises(values.JsonSchemaError, match="none of the first 2 values is UTF-8 text"):
        values.infer_json_schema(b"".join(bodies[:2]), starts[:2], lengths[:2])
    out = values.decode(table_of(bodies), None, format="json", errors="null")
    assert out.column("value").to_pylist()[2] == {"a": 1, "b": "x"}
    assert ["invalid UTF-8" in e for e in out.column("value_error").to_pylist()[:2]] == [True, True]


def test_errors_raise_names_the_first_bad_record_not_a_later_framing_error() -> None:
    # issue 34 item 6: a later record's framing error was raised before the bodies were parsed
    vals = [framed(1, b'{"id": 1, "customer": "a"}'), framed(1, b'{"id": "x", "customer": "b"}'), b"\x07junk"]
    with pytest.raises(ValueDecodeError) as info:
        values.decode(table_of(vals), registry())
    assert info.value.offset == 1 and "changed from number to string" in info.value.reason
    with pytest.raises(ValueDecodeError) as info:  # a framing error first is still the one raised
        values.decode(table_of([vals[0], vals[2], vals[1]]), registry())
    assert info.value.offset == 1 and "changed from number" not in info.value.reason
    out = values.decode(table_of(vals), registry(), errors="null")
    assert [e is not None for e in out.column("value_error").to_pylist()] == [False, True, True]


# ---------------------------------------------------------------- objects with optional parts, maps, DuckDB
# (defects found by tests/log/test_scan_properties.py, each fixed with its cases below; every case on
# both paths that build maps: DuckDB's JSON functions and orjson)


@pytest.fixture(params=["duckdb", "orjson"])
def maps_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "orjson":
        monkeypatch.setattr(json_decode, "_duckdb", None)
    elif json_decode._duckdb is None:
        pytest.skip("no DuckDB")
    return str(request.param)


def _decoded(schema: dict, bodies: list[bytes]) -> tuple[list, list]:
    """The values and errors of ``bodies`` (errors="null"), checked against the schema's type."""
    out = values.decode(table_of([framed(1, b) for b in bodies]), registry(schema), errors="null")
    column = out.column("value")
    assert column.type == values.json_schema_type(schema)
    for chunk in column.chunks:
        chunk.validate(full=True)
    return column.to_pylist(), out.column("value_error").to_pylist()


def _obj(props: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": props, **({"required": list(required)} if required else {})}


_NUM = {"type": "number"}
_MAP_NUM = {"type": "object", "additionalProperties": _NUM}
NESTED_MAP = _obj({"o": _obj({"m": _MAP_NUM, "n": _NUM})})


@pytest.mark.parametrize("body", [b'{"o": {"m": {"k": 1}}}', b'{"o": {"n": 2}}'])
def test_an_object_holding_a_map_may_leave_an_optional_property_out(body: bytes, maps_by: str) -> None:
    got, errors = _decoded(NESTED_MAP, [body])
    assert errors == [None]
    assert got[0]["o"]["n" if b'"n"' in body else "m"] is not None


# (schema, good bodies and their values, bad bodies): optional properties left out beside a map, in
# one, at several depths, in arrays of such objects, in maps of objects
_OPTIONAL_BESIDE_MAPS = [
    (_obj({"a": _obj({"b": _obj({"m": _MAP_NUM, "n": _NUM})})}),
     [(b'{"a": {"b": {"m": {"k": 1}}}}', {"a": {"b": {"m": [("k", 1.0)], "n": None}}}),
      (b'{"a": {}}', {"a": {"b": None}}), (b'{}', {"a": None})],
     [b'{"a": {"b": {"m": {"k": 1}, "n": "x"}}}', b'{"a": {"b": {"m": {"k": "1"}}}}', b'{"a": {"b": 5}}']),
    (_obj({"xs": {"type": "array", "items": _obj({"m": _MAP_NUM, "n": _NUM})}}),
     [(b'{"xs": [{"m": {"k": 1}}, {"n": 2}, {}]}',
       {"xs": [{"m": [("k", 1.0)], "n": None}, {"m": None, "n": 2.0}, {"m": None, "n": None}]})],
     [b'{"xs": [{"n": 2}, {"n": true}]}', b'{"xs": {"n": 2}}']),
    (_obj({"mo": {"type": "object", "additionalProperties": _obj({"a": _NUM, "b": {"type": "string"}})}}),
     [(b'{"mo": {"k": {"a": 1}, "j": {"b": "x"}, "i": {}}}',
       {"mo": [("k", {"a": 1.0, "b": None}), ("j", {"a": None, "b": "x"}), ("i", {"a": None, "b": None})]})],
     [b'{"mo": {"k": {"a": "1"}}}', b'{"mo": {"k": 5}}', b'{"mo": {"k": {"b": 2}}}']),
    (_obj({"mm": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": _obj(
        {"xs": {"type": "array", "items": _obj({"a": {"type": "integer"}, "m": _MAP_NUM})}})}}}),
     [(b'{"mm": {"k": {"j": {"xs": [{"a": 1}, {"m": {"z": 2}}]}}}}',
       {"mm": [("k", [("j", {"xs": [{"a": 1, "m": None}, {"a": None, "m": [("z", 2.0)]}]})])]})],
     [b'{"mm": {"k": {"j": {"xs": [{"a": 1.5}]}}}}']),
]


@pytest.mark.parametrize(("schema", "good", "bad"), _OPTIONAL_BESIDE_MAPS)
def test_optional_properties_beside_or_inside_maps_at_any_depth(schema: dict, good: list, bad: list,
                                                                maps_by: str) -> None:
    bodies = [b for b, _ in good] + bad
    got, errors = _decoded(schema, bodies * 3)  # good and bad mixed: each record its own outcome
    assert got == ([v for _, v in good] + [None] * len(bad)) * 3
    assert [e is None for e in errors] == ([True] * len(good) + [False] * len(bad)) * 3


def test_an_object_in_a_map_with_only_required_properties_still_needs_them(maps_by: str) -> None:
    schema = _obj({"mo": {"type": "object", "additionalProperties": _obj({"a": _NUM, "b": _NUM}, ("a", "b"))}})
    got, errors = _decoded(schema, [b'{"mo": {"k": {"a": 1, "b": 2}}}', b'{"mo": {"k": {"a": 1}}}',
                                    b'{"mo": {"k": {"a": 1, "b": null}}}', b'{"mo": {"k": null}}'])
    assert got == [{"mo": [("k", {"a": 1.0, "b": 2.0})]}, None, None, None]  # (a map's values are not null)
    assert [e is None for e in errors] == [True, False, False, False]


def test_a_duckdb_error_quoting_the_value_cut_inside_a_character_is_the_record_s_error(maps_by: str) -> None:
    schema = _obj({"p0": _obj({"p0": _MAP_NUM, "p3": _NUM})})
    body = br'{"p0": {"p0": {"k0": -1.5, "k1": 0.0, "k2": 0.0}, "p1": ["\"\"9\u20ac"]}}'
    got, errors = _decoded(schema, [body])  # raised UnicodeDecodeError
    assert errors == [None] and got[0]["p0"]["p3"] is None


@pytest.mark.parametrize("pad", range(4))
def test_every_duckdb_error_of_one_record_is_that_record_s_error(pad: int, maps_by: str) -> None:
    # DuckDB quotes the value in "Expected ARRAY, but got VARCHAR: ..." cut at a byte count: for
    # some pads inside a euro sign, whose bytes its Python binding then failed to decode
    schema = _obj({"m": {"type": "object", "additionalProperties": {"type": "array", "items": _NUM}}})
    bad = ('{"m": {"k": "' + "x" * pad + "\u20ac" * 30 + '"}}').encode()
    bad_raw = ('{"m": {"k": "' + "x" * pad + "\u20ac" * 30 + '"}}').encode().decode("unicode_escape").encode()
    got, errors = _decoded(schema, [bad, b'{"m": {"k": [1.5]}}', bad_raw])
    assert got == [None, {"m": [("k", [1.5])]}, None]
    assert errors[1] is None and all("array" in e.lower() and "value" in e for e in (errors[0], errors[2]))
    assert maps_by == "orjson" or "\ufffd" not in ascii(errors[0])  # (DuckDB quotes the escapes as written)


@pytest.mark.parametrize("body", [b'{"x": 1}', b'{"o": null, "x": 1}'])
def test_an_optional_object_left_out_does_not_need_its_required_properties(body: bytes) -> None:
    schema = _obj({"o": _obj({"r": {"type": "integer"}}, ("r",)), "x": {"type": "integer"}})
    got, errors = _decoded(schema, [body, b'{"o": {}, "x": 1}', b'{"o": {"r": null}, "x": 1}', b'{"o": {"r": 2}}'])
    assert got == [{"o": None, "x": 1}, None, None, {"o": {"r": 2}, "x": None}]
    assert [e.split(" (")[0] for e in errors[1:3]] == ["a required field was null or absent - at value.o.r"] * 2


_DATE = {"type": "string", "format": "date"}
# (schema, good bodies and their values, bad bodies): required properties of optional objects at
# several depths, in arrays, in maps, beside maps and dates
_REQUIRED_IN_OPTIONAL = [
    (_obj({"a": _obj({"b": _obj({"r": {"type": "integer"}}, ("r",))}, ("b",))}),
     [(b'{}', {"a": None}), (b'{"a": null}', {"a": None}), (b'{"a": {"b": {"r": 1}}}', {"a": {"b": {"r": 1}}})],
     [b'{"a": {}}', b'{"a": {"b": null}}', b'{"a": {"b": {}}}']),
    (_obj({"a": _obj({"b": _obj({"r": {"type": "integer"}}, ("r",))})}),
     [(b'{"a": {}}', {"a": {"b": None}}), (b'{"a": {"b": null}}', {"a": {"b": None}})],
     [b'{"a": {"b": {}}}']),
    (_obj({"xs": {"type": "array", "items": _obj({"r": {"type": "integer"}, "s": _NUM}, ("r",))}}),
     [(b'{}', {"xs": None}), (b'{"xs": [{"r": 1}]}', {"xs": [{"r": 1, "s": None}]}), (b'{"xs": []}', {"xs": []})],
     [b'{"xs": [{"r": 1}, {"s": 2}]}', b'{"xs": [null]}']),
    (_obj({"xs": {"type": "array", "items": {"type": ["object", "null"], "properties": {
        "r": {"type": "integer"}}, "required": ["r"]}}}),
     [(b'{"xs": [null, {"r": 1}]}', {"xs": [None, {"r": 1}]})], [b'{"xs": [{}]}']),
    (_obj({"o": _obj({"d": _DATE, "e": _DATE}, ("d",)), "d": _DATE}),
     [(b'{"d": "2026-01-02"}', {"o": None, "d": datetime.date(2026, 1, 2)}),
      (b'{"o": {"d": "2026-01-03"}}', {"o": {"d": datetime.date(2026, 1, 3), "e": None}, "d": None})],
     [b'{"o": {"e": "2026-01-03"}}']),
    (_obj({"mo": {"type": "object", "additionalProperties": _obj({"r": _NUM}, ("r",))}}),
     [(b'{}', {"mo": None}), (b'{"mo": {"k": {"r": 1}}}', {"mo": [("k", {"r": 1.0})]})],
     [b'{"mo": {"k": {}}}', b'{"mo": {"k": {"r": null}}}']),
    (_obj({"o": _obj({"m": _MAP_NUM, "r": _NUM}, ("r",))}),
     [(b'{}', {"o": None}), (b'{"o": null}', {"o": None}), (b'{"o": {"r": 1}}', {"o": {"m": None, "r": 1.0}})],
     [b'{"o": {"m": {"k": 1}}}']),
    (_obj({"o": _obj({"xs": {"type": "array", "items": _obj({"q": _obj({"r": _NUM}, ("r",))}, ("q",))}}, ("xs",))}),
     [(b'{}', {"o": None}), (b'{"o": {"xs": [{"q": {"r": 1}}]}}', {"o": {"xs": [{"q": {"r": 1.0}}]}})],
     [b'{"o": {}}', b'{"o": {"xs": [{}]}}', b'{"o": {"xs": [{"q": {}}]}}']),
]


@pytest.mark.parametrize(("schema", "good", "bad"), _REQUIRED_IN_OPTIONAL)
def test_required_properties_bind_only_where_their_object_is_present(schema: dict, good: list, bad: list,
                                                                      maps_by: str) -> None:
    bodies = [b for b, _ in good] + bad
    got, errors = _decoded(schema, bodies * 3)
    assert got == ([v for _, v in good] + [None] * len(bad)) * 3
    assert [e is None for e in errors] == ([True] * len(good) + [False] * len(bad)) * 3


def test_required_properties_of_optional_objects_over_many_records(maps_by: str) -> None:
    # past BLOCK_RECORDS: the bad records are found by halving, the absent objects' rows kept
    schema = _obj({"o": _obj({"r": {"type": "integer"}, "m": _MAP_NUM}, ("r",)), "i": {"type": "integer"}})
    bodies = [b'{"i": %d}' % i if i % 3 else b'{"i": %d, "o": {"r": %d}}' % (i, i) for i in range(BLOCK_RECORDS * 2)]
    bodies[1500] = b'{"i": 1500, "o": {}}'
    got, errors = _decoded(schema, bodies)
    assert [i for i, e in enumerate(errors) if e is not None] == [1500]
    assert got[3] == {"o": {"r": 3, "m": None}, "i": 3} and got[4] == {"o": None, "i": 4}
