"""The internal-topic decoders of ``kbatch dump``: Kafka's DumpLogSegments message parsers.

Each turns a record's key and value into the ``key:``/``payload:`` text Kafka 4.x prints
(``tools/.../DumpLogSegments.java``), decoding with :mod:`kbatch.internal` and writing Kafka's
JSON with :mod:`kbatch.protocol._json`:

``--offsets-decoder``, ``--transaction-log-decoder``, ``--share-group-state-decoder``
    (CoordinatorRecordMessageParser) key ``{"type":"<record type>","data":{<key>}}``, payload
    ``{"version":"<value version>","data":{<value>}}``, or ``<DELETE>`` for a tombstone. In a
    classic group's metadata (``protocolType`` ``consumer``) each member's ``subscription`` and
    ``assignment`` bytes are shown decoded (ConsumerProtocolSubscription/Assignment, whose
    version is their first int16) when they decode, as base64 otherwise. A record type kbatch
    does not know: key ``Unknown record type T at offset O, skipping.``; any other failure: key
    ``Error at offset O, skipping. <why>``, no payload.
``--cluster-metadata-decoder``
    no key; payload ``{"type":"<TYPE_NAME>","version":V,"data":{<record>}}`` or
    ``Error at O, skipping. <why>`` (Kafka's words: no "offset" there).
``--remote-log-metadata-decoder``
    no key; payload the Java ``toString`` of the RemoteLogMetadata the record becomes
    (``RemoteLogSegmentMetadata{...}``, ``RemotePartitionDeleteMetadata{...}``, ...) or
    ``Error at offset O, skipping. <why>``.

KRaft control records (in any topic) are written by :func:`control_json`.

Metadata and remote-log values are framed as Kafka's AbstractApiMessageSerde writes them::

    value = uvarint frameVersion (1), uvarint apiKey, uvarint version, message body
"""

from __future__ import annotations

import functools
from typing import Any

from kbatch._wire import read_uvarint
from kbatch.internal import (
    CONTROL_TYPES,
    InternalRecordError,
    Registry,
    decode_control_value,
    decode_key_value,
    default_registry,
)
from kbatch.protocol import KafkaJson, kafka_uuid, message_json

__all__ = ["CONTROL_MESSAGES", "DECODER_FAMILIES", "TopicParser", "control_json", "topic_parser"]

#: ``kbatch dump`` option -> :mod:`kbatch.internal` family of the records it reads.
DECODER_FAMILIES = {
    "offsets_decoder": "group",
    "transaction_log_decoder": "transaction",
    "share_group_state_decoder": "share",
    "cluster_metadata_decoder": "metadata",
    "remote_log_metadata_decoder": "remote_log",
}
_CONSUMER_PROTOCOL = "consumer"
_SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
                   3: "DELETE_SEGMENT_FINISHED"}
_PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED",
                            2: "DELETE_PARTITION_FINISHED"}


def _type_name(name: str) -> str:
    """Kafka's MetadataRecordType name: its generator's ``toSnakeCase(name).toUpperCase()``.

    >>> _type_name("TopicRecord"), _type_name("ZkMigrationStateRecord")
    ('TOPIC_RECORD', 'ZK_MIGRATION_STATE_RECORD')
    """
    out, prev_upper = [], True
    for c in name:
        if c.isupper():
            if not prev_upper:
                out.append("_")
            out.append(c.lower())
            prev_upper = True
        else:
            out.append(c)
            prev_upper = False
    return "".join(out).upper()


def _frame(value: bytes) -> tuple[int, int, int] | str:
    """(frame version, apiKey, version) of a metadata-framed value, or Kafka's words for why not."""
    pos, out = 0, []
    for entity in ("frame version", "type", "version"):
        result, pos = read_uvarint(value, pos, len(value))
        if result < 0:  # truncated or longer than 5 bytes
            return f"Error while reading {entity}"
        if result > 0x7FFF:
            return f"Value for {entity} was too large."
        if entity == "frame version" and result == 0:
            return ("Could not deserialize metadata record with frame version 0. Note that upgrades from the preview "
                    "release of KRaft in 2.8 to newer versions are not supported.")
        if entity == "frame version" and result != 1:
            return (f"Could not deserialize metadata record due to unknown frame version {result}(only frame version "
                    "1 is supported)")
        out.append(result)
    return out[0], out[1], out[2]


