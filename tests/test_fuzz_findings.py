"""Defects the fuzz harnesses (``fuzz/``) found, each as a minimal reproducer.

Each test states the behaviour kbatch's standards require and is marked
``xfail(strict=True)`` while the defect is open: when a fix lands the test passes, strict
xfail turns that into a failure, and the fix removes the mark (and the defect's name from
``KBATCH_FUZZ_KNOWN`` in ``.ci/run``; see ``fuzz/oracle.py``). The defects listed in issue 15
(index trust, concurrent mutation, the memory bound, ``client_id``) have their regression
tests with their fixes, not here.
"""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import numpy as np
import pytest

import kbatch
from kbatch import protocol
from kbatch.errors import CorruptRecordError, CRCError
from kbatch.internal import InternalRecordError, cluster_metadata, consumer_offsets, encode_key_value
from kbatch.log import LogWriter, open_log


def test_last_stable_offset_keeps_every_record_below_it_when_offsets_go_back() -> None:
    # found by fuzz/fuzz_decode.py: a batch at offsets 10-11, then one at offset 0
    data = (kbatch.encode([b"a", b"b"], base_offset=10, timestamps=[1, 1])
            + kbatch.encode([b"c"], base_offset=0, timestamps=[1]))
    assert kbatch.decode(data).records["offset"].tolist() == [10, 11, 0]
    try:
        t = kbatch.decode(data, isolation_level="read_committed", last_stable_offset=11)
    except kbatch.KBatchError as err:  # refusing offsets that go back is fine too, with a position
        assert err.position >= 0
        return
    # offset 0 is below the last stable offset: nothing may drop it silently, and the batch
    # rows may only point at records that exist
    assert t.records["offset"].tolist() == [10, 0]
    assert (t.batches["first_record"] + np.where(t.batches["is_control"], 0, t.batches["record_count"])
            <= len(t.records)).all()


def _aborted_log(root: Path) -> Path:
    with LogWriter(root, "t", 0) as w:
        w.append(kbatch.encode([b"a1", b"a2"], producer_id=7, producer_epoch=0, transactional=True,
                               timestamps=[1, 1]))
        w.append(kbatch.encode_control("abort", 7, 0, base_offset=2, timestamp=2))
        w.append(kbatch.encode([b"c"], base_offset=3, timestamps=[3]))
    return root / "t-0"


@pytest.mark.parametrize(
    "txnindex",
    [
        # an entry for an ABORT marker that is not there (offset 1 holds data)
        bytes.fromhex("0000" "0000000000000007" "0000000000000000" "0000000000000001" "0000000000000003")
        + bytes.fromhex("0000" "0000000000000007" "0000000000000000" "0000000000000002" "0000000000000003"),
        b"",  # emptied (its entry lost)
        # the entry with its firstOffset moved past the log (one byte changed, as the fuzzer did)
        bytes.fromhex("0000" "0000000000000007" "3a00000000000000" "0000000000000002" "0000000000000003"),
    ],
    ids=["extra-entry", "empty", "first-offset-moved"],
)
def test_a_lying_txnindex_does_not_return_aborted_records(tmp_path: Path, txnindex: bytes) -> None:
    part = _aborted_log(tmp_path)
    index = part / "00000000000000000000.txnindex"
    assert index.read_bytes() == bytes.fromhex(
        "0000" "0000000000000007" "0000000000000000" "0000000000000002" "0000000000000003")
    honest = open_log(part)
    assert honest.read(isolation_level="read_committed").values() == [b"c"]
    assert not [n for n in honest.notes if ".txnindex" in n]
    index.write_bytes(txnindex)
    # the ABORT marker is still in the .log: a read_committed read must still leave a1, a2 out,
    # as it does with the .txnindex deleted, and say that the .txnindex does not match
    log = open_log(part)
    assert log.read(isolation_level="read_committed").values() == [b"c"]
    assert [n for n in log.notes if ".txnindex" in n and "producer 7" in n]


def test_decode_request_with_an_unknown_version_says_where() -> None:
    # found by fuzz/fuzz_protocol.py: a Produce request header with version 0 (Produce has 3-13)
    data = bytes.fromhex("0000" "0000" "00000001" "0000")
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_request(protocol.default_schema(), data)
    assert info.value.position == 2  # request_api_version
    assert "request_api_version" in info.value.path


def _offset_commit(partition: int, metadata: str, version: int) -> tuple[bytes, bytes]:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": partition},
                            {"offset": 1, "leader_epoch": 0, "metadata": metadata, "commit_timestamp": 0},
                            version=version)
    assert k is not None and v is not None
    return k, v


