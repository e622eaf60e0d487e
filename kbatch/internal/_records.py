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
    control records (control batches of any topic; Kafka's ControlRecordType,
    EndTransactionMarker, ControlRecordUtils, MemoryRecordsBuilder.append*Message)
        key   = int16 version (>= 0; a newer one is read as 0), int16 controlType,
                anything after (a newer key version's fields, ignored as Kafka does)
        value, controlType 0 ABORT, 1 COMMIT (EndTxnMarker)
              = int16 version (>= 0), int32 coordinatorEpoch, anything after (ignored)
        value, controlType 2 LeaderChangeMessage, 3 SnapshotHeaderRecord,
               4 SnapshotFooterRecord, 5 KRaftVersionRecord, 6 VotersRecord
              = the message body at version 0, no version prefix (MessageUtil.toByteBuffer);
                the body's own first field is its int16 ``Version``, which kbatch reports
                as the value version

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

from kbatch._wire import read_uvarint
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
    "decode_control_value",
    "default_registry",
    "encode_key_value",
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
        if len(kv) < 4:
            raise InternalRecordError(f"a control record key of {len(kv)} bytes (at least 4 expected)", offset,
                                      "key", 0)
        kversion = _int16(kv, offset, "key", "version")
        if kversion < 0:
            raise InternalRecordError(f"a control record key with version {kversion}", offset, "key", 0, "version")
        ctype = int.from_bytes(kv[2:4], "big", signed=True)
        name = CONTROL_TYPES.get(ctype)
        if name is None:
            return _unknown(family, ctype, f"unknown control type {ctype}", key, value, offset, "key", on_unknown)
        key_dict = {"version": kversion, "type": ctype}
        try:
            vversion, vdict = self.control_value(ctype, value, offset)
        except _UnknownVersion as exc:
            return _unknown(family, ctype, str(exc), key, value, offset, "value", on_unknown)
        return DecodedRecord(family, ctype, "ControlRecordType", 0, key_dict, name, vversion, vdict)

    def control_value(self, ctype: int, value: Any, offset: int = -1) -> tuple[int, dict[str, Any]]:
        """The value of a control record of type ``ctype``: ``(version, fields)``.

        Read as Kafka reads it (see the module's grammar): a transaction marker's
        ``{"coordinator_epoch": ...}`` and its leading version; a KRaft control
        message decoded at version 0 and its own ``Version`` field. Raises
        :class:`InternalRecordError` for bytes that do not decode (a KRaft
        message with bytes left over included) and for an unknown version.
        """
        name = CONTROL_TYPES.get(ctype)
        if name is None:
            raise _UnknownVersion(f"unknown control type {ctype}", offset, "key", 2)
        if value is None:
            raise InternalRecordError(f"a {name} control record without a value", offset, "value")
        vv = memoryview(value).cast("B")
        if name == "EndTxnMarker":
            if len(vv) < 6:
                raise InternalRecordError(f"a transaction marker value of {len(vv)} bytes (at least 6 expected)",
                                          offset, "value", 0)
            version = _int16(vv, offset, "value", "version")
            if version < 0:
                raise InternalRecordError(f"a transaction marker with version {version}", offset, "value", 0,
                                          "version")
            # Kafka reads the coordinator epoch and ignores what follows (room for later versions)
            return version, {"coordinator_epoch": int.from_bytes(vv[2:6], "big", signed=True)}
        if name not in self.schema:
            raise _UnknownVersion(f"no definition of {name}", offset, "value", 0)
        msg = self.schema[name]
        if 0 not in msg.versions:
            raise _UnknownVersion(f"{name} has no version 0, the version Kafka reads it at", offset, "value", 0)
        vdict = _body(msg, vv, 0, 0, offset, "value")
        version = int(vdict.get("version", 0))
        if version not in msg.versions:
            raise _UnknownVersion(f"unknown {name} version {version} (its Version field)", offset, "value", 0)
        return version, vdict

    def encode(self, family: str, type_name: str, key: dict[str, Any] | None, value: dict[str, Any] | None,
               version: int, control: bool = False) -> tuple[bytes | None, bytes | None]:
        """See :func:`encode_key_value`."""
        if control:
            return self._encode_control(type_name, value, version)
        if family in self.metadata:
            msg = self.schema[type_name]
            if value is None or msg.spec.api_key is None:
                raise ValueError(f"{type_name}: a metadata record needs a value and an apiKey")
            return None, _uvarint_bytes(1) + _uvarint_bytes(msg.spec.api_key) + _uvarint_bytes(version) + msg.encode(
                value, version)
        for rtype, (kmsg, kversion, vmsg) in sorted(self.coordinator[family].items(), reverse=True):
            if kmsg.name == type_name or (vmsg.name == type_name and rtype > 0):
                kbytes = rtype.to_bytes(2, "big") + kmsg.encode(key or {}, kversion)
                if value is None:
                    return kbytes, None
                return kbytes, version.to_bytes(2, "big") + vmsg.encode(value, version)
        raise ValueError(f"no {family} record type named {type_name!r}")


    def _encode_control(self, type_name: str, value: dict[str, Any] | None, version: int
                        ) -> tuple[bytes, bytes]:
        # type_name: "ABORT"/"COMMIT" (EndTxnMarker) or a KRaft control message's name
        names = {"ABORT": 0, "COMMIT": 1, **{n: t for t, n in CONTROL_TYPES.items() if t >= 2}}
        if type_name not in names:
            raise ValueError(f"no control record type named {type_name!r}: expected one of {sorted(names)}")
        ctype = names[type_name]
        key = (0).to_bytes(2, "big") + ctype.to_bytes(2, "big", signed=True)
        value = dict(value or {})
        if ctype < 2:
            epoch = int(value.get("coordinator_epoch", 0))
            return key, version.to_bytes(2, "big", signed=True) + epoch.to_bytes(4, "big", signed=True)
        value.setdefault("version", version)  # the message's own Version field; the body is always at v0
        return key, self.schema[type_name].encode(value, 0)


class _UnknownVersion(InternalRecordError):
    """A control record of a type or version the definitions do not know (``on_unknown`` applies)."""


def _uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int16(view: memoryview, offset: int, part: str, field: str) -> int:
    if len(view) < 2:
        raise InternalRecordError(f"{len(view)} bytes: no room for the int16 {field}", offset, part, 0, field)
    return int.from_bytes(view[0:2], "big", signed=True)


def _uvarint(view: memoryview, pos: int, offset: int, field: str) -> tuple[int, int]:
    start = pos
    result, pos = read_uvarint(view, pos, len(view))
    if result < 0:
        problem = "is longer than 5 bytes" if pos - start >= 5 else "runs past the end"
        raise InternalRecordError(f"the {field} varint {problem}", offset, "value", start, field)
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


def encode_key_value(
    family: str,
    type_name: str,
    key: dict[str, Any] | None,
    value: dict[str, Any] | None,
    *,
    version: int = 0,
    control: bool = False,
    registry: Registry | None = None,
) -> tuple[bytes | None, bytes | None]:
    """Encode a record of an internal topic: the inverse of :func:`decode_key_value`.

    Parameters
    ----------
    family : str
        As for :func:`decode_key_value`.
    type_name : str
        A key or value schema name (``"OffsetCommitKey"``, ``"GroupMetadataValue"``)
        for coordinator records, the record name (``"TopicRecord"``) for metadata.
    key, value : dict or None
        The key (coordinator records) and the value; a None value is a tombstone.
    version : int
        The value's version (metadata: the record's version; a KRaft control
        message: its ``Version`` field when ``value`` has none).
    control : bool
        A control record: ``type_name`` is ``"ABORT"``, ``"COMMIT"`` (value
        ``{"coordinator_epoch": e}``) or a KRaft control message's name
        (``"LeaderChangeMessage"``, ...); laid out as Kafka writes them (see
        :mod:`kbatch.internal._records`).

    Returns
    -------
    (bytes or None, bytes or None)
        The record's key and value.

    >>> k, v = encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": 1},
    ...                         {"offset": 5, "metadata": "", "commit_timestamp": 0}, version=3)
    >>> decode_key_value("group", k, v).value["offset"]
    5
    >>> encode_key_value("metadata", "NoOpRecord", None, {})
    (None, b'\\x01\\x14\\x00\\x00')
    >>> encode_key_value("metadata", "SnapshotFooterRecord", None, {}, control=True)
    (b'\\x00\\x00\\x00\\x04', b'\\x00\\x00\\x00')
    """
    family = FAMILIES.get(family, family)
    return (registry or default_registry()).encode(family, type_name, key, value, version, control)


def decode_control_value(ctype: int, value: Any, *, offset: int = -1,
                         registry: Registry | None = None) -> tuple[int, dict[str, Any]]:
    """The value of a control record of type ``ctype`` as Kafka reads it: ``(version, fields)``.

    >>> decode_control_value(4, b"\\x00\\x00\\x00")   # SnapshotFooterRecord: Version 0, no tagged fields
    (0, {'version': 0})
    >>> decode_control_value(1, bytes.fromhex("0000 00000007"))   # COMMIT
    (0, {'coordinator_epoch': 7})
    """
    return (registry or default_registry()).control_value(ctype, value, offset)
