"""``kbatch dump --value-decoder avro``: registry-framed Avro values printed as JSON in dump's own
line formats, the registry from ``--registry`` or the root's ``_schemas``; a bad value prints its
error in its place, is counted at the end, and the exit status is 1."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from pathlib import Path

import pytest
from support.avro_values import framed, write
from support.dumprun import dump
from support.schemas_topic import schema, write_topic

import kbatch

pytest.importorskip("fastavro")

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "blob", "type": "bytes"},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "note", "type": ["null", "string"]},
]}  # fmt: skip
AT = datetime.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=datetime.timezone.utc)
ONE = {"id": 1, "total": decimal.Decimal("12.30"), "at": AT, "day": datetime.date(2026, 3, 4), "blob": b"\x00\xff",
       "attrs": {"a": "b"}, "note": None}
WANT = {"id": 1, "total": "12.30", "at": "2026-03-04T05:06:07.890000+00:00", "day": "2026-03-04",
        "blob": base64.b64encode(b"\x00\xff").decode(), "attrs": {"a": "b"}, "note": None}


def root_with(tmp_path: Path, vals: list[bytes | None], keys: list[bytes | None] | None = None) -> Path:
    write_topic(tmp_path, [schema("orders-value", 1, 7, json.dumps(ORDER))])
    with kbatch.LogWriter(tmp_path, "orders", 0) as w:
        w.append(kbatch.encode(vals, keys))
    return tmp_path / "orders-0" / "00000000000000000000.log"


def test_values_print_as_json_with_the_roots_own_registry(tmp_path: Path) -> None:
    log = root_with(tmp_path, [framed(7, write(ORDER, ONE)), None])
    rc, out, err = dump("--files", str(log), "--value-decoder", "avro")
    assert rc == 0, err
    records = [line for line in out if line.startswith("| offset:")]
    assert records[0].endswith(" payload: " + json.dumps(WANT, separators=(",", ":")))
    assert "payload" not in records[1]  # a tombstone has no payload, as with every decoder


def test_json_lines_carry_the_value_as_an_object(tmp_path: Path) -> None:
    log = root_with(tmp_path, [framed(7, write(ORDER, ONE))])
    rc, out, _ = dump("--files", str(log), "--value-decoder", "avro", "--json", "--registry", str(tmp_path))
    record = next(json.loads(line) for line in out if json.loads(line).get("type") == "record")
    assert rc == 0 and record["payload"] == WANT and record["payload_encoding"] == "avro"


def test_a_bad_value_prints_its_error_in_place_and_dump_goes_on_then_exits_1(tmp_path: Path) -> None:
    good = framed(7, write(ORDER, ONE))
    log = root_with(tmp_path, [good, good[:-3], b"plain text", framed(99, b"\x02"), good])
    rc, out, err = dump("--files", str(log), "--value-decoder", "avro")
    records = [line for line in out if line.startswith("| offset:")]
    assert len(records) == 5 and rc == 1
    assert "payload: Error: truncated value" in records[1] and "offset 1" in records[1]
    assert "payload: Error: no schema registry frame" in records[2]
    assert "payload: Error: unknown schema id 99" in records[3]
    assert records[4].endswith(json.dumps(WANT, separators=(",", ":")))
    assert any("3 record(s) could not be decoded, the first at offset 1: truncated value" in e for e in err)


def test_keys_decode_too(tmp_path: Path) -> None:
    key_schema = {"type": "record", "name": "K", "fields": [{"name": "k", "type": "string"}]}
    write_topic(tmp_path, [schema("orders-key", 1, 3, json.dumps(key_schema))])
    with kbatch.LogWriter(tmp_path, "orders", 0) as w:
        w.append(kbatch.encode([b"v"], [framed(3, write(key_schema, {"k": "x"}))]))
    rc, out, err = dump("--files", str(tmp_path / "orders-0"), "--key-decoder", "avro")
    assert rc == 0, err
    assert any(line.endswith('key: {"k":"x"} payload: v') for line in out)


def test_a_reader_schema_lays_the_values_out(tmp_path: Path) -> None:
    log = root_with(tmp_path, [framed(7, write(ORDER, ONE))])
    reader = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                            {"name": "x", "type": "int", "default": 4}]}
    rc, out, _ = dump("--files", str(log), "--value-decoder", "avro", "--reader-schema", json.dumps(reader))
    assert rc == 0 and any(line.endswith('payload: {"id":1,"x":4}') for line in out)


def test_without_a_registry_dump_says_so_and_exits_1(tmp_path: Path) -> None:
    with kbatch.LogWriter(tmp_path, "orders", 0) as w:
        w.append(kbatch.encode([framed(7, write(ORDER, ONE))]))
    rc, out, err = dump("--files", str(tmp_path / "orders-0"), "--value-decoder", "avro")
    assert rc == 1
    assert any("no --registry given and no _schemas topic" in e for e in err)
    assert any("payload: Error: no schema registry" in line for line in out)


def test_a_directory_of_schema_files_is_a_registry(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "7.avsc").write_text(json.dumps(ORDER))
    with kbatch.LogWriter(tmp_path / "root", "orders", 0) as w:
        w.append(kbatch.encode([framed(7, write(ORDER, ONE))]))
    rc, out, _ = dump("--files", str(tmp_path / "root" / "orders-0"), "--value-decoder", "avro",
                      "--registry", str(tmp_path / "schemas"))
    assert rc == 0 and any(line.endswith(json.dumps(WANT, separators=(",", ":"))) for line in out)