@pytest.mark.parametrize("history", [False, True])
def test_consumer_offsets_bad_utf8_metadata_beside_a_long_v4_metadata(tmp_path: Path, history: bool) -> None:
    # found by the internal-topic loops (issue 26): a v4 value whose metadata is 127+ bytes
    # (a two-byte compact length) goes to the general decoder; with it in the same chunk, a
    # metadata that is not UTF-8 on the C path escaped as UnicodeDecodeError
    k_long, v_long = _offset_commit(0, "m" * 127, 4)
    k_bad, v_ok = _offset_commit(1, "ab", 3)
    v_bad = v_ok.replace(b"\x00\x02ab", b"\x00\x02\xff\xfe")
    assert v_bad != v_ok
    with kbatch.LogWriter(tmp_path, "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([v_long, v_bad], keys=[k_long, k_bad]))
    with pytest.raises(InternalRecordError) as info:
        consumer_offsets(tmp_path, history=history)
    err = info.value
    assert (err.offset, err.part, err.field) == (1, "value", "metadata")
    assert err.position == v_bad.index(b"\xff\xfe")  # where the metadata starts in the value
    assert "not valid UTF-8" in str(err)


def _md(record_type: str, version: int = 0, **fields: object) -> bytes:
    _, v = encode_key_value("metadata", record_type, None, fields, version=version)
    assert v is not None
    return v


@pytest.mark.parametrize("field", ["leader_epoch", "partition_epoch"])
def test_cluster_metadata_epochs_wrap_as_int32_like_kafka(tmp_path: Path, field: str) -> None:
    # found by the internal-topic loops (issue 26): an epoch of 2**31-1 bumped by a
    # PartitionChangeRecord gave 2**31 and pyarrow's ArrowInvalid; Kafka's
    # PartitionRegistration.merge adds 1 to a Java int, which wraps to -2**31
    t = uuid.UUID(int=1)
    epochs = {"leader_epoch": 0, "partition_epoch": 0, field: 2**31 - 1}
    log = [_md("TopicRecord", name="a", topic_id=t),
           _md("PartitionRecord", partition_id=0, topic_id=t, replicas=[1], isr=[1], leader=1, **epochs),
           _md("PartitionChangeRecord", partition_id=0, topic_id=t, leader=2)]
    with kbatch.LogWriter(tmp_path, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode(log))
    (row,) = cluster_metadata(tmp_path)["partitions"].to_pylist()
    assert row[field] == -2**31
    other = "partition_epoch" if field == "leader_epoch" else "leader_epoch"
    assert row[other] == 1


def test_cluster_metadata_checkpoint_crc_error_keeps_its_attributes(tmp_path: Path) -> None:
    # found by the internal-topic loops (issue 26): the path was added by re-raising
    # type(exc)(f"{path}: {exc}"), which lost .stored, .computed, .position and .partial
    t = uuid.UUID(int=1)
    good = kbatch.encode([_md("TopicRecord", name="a", topic_id=t)])
    bad = bytearray(good + kbatch.encode([_md("TopicRecord", name="b", topic_id=uuid.UUID(int=2))],
                                         base_offset=1))
    bad[-1] ^= 0xFF  # the second batch's last byte: its CRC no longer matches
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    path = part / "00000000000000000002-0000000001.checkpoint"
    path.write_bytes(bytes(bad))
    with pytest.raises(CRCError) as direct:
        kbatch.decode(bytes(bad))
    with pytest.raises(CRCError) as info:
        cluster_metadata(tmp_path)
    err, want = info.value, direct.value
    assert str(path) in str(err) and err.path == str(path)  # type: ignore[attr-defined]
    assert (err.stored, err.computed) == (want.stored, want.computed)
    assert (err.position, err.batch_index, err.batch_position, err.field) == (
        want.position, want.batch_index, want.batch_position, want.field) and err.position > 0
    assert isinstance(err.partial, kbatch.RecordTable) and len(err.partial.records) == 1
    assert isinstance(err.__cause__, CRCError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.stored, back.computed, back.path, str(back)) == (err.stored, err.computed, err.path, str(err))


def test_every_error_keeps_its_attributes_when_it_is_placed_in_a_file() -> None:
    crc = CRCError("crc32c mismatch", 7, 1, "crc", batch_position=3, record_index=-1)
    crc.stored, crc.computed = 1, 2
    crc.partial = "before"
    moved = crc.with_context("/x/000.log", shift=100)
    assert type(moved) is CRCError and moved is not crc
    assert (moved.position, moved.batch_position, moved.batch_index, moved.field) == (107, 103, 1, "crc")
    assert (moved.stored, moved.computed, moved.partial, moved.path) == (1, 2, "before", "/x/000.log")
    assert str(moved) == "crc32c mismatch in /x/000.log (byte 107, batch 1, field crc)"
    assert (crc.position, str(crc)) == (7, "crc32c mismatch (byte 7, batch 1, field crc)")  # unchanged
    unplaced = CorruptRecordError("bad", -1).with_context("f", shift=10)
    assert unplaced.position == -1 and str(unplaced) == "bad in f"
    internal = InternalRecordError("bad", 5, "value", 3, "$.x").with_context("p")
    assert isinstance(internal, InternalRecordError)
    assert (internal.offset, internal.part, internal.position, internal.path) == (5, "value", 3, "p")
    assert str(internal) == "bad in p (offset 5, value byte 3, field $.x)"


# ---------------------------------------------------------------- Protobuf values (fuzz/fuzz_protobuf.py, issue 34)

def _proto_decode(text: str, body: bytes) -> tuple[object, object]:
    import pyarrow as pa

    from kbatch import values

    registry = values.Registry({1: values.Schema(text, "PROTOBUF", id=1)})
    out = values.decode(pa.table({"value": pa.array([b"\x00\x00\x00\x00\x01\x00" + body], pa.binary())}), registry,
                        errors="null")
    return out.column("value").to_pylist()[0], out.column("value_error").to_pylist()[0]


def test_a_protobuf_map_repeating_a_key_keeps_the_last_entry() -> None:
    # two entries with key "a" (values 1 then 2): upb and the Protobuf spec keep the last
    value, error = _proto_decode('syntax = "proto3"; message M { map<string, int32> m = 1; }',
                                 bytes.fromhex("0a050a01611001" "0a050a01611002"))
    assert error is None and value == {"m": [("a", 2)]}


def test_a_protobuf_map_keeps_a_key_where_it_first_stood_with_its_last_value() -> None:
    # protobuf-java's LinkedHashMap and upb: one entry per key, at its first place, holding the last
    # value; a message value's own list and map (repeating a key too) go with it
    def entry(key: bytes, s: bytes, xs: list[int], mm: bytes = b"") -> bytes:
        v = (b"\x0a" + bytes([len(s)]) + s if s else b"") + b"".join(b"\x10" + bytes([x]) for x in xs) + mm
        e = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(v)]) + v
        return b"\x0a" + bytes([len(e)]) + e

    inner = bytes.fromhex("1a050a01611001" "1a050a01621003" "1a050a01611002")  # mm: a=1, b=3, a=2
    body = (entry(b"a", b"x", [1, 2]) + entry(b"b", b"yy", [3], inner) + entry(b"a", b"z" * 20, [4, 5, 6])
            + entry(b"b", b"", []) + entry(b"c", b"w", [7], inner) + b"\x10\x05")
    value, error = _proto_decode('syntax = "proto3"; message M { map<string, V> m = 1; int32 z = 2; } '
                                 'message V { string s = 1; repeated uint32 xs = 2; map<string, int32> mm = 3; }', body)
    assert error is None and value == {"m": [("a", {"s": "z" * 20, "xs": [4, 5, 6], "mm": []}),
                                             ("b", {"s": None, "xs": [], "mm": []}),
                                             ("c", {"s": "w", "xs": [7], "mm": [("a", 2), ("b", 3)]})], "z": 5}


