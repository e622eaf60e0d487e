"""The time index of lazy scans: each batch's least and greatest record timestamp, per segment, cached.

A batch's header bounds its records' timestamps from above (``maxTimestamp``) but not from
below: records may be out of order, so a scan must walk a batch (``kbatch.codec.stamps``) to
learn that every record is past a window. What a scan learns of a segment's batches is kept
here, in one small file per segment in a cache folder, and later scans skip the batches
whose ``[least, greatest]`` misses their window without reading them (a remote segment's
skipped batches are never downloaded).

Provides :class:`TimeIndexes` (one scan's: the folder, whether it can be written, the files'
checks), :class:`SegmentTimes` (one segment's entries, what a scan learns of it, the byte
ranges a window needs), :func:`build_time_index` (``kbatch index``: every segment walked ahead
of time), :class:`IndexSummary` and :func:`default_index_dir`. Used by :mod:`kbatch.log._scan`;
uses :class:`~kbatch.log.Segment` (its identity, framing, bounded remote reads) and
``kbatch.codec.stamps``.

Where: ``index_dir=``, else ``$KBATCH_INDEX_DIR``, else the user's cache folder
(``$XDG_CACHE_HOME/kbatch`` or ``~/.cache/kbatch``; ``~/Library/Caches/kbatch`` on macOS,
``%LOCALAPPDATA%\\kbatch`` on Windows), never beside the segments (a backup may be
read-only). A folder that cannot be written means no index (noted), never an error.

An index file, ``<segment stem>-<24 hex of sha256(key)>.tix`` (little-endian)::

    magic       8 bytes   b"KBTIMEIX"
    version     uint16    1
    flags       uint16    bit 0: full (every batch of the segment walked: kbatch index)
    count       uint64    entries in the body
    size        int64     the segment's identity (Segment.identity): its size,
    mtime_ns    int64         modification time,
    crc         uint32    CRC-32C of the whole file, this field read as 0 (the header, key,
                          head, padding and body: any byte flipped is caught)
    key_length  uint32        path or URL (UTF-8, key_length bytes after the header)
    head_length uint32        and first batch header bytes (head_length bytes after the key)
    key, head, zero padding to a multiple of 8
    body        count entries of ENTRY_DTYPE, by position:
        position     int64   where the batch starts in the segment
        length       int32   its frame's bytes (LOG_OVERHEAD + batchLength)
        kind         int32   0: from the header alone (least is maxTimestamp for a LogAppendTime
                             or one-record CreateTime batch, else unknown: INT64_MIN);
                             1: walked, CRC checked (least, greatest: of its data records;
                             INT64_MAX, INT64_MIN when it has none)
        base_offset  int64
        last_offset  int64
        least        int64   ms
        greatest     int64   ms (the header's maxTimestamp for kind 0)

Trust: a file is used only when its header, identity and CRC match the segment now (a
segment rewritten, grown, cut, or another segment's file: noted, removed, not used) and its entries
are well formed (rising, non-overlapping frames inside the segment, offsets rising). An
entry covers exactly the batch it names: a batch without one (legacy, snappy, damaged, or
never framed) is read as a scan without an index reads it. The batches a scan frames are
checked against the entries that name them; one that disagrees drops the file for the
rest of the scan (noted) and it is written anew. Entries from a header alone skip exactly
what the header already skips; walked ones (CRC checked when written) skip more.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from kbatch._wire import LOG_OVERHEAD
from kbatch.codec import STAMPS_OK, stamps
from kbatch.errors import KBatchError

from ._segment import Segment, SegmentIdentity

logger = logging.getLogger("kbatch.log")

MAGIC: Final = b"KBTIMEIX"
VERSION: Final = 1
FULL: Final = 1  # flags: every batch walked
HEADER = struct.Struct("<8sHHQqqIII")
ENTRY_DTYPE: Final = np.dtype([
    ("position", "<i8"), ("length", "<i4"), ("kind", "<i4"), ("base_offset", "<i8"), ("last_offset", "<i8"),
    ("least", "<i8"), ("greatest", "<i8"),
])
HEADER_KIND: Final = 0
WALKED_KIND: Final = 1
_MIN: Final = int(np.iinfo(np.int64).min)
_MAX: Final = int(np.iinfo(np.int64).max)
_CREATE_TIME: Final = 0
_LOG_APPEND_TIME: Final = 1
SUFFIX: Final = ".tix"


def default_index_dir() -> Path:
    """``$KBATCH_INDEX_DIR``, else the platform's user cache folder's ``kbatch``."""
    env = os.environ.get("KBATCH_INDEX_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kbatch"


def _note(seg: Segment, text: str) -> None:
    seg.notes.append(text)
    if seg.note_to is not None:
        seg.note_to.append(f"{seg.path.name}: {text}")
    logger.info("%s: %s", seg.path, text)


def well_formed(entries: npt.NDArray[Any], size: int) -> bool:
    """Whether ``entries`` could name a segment's batches of ``size`` bytes: frames by position,
    not overlapping, inside the segment; offsets rising; kinds known."""
    if not len(entries):
        return True
    pos = entries["position"]
    end = pos + entries["length"].astype(np.int64)
    base, last = entries["base_offset"], entries["last_offset"]
    return bool(
        int(pos[0]) >= 0 and int(end[-1]) <= size and np.all(entries["length"] >= LOG_OVERHEAD)
        and np.all(end[:-1] <= pos[1:]) and np.all(base <= last) and np.all(last[:-1] < base[1:])
        and np.all((entries["kind"] == HEADER_KIND) | (entries["kind"] == WALKED_KIND))
    )


def header_entries(heads: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Entries of the v2 batches of ``heads`` (header rows) from their headers alone: greatest is
    maxTimestamp; least is too for a LogAppendTime batch (every record reads as it) and a
    one-record CreateTime batch, unknown for the others (as the scan's header rules)."""
    v2 = heads[heads["magic"] == 2]
    out = np.empty(len(v2), dtype=ENTRY_DTYPE)
    out["position"] = v2["position"]
    out["length"] = LOG_OVERHEAD + v2["batch_length"]
    out["kind"] = HEADER_KIND
    out["base_offset"] = v2["base_offset"]
    out["last_offset"] = v2["base_offset"] + v2["last_offset_delta"]
    out["greatest"] = v2["max_timestamp"]
    stamp = v2["timestamp_type"]
    exact = (stamp == _LOG_APPEND_TIME) | ((v2["record_count"] == 1) & (stamp == _CREATE_TIME))
    out["least"] = np.where(exact, v2["max_timestamp"], _MIN)
    return out


