"""The codec on its own: every field type, tagged fields, defaults, errors."""

from __future__ import annotations

import re
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import protocol_strategies as strategies
from support.protocol_defs import types

import kbatch
from kbatch.errors import KBatchError
from kbatch.protocol import (
    Message,
    ProtocolError,
    Records,
    Schema,
    decode_request,
    decode_response,
    default_schema,
    encode_request,
    encode_response,
    parse_message,
)
from kbatch.protocol._schema import strip_comments

KITCHEN_SINK = r"""
// A message with every field type. "//" inside a string is not a comment.
{
  "apiKey": 9999, "type": "request", "name": "KitchenSinkRequest",
  "validVersions": "0-3", "flexibleVersions": "2+",
  "fields": [
    { "name": "Flag", "type": "bool", "versions": "0+", "default": "true" },
    { "name": "I8", "type": "int8", "versions": "0+" },
    { "name": "I16", "type": "int16", "versions": "0+", "default": "-1" },
    { "name": "U16", "type": "uint16", "versions": "0+" },
    { "name": "I32", "type": "int32", "versions": "0+", "default": "0x7fffffff" },
    { "name": "U32", "type": "uint32", "versions": "0+" },
    { "name": "I64", "type": "int64", "versions": "0+" },
    { "name": "F64", "type": "float64", "versions": "0+" },
    { "name": "Text", "type": "string", "versions": "0+", "about": "http://not-a-comment" },
    { "name": "MaybeText", "type": "string", "versions": "0+", "nullableVersions": "0+", "default": "null" },
    { "name": "Blob", "type": "bytes", "versions": "0+", "nullableVersions": "0+" },
    { "name": "Id", "type": "uuid", "versions": "1+" },
    { "name": "Batches", "type": "records", "versions": "0+", "nullableVersions": "0+" },
    { "name": "Ints", "type": "[]int32", "versions": "0+" },
    { "name": "Names", "type": "[]string", "versions": "0+", "nullableVersions": "1+" },
    { "name": "Items", "type": "[]Item", "versions": "0+", "fields": [
      { "name": "Key", "type": "int64", "versions": "0+", "mapKey": true },
      { "name": "Value", "type": "string", "versions": "0+" },
      { "name": "Extra", "type": "int32", "versions": "3+", "default": "7" },
      { "name": "Note", "type": "string", "versions": "2+", "taggedVersions": "2+", "tag": 0, "default": "" }
    ]},
    { "name": "Maybe", "type": "Shared", "versions": "0+", "nullableVersions": "0+" },
    { "name": "Gone", "type": "int32", "versions": "0-1", "ignorable": false },
    { "name": "GoneIgnorable", "type": "int32", "versions": "0-1", "ignorable": true },
    { "name": "Later", "type": "[]Shared", "versions": "2+", "taggedVersions": "2+", "tag": 5 },
    { "name": "Leader", "type": "LeaderAndEpoch", "versions": "2+", "taggedVersions": "2+", "tag": 1, "fields": [
      { "name": "LeaderId", "type": "int32", "versions": "2+", "default": "-1" },
      { "name": "Epoch", "type": "int32", "versions": "2+", "default": "-1" }
    ]},
    { "name": "Cluster", "type": "string", "versions": "2+", "nullableVersions": "2+", "default": "null",
      "taggedVersions": "2+", "tag": 3 }
  ],
  "commonStructs": [
    { "name": "Shared", "versions": "0+", "fields": [
      { "name": "A", "type": "int16", "versions": "0+" },
      { "name": "B", "type": "string", "versions": "0+" }
    ]}
  ]
}
"""

SINK = Message(parse_message(KITCHEN_SINK))
FIELDS = SINK.spec.fields


def normal(value: Any) -> Any:
    if isinstance(value, Records):
        return bytes(value)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(range(4)))
def test_round_trip_every_type(data: st.DataObject, version: int) -> None:
    msg = data.draw(strategies.struct(FIELDS, version))
    encoded = SINK.encode(msg, version)
    decoded = SINK.decode(encoded, version)
    assert normal(decoded) == normal(msg)
    assert SINK.encode(decoded, version) == encoded


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([2, 3]), strategies.unknown_tags())
def test_unknown_tags_are_kept_and_written_back(data: st.DataObject, version: int,
                                                unknown: dict[int, bytes]) -> None:
    msg = data.draw(strategies.struct(FIELDS, version))
    msg["_unknown_tags"] = unknown
    encoded = SINK.encode(msg, version)
    decoded = SINK.decode(encoded, version)
    assert decoded["_unknown_tags"] == unknown
    assert SINK.encode(decoded, version) == encoded


