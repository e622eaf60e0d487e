"""Every record type of every internal topic, with random values: encode, write with LogWriter,
read back with open_log, decode with decode_key_value — the same message comes out."""

from __future__ import annotations

import struct
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import protocol_strategies as strategies

import kbatch
from kbatch.internal import (
    CONTROL_TYPES,
    InternalRecordError,
    decode_control_value,
    decode_key_value,
    default_registry,
    encode_key_value,
    iter_decoded,
)

REG = default_registry()


def normal(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    return value


# (family, key schema or None, value schema, value version)
CASES: list[tuple[str, str | None, str, int]] = []
for fam in ("group", "transaction", "share"):
    for _rtype, (kmsg, _kv, vmsg) in sorted(REG.coordinator[fam].items()):
        CASES += [(fam, kmsg.name, vmsg.name, v) for v in vmsg.versions]
for fam in ("metadata", "remote_log"):
    for msg in REG.metadata[fam].values():
        CASES += [(fam, None, msg.name, v) for v in msg.versions]


def test_every_record_type_is_covered() -> None:
    assert len({c[2] for c in CASES}) == 57  # 25 group, 1 transaction, 2 share, 26 metadata, 4 remote-log
    assert len(CASES) == 80  # every value version of each


@pytest.mark.parametrize("case", CASES, ids=[f"{c[2]}-v{c[3]}-{c[1]}" for c in CASES])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tombstone=st.booleans())
def test_round_trip_through_logwriter(data: st.DataObject, tombstone: bool,
                                      case: tuple[str, str | None, str, int]) -> None:
    fam, key_name, value_name, version = case
    vmsg = REG.schema[value_name]
    value = data.draw(strategies.struct(vmsg.spec.fields, version))
    key = None
    if key_name is not None:
        kmsg = REG.schema[key_name]
        key = data.draw(strategies.struct(kmsg.spec.fields, 0))
    tomb = tombstone and key_name is not None
    k, v = encode_key_value(fam, key_name or value_name, key, None if tomb else value, version=version)
    with tempfile.TemporaryDirectory() as root:
        with kbatch.LogWriter(root, "t", 0) as w:
            w.append(kbatch.encode([v], keys=[k]))
        table = kbatch.open_log(f"{root}/t-0").read()
        [entry] = list(iter_decoded(table, fam))
    r = entry.record
    assert r.value_type == vmsg.name
    if key_name is not None:
        assert r.key_type == key_name
        assert normal(r.key) == normal(key)
    if tomb:
        assert r.value is None
    else:
        assert r.value_version == version
        assert normal(r.value) == normal(value)


def test_unknown_type_raises_naming_the_offset_or_keeps_the_bytes() -> None:
    key = b"\x00\x63" + b"junk"
    with pytest.raises(InternalRecordError, match=r"unknown group coordinator record type 99.*offset 12"):
        decode_key_value("group", key, b"\x00\x00", offset=12)
    r = decode_key_value("group", key, b"\x00\x00", offset=12, on_unknown="raw")
    assert r.unknown and r.raw_key == key and r.raw_value == b"\x00\x00" and r.key is None


def test_unknown_value_version_and_metadata_type() -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 0},
                            {"offset": 1, "metadata": "", "commit_timestamp": 0}, version=3)
    assert v is not None
    with pytest.raises(InternalRecordError, match=r"unknown OffsetCommitValue version 9 .*offset 3"):
        decode_key_value("group", k, b"\x00\x09" + v[2:], offset=3)
    with pytest.raises(InternalRecordError, match=r"unknown metadata record type 99"):
        decode_key_value("metadata", None, b"\x01\x63\x00\x00")
    assert decode_key_value("metadata", None, b"\x01\x63\x00\x00", on_unknown="raw").unknown
    with pytest.raises(InternalRecordError, match="frame version 0"):
        decode_key_value("metadata", None, b"\x00\x03\x00")


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_truncated_bytes_are_a_clear_error_never_a_crash(cut: int) -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "group", "topic": "topic", "partition": 0},
                            {"offset": 1, "leader_epoch": 2, "metadata": "meta", "commit_timestamp": 0}, version=3)
    assert k is not None and v is not None
    with pytest.raises(InternalRecordError, match="offset 5"):
        decode_key_value("group", k[:-cut], v, offset=5)
    with pytest.raises(InternalRecordError, match="offset 5"):
        decode_key_value("group", k, v[:-cut], offset=5)
    with pytest.raises(InternalRecordError, match="left over"):
        decode_key_value("group", k, v + b"x" * cut, offset=5)