def walked_entries(heads: npt.NDArray[Any], timestamps: npt.NDArray[np.int64], counts: npt.NDArray[Any],
                   least: npt.NDArray[np.int64], ok: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
    """Entries of the batches of ``heads`` a walk vouched for (``ok``), from its output for those
    same batches (``timestamps`` by batch, ``counts`` and ``least`` per batch)."""
    counts = np.asarray(counts, dtype=np.int64)
    greatest = np.full(len(heads), _MIN, dtype=np.int64)
    some = np.flatnonzero(counts > 0)
    if len(some):
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        greatest[some] = np.maximum.reduceat(np.asarray(timestamps, dtype=np.int64), starts[some])
    rows = heads[ok]
    out = np.empty(len(rows), dtype=ENTRY_DTYPE)
    out["position"] = rows["position"]
    out["length"] = LOG_OVERHEAD + rows["batch_length"]
    out["kind"] = WALKED_KIND
    out["base_offset"] = rows["base_offset"]
    out["last_offset"] = rows["base_offset"] + rows["last_offset_delta"]
    out["least"] = np.where(counts[ok] > 0, least[ok], _MAX)
    out["greatest"] = greatest[ok]
    return out


class SegmentTimes:
    """One segment's time index in one scan: the entries found (checked), and those learned.

    Attributes
    ----------
    entries : numpy.ndarray
        The file's entries (:data:`ENTRY_DTYPE`, by position); empty without a usable file,
        or once a framed batch disagreed with them.
    full : bool
        Every batch of the segment was walked (by :func:`build_time_index`).
    """

    def __init__(self, owner: TimeIndexes, seg: Segment, ident: SegmentIdentity, path: Path,
                 entries: npt.NDArray[Any], full: bool) -> None:
        self.owner, self.seg, self.ident, self.path = owner, seg, ident, path
        self.entries = entries
        self.full = full
        self._learned: list[npt.NDArray[Any]] = []
        self._dropped = False  # the file disagreed with the segment: written anew

    @property
    def usable(self) -> bool:
        return len(self.entries) > 0

    def spans(self, ts_lo: int | None, ts_hi: int | None, start: int, end: int | None
              ) -> tuple[list[tuple[int, int]], int, int]:
        """The byte ranges of the segment a scan of timestamps ``[ts_lo, ts_hi]`` (microseconds) and
        offsets ``[start, end)`` reads: every batch an entry does not rule out, and every byte no
        entry covers. Also the batches and bytes ruled out."""
        e = self.entries
        if not len(e):
            return [(0, self.seg.size)], 0, 0
        miss = e["last_offset"] < start
        if end is not None:
            miss |= e["base_offset"] >= end
        if ts_lo is not None:
            miss |= e["greatest"] < -(-ts_lo // 1000)  # greatest (ms) * 1000 < ts_lo
        if ts_hi is not None:
            miss |= e["least"] > ts_hi // 1000  # least (ms) * 1000 > ts_hi
        pos = e["position"]
        stop = pos + e["length"].astype(np.int64)
        before = np.concatenate(([0], stop[:-1]))
        # spans in order: the gap before each entry (read), the entry (read unless missed), the tail
        a = np.concatenate((np.stack((before, pos), axis=1).ravel(), [stop[-1]]))
        b = np.concatenate((np.stack((pos, stop), axis=1).ravel(), [self.seg.size]))
        read = np.concatenate((np.stack((np.ones(len(e), np.bool_), ~miss), axis=1).ravel(), [True]))
        keep = (b > a) & read
        out: list[tuple[int, int]] = []
        for lo, hi in zip(a[keep].tolist(), b[keep].tolist(), strict=True):
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return out, int(miss.sum()), int(e["length"][miss].astype(np.int64).sum())

    def agrees(self, heads: npt.NDArray[Any], first: int, nxt: int, stop: int) -> bool:
        """Whether the batches framed from ``first`` to ``nxt`` (``heads``) are what the entries
        among them say, the range read ending at ``stop``; if not the file is dropped (noted)."""
        if not self.usable:
            return True
        e = self.entries
        mine = e[int(np.searchsorted(e["position"], first)) : int(np.searchsorted(e["position"], nxt))]
        ok = nxt <= stop
        if ok and len(mine):
            k = np.searchsorted(heads["position"], mine["position"])
            ok = bool(np.all(k < len(heads)))
            if ok:
                got = heads[k]
                ok = bool(np.array_equal(got["position"], mine["position"])
                          and np.array_equal(LOG_OVERHEAD + got["batch_length"].astype(np.int64), mine["length"])
                          and np.array_equal(got["base_offset"], mine["base_offset"])
                          and np.array_equal(got["base_offset"] + got["last_offset_delta"], mine["last_offset"]))
        if not ok:
            _note(self.seg, f"time index {self.path.name} does not match the batches at byte {first}: not used")
            self.entries = np.zeros(0, dtype=ENTRY_DTYPE)
            self.full = False
            self._dropped = True
        return ok

    def learn_heads(self, heads: npt.NDArray[Any]) -> None:
        """Entries of framed batches from their headers (:func:`header_entries`)."""
        if len(heads):
            self._learned.append(header_entries(heads))

    def learn_walk(self, heads: npt.NDArray[Any], got: tuple[Any, ...], walked: npt.NDArray[np.bool_]) -> None:
        """Entries of batches walked with their CRCs checked: ``got`` is ``stamps`` of the
        batches ``heads`` back to back, ``walked`` those not skipped by it."""
        status = got[4]
        if len(status) != len(heads):
            return
        ok = walked & (status == STAMPS_OK)
        if ok.any():
            self._learned.append(walked_entries(heads, got[1], got[2], got[3], ok))

    def merged(self) -> npt.NDArray[Any]:
        """The entries found and learned, one per position: a walked entry over one from a header,
        the latest learned over an older one."""
        parts = [self.entries, *self._learned] if len(self.entries) else self._learned
        if not parts:
            return self.entries
        allr = np.concatenate(parts) if len(parts) > 1 else parts[0]
        pos = allr["position"]
        if len(parts) == 1 and np.all(pos[1:] > pos[:-1]):
            return allr  # (one run of batches in order: nothing to merge)
        order = np.lexsort((np.arange(len(allr)), allr["kind"], allr["position"]))
        allr = allr[order]
        last = np.concatenate((allr["position"][1:] != allr["position"][:-1], [True]))
        return allr[last]

    def save(self, *, full: bool = False) -> bool:
        """Write what was learned (merged with the entries found) when it adds to them; whether a
        file was written. Never raises: a folder that cannot be written is noted once per scan."""
        if not self._learned and not (full and not self.full):
            return False
        merged = self.merged()
        full = full or self.full
        self._learned = []
        if not self._dropped and full == self.full and len(merged) == len(self.entries) \
                and np.array_equal(merged, self.entries):
            return False
        if not well_formed(merged, self.ident.size):
            _note(self.seg, "time index: the batches framed do not form a segment (damage): not written")
            if self._dropped:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            return False
        self.entries, self.full, self._dropped = merged, full, False
        return self.owner.write(self, encode(self.ident, merged, full))


def encode(ident: SegmentIdentity, entries: npt.NDArray[Any], full: bool) -> bytes:
    """An index file's bytes (see the module docstring)."""
    key = ident.key.encode()
    meta = key + ident.head
    rest = meta + b"\0" * (-len(meta) % 8) + np.ascontiguousarray(entries, dtype=ENTRY_DTYPE).tobytes()
    fields = [MAGIC, VERSION, FULL if full else 0, len(entries), ident.size, ident.mtime_ns, 0, len(key),
              len(ident.head)]
    fields[6] = crc32c(rest, crc32c(HEADER.pack(*fields)))
    return HEADER.pack(*fields) + rest


def decode(raw: bytes, ident: SegmentIdentity) -> tuple[npt.NDArray[Any], bool]:
    """The entries and ``full`` flag of an index file's bytes for the segment ``ident``.

    Raises
    ------
    ValueError
        Why the file is not used: not an index, another version, truncated, a CRC mismatch,
        another segment's, stale (the segment changed), or ill-formed entries.
    """
    if len(raw) < HEADER.size or raw[:8] != MAGIC:
        raise ValueError("not a kbatch time index")
    magic, version, flags, count, size, mtime_ns, crc, key_length, head_length = HEADER.unpack_from(raw)
    if version != VERSION:
        raise ValueError(f"version {version}, not {VERSION}")
    meta = key_length + head_length
    start = HEADER.size + meta + (-meta % 8)
    if count > (1 << 40) or len(raw) != start + count * ENTRY_DTYPE.itemsize:
        raise ValueError(f"{len(raw)} bytes, not the {start + count * ENTRY_DTYPE.itemsize} its header says "
                         "(truncated or damaged)")
    zeroed = HEADER.pack(magic, version, flags, count, size, mtime_ns, 0, key_length, head_length)
    if crc32c(raw[HEADER.size :], crc32c(zeroed)) != crc:
        raise ValueError("its CRC does not match its bytes (damaged)")
    body = raw[start:]
    key = raw[HEADER.size : HEADER.size + key_length]
    if key != ident.key.encode():
        raise ValueError(f"it indexes another segment ({key.decode(errors='replace')})")
    if (size, mtime_ns, raw[HEADER.size + key_length : HEADER.size + meta]) != (ident.size, ident.mtime_ns,
                                                                               ident.head):
        raise ValueError("the segment changed since it was written (size, time or first batch): stale")
    entries = np.frombuffer(body, dtype=ENTRY_DTYPE).copy()
    if not well_formed(entries, ident.size):
        raise ValueError("its entries are not a segment's batches")
    return entries, bool(flags & FULL)


class TimeIndexes:
    """The time index files of one scan (or one ``kbatch index`` run).

    Parameters
    ----------
    index_dir : str or PathLike, optional
        The folder (default :func:`default_index_dir`).
    """

    def __init__(self, index_dir: str | os.PathLike[str] | None = None) -> None:
        self._given = index_dir
        self._dir: Path | None = None
        self.unwritable: str | None = None  # why, once a write failed
        self.written = 0

    @property
    def folder(self) -> Path:
        if self._dir is None:
            self._dir = Path(self._given).expanduser() if self._given is not None else default_index_dir()
        return self._dir

    def file_for(self, seg: Segment, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return self.folder / f"{seg.path.stem}-{digest}{SUFFIX}"

    def open(self, seg: Segment) -> SegmentTimes | None:
        """``seg``'s time index (its entries when a file checks out, else none yet), or None when
        the segment's identity cannot be had (noted)."""
        try:
            ident = seg.identity()
        except (OSError, KBatchError) as exc:
            _note(seg, f"time index: cannot look the segment up ({exc}): not used")
            return None
        if ident is None:
            _note(seg, "time index: the segment changed since it was opened: not used")
            return None
        try:
            path = self.file_for(seg, ident.key)
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # (none yet; a folder that cannot be made: noted on write)
            raw = None
        except (OSError, RuntimeError) as exc:  # (RuntimeError: no home folder to find the cache in)
            _note(seg, f"time index: cannot read it ({exc}): not used")
            return None
        entries, full = np.zeros(0, dtype=ENTRY_DTYPE), False
        if raw is not None:
            try:
                entries, full = decode(raw, ident)
            except ValueError as exc:
                _note(seg, f"time index {path.name}: {exc}: not used")
                with contextlib.suppress(OSError):
                    path.unlink()  # (written anew by the scan that reads the segment)
        return SegmentTimes(self, seg, ident, path, entries, full)

    def write(self, times: SegmentTimes, data: bytes) -> bool:
        """``data`` to ``times``'s file, atomically (a temporary file renamed); False (noted once)
        when the folder cannot be written."""
        if self.unwritable is not None:
            return False
        path = times.path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            self.unwritable = str(exc)
            _note(times.seg, f"time index: the folder {path.parent} cannot be written ({exc}): no index kept")
            logger.warning("time index folder %s cannot be written (%s): scans keep no index", path.parent, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False
        self.written += 1
        return True


@dataclass
class IndexSummary:
    """What :func:`build_time_index` did."""

    segments: int = 0  #: segments indexed now
    up_to_date: int = 0  #: segments whose full index was there already
    batches: int = 0  #: batches named by the indexes written
    walked: int = 0  #: of them, walked (the others: legacy or snappy, known from their headers)
    bytes: int = 0  #: bytes of the segments indexed now
    skipped: int = 0  #: damaged ranges left out (read by every scan as without an index)
    unwritable: str | None = None  #: why the folder could not be written, if it could not
    notes: list[str] = field(default_factory=list)


def build_time_index(
    logs: Iterable[Any],
    index_dir: str | os.PathLike[str] | None = None,
    *,
    chunk_bytes: int = 16 << 20,
    progress: Callable[[int], None] | None = None,
) -> IndexSummary:
    """Walk every batch of every segment of ``logs`` and write its time index (``kbatch index``).

    A segment whose full index is there and matches it is not read again. Damage is left out
    of the index (scans read those bytes as without one, with their own ``on_corruption``).
    ``progress`` is called with the bytes of each segment's chunk as it is done.
    """
    indexes = TimeIndexes(index_dir)
    out = IndexSummary()
    for log in logs:
        for seg in log.segments:
            if seg.size == 0:
                continue
            times = indexes.open(seg)
            out.notes.extend(f"{seg.url}: {n}" for n in seg.notes if n.startswith("time index"))
            if times is None:
                continue
            if times.full:
                out.up_to_date += 1
                if progress is not None:
                    progress(seg.size)
                continue
            seg.limit_reads(None)
            skipped = len(seg.skipped)
            pos = 0
            while True:
                heads, nxt, at_end = seg.frame_headers(pos, chunk_bytes, "skip")
                if len(heads):
                    times.learn_heads(heads)
                    a, b = int(heads["position"][0]), int(heads["position"][-1]) + LOG_OVERHEAD + int(
                        heads["batch_length"][-1])
                    got = stamps(seg.view(a, b), verify_crc=True)
                    times.learn_walk(heads, got, np.ones(len(heads), dtype=np.bool_))
                    seg.release(a, b)
                if progress is not None:
                    progress(min(nxt, seg.size) - pos)
                pos = nxt
                if at_end:
                    break
            out.skipped += len(seg.skipped) - skipped
            times.save(full=True)
            if indexes.unwritable is not None:
                out.unwritable = indexes.unwritable
                return out
            out.segments += 1
            out.bytes += seg.size
            out.batches += len(times.entries)
            out.walked += int((times.entries["kind"] == WALKED_KIND).sum())
    return out
