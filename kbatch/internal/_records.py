"""One record of an internal topic decoded: the record type chooses the key and value schemas.

The wire grammar, per family of topics (Kafka's ``CoordinatorRecordSerde``,
``MetadataRecordSerde`` and ``ControlRecordUtils``)::

    coordinator records: __consumer_offsets ("group"), __transaction_state
    ("transaction"), __share_group_state ("share")
        key   = int16 recordType, key body          (the type's key schema, version 0)
        value = null                                (a tombstone)
              | int16 valueVersion, value body      (the type's value schema)
    metadata records: __cluster_metadata ("metadata"), __remote_log_metadata ("remote_log")
        key   = null (ignored)
        value = uvarint frameVersion (1), uvarint apiKey, uvarint version, body
    control records (control batches of any topic)
        key   = int16 version (0), int16 controlType
        value = int16 version, body
            controlType 0 ABORT, 1 COMMIT: body = int32 coordinatorEpoch (EndTxnMarker)
            2 LeaderChangeMessage, 3 SnapshotHeaderRecord, 4 SnapshotFooterRecord,
            5 KRaftVersionRecord, 6 VotersRecord

Record types 0 and 1 of ``__consumer_offsets`` are both offset commits; their
values are ``OffsetCommitValue`` at the value's own version (0-4), as Kafka's
group coordinator reads them. Kafka reads coordinator records without checking
for bytes after the body; kbatch reports them as an error (nothing is dropped
silently).

A definition directory may use Kafka 4's form (``"type": "coordinator-key"``
with ``apiKey`` = record type, keys at version 0) or the older one (``"type":
"data"``, the key's ``validVersions`` = its record types): :class:`Registry`
reads both, so ``Schema.from_directory`` over a broker's own resources works.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal, NamedTuple

from kbatch.protocol import Message, ProtocolError, Schema

from ._errors import InternalRecordError

__all__ = [
    "CONTROL_TYPES",
    "DEFINITIONS",
    "FAMILIES",
    "DecodedRecord",
    "OnUnknown",
    "Registry",
    "decode_key_value",
    "default_registry",
    "family_of",
]

DEFINITIONS = Path(__file__).with_name("definitions")

#: internal topic name -> family of record formats
FAMILIES: dict[str, str] = {
    "__consumer_offsets": "group",
    "__transaction_state": "transaction",
    "__share_group_state": "share",
    "__cluster_metadata": "metadata",
    "__remote_log_metadata": "remote_log",
}
#: control record type -> the name of the schema of its value
CONTROL_TYPES: dict[int, str] = {
    0: "EndTxnMarker",  # ABORT
    1: "EndTxnMarker",  # COMMIT
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}
_COORDINATOR = ("group", "transaction", "share")
_TRANSACTION_KEYS = frozenset({"TransactionLogKey"})
_SHARE_KEYS = frozenset({"ShareSnapshotKey", "ShareUpdateKey"})
_REMOTE_LOG = frozenset({
    "RemoteLogSegmentMetadataRecord", "RemoteLogSegmentMetadataUpdateRecord",
    "RemotePartitionDeleteMetadataRecord", "RemoteLogSegmentMetadataSnapshotRecord",
})

OnUnknown = Literal["raise", "raw"]


class DecodedRecord(NamedTuple):
    """A decoded record of an internal topic.

    ``key_type``/``value_type`` are schema names (``"OffsetCommitKey"``,
    ``"PartitionRecord"``, ``"LeaderChangeMessage"``, ...); ``record_type`` the
    number that chose them (coordinator record type, metadata ``apiKey`` or
    control type). ``value`` is None for a tombstone. When the record type or a
    version is unknown and ``on_unknown="raw"`` was asked, ``unknown`` is True,
    the names and dicts are None and ``raw_key``/``raw_value`` keep the bytes.
    """

    family: str
    record_type: int
    key_type: str | None
    key_version: int | None
    key: dict[str, Any] | None
    value_type: str | None
    value_version: int | None
    value: dict[str, Any] | None
    unknown: bool = False
    raw_key: bytes | None = None
    raw_value: bytes | None = None


class Registry:
    """Which schema decodes which record, built from a :class:`kbatch.protocol.Schema`.

    Attributes
    ----------
    schema : Schema
    coordinator : dict
        ``family -> {record type: (key Message, key version, value Message)}``.
    metadata : dict
        ``family -> {apiKey: Message}`` for ``metadata`` and ``remote_log``.
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.coordinator: dict[str, dict[int, tuple[Message, int, Message]]] = {f: {} for f in _COORDINATOR}
        self.metadata: dict[str, dict[int, Message]] = {"metadata": {}, "remote_log": {}}
        for msg in schema:
            spec = msg.spec
            if spec.type == "metadata" and spec.api_key is not None:
                fam = "remote_log" if spec.name in _REMOTE_LOG else "metadata"
                self.metadata[fam][spec.api_key] = msg
            elif spec.name.endswith("Key") and spec.type in ("coordinator-key", "data"):
                value_name = spec.name[:-3] + "Value"
                if value_name not in schema:
                    continue
                fam = ("transaction" if spec.name in _TRANSACTION_KEYS
                       else "share" if spec.name in _SHARE_KEYS else "group")
                if spec.type == "coordinator-key" and spec.api_key is not None:
                    pairs = [(spec.api_key, 0)]
                else:  # the older form: the key's versions are its record types
                    pairs = [(v, v) for v in msg.versions]
                for rtype, kversion in pairs:
                    self.coordinator[fam][rtype] = (msg, kversion, schema[value_name])
        group = self.coordinator["group"]
        if 0 in group and "OffsetCommitValue" in schema:
            # record type 0 (Kafka 0.8.2's key) carries the same values as type 1
            group[0] = (group[0][0], group[0][1], schema["OffsetCommitValue"])

    def decode(
        self,
        family: str,
        key: Any,
        value: Any,
        *,
        control: bool = False,
        offset: int = -1,
        on_unknown: OnUnknown = "raise",
    ) -> DecodedRecord:
        """See :func:`decode_key_value`."""
        if on_unknown not in ("raise", "raw"):
            raise ValueError(f"on_unknown must be 'raise' or 'raw', not {on_unknown!r}")
        if control:
            return self._control(family, key, value, offset, on_unknown)
        if family in _COORDINATOR:
            return self._coordinator(family, key, value, offset, on_unknown)
        if family in self.metadata:
            return self._metadata(family, key, value, offset, on_unknown)
        raise ValueError(f"unknown family {family!r}: expected one of {sorted(set(FAMILIES.values()))}")

    def _coordinator(self, family: str, key: Any, value: Any, offset: int, on_unknown: OnUnknown) -> DecodedRecord:
        if key is None:
            raise InternalRecordError("a coordinator record without a key", offset, "key")
        kv = memoryview(key).cast("B")
        rtype = _int16(kv, offset, "key", "record type")
        entry = self.coordinator[family].get(rtype)
        if entry is None:
            return _unknown(family, rtype, f"unknown {family} coordinator record type {rtype}", key, value,
                            offset, "key", on_unknown)
        kmsg, kversion, vmsg = entry
        kdict = _body(kmsg, kv, 2, kversion, offset, "key")
        if value is None:
            return DecodedRecord(family, rtype, kmsg.name, kversion, kdict, vmsg.name, None, None)
        vv = memoryview(value).cast("B")
        vversion = _int16(vv, offset, "value", "version")
        if vversion not in vmsg.versions:
            return _unknown(family, rtype, f"unknown {vmsg.name} version {vversion}", key, value,
                            offset, "value", on_unknown)
        vdict = _body(vmsg, vv, 2, vversion, offset, "value")
        return DecodedRecord(family, rtype, kmsg.name, kversion, kdict, vmsg.name, vversion, vdict)

    def _metadata(self, family: str, key: Any, value: Any, offset: int, on_unknown: OnUnknown) -> DecodedRecord:
        if value is None:
            raise InternalRecordError("a metadata record without a value", offset, "value")
        vv = memoryview(value).cast("B")
        frame, pos = _uvarint(vv, 0, offset, "frame version")
        if frame != 1:
            raise InternalRecordError(f"unknown metadata frame version {frame} (only 1 exists)", offset, "value", 0,
                                      "frame version")
        api_key, pos = _uvarint(vv, pos, offset, "type")
        version, pos = _uvarint(vv, pos, offset, "version")
        msg = self.metadata[family].get(api_key)
        if msg is None or version not in msg.versions:
            what = f"unknown {family} record type {api_key}" if msg is None else f"unknown {msg.name} version {version}"
            return _unknown(family, api_key, what, key, value, offset, "value", on_unknown)
        vdict = _body(msg, vv, pos, version, offset, "value")
        return DecodedRecord(family, api_key, None, None, None, msg.name, version, vdict)

    def _control(self, family: str, key: Any, value: Any, offset: int, on_unknown: OnUnknown) -> DecodedRecord:
        if key is None:
            raise InternalRecordError("a control record without a key", offset, "key")
        kv = memoryview(key).cast("B")
        kversion = _int16(kv, offset, "key", "version")
        if len(kv) < 4:
            raise InternalRecordError(f"a control record key of {len(kv)} bytes (4 expected)", offset, "key", 0)
        ctype = int.from_bytes(kv[2:4], "big", signed=True)
        name = CONTROL_TYPES.get(ctype)
        if kversion != 0 or name is None:
            what = f"unknown control record key version {kversion}" if kversion else f"unknown control type {ctype}"
            return _unknown(family, ctype, what, key, value, offset, "key", on_unknown)
        key_dict = {"version": kversion, "type": ctype}
        if value is None:
            raise InternalRecordError("a control record without a value", offset, "value")
        vv = memoryview(value).cast("B")
        vversion = _int16(vv, offset, "value", "version")
        if name == "EndTxnMarker":
            if len(vv) < 6:
                raise InternalRecordError(f"a transaction marker value of {len(vv)} bytes (6 expected)",
                                          offset, "value", 0)
            # Kafka reads the coordinator epoch and ignores what follows (room for later versions)
            epoch = int.from_bytes(vv[2:6], "big", signed=True)
            return DecodedRecord(family, ctype, "ControlRecordType", 0, key_dict, name, vversion,
                                 {"coordinator_epoch": epoch})
        try:
            msg: Message | None = self.schema[name]
        except KeyError:
            msg = None
        if msg is None or vversion not in msg.versions:
            return _unknown(family, ctype, f"unknown {name} version {vversion}", key, value, offset, "value",
                            on_unknown)
        vdict = _body(msg, vv, 2, vversion, offset, "value")
        return DecodedRecord(family, ctype, "ControlRecordType", 0, key_dict, name, vversion, vdict)


