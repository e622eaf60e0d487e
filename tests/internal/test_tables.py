"""kbatch.internal's tables against a plain per-record replay of the same logs, and the real roots."""

from __future__ import annotations

import random
import struct
import uuid
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
from conftest import REAL_LOGS

import kbatch
from kbatch.errors import CorruptRecordError
from kbatch.internal import (
    InternalRecordError,
    cluster_metadata,
    consumer_groups,
    consumer_offsets,
    default_registry,
    encode_key_value,
    iter_decoded,
    producer_snapshots,
    transactions,
)
from kbatch.log._producer_snapshot import read_snapshot, write_snapshot

pa = pytest.importorskip("pyarrow")
SCHEMA = default_registry().schema


def _commit(rng: random.Random, version: int) -> dict[str, Any]:
    v: dict[str, Any] = {"offset": rng.randrange(1 << 40), "metadata": rng.choice(["", "m", "métadonnée", "x" * 200]),
                         "commit_timestamp": rng.randrange(1 << 41)}
    if version >= 3:
        v["leader_epoch"] = rng.randrange(-1, 50)
    if version == 1:
        v["expire_timestamp"] = rng.randrange(1 << 41)
    return v


def _offsets_log(root: Path, seed: int, partition: int = 0) -> None:
    """Offset commits of every value version, tombstones, other record types, aborted transactions."""
    rng = random.Random(seed)
    keys = [{"group": f"g{rng.randrange(6)}é", "topic": f"t{rng.randrange(4)}", "partition": rng.randrange(3)}
            for _ in range(30)]
    with kbatch.LogWriter(root, "__consumer_offsets", partition) as w:
        for _ in range(40):
            n = rng.randrange(1, 20)
            ks, vs = [], []
            for _ in range(n):
                r = rng.random()
                if r < 0.1:
                    k, v = encode_key_value("group", "GroupMetadataKey", {"group": "g0é"}, None)
                else:
                    version = rng.choice([0, 1, 2, 3, 3, 3, 4, 4])
                    value = None if r < 0.2 else _commit(rng, version)
                    if value is not None and version == 4 and rng.random() < 0.3:
                        value["_unknown_tagged_fields"] = {7: b"x"}  # the general decoder's path
                    name = "LegacyOffsetCommitKey" if rng.random() < 0.1 else "OffsetCommitKey"
                    k, v = encode_key_value("group", name, rng.choice(keys), value, version=version)
                ks.append(k)
                vs.append(v)
            kind = rng.random()
            if kind < 0.15:  # a transaction, committed or aborted
                pid = rng.randrange(1000)
                w.append(kbatch.encode(vs, keys=ks, producer_id=pid, producer_epoch=0, transactional=True),
                         assign_offsets=True)
                w.append(kbatch.encode_control("abort" if kind < 0.08 else "commit", pid, 0), assign_offsets=True)
            else:
                w.append(kbatch.encode(vs, keys=ks, compression=rng.choice(["none", "none", "gzip"])),
                         assign_offsets=True)


def _reference(root: Path) -> dict[tuple[str, str, int], tuple[int, int, str]]:
    latest: dict[tuple[str, str, int], Any] = {}
    for part in sorted(root.glob("__consumer_offsets-*")):
        table = kbatch.open_log(part).read(isolation_level="read_committed")
        for e in iter_decoded(table, "group"):
            r = e.record
            if r.record_type > 1:
                continue
            assert r.key is not None
            k = (r.key["group"], r.key["topic"], r.key["partition"])
            latest.pop(k, None)
            if r.value is not None:
                latest[k] = (r.value["offset"], r.value.get("leader_epoch", -1), r.value["metadata"])
    return latest


