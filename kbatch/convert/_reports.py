"""Each partition's report in a ``kbatch convert`` run: its offsets explained from batch headers.

Before the read, :func:`reports_before_read` scans every segment's batch headers: the
transaction markers and KRaft's control records in a range, the aborted records
``read_committed`` leaves out, the offsets compaction left without a record. After it,
:func:`read_ranges` puts in each report the damaged byte ranges skipped and the offsets a copy
cut short lacks, and leaves the offsets not read out of the run's ledger; :func:`finish_report`
sets the records written and names the rest (``--where``, corrupt batches skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kbatch._wire import CONTROL_RECORD_TYPES
from kbatch.codec import ABORT, COMMIT, aborted_batch_mask
from kbatch.errors import StorageError
from kbatch.plan import Options, range_key
from kbatch.tables import Ledger

from ._plan import Plan
from ._summary import PartitionReport

__all__ = ["find_skipped", "finish_report", "log_notes", "read_ranges", "reports_and_notes", "reports_before_read"]


def _report(log: Any, start: int, end: int, opts: Options,
            pieces: Sequence[tuple[int, int]] | None = None) -> PartitionReport:
    """A partition's report with the offsets in ``[start, end)`` (only ``pieces`` of them, when
    given: the rest is held already) explained from batch headers alone.

    Markers are control batches in the range; aborted records are the data batches
    read_committed drops; compacted offsets are the rest of the span that holds no record.
    A segment gone or cut since it was listed raises, or with ``failOnDataLoss=false`` is
    the report's ``lost`` (the read then stops there too). Damage a header scan finds (a
    frame that cannot be a batch, a segment cut inside a batch) raises with ``failOnDataLoss``.
    """
    import numpy as np

    rep = PartitionReport(log.topic, log.partition, start, end, log_start_offset=log.log_start_offset)
    if opts.root_columns:
        rep.root, rep.cluster_id = log.root, log.cluster_id
    spans = [(start, end)] if pieces is None else list(pieces)
    rep.held = max(end - start, 0) - sum(b - a for a, b in spans)
    if opts.isolation_level == "read_committed":
        lso = log.transactions(opts.on_corruption)[1]
        if lso is not None and end == lso:
            rep.waiting = max(log.next_offset - lso, 0)
    if end <= start:
        return rep
    try:
        parts = [seg.scan(opts.on_corruption) for seg in log.segments if seg.size]
    except StorageError as exc:
        if opts.fail_on_data_loss:
            raise
        rep.lost, rep.lost_at = str(exc), start
        return rep
    if not parts:
        return rep
    b = np.concatenate(parts)
    base = b["base_offset"].astype(np.int64)
    last = base + b["last_offset_delta"].astype(np.int64)
    control = b["is_control"].astype(bool)
    dropped = np.zeros(len(b), dtype=bool)
    if opts.isolation_level == "read_committed":
        aborted, _lso = log.transactions(opts.on_corruption)
        if aborted:
            dropped = aborted_batch_mask(b, [(pid, first) for pid, first, _last in aborted])
    kinds = b["control_type"].astype(np.int64)
    others = control & (kinds != ABORT) & (kinds != COMMIT)
    for lo, hi in spans:
        inside = (last >= lo) & (base < hi)
        width = np.minimum(last, hi - 1) - np.maximum(base, lo) + 1
        counts = np.minimum(b["record_count"].astype(np.int64), width)
        rep.control_markers += int(width[inside & control].sum())
        for kind in np.unique(kinds[inside & others]).tolist():
            name = CONTROL_RECORD_TYPES.get(kind, f"UNKNOWN({kind})")
            n = int(width[inside & others & (kinds == kind)].sum())
            rep.control_types[name] = rep.control_types.get(name, 0) + n
        rep.aborted_records += int(counts[inside & dropped & ~control].sum())
        kept = inside & ~control & ~dropped
        rep.compacted_offsets += max(int(hi - lo - width[inside].sum() + (width[kept] - counts[kept]).sum()), 0)
    return rep


def _damaged(rep: PartitionReport, log: Any) -> list[tuple[int, int]]:
    """Put in ``rep`` the damaged byte ranges ``log`` skipped so far (``--no-fail-on-data-loss``),
    the offsets each held, and those of them no batch header framed (counted as compaction by
    :func:`_report` until now); return the offset ranges not read (a ledger leaves them out)."""
    before = rep.lost_offsets
    rep.damaged, rep.lost_offsets, gone = [], 0, []
    for u in log.unread():
        s = u.skipped
        rep.damaged.append({"file": s.path, "bytes": [s.position, s.position + s.length],
                            "offsets": [u.first, u.end], "reason": s.reason})
        lo, hi = max(u.first, rep.start), rep.end if u.end is None else min(u.end, rep.end)
        if hi > lo:
            gone.append((lo, hi))
            rep.lost_offsets += max(hi - lo - u.framed, 0)
    rep.compacted_offsets = max(rep.compacted_offsets + before - rep.lost_offsets, 0)
    return gone


def finish_report(rep: PartitionReport, records: int, *, filtered: bool) -> None:
    """Set the records written; whatever the headers did not explain went to --where, or was in
    batches skipped as corrupt (a header scan does not check CRCs)."""
    rep.records = records
    expected = rep.span - rep.control_markers - rep.aborted_records - rep.compacted_offsets - rep.lost_offsets
    if records < expected:
        if filtered:
            rep.filtered = expected - records
        else:
            rep.unread = expected - records


def reports_before_read(p: Plan) -> dict[tuple[Any, ...], PartitionReport]:
    """Every partition's report before the read (:func:`_report` of its range, or pieces)."""
    keys = {range_key(d, p.opts): d for d in p.logs}
    return {k: _report(d, *p.ranges[k], p.opts, p.pieces.get(k)) for k, d in keys.items()}