def _int16(view: memoryview, offset: int, part: str, field: str) -> int:
    if len(view) < 2:
        raise InternalRecordError(f"{len(view)} bytes: no room for the int16 {field}", offset, part, 0, field)
    return int.from_bytes(view[0:2], "big", signed=True)


def _uvarint(view: memoryview, pos: int, offset: int, field: str) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= len(view):
            raise InternalRecordError(f"the {field} varint runs past the end", offset, "value", start, field)
        b = view[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise InternalRecordError(f"the {field} varint is longer than 5 bytes", offset, "value", start, field)
    if result > 0x7FFF:
        raise InternalRecordError(f"the {field} {result} does not fit a short", offset, "value", start, field)
    return result, pos


def _body(msg: Message, view: memoryview, pos: int, version: int, offset: int, part: str) -> dict[str, Any]:
    try:
        out, end = msg.decode_from(view, pos, version)
    except ProtocolError as exc:
        raise InternalRecordError(f"{msg.name} v{version}: {exc.reason}", offset, part, exc.position,
                                  exc.path) from exc
    if end != len(view):
        raise InternalRecordError(f"{len(view) - end} bytes left over after {msg.name} v{version}", offset, part, end)
    return out


def _unknown(family: str, rtype: int, what: str, key: Any, value: Any, offset: int, part: str,
             on_unknown: OnUnknown) -> DecodedRecord:
    if on_unknown == "raise":
        raise InternalRecordError(what + " (on_unknown='raw' keeps the bytes)", offset, part, 0)
    return DecodedRecord(family, rtype, None, None, None, None, None, None, True,
                         None if key is None else bytes(key), None if value is None else bytes(value))


@functools.lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The registry over kbatch's bundled definitions (built once)."""
    return Registry(Schema.from_directory(DEFINITIONS))


def family_of(topic: str) -> str | None:
    """The family of an internal topic's records, or None for a topic that is not one.

    >>> family_of("__consumer_offsets"), family_of("orders")
    ('group', None)
    """
    return FAMILIES.get(topic)


def decode_key_value(
    family: str,
    key: Any,
    value: Any,
    *,
    control: bool = False,
    offset: int = -1,
    on_unknown: OnUnknown = "raise",
    registry: Registry | None = None,
) -> DecodedRecord:
    """Decode the key and value of one record of an internal topic.

    Parameters
    ----------
    family : str
        ``"group"``, ``"transaction"``, ``"share"``, ``"metadata"`` or
        ``"remote_log"``; a topic name from :data:`FAMILIES` is accepted too.
    key, value : bytes-like or None
        The record's key and value; a None value of a coordinator record is a
        tombstone.
    control : bool
        The record is in a control batch (transaction markers, KRaft control
        records).
    offset : int
        The record's offset, named in errors.
    on_unknown : {"raise", "raw"}
        An unknown record type or version raises :class:`InternalRecordError`,
        or comes back with ``unknown=True`` and its raw bytes.
    registry : Registry, optional
        Other definitions (``Registry(Schema.from_directory(...))``); default
        kbatch's own.

    Returns
    -------
    DecodedRecord

    Examples
    --------
    >>> key = bytes.fromhex("0001 0001 67 0001 74 00000003")
    >>> value = bytes.fromhex("0003 000000000000002a ffffffff 0000 00000000000003e8")
    >>> r = decode_key_value("group", key, value)
    >>> r.key_type, r.key, r.value_type, r.value_version
    ('OffsetCommitKey', {'group': 'g', 'topic': 't', 'partition': 3}, 'OffsetCommitValue', 3)
    >>> r.value
    {'offset': 42, 'leader_epoch': -1, 'metadata': '', 'commit_timestamp': 1000}
    >>> decode_key_value("group", key, None).value is None   # a tombstone
    True
    >>> decode_key_value("group", b"\\x00\\x63", None, offset=7)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    kbatch.internal._errors.InternalRecordError: unknown group coordinator record type 99 ... (offset 7, key byte 0)
    """
    family = FAMILIES.get(family, family)
    return (registry or default_registry()).decode(family, key, value, control=control, offset=offset,
                                                   on_unknown=on_unknown)
