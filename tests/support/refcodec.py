"""An independent, deliberately plain Python RecordBatch writer for tests.

It can write what kbatch's encoder never would (offset gaps, odd deltas, bad
lengths), so the decoder can be tested on every shape the format allows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c


def zigzag_varint(value: int, bits: int = 32) -> bytes:
    v = (value << 1) ^ (value >> (bits - 1))
    v &= (1 << bits) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varlong(value: int) -> bytes:
    return zigzag_varint(value, 64)


def _bytes_field(b: bytes | None) -> bytes:
    return zigzag_varint(-1) if b is None else zigzag_varint(len(b)) + b


@dataclass
class Rec:
    value: bytes | None = b""
    key: bytes | None = None
    timestamp_delta: int = 0
    offset_delta: int | None = None  # default: position in batch
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    attributes: int = 0

    def body(self, index: int) -> bytes:
        od = index if self.offset_delta is None else self.offset_delta
        out = bytes([self.attributes & 0xFF]) + varlong(self.timestamp_delta) + zigzag_varint(od)
        out += _bytes_field(self.key) + _bytes_field(self.value) + zigzag_varint(len(self.headers))
        for k, v in self.headers:
            out += zigzag_varint(len(k)) + k + _bytes_field(v)
        return out

    def encode(self, index: int) -> bytes:
        body = self.body(index)
        return zigzag_varint(len(body)) + body


def batch(
    records: list[Rec] | bytes,
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = 1_600_000_000_000,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    record_count: int | None = None,
    magic: int = 2,
    crc: int | None = None,
) -> bytes:
    """One batch. ``records`` may be raw payload bytes (then give record_count)."""
    if isinstance(records, bytes):
        payload, n = records, record_count or 0
    else:
        payload = b"".join(r.encode(i) for i, r in enumerate(records))
        n = len(records) if record_count is None else record_count
        if last_offset_delta is None and records:
            last = records[-1]
            last_offset_delta = len(records) - 1 if last.offset_delta is None else last.offset_delta
    if last_offset_delta is None:
        last_offset_delta = max(n - 1, 0)
    if max_timestamp is None:
        max_timestamp = base_timestamp
    after_crc = struct.pack(
        ">hiqqqhii", attributes, last_offset_delta, base_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, n,
    ) + payload
    if crc is None:
        crc = crc32c.crc32c(after_crc)
    body = struct.pack(">ibI", leader_epoch, magic, crc) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def control_record(kind: int, coordinator_epoch: int = 0, version: int = 0) -> Rec:
    return Rec(key=struct.pack(">hh", version, kind), value=struct.pack(">hi", 0, coordinator_epoch))


# ---------------------------------------------------------------- legacy (magic 0/1)


def legacy_message(value: bytes | None, key: bytes | None = None, *, magic: int = 1, attributes: int = 0,
                   timestamp: int = 1_500_000_000_000, crc: int | None = None) -> bytes:
    """crc | magic | attributes | [timestamp] | key | value (CRC32/IEEE over magic .. end)."""
    import zlib

    def field(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic == 1 else b"")
    body += field(key) + field(value)
    return struct.pack(">I", zlib.crc32(body) if crc is None else crc) + body


def legacy_entry(offset: int, message: bytes) -> bytes:
    return struct.pack(">qi", offset, len(message)) + message


def legacy_wrapper(offset: int, inner: bytes, codec: int, *, magic: int = 1, attributes: int = 0,
                   timestamp: int = 1_500_000_000_000) -> bytes:
    """A compressed wrapper entry holding the message set ``inner``."""
    from kbatch.codec import _compression

    packed = _compression.compress(codec, inner, None, magic=magic) if codec != 4 else b"\0" * 8
    return legacy_entry(offset, legacy_message(packed, magic=magic, attributes=codec | attributes,
                                               timestamp=timestamp))