def read_ranges(p: Plan, reports: dict[tuple[Any, ...], PartitionReport], converted: Ledger) -> Ledger:
    """After the read: each partition's damaged ranges in its report (:func:`_damaged`), and
    ``converted`` (the ranges the run set out to read) with the offsets not read left out, so
    that the ledger holds only what was read."""
    out = []
    for d in p.logs:
        rep = reports[range_key(d, p.opts)]
        gone = _damaged(rep, d)
        if rep.lost_at is not None:  # an object gone or cut since planning: the read stopped there
            gone.append((rep.lost_at, rep.end))
        _beyond_copy(rep, d)
        r = converted.get(d.topic, d.partition, d.root if p.opts.root_columns else None)
        if r is not None:
            out.append(r.read(r.start, r.end, gone))
    return Ledger(out)


def find_skipped(p: Plan, reports: dict[tuple[Any, ...], PartitionReport], written: dict[tuple[Any, ...], int]
                 ) -> None:
    """The batches Spark's executors skipped as corrupt (``--no-fail-on-data-loss``: a CRC that
    fails, which the driver's header scan cannot see), found again here: a partition that wrote
    fewer records than its headers promise is read once more on the driver (decoded, nothing
    written), so that they are in its ``LogDir.skipped`` and the ledger leaves their offsets out."""
    for d in p.logs:
        k = range_key(d, p.opts)
        rep = reports[k]
        if written.get(k, 0) >= rep.span - rep.control_markers - rep.aborted_records - rep.compacted_offsets \
                - rep.lost_offsets:
            continue
        for a, b in p.pieces.get(k, [p.ranges[k]]):
            for _table in d.iter_tables(a, b, isolation_level=p.opts.isolation_level, on_corruption="skip",
                                        verify_crc=p.opts.verify_crc):
                pass


def reports_and_notes(p: Plan) -> tuple[dict[tuple[Any, ...], PartitionReport], list[str]]:
    """Every partition's report and the notes (then the plan's segments are closed)."""
    try:
        reports = reports_before_read(p)
        read_ranges(p, reports, Ledger())  # the damage the header scan skipped (the executors skip it too)
        return reports, p.notes + log_notes(p.logs)
    finally:
        p.close()


def log_notes(logs: Sequence[Any]) -> list[str]:
    """Every partition's notes (files skipped, indexes and checkpoints not used), but for the
    checkpoints past the copy's end (its report says what the copy lacks: :func:`_beyond_copy`)."""
    out = []
    for d in logs:
        past = set(d.verify_checkpoints())  # (added to d.notes too)
        out += [f"{d.topic}-{d.partition}: {n}" for n in d.notes if n not in past]
    return out


def _beyond_copy(rep: PartitionReport, log: Any) -> None:
    """Put in ``rep`` how many offsets past the copy's end its root's recovery point or high
    watermark say the broker had (a copy cut short: none of them converted), and which says so."""
    end = log.next_offset
    known = {k: v for k, v in log.checkpoints.items() if k in ("recovery_point", "high_watermark") and v > end}
    if known:
        name = max(known, key=lambda k: known[k])
        rep.beyond_copy, rep.checkpoint = known[name] - end, f"{name} {known[name]} is past the copy's end {end}"
