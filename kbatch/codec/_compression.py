"""The four Kafka compression codecs: decompress into a reusable arena, compress.

The core (:mod:`kbatch.codec._core`) parses batch headers itself and hands every compressed
payload to :func:`decompress_into`, which appends the decompressed bytes to one
:class:`Arena` per decode call; the records are then parsed out of the arena exactly as
out of an uncompressed payload. :func:`compress` is the encoder's half.

This module picks the codec and is the core's one way to the codecs' Python side: it also hands
it :func:`lz4_hc`, :func:`zstd_library`, :func:`zstd_c_functions` and
:func:`zstd_decompress_into`. Each codec, with its wire grammar, is a module of its own
(``_gzip``, ``_snappy``, ``_lz4``, ``_zstd``); the arena and the errors they share are ``_arena``'s.

Kafka's Java client is the behavioural reference for what is accepted and written::

    codec   attribute  reads                                         writes
    gzip    1          RFC 1952, several members (GZIPInputStream)   one member, level 6
    snappy  2          xerial framing or raw snappy (librdkafka)     xerial, 32 KiB blocks
    lz4     3          Kafka's LZ4 frame, independent blocks only    64 KiB blocks, fast
    zstd    4          RFC 8878 frames, several, content size opt.   one frame, level 3

Decompression never allocates more than ``limit`` bytes on the word of the input: every
size a payload claims is checked against ``limit`` (and against what its compressed size can
possibly produce) before the arena grows; nor does it hold more than the arena and a few
MiB (docs/DESIGN.md "Memory bound"): output goes straight into the arena or in steps of
at most 1 MiB, and zstd through libzstd's one-shot decoder, which keeps no window of its own.
All codec calls release the GIL inside the libraries (zlib, cramjam, python-lz4,
python-zstandard, libdeflate; libzstd through ctypes, which lets it go for the call).
"""

from __future__ import annotations

from typing import Final

from kbatch._wire import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from kbatch.errors import CorruptRecordError, UnsupportedError

from ._arena import Arena, too_big
from ._gzip import gunzip, gzip_compress
from ._lz4 import lz4_compress, lz4_hc, unlz4
from ._snappy import snappy_compress, unsnappy
from ._zstd import unzstd, zstd_compress, zstd_decompress_into
from ._zstd import zstd_c_functions as zstd_c_functions  # for the core's C decoder
from ._zstd import zstd_library as zstd_library  # for the core's encoder (libzstd's compressor)

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "Arena",
    "compress",
    "decompress_into",
    "lz4_hc",
    "zstd_decompress_into",
]


#: Default cap on the decompressed bytes of one ``kbatch.decode`` call: 512 MiB.
#:
#: A Java consumer's whole fetch is at most ``fetch.max.bytes`` = 50 MiB of (compressed)
#: record data by default, and Kafka payloads rarely compress better than 10:1, so a
#: legitimate default-sized fetch stays under 512 MiB, while a deflate bomb (1032:1) or a
#: zstd bomb (32768:1) stops after at most this much output.
DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 512 * 1024 * 1024


def _as_bytes_view(src: object) -> memoryview:
    try:
        mv = memoryview(src)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"a bytes-like object is required, not {type(src).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise ValueError("compressed payload must be a C-contiguous buffer")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _check_codec(codec: int, magic: int) -> None:
    if codec not in CODEC_NAMES:
        raise UnsupportedError(
            f"unknown compression codec id {codec} (expected 0..4)", field="attributes"
        )
    if codec == ZSTD and magic < 2:
        raise UnsupportedError(
            f"zstd not allowed with magic {magic} (zstd needs magic 2)",
            field="attributes",
        )


