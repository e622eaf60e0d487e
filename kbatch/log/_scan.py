"""Lazy scans of partition directories: filters pushed down to segments and batch headers.

Provides :func:`scan_logs` (behind ``LogDir.scan_records`` and :func:`kbatch.log.scan_logs`), the one
engine-free scan the Polars, Spark and DuckDB entry points use, :func:`scan_tables` (the same
scan of one log as whole ``RecordTable`` s: the Spark source's tasks), :class:`ScanStats` and
:func:`overlapping` (the aborted transactions a fetch lists: ``LogDir``'s reads too). Uses
:mod:`kbatch.log._predicate` (the filter form), the :class:`~kbatch.log.LogDir` and
:class:`~kbatch.log.Segment` readers (seeks through their checked indexes),
:mod:`kbatch.log._timeindex` (each batch's least and greatest record timestamp, cached) and
:mod:`kbatch.arrow` (the schema and the byte columns).

What is skipped, and on what evidence (the answer is always the records an eager
``LogDir.read(isolation_level=...)`` returns, filtered afterwards)::

    a log        its topic or partition fails a term
    a segment    its offsets are outside the offset bounds (names: base offsets), or its largest
                 timestamp (a local segment's headers; a remote one's checked .timeindex, then
                 the headers after its last entry) is below the timestamp lower bound, or
                 its time index rules out every batch
    a batch,     with a timestamp bound, when the segment's time index (kbatch.log._timeindex:
    unread       what earlier scans or `kbatch index` learned, checked against the segment's
                 identity) says its [least, greatest] record timestamp misses the window, or
                 its offsets the bounds: never framed nor read (a remote one never fetched);
                 bytes no entry covers are read as below
    the start    of a segment's read is the checked .index position of the first offset wanted
    a batch      its offsets [base, base + last offset delta] are outside the bounds; its
                 max_timestamp is below the lower bound (magic 2); a LogAppendTime batch (every
                 record reads as its max_timestamp) or a one-record CreateTime batch whose
                 max_timestamp is above the upper bound. Never on its first timestamp: records
                 may be out of order, so a CreateTime batch of several records whose
                 max_timestamp is above the upper bound is walked (``kbatch.codec._core.stamps``:
                 decompressed into a scratch buffer, every record's timestamp read, no row
                 built) and skipped when the walk vouches for it (CRC, payload and every
                 record as decode checks them) and its least record timestamp is above the
                 bound; a batch the walk does not vouch for is decoded
    a column     never asked for is never built (offset/timestamp alone copy no key or value);
                 offset, timestamp, timestampType, topic and partition alone are built from
                 the walk of the batches it vouches for, the others decoded, in offset order

Skipped batches are neither decompressed nor CRC-checked (``stats`` counts them); rows of the
batches decoded or walked are then filtered exactly. Indexes are hints as everywhere in kbatch:
an entry that does not match the log is noted and not used, costing speed, never rows. A scan
with a timestamp bound keeps what it learns in the segment's time index (headers framed,
walks with CRCs checked) for the next one (``index=False``: neither used nor kept). Typed
values (``values=`` / ``keys=``, :mod:`kbatch.log._scan_values`) are decoded from the rows kept,
and only when a decoded column is asked for.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from kbatch._wire import LOG_OVERHEAD
from kbatch.codec import (
    DEFAULT_BATCH_ROWS,
    STAMPS_CORRUPT,
    STAMPS_OK,
    RecordTable,
    aborted_batch_mask,
    binary_column,
    kafka_schema,
    select,
    stamps,
    to_arrow,
)

from ._predicate import FilterError, Term, bounds, constant_holds, empty, normalize, row_mask
from ._scan_values import ScanDecoder, TopicValues, ValueFilter, value_scan
from ._timeindex import SegmentTimes, TimeIndexes

#: The columns a scan can give (Spark's Kafka source columns with ``headers``), in this order by default.
SCAN_COLUMNS: Final = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
_CREATE_TIME: Final = 0
_LOG_APPEND_TIME: Final = 1
#: The columns the stamps walk gives (no key, value or headers): a projection of these alone is
#: built without decoding the batches the walk vouches for.
_WALKED_COLUMNS: Final = frozenset({"offset", "timestamp", "timestampType", "topic", "partition"})


@dataclass
class ScanStats:
    """What a scan read and what it skipped (filled in as the scan is consumed).

    Attributes
    ----------
    logs, logs_skipped : int
        Partition directories given, and those a ``topic``/``partition`` term excluded.
    segments, segments_skipped : int
        Segments of the logs read, and those skipped by their base offsets or largest timestamp.
    batches_framed, batches_decoded : int
        Batch headers read, and batches decompressed and parsed (the others were skipped).
    bytes_decoded : int
        Bytes of the batches decoded (their frames, as on disk).
    batches_walked, bytes_walked : int
        Batches whose records' offsets and timestamps were walked (``kbatch.codec._core.stamps``: no
        row built), and their frames' bytes. A corrupt batch the walk does not vouch for is
        decoded after it (counted in both); legacy and snappy batches are decoded, not
        walked.
    batches_dropped_by_stamps : int
        Batches walked and then skipped: every record's timestamp above the upper bound.
    indexes_used, indexes_written : int
        Segments whose time index (:mod:`kbatch.log._timeindex`) the scan used, and index
        files it wrote (what it learned of the batches it framed and walked).
    batches_skipped_by_index, bytes_skipped_by_index : int
        Batches (and their bytes) a time index ruled out: never framed, never read.
    rows : int
        Rows returned.
    """

    logs: int = 0
    logs_skipped: int = 0
    segments: int = 0
    segments_skipped: int = 0
    batches_framed: int = 0
    batches_decoded: int = 0
    bytes_decoded: int = 0
    batches_walked: int = 0
    bytes_walked: int = 0
    batches_dropped_by_stamps: int = 0
    indexes_used: int = 0
    indexes_written: int = 0
    batches_skipped_by_index: int = 0
    bytes_skipped_by_index: int = 0
    rows: int = 0


def overlapping(aborted: Sequence[tuple[int, int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """The aborted transactions a broker lists for a fetch of offsets ``first .. last``.

    ``aborted`` is sorted by first offset: those that begin after ``last`` are cut off by
    bisection, those that ended (ABORT marker) before ``first`` by the scan.
    """
    stop = bisect.bisect_right(aborted, last, key=lambda a: a[1])
    return [(pid, f) for pid, f, end in aborted[:stop] if end >= first]


def _columns(columns: Sequence[str] | None, names: Sequence[str] = SCAN_COLUMNS) -> list[str]:
    if columns is None:
        return list(names)
    out = list(columns)
    for c in out:
        if c not in names:
            raise FilterError(f"columns: {c!r} is not one of {list(names)}")
    return out


class _Plan:
    """One scan's terms, bounds and options."""

    def __init__(self, terms: list[Term]) -> None:
        self.terms = terms
        b = bounds(terms)
        self.none = any(empty(v) for v in b.values())
        self.off_lo, self.off_hi = b["offset"]
        self.ts_lo, self.ts_hi = b["timestamp"]  # microseconds
        self.row_terms = [t for t in terms if t[0] in ("offset", "timestamp")]

    def skip_batches(self, heads: npt.NDArray[Any], start: int, end: int | None) -> npt.NDArray[np.bool_]:
        """True for each batch (header row) no row of which can pass."""
        base = heads["base_offset"]
        v2 = heads["magic"] == 2
        skip = base + heads["last_offset_delta"] < start
        if end is not None:
            # a legacy (v0/v1) compressed wrapper carries its LAST inner offset: its first is
            # known only once decompressed, so only a v2 batch is dropped on its base offset
            skip |= v2 & (base >= end)
        if self.ts_lo is not None:
            skip |= v2 & (heads["max_timestamp"] * 1000 < self.ts_lo)
        if self.ts_hi is not None:
            # max_timestamp is every record's timestamp in a LogAppendTime batch (records read
            # as the broker's time, as Kafka's DefaultRecordBatch gives them), and the one
            # record's in a one-record CreateTime batch
            stamp = heads["timestamp_type"]
            exact = v2 & ((stamp == _LOG_APPEND_TIME) | ((heads["record_count"] == 1) & (stamp == _CREATE_TIME)))
            skip |= exact & (heads["max_timestamp"] * 1000 > self.ts_hi)
        return np.asarray(skip, dtype=np.bool_)

    def to_walk(self, heads: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        """True for each batch (header row) whose records may all be above the upper bound though
        its header cannot tell: a v2 CreateTime batch of several records, max_timestamp above it."""
        if self.ts_hi is None:
            return np.zeros(len(heads), dtype=np.bool_)
        return np.asarray((heads["magic"] == 2) & (heads["timestamp_type"] == _CREATE_TIME)
                          & (heads["record_count"] > 1) & (heads["max_timestamp"] * 1000 > self.ts_hi),
                          dtype=np.bool_)


class _Columns:
    """Walked rows as plain columns (no copy into a structured array): ``self["offset"]``,
    ``self["timestamp"]``, ``self["batch"]`` (an index into the batches, built when first asked
    for), ``self[mask]`` (the rows chosen) and ``len(self)``, as a RecordTable's records give them."""

    def __init__(self, offset: npt.NDArray[np.int64], timestamp: npt.NDArray[np.int64],
                 counts: npt.NDArray[Any] | None, batch: npt.NDArray[np.int32] | None = None) -> None:
        self.offset, self.timestamp, self.counts, self.batch = offset, timestamp, counts, batch

    def __len__(self) -> int:
        return len(self.offset)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key == "offset":
                return self.offset
            if key == "timestamp":
                return self.timestamp
            if key == "batch":
                if self.batch is None:
                    assert self.counts is not None
                    self.batch = np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)
                return self.batch
            raise KeyError(key)
        return _Columns(self.offset[key], self.timestamp[key], None, self["batch"][key])