def test_exact_bytes_non_flexible() -> None:
    msg = {"flag": False, "i8": -2, "i16": 3, "u16": 65535, "i32": -1, "u32": 4294967295, "i64": 1,
           "f64": 1.5, "text": "ab", "maybe_text": None, "blob": None, "batches": None, "ints": [1, 2],
           "names": ["x"], "items": [{"key": 9, "value": ""}], "maybe": None, "gone": 0}
    expected = (
        b"\x00" + b"\xfe" + b"\x00\x03" + b"\xff\xff" + b"\xff\xff\xff\xff" + b"\xff\xff\xff\xff"
        + struct.pack(">q", 1) + struct.pack(">d", 1.5) + b"\x00\x02ab" + b"\xff\xff"  # text, null text
        + b"\xff\xff\xff\xff" + bytes(16) + b"\xff\xff\xff\xff"  # null blob, zero uuid, null records
        + b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02"  # ints
        + b"\x00\x00\x00\x01\x00\x01x"  # names
        + b"\x00\x00\x00\x01" + struct.pack(">q", 9) + b"\x00\x00"  # items
        + b"\xff"  # null nullable struct
        + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"  # gone, gone_ignorable
    )
    assert SINK.encode(msg, 1) == expected
    assert SINK.decode(expected, 1)["u32"] == 4294967295


def test_exact_bytes_flexible_and_tagged() -> None:
    base = SINK.default(2)
    assert base["i32"] == 0x7FFFFFFF and base["flag"] is True and base["i16"] == -1
    assert base["leader"] is None and base["cluster"] is None
    plain = SINK.encode(base, 2)
    # ints, names, items (empty compact arrays), maybe (present, a=0, b="", no tags), no root tags
    assert plain.endswith(b"\x01\x01\x01" + b"\x01\x00\x00\x01\x00" + b"\x00")
    # compact string "ab" is length+1 then bytes; tags at defaults are not written
    msg = dict(base, text="ab", maybe_text=None, cluster="c1", leader={"leader_id": 4, "epoch": -1},
               items=[{"key": 1, "value": "v", "note": "n"}])
    encoded = SINK.encode(msg, 2)
    assert b"\x03ab\x00" in encoded  # text, then maybe_text null
    # item: key, value, tagged fields (1 field: tag 0, size 2, compact "n")
    assert struct.pack(">q", 1) + b"\x02v" + b"\x01\x00\x02\x02n" in encoded
    # root tags ascending: 1 (leader), 3 (cluster); 5 (later) is empty, so not written
    assert encoded.endswith(b"\x02" + b"\x01\x09\x00\x00\x00\x04\xff\xff\xff\xff\x00" + b"\x03\x03\x03c1")
    assert normal(SINK.decode(encoded, 2)) == normal(msg)
    # a tagged struct equal to its default is not written, and decodes as None
    same = SINK.encode(dict(base, leader={"leader_id": -1, "epoch": -1}), 2)
    assert same == SINK.encode(base, 2) and SINK.decode(same, 2)["leader"] is None


def test_nullable_struct_and_defaults_on_decode() -> None:
    msg = SINK.default(0)
    msg["maybe"] = {"a": 5, "b": "bee"}
    decoded = SINK.decode(SINK.encode(msg, 0), 0)
    assert decoded["maybe"] == {"a": 5, "b": "bee"}
    assert "id" not in decoded and "leader" not in decoded  # fields of other versions are absent


def test_missing_keys_mean_defaults() -> None:
    assert SINK.encode({}, 3) == SINK.encode(SINK.default(3), 3)


def test_ignorable() -> None:
    msg = SINK.default(1)
    msg["gone"] = 5
    msg["gone_ignorable"] = 6
    SINK.encode(msg, 1)
    with pytest.raises(ProtocolError, match=r"not in version 2 and is not ignorable.* - at \$\.gone$"):
        SINK.encode(msg, 2)
    del msg["gone"]
    out = SINK.decode(SINK.encode(msg, 2), 2)
    assert "gone_ignorable" not in out
    msg["gone"] = 0  # the default may always be dropped
    SINK.encode(msg, 2)


