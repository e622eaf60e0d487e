"""Batch frames in a segment's bytes: where each batch starts and ends, without parsing records.

Provides :func:`scan_headers` (the header rows of a buffer's batches, and the error at a frame
that cannot be a batch), :func:`headers_at` (the rows of the batches at known positions),
:func:`resync` (where the next batch whose CRC verifies starts, after damage), the same over a
remote object window by window (:func:`frame_remote`, :func:`resync_remote`), :func:`corrupt`
(the error naming the file) and the frame's bounds. Uses ``kbatch.codec``'s header scan (no
record parsed, nothing decompressed) and ``kbatch._wire`` (the frame layout). :class:`Segment`
(:mod:`kbatch.log._segment`) walks a segment with them.

A segment's ``.log``, named by its 20-digit zero-padded base offset (all integers big-endian)::

    00000000000000001234.log              record batches back to back, exactly as
                                          kbatch.decode reads them; a batch's frame, enough
                                          to walk a segment without parsing records:
        baseOffset     int64                  legacy: the offset, a compressed wrapper's
                                              last inner offset
        batchLength    int32                  bytes after this field, >= 14
        ...            magic int8 at byte 16
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kbatch import storage
from kbatch._wire import (
    ATTRIBUTES_OFFSET,
    BATCH_OVERHEAD,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_OVERHEAD_V0,
)
from kbatch.codec import BATCH_DTYPE
from kbatch.codec import scan as _core_scan
from kbatch.errors import CorruptRecordError

MIN_ENTRY: Final = RECORD_OVERHEAD_V0  # the smallest batchLength: the smallest legacy message
MIN_V2: Final = BATCH_OVERHEAD - LOG_OVERHEAD  # the smallest batchLength of a RecordBatch
FRAME = struct.Struct(">qi")  # a log entry's baseOffset and batchLength
U32 = struct.Struct(">I")
#: A remote read frames at most this much in one window (larger reads go window by window).
MAX_WINDOW: Final = 256 << 20


def corrupt(path: PurePath, reason: str, position: int, field: str, batch_position: int) -> CorruptRecordError:
    """A :class:`CorruptRecordError` that names the file ``path`` (in its message and ``.path``)."""
    err = CorruptRecordError(f"{reason} in {path}", position, -1, field, batch_position=batch_position)
    err.path = str(path)  # type: ignore[attr-defined]
    return err


def scan_headers(
    buf: Any, pos: int, end: int, max_bytes: int, path: PurePath
) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
    """Header rows of the batches from ``pos``: (rows, end of the last, error or None, more).

    Stops after ``max_bytes`` (at least one batch; ``more`` is then True), before an
    incomplete tail (not an error), or at a frame that cannot be a batch (the error, with
    ``path`` and the position in ``buf``). The rows are :func:`kbatch.codec._core.scan`'s: no
    record parsed, nothing decompressed, no CRC computed.
    """
    limit = end if max_bytes >= end - pos else pos + max_bytes
    heads, consumed, exc = _core_scan(buf, pos, limit)
    stop = pos + consumed
    if exc is None and limit < end and stop < limit:
        # the batch that crosses max_bytes is the last one taken: frame it alone
        cross = min(end, stop + HEADER_SIZE_UP_TO_MAGIC)
        if end - stop >= LOG_OVERHEAD:
            length = FRAME.unpack_from(buf, stop)[1]
            if length >= MIN_ENTRY:
                cross = min(end, stop + LOG_OVERHEAD + length)
        more_heads, consumed, exc = _core_scan(buf, stop, cross)
        if len(more_heads):
            heads = np.concatenate((heads, more_heads))
            stop += consumed
    err = None
    if exc is not None:
        # the frame errors in the words kafka-dump-log users know; the rest as the core says them
        at, reason = exc.batch_position, exc.reason
        length, magic = FRAME.unpack_from(buf, at)[1], buf[at + MAGIC_OFFSET]
        if length < MIN_ENTRY:
            reason = f"batchLength {length} is below the minimum {MIN_ENTRY}"
        elif magic > 2:
            reason = f"unknown magic {magic}"
        elif magic == 2 and length < MIN_V2:
            reason = f"batchLength {length} is below the RecordBatch header size {MIN_V2}"
        err = corrupt(path, reason, exc.position, exc.field, at)
        err.__cause__ = exc
    return heads, stop, err, err is None and limit <= stop < end


def headers_at(buf: Any, positions: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """BATCH_DTYPE rows of the batches at ``positions`` (headers only, nothing decompressed).

    ``first_record`` is -1; a legacy compressed wrapper's ``record_count`` is -1 (unknown
    without decompressing) and its ``base_offset`` its offset, as in ``kbatch.decode``.

    Raises
    ------
    CorruptRecordError
        A position where no complete batch can be framed.
    """
    pos = np.asarray(positions, dtype=np.int64)
    if len(pos) == 0:
        return np.zeros(0, dtype=BATCH_DTYPE)
    n = len(memoryview(buf).cast("B")) if not isinstance(buf, memoryview) else buf.nbytes

    def end_of(p: int) -> int:
        if n - p < LOG_OVERHEAD:
            return n
        return min(n, p + LOG_OVERHEAD + max(int(FRAME.unpack_from(buf, p)[1]), 0))

    heads, _, exc = _core_scan(buf, int(pos[0]), end_of(int(pos[-1])))
    if len(heads) >= len(pos):
        k = np.searchsorted(heads["position"], pos)
        if np.all(k < len(heads)) and np.array_equal(heads["position"][np.minimum(k, len(heads) - 1)], pos):
            return heads[k]
    rows = []
    for p in pos.tolist():
        one, _, exc = _core_scan(buf, p, end_of(p))
        if len(one) == 0:
            raise exc or CorruptRecordError("no complete batch", p, -1, "batchLength", batch_position=p)
        rows.append(one[:1])
    return np.concatenate(rows)


def resync(buf: memoryview, pos: int, end: int) -> int:
    """The next position after ``pos`` where a RecordBatch with a valid CRC starts (or ``end``)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    for c in (np.flatnonzero(u8[pos + 1 + MAGIC_OFFSET : end] == 2) + pos + 1).tolist():
        if end - c < BATCH_OVERHEAD:
            break
        length = FRAME.unpack_from(buf, c)[1]
        if length < MIN_V2 or end - c - LOG_OVERHEAD < length:
            continue
        if crc32c(buf[c + ATTRIBUTES_OFFSET : c + LOG_OVERHEAD + length]) == U32.unpack_from(buf, c + CRC_OFFSET)[0]:
            return int(c)
    return end


