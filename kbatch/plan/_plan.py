"""The Kafka source's options over a ``log.dirs`` root, and splitting logs into tasks.

Nothing here needs Spark (``kbatch convert``'s arrow engine uses it too): the planner turns
options and partition directories into :class:`LogSlice` work items (picklable), and
:func:`read_slice` turns one into Arrow record batches. The Spark classes in
:mod:`kbatch.spark._source` are thin shells around these.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import logging
import math
import os
import re
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbatch.codec import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ROWS, RecordTable, set_threads
from kbatch.errors import LayoutError, StorageError
from kbatch.log import LogDir, OnCorruption, log_batches, logs_deeper, open_log, open_logs
from kbatch.storage import is_remote, parse_options

__all__ = [
    "EARLIEST",
    "LATEST",
    "INTERNAL_TOPICS",
    "DEFAULT_MAX_PARTITION_BYTES",
    "OPTIONS",
    "CLUSTER_ID_COLUMN",
    "ROOT_COLUMN",
    "SEGMENT_OPEN_COST",
    "LogSlice",
    "Options",
    "Wanted",
    "check_option_names",
    "offsets_json",
    "open_slice",
    "plan_slices",
    "plan_tasks",
    "range_key",
    "read_logs",
    "read_slice",
    "read_task",
    "resolve_range",
    "root_columns",
    "select_logs",
    "with_root",
]

logger = logging.getLogger("kbatch.spark")

#: Kafka's special offsets in the JSON form of ``startingOffsets``/``endingOffsets``.
EARLIEST = -2
LATEST = -1
#: Topics a pattern subscription leaves out, as Kafka's consumer does (exclude.internal.topics).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"})

#: Every option the source reads (Spark's options are case-insensitive; this is their spelling).
OPTIONS = (
    "path",
    "assign",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxPartitionBytes",
    "maxBytesPerPartition",
    "failOnDataLoss",
    "isolationLevel",
    "kafka.isolation.level",
    "verifyCrc",
    "includeHeaders",
    "extraColumns",
    "maxRecordsPerBatch",
    "maxBytesPerBatch",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "recursiveFileLookup",
    "replicas",
    "includeInternalTopics",
    "kafka.exclude.internal.topics",
    "filterPushdown",
    # typed values (kbatch.spark._values)
    "valueFormat",
    "keyFormat",
    "readerSchema",
    "keyReaderSchema",
    "valueErrors",
    "keyErrors",
    "schemaRegistry.url",
    "schemaRegistry.path",
    "schemaRegistry.basic.auth.user.info",
    "schemaRegistry.bearer.auth.token",
    "schemaRegistry.ssl.ca.location",
    "recursiveFieldMaxDepth",
    "valueSchema",
    "keySchema",
    "enums.as.ints",
    "emit.default.values",
    "recursive.fields.max.depth",
    "convert.any.fields.to.json",
    "messageName",
)
#: Options named ``storage.<key>`` are the path's filesystem options (``storage_options``).
STORAGE_PREFIX = "storage."
#: Default task size (Spark's ``spark.sql.files.maxPartitionBytes``).
DEFAULT_MAX_PARTITION_BYTES = 128 << 20
#: Default ``maxTriggerDelay`` (Spark's Kafka source: 15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    low = str(raw).strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"option {name} must be true or false, got {raw!r}")


def _int(opts: Mapping[str, str], name: str, default: int | None, minimum: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {value}")
    return value


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_TIME = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_TIME_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _bytes(opts: Mapping[str, str], name: str) -> int | None:
    """A size: bytes, or with Spark's suffixes (``128m``, ``1g``, ``64mb``, ``512KiB``)."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    m = _SIZE.match(str(raw))
    if not m:
        raise ValueError(f"option {name} must be a size in bytes such as 134217728 or 128m, got {raw!r}")
    value = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]
    if value < 1:
        raise ValueError(f"option {name} must be >= 1 byte, got {raw!r}")
    return value


