"""``kbatch convert ROOT OUT``: a Kafka ``log.dirs`` root to Parquet, ORC or JSON, with Spark or in-process with Arrow.

The README's main job. By default it runs Spark in local mode (``local[*]``): the ``kafka-log``
data source's planner and reader (:mod:`kbatch.spark._frame`), optional filters, and writes the
output partitioned by topic (``OUT/topic=<name>/part-*.parquet``), printing progress and a
summary::

    kbatch convert /var/lib/kafka/data out/ --format parquet
    kbatch convert /var/lib/kafka/data out/ --master spark://host:7077 --subscribe 'orders.*'
    kbatch convert /var/lib/kafka/data out/ --engine arrow     # no Spark, in-process

``--engine arrow`` does the same conversion in this process with pyarrow (Parquet or ORC,
``pyarrow.dataset.write_dataset``), for small data or machines without Java. Both engines
write the same layout and rows.

What holds, for both engines:

- Everything is checked before any work (root, selection, options, OUT and ``--mode``); a
  user mistake is one line on stderr and status 2, a failure while converting one line and
  status 1 (an error kbatch raised in a Spark worker is shown as kbatch's own line).
- Output is written into a hidden folder beside OUT and moved into place only on success
  (:mod:`kbatch.tables._staging`): a failed run leaves OUT as it was, in every mode.
- A root with nothing to convert says what it found instead (deeper logs, internal topics
  only, a subscription matching nothing); internal topics a run leaves out are named.
- The summary counts the records actually written, per partition with the offset range and
  why the two differ (transaction markers, aborted transactions, compaction gaps, corrupt
  bytes skipped), and the wall time with Spark's start-up apart from the job's time and rate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbatch import storage
from kbatch._progress import Progress, plural, size
from kbatch._version import __version__
from kbatch._wire import CONTROL_RECORD_TYPES
from kbatch.codec import ABORT, COMMIT, aborted_batch_mask, kafka_schema
from kbatch.errors import (
    KBatchError,
    LayoutError,
    OffsetGapError,
    ReplicasDisagreeError,
    StorageError,
    TableError,
)
from kbatch.log import describe_topics, logs_deeper, topics_in
from kbatch.plan import (
    CLUSTER_ID_COLUMN,
    DEFAULT_MAX_PARTITION_BYTES,
    INTERNAL_TOPICS,
    ROOT_COLUMN,
    SEGMENT_OPEN_COST,
    LogSlice,
    Options,
    env_pythonpath,
    plan_slices,
    plan_tasks,
    range_key,
    read_logs,
    resolve_range,
    select_logs,
    with_root,
)
from kbatch.spark import (
    JAVA_VERSIONS,
    JavaError,
    MasterError,
    check_master,
    check_transform,
    start_session,
    write_staged,
)
from kbatch.tables import (
    MODES,
    EndOnError,
    FolderSink,
    Gap,
    Ledger,
    OffsetRange,
    RemoteFolderSink,
    Sink,
    TableCommit,
    check_target,
    has_data_files,
    hold,
    is_s3,
    minus,
    open_sink,
    read_recipe,
    recover,
    release,
    resume,
)

from ._errors import ConvertError, UsageError
from ._spark_values import count_dead_letters, take_dead_letters, write_values
from ._values import ValuePlan, check_arguments, plan_values, requested
from ._values import add_arguments as add_value_arguments

__all__ = [
    "ConvertError",
    "PartitionReport",
    "Summary",
    "UsageError",
    "add_arguments",
    "convert_arrow",
    "convert_spark",
    "run",
    "spark_config",
    "spark_error_line",
    "task_bytes",
]

FORMATS = ("parquet", "orc", "json", "iceberg", "delta")
#: Partitions (and notes) the text summary lists; --json-summary has them all.
SHOWN = 20
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``convert``'s arguments to ``parser`` (a subcommand parser)."""
    parser.add_argument("root", help="a Kafka log.dirs root (or one <topic>-<partition> directory), a path or a URL "
                                     "(s3://, gs://, abfs://, hdfs://)")
    parser.add_argument("out", help="output directory (partitioned by topic), a path or an s3:// URL")
    parser.add_argument("--format", choices=FORMATS, default="parquet",
                        help="output format (default parquet); iceberg, delta: a table per topic "
                             "(pyiceberg, deltalake)")
    parser.add_argument(
        "--engine",
        choices=("spark", "arrow"),
        default=None,
        help="spark: the kafka-log data source (the default for parquet, orc and json); arrow: in-process with "
             "pyarrow, no Spark (the default for iceberg, delta and --values); the summary's time line says "
             "which ran and, when not given, why",
    )
    parser.add_argument("--catalog", default=None, metavar="NAME",
                        help="iceberg: a catalog pyiceberg's load_catalog knows (default: SQLite at OUT/catalog.db, "
                             "warehouse OUT; for an s3:// OUT, SQLite where --catalog-option uri=sqlite:////PATH says)")
    parser.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE",
                        help="iceberg: a catalog property, e.g. uri=http://127.0.0.1:8181 (repeatable)")
    parser.add_argument("--namespace", default=None, help="iceberg: the tables' namespace (default kafka)")
    parser.add_argument("--upsert", action="store_true",
                        help="iceberg, delta: one row per key, the latest; a tombstone deletes the key (what log "
                             "compaction keeps)")
    parser.add_argument("--partition-by", action="append", default=None, metavar="TRANSFORM",
                        help="iceberg, delta: a partition transform, e.g. day(timestamp) (the default), "
                             "hour(timestamp), partition, bucket(16, key) (iceberg), or none (repeatable)")
    parser.add_argument(
        "--master", default=None, help="Spark master URL (default local[*]; e.g. spark://host:7077, yarn)"
    )
    sel = parser.add_mutually_exclusive_group()
    sel.add_argument("--subscribe", metavar="TOPICS", help="comma-separated topics")
    sel.add_argument("--subscribe-pattern", metavar="REGEX", help="topics matching this regular expression")
    sel.add_argument("--assign", metavar="JSON", help='partitions: {"topic": [0, 1]}')
    parser.add_argument("--include-internal", action="store_true",
                        help="Kafka's internal topics (__consumer_offsets, __transaction_state, ...) are left out by "
                             "default and by --subscribe-pattern, as Kafka's consumer leaves them out of pattern "
                             "subscriptions: this includes them (or name them in --subscribe); their decoded "
                             "contents are in the Python API's kbatch.internal")
    parser.add_argument("--starting-offsets", default=None, help='earliest (default) or {"t": {"0": 5}}')
    parser.add_argument("--ending-offsets", default=None, help='latest (default) or {"t": {"0": 9}}')
    parser.add_argument("--starting-timestamp", type=int, default=None, help="milliseconds since the epoch")
    parser.add_argument("--ending-timestamp", type=int, default=None, help="milliseconds since the epoch")
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed leaves out aborted transactions",
    )
    parser.add_argument("--no-headers", action="store_true", help="leave the headers column out")
    parser.add_argument("--extra-columns", action="store_true", help="add leaderEpoch, producerId, ...")
    parser.add_argument("--where", default=None, help="a Spark SQL filter, e.g. \"timestamp >= '2024-01-01'\"")
    parser.add_argument("--no-partition-by-topic", action="store_true", help="one flat output directory")
    parser.add_argument("--mode", choices=MODES, default="errorifexists", help="if OUT exists")
    parser.add_argument("--recursive", action="store_true",
                        help="find partitions at any depth under ROOT (a backup of several log.dirs roots); "
                             "every different log (cluster id, topic id) and one replica of each, with "
                             "'root' and 'clusterId' columns")
    parser.add_argument("--replicas", choices=("best", "all"), default="best",
                        help="a partition found under several roots of one cluster: read the best copy "
                             "(default) or every copy, with its root in the 'root' column")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of pyarrow's filesystem for ROOT's (and OUT's) URL scheme, e.g. "
                             "endpoint_override=http://127.0.0.1:9000 (repeatable); Spark tasks get them too")
    parser.add_argument(
        "--compression", choices=COMPRESSIONS, default=None, help="Parquet/ORC codec (default snappy; zstd is smaller)"
    )
    parser.add_argument(
        "--max-rows-per-file", type=int, default=None, metavar="N", help="start a new file after N rows"
    )
    parser.add_argument(
        "--row-group-rows", type=int, default=None, metavar="N", help="rows per Parquet row group (arrow engine)"
    )
    parser.add_argument("--min-partitions", type=int, default=None, help="at least this many Spark tasks")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
    )
    parser.add_argument("--no-fail-on-data-loss", action="store_true", help="skip corrupt batches instead of failing")
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="the in-place progress line: auto (when stderr is a terminal), always, never",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing but errors (and --json-summary), Spark's logs too"
    )
    parser.add_argument("--json-summary", action="store_true", help="print the summary as one JSON line")
    add_value_arguments(parser)
    parser.set_defaults(handler=run)