def _frame_window(
    reader: storage.RangeReader, start: int, max_bytes: int, path: PurePath
) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
    """:func:`scan_headers` of a remote segment from ``start`` within one read window of about
    ``max_bytes`` (grown to hold the batch that crosses it), in file positions."""
    buf, off = reader.view(start, start + max(max_bytes, 1))
    heads, stop, err, more = scan_headers(buf, start - off, len(buf), max_bytes, path)
    heads["position"] += off
    stop += off
    end = off + len(buf)
    if err is None and not more and stop < end < reader.size:
        # the window ends inside the batch at ``stop``: grow it (from ``start``, so that
        # the read that decodes these batches finds them in it) to hold that batch
        if end - stop < LOG_OVERHEAD:  # the frame's length is past the window too: a chunk more
            buf, off = reader.view(start, end + LOG_OVERHEAD)
            end = off + len(buf)
        length = FRAME.unpack_from(buf, stop - off)[1] if end - stop >= LOG_OVERHEAD else 0
        want = stop + (LOG_OVERHEAD + length if length >= MIN_ENTRY else BATCH_OVERHEAD)
        buf, off = reader.view(start, want)
        more_heads, stop2, err, more = scan_headers(buf, stop - off, len(buf), 1, path)
        more_heads["position"] += off
        heads = np.concatenate((heads, more_heads))
        stop = stop2 + off
        end = off + len(buf)
    if err is not None:
        shifted = err.with_context(shift=off)  # (the reason names the file already)
        shifted.__cause__ = err.__cause__
        return heads, stop, shifted, False
    # more to frame: the budget stopped it, or the window ends before the object does
    return heads, stop, None, stop < reader.size and (more or end < reader.size)


def frame_remote(
    reader: storage.RangeReader, pos: int, max_bytes: int, path: PurePath
) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
    """:func:`scan_headers` for a remote segment (``reader``, the segment ``path``): one window
    when ``max_bytes`` is at most ``MAX_WINDOW`` (the chunk a read decodes next), else window
    after window of :data:`kbatch.storage._location.CHUNK` (headers of a whole segment, in
    bounded memory)."""
    if max_bytes <= MAX_WINDOW:
        return _frame_window(reader, pos, max_bytes, path)
    parts = []
    start = pos
    while True:
        heads, pos, err, more = _frame_window(reader, pos, reader.chunk, path)
        parts.append(heads)
        if err is not None or not more or pos - start >= max_bytes:
            return np.concatenate(parts) if len(parts) > 1 else parts[0], pos, err, more


def resync_remote(reader: storage.RangeReader, pos: int) -> int:
    """:func:`resync` for a remote segment, window by window: the next position after
    ``pos`` where a RecordBatch with a valid CRC starts (or the end). A candidate cut by a
    window's end is read whole (one request) to check its CRC."""
    p = pos
    while True:
        buf, off = reader.view(p, p + 2 * reader.chunk)
        end = off + len(buf)
        u8 = np.frombuffer(buf, dtype=np.uint8)
        nxt = end - BATCH_OVERHEAD  # where the next window starts when nothing is found here
        for c in (np.flatnonzero(u8[p - off + 1 + MAGIC_OFFSET :] == 2) + p - off + 1).tolist():
            at = c + off
            if len(buf) - c < BATCH_OVERHEAD:
                nxt = at - 1  # (the search starts after p)
                break
            length = FRAME.unpack_from(buf, c)[1]
            if length < MIN_V2 or reader.size - at - LOG_OVERHEAD < length:
                continue
            if len(buf) - c - LOG_OVERHEAD >= length:
                one = buf[c : c + LOG_OVERHEAD + length]
            else:
                one = memoryview(reader.read(at, LOG_OVERHEAD + length))
            if crc32c(one[ATTRIBUTES_OFFSET:]) == U32.unpack_from(one, CRC_OFFSET)[0]:
                return int(at)
        if end >= reader.size:
            return reader.size
        p = max(p + 1, nxt)
