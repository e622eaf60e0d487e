"""The ``kafka-log`` Python data source: batch and streaming readers over a ``log.dirs`` root."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StringType, StructType

from kbatch.plan import (
    CLUSTER_ID_COLUMN,
    ROOT_COLUMN,
    LogSlice,
    Options,
    check_option_names,
    latest_offset,
    offsets_json,
    plan_slices,
    plan_tasks,
    range_key,
    read_task,
    resolve_range,
    root_columns,
    select_logs,
)

from ._pushdown import narrow, reader, translate
from ._schema import kafka_struct, options_struct
from ._values import SourceValues, source_values
from ._views import ViewReader, is_view, parse_view_options, spark_schema

try:  # Spark >= 4.2: Trigger.AvailableNow and read limits for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0/4.1: Spark wraps the source itself for availableNow

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this Spark has no such interface."""

    ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]

__all__ = ["KafkaLogDataSource", "LogPartition"]


class LogPartition(InputPartition):
    """A Spark input partition: the :class:`~kbatch.plan.LogSlice` s one task reads."""

    def __init__(self, pieces: Sequence[LogSlice]) -> None:
        super().__init__(tuple(pieces))
        self.pieces = tuple(pieces)

    def __repr__(self) -> str:
        return f"LogPartition({list(self.pieces)!r})"


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafka-log").load(root)``: Kafka log directories as Spark's Kafka source.

    See :mod:`kbatch.spark` for the options.
    """

    @classmethod
    def name(cls) -> str:
        return "kafka-log"

    def schema(self) -> StructType:
        if is_view(self.options):  # Kafka's own state (kbatch.spark._views)
            return spark_schema(parse_view_options(self.options))
        check_option_names(self.options)
        opts = {str(k).lower(): str(v).lower() for k, v in self.options.items()}
        schema = kafka_struct(
            include_headers=opts.get("includeheaders", "false") in ("true", "1", "yes"),
            extra_columns=opts.get("extracolumns", "false") in ("true", "1", "yes"),
        )
        if root_columns(opts):
            schema = schema.add(ROOT_COLUMN, StringType(), True).add(CLUSTER_ID_COLUMN, StringType(), True)
        if "valueformat" not in opts and "keyformat" not in opts:
            return schema
        # which topics, where: the options of a batch or a stream alike (not their offsets)
        where = {k: v for k, v in self.options.items() if str(k).lower() not in _OFFSET_OPTIONS}
        typed = _values(Options.parse(where))
        return schema if typed is None else typed.struct(schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_view(self.options):
            return ViewReader(parse_view_options(self.options), schema)
        opts = Options.parse(self.options)
        values = _values(opts)
        if str(self.options.get("filterPushdown", "false")).lower() in ("true", "1", "yes"):
            return PushdownKafkaLogReader(opts, schema, values)
        return KafkaLogReader(opts, schema, values)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if is_view(self.options):
            raise ValueError("kafka-log views (option view) are batch reads only")
        opts = Options.parse(self.options, streaming=True)
        return KafkaLogStreamReader(opts, schema, _values(opts))


#: Options of a batch query or a stream only, which say nothing of the topics read.
_OFFSET_OPTIONS = frozenset({"startingoffsets", "endingoffsets", "replicas"})


def _values(opts: Options) -> SourceValues | None:
    """The typed values ``valueFormat`` / ``keyFormat`` ask for (:mod:`kbatch.spark._values`); the
    topics read are listed only when a reader schema must come from the topic's subject."""

    def topics() -> list[str]:
        logs = select_logs(opts)
        for log in logs:
            log.close()
        return [log.topic for log in logs]

    return source_values(opts.raw, opts.path, topics, recursive=opts.recursive,
                         storage_options=opts.storage_options or None)


def _check_schema(opts: Options, schema: StructType, typed: SourceValues | None = None) -> None:
    want = options_struct(opts)
    if typed is not None:
        want = typed.struct(want)
    if schema.simpleString() != want.simpleString():
        raise ValueError(
            f"kafka-log has a fixed schema ({want.simpleString()}); got a user schema {schema.simpleString()} "
            "(use includeHeaders / extraColumns / valueFormat instead)"
        )


