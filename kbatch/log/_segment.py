"""One segment file of a Kafka log directory: its batches framed, its indexes checked, its reads.

Provides :class:`Segment` (a ``.log`` file, memory-mapped or remote, with its ``.index``,
``.timeindex`` and ``.txnindex`` used as hints, each entry checked against the batch it names
before a seek trusts it), :class:`Skipped` and :data:`OnCorruption`. Uses
:mod:`kbatch.log._frames` (where batches start and end: the ``.log``'s frame),
:mod:`kbatch.log._indexes` (the index files' entries), ``kbatch.codec`` (scan, decode),
``kbatch.storage`` (remote reads) and ``kbatch._wire`` (the frame layout). The directory that
holds segments is :mod:`kbatch.log._logdir`; the public face is :mod:`kbatch.log`.

One segment and its indexes, named by the 20-digit zero-padded base offset (the directory
around them: :mod:`kbatch.log`)::

    00000000000000001234.log              record batches back to back (kbatch.log._frames)
    00000000000000001234.index            offset index       (the three: kbatch.log._indexes)
    00000000000000001234.timeindex        time index
    00000000000000001234.txnindex         aborted transactions whose ABORT marker is here
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kbatch import storage
from kbatch._wire import (
    ATTRIBUTES_OFFSET,
    BATCH_OVERHEAD,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
)
from kbatch.codec import BATCH_DTYPE, RecordTable, decode_batches
from kbatch.codec import scan as _core_scan
from kbatch.errors import CorruptRecordError, StorageError, UnsupportedError

from ._discover import SEGMENT_NAME
from ._frames import (
    FRAME,
    MIN_ENTRY,
    U32,
    corrupt,
    frame_remote,
    headers_at,
    resync,
    resync_remote,
    scan_headers,
)
from ._indexes import (
    OFFSET_INDEX_DTYPE,
    TIME_INDEX_DTYPE,
    TXN_INDEX_DTYPE,
    index_entries,
    offset_index_ordered,
    time_index_ordered,
)

logger = logging.getLogger("kbatch.log")

_UNREAD: Final = object()  # a side index not read yet
_MAX_LIES: Final = 8  # index entries found not to match the log before the whole file is dropped
_SEGMENT_NAME = SEGMENT_NAME

OnCorruption = Literal["raise", "skip"]


class Skipped(NamedTuple):
    """A byte range that ``on_corruption="skip"`` left out, and why."""

    path: str
    position: int
    length: int
    reason: str


class SegmentIdentity(NamedTuple):
    """What a cache about a segment is keyed by (:meth:`Segment.identity`): a changed file is
    another identity."""

    key: str  # the real path of a local file, the URL of a remote object
    size: int
    mtime_ns: int
    head: bytes  # the first batch's header (the first BATCH_OVERHEAD bytes, fewer in a smaller file)


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
    active : bool
        Whether this is the log's active (last) segment, the only one that may end inside a
        batch (a write torn by a crash): an incomplete batch at the end of another segment,
        or one followed by a valid batch, is damage (see :meth:`frame`). True for a segment
        opened alone; :class:`LogDir` clears it on every segment but its last.
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
        path: str | os.PathLike[str] | storage.Location,
        *,
        filesystem: Any = None,
        storage_options: dict[str, Any] | None = None,
        listing: dict[str, int] | None = None,
        prefetched: dict[str, bytes] | None = None,
    ) -> None:
        loc = storage.locate(path, filesystem, storage_options)
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
        self._reader: storage.RangeReader | None = None
        if loc.fs is None:
            self.size = os.stat(loc.path).st_size
        else:
            size = None if listing is None else listing.get(name)
            self._reader = storage.RangeReader(loc, size)
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
        #: The log's active (last) segment, the only one that may end inside a batch (a torn
        #: write); :class:`LogDir` clears it on every segment but its last.
        self.active = True
        self.note_to: list[str] | None = None
        self._framed_to = (-1, -1)  # (end position, last offset) of the batches framed last
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
        return storage.read_small(storage.Location(self._loc.fs, str(self.path.with_suffix(suffix)),
                                                     self.url[: -len(".log")] + suffix))

    def _side_index(self, suffix: str, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:
        raw = self._side_file(suffix)
        if raw is None:
            raw = self._plugin_indexes.get(suffix)
        return None if raw is None else index_entries(raw, dtype)

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

    def identity(self) -> SegmentIdentity | None:
        """The file's identity now (:class:`SegmentIdentity`: path or URL, size, modification
        time, first batch header), or None when it is no longer the size it had when opened.
        One ``stat`` and a read of 61 bytes (remote: a metadata request and a range request).

        Raises
        ------
        OSError, StorageError
            The file cannot be looked up or read.
        """
        n = min(self.size, BATCH_OVERHEAD)
        if self._reader is None:
            st = os.stat(self.path)
            if st.st_size != self.size:
                return None
            with open(self.path, "rb") as f:
                head = os.pread(f.fileno(), n, 0)
            return SegmentIdentity(os.path.realpath(self.path), self.size, int(st.st_mtime_ns), head)
        try:
            info = self._loc.fs.get_file_info(self._loc.path)
        except Exception as exc:
            raise StorageError(f"cannot look up {self.url}: {exc}", url=self.url) from exc
        if info.size != self.size:
            return None
        return SegmentIdentity(self.url, self.size, int(info.mtime_ns or 0), self._reader.read(0, n))

    def limit_reads(self, stop: int | None) -> None:
        """A remote segment fetches nothing at or past ``stop`` (None: the end) that a read does
        not ask for: no window, read-ahead or next segment's first chunk beyond it (the scan
        bounds each range a time index keeps). No-op locally."""
        if self._reader is not None:
            self._reader.bound(stop)

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
        if pos < 0 or self.size - pos < LOG_OVERHEAD + MIN_ENTRY:
            return None
        sc = self._scan
        if sc is not None and not self.skipped:  # the cached scan is the framing itself
            k = int(np.searchsorted(sc["position"], pos))
            return sc[k : k + 1] if k < len(sc) and int(sc["position"][k]) == pos else None
        if self._reader is not None:
            one = self._reader.read(pos, 1 << 16)
            length = FRAME.unpack_from(one)[1]
            if length < MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
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
                length = FRAME.unpack_from(os.pread(f.fileno(), LOG_OVERHEAD, pos))[1]
                if length < MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
                    return None
                if length <= 1 << 20:
                    one = os.pread(f.fileno(), LOG_OVERHEAD + length, pos)
                    heads, _, exc = _core_scan(one, 0, len(one))
                    if exc is not None or len(heads) != 1:
                        return None
                    heads["position"] += pos
                    return heads
        length = FRAME.unpack_from(self.data, pos)[1]
        if length < MIN_ENTRY or self.size - pos - LOG_OVERHEAD < length:
            return None
        heads, _, exc = _core_scan(self.data, pos, pos + LOG_OVERHEAD + length)
        return heads if exc is None and len(heads) == 1 else None

    def _note(self, text: str) -> None:
        self.notes.append(text)
        logger.warning("%s: %s", self.path, text)
        if self.note_to is not None:
            self.note_to.append(f"{self.path.name}: {text}")

    # Structure only (kbatch.log._indexes), without reading the .log: a lookup needs increasing
    # entries. Whether an entry tells the truth is checked when a seek first uses it.

    def _check_index(self) -> None:
        idx: npt.NDArray[Any] | None = self._index  # type: ignore[assignment]
        if idx is not None and len(idx) and not offset_index_ordered(idx):
            self._note(f"{self.path.with_suffix('.index').name} is inconsistent with the log: not used")
            idx = None
        self.index = idx  # per entry, once checked: 1 holds, -1 lies

    def _check_timeindex(self) -> None:
        tix: npt.NDArray[Any] | None = self._timeindex  # type: ignore[assignment]
        if tix is not None and len(tix) and not time_index_ordered(tix):
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
        >>> from kbatch.log import LogWriter, open_log
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
        CRC verifies. A batch cut by the end of the file ends the walk when this
        is the :attr:`active` segment and no valid batch follows it (a torn
        write); otherwise it is damage, raised or skipped as a frame that cannot
        be a batch is.
        """
        heads, nxt, at_end = self.frame_headers(pos, max_bytes, on_corruption)
        return heads["position"].tolist(), nxt, at_end

    def frame_headers(
        self, pos: int, max_bytes: int, on_corruption: OnCorruption = "raise"
    ) -> tuple[npt.NDArray[Any], int, bool]:
        """:meth:`frame` with the batches' header rows (:data:`kbatch.BATCH_DTYPE`, as :meth:`scan`
        gives them) instead of their positions: (rows, next position, at end)."""
        return self._frame_headers(pos, max_bytes, on_corruption, record=True)

    def _frame_headers(
        self, pos: int, max_bytes: int, on_corruption: OnCorruption, *, record: bool
    ) -> tuple[npt.NDArray[Any], int, bool]:
        """:meth:`frame_headers`; ``record=False``: a range skipped is not recorded in
        :attr:`skipped` (a look at the end, not a read)."""
        sc = self._scan
        if sc is not None and len(sc) and not self.skipped:  # reuse the cached scan
            starts, ends = self._scan_bounds
            k = int(np.searchsorted(starts, pos))
            if k < len(starts) and int(starts[k]) == pos:
                j = min(max(int(np.searchsorted(ends, pos + max_bytes, "left")), k), len(starts) - 1)
                return sc[k : j + 1], int(ends[j]), j == len(starts) - 1
        if self._reader is not None:
            heads, stop, err, more = frame_remote(self._reader, pos, max_bytes, self.path)
        else:
            heads, stop, err, more = scan_headers(self.data, pos, self.size, max_bytes, self.path)
        nxt = -1
        back = self._goes_back(heads)
        if back is not None:  # offsets go back: a corrupt baseOffset (not covered by the CRC)
            k, back_err = back
            at = int(heads["position"][k])
            heads, stop, nxt, err = heads[:k], at, at + LOG_OVERHEAD + int(heads["batch_length"][k]), back_err
        elif len(heads):
            end = int(heads["position"][-1]) + LOG_OVERHEAD + int(heads["batch_length"][-1])
            self._framed_to = (end, int(heads["base_offset"][-1]) + int(heads["last_offset_delta"][-1]))
        if err is None:
            if more or stop >= self.size:
                return heads, stop, not more
            err, nxt = self._cut_batch(stop)
            if err is None:  # a torn write at the end of the active segment: the log ends there
                if self.tail is None:
                    self.tail = (stop, self.size - stop)
                    logger.info("%s ends with %d bytes of an incomplete batch at byte %d", self.path,
                                self.size - stop, stop)
                return heads, stop, True
        if on_corruption == "raise":
            raise err
        if nxt < 0:
            nxt = self._resync(stop)
        if record:
            self._skip(stop, nxt - stop, err.reason)
        return heads, nxt, nxt >= self.size

    def _goes_back(self, heads: npt.NDArray[Any]) -> tuple[int, CorruptRecordError] | None:
        """The first batch of ``heads`` whose offsets do not follow the batch before it, and the
        error, or None. Offsets rise through a log (compaction removes batches and records but
        keeps the order), and the CRC does not cover ``baseOffset``: a batch starting at or below
        the last offset of the batch before it, or below the segment's base offset, has a
        corrupt one. The odd one out is blamed: the batch before when this one follows the batch
        before that (a ``baseOffset`` corrupted upwards)."""
        n = len(heads)
        if n == 0:
            return None
        base = heads["base_offset"].astype(np.int64)
        last = base + heads["last_offset_delta"].astype(np.int64)
        first = int(heads["position"][0])
        prev = self._framed_to[1] if self._framed_to[0] == first and first > 0 else self.base_offset - 1
        before = np.concatenate(([prev], last[:-1]))
        bad = np.flatnonzero(base <= before)
        if len(bad) == 0:
            return None
        k = int(bad[0])
        earlier = prev if k == 1 else int(last[k - 2]) if k >= 2 else None
        if earlier is not None and int(base[k]) > earlier:
            k -= 1  # this batch follows the one before the last: that one is the odd one out
            what = f"baseOffset {int(base[k])} is past the next batch's ({int(base[k + 1])})"
        else:
            what = f"baseOffset {int(base[k])} is not past the offset {int(before[k])} before it"
        at = int(heads["position"][k])
        reason = (f"the batch at byte {at}: {what}: offsets never go back in a log (compaction keeps their "
                  "order), a corrupt baseOffset")
        return k, corrupt(self.path, reason, at, "baseOffset", at)

    def _resync(self, pos: int) -> int:
        """The next position after ``pos`` where a RecordBatch with a valid CRC starts (or the end)."""
        return resync(self.data, pos, self.size) if self._reader is None else resync_remote(self._reader, pos)

    def _whole_batch(self, pos: int) -> bool:
        """Whether the bytes from ``pos`` to the end are one RecordBatch whose CRC verifies."""
        head = self.view(pos, pos + BATCH_OVERHEAD)
        return head[MAGIC_OFFSET] == 2 and crc32c(self.view(pos + ATTRIBUTES_OFFSET, self.size)) == \
            U32.unpack_from(head, CRC_OFFSET)[0]

    def _cut_batch(self, pos: int) -> tuple[CorruptRecordError | None, int]:
        """Whether the incomplete batch at ``pos`` (its frame runs past the end of the file) is
        damage: (the error, where the next valid batch starts) or (None, -1) for a torn write.

        As Kafka's log recovery sees a segment (``FileLogInputStream`` stops at a batch whose
        length runs past the end; ``LogSegment.recover`` keeps the batches before it and
        ``LogLoader`` then deletes every later segment): only the active (last) segment of a
        log may end inside a batch, after a crash, and nothing can follow a torn write. So an
        incomplete batch ends a segment that is not :attr:`active` only in a cut copy, and a
        batch whose length runs past the end while a batch with a valid CRC starts after it
        has a corrupt ``batchLength``: both are damage, never the log's end.
        """
        head = bytes(self.view(pos, pos + LOG_OVERHEAD))
        what = f"the batch at byte {pos}"
        if len(head) == LOG_OVERHEAD:
            base, length = FRAME.unpack_from(head)
            what += f" (baseOffset {base}, batchLength {length})"
        left = self.size - pos
        if not self.active:
            reason = (f"{what} runs past the end of the segment ({left} bytes left) and a later segment "
                      "follows: the segment is cut (a damaged or partial copy)")
            return corrupt(self.path, reason, pos + LENGTH_OFFSET, "batchLength", pos), self.size
        nxt = self._resync(pos)
        if nxt < self.size:
            after = f"yet a valid batch starts at byte {nxt}"
        elif left >= BATCH_OVERHEAD and self._whole_batch(pos):
            after = "yet the bytes to the end are one whole batch (its CRC verifies)"
        else:
            return None, -1
        reason = (f"{what} runs past the end of the file ({left} bytes left) {after}: a corrupt "
                  "batchLength, not a torn write")
        return corrupt(self.path, reason, pos + LENGTH_OFFSET, "batchLength", pos), nxt

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
                more, pos, at_end = self._frame_headers(pos, 1 << 62, "skip", record=False)
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
            length = FRAME.unpack_from(head)[1] if len(head) == LOG_OVERHEAD else 0
            buf, off = self._reader.view(first, last + LOG_OVERHEAD + max(length, 0))
            rows = headers_at(buf, np.asarray(positions, dtype=np.int64) - off)
            rows["position"] += off
            return rows
        return headers_at(self.data, positions)

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
                    yield decode_batches(self.view(start, stop), verify_crc=verify_crc)
                else:
                    yield decode_batches(self.view(start, stop), verify_crc=verify_crc, skip_batches=mask,
                                       keep_skipped_rows=False)
                return
            except CorruptRecordError as exc:
                bad = start + exc.batch_position if exc.batch_position >= 0 else start
                if on_corruption == "raise":
                    raise self._relocate(exc, start) from exc
                partial = exc.partial
                if isinstance(partial, RecordTable) and len(partial.batches):
                    yield partial
                length = LOG_OVERHEAD + FRAME.unpack_from(self.view(bad, bad + LOG_OVERHEAD))[1]
                self._skip(bad, length, exc.reason)
                start = bad + length

    def _relocate(self, exc: CorruptRecordError, start: int) -> CorruptRecordError:
        return exc.with_context(self.path, shift=start)

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