def _millis(opts: Mapping[str, str], name: str, default: int) -> int:
    """A duration as Spark's ``timeStringAsMs`` reads it: ``15m``, ``30s``, ``500ms``; milliseconds bare."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    m = _TIME.match(str(raw))
    if not m:
        raise ValueError(f"option {name} must be a duration such as 30s, 15m or 500 (ms), got {raw!r}")
    return int(int(m.group(1)) * _TIME_MS[(m.group(2) or "ms").lower()])


def check_option_names(options: Mapping[str, Any]) -> None:
    """Refuse option names the source does not read (a typo would otherwise be silently ignored).

    Names are compared case-insensitively, as Spark does.

    Raises
    ------
    ValueError
        Naming each unknown option, the closest valid one, and the list of valid options.
    """
    import difflib

    known = {o.lower(): o for o in OPTIONS}
    unknown = sorted(
        str(k) for k in options if str(k).lower() not in known and not str(k).lower().startswith(STORAGE_PREFIX)
    )
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.75)
        if close:
            hints.append(f"{name} (did you mean {known[close[0]]}?)")
        elif name.lower().startswith("kafka."):
            hints.append(f"{name} (a Kafka client setting: there is no broker; only kafka.isolation.level and "
                         "kafka.exclude.internal.topics are read)")
        else:
            hints.append(name)
    raise ValueError(
        f"kafka-log: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
        f"valid options: {', '.join(OPTIONS)}"
    )


def _json(opts: Mapping[str, str], name: str) -> Any:
    raw = opts[name.lower()]
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {name} is not valid JSON ({exc.msg} at char {exc.pos}): {raw!r}") from None


OffsetSpec = int | dict[str, dict[int, int]]  # EARLIEST / LATEST, or {topic: {partition: offset}}


def _offset_spec(opts: Mapping[str, str], name: str, default: int) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    low = raw.strip().lower()
    if low == "earliest":
        return EARLIEST
    if low == "latest":
        return LATEST
    parsed = _json(opts, name)
    if not isinstance(parsed, dict):
        raise ValueError(f'option {name} must be "earliest", "latest" or {{"topic": {{"0": offset}}}}, got {raw!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise ValueError(f"option {name}: topic {topic!r} needs an object of partition: offset")
        out[topic] = {int(p): int(o) for p, o in parts.items()}
    return out


def _timestamps_json(opts: Mapping[str, str], name: str) -> dict[str, dict[int, int]] | None:
    if name.lower() not in opts:
        return None
    parsed = _json(opts, name)
    if not isinstance(parsed, dict):
        raise ValueError(f'option {name} must be {{"topic": {{"0": timestamp}}}}')
    return {t: {int(p): int(ts) for p, ts in parts.items()} for t, parts in parsed.items()}


@dataclass(frozen=True)
class Options:
    """The data source's options, parsed and checked once (on the driver).

    Names and meanings are those of Spark's Kafka source where it has them; see
    :mod:`kbatch.spark` for the list.
    """

    path: str
    assign: dict[str, list[int]] | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    starting: OffsetSpec = EARLIEST
    ending: OffsetSpec = LATEST
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_partition: int = DEFAULT_MAX_PARTITION_BYTES
    fail_on_data_loss: bool = True
    isolation_level: str = "read_uncommitted"
    verify_crc: bool = True
    include_headers: bool = False
    extra_columns: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    streaming: bool = False
    recursive: bool = False
    replicas: str = "best"
    include_internal: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def root_columns(self) -> bool:
        """Whether rows carry :data:`ROOT_COLUMN` and :data:`CLUSTER_ID_COLUMN` (:func:`root_columns`)."""
        return self.recursive or self.replicas == "all"

    @property
    def on_corruption(self) -> OnCorruption:
        """How reads treat a corrupt batch: ``failOnDataLoss`` raises, otherwise it is skipped."""
        return "raise" if self.fail_on_data_loss else "skip"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> Options:
        """Parse Spark's option map (keys case-insensitive, values strings).

        Raises
        ------
        ValueError
            An unknown option name (:func:`check_option_names`) or a bad value.
        """
        check_option_names(options)
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise ValueError('kafka-log needs a log.dirs root: spark.read.format("kafka-log").load("/path")')
        chosen = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
        if len(chosen) > 1:
            raise ValueError(f"only one of assign, subscribe, subscribePattern may be given, got {chosen}")
        assign = None
        if "assign" in opts:
            parsed = _json(opts, "assign")
            if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
                raise ValueError('option assign must be like {"topicA": [0, 1], "topicB": [2]}')
            assign = {str(t): [int(p) for p in ps] for t, ps in parsed.items()}
        subscribe = None
        if "subscribe" in opts:
            subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise ValueError("option subscribe names no topic")
        pattern = opts.get("subscribepattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"option subscribePattern is not a valid regular expression: {exc}") from None
        isolation = opts.get("isolationlevel", opts.get("kafka.isolation.level", "read_uncommitted")).lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolationLevel must be read_uncommitted or read_committed, got {isolation!r}")
        starting = _offset_spec(opts, "startingOffsets", LATEST if streaming else EARLIEST)
        ending = _offset_spec(opts, "endingOffsets", LATEST)
        if streaming and "endingoffsets" in opts:
            raise ValueError("endingOffsets is for batch queries; a stream follows the log")
        if not streaming:
            # Spark's own checks for batch queries
            if starting == LATEST or (
                isinstance(starting, dict) and any(LATEST in p.values() for p in starting.values())
            ):
                raise ValueError("startingOffsets can't be latest (-1) for batch queries")
            if ending == EARLIEST or (
                isinstance(ending, dict) and any(EARLIEST in p.values() for p in ending.values())
            ):
                raise ValueError("endingOffsets can't be earliest (-2) for batch queries")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise ValueError(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        min_parts = _int(opts, "minPartitions", None, 1)
        max_records = _int(opts, "maxRecordsPerPartition", None, 1)
        if "maxpartitionbytes" in opts and "maxbytesperpartition" in opts:
            raise ValueError("give maxPartitionBytes or its older name maxBytesPerPartition, not both")
        split_bytes = _bytes(opts, "maxPartitionBytes") or _bytes(opts, "maxBytesPerPartition")
        max_offsets = _int(opts, "maxOffsetsPerTrigger", None, 1)
        min_offsets = _int(opts, "minOffsetsPerTrigger", None, 1)
        if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
            raise ValueError(
                f"minOffsetsPerTrigger ({min_offsets}) is higher than maxOffsetsPerTrigger ({max_offsets})"
            )
        return cls(
            path=path,
            assign=assign,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            starting=starting,
            ending=ending,
            starting_timestamp=_int(opts, "startingTimestamp", None),
            ending_timestamp=_int(opts, "endingTimestamp", None),
            starting_by_timestamp=_timestamps_json(opts, "startingOffsetsByTimestamp"),
            ending_by_timestamp=_timestamps_json(opts, "endingOffsetsByTimestamp"),
            timestamp_strategy=strategy,
            min_partitions=min_parts,
            max_records_per_partition=max_records,
            max_bytes_per_partition=split_bytes or DEFAULT_MAX_PARTITION_BYTES,
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            isolation_level=isolation,
            verify_crc=_bool(opts, "verifyCrc", True),
            include_headers=_bool(opts, "includeHeaders", False),
            extra_columns=_bool(opts, "extraColumns", False),
            batch_rows=_int(opts, "maxRecordsPerBatch", DEFAULT_BATCH_ROWS, 1) or DEFAULT_BATCH_ROWS,
            batch_bytes=_int(opts, "maxBytesPerBatch", DEFAULT_BATCH_BYTES, 1) or DEFAULT_BATCH_BYTES,
            max_offsets_per_trigger=max_offsets,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=_millis(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            streaming=streaming,
            recursive=_bool(opts, "recursiveFileLookup", False),
            replicas=_replicas_option(opts, streaming),
            include_internal=_include_internal(opts),
            storage_options=parse_options(
                f"{k[len(STORAGE_PREFIX):]}={v}" for k, v in opts.items() if k.startswith(STORAGE_PREFIX)
            ),
            raw=opts,
        )


# ---------------------------------------------------------------------------------------------
# Which partition directories


def _replicas_option(opts: Mapping[str, str], streaming: bool) -> str:
    value = _choice(opts, "replicas", ("best", "all"), "best")
    if value == "all" and streaming:
        raise ValueError("option replicas=all is for batch reads: a stream's offsets name one copy per partition")
    return value


def _include_internal(opts: Mapping[str, str]) -> bool:
    """``includeInternalTopics``, or Kafka's consumer setting ``kafka.exclude.internal.topics``
    (its opposite): whether a pattern subscription (or none) reads the internal topics too."""
    if "includeinternaltopics" in opts and "kafka.exclude.internal.topics" in opts:
        raise ValueError("give includeInternalTopics or kafka.exclude.internal.topics, not both")
    if "kafka.exclude.internal.topics" in opts:
        return not _bool(opts, "kafka.exclude.internal.topics", True)
    return _bool(opts, "includeInternalTopics", False)


def _choice(opts: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = opts.get(name.lower(), default).strip().lower()
    if value not in allowed:
        raise ValueError(f"option {name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def root_columns(options: Mapping[str, str]) -> bool:
    """Whether a read with these (raw, Spark) options gives the columns :data:`ROOT_COLUMN` and
    :data:`CLUSTER_ID_COLUMN`: with ``recursiveFileLookup`` or ``replicas=all``.

    A search at any depth may find logs of several roots named alike (replicas, or different
    logs: another cluster, a topic created again) and reads each different log; the columns
    say which root and cluster each row is from. They are there whatever the search finds, so
    the schema follows from the options alone. A read of one root has neither.

    >>> root_columns({"recursiveFileLookup": "true"}), root_columns({"path": "/data"})
    (True, False)
    """
    opts = {str(k).lower(): str(v).strip().lower() for k, v in options.items()}
    return opts.get("recursivefilelookup", "false") in _TRUE or opts.get("replicas", "best") == "all"


def _is_partition_dir(path: Path) -> bool:
    return path.is_dir() and any(p.suffix == ".log" for p in path.iterdir())


class Wanted:
    """``topic in Wanted(opts)``: whether the options select a topic (``assign``, ``subscribe``,
    else ``subscribePattern`` or every topic, Kafka's internal ones only with
    ``includeInternalTopics``). The search opens no other topic's directories, so it neither
    notes nor compares the replicas of a topic it does not read."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._rx = re.compile(opts.subscribe_pattern if opts.subscribe_pattern is not None else ".*")

    def __contains__(self, topic: object) -> bool:
        o = self.opts
        if not isinstance(topic, str):
            return False
        if o.assign is not None:
            return topic in o.assign
        if o.subscribe is not None:
            return topic in o.subscribe
        return (o.include_internal or topic not in INTERNAL_TOPICS) and bool(self._rx.fullmatch(topic))


