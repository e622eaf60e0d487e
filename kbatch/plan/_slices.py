"""Planned work: the chosen offset ranges cut into :class:`LogSlice` s (offsets of one partition and
the segment files that hold them; picklable) and the slices packed into tasks, as Spark's file source
cuts and packs files; and what a read of several roots keys and marks its rows by
(:func:`range_key`, :func:`with_root`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kbatch.log import LogDir

from ._options import Options

__all__ = [
    "CLUSTER_ID_COLUMN",
    "ROOT_COLUMN",
    "SEGMENT_OPEN_COST",
    "LogSlice",
    "plan_slices",
    "plan_tasks",
    "range_key",
    "split_bytes",
    "with_root",
]


# ---------------------------------------------------------------------------------------------
# Splitting into tasks
#
# A task reads one or more slices; a slice is offsets [start, end) of one partition and names
# the segment files that hold them, so that the task opens those and nothing else (never the
# partition directory as a whole). Cut like Spark's file source (spark.sql.files.*):
#
#   target   = min(maxPartitionBytes, total bytes / minPartitions)    bytes of log per task
#   cost     = bytes read + SEGMENT_OPEN_COST per segment opened
#   slices   consecutive segments of a partition, packed while their cost stays <= target;
#            a segment larger than target cut at batch boundaries (header-only scan) into
#            pieces of about target bytes; a slice spanning more than
#            maxRecordsPerPartition offsets cut into equal offset ranges
#   tasks    slices packed across partitions, largest first, while a task's cost stays
#            <= target (and its offsets <= maxRecordsPerPartition)
#
# Invariant: the slices of a partition are disjoint, cover its [start, end) exactly, and each
# names every non-empty segment overlapping its range; a slice read yields exactly the records
# LogDir.read(start, end) yields over the whole directory (read_committed: the partition's
# aborted transactions overlapping the range and its last stable offset travel in the slice,
# as a transaction's ABORT marker can lie in a segment the slice does not open).

#: What opening one segment counts for, in bytes of log, when slices and tasks are packed
#: (Spark's ``spark.sql.files.openCostInBytes`` is 4 MiB per file; opening a segment and its
#: indexes takes ~0.3 ms here, about what a Spark task takes to read and convert 32 KiB).
SEGMENT_OPEN_COST = 32 << 10

Aborted = tuple[int, int, int]  # (producer id, first offset, last offset: the ABORT marker)


@dataclass(frozen=True)
class LogSlice:
    """Offsets ``[start, end)`` of one partition directory, and the segments that hold them.

    ``segments``: the ``.log`` file names in ``path`` to open (empty: list the directory).
    ``aborted`` / ``last_stable``: the partition's aborted transactions overlapping the
    range and its last stable offset (read_committed), as :meth:`LogDir.transactions` gives
    them for the whole directory. ``size``: bytes of log (estimated).
    """

    path: str
    topic: str
    partition: int
    start: int
    end: int
    size: int = 0
    segments: tuple[str, ...] = ()
    aborted: tuple[Aborted, ...] = ()
    last_stable: int | None = None
    #: the ``log.dirs`` root of the directory (the ``root`` column: :attr:`Options.root_columns`)
    root: str = ""
    #: its ``cluster.id`` (the ``clusterId`` column)
    cluster_id: str | None = None
    #: the size of each of ``segments`` when planned (a task refuses a segment found shorter)
    sizes: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return (
            f"LogSlice({self.topic}-{self.partition} [{self.start}, {self.end}) ~{self.size} B, "
            f"{len(self.segments)} segments)"
        )

    @property
    def cost(self) -> int:
        """``size`` plus :data:`SEGMENT_OPEN_COST` per segment opened: what packing counts."""
        return self.size + SEGMENT_OPEN_COST * max(len(self.segments), 1)


def split_bytes(total: int, opts: Options) -> int:
    """The target bytes of log per task: ``maxPartitionBytes``, or less to give ``minPartitions`` tasks."""
    target = opts.max_bytes_per_partition
    if opts.min_partitions:
        target = max(1, min(target, total // opts.min_partitions))
    return target


def _segment_cuts(log: LogDir, start: int, end: int, target: int) -> list[tuple[int, int, int, tuple[str, ...]]]:
    """``(start, end, bytes, segment names)`` pieces covering ``[start, end)`` of one partition.

    Consecutive segments are packed while their cost (bytes + :data:`SEGMENT_OPEN_COST`
    each) stays within ``target``; a segment larger than ``target`` is cut at batch
    boundaries found by a header-only scan. Empty segments and those outside the range are
    left out (they hold no record of it).
    """
    pieces: list[tuple[int, int, int, tuple[str, ...]]] = []
    run: list[str] = []
    run_lo = run_hi = run_cost = 0

    def flush() -> None:
        nonlocal run, run_cost
        if run:
            pieces.append((run_lo, run_hi, run_cost - SEGMENT_OPEN_COST * len(run), tuple(run)))
            run, run_cost = [], 0

    segs = log.segments
    for i, seg in enumerate(segs):
        if end <= seg.base_offset:
            break
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else end
        lo, hi = max(start, seg.base_offset), min(end, seg_end)
        if seg.size == 0 or lo >= hi:
            continue
        name = seg.path.name
        if seg.size > target:
            flush()
            pieces.extend(_cut_segment(seg, lo, hi, target))
            continue
        cost = seg.size + SEGMENT_OPEN_COST
        if run and run_cost + cost > target:
            flush()
        if not run:
            run_lo = lo
        run.append(name)
        run_hi, run_cost = hi, run_cost + cost
    flush()
    return pieces


def _cut_segment(seg: Any, lo: int, hi: int, target: int) -> list[tuple[int, int, int, tuple[str, ...]]]:
    """One segment's ``[lo, hi)`` cut at batch boundaries into pieces of about ``target`` bytes."""
    names: tuple[str, ...] = (seg.path.name,)
    b = seg.scan("skip")  # headers only: no record parsing, no decompression
    if len(b) == 0:
        return [(lo, hi, seg.size, names)]
    positions = b["position"].astype("int64")
    first = b["base_offset"].astype("int64")
    last = (b["base_offset"] + b["last_offset_delta"]).astype("int64")
    out: list[tuple[int, int, int, tuple[str, ...]]] = []
    cut_lo = lo
    cut_pos = int(positions[0])
    # candidate cuts: batches starting inside (lo, hi), in order; a cut at batch k ends the
    # piece before it and starts the next at its base offset
    for k in np.flatnonzero((first > lo) & (first < hi)).tolist():
        pos = int(positions[k])
        if pos - cut_pos >= target and k and int(last[k - 1]) >= cut_lo and int(first[k]) > cut_lo:
            out.append((cut_lo, int(first[k]), pos - cut_pos, names))
            cut_lo, cut_pos = int(first[k]), pos
    valid = seg.valid_bytes if seg.valid_bytes is not None else seg.size
    out.append((cut_lo, hi, max(valid - cut_pos, 1), names))
    return out


