"""lz4 (codec 3): Kafka's LZ4 frame into the arena and out; its header checksum (:func:`lz4_hc`).

Reads frames of independent blocks only, as KafkaLZ4BlockInputStream does (frames with block
or content checksums through liblz4, which verifies them); writes 64 KiB blocks with the fast
compressor at Kafka's default level 9 and LZ4 HC at the others, no checksums.

LZ4 frame (lz4_Frame_format.md v1.6, as KafkaLZ4BlockInputStream reads it)::

    magic 0x184D2204 LE | FLG | BD | [content size: 8 LE] | HC
    block = size:uint32 LE (bit 31 set: stored uncompressed) | data | [checksum: 4 LE]
    end   = 0x00000000 | [content checksum: 4 LE]          (nothing may follow it)
    FLG   = version(2)=01 | B.Indep(1)=1 | B.Checksum | C.Size | C.Checksum | reserved(2)=0
    HC    = (xxh32(FLG..last descriptor byte, seed 0) >> 8) & 0xFF
            KAFKA-3160: Kafka < 0.10 hashed the magic number too; Java ignores HC for magic 0.
"""

from __future__ import annotations

import functools
import struct
from typing import Final

import cramjam
import lz4.block  # type: ignore[import-untyped]
import lz4.frame  # type: ignore[import-untyped]

from kbatch.errors import CorruptRecordError

from ._arena import FIELD, STREAM_STEP, Arena, corrupt, too_big

__all__ = ["lz4_compress", "lz4_hc", "unlz4"]


_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_64K: Final = 4  # Lz4BlockOutputStream.BLOCKSIZE_64KB
# CompressionType.LZ4.defaultLevel(); Lz4BlockOutputStream uses the *fast* compressor
# at this level and LZ4 HC at any other.
_LZ4_DEFAULT_LEVEL: Final = 9
_UNCOMPRESSED_BIT: Final = 0x80000000

_P1: Final = 0x9E3779B1
_P2: Final = 0x85EBCA77
_P3: Final = 0xC2B2AE3D
_P4: Final = 0x27D4EB2F
_P5: Final = 0x165667B1
_M32: Final = 0xFFFFFFFF


def _xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: enough for an LZ4 frame descriptor."""
    assert len(data) < 16
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * _P4 & _M32
        i += 4
    while i < len(data):
        h = (h + data[i] * _P5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _P1 & _M32
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    h ^= h >> 16
    return h


@functools.lru_cache(maxsize=64)
def lz4_hc(header: bytes) -> int:
    """The LZ4 frame descriptor's header checksum byte: ``(xxh32(header, seed 0) >> 8) & 0xFF``."""
    return (_xxh32_short(header) >> 8) & 0xFF


_LE_U32: Final = struct.Struct("<I")


@functools.lru_cache(maxsize=64)
def _lz4_header(header: bytes, magic: int) -> tuple[int, bool]:
    """Validate an LZ4 frame header (magic .. HC) as Lz4BlockInputStream does.

    Returns the maximum block size and whether the frame carries checksums.
    """
    flg = header[4]
    bd = header[5]
    if flg & 0x03:
        corrupt("lz4 frame FLG reserved bits must be 0")
    if flg >> 6 != 1:
        corrupt(f"lz4 frame version {flg >> 6} is unsupported (expected 1)")
    if not flg & 0x20:
        corrupt("lz4 frame uses dependent (linked) blocks, which Kafka rejects")
    if bd & 0x8F:
        corrupt("lz4 frame BD reserved bits must be 0")
    bsv = (bd >> 4) & 7
    if bsv < 4:
        corrupt(f"lz4 frame block size value {bsv} is invalid (expected 4..7)")
    # magic 0: Java (ignoreFlagDescriptorChecksum) skips HC, KAFKA-3160.
    if magic != 0 and header[-1] != lz4_hc(header[4:-1]):
        corrupt("lz4 frame descriptor checksum mismatch")
    return 1 << (2 * bsv + 8), bool(flg & 0x14)


def unlz4(src: memoryview, arena: Arena, limit: int, magic: int) -> int:
    n_src = len(src)
    if n_src < 7:
        corrupt("lz4 frame is truncated (header)")
    pos = 15 if src[4] & 0x08 else 7  # content size: skipped, as Java does
    header = bytes(src[:pos])
    if header[:4] != _LZ4_MAGIC:
        corrupt("lz4 frame does not start with magic 0x184D2204")
    if n_src < pos:
        corrupt("lz4 frame is truncated (header)")
    max_block, checksums = _lz4_header(header, 0 if magic == 0 else 2)
    if checksums:
        # Block or content checksums need xxh32 over the data: liblz4 checks them
        # (and, unlike Java, also a content size field when the frame has one).
        return _unlz4_liblz4(src, pos, arena, limit)
    start = arena.size
    block = 0
    unpack = _LE_U32.unpack_from
    while True:
        if n_src - pos < 4:
            corrupt(f"lz4 frame is truncated (block {block} size)")
        word = unpack(src, pos)[0]
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:  # EndMark
            _lz4_nothing_after(n_src, pos)
            return arena.size - start
        if size > max_block:
            corrupt(
                f"lz4 block {block} size {size} exceeds the frame's maximum {max_block}"
            )
        if size > n_src - pos:
            corrupt(f"lz4 frame is truncated (block {block} needs {size} bytes)")
        data = src[pos : pos + size]
        pos += size
        room = limit - arena.size
        if word & _UNCOMPRESSED_BIT:
            if size > room:
                too_big(limit)
            arena.append(data)
        else:
            cap = min(max_block, room)
            with arena.reserve(cap) as out:
                try:
                    n = int(
                        cramjam.lz4.decompress_block_into(data, out, output_len=cap)
                    )
                except cramjam.DecompressionError as e:
                    if cap < max_block and _lz4_block_size(data, max_block) > room:
                        too_big(limit)
                    corrupt(f"lz4 block {block} is corrupt: {e}")
            arena.commit(n)
        block += 1