# ---------------------------------------------------------------------------------------------
# What a run did


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


# ---------------------------------------------------------------------------------------------
# Checks before any work, and what a root holds


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    opts: dict[str, str] = {
        "includeHeaders": "false" if args.no_headers else "true",
        "extraColumns": "true" if args.extra_columns else "false",
        "isolationLevel": args.isolation_level,
        "failOnDataLoss": "false" if args.no_fail_on_data_loss else "true",
    }
    if getattr(args, "recursive", False):
        opts["recursiveFileLookup"] = "true"
    if getattr(args, "replicas", "best") == "all":
        opts["replicas"] = "all"
    if getattr(args, "include_internal", False):
        opts["includeInternalTopics"] = "true"
    for item in getattr(args, "storage_option", None) or ():
        key, _, value = str(item).partition("=")
        opts[f"storage.{key.strip()}"] = value.strip()
    for name, value in (
        ("subscribe", args.subscribe),
        ("subscribePattern", args.subscribe_pattern),
        ("assign", args.assign),
        ("startingOffsets", args.starting_offsets),
        ("endingOffsets", args.ending_offsets),
        ("startingTimestamp", args.starting_timestamp),
        ("endingTimestamp", args.ending_timestamp),
        ("minPartitions", args.min_partitions),
    ):
        if value is not None:
            opts[name] = str(value)
    return opts


def _nothing_selected(root: Path, args: argparse.Namespace) -> str:
    """The message for a root where the selection finds no partition: what is there instead
    (logs deeper down raise from :func:`select_logs` already, in the words of ``kbatch.log._discover``)."""
    topics = topics_in(root)
    if not topics and _PARTITION_DIR.match(root.name):
        return f"{root} is named like a partition directory but holds no .log segment"
    if not topics:
        return f"no partition directories (<topic>-<partition> folders with .log segments) in {root}"
    listed = describe_topics(topics)
    unselected = args.subscribe is None and args.subscribe_pattern is None and args.assign is None
    if unselected and all(t in INTERNAL_TOPICS for t in topics):
        return f"only internal topics ({listed}); pass --include-internal (or --subscribe) to include them"
    chosen = "--subscribe" if args.subscribe else "--subscribe-pattern" if args.subscribe_pattern else "--assign"
    return f"{chosen} selects no partition in {root} (found {listed}){_internal_hint(topics, args)}"


def _internal_hint(topics: dict[str, int], args: argparse.Namespace) -> str:
    """Why a pattern left out the internal topics it matches, and what reads them."""
    if args.subscribe_pattern is None or getattr(args, "include_internal", False):
        return ""
    rx = re.compile(args.subscribe_pattern)
    refused = sorted(t for t in topics if t in INTERNAL_TOPICS and rx.fullmatch(t))
    if not refused:
        return ""
    return (f"; {', '.join(refused)} {'is an internal topic' if len(refused) == 1 else 'are internal topics'}, "
            f"which a pattern never selects (as Kafka's consumer: exclude.internal.topics): use --subscribe "
            f"{','.join(refused)} or add --include-internal")