# KRaft control records laid out by hand as Kafka writes them: the key is ControlRecordType.recordKey()
# (int16 version 0, int16 type); the value is MessageUtil.toByteBuffer(message, version 0) as in
# MemoryRecordsBuilder.appendLeaderChangeMessage / appendSnapshotHeaderMessage / ... - the flexible body
# at version 0 with no version prefix, whose first field is the message's own int16 Version
# (ControlRecordUtils reads it back at version 0). Trailing b"\x00" = no tagged fields.
VOTER = struct.pack(">i", 7) + b"\x00"                       # Voter {VoterId 7}
KAFKA_CONTROL = {
    2: (struct.pack(">hi", 0, 7) + b"\x02" + VOTER + b"\x02" + VOTER + b"\x00",
        {"version": 0, "leader_id": 7, "voters": [{"voter_id": 7}], "granting_voters": [{"voter_id": 7}]}),
    3: (struct.pack(">hq", 0, 1_700_000_000_000) + b"\x00",
        {"version": 0, "last_contained_log_timestamp": 1_700_000_000_000}),
    4: (struct.pack(">h", 0) + b"\x00", {"version": 0}),
    5: (struct.pack(">hh", 0, 1) + b"\x00", {"version": 0, "k_raft_version": 1}),
    6: (struct.pack(">h", 0) + b"\x02" + struct.pack(">i", 7) + bytes(range(16))
        + b"\x02" + b"\x0b" + b"CONTROLLER" + b"\x02" + b"h" + struct.pack(">H", 9093) + b"\x00"
        + struct.pack(">hh", 0, 1) + b"\x00" + b"\x00" + b"\x00",
        {"version": 0, "voters": [{"voter_id": 7, "voter_directory_id": uuid.UUID(bytes=bytes(range(16))),
                                   "endpoints": [{"name": "CONTROLLER", "host": "h", "port": 9093}],
                                   "k_raft_version_feature": {"min_supported_version": 0,
                                                              "max_supported_version": 1}}]}),
}


@pytest.mark.parametrize("ctype", sorted(KAFKA_CONTROL))
def test_kraft_control_records_read_as_kafka_writes_them(ctype: int) -> None:
    raw, expect = KAFKA_CONTROL[ctype]
    key = struct.pack(">hh", 0, ctype)
    r = decode_key_value("metadata", key, raw, control=True, offset=4)
    assert r.record_type == ctype and r.value_type == CONTROL_TYPES[ctype] and r.value_version == 0
    assert r.key == {"version": 0, "type": ctype}
    got = normal(r.value)
    assert {k: got[k] for k in expect} == expect
    # and kbatch writes the same bytes
    assert encode_key_value("metadata", CONTROL_TYPES[ctype], None, expect, control=True) == (key, raw)
    # a value with a version prefix (the layout kbatch used to assume) is not what Kafka wrote
    with pytest.raises(InternalRecordError):
        decode_key_value("metadata", key, b"\x00\x00" + raw, control=True)


def test_control_record_keys_and_markers_as_kafka_reads_them() -> None:
    # ControlRecordType.parse: a newer key version is read as version 0 (its type at bytes 2-3) ...
    r = decode_key_value("metadata", struct.pack(">hh", 1, 4) + b"more", KAFKA_CONTROL[4][0], control=True)
    assert r.value_type == "SnapshotFooterRecord" and r.key == {"version": 1, "type": 4}
    # ... a negative one or fewer than 4 bytes is an error
    with pytest.raises(InternalRecordError, match="version -1"):
        decode_key_value("metadata", struct.pack(">hh", -1, 4), KAFKA_CONTROL[4][0], control=True)
    with pytest.raises(InternalRecordError, match="3 bytes"):
        decode_key_value("metadata", b"\x00\x00\x04", KAFKA_CONTROL[4][0], control=True)
    # EndTransactionMarker: int16 version, int32 coordinator epoch, later bytes ignored
    r = decode_key_value("group", struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7) + b"xx", control=True)
    assert (r.value_type, r.value_version, r.value) == ("EndTxnMarker", 0, {"coordinator_epoch": 7})
    assert encode_key_value("group", "ABORT", None, {"coordinator_epoch": 3}, control=True) == (
        struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3))
    # an unknown control type keeps its bytes when asked
    assert decode_key_value("metadata", struct.pack(">hh", 0, 9), b"", control=True, on_unknown="raw").unknown


