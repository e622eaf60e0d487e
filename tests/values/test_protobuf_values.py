"""Protobuf values: registry schemas compiled by the bundled protoc, Confluent's framing with
message indexes, the columnar kernel against upb, and bad bytes as per-record errors."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

pytest.importorskip("grpc_tools")
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.proto_gen import generate

from kbatch import values
from kbatch.values import ProtobufSchemaError, ProtoOptions, Registry, Schema, ValueDecodeError

ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
enum Status { UNKNOWN = 0; NEW = 1; PAID = 2; }
message Item { string sku = 1; int32 qty = 2; double price = 3; }
message Order {
  int64 id = 1;
  string customer = 2;
  Status status = 3;
  repeated Item items = 4;
  map<string, int64> tags = 5;
  google.protobuf.Timestamp at = 6;
  google.protobuf.Int32Value maybe = 7;
  optional int32 opt = 8;
  repeated sint32 nums = 9;
  oneof pay { string card = 10; int64 cash = 11; }
  bytes blob = 12;
  bool flag = 13;
  float f = 14;
  sfixed64 fx = 15;
  message Inner { uint32 u = 1; repeated string names = 2; }
  Inner inner = 16;
}
"""


def framed(schema_id: int, indexes: bytes, body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + indexes + body


def table(vals: list[bytes | None]) -> pa.Table:
    return pa.table({"value": pa.array(vals, pa.binary()), "offset": pa.array(range(len(vals)), pa.int64())})


@pytest.fixture(scope="module")
def order_pb2(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("proto"), "order", ORDER)


@pytest.fixture(scope="module")
def reg() -> Registry:
    return Registry({7: Schema(ORDER, "PROTOBUF", id=7)})


def expected(msg) -> dict:
    """What kbatch gives for ``msg``, from upb's MessageToDict (absent -> null, lists empty)."""
    d = MessageToDict(msg, preserving_proto_field_name=True)
    out: dict = {}
    for fd in msg.DESCRIPTOR.fields:
        v = d.get(fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = sorted((k, int(x)) for k, x in (v or {}).items())
        elif fd.is_repeated and fd.message_type is not None:
            out[fd.name] = [expected(x) for x in getattr(msg, fd.name)]
        elif fd.is_repeated:
            out[fd.name] = list(getattr(msg, fd.name))
        elif fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Timestamp":
            out[fd.name] = getattr(msg, fd.name).ToMicroseconds() if msg.HasField(fd.name) else None
        elif fd.message_type is not None and fd.message_type.full_name.startswith("google.protobuf."):
            # a wrapper: null when absent or holding its zero (Spark, without emit.default.values)
            out[fd.name] = (getattr(msg, fd.name).value or None) if msg.HasField(fd.name) else None
        elif fd.message_type is not None:
            out[fd.name] = expected(getattr(msg, fd.name)) if msg.HasField(fd.name) else None
        elif v is None and fd.has_presence and fd.has_default_value:
            out[fd.name] = getattr(msg, fd.name)  # proto2 [default = ...]: the default (Spark)
        elif v is None:
            out[fd.name] = None
        elif fd.type == fd.TYPE_ENUM and isinstance(v, int):  # a number the enum lacks: Java's name
            out[fd.name] = f"UNKNOWN_ENUM_VALUE_{fd.enum_type.name}_{v}"
        elif fd.type in (fd.TYPE_BYTES, fd.TYPE_DOUBLE, fd.TYPE_FLOAT):  # JSON: base64, "Infinity"
            out[fd.name] = getattr(msg, fd.name)
        elif fd.type == fd.TYPE_UINT32:
            out[fd.name] = int(v) - (1 << 32) if int(v) >= 1 << 31 else int(v)
        elif fd.type in (fd.TYPE_INT64, fd.TYPE_SFIXED64):
            out[fd.name] = int(v)
        else:
            out[fd.name] = v
    return out


def got(row: dict | None, desc) -> dict | None:
    """kbatch's row normalised like :func:`expected` (maps sorted, timestamps in microseconds)."""
    if row is None:
        return None
    out = {}
    for fd in desc.fields:
        v = row[fd.name]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = sorted(v)
        elif fd.is_repeated and fd.message_type is not None:
            out[fd.name] = [got(x, fd.message_type) for x in v]
        elif fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Timestamp":
            out[fd.name] = None if v is None else pa.scalar(v, pa.timestamp("us", "UTC")).cast(pa.int64()).as_py()
        elif fd.message_type is not None and not fd.message_type.full_name.startswith("google.protobuf."):
            out[fd.name] = got(v, fd.message_type)
        else:
            out[fd.name] = v
    return out


def test_order_decodes_like_upb(order_pb2, reg: Registry) -> None:
    m = order_pb2.Order(id=5, customer="bob", status=2, items=[order_pb2.Item(sku="a", qty=2, price=1.5)],
                        tags={"x": 1, "y": 2}, opt=0, nums=[-1, 2, -3], cash=9, blob=b"\x00\x01", flag=True,
                        f=1.25, fx=-7, inner=order_pb2.Order.Inner(u=2**32 - 1, names=["p", "q"]))
    m.at.FromMicroseconds(1234567)
    m.maybe.value = 0
    out = values.decode(table([framed(7, b"\x02\x02", m.SerializeToString()), None]), reg)
    rows = out.column("value").to_pylist()
    assert got(rows[0], m.DESCRIPTOR) == expected(m)
    assert rows[0]["status"] == "PAID" and rows[0]["opt"] == 0 and rows[0]["card"] is None
    assert rows[0]["maybe"] is None  # Int32Value(0): null, as Spark without emit.default.values
    assert rows[1] is None
    assert out.column("value_schema_id").to_pylist() == [7, None]


def test_absent_fields_null_or_defaults(order_pb2, reg: Registry) -> None:
    body = order_pb2.Order(customer="").SerializeToString()
    t = table([framed(7, b"\x02\x02", body)])
    row = values.decode(t, reg).column("value")[0].as_py()
    assert row["id"] is None and row["customer"] is None and row["items"] == [] and row["inner"] is None
    row = values.decode(t, reg, protobuf=ProtoOptions(emit_default_values=True)).column("value")[0].as_py()
    assert row["id"] == 0 and row["customer"] == "" and row["status"] == "UNKNOWN"
    assert row["opt"] is None and row["maybe"] is None  # presence: still null
    zero = order_pb2.Order()
    zero.maybe.value = 0
    row = values.decode(table([framed(7, b"\x02\x02", zero.SerializeToString())]), reg,
                        protobuf=ProtoOptions(emit_default_values=True)).column("value")[0].as_py()
    assert row["maybe"] == 0  # a present wrapper's zero, with emit_default_values
    ints = values.decode(table([framed(7, b"\x02\x02", order_pb2.Order(status=2).SerializeToString())]), reg,
                         protobuf=ProtoOptions(enums_as_ints=True))
    assert ints.column("value")[0].as_py()["status"] == 2


def test_last_value_wins_and_merge_slow_path(order_pb2, reg: Registry) -> None:
    a = order_pb2.Order(id=1, card="x", inner=order_pb2.Order.Inner(u=1, names=["a"])).SerializeToString()
    b = order_pb2.Order(id=2, cash=3, inner=order_pb2.Order.Inner(names=["b"])).SerializeToString()
    merged = order_pb2.Order.FromString(a + b)
    row = values.decode(table([framed(7, b"\x02\x02", a + b)]), reg).column("value")[0].as_py()
    assert got(row, merged.DESCRIPTOR) == expected(merged)
    assert row["id"] == 2 and row["card"] is None and row["cash"] == 3 and row["inner"]["names"] == ["a", "b"]


def test_packed_and_unpacked_and_unknown_fields(order_pb2, reg: Registry) -> None:
    # nums (9, sint32) unpacked twice, then packed; an unknown field 99 (varint) and 98 (bytes)
    body = b"\x48\x01\x48\x04" + b"\x4a\x02\x05\x06" + b"\x98\x06\x07" + b"\x92\x06\x02hi"
    row = values.decode(table([framed(7, b"\x02\x02", body)]), reg).column("value")[0].as_py()
    assert row["nums"] == [-1, 2, -3, 3]
    assert row["nums"] == list(order_pb2.Order.FromString(body).nums)


def test_message_indexes_nested(order_pb2, reg: Registry) -> None:
    inner = order_pb2.Order.Inner(u=4, names=["z"]).SerializeToString()
    # [1, 1]: the second message nested in the second top-level one (the map's TagsEntry is
    # the first: map entries count, as in Confluent's MessageIndexes) -> shop.Order.Inner
    out = values.decode(table([framed(7, b"\x04\x02\x02", inner)]), reg,
                        protobuf=ProtoOptions(message="shop.Order.Inner"))
    assert out.column("value").to_pylist() == [{"u": 4, "names": ["z"]}]
    # [0] as one 0x00 byte: shop.Item
    item = order_pb2.Item(sku="s").SerializeToString()
    out = values.decode(table([framed(7, b"\x00", item)]), reg, protobuf=ProtoOptions(message="shop.Item"))
    assert out.column("value").to_pylist() == [{"sku": "s", "qty": None, "price": None}]
    # by default the output is the root message (Order: no other message refers to it)
    out = values.decode(table([framed(7, b"\x00", item)]), reg, errors="null")
    assert out.column("value_error").to_pylist() == [
        "the value is a shop.Item, the output is laid out as shop.Order - at value (offset 0, schema id 7, byte 5)"]


def test_other_message_and_bad_bytes_are_per_record_errors(order_pb2, reg: Registry) -> None:
    good = order_pb2.Order(id=3, customer="c").SerializeToString()
    vals = [framed(7, b"\x02\x02", good), framed(7, b"\x00", b"\x0a\x05ab"),
            framed(7, b"\x02\x02", b"\x12\x02\xff\xfe"), framed(7, b"\x02\x08", good),
            framed(7, b"\x02\x02", b"\x0f"), framed(7, b"\x02\x02", good)]
    out = values.decode(table(vals), reg, errors="null")
    assert [r is not None for r in out.column("value").to_pylist()] == [True, False, False, False, False, True]
    errors = out.column("value_error").to_pylist()
    assert "shop.Item" in errors[1]  # indexes [0] name Item; the output is Order
    assert errors[2].startswith("invalid UTF-8 in a string - at value.customer")
    assert "message index 4 out of range" in errors[3]
    assert errors[4].startswith("invalid wire type")
    with pytest.raises(ValueDecodeError, match="invalid UTF-8"):
        values.decode(table(vals[2:3]), reg)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64))
