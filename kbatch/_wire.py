"""Kafka's log entry and record batch layout, as named constants for Python.

The same numbers as ``kbatch/_wire.pxd`` (which the compiled modules cimport), each offset
derived from the one before it, with Java's names (``DefaultRecordBatch``, ``LegacyRecord``,
``Records``). The grammar itself is the docstring of ``kbatch/codec/_core.pyx``.

Also the names of the values a batch's ``attributes`` carry (bits 0-2 the codec, bit 3 the
timestamp type): Kafka's ids (``CompressionType``, ``TimestampType``) and its
``compression.type`` names, lower-case, written once for every Python module.

>>> from kbatch import _wire
>>> _wire.CRC_OFFSET, _wire.RECORDS_OFFSET, _wire.LOG_OVERHEAD
(17, 61, 12)
>>> _wire.CODEC_NAMES[_wire.ZSTD], _wire.CODEC_IDS["lz4"]
('zstd', 3)
>>> _wire.read_uvarint(b"\\xac\\x02", 0, 2)
(300, 2)
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BATCH_OVERHEAD",
    "CODEC_IDS",
    "CODEC_NAMES",
    "CONTROL_RECORD_TYPES",
    "CONTROL_TYPES",
    "CRC_OFFSET",
    "GZIP",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LAST_OFFSET_DELTA_OFFSET",
    "LEGACY_ATTRIBUTES_OFFSET",
    "LEGACY_CRC_OFFSET",
    "LEGACY_KEY_SIZE_OFFSET_V0",
    "LEGACY_KEY_SIZE_OFFSET_V1",
    "LEGACY_MAGIC_OFFSET",
    "LEGACY_TIMESTAMP_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "LZ4",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "NONE",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_OVERHEAD_V0",
    "RECORD_OVERHEAD_V1",
    "SNAPPY",
    "TIMESTAMP_TYPES",
    "ZSTD",
    "read_uvarint",
    "uvarint_tail",
]

# A log entry, any magic: the offset, then the number of bytes after the length field.
BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = BASE_OFFSET_OFFSET + 8
LOG_OVERHEAD: Final = LENGTH_OFFSET + 4  # baseOffset + batchLength

# RecordBatch (magic 2), from the batch's first byte.
PARTITION_LEADER_EPOCH_OFFSET: Final = LOG_OVERHEAD
MAGIC_OFFSET: Final = PARTITION_LEADER_EPOCH_OFFSET + 4  # the same place in a legacy entry
HEADER_SIZE_UP_TO_MAGIC: Final = MAGIC_OFFSET + 1
CRC_OFFSET: Final = MAGIC_OFFSET + 1
ATTRIBUTES_OFFSET: Final = CRC_OFFSET + 4  # the CRC-32C covers from here to the end
LAST_OFFSET_DELTA_OFFSET: Final = ATTRIBUTES_OFFSET + 2
BASE_TIMESTAMP_OFFSET: Final = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET: Final = BASE_TIMESTAMP_OFFSET + 8
PRODUCER_ID_OFFSET: Final = MAX_TIMESTAMP_OFFSET + 8
PRODUCER_EPOCH_OFFSET: Final = PRODUCER_ID_OFFSET + 8
BASE_SEQUENCE_OFFSET: Final = PRODUCER_EPOCH_OFFSET + 2
RECORDS_COUNT_OFFSET: Final = BASE_SEQUENCE_OFFSET + 4
RECORDS_OFFSET: Final = RECORDS_COUNT_OFFSET + 4
BATCH_OVERHEAD: Final = RECORDS_OFFSET  # the RecordBatch header

# A legacy message (magic 0 and 1), from its crc (LOG_OVERHEAD into its entry).
LEGACY_CRC_OFFSET: Final = 0
LEGACY_MAGIC_OFFSET: Final = LEGACY_CRC_OFFSET + 4  # the CRC32 covers from here to the end
LEGACY_ATTRIBUTES_OFFSET: Final = LEGACY_MAGIC_OFFSET + 1
LEGACY_TIMESTAMP_OFFSET: Final = LEGACY_ATTRIBUTES_OFFSET + 1  # magic 1 only
LEGACY_KEY_SIZE_OFFSET_V0: Final = LEGACY_ATTRIBUTES_OFFSET + 1
LEGACY_KEY_SIZE_OFFSET_V1: Final = LEGACY_TIMESTAMP_OFFSET + 8
RECORD_OVERHEAD_V0: Final = LEGACY_KEY_SIZE_OFFSET_V0 + 8  # smallest legal legacy message
RECORD_OVERHEAD_V1: Final = LEGACY_KEY_SIZE_OFFSET_V1 + 8

#: Codec ids (attributes bits 0-2).
NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4
#: Codec id -> Kafka's name for it (``compression.type``).
CODEC_NAMES: Final = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
#: Kafka's codec name -> its id (what ``compression=`` accepts; ``kbatch.COMPRESSION_CODECS``).
CODEC_IDS: Final = {name: codec for codec, name in CODEC_NAMES.items()}
#: ``timestamp_type=`` name -> attributes bit 3 (``kbatch.TIMESTAMP_TYPES``).
TIMESTAMP_TYPES: Final = {"create": 0, "log_append": 1}
#: Control record types (a control batch's record key: version int16, type int16).
CONTROL_TYPES: Final = {"abort": 0, "commit": 1}
#: Kafka's ControlRecordType (clients/.../record/ControlRecordType.java): a control record key's
#: type -> its name (0, 1: transaction markers; 2-6: KRaft's records in ``__cluster_metadata``).
CONTROL_RECORD_TYPES: Final = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                               4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}



def uvarint_tail(data: Any, pos: int, first: int, end: int) -> tuple[int, int]:
    """Finish the unsigned varint whose first byte ``first`` (> 127) was read just before ``pos``.

    The grammar (Kafka's ``ByteUtils.readUnsignedVarint``)::

        uvarint = 1 to 5 bytes, 7 bits each, least significant group first;
                  the high bit of a byte set: another byte follows

    Returns ``(value, next pos)``. The value has up to 35 bits (callers check their own
    range); it is -1 when the varint runs past ``end`` (next pos ``<=`` the first byte's
    position + 4, having read what there was) or is longer than 5 bytes (next pos: the first
    byte's position + 5). The one Python varint loop (the compiled modules have theirs in C):
    :func:`read_uvarint` starts it, the compiled protocol decoders call it after reading the
    first byte themselves.

    >>> uvarint_tail(b"\\xac\\x02", 1, 0xAC, 2)
    (300, 2)
    """
    value = first & 0x7F
    shift = 7
    while True:
        if pos >= end:
            return -1, pos
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            return -1, pos


def read_uvarint(data: Any, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at ``data[pos:end]`` (bytes or a byte memoryview): ``(value, next pos)``.

    As :func:`uvarint_tail`: up to 35 bits; -1 when truncated (next pos ``<= pos + 4``) or
    longer than 5 bytes (next pos ``pos + 5``).

    >>> read_uvarint(b"\\x01\\x80", 0, 2), read_uvarint(b"\\x80", 0, 1), read_uvarint(b"\\xff" * 6, 0, 6)
    ((1, 1), (-1, 1), (-1, 5))
    """
    if pos >= end:
        return -1, pos
    first = data[pos]
    if first < 0x80:
        return first, pos + 1
    return uvarint_tail(data, pos + 1, first, end)
