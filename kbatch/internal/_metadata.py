"""The KRaft metadata image from ``__cluster_metadata``: the latest ``.checkpoint`` snapshot plus the log after it.

A checkpoint ``<endOffset>-<epoch>.checkpoint`` holds record batches (a
SnapshotHeader and a SnapshotFooter control batch around the metadata records)
whose state is the image just before ``endOffset``; the log's records from
``endOffset`` on are replayed over it, as Kafka's ``MetadataDelta`` does:

- TopicRecord adds a topic; RemoveTopicRecord removes it, its partitions and its configs.
- PartitionRecord sets a partition; PartitionChangeRecord changes the fields it carries
  (null lists and leader -2 are "unchanged"; a new leader bumps the leader epoch; every
  change bumps the partition epoch, both as Java ints, 2**31-1 wrapping to -2**31; leader
  recovery state -1 is "unchanged").
- ClearElrRecord empties the eligible leader replicas and last known ELR of every partition
  of its topic (an empty name: of every topic) that has any, as a PartitionChangeRecord
  setting both to [] would (TopicsDelta/TopicDelta); a name no topic has is an error.
- RegisterBrokerRecord / UnregisterBrokerRecord add and remove a broker;
  FenceBrokerRecord, UnfenceBrokerRecord and BrokerRegistrationChangeRecord (fenced 1 /
  -1, in controlled shutdown 1, new log dirs) change it.
- ConfigRecord sets (null value: deletes) a config; ClientQuotaRecord sets (remove: deletes)
  a quota; FeatureLevelRecord sets a feature (level 0 deletes, except metadata.version);
  AccessControlEntryRecord, DelegationTokenRecord, UserScramCredentialRecord and their
  Remove* records add and remove; ProducerIdsRecord, ZkMigrationStateRecord and
  RegisterControllerRecord keep the latest.
- Records between BeginTransactionRecord and EndTransactionRecord apply at the end;
  AbortTransactionRecord drops them, and so does the end of the log.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from kbatch.codec import decode
from kbatch.errors import KBatchError
from kbatch.log import LogDir
from kbatch.storage import StoragePath, join, list_files

from ._arrow import kafka_uuid, message_schema, to_row
from ._errors import InternalRecordError
from ._iterate import iter_decoded
from ._records import OnUnknown, default_registry
from ._sources import partitions, tables

__all__ = ["IMAGE_TABLES", "cluster_metadata"]

TOPIC = "__cluster_metadata"
logger = logging.getLogger("kbatch.internal")
_CHECKPOINT = re.compile(r"(\d{20})-(\d{10})\.checkpoint")

#: table name -> the record type whose fields are its columns
IMAGE_TABLES = {
    "topics": "TopicRecord",
    "partitions": "PartitionRecord",
    "brokers": "RegisterBrokerRecord",
    "controllers": "RegisterControllerRecord",
    "configs": "ConfigRecord",
    "features": "FeatureLevelRecord",
    "client_quotas": "ClientQuotaRecord",
    "producer_ids": "ProducerIdsRecord",
    "acls": "AccessControlEntryRecord",
    "delegation_tokens": "DelegationTokenRecord",
    "scram_credentials": "UserScramCredentialRecord",
    "zk_migration_state": "ZkMigrationStateRecord",
}


def _int32_plus_one(epoch: int) -> int:
    """``epoch + 1`` as a Java ``int`` (PartitionRegistration.merge): 2**31-1 wraps to -2**31."""
    return (epoch + 1 + 2**31) % 2**32 - 2**31


class _Image:
    def __init__(self) -> None:
        self.state: dict[str, dict[Any, dict[str, Any]]] = {name: {} for name in IMAGE_TABLES}
        self.txn: list[tuple[str, dict[str, Any], int]] | None = None

    def replay(self, name: str, v: dict[str, Any], offset: int) -> None:
        if name == "BeginTransactionRecord":
            self.txn = []
            return
        if name == "EndTransactionRecord":
            pending, self.txn = self.txn or [], None
            for n, val, off in pending:
                self.apply(n, val, off)
            return
        if name == "AbortTransactionRecord":
            self.txn = None
            return
        if self.txn is not None:
            self.txn.append((name, v, offset))
            return
        self.apply(name, v, offset)

    def apply(self, name: str, v: dict[str, Any], offset: int) -> None:
        s = self.state
        if name == "TopicRecord":
            s["topics"][v["topic_id"]] = v
        elif name == "RemoveTopicRecord":
            topic = s["topics"].pop(v["topic_id"], None)
            for k in [k for k in s["partitions"] if k[0] == v["topic_id"]]:
                del s["partitions"][k]
            if topic is not None:
                for k in [k for k in s["configs"] if k[0] == 2 and k[1] == topic["name"]]:
                    del s["configs"][k]
        elif name == "PartitionRecord":
            s["partitions"][(v["topic_id"], v["partition_id"])] = dict(v)
        elif name == "ClearElrRecord":
            if v["topic_name"]:
                ids = [t for t, topic in s["topics"].items() if topic["name"] == v["topic_name"]]
                if not ids:
                    raise InternalRecordError(f"ClearElrRecord for unknown topic {v['topic_name']!r}", offset, "value")
            else:
                ids = list(s["topics"])
            for (tid, pid), part in list(s["partitions"].items()):
                if tid in ids and (part.get("eligible_leader_replicas") or part.get("last_known_elr")):
                    self.apply("PartitionChangeRecord", {"topic_id": tid, "partition_id": pid, "leader": -2,
                                                         "eligible_leader_replicas": [], "last_known_elr": []}, offset)
        elif name == "PartitionChangeRecord":
            p = s["partitions"].get((v["topic_id"], v["partition_id"]))
            if p is None:
                raise InternalRecordError(f"PartitionChangeRecord for unknown partition {v['partition_id']} of topic "
                                          f"{kafka_uuid(v['topic_id'])}", offset, "value")
            for f in ("replicas", "isr", "removing_replicas", "adding_replicas", "directories",
                      "eligible_leader_replicas", "last_known_elr"):
                if v.get(f) is not None:
                    p[f] = v[f]
            if v.get("leader", -2) != -2:
                p["leader"] = v["leader"]
                p["leader_epoch"] = _int32_plus_one(p["leader_epoch"])
            if v.get("leader_recovery_state", -1) != -1:
                p["leader_recovery_state"] = v["leader_recovery_state"]
            p["partition_epoch"] = _int32_plus_one(p["partition_epoch"])
        elif name == "RegisterBrokerRecord":
            s["brokers"][v["broker_id"]] = dict(v)
        elif name == "UnregisterBrokerRecord":
            s["brokers"].pop(v["broker_id"], None)
        elif name in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
            b = s["brokers"].get(v["id"])
            if b is not None:
                b["fenced"] = name == "FenceBrokerRecord"
        elif name == "BrokerRegistrationChangeRecord":
            b = s["brokers"].get(v["broker_id"])
            if b is not None:
                if v.get("fenced", 0) != 0:
                    b["fenced"] = v["fenced"] == 1
                if v.get("in_controlled_shutdown", 0) == 1:
                    b["in_controlled_shutdown"] = True
                if v.get("log_dirs"):
                    b["log_dirs"] = v["log_dirs"]
        elif name == "RegisterControllerRecord":
            s["controllers"][v["controller_id"]] = v
        elif name == "ConfigRecord":
            k = (v["resource_type"], v["resource_name"], v["name"])
            if v["value"] is None:
                s["configs"].pop(k, None)
            else:
                s["configs"][k] = v
        elif name == "FeatureLevelRecord":
            if v["feature_level"] == 0 and v["name"] != "metadata.version":
                s["features"].pop(v["name"], None)
            else:
                s["features"][v["name"]] = v
        elif name == "ClientQuotaRecord":
            k = (tuple((e["entity_type"], e["entity_name"]) for e in v["entity"]), v["key"])
            if v["remove"]:
                s["client_quotas"].pop(k, None)
            else:
                s["client_quotas"][k] = v
        elif name == "ProducerIdsRecord":
            s["producer_ids"][0] = v
        elif name == "ZkMigrationStateRecord":
            s["zk_migration_state"][0] = v
        elif name == "AccessControlEntryRecord":
            s["acls"][v["id"]] = v
        elif name == "RemoveAccessControlEntryRecord":
            s["acls"].pop(v["id"], None)
        elif name == "DelegationTokenRecord":
            s["delegation_tokens"][v["token_id"]] = v
        elif name == "RemoveDelegationTokenRecord":
            s["delegation_tokens"].pop(v["token_id"], None)
        elif name == "UserScramCredentialRecord":
            s["scram_credentials"][(v["name"], v["mechanism"])] = v
        elif name == "RemoveUserScramCredentialRecord":
            s["scram_credentials"].pop((v["name"], v["mechanism"]), None)
        # NoOpRecord and unknown-but-kept records change nothing

    def tables(self) -> dict[str, Any]:
        import pyarrow as pa

        schema = default_registry().schema
        out = {}
        names = {t["topic_id"]: t["name"] for t in self.state["topics"].values()}
        for table, record in IMAGE_TABLES.items():
            msg = schema[record]
            fields = message_schema(msg)
            rows = [to_row(msg, v) for v in self.state[table].values()]
            if table == "partitions":
                topics = [names.get(v["topic_id"]) for v in self.state[table].values()]
                fields = fields.insert(0, pa.field("topic", pa.string()))
                for row, t in zip(rows, topics, strict=True):
                    row["topic"] = t
            result = pa.Table.from_pylist(rows, schema=fields)
            if table == "partitions" and result.num_rows:
                result = result.sort_by([("topic", "ascending"), ("partition_id", "ascending")])
            out[table] = result
        return out


def _checkpoints(log: LogDir) -> list[tuple[int, Any]]:
    """(end offset, file) of the KRaft snapshots in ``log``'s directory (a remote one: listed
    once, each file a :class:`kbatch.storage._location.StoragePath`)."""
    found: list[tuple[int, Any]] = []
    if log.location.fs is not None:
        for e in list_files(log.location):
            m = _CHECKPOINT.fullmatch(posixpath.basename(e.path))
            if m and not e.is_dir:
                found.append((int(m.group(1)), StoragePath(join(log.location, posixpath.basename(e.path)))))
        return sorted(found, key=lambda f: f[0])
    for p in Path(log.path).iterdir():
        m = _CHECKPOINT.fullmatch(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def cluster_metadata(source: Any, *, offset: int | None = None, history: bool = False,
                     on_unknown: OnUnknown = "raise") -> dict[str, Any]:
    """The KRaft metadata image: topics, partitions, brokers, configs, features, ... as tables.

    Parameters
    ----------
    source : path, LogDir or RecordTable
        A ``log.dirs`` root or metadata log dir holding ``__cluster_metadata-0``,
        that directory, or a RecordTable of its records (no checkpoint then).
    offset : int, optional
        The image after the record at this offset (default: the end of the log).
        The latest checkpoint at or before it is the starting point.
    history : bool, default False
        Instead of the image: every record of the log (not of the checkpoint),
        one table per record type name, with ``offset`` and ``timestamp``.
    on_unknown : {"raise", "raw"}
        An unknown record type or version raises, or is left out.

    Returns
    -------
    dict of str to pyarrow.Table
        :data:`IMAGE_TABLES` names (``topics``, ``partitions`` with a ``topic``
        name column, ``brokers``, ...) whose columns are the fields of the
        record type that defines each (UUIDs in Kafka's base64url text).

    Raises
    ------
    InternalRecordError
        The log does not start at 0 and no checkpoint covers what is missing,
        or a change names a partition the image does not have.
    LayoutError
        ``source`` is a path holding no ``__cluster_metadata-0`` (a KRaft cluster always
        has one: an empty image would be wrong); the message says what it holds.

    Examples
    --------
    >>> import kbatch, tempfile, uuid
    >>> from kbatch.internal import default_registry
    >>> schema = default_registry().schema
    >>> def record(record_type, version, **fields):
    ...     msg = schema[record_type]
    ...     return bytes([1, msg.spec.api_key, version]) + msg.encode(fields, version)
    >>> tid = uuid.UUID(int=7)
    >>> values = [record("TopicRecord", 0, name="orders", topic_id=tid),
    ...           record("PartitionRecord", 0, partition_id=0, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1,
    ...                  leader_epoch=0, partition_epoch=0),
    ...           record("PartitionChangeRecord", 0, partition_id=0, topic_id=tid, isr=[2], leader=2)]
    >>> root = tempfile.mkdtemp()
    >>> with kbatch.LogWriter(root, "__cluster_metadata", 0) as w:
    ...     _ = w.append(kbatch.encode(values))
    >>> image = cluster_metadata(root)
    >>> image["topics"].to_pylist()
    [{'name': 'orders', 'topic_id': 'AAAAAAAAAAAAAAAAAAAABw'}]
    >>> image["partitions"].select(["topic", "partition_id", "isr", "leader", "leader_epoch"]).to_pylist()
    [{'topic': 'orders', 'partition_id': 0, 'isr': [2], 'leader': 2, 'leader_epoch': 1}]
    >>> cluster_metadata(root, offset=1)["partitions"]["leader"].to_pylist()
    [1]
    """
    import pyarrow as pa

    unknown = 0
    parts = partitions(source, TOPIC)
    if len(parts) > 1:
        raise ValueError(f"{len(parts)} partitions of {TOPIC}: it has one")
    if history:
        rows: dict[str, list[dict[str, Any]]] = {}
        schema = default_registry().schema
        for part in parts:
            for table in tables(part, "read_uncommitted"):
                for e in iter_decoded(table, "metadata", on_unknown=on_unknown):
                    r = e.record
                    unknown += r.unknown
                    if e.control or r.unknown or r.value_type is None or r.value is None:
                        continue
                    row = to_row(schema[r.value_type], r.value)
                    row["offset"], row["timestamp"] = e.offset, e.timestamp
                    rows.setdefault(r.value_type, []).append(row)
        out = {}
        for name, rs in rows.items():
            fields = message_schema(schema[name]).append(pa.field("offset", pa.int64())).append(
                pa.field("timestamp", pa.timestamp("ms", tz="UTC")))
            out[name] = pa.Table.from_pylist(rs, schema=fields)
        _told(unknown)
        return out
    image = _Image()
    if not parts:
        return image.tables()
    part = parts[0]
    start = 0
    if isinstance(part.log, LogDir):
        usable = [(o, p) for o, p in _checkpoints(part.log) if offset is None or o <= offset + 1]
        if usable:
            start, path = usable[-1]
            try:
                snap = decode(path.read_bytes())
            except KBatchError as exc:
                raise exc.with_context(path) from exc
            for e in iter_decoded(snap, "metadata", on_unknown=on_unknown):
                r = e.record
                unknown += r.unknown
                if not e.control and not r.unknown and r.value_type is not None and r.value is not None:
                    image.replay(r.value_type, r.value, e.offset)
            image.txn = None
    first: int | None = None
    for table in tables(part, "read_uncommitted"):
        if first is None and len(table.batches):
            first = int(table.batches["base_offset"][0])  # control batches count: they have no rows
            if first > start:
                raise InternalRecordError(f"the metadata log starts at offset {first} and no checkpoint covers "
                                          f"offsets {start} to {first - 1}: the image would be incomplete", first)
        for e in iter_decoded(table, "metadata", on_unknown=on_unknown):
            if e.offset < start:
                continue
            if offset is not None and e.offset > offset:
                break
            r = e.record
            unknown += r.unknown
            if e.control or r.unknown or r.value_type is None or r.value is None:
                continue
            image.replay(r.value_type, r.value, e.offset)
    _told(unknown)
    return image.tables()


def _told(unknown: int) -> None:
    if unknown:
        logger.warning("%s: %d records of an unknown type or version left out (on_unknown='raw')", TOPIC, unknown)
