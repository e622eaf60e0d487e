"""zstd (codec 4): every frame of a payload into the arena, one frame out; libzstd found.

Reads RFC 8878 payloads (several frames, skippable ones, content size optional) after walking
their frames (:func:`unzstd`); writes one frame with its content size at level 3. Decompresses
through libzstd's one-shot decoder where python-zstandard's cffi module exports it
(:func:`zstd_library`, which kbatch's C decoder and encoder use too), else through cramjam's
and python-zstandard's streaming decoders.

zstd frame (RFC 8878)::

    magic 0xFD2FB528 LE | descriptor | [window] | [dict id] | [content size] | blocks | [xxh64/4]
    block header = 3 bytes LE: last(1) | type(2) (raw, RLE, compressed, reserved) | size(21)
    skippable frame = magic 0x184D2A5? LE | size:uint32 LE | size bytes
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import cramjam
import numpy as np
import zstandard

from ._arena import STREAM_STEP, Arena, corrupt, too_big

if TYPE_CHECKING:  # typing_extensions is not a runtime dependency
    from typing_extensions import Buffer

__all__ = ["unzstd", "zstd_c_functions", "zstd_compress", "zstd_decompress_into", "zstd_library"]


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
        corrupt("zstd payload is empty")
    pos = 0
    bound = 0
    frame = 0
    skippable = False
    while pos < n_src:
        if n_src - pos < 4:
            corrupt(f"zstd frame {frame} is truncated (magic)")
        magic = int.from_bytes(src[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if n_src - pos < 8:
                corrupt(f"zstd skippable frame {frame} is truncated")
            size = int.from_bytes(src[pos + 4 : pos + 8], "little")
            if size > n_src - pos - 8:
                corrupt(f"zstd skippable frame {frame} is truncated")
            pos += 8 + size
            frame += 1
            skippable = True
            continue
        if magic != _ZSTD_MAGIC:
            corrupt(f"zstd frame {frame} has bad magic 0x{magic:08X}")
        pos += 4
        if pos >= n_src:
            corrupt(f"zstd frame {frame} is truncated (header)")
        fhd = src[pos]
        pos += 1
        if fhd & 0x08:
            corrupt(f"zstd frame {frame} descriptor reserved bit is set")
        single = bool(fhd & 0x20)
        fcs_bytes = _ZSTD_FCS_BYTES[fhd >> 6] or (1 if single else 0)
        hlen = (0 if single else 1) + _ZSTD_DID_BYTES[fhd & 3] + fcs_bytes
        if n_src - pos < hlen:
            corrupt(f"zstd frame {frame} is truncated (header)")
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
                corrupt(f"zstd frame {frame} is truncated (block header)")
            bh = int.from_bytes(src[pos : pos + 3], "little")
            pos += 3
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 3:
                corrupt(f"zstd frame {frame} has a block of reserved type")
            if bsize > _ZSTD_BLOCK_MAX:
                corrupt(
                    f"zstd frame {frame} has a block of {bsize} bytes (max 131072)"
                )
            if btype == 1:  # RLE: one byte repeated bsize times
                need, frame_bound = 1, frame_bound + bsize
            elif btype == 0:
                need, frame_bound = bsize, frame_bound + bsize
            else:
                need, frame_bound = bsize, frame_bound + _ZSTD_BLOCK_MAX
            if n_src - pos < need:
                corrupt(f"zstd frame {frame} is truncated (block data)")
            pos += need
            if bh & 1:
                break
        if fhd & 0x04:
            if n_src - pos < 4:
                corrupt(f"zstd frame {frame} is truncated (checksum)")
            pos += 4
        if fcs > frame_bound:
            # A header that claims more than its blocks can produce is lying; libzstd
            # would fail it, but python-zstandard's one-shot decompress() first
            # allocates the claimed size.
            corrupt(f"zstd frame {frame} claims {fcs} bytes but its blocks hold at most {frame_bound}")
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


def unzstd(src: memoryview, arena: Arena, limit: int) -> int:
    bound, single = _zstd_walk(src)
    room = limit - arena.size
    start = arena.size
    if single and bound <= _ZSTD_SMALL and bound <= room:
        # Small single frame: a reused context beats cramjam's per-call setup.
        try:
            small = _zstd_dctx().decompress(src, max_output_size=max(bound, 1))
        except zstandard.ZstdError as e:
            corrupt(f"zstd payload is corrupt: {e}")
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
                corrupt(f"zstd payload is corrupt: {e}")
        if n < 0:
            if bound > room:
                too_big(limit)
            corrupt("zstd payload decompresses to more than its blocks can hold")
        arena.commit(n)
        return n
    if bound <= room:
        # The whole output fits: one call straight into the arena.
        with arena.reserve(bound) as out:
            try:
                n = int(cramjam.zstd.decompress_into(src, out))
            except cramjam.DecompressionError as e:
                corrupt(f"zstd payload is corrupt: {e}")
        arena.commit(n)
        return n
    # The bound passes the limit: stream in bounded steps and stop at the limit.
    # A fresh decompressor: ZstdDecompressor objects must not be shared between threads,
    # and callers decode in parallel threads (the GIL is released inside).
    reader = zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
    try:
        while True:
            room = limit - arena.size
            step = min(STREAM_STEP, room + 1)
            with arena.reserve(step) as out:
                n = int(reader.readinto(out))
            if n > room:
                too_big(limit)
            arena.commit(n)
            if n == 0:
                return arena.size - start
    except zstandard.ZstdError as e:
        corrupt(f"zstd payload is corrupt: {e}")


def zstd_compress(data: memoryview, level: int | None) -> bytes:
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
