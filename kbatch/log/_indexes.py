"""The three index files beside a segment: their entries, read and checked for order.

Provides the entry dtypes (:data:`OFFSET_INDEX_DTYPE`, :data:`TIME_INDEX_DTYPE`,
:data:`TXN_INDEX_DTYPE`), :func:`read_index` (a file's entries), :func:`index_entries` (the
entries of bytes already read) and the structure a lookup needs (:func:`offset_index_ordered`,
:func:`time_index_ordered`). Whether an entry tells the truth about the ``.log`` is checked by
:class:`Segment` (:mod:`kbatch.log._segment`) when a seek first uses it; the ``.log`` itself:
:mod:`kbatch.log._frames`.

Named by the segment's 20-digit zero-padded base offset (all integers big-endian)::

    00000000000000001234.index            offset index, 8-byte entries:
        relativeOffset int32                  offset - base offset (the last offset of the
                                              batch, or append, starting at position)
        position       int32                  byte position of that batch in the .log
                                          one entry per index.interval.bytes (4096) appended;
                                          an active segment's file is preallocated with zeros:
                                          the first all-zero entry after the first ends it
    00000000000000001234.timeindex        time index, 12-byte entries, timestamps increasing:
        timestamp      int64                  largest timestamp so far in the segment
        relativeOffset int32                  the (last) offset of the batch that had it
    00000000000000001234.txnindex         aborted transactions whose ABORT marker is in the
                                          segment, 34-byte entries:
        version int16, producerId int64, firstOffset int64, lastOffset int64 (the marker),
        lastStableOffset int64
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

#: ``.index`` entries.
OFFSET_INDEX_DTYPE: Final = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
#: ``.timeindex`` entries.
TIME_INDEX_DTYPE: Final = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
#: ``.txnindex`` entries.
TXN_INDEX_DTYPE: Final = np.dtype(
    [
        ("version", ">i2"),
        ("producer_id", ">i8"),
        ("first_offset", ">i8"),
        ("last_offset", ">i8"),
        ("last_stable_offset", ">i8"),
    ]
)


def read_index(path: Path, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:
    if not path.is_file():
        return None
    return index_entries(path.read_bytes(), dtype)


def index_entries(raw: bytes, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    entries = np.frombuffer(raw[: len(raw) - len(raw) % dtype.itemsize], dtype=dtype)
    if dtype is TXN_INDEX_DTYPE or len(entries) == 0:
        return entries
    raw_rows = np.frombuffer(raw, dtype=np.uint8, count=len(entries) * dtype.itemsize).reshape(len(entries), -1)
    zero = np.flatnonzero(np.all(raw_rows == 0, axis=1))
    zero = zero[zero > 0]
    return entries[: int(zero[0])] if len(zero) else entries


# Structure only, vectorised, without reading the .log: a lookup needs increasing entries.
# Whether an entry tells the truth is checked when a seek first uses it.


def offset_index_ordered(idx: npt.NDArray[Any]) -> bool:
    """Whether ``.index`` entries can be looked up: offsets from the base on, offsets and
    positions strictly increasing."""
    rel = idx["relative_offset"].astype(np.int64)
    where = idx["position"].astype(np.int64)
    return bool(np.all(rel >= 0) and np.all(np.diff(rel) > 0) and np.all(np.diff(where) > 0))


def time_index_ordered(tix: npt.NDArray[Any]) -> bool:
    """Whether ``.timeindex`` entries can be looked up: timestamps and offsets (from the base
    on) never decreasing."""
    return bool(
        np.all(np.diff(tix["timestamp"].astype(np.int64)) >= 0)
        and np.all(tix["relative_offset"] >= 0)
        and np.all(np.diff(tix["relative_offset"].astype(np.int64)) >= 0)
    )