def test_encode_errors_name_the_field() -> None:
    msg = SINK.default(3)
    msg["items"] = [{"key": 1, "value": "a"}, {"key": 2, "value": None}]
    with pytest.raises(ProtocolError,
                       match=r"^Expected str, got None \(the field is not nullable\) - at \$\.items\[1\]\.value$"):
        SINK.encode(msg, 3)
    msg["items"] = [{"key": 1, "value": "a"}, {"key": 2 ** 63, "value": "b"}]
    with pytest.raises(ProtocolError,
                       match=r"^Expected int64 in \[.*\], got 9223372036854775808 - at \$\.items\[1\]\.key$"):
        SINK.encode(msg, 3)
    with pytest.raises(ProtocolError, match=r"Expected str, got int - at \$\.text"):
        SINK.encode({"text": 5}, 3)
    with pytest.raises(ProtocolError, match=r"longer than 32767 - at \$\.text"):
        SINK.encode({"text": "x" * 32768}, 0)
    with pytest.raises(ProtocolError, match=r"Expected dict, got list - at \$\.maybe"):
        SINK.encode({"maybe": [1]}, 0)
    with pytest.raises(ProtocolError, match=r"collides"):
        SINK.encode({"cluster": "c", "_unknown_tags": {3: b"x"}}, 2)


def test_protocol_error_is_kbatch_error_and_value_error() -> None:
    with pytest.raises(ProtocolError) as info:
        SINK.decode(b"\x00", 0)
    err = info.value
    assert isinstance(err, KBatchError) and isinstance(err, ValueError)
    assert err.path == "$.i8" and err.position == 1
    assert str(err) == "Expected 1 bytes, 0 left - at $.i8 (byte 1)"


def good_message(version: int) -> bytes:
    msg = SINK.default(version)
    msg.update(text="hello", blob=b"\x01\x02", batches=b"R" * 40, ints=[1, 2, 3], names=["a", "b"],
               items=[{"key": i, "value": f"v{i}", "note": "x" if version >= 2 else ""} for i in range(3)],
               maybe={"a": 1, "b": "c"})
    if version >= 2:
        msg.update(later=[{"a": 2, "b": "d"}], cluster="k")
    return SINK.encode(msg, version)


@pytest.mark.parametrize("version", range(4))
def test_every_truncation_is_a_protocol_error(version: int) -> None:
    data = good_message(version)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError) as info:
            SINK.decode(data[:cut], version)
        assert 0 <= info.value.position <= cut
        assert info.value.path.startswith("$")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(4)), st.data())
def test_corrupt_bytes_never_escape_as_other_errors(version: int, data: st.DataObject) -> None:
    good = bytearray(good_message(version))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] = data.draw(st.integers(0, 255))
    try:
        SINK.decode(bytes(good), version)
    except ProtocolError:
        pass


def test_error_messages_for_malformed_input() -> None:
    fetch = default_schema().response("Fetch")
    msg = {"responses": [{"topic_id": uuid.uuid4(), "partitions": [
        {"partition_index": 0, "high_watermark": 5, "records": b"x" * 100}]}]}
    data = fetch.encode(msg, 17)
    # cut inside the records: the length is checked before the slice
    with pytest.raises(ProtocolError, match=r"^Expected 100 bytes, \d+ left - at "
                       r"\$\.responses\[0\]\.partitions\[0\]\.records \(byte \d+\)$"):
        fetch.decode(data[:-20], 17)
    # an array count far larger than the bytes left fails before allocating
    huge = bytearray(data)
    huge[10:11] = b"\xff\xff\xff\xff\x07"  # compact count 2**31 - 1 for responses
    with pytest.raises(ProtocolError,
                       match=r"Array of 2147483646 elements needs at least .* - at \$\.responses \(byte 15\)"):
        fetch.decode(bytes(huge), 17)
    # a varint longer than 5 bytes
    bad = bytearray(data)
    bad[10:11] = b"\xff\xff\xff\xff\xff\x01"
    with pytest.raises(ProtocolError, match=r"Invalid unsigned varint - at \$\.responses"):
        fetch.decode(bytes(bad), 17)
    with pytest.raises(ProtocolError, match=r"1 bytes left over after the message - at \$ \(byte \d+\)"):
        fetch.decode(data + b"\x00", 17)
    with pytest.raises(ProtocolError, match="no version 3"):
        fetch.decode(data, 3)


