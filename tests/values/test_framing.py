"""frames / parse_frames: the registry wire framings over a table's arrays."""

from __future__ import annotations

import io
import json
import struct
import uuid

import numpy as np
import pytest
from support.registry_server import RegistryServer

import kbatch
from kbatch.values import (
    FRAME_BAD_HEADER,
    FRAME_BAD_MAGIC,
    FRAME_OK,
    FRAME_TOO_SHORT,
    Registry,
    ValueDecodeError,
    frames,
    guid_of,
    parse_frames,
)

G1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
G2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + body


def table_of(values, headers=None, keys=None):
    return kbatch.decode(kbatch.encode(values, keys, headers=headers))


def bodies(f, table):
    buf = memoryview(table.data).cast("B")
    return [None if n < 0 else bytes(buf[s : s + n]) for s, n in zip(f.start.tolist(), f.length.tolist(), strict=True)]


def test_prefix_id_guid_null_and_errors():
    values = [framed(7, b"abc"), None, b"\x01" + G1.bytes + b"xy", framed(-2, b""), b"", b"\x00\x00\x01",
              b"{json}", b"\x01" + G2.bytes[:10], framed(2**31 - 1, b"z"), b"\x01" + G1.bytes]
    table = table_of(values)
    f = frames(table)
    assert f.schema_id.dtype == np.int32 and f.start.dtype == np.int64 and f.error.dtype == np.uint8
    assert f.schema_id.tolist() == [7, -1, -1, -2, -1, -1, -1, -1, 2**31 - 1, -1]
    assert f.error.tolist() == [FRAME_OK, FRAME_OK, FRAME_OK, FRAME_OK, FRAME_TOO_SHORT, FRAME_TOO_SHORT,
                                FRAME_BAD_MAGIC, FRAME_TOO_SHORT, FRAME_OK, FRAME_OK]
    assert f.guids == (G1,)
    assert f.guid_index.tolist() == [-1, -1, 0, -1, -1, -1, -1, -1, -1, 0]
    assert bodies(f, table) == [b"abc", None, b"xy", b"", None, None, None, None, b"z", b""]
    assert f.ok.tolist() == [e == FRAME_OK for e in f.error.tolist()]


def test_error_messages_name_the_record_and_the_byte():
    table = table_of([framed(1, b"a"), b"\x00\x00\x01", b"{}", b""])
    table.records["offset"] += 100
    f = frames(table)
    assert f.describe(0) == ("", -1)
    assert f.describe(1) == ("too short for a schema registry frame: 3 bytes, the frame needs 5", 3)
    assert f.describe(2)[1] == 0 and "magic byte 0x7b" in f.describe(2)[0]
    assert f.describe(3) == ("too short for a schema registry frame: the value is empty", 0)
    with pytest.raises(ValueDecodeError) as info:
        f.check(table.records["offset"], partition=4, topic="orders")
    err = info.value
    assert (err.offset, err.partition, err.topic, err.position, err.path) == (101, 4, "orders", 3, "value")
    assert isinstance(err, kbatch.KBatchError) and isinstance(err, ValueError)
    assert str(err) == ("too short for a schema registry frame: 3 bytes, the frame needs 5 - at value "
                        "(topic orders, partition 4, offset 101, byte 3)")
    frames(table_of([framed(1, b"a"), None])).check()  # nothing to report


def test_the_header_is_looked_for_first_and_the_last_one_counts():
    header_guid = [("__value_schema_id", b"\x01" + G2.bytes)]
    values = [
        b"\x00\x00\x00\x00\x09body",                    # header GUID: the whole value is body
        framed(9, b"b"),                                 # no header: the prefix
        b"raw",                                          # header id (0x00 + int32)
        framed(9, b"c"),                                 # a null header is as none: the prefix
        b"raw2",                                         # two headers: the last one counts
        b"zz",                                           # a bad header is an error, not a fallback
        None,                                            # a null value stays null
    ]
    headers = [header_guid, [("trace", b"1")], [("__value_schema_id", b"\x00\x00\x00\x00\x05")],
               [("__value_schema_id", None)],
               [("__value_schema_id", b"\x00\x00\x00\x00\x01"), ("x", b""),
                ("__value_schema_id", b"\x00\x00\x00\x00\x02")],
               [("__value_schema_id", b"\x02abc")], header_guid]
    table = table_of(values, headers=headers)
    f = frames(table)
    assert f.schema_id.tolist() == [-1, 9, 5, 9, 2, -1, -1]
    assert f.guid_index.tolist() == [0, -1, -1, -1, -1, -1, -1] and f.guids == (G2,)
    assert f.error.tolist() == [0, 0, 0, 0, 0, FRAME_BAD_HEADER, 0]
    assert bodies(f, table) == [b"\x00\x00\x00\x00\x09body", b"b", b"raw", b"c", b"raw2", None, None]
    assert "__value_schema_id: 4 bytes" in f.describe(5)[0]
    # keys have their own header
    keyed = table_of([b"v"], keys=[b"k"], headers=[[("__key_schema_id", b"\x00\x00\x00\x00\x03")]])
    assert frames(keyed, column="key").schema_id.tolist() == [3]
    assert frames(keyed).error.tolist() == [FRAME_BAD_MAGIC]