def decompress_into(
    codec: int, src: object, arena: Arena, limit: int, *, magic: int = 2
) -> int:
    """Append the decompressed form of one batch payload to ``arena``.

    Parameters
    ----------
    codec : int
        :data:`NONE`, :data:`GZIP`, :data:`SNAPPY`, :data:`LZ4` or :data:`ZSTD`.
    src : buffer
        The compressed payload, any C-contiguous buffer (read in place, not copied).
    arena : Arena
        Output; the bytes are appended after ``arena.size``.
    limit : int
        Most bytes ``arena`` may hold in total after this call.
    magic : int, optional
        Message format of the batch (0, 1 or 2). Magic 0 selects the lz4 header checksum
        rules of KAFKA-3160; zstd needs magic 2.

    Returns
    -------
    int
        Bytes appended.

    Raises
    ------
    CorruptRecordError
        The payload is corrupt or truncated, or the arena would pass ``limit``
        (``'decompressed size exceeds max_decompressed_size=N'``); ``field`` is
        ``"records"``, ``position`` the offset in ``src`` where known (bytes after an
        lz4 frame's end mark), else -1, and the caller fills in batch index. On error
        ``arena.size`` is what it was before the call (its capacity may have grown).
    UnsupportedError
        Unknown codec id, or zstd with magic 0 or 1.

    Examples
    --------
    >>> arena = Arena()
    >>> decompress_into(SNAPPY, compress(SNAPPY, b"abc" * 10), arena, 100)
    30
    >>> decompress_into(LZ4, compress(LZ4, b"x" * 200), arena, 100)
    Traceback (most recent call last):
    ...
    kbatch.errors.CorruptRecordError: decompressed size exceeds max_decompressed_size=100 (field records)
    """
    _check_codec(codec, magic)
    mv = _as_bytes_view(src)
    start = arena.size
    try:
        if codec == GZIP:
            return gunzip(mv, arena, limit)
        if codec == SNAPPY:
            return unsnappy(mv, arena, limit)
        if codec == LZ4:
            return unlz4(mv, arena, limit, magic)
        if codec == ZSTD:
            return unzstd(mv, arena, limit)
        if len(mv) > limit - arena.size:
            too_big(limit)
        arena.append(mv)
        return len(mv)
    except CorruptRecordError:
        arena.size = start  # drop a partial output: the arena is as it was
        raise


def compress(
    codec: int, data: object, level: int | None = None, *, magic: int = 2
) -> bytes:
    """Compress one batch payload the way Kafka's Java producer does.

    Parameters
    ----------
    codec : int
        :data:`NONE`, :data:`GZIP`, :data:`SNAPPY`, :data:`LZ4` or :data:`ZSTD`.
    data : buffer
        The uncompressed records.
    level : int or None, optional
        Codec level; ``None`` is Kafka's producer default: gzip 6 (``-1`` also means
        6), lz4 9 (the fast compressor; other levels 1..17 use LZ4 HC), zstd 3. Snappy
        takes none.
    magic : int, optional
        Message format the payload is for; lz4 with magic 0 writes the header checksum
        old (KAFKA-3160) readers expect.

    Returns
    -------
    bytes
        gzip: one member. snappy: xerial framing, 32 KiB blocks. lz4: Kafka's frame,
        independent 64 KiB blocks, no checksums. zstd: one frame with its content size.

    Raises
    ------
    ValueError
        Bad level for the codec (``UnsupportedError`` for an unknown codec or zstd with
        magic < 2).

    Examples
    --------
    >>> compress(LZ4, b"")
    b'\\x04"M\\x18`@\\x82\\x00\\x00\\x00\\x00'
    """
    _check_codec(codec, magic)
    mv = _as_bytes_view(data)
    if codec == GZIP:
        return gzip_compress(mv, level)
    if codec == SNAPPY:
        return snappy_compress(mv, level)
    if codec == LZ4:
        return lz4_compress(mv, level, magic)
    if codec == ZSTD:
        return zstd_compress(mv, level)
    if level is not None:
        raise ValueError("codec none has no compression level")
    return mv.tobytes()