def test_control_record_value_is_read_once_for_dump_and_tables() -> None:
    from kbatch.cli import _dump_internal as _dumpinternal

    raw = KAFKA_CONTROL[2][0]
    assert decode_control_value(2, raw) == (0, decode_key_value("metadata", b"\0\0\0\2", raw, control=True).value)
    assert str(_dumpinternal.control_json(2, raw, 0)) == (
        '{"version":0,"leaderId":7,"voters":[{"voterId":7}],"grantingVoters":[{"voterId":7}]}')


# Values laid out by hand from apache/kafka's newest stored definitions (flexible v0 bodies after the
# int16 value version): ShareSnapshotValue and ShareUpdateValue @0c9eef59 (KIP-1226: SnapshotEpoch int32, tagged
# DeliveryCompleteCount), ConsumerGroupMetadataValue @266ed846 (tagged MetadataHash, CreationTimeMs),
# ShareGroupMetadataValue @31f85dd0 (MetadataHash), ShareGroupStatePartitionMetadataValue @25002b6a
# (InitializingTopics, CreateTimestamp).
TID = uuid.UUID(int=9)
NEWEST_VALUES = [
    # ShareSnapshotValue @0c9eef59: SnapshotEpoch int32, CreateTimestamp, WriteTimestamp, tagged DeliveryCompleteCount
    ("share", "ShareSnapshotKey", struct.pack(">hh", 0, 1) + b"g" + TID.bytes + struct.pack(">i", 0),
     struct.pack(">hiiiqqq", 0, 70000, 2, 3, 10, 1000, 2000) + b"\x01" + b"\x00",   # no batches, no tags
     {"snapshot_epoch": 70000, "state_epoch": 2, "leader_epoch": 3, "start_offset": 10, "create_timestamp": 1000,
      "write_timestamp": 2000, "delivery_complete_count": -1, "state_batches": []}),
    ("share", "ShareUpdateKey", struct.pack(">hh", 1, 1) + b"g" + TID.bytes + struct.pack(">i", 0),
     struct.pack(">hiiq", 0, 70000, 3, 10) + b"\x02" + struct.pack(">qqbh", 10, 12, 2, 1) + b"\x00"
     + b"\x01" + b"\x00\x04" + struct.pack(">i", 5),   # tagged fields last: 1 field, tag 0, 4 bytes
     {"snapshot_epoch": 70000, "leader_epoch": 3, "start_offset": 10, "delivery_complete_count": 5,
      "state_batches": [{"first_offset": 10, "last_offset": 12, "delivery_state": 2, "delivery_count": 1}]}),
    ("group", "ConsumerGroupMetadataKey", struct.pack(">hh", 3, 1) + b"g",
     struct.pack(">hi", 0, 4) + b"\x02" + b"\x00\x08" + struct.pack(">q", 77) + b"\x01\x08" + struct.pack(">q", 1000),
     {"epoch": 4, "metadata_hash": 77, "creation_time_ms": 1000}),
    ("group", "ShareGroupMetadataKey", struct.pack(">hh", 11, 1) + b"g",
     struct.pack(">hiq", 0, 4, 77) + b"\x00", {"epoch": 4, "metadata_hash": 77}),
    ("group", "ShareGroupStatePartitionMetadataKey", struct.pack(">hh", 15, 1) + b"g",
     struct.pack(">h", 0) + b"\x02" + TID.bytes + b"\x02t" + b"\x02" + struct.pack(">i", 0) + struct.pack(">q", 5)
     + b"\x00" + b"\x01" + b"\x01" + b"\x00",
     {"initializing_topics": [{"topic_id": TID, "topic_name": "t", "partitions": [0], "create_timestamp": 5}],
      "initialized_topics": [], "deleting_topics": []}),
]


@pytest.mark.parametrize("case", NEWEST_VALUES, ids=[c[1] for c in NEWEST_VALUES])
def test_newest_kafka_layouts_decode(case: tuple[str, str, bytes, bytes, dict[str, Any]]) -> None:
    fam, key_type, key, value, expect = case
    r = decode_key_value(fam, key, value)
    assert r.key_type == key_type and r.value_version == 0
    got = normal(r.value)
    assert {k: got[k] for k in expect} == expect
