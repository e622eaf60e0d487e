"""kbatch.values.reader_schema and arrow_type: the reader schema and its Arrow type fixed before any
record is read (what Spark declares), equal to what decode then gives."""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pytest

import kbatch
from kbatch import values
from kbatch.values import AvroSchemaError, Registry, SchemaNotFoundError

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "map", "values": ["null", "string"]}},
    {"name": "pick", "type": ["null", "string", "long"], "default": None}]}  # fmt: skip
NODE = {"type": "record", "name": "Node", "fields": [
    {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}]}  # fmt: skip


def _registry() -> Registry:
    from kbatch.values import Schema

    return Registry({1: Schema(json.dumps(ORDER), subject="orders-value", version=1),
                     2: json.dumps(NODE), 3: Schema("syntax = 'proto3';", "PROTOBUF")})


def test_reader_schema_by_id_text_subject_or_refused():
    reg = _registry()
    assert values.reader_schema(reg, 1).text == json.dumps(ORDER)
    assert values.reader_schema(reg, "1").id == 1  # an id as text (a Spark option)
    assert values.reader_schema(reg, json.dumps(NODE)).text == json.dumps(NODE)
    assert values.reader_schema(reg, subject=values.topic_subject("orders")).id == 1
    with pytest.raises(AvroSchemaError, match="name a reader schema"):
        values.reader_schema(reg)
    with pytest.raises(SchemaNotFoundError):
        values.reader_schema(reg, subject="nope-value")
    with pytest.raises(AvroSchemaError, match="PROTOBUF, not AVRO"):
        values.reader_schema(reg, 3)
    with pytest.raises(ValueError, match="'value' or 'key'"):
        values.topic_subject("orders", "headers")


@pytest.mark.parametrize(("reader", "max_depth"), [(ORDER, None), (NODE, 3)])
def test_arrow_type_is_what_decode_gives(reader, max_depth):
    body = b"\x02\x04\x00" if reader is NODE else b"\x02\x04\x00\x00"  # v=1, next: [Node v=2, next: null]
    table = kbatch.decode(kbatch.encode([b"\x00" + struct.pack(">i", 9) + body]))
    reg = Registry({9: json.dumps(reader)})
    out = values.decode(table, reg, max_depth=max_depth, errors="null")
    assert values.arrow_type(json.dumps(reader), max_depth=max_depth) == out.schema.field("value").type
    assert pa.types.is_struct(values.arrow_type(json.dumps(reader), max_depth=max_depth))


def test_a_recursive_reader_needs_a_depth():
    with pytest.raises(AvroSchemaError, match="recursive"):
        values.arrow_type(json.dumps(NODE))


def test_from_path_is_a_schemas_topic_else_schema_files(tmp_path):
    from support import schemas_topic

    schemas_topic.write_topic(tmp_path / "root", [schemas_topic.schema("orders-value", 1, 4, json.dumps(ORDER))])
    assert Registry.from_path(tmp_path / "root").latest("orders-value").id == 4
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "5.avsc").write_text(json.dumps(NODE))
    assert Registry.from_path(tmp_path / "files").schema(5).text == json.dumps(NODE)
    with pytest.raises(values.RegistryError, match="nor a directory of schema files"):
        Registry.from_path(tmp_path / "nowhere")


def test_reader_schema_of_each_format():
    """``format=``: JSON Schema and ``.proto`` text, a compiled ProtoSchema, a subject's latest of
    that language; another language refused with that language's error; None registry: text only."""
    from kbatch.values import JsonSchemaError, ProtobufSchemaError

    reg = _registry()
    assert values.reader_schema(reg, '{"type": "object"}', format="json").schema_type == "JSON"
    assert values.reader_schema(None, '{"type": "object"}', format="json").schema_type == "JSON"
    assert values.reader_schema(reg, 3, format="protobuf").schema_type == "PROTOBUF"
    assert values.reader_schema(reg, 3, format="auto").schema_type == "PROTOBUF"
    proto = "syntax = 'proto3'; message M { int32 a = 1; }"
    assert values.reader_schema(reg, proto, format="protobuf").text == proto
    pytest.importorskip("grpc_tools")
    compiled = values.compile_proto(proto)
    assert values.reader_schema(reg, compiled, format="protobuf") is compiled
    with pytest.raises(ProtobufSchemaError, match="AVRO, not PROTOBUF"):
        values.reader_schema(reg, subject="orders-value", format="protobuf")
    with pytest.raises(JsonSchemaError, match="a Schema or JSON Schema text"):
        values.reader_schema(reg, format="json")
    with pytest.raises(TypeError, match="needs a registry"):
        values.reader_schema(None, 3, format="json")
    with pytest.raises(ValueError, match="format must be"):
        values.reader_schema(reg, 1, format="xml")