@dataclass
class _Stamped:
    """Rows of walked batches: ``records`` (offset, timestamp, batch: an index into ``batches``)
    and ``batches`` (their header rows), as much of a RecordTable as the walked columns need."""

    records: _Columns
    batches: npt.NDArray[Any]


def _arrow_batch(
    table: RecordTable | _Stamped, rows: npt.NDArray[np.bool_] | None, topic: str, partition: int | None,
    columns: list[str], schema: Any, binary: str,
) -> Any:
    """The chosen rows of ``table`` as one Arrow record batch of ``columns`` (only those built:
    ``key`` and ``value`` each alone; ``headers`` through :func:`kbatch.arrow.to_arrow`, which
    builds the key and value columns with it)."""
    import pyarrow as pa

    if "headers" in columns:
        assert isinstance(table, RecordTable)  # (never walked: _WALKED_COLUMNS)
        sub = table if rows is None else select(table, rows)
        full = to_arrow(sub, topic=topic, partition=partition, include_headers="headers" in columns,
                        binary=binary)  # type: ignore[arg-type]
        return pa.RecordBatch.from_arrays([full.column(c).combine_chunks() for c in columns], schema=schema)
    records = table.records if rows is None else table.records[rows]
    n = len(records)
    arrays = []
    for c in columns:
        if c == "offset":
            arrays.append(pa.array(np.ascontiguousarray(records["offset"], dtype=np.int64)))
        elif c == "timestamp":
            ts = np.ascontiguousarray(records["timestamp"], dtype=np.int64) * 1000
            arrays.append(pa.array(ts, type=pa.timestamp("us", tz="UTC")))
        elif c == "timestampType":
            types = table.batches["timestamp_type"].astype(np.int32)[records["batch"].astype(np.intp)]
            arrays.append(pa.array(types, type=pa.int32()))
        elif c == "topic":
            arrays.append(pa.array([topic], pa.string()).take(np.zeros(n, np.int32)) if n else
                          pa.array([], pa.string()))
        elif c in ("key", "value"):
            assert isinstance(table, RecordTable)
            arrays.append(binary_column(table.data, records[c + "_start"], records[c + "_length"],
                                        binary=binary))  # type: ignore[arg-type]
        elif c == "partition":
            arrays.append(pa.nulls(n, pa.int32()) if partition is None
                          else pa.array(np.full(n, partition, np.int32), type=pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _typed_batch(
    table: RecordTable, rows: npt.NDArray[np.bool_] | None, topic: str, partition: int | None,
    base: Any, columns: list[str], typed: TopicValues, binary: str, where: ValueFilter | None,
) -> Any:
    """The chosen rows of ``table`` as one Arrow record batch of ``columns``, some of them
    decoded by ``typed`` (only the rows chosen are decoded, less those ``where`` rules out);
    ``base``: the ``pyarrow.Schema`` of the raw columns built beside them. None: ``where`` ruled
    out every row."""
    import pyarrow as pa

    sub = table if rows is None else select(table, rows)
    sub.topic, sub.partition = topic, partition  # (the decode's errors name them)
    if where is not None:  # judged with the raw columns it reads alone; the rows it keeps, decoded whole
        judged = pa.schema([base.field(c) for c in where.columns if c in base.names] or [base.field(0)])
        kept = typed.judge(sub, pa.Table.from_batches([_arrow_batch(sub, None, topic, partition, judged.names,
                                                                    judged, binary)]), columns, where)
        if kept is not None and not kept.all():
            if not kept.any():
                return None
            sub = select(sub, kept)
            sub.topic, sub.partition = topic, partition
    raw = _arrow_batch(sub, None, topic, partition, base.names, base, binary)
    out = typed.decode(sub, pa.Table.from_batches([raw]), columns).combine_chunks()
    return out.to_batches()[0]


def _max_timestamp(seg: Any, on_corruption: str) -> int:
    """The largest batch max_timestamp of a segment (-1 when none).

    A local segment's from all its headers (a header scan: no record parsed), exact whatever
    its ``.timeindex`` says; a remote one's through ``Segment.max_timestamp`` (its last
    ``.timeindex`` entry that names a matching batch, then the headers after it), which saves
    downloading the segment but trusts that no batch before that entry has a larger timestamp.
    """
    if seg.is_remote:
        return int(seg.max_timestamp(on_corruption))
    heads = seg.scan(on_corruption)
    return int(heads["max_timestamp"].max()) if len(heads) else -1


def _rows(plan: _Plan, table: RecordTable | _Stamped, start: int, end: int | None) -> npt.NDArray[np.bool_] | None:
    """The rows of ``table`` kept (None: all of them, no mask built)."""
    offsets = table.records["offset"]
    if not len(offsets):
        return None
    cut = int(offsets.min()) < start or (end is not None and int(offsets.max()) >= end)
    if not plan.row_terms and not cut:
        return None
    rows = row_mask(plan.row_terms, offsets, table.records["timestamp"])
    if cut:
        rows &= offsets >= start
        if end is not None:
            rows &= offsets < end
    return rows


def _geometric(kept: npt.NDArray[np.intp]) -> list[npt.NDArray[np.intp]]:
    """``kept`` cut into groups of 1, 2, 4, ... items."""
    cuts = [0]
    while cuts[-1] < len(kept):
        cuts.append(min(len(kept), 2 * cuts[-1] + 1))
    return [kept[a:b] for a, b in itertools.pairwise(cuts)]


def _frame_end(heads: npt.NDArray[Any], k: int) -> int:
    return int(heads["position"][k]) + LOG_OVERHEAD + int(heads["batch_length"][k])


def _read_group(
    seg: Any, part: npt.NDArray[Any], drop: npt.NDArray[np.bool_], plan: _Plan, narrow: bool, verify_crc: bool,
    on_corruption: str, stats: ScanStats, times: SegmentTimes | None,
) -> Iterator[RecordTable | _Stamped]:
    """The tables of the batches ``part`` (header rows, back to back in ``seg``) not dropped, in
    order: walked (the batches the walk vouches for, when ``narrow``) or decoded.

    Walked: every batch kept when ``narrow``, else those :meth:`_Plan.to_walk` names; one the
    walk vouches for whose least record timestamp is above the upper bound is dropped. What a
    walk with CRCs checked vouches for goes to the segment's time index (``times``).
    """
    drop = drop.copy()
    walk = ~drop if narrow else ~drop & plan.to_walk(part)
    walked = np.zeros(len(part), dtype=np.bool_)  # rows from the walk
    got: tuple[Any, ...] = ()
    w0 = 0
    if walk.any():
        idx = np.flatnonzero(walk)
        w0, w1 = int(idx[0]), int(idx[-1])
        got = stamps(seg.view(int(part["position"][w0]), _frame_end(part, w1)), skip_batches=~walk[w0 : w1 + 1],
                     verify_crc=verify_crc)
        status = got[4]
        least = got[3]
        if times is not None and verify_crc:
            times.learn_walk(part[w0 : w1 + 1], got, walk[w0 : w1 + 1])
        ok = np.zeros(len(part), dtype=np.bool_)
        ok[w0 : w1 + 1] = status == STAMPS_OK
        # walked: vouched for, or found corrupt (legacy, snappy, too large: left untouched)
        went = w0 + np.flatnonzero(walk[w0 : w1 + 1] & ((status == STAMPS_OK) | (status == STAMPS_CORRUPT)))
        stats.batches_walked += len(went)
        stats.bytes_walked += int((LOG_OVERHEAD + part["batch_length"][went].astype(np.int64)).sum())
        if plan.ts_hi is not None:
            # every record (its real timestamp, a ms) above the upper bound (us): a * 1000 > hi
            above = np.zeros(len(part), dtype=np.bool_)
            above[w0 : w1 + 1] = least > plan.ts_hi // 1000
            gone = ok & above & plan.to_walk(part)
            stats.batches_dropped_by_stamps += int(gone.sum())
            drop |= gone
        if narrow:
            walked = ok & ~drop
    # runs of batches in order, each walked or decoded
    how = np.where(drop, 0, np.where(walked, 1, 2))
    kept = np.flatnonzero(how)
    if not len(kept):
        return
    cuts = np.flatnonzero(np.diff(how[kept])) + 1
    for run in np.split(kept, cuts):
        a, b = int(run[0]), int(run[-1])
        if how[a] == 1:
            yield _stamped(part, got, w0, a, b, walked)
            continue
        sizes = LOG_OVERHEAD + part["batch_length"][run].astype(np.int64)
        stats.batches_decoded += len(run)
        stats.bytes_decoded += int(sizes.sum())
        mask = how[a : b + 1] != 2
        yield from seg.decode_range(int(part["position"][a]), _frame_end(part, b), verify_crc=verify_crc,
                                    on_corruption=on_corruption, heads=part[a : b + 1],
                                    drop=mask if mask.any() else None)


def _stamped(part: npt.NDArray[Any], got: tuple[Any, ...], w0: int, a: int, b: int,
             walked: npt.NDArray[np.bool_]) -> _Stamped:
    """The walked rows of batches ``a .. b`` of ``part`` (``got``: the walk of ``part[w0:]``)."""
    offsets, timestamps, counts = got[0], got[1], got[2]
    starts = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    lo, hi = int(starts[a - w0]), int(starts[b - w0 + 1])
    mine = counts[a - w0 : b - w0 + 1]
    rows = _Columns(offsets[lo:hi], timestamps[lo:hi], mine)
    chosen = walked[a : b + 1]
    if not chosen.all():  # batches walked but dropped (all records past the upper bound) among them
        rows = rows[np.repeat(chosen, mine)]
    return _Stamped(rows, part[a : b + 1])


def _scan_log(
    log: Any, plan: _Plan, isolation_level: str, on_corruption: str, verify_crc: bool, chunk_bytes: int,
    stats: ScanStats, limited: bool, narrow: bool, indexes: TimeIndexes | None = None,
) -> Iterator[tuple[RecordTable | _Stamped, npt.NDArray[np.bool_] | None]]:
    """(table, rows kept or None for all) of one log, the filter's batches only (``narrow``: the
    columns asked for are walked columns; ``indexes``: the time indexes to use and keep)."""
    start = log.log_start_offset if plan.off_lo is None else max(log.log_start_offset, plan.off_lo)
    end = None if plan.off_hi is None else plan.off_hi + 1
    aborted: list[tuple[int, int, int]] = []
    if isolation_level == "read_committed":
        aborted, lso = log.transactions(on_corruption)
        if lso is not None:
            end = lso if end is None else min(end, lso)
    segments = log.segments
    stats.segments += len(segments)
    for i, seg in enumerate(segments):
        nxt_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if end is not None and seg.base_offset >= end:
            stats.segments_skipped += len(segments) - i
            return
        if seg.size == 0 or (nxt_base is not None and nxt_base <= start):
            stats.segments_skipped += 1
            continue
        times = None if indexes is None else indexes.open(seg)
        if times is not None and times.usable:
            # the byte ranges the index does not rule out (the others are never read)
            spans, n, nbytes = times.spans(plan.ts_lo, plan.ts_hi, start, end)
            stats.indexes_used += 1
            stats.batches_skipped_by_index += n
            stats.bytes_skipped_by_index += nbytes
        else:
            seg.limit_reads(None)
            if plan.ts_lo is not None and _max_timestamp(seg, on_corruption) * 1000 < plan.ts_lo:
                spans = []
            else:
                spans = [(seg.position_for(start, on_corruption) if start > seg.base_offset else 0, seg.size)]
        ended = False
        if spans:
            ended = yield from _scan_spans(seg, spans, times, plan, start, end, aborted, on_corruption,
                                           verify_crc, chunk_bytes, stats, limited, narrow)
        else:
            stats.segments_skipped += 1
        if times is not None and times.save():
            stats.indexes_written += 1
        if ended:
            stats.segments_skipped += len(segments) - i - 1
            return


def _scan_spans(
    seg: Any, spans: list[tuple[int, int]], times: SegmentTimes | None, plan: _Plan, start: int, end: int | None,
    aborted: list[tuple[int, int, int]], on_corruption: str, verify_crc: bool, chunk_bytes: int,
    stats: ScanStats, limited: bool, narrow: bool,
) -> Generator[tuple[RecordTable | _Stamped, npt.NDArray[np.bool_] | None], None, bool]:
    """:func:`_scan_log`'s reads of the byte ranges ``spans`` of one segment (each a run of
    whole batches); True when the offsets wanted end in it. A batch framed that disagrees with
    the time index (``times``) drops it: the rest of the segment is read without it."""
    todo = list(spans)
    k = 0
    while k < len(todo):
        a, b = todo[k]
        k += 1
        seg.limit_reads(b)  # (remote: nothing past the range is fetched, not even read-ahead)
        pos = a
        while pos < b:
            heads, nxt, at_end = seg.frame_headers(pos, min(chunk_bytes, b - pos), on_corruption)
            if times is not None:
                if not times.agrees(heads, pos, nxt, b):
                    del todo[k:]
                    b = seg.size
                    seg.limit_reads(None)
                times.learn_heads(heads)
            if len(heads):
                stats.batches_framed += len(heads)
                drop = plan.skip_batches(heads, start, end)
                if aborted:
                    first = int(heads["base_offset"][0])
                    upper = int(heads["base_offset"][-1]) + int(heads["last_offset_delta"][-1])
                    drop |= aborted_batch_mask(heads, overlapping(aborted, first, upper))
                kept = np.flatnonzero(~drop)
                # with a row limit, batches are decoded 1, 2, 4, ... at a time: the scan stops
                # (is not resumed) once the limit is reached, having decoded about what it needed
                groups = [kept] if not limited else _geometric(kept)
                for group in groups:
                    if len(group) == 0:
                        continue
                    lo, hi = int(group[0]), int(group[-1])
                    part = heads[lo : hi + 1]
                    for table in _read_group(seg, part, drop[lo : hi + 1], plan, narrow, verify_crc,
                                             on_corruption, stats, times):
                        yield table, _rows(plan, table, start, end)
                    seg.release(int(part["position"][0]), _frame_end(part, len(part) - 1))
                if end is not None and int(heads["base_offset"][-1]) >= end:
                    return True
            pos = nxt
            if at_end:
                return False
    return False


def window_end(log: Any, ts_lo: int | None, ts_hi: int | None, start: int, end: int,
               index_dir: str | os.PathLike[str] | None = None) -> int:
    """The offset in ``[start, end]`` after which no record of ``log`` has a timestamp in
    ``[ts_lo, ts_hi]`` (microseconds), by the segments' time indexes alone (no batch read): the
    end of the last batch an index does not rule out. A segment without a usable index, or whose
    index leaves its tail uncovered, may hold such a record up to its end (the next segment's
    base offset). What a planner narrows a time window's upper end by (the records of a batch
    being out of order, its header cannot).
    """
    if start >= end or (ts_lo is None and ts_hi is None):
        return end
    indexes = TimeIndexes(index_dir)
    segments = log.segments
    last = start
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else end
        if seg.base_offset >= end:
            break
        if nxt <= start or seg.size == 0:
            continue
        times = indexes.open(seg)
        if times is None or not times.usable:
            last = max(last, min(nxt, end))
            continue
        spans, _, _ = times.spans(ts_lo, ts_hi, start, end)
        if not spans:
            continue
        e = times.entries
        stops = e["position"] + e["length"].astype(np.int64)
        tail = spans[-1][1]
        at = np.flatnonzero(stops == tail)
        # (bytes after the last span no entry covers: the segment grew since, anything up to its end)
        upto = int(e["last_offset"][at[-1]]) + 1 if len(at) else nxt
        last = max(last, min(upto, end))
    return last


def scan_tables(
    log: Any,
    terms: Sequence[Term],
    start: int | None = None,
    end: int | None = None,
    *,
    isolation_level: str = "read_uncommitted",
    on_corruption: str = "raise",
    verify_crc: bool = True,
    chunk_bytes: int = 16 << 20,
    stats: ScanStats | None = None,
    index: bool = True,
    index_dir: str | os.PathLike[str] | None = None,
) -> Iterator[RecordTable]:
    """The records of one log passing ``terms`` (normalized, :func:`kbatch.log._predicate.normalize`)
    within offsets ``[start, end)``, as ``RecordTable`` s with every column.

    What ``log.iter_tables(start_offset=start, end_offset=end, ...)`` gives, filtered, read by the
    scan's rules (segments, batches skipped by headers or by the time index, walked past an upper
    time bound; only the rows that pass are kept, sharing the tables' bytes): the Spark source's
    tasks read their slices through it when filters are pushed. ``index``, ``index_dir``: as
    :meth:`kbatch.log.LogDir.scan_records`'s.
    """
    bound = [*terms]
    if start is not None:
        bound.append(("offset", ">=", int(start)))
    if end is not None:
        bound.append(("offset", "<", int(end)))
    plan = _Plan(bound)
    if plan.none or not constant_holds(plan.terms, "topic", log.topic) or not constant_holds(
            plan.terms, "partition", None if log.partition < 0 else int(log.partition)):
        return
    counts = ScanStats() if stats is None else stats
    indexes = TimeIndexes(index_dir) if index and (plan.ts_lo is not None or plan.ts_hi is not None) else None
    for table, rows in _scan_log(log, plan, isolation_level, on_corruption, verify_crc, chunk_bytes, counts,
                                 False, False, indexes):
        assert isinstance(table, RecordTable)  # every column: never walked alone
        if rows is not None:
            if not rows.any():
                continue
            table = select(table, rows)
        table.topic, table.partition = log.topic, None if log.partition < 0 else int(log.partition)
        counts.rows += len(table)
        yield table


def scan_logs(
    logs: Iterable[Any],
    columns: Sequence[str] | None = None,
    filter: Iterable[Sequence[Any]] | None = None,
    limit: int | None = None,
    *,
    isolation_level: str = "read_uncommitted",
    on_corruption: str = "raise",
    verify_crc: bool = True,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    chunk_bytes: int = 16 << 20,
    binary: str = "binary",
    stats: ScanStats | None = None,
    values: ScanDecoder | None = None,
    keys: ScanDecoder | None = None,
    errors: str = "raise",
    index: bool = True,
    index_dir: str | os.PathLike[str] | None = None,
    fields: Sequence[str] | None = None,
    where: ValueFilter | None = None,
) -> Any:
    """Stream the filtered records of partition directories as a ``pyarrow.RecordBatchReader``.

    See :meth:`kbatch.log.LogDir.scan_records` (the parameters, what is skipped, typed values:
    with ``values`` or ``keys`` every log must be of one topic). ``where``: a filter on value
    fields judged after a decode of only those (:class:`~kbatch.log._scan_values.ValueFilter`;
    not with ``limit``, which counts the rows before it).
    """
    import pyarrow as pa

    todo: list[Any] = [logs] if hasattr(logs, "segments") else list(logs)
    source = kafka_schema(include_headers=True, binary=binary)  # type: ignore[arg-type]
    typed = value_scan([log.topic for log in todo], source, values, keys, errors, fields)
    full = source if typed is None else typed.schema
    if where is not None and (typed is None or limit is not None):
        raise ValueError("where= filters decoded values (values=), and counts no limit")
    cols = _columns(columns, full.names)
    plan = _Plan(normalize(filter))
    if limit is not None and limit < 0:
        raise FilterError(f"limit must be >= 0, got {limit}")
    if batch_rows < 1:
        raise FilterError(f"batch_rows must be >= 1, got {batch_rows}")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {isolation_level!r}")
    schema = pa.schema([full.field(c) for c in cols])
    counts = ScanStats() if stats is None else stats
    narrow = set(cols) <= _WALKED_COLUMNS
    decoded = () if typed is None else typed.decoded(cols)
    # the raw columns built beside the decoded ones (at least one: the decode's rows)
    base = pa.schema([source.field(c) for c in cols if c in SCAN_COLUMNS and c not in decoded] or
                     [source.field("offset")])
    # a time index serves (and is kept by) scans with a timestamp bound
    indexes = TimeIndexes(index_dir) if index and (plan.ts_lo is not None or plan.ts_hi is not None) else None

    def batches() -> Iterator[Any]:
        remaining = limit
        if plan.none or remaining == 0:
            return
        if indexes is not None:
            # remote segments fetch only what the scan asks for (no read-ahead into a segment
            # its index may rule out) until it reaches them
            for log in todo:
                for seg in log.segments:
                    seg.limit_reads(0)
        try:
            yield from _batches(remaining)
        finally:
            if indexes is not None:
                for log in todo:
                    for seg in log.segments:
                        seg.limit_reads(None)

    def _batches(remaining: int | None) -> Iterator[Any]:
        for log in todo:
            counts.logs += 1
            partition = None if log.partition < 0 else int(log.partition)
            if not (constant_holds(plan.terms, "topic", log.topic)
                    and constant_holds(plan.terms, "partition", partition)):
                counts.logs_skipped += 1
                continue
            for table, rows in _scan_log(log, plan, isolation_level, on_corruption, verify_crc, chunk_bytes, counts,
                                         remaining is not None, narrow, indexes):
                if remaining is not None and (len(table.records) if rows is None else int(rows.sum())) > remaining:
                    if rows is None:
                        rows = np.ones(len(table.records), dtype=np.bool_)
                    rows[np.flatnonzero(rows)[remaining]:] = False
                n = len(table.records) if rows is None else int(rows.sum())
                if n == 0:
                    continue
                chosen = None if n == len(table.records) else rows
                if decoded:
                    assert typed is not None and isinstance(table, RecordTable)  # (never walked: not narrow)
                    typed_out = _typed_batch(table, chosen, log.topic, partition, base, cols, typed, binary, where)
                    if typed_out is None:
                        continue
                    out, n = typed_out, typed_out.num_rows
                else:
                    out = _arrow_batch(table, chosen, log.topic, partition, cols, schema, binary)
                counts.rows += n
                for k in range(0, n, batch_rows):
                    yield out.slice(k, batch_rows)
                if remaining is not None:
                    remaining -= n
                    if remaining == 0:
                        return

    return pa.RecordBatchReader.from_batches(schema, batches())


__all__ = ["SCAN_COLUMNS", "ScanStats", "overlapping", "scan_logs", "scan_tables", "window_end"]
