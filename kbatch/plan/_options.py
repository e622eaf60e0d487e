"""The options both engines take: the Spark source's ``kafka-log`` options, which ``kbatch convert``
reads by too. Their names (:data:`OPTIONS`, :func:`check_option_names`), the parsers of their values
(sizes, durations, offsets, JSON), :class:`Options`, them parsed and checked once (on the driver), and
:func:`root_columns`, whether the raw options give a read the root columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbatch.codec import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_ROWS
from kbatch.log import OnCorruption
from kbatch.storage import parse_options

__all__ = [
    "EARLIEST",
    "LATEST",
    "DEFAULT_MAX_PARTITION_BYTES",
    "OPTIONS",
    "Options",
    "check_option_names",
    "root_columns",
]

#: Kafka's special offsets in the JSON form of ``startingOffsets``/``endingOffsets``.
EARLIEST = -2
LATEST = -1

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
    "timeIndex",
    "timeIndexDir",
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
    time_index: bool = True
    time_index_dir: str | None = None
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
            time_index=_bool(opts, "timeIndex", True),
            time_index_dir=opts.get("timeindexdir") or None,
            storage_options=parse_options(
                f"{k[len(STORAGE_PREFIX):]}={v}" for k, v in opts.items() if k.startswith(STORAGE_PREFIX)
            ),
            raw=opts,
        )


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
