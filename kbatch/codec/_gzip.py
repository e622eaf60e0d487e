"""gzip (codec 1): a payload's members into the arena, one member out.

Reads as java.util.zip.GZIPInputStream does (RFC 1952, several members, bytes after a complete
member that do not start another ignored); a single large member is inflated by cramjam
straight into the arena, at its trailer's word (ISIZE). Writes one member at level 6
(``-1`` means 6), as GZIPOutputStream does, with libdeflate.
"""

from __future__ import annotations

import zlib
from typing import Final

import cramjam
import deflate

from ._arena import STREAM_STEP, Arena, corrupt, too_big

__all__ = ["gunzip", "gzip_compress"]


# Deflate cannot do better than 1032:1 (a 258-byte match per 2 bits); a gzip trailer
# claiming more than this per compressed byte is not believed.
_DEFLATE_MAX_RATIO: Final = 1032
_GZIP_MAGIC: Final = b"\x1f\x8b\x08"
# Below this output size zlib's lower call overhead beats cramjam's faster inflate.
_CRAMJAM_GZIP_MIN: Final = 8 * 1024


def _cramjam_gunzip(src: memoryview, arena: Arena, room: int) -> int:
    """Inflate every member into the next ``room`` bytes of the arena with cramjam (it checks
    each member's CRC-32 and ISIZE); the bytes written, not yet committed, or -1 if cramjam
    refuses the payload or it does not fit."""
    with arena.reserve(room) as out:
        try:
            return int(cramjam.gzip.decompress_into(src, out))
        except cramjam.DecompressionError:
            return -1


def gunzip(src: memoryview, arena: Arena, limit: int) -> int:
    n_src = len(src)
    if n_src == 0:
        corrupt("gzip payload is empty")
    # Fast path for large payloads: one member whose trailer (ISIZE) tells the size,
    # inflated by cramjam straight into the arena. Anything unusual (several members,
    # trailing bytes, corruption) falls through.
    if n_src >= 18 and bytes(src[:3]) == _GZIP_MAGIC:
        isize = int.from_bytes(src[n_src - 4 :], "little")
        tried = _CRAMJAM_GZIP_MIN <= isize <= limit - arena.size and isize <= _DEFLATE_MAX_RATIO * n_src
        if tried and _cramjam_gunzip(src, arena, isize) == isize:
            arena.commit(isize)
            return isize
        # Several members (the trailer is the last one's size): the fast path failed, or
        # the payload is longer than one member of that size can be (deflate's stored
        # blocks add 5 bytes per 65,535; the header and trailer 18). cramjam inflates
        # them all straight into room for the most they can hold (1032:1, within the
        # limit; pages never written are not memory). It refuses what GZIPInputStream
        # would stop at (bytes after a member that do not start another) and output
        # past the room; the zlib loop then decides what it is.
        if tried or n_src > isize + 5 * (isize // 65535 + 1) + 18:
            n = _cramjam_gunzip(src, arena, max(0, min(_DEFLATE_MAX_RATIO * n_src, limit - arena.size)))
            if n >= 0:
                arena.commit(n)
                return n
    return _gunzip_stream(src, arena, limit)


def _gunzip_stream(src: memoryview, arena: Arena, limit: int) -> int:
    """Decode concatenated gzip members as java.util.zip.GZIPInputStream does.

    After a complete member, bytes that do not start another member are ignored, as
    GZIPInputStream ignores them.
    """
    start = arena.size
    data: object = src
    member = 0
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            while True:
                room = limit - arena.size
                want = min(STREAM_STEP, room + 1)
                chunk = d.decompress(data, want)  # type: ignore[arg-type]
                if len(chunk) > room:
                    too_big(limit)
                arena.append(chunk)
                if d.eof:
                    break
                data = d.unconsumed_tail
                if not data and len(chunk) < want:
                    corrupt(f"gzip member {member} is truncated")
        except zlib.error as e:
            corrupt(f"gzip member {member} is corrupt: {e}")
        rest = d.unused_data
        if len(rest) < 10 or rest[:3] != _GZIP_MAGIC:
            return arena.size - start
        data = rest
        member += 1


def gzip_compress(data: memoryview, level: int | None) -> bytes:
    if level is None or level == -1:
        level = 6  # Deflater.DEFAULT_COMPRESSION, GzipCompression.DEFAULT_LEVEL
    if not 1 <= level <= 9:
        raise ValueError(f"gzip compression level must be 1..9 or -1, got {level}")
    # libdeflate: one gzip member, as GZIPOutputStream writes; at level 6 1.6x faster than
    # zlib here, for about the same size (bench/test_bench_compression.py).
    return bytes(deflate.gzip_compress(data, level))  # (a bytearray: a copy, ~1% of the time)
