"""Legacy message set writer (magic 0 and 1), for test data aimed at old consumers.

Plain Python on purpose: nobody produces legacy message sets in bulk any more, so clarity
beats speed here. Reading them is :mod:`kbatch.codec._core`'s job.

The wire grammar (all integers big-endian), as Apache Kafka's Java client writes it
(``LegacyRecord``, ``AbstractLegacyRecordBatch``, ``MemoryRecordsBuilder``)::

    MessageSet => [Entry]                        back to back, no count

    Entry =>                             byte offset
        offset           int64             0   absolute, or see "compressed" below
        size             int32             8   bytes after this field
        crc              uint32           12   CRC-32 (IEEE, zlib.crc32) of magic .. end
        magic            int8             16   0 or 1
        attributes       int8             17   bits 0-2 codec (0 none, 1 gzip, 2 snappy,
                                               3 lz4; zstd is not allowed before magic 2),
                                               bit 3 LogAppendTime (magic 1 only)
        timestamp        int64            18   magic 1 only; milliseconds since the epoch
        keyLength        int32                 -1 = null key
        key              bytes
        valueLength      int32                 -1 = null value
        value            bytes

    Compressed ("wrapper") entry: attributes carry the codec, the key is null and the
    value is the compressed bytes of an inner MessageSet of uncompressed entries:
        magic 0: inner offsets are absolute;
        magic 1: inner offsets are relative, 0 .. n-1;
        both:    the wrapper's offset is the absolute offset of the last inner entry,
                 so a reader computes absolute = wrapper offset - last inner + inner.
        magic 1: the wrapper's timestamp is the largest inner timestamp; with
                 LogAppendTime (bit 3 on the wrapper) it overrides the inner ones.

    lz4 with magic 0 writes the frame header checksum Kafka < 0.10 wrote (KAFKA-3160),
    which old readers insist on; :func:`kbatch.codec._compression.compress` takes care of it.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from kbatch.codec import _compression
from kbatch.errors import UnsupportedError

__all__ = ["encode_legacy"]

#: What a key or value may be: any bytes-like object, or None for null.
BytesLike: TypeAlias = bytes | bytearray | memoryview

_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_HEADER: Final = struct.Struct(">qiI")  # offset, size, crc
_MAGIC_ATTRS: Final = struct.Struct(">bb")  # magic 0
_MAGIC_ATTRS_TS: Final = struct.Struct(">bbq")  # magic 1: and the timestamp
_LENGTH: Final = struct.Struct(">i")
_NULL: Final = _LENGTH.pack(-1)
_WRAPPER: Final = -1  # "index" of the compressed wrapper, for error messages

_LOG_APPEND_TIME: Final = 0x08
_LEGACY_CODECS: Final = {
    _compression.NONE,
    _compression.GZIP,
    _compression.SNAPPY,
    _compression.LZ4,
}


def _name(index: int) -> str:
    return "the compressed wrapper" if index == _WRAPPER else f"record {index}"


def _bytes_field(data: BytesLike | None, field: str, index: int) -> bytes:
    """``length:int32`` + bytes, or ``-1`` for None."""
    if data is None:
        return _NULL
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{field} of {_name(index)} must be bytes-like or None, got {type(data).__name__}")
    raw = bytes(data)  # no copy for bytes
    if len(raw) > _INT32_MAX:
        raise ValueError(f"{field} of {_name(index)} is {len(raw)} bytes; a legacy message holds at most 2**31-1")
    return _LENGTH.pack(len(raw)) + raw


def _entry(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: BytesLike | None,
    value: BytesLike | None,
    index: int,
) -> bytes:
    """One whole entry: offset, size, CRC and the message the CRC covers.

    ``index`` is the record's position in the input (or ``_WRAPPER``), for errors.
    """
    head = _MAGIC_ATTRS_TS.pack(magic, attributes, timestamp) if magic == 1 else _MAGIC_ATTRS.pack(magic, attributes)
    key_field = _bytes_field(key, "key", index)
    value_field = _bytes_field(value, "value", index)
    size = 4 + len(head) + len(key_field) + len(value_field)
    if size > _INT32_MAX:
        raise ValueError(f"{_name(index)} is {size} bytes; an entry holds at most 2**31-1")
    crc = zlib.crc32(value_field, zlib.crc32(key_field, zlib.crc32(head)))
    return b"".join((_HEADER.pack(offset, size, crc), head, key_field, value_field))


def _check_length(seq: Sequence[object] | npt.NDArray[np.integer] | None, n: int, name: str) -> None:
    if seq is not None and len(seq) != n:
        raise ValueError(f"{name} has {len(seq)} items but values has {n}")


def _timestamp(item: object, now: int, index: int) -> int:
    if item is None:
        return now
    if not isinstance(item, (int, np.integer)) or isinstance(item, bool):
        raise TypeError(f"timestamp {index} must be an int or None, got {type(item).__name__}")
    ts = int(item)
    if not _INT64_MIN <= ts <= _INT64_MAX:
        raise ValueError(f"timestamp {index} ({ts}) does not fit in int64")
    return ts


def encode_legacy(
    values: Iterable[BytesLike | None],
    keys: Iterable[BytesLike | None] | None = None,
    *,
    timestamps: Sequence[int | None] | npt.NDArray[np.integer] | None = None,
    magic: int = 1,
    compression: int = 0,
    compression_level: int | None = None,
    base_offset: int = 0,
    timestamp_type: int = 0,
) -> bytes:
    """Encode records as a legacy message set (magic 0 or 1), as a Java client would.

    Parameters
    ----------
    values : iterable of bytes-like or None
        One value per record (None is a null value).
    keys : iterable of bytes-like or None, optional
        One key per record; None means every key is null.
    timestamps : sequence of int or None, or int64 array, optional
        Milliseconds since the epoch per record (magic 1); None, or a None item, means
        now. Ignored for magic 0, which has no timestamps.
    magic : {0, 1}
        Message format version.
    compression : int
        Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4. 4 (zstd) raises
        :class:`~kbatch.errors.UnsupportedError`, as Java does before magic 2.
    compression_level : int, optional
        Codec level (Kafka's producer default when None); must be None for no
        compression and for snappy.
    base_offset : int
        Offset of the first record; the others follow on.
    timestamp_type : {0, 1}
        0 CreateTime, 1 LogAppendTime (magic 1 only). With compression, LogAppendTime is
        marked on the wrapper only, whose timestamp (the largest) readers then give to
        every record; uncompressed entries each carry the bit and their own timestamp.

    Returns
    -------
    bytes
        Uncompressed: one entry per record at offsets ``base_offset + i``. Compressed:
        one wrapper entry holding all records (nothing at all for no records, since Java
        rejects an empty wrapper). Every entry carries its CRC-32.

    Raises
    ------
    UnsupportedError
        zstd with magic 0 or 1, or an unknown codec id.
    ValueError
        Bad magic, timestamp type, level, offsets past int64, or lengths mismatched.
    TypeError
        A key or value that is not bytes-like or None.

    Examples
    --------
    >>> raw = encode_legacy([b"v"], [b"k"], timestamps=[1000], magic=1)
    >>> offset, size, crc, magic, attributes, timestamp = struct.unpack_from(">qiIbbq", raw)
    >>> len(raw), offset, size, magic, attributes, timestamp
    (36, 0, 24, 1, 0, 1000)

    Compressed, the records share one wrapper entry at the last record's offset, stamped
    with the largest timestamp:

    >>> raw = encode_legacy([b"a", b"b"], timestamps=[5, 7], compression=1, base_offset=10)
    >>> offset, size, crc, magic, attributes, timestamp = struct.unpack_from(">qiIbbq", raw)
    >>> offset, magic, attributes, timestamp
    (11, 1, 1, 7)
    >>> encode_legacy([b"v"], magic=0, compression=4)
    Traceback (most recent call last):
    ...
    kbatch.errors.UnsupportedError: zstd not allowed with magic 0 (zstd needs magic 2) (field attributes)
    """
    if magic not in (0, 1):
        raise ValueError(f"magic must be 0 or 1 for a legacy message set, got {magic!r}")
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), got {timestamp_type!r}")
    if magic == 0 and timestamp_type != 0:
        raise ValueError("magic 0 has no timestamps, so no LogAppendTime")
    if compression == _compression.ZSTD:
        raise UnsupportedError(f"zstd not allowed with magic {magic} (zstd needs magic 2)", field="attributes")
    if compression not in _LEGACY_CODECS:
        raise UnsupportedError(
            f"unknown compression codec id {compression!r} (expected 0..3 for magic {magic})",
            field="attributes",
        )
    if compression == _compression.NONE and compression_level is not None:
        raise ValueError("codec none has no compression level")

    if not isinstance(values, (list, tuple)):
        values = list(values)
    if keys is not None and not isinstance(keys, (list, tuple)):
        keys = list(keys)
    n = len(values)
    _check_length(keys, n, "keys")
    _check_length(timestamps, n, "timestamps")
    if base_offset < _INT64_MIN or base_offset + max(n - 1, 0) > _INT64_MAX:
        raise ValueError(f"offsets {base_offset}..{base_offset + n - 1} do not fit in int64")
    if n == 0:
        return b""

    now = time.time_ns() // 1_000_000
    stamps = [0] * n  # magic 0: no timestamp field at all
    if magic == 1:
        stamps = [_timestamp(None if timestamps is None else timestamps[i], now, i) for i in range(n)]
    key_list: Sequence[BytesLike | None] = [None] * n if keys is None else keys

    if compression == _compression.NONE:
        attributes = _LOG_APPEND_TIME if timestamp_type == 1 else 0
        return b"".join(
            _entry(base_offset + i, magic, attributes, stamps[i], key_list[i], values[i], i) for i in range(n)
        )

    # Inner entries: uncompressed, CreateTime; offsets relative (0..n-1) for magic 1.
    first_inner = 0 if magic == 1 else base_offset
    inner = b"".join(_entry(first_inner + i, magic, 0, stamps[i], key_list[i], values[i], i) for i in range(n))
    wrapper_value = _compression.compress(compression, inner, compression_level, magic=magic)
    attributes = compression | (_LOG_APPEND_TIME if timestamp_type == 1 else 0)
    last_offset = base_offset + n - 1
    return _entry(last_offset, magic, attributes, max(stamps), None, wrapper_value, _WRAPPER)
