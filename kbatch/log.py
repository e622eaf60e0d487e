"""Kafka log directories without a broker: segments, indexes, seeks, read_committed, a writer.

What a broker keeps on disk under each ``log.dirs`` root (all integers big-endian)::

    <root>/<topic>-<partition>/               a partition directory; skipped when its name ends
                                              in -delete, -future or -stray (being deleted/moved)
        00000000000000001234.log              segment: record batches back to back, exactly as
                                              kbatch.decode reads them; named by the 20-digit
                                              zero-padded base offset (its first offset)
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
        00000000000000001234.snapshot         producer state snapshot (not read here)
        *.deleted *.cleaned *.swap            leftovers of deletion, cleaning, compaction: skipped
        leader-epoch-checkpoint               text: "0" (version), count, then "epoch startOffset"
        partition.metadata                    text: "version: 0", "topic_id: <base64url uuid>"
    <root>/log-start-offset-checkpoint        text, "topic partition offset" lines (kbatch._checkpoint):
    <root>/recovery-point-offset-checkpoint   a log starts at max(its log start offset checkpoint,
    <root>/replication-offset-checkpoint      its first segment's base offset), as the broker's;
    <root>/cleaner-offset-checkpoint          the others are read for reporting, all verified

    A batch's frame, enough to walk a segment without parsing records:
        baseOffset int64 (legacy: the offset, a compressed wrapper's last inner offset),
        batchLength int32 (bytes after this field, >= 14), ..., magic int8 at byte 16.

Everything works from the ``.log`` files alone; an index is a hint, used only to go faster, and
read on a segment's first seek that needs it (opening a partition reads none). A file whose
entries do not increase is not used; each entry a seek uses is first checked against
the batch it names (one header read, the first time): an ``.index`` position must frame a
complete batch holding the entry's offset; the batch holding a ``.timeindex`` entry's offset must
have the entry's timestamp as its largest and the batch before it a smaller one. An entry that
fails is noted (:attr:`Segment.notes`, :attr:`LogDir.notes`) and the one before it used (or the
start of the segment). Reads follow the broker: an offset seek looks the position up in
``.index`` and scans forward to the first batch whose last offset reaches it; a timestamp seek
looks up ``.timeindex``, then ``.index``, then scans to the first record whose timestamp reaches
it (Kafka's ListOffsets), so both give what a linear scan gives, with the caller's
``on_corruption`` throughout.

>>> import kbatch, tempfile
>>> from kbatch.log import LogWriter, open_log
>>> root = tempfile.mkdtemp()
>>> with LogWriter(root, "orders", 0, segment_bytes=200) as w:
...     for i in range(4):
...         _ = w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
>>> log = open_log(f"{root}/orders-0")
>>> log.topic, log.partition, [s.base_offset for s in log.segments]
('orders', 0, [0, 2])
>>> log.read(start_offset=1, end_offset=3).values()
[b'v1', b'v2']
>>> log.read(start_timestamp=1002).records["offset"].tolist()
[2, 3]
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import itertools
import json
import logging
import mmap
import os
import posixpath
import struct
import uuid
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kbatch import _replicas, _storage
from kbatch._checkpoint import (
    CHECKPOINT_FILES,
    HIGH_WATERMARK,
    LOG_START,
    RECOVERY_POINT,
    remember_remote,
    remote_root_checkpoints,
    root_checkpoints,
    update_checkpoint,
)
from kbatch._core import BATCH_DTYPE
from kbatch._core import decode as _core_decode
from kbatch._core import scan as _core_scan
from kbatch._discover import SEGMENT_NAME, find_partitions, partition_name
from kbatch._producer_snapshot import ProducerState
from kbatch._table import RecordTable, concat, select
from kbatch._txn import aborted_batch_mask, check_aborted_index, txn_state
from kbatch._wire import (
    ATTRIBUTES_OFFSET,
    BATCH_OVERHEAD,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_CRC_OFFSET,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_OVERHEAD_V0,
)
from kbatch.arrow import iter_log_arrow, log_to_arrow
from kbatch.errors import CorruptRecordError, CRCError, StorageError, UnsupportedError

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self

__all__ = [
    "OFFSET_INDEX_DTYPE",
    "TIME_INDEX_DTYPE",
    "TXN_INDEX_DTYPE",
    "LogDir",
    "LogWriter",
    "Segment",
    "Skipped",
    "open_log",
    "open_logs",
    "partition_name",
]

logger = logging.getLogger("kbatch.log")

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
_MIN_ENTRY: Final = RECORD_OVERHEAD_V0  # the smallest batchLength: the smallest legacy message
_MIN_V2: Final = BATCH_OVERHEAD - LOG_OVERHEAD  # the smallest batchLength of a RecordBatch
_UNREAD: Final = object()  # a side index not read yet
_MAX_LIES: Final = 8  # index entries found not to match the log before the whole file is dropped
_FRAME = struct.Struct(">qi")  # a log entry's baseOffset and batchLength
_U32 = struct.Struct(">I")
_SKIPPED_SUFFIXES: Final = (".deleted", ".cleaned", ".swap")
_SEGMENT_NAME = SEGMENT_NAME
#: A remote read frames at most this much in one window (larger reads go window by window).
_MAX_WINDOW: Final = 256 << 20

OnCorruption = Literal["raise", "skip"]
IsolationLevel = Literal["read_uncommitted", "read_committed"]


class Skipped(NamedTuple):
    """A byte range that ``on_corruption="skip"`` left out, and why."""

    path: str
    position: int
    length: int
    reason: str


def _corrupt(path: PurePath, reason: str, position: int, field: str, batch_position: int) -> CorruptRecordError:
    err = CorruptRecordError(f"{reason} in {path}", position, -1, field, batch_position=batch_position)
    err.path = str(path)  # type: ignore[attr-defined]
    return err


def scan_headers(
    buf: Any, pos: int, end: int, max_bytes: int, path: PurePath
) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
    """Header rows of the batches from ``pos``: (rows, end of the last, error or None, more).

    Stops after ``max_bytes`` (at least one batch; ``more`` is then True), before an
    incomplete tail (not an error), or at a frame that cannot be a batch (the error, with
    ``path`` and the position in ``buf``). The rows are :func:`kbatch._core.scan`'s: no
    record parsed, nothing decompressed, no CRC computed.
    """
    limit = end if max_bytes >= end - pos else pos + max_bytes
    heads, consumed, exc = _core_scan(buf, pos, limit)
    stop = pos + consumed
    if exc is None and limit < end and stop < limit:
        # the batch that crosses max_bytes is the last one taken: frame it alone
        cross = min(end, stop + HEADER_SIZE_UP_TO_MAGIC)
        if end - stop >= LOG_OVERHEAD:
            length = _FRAME.unpack_from(buf, stop)[1]
            if length >= _MIN_ENTRY:
                cross = min(end, stop + LOG_OVERHEAD + length)
        more_heads, consumed, exc = _core_scan(buf, stop, cross)
        if len(more_heads):
            heads = np.concatenate((heads, more_heads))
            stop += consumed
    err = None
    if exc is not None:
        # the frame errors in the words kafka-dump-log users know; the rest as the core says them
        at, reason = exc.batch_position, exc.reason
        length, magic = _FRAME.unpack_from(buf, at)[1], buf[at + MAGIC_OFFSET]
        if length < _MIN_ENTRY:
            reason = f"batchLength {length} is below the minimum {_MIN_ENTRY}"
        elif magic > 2:
            reason = f"unknown magic {magic}"
        elif magic == 2 and length < _MIN_V2:
            reason = f"batchLength {length} is below the RecordBatch header size {_MIN_V2}"
        err = _corrupt(path, reason, exc.position, exc.field, at)
        err.__cause__ = exc
    return heads, stop, err, err is None and limit <= stop < end


def _headers(buf: Any, positions: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[Any]:
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
        return min(n, p + LOG_OVERHEAD + max(int(_FRAME.unpack_from(buf, p)[1]), 0))

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


def _resync(buf: memoryview, pos: int, end: int) -> int:
    """The next position after ``pos`` where a RecordBatch with a valid CRC starts (or ``end``)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    for c in (np.flatnonzero(u8[pos + 1 + MAGIC_OFFSET : end] == 2) + pos + 1).tolist():
        if end - c < BATCH_OVERHEAD:
            break
        length = _FRAME.unpack_from(buf, c)[1]
        if length < _MIN_V2 or end - c - LOG_OVERHEAD < length:
            continue
        if crc32c(buf[c + ATTRIBUTES_OFFSET : c + LOG_OVERHEAD + length]) == _U32.unpack_from(buf, c + CRC_OFFSET)[0]:
            return int(c)
    return end