@dataclass
class Plan:
    """The checked selection: partition directories, their offset ranges, what was left out."""

    opts: Any
    logs: list[Any]
    ranges: dict[tuple[str, int], tuple[int, int]]
    left_out: dict[str, int]
    input_bytes: int
    #: what the search said: replicas chosen, different logs named alike, disagreements
    notes: list[str] = field(default_factory=list)
    #: for some ranges, the only offsets read (an append reading again what an earlier run missed)
    pieces: dict[tuple[Any, ...], list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def topics(self) -> list[str]:
        return sorted({d.topic for d in self.logs})

    def close(self) -> None:
        for d in self.logs:
            d.close()


def _default_engine(args: argparse.Namespace) -> None:
    """``--engine``'s default, one rule: arrow for iceberg, delta and typed values (``--values``,
    ``--keys``), spark otherwise; ``args.engine_default`` says why, for the summary (empty when
    ``--engine`` was given)."""
    if getattr(args, "engine", None) is None:  # no JVM where none is needed
        why = f"--format {args.format}" if args.format in ("iceberg", "delta") else \
            "--values" if requested(args) else ""
        args.engine = "arrow" if why else "spark"
        args.engine_default = f"the default for {why or f'--format {args.format}'}"
    elif not hasattr(args, "engine_default"):
        args.engine_default = ""


def plan(args: argparse.Namespace) -> Plan:
    """Check everything that can be checked without reading records; raise :class:`UsageError`."""
    _default_engine(args)
    check_arguments(args)
    root = Path(args.root)
    remote_root = _is_remote(args.root)
    if not remote_root and not root.exists():
        raise UsageError(f"no such log directory: {root}")
    if not remote_root and root.is_file():
        hint = ""
        if _PARTITION_DIR.match(root.parent.name):
            hint = f"; did you mean its log.dirs root {root.parent.parent}?"
        raise UsageError(f"{root} is a file, not a log.dirs root or partition directory{hint}")
    for name in ("max_rows_per_file", "row_group_rows", "min_partitions"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if (args.catalog or args.catalog_option or args.namespace) and args.format != "iceberg":
        raise UsageError("--catalog, --catalog-option and --namespace are for --format iceberg")
    if args.partition_by and args.format not in ("iceberg", "delta"):
        raise UsageError("--partition-by is for --format iceberg or delta")
    if getattr(args, "upsert", False) and args.format not in ("iceberg", "delta"):
        raise UsageError("--upsert needs --format iceberg or delta: a folder of files has no rows to replace")
    if getattr(args, "upsert", False) and args.engine != "arrow":
        raise UsageError(f"--upsert runs on the arrow engine (the merge is one process's): use --engine arrow, the "
                         f"default for --format {args.format}")
    if getattr(args, "upsert", False) and args.mode == "overwrite":
        raise UsageError("--upsert merges into the table: use --mode append (or a new OUT), not overwrite")
    if args.format in ("iceberg", "delta") and _is_remote(args.out) and args.engine == "spark":
        raise UsageError(f"--engine spark --format {args.format} writes to a local OUT (the executors stage files "
                         f"in it): use --engine arrow for {args.out}")
    if args.engine == "arrow":
        if args.format == "json":
            raise UsageError("--engine arrow writes parquet or orc; use --engine spark for json")
        if args.where:
            raise UsageError("--where needs --engine spark")
        if args.conf or args.master or args.min_partitions:
            raise UsageError("--conf, --master and --min-partitions are for --engine spark")
    elif args.row_group_rows is not None:
        raise UsageError("--row-group-rows is for --engine arrow (Spark sizes row groups in bytes: --conf "
                         "spark.hadoop.parquet.block.size=...)")
    if args.format == "json" and args.compression not in (None, "none", "gzip"):
        raise UsageError(f"--format json takes --compression gzip or none, not {args.compression}")
    for item in args.conf:
        if "=" not in item:
            raise UsageError(f"--conf needs KEY=VALUE, got {item!r}")
    try:
        storage.parse_options(args.storage_option)
    except ValueError as exc:
        raise UsageError(f"--storage-option: {exc}") from None
    if not _is_remote(args.out):
        out, src = Path(args.out).resolve(), root.resolve()
        if not remote_root and (out == src or out in src.parents or src in out.parents):
            raise UsageError(f"{args.out} and the log root {root} overlap: write the output elsewhere")
    if _has_ledger(args.out):  # before OUT is looked at: what dead runs left there is gone
        _recover(args, storage.parse_options(args.storage_option))
    if not _is_remote(args.out):
        try:
            check_target(Path(args.out), args.mode)
        except (FileExistsError, PermissionError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    found: list[str] = []
    try:
        opts = Options.parse({**_source_options(args), "path": args.root})
        logs = select_logs(opts, found)
    except ReplicasDisagreeError:
        raise  # the data, not the command line: status 1
    except LayoutError as exc:
        raise UsageError(str(logs_deeper(exc.url, exc.deeper, "--recursive") if exc.deeper else exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    if not logs:
        raise UsageError(f"no partition selected under {args.root}" if remote_root else _nothing_selected(root, args))
    try:
        ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
    except ValueError as exc:
        for d in logs:
            d.close()
        raise UsageError(str(exc)) from None
    left_out: dict[str, int] = {}
    if (not remote_root and args.subscribe is None and args.assign is None and not opts.include_internal
            and Path(logs[0].path) != root):
        left_out = {t: n for t, n in topics_in(root, opts.recursive).items() if t in INTERNAL_TOPICS}
    input_bytes = sum(s.size for d in logs for s in d.segments)
    return Plan(opts, logs, ranges, left_out, input_bytes, found)


def _is_remote(out: str) -> bool:
    return storage.is_remote(out)


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


def _finish_report(rep: PartitionReport, records: int, *, filtered: bool) -> None:
    """Set the records written; whatever the headers did not explain went to --where, or was in
    batches skipped as corrupt (a header scan does not check CRCs)."""
    rep.records = records
    expected = rep.span - rep.control_markers - rep.aborted_records - rep.compacted_offsets - rep.lost_offsets
    if records < expected:
        if filtered:
            rep.filtered = expected - records
        else:
            rep.unread = expected - records


def _reports(p: Plan) -> dict[tuple[Any, ...], PartitionReport]:
    """Every partition's report before the read (:func:`_report` of its range, or pieces)."""
    keys = {range_key(d, p.opts): d for d in p.logs}
    return {k: _report(d, *p.ranges[k], p.opts, p.pieces.get(k)) for k, d in keys.items()}


def _read_ranges(p: Plan, reports: dict[tuple[Any, ...], PartitionReport], converted: Ledger) -> Ledger:
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


def _find_skipped(p: Plan, reports: dict[tuple[Any, ...], PartitionReport], written: dict[tuple[Any, ...], int]
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


def _reports_and_notes(p: Plan) -> tuple[dict[tuple[Any, ...], PartitionReport], list[str]]:
    """Every partition's report and the notes (then the plan's segments are closed)."""
    try:
        reports = _reports(p)
        _read_ranges(p, reports, Ledger())  # the damage the header scan skipped (the executors skip it too)
        return reports, p.notes + _notes(p.logs)
    finally:
        p.close()


def _notes(logs: Sequence[Any]) -> list[str]:
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


def _say(args: argparse.Namespace, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.quiet or args.progress == "never":
        return False
    return args.progress == "always" or sys.stderr.isatty()


# ---------------------------------------------------------------------------------------------
# Spark


def spark_error_line(exc: BaseException) -> str:
    """kbatch's own one-line message out of a Spark/Py4J exception's text, else its first line.

    An error kbatch raises in a Python worker reaches the driver inside a JVM stack trace
    as the worker's Python traceback; its last line reads ``kbatch.errors.CRCError: ...``
    (or ``ValueError: ...`` for kbatch's checks). That line is what the user needs.
    """
    text = str(exc)
    found = re.findall(r"^\s*(kbatch\.errors\.\w+|[A-Za-z_]*(?:Error|Exception)): (.+)$", text, re.MULTILINE)
    kbatch_lines = [msg for kind, msg in found if kind.startswith("kbatch.errors.")]
    if kbatch_lines:
        return str(kbatch_lines[-1]).strip()
    python = [msg for kind, msg in found if kind in ("ValueError", "FileNotFoundError", "OSError")]
    if python:
        return str(python[-1]).strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:500]


class _Progress(threading.Thread):
    """Poll Spark's status tracker and draw the estimated progress of the write job."""

    def __init__(self, sc: Any, progress: Progress, records: int) -> None:
        super().__init__(daemon=True)
        self.sc = sc
        self.progress = progress
        self.records = records  # expected from the batch headers
        self.done = threading.Event()

    def run(self) -> None:
        tracker = self.sc.statusTracker()
        seen: dict[int, tuple[int, int]] = {}
        while not self.done.wait(0.5):
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None and info.numTasks:
                    seen[sid] = (info.numCompletedTasks, info.numTasks)
            if seen:
                # the write job's stage is the largest one seen
                completed, total = max(seen.values(), key=lambda ct: ct[1])
                fraction = completed / total
                self.progress.update(self.progress.total * fraction, records=int(self.records * fraction), approx=True)


#: Parquet/ORC files each task keeps open at once when writing partitioned by topic; past it
#: Spark falls back to sorting the task's remaining rows.
CONCURRENT_WRITERS = 64


def _driver_memory() -> str:
    """A quarter of this machine's memory, 1 to 8 GiB: in local mode the driver's JVM also runs
    every task (Spark's default, 1 GiB, leaves little room for 2 x 64 MiB Arrow batches per core
    and a Parquet writer per topic)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // (4 << 30)))}g"


def spark_config(master: str | None, conf: Sequence[str] = ()) -> dict[str, str]:
    """The configuration ``kbatch convert`` starts Spark with; ``conf`` items (``KEY=VALUE``) win,
    except that JVM options (``*.extraJavaOptions``) given twice are joined, not replaced.

    >>> c = spark_config("local[2]", ["spark.sql.maxConcurrentOutputFileWriters=0"])
    >>> c["spark.master"], c["spark.sql.maxConcurrentOutputFileWriters"]
    ('local[2]', '0')
    >>> spark_config(None, ["spark.driver.extraJavaOptions=-Da=1", "spark.driver.extraJavaOptions=-Db=2"])[
    ...     "spark.driver.extraJavaOptions"]
    '-Da=1 -Db=2'
    """
    master = master or "local[*]"
    out = {
        "spark.master": master,
        "spark.app.name": "kbatch convert",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.showConsoleProgress": "false",
        # no web UI (its server is about a tenth of the JVM's start-up; kbatch draws its own
        # progress from the status tracker): --conf spark.ui.enabled=true to watch the job there
        "spark.ui.enabled": "false",
        # partitionBy("topic") sorts each task's rows by topic before writing, as rows from
        # Python carry no ordering; one open writer per topic instead needs no sort
        "spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS),
    }
    if master.startswith("local"):
        out["spark.driver.memory"] = _driver_memory()
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--conf needs KEY=VALUE, got {item!r}")
        key, value = key.strip(), value.strip()
        if key.endswith(".extraJavaOptions") and out.get(key):
            value = f"{out[key]} {value}"  # -q's log4j option and the user's, both
        out[key] = value
    return out


def task_bytes(cost: int, cores: int) -> int:
    """The cost of log per Spark task, as Spark's file source sizes its splits: 128 MiB, less to
    give every core a task, and no less than opening four segments costs.

    ``cost`` is the log's bytes plus :data:`~kbatch.plan._plan.SEGMENT_OPEN_COST` per segment (what
    the planner packs), as Spark counts a file's length plus ``openCostInBytes``: four
    partitions of 43 MiB on 2 cores then make 2 tasks, not 4.

    >>> task_bytes(10 << 30, 8) >> 20, task_bytes(46 << 20, 2) >> 20, task_bytes(1000, 2) >> 10
    (128, 23, 128)
    """
    per_core = cost // max(1, cores)
    return max(4 * SEGMENT_OPEN_COST, min(DEFAULT_MAX_PARTITION_BYTES, per_core))


def _spark_session(args: argparse.Namespace) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    here = env_pythonpath()  # make kbatch importable by Spark's Python workers (source checkouts)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p]])
    if (args.master or "local").startswith("local"):
        # one machine: no routable address to look for (Spark warns when it finds only loopback)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return start_session(spark_config(args.master, args.conf))


def _quiet_spark_errors(spark: Any) -> None:
    """kbatch reports a failure itself, in one line: Spark's own error logs would repeat it with
    its whole stack (a failed task logs it at ERROR in the JVM; PySpark logs an analysis error
    with its query context on the Python side)."""
    import logging

    spark.sparkContext.setLogLevel("FATAL")
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pragma: no cover - PySpark before 4.0
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


class _NotPy4J:
    """A logging filter: drops the records Py4J logs on the root logger (``logging.exception``
    of a call cut by Ctrl-C), which would print a traceback."""

    @staticmethod
    def filter(record: Any) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _plain_interrupts() -> None:
    """Ctrl-C under Spark as under the arrow engine: ``KeyboardInterrupt`` in the main thread,
    reported by ``kbatch`` in one line (status 130), the JVM's jobs ended with the session.

    PySpark's SIGINT handler calls ``cancelAllJobs`` through Py4J from inside the signal, while
    the main thread waits in a Py4J call on the same connection: a reentrant read, and Py4J
    logs the failures with their tracebacks, some on the root logger (``logging.exception``),
    some on its own ``py4j.*`` loggers (closing the cut connection). The default handler
    replaces PySpark's; the root logger drops Py4J's records (and keeps Python's last-resort
    output for the others, so that ``logging.exception`` installs no handler of its own), and
    the ``py4j`` loggers end in a null handler (a root logger's filters never see records that
    propagate from below)."""
    import logging
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    root = logging.getLogger()
    if not root.handlers and logging.lastResort is not None:
        root.addHandler(logging.lastResort)
    if not any(isinstance(f, _NotPy4J) for f in root.filters):
        root.addFilter(_NotPy4J())
    py4j = logging.getLogger("py4j")
    py4j.propagate = False
    if not py4j.handlers:
        py4j.addHandler(logging.NullHandler())


def _filtered(args: argparse.Namespace, df: Any) -> Any:
    """``df`` with ``--where`` applied (a filter Spark cannot analyse: UsageError)."""
    if args.where:
        try:
            df = df.where(args.where)
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException/ParseException: a user mistake
            raise UsageError(f"--where {args.where!r}: {spark_error_line(exc)}") from None
    return df


def _write_spark(spark: Any, args: argparse.Namespace, df: Any, target: str) -> None:
    df = _filtered(args, df)
    # the staging folder is ours and empty: "append" writes into it as it is
    writer = df.write.mode("append" if target != args.out else args.mode).format(args.format)
    if args.compression:
        codec = "zlib" if args.format == "orc" and args.compression == "gzip" else args.compression
        writer = writer.option("compression", codec)
    if args.max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(args.max_rows_per_file))
    if not args.no_partition_by_topic:
        writer = writer.partitionBy("topic")
    writer.save(target)


def spark_tasks(p: Plan, cores: int) -> tuple[list[tuple[LogSlice, ...]], Options]:
    """The Spark tasks of a checked plan and the options they were planned with: tasks of
    :func:`task_bytes` for ``cores`` (or ``--min-partitions``) over exactly the partitions and
    ranges ``plan()`` resolved and the reports describe."""
    opts = p.opts
    if not opts.min_partitions:
        cost = p.input_bytes + SEGMENT_OPEN_COST * sum(len(d.segments) for d in p.logs)
        opts = replace(opts, max_bytes_per_partition=task_bytes(cost, cores))
    return plan_tasks(plan_slices(p.logs, p.ranges, opts, p.pieces), opts), opts


def planned_frame(spark: Any, p: Plan) -> Any:
    """The checked plan's records as a DataFrame (:func:`spark_tasks` for the session's cores)."""
    from kbatch.spark import task_frame

    return task_frame(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism))


def _written_counts(spark: Any, args: argparse.Namespace, folder: str) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    """``(topic, partition) -> (records, first offset, last offset)`` of what was written to ``folder``
    (``(topic, partition, root)`` with the root columns, as the reports' keys)."""

    labelled = getattr(args, "recursive", False) or getattr(args, "replicas", "best") == "all"
    keys = ["topic", "partition", ROOT_COLUMN] if labelled else ["topic", "partition"]
    local = not _is_remote(folder)
    if local and not has_data_files(Path(folder)):
        return {}
    if local and args.format in ("parquet", "orc"):
        import pyarrow.dataset as pads

        part = None if args.no_partition_by_topic else "hive"
        dataset = pads.dataset(folder, format=args.format, partitioning=part)
        t = dataset.to_table(columns=[*keys, "offset"])
        g = t.group_by(keys).aggregate([("offset", "count"), ("offset", "min"), ("offset", "max")])
        return {
            tuple(r[k] for k in keys): (r["offset_count"], r["offset_min"], r["offset_max"]) for r in g.to_pylist()
        }
    from pyspark.sql import functions as F

    df = spark.read.format(args.format).load(folder)
    rows = df.groupBy(*keys).agg(F.count("*"), F.min("offset"), F.max("offset")).collect()
    n = len(keys)
    return {(r[0], int(r[1]), *r[2:n]): (int(r[n]), int(r[n + 1]), int(r[n + 2])) for r in rows}


def convert_spark(args: argparse.Namespace) -> Summary:
    """Run the Spark pipeline: the planned tasks (read as the ``kafka-log`` source reads) -> filters
    -> files partitioned by topic."""
    wall = time.perf_counter()
    try:
        check_master(args.master)  # before the JVM: an unreachable master costs it a minute of retries
    except MasterError as exc:
        raise UsageError(str(exc)) from None
    p = plan(args)
    sink: Sink | None = None
    resumed = _Resumed(Ledger(), [], Ledger(), [])
    schema = _schema(p)
    try:
        values = plan_values(args, p.topics, schema)  # --values: each topic's reader schemas (a local OUT)
        if values is not None and args.format in ("iceberg", "delta"):
            values.catalog = table_options(args, _keys(p))  # the dead letters' tables opened as the data's
    except BaseException:
        p.close()
        raise
    if _has_ledger(args.out):  # the files and the offsets ledger committed together
        side = (values.side_folder,) if values is not None and values.side_folder else ()
        sink = _open_sink(args, p.topics, schema.names, _keys(p), side)
        for _name, transform in sink.file_partitions():
            try:  # what the executors cannot compute: said before the JVM starts
                check_transform(transform, sink.format)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        resumed = _resume(args, p, sink, wall)
        if resumed.done is not None:  # nothing new: no JVM started
            p.close()
            return resumed.done
    _say(args, f"kbatch convert: {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
               f"{size(p.input_bytes)} of log")
    if args.quiet:
        import warnings

        warnings.filterwarnings("ignore", module="pyspark")
    # the partitions' reports (a header scan of every segment) while the JVM starts
    scan = ThreadPoolExecutor(1, thread_name_prefix="kbatch-reports")
    explained = scan.submit(_reports_and_notes, p)
    scan.shutdown(wait=False)
    t0 = time.perf_counter()
    try:
        spark = _spark_session(args)
    except JavaError as exc:
        futures.wait([explained])
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Java too old or broken, bad --conf: one line
        futures.wait([explained])
        raise ConvertError(f"Spark did not start: {spark_error_line(exc)} (Spark 4 needs Java "
                           f"{JAVA_VERSIONS}: set JAVA_HOME to one, or use --engine arrow)") from None
    startup = time.perf_counter() - t0
    reports, notes = explained.result()
    _quiet_spark_errors(spark)
    _plain_interrupts()
    _say(args, f"Spark {spark.version} at {spark.sparkContext.master} ({startup:.1f} s to start)")
    df = planned_frame(spark, p)
    progress = Progress(p.input_bytes, enabled=_progress_enabled(args))
    expected = sum(r.span - r.control_markers - r.aborted_records - r.compacted_offsets for r in reports.values())
    poller = _Progress(spark.sparkContext, progress, expected)
    if progress.enabled:
        poller.start()
    counts: dict[tuple[Any, ...], tuple[int, int, int]] = {}
    commits: list[TableCommit] = []
    written = True
    try:
        if sink is None:  # a remote OUT without a ledger (not s3): Spark's own mode handling
            _write_spark(spark, args, df, args.out)
            counts = _written_counts(spark, args, args.out)
        else:
            assert sink is not None
            with sink:  # Spark's executors write into the sink's folder; this process commits it
                sink.open(schema if values is None else values.schemas)
                if values is not None and not isinstance(sink, FolderSink):  # Iceberg, Delta: staged files
                    values.start(sink)
                    staged = str(sink.staging())
                    write_values(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism), p.topics, values,
                                 staged, lambda frame: write_staged(_filtered(args, frame), sink,
                                                                    compression=args.compression,
                                                                    max_rows_per_file=args.max_rows_per_file))
                    counts = _written_counts(spark, argparse.Namespace(**{**vars(args), "format": "parquet",
                                                                           "no_partition_by_topic": False}), staged)
                    take_dead_letters(values, staged)
                elif values is not None:  # each topic decoded by the executors, its dead letters beside
                    assert isinstance(sink, FolderSink)  # --values: a local parquet OUT (check_arguments)
                    folder = str(sink.folder)
                    if values.side_folder is None:  # --dead-letter PATH outside OUT: a folder sink of its own
                        values.start(sink)
                    write_values(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism), p.topics, values,
                                 folder, lambda frame: _write_spark(spark, args, frame, folder))
                    counts = _written_counts(spark, args, folder)
                    if values.side_folder is None:
                        take_dead_letters(values, folder)  # committed to PATH just before the data
                    else:
                        count_dead_letters(values, folder)  # committed with the data
                elif isinstance(sink, (FolderSink, RemoteFolderSink)):
                    _write_spark(spark, args, df, str(sink.folder))
                    counts = _written_counts(spark, args, str(sink.folder))
                else:
                    write_staged(_filtered(args, df), sink, compression=args.compression,
                                 max_rows_per_file=args.max_rows_per_file)
                    counts = _written_counts(spark, argparse.Namespace(**{**vars(args), "format": "parquet",
                                                                           "no_partition_by_topic": False}),
                                             str(sink.staging()))
                if counts or (values is not None and values.total()) or (len(resumed.held) and len(resumed.converted)):
                    sink.adopt(sum(c[0] for c in counts.values()))
                    if not p.opts.fail_on_data_loss and not args.where:
                        _find_skipped(p, reports, {k: c[0] for k, c in counts.items()})
                    converted = _read_ranges(p, reports, resumed.converted)
                    if values is not None:  # dead letters kept apart (tables, --dead-letter PATH) first
                        values.commit(converted)
                    commits = sink.commit(resumed.held.advanced(converted), converted)
                else:
                    sink.abort()  # no _SUCCESS in a folder without data
                    written = False
    except Exception as exc:
        if isinstance(exc, TableError) and values is not None:
            raise values.explain(exc) from None
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            raise ConvertError(spark_error_line(exc)) from None
        raise
    finally:
        poller.done.set()
        progress.close()
        if values is not None:
            values.close()
    dead: dict[str, Any] = {}
    if values is not None:  # a dead letter is a record read: counted in its partition, as the arrow engine does
        for (topic, partition, root), n in values.dead.items():
            key = (topic, partition, root) if p.opts.root_columns else (topic, partition)
            old = counts.get(key, (0, 0, 0))
            counts[key] = (old[0] + n, *old[1:])
            reports[key].dead_letters = n
        notes = values.summary_notes() + notes
        commits = values.commits + commits
        dead = {"dead_letters": values.total(), "dead_letter_path": values.where, "value_errors": values.commonest()}
    for key, rep in reports.items():
        _finish_report(rep, counts.get(key, (0, 0, 0))[0], filtered=bool(args.where))
    return Summary(
        len(p.topics),
        len(p.logs),
        sum(c[0] for c in counts.values()),
        p.input_bytes,
        sum(c.bytes for c in commits),
        time.perf_counter() - wall,
        "spark",
        args.format,
        args.out,
        startup_seconds=startup,
        written=written,
        mode=args.mode,
        left_out=p.left_out,
        per_partition=list(reports.values()),
        notes=resumed.notes + notes + [n for c in commits for n in c.notes],
        tables=commits,
        gaps=resumed.gaps,
        **dead,
    )


# ---------------------------------------------------------------------------------------------
# Arrow (no Spark)


def _arrow_batches(
    p: Plan, args: argparse.Namespace, reports: dict[tuple[Any, ...], PartitionReport], progress: Progress
) -> Iterator[Any]:
    """The selected records as Arrow batches (the Spark source's loop, :func:`kbatch.plan._plan.read_logs`),
    each partition's records and skipped bytes counted in its report as they go; with
    the root columns (``--recursive``, ``--replicas all``) each log (and copy) over its own range,
    with its root and cluster id as the ``root`` and ``clusterId`` columns."""
    opts = p.opts
    done_bytes = finished_bytes = records = 0

    def count(log: Any, table: Any) -> None:
        nonlocal done_bytes, finished_bytes, records
        rep = reports[range_key(log, opts)]
        if table is not None:
            rep.records += len(table)
            records += len(table)
            done_bytes += table.consumed_bytes
            if table.next_offset is not None:
                reached[range_key(log, opts)] = table.next_offset
        else:  # the partition is done
            rep.skipped_bytes = sum(s.length for s in log.skipped)
            finished_bytes += sum(s.size for s in log.segments)
            done_bytes = max(done_bytes, finished_bytes)
        progress.update(done_bytes, records=records)

    reached: dict[tuple[Any, ...], int] = {}  # the offset each partition's read has reached

    def lost(log: Any, exc: KBatchError) -> None:  # --no-fail-on-data-loss: told, not raised
        rep = reports[range_key(log, opts)]
        rep.lost, rep.lost_at = str(exc), max(reached.get(range_key(log, opts), rep.start), rep.start)

    on_lost = None if opts.fail_on_data_loss else lost
    if not opts.root_columns and not p.pieces:
        yield from read_logs(p.logs, opts, ranges=p.ranges, progress=count, lost=on_lost)
        return
    for log in p.logs:  # copies of one partition: ranges by (topic, partition, root); or pieces of a range
        k = range_key(log, opts)
        for piece in p.pieces.get(k, [p.ranges[k]]):
            if reports[k].lost:  # (the ledger ends where it stopped: no later piece is read)
                break
            reached[k] = piece[0]
            batches = read_logs(log, opts, ranges={(log.topic, log.partition): piece}, progress=count, lost=on_lost)
            yield from (with_root(b, log.root, log.cluster_id) for b in batches) if opts.root_columns else batches


def _write_orc(reader: Any, folder: Path, args: argparse.Namespace, token: str) -> None:
    """ORC files in the dataset writer's layout: ``topic=<name>/part-<token>-<i>.orc`` (topics arrive
    one after another: the logs are sorted by topic), a new file every ``--max-rows-per-file`` rows."""
    import pyarrow as pa
    import pyarrow.orc as orc

    codec = {"none": "uncompressed", "gzip": "zlib", None: "snappy"}.get(args.compression, args.compression)
    writer: Any = None
    key: str | None = None
    rows = index = 0
    limit = args.max_rows_per_file or 0
    try:
        for batch in reader:
            if batch.num_rows == 0:
                continue
            topic = batch.column(batch.schema.get_field_index("topic"))[0].as_py()
            if not args.no_partition_by_topic:
                batch = batch.drop_columns(["topic"])
            here = "" if args.no_partition_by_topic else topic
            while batch.num_rows:
                if writer is None or here != key or (limit and rows >= limit):
                    if writer is not None:
                        writer.close()
                    sub = folder if args.no_partition_by_topic else folder / f"topic={topic}"
                    sub.mkdir(parents=True, exist_ok=True)
                    writer = orc.ORCWriter(str(sub / f"part-{token}-{index}.orc"), compression=codec)
                    key, rows, index = here, 0, index + 1
                take = batch.num_rows if not limit else min(batch.num_rows, limit - rows)
                writer.write(pa.Table.from_batches([batch.slice(0, take)]))
                rows += take
                batch = batch.slice(take)
    finally:
        if writer is not None:
            writer.close()


class RemoteStaging:
    """:class:`StagedOutput` for an OUT on a remote filesystem (pyarrow.fs): files are written
    under ``OUT/_kbatch-staging-<token>/`` and moved into OUT only when the whole conversion
    succeeded (removed otherwise). Object stores have no atomic rename: the moves are object
    copies, so a reader listing OUT during those moves may see part of the files."""

    def __init__(self, out: str, mode: str, storage_option: Sequence[str]) -> None:
        import pyarrow.fs as pafs

        loc = storage.locate(out, storage_options=storage.parse_options(storage_option))
        self.fs, self.out, self.mode = loc.fs, loc.path, mode
        self.token = os.urandom(4).hex()
        self.tmp = f"{self.out}/_kbatch-staging-{self.token}"
        self._discarded = False
        try:
            existing = [i for i in self.fs.get_file_info(pafs.FileSelector(self.out, recursive=True,
                                                                            allow_not_found=True))
                        if i.type == pafs.FileType.File]
        except OSError as exc:
            raise UsageError(f"cannot list {out}: {exc}") from None
        if existing and mode == "errorifexists":
            raise UsageError(f"{out} exists and holds files: use --mode overwrite or append")

    def __enter__(self) -> str:
        return self.tmp

    def has_data(self) -> bool:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.tmp, recursive=True, allow_not_found=True))
        return any(i.type == pafs.FileType.File for i in infos)

    def discard(self) -> None:
        self._discarded = True

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        import pyarrow.fs as pafs

        try:
            if exc_type is None and not self._discarded:
                if self.mode == "overwrite":
                    for i in self.fs.get_file_info(pafs.FileSelector(self.out, recursive=True, allow_not_found=True)):
                        if i.type == pafs.FileType.File and not i.path.startswith(self.tmp + "/"):
                            self.fs.delete_file(i.path)
                for i in self.fs.get_file_info(pafs.FileSelector(self.tmp, recursive=True)):
                    if i.type == pafs.FileType.File:
                        self.fs.move(i.path, self.out + i.path[len(self.tmp):])
        finally:
            if self.fs.get_file_info(self.tmp).type != pafs.FileType.NotFound:
                self.fs.delete_dir(self.tmp)


def convert_arrow(args: argparse.Namespace) -> Summary:
    """The same conversion in this process with pyarrow's dataset writer, same layout as Spark's."""
    import pyarrow as pa

    wall = time.perf_counter()
    p = plan(args)
    try:
        schema = _schema(p)
        if args.format == "orc" and _is_remote(args.out):
            raise UsageError("--engine arrow writes ORC to a local OUT only; use parquet, or --engine spark")
        values = plan_values(args, p.topics, schema, p.logs)
        if values is not None and args.format in ("iceberg", "delta"):
            values.catalog = table_options(args, _keys(p))  # the dead letters' tables opened as the data's
        if _has_ledger(args.out):
            side = (values.side_folder,) if values is not None and values.side_folder else ()
            sink = _open_sink(args, p.topics, schema.names, _keys(p), side)
            return _convert_to_table(args, p, schema, sink, wall, values)
        import pyarrow.dataset as pads  # not before: it imports pandas (0.5 s), which a rerun never needs
        reports = _reports(p)
        _say(args, f"kbatch convert (arrow): {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
                   f"{size(p.input_bytes)} of log")
        # a remote OUT other than S3 (no offsets ledger there): the files staged under OUT, copied in at the end
        progress = Progress(p.input_bytes, enabled=_progress_enabled(args))
        staged = RemoteStaging(args.out, args.mode, args.storage_option)
        file_options = None
        codec = args.compression or "snappy"
        if args.format == "parquet":
            file_options = pads.ParquetFileFormat().make_write_options(
                compression=None if codec == "none" else codec
            )
        rows_per_file = args.max_rows_per_file or 0
        group = args.row_group_rows or min(1 << 20, rows_per_file or 1 << 20)
        partitioning = None
        if not args.no_partition_by_topic:
            partitioning = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
        try:
            with staged as tmp:
                source = EndOnError(_arrow_batches(p, args, reports, progress))  # raised after the writer
                reader = pa.RecordBatchReader.from_batches(schema, source)
                pads.write_dataset(
                    reader,
                    str(tmp),
                    filesystem=staged.fs,
                    format=args.format,
                    partitioning=partitioning,
                    basename_template=f"part-{staged.token}-{{i}}.{args.format}",
                    existing_data_behavior="overwrite_or_ignore",
                    file_options=file_options,
                    max_rows_per_file=rows_per_file,
                    max_rows_per_group=group,
                    min_rows_per_group=min(group, 1 << 16),
                    max_open_files=4096,
                    preserve_order=True,
                )
                source.check()
                written = staged.has_data()
                if not written:
                    staged.discard()  # nothing to write: OUT is not created
        finally:
            progress.close()
        _read_ranges(p, reports, Ledger())
        for r in reports.values():
            _finish_report(r, r.records, filtered=False)
        notes = p.notes + _notes(p.logs)
    finally:
        p.close()
    return Summary(
        len(p.topics),
        len(p.logs),
        sum(r.records for r in reports.values()),
        p.input_bytes,
        0,
        time.perf_counter() - wall,
        "arrow",
        args.format,
        args.out,
        written=written,
        mode=args.mode,
        left_out=p.left_out,
        per_partition=list(reports.values()),
        notes=notes,
    )


def _schema(p: Plan) -> Any:
    """The rows' ``pyarrow.Schema``: the Kafka source's columns (with the root columns when read)."""
    import pyarrow as pa

    schema = kafka_schema(include_headers=p.opts.include_headers, extra_columns=p.opts.extra_columns)
    if p.opts.root_columns:
        schema = schema.append(pa.field(ROOT_COLUMN, pa.string())).append(pa.field(CLUSTER_ID_COLUMN, pa.string()))
    return schema


def _has_ledger(out: str) -> bool:
    """Whether a run to ``out`` goes through a table sink with its ledger: a local OUT, or S3
    (its conditional writes; other object stores: files copied in, without a ledger)."""
    return not _is_remote(out) or is_s3(out)


def _keys(p: Plan) -> list[tuple[str, int, str | None]]:
    """``(topic, partition, root)`` of the planned partitions (a ledger's keys)."""
    return [(d.topic, d.partition, d.root if p.opts.root_columns else None) for d in p.logs]


def _recover(args: argparse.Namespace, storage_options: dict[str, Any]) -> None:
    """The one recovery step of a run on OUT (:func:`kbatch.tables._leftovers.recover`), said in one line;
    then this run's lease on an S3 OUT (given back when the run ends: :func:`run`)."""
    try:
        removed = recover(args.out, storage_options, args.format)
    except ImportError:
        raise UsageError(f"{args.out} needs boto3: pip install 'kbatch[s3]'") from None
    if removed:
        more = f" (and {len(removed) - 3} more)" if len(removed) > 3 else ""
        _say(args, f"kbatch convert: removed what runs no longer alive left in {args.out}: "
                   f"{', '.join(removed[:3])}{more}")
    if is_s3(args.out):
        hold(args.out, storage_options)


def _open_sink(args: argparse.Namespace, topics: list[str], columns: list[str],
               keys: Sequence[tuple[str, int, str | None]] = (), side_folders: Sequence[str] = ()) -> Sink:
    """The table sink of ``--format`` (:mod:`kbatch.tables`) for OUT and ``--mode``; ``keys``: the
    partitions the run converts; ``side_folders``: hidden folders of a Parquet OUT committed with
    the data (dead letters)."""
    storage_options = storage.parse_options(args.storage_option)
    folder = {"compression": args.compression, "max_rows_per_file": args.max_rows_per_file,
              "row_group_rows": args.row_group_rows, "partition_by_topic": not args.no_partition_by_topic,
              "format": args.format}
    if args.format in ("parquet", "orc", "json") and _is_remote(args.out):
        try:
            import boto3  # noqa: F401 - the ledger's conditional write
        except ImportError:
            raise UsageError(f"{args.out} with its offsets ledger needs boto3: pip install 'kbatch[s3]'") from None
        try:
            return RemoteFolderSink(args.out, args.mode, storage_options=storage_options, side_folders=side_folders,
                                    **folder)
        except (FileExistsError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if args.format in ("parquet", "orc", "json"):  # a folder: Parquet written by the sink, or files put there
        return FolderSink(args.out, args.mode, side_folders=side_folders, **folder)
    own = table_options(args, keys)
    try:
        return open_sink(args.format, args.out, args.mode, topics=topics, partition_by=args.partition_by,
                         columns=columns, compression=args.compression, upsert=args.upsert,
                         properties={"kbatch.version": __version__, "kbatch.source-root": str(args.root)}, **own)
    except ImportError as exc:
        raise UsageError(f"--format {args.format} needs {exc.name or exc}: "
                         f"pip install 'kbatch[{args.format}]'") from None
    except (FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def table_options(args: argparse.Namespace, keys: Sequence[tuple[str, int, str | None]] = ()) -> dict[str, Any]:
    """The Iceberg or Delta sink's own options for OUT: the catalog (Iceberg), the partitions the
    run converts (Delta: ``keys``, whose ledger survives log cleanup), the storage options of a
    remote OUT. The data's tables and the dead letters' are opened with the same."""
    options = {}
    for item in args.catalog_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--catalog-option needs KEY=VALUE, got {item!r}")
        options[key.strip()] = value.strip()
    catalog = {"catalog": args.catalog, "catalog_options": options, "namespace": args.namespace}
    own: dict[str, Any] = catalog if args.format == "iceberg" else {"partitions": list(keys)}
    if _is_remote(args.out):
        own["storage_options"] = storage.parse_options(args.storage_option)
    return own


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
class _Resumed:
    """Where a run into a sink starts: the ledger held, the gaps, what it converts, or ``done``."""

    held: Ledger
    gaps: list[Gap]
    converted: Ledger
    notes: list[str]
    done: Summary | None = None


def _resume(args: argparse.Namespace, p: Plan, sink: Sink, wall: float) -> _Resumed:
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
    return _Resumed(held, gaps, converted, notes, done)


def _convert_to_table(args: argparse.Namespace, p: Plan, schema: Any, sink: Sink, wall: float,
                      values: ValuePlan | None = None) -> Summary:
    """The arrow engine into a table sink: with ``--mode append``, each partition from where the
    table's ledger ends (nothing read nor committed when nothing is new); the data and the new
    ledger committed together (:mod:`kbatch.tables`). With ``values`` (``--values``), each topic's
    values decoded into its own schema, the dead letters committed just before (or with) the data."""
    r = _resume(args, p, sink, wall)
    if r.done is not None:
        return r.done
    reports = _reports(p)
    _say(args, f"kbatch convert (arrow): {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
               f"{size(p.input_bytes)} of log to {args.format}")
    progress = Progress(p.input_bytes, enabled=_progress_enabled(args))
    commits: list[TableCommit] = []
    try:
        with sink:
            sink.open(values.schemas if values is not None else schema)
            batches = _arrow_batches(p, args, reports, progress)
            if values is not None:
                values.start(sink)
                batches = values.decode(batches)
            if isinstance(sink, FolderSink) and args.format == "orc":  # pyarrow's dataset writer has no ORC
                _write_orc(pa_reader(schema, batches), sink.folder, args, sink.run.partition("@")[0])
                sink.adopt(sum(rep.records for rep in reports.values()))
            else:
                sink.write(batches)
            converted = _read_ranges(p, reports, r.converted)
            if len(converted):
                if values is not None:
                    values.commit(converted)
                commits = sink.commit(r.held.advanced(converted), converted)
            else:
                sink.abort()
    except TableError as exc:
        if values is None:
            raise
        raise values.explain(exc) from None
    finally:
        progress.close()
        if values is not None:
            values.close()
    for rep in reports.values():
        _finish_report(rep, rep.records, filtered=False)
    dead: dict[str, Any] = {}
    if values is not None:
        for (topic, partition, root), n in values.dead.items():
            reports[(topic, partition, root) if p.opts.root_columns else (topic, partition)].dead_letters = n
        commits = values.commits + commits
        r.notes += values.summary_notes()
        dead = {"dead_letters": values.total(), "dead_letter_path": values.where, "value_errors": values.commonest()}
    return Summary(
        len(p.topics), len(p.logs), sum(rep.records for rep in reports.values()), p.input_bytes,
        sum(c.bytes for c in commits), time.perf_counter() - wall, "arrow", args.format, args.out,
        written=bool(commits), mode=args.mode, left_out=p.left_out, per_partition=list(reports.values()),
        notes=r.notes + p.notes + _notes(p.logs) + [n for c in commits for n in c.notes], tables=commits,
        gaps=r.gaps, **dead,
    )


def pa_reader(schema: Any, batches: Any) -> Any:
    """``batches`` as a ``pyarrow.RecordBatchReader`` of ``schema``."""
    import pyarrow as pa

    return pa.RecordBatchReader.from_batches(schema, batches)


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch convert``; print the summary; return the exit status.

    0 on success, 2 for a user mistake (checked before any work), 1 when the conversion
    failed (corrupt data, Spark); each error is one line on stderr, OUT left as it was.
    """
    _default_engine(args)
    existed = _is_remote(args.out) or os.path.lexists(args.out)
    try:
        try:
            summary = convert_arrow(args) if args.engine == "arrow" else convert_spark(args)
        finally:  # the run's lease on an S3 OUT (_recover) ends with the run
            release(args.out)
    except UsageError as exc:
        print(f"kbatch convert: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"kbatch convert: error: {exc} (--engine {args.engine} needs it installed)", file=sys.stderr)
        return 2
    except (KBatchError, ConvertError, OSError) as exc:
        print(f"kbatch convert: error: {exc}", file=sys.stderr)
        return 1
    summary.engine_default = args.engine_default
    summary.out_existed = existed
    if args.format == "parquet" and summary.written and _has_ledger(args.out):  # local or s3: _common_metadata
        summary.read = read_recipe(args.out, not args.no_partition_by_topic)
    if args.json_summary:
        print(json.dumps(summary.as_dict()))
    elif not args.quiet:
        print("\n".join(summary.lines()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kbatch.convert._convert ROOT OUT ...`` (the same as ``kbatch convert``)."""
    import gc

    parser = argparse.ArgumentParser(prog="kbatch convert", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    finally:
        gc.collect()  # as kbatch.__main__.main: cycles freed before the interpreter exits


if __name__ == "__main__":
    sys.exit(main())