def test_raw_framing_gives_every_value_the_schema():
    table = table_of([b"\x06abc", None, b""])
    f = frames(table, framing="raw", schema_id=12)
    assert f.schema_id.tolist() == [12, -1, 12] and f.error.tolist() == [0, 0, 0]
    assert bodies(f, table) == [b"\x06abc", None, b""]


def test_parse_frames_on_bare_arrays_checks_its_input():
    data = framed(1, b"ab") + framed(2, b"")
    f = parse_frames(data, np.array([0, 7]), np.array([7, 5]))
    assert f.schema_id.tolist() == [1, 2] and f.length.tolist() == [2, 0]
    with pytest.raises(ValueError, match="outside the data buffer"):
        parse_frames(data, np.array([10]), np.array([5]))
    with pytest.raises(ValueError, match="framing"):
        parse_frames(data, np.array([0]), np.array([7]), framing="avro")  # type: ignore[arg-type]
    empty = parse_frames(b"", np.array([], np.int64), np.array([], np.int64))
    assert len(empty) == 0 and empty.guids == ()


def test_selected_tables_keep_headers_in_record_order():
    from kbatch.codec._table import select

    headers = [[("__value_schema_id", b"\x00\x00\x00\x00\x01")], [], [("__value_schema_id", b"\x00\x00\x00\x00\x03")]]
    table = table_of([b"a", framed(2, b"b"), b"c"], headers=headers)
    part = select(table, np.array([False, True, True]))
    assert frames(part).schema_id.tolist() == [2, 3]


fastavro = pytest.importorskip("fastavro")
sr = pytest.importorskip("confluent_kafka.schema_registry")
avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
serialization = pytest.importorskip("confluent_kafka.serialization")

ORDER_V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                           {"name": "item", "type": "string"}]}
ORDER_V2 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                           {"name": "item", "type": "string"},
                                                           {"name": "qty", "type": "int", "default": 1}]}


def test_values_framed_by_confluent_kafkas_avro_serializer():
    with RegistryServer() as server:
        client = sr.SchemaRegistryClient({"url": server.url})
        ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE)
        v1 = avro.AvroSerializer(client, json.dumps(ORDER_V1))
        v2 = avro.AvroSerializer(client, json.dumps(ORDER_V2))
        rows = [({"id": i, "item": f"thing {i}"}, v1) if i % 3 else ({"id": i, "item": "x" * i, "qty": i}, v2)
                for i in range(30)]
        values = [ser(row, ctx) for row, ser in rows]
        # the newer framing: the GUID in a header, the value all body
        header_ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE, [])
        by_header = avro.AvroSerializer(client, json.dumps(ORDER_V2),
                                        conf={"schema.id.serializer": sr.header_schema_id_serializer})
        guided = by_header({"id": 99, "item": "header", "qty": 5}, header_ctx)

        table = table_of([*values, guided], headers=[*([] for _ in values), header_ctx.headers])
        f = frames(table)
        assert f.error.tolist() == [FRAME_OK] * 31
        registry = Registry(server.url)
        ids = sorted(server.state.by_id)
        assert len(ids) == 2
        assert set(np.unique(f.schema_id[:30]).tolist()) == set(ids)
        assert f.schema_id[30] == -1 and len(f.guids) == 1
        v2_id = next(i for i in ids if json.loads(server.state.by_id[i]["schema"]) == ORDER_V2)
        assert f.guids[0] == uuid.UUID(server.state.guid(server.state.by_id[v2_id]))
        assert f.guids[0] == guid_of(server.state.by_id[v2_id]["schema"])  # Confluent's GUID: the text's MD5
        v1_id = next(i for i in ids if i != v2_id)
        assert f.schema_id[:30].tolist() == [v1_id if i % 3 else v2_id for i in range(30)]
        schemas = registry.schemas(np.unique(f.schema_id))
        buf = memoryview(table.data).cast("B")
        for i, (row, _) in enumerate(rows):
            writer = fastavro.parse_schema(json.loads(schemas[int(f.schema_id[i])].text))
            body = bytes(buf[f.start[i] : f.start[i] + f.length[i]])
            decoded = fastavro.schemaless_reader(io.BytesIO(body), writer)
            assert {k: decoded[k] for k in row} == row
        guided_schema = registry.schema_by_guid(f.guids[0])
        body = bytes(buf[f.start[30] : f.start[30] + f.length[30]])
        assert fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(json.loads(guided_schema.text))) \
            == {"id": 99, "item": "header", "qty": 5}