def _within(
    cuts: list[tuple[int, int, int, tuple[str, ...]]], wanted: Sequence[tuple[int, int]] | None
) -> list[tuple[int, int, int, tuple[str, ...]]]:
    """The pieces of ``cuts`` (as :func:`_segment_cuts` gives them) inside the ``wanted`` offset
    ranges (all of them when None), each cut's bytes shared in proportion to its offsets."""
    if wanted is None:
        return cuts
    out = []
    for lo, hi, size, names in cuts:
        for a, b in wanted:
            x, y = max(lo, a), min(hi, b)
            if y > x:
                out.append((x, y, max(size * (y - x) // max(hi - lo, 1), 1), _segments_for(names, x, y)))
    return out


def _segments_for(names: tuple[str, ...], lo: int, hi: int) -> tuple[str, ...]:
    """The names of ``names`` (in offset order) whose offsets can overlap ``[lo, hi)``."""
    bases = [int(n[:20]) for n in names]
    keep = [
        n for i, n in enumerate(names)
        if bases[i] < hi and (i + 1 == len(names) or bases[i + 1] > lo)
    ]
    return tuple(keep)


def _aborted_within(aborted: Sequence[Aborted], lo: int, hi: int) -> tuple[Aborted, ...]:
    """The aborted transactions (sorted by first offset) that overlap offsets ``[lo, hi)``."""
    if not aborted:
        return ()
    stop = bisect.bisect_left(aborted, hi, key=lambda a: a[1])
    return tuple(a for a in aborted[:stop] if a[2] >= lo)


#: The column naming the ``log.dirs`` root each row was read from (:func:`root_columns`).
ROOT_COLUMN = "root"
#: The column with the ``cluster.id`` of that root's ``meta.properties`` (null without one).
CLUSTER_ID_COLUMN = "clusterId"


def range_key(log: LogDir, opts: Options) -> tuple[Any, ...]:
    """The key of ``log``'s offsets in the ``ranges`` :func:`plan_slices` takes: (topic,
    partition), and with the root columns the root too (each log, and with ``replicas=all``
    each copy, is read over its own range).
    """
    return (log.topic, log.partition, log.root) if opts.root_columns else (log.topic, log.partition)


def with_root(batch: Any, root: str, cluster_id: str | None) -> Any:
    """``batch`` (a ``pyarrow.RecordBatch``) with the columns :data:`ROOT_COLUMN` (``root``) and
    :data:`CLUSTER_ID_COLUMN` (``cluster_id``) appended."""
    import pyarrow as pa

    pick = np.zeros(batch.num_rows, np.int32)
    batch = batch.append_column(ROOT_COLUMN, pa.array([root], pa.string()).take(pick))
    return batch.append_column(CLUSTER_ID_COLUMN, pa.array([cluster_id], pa.string()).take(pick))


def plan_slices(
    logs: Sequence[LogDir], ranges: Mapping[tuple[Any, ...], tuple[int, int]], opts: Options,
    pieces: Mapping[tuple[Any, ...], Sequence[tuple[int, int]]] | None = None,
) -> list[LogSlice]:
    """Cut the chosen offset ranges into slices (see the comment above for the rules).

    A planner's cost is constant per segment: each segment's size is read once, and only
    segments larger than the target are scanned (headers only). Slices come largest first.
    ``pieces``: for some keys of ``ranges``, the only offsets of the range to read (sorted,
    disjoint; an append reading again what an earlier run missed): slices are cut to them.
    """
    total = 0
    for log in logs:
        a, b = ranges[range_key(log, opts)]
        if b > a:
            total += sum(s.size for s in log.segments)
    target = split_bytes(total, opts)
    out: list[LogSlice] = []
    for log in logs:
        a, b = ranges[range_key(log, opts)]
        if b <= a:
            continue
        aborted: list[Aborted] = []
        lso: int | None = None
        if opts.isolation_level == "read_committed":
            aborted, lso = log.transactions(opts.on_corruption)
        where = (log.url, log.topic, log.partition)
        cluster = log.cluster_id if opts.root_columns else None
        wanted = (pieces or {}).get(range_key(log, opts))
        for lo, hi, size, names in _within(_segment_cuts(log, a, b, target), wanted):
            limit = opts.max_records_per_partition
            if limit and hi - lo > limit:
                k = math.ceil((hi - lo) / limit)
                cuts = [lo + (hi - lo) * j // k for j in range(k + 1)]
                for x, y in itertools.pairwise(cuts):
                    out.append(
                        LogSlice(*where, x, y, max(size // k, 1), _segments_for(names, x, y),
                                 _aborted_within(aborted, x, y), lso, root=log.root, cluster_id=cluster)
                    )
            else:
                out.append(LogSlice(*where, lo, hi, size, names, _aborted_within(aborted, lo, hi), lso,
                                    root=log.root, cluster_id=cluster))
    sized = {(log.url, seg.path.name): seg.size for log in logs for seg in log.segments}
    out = [dataclasses.replace(p, sizes=tuple(sized[(p.path, n)] for n in p.segments)) for p in out]
    out.sort(key=lambda s: -s.size)
    return out


def plan_tasks(slices: Sequence[LogSlice], opts: Options) -> list[tuple[LogSlice, ...]]:
    """Pack slices into Spark tasks: largest first, a task closed when the next slice would take
    it past the target bytes (or past ``maxRecordsPerPartition`` offsets), as Spark packs files.

    Within a task the slices are in topic, partition, offset order. Tasks come largest first.
    """
    target = split_bytes(sum(s.size for s in slices), opts)
    limit = opts.max_records_per_partition
    tasks: list[list[LogSlice]] = []
    current: list[LogSlice] = []
    size = offsets = 0
    for piece in sorted(slices, key=lambda s: -s.cost):
        n = piece.end - piece.start
        if current and (size + piece.cost > target or (limit is not None and offsets + n > limit)):
            tasks.append(current)
            current, size, offsets = [], 0, 0
        current.append(piece)
        size += piece.cost
        offsets += n
    if current:
        tasks.append(current)
    out = [tuple(sorted(t, key=lambda s: (s.topic, s.partition, s.start))) for t in tasks]
    out.sort(key=lambda t: -sum(s.cost for s in t))
    return out
