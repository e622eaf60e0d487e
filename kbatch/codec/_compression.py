"""The four Kafka compression codecs: decompress into a reusable arena, compress.

The core (:mod:`kbatch.codec._core`) parses batch headers itself and hands every compressed
payload to :func:`decompress_into`, which appends the decompressed bytes to one
:class:`Arena` per decode call; the records are then parsed out of the arena exactly as
out of an uncompressed payload. :func:`compress` is the encoder's half.

Kafka's Java client is the behavioural reference for what is accepted and written::

    codec   attribute  reads                                         writes
    gzip    1          RFC 1952, several members (GZIPInputStream)   one member, level 6
    snappy  2          xerial framing or raw snappy (librdkafka)     xerial, 32 KiB blocks
    lz4     3          Kafka's LZ4 frame, independent blocks only    64 KiB blocks, fast
    zstd    4          RFC 8878 frames, several, content size opt.   one frame, level 3

xerial framing (org.xerial.snappy.SnappyOutputStream)::

    header  = 0x82 "SNAPPY" 0x00, version:int32 BE (>= 1), compatible:int32 BE
    chunk   = length:int32 BE, raw snappy block of `length` bytes   (repeated)

LZ4 frame (lz4_Frame_format.md v1.6, as KafkaLZ4BlockInputStream reads it)::

    magic 0x184D2204 LE | FLG | BD | [content size: 8 LE] | HC
    block = size:uint32 LE (bit 31 set: stored uncompressed) | data | [checksum: 4 LE]
    end   = 0x00000000 | [content checksum: 4 LE]          (nothing may follow it)
    FLG   = version(2)=01 | B.Indep(1)=1 | B.Checksum | C.Size | C.Checksum | reserved(2)=0
    HC    = (xxh32(FLG..last descriptor byte, seed 0) >> 8) & 0xFF
            KAFKA-3160: Kafka < 0.10 hashed the magic number too; Java ignores HC for magic 0.

zstd frame (RFC 8878)::

    magic 0xFD2FB528 LE | descriptor | [window] | [dict id] | [content size] | blocks | [xxh64/4]
    block header = 3 bytes LE: last(1) | type(2) (raw, RLE, compressed, reserved) | size(21)
    skippable frame = magic 0x184D2A5? LE | size:uint32 LE | size bytes

Decompression never allocates more than ``limit`` bytes on the word of the input: every
size a payload claims is checked against ``limit`` (and against what its compressed size can
possibly produce) before the arena grows; nor does it hold more than the arena and a few
MiB (docs/DESIGN.md "Memory bound"): output goes straight into the arena or in steps of
at most 1 MiB, and zstd through libzstd's one-shot decoder, which keeps no window of its own.
All codec calls release the GIL inside the libraries (zlib, cramjam, python-lz4,
python-zstandard, libdeflate; libzstd through ctypes, which lets it go for the call).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import struct
import threading
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn

import cramjam
import deflate
import lz4.block  # type: ignore[import-untyped]
import lz4.frame  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
import zstandard

from kbatch._wire import CODEC_NAMES, GZIP, LZ4, NONE, SNAPPY, ZSTD
from kbatch.errors import CorruptRecordError, UnsupportedError

if TYPE_CHECKING:  # typing_extensions is not a runtime dependency
    from typing_extensions import Buffer

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

_FIELD: Final = "records"


def _corrupt(reason: str) -> NoReturn:
    raise CorruptRecordError(reason, field=_FIELD)


def _too_big(limit: int) -> NoReturn:
    raise CorruptRecordError(
        f"decompressed size exceeds max_decompressed_size={limit}", field=_FIELD
    )


class Arena:
    """Growable uint8 output buffer reused across the batches of one decode call.

    Parameters
    ----------
    initial : int, optional
        Bytes to allocate up front (0 allocates on first use).
    allocate : callable, optional
        ``allocate(n)`` returns a new writable buffer of at least ``n`` bytes (uint8, one
        dimension, ``len()`` its size); default ``np.empty``. If it has a ``resize(n)``
        method, that grows it in place keeping its bytes, and raises ``ValueError`` or
        ``BufferError`` when it cannot (a view of it is alive), as ``ndarray.resize`` does.
        kbatch's decoder passes one whose blocks grow by ``mremap`` and reuse the pages
        of a previous decode's arena.

    Notes
    -----
    Capacity grows geometrically (at least doubling), in place when no view of the buffer
    is alive (then the used bytes are not copied, and with kbatch's decoder blocks not
    even held twice), else by copying into a new buffer; pages the codecs never write are
    not touched. Give ``initial`` when the output size is roughly known (e.g. a few times
    the compressed input, capped by the limit): it saves the growth steps.

    Examples
    --------
    >>> arena = Arena()
    >>> decompress_into(GZIP, compress(GZIP, b"hello"), arena, 1 << 20)
    5
    >>> bytes(arena.view()), arena.size
    (b'hello', 5)
    """

    __slots__ = ("_allocate", "_buf", "before_grow", "size")

    def __init__(
        self,
        initial: int = 0,
        allocate: Callable[[int], Any] | None = None,
    ) -> None:
        if initial < 0:
            raise ValueError(f"initial must be >= 0, got {initial}")
        #: Makes a new uint8 buffer of at least n bytes (default: np.empty).
        self._allocate: Callable[[int], Any] = allocate or _empty
        # a buffer (uint8, one dimension); numpy's arrays are not Buffer to mypy on 3.10
        self._buf: Any = self._allocate(initial)
        #: Bytes used, from the start of the buffer.
        self.size: int = 0
        #: Called before the buffer moves (grows), e.g. to wait for a thread that is
        #: still reading the used part through a raw pointer.
        self.before_grow: Callable[[], object] | None = None

    @property
    def capacity(self) -> int:
        """Bytes allocated (used or not)."""
        return len(self._buf)

    def reserve(self, n: int) -> memoryview:
        """Make room for ``n`` more bytes and return a writable view of them.

        The bytes are not counted in :attr:`size` until :meth:`commit`. Release the view
        (``with arena.reserve(n) as out:``) before the next call, so that growth can
        extend the buffer in place instead of copying it.

        Parameters
        ----------
        n : int
            Bytes wanted after the used part.

        Returns
        -------
        memoryview
            Writable view of ``[size, size + n)``.
        """
        need = self.size + n
        if need > self.capacity:
            self._grow(need)
        return memoryview(self._buf)[self.size : need]

    def _grow(self, need: int) -> None:
        if self.before_grow is not None:
            self.before_grow()
        cap = max(need, 2 * self.capacity, 4096)
        resize = getattr(self._buf, "resize", None)
        if resize is not None:
            try:
                # realloc, mremap: the used bytes are not copied. Refused while any view
                # or exported buffer still refers to the buffer.
                resize(cap)
                return
            except (ValueError, BufferError):
                pass
        new = self._allocate(cap)
        memoryview(new)[: self.size] = memoryview(self._buf)[: self.size]
        self._buf = new

    def commit(self, n: int) -> None:
        """Count ``n`` more bytes (written through :meth:`reserve`'s view) as used."""
        self.size += n

    def append(self, data: object) -> None:
        """Copy a buffer to the end of the arena."""
        mv = memoryview(data)  # type: ignore[arg-type]
        n = mv.nbytes
        with self.reserve(n) as out:
            out[:] = mv.cast("B")
        self.size += n

    def view(self) -> memoryview:
        """Read-only view of the used bytes ``[0:size]``."""
        return memoryview(self._buf)[: self.size].toreadonly()

    def result(self) -> npt.NDArray[np.uint8]:
        """The finished buffer: a read-only uint8 array over ``[0:size]``, not a copy.

        The array keeps the arena's allocation alive (up to twice ``size`` bytes of
        address space; only the written pages are memory). Later appends that need more
        room move the arena to a new buffer and leave this one as it is.
        """
        out = np.asarray(memoryview(self._buf)[: self.size])
        out.flags.writeable = False
        return out


def _empty(n: int) -> npt.NDArray[np.uint8]:
    return np.empty(n, dtype=np.uint8)


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


# --------------------------------------------------------------------------- gzip

# Deflate cannot do better than 1032:1 (a 258-byte match per 2 bits); a gzip trailer
# claiming more than this per compressed byte is not believed.
_DEFLATE_MAX_RATIO: Final = 1032
_GZIP_MAGIC: Final = b"\x1f\x8b\x08"
_ZLIB_CHUNK: Final = 1 << 20
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


def _gunzip(src: memoryview, arena: Arena, limit: int) -> int:
    n_src = len(src)
    if n_src == 0:
        _corrupt("gzip payload is empty")
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
                want = min(_ZLIB_CHUNK, room + 1)
                chunk = d.decompress(data, want)  # type: ignore[arg-type]
                if len(chunk) > room:
                    _too_big(limit)
                arena.append(chunk)
                if d.eof:
                    break
                data = d.unconsumed_tail
                if not data and len(chunk) < want:
                    _corrupt(f"gzip member {member} is truncated")
        except zlib.error as e:
            _corrupt(f"gzip member {member} is corrupt: {e}")
        rest = d.unused_data
        if len(rest) < 10 or rest[:3] != _GZIP_MAGIC:
            return arena.size - start
        data = rest
        member += 1


def _gzip_compress(data: memoryview, level: int | None) -> bytes:
    if level is None or level == -1:
        level = 6  # Deflater.DEFAULT_COMPRESSION, GzipCompression.DEFAULT_LEVEL
    if not 1 <= level <= 9:
        raise ValueError(f"gzip compression level must be 1..9 or -1, got {level}")
    # libdeflate: one gzip member, as GZIPOutputStream writes; at level 6 1.6x faster than
    # zlib here, for about the same size (bench/test_bench_compression.py).
    return bytes(deflate.gzip_compress(data, level))  # (a bytearray: a copy, ~1% of the time)


# --------------------------------------------------------------------------- snappy

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
# A snappy copy element produces at most 64 bytes from 3 input bytes.
_SNAPPY_MAX_RATIO: Final = 22


def _unsnappy_block(block: memoryview, arena: Arena, limit: int, what: str) -> int:
    if len(block) == 0:
        _corrupt(f"{what} is empty")
    try:
        n = int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as e:
        _corrupt(f"{what} has no valid length header: {e}")
    if n > _SNAPPY_MAX_RATIO * len(block) + 8:
        _corrupt(f"{what} claims {n} bytes from {len(block)} compressed bytes")
    if n > limit - arena.size:
        _too_big(limit)
    with arena.reserve(n) as out:
        try:
            got = int(cramjam.snappy.decompress_raw_into(block, out))
        except cramjam.DecompressionError as e:
            _corrupt(f"{what} is corrupt: {e}")
    if got != n:
        _corrupt(f"{what} decompressed to {got} bytes, declared {n}")
    arena.commit(n)
    return n


_XERIAL_MAGIC_INT: Final = int.from_bytes(_XERIAL_MAGIC[:4], "big", signed=True)
_BE_I32: Final = struct.Struct(">i")


def _unsnappy(src: memoryview, arena: Arena, limit: int) -> int:
    n_src = len(src)
    if n_src >= 16 and bytes(src[:8]) == _XERIAL_MAGIC:
        version = _BE_I32.unpack_from(src, 8)[0]
        if version < 1:  # SnappyCodec.MINIMUM_COMPATIBLE_VERSION
            _corrupt(f"xerial snappy stream version {version} is not supported")
        start = arena.size
        pos = 16
        chunk = 0
        unpack = _BE_I32.unpack_from
        while pos < n_src:
            if n_src - pos < 4:
                _corrupt(f"xerial snappy chunk {chunk} length is truncated")
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
                _corrupt(
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
        _corrupt("snappy payload is empty")
    return _unsnappy_block(src, arena, limit, "raw snappy block")


def _snappy_compress(data: memoryview, level: int | None) -> bytes:
    if level is not None:
        raise ValueError("snappy has no compression level")
    parts = [_XERIAL_HEADER]
    pack = struct.Struct(">i").pack
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK])
        parts.append(pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


# --------------------------------------------------------------------------- lz4

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
        _corrupt("lz4 frame FLG reserved bits must be 0")
    if flg >> 6 != 1:
        _corrupt(f"lz4 frame version {flg >> 6} is unsupported (expected 1)")
    if not flg & 0x20:
        _corrupt("lz4 frame uses dependent (linked) blocks, which Kafka rejects")
    if bd & 0x8F:
        _corrupt("lz4 frame BD reserved bits must be 0")
    bsv = (bd >> 4) & 7
    if bsv < 4:
        _corrupt(f"lz4 frame block size value {bsv} is invalid (expected 4..7)")
    # magic 0: Java (ignoreFlagDescriptorChecksum) skips HC, KAFKA-3160.
    if magic != 0 and header[-1] != lz4_hc(header[4:-1]):
        _corrupt("lz4 frame descriptor checksum mismatch")
    return 1 << (2 * bsv + 8), bool(flg & 0x14)


def _unlz4(src: memoryview, arena: Arena, limit: int, magic: int) -> int:
    n_src = len(src)
    if n_src < 7:
        _corrupt("lz4 frame is truncated (header)")
    pos = 15 if src[4] & 0x08 else 7  # content size: skipped, as Java does
    header = bytes(src[:pos])
    if header[:4] != _LZ4_MAGIC:
        _corrupt("lz4 frame does not start with magic 0x184D2204")
    if n_src < pos:
        _corrupt("lz4 frame is truncated (header)")
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
            _corrupt(f"lz4 frame is truncated (block {block} size)")
        word = unpack(src, pos)[0]
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:  # EndMark
            _lz4_nothing_after(n_src, pos)
            return arena.size - start
        if size > max_block:
            _corrupt(
                f"lz4 block {block} size {size} exceeds the frame's maximum {max_block}"
            )
        if size > n_src - pos:
            _corrupt(f"lz4 frame is truncated (block {block} needs {size} bytes)")
        data = src[pos : pos + size]
        pos += size
        room = limit - arena.size
        if word & _UNCOMPRESSED_BIT:
            if size > room:
                _too_big(limit)
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
                        _too_big(limit)
                    _corrupt(f"lz4 block {block} is corrupt: {e}")
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
            field=_FIELD,
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
            chunk = d.decompress(data, max_length=min(_ZLIB_CHUNK, room + 1))
            if len(chunk) > room:
                _too_big(limit)
            arena.append(chunk)
            if d.eof:
                _lz4_nothing_after(n_src, fed - len(d.unused_data or b""))
                return arena.size - start
            if not d.needs_input:
                data = b""
            elif fed < n_src:
                data = src[fed : fed + _ZLIB_CHUNK]
                fed += _ZLIB_CHUNK if n_src - fed > _ZLIB_CHUNK else n_src - fed
            else:
                _corrupt("lz4 frame is truncated")
    except RuntimeError as e:  # python-lz4 raises RuntimeError for liblz4 errors
        _corrupt(f"lz4 frame is corrupt: {e}")


def _lz4_compress(data: memoryview, level: int | None, magic: int) -> bytes:
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


# --------------------------------------------------------------------------- zstd

_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_BLOCK_MAX: Final = 128 * 1024
_ZSTD_FCS_BYTES: Final = (0, 2, 4, 8)
_ZSTD_DID_BYTES: Final = (0, 1, 2, 4)


def _zstd_walk(src: memoryview) -> tuple[int, bool]:
    """Check the frame structure of a zstd payload; return a bound on its output.

    Also returns whether the payload is exactly one (non-skippable) frame.

    libzstd's streaming reader treats a payload cut at a frame boundary as complete, so
    the frames are walked here: every frame must be whole and nothing may follow the last.
    The bound sizes the arena from what the blocks can produce (raw and RLE block
    sizes, at most 128 KiB per compressed block), lowered to a frame's declared content
    size when it has one: libzstd fails a frame whose output differs from that size, so
    a lying header costs an error, never a large allocation.
    """
    n_src = len(src)
    if n_src == 0:
        _corrupt("zstd payload is empty")
    pos = 0
    bound = 0
    frame = 0
    skippable = False
    while pos < n_src:
        if n_src - pos < 4:
            _corrupt(f"zstd frame {frame} is truncated (magic)")
        magic = int.from_bytes(src[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if n_src - pos < 8:
                _corrupt(f"zstd skippable frame {frame} is truncated")
            size = int.from_bytes(src[pos + 4 : pos + 8], "little")
            if size > n_src - pos - 8:
                _corrupt(f"zstd skippable frame {frame} is truncated")
            pos += 8 + size
            frame += 1
            skippable = True
            continue
        if magic != _ZSTD_MAGIC:
            _corrupt(f"zstd frame {frame} has bad magic 0x{magic:08X}")
        pos += 4
        if pos >= n_src:
            _corrupt(f"zstd frame {frame} is truncated (header)")
        fhd = src[pos]
        pos += 1
        if fhd & 0x08:
            _corrupt(f"zstd frame {frame} descriptor reserved bit is set")
        single = bool(fhd & 0x20)
        fcs_bytes = _ZSTD_FCS_BYTES[fhd >> 6] or (1 if single else 0)
        hlen = (0 if single else 1) + _ZSTD_DID_BYTES[fhd & 3] + fcs_bytes
        if n_src - pos < hlen:
            _corrupt(f"zstd frame {frame} is truncated (header)")
        fcs = -1
        if fcs_bytes:
            at = pos + hlen - fcs_bytes
            fcs = int.from_bytes(src[at : at + fcs_bytes], "little")
            if fcs_bytes == 2:
                fcs += 256
        pos += hlen
        frame_bound = 0
        while True:
            if n_src - pos < 3:
                _corrupt(f"zstd frame {frame} is truncated (block header)")
            bh = int.from_bytes(src[pos : pos + 3], "little")
            pos += 3
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 3:
                _corrupt(f"zstd frame {frame} has a block of reserved type")
            if bsize > _ZSTD_BLOCK_MAX:
                _corrupt(
                    f"zstd frame {frame} has a block of {bsize} bytes (max 131072)"
                )
            if btype == 1:  # RLE: one byte repeated bsize times
                need, frame_bound = 1, frame_bound + bsize
            elif btype == 0:
                need, frame_bound = bsize, frame_bound + bsize
            else:
                need, frame_bound = bsize, frame_bound + _ZSTD_BLOCK_MAX
            if n_src - pos < need:
                _corrupt(f"zstd frame {frame} is truncated (block data)")
            pos += need
            if bh & 1:
                break
        if fhd & 0x04:
            if n_src - pos < 4:
                _corrupt(f"zstd frame {frame} is truncated (checksum)")
            pos += 4
        if fcs > frame_bound:
            # A header that claims more than its blocks can produce is lying; libzstd
            # would fail it, but python-zstandard's one-shot decompress() first
            # allocates the claimed size.
            _corrupt(f"zstd frame {frame} claims {fcs} bytes but its blocks hold at most {frame_bound}")
        bound += frame_bound if fcs < 0 else fcs
        frame += 1
    return bound, frame == 1 and not skippable


_ZSTD_SMALL: Final = 16 * 1024
_local = threading.local()


def _zstd_dctx() -> zstandard.ZstdDecompressor:
    # One per thread: a ZstdDecompressor must not be used by two threads at once.
    try:
        dctx: zstandard.ZstdDecompressor = _local.dctx
    except AttributeError:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


class _OneShot:
    """libzstd's one-shot decoder (``ZSTD_decompressDCtx``), through ctypes.

    It writes straight into the arena and uses the output itself as the window,
    so a payload costs what it decompresses to and a context (~160 KiB), whatever
    window its frames were written with. libzstd's streaming decoder (cramjam's
    ``decompress_into``, python-zstandard's readers) keeps a window of its own besides
    the output: up to 128 MiB (window log 27, the most it and Java's reader accept).
    python-zstandard's C backend hides libzstd's symbols; its cffi module
    (``zstandard._cffi``, in the same wheels) exports them, and is loaded here as a
    plain shared library, not imported. Without it, the streaming decoders are used.
    """

    #: ZSTD_ErrorCode's dstSize_tooSmall (zstd_errors.h): the output passes ``dst``.
    DST_TOO_SMALL: Final = 70

    def __init__(self, lib: ctypes.CDLL) -> None:
        c = ctypes
        self._create = lib.ZSTD_createDCtx
        self._create.restype, self._create.argtypes = c.c_void_p, []
        self._free = lib.ZSTD_freeDCtx
        self._free.restype, self._free.argtypes = c.c_size_t, [c.c_void_p]
        self._decompress = lib.ZSTD_decompressDCtx
        self._decompress.restype = c.c_size_t
        self._decompress.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t]
        self._is_error = lib.ZSTD_isError
        self._is_error.restype, self._is_error.argtypes = c.c_uint, [c.c_size_t]
        self._code = lib.ZSTD_getErrorCode
        self._code.restype, self._code.argtypes = c.c_int, [c.c_size_t]
        self._name = lib.ZSTD_getErrorName
        self._name.restype, self._name.argtypes = c.c_char_p, [c.c_size_t]

    def dctx(self) -> int:
        """This thread's context (a context must not be used by two threads at once)."""
        holder: _DCtx | None = getattr(_local, "oneshot", None)
        if holder is None:
            ptr = self._create()
            if not ptr:
                raise MemoryError()
            holder = _local.oneshot = _DCtx(ptr, self._free)
        return holder.ptr

    def decompress(self, src: object, out: object) -> int:
        """Decompress every frame of ``src`` into ``out``: the bytes written, or
        ``-DST_TOO_SMALL`` if they would pass its end; raises ValueError if corrupt."""
        s = np.frombuffer(src, dtype=np.uint8)  # type: ignore[call-overload]
        o = np.frombuffer(out, dtype=np.uint8)  # type: ignore[call-overload]
        try:
            # ctypes lets the GIL go for the call
            n = self._decompress(self.dctx(), o.ctypes.data, o.size, s.ctypes.data, s.size)
        finally:
            del s, o  # (their exports of ``out``: before the caller releases it)
        if self._is_error(n):
            if self._code(n) == self.DST_TOO_SMALL:
                return -self.DST_TOO_SMALL
            raise ValueError(self._name(n).decode("ascii", "replace"))
        return int(n)


class _DCtx:
    """A thread's ZSTD_DCtx, freed with the thread's locals."""

    __slots__ = ("free", "ptr")

    def __init__(self, ptr: int, free: Callable[[int], object]) -> None:
        self.ptr = ptr
        self.free = free

    def __del__(self) -> None:
        self.free(self.ptr)


@functools.cache
def zstd_library() -> ctypes.CDLL | None:
    """libzstd as python-zstandard's cffi module exports it (its C backend hides libzstd's
    symbols), loaded as a plain shared library; None where it is not there. kbatch's C
    decoder (:func:`zstd_c_functions`) and encoder (``_core``) call into it without the GIL."""
    try:
        spec = importlib.util.find_spec("zstandard._cffi")
        if spec is None or not spec.origin:
            return None
        return ctypes.CDLL(spec.origin)
    except (ImportError, OSError):
        return None


@functools.cache
def _oneshot() -> _OneShot | None:
    """libzstd's one-shot decoder when python-zstandard's cffi module is there and works."""
    try:
        lib = zstd_library()
        if lib is None:
            return None
        oneshot = _OneShot(lib)
        data = b"kbatch: ZSTD_decompressDCtx " * 40
        out = bytearray(len(data))
        if oneshot.decompress(zstandard.ZstdCompressor().compress(data), out) != len(data) or out != data:
            return None
        if oneshot.decompress(zstandard.ZstdCompressor().compress(data), out[:-1]) != -_OneShot.DST_TOO_SMALL:
            return None
    except (ImportError, OSError, AttributeError, ValueError):
        return None
    return oneshot


def zstd_c_functions() -> tuple[int, int, int, int] | None:
    """Addresses of libzstd's ``ZSTD_createDCtx``, ``ZSTD_freeDCtx``,
    ``ZSTD_decompressDCtx`` and ``ZSTD_isError`` (the one-shot decoder above, checked),
    for kbatch's C decoder to call without the GIL; None where it is not found."""
    oneshot = _oneshot()
    if oneshot is None:
        return None
    funcs = (oneshot._create, oneshot._free, oneshot._decompress, oneshot._is_error)
    addresses = tuple(ctypes.cast(f, ctypes.c_void_p).value or 0 for f in funcs)
    if not all(addresses):
        return None
    return addresses  # type: ignore[return-value]


def zstd_decompress_into(src: Buffer, out: Buffer) -> int:
    """Decompress every zstd frame of ``src`` into the writable buffer ``out``.

    libzstd's one-shot decoder where it is found (no window besides ``out``), else
    cramjam's. Returns the bytes written; raises ValueError or cramjam's error when the
    payload is corrupt or does not fit.
    """
    oneshot = _oneshot()
    if oneshot is None:
        return int(cramjam.zstd.decompress_into(src, out))
    n = oneshot.decompress(src, out)
    if n < 0:
        raise ValueError("zstd output does not fit")
    return n


def _unzstd(src: memoryview, arena: Arena, limit: int) -> int:
    bound, single = _zstd_walk(src)
    room = limit - arena.size
    start = arena.size
    if single and bound <= _ZSTD_SMALL and bound <= room:
        # Small single frame: a reused context beats cramjam's per-call setup.
        try:
            small = _zstd_dctx().decompress(src, max_output_size=max(bound, 1))
        except zstandard.ZstdError as e:
            _corrupt(f"zstd payload is corrupt: {e}")
        arena.append(small)
        return len(small)
    oneshot = _oneshot()
    if oneshot is not None:
        # Straight into the arena, at most its room: a payload that would pass the
        # limit stops there (only the pages written are memory).
        with arena.reserve(min(bound, room)) as out:
            try:
                n = oneshot.decompress(src, out)
            except ValueError as e:
                _corrupt(f"zstd payload is corrupt: {e}")
        if n < 0:
            if bound > room:
                _too_big(limit)
            _corrupt("zstd payload decompresses to more than its blocks can hold")
        arena.commit(n)
        return n
    if bound <= room:
        # The whole output fits: one call straight into the arena.
        with arena.reserve(bound) as out:
            try:
                n = int(cramjam.zstd.decompress_into(src, out))
            except cramjam.DecompressionError as e:
                _corrupt(f"zstd payload is corrupt: {e}")
        arena.commit(n)
        return n
    # The bound passes the limit: stream in bounded steps and stop at the limit.
    # A fresh decompressor: ZstdDecompressor objects must not be shared between threads,
    # and callers decode in parallel threads (the GIL is released inside).
    reader = zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
    try:
        while True:
            room = limit - arena.size
            step = min(_ZLIB_CHUNK, room + 1)
            with arena.reserve(step) as out:
                n = int(reader.readinto(out))
            if n > room:
                _too_big(limit)
            arena.commit(n)
            if n == 0:
                return arena.size - start
    except zstandard.ZstdError as e:
        _corrupt(f"zstd payload is corrupt: {e}")


def _zstd_compress(data: memoryview, level: int | None) -> bytes:
    if level is None:
        level = 3  # ZstdCompression's default (CompressionType.ZSTD.defaultLevel())
    if not -131072 <= level <= 22:
        raise ValueError(f"zstd compression level must be -131072..22, got {level}")
    # One frame with its content size; Java and librdkafka read it, and so does every
    # reader that cannot stream.
    return _zstd_compressor(level).compress(data)


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``level`` (see _zstd_dctx): making one sets up its
    tables, about 15% of compressing a 90 KB batch at level 3."""
    try:
        by_level: dict[int, zstandard.ZstdCompressor] = _local.cctx
    except AttributeError:
        by_level = _local.cctx = {}
    compressor = by_level.get(level)
    if compressor is None:
        compressor = by_level[level] = zstandard.ZstdCompressor(level=level)
    return compressor


# --------------------------------------------------------------------------- API


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
            return _gunzip(mv, arena, limit)
        if codec == SNAPPY:
            return _unsnappy(mv, arena, limit)
        if codec == LZ4:
            return _unlz4(mv, arena, limit, magic)
        if codec == ZSTD:
            return _unzstd(mv, arena, limit)
        if len(mv) > limit - arena.size:
            _too_big(limit)
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
        return _gzip_compress(mv, level)
    if codec == SNAPPY:
        return _snappy_compress(mv, level)
    if codec == LZ4:
        return _lz4_compress(mv, level, magic)
    if codec == ZSTD:
        return _zstd_compress(mv, level)
    if level is not None:
        raise ValueError("codec none has no compression level")
    return mv.tobytes()
