"""Consumer groups from ``__consumer_offsets``: classic groups (GroupMetadata) and groups of the new
consumer protocol (KIP-848 ConsumerGroup* records), share groups (ShareGroup*) and streams groups
(KIP-1071 StreamsGroup* records: members and their epochs; their assignments are tasks, not
topic partitions, and stay in ``history=True``), with their members and assignments.

A classic member's ``subscription`` and ``assignment`` are the consumer protocol's bytes
(``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``: int16 version, body) when
the group's protocol type is ``consumer``; they are decoded as Kafka's ``ConsumerProtocol``
does (a version newer than kbatch knows is read as the newest it knows, bytes after the body
ignored), and kept raw beside (``subscription_bytes``, ``assignment_bytes``) so nothing is lost
when they are some other protocol's (Connect's, ...).
"""

from __future__ import annotations

from typing import Any

from kbatch.protocol import ProtocolError

from ._records import OnUnknown, default_registry
from ._replay import Located, latest, located

__all__ = ["consumer_groups"]

TOPIC = "__consumer_offsets"


def _member_type() -> Any:
    import pyarrow as pa

    tp = pa.struct([("topic", pa.string()), ("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))])
    return pa.struct([
        ("member_id", pa.string()), ("group_instance_id", pa.string()), ("client_id", pa.string()),
        ("client_host", pa.string()), ("rack_id", pa.string()), ("rebalance_timeout_ms", pa.int32()),
        ("session_timeout_ms", pa.int32()), ("member_epoch", pa.int32()),
        ("subscribed_topics", pa.list_(pa.string())), ("subscribed_topic_regex", pa.string()),
        ("assignment", pa.list_(tp)), ("subscription_bytes", pa.binary()), ("assignment_bytes", pa.binary()),
    ])


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("group", pa.string()), ("type", pa.string()), ("protocol_type", pa.string()), ("protocol", pa.string()),
        ("generation", pa.int32()), ("leader", pa.string()), ("state_timestamp", pa.timestamp("ms", tz="UTC")),
        ("members", pa.list_(_member_type())), ("coordinator_partition", pa.int32()), ("record_offset", pa.int64()),
    ])


def _consumer_protocol(name: str, data: bytes | None) -> dict[str, Any] | None:
    if data is None or len(data) < 2:
        return None
    msg = default_registry().schema[name]
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        out, _ = msg.decode_from(data, 2, min(version, msg.max_version))
    except ProtocolError:
        return None
    return out


def _classic_members(value: dict[str, Any]) -> list[dict[str, Any]]:
    consumer = value.get("protocol_type") == "consumer"
    members = []
    for m in value["members"]:
        sub = _consumer_protocol("ConsumerProtocolSubscription", m["subscription"]) if consumer else None
        asg = _consumer_protocol("ConsumerProtocolAssignment", m["assignment"]) if consumer else None
        members.append({
            "member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
            "client_id": m["client_id"], "client_host": m["client_host"],
            "rack_id": sub.get("rack_id") if sub else None,
            "rebalance_timeout_ms": m.get("rebalance_timeout", -1), "session_timeout_ms": m["session_timeout"],
            "member_epoch": None,
            "subscribed_topics": list(sub["topics"]) if sub else None, "subscribed_topic_regex": None,
            "assignment": ([{"topic": a["topic"], "topic_id": None, "partitions": list(a["partitions"])}
                            for a in asg["assigned_partitions"]] if asg else None),
            "subscription_bytes": None if m["subscription"] is None else bytes(m["subscription"]),
            "assignment_bytes": None if m["assignment"] is None else bytes(m["assignment"]),
        })
    return members


_KINDS = {"Consu": "consumer", "Share": "share", "Strea": "streams"}


def _state_ts(value: int) -> int | None:
    return None if value < 0 else value


def _rows(records: list[Located]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    members: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in latest(records):
        r = rec.entry.record
        key, value = r.key or {}, r.value or {}
        where = {"coordinator_partition": rec.partition, "record_offset": rec.entry.offset}
        if r.key_type == "GroupMetadataKey":
            groups[key["group"]] = {
                "group": key["group"], "type": "classic", "protocol_type": value["protocol_type"],
                "protocol": value["protocol"], "generation": value["generation"], "leader": value["leader"],
                "state_timestamp": _state_ts(value.get("current_state_timestamp", -1)),
                "members": _classic_members(value), **where,
            }
        elif r.key_type in ("ConsumerGroupMetadataKey", "ShareGroupMetadataKey", "StreamsGroupMetadataKey"):
            kind = _KINDS[r.key_type[:5]]
            groups[key["group_id"]] = {
                "group": key["group_id"], "type": kind, "protocol_type": kind,
                "protocol": None, "generation": value["epoch"], "leader": None, "state_timestamp": None,
                "members": None, **where,
            }
        elif r.key_type == "StreamsGroupMemberMetadataKey":
            m = members.setdefault(key["group_id"], {}).setdefault(key["member_id"], _blank(key["member_id"]))
            m.update({
                "group_instance_id": value.get("instance_id"), "client_id": value["client_id"],
                "client_host": value["client_host"], "rack_id": value.get("rack_id"),
                "rebalance_timeout_ms": value.get("rebalance_timeout_ms", -1),
            })
        elif r.key_type == "StreamsGroupCurrentMemberAssignmentKey":
            # tasks (subtopology, partitions), not topic partitions: the epoch only
            m = members.setdefault(key["group_id"], {}).setdefault(key["member_id"], _blank(key["member_id"]))
            m["member_epoch"] = value["member_epoch"]
        elif r.key_type in ("ConsumerGroupMemberMetadataKey", "ShareGroupMemberMetadataKey"):
            m = members.setdefault(key["group_id"], {}).setdefault(key["member_id"], _blank(key["member_id"]))
            classic = value.get("classic_member_metadata")
            m.update({
                "group_instance_id": value.get("instance_id"), "client_id": value["client_id"],
                "client_host": value["client_host"], "rack_id": value.get("rack_id"),
                "rebalance_timeout_ms": value.get("rebalance_timeout_ms", -1),
                "session_timeout_ms": classic["session_timeout_ms"] if classic else None,
                "subscribed_topics": list(value["subscribed_topic_names"]),
                "subscribed_topic_regex": value.get("subscribed_topic_regex"),
            })
        elif r.key_type in ("ConsumerGroupCurrentMemberAssignmentKey", "ShareGroupCurrentMemberAssignmentKey"):
            m = members.setdefault(key["group_id"], {}).setdefault(key["member_id"], _blank(key["member_id"]))
            m["member_epoch"] = value["member_epoch"]
            m["assignment"] = [{"topic": None, "topic_id": str(a["topic_id"]), "partitions": list(a["partitions"])}
                               for a in value.get("assigned_partitions", ())]
    for gid, ms in members.items():
        g = groups.get(gid)
        if g is not None and g["type"] != "classic":
            g["members"] = list(ms.values())
    return sorted(groups.values(), key=lambda g: g["group"])


def _blank(member_id: str) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": None, "client_id": None, "client_host": None,
            "rack_id": None, "rebalance_timeout_ms": None, "session_timeout_ms": None, "member_epoch": None,
            "subscribed_topics": None, "subscribed_topic_regex": None, "assignment": None,
            "subscription_bytes": None, "assignment_bytes": None}


def consumer_groups(source: Any, *, history: bool = False, on_unknown: OnUnknown = "raise") -> Any:
    """The consumer groups held in ``__consumer_offsets``: classic and new-protocol, with members.

    Parameters
    ----------
    source : path, LogDir or RecordTable
        A ``log.dirs`` root, one ``__consumer_offsets-<n>`` directory, or a
        RecordTable of one partition.
    history : bool, default False
        One row per group record instead (``coordinator_partition``,
        ``record_offset``, ``timestamp``, ``record_type``, ``group``,
        ``member_id``, ``tombstone``); :func:`iter_decoded` gives the values.
    on_unknown : {"raise", "raw"}
        An unknown record type or version raises, or is left out.

    Returns
    -------
    pyarrow.Table
        One row per live group: ``group``, ``type`` (``classic``,
        ``consumer``, ``share``, ``streams``), ``protocol_type``, ``protocol``,
        ``generation`` (the group epoch for the new protocol), ``leader``,
        ``state_timestamp``, ``members`` (a list of structs: ids, client,
        timeouts, ``subscribed_topics``, ``assignment`` as a list of
        ``{topic, topic_id, partitions}``, and the classic protocol's raw
        bytes), ``coordinator_partition``, ``record_offset``.

    Examples
    --------
    >>> import kbatch, tempfile
    >>> from kbatch.internal import default_registry
    >>> schema = default_registry().schema
    >>> asg = b"\\x00\\x00" + schema["ConsumerProtocolAssignment"].encode(
    ...     {"assigned_partitions": [{"topic": "t", "partitions": [0, 1]}]}, 0)
    >>> value = b"\\x00\\x03" + schema["GroupMetadataValue"].encode({"protocol_type": "consumer", "generation": 4,
    ...     "protocol": "range", "leader": "m1", "current_state_timestamp": 0, "members": [{"member_id": "m1",
    ...     "client_id": "c", "client_host": "/10.0.0.1", "rebalance_timeout": 300000, "session_timeout": 45000,
    ...     "subscription": b"", "assignment": asg}]}, 3)
    >>> key = b"\\x00\\x02" + schema["GroupMetadataKey"].encode({"group": "g"}, 0)
    >>> root = tempfile.mkdtemp()
    >>> with kbatch.LogWriter(root, "__consumer_offsets", 0) as w:
    ...     _ = w.append(kbatch.encode([value], keys=[key]))
    >>> row = consumer_groups(root).to_pylist()[0]
    >>> row["group"], row["protocol"], row["generation"], row["members"][0]["assignment"]
    ('g', 'range', 4, [{'topic': 't', 'topic_id': None, 'partitions': [0, 1]}])
    """
    import pyarrow as pa

    records = located(source, TOPIC, "group", on_unknown)
    if history:
        rows = []
        for rec in records:
            r, e = rec.entry.record, rec.entry
            if r.record_type <= 1:
                continue
            key = r.key or {}
            rows.append({"coordinator_partition": rec.partition, "record_offset": e.offset, "timestamp": e.timestamp,
                         "record_type": r.key_type, "group": key.get("group", key.get("group_id")),
                         "member_id": key.get("member_id"), "tombstone": r.value is None})
        schema = pa.schema([("coordinator_partition", pa.int32()), ("record_offset", pa.int64()),
                            ("timestamp", pa.timestamp("ms", tz="UTC")), ("record_type", pa.string()),
                            ("group", pa.string()),
                            ("member_id", pa.string()), ("tombstone", pa.bool_())])
        return pa.Table.from_pylist(rows, schema=schema)
    return pa.Table.from_pylist(_rows(records), schema=_schema())
