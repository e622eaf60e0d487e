"""snappy (codec 2): xerial-framed or raw snappy into the arena, xerial framing out.

Reads what Kafka's Java client reads (SnappyInputStream: xerial framing, streams back to back)
and a raw snappy block (librdkafka); writes xerial framing in 32 KiB blocks.

xerial framing (org.xerial.snappy.SnappyOutputStream)::

    header  = 0x82 "SNAPPY" 0x00, version:int32 BE (>= 1), compatible:int32 BE
    chunk   = length:int32 BE, raw snappy block of `length` bytes   (repeated)
"""

from __future__ import annotations

import struct
from typing import Final

import cramjam

from ._arena import Arena, corrupt, too_big

__all__ = ["snappy_compress", "unsnappy"]


_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
# A snappy copy element produces at most 64 bytes from 3 input bytes.
_SNAPPY_MAX_RATIO: Final = 22


def _unsnappy_block(block: memoryview, arena: Arena, limit: int, what: str) -> int:
    if len(block) == 0:
        corrupt(f"{what} is empty")
    try:
        n = int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as e:
        corrupt(f"{what} has no valid length header: {e}")
    if n > _SNAPPY_MAX_RATIO * len(block) + 8:
        corrupt(f"{what} claims {n} bytes from {len(block)} compressed bytes")
    if n > limit - arena.size:
        too_big(limit)
    with arena.reserve(n) as out:
        try:
            got = int(cramjam.snappy.decompress_raw_into(block, out))
        except cramjam.DecompressionError as e:
            corrupt(f"{what} is corrupt: {e}")
    if got != n:
        corrupt(f"{what} decompressed to {got} bytes, declared {n}")
    arena.commit(n)
    return n


_XERIAL_MAGIC_INT: Final = int.from_bytes(_XERIAL_MAGIC[:4], "big", signed=True)
_BE_I32: Final = struct.Struct(">i")


def unsnappy(src: memoryview, arena: Arena, limit: int) -> int:
    n_src = len(src)
    if n_src >= 16 and bytes(src[:8]) == _XERIAL_MAGIC:
        version = _BE_I32.unpack_from(src, 8)[0]
        if version < 1:  # SnappyCodec.MINIMUM_COMPATIBLE_VERSION
            corrupt(f"xerial snappy stream version {version} is not supported")
        start = arena.size
        pos = 16
        chunk = 0
        unpack = _BE_I32.unpack_from
        while pos < n_src:
            if n_src - pos < 4:
                corrupt(f"xerial snappy chunk {chunk} length is truncated")
            length = unpack(src, pos)[0]
            if (
                length == _XERIAL_MAGIC_INT
                and n_src - pos >= 16
                and bytes(src[pos : pos + 8]) == _XERIAL_MAGIC
            ):
                pos += 16  # concatenated xerial stream: SnappyInputStream reads on
                continue
            pos += 4
            if length < 0 or length > n_src - pos:
                corrupt(
                    f"xerial snappy chunk {chunk} length {length} does not fit in the "
                    f"{n_src - pos} bytes left"
                )
            _unsnappy_block(
                src[pos : pos + length], arena, limit, f"snappy chunk {chunk}"
            )
            pos += length
            chunk += 1
        return arena.size - start
    if n_src == 0:
        corrupt("snappy payload is empty")
    return _unsnappy_block(src, arena, limit, "raw snappy block")


def snappy_compress(data: memoryview, level: int | None) -> bytes:
    if level is not None:
        raise ValueError("snappy has no compression level")
    parts = [_XERIAL_HEADER]
    pack = struct.Struct(">i").pack
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK])
        parts.append(pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)