def _open_root(opts: Options, notes: list[str] | None = None, wanted: Container[str] | None = None) -> list[LogDir]:
    """The partition directories under ``opts.path`` of the topics ``wanted`` holds (all without):
    a local path as before; a URL (``s3://``, ...) listed once, with ``storage.*`` options;
    ``recursiveFileLookup``: at any depth, every different log and one replica of each
    (``replicas``). Replicas that disagree raise (``failOnDataLoss``) or are noted. Notes go to
    ``notes``, else are logged as warnings."""
    try:
        if opts.recursive or is_remote(opts.path):
            said: list[str] = []
            try:
                logs = open_logs(opts.path, wanted, notes=said, recursive=opts.recursive, replicas=opts.replicas,  # type: ignore[arg-type]
                                 on_disagreement="raise" if opts.fail_on_data_loss else "note",
                                 storage_options=opts.storage_options or None)
            except LayoutError as exc:
                if exc.deeper:
                    raise
                logs = []  # a partition directory, not a root
            if notes is not None:
                notes.extend(said)
            else:
                for note in said:
                    logger.warning("%s", note)
            if logs or opts.recursive:
                return logs
            # not a root: one partition directory?
            one = open_log(opts.path, storage_options=opts.storage_options or None)
            if not one.segments:
                raise FileNotFoundError(f"no partition directory under {opts.path} (and it holds no segment)")
            return [one]
        root = Path(opts.path)
        if not root.exists():
            raise FileNotFoundError(f"no such log directory: {root}")
        return [open_log(root)] if _is_partition_dir(root) else open_logs(root, wanted)
    except LayoutError as exc:
        if not exc.deeper:
            raise
        raise logs_deeper(exc.url, exc.deeper, "the option recursiveFileLookup=true") from None


