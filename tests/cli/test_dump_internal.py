"""``kbatch dump``'s internal-topic decoders against the text Kafka's DumpLogSegments prints.

The expected strings are the ones Apache Kafka's own DumpLogSegmentsTest asserts for the same
records (tools/src/test/java/org/apache/kafka/tools/DumpLogSegmentsTest.java), so a difference
in field names, order, JSON layout or tagged-field handling fails here.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_LOGS
from support.dumprun import dump

import kbatch
from kbatch.internal import default_registry
from kbatch.protocol._json import java_double

SCHEMA = default_registry().schema
TOPIC_ID = uuid.UUID(bytes=base64.urlsafe_b64decode("Uj5wn_FqTXirEASvVZRY1w=="))  # Kafka's test topic id


def coordinator_record(key_name: str, record_type: int, key: dict[str, Any],
                       value_name: str | None = None, version: int = 0,
                       value: dict[str, Any] | None = None) -> tuple[bytes, bytes | None]:
    """A coordinator record as Kafka writes it: int16 record type + key v0, int16 version + value."""
    k = struct.pack(">h", record_type) + SCHEMA[key_name].encode(key, version=0)
    if value_name is None or value is None:
        return k, None
    return k, struct.pack(">h", version) + SCHEMA[value_name].encode(value, version=version)


def metadata_value(name: str, value: dict[str, Any], version: int = 0) -> bytes:
    """A metadata-framed value: uvarint frame version 1, apiKey, version (all < 128 here), body."""
    api_key = SCHEMA[name].spec.api_key
    assert api_key is not None and api_key < 128
    return bytes([1, api_key, version]) + SCHEMA[name].encode(value, version=version)


def segment(tmp_path: Path, records: list[tuple[bytes | None, bytes | None]]) -> Path:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(kbatch.encode([v for _, v in records], keys=[k for k, _ in records],
                                  timestamps=[0] * len(records)))
    return log


def key_and_payload(line: str) -> tuple[str | None, str | None]:
    """What a record line carries after ``key: `` and ``payload: `` (``--skip-record-metadata``)."""
    assert line.startswith("| ")
    body = line[2:]
    key = payload = None
    if body.startswith("key: "):
        key, _, rest = body[5:].partition(" payload: ")
        payload = rest or None
    elif body.startswith("payload: "):
        payload = body[9:]
    return key, payload


def decoded(tmp_path: Path, option: str, records: list[tuple[bytes | None, bytes | None]]
            ) -> tuple[int, list[tuple[str | None, str | None]], list[str]]:
    rc, out, err = dump("--files", str(segment(tmp_path, records)), option, "--skip-record-metadata")
    return rc, [key_and_payload(line) for line in out if line.startswith("| ")], err


def test_offsets_decoder_prints_what_kafka_prints(tmp_path: Path) -> None:
    subscription = struct.pack(">h", 3) + SCHEMA["ConsumerProtocolSubscription"].encode(
        {"topics": ["foo"], "user_data": None, "owned_partitions": [{"topic": "foo", "partitions": [0]}],
         "generation_id": 0, "rack_id": "rack"}, version=3)
    assignment = struct.pack(">h", 3) + SCHEMA["ConsumerProtocolAssignment"].encode(
        {"assigned_partitions": [{"topic": "foo", "partitions": [0]}], "user_data": None}, version=3)

    def group(sub: bytes, assign: bytes) -> tuple[bytes, bytes | None]:
        return coordinator_record("GroupMetadataKey", 2, {"group": "group"}, "GroupMetadataValue", 4, {
            "protocol_type": "consumer", "generation": 10, "protocol": "range", "leader": "member",
            "current_state_timestamp": -1, "members": [{
                "member_id": "member", "group_instance_id": "instance", "client_id": "client",
                "client_host": "host", "rebalance_timeout": 1000, "session_timeout": 100,
                "subscription": sub, "assignment": assign}]})

    records = [
        coordinator_record("ConsumerGroupMetadataKey", 3, {"group_id": "group"}, "ConsumerGroupMetadataValue", 0,
                           {"epoch": 10}),
        group(subscription, assignment),
        group(b"Subscription", b"Assignment"),                       # not the embedded protocol: kept as bytes
        coordinator_record("ConsumerGroupMetadataKey", 3, {"group_id": "group"}),       # a tombstone
        (struct.pack(">h", 32767), b""),                              # a record type nobody knows
        (coordinator_record("ConsumerGroupMetadataKey", 3, {"group_id": "group"})[0],   # a value that does not
         struct.pack(">h", 0) + SCHEMA["ConsumerGroupMemberMetadataValue"].encode({}, version=0)),  # decode
    ]
    rc, got, err = decoded(tmp_path, "--offsets-decoder", records)
    member = ('"members":[{"memberId":"member","groupInstanceId":"instance","clientId":"client",'
              '"clientHost":"host","rebalanceTimeout":1000,"sessionTimeout":100,')
    head = ('{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
            '"leader":"member","currentStateTimestamp":-1,')
    assert got[0] == ('{"type":"3","data":{"groupId":"group"}}', '{"version":"0","data":{"epoch":10}}')
    assert got[1] == ('{"type":"2","data":{"group":"group"}}', head + member + (
        '"subscription":{"topics":["foo"],"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"userData":null}}]}}'))
    assert got[2] == ('{"type":"2","data":{"group":"group"}}', head + member + (
        '"subscription":"U3Vic2NyaXB0aW9u","assignment":"QXNzaWdubWVudA=="}]}}'))
    assert got[3] == ('{"type":"3","data":{"groupId":"group"}}', "<DELETE>")
    assert got[4] == ("Unknown record type 32767 at offset 4, skipping.", None)
    assert got[5][0] is not None and got[5][0].startswith("Error at offset 5, skipping. ") and got[5][1] is None
    # Kafka exits 0 there; kbatch also says on stderr that records were skipped, and exits 1
    assert rc == 1 and len(err) == 1 and "2 record(s) could not be decoded" in err[0] and "first at offset 4" in err[0]


def test_offsets_decoder_json_lines(tmp_path: Path) -> None:
    log = segment(tmp_path, [coordinator_record("OffsetCommitKey", 1, {"group": "g", "topic": "t", "partition": 3},
                                                "OffsetCommitValue", 3,
                                                {"offset": 42, "leader_epoch": -1, "metadata": "",
                                                 "commit_timestamp": 1000})])
    rc, out, _ = dump("--files", str(log), "--offsets-decoder", "--json")
    row = json.loads(out[-1])
    assert rc == 0 and row["key_encoding"] == "json" and row["payload_encoding"] == "json"
    assert row["key"] == {"type": "1", "data": {"group": "g", "topic": "t", "partition": 3}}
    assert row["payload"] == {"version": "3", "data": {"offset": 42, "leaderEpoch": -1, "metadata": "",
                                                       "commitTimestamp": 1000}}


def test_a_coordinator_record_without_key_is_reported(tmp_path: Path) -> None:
    rc, out, err = dump("--files", str(segment(tmp_path, [(None, b"x")])), "--transaction-log-decoder")
    assert rc == 1 and out[-1] == "| offset: 0 CreateTime: 0 keySize: -1 valueSize: 1 sequence: -1 headerKeys: []"
    assert err == [(f"kbatch dump: {tmp_path / '00000000000000000000.log'}: 1 record(s) could not be decoded, the "
                   "first at offset 0: Failed to decode message at offset 0 using the specified decoder (message had "
                   "a missing key)")]


def test_transaction_log_decoder(tmp_path: Path) -> None:
    key = {"transactional_id": "txnId"}
    records = [
        coordinator_record("TransactionLogKey", 0, key, "TransactionLogValue", 0, {"producer_id": 123}),
        coordinator_record("TransactionLogKey", 0, key),
        coordinator_record("TransactionLogKey", 0, key, "TransactionLogValue", 1, {
            "client_transaction_version": 0, "next_producer_id": 10, "previous_producer_id": 11,
            "producer_epoch": 2, "producer_id": 12, "transaction_last_update_timestamp_ms": 123,
            "transaction_partitions": [{"topic": "topic1", "partition_ids": [0, 1, 2]},
                                       {"topic": "topic2", "partition_ids": [3, 4, 5]}],
            "transaction_start_timestamp_ms": 13, "transaction_status": 0, "transaction_timeout_ms": 14}),
    ]
    rc, got, err = decoded(tmp_path, "--transaction-log-decoder", records)
    txn = '{"type":"0","data":{"transactionalId":"txnId"}}'
    assert rc == 0 and err == []
    assert got == [
        (txn, ('{"version":"0","data":{"producerId":123,"producerEpoch":0,"transactionTimeoutMs":0,'
              '"transactionStatus":0,"transactionPartitions":[],"transactionLastUpdateTimestampMs":0,'
              '"transactionStartTimestampMs":0}}')),
        (txn, "<DELETE>"),
        (txn, ('{"version":"1","data":{"producerId":12,"previousProducerId":11,"nextProducerId":10,'
              '"producerEpoch":2,"transactionTimeoutMs":14,"transactionStatus":0,'
              '"transactionPartitions":[{"topic":"topic1","partitionIds":[0,1,2]},'
              '{"topic":"topic2","partitionIds":[3,4,5]}],"transactionLastUpdateTimestampMs":123,'
              '"transactionStartTimestampMs":13}}')),
    ]


def test_share_group_state_decoder(tmp_path: Path) -> None:
    key = {"group_id": "gs1", "topic_id": TOPIC_ID, "partition": 0}
    batch = {"first_offset": 0, "last_offset": 4, "delivery_state": 2, "delivery_count": 1}
    records = [
        coordinator_record("ShareUpdateKey", 1, key, "ShareUpdateValue", 0,
                           {"snapshot_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": [batch]}),
        coordinator_record("ShareSnapshotKey", 0, key),
    ]
    rc, got, _ = decoded(tmp_path, "--share-group-state-decoder", records)
    assert rc == 0 and got == [
        ('{"type":"1","data":{"groupId":"gs1","topicId":"Uj5wn_FqTXirEASvVZRY1w","partition":0}}',
         ('{"version":"0","data":{"snapshotEpoch":0,"leaderEpoch":0,"startOffset":0,'
         '"stateBatches":[{"firstOffset":0,"lastOffset":4,"deliveryState":2,"deliveryCount":1}]}}')),
        ('{"type":"0","data":{"groupId":"gs1","topicId":"Uj5wn_FqTXirEASvVZRY1w","partition":0}}', "<DELETE>"),
    ]


def test_cluster_metadata_decoder(tmp_path: Path) -> None:
    records = [
        (None, metadata_value("TopicRecord", {"name": "test-topic", "topic_id": TOPIC_ID})),
        (None, bytes([0x90, 0x4E, 0x90, 0x4E])),   # Kafka's bogus record: uvarints 10000, 10000
        (None, metadata_value("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "leader": 1,
                                                        "isr": [0, 1, 2]})),
        (None, metadata_value("ClientQuotaRecord", {"entity": [{"entity_type": "user", "entity_name": None}],
                                                    "key": "producer_byte_rate", "value": 1e7, "remove": False})),
    ]
    rc, got, err = decoded(tmp_path, "--cluster-metadata-decoder", records)
    assert got[0] == (None, ('{"type":"TOPIC_RECORD","version":0,"data":{"name":"test-topic",'
                            '"topicId":"Uj5wn_FqTXirEASvVZRY1w"}}'))
    assert got[1] == (None, ("Error at 1, skipping. Could not deserialize metadata record due to unknown frame "
                            "version 10000(only frame version 1 is supported)"))
    # tagged fields at their defaults are left out, as Kafka's JSON converters do
    assert got[2] == (None, ('{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"partitionId":0,'
                            '"topicId":"Uj5wn_FqTXirEASvVZRY1w","isr":[0,1,2],"leader":1}}'))
    assert got[3] == (None, ('{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"user",'
                            '"entityName":null}],"key":"producer_byte_rate","value":1.0E7,"remove":false}}'))
    assert rc == 1 and len(err) == 1


def test_offsets_decoder_knows_streams_group_records(tmp_path: Path) -> None:
    # StreamsGroupMetadataKey: int16 record type 17, GroupId; value: int16 version 0, Epoch, MetadataHash,
    # compact AssignmentConfigs (empty: 0x01), tagged fields (none: 0x00)
    key = struct.pack(">hh", 17, 3) + b"app"
    value = struct.pack(">hiq", 0, 4, 7) + b"\x01\x00"
    rc, got, err = decoded(tmp_path, "--offsets-decoder", [(key, value)])
    assert (rc, err) == (0, [])
    assert got == [('{"type":"17","data":{"groupId":"app"}}',
                    '{"version":"0","data":{"epoch":4,"metadataHash":7,"assignmentConfigs":[]}}')]


def test_cluster_metadata_decoder_knows_clear_elr_record(tmp_path: Path) -> None:
    # ClearElrRecord (apiKey 28, Kafka 4.0's metadata/.../ClearElrRecord.json): one string, TopicName
    raw = bytes([1, 28, 0]) + b"\x02a" + b"\x00"     # frame 1, type 28, version 0, compact "a", no tags
    rc, got, err = decoded(tmp_path, "--cluster-metadata-decoder", [(None, raw)])
    assert (rc, err) == (0, [])
    assert got == [(None, '{"type":"CLEAR_ELR_RECORD","version":0,"data":{"topicName":"a"}}')]


def test_remote_log_metadata_decoder(tmp_path: Path) -> None:
    segment_id = uuid.UUID(int=(7 << 64) | 9)
    tip = {"name": "foo", "id": TOPIC_ID, "partition": 0}
    records = [
        (None, metadata_value("RemotePartitionDeleteMetadataRecord", {
            "topic_id_partition": tip, "broker_id": 0, "event_timestamp_ms": 0, "remote_partition_delete_state": 0})),
        (None, metadata_value("RemoteLogSegmentMetadataUpdateRecord", {
            "remote_log_segment_id": {"topic_id_partition": tip, "id": segment_id}, "broker_id": 0,
            "event_timestamp_ms": 0, "custom_metadata": b"\x00\x01\x02\x03", "remote_log_segment_state": 1})),
        (None, metadata_value("RemoteLogSegmentMetadataRecord", {
            "remote_log_segment_id": {"topic_id_partition": tip, "id": segment_id}, "start_offset": 0,
            "end_offset": 99, "broker_id": 2, "max_timestamp_ms": 5, "event_timestamp_ms": 6,
            "segment_leader_epochs": [{"leader_epoch": 3, "offset": 50}, {"leader_epoch": 1, "offset": 0}],
            "segment_size_in_bytes": 1024, "custom_metadata": None, "remote_log_segment_state": 0})),
        (None, b"corrupted"),
    ]
    rc, got, _ = decoded(tmp_path, "--remote-log-metadata-decoder", records)
    sid = base64.urlsafe_b64encode(segment_id.bytes).rstrip(b"=").decode()
    where = "Uj5wn_FqTXirEASvVZRY1w:foo-0"
    assert got[0] == (None, (f"RemotePartitionDeleteMetadata{{topicPartition={where}, state=DELETE_PARTITION_MARKED, "
                            "eventTimestampMs=0, brokerId=0}"))
    assert got[1] == (None, (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId=RemoteLogSegmentId{{"
                            f"topicIdPartition={where}, id={sid}}}, "
                            "customMetadata=Optional[CustomMetadata{4 bytes}], state=COPY_SEGMENT_FINISHED, "
                            "eventTimestampMs=0, brokerId=0}"))
    assert got[2] == (None, (f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
                            f"{where}, id={sid}}}, startOffset=0, endOffset=99, brokerId=2, maxTimestampMs=5, "
                            "eventTimestampMs=6, segmentLeaderEpochs={1=0, 3=50}, segmentSizeInBytes=1024, "
                            "customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED}"))
    assert got[3][1] is not None and got[3][1].startswith("Error at offset 3, skipping. Could not deserialize "
                                                          "metadata record")
    assert rc == 1


def test_java_double_matches_java() -> None:
    # Double.toString's switch to scientific notation below 1e-3 and from 1e7
    assert [java_double(x) for x in (9999999.0, 1e7, 0.001, 0.00099, 123.0, 1e21, 5e-324)] == [
        "9999999.0", "1.0E7", "0.001", "9.9E-4", "123.0", "1.0E21", "4.9E-324"]


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"no real broker logs at {REAL_LOGS}")
def test_real_consumer_offsets_decode_completely() -> None:
    parts = sorted(REAL_LOGS.glob("*/__consumer_offsets-*"))
    assert parts
    rc, out, err = dump("--files", ",".join(map(str, parts)), "--offsets-decoder", "--json")
    rows = [json.loads(line) for line in out]
    records = [r for r in rows if r["type"] == "record"]
    assert rc == 0 and err == [] and records
    assert all(r["key_encoding"] == "json" and "error" not in r for r in records)
    assert all(r["payload_encoding"] == "json" or r["payload"] == "<DELETE>" for r in records)
    types = {r["key"]["type"] for r in records}
    assert {"1", "2"} <= types   # offset commits and group metadata