def _lz4_nothing_after(n_src: int, end: int) -> None:
    """Raise if bytes follow the frame that ends at ``end``: a second frame or garbage.

    Java's Lz4BlockInputStream stops at the first EndMark, so the record iterator never
    sees what follows it (records of a second frame are lost without a word); kbatch
    says so instead.
    """
    if end < n_src:
        raise CorruptRecordError(
            f"lz4 payload has {n_src - end} bytes after its frame's end mark "
            f"(a second frame or garbage, which Java's reader would drop)",
            end,
            field=FIELD,
        )


def _lz4_block_size(data: memoryview, max_block: int) -> int:
    """Decompressed size of an LZ4 block (used only to tell 'too big' from 'corrupt')."""
    try:
        return len(lz4.block.decompress(data, uncompressed_size=max_block))
    except Exception:  # noqa: BLE001 - any failure means: not a valid block
        return -1


def _unlz4_liblz4(src: memoryview, pos: int, arena: Arena, limit: int) -> int:
    """Decode a frame with block/content checksums through liblz4, which verifies them.

    ``pos`` is the length of the frame's header, whose HC (checked as Java checks it, or
    not at all for magic 0) is given to liblz4 as liblz4 computes it. The rest goes in
    steps of at most 1 MiB of input and output: python-lz4 copies whatever input it has
    not consumed on every call.
    """
    start = arena.size
    n_src = len(src)
    d = lz4.frame.LZ4FrameDecompressor()
    data: object = bytes(src[: pos - 1]) + bytes((lz4_hc(bytes(src[4 : pos - 1])),))
    fed = pos  # input bytes given to liblz4
    try:
        while True:
            room = limit - arena.size
            chunk = d.decompress(data, max_length=min(STREAM_STEP, room + 1))
            if len(chunk) > room:
                too_big(limit)
            arena.append(chunk)
            if d.eof:
                _lz4_nothing_after(n_src, fed - len(d.unused_data or b""))
                return arena.size - start
            if not d.needs_input:
                data = b""
            elif fed < n_src:
                data = src[fed : fed + STREAM_STEP]
                fed += STREAM_STEP if n_src - fed > STREAM_STEP else n_src - fed
            else:
                corrupt("lz4 frame is truncated")
    except RuntimeError as e:  # python-lz4 raises RuntimeError for liblz4 errors
        corrupt(f"lz4 frame is corrupt: {e}")


def lz4_compress(data: memoryview, level: int | None, magic: int) -> bytes:
    if level is None:
        level = _LZ4_DEFAULT_LEVEL
    if not 1 <= level <= 17:
        raise ValueError(f"lz4 compression level must be 1..17, got {level}")
    flg, bd = 0x60, _LZ4_BLOCK_64K << 4  # version 1, independent blocks; 64 KiB blocks
    descriptor = bytes((flg, bd))
    # magic 0: useBrokenFlagDescriptorChecksum, the HC old (KAFKA-3160) readers expect.
    hc = lz4_hc(_LZ4_MAGIC + descriptor if magic == 0 else descriptor)
    # Lz4BlockOutputStream: the fast compressor at the default level 9, LZ4 HC otherwise.
    if level == _LZ4_DEFAULT_LEVEL:
        # liblz4's frame compressor writes the frame above (FLG 0x60, BD 0x40) itself.
        # Its blocks are those aiokafka (cramjam) writes, and 2.5% smaller than
        # lz4.block.compress's of the same 64 KiB at the same speed (bench payloads).
        frame: bytes = lz4.frame.compress(
            data, compression_level=0, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False, block_checksum=False, content_checksum=False, store_size=False,
        )  # fmt: skip
        return frame if magic != 0 else frame[:6] + bytes((hc,)) + frame[7:]
    parts = [_LZ4_MAGIC, descriptor, bytes((hc,))]
    pack = struct.Struct("<I").pack
    step = 1 << (2 * _LZ4_BLOCK_64K + 8)
    for i in range(0, len(data), step):
        raw = data[i : i + step]
        block = lz4.block.compress(raw, store_size=False, mode="high_compression", compression=level)
        if len(block) >= len(raw):
            parts.append(pack(len(raw) | _UNCOMPRESSED_BIT))
            parts.append(bytes(raw))
        else:
            parts.append(pack(len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)