@pytest.mark.parametrize("body", ["88808080800005", "f09f98801882808000"])
def test_a_protobuf_tag_longer_than_5_bytes_or_32_bits_is_an_error_as_upb_has_it(body: str) -> None:
    # field 1 (varint) with its tag written in 6 bytes; a 5-byte tag above 2**32 - 1: upb refuses both
    value, error = _proto_decode('syntax = "proto3"; message M { int32 a = 1; }', bytes.fromhex(body))
    assert value is None and error is not None and "field tag longer than 5 bytes or above 2**32 - 1" in error


def test_an_avro_map_repeating_a_key_keeps_the_last_value_where_the_key_first_stood() -> None:
    # found by fuzz/fuzz_avro_evolution.py (avro_map_keys): fastavro (a dict) and Java's reader
    # (Map.put, so Spark's from_avro) keep one entry per key, the last value
    import json

    import pyarrow as pa

    from kbatch import values

    schema = {"type": "record", "name": "r", "fields": [{"name": "m", "type": {"type": "map", "values": "int"}}]}
    # one block of 3 entries: "a" -> 1, "b" -> 2, "a" -> 3, then the end of the map
    body = bytes([6, 2]) + b"a" + bytes([2, 2]) + b"b" + bytes([4, 2]) + b"a" + bytes([6, 0])
    reg = values.Registry({1: json.dumps(schema)})
    table = pa.table({"value": pa.array([b"\x00\x00\x00\x00\x01" + body], pa.binary())})
    out = values.decode(table, reg, reader_schema=1, errors="null")
    assert out.column("value_error").to_pylist() == [None]
    assert out.column("value").to_pylist() == [{"m": [("a", 3), ("b", 2)]}]