def select_logs(opts: Options, notes: list[str] | None = None) -> list[LogDir]:
    """Open the partition directories the options select, by topic then partition.

    ``path`` may be a ``log.dirs`` root or one partition directory. Without ``assign``,
    ``subscribe`` or ``subscribePattern`` every topic is read except Kafka's internal ones
    (``__consumer_offsets``, ``__transaction_state``, ...), as a pattern subscription does
    (Kafka's consumer, ``exclude.internal.topics``); naming them in ``subscribe``/``assign``
    reads them, and so does a pattern (or no subscription) with ``includeInternalTopics``.
    ``assign`` of a partition that is not on disk fails as it would against a cluster (unknown
    partition). What the search skipped or chose (replicas, different logs named alike) goes
    to ``notes``, else is logged. A folder with no partition directory in it but Kafka logs
    deeper down raises :class:`LayoutError` naming them and ``recursiveFileLookup`` (not 0 rows).

    Raises
    ------
    ValueError
        A stream over different logs named alike (its offsets name one log per partition).
    ReplicasDisagreeError
        Replicas of one log that disagree, with ``failOnDataLoss``.
    LayoutError
        No partition directory where one was expected (the message says what is there).
    """
    root = opts.path
    logs = _open_root(opts, notes, Wanted(opts))
    if opts.streaming and len({(d.topic, d.partition) for d in logs}) < len(logs):
        twice = sorted({f"{d.topic}-{d.partition}" for d in logs
                        if sum((e.topic, e.partition) == (d.topic, d.partition) for e in logs) > 1})
        roots = sorted({d.root for d in logs if f"{d.topic}-{d.partition}" in twice})
        for d in logs:
            d.close()
        raise ValueError(
            f"{', '.join(twice)}: different logs under one name in {', '.join(roots)} (other clusters or "
            "topic ids): a stream's offsets name one log per partition; read each root in its own stream"
        )
    if opts.assign is not None:
        have = {(d.topic, d.partition) for d in logs}
        missing = [(t, p) for t, ps in opts.assign.items() for p in ps if (t, p) not in have]
        if missing:
            raise ValueError(f"assign names partitions that are not under {root}: {missing}")
        wanted = {(t, p) for t, ps in opts.assign.items() for p in ps}
        chosen = [d for d in logs if (d.topic, d.partition) in wanted]
    else:
        chosen = [d for d in logs if d.topic in Wanted(opts)]
    for d in logs:
        if d not in chosen:
            d.close()
    return chosen