class TopicParser:
    """One internal-topic decoder: ``parse(key, value, offset)`` -> (key text, payload text,
    problem), the texts as Kafka prints them (:class:`KafkaJson` where they are JSON), ``problem``
    a short reason when the record could not be decoded (the texts then say so, as Kafka's do)."""

    def __init__(self, family: str, registry: Registry | None = None) -> None:
        self.family = family
        self.registry = registry or default_registry()

    def parse(self, key: bytes | None, value: bytes | None, offset: int
              ) -> tuple[str | None, str | None, str | None]:
        if self.family in ("metadata", "remote_log"):
            return self._metadata(key, value, offset)
        return self._coordinator(key, value, offset)

    # coordinator records: __consumer_offsets, __transaction_state, __share_group_state

    def _coordinator(self, key: bytes | None, value: bytes | None, offset: int
                     ) -> tuple[str | None, str | None, str | None]:
        if key is None:  # Kafka stops the dump there; kbatch prints the record's metadata and goes on
            return None, None, (f"Failed to decode message at offset {offset} using the specified decoder "
                                "(message had a missing key)")
        try:
            r = decode_key_value(self.family, key, value, offset=offset, on_unknown="raw", registry=self.registry)
        except InternalRecordError as exc:
            return f"Error at offset {offset}, skipping. {exc.reason}", None, str(exc)
        if r.unknown:
            entry = self.registry.coordinator[self.family].get(r.record_type)
            if entry is None:
                return (f"Unknown record type {r.record_type} at offset {offset}, skipping.", None,
                        f"unknown record type {r.record_type}")
            version = int.from_bytes((value or b"")[:2], "big", signed=True)
            why = (f"Could not read record with version {version} from value's buffer due to: Can't read version "
                   f"{version} of {entry[2].name}.")
            return f"Error at offset {offset}, skipping. {why}", None, f"unknown {entry[2].name} version {version}"
        schema = self.registry.schema
        assert r.key_type is not None and r.key is not None and r.key_version is not None
        key_text = KafkaJson(f'{{"type":"{r.record_type}","data":'
                             f'{message_json(schema[r.key_type].spec, r.key, r.key_version)}}}')
        if r.value is None or r.value_type is None or r.value_version is None:
            return key_text, "<DELETE>", None
        data = r.value
        if r.value_type == "GroupMetadataValue" and data.get("protocol_type") == _CONSUMER_PROTOCOL:
            data = self._consumer_members(data)
        payload = KafkaJson(f'{{"version":"{r.value_version}","data":'
                            f'{message_json(schema[r.value_type].spec, data, r.value_version)}}}')
        return key_text, payload, None

    def _consumer_members(self, data: dict[str, Any]) -> dict[str, Any]:
        """GroupMetadataValue with each member's subscription and assignment decoded where they
        decode (Kafka's prepareGroupMetadataValue; bytes after the message are ignored, as there)."""
        members = []
        for member in data.get("members") or ():
            member = dict(member)
            for field, name in (("subscription", "ConsumerProtocolSubscription"),
                                ("assignment", "ConsumerProtocolAssignment")):
                raw = member.get(field)
                if raw is not None:
                    decoded = self._embedded(name, bytes(raw))
                    if decoded is not None:
                        member[field] = decoded
            members.append(member)
        return {**data, "members": members}

    def _embedded(self, name: str, raw: bytes) -> KafkaJson | None:
        if len(raw) < 2 or name not in self.registry.schema:
            return None
        msg = self.registry.schema[name]
        version = int.from_bytes(raw[:2], "big", signed=True)
        if version not in msg.versions:
            return None
        try:
            obj, _ = msg.decode_from(memoryview(raw), 2, version)
        except ValueError:
            return None
        return message_json(msg.spec, obj, version)

    # metadata-framed records: __cluster_metadata, __remote_log_metadata

    def _metadata(self, key: bytes | None, value: bytes | None, offset: int
                  ) -> tuple[str | None, str | None, str | None]:
        where = f"at {offset}" if self.family == "metadata" else f"at offset {offset}"
        if value is None:
            return None, f"Error {where}, skipping. the record has no value", "a record without a value"
        frame = _frame(value)
        if isinstance(frame, str):
            return None, f"Error {where}, skipping. {frame}", frame
        _, api_key, version = frame
        msg = self.registry.metadata[self.family].get(api_key)
        if msg is None:
            why = (f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
                   if self.family == "metadata" else
                   f"RemoteLogMetadataTransform for apikey: {api_key} does not exist.")
            return None, f"Error {where}, skipping. {why}", f"unknown record type {api_key}"
        if version not in msg.versions:
            why = f"Failed to deserialize record with type {api_key}"
            return (None, f"Error {where}, skipping. {why} (no version {version} of {msg.name})",
                    f"unknown {msg.name} version {version}")
        try:
            r = decode_key_value(self.family, None, value, offset=offset, registry=self.registry)
        except InternalRecordError as exc:
            return None, f"Error {where}, skipping. {exc.reason}", str(exc)
        assert r.value is not None and r.value_version is not None
        if self.family == "metadata":
            data = message_json(msg.spec, r.value, r.value_version)
            text = f'{{"type":"{_type_name(msg.name)}","version":{r.value_version},"data":{data}}}'
            return None, KafkaJson(text), None
        try:
            return None, _remote_log_text(msg.name, r.value), None
        except ValueError as exc:
            return None, f"Error {where}, skipping. {exc}", str(exc)