def _read(pieces: Sequence[LogSlice], opts: Options, typed: SourceValues | None,
          tables: Callable[..., Iterator[Any]] | None = None) -> Iterator[Any]:
    """One task's records (:func:`~kbatch.plan.read_task`; ``tables``: how each log's tables
    are read), their values decoded when asked."""
    batches = read_task(pieces, opts, tables)
    return batches if typed is None else typed.apply(batches)


class KafkaLogReader(DataSourceReader):
    """Batch reader: tasks of about ``maxPartitionBytes`` of log (:func:`~kbatch.plan.plan_tasks`)."""

    def __init__(self, opts: Options, schema: StructType, typed: SourceValues | None = None) -> None:
        _check_schema(opts, schema, typed)
        self.opts = opts
        self.typed = typed

    def partitions(self) -> Sequence[InputPartition]:
        logs = select_logs(self.opts)
        try:
            ranges = {range_key(log, self.opts): self._narrow(log, *resolve_range(log, self.opts)) for log in logs}
            tasks = plan_tasks(plan_slices(logs, ranges, self.opts), self.opts)
        finally:
            for log in logs:
                log.close()
        return [LogPartition(t) for t in tasks] or [LogPartition(())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition.pieces, self.opts, self.typed)  # type: ignore[attr-defined]

    def _narrow(self, log: Any, start: int, end: int) -> tuple[int, int]:
        return start, end