def test_any_bytes_are_a_value_or_an_error(order_pb2, reg: Registry, body: bytes) -> None:
    out = values.decode(table([framed(7, b"\x02\x02", body)]), reg, errors="null")
    out.column("value").validate(full=True)
    row, error = out.column("value")[0].as_py(), out.column("value_error")[0].as_py()
    assert (row is None) != (error is None)
    try:
        upb = order_pb2.Order.FromString(body)
    except Exception:  # noqa: BLE001 - upb's DecodeError
        return
    if row is not None:
        assert got(row, upb.DESCRIPTOR) == expected(upb)


items = st.builds(lambda s, q, p: ("item", s, q, p), st.text(max_size=5), st.integers(-2**31, 2**31 - 1),
                  st.floats(allow_nan=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(id_=st.integers(-2**63, 2**63 - 1), customer=st.text(max_size=8), status=st.integers(0, 2),
       its=st.lists(items, max_size=3), tags=st.dictionaries(st.text(max_size=3), st.integers(-2**63, 2**63 - 1),
                                                              max_size=3),
       nums=st.lists(st.integers(-2**31, 2**31 - 1), max_size=4), opt=st.none() | st.integers(-2**31, 2**31 - 1),
       pay=st.none() | st.text(max_size=3) | st.integers(-2**63, 2**63 - 1), u=st.none() | st.integers(0, 2**32 - 1))
def test_differential_against_upb(order_pb2, reg, id_, customer, status, its, tags, nums, opt, pay, u) -> None:
    m = order_pb2.Order(id=id_, customer=customer, status=status, tags=tags, nums=nums,
                        items=[order_pb2.Item(sku=s, qty=q, price=p) for _, s, q, p in its])
    if opt is not None:
        m.opt = opt
    if isinstance(pay, str):
        m.card = pay
    elif pay is not None:
        m.cash = pay
    if u is not None:
        m.inner.u = u
    out = values.decode(table([framed(7, b"\x02\x02", m.SerializeToString())]), reg)
    assert got(out.column("value")[0].as_py(), m.DESCRIPTOR) == expected(m)


def test_confluent_framed_values_decode(order_pb2) -> None:
    """Values framed by confluent-kafka's own code: ``ProtobufSerializer`` when it imports (it
    needs googleapis-common-protos), else its ``SchemaId`` writer (the magic byte, the id and
    the message indexes, exactly as the serializer writes them), with the schema registered in
    confluent-kafka's mock registry client."""
    from confluent_kafka.schema_registry import Schema as CSchema
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.common.serde import SchemaId

    client = SchemaRegistryClient.new_client({"url": "mock://kbatch-protobuf"})
    m = order_pb2.Order(id=9, customer="ann", items=[order_pb2.Item(sku="k", qty=1)])
    inner = order_pb2.Order.Inner(u=1)
    item = order_pb2.Item(sku="i")
    try:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext
    except ImportError:  # googleapis-common-protos missing: the serializer's framing by hand
        schema_id = client.register_schema("orders-value", CSchema(ORDER, "PROTOBUF"))
        data = [SchemaId("PROTOBUF", schema_id, message_indexes=idx).id_to_bytes() + msg.SerializeToString()
                for idx, msg in (([1], m), ([1, 1], inner), ([0], item), ([1], m))]
    else:  # the serializer registers a base64 FileDescriptorProto, which kbatch compiles too
        ctx = SerializationContext("orders", MessageField.VALUE)
        conf = {"use.deprecated.format": False, "auto.register.schemas": True}
        data = [ProtobufSerializer(type(msg), client, conf)(msg, ctx) for msg in (m, inner, item, m)]
        schema_id = struct.unpack(">I", data[0][1:5])[0]
    assert data[2][5] == 0  # [0]: one 0x00 byte
    registered = client.get_schema(schema_id)
    mine = Registry({schema_id: Schema(registered.schema_str, "PROTOBUF", id=schema_id)})
    out = values.decode(table(data), mine, errors="null")
    assert got(out.column("value")[0].as_py(), m.DESCRIPTOR) == expected(m)
    assert out.column("value_error").to_pylist()[1:3] == [
        (f"the value is a shop.Order.Inner, the output is laid out as shop.Order - at value (offset 1, schema id "
         f"{schema_id}, byte 5)"),
        (f"the value is a shop.Item, the output is laid out as shop.Order - at value (offset 2, schema id "
         f"{schema_id}, byte 5)")]
    inner_out = values.decode(table(data[1:2]), mine, protobuf=ProtoOptions(message="shop.Order.Inner"))
    assert inner_out.column("value").to_pylist() == [{"u": 1, "names": []}]


def test_schema_errors_and_other_sources(tmp_path, order_pb2) -> None:
    with pytest.raises(ProtobufSchemaError, match="does not compile"):
        values.compile_proto('syntax = "proto3"; message M { nope x = 1; }')
    with pytest.raises(ProtobufSchemaError, match="recursive"):
        values.decode(table([framed(1, b"\x00", b"")]),
                      Registry({1: Schema('syntax = "proto3"; message T { T next = 1; int32 v = 2; }', "PROTOBUF")}))
    rec = Registry({1: Schema('syntax = "proto3"; message T { T next = 1; int32 v = 2; }', "PROTOBUF")})
    out = values.decode(table([framed(1, b"\x00", b"\x0a\x02\x10\x05\x10\x01")]), rec,
                        protobuf=ProtoOptions(recursive_depth=2))
    assert out.column("value").to_pylist() == [{"next": {"v": 5}, "v": 1}]
    # a registry schema importing Confluent's bundled meta.proto and a reference by file name
    dep = Schema('syntax = "proto3"; package d; message D { int32 y = 1; }', "PROTOBUF")
    text = ('syntax = "proto3"; import "confluent/meta.proto"; import "dep.proto"; '
            'message M { d.D d = 1 [(confluent.field_meta).doc = "x"]; }')
    compiled = values.compile_proto(Schema(text, "PROTOBUF", dependencies=(("dep.proto", dep),)))
    assert compiled.message == "M"
    # a descriptor set file (what Spark's from_protobuf takes), with the message named
    fds = tmp_path / "order.desc"
    fds.write_bytes(values.compile_proto(ORDER).descriptor_set)
    reader = values.load_proto(fds, "shop.Item")
    out = values.decode(table([order_pb2.Item(sku="r").SerializeToString()]), Registry({1: Schema(ORDER, "PROTOBUF")}),
                        reader_schema=reader,
                        framing="raw", schema_id=1)
    assert out.column("value").to_pylist() == [{"sku": "r", "qty": None, "price": None}]


def test_convert_values_protobuf_with_a_dead_letter(order_pb2, tmp_path) -> None:
    """``kbatch convert --values protobuf`` against a registry over HTTP: typed rows equal to
    upb's reading, a bad body kept raw as a dead letter with its field path and byte."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    from confluent_kafka.schema_registry import Schema as CSchema
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.common.serde import SchemaId
    from support.registry_server import RegistryServer
    from support.tables import convert_cli, summary_of

    import kbatch

    msgs = [order_pb2.Order(id=i, customer=f"c{i}", nums=list(range(i % 4)), tags={"k": i}) for i in range(12)]
    with RegistryServer() as server:
        client = SchemaRegistryClient({"url": server.url})
        schema_id = client.register_schema("orders-value", CSchema(ORDER, "PROTOBUF"))
        head = SchemaId("PROTOBUF", schema_id, message_indexes=[1]).id_to_bytes()
        vals = [head + m.SerializeToString() for m in msgs]
        vals[5] = head + b"\x12\x03\xff\xfe\xfd"  # customer: invalid UTF-8
        with kbatch.LogWriter(tmp_path / "root", "orders", 0) as w:
            w.append(kbatch.encode(vals, timestamps=[0] * len(vals)))
        out = tmp_path / "out"
        s = summary_of(convert_cli(str(tmp_path / "root"), str(out), "--values", "protobuf", "--registry",
                                   server.url))
    assert s["dead_letters"] == 1
    table = pq.read_table(out / "topic=orders")
    rows = {r["offset"]: r["value"] for r in table.to_pylist()}
    assert sorted(rows) == [i for i in range(12) if i != 5]
    for i, row in rows.items():
        assert got(row, msgs[i].DESCRIPTOR) == expected(msgs[i])
    dead = pads.dataset(str(out / "_dead_letter"), format="parquet", partitioning="hive").to_table().to_pylist()
    assert [(d["offset"], d["path"], d["byte"], d["value"]) for d in dead] == [(5, "value.customer", 7, vals[5])]
    assert dead[0]["reason"] == "invalid UTF-8 in a string"


LEGACY = """
syntax = "proto2";
package legacy;
enum Kind { A = 1; B = 2; }
message Part { required string name = 1; optional sint32 n = 2 [default = 7]; }
message Doc {
  optional int32 i = 1;
  optional string s = 2 [default = "x"];
  optional Kind k = 3;
  repeated int64 packed = 4 [packed = true];
  repeated fixed32 plain = 5;
  repeated Part parts = 6;
  optional Part main = 7;
  optional bytes b = 8;
  optional double d = 9;
  optional bool flag = 10;
}
"""
EXTRAS = """
syntax = "proto3";
package extras;
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
message V { string s = 1; repeated uint32 xs = 2; }
message E {
  map<int32, V> byid = 1;
  google.protobuf.Duration took = 2;
  google.protobuf.StringValue label = 3;
  google.protobuf.BoolValue ok = 4;
  repeated google.protobuf.Int64Value counts = 5;
  uint64 big = 6;
  fixed64 f64 = 7;
}
"""


@pytest.fixture(scope="module")
def legacy_pb2(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("legacy"), "legacy", LEGACY)


@pytest.fixture(scope="module")
def extras_pb2(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("extras"), "extras", EXTRAS)


def row_of(text: str, message, **options) -> dict | None:
    reg = Registry({3: Schema(text, "PROTOBUF", id=3)})
    index = list(message.DESCRIPTOR.file.message_types_by_name).index(message.DESCRIPTOR.name)
    indexes = bytes([2, 2 * index]) if index else b"\x00"  # zigzag count 1, then the index
    out = values.decode(table([framed(3, indexes, message.SerializeToString())]), reg,
                        protobuf=ProtoOptions(**options))
    return out.column("value")[0].as_py()


parts = st.lists(st.tuples(st.text(max_size=3), st.none() | st.integers(-2**31, 2**31 - 1)), max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(i=st.none() | st.integers(-2**31, 2**31 - 1), s=st.none() | st.text(max_size=4),
       k=st.none() | st.sampled_from([1, 2]), packed=st.lists(st.integers(-2**63, 2**63 - 1), max_size=4),
       plain=st.lists(st.integers(0, 2**32 - 1), max_size=4),
       ps=parts, main=st.none() | st.tuples(st.text(max_size=3), st.none() | st.integers(-5, 5)),
       b=st.none() | st.binary(max_size=4), d=st.none() | st.floats(allow_nan=False), flag=st.none() | st.booleans())
def test_proto2_differential_against_upb(legacy_pb2, i, s, k, packed, plain, ps, main, b, d, flag) -> None:
    m = legacy_pb2.Doc(packed=packed, plain=plain)
    for name, v in (("i", i), ("s", s), ("k", k), ("b", b), ("d", d), ("flag", flag)):
        if v is not None:
            setattr(m, name, v)
    for name, n in ps:
        p = m.parts.add(name=name)
        if n is not None:
            p.n = n
    if main is not None:
        m.main.name = main[0]
        if main[1] is not None:
            m.main.n = main[1]
    row = row_of(LEGACY, m)
    want = expected(m)
    want["plain"] = [x - (1 << 32) if x >= 1 << 31 else x for x in want["plain"]]  # fixed32: int32 bits
    want["k"] = legacy_pb2.Kind.Name(k) if k is not None else None
    assert got(row, m.DESCRIPTOR) == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(byid=st.dictionaries(st.integers(-2**31, 2**31 - 1), st.tuples(st.text(max_size=3),
                                                                       st.lists(st.integers(0, 2**32 - 1), max_size=3)),
                            max_size=3),
       took=st.none() | st.integers(-10**12, 10**12), label=st.none() | st.text(max_size=3),
       ok=st.none() | st.booleans(), counts=st.lists(st.integers(-2**63, 2**63 - 1), max_size=3),
       big=st.integers(0, 2**64 - 1), f64=st.integers(0, 2**64 - 1))
def test_maps_wrappers_duration_against_upb(extras_pb2, byid, took, label, ok, counts, big, f64) -> None:
    m = extras_pb2.E(big=big, f64=f64)
    for key, (s, xs) in byid.items():
        m.byid[key].s = s
        m.byid[key].xs.extend(xs)
    if took is not None:
        m.took.FromMicroseconds(took)
    if label is not None:
        m.label.value = label
    if ok is not None:
        m.ok.value = ok
    for c in counts:
        m.counts.add(value=c)
    row = row_of(EXTRAS, m)
    signed = lambda x, bits: x - (1 << bits) if x >= 1 << (bits - 1) else x  # noqa: E731 - Spark's same bits
    assert row["big"] == (signed(big, 64) or None) and row["f64"] == (signed(f64, 64) or None)
    assert row["took"] == (None if took is None else pa.scalar(took, pa.duration("us")).as_py())
    assert (row["label"], row["ok"]) == (label or None, ok or None)  # a zero wrapper: null (Spark)
    assert row["counts"] == [c or None for c in counts]
    assert sorted(row["byid"]) == sorted((k, {"s": s or None, "xs": [signed(x, 32) for x in xs]})
                                         for k, (s, xs) in byid.items())


def _varint(v: int, size: int = 0) -> bytes:
    """``v`` as a varint, padded with continuation bytes to ``size`` bytes when longer."""
    out = bytearray()
    while True:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
        if not v:
            break
    while len(out) < size:
        out.append(0x80)
    out[-1] &= 0x7F
    return bytes(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(id_=st.integers(-2**63, 2**63 - 1), number=st.integers(1, 2**29 - 1), size=st.integers(6, 10),
       high=st.none() | st.integers(1, 7), where=st.sampled_from(["top", "inner", "at", "maybe"]))
def test_a_tag_over_5_bytes_or_32_bits_is_an_error_as_upb_has_it(order_pb2, reg: Registry, id_, number, size,
                                                                  high, where) -> None:
    """A tag written in 6 to 10 bytes, or in 5 above 2**32 - 1 (``high`` bits past 32), of any
    field number (known or not), at the top, in a nested message, a Timestamp or a wrapper:
    upb refuses the message, and kbatch makes the record an error naming it."""
    key = number << 3  # wire 0, then a 1-byte varint value
    tag = _varint(key, size) if high is None else _varint(key | high << 32, 5)
    field = tag + b"\x01"
    if where != "top":
        inner = {"inner": 16, "at": 6, "maybe": 7}[where]
        field = _varint(inner << 3 | 2) + _varint(len(field)) + field
    body = order_pb2.Order(id=id_).SerializeToString() + field
    with pytest.raises(Exception):  # noqa: B017 - upb's DecodeError
        order_pb2.Order.FromString(body)
    out = values.decode(table([framed(7, b"\x02\x02", body)]), reg, errors="null")
    assert out.column("value")[0].as_py() is None
    assert "field tag longer than 5 bytes or above 2**32 - 1" in out.column("value_error")[0].as_py()


MAPS = """
syntax = "proto3";
package maps;
message M { map<string, V> m = 1; map<int64, int32> n = 2; map<bool, string> b = 3; int32 z = 4; }
message V { string s = 1; repeated int32 xs = 2; map<string, int32> mm = 3; }
"""

keys = st.sampled_from(["", "a", "b", "ab", "é"])
values_v = st.tuples(st.text(max_size=3), st.lists(st.integers(-2**31, 2**31 - 1), max_size=3),
                     st.lists(st.tuples(keys, st.integers(-5, 5)), max_size=4))


@pytest.fixture(scope="module")
def maps_pb2(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("maps"), "maps", MAPS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.one_of(st.tuples(st.just("m"), keys, values_v),
                                  st.tuples(st.just("n"), st.integers(-3, 3), st.integers(-2**31, 2**31 - 1)),
                                  st.tuples(st.just("b"), st.booleans(), st.text(max_size=2))), max_size=40),
       z=st.integers(-5, 5))
def test_a_map_repeating_keys_keeps_the_last_entry_as_upb(maps_pb2, entries, z) -> None:
    """Map entries, keys repeated (strings, int64s, bools; message values with a list and a map
    of their own that repeat keys too), each entry a message of its own on the wire: kbatch
    keeps the last entry of each key at every level, as upb (more than 16 entries: the hashed
    path)."""
    body = b""
    for name, key, value in entries:
        if name == "m":
            s, xs, mm = value
            entry = maps_pb2.V(s=s, xs=xs).SerializeToString() + b"".join(  # its own map repeats keys too
                maps_pb2.V(mm={k: x}).SerializeToString() for k, x in mm)
            payload = b"\x0a" + bytes([len(key.encode())]) + key.encode() + b"\x12" + _varint(len(entry)) + entry
            body += b"\x0a" + _varint(len(payload)) + payload
        else:
            one = maps_pb2.M()
            getattr(one, name)[key] = value
            body += one.SerializeToString()
    body += maps_pb2.M(z=z).SerializeToString()
    upb = maps_pb2.M.FromString(body)
    reg = Registry({3: Schema(MAPS, "PROTOBUF", id=3)})
    out = values.decode(table([framed(3, b"\x00", body)]), reg)
    row = out.column("value")[0].as_py()
    assert sorted((k, {**v, "mm": sorted(v["mm"])}) for k, v in row["m"]) == sorted(
        (k, {"s": v.s or None, "xs": list(v.xs), "mm": sorted(v.mm.items())}) for k, v in upb.m.items())
    assert sorted(row["n"]) == sorted(upb.n.items()) and sorted(row["b"]) == sorted(upb.b.items())
    assert row["z"] == (z or None)


def test_a_long_map_repeating_keys_keeps_the_last_entry_as_upb(maps_pb2) -> None:
    """300 entries over 7 keys per map (the hashed path), with message values holding lists."""
    body = b"".join(maps_pb2.M(n={i % 7: i}, b={i % 2 == 0: str(i)}, m={str(i % 7): maps_pb2.V(s=str(i), xs=[i, -i])})
                    .SerializeToString() for i in range(300))
    upb = maps_pb2.M.FromString(body)
    reg = Registry({3: Schema(MAPS, "PROTOBUF", id=3)})
    row = values.decode(table([framed(3, b"\x00", body)]), reg).column("value")[0].as_py()
    assert sorted(row["n"]) == sorted(upb.n.items()) and sorted(row["b"]) == sorted(upb.b.items())
    assert sorted(row["m"]) == sorted((k, {"s": v.s, "xs": list(v.xs), "mm": []}) for k, v in upb.m.items())
    assert len(row["m"]) == 7


def test_many_records_one_table_like_upb(order_pb2, reg: Registry) -> None:
    """Hundreds of values in one table (the kernel sizes its per-record columns up front), with
    bad ones and nulls between them: each good row as upb reads it."""
    import random

    rng = random.Random(5)
    msgs, vals = [], []
    for i in range(500):
        m = order_pb2.Order(id=i, customer="c" * rng.randrange(40), status=rng.randrange(3),
                            items=[order_pb2.Item(sku=f"s{k}", qty=k) for k in range(rng.randrange(3))],
                            tags={f"t{k}": k for k in range(rng.randrange(3))}, nums=[rng.randrange(-9, 9)] * (i % 3))
        if i % 7 == 0:
            m.inner.names.append("n" * 30)
        msgs.append(m)
        vals.append(None if i % 50 == 3 else framed(7, b"\x02\x02", m.SerializeToString() + (b"\x0f" if i % 61 == 5
                                                                                              else b"")))
    out = values.decode(table(vals), reg, errors="null")
    out.column("value").validate(full=True)
    errors = out.column("value_error").to_pylist()
    for i, (row, m) in enumerate(zip(out.column("value").to_pylist(), msgs, strict=True)):
        if i % 50 == 3:
            assert row is None and errors[i] is None
        elif i % 61 == 5:
            assert row is None and errors[i].startswith("invalid wire type")
        else:
            assert got(row, m.DESCRIPTOR) == expected(m), i


def test_guid_framing_and_the_header(order_pb2, reg: Registry) -> None:
    """The GUID forms of the Avro issue carry Protobuf too: 0x01 + GUID, then message indexes."""
    from confluent_kafka.schema_registry.common.serde import SchemaId

    guid = reg.schema(7).guid
    head = SchemaId("PROTOBUF", guid=str(guid), message_indexes=[1]).guid_to_bytes()
    m = order_pb2.Order(id=11, customer="g")
    out = values.decode(table([head + m.SerializeToString()]), reg)
    assert got(out.column("value")[0].as_py(), m.DESCRIPTOR) == expected(m)
    assert out.column("value_schema_id").to_pylist() == [7]


def test_a_directory_of_proto_files(order_pb2, tmp_path) -> None:
    """``Registry.from_directory``: ``<id>.proto`` is a Protobuf schema, decoded as such."""
    (tmp_path / "4.proto").write_text(ORDER)
    reg = Registry.from_directory(tmp_path)
    m = order_pb2.Order(id=4, tags={"a": 1})
    out = values.decode(table([framed(4, b"\x02\x02", m.SerializeToString())]), reg)
    assert got(out.column("value")[0].as_py(), m.DESCRIPTOR) == expected(m)


# ------------------------------------------------------------------ beside Avro and JSON values

AVRO_ITEM = '{"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}]}'


def test_one_dispatch_by_the_readers_language(order_pb2) -> None:
    """A Protobuf reader decodes the Protobuf-written records; a record written with an Avro schema
    is an error of its own (as main's JSON dispatch says it); ``format`` insists on a language
    and reads reader text as ``.proto`` with ``format="protobuf"``."""
    reg = Registry({7: Schema(ORDER, "PROTOBUF", id=7), 3: Schema(AVRO_ITEM, id=3)})
    good = framed(7, b"\x02\x02", order_pb2.Order(id=4, customer="a").SerializeToString())
    avro = b"\x00" + struct.pack(">I", 3) + b"\x02x"
    out = values.decode(table([good, avro]), reg, reader_schema=7, errors="null")
    assert [r["id"] if r else None for r in out.column("value").to_pylist()] == [4, None]
    assert out.column("value_error").to_pylist()[1].startswith(
        "written with a AVRO schema, the reader schema is PROTOBUF - at value")
    assert out.column("value_schema_id").to_pylist() == [7, 3]
    with pytest.raises(ValueError, match="format='avro' but the reader schema is PROTOBUF"):
        values.decode(table([good]), reg, reader_schema=7, format="avro")
    text = values.decode(table([good]), reg, reader_schema=ORDER, format="protobuf")
    assert text.column("value").to_pylist()[0]["customer"] == "a"
    with pytest.raises(ProtobufSchemaError, match="no writer schema"):
        values.decode(table([None]), reg, format="protobuf")


def test_arrow_type_before_any_record(order_pb2) -> None:
    """``arrow_type`` / ``decoded_schema`` (what convert and Spark declare before reading) know
    Protobuf readers, with the options that change the type, and equal what ``decode`` gives."""
    reader = Schema(ORDER, "PROTOBUF", id=7)
    reg = Registry({7: reader})
    got_type = values.decode(table([framed(7, b"\x02\x02", b"")]), reg).schema.field("value").type
    assert values.arrow_type(reader) == got_type
    assert values.arrow_type(values.compile_proto(ORDER)) == got_type
    assert values.decoded_schema(pa.schema([("value", pa.binary())]), values=reader).field("value").type == got_type
    as_ints = values.decode(table([framed(7, b"\x02\x02", b"")]), reg, protobuf=ProtoOptions(enums_as_ints=True))
    assert as_ints.schema.field("value").type.field("status").type == pa.int32()
    from kbatch.values._decode import value_type

    assert value_type(reader, protobuf=ProtoOptions(enums_as_ints=True)) == as_ints.schema.field("value").type


def test_convert_values_auto_picks_protobuf_and_avro(order_pb2, tmp_path) -> None:
    """``kbatch convert --values auto``: each topic by its subject's schemaType (a Protobuf topic and
    an Avro one in one run); ``--values avro`` leaves the Protobuf topic binary, with a note."""
    import json

    import pyarrow.parquet as pq
    from support.tables import convert_cli, summary_of

    import kbatch

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    lines = [{"subject": "orders-value", "version": 1, "id": 7, "schema": ORDER, "schemaType": "PROTOBUF"},
             {"subject": "items-value", "version": 1, "id": 3, "schema": AVRO_ITEM}]
    (schemas / "registry.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    root = tmp_path / "root"
    with kbatch.LogWriter(root, "orders", 0) as w:
        w.append(kbatch.encode([framed(7, b"\x02\x02", order_pb2.Order(id=i).SerializeToString()) for i in (1, 2, 3)],
                               timestamps=[0] * 3))
    with kbatch.LogWriter(root, "items", 0) as w:
        w.append(kbatch.encode([b"\x00" + struct.pack(">I", 3) + b"\x02x"], timestamps=[0]))
    out = tmp_path / "auto"
    s = summary_of(convert_cli(str(root), str(out), "--values", "auto", "--registry", str(schemas)))
    assert s["dead_letters"] == 0
    assert [r["id"] for r in pq.read_table(out / "topic=orders").column("value").to_pylist()] == [1, 2, 3]
    assert pq.read_table(out / "topic=items").column("value").to_pylist() == [{"sku": "x"}]
    only_avro = summary_of(convert_cli(str(root), str(tmp_path / "avro"), "--values", "avro", "--registry",
                                       str(schemas)))
    assert any("their subject's schemas being PROTOBUF" in n and "orders (values)" in n for n in only_avro["notes"])
    assert pq.read_table(tmp_path / "avro" / "topic=orders").schema.field("value").type == pa.binary()


def test_dump_prints_protobuf_keys_and_values_as_json(order_pb2, tmp_path) -> None:
    """``kbatch dump --value-decoder protobuf --key-decoder protobuf``: each framed message as
    JSON (enums by name, maps as objects), a bad body ``Error: ...`` in its place and status 1."""
    import json

    from support.dumprun import dump

    import kbatch

    key_proto = 'syntax = "proto3";\nmessage K { string k = 1; }\n'
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    lines = [{"subject": "orders-value", "version": 1, "id": 7, "schema": ORDER, "schemaType": "PROTOBUF"},
             {"subject": "orders-key", "version": 1, "id": 8, "schema": key_proto, "schemaType": "PROTOBUF"}]
    (schemas / "registry.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    key_class = values.compile_proto(key_proto).message_class()
    vals = [framed(7, b"\x02\x02", order_pb2.Order(id=i, customer=f"c{i}", status=1, tags={"t": i}).SerializeToString())
            for i in (1, 2)]
    vals.append(framed(7, b"\x02\x02", b"\x12\x03\xff\xfe\xfd"))  # customer: invalid UTF-8
    keys = [framed(8, b"\x00", key_class(k=f"k{i}").SerializeToString()) for i in range(3)]
    with kbatch.LogWriter(tmp_path / "root", "orders", 0) as w:
        w.append(kbatch.encode(vals, keys=keys, timestamps=[0] * 3))
    log = tmp_path / "root" / "orders-0" / "00000000000000000000.log"
    argv = ("--files", str(log), "--value-decoder", "protobuf", "--key-decoder", "protobuf", "--registry", str(schemas))
    rc, out, _ = dump(*argv)
    records = [line for line in out if line.startswith("| offset:")]
    assert rc == 1 and len(records) == 3
    assert ' key: {"k":"k0"} ' in records[0] and '"id":1,"customer":"c1","status":"NEW"' in records[0]
    assert '"tags":{"t":1}' in records[0]
    assert "payload: Error: " in records[2] and "offset 2" in records[2]
    rc, out, _ = dump(*argv, "--json")
    rows = [json.loads(line) for line in out if json.loads(line).get("type") == "record"]
    assert [r["key"] for r in rows] == [{"k": "k0"}, {"k": "k1"}, {"k": "k2"}]
    assert (rows[1]["payload"]["id"], rows[1]["payload"]["customer"], rows[1]["payload"]["tags"]) == (2, "c2", {"t": 2})
    assert rows[1]["payload_encoding"] == "protobuf" and rows[1]["key_encoding"] == "protobuf"


ANYS = """
syntax = "proto3";
package box;
import "google/protobuf/any.proto";
import "google/protobuf/timestamp.proto";
message Box { string name = 1; google.protobuf.Any payload = 2; repeated google.protobuf.Any more = 3; }
message Note { string text = 1; int64 n = 2; repeated string tags = 3; google.protobuf.Timestamp at = 4; }
"""


def test_any_as_json_like_json_format(tmp_path) -> None:
    from google.protobuf import any_pb2
    from google.protobuf.json_format import MessageToJson

    pb2 = generate(tmp_path, "anys", ANYS)

    def packed(msg) -> any_pb2.Any:
        a = any_pb2.Any()
        a.Pack(msg)
        return a

    note, other = pb2.Note(text="hi", n=5, tags=["a", "b"]), pb2.Note(n=-1)
    other.at.FromSeconds(86400)
    unknown = any_pb2.Any(type_url="type.googleapis.com/box.Missing", value=b"\x08\x01")
    boxes = [pb2.Box(name="a", payload=packed(note)),
             pb2.Box(name="b", more=[packed(other), packed(pb2.Box(name="x"))]),
             pb2.Box(name="c"), pb2.Box(name="d", more=[packed(note), unknown])]
    reg = Registry({3: Schema(ANYS, "PROTOBUF", id=3)})
    vals = table([framed(3, b"\x00", b.SerializeToString()) for b in boxes])
    out = values.decode(vals, reg, errors="null", protobuf=ProtoOptions(any_as_json=True))
    vtype = out.schema.field("value").type
    assert vtype.field("payload").type == pa.string() and vtype.field("more").type.value_type == pa.string()
    assert values.arrow_type(Schema(ANYS, "PROTOBUF", id=3), protobuf=ProtoOptions(any_as_json=True)) == vtype
    rows = out.column("value").to_pylist()
    import json
    assert json.loads(rows[0]["payload"]) == json.loads(MessageToJson(boxes[0].payload))
    assert [json.loads(s) for s in rows[1]["more"]] == [json.loads(MessageToJson(a)) for a in boxes[1].more]
    assert rows[1]["more"][0] == json.dumps(json.loads(MessageToJson(boxes[1].more[0])), separators=(",", ":"))
    assert rows[1]["payload"] is None and rows[2] == {"name": "c", "payload": None, "more": []}
    assert rows[3] is None  # an Any whose type the schema does not know: the record's error
    error = out.column("value_error").to_pylist()[3]
    assert "box.Missing" in error and "value.more" in error
    # without the option: the struct, as before
    plain = values.decode(vals, reg, protobuf=ProtoOptions()).column("value").to_pylist()
    assert plain[0]["payload"] == {"type_url": boxes[0].payload.type_url, "value": boxes[0].payload.value}


# ---------------------------------------------------------------- issue 34: boundaries, over-long varints

TIMES = """
syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message T { google.protobuf.Timestamp at = 1; google.protobuf.Duration took = 2; }
"""


def uvarint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out) + bytes([v])


def decode_bodies(text: str, bodies: list[bytes], **options) -> tuple[pa.StructArray, list]:
    reg = Registry({3: Schema(text, "PROTOBUF", id=3)})
    out = values.decode(table([framed(3, b"\x00", b) for b in bodies]), reg, errors="null",
                        protobuf=ProtoOptions(**options))
    return out.column("value").combine_chunks(), out.column("value_error").to_pylist()


BOUND = 9223372036854  # the last whole second of int64 microseconds
seconds_near = st.integers(BOUND - 3, BOUND + 4) | st.integers(-BOUND - 4, -BOUND + 3) | st.integers(-2**63, 2**63 - 1)
nanos_near = st.integers(-2**31, 2**31 - 1) | st.sampled_from([0, 775807999, 775808000, 775808999, -775808999,
                                                               -775809000, 999999999, -999999999])


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(seconds_near, nanos_near), min_size=1, max_size=8))
def test_timestamp_and_duration_convert_exactly_or_are_out_of_range(pairs) -> None:
    # issue 34 item 4a: seconds at the bound plus nanos wrapped around int64 instead of an error
    bodies = []
    for s, n in pairs:
        inner = b"\x08" + uvarint(s) + b"\x10" + uvarint(n)
        bodies.append(b"\x0a" + uvarint(len(inner)) + inner + b"\x12" + uvarint(len(inner)) + inner)
    arr, errs = decode_bodies(TIMES, bodies)
    at, took = (arr.field(name).cast(pa.int64()).to_pylist() for name in ("at", "took"))
    for k, (s, n) in enumerate(pairs):
        us = s * 10**6 + (abs(n) // 1000) * (1 if n >= 0 else -1)  # the quotient truncated, as Spark
        if -2**63 <= us < 2**63:
            assert errs[k] is None and at[k] == took[k] == us, (s, n, errs[k])
        else:
            assert arr[k].as_py() is None and "out of the 64-bit microsecond range" in errs[k], (s, n, at[k])


VARINTS = """
syntax = "proto3";
enum E { E0 = 0; E1 = 1; E2 = 2; }
message V {
  optional sint32 s32 = 1; optional int32 i32 = 2; optional uint32 u32 = 3; optional E e = 4;
  optional bool b = 5; optional sint64 s64 = 6; optional int64 i64 = 7; optional uint64 u64 = 8;
}
"""
# a varint of 1-10 bytes: continuation bytes, then a last byte below 0x80 (bits past 64 dropped)
overlong = st.integers(1, 10).flatmap(lambda k: st.tuples(st.lists(st.integers(0x80, 0xFF), min_size=k - 1,
                                                                   max_size=k - 1), st.integers(0, 0x7F)))


@pytest.fixture(scope="module")
def varints_pb2(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("varints"), "varints", VARINTS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.lists(st.tuples(st.integers(1, 8), overlong), min_size=1, max_size=8), as_ints=st.booleans())
def test_over_long_varints_decode_as_upb(varints_pb2, raw, as_ints) -> None:
    # issue 34 item 4b: a sint32 written as an over-long varint was zigzag-decoded on 64 bits, then
    # truncated; upb (and protobuf-java) truncate to 32 bits first
    body = b"".join(uvarint(number << 3) + bytes(head) + bytes([last]) for number, (head, last) in raw)
    m = varints_pb2.V.FromString(body)
    arr, errs = decode_bodies(VARINTS, [body], enums_as_ints=as_ints)
    rows = arr.to_pylist()
    assert errs == [None]
    signed = lambda x, bits: x - (1 << bits) if x >= 1 << (bits - 1) else x  # noqa: E731 - Spark's same bits
    for fd in m.DESCRIPTOR.fields:
        if not m.HasField(fd.name):
            assert rows[0][fd.name] is None
            continue
        want = getattr(m, fd.name)
        if fd.name == "u32":
            want = signed(want, 32)
        elif fd.name == "u64":
            want = signed(want, 64)
        elif fd.name == "e" and not as_ints:
            want = varints_pb2.E.Name(want) if want in (0, 1, 2) else f"UNKNOWN_ENUM_VALUE_E_{want}"
        assert rows[0][fd.name] == want, (fd.name, body.hex())


NODE = """
syntax = "proto3";
message Node { string name = 1; map<string, Node> kids = 2; repeated Node list = 3; Node one = 4; }
"""


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_recursive_map_values_cut_by_depth_decode_like_upb(tmp_path, depth: int) -> None:
    # issue 34 item 5: a map whose value message recursion cut had an entry of one column (its key):
    # every decode raised IndexError laying out its Arrow type; the map is dropped with its values
    pb2 = generate(tmp_path, "node", NODE)
    root = pb2.Node(name="a")
    root.kids["k"].name = "b"
    root.kids["k"].kids["z"].name = "c"
    root.kids["k"].kids["z"].list.add(name="d")
    root.list.add(name="e").one.name = "f"
    root.one.kids["y"].name = "g"

    def want(node, level: int) -> dict:
        row: dict = {"name": node.name or None}
        if level < depth:  # a Node at this level still has its recursive fields
            row["kids"] = sorted((k, want(v, level + 1)) for k, v in node.kids.items())
            row["list"] = [want(x, level + 1) for x in node.list]
            row["one"] = want(node.one, level + 1) if node.HasField("one") else None
        return row

    assert row_of(NODE, root, recursive_depth=depth) == want(root, 1)