def test_string_errors() -> None:
    req = default_schema().request("FindCoordinator")
    assert req.decode(b"\x00\x02ab\x00", 1) == {"key": "ab", "key_type": 0}
    with pytest.raises(ProtocolError, match=r"Null string in a field that is not nullable - at \$\.key \(byte 2\)"):
        req.decode(b"\xff\xff\x00", 1)
    with pytest.raises(ProtocolError, match=r"Invalid UTF-8.* - at \$\.key \(byte 2\)"):
        req.decode(b"\x00\x02\xff\xfe\x00", 1)
    long_compact = b"\x81\x80\x02" + b"a" * 32768 + b"\x00\x00"  # uvarint 32769 = length 32768
    with pytest.raises(ProtocolError, match=r"String of 32768 bytes is longer than 32767 - at \$\.key"):
        req.decode(long_compact, 3)


def test_tag_order_and_duplicates_are_errors() -> None:
    meta = default_schema().response("ApiVersions")
    base = meta.encode({"error_code": 0, "api_keys": []}, 3)
    assert base == b"\x00\x00\x01\x00\x00\x00\x00\x00"
    two = base[:-1] + b"\x02\x07\x01\x00\x05\x01\x00"  # tags 7 then 5
    with pytest.raises(ProtocolError,
                       match=r"Tag 5 after tag 7: tags must be unique and ascending - at \$\._tagged_fields"):
        meta.decode(two, 3)
    dup = base[:-1] + b"\x02\x07\x01\x00\x07\x01\x00"
    with pytest.raises(ProtocolError, match="Tag 7 after tag 7"):
        meta.decode(dup, 3)
    # a known tag whose value does not fill its size
    short = base[:-1] + b"\x01\x01\x09" + struct.pack(">q", 5) + b"\x00"
    with pytest.raises(ProtocolError,
                       match=r"Tagged field has 9 bytes, its value took 8 - at \$\.finalized_features_epoch"):
        meta.decode(short, 3)
    ok = meta.decode(base[:-1] + b"\x01\x01\x08" + struct.pack(">q", 5), 3)
    assert ok["finalized_features_epoch"] == 5


def test_records_are_zero_copy_views() -> None:
    fetch = default_schema().response("Fetch")
    payload = bytes(range(256)) * 40
    msg = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": payload}]}]}
    data = fetch.encode(msg, 11)
    out = fetch.decode(data, 11)
    rec = out["responses"][0]["partitions"][0]["records"]
    assert isinstance(rec, Records)
    assert rec.view.obj is data  # a view of the caller's bytes, not a copy
    assert rec == payload and len(rec) == len(payload) and rec.tobytes() == payload
    # encode_parts hands big records back without copying them
    parts = fetch.encode_parts(out, 11)
    assert any(isinstance(p, memoryview) and p.obj is rec for p in parts)
    assert b"".join(parts) == data


@pytest.mark.skipif(not hasattr(kbatch, "encode"), reason="kbatch core not built")
def test_records_decode_with_the_record_codec() -> None:
    batch = kbatch.encode([b"v0", b"v1"], keys=[b"k0", None])
    fetch = default_schema().response("Fetch")
    data = fetch.encode({"responses": [{"topic": "t", "partitions": [{"records": batch}]}]}, 11)
    table = fetch.decode(data, 11)["responses"][0]["partitions"][0]["records"].decode()
    assert [table.value(0), table.value(1)] == [b"v0", b"v1"]
    assert table.key(0) == b"k0" and table.key(1) is None


def test_request_and_response_headers() -> None:
    s = default_schema()
    # Fetch v11: header v1 (int16 client id, no tags); v12: header v2 (tags), client id still int16
    v11 = encode_request(s, "Fetch", 11, {"topics": []}, correlation_id=7, client_id="cli")
    assert v11[4:17] == b"\x00\x01\x00\x0b\x00\x00\x00\x07\x00\x03cli"
    v12 = encode_request(s, "Fetch", 12, {"topics": []}, correlation_id=7, client_id="cli")
    assert v12[4:18] == b"\x00\x01\x00\x0c\x00\x00\x00\x07\x00\x03cli\x00"
    assert struct.unpack(">i", v12[:4])[0] == len(v12) - 4
    header, body = decode_request(s, v12, framed=True)
    assert header == {"request_api_key": 1, "request_api_version": 12, "correlation_id": 7, "client_id": "cli"}
    assert body["topics"] == []
    null_id = encode_request(s, "ApiVersions", 3, {}, correlation_id=1, client_id=None, framed=False)
    assert null_id[8:10] == b"\xff\xff"
    # responses: v0 header below the flexible versions, v1 (tags) from them on
    r11 = encode_response(s, "Fetch", 11, {"responses": []}, correlation_id=9, framed=False)
    assert r11[:4] == b"\x00\x00\x00\x09" and decode_response(s, "Fetch", 11, r11)[0] == 9
    r12 = encode_response(s, "Fetch", 12, {"responses": []}, correlation_id=9, framed=False)
    assert r12[:5] == b"\x00\x00\x00\x09\x00"
    assert decode_response(s, "Fetch", 12, r12) == (9, s.response("Fetch").decode(r12[5:], 12))
    # ApiVersionsResponse keeps header v0 even in flexible versions
    av = encode_response(s, "ApiVersions", 3, {"error_code": 0, "api_keys": []}, correlation_id=3, framed=False)
    assert av[:6] == b"\x00\x00\x00\x03\x00\x00"
    assert s.response("ApiVersions").header_version(4) == 0