class PushdownKafkaLogReader(KafkaLogReader):
    """:class:`KafkaLogReader` with ``pushFilters`` (option ``filterPushdown``; PySpark 4.1+ with
    ``spark.sql.python.filterPushdown.enabled``, which PySpark requires of a reader that has it):
    filters on topic, partition, offset and timestamp narrow each partition's range before
    planning (:mod:`kbatch.spark._pushdown`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # KafkaLogReader's, whatever they are
        super().__init__(*args, **kwargs)
        self.terms: list[Any] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        self.terms = translate(filters)
        return iter(filters)  # all of them: Spark still filters the rows it is given

    def _narrow(self, log: Any, start: int, end: int) -> tuple[int, int]:
        return narrow(log, start, end, self.terms, self.opts.on_corruption, self.opts.time_index,
                      self.opts.time_index_dir)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # the slice read by the scan with the terms: only the records passing the offset and
        # timestamp terms are built and handed to Spark, which filters them again
        tables = reader(self.terms, index=self.opts.time_index, index_dir=self.opts.time_index_dir)
        return _read(partition.pieces, self.opts, self.typed, tables)  # type: ignore[attr-defined]


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader following a live log directory (new batches, segments and partitions).

    Offsets are the Kafka source's JSON: ``{"topic": {"0": next_offset}}``. New partitions
    start at their earliest offset, as in Spark. ``maxOffsetsPerTrigger`` caps a
    micro-batch (spread over partitions in proportion to their backlog);
    ``trigger(availableNow=True)`` reads up to the end seen when the query starts.
    """

    def __init__(self, opts: Options, schema: StructType, typed: SourceValues | None = None) -> None:
        _check_schema(opts, schema, typed)
        self.opts = opts
        self.typed = typed
        self._target: dict[str, dict[str, int]] | None = None
        self._earliest: dict[str, dict[str, int]] = {}
        self._last_trigger_ms = 0.0  # as Spark's lastTriggerMillis: the first trigger is never delayed

    def _latest(self) -> dict[str, dict[str, int]]:
        logs = select_logs(self.opts)
        try:
            self._earliest = offsets_json({(d.topic, d.partition): d.log_start_offset for d in logs})
            opts = self.opts
            return offsets_json(
                {(d.topic, d.partition): latest_offset(d, opts.isolation_level, opts.on_corruption) for d in logs}
            )
        finally:
            for d in logs:
                d.close()

    def initialOffset(self) -> dict[str, dict[str, int]]:
        logs = select_logs(self.opts)
        try:
            out = {}
            for d in logs:
                start, _ = resolve_range(d, _batchish(self.opts))
                out[(d.topic, d.partition)] = start
            return offsets_json(out)
        finally:
            for d in logs:
                d.close()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The end of the next micro-batch, Spark's Kafka source's rules.

        ``ReadAllAvailable`` (``trigger(availableNow=True)`` on Spark 4.2+): everything.
        Otherwise ``minOffsetsPerTrigger``: no new batch (``start`` returned) while fewer
        offsets than that are waiting, unless ``maxTriggerDelay`` passed since the last batch;
        then ``maxOffsetsPerTrigger``: the offsets spread over partitions in proportion to their
        backlog (a partition with a backlog gets at least one).
        """
        latest = self._latest()
        if self._target is not None:  # availableNow: never past the end seen at the start
            latest = {
                t: {
                    p: min(o, self._target.get(t, {}).get(p, o))
                    for p, o in parts.items()
                    if p in self._target.get(t, {})
                }
                for t, parts in latest.items()
                if t in self._target
            }
            latest = {t: ps for t, ps in latest.items() if ps}
        if not start or (ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable)):
            return latest
        if limit is None:  # Spark 4.0/4.1 pass no limit: the options are the limit
            max_rows, min_rows = self.opts.max_offsets_per_trigger, self.opts.min_offsets_per_trigger
        else:
            max_rows = getattr(limit, "max_rows", None)
            min_rows = getattr(limit, "min_rows", None) or self.opts.min_offsets_per_trigger
        # availableNow must end: it never waits for more records
        if min_rows and self._target is None and self._delay(start, latest, int(min_rows)):
            return start
        if max_rows:
            latest = _rate_limit(start, latest, int(max_rows), self._earliest)
        return latest

    def _delay(self, start: dict[str, Any], latest: dict[str, dict[str, int]], min_rows: int) -> bool:
        """Whether to skip this trigger: fewer than ``min_rows`` new offsets and ``maxTriggerDelay``
        not yet passed since the last batch (Spark's ``delayBatch``)."""
        now = time.time() * 1000.0
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        waiting = sum(
            hi - int(start.get(t, {}).get(p, 0)) for t, parts in latest.items() for p, hi in parts.items()
        )
        if waiting < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def getDefaultReadLimit(self) -> Any:
        if ReadAllAvailable is None:
            return None
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger and ReadMinRows is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        logs = select_logs(self.opts)
        try:
            ranges = {}
            for d in logs:
                hi = end.get(d.topic, {}).get(str(d.partition))
                if hi is None:
                    continue
                lo = start.get(d.topic, {}).get(str(d.partition), d.log_start_offset)
                if lo < d.log_start_offset:
                    if self.opts.fail_on_data_loss:
                        raise ValueError(
                            f"{d.topic}-{d.partition}: offset {lo} was deleted (log start {d.log_start_offset}); "
                            "set failOnDataLoss=false to go on from the log start"
                        )
                    lo = d.log_start_offset
                ranges[range_key(d, self.opts)] = (lo, max(lo, hi))
            chosen = [d for d in logs if range_key(d, self.opts) in ranges]
            tasks = plan_tasks(plan_slices(chosen, ranges, self.opts), self.opts)
        finally:
            for d in logs:
                d.close()
        return [LogPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition.pieces, self.opts, self.typed)  # type: ignore[attr-defined]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the log is read, never consumed."""


def _batchish(opts: Options) -> Options:
    """The options with a batch query's ending (latest), to resolve a stream's start."""
    from dataclasses import replace

    return replace(opts, ending=-1, ending_timestamp=None, ending_by_timestamp=None)


def _rate_limit(
    start: dict[str, Any], latest: dict[str, dict[str, int]], max_rows: int, earliest: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """At most about ``max_rows`` offsets past ``start``, prorated by backlog (Spark's ``rateLimit``).

    A partition new since ``start`` begins at its earliest offset. A share below one offset
    is rounded up (no partition starves), others down; no end passes ``latest``.
    """
    begins: dict[tuple[str, str], int] = {}
    sizes: dict[tuple[str, str], int] = {}
    for t, parts in latest.items():
        for p, hi in parts.items():
            lo = start.get(t, {}).get(p, earliest.get(t, {}).get(p))
            if lo is None:
                continue
            begins[(t, p)] = int(lo)
            if hi - int(lo) > 0:
                sizes[(t, p)] = hi - int(lo)
    total = sum(sizes.values())
    if total < 1:
        return latest
    out: dict[str, dict[str, int]] = {}
    for t, parts in latest.items():
        for p, hi in parts.items():
            size = sizes.get((t, p))
            if size is None:
                out.setdefault(t, {})[p] = hi
                continue
            share = max_rows * (size / total)
            step = math.ceil(share) if share < 1 else math.floor(share)
            out.setdefault(t, {})[p] = min(hi, begins[(t, p)] + step)
    return out