# ---------------------------------------------------------------------------------------------
# Offsets


def latest_offset(log: LogDir, isolation_level: str, on_corruption: OnCorruption = "raise") -> int:
    """The log end offset, or under read_committed the last stable offset (Kafka's ``latest``)."""
    end = log.next_offset
    if isolation_level == "read_committed":
        _, lso = log.transactions(on_corruption)
        if lso is not None:
            end = min(end, lso)
    return end


def _specific(spec: dict[str, dict[int, int]], log: LogDir, name: str) -> int | None:
    parts = spec.get(log.topic)
    if parts is None or log.partition not in parts:
        return None
    return parts[log.partition]


def resolve_range(log: LogDir, opts: Options) -> tuple[int, int]:
    """``[start, end)`` offsets of one partition for a batch query, Spark's rules applied.

    Precedence as in Spark: ``startingTimestamp`` > ``startingOffsetsByTimestamp`` >
    ``startingOffsets`` (and the same for the ending options).

    Raises
    ------
    ValueError
        An offset before the log start with ``failOnDataLoss`` (else the log start is
        used), a starting timestamp no record reaches with
        ``startingOffsetsByTimestampStrategy=error``, a partition missing from a
        specific ``startingOffsets``, or a start after the end.
    """
    earliest = log.log_start_offset
    latest = latest_offset(log, opts.isolation_level, opts.on_corruption)
    where = f"{log.topic}-{log.partition}"

    def by_timestamp(ts: int, starting: bool) -> int:
        found = log.offset_for_timestamp(ts, on_corruption=opts.on_corruption)
        if found is None:
            if starting and opts.timestamp_strategy == "error":
                raise ValueError(
                    f"{where}: no record has a timestamp >= {ts} (startingOffsetsByTimestampStrategy=error; "
                    "use latest to start at the end instead)"
                )
            return latest
        return min(found, latest)

    start: int
    if opts.starting_timestamp is not None:
        start = by_timestamp(opts.starting_timestamp, True)
    elif opts.starting_by_timestamp is not None and _specific(opts.starting_by_timestamp, log, "") is not None:
        start = by_timestamp(_specific(opts.starting_by_timestamp, log, "") or 0, True)
    elif isinstance(opts.starting, dict):
        given = _specific(opts.starting, log, "startingOffsets")
        if given is None:
            raise ValueError(
                f"startingOffsets has specific offsets but none for {where}: give every partition "
                "(-2 earliest, -1 latest)"
            )
        start = earliest if given == EARLIEST else latest if given == LATEST else given
    else:
        start = earliest if opts.starting == EARLIEST else latest

    end: int
    if opts.ending_timestamp is not None:
        end = by_timestamp(opts.ending_timestamp, False)
    elif opts.ending_by_timestamp is not None and _specific(opts.ending_by_timestamp, log, "") is not None:
        end = by_timestamp(_specific(opts.ending_by_timestamp, log, "") or 0, False)
    elif isinstance(opts.ending, dict):
        given = _specific(opts.ending, log, "endingOffsets")
        if given is None:
            raise ValueError(f"endingOffsets has specific offsets but none for {where}: give every partition")
        end = latest if given == LATEST else given
    else:
        end = latest

    if start < earliest:
        if opts.fail_on_data_loss:
            raise ValueError(
                f"{where}: starting offset {start} is before the log start offset {earliest}: the records "
                "were deleted (set failOnDataLoss=false to start at the log start instead)"
            )
        start = earliest
    if end > latest:
        if opts.fail_on_data_loss:
            raise ValueError(f"{where}: ending offset {end} is past the end of the log ({latest})")
        end = latest
    if start > end:
        raise ValueError(f"{where}: starting offset {start} is after the ending offset {end}")
    return start, end


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` in the Kafka source's JSON form ``{"t": {"0": 5}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


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


# ---------------------------------------------------------------------------------------------
# Reading one task


def open_slice(piece: LogSlice, opts: Options) -> LogDir:
    """The partition directory of ``piece`` with only its segments opened (nothing listed).

    Raises
    ------
    ValueError
        A segment of the slice was deleted after planning (retention, compaction) and
        ``failOnDataLoss`` is true; otherwise the loss is logged and the rest is read.
    """
    storage = opts.storage_options or None
    if not piece.segments:
        return open_log(piece.path, storage_options=storage)
    names = piece.segments
    gone = [] if is_remote(piece.path) else [n for n in names if not os.path.exists(os.path.join(piece.path, n))]
    if gone:
        msg = (
            f"{piece.topic}-{piece.partition}: segment{'s' if len(gone) > 1 else ''} {', '.join(gone)} of offsets "
            f"[{piece.start}, {piece.end}) deleted after the query was planned (retention or compaction)"
        )
        if opts.fail_on_data_loss:
            raise ValueError(msg + "; set failOnDataLoss=false to read what is left")
        logger.warning("%s: their records are skipped", msg)
        names = tuple(n for n in names if n not in gone)
    transactions = (list(piece.aborted), piece.last_stable) if opts.isolation_level == "read_committed" else None
    log = open_log(piece.path, segments=names, transactions=transactions, storage_options=storage)
    _check_sizes(piece, log)
    return log


def _check_sizes(piece: LogSlice, log: LogDir) -> None:
    """A segment shorter now than when planned (cut or rewritten since) would lose the records
    past its new end silently: StorageError naming it (it may grow: the active segment)."""
    planned = dict(zip(piece.segments, piece.sizes, strict=False))
    for seg in log.segments:
        was = planned.get(seg.path.name)
        if was is not None and seg.size < was:
            log.close()
            raise StorageError(f"cannot read {seg.url}: {seg.size} bytes, {was} when the query was planned "
                               "(cut or rewritten since)", url=seg.url)


def read_slice(piece: LogSlice, opts: Options, tables: Callable[..., Iterator[RecordTable]] | None = None
               ) -> Iterator[Any]:
    """Yield the records of ``piece`` as ``pyarrow.RecordBatch`` es in the Kafka schema (``tables``:
    the log's tables read by it, as for :func:`kbatch.arrow.log_batches`).

    Opens only the segments the slice names and reads them with :func:`kbatch.arrow.log_batches`
    (the loop ``LogDir.to_arrow`` and ``kbatch convert --engine arrow`` use too). Streams with
    bounded memory (LogDir.iter_tables chunks of at most ``maxBytesPerBatch``; one capped Arrow
    batch converted at a time). With ``failOnDataLoss=false`` corrupt batches are skipped (and
    logged) and an object gone since planning ends the slice with a warning, instead of failing
    the task.
    """
    # Spark runs a task on each core it was given: a parse thread of kbatch's own would
    # only compete with the task next to it.
    set_threads(1)
    try:
        log = open_slice(piece, opts)
    except StorageError as exc:
        if opts.fail_on_data_loss:
            raise
        logger.warning("%s-%s: offsets [%d, %d) not read (failOnDataLoss=false): %s", piece.topic,
                       piece.partition, piece.start, piece.end, exc)
        return

    def lost(_log: LogDir, exc: StorageError) -> None:  # an object gone or cut since planning
        logger.warning("%s-%s: the rest of offsets [%d, %d) not read (failOnDataLoss=false): %s",
                       piece.topic, piece.partition, piece.start, piece.end, exc)

    try:
        yield from read_logs(
            log,
            opts,
            ranges={(log.topic, log.partition): (piece.start, piece.end)},
            lost=None if opts.fail_on_data_loss else lost,
            tables=tables,
        )
    finally:
        log.close()


def read_logs(
    logs: LogDir | Sequence[LogDir],
    opts: Options,
    *,
    ranges: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    lost: Callable[[LogDir, StorageError], None] | None = None,
    progress: Callable[[LogDir, RecordTable | None], None] | None = None,
    tables: Callable[..., Iterator[RecordTable]] | None = None,
) -> Iterator[Any]:
    """The records of ``logs`` as Arrow batches, read as ``opts`` say: :func:`kbatch.arrow.log_batches`.

    The Spark source's tasks (:func:`read_slice`) and ``kbatch convert --engine arrow`` read
    through here: isolation level, ``failOnDataLoss`` (corrupt batches raise or are skipped),
    ``verifyCrc``, ``includeHeaders``, ``extraColumns`` and the batch caps are applied alike.
    ``ranges``, ``lost``, ``progress`` and ``tables`` as for ``log_batches``.
    """
    return log_batches(
        logs,
        ranges=ranges,
        batch_rows=opts.batch_rows,
        batch_bytes=opts.batch_bytes,
        include_headers=opts.include_headers,
        extra_columns=opts.extra_columns,
        lost=lost,
        progress=progress,
        tables=tables,
        read={
            "isolation_level": opts.isolation_level,
            "on_corruption": opts.on_corruption,
            "verify_crc": opts.verify_crc,
            # a chunk of log no larger than a batch: one batch's worth of log held at a time
            "chunk_bytes": min(opts.batch_bytes, 16 << 20),
        },
    )


def read_task(pieces: Sequence[LogSlice], opts: Options,
              tables: Callable[..., Iterator[RecordTable]] | None = None) -> Iterator[Any]:
    """Yield the records of every slice of one task, one slice after the other (with the root
    columns, :attr:`Options.root_columns`, each batch with its slice's root and cluster id;
    ``tables``: how each log's tables are read, as for :func:`kbatch.arrow.log_batches`)."""
    for piece in pieces:
        if opts.root_columns:
            yield from (with_root(b, piece.root, piece.cluster_id) for b in read_slice(piece, opts, tables))
        else:
            yield from read_slice(piece, opts, tables)


def env_pythonpath() -> str:
    """The directory kbatch is imported from (for PYTHONPATH of Spark's Python workers)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