@pytest.mark.parametrize("seed", range(6))
def test_consumer_offsets_matches_a_per_record_replay(tmp_path: Path, seed: int) -> None:
    _offsets_log(tmp_path, seed, 0)
    _offsets_log(tmp_path, seed + 100, 3)
    t = consumer_offsets(tmp_path)
    got = {(r["group"], r["topic"], r["partition"]): (r["offset"], r["leader_epoch"], r["metadata"])
           for r in t.to_pylist()}
    assert got == _reference(tmp_path)
    assert t.num_rows == len(got)  # one row per key
    assert t.schema.field("offset").type == pa.int64() and t.schema.field("partition").type == pa.int32()
    assert t.schema.field("commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    hist = consumer_offsets(tmp_path, history=True)
    assert hist.num_rows >= t.num_rows and hist["tombstone"].to_pylist().count(True) > 0
    # one partition directory, and a RecordTable, give that partition's part
    one = consumer_offsets(tmp_path / "__consumer_offsets-3")
    assert set(one["coordinator_partition"].to_pylist()) <= {3}


def test_consumer_offsets_names_the_offset_of_a_bad_record(tmp_path: Path) -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 0},
                            {"offset": 1, "metadata": "", "commit_timestamp": 0}, version=3)
    assert k is not None and v is not None
    with kbatch.LogWriter(tmp_path, "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([v, v[:-3], b"\x00\x63"], keys=[k, k, b"\x00\x63\x00"]))
    with pytest.raises(InternalRecordError, match="offset 1"):
        consumer_offsets(tmp_path)
    bad_utf8 = k.replace(b"\x00\x01g", b"\x00\x01\xff")
    with kbatch.LogWriter(tmp_path, "__consumer_offsets", 1) as w:
        w.append(kbatch.encode([v], keys=[bad_utf8]))
    with pytest.raises(InternalRecordError, match=r"group is not valid UTF-8.*offset 0, key byte 4"):
        consumer_offsets(tmp_path / "__consumer_offsets-1")


def test_unknown_records_are_left_out_only_when_asked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 0},
                            {"offset": 1, "metadata": "", "commit_timestamp": 0}, version=3)
    with kbatch.LogWriter(tmp_path, "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([v, b"\x00\x00"], keys=[k, b"\x00\x63"]))
    with pytest.raises(InternalRecordError, match=r"record type 99.*offset 1"):
        consumer_offsets(tmp_path)
    assert consumer_offsets(tmp_path, on_unknown="raw")["offset"].to_pylist() == [1]
    assert "1 records of an unknown type or version left out" in caplog.text  # told, not silent


def test_consumer_groups_classic_and_new_protocol(tmp_path: Path) -> None:
    sub = b"\x00\x01" + SCHEMA["ConsumerProtocolSubscription"].encode(
        {"topics": ["a", "b"], "owned_partitions": []}, 1)
    asg = b"\x00\x00" + SCHEMA["ConsumerProtocolAssignment"].encode(
        {"assigned_partitions": [{"topic": "a", "partitions": [0, 2]}]}, 0)
    member = {"member_id": "m1", "group_instance_id": None, "client_id": "c", "client_host": "h",
              "rebalance_timeout": 1, "session_timeout": 2, "subscription": sub, "assignment": asg}
    gm = {"protocol_type": "consumer", "generation": 3, "protocol": "range", "leader": "m1",
          "current_state_timestamp": 1000, "members": [member]}
    tid = uuid.UUID(int=5)
    recs = [
        encode_key_value("group", "GroupMetadataKey", {"group": "classic"}, gm, version=3),
        encode_key_value("group", "GroupMetadataKey", {"group": "gone"}, gm, version=3),
        encode_key_value("group", "GroupMetadataKey", {"group": "gone"}, None),
        encode_key_value("group", "ConsumerGroupMetadataKey", {"group_id": "new"}, {"epoch": 9}),
        encode_key_value("group", "ConsumerGroupMemberMetadataKey", {"group_id": "new", "member_id": "x"},
                         {"client_id": "cx", "client_host": "hx", "subscribed_topic_names": ["a"],
                          "rebalance_timeout_ms": 5}),
        encode_key_value("group", "ConsumerGroupCurrentMemberAssignmentKey", {"group_id": "new", "member_id": "x"},
                         {"member_epoch": 9, "previous_member_epoch": 8, "state": 0,
                          "assigned_partitions": [{"topic_id": tid, "partitions": [1]}],
                          "partitions_pending_revocation": []}),
        encode_key_value("group", "StreamsGroupMetadataKey", {"group_id": "app"},
                         {"epoch": 4, "metadata_hash": 7, "assignment_configs": []}),
        encode_key_value("group", "StreamsGroupMemberMetadataKey", {"group_id": "app", "member_id": "s"},
                         {"client_id": "cs", "client_host": "hs", "topology_epoch": 1, "process_id": "p",
                          "client_tags": []}),
        encode_key_value("group", "StreamsGroupCurrentMemberAssignmentKey", {"group_id": "app", "member_id": "s"},
                         {"member_epoch": 4, "previous_member_epoch": 3, "state": 0,
                          "active_tasks": [{"subtopology_id": "0", "partitions": [0]}]}),
    ]
    with kbatch.LogWriter(tmp_path, "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([v for _, v in recs], keys=[k for k, _ in recs]))
    rows = {r["group"]: r for r in consumer_groups(tmp_path).to_pylist()}
    assert sorted(rows) == ["app", "classic", "new"]
    c = rows["classic"]
    assert (c["type"], c["protocol"], c["generation"], c["leader"]) == ("classic", "range", 3, "m1")
    m = c["members"][0]
    assert m["subscribed_topics"] == ["a", "b"]
    assert m["assignment"] == [{"topic": "a", "topic_id": None, "partitions": [0, 2]}]
    assert m["subscription_bytes"] == sub and m["assignment_bytes"] == asg
    n = rows["new"]
    assert (n["type"], n["generation"]) == ("consumer", 9)
    assert n["members"][0]["client_id"] == "cx" and n["members"][0]["member_epoch"] == 9
    assert n["members"][0]["assignment"] == [{"topic": None, "topic_id": str(tid), "partitions": [1]}]
    a = rows["app"]
    assert (a["type"], a["generation"]) == ("streams", 4)
    assert [(x["member_id"], x["client_id"], x["member_epoch"]) for x in a["members"]] == [("s", "cs", 4)]
    hist = consumer_groups(tmp_path, history=True)
    assert hist.num_rows == 9 and hist["tombstone"].to_pylist() == [False, False, True] + [False] * 6


def test_transactions(tmp_path: Path) -> None:
    def value(status: int, pid: int) -> dict[str, Any]:
        return {"producer_id": pid, "producer_epoch": 1, "transaction_timeout_ms": 100,
                "transaction_status": status, "transaction_partitions": [{"topic": "t", "partition_ids": [0, 1]}],
                "transaction_last_update_timestamp_ms": 7, "transaction_start_timestamp_ms": 6}
    recs = [encode_key_value("transaction", "TransactionLogKey", {"transactional_id": "a"}, value(1, 5), version=0),
            encode_key_value("transaction", "TransactionLogKey", {"transactional_id": "a"},
                             {**value(4, 5), "previous_producer_id": 3, "client_transaction_version": 2}, version=1),
            encode_key_value("transaction", "TransactionLogKey", {"transactional_id": "b"}, value(0, 9), version=0),
            encode_key_value("transaction", "TransactionLogKey", {"transactional_id": "b"}, None)]
    with kbatch.LogWriter(tmp_path, "__transaction_state", 2) as w:
        w.append(kbatch.encode([v for _, v in recs], keys=[k for k, _ in recs]))
    rows = transactions(tmp_path).to_pylist()
    assert len(rows) == 1
    r = rows[0]
    assert (r["transactional_id"], r["producer_id"], r["previous_producer_id"], r["state"]) == (
        "a", 5, 3, "CompleteCommit")
    assert r["client_transaction_version"] == 2 and r["coordinator_partition"] == 2
    assert r["partitions"] == [{"topic": "t", "partitions": [0, 1]}]
    assert transactions(tmp_path, history=True)["tombstone"].to_pylist() == [False, False, False, True]


def _md(record_type: str, version: int = 0, **fields: Any) -> bytes:
    _, v = encode_key_value("metadata", record_type, None, fields, version=version)
    assert v is not None
    return v


def test_cluster_metadata_from_a_checkpoint_and_the_log(tmp_path: Path) -> None:
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    snapshot = [_md("TopicRecord", name="a", topic_id=t1),
                _md("PartitionRecord", partition_id=0, topic_id=t1, replicas=[1], isr=[1], leader=1,
                    leader_epoch=4, partition_epoch=2),
                _md("RegisterBrokerRecord", 1, broker_id=1, broker_epoch=10, fenced=True, end_points=[], features=[]),
                _md("FeatureLevelRecord", name="metadata.version", feature_level=20)]
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    (part / "00000000000000000010-0000000001.checkpoint").write_bytes(kbatch.encode(snapshot))
    log = [_md("TopicRecord", name="b", topic_id=t2),
           _md("PartitionRecord", partition_id=0, topic_id=t2, replicas=[1], isr=[1], leader=1),
           _md("UnfenceBrokerRecord", id=1, epoch=10),
           _md("ConfigRecord", resource_type=2, resource_name="a", name="retention.ms", value="1"),
           _md("BeginTransactionRecord", name="x"),
           _md("TopicRecord", name="aborted", topic_id=uuid.UUID(int=3)),
           _md("AbortTransactionRecord", reason="r"),
           _md("PartitionChangeRecord", partition_id=0, topic_id=t1, leader=-1),
           _md("RemoveTopicRecord", topic_id=t2)]
    with kbatch.LogWriter(tmp_path, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode(log, base_offset=10))
    for f in part.glob("*.snapshot"):
        f.unlink()
    img = cluster_metadata(tmp_path)
    assert img["topics"]["name"].to_pylist() == ["a"]
    p = img["partitions"].to_pylist()
    assert [(x["topic"], x["leader"], x["leader_epoch"], x["partition_epoch"], x["isr"]) for x in p] == [
        ("a", -1, 5, 3, [1])]
    assert img["brokers"]["fenced"].to_pylist() == [False]
    assert img["configs"].select(["resource_name", "name", "value"]).to_pylist() == [
        {"resource_name": "a", "name": "retention.ms", "value": "1"}]
    assert img["features"]["feature_level"].to_pylist() == [20]
    at = cluster_metadata(tmp_path, offset=11)
    assert sorted(at["topics"]["name"].to_pylist()) == ["a", "b"] and at["brokers"]["fenced"].to_pylist() == [True]
    before = cluster_metadata(tmp_path, offset=9)  # the checkpoint alone
    assert before["topics"]["name"].to_pylist() == ["a"] and before["partitions"]["leader"].to_pylist() == [1]
    hist = cluster_metadata(tmp_path, history=True)
    assert hist["TopicRecord"]["offset"].to_pylist() == [10, 15]
    (part / "00000000000000000010-0000000001.checkpoint").unlink()
    with pytest.raises(InternalRecordError, match="starts at offset 10"):
        cluster_metadata(tmp_path)


def test_clear_elr_record_empties_the_elr_of_its_topic_or_of_every_topic(tmp_path: Path) -> None:
    # TopicsDelta.replay(ClearElrRecord): a named topic's partitions, or every topic's for an empty name;
    # each partition that has an ELR or last known ELR changes as a PartitionChangeRecord setting both to []
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    elr = {"replicas": [1, 2], "isr": [1], "leader": 1, "partition_epoch": 0,
           "eligible_leader_replicas": [2], "last_known_elr": [2]}
    log = [_md("TopicRecord", name="a", topic_id=t1), _md("PartitionRecord", 2, partition_id=0, topic_id=t1, **elr),
           _md("TopicRecord", name="b", topic_id=t2), _md("PartitionRecord", 2, partition_id=0, topic_id=t2, **elr),
           _md("ClearElrRecord", topic_name="a"),
           _md("ClearElrRecord", topic_name="")]
    with kbatch.LogWriter(tmp_path, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode(log))

    def parts(offset: int) -> list[tuple[str, list[int], list[int], int]]:
        rows = cluster_metadata(tmp_path, offset=offset)["partitions"].to_pylist()
        return sorted((r["topic"], r["eligible_leader_replicas"], r["last_known_elr"], r["partition_epoch"])
                      for r in rows)

    assert parts(4) == [("a", [], [], 1), ("b", [2], [2], 0)]
    assert parts(5) == [("a", [], [], 1), ("b", [], [], 1)]
    with kbatch.LogWriter(tmp_path / "bad", "__cluster_metadata", 0) as w:
        w.append(kbatch.encode([_md("ClearElrRecord", topic_name="nope")]))
    with pytest.raises(InternalRecordError, match=r"ClearElrRecord for unknown topic 'nope' \(offset 0"):
        cluster_metadata(tmp_path / "bad")


def test_producer_snapshots_round_trip_through_logwriter(tmp_path: Path) -> None:
    with kbatch.LogWriter(tmp_path, "t", 0, segment_bytes=400) as w:
        w.append(kbatch.encode([b"a" * 100, b"b"], producer_id=7, producer_epoch=2, base_sequence=10,
                               transactional=True, timestamps=[5, 6]))
        w.append(kbatch.encode_control("commit", 7, 2, base_offset=2, coordinator_epoch=4, timestamp=9))
        w.append(kbatch.encode([b"c" * 300], producer_id=8, producer_epoch=0, base_sequence=(1 << 31) - 1,
                               base_offset=3, timestamps=[11]))
        w.append(kbatch.encode([b"d"], producer_id=7, producer_epoch=3, base_sequence=0, transactional=True,
                               base_offset=4, timestamps=[12]))
    files = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert len(files) >= 2 and files[-1] == "00000000000000000005.snapshot"
    rows = {r["producer_id"]: r for r in producer_snapshots(tmp_path).to_pylist()}
    assert (rows[7]["producer_epoch"], rows[7]["last_sequence"], rows[7]["last_offset"],
            rows[7]["current_txn_first_offset"], rows[7]["coordinator_epoch"]) == (3, 0, 4, 4, 4)
    assert (rows[8]["last_sequence"], rows[8]["last_offset"], rows[8]["current_txn_first_offset"]) == (
        (1 << 31) - 1, 3, None)
    assert producer_snapshots(tmp_path, history=True).num_rows > len(rows)
    data = (tmp_path / "t-0" / files[-1]).read_bytes()
    assert write_snapshot(read_snapshot(data)) == data
    with pytest.raises(CorruptRecordError, match="crc32c"):
        read_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptRecordError, match="do not fit"):
        read_snapshot(data[:-1])


def test_producer_snapshot_with_bytes_after_its_entries_reads_as_kafka_reads_it() -> None:
    # ProducerStateManager.readSnapshot parses the ProducerSnapshot message (version int16, crc uint32,
    # int32 count, count entries of 46 bytes) and checks Crc32C over buffer[6:] up to the file's end, so
    # bytes after the entries are accepted when the CRC covers them.
    entry = struct.pack(">qhiqiqiq", 7, 2, 14, 41, 4, 1700, 3, 30)
    assert len(entry) == 46
    body = struct.pack(">i", 1) + entry + b"later"
    data = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    e = read_snapshot(data)
    assert e.tolist() == [(7, 2, 14, 41, 4, 1700, 3, 30)]
    # the CRC still covers them
    with pytest.raises(CorruptRecordError, match="crc32c"):
        read_snapshot(data[:-1] + b"X")


REAL = sorted(p for p in REAL_LOGS.glob("*/__consumer_offsets-*") if p.is_dir()) if REAL_LOGS.is_dir() else []


@pytest.mark.skipif(not REAL, reason=f"no real broker logs at {REAL_LOGS}")
@pytest.mark.parametrize("part", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_consumer_offsets_decode_completely(part: Path) -> None:
    table = kbatch.open_log(part).read()
    decoded = list(iter_decoded(table, "group"))
    assert len(decoded) == len(table) > 0
    assert not any(e.record.unknown for e in decoded)
    hist = consumer_offsets(part, history=True)
    commits = sum(e.record.record_type <= 1 for e in decoded)
    assert hist.num_rows == commits
    consumer_groups(part)


REAL_SNAPSHOTS = sorted(REAL_LOGS.glob("*/*/*.snapshot")) if REAL_LOGS.is_dir() else []


@pytest.mark.skipif(not REAL_SNAPSHOTS, reason=f"no real producer snapshots at {REAL_LOGS}")
def test_real_producer_snapshots_read_and_write_back_identically() -> None:
    for path in REAL_SNAPSHOTS:
        data = path.read_bytes()
        entries = read_snapshot(data)
        assert write_snapshot(entries) == data
        assert isinstance(entries, np.ndarray)


def test_hash_collisions_fall_back_to_exact_grouping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key hashing alike must still give one row per real key (the byte-for-byte check)."""
    from kbatch.internal import _offsets

    real_scan = _offsets._offsetkernel.scan

    def colliding_scan(*args: Any) -> None:
        real_scan(*args)
        args[6][:] = 42  # khash

    _offsets_log(tmp_path, 7, 0)
    want = consumer_offsets(tmp_path).to_pylist()
    monkeypatch.setattr(_offsets._offsetkernel, "scan", colliding_scan)
    assert consumer_offsets(tmp_path).to_pylist() == want
    assert len(want) > 1


def test_a_folder_that_is_not_a_root_is_an_error(tmp_path):
    """What was looked for and what is there, never a silent empty table."""
    from support.layouts import backup_with_deeper_roots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(kbatch.LayoutError, match=f"no partition directories in {backup}; found Kafka logs under "
                                                 f"{roots[0]}, {roots[1]}: pass one of them") as err:
        consumer_offsets(backup)
    assert err.value.deeper == [str(r) for r in roots]
    (tmp_path / "empty").mkdir()
    with pytest.raises(kbatch.LayoutError, match=r"no __consumer_offsets-<partition> directory in .*empty: it is not "
                                                 r"a log.dirs root \(no <topic>-<partition> directory in it; 0 files"):
        consumer_offsets(tmp_path / "empty")
    with pytest.raises(kbatch.LayoutError, match=r"no __cluster_metadata-<partition> directory in .*kafka-logs "
                                                 r"\(found orders: 1 partition\)"):
        cluster_metadata(roots[0])
    with pytest.raises(kbatch.LayoutError, match="found Kafka logs under"):
        cluster_metadata(backup)
    # a root holding other topics only: an error naming what it holds, as docs/GUIDE.md says (issue 35)
    for table in (consumer_offsets, consumer_groups, transactions):
        topic = "__transaction_state" if table is transactions else "__consumer_offsets"
        with pytest.raises(kbatch.LayoutError, match=rf"no {topic}-<partition> directory in .*kafka-logs "
                                                     r"\(found orders: 1 partition\)"):
            table(roots[0])


def test_producer_snapshots_of_a_folder_that_is_not_a_root_is_an_error(tmp_path):
    """As the other tables: a folder with no partition directory says what it holds."""
    from support.layouts import backup_with_deeper_roots

    from kbatch.internal import producer_snapshots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(kbatch.LayoutError, match=f"found Kafka logs under {roots[0]}"):
        producer_snapshots(backup)
    (tmp_path / "empty").mkdir()
    with pytest.raises(kbatch.LayoutError, match=r"no partition directory in .*empty: it is not a log.dirs root"):
        producer_snapshots(tmp_path / "empty")
    # what open_logs returns works as for the other tables; no partition at all: an empty table
    assert producer_snapshots([]).num_rows == 0
    assert producer_snapshots(kbatch.open_logs(roots[0])).num_rows == producer_snapshots(roots[0]).num_rows
