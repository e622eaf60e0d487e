"""One partition directory read without a broker: :class:`LogDir`, :func:`open_log`.

Provides the reader of one ``<topic>-<partition>`` directory (its segments in offset order,
metadata, leader epochs, checkpoints, transactions, offset and timestamp seeks, tables and
Arrow), :class:`Unread` and :data:`IsolationLevel`. Uses :mod:`kbatch.log._segment` (one segment
each), ``kbatch.log._discover``, ``kbatch.log._checkpoint``, ``kbatch.codec._txn``,
``kbatch.log._scan`` (the lazy scan) and ``kbatch.log._arrow`` (the log -> Arrow loop). Every
partition under a ``log.dirs`` root or a backup: :mod:`kbatch.log._open_logs`. The public face is
:mod:`kbatch.log`.
"""
from __future__ import annotations

import itertools
import logging
import os
import posixpath
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from kbatch import storage
from kbatch._wire import LOG_OVERHEAD
from kbatch.codec import (
    BATCH_DTYPE,
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_ROWS,
    RecordTable,
    ValueDecoder,
    aborted_batch_mask,
    check_aborted_index,
    concat,
    decode_batches,
    select,
    txn_state,
)
from kbatch.errors import CorruptRecordError, LayoutError

from ._arrow import iter_log_arrow, log_to_arrow
from ._checkpoint import (
    CHECKPOINT_FILES,
    LOG_START,
    RECOVERY_POINT,
    remote_root_checkpoints,
    root_checkpoints,
)
from ._discover import (
    PARTITION_DIR,
    SEGMENT_NAME,
    SKIPPED_DIRS,
    deeper_roots,
    describe_topics,
    logs_deeper,
    misnamed_logs,
    partition_name,
    topics_in,
)
from ._frames import MAX_WINDOW
from ._metaproperties import cluster_id
from ._scan import ScanStats, overlapping, scan_logs
from ._scan_values import ScanDecoder
from ._segment import OnCorruption, Segment, Skipped

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self

logger = logging.getLogger("kbatch.log")

_SKIPPED_SUFFIXES: Final = (".deleted", ".cleaned", ".swap")

IsolationLevel = Literal["read_uncommitted", "read_committed"]


