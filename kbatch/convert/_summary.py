"""What a ``kbatch convert`` run did, and what it says as it goes.

:class:`Summary` (the text summary, and ``--json-summary``'s object) with a
:class:`PartitionReport` per partition: the records written, the offsets they came from and
why the two differ; each damaged byte range a run skipped in words (:func:`damaged_lines`).
Before the summary a run speaks on stderr only through :func:`say` (nothing with ``-q``) and
the in-place progress line (:func:`progress_enabled`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kbatch._progress import plural, size
from kbatch.tables import Gap, TableCommit

__all__ = ["SHOWN", "PartitionReport", "Summary", "damaged_lines", "progress_enabled", "say"]

#: Partitions (and notes) the text summary lists; --json-summary has them all.
SHOWN = 20


@dataclass
class PartitionReport:
    """One partition of a conversion: records written and the offsets they came from."""

    topic: str
    partition: int
    start: int  # offsets [start, end) selected
    end: int
    records: int = 0
    skipped_bytes: int = 0
    log_start_offset: int = 0
    control_markers: int = 0  # control records in the range (an offset each, no record): markers and KRaft's
    #: the control records that are not transaction markers, by Kafka's ControlRecordType name
    #: (LEADER_CHANGE, SNAPSHOT_HEADER, ...: KRaft's, in __cluster_metadata)
    control_types: dict[str, int] = field(default_factory=dict)
    aborted_records: int = 0  # left out by read_committed
    compacted_offsets: int = 0  # offsets with no record on disk (compaction, deleted batches)
    filtered: int = 0  # left out by --where (Spark)
    unread: int = 0  # in batches skipped as corrupt (--no-fail-on-data-loss)
    lost_offsets: int = 0  # in damaged bytes no batch could be framed in (--no-fail-on-data-loss)
    held: int = 0  # offsets of [start, end) the table held already (an append reading a hole again)
    waiting: int = 0  # offsets after end that wait for an open transaction's marker (read_committed)
    #: offsets past the copy's end that its root's checkpoints say the broker had (a truncated copy)
    beyond_copy: int = 0
    checkpoint: str = ""  # the checkpoint saying so: "recovery_point 42756 is past the copy's end 29945"
    #: the damaged byte ranges skipped: file, bytes [a, b), offsets [x, y) (y None: to the log end), reason
    damaged: list[dict[str, Any]] = field(default_factory=list)
    lost: str = ""  # why the rest of the range was not read (an object gone or cut; --no-fail-on-data-loss)
    lost_at: int | None = None  # the offset the read stopped at then (the ledger ends there)
    root: str = ""  # the log.dirs root read (with the root columns: --recursive, --replicas all)
    cluster_id: str | None = None  # that root's cluster.id (idem)
    dead_letters: int = 0  # records whose value (or key) did not decode (--values), written as dead letters

    @property
    def span(self) -> int:
        return max(self.end - self.start - self.held, 0)

    def why(self) -> str:
        """Why ``records`` differs from the offset span (empty when it does not)."""
        if self.records == self.span and not (self.held or self.waiting or self.beyond_copy):
            return ""
        parts = []
        kraft = sum(self.control_types.values())
        if kraft:
            named = ", ".join(f"{name} {n}" for name, n in sorted(self.control_types.items()))
            parts.append(f"{plural(kraft, 'KRaft control record')} ({named})")
        for n, what, tail in (
            (self.control_markers - kraft, "transaction marker", ""),
            (self.aborted_records, "aborted record", ""),
            (self.compacted_offsets, "offset", " without a record (compaction)"),
            (self.lost_offsets, "offset", " in damaged bytes (not converted)"),
            (self.filtered, "record", " filtered by --where"),
            (self.unread, "unread record", " (corrupt batches skipped)"),
        ):
            if n:
                parts.append(plural(n, what) + tail)
        if self.skipped_bytes:
            parts.append(f"{plural(self.skipped_bytes, 'corrupt byte')} skipped")
        if self.held:  # an append reading again what an earlier run missed
            parts.append(f"{plural(self.held, 'offset')} held already, not read again")
        if self.lost:
            parts.append(f"the rest not read: {self.lost}")
        if self.waiting:
            parts.append(f"offsets {self.end}..{self.end + self.waiting - 1} wait for an open transaction's marker "
                         f"(read_committed): a --mode append run continues from offset {self.end}")
        if self.beyond_copy:
            parts.append(f"this copy lacks {plural(self.beyond_copy, 'offset')} the broker had ({self.checkpoint}): "
                         "not converted")
        return ", ".join(parts) if parts else "unexplained"

    def line(self) -> str:
        rng = f"offsets {self.start}..{self.end - 1}" if self.span else f"no offsets (at {self.start})"
        why = self.why()
        where = ""
        if self.root:
            where = f" in {self.root}" + (f" (cluster {self.cluster_id})" if self.cluster_id else "")
        head = f"  {self.topic}-{self.partition}{where}: {plural(self.records, 'record')}, {rng}"
        dead = f", {plural(self.dead_letters, 'dead letter')}" if self.dead_letters else ""
        return head + dead + (f" ({why})" if why else "")

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if not self.root:  # one root read: no root columns, the summary as it was
            del d["root"], d["cluster_id"]
        d["why"] = self.why()
        return d


def damaged_lines(rep: PartitionReport, tables: Sequence[TableCommit]) -> list[str]:
    """What the summary says of each damaged byte range ``rep`` skipped: where, the offsets not
    converted, why, and (a table with an offsets ledger) that a later append reads them."""
    out = []
    for d in rep.damaged:
        a, b = d["bytes"]
        x, y = d["offsets"]
        offsets = f"offsets from {x} (the rest of the log)" if y is None else f"offsets {x}..{y - 1}"
        if y is not None and y <= x:
            offsets = "no offset"
        reason = d["reason"].removesuffix(f" in {d['file']}")
        out.append(f"{rep.topic}-{rep.partition}: {d['file']} bytes {a}..{b - 1} skipped, {offsets} not converted "
                   f"({reason})")
    if out and tables:
        out[-1] += ("; the offsets ledger leaves them out: a --mode append after the copy is repaired "
                    "converts them, once")
    return out


@dataclass
class Summary:
    """What a conversion did."""

    topics: int
    partitions: int
    records: int
    input_bytes: int
    output_bytes: int
    seconds: float
    engine: str
    format: str
    out: str
    startup_seconds: float = 0.0
    written: bool = True
    mode: str = "errorifexists"
    left_out: dict[str, int] = field(default_factory=dict)  # internal topic -> partitions
    per_partition: list[PartitionReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the commits to tables (formats with a ledger: kbatch.tables)
    tables: list[TableCommit] = field(default_factory=list)
    #: an append with nothing new: the tables' last commits, in words
    since: list[str] = field(default_factory=list)
    #: offsets retention deleted before any run converted them (--no-fail-on-data-loss)
    gaps: list[Gap] = field(default_factory=list)
    #: --values: records that did not decode, where they went, the commonest errors
    dead_letters: int = 0
    dead_letter_path: str = ""
    value_errors: list[dict[str, Any]] = field(default_factory=list)
    #: whether OUT was there before the run (a run that writes nothing leaves it as it was, or
    #: does not create it)
    out_existed: bool = True
    #: why this engine ran when ``--engine`` was not given ("the default for --values"), else empty
    engine_default: str = ""
    #: a Parquet folder: how each reader reads a topic of it (kbatch.tables._folderschema)
    read: list[str] = field(default_factory=list)
    #: --compact-after: each table compacted after the run, in words (or why the compaction failed)
    compacted: list[str] = field(default_factory=list)

    @property
    def records_per_second(self) -> float:
        """Records over the whole run's wall time (Spark's start-up included)."""
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def job_seconds(self) -> float:
        """The run without Spark's start-up: planning, reading, writing and checking the output."""
        return max(self.seconds - self.startup_seconds, 0.0)

    @property
    def job_records_per_second(self) -> float:
        return self.records / self.job_seconds if self.job_seconds > 0 else 0.0

    @property
    def job_bytes_per_second(self) -> float:
        """Bytes of log read per second of :attr:`job_seconds`."""
        return self.input_bytes / self.job_seconds if self.job_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        rate = size(int(self.job_bytes_per_second))
        where = (
            f"to {self.format} in {self.out} ({size(self.output_bytes)})"
            if self.written
            else f"nothing written: {self.out} left as it was" if self.out_existed
            else f"nothing written: {self.out} not created"
        )
        verb = "appended" if self.mode == "append" and self.written else "converted"
        if any(c.upsert is not None for c in self.tables):  # the rows changed are the tables' lines
            verb, where = "read", f"upserted into {self.format} in {self.out} ({size(self.output_bytes)} written)"
        if self.since:
            return [f"nothing new since {', '.join(self.since)}: no record read, nothing committed"]
        out = [
            (
                f"{verb} {plural(self.records, 'record')} from {plural(self.topics, 'topic')}, "
                f"{plural(self.partitions, 'partition')} ({size(self.input_bytes)} of log) {where}"
            ),
        ]
        speed = f"{self.job_records_per_second:,.0f} records/s ({rate}/s of log)"
        engine = f"engine {self.engine}" + (f" ({self.engine_default})" if self.engine_default else "")
        if self.engine == "spark":  # the JVM's start-up apart: it says nothing of the job's speed
            out.append(f"time {self.seconds:.1f} s: Spark start-up {self.startup_seconds:.1f} s, then the job "
                       f"{self.job_seconds:.1f} s at {speed}, {engine}")
        else:
            out.append(f"time {self.seconds:.1f} s, {speed}, {engine}")
        if self.left_out:
            names = ", ".join(f"{t} ({plural(n, 'partition')})" for t, n in sorted(self.left_out.items()))
            out.append(f"left out internal topics: {names}; pass --include-internal or --subscribe to include them")
        shown = self.per_partition
        if len(shown) > SHOWN:  # many partitions: the ones with something to explain first
            shown = sorted(shown, key=lambda p: p.why() == "")[:SHOWN]
        out += [p.line() for p in shown]
        if len(self.per_partition) > len(shown):  # right after the partitions it continues
            out.append(f"  ... {plural(len(self.per_partition) - len(shown), 'more partition')} (--json-summary)")
        out += [t.line() for t in self.tables]
        out += self.read
        out += [f"compaction: {line}" for line in self.compacted]
        out += [f"gap: {g.line()}" for g in self.gaps]
        out += [f"damaged: {d}" for rep in self.per_partition for d in damaged_lines(rep, self.tables)]
        if self.dead_letters:
            out.append(f"dead letters: {plural(self.dead_letters, 'record')} whose value (or key) did not decode, "
                       f"in {self.dead_letter_path}; the commonest errors:")
            out += [f"  {e['count']} x {e['reason']} (first: {e['example']})" for e in self.value_errors]
        out += [f"note: {n}" for n in self.notes[:SHOWN]]
        if len(self.notes) > SHOWN:
            out.append(f"note: ... {plural(len(self.notes) - SHOWN, 'more note')} (--json-summary)")
        return out

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["per_partition"] = [p.as_dict() for p in self.per_partition]
        d["tables"] = [t.as_dict() for t in self.tables]
        d["gaps"] = [g.__dict__ for g in self.gaps]
        d["records_per_second"] = round(self.records_per_second, 1)
        d["job_seconds"] = round(self.job_seconds, 3)
        d["job_records_per_second"] = round(self.job_records_per_second, 1)
        d["job_bytes_per_second"] = round(self.job_bytes_per_second, 1)
        return d


def say(args: argparse.Namespace, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


def progress_enabled(args: argparse.Namespace) -> bool:
    if args.quiet or args.progress == "never":
        return False
    return args.progress == "always" or sys.stderr.isatty()