def test_api_versions_unsupported_version_falls_back_to_v0() -> None:
    s = default_schema()
    # what a broker sends when asked ApiVersions v9: header v0, body v0, error 35
    v0_body = s.response("ApiVersions").encode(
        {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}, 0)
    cid, body = decode_response(s, "ApiVersions", 4, b"\x00\x00\x00\x05" + v0_body)
    assert cid == 5 and body == {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}


def test_comments_and_loader(tmp_path: Any) -> None:
    assert strip_comments('{"a": "x // y"} // c\n') == '{"a": "x // y"} \n'
    spec = parse_message(KITCHEN_SINK)
    assert spec.fields[8].raw["about"] == "http://not-a-comment"
    (tmp_path / "KitchenSinkRequest.json").write_text(KITCHEN_SINK)
    schema = Schema.from_directory(tmp_path)
    assert schema.request(9999).name == "KitchenSinkRequest" and "KitchenSinkRequest" in schema
    with pytest.raises(FileNotFoundError):
        Schema.from_directory(tmp_path / "nothing")


def test_definition_errors() -> None:
    with pytest.raises(ValueError, match="tag 1 used by A and B"):
        parse_message('{"type": "data", "name": "X", "validVersions": "0", "flexibleVersions": "0+", "fields": ['
                      '{"name": "A", "type": "int8", "versions": "0+", "tag": 1, "taggedVersions": "0+"},'
                      '{"name": "B", "type": "int8", "versions": "0+", "tag": 1, "taggedVersions": "0+"}]}')
    with pytest.raises(ValueError, match="outside flexible versions"):
        parse_message('{"type": "data", "name": "X", "validVersions": "0", "flexibleVersions": "none", "fields": ['
                      '{"name": "A", "type": "int8", "versions": "0+", "tag": 1, "taggedVersions": "0+"}]}')
    with pytest.raises(ValueError, match="unknown type"):
        parse_message('{"type": "data", "name": "X", "validVersions": "0", "fields": ['
                      '{"name": "A", "type": "int128", "versions": "0+"}]}')


def test_generated_source_is_inspectable() -> None:
    src = default_schema().response("Fetch").source(17)
    assert src.startswith("def _decode(data, buf, pos, end):")
    assert re.search(r"\.unpack_from\(buf, pos\)", src)
    assert "def _encode(m, parts):" in default_schema().response("Fetch").source(17, "encode")


KERNEL_CASES = [("MetadataResponse", v) for v in (1, 9, 12)] + [
    ("ApiVersionsResponse", 0), ("ApiVersionsResponse", 3), ("ListOffsetsRequest", 5), ("ListOffsetsRequest", 8),
    ("ListOffsetsResponse", 3), ("ListOffsetsResponse", 9), ("FetchRequest", 11), ("ProduceResponse", 8),
    ("FetchResponse", 4), ("FetchResponse", 11), ("FetchResponse", 12), ("FetchResponse", 17),
    ("ProduceRequest", 3), ("ProduceRequest", 13), ("FetchRequest", 17)]


