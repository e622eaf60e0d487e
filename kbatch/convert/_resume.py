"""Where a ``kbatch convert`` run into a sink starts: with ``--mode append``, after its ledger.

:func:`resume_run` narrows the plan's ranges to the offsets the table's offsets ledger does not
hold (the holes an earlier run left, read again piece by piece), finds the offsets retention
deleted before any run converted them (:class:`~kbatch.errors.OffsetGapError`, or a gap
reported with ``--no-fail-on-data-loss``), and gives the whole summary of a run with nothing new.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbatch.errors import OffsetGapError
from kbatch.plan import range_key
from kbatch.tables import Gap, Ledger, OffsetRange, RemoteFolderSink, Sink, has_data_files, minus, resume

from ._plan import Plan
from ._summary import Summary

__all__ = ["Resumed", "resume_run"]


def _bytes_in(log: Any, start: int, end: int) -> int:
    """Bytes of ``log``'s segments that hold offsets in ``[start, end)``."""
    segs = log.segments
    total = 0
    for i, seg in enumerate(segs):
        upper = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if seg.base_offset < end and (upper is None or upper > start):
            total += seg.size
    return total


@dataclass
class Resumed:
    """Where a run into a sink starts: the ledger held, the gaps, what it converts, or ``done``."""

    held: Ledger
    gaps: list[Gap]
    converted: Ledger
    notes: list[str]
    done: Summary | None = None


def resume_run(args: argparse.Namespace, p: Plan, sink: Sink, wall: float) -> Resumed:
    """With ``--mode append``, narrow ``p``'s ranges to the offsets after the sink's ledger (raise
    :class:`OffsetGapError` for offsets retention deleted before any run converted them, unless
    ``--no-fail-on-data-loss``); ``done`` is the summary of a run with nothing new (no segment
    scanned, nothing committed)."""
    held = sink.committed() if args.mode == "append" else Ledger()
    gaps: list[Gap] = []

    def key(log: Any) -> tuple[str, int, str | None]:
        return (log.topic, log.partition, log.root if p.opts.root_columns else None)

    if len(held):
        ranges, gaps = resume(held, {key(d): p.ranges[range_key(d, p.opts)] for d in p.logs},
                              {key(d): d.log_start_offset for d in p.logs})
        if gaps and p.opts.fail_on_data_loss:
            raise OffsetGapError(
                "; ".join(g.line() for g in gaps) + ": nothing committed (--no-fail-on-data-loss converts "
                "from the log start and reports the gap)",
                table=args.out, gaps=[(g.topic, g.partition, g.start, g.end) for g in gaps])
        for d in p.logs:
            k = range_key(d, p.opts)
            p.ranges[k] = ranges[key(d)]
            before = held.get(*key(d))
            if before is not None and before.missing and p.ranges[k][1] > p.ranges[k][0]:
                p.pieces[k] = minus(*p.ranges[k], before.held())  # what it missed, not what it holds
        p.input_bytes = sum(_bytes_in(d, *p.ranges[range_key(d, p.opts)]) for d in p.logs
                            if p.ranges[range_key(d, p.opts)][1] > p.ranges[range_key(d, p.opts)][0])
    converted = Ledger(OffsetRange(d.topic, d.partition, *p.ranges[range_key(d, p.opts)], *key(d)[2:],
                                   d.cluster_id if p.opts.root_columns else None)
                       for d in p.logs if p.ranges[range_key(d, p.opts)][1] > p.ranges[range_key(d, p.opts)][0])
    done = None
    if len(held) and not len(converted):
        done = Summary(len(p.topics), len(p.logs), 0, 0, 0, time.perf_counter() - wall, args.engine, args.format,
                       args.out, written=False, mode=args.mode, left_out=p.left_out, since=sink.last_commits(),
                       gaps=gaps)
    notes = []
    if args.format in ("parquet", "orc", "json") and args.mode == "append" and not len(held) and (
            sink.holds_files() if isinstance(sink, RemoteFolderSink)
            else Path(args.out).is_dir() and has_data_files(Path(args.out))):
        notes.append(f"{args.out} holds files but no offsets ledger (written by an earlier kbatch): every selected "
                     "record was appended; later appends go on from this run's offsets")
    return Resumed(held, gaps, converted, notes, done)