def _tip(entry: dict[str, Any]) -> str:
    """Kafka's TopicIdPartition.toString: ``<topic id>:<topic>-<partition>``."""
    return f"{kafka_uuid(entry['id'])}:{entry['name']}-{entry['partition']}"


def _custom(raw: Any) -> str:
    return "Optional.empty" if raw is None else f"Optional[CustomMetadata{{{len(bytes(raw))} bytes}}]"


def _epochs(entries: Any) -> str:
    """A ``Map<Integer, Long>`` of leader epochs as Java's TreeMap prints it (validated as Kafka does)."""
    epochs = {int(e["leader_epoch"]): int(e["offset"]) for e in entries or ()}
    if not epochs:
        raise ValueError("segmentLeaderEpochs can not be null or empty")
    return "{" + ", ".join(f"{k}={epochs[k]}" for k in sorted(epochs)) + "}"


def _state(states: dict[int, str], value: int) -> str:
    if value not in states:
        raise ValueError("state can not be null")
    return states[value]


def _remote_log_text(name: str, v: dict[str, Any]) -> str:
    """The ``toString`` of what RemoteLogMetadataSerde.deserialize builds from a record."""
    if name == "RemotePartitionDeleteMetadataRecord":
        return (f"RemotePartitionDeleteMetadata{{topicPartition={_tip(v['topic_id_partition'])}, "
                f"state={_state(_PARTITION_DELETE_STATES, v['remote_partition_delete_state'])}, "
                f"eventTimestampMs={v['event_timestamp_ms']}, brokerId={v['broker_id']}}}")
    state = _state(_SEGMENT_STATES, v["remote_log_segment_state"])
    if name == "RemoteLogSegmentMetadataSnapshotRecord":
        return (f"RemoteLogSegmentMetadataSnapshot{{segmentId={kafka_uuid(v['segment_id'])}, "
                f"startOffset={v['start_offset']}, endOffset={v['end_offset']}, "
                f"maxTimestampMs={v['max_timestamp_ms']}, segmentLeaderEpochs={_epochs(v['segment_leader_epochs'])}, "
                f"segmentSizeInBytes={v['segment_size_in_bytes']}, customMetadata={_custom(v['custom_metadata'])}, "
                f"state={state}}}")
    sid = v["remote_log_segment_id"]
    segment_id = f"RemoteLogSegmentId{{topicIdPartition={_tip(sid['topic_id_partition'])}, id={kafka_uuid(sid['id'])}}}"
    if name == "RemoteLogSegmentMetadataUpdateRecord":
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={segment_id}, "
                f"customMetadata={_custom(v['custom_metadata'])}, state={state}, "
                f"eventTimestampMs={v['event_timestamp_ms']}, brokerId={v['broker_id']}}}")
    start, end = v["start_offset"], v["end_offset"]
    if start < 0:
        raise ValueError(f"Unexpected start offset = {start}. StartOffset for a remote segment cannot be negative")
    if end < start:
        raise ValueError(f"Unexpected end offset = {end}. EndOffset for a remote segment cannot be less than "
                         f"startOffset = {start}")
    return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={segment_id}, startOffset={start}, endOffset={end}, "
            f"brokerId={v['broker_id']}, maxTimestampMs={v['max_timestamp_ms']}, "
            f"eventTimestampMs={v['event_timestamp_ms']}, segmentLeaderEpochs={_epochs(v['segment_leader_epochs'])}, "
            f"segmentSizeInBytes={v['segment_size_in_bytes']}, customMetadata={_custom(v['custom_metadata'])}, "
            f"state={state}}}")


@functools.cache
def topic_parser(option: str) -> TopicParser:
    """The parser of a ``kbatch dump`` decoder option (a key of :data:`DECODER_FAMILIES`)."""
    return TopicParser(DECODER_FAMILIES[option])


def control_json(kind: int, value: bytes | None, offset: int) -> KafkaJson:
    """Kafka's JSON of a KRaft control record (types 2-6: LeaderChangeMessage, SnapshotHeaderRecord,
    SnapshotFooterRecord, KRaftVersionRecord, VotersRecord).

    The value is read by :func:`kbatch.internal.decode_control_value` (as Kafka's ControlRecordUtils
    reads it: the body at version 0, no version prefix, its own first field ``Version``); the JSON is
    written at that ``Version``, as DumpLogSegments does. Raises
    :class:`kbatch.internal.InternalRecordError` when the value does not decode or has bytes left over.
    """
    version, obj = decode_control_value(kind, value, offset=offset)
    return message_json(default_registry().schema[CONTROL_MESSAGES[kind]].spec, obj, version)


#: KRaft control record type -> the message its value holds (ControlRecordType, ControlRecordUtils).
CONTROL_MESSAGES = {t: name for t, name in CONTROL_TYPES.items() if t >= 2}