@pytest.mark.parametrize(("name", "version"), KERNEL_CASES)
def test_c_kernel_matches_python(name: str, version: int) -> None:
    """The C kernels for flat struct arrays decode and encode exactly as the Python path."""
    fast = default_schema()[name]
    pure = Message(fast.spec, kernel=False)

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        msg = data.draw(strategies.struct(fast.spec.fields, version, big=True))
        encoded = fast.encode(msg, version)
        assert encoded == pure.encode(msg, version) == b"".join(fast.encode_parts(msg, version))
        decoded = fast.decode(encoded, version)
        assert decoded == pure.decode(encoded, version)
        assert types(decoded) == types(pure.decode(encoded, version))  # KeyedList, Records, tuples alike
        for cut in sorted({len(encoded) // 3, len(encoded) // 2, len(encoded) - 1}):
            errors = []
            for m in (fast, pure):
                with pytest.raises(ProtocolError) as info:
                    m.decode(encoded[:cut], version)
                errors.append(str(info.value))
            assert errors[0] == errors[1]
        # corrupted bytes: the same message or the same error either way
        bad = bytearray(encoded)
        for _ in range(3):
            bad[data.draw(st.integers(0, len(bad) - 1))] = data.draw(st.integers(0, 255))
        outcomes = []
        for m in (fast, pure):
            try:
                outcomes.append(m.decode(bytes(bad), version))
            except ProtocolError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]

    run()


def test_c_kernel_leaves_tagged_elements_to_python() -> None:
    meta = default_schema().response("Metadata")
    parts = [{"partition_index": i, "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": []}
             for i in range(6)]
    parts[4]["_unknown_tags"] = {77: b"zz"}
    msg = {"topics": [{"name": "t", "partitions": parts}]}
    out = meta.decode(meta.encode(msg, 12), 12)
    got = out["topics"][0]["partitions"]
    assert got[4]["_unknown_tags"] == {77: b"zz"} and "_unknown_tags" not in got[3]
    assert got[5]["replica_nodes"] == (1, 2)


def test_c_kernel_nested_arrays_fall_back_whole() -> None:
    """A tagged field deep inside makes the kernel hand the whole array back to Python."""
    meta = default_schema().response("Metadata")
    pure = Message(meta.spec, kernel=False)
    topics = [{"name": f"t{t}", "topic_id": uuid.UUID(int=t + 1), "partitions": [
        {"partition_index": i, "replica_nodes": [1, 2, 3], "isr_nodes": [t], "offline_replicas": []}
        for i in range(5)]} for t in range(6)]
    data = meta.encode({"topics": topics}, 12)
    assert meta.decode(data, 12) == pure.decode(data, 12)
    topics[4]["partitions"][3]["_unknown_tags"] = {9: b"\x01"}
    data = meta.encode({"topics": topics}, 12)
    out = meta.decode(data, 12)
    assert out == pure.decode(data, 12)
    assert out["topics"][4]["partitions"][3]["_unknown_tags"] == {9: b"\x01"}
    assert out["topics"][5]["topic_id"] == uuid.UUID(int=6)
    with pytest.raises(ProtocolError) as fast_err:
        meta.decode(data[:-30], 12)
    with pytest.raises(ProtocolError) as pure_err:
        pure.decode(data[:-30], 12)
    assert str(fast_err.value) == str(pure_err.value)


def test_c_kernel_fetch_partitions() -> None:
    fetch = default_schema().response("Fetch")
    pure = Message(fetch.spec, kernel=False)
    parts: list[dict[str, Any]] = [{"partition_index": i, "high_watermark": 10 * i, "records": bytes([i]) * (100 * i)}
                                   for i in range(8)]
    parts[2]["records"] = None
    msg = {"responses": [{"topic_id": uuid.UUID(int=5), "partitions": parts}]}
    for aborted in (None, [], [{"producer_id": 1, "first_offset": 2}]):
        parts[6]["aborted_transactions"] = aborted
        data = fetch.encode(msg, 17)
        out = fetch.decode(data, 17)
        assert out == pure.decode(data, 17)
        got = out["responses"][0]["partitions"]
        assert got[6]["aborted_transactions"] == aborted and got[5]["aborted_transactions"] == []
        assert got[2]["records"] is None and got[7]["records"] == bytes([7]) * 700
        assert got[7]["records"].view.obj is data and got[7]["current_leader"] is None


def test_c_kernel_is_built() -> None:
    """Fail if the optional C kernel silently fell back to pure Python.

    Set KBATCH_PROTOCOL_PURE=1 to run the suite on a pure-Python install.
    """
    import os

    from kbatch.protocol import _compile

    if os.environ.get("KBATCH_PROTOCOL_PURE", "") not in ("", "0"):
        pytest.skip("pure-Python run requested")
    assert _compile.KERNEL is not None, "kbatch.protocol._kernel is not built (see setup.py)"
    assert default_schema().response("Metadata").kernel