def read_index(path: Path, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:
    if not path.is_file():
        return None
    return _index_entries(path.read_bytes(), dtype)


def _index_entries(raw: bytes, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    entries = np.frombuffer(raw[: len(raw) - len(raw) % dtype.itemsize], dtype=dtype)
    if dtype is TXN_INDEX_DTYPE or len(entries) == 0:
        return entries
    raw_rows = np.frombuffer(raw, dtype=np.uint8, count=len(entries) * dtype.itemsize).reshape(len(entries), -1)
    zero = np.flatnonzero(np.all(raw_rows == 0, axis=1))
    zero = zero[zero > 0]
    return entries[: int(zero[0])] if len(zero) else entries


class Segment:
    """One ``.log`` segment file, memory-mapped, with its indexes when they are usable.

    Parameters
    ----------
    path : str or Path
        The ``.log`` file (named by its 20-digit base offset, or as tiered storage names
        it, ``<base offset>-<segment id>.log``): a local path, ``file://``, or a URL of
        any filesystem ``pyarrow.fs`` reaches (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``).
    filesystem : pyarrow.fs.FileSystem or fsspec filesystem, optional
        The filesystem ``path`` is in (then ``path`` is a path in it).
    storage_options : dict, optional
        Keyword arguments of the URL scheme's ``pyarrow.fs`` filesystem
        (``endpoint_override``, ``region``, ``access_key``, ...).
    listing : dict of str to int, optional
        The names and sizes of the files beside it, when the caller listed them
        (no request then per absent index).
    prefetched : dict of str to bytes, optional
        The contents of files beside it the caller already read (by name).

    Attributes
    ----------
    path : Path or PurePosixPath
        A remote segment's path in its filesystem (``url`` has the scheme).
    url : str
    segment_id : str or None
        The tiered-storage segment id in the name (base64url), else None.
    base_offset : int
    size : int
        Bytes in the ``.log``.
    index, timeindex, txnindex : numpy.ndarray or None
        The entries of ``.index`` (:data:`OFFSET_INDEX_DTYPE`), ``.timeindex``
        (:data:`TIME_INDEX_DTYPE`) and ``.txnindex`` (:data:`TXN_INDEX_DTYPE`),
        big-endian views of the files, read on first use (a seek, a
        transaction scan: opening reads no index); None when absent. ``index``
        and ``timeindex`` are None too when their entries do not increase, or
        once 8 of their entries were found not to match the ``.log``.
    notes : list of str
        Why an index, or an index entry, was not used (an index is checked
        when first read and an entry when a seek first uses it, so notes come
        after opening).
    note_to : list of str or None
        Another list every note is also appended to (set by :class:`LogDir`
        to its :attr:`LogDir.notes`).

    Examples
    --------
    >>> import kbatch, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "00000000000000000000.log"
    >>> _ = p.write_bytes(kbatch.encode([b"a", b"b", b"c"], max_batch_records=2))
    >>> seg = Segment(p)
    >>> seg.scan()[["base_offset", "record_count"]].tolist(), seg.next_offset
    ([(0, 2), (2, 1)], 3)
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | _storage.Location,
        *,
        filesystem: Any = None,
        storage_options: dict[str, Any] | None = None,
        listing: dict[str, int] | None = None,
        prefetched: dict[str, bytes] | None = None,
    ) -> None:
        loc = _storage.locate(path, filesystem, storage_options)
        self.url = loc.url
        self._prefetched = prefetched or {}
        self.path: Path | PurePosixPath = Path(loc.path) if loc.fs is None else PurePosixPath(loc.path)
        name = self.path.name
        m = _SEGMENT_NAME.match(name)
        stem = name.split(".")[0]
        if not m and not stem.isdigit():
            raise ValueError(f"{name} is not named like a segment (<20-digit base offset>.log, "
                             "or <base offset>-<segment id>.log in tiered storage)")
        self.base_offset = int(m.group(1)) if m else int(stem)
        self.segment_id: str | None = m.group(2) if m else None
        self._loc = loc
        self._listing = listing
        self._reader: _storage.RangeReader | None = None
        if loc.fs is None:
            self.size = os.stat(loc.path).st_size
        else:
            size = None if listing is None else listing.get(name)
            self._reader = _storage.RangeReader(loc, size)
            self.size = self._reader.size
        self._mmap: mmap.mmap | None = None
        self._data: memoryview | None = None
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self._scan: npt.NDArray[Any] | None = None
        self._scan_bounds: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] = (np.zeros(0, np.int64),) * 2
        self.valid_bytes: int | None = None
        #: (position, length) of an incomplete batch at the end (a crash-truncated tail), once seen.
        self.tail: tuple[int, int] | None = None
        self.note_to: list[str] | None = None
        self._lies: dict[str, int] = {}
        self._plugin_indexes: dict[str, bytes] = {}
        self._check_manifest()
        # the side indexes are read on first use (a seek, a transaction scan): opening a
        # partition of thousands of segments reads no index file
        self._index: npt.NDArray[Any] | object | None = _UNREAD
        self._timeindex: npt.NDArray[Any] | object | None = _UNREAD
        self._txnindex: npt.NDArray[Any] | object | None = _UNREAD

    def __repr__(self) -> str:
        return f"<Segment {self.path.name} {self.size} bytes>"

    @property
    def is_remote(self) -> bool:
        """Whether the segment is read by ranges from a remote filesystem (not memory-mapped)."""
        return self._reader is not None

    def _side_file(self, suffix: str) -> bytes | None:
        """The bytes of the file beside the ``.log`` with ``suffix`` (None when absent)."""
        name = self.path.with_suffix(suffix).name
        if name in self._prefetched:
            return self._prefetched[name]
        if self._listing is not None and name not in self._listing:
            return None
        if self._reader is None:
            path = self.path.with_suffix(suffix)
            return Path(path).read_bytes() if Path(path).is_file() else None
        return _storage.read_small(_storage.Location(self._loc.fs, str(self.path.with_suffix(suffix)),
                                                     self.url[: -len(".log")] + suffix))

    def _side_index(self, suffix: str, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:
        raw = self._side_file(suffix)
        if raw is None:
            raw = self._plugin_indexes.get(suffix)
        return None if raw is None else _index_entries(raw, dtype)

    def _read_plugin_indexes(self, manifest: dict[str, Any]) -> None:
        """The indexes Aiven's plugin packs into one ``.indexes`` object per segment: the broker's
        index files concatenated (offset, time, producer snapshot, leader epoch, transaction),
        each at the ``{"position", "size"}`` its manifest's ``segmentIndexes`` names (only read
        for a plain manifest: no encryption). A range outside the object is noted, not used."""
        ranges = manifest.get("segmentIndexes")
        if not isinstance(ranges, dict):
            return
        raw = self._side_file(".indexes")
        if raw is None:
            return
        for key, suffix in (("offset", ".index"), ("timestamp", ".timeindex"), ("transaction", ".txnindex")):
            r = ranges.get(key)
            if not isinstance(r, dict):
                continue
            pos, size = r.get("position"), r.get("size")
            if not (isinstance(pos, int) and isinstance(size, int) and pos >= 0 and 0 <= size <= len(raw) - pos):
                self.notes.append(f".indexes: the manifest's {key} range {r} is outside the object "
                                  f"({len(raw)} bytes): not used")
                continue
            if size:
                self._plugin_indexes[suffix] = raw[pos : pos + size]
    @property
    def index(self) -> npt.NDArray[Any] | None:
        """The ``.index`` entries (read, and their structure checked, on first use)."""
        if self._index is _UNREAD:
            self._index = self._side_index(".index", OFFSET_INDEX_DTYPE)
            self._check_index()
        return self._index  # type: ignore[return-value]

    @index.setter
    def index(self, value: npt.NDArray[Any] | None) -> None:
        self._index = value
        self._index_ok = np.zeros(0 if value is None else len(value), np.int8)

    @property
    def timeindex(self) -> npt.NDArray[Any] | None:
        """The ``.timeindex`` entries (read, and their structure checked, on first use)."""
        if self._timeindex is _UNREAD:
            self._timeindex = self._side_index(".timeindex", TIME_INDEX_DTYPE)
            self._check_timeindex()
        return self._timeindex  # type: ignore[return-value]

    @timeindex.setter
    def timeindex(self, value: npt.NDArray[Any] | None) -> None:
        self._timeindex = value
        self._timeindex_at = np.zeros(0 if value is None else len(value), np.int64)

    @property
    def txnindex(self) -> npt.NDArray[Any] | None:
        """The ``.txnindex`` entries (read on first use)."""
        if self._txnindex is _UNREAD:
            self._txnindex = self._side_index(".txnindex", TXN_INDEX_DTYPE)
        return self._txnindex  # type: ignore[return-value]

    def _check_manifest(self) -> None:
        """A tiered segment whose plugin manifest (``.rsm-manifest``, Aiven's) says its object is
        compressed or encrypted by chunk cannot be read as a segment: UnsupportedError."""
        if self.segment_id is None:
            return
        raw = self._side_file(".rsm-manifest")
        if raw is None:
            return
        try:
            manifest = json.loads(raw)
            plain = manifest.get("compression") is False and manifest.get("encryption") is None
        except (ValueError, AttributeError):
            plain = False
        if not plain:
            raise UnsupportedError(
                f"{self.url}: its .rsm-manifest says the object is transformed by the tiered-storage "
                "plugin (compressed or encrypted chunks), not the segment's bytes; kbatch reads plain "
                "segment objects only")
        self._read_plugin_indexes(manifest)

    def view(self, start: int, stop: int) -> memoryview:
        """The bytes ``[start, stop)`` of the ``.log`` (clipped to its size): a slice of the
        mapping, or of a remote segment's read window (one range request when not in it)."""
        if self._reader is None:
            return self.data[start:stop]
        buf, off = self._reader.view(start, stop)
        return buf[start - off : min(stop, self.size) - off]

    @property
    def data(self) -> memoryview:
        """The ``.log`` bytes, memory-mapped read-only on first use (so that opening a large
        root costs no mapping or file descriptor per segment until it is read). A remote
        segment's whole object is fetched (readers use :meth:`view` instead)."""
        if self._data is None:
            if self._reader is not None:
                self._data = self._reader.view(0, self.size)[0] if self.size else memoryview(b"")
            elif self.size:
                with open(self.path, "rb") as f:
                    now = os.fstat(f.fileno()).st_size
                    if now < self.size:  # cut since it was opened: its tail would vanish unseen
                        raise StorageError(f"cannot read {self.url}: {now} bytes, {self.size} when it was "
                                           "opened (cut or rewritten since)", url=self.url)
                    self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._data = memoryview(self._mmap)
            else:
                self._data = memoryview(b"")
        return self._data

    def close(self) -> None:
        """Unmap the file (deferred to garbage collection while tables still point into it)."""
        if self._reader is not None:
            self._reader.close()
            self._data = None
        if self._mmap is not None and self._data is not None:
            try:
                self._data.release()
                self._mmap.close()
            except BufferError:
                pass
            else:
                self._mmap = self._data = None

    # -- indexes -------------------------------------------------------------------------

    def _batch_at(self, pos: int) -> npt.NDArray[Any] | None:
        """The header row of a complete batch framed at ``pos``, or None (one header read)."""
        if pos < 0 or self.size - pos < LOG_OVERHEAD + _MIN_ENTRY:
            return None
        sc = self._scan
        if sc is not None and not self.skipped:  # the cached scan is the framing itself
            k = int(np.searchsorted(sc["position"], pos))
            return sc[k : k + 1] if k < len(sc) and int(sc["position"][k]) == pos else None
        if self._reader is not None:
            one = self._reader.read(pos, 1 << 16)
            length = _FRAME.unpack_from(one)[1]
            if length < _MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
                return None
            if len(one) < LOG_OVERHEAD + length:
                one = self._reader.read(pos, LOG_OVERHEAD + length)
            heads, _, exc = _core_scan(one, 0, LOG_OVERHEAD + length)
            if exc is not None or len(heads) != 1:
                return None
            heads["position"] += pos
            return heads
        if self._data is None:
            # reads of the batch instead of mapping the file (unless the batch is large)
            with open(self.path, "rb") as f:
                length = _FRAME.unpack_from(os.pread(f.fileno(), LOG_OVERHEAD, pos))[1]
                if length < _MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
                    return None
                if length <= 1 << 20:
                    one = os.pread(f.fileno(), LOG_OVERHEAD + length, pos)
                    heads, _, exc = _core_scan(one, 0, len(one))
                    if exc is not None or len(heads) != 1:
                        return None
                    heads["position"] += pos
                    return heads
        length = _FRAME.unpack_from(self.data, pos)[1]
        if length < _MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
            return None
        heads, _, exc = _core_scan(self.data, pos, pos + LOG_OVERHEAD + length)
        return heads if exc is None and len(heads) == 1 else None

    def _note(self, text: str) -> None:
        self.notes.append(text)
        logger.warning("%s: %s", self.path, text)
        if self.note_to is not None:
            self.note_to.append(f"{self.path.name}: {text}")

    # Structure only, vectorised, without reading the .log: a lookup needs increasing entries.
    # Whether an entry tells the truth is checked when a seek first uses it.

    def _check_index(self) -> None:
        idx: npt.NDArray[Any] | None = self._index  # type: ignore[assignment]
        if idx is not None and len(idx):
            rel = idx["relative_offset"].astype(np.int64)
            where = idx["position"].astype(np.int64)
            if not (np.all(rel >= 0) and np.all(np.diff(rel) > 0) and np.all(np.diff(where) > 0)):
                self._note(f"{self.path.with_suffix('.index').name} is inconsistent with the log: not used")
                idx = None
        self.index = idx  # per entry, once checked: 1 holds, -1 lies

    def _check_timeindex(self) -> None:
        tix: npt.NDArray[Any] | None = self._timeindex  # type: ignore[assignment]
        if tix is not None and len(tix) and not (
            np.all(np.diff(tix["timestamp"].astype(np.int64)) >= 0)
            and np.all(tix["relative_offset"] >= 0)
            and np.all(np.diff(tix["relative_offset"].astype(np.int64)) >= 0)
        ):
            self._note(f"{self.path.with_suffix('.timeindex').name} is inconsistent with the log: not used")
            tix = None
        self.timeindex = tix  # per entry, once checked: the batch position + 1, -1 lies

    def _lie(self, suffix: str, what: str) -> None:
        """Note an index entry that does not match the log; at ``_MAX_LIES``, drop the file."""
        name = self.path.with_suffix(suffix).name
        self._lies[suffix] = self._lies.get(suffix, 0) + 1
        self._note(f"{name} {what}: entry not used")
        if self._lies[suffix] >= _MAX_LIES:
            self._note(f"{name}: {_MAX_LIES} entries do not match the log: not used")
            if suffix == ".index":
                self.index = None
            else:
                self.timeindex = None

    def _offset_entry_holds(self, k: int) -> bool:
        """Whether ``.index`` entry ``k`` points at a batch holding its offset (checked once)."""
        state = int(self._index_ok[k])
        if state == 0:
            assert self.index is not None
            rel, pos = (int(v) for v in self.index[k].tolist())
            off = self.base_offset + rel
            row = self._batch_at(pos)
            first = -1 if row is None else int(row["base_offset"][0])
            holds = row is not None and first <= off <= first + int(row["last_offset_delta"][0])
            self._index_ok[k] = state = 1 if holds else -1
            if not holds:
                self._lie(".index", f"entry {k} (offset {off}, position {pos}) is not a batch holding that offset")
        return state > 0

    def index_position(self, offset: int) -> int:
        """Byte position to scan from for ``offset`` (0 without a usable ``.index``).

        The position of the last ``.index`` entry at or before ``offset`` that
        holds a complete batch containing the entry's offset (one header read
        per entry, the first time it is used); an entry that does not is noted
        in :attr:`notes` and the one before it is tried.
        """
        idx = self.index
        if idx is None or len(idx) == 0:
            return 0
        k = int(np.searchsorted(idx["relative_offset"].astype(np.int64), offset - self.base_offset, "right")) - 1
        while k >= 0 and self.index is not None and not self._offset_entry_holds(k):
            k -= 1
        return 0 if k < 0 or self.index is None else int(idx["position"][k])

    def _time_entry_position(self, k: int, on_corruption: OnCorruption) -> int:
        """Position of the batch ``.timeindex`` entry ``k`` names, or -1 when the entry does not
        match the log (checked once). An entry is where the segment's largest timestamp so far
        rose to its timestamp: the batch holding its offset has that largest timestamp and the
        batch before it a smaller one."""
        at = int(self._timeindex_at[k])
        if at == 0:
            assert self.timeindex is not None
            ts, rel = (int(v) for v in self.timeindex[k].tolist())
            off = self.base_offset + rel
            pos, row, prev = self._seek(off, on_corruption)
            holds = row is not None and int(row["base_offset"][0]) <= off and int(row["max_timestamp"][0]) == ts
            if holds and row is not None and pos > 0:
                if prev is None:
                    prev = self._batch_before(pos, int(row["base_offset"][0]), on_corruption)
                holds = (
                    prev is not None
                    and int(prev["position"][0]) + LOG_OVERHEAD + int(prev["batch_length"][0]) == pos
                    and int(prev["max_timestamp"][0]) < ts
                )
            self._timeindex_at[k] = at = pos + 1 if holds else -1
            if not holds:
                self._lie(".timeindex", f"entry {k} (timestamp {ts}, offset {off}) does not match the batches "
                          "at that offset")
        return at - 1

    def _batch_before(self, pos: int, base: int, on_corruption: OnCorruption) -> npt.NDArray[Any] | None:
        """Header row of the last batch framed before ``pos`` (that of offset ``base``), from the
        checked ``.index`` position before ``base``."""
        p = self.index_position(base - 1)
        last = None
        while p < pos:
            h, p, at_end = self.frame_headers(p, pos - p, on_corruption)
            before = h[h["position"] < pos]
            if len(before):
                last = before[-1:]
            if len(before) < len(h) or at_end:
                break
        return last

    def _time_entry(self, timestamp: int, on_corruption: OnCorruption) -> tuple[int, int]:
        """(timestamp, batch position) of the last ``.timeindex`` entry at or before ``timestamp``
        that matches the log, or (-1, 0) when none does."""
        tix = self.timeindex
        if tix is None or len(tix) == 0 or self.index is None:
            return -1, 0  # without .index, checking an entry would cost the linear scan it saves
        k = int(np.searchsorted(tix["timestamp"].astype(np.int64), timestamp, "right")) - 1
        while k >= 0 and self.timeindex is not None:
            pos = self._time_entry_position(k, on_corruption)
            if pos >= 0:
                return int(tix["timestamp"][k]), pos
            k -= 1
        return -1, 0

    def timestamp_position(self, timestamp: int, on_corruption: OnCorruption = "raise") -> int:
        """Byte position to scan from for the first record whose timestamp is >= ``timestamp``.

        The ``.timeindex`` then ``.index`` lookups (0 without them), each entry
        used checked against the batch it names, as :meth:`index_position`.

        Examples
        --------
        >>> import kbatch, tempfile
        >>> root = tempfile.mkdtemp()
        >>> with LogWriter(root, "t", 0, index_interval_bytes=1) as w:
        ...     for i in range(4):
        ...         _ = w.append(kbatch.encode([b"x"], base_offset=i, timestamps=[100 + i]))
        >>> seg = open_log(f"{root}/t-0").segments[0]
        >>> seg.timestamp_position(102) == seg.position_for(2), seg.notes
        (True, [])
        >>> entries = seg.index.copy()
        >>> entries["position"][1] += 3  # offset 2's batch, 3 bytes in
        >>> entries.tofile(seg.path.with_suffix(".index"))
        >>> seg = Segment(seg.path)
        >>> seg.timestamp_position(102) == seg.position_for(2)
        True
        >>> seg.notes  # doctest: +ELLIPSIS
        ['00000000000000000000.index entry 1 (offset 2, position 141) is not a batch holding ...']
        """
        return self._time_entry(timestamp, on_corruption)[1]

    # -- scanning ------------------------------------------------------------------------

    def frame(
        self, pos: int, max_bytes: int, on_corruption: OnCorruption = "raise"
    ) -> tuple[list[int], int, bool]:
        """Batch positions from ``pos`` for about ``max_bytes``: (positions, next position, at end).

        With ``on_corruption="skip"``, a frame that cannot be a batch is
        recorded in :attr:`skipped` and walking resumes at the next batch whose
        CRC verifies.
        """
        heads, nxt, at_end = self.frame_headers(pos, max_bytes, on_corruption)
        return heads["position"].tolist(), nxt, at_end

    def frame_headers(
        self, pos: int, max_bytes: int, on_corruption: OnCorruption = "raise"
    ) -> tuple[npt.NDArray[Any], int, bool]:
        """:meth:`frame` with the batches' header rows (:data:`kbatch.BATCH_DTYPE`, as :meth:`scan`
        gives them) instead of their positions: (rows, next position, at end)."""
        sc = self._scan
        if sc is not None and len(sc) and not self.skipped:  # reuse the cached scan
            starts, ends = self._scan_bounds
            k = int(np.searchsorted(starts, pos))
            if k < len(starts) and int(starts[k]) == pos:
                j = min(max(int(np.searchsorted(ends, pos + max_bytes, "left")), k), len(starts) - 1)
                return sc[k : j + 1], int(ends[j]), j == len(starts) - 1
        if self._reader is not None:
            heads, stop, err, more = self._frame_remote(pos, max_bytes)
        else:
            heads, stop, err, more = scan_headers(self.data, pos, self.size, max_bytes, self.path)
        if err is None:
            if not more and stop < self.size and self.tail is None:
                self.tail = (stop, self.size - stop)
                logger.info("%s ends with %d bytes of an incomplete batch at byte %d", self.path,
                            self.size - stop, stop)
            return heads, stop, not more
        if on_corruption == "raise":
            raise err
        nxt = _resync(self.data, stop, self.size) if self._reader is None else self._resync_remote(stop)
        self._skip(stop, nxt - stop, err.reason)
        return heads, nxt, nxt >= self.size

    def _frame_window(
        self, start: int, max_bytes: int
    ) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
        """:func:`scan_headers` of a remote segment from ``start`` within one read window of about
        ``max_bytes`` (grown to hold the batch that crosses it), in file positions."""
        assert self._reader is not None
        buf, off = self._reader.view(start, start + max(max_bytes, 1))
        heads, stop, err, more = scan_headers(buf, start - off, len(buf), max_bytes, self.path)
        heads["position"] += off
        stop += off
        end = off + len(buf)
        if err is None and not more and stop < end < self.size:
            # the window ends inside the batch at ``stop``: grow it (from ``start``, so that
            # the read that decodes these batches finds them in it) to hold that batch
            if end - stop < LOG_OVERHEAD:  # the frame's length is past the window too: a chunk more
                buf, off = self._reader.view(start, end + LOG_OVERHEAD)
                end = off + len(buf)
            length = _FRAME.unpack_from(buf, stop - off)[1] if end - stop >= LOG_OVERHEAD else 0
            want = stop + (LOG_OVERHEAD + length if length >= _MIN_ENTRY else BATCH_OVERHEAD)
            buf, off = self._reader.view(start, want)
            more_heads, stop2, err, more = scan_headers(buf, stop - off, len(buf), 1, self.path)
            more_heads["position"] += off
            heads = np.concatenate((heads, more_heads))
            stop = stop2 + off
            end = off + len(buf)
        if err is not None:
            shifted = CorruptRecordError(err.reason, err.position + off if err.position >= 0 else -1, -1, err.field,
                                         batch_position=err.batch_position + off)  # (the reason names the file)
            shifted.path = str(self.path)  # type: ignore[attr-defined]
            shifted.__cause__ = err.__cause__
            return heads, stop, shifted, False
        # more to frame: the budget stopped it, or the window ends before the object does
        return heads, stop, None, stop < self.size and (more or end < self.size)

    def _frame_remote(
        self, pos: int, max_bytes: int
    ) -> tuple[npt.NDArray[Any], int, CorruptRecordError | None, bool]:
        """:func:`scan_headers` for a remote segment: one window when ``max_bytes`` is at most
        ``_MAX_WINDOW`` (the chunk a read decodes next), else window after window of
        :data:`kbatch._storage.CHUNK` (headers of a whole segment, in bounded memory)."""
        assert self._reader is not None
        if max_bytes <= _MAX_WINDOW:
            return self._frame_window(pos, max_bytes)
        parts = []
        start = pos
        while True:
            heads, pos, err, more = self._frame_window(pos, self._reader.chunk)
            parts.append(heads)
            if err is not None or not more or pos - start >= max_bytes:
                return np.concatenate(parts) if len(parts) > 1 else parts[0], pos, err, more

    def _resync_remote(self, pos: int) -> int:
        """:func:`_resync` for a remote segment, window by window: the next position after
        ``pos`` where a RecordBatch with a valid CRC starts (or the end). A candidate cut by a
        window's end is read whole (one request) to check its CRC."""
        assert self._reader is not None
        p = pos
        while True:
            buf, off = self._reader.view(p, p + 2 * self._reader.chunk)
            end = off + len(buf)
            u8 = np.frombuffer(buf, dtype=np.uint8)
            nxt = end - BATCH_OVERHEAD  # where the next window starts when nothing is found here
            for c in (np.flatnonzero(u8[p - off + 1 + MAGIC_OFFSET :] == 2) + p - off + 1).tolist():
                at = c + off
                if len(buf) - c < BATCH_OVERHEAD:
                    nxt = at - 1  # (the search starts after p)
                    break
                length = _FRAME.unpack_from(buf, c)[1]
                if length < _MIN_V2 or self.size - at - LOG_OVERHEAD < length:
                    continue
                if len(buf) - c - LOG_OVERHEAD >= length:
                    one = buf[c : c + LOG_OVERHEAD + length]
                else:
                    one = memoryview(self._reader.read(at, LOG_OVERHEAD + length))
                if crc32c(one[ATTRIBUTES_OFFSET:]) == _U32.unpack_from(one, CRC_OFFSET)[0]:
                    return int(at)
            if end >= self.size:
                return self.size
            p = max(p + 1, nxt)

    def _skip(self, position: int, length: int, reason: str) -> None:
        item = Skipped(str(self.path), position, length, reason)
        if item not in self.skipped:
            self.skipped.append(item)
            logger.warning("skipped %d bytes at byte %d of %s: %s", length, position, self.path, reason)

    def scan(self, on_corruption: OnCorruption = "raise") -> npt.NDArray[Any]:
        """Every batch's header as a :data:`kbatch.BATCH_DTYPE` row, without parsing records.

        Nothing is decompressed and no CRC is computed; control batches get
        their ``control_type`` and ``coordinator_epoch``. ``first_record`` is
        -1. Afterwards :attr:`valid_bytes` is where the last complete batch
        ends (less than ``size`` after a crash-truncated tail). The result is
        cached.

        Raises
        ------
        CorruptRecordError
            A frame that cannot be a batch (``on_corruption="raise"``), with
            the file and byte position.
        """
        if self._scan is not None and (on_corruption == "skip" or not self.skipped):
            return self._scan  # (a scan that skipped is framed again in raise mode: to raise)
        parts: list[npt.NDArray[Any]] = []
        pos = 0
        while True:
            got, pos, at_end = self.frame_headers(pos, 1 << 62, on_corruption)
            parts.append(got)
            if at_end:
                break
        self._scan = parts[0] if len(parts) == 1 else np.concatenate(parts)
        starts = self._scan["position"].copy()
        self._scan_bounds = (starts, starts + LOG_OVERHEAD + self._scan["batch_length"])
        self.valid_bytes = min(pos, self.size)
        return self._scan

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (its base offset when empty)."""
        if self._scan is not None:
            b = self._scan
        else:
            pos = self.index_position(1 << 62)
            b = np.zeros(0, dtype=BATCH_DTYPE)
            while True:
                more, pos, at_end = self.frame_headers(pos, 1 << 62, "skip")
                b = more[-1:] if len(more) else b
                if at_end:
                    break
        if len(b) == 0:
            return self.base_offset
        return int(b["base_offset"][-1]) + int(b["last_offset_delta"][-1]) + 1

    def max_timestamp(self, on_corruption: OnCorruption = "raise") -> int:
        """The largest batch timestamp in the segment (-1 when none).

        From the last ``.timeindex`` entry that matches the log and the headers
        of the batches from the one it names, else from every header.
        """
        ts, pos = self._time_entry(np.iinfo(np.int64).max, on_corruption)
        if ts < 0:
            b = self.scan(on_corruption)
            return int(b["max_timestamp"].max()) if len(b) else -1
        while True:
            more, pos, at_end = self.frame_headers(pos, 1 << 62, on_corruption)
            if len(more):
                ts = max(ts, int(more["max_timestamp"].max()))
            if at_end:
                return ts

    def _seek(
        self, offset: int, on_corruption: OnCorruption
    ) -> tuple[int, npt.NDArray[Any] | None, npt.NDArray[Any] | None]:
        """(position, header row, row of the batch before if framed) of the first batch whose
        last offset is >= ``offset``, or (the end, None, None). Frames in ``on_corruption``
        mode from the checked ``.index`` position."""
        b = self._scan
        if b is not None and (on_corruption == "skip" or not self.skipped):
            last = b["base_offset"] + b["last_offset_delta"]
            k = int(np.searchsorted(last, offset, "left"))
            if k == len(b):
                return self.valid_bytes or self.size, None, None
            return int(b["position"][k]), b[k : k + 1], b[k - 1 : k] if k else None
        pos = self.index_position(offset)
        prev = None
        while True:
            h, nxt, at_end = self.frame_headers(pos, 1 << 20, on_corruption)
            if len(h):
                hit = np.flatnonzero(h["base_offset"] + h["last_offset_delta"] >= offset)
                if len(hit):
                    k = int(hit[0])
                    return int(h["position"][k]), h[k : k + 1], h[k - 1 : k] if k else prev
                prev = h[-1:]
            pos = nxt
            if at_end:
                return pos, None, None

    def position_for(self, offset: int, on_corruption: OnCorruption = "raise") -> int:
        """Position of the first batch whose last offset is >= ``offset`` (or the end).

        Scans from :meth:`index_position` (each ``.index`` entry used is checked
        first); a frame that cannot be a batch on the way raises, or with
        ``on_corruption="skip"`` is recorded in :attr:`skipped`, as a read would.
        """
        return self._seek(offset, on_corruption)[0]

    def headers_at(self, positions: Sequence[int]) -> npt.NDArray[Any]:
        """BATCH_DTYPE header rows of the batches at ``positions`` (from the cached scan if any)."""
        sc = self._scan
        if sc is not None and len(positions):
            idx = np.searchsorted(sc["position"], np.asarray(positions, dtype=np.int64))
            if np.all(idx < len(sc)) and np.array_equal(sc["position"][np.minimum(idx, len(sc) - 1)], positions):
                return sc[idx]
        if self._reader is not None and len(positions):
            first, last = int(min(positions)), int(max(positions))
            head = self._reader.read(last, LOG_OVERHEAD)
            length = _FRAME.unpack_from(head)[1] if len(head) == LOG_OVERHEAD else 0
            buf, off = self._reader.view(first, last + LOG_OVERHEAD + max(length, 0))
            rows = _headers(buf, np.asarray(positions, dtype=np.int64) - off)
            rows["position"] += off
            return rows
        return _headers(self.data, positions)

    def decode_range(
        self,
        start: int,
        stop: int,
        *,
        verify_crc: bool = True,
        on_corruption: OnCorruption = "raise",
        heads: npt.NDArray[Any] | None = None,
        drop: npt.NDArray[np.bool_] | None = None,
    ) -> Iterator[RecordTable]:
        """Decode the batches framed in ``[start, stop)``, zero-copy when uncompressed.

        With ``on_corruption="skip"``, a batch that fails (CRC, records) is
        recorded in :attr:`skipped` and decoding goes on after it; otherwise
        the error is re-raised with this file's name and file positions.

        ``drop`` (with ``heads``, the header rows of the batches in the range):
        batches left out of the tables altogether, their records never parsed
        or decompressed and their CRCs never checked.
        """
        while start < stop:
            mask = None
            if drop is not None and heads is not None:
                pos = heads["position"]
                mask = drop[int(np.searchsorted(pos, start)) : int(np.searchsorted(pos, stop))]
                if not mask.any():
                    mask = None
            try:
                if mask is None:
                    yield _core_decode(self.view(start, stop), verify_crc=verify_crc)
                else:
                    yield _core_decode(self.view(start, stop), verify_crc=verify_crc, skip_batches=mask,
                                       keep_skipped_rows=False)
                return
            except CorruptRecordError as exc:
                bad = start + exc.batch_position if exc.batch_position >= 0 else start
                if on_corruption == "raise":
                    raise self._relocate(exc, start) from exc
                partial = exc.partial
                if isinstance(partial, RecordTable) and len(partial.batches):
                    yield partial
                length = LOG_OVERHEAD + _FRAME.unpack_from(self.view(bad, bad + LOG_OVERHEAD))[1]
                self._skip(bad, length, exc.reason)
                start = bad + length

    def _relocate(self, exc: CorruptRecordError, start: int) -> CorruptRecordError:
        new = type(exc)(
            f"{exc.reason} in {self.path}",
            exc.position + start if exc.position >= 0 else -1,
            exc.batch_index,
            exc.field,
            batch_position=exc.batch_position + start if exc.batch_position >= 0 else -1,
            record_index=exc.record_index,
        )
        if isinstance(exc, CRCError):
            new.stored, new.computed = exc.stored, exc.computed  # type: ignore[attr-defined]
        new.partial = exc.partial
        new.path = str(self.path)  # type: ignore[attr-defined]
        return new

    def read_next(self, other: Segment) -> None:
        """``other`` is read after this one: a remote segment requests its first chunk as soon
        as this one's last is requested (no-op locally)."""
        if self._reader is not None and other._reader is not None:
            self._reader.then(other._reader)

    def release(self, start: int, stop: int) -> None:
        """Let the kernel drop this process's mapping of ``[start, stop)`` (bounded RSS); a
        remote segment read to its end forgets its window."""
        if self._reader is not None and stop >= self.size:
            self._reader.drop()
        if self._mmap is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        a = start - start % page
        if stop > a:
            with contextlib.suppress(OSError, ValueError):
                self._mmap.madvise(mmap.MADV_DONTNEED, a, min(stop, self.size) - a)


def _overlapping(aborted: list[tuple[int, int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """The aborted transactions a broker lists for a fetch of offsets ``first .. last``.

    ``aborted`` is sorted by first offset: those that begin after ``last`` are cut off by
    bisection, those that ended (ABORT marker) before ``first`` by the scan.
    """
    stop = bisect.bisect_right(aborted, last, key=lambda a: a[1])
    return [(pid, f) for pid, f, end in aborted[:stop] if end >= first]


class LogDir:
    """A partition directory ``<topic>-<partition>``: its segments, metadata and readers.

    Use :func:`open_log` to make one.

    Attributes
    ----------
    path : Path or PurePosixPath
        A remote directory's path in its filesystem (``url`` has the scheme).
    url : str
    root : str
        The ``log.dirs`` root (or tiered-storage prefix) holding it: which copy, when
        :func:`open_logs` found several (``replicas="all"``).
    topic : str
    partition : int
    topic_id : str or None
        From ``partition.metadata`` (base64url, as Kafka prints it), or from the folder name
        of a tiered-storage layout (``<topic>-<topic id>/<partition>``).
    leader_epochs : list of (int, int)
        ``(epoch, start_offset)`` from ``leader-epoch-checkpoint``.
    segments : list of Segment
        In offset order.
    notes : list of str
        Files skipped, indexes, index entries and checkpoints not used, and why
        (an index entry that does not match the ``.log`` is found, and noted
        here, by the first read that seeks through it).
    checkpoints : dict of str to int
        This partition's entries in the root's checkpoint files, by short name:
        ``log_start_offset``, ``recovery_point``, ``high_watermark``,
        ``cleaner_offset`` (hints: see :attr:`log_start_offset` and
        :meth:`verify_checkpoints`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | _storage.Location,
        *,
        segments: Sequence[str] | None = None,
        transactions: tuple[Sequence[tuple[int, int, int]], int | None] | None = None,
        filesystem: Any = None,
        storage_options: dict[str, Any] | None = None,
        listing: Sequence[_storage.Entry] | None = None,
    ) -> None:
        loc = _storage.locate(path, filesystem, storage_options)
        self.url = loc.url
        #: Where the directory is (its filesystem: None when local).
        self.location = loc
        self.path: Path | PurePosixPath = Path(loc.path) if loc.fs is None else PurePosixPath(loc.path)
        files: dict[str, int] | None = None  # a remote directory's files and sizes, when listed
        prefetched: dict[str, bytes] = {}  # and the small ones the listing's caller read
        if loc.fs is None:
            if not Path(self.path).is_dir():
                raise FileNotFoundError(f"not a directory: {self.path}")
        elif listing is not None or segments is None:
            entries = _storage.list_files(loc) if listing is None else listing
            files = {posixpath.basename(e.path): e.size for e in entries if not e.is_dir}
            prefetched = {posixpath.basename(e.path): e.data for e in entries if e.data is not None}
        self.topic, self.partition, self.topic_id = partition_name(self.path)
        tiered = self.topic_id is not None  # <topic>-<topic id>/<partition>: tiered storage
        self.notes: list[str] = []
        self.leader_epochs: list[tuple[int, int]] = []

        def text(name: str) -> str | None:
            if files is not None and name not in files:
                return None
            raw = prefetched[name] if name in prefetched else _storage.read_small(_storage.join(loc, name))
            try:
                return None if raw is None else raw.decode()
            except UnicodeDecodeError:
                return None

        content = text("partition.metadata")
        if content is not None:
            for line in content.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    self.topic_id = value.strip()
        content = text("leader-epoch-checkpoint")
        if content is not None:
            lines = content.split("\n")
            try:
                count = int(lines[1])
                self.leader_epochs = [
                    (int(a), int(b)) for a, b in (line.split() for line in lines[2 : 2 + count])
                ]
            except (IndexError, ValueError):
                self.notes.append("leader-epoch-checkpoint is malformed: ignored")
        found: list[Segment] = []
        if segments is not None:  # a part of the log, named by the caller: the directory is not listed
            for name in segments:
                if not _SEGMENT_NAME.match(name):
                    raise ValueError(f"{name!r} is not a segment name (<20-digit base offset>.log)")
                found.append(self._segment(loc, name, files, prefetched))
        if segments is None:
            names = sorted(files) if files is not None else sorted(e.name for e in Path(self.path).iterdir())
            for name in names:
                if name.endswith(_SKIPPED_SUFFIXES):
                    self.notes.append(f"skipped {name} (left over by deletion, cleaning or compaction)")
                elif _SEGMENT_NAME.match(name):
                    found.append(self._segment(loc, name, files, prefetched))
        self.segments = sorted(found, key=lambda s: s.base_offset)
        for seg in self.segments:
            self.notes.extend(f"{seg.path.name}: {n}" for n in seg.notes)
            seg.note_to = self.notes  # and what a seek finds later (index entries that lie)
        for a, b in itertools.pairwise(self.segments):
            a.read_next(b)  # a remote read of one segment downloads the next's start meanwhile
        for note in self.notes:
            logger.info("%s: %s", self.path, note)
        self._txn: tuple[list[tuple[int, int, int]], int | None] | None = None
        #: The ``log.dirs`` root (or tiered-storage prefix) holding this directory.
        self.root = str(self.path.parent) if loc.fs is None else posixpath.dirname(loc.url)
        self._checkpoints: dict[str, int] | None = {}
        # a <topic>-<partition> directory: its root's checkpoint files (a local root's read now,
        # cached by stat; a remote root's on first use, once per root)
        self._checkpoint_root: _storage.Location | None = None
        if not tiered and self.partition >= 0:
            if loc.fs is None:
                self._use_checkpoints(*root_checkpoints(Path(self.path).parent), str(self.path.parent))
            else:
                self._checkpoint_root = _storage.Location(loc.fs, posixpath.dirname(loc.path), self.root)
                self._checkpoints = None
        self._log_start: int | None = None
        if transactions is not None:
            self._txn = (sorted(transactions[0], key=lambda a: a[1]), transactions[1])

    @staticmethod
    def _segment(
        loc: _storage.Location, name: str, files: dict[str, int] | None, prefetched: dict[str, bytes]
    ) -> Segment:
        if loc.fs is None:
            return Segment(Path(loc.path) / name)
        return Segment(_storage.join(loc, name), listing=files, prefetched=prefetched)

    def __repr__(self) -> str:
        return f"<LogDir {self.topic}-{self.partition}: {len(self.segments)} segments>"

    def read_next(self, other: LogDir) -> None:
        """``other`` is read after this log (``open_logs`` says so of the logs it returns, in
        order): reading this remote log's last segment requests the first chunk of ``other``'s
        first segment once its own last chunk is requested (no-op locally)."""
        if self.segments and other.segments:
            self.segments[-1].read_next(other.segments[0])

    def close(self) -> None:
        """Unmap every segment."""
        for seg in self.segments:
            seg.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def skipped(self) -> list[Skipped]:
        """Corrupt ranges left out by ``on_corruption="skip"`` so far."""
        return [s for seg in self.segments for s in seg.skipped]

    def _use_checkpoints(self, by_file: dict[str, dict[tuple[str, int], int]], problems: list[str], root: str) -> None:
        self.notes.extend(f"{root}/{n}" for n in problems)
        self._checkpoints = {CHECKPOINT_FILES[fname]: by_partition[(self.topic, self.partition)]
                             for fname, by_partition in by_file.items()
                             if (self.topic, self.partition) in by_partition}

    @property
    def checkpoints(self) -> dict[str, int]:
        """This partition's offsets in its root's checkpoint files (hints)."""
        if self._checkpoints is None:
            assert self._checkpoint_root is not None
            self._use_checkpoints(*remote_root_checkpoints(self._checkpoint_root), self.root)
        assert self._checkpoints is not None
        return self._checkpoints

    @property
    def log_start_offset(self) -> int:
        """Where the log starts, as the broker loads it: the first segment's base offset, or
        the root's ``log-start-offset-checkpoint`` when that is later (after DeleteRecords or
        retention the records before it are deleted although still on disk). A checkpointed
        offset past the log end is not trusted: noted in :attr:`notes` and ignored."""
        if self._log_start is None:
            first = self.segments[0].base_offset if self.segments else 0
            start = first
            cp = self.checkpoints.get(CHECKPOINT_FILES[LOG_START])
            if cp is not None and cp > first:
                end = self.next_offset
                if cp <= end:
                    start = cp
                else:
                    self.notes.append(
                        f"{LOG_START} says {self.topic}-{self.partition} starts at {cp}, past the log end "
                        f"{end}: ignored (the log starts at {first})"
                    )
            self._log_start = start
        return self._log_start

    def verify_checkpoints(self) -> list[str]:
        """Check this partition's checkpointed offsets against its log; return what disagrees.

        A recovery point or high watermark past the log end means the copy holds less
        than the broker had flushed or acknowledged (a truncated copy); a log start or
        cleaner offset past the end is ignored. Each finding is added to :attr:`notes`.
        """
        found = []
        end = self.next_offset
        _ = self.log_start_offset  # notes a log start past the end
        for name, value in self.checkpoints.items():
            if name == CHECKPOINT_FILES[LOG_START] or value <= end:
                continue
            what = {CHECKPOINT_FILES[RECOVERY_POINT]: "the broker had flushed more than this copy holds"}.get(
                name, "past what this copy holds"
            )
            note = f"{name} {value} is past the log end {end} of {self.topic}-{self.partition}: {what}"
            found.append(note)
            if note not in self.notes:
                self.notes.append(note)
        return found

    @property
    def next_offset(self) -> int:
        """The log end offset: one past the last offset of the last non-empty segment."""
        for seg in reversed(self.segments):
            if seg.size:
                return seg.next_offset
        return self.segments[-1].base_offset if self.segments else 0

    def scan(self, on_corruption: OnCorruption = "raise") -> npt.NDArray[Any]:
        """Every batch header of every segment (positions are per segment)."""
        parts = [seg.scan(on_corruption) for seg in self.segments]
        return np.concatenate(parts) if parts else np.zeros(0, BATCH_DTYPE)

    def transactions(self, on_corruption: OnCorruption = "raise") -> tuple[list[tuple[int, int, int]], int | None]:
        """Aborted transactions ``(producer_id, first_offset, last_offset)`` and the last stable offset.

        Aborted transactions come from the ABORT control markers in the
        segments' headers (a header scan, no decompression); a segment's
        ``.txnindex`` is a hint checked against them (:func:`check_aborted_index`:
        an entry naming no marker, or claiming a later start than the data, and a
        marker with no entry are noted in :attr:`notes`; the markers are used).
        The last stable offset is the first offset of the earliest transaction
        still open at the end of the log (None when none is open). Needs every
        segment's headers (cached): a frame that cannot be a batch raises, or
        with ``on_corruption="skip"`` is recorded in :attr:`skipped` (a marker
        may have been lost with it; a ``.txnindex`` entry naming no marker in
        such a segment is noted as such, and not used: a read gives what it
        gives with the ``.txnindex`` deleted).
        """
        if self._txn is None or (on_corruption == "raise" and self.skipped):
            ongoing: dict[int, int] = {}
            aborted: list[tuple[int, int, int]] = []
            for seg in self.segments:
                found, ongoing = txn_state(seg.scan(on_corruption), ongoing)
                if seg.txnindex is not None:
                    t = seg.txnindex
                    entries = zip(t["producer_id"].tolist(), t["first_offset"].tolist(), t["last_offset"].tolist(),
                                  strict=True)
                    problems = check_aborted_index(entries, found, unverifiable=bool(seg.skipped))
                    for text in problems:
                        if f"{seg.path.name}: {text}" not in self.notes:
                            seg._note(text)
                aborted.extend(found)
            aborted.sort(key=lambda a: a[1])
            self._txn = (aborted, min(ongoing.values()) if ongoing else None)
        return self._txn

    def offset_for_timestamp(
        self, timestamp: int, *, on_corruption: OnCorruption = "raise", verify_crc: bool = True
    ) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp`` (Kafka's ListOffsets).

        None when no record is that late. The ``.timeindex`` and ``.index``
        entries used are checked against the batches they name first (an entry
        that does not match is noted in :attr:`notes` and not used), so the
        answer is the one a scan of the ``.log`` alone gives. ``on_corruption``
        and ``verify_crc`` as in :meth:`read`: a corrupt batch on the way
        raises, or is recorded in :attr:`skipped` and passed.
        """
        if on_corruption not in ("raise", "skip"):
            raise ValueError(f"on_corruption must be 'raise' or 'skip', got {on_corruption!r}")
        for seg in self.segments:
            if seg.size == 0 or seg.max_timestamp(on_corruption) < timestamp:
                continue
            pos = seg.timestamp_position(timestamp, on_corruption)
            while True:
                h, nxt, at_end = seg.frame_headers(pos, 1 << 20, on_corruption)
                for k in np.flatnonzero(h["max_timestamp"] >= timestamp).tolist():
                    p = int(h["position"][k])
                    size = LOG_OVERHEAD + int(h["batch_length"][k])
                    try:
                        t = _core_decode(seg.view(p, p + size), verify_crc=verify_crc)
                    except CorruptRecordError as exc:
                        if on_corruption == "raise":
                            raise seg._relocate(exc, p) from exc
                        seg._skip(p, size, exc.reason)
                        continue
                    # as the broker's ListOffsets: only offsets from the log start on
                    hit = np.flatnonzero(
                        (t.records["timestamp"] >= timestamp) & (t.records["offset"] >= self.log_start_offset)
                    )
                    if len(hit):
                        return int(t.records["offset"][hit[0]])
                pos = nxt
                if at_end:
                    break
        return None

    def iter_tables(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        start_timestamp: int | None = None,
        end_timestamp: int | None = None,
        isolation_level: IsolationLevel = "read_uncommitted",
        max_records: int | None = None,
        *,
        on_corruption: OnCorruption = "raise",
        verify_crc: bool = True,
        chunk_bytes: int = 16 << 20,
    ) -> Iterator[RecordTable]:
        """Stream the records :meth:`read` returns as RecordTables of about ``chunk_bytes`` of log.

        Memory stays bounded: each table covers whole batches of one segment
        (zero-copy views of the mapped file when uncompressed), and pages of
        the file already passed are released from this process's mapping. With
        ``read_committed``, the batches of aborted transactions are never
        decoded (nor their CRCs checked) and have no rows in the tables.

        Examples
        --------
        >>> import kbatch, tempfile
        >>> root = tempfile.mkdtemp()
        >>> with LogWriter(root, "t", 0) as w:
        ...     _ = w.append(kbatch.encode([b"%d" % i for i in range(10)], max_batch_records=2))
        >>> tables = open_log(f"{root}/t-0").iter_tables(start_offset=3, chunk_bytes=150)
        >>> [t.records["offset"].tolist() for t in tables]
        [[3, 4, 5], [6, 7, 8, 9]]
        """
        return self._iter(
            start_offset, end_offset, start_timestamp, end_timestamp, isolation_level, max_records,
            on_corruption, verify_crc, chunk_bytes,
        )

    def _iter(
        self,
        start_offset: int | None,
        end_offset: int | None,
        start_timestamp: int | None,
        end_timestamp: int | None,
        isolation_level: IsolationLevel,
        max_records: int | None,
        on_corruption: OnCorruption,
        verify_crc: bool,
        chunk_bytes: int,
    ) -> Iterator[RecordTable]:
        # read_committed: each chunk is decoded in one call with its aborted batches skipped
        # (never parsed, decompressed or CRC-checked) and their rows dropped; what is left is
        # clipped to the range (and the last stable offset) as read_uncommitted is.
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {isolation_level!r}")
        if on_corruption not in ("raise", "skip"):
            raise ValueError(f"on_corruption must be 'raise' or 'skip', got {on_corruption!r}")
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be >= 1")
        start = self.log_start_offset if start_offset is None else int(start_offset)
        end = None if end_offset is None else int(end_offset)
        if start_timestamp is not None:
            found = self.offset_for_timestamp(int(start_timestamp), on_corruption=on_corruption, verify_crc=verify_crc)
            if found is None:
                return
            start = max(start, found)
        if end_timestamp is not None:
            found = self.offset_for_timestamp(int(end_timestamp), on_corruption=on_corruption, verify_crc=verify_crc)
            if found is not None:
                end = found if end is None else min(end, found)
        aborted: list[tuple[int, int, int]] = []
        lso: int | None = None
        if isolation_level == "read_committed":
            aborted, lso = self.transactions(on_corruption)
            if lso is not None:
                end = lso if end is None else min(end, lso)
        remaining = max_records
        for i, seg in enumerate(self.segments):
            nxt_base = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            if seg.size == 0 or (nxt_base is not None and nxt_base <= start):
                continue
            if end is not None and seg.base_offset >= end:
                return
            pos = seg.position_for(start, on_corruption) if start > seg.base_offset else 0
            while True:
                # a remote segment's chunk is one read window: at most _MAX_WINDOW bytes
                step = min(chunk_bytes, _MAX_WINDOW) if seg.is_remote else chunk_bytes
                heads, nxt, at_end = seg.frame_headers(pos, step, on_corruption)
                if len(heads):
                    a = int(heads["position"][0])
                    b = int(heads["position"][-1]) + LOG_OVERHEAD + int(heads["batch_length"][-1])
                    drop = None
                    if aborted and isolation_level == "read_committed":
                        drop = self._aborted(heads, aborted)
                    for table in seg.decode_range(
                            a, b, verify_crc=verify_crc, on_corruption=on_corruption, heads=heads, drop=drop):
                        table = self._clip(table, start, end)
                        table.topic, table.partition = self.topic, self._known_partition
                        table.truncated = at_end and seg.tail is not None
                        if remaining is not None and len(table) >= remaining:
                            yield select(table, np.arange(len(table)) < remaining)
                            return
                        if remaining is not None:
                            remaining -= len(table)
                        if len(table.batches):
                            yield table
                        if end is not None and table.next_offset is not None and table.next_offset >= end:
                            return
                    seg.release(a, b)
                pos = nxt
                if at_end:
                    break

    @staticmethod
    def _aborted(heads: npt.NDArray[Any], aborted: list[tuple[int, int, int]]) -> npt.NDArray[np.bool_] | None:
        """Which of a chunk's batches (header rows) a read_committed consumer drops as aborted."""
        first = int(heads["base_offset"][0])
        upper = int(heads["base_offset"][-1]) + int(heads["last_offset_delta"][-1])
        drop = aborted_batch_mask(heads, _overlapping(aborted, first, upper))
        return drop if drop.any() else None

    @staticmethod
    def _clip(table: RecordTable, start: int, end: int | None) -> RecordTable:
        """``table`` with only the records (and batches) of offsets ``[start, end)``."""
        b = table.batches
        if len(b) == 0:
            return table
        offsets = table.records["offset"]
        lo = int(b["base_offset"][0]) if len(offsets) == 0 else min(int(offsets[0]), int(b["base_offset"][0]))
        hi = int(b["base_offset"][-1]) + int(b["last_offset_delta"][-1])
        if lo >= start and (end is None or hi < end):
            return table
        rec = offsets >= start
        if end is not None:
            rec &= offsets < end
        last = b["base_offset"] + b["last_offset_delta"]
        keep = last >= start
        if end is not None:
            keep &= b["base_offset"] < end
        return select(table, rec, keep, inplace=True)

    def read(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        start_timestamp: int | None = None,
        end_timestamp: int | None = None,
        isolation_level: IsolationLevel = "read_uncommitted",
        max_records: int | None = None,
        *,
        on_corruption: OnCorruption = "raise",
        verify_crc: bool = True,
    ) -> RecordTable:
        """Read records as a consumer would: an offset or timestamp range, read_committed or not.

        Parameters
        ----------
        start_offset, end_offset : int, optional
            Offsets ``[start_offset, end_offset)``; default the whole log.
        start_timestamp, end_timestamp : int, optional
            Milliseconds: start at the first record whose timestamp is
            >= ``start_timestamp`` and stop before the first whose timestamp is
            >= ``end_timestamp`` (what a consumer that seeks with
            ``offsetsForTimes`` reads). Combined with the offsets, the narrower
            bound wins.
        isolation_level : {"read_uncommitted", "read_committed"}
            ``read_committed`` leaves out aborted transactions and stops at the
            last stable offset.
        max_records : int, optional
            Stop after this many records.
        on_corruption : {"raise", "skip"}
            A corrupt batch raises :class:`CorruptRecordError` (with the file
            and byte position), or is recorded in :attr:`skipped` and left out.
        verify_crc : bool, default True

        Returns
        -------
        RecordTable
            Zero-copy into the mapped segment when one uncompressed chunk holds
            everything; otherwise a joined copy. A crash-truncated tail ends
            the log without an error. The same records as without the index
            files: an index entry that does not match the ``.log`` is not used
            and is noted in :attr:`notes`. Its ``topic`` and ``partition`` are this
            directory's, so its Arrow, pandas and Polars forms have them filled in.
        """
        tables = list(
            self._iter(
                start_offset, end_offset, start_timestamp, end_timestamp, isolation_level, max_records,
                on_corruption, verify_crc, 1 << 62,
            )
        )
        table = concat(tables)
        table.topic, table.partition = self.topic, self._known_partition
        return table

    @property
    def _known_partition(self) -> int | None:
        return None if self.partition < 0 else self.partition

    def to_arrow(self, **options: Any) -> Any:
        """The records :meth:`read` returns as a :class:`pyarrow.Table`, topic and partition filled in.

        ``options``: :meth:`iter_tables`'s arguments plus ``include_headers``,
        ``extra_columns`` and ``binary`` of :func:`kbatch.arrow.to_arrow`.
        """
        return log_to_arrow(self, **options)

    def iter_arrow(self, *, batch_rows: int = 65_536, batch_bytes: int = 64 << 20, **options: Any) -> Iterator[Any]:
        """Stream the records as ``pyarrow.RecordBatch`` es of at most ``batch_rows`` rows and
        about ``batch_bytes`` bytes (see :func:`kbatch.arrow.iter_log_arrow`), with bounded memory."""

        return iter_log_arrow(self, batch_rows=batch_rows, batch_bytes=batch_bytes, **options)


def open_log(
    path: str | os.PathLike[str],
    *,
    segments: Sequence[str] | None = None,
    transactions: tuple[Sequence[tuple[int, int, int]], int | None] | None = None,
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> LogDir:
    """Open a partition directory (``<topic>-<partition>``) copied out of a broker.

    Parameters
    ----------
    path : str or Path
        A local path, ``file://``, or a URL of any filesystem ``pyarrow.fs`` reaches
        (``s3://bucket/backup/orders-0``, ``gs://``, ``abfs://``, ``hdfs://``); also a
        tiered-storage partition folder ``<topic>-<topic id>/<partition>``.
    segments : sequence of str, optional
        Open only these ``.log`` files of the directory (names such as
        ``00000000000000001234.log``), without listing it: a reader of one
        part of a long log (a Spark task) then costs what that part costs.
        Reads must stay within the offsets these segments hold.
    transactions : (aborted, last_stable_offset), optional
        What :meth:`LogDir.transactions` gives for the whole log, known by
        the caller. Needed with ``segments`` for ``read_committed``: an
        aborted transaction's marker may lie in a segment not opened.
    filesystem : pyarrow.fs.FileSystem or fsspec filesystem, optional
        The filesystem ``path`` is in.
    storage_options : dict, optional
        Keyword arguments of the URL scheme's ``pyarrow.fs`` filesystem
        (e.g. ``{"endpoint_override": "http://127.0.0.1:9000"}`` for ``s3://``).

    Returns
    -------
    LogDir

    Examples
    --------
    >>> import kbatch, tempfile
    >>> root = tempfile.mkdtemp()
    >>> with LogWriter(root, "clicks", 3) as w:
    ...     _ = w.append(kbatch.encode([b"x"]))
    >>> log = open_log(f"{root}/clicks-3")
    >>> log.topic, log.partition, len(log.read())
    ('clicks', 3, 1)
    >>> open_log(f"{root}/clicks-3", segments=["00000000000000000000.log"]).segments
    [<Segment 00000000000000000000.log 69 bytes>]
    """
    return LogDir(path, segments=segments, transactions=transactions, filesystem=filesystem,
                  storage_options=storage_options)


Replicas = Literal["best", "all"]
_SIDE_SUFFIXES: Final = (".index", ".timeindex", ".txnindex", ".rsm-manifest", ".indexes")


def _is_side_file(e: _storage.Entry) -> bool:
    name = posixpath.basename(e.path)
    return e.size <= 16 << 20 and (name.endswith(_SIDE_SUFFIXES) or name in ("partition.metadata",
                                                                             "leader-epoch-checkpoint"))


def open_logs(
    root: str | os.PathLike[str],
    topics: Sequence[str] | None = None,
    notes: list[str] | None = None,
    *,
    recursive: bool = False,
    replicas: Replicas = "best",
    verify_replicas: bool = True,
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> list[LogDir]:
    """Every partition directory under a ``log.dirs`` root (or a whole backup), by topic then partition.

    Parameters
    ----------
    root : str or Path
        A local path, ``file://`` or a URL (``s3://bucket/backup``, ...), as :func:`open_log`.
    topics : sequence of str, optional
        Only these topics.
    notes : list, optional
        Receives what was skipped and why, and the replica choices.
    recursive : bool, default False
        Search at any depth (a folder holding several ``log.dirs`` roots: one per
        broker, one per disk). Finding nothing then raises ``FileNotFoundError``
        saying what was there.
    replicas : {"best", "all"}
        A partition found in several roots is several replicas of one log. ``"best"``
        opens the one with the highest log end offset (ties: the newest leader epoch,
        then the first root) and notes the others; ``"all"`` opens every copy (each
        :class:`LogDir`'s ``root`` says which).
    verify_replicas : bool, default True
        Check that replicas agree where their offsets overlap (same batch CRCs at the
        same offsets; reads every replica's batch headers): a disagreement is noted and
        logged as a warning, naming the partition and offset.
    filesystem, storage_options
        As :func:`open_log`. A remote root is listed in one call, whatever its depth.

    Directories ending in ``-delete``, ``-future`` or ``-stray`` are skipped
    (and said so in ``notes`` and the ``kbatch.log`` logger).

    >>> import kbatch, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for topic, p in [("b", 0), ("a", 1), ("a", 0)]:
    ...     LogWriter(root, topic, p).close()
    >>> [(d.topic, d.partition) for d in open_logs(root)]
    [('a', 0), ('a', 1), ('b', 0)]
    >>> [d.partition for d in open_logs(root, topics=["a"])]
    [0, 1]
    """
    if replicas not in ("best", "all"):
        raise ValueError(f"replicas must be 'best' or 'all', got {replicas!r}")
    said: list[str] = []
    loc = _storage.locate(root, filesystem, storage_options)
    found, seen = find_partitions(loc, recursive, said)
    chosen = [f for f in found if topics is None or partition_name(PurePosixPath(f.location.path))[0] in topics]
    if loc.fs is not None and chosen:
        # the small objects every LogDir reads at open, and each root's checkpoint files,
        # fetched concurrently
        roots = {f.root_files[0].path: f.root_files for f in chosen if f.root_files is not None}
        flat = [e for f in chosen for e in f.listing or ()]
        flat = _storage.prefetch(loc.fs, (loc.path, loc.url), flat + [e for _, es in roots.values() for e in es],
                                 lambda e: True if posixpath.basename(e.path) in CHECKPOINT_FILES else _is_side_file(e))
        k = 0
        for i, f in enumerate(chosen):
            n = len(f.listing or ())
            chosen[i] = f._replace(listing=flat[k : k + n])
            k += n
        for root_loc, entries in roots.values():
            got = flat[k : k + len(entries)]
            k += len(entries)
            remember_remote(root_loc, {posixpath.basename(e.path): e.data for e in got if e.data is not None})
    out = []
    for f in chosen:
        log = LogDir(f.location, listing=f.listing)
        log.root = f.root
        out.append(log)
    if recursive and not found:
        raise FileNotFoundError(f"no partition directory (<topic>-<partition> holding segments) found: {seen}")
    out.sort(key=lambda d: (d.topic, d.partition, d.root))
    if len({(d.topic, d.partition) for d in out}) < len(out):
        out, replica_notes = _replicas.choose(out, keep_all=replicas == "all", verify=verify_replicas)
        said.extend(replica_notes)
    if loc.fs is not None:
        for a, b in itertools.pairwise(out):
            a.read_next(b)  # downloading the next log overlaps decoding this one's end
    for note in said:
        logger.info(note)
    if notes is not None:
        notes.extend(said)
    return out


class LogWriter:
    """Write a partition directory the way a broker lays it out.

    Parameters
    ----------
    root : str or Path
        The ``log.dirs`` root; the partition directory ``<topic>-<partition>``
        is created in it.
    topic : str
    partition : int
    segment_bytes : int, default 1 GiB
        Roll to a new segment before a batch would make the current one larger.
    index_interval_bytes : int, default 4096
        Bytes of log between ``.index`` / ``.timeindex`` entries, as the broker.
    topic_id : str, optional
        For ``partition.metadata`` (base64url UUID); a random one by default.

    Notes
    -----
    Each :meth:`append` is one broker append per batch: index entries point at
    batch starts and hold the batch's last offset (what Kafka's recovery and
    ``kafka-dump-log.sh --verify-index-only`` expect); ``.timeindex`` holds
    the largest timestamp so far at each entry and once more when a segment is
    closed; an ABORT marker adds a ``.txnindex`` entry with the last stable
    offset of the moment; a rising partition leader epoch adds a line to
    ``leader-epoch-checkpoint``; each roll and :meth:`close` write the producer
    state at the log end offset to ``<offset>.snapshot`` (:mod:`kbatch._producer_snapshot`).
    :meth:`flush` and :meth:`close` record the partition in the root's
    ``log-start-offset-checkpoint``, ``recovery-point-offset-checkpoint`` and
    ``replication-offset-checkpoint`` (as a broker's clean shutdown: everything flushed
    and replicated); :meth:`delete_records` moves the log start as the DeleteRecords API does.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        partition: int,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        topic_id: str | None = None,
    ) -> None:
        if segment_bytes < BATCH_OVERHEAD:
            raise ValueError("segment_bytes is too small")
        self.path = Path(root) / f"{topic}-{int(partition)}"
        self.path.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = int(segment_bytes)
        self.index_interval_bytes = int(index_interval_bytes)
        self.topic_id = topic_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        (self.path / "partition.metadata").write_text(f"version: 0\ntopic_id: {self.topic_id}\n")
        self.next_offset = 0
        #: Where the log starts (moved by :meth:`delete_records`).
        self.log_start_offset = 0
        self.leader_epochs: list[tuple[int, int]] = []
        self._ongoing: dict[int, int] = {}
        self.producers = ProducerState()
        self._file: Any = None
        self._base = 0
        self._size = 0
        self._index: list[tuple[int, int]] = []
        self._time: list[tuple[int, int]] = []
        self._txn: list[tuple[int, int, int, int]] = []
        self._since_index = 0
        self._max_ts = -1
        self._max_ts_offset = -1
        self._write_epochs()
        self._open_segment(0)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _stem(self) -> Path:
        return self.path / f"{self._base:020d}"

    def _open_segment(self, base: int) -> None:
        self._base = base
        self._file = open(self._stem().with_suffix(".log"), "wb")  # noqa: SIM115 - closed on roll/close
        self._size = 0
        self._index, self._time, self._txn = [], [], []
        self._since_index = 0
        self._max_ts, self._max_ts_offset = -1, -1

    def _time_append(self, timestamp: int, offset: int) -> None:
        if timestamp > (self._time[-1][0] if self._time else -1):
            self._time.append((timestamp, offset - self._base))

    def _close_segment(self) -> None:
        if self._file is None:
            return
        if self._max_ts >= 0:
            self._time_append(self._max_ts, self._max_ts_offset)
        self._file.close()
        self._file = None
        self.producers.write(self.path, self.next_offset)  # as a broker does at a roll and at shutdown
        stem = self._stem()
        np.array(self._index, dtype=OFFSET_INDEX_DTYPE).tofile(stem.with_suffix(".index"))
        np.array(self._time, dtype=TIME_INDEX_DTYPE).tofile(stem.with_suffix(".timeindex"))
        if self._txn:
            entries = [(0, *t) for t in self._txn]
            np.array(entries, dtype=TXN_INDEX_DTYPE).tofile(stem.with_suffix(".txnindex"))

    def _write_epochs(self) -> None:
        lines = ["0", str(len(self.leader_epochs))] + [f"{e} {o}" for e, o in self.leader_epochs]
        (self.path / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")

    def append(self, data: Any, *, assign_offsets: bool = False, leader_epoch: int | None = None) -> int:
        """Append whole batches (any magic, any codec); return the next offset.

        Parameters
        ----------
        data : buffer
            Batches back to back, e.g. from :func:`kbatch.encode`.
        assign_offsets : bool, default False
            Renumber magic 2 batches (and uncompressed legacy entries) from the
            log end offset, as a broker does; otherwise offsets are kept and
            must not go backwards (gaps are allowed, as after compaction).
        leader_epoch : int, optional
            Written into each magic 2 batch (outside its CRC, as a broker does).
        """
        buf = bytearray(data)
        view = memoryview(buf)
        path = self.path / "<append>"
        heads, stop, err, _ = scan_headers(view, 0, len(buf), 1 << 62, path)
        if err is not None:
            raise err
        if stop != len(buf):
            raise CorruptRecordError(f"incomplete batch at the end of the appended data ({len(buf) - stop} bytes)",
                                     stop, len(heads), "batchLength", batch_position=stop)
        positions = heads["position"].tolist()
        for k, p in enumerate(positions):
            h = heads[k]
            size = LOG_OVERHEAD + int(h["batch_length"])
            magic = int(h["magic"])
            base, last_delta = int(h["base_offset"]), int(h["last_offset_delta"])
            first = base
            if magic < 2 and int(h["compression"]):
                # a wrapper's offset is its last inner one: count the inner messages
                inner_table = _core_decode(view[p : p + size], verify_crc=False)
                inner = len(inner_table)
                first = base - inner + 1
                if magic == 1 and int(h["timestamp_type"]) == 0 and inner:
                    # as the broker's LogValidator: the wrapper carries the largest inner timestamp
                    largest = int(inner_table.records["timestamp"].max())
                    if largest != int(h["max_timestamp"]):
                        m = p + LOG_OVERHEAD  # the legacy message
                        struct.pack_into(">q", buf, m + LEGACY_TIMESTAMP_OFFSET, largest)
                        crc = zlib.crc32(view[m + LEGACY_MAGIC_OFFSET : p + size]) & 0xFFFFFFFF
                        struct.pack_into(">I", buf, m + LEGACY_CRC_OFFSET, crc)
                        heads[k]["max_timestamp"] = largest
                        h = heads[k]
            if assign_offsets:
                if magic == 2 or int(h["compression"]) == 0:
                    struct.pack_into(">q", buf, p, self.next_offset)
                    base = first = self.next_offset
                elif magic == 1:  # inner offsets are relative: only the wrapper's changes
                    base = self.next_offset + (base - first)
                    first = self.next_offset
                    struct.pack_into(">q", buf, p, base)
                elif first != self.next_offset:
                    raise ValueError("cannot renumber a compressed magic 0 wrapper (absolute inner offsets); "
                                     f"give it offsets from {self.next_offset} on")
            if magic == 2 and leader_epoch is not None:
                struct.pack_into(">i", buf, p + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            last = base + last_delta
            if first < self.next_offset:
                raise ValueError(f"offset {first} goes backwards: the log ends at {self.next_offset}")
            if self._file is None or (self._size and self._size + size > self.segment_bytes) or (
                last - self._base > 2**31 - 1
            ):
                self._close_segment()
                self._open_segment(first)
            ts = int(h["max_timestamp"])
            if ts > self._max_ts:
                self._max_ts, self._max_ts_offset = ts, last
            if self._since_index > self.index_interval_bytes:
                self._index.append((last - self._base, self._size))
                self._time_append(self._max_ts, self._max_ts_offset)
                self._since_index = 0
            self._since_index += size
            self._file.write(view[p : p + size])
            self._size += size
            epoch = int(struct.unpack_from(">i", buf, p + PARTITION_LEADER_EPOCH_OFFSET)[0]) if magic == 2 else -1
            if epoch >= 0 and (not self.leader_epochs or epoch > self.leader_epochs[-1][0]):
                self.leader_epochs.append((epoch, first))
                self._write_epochs()
            pid = int(h["producer_id"])
            if magic == 2:
                self.producers.update(h, first, last)
            if magic == 2 and h["is_transactional"] and pid >= 0:
                if not h["is_control"]:
                    self._ongoing.setdefault(pid, first)
                elif int(h["control_type"]) in (0, 1):
                    first = self._ongoing.pop(pid, last)
                    if int(h["control_type"]) == 0:
                        lso = min(self._ongoing.values()) if self._ongoing else last + 1
                        self._txn.append((pid, first, last, lso))
            self.next_offset = last + 1
        return self.next_offset

    def delete_records(self, offset: int) -> None:
        """Move the log start offset to ``offset``, as Kafka's DeleteRecords API does.

        The segments stay on disk (the broker deletes whole segments below the log start
        later); the root's ``log-start-offset-checkpoint`` says where the log starts.
        """
        offset = int(offset)
        if not self.log_start_offset <= offset <= self.next_offset:
            raise ValueError(
                f"delete_records offset {offset} is outside [{self.log_start_offset}, {self.next_offset}]"
            )
        self.log_start_offset = offset
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        topic, _, partition = self.path.name.rpartition("-")
        root, key = self.path.parent, (topic, int(partition))
        update_checkpoint(root / LOG_START, {key: self.log_start_offset})
        for name in (RECOVERY_POINT, HIGH_WATERMARK):
            update_checkpoint(root / name, {key: self.next_offset})

    def roll(self) -> None:
        """Close the current segment; the next append starts a new one."""
        self._close_segment()

    def flush(self) -> None:
        """Write the current segment's indexes as they stand (the segment stays open)."""
        if self._file is not None:
            self._file.flush()
            stem = self._stem()
            np.array(self._index, dtype=OFFSET_INDEX_DTYPE).tofile(stem.with_suffix(".index"))
            np.array(self._time, dtype=TIME_INDEX_DTYPE).tofile(stem.with_suffix(".timeindex"))
        self._write_checkpoints()

    def close(self) -> None:
        """Finish the segment being written (final time index entry, index files, checkpoints)."""
        self._close_segment()
        self._write_epochs()
        self._write_checkpoints()