class Unread(NamedTuple):
    """The offsets of a range :attr:`LogDir.skipped` left out (see :meth:`LogDir.unread`)."""

    skipped: Skipped
    #: offsets ``[first, end)`` of which no record was read (``end`` None: up to the log end)
    first: int
    end: int | None
    #: how many of them the headers of batches skipped whole (CRC) cover; the rest had no frame
    framed: int


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
    cluster_id : str or None
        ``cluster.id`` of the root's ``meta.properties`` (None without one, and for a
        tiered-storage layout).
    tiered : bool
        The directory is in tiered storage's layout (a prefix of objects: no root files).
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
        path: str | os.PathLike[str] | storage.Location,
        *,
        segments: Sequence[str] | None = None,
        transactions: tuple[Sequence[tuple[int, int, int]], int | None] | None = None,
        filesystem: Any = None,
        storage_options: dict[str, Any] | None = None,
        listing: Sequence[storage.Entry] | None = None,
    ) -> None:
        loc = storage.locate(path, filesystem, storage_options)
        self.url = loc.url
        #: Where the directory is (its filesystem: None when local).
        self.location = loc
        self.path: Path | PurePosixPath = Path(loc.path) if loc.fs is None else PurePosixPath(loc.path)
        files: dict[str, int] | None = None  # a remote directory's files and sizes, when listed
        prefetched: dict[str, bytes] = {}  # and the small ones the listing's caller read
        subdirs: list[str] = []  # and its subdirectories
        if loc.fs is None:
            if not Path(self.path).is_dir():
                raise FileNotFoundError(f"not a directory: {self.path}")
        elif listing is not None or segments is None:
            entries = storage.list_files(loc) if listing is None else listing
            files = {posixpath.basename(e.path): e.size for e in entries if not e.is_dir}
            prefetched = {posixpath.basename(e.path): e.data for e in entries if e.data is not None}
            subdirs = [posixpath.basename(e.path) for e in entries if e.is_dir]
        self.topic, self.partition, self.topic_id = partition_name(self.path)
        tiered = self.topic_id is not None  # <topic>-<topic id>/<partition>: tiered storage
        #: In tiered storage's layout (``<topic>-<topic id>/<partition>``): no root files.
        self.tiered = tiered
        self.notes: list[str] = []
        self.leader_epochs: list[tuple[int, int]] = []

        def text(name: str) -> str | None:
            if files is not None and name not in files:
                return None
            raw = prefetched[name] if name in prefetched else storage.read_small(storage.join(loc, name))
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
                if not SEGMENT_NAME.match(name):
                    raise ValueError(f"{name!r} is not a segment name (<20-digit base offset>.log)")
                found.append(self._segment(loc, name, files, prefetched))
        if segments is None:
            names = sorted(files) if files is not None else sorted(e.name for e in Path(self.path).iterdir())
            for name in names:
                if name.endswith(_SKIPPED_SUFFIXES):
                    self.notes.append(f"skipped {name} (left over by deletion, cleaning or compaction)")
                elif SEGMENT_NAME.match(name):
                    found.append(self._segment(loc, name, files, prefetched))
            misnamed = misnamed_logs(loc.url, names, skipped=bool(found))
            if misnamed and not found:
                raise LayoutError(misnamed, url=loc.url)
            if misnamed:
                self.notes.append(misnamed)
            if not found:
                self._no_segment(loc, subdirs)
        self.segments = sorted(found, key=lambda s: s.base_offset)
        for seg in self.segments[:-1]:
            seg.active = False  # only the last segment may end inside a batch (a torn write)
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
        self._checkpoint_root: storage.Location | None = None
        if not tiered and self.partition >= 0:
            if loc.fs is None:
                self._use_checkpoints(*root_checkpoints(Path(self.path).parent), str(self.path.parent))
            else:
                self._checkpoint_root = storage.Location(loc.fs, posixpath.dirname(loc.path), self.root)
                self._checkpoints = None
        self._log_start: int | None = None
        if transactions is not None:
            self._txn = (sorted(transactions[0], key=lambda a: a[1]), transactions[1])

    def _no_segment(self, loc: storage.Location, subdirs: Sequence[str]) -> None:
        """A directory with no segment: an empty log when it is a partition directory (noted),
        a :class:`LayoutError` saying what it is otherwise (a ``log.dirs`` root, a backup)."""
        if loc.fs is None:
            topics = topics_in(Path(loc.path))
        else:
            topics = {}
            for n in subdirs:
                m = PARTITION_DIR.match(n)
                if m and not n.endswith(SKIPPED_DIRS):
                    topics[m.group(1)] = topics.get(m.group(1), 0) + 1
        if topics:
            raise LayoutError(f"{loc.url} is a log.dirs root (holding {describe_topics(topics)}), not a partition "
                              f"directory: open its partitions with open_logs({loc.url!r})", url=loc.url)
        if self.partition >= 0:
            self.notes.append("no segment (.log): an empty log")
            return
        deeper = deeper_roots(loc)
        if deeper:
            raise logs_deeper(loc.url, deeper, "open_logs(..., recursive=True)")
        raise LayoutError(f"{loc.url} is not a partition directory: its name is not <topic>-<partition> and it "
                          "holds no segment (<20-digit base offset>.log)", url=loc.url)

    @staticmethod
    def _segment(
        loc: storage.Location, name: str, files: dict[str, int] | None, prefetched: dict[str, bytes]
    ) -> Segment:
        if loc.fs is None:
            return Segment(Path(loc.path) / name)
        return Segment(storage.join(loc, name), listing=files, prefetched=prefetched)

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

    def unread(self) -> list[Unread]:
        """The offsets of each range of :attr:`skipped`, of which no record was read.

        From the batch headers around it: :attr:`Unread.first` is one past the last offset of
        the batch before it (or the segment's base offset), :attr:`Unread.end` the base offset
        of the batch after it (or of the next segment; None when nothing follows). The records
        of a batch skipped whole (a CRC that does not verify) are in that range, and so is any
        offset compaction left without a record there.
        """
        out: list[Unread] = []
        for i, seg in enumerate(self.segments):
            if not seg.skipped:
                continue
            heads = seg.scan("skip")
            ends = heads["position"].astype(np.int64) + LOG_OVERHEAD + heads["batch_length"].astype(np.int64)
            last = heads["base_offset"].astype(np.int64) + heads["last_offset_delta"].astype(np.int64)
            after = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            for s in seg.skipped:
                k = int(np.searchsorted(ends, s.position, "right"))
                j = int(np.searchsorted(heads["position"], s.position + s.length, "left"))
                first = int(last[k - 1]) + 1 if k else seg.base_offset
                end = int(heads["base_offset"][j]) if j < len(heads) else after
                framed = int((last[k:j] - heads["base_offset"][k:j] + 1).sum())
                out.append(Unread(s, first, end, framed))
        return out

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
    def cluster_id(self) -> str | None:
        """``cluster.id`` of the root's ``meta.properties`` (read once per root), or None."""
        if self.tiered or self.partition < 0:
            return None  # tiered storage (a prefix of objects), or not a partition directory
        if self.location.fs is None:
            parent = str(Path(self.path).parent)
            return cluster_id(storage.Location(None, parent, parent))
        return cluster_id(storage.Location(self.location.fs, posixpath.dirname(self.location.path),
                                            posixpath.dirname(self.url)))

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

        None when no record is that late. A local segment is searched by its
        batch headers (the ``.timeindex`` is not used: see :meth:`_first_reaching`),
        so the answer is the one a scan of the ``.log`` alone gives. A remote
        segment is searched from its ``.timeindex`` entries, each checked against
        the batch it names (one that does not match is noted in :attr:`notes` and
        not used), which saves downloading it but trusts the entries' order. ``on_corruption``
        and ``verify_crc`` as in :meth:`read`: a corrupt batch on the way
        raises, or is recorded in :attr:`skipped` and passed.
        """
        if on_corruption not in ("raise", "skip"):
            raise ValueError(f"on_corruption must be 'raise' or 'skip', got {on_corruption!r}")
        for seg in self.segments:
            if seg.size == 0:
                continue
            pos = self._first_reaching(seg, timestamp, on_corruption)
            if pos is None:
                continue
            while True:
                h, nxt, at_end = seg.frame_headers(pos, 1 << 20, on_corruption)
                for k in np.flatnonzero(h["max_timestamp"] >= timestamp).tolist():
                    p = int(h["position"][k])
                    size = LOG_OVERHEAD + int(h["batch_length"][k])
                    try:
                        t = decode_batches(seg.view(p, p + size), verify_crc=verify_crc)
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

    @staticmethod
    def _first_reaching(seg: Segment, timestamp: int, on_corruption: OnCorruption) -> int | None:
        """Where the first batch of ``seg`` whose max timestamp is >= ``timestamp`` may be (None: none is).

        A local segment's from every batch header (a header scan, cached: no record is read), so
        exact whatever its ``.timeindex`` says: an entry can name a real batch of that timestamp
        and still lie about an earlier, later-stamped batch (timestamps out of order), which no
        check of the entry alone catches. A remote segment's from its checked ``.timeindex``
        (:meth:`Segment.max_timestamp`, :meth:`Segment.timestamp_position`), which saves
        downloading the segment and trusts the index's order.
        """
        if seg.is_remote:
            if seg.max_timestamp(on_corruption) < timestamp:
                return None
            return seg.timestamp_position(timestamp, on_corruption)
        heads = seg.scan(on_corruption)
        hit = np.flatnonzero(heads["max_timestamp"] >= timestamp)
        return int(heads["position"][hit[0]]) if len(hit) else None

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
        >>> from kbatch.log import LogWriter, open_log
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
                # a remote segment's chunk is one read window: at most MAX_WINDOW bytes
                step = min(chunk_bytes, MAX_WINDOW) if seg.is_remote else chunk_bytes
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
        drop = aborted_batch_mask(heads, overlapping(aborted, first, upper))
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
            everything; otherwise a joined copy. A crash-truncated tail of
            the last segment (a torn write: nothing valid after it) ends the
            log without an error; a segment before the last cut inside a
            batch, or a ``batchLength`` or ``baseOffset`` that cannot be the
            log's (a valid batch follows, offsets go back), is damage: raised
            or, with ``on_corruption="skip"``, in :attr:`skipped` (the offsets
            lost: :meth:`unread`). The same records as without the index
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

    def scan_records(
        self,
        columns: Sequence[str] | None = None,
        filter: Sequence[Sequence[Any]] | None = None,
        limit: int | None = None,
        *,
        isolation_level: IsolationLevel = "read_uncommitted",
        on_corruption: OnCorruption = "raise",
        verify_crc: bool = True,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        binary: str = "binary",
        stats: ScanStats | None = None,
        values: ScanDecoder | None = None,
        keys: ScanDecoder | None = None,
        errors: Literal["raise", "null"] = "raise",
        index: bool = True,
        index_dir: str | os.PathLike[str] | None = None,
        fields: Sequence[str] | None = None,
    ) -> Any:
        """Stream the records that pass ``filter``, reading only the segments and batches that can.

        The lazy scan with pushdown (:meth:`scan` gives batch headers): what the Polars,
        Spark and DuckDB entry points use.

        Parameters
        ----------
        columns : sequence of str, optional
            Any of ``key``, ``value``, ``topic``, ``partition``, ``offset``,
            ``timestamp``, ``timestampType``, ``headers`` (:func:`kbatch.arrow.kafka_schema`'s
            types), in the order wanted; default all. Columns not asked for are never
            built: ``["offset", "timestamp"]`` copies no key, value or header, ``["value"]``
            no key (``headers`` is built with the key and value columns).
        filter : list of (column, op, value), optional
            Terms ANDed, on ``topic``, ``partition``, ``offset``, ``timestamp``
            (milliseconds or datetime), with ``=``, ``<``, ``<=``, ``>``, ``>=``,
            ``between`` (both ends included) or ``in`` (see :mod:`kbatch.log._predicate`).
        limit : int, optional
            At most this many rows (the first ones, in offset order).
        isolation_level, on_corruption, verify_crc
            As :meth:`read`. Batches skipped are not CRC-checked.
        batch_rows : int
            At most this many rows per record batch.
        binary : {"binary", "large_binary", "binary_view"}
            The layout of ``key``/``value`` (see :func:`kbatch.arrow.to_arrow`).
        stats : ScanStats, optional
            Filled in as the scan is read: segments and batches skipped, decoded, bytes.
        values, keys : kbatch.values.Registry, optional
            Decode the values (keys) as ``kbatch convert --values auto`` does: ``value`` is
            the struct of the reader schema, the latest version of subject ``<topic>-value``
            (``<topic>-key``), fixed before reading, followed by ``value_schema_id`` (the
            writer's id) and, with ``errors="null"``, ``value_error``; these columns may be
            named in ``columns`` too. Only the rows that pass ``filter`` are decoded, and only
            when a decoded column is asked for. (The registry is called, never imported:
            ``Registry.from_log_dirs(root)`` is the root's own ``_schemas``.)
        errors : {"raise", "null"}
            With ``values`` / ``keys``: ``"raise"``, the first record read that does not decode
            raises :class:`~kbatch.errors.ValueDecodeError` (naming its offset, partition, field
            path and byte); ``"null"``, its value is null and ``value_error`` says why (the
            message a ``kbatch convert`` dead letter carries as ``error``).
        index : bool, default True
            With a timestamp bound, use and keep each segment's time index: every batch's
            least and greatest record timestamp, learned by the scans before (or ``kbatch
            index``), so that batches outside the window are not read at all. A file that
            does not match the segment now (changed, truncated, another's) is noted and not
            used. False: neither read nor written.
        index_dir : str or PathLike, optional
            The folder of the time index files (default ``$KBATCH_INDEX_DIR``, else the user's
            cache folder, ``~/.cache/kbatch``); one that cannot be written means no index.
        fields : sequence of str, optional
            With ``values``: only these fields of the values (top-level names or dotted paths
            into nested records, :func:`kbatch.values.decode`'s projection); the decoder skips
            the others, and the ``value`` struct holds only these.

        Returns
        -------
        pyarrow.RecordBatchReader
            Streaming (bounded memory; nothing is read before the first batch is asked
            for); ``.read_all()`` gives a table. Always the rows of
            ``read(isolation_level=...)`` that pass ``filter`` (a lying index costs
            speed, never rows), in offset order; with ``values``, decoded as
            :func:`kbatch.values.decode` decodes them with that reader schema.

        Examples
        --------
        >>> import kbatch, tempfile
        >>> from kbatch.log import LogWriter, open_log, ScanStats
        >>> root = tempfile.mkdtemp()
        >>> with LogWriter(root, "t", 0, segment_bytes=300) as w:
        ...     for i in range(8):
        ...         _ = w.append(kbatch.encode([b"a", b"b"], base_offset=2 * i, timestamps=[i, i]))
        >>> stats = ScanStats()
        >>> got = open_log(f"{root}/t-0").scan_records(["offset"], [("timestamp", ">=", 6)], stats=stats).read_all()
        >>> got.column("offset").to_pylist(), stats.batches_walked  # (offsets alone: walked, not decoded)
        ([12, 13, 14, 15], 2)

        Typed values, by the latest schema of subject ``t-value``:

        >>> from kbatch.values import Registry, Schema
        >>> reg = Registry({1: Schema('"string"', subject="t-value", version=1, id=1)})
        >>> with LogWriter(root, "t", 0) as w:
        ...     _ = w.append(kbatch.encode([b"\\x00\\x00\\x00\\x00\\x01\\x06abc", b"?"], base_offset=16))
        >>> log = open_log(f"{root}/t-0")
        >>> log.scan_records(["offset", "value", "value_error"], [("offset", ">=", 16)], values=reg,
        ...                  errors="null").read_all().to_pylist()[1]["value_error"][:24]
        'no schema registry frame'
        """
        return scan_logs([self], columns, filter, limit, isolation_level=isolation_level,
                         on_corruption=on_corruption, verify_crc=verify_crc, batch_rows=batch_rows,
                         binary=binary, stats=stats, values=values, keys=keys, errors=errors, index=index,
                         index_dir=index_dir, fields=fields)

    @property
    def _known_partition(self) -> int | None:
        return None if self.partition < 0 else self.partition

    def to_arrow(
        self,
        *,
        values: ValueDecoder | None = None,
        keys: ValueDecoder | None = None,
        reader_schema: Any = None,
        key_reader_schema: Any = None,
        errors: Literal["raise", "null"] = "raise",
        mapping: Literal["spark", "arrow"] = "spark",
        max_depth: int | None = None,
        threads: int = 1,
        **options: Any,
    ) -> Any:
        """The records :meth:`read` returns as a :class:`pyarrow.Table`, topic and partition filled in.

        ``options``: :meth:`iter_tables`'s arguments plus ``include_headers``,
        ``extra_columns`` and ``binary`` of :func:`kbatch.arrow.to_arrow`. ``values`` /
        ``keys`` (a :class:`kbatch.values.Registry`) and the arguments after them decode the
        values / keys in the same step, as :meth:`RecordTable.to_arrow` does.

        Examples
        --------
        >>> import kbatch, tempfile
        >>> from kbatch.log import LogWriter, open_log
        >>> from kbatch.values import Registry
        >>> root = tempfile.mkdtemp()
        >>> with LogWriter(root, "orders", 0) as w:
        ...     _ = w.append(kbatch.encode([b"\\x00\\x00\\x00\\x00\\x01\\x06abc"]))
        >>> out = open_log(f"{root}/orders-0").to_arrow(values=Registry({1: '"string"'}))
        >>> out.select(["topic", "partition", "value", "value_schema_id"]).to_pylist()
        [{'topic': 'orders', 'partition': 0, 'value': 'abc', 'value_schema_id': 1}]
        """
        if values is None and keys is None:
            return log_to_arrow(self, **options)
        arrow = {k: options.pop(k) for k in ("include_headers", "extra_columns", "binary") if k in options}
        options.pop("chunk_bytes", None)  # read() joins the chunks
        return self.read(**options).to_arrow(
            values=values, keys=keys, reader_schema=reader_schema, key_reader_schema=key_reader_schema,
            errors=errors, mapping=mapping, max_depth=max_depth, threads=threads, **arrow)

    def iter_arrow(
        self, *, batch_rows: int = DEFAULT_BATCH_ROWS, batch_bytes: int = DEFAULT_BATCH_BYTES, **options: Any
    ) -> Iterator[Any]:
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
        With no segment only for a directory named as a partition (``<topic>-<partition>``)
        that holds none, or only metadata files: an empty log, said in :attr:`LogDir.notes`.
        ``.log`` files not named as segments beside real segments are skipped and noted.

    Raises
    ------
    FileNotFoundError
        ``path`` is not a directory.
    LayoutError
        Reading would give nothing because ``path`` is not a partition directory: a
        ``log.dirs`` root (use :func:`open_logs`), a folder with Kafka logs deeper down
        (named in the message), a folder whose ``.log`` files are not named as segments
        (``<20-digit base offset>.log``, or tiered ``<20 digits>-<segment id>.log``; named),
        or a folder not named ``<topic>-<partition>`` holding no segment.

    Examples
    --------
    >>> import kbatch, tempfile
    >>> from kbatch.log import LogWriter, open_log
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
