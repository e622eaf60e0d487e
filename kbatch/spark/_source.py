"""The ``kafka-log`` Python data source: batch and streaming readers over a ``log.dirs`` root."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kbatch.spark._plan import (
    LogSlice,
    Options,
    latest_offset,
    offsets_json,
    plan_slices,
    read_slice,
    resolve_range,
    select_logs,
)
from kbatch.spark._schema import kafka_struct
from kbatch.spark._views import ViewReader, is_view, parse_view_options, spark_schema

try:  # Spark >= 4.2: Trigger.AvailableNow and read limits for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # Spark 4.0/4.1: Spark wraps the source itself for availableNow

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this Spark has no such interface."""

    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

__all__ = ["KafkaLogDataSource", "LogPartition"]


class LogPartition(InputPartition):
    """A Spark input partition wrapping a :class:`~kbatch.spark._plan.LogSlice`."""

    def __init__(self, piece: LogSlice) -> None:
        super().__init__(piece)
        self.piece = piece

    def __repr__(self) -> str:
        return f"LogPartition({self.piece!r})"


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
        opts = {str(k).lower(): str(v).lower() for k, v in self.options.items()}
        return kafka_struct(
            include_headers=opts.get("includeheaders", "false") in ("true", "1", "yes"),
            extra_columns=opts.get("extracolumns", "false") in ("true", "1", "yes"),
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_view(self.options):
            return ViewReader(parse_view_options(self.options), schema)
        return KafkaLogReader(Options.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if is_view(self.options):
            raise ValueError("kafka-log views (option view) are batch reads only")
        return KafkaLogStreamReader(Options.parse(self.options, streaming=True), schema)


def _check_schema(opts: Options, schema: StructType) -> None:
    want = kafka_struct(include_headers=opts.include_headers, extra_columns=opts.extra_columns)
    if schema.simpleString() != want.simpleString():
        raise ValueError(
            f"kafka-log has a fixed schema ({want.simpleString()}); got a user schema {schema.simpleString()} "
            "(use includeHeaders / extraColumns instead)"
        )


class KafkaLogReader(DataSourceReader):
    """Batch reader: one partition per segment, large segments split at batch boundaries."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        _check_schema(opts, schema)
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        logs = select_logs(self.opts)
        try:
            ranges = {(log.topic, log.partition): resolve_range(log, self.opts) for log in logs}
            pieces = plan_slices(logs, ranges, self.opts)
        finally:
            for log in logs:
                log.close()
        return [LogPartition(p) for p in pieces] or [LogPartition(LogSlice("", "", -1, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        piece: LogSlice = partition.piece  # type: ignore[attr-defined]
        if not piece.path:
            return iter(())
        return read_slice(piece, self.opts)


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader following a live log directory (new batches, segments and partitions).

    Offsets are the Kafka source's JSON: ``{"topic": {"0": next_offset}}``. New partitions
    start at their earliest offset, as in Spark. ``maxOffsetsPerTrigger`` caps a
    micro-batch (spread over partitions in proportion to their backlog);
    ``trigger(availableNow=True)`` reads up to the end seen when the query starts.
    """

    def __init__(self, opts: Options, schema: StructType) -> None:
        _check_schema(opts, schema)
        self.opts = opts
        self._target: dict[str, dict[str, int]] | None = None

    def _latest(self) -> dict[str, dict[str, int]]:
        logs = select_logs(self.opts)
        try:
            return offsets_json({(d.topic, d.partition): latest_offset(d, self.opts.isolation_level) for d in logs})
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

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, dict[str, int]]:
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
        max_rows = getattr(limit, "max_rows", None) if limit is not None else self.opts.max_offsets_per_trigger
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            max_rows = None
        if max_rows and start:
            latest = _rate_limit(start, latest, int(max_rows))
        return latest

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

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
                ranges[(d.topic, d.partition)] = (lo, max(lo, hi))
            chosen = [d for d in logs if (d.topic, d.partition) in ranges]
            pieces = plan_slices(chosen, ranges, self.opts)
        finally:
            for d in logs:
                d.close()
        return [LogPartition(p) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_slice(partition.piece, self.opts)  # type: ignore[attr-defined]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the log is read, never consumed."""


def _batchish(opts: Options) -> Options:
    """The options with a batch query's ending (latest), to resolve a stream's start."""
    from dataclasses import replace

    return replace(opts, ending=-1, ending_timestamp=None, ending_by_timestamp=None)


def _rate_limit(start: dict[str, Any], latest: dict[str, dict[str, int]], max_rows: int) -> dict[str, dict[str, int]]:
    lags = {}
    for t, parts in latest.items():
        for p, hi in parts.items():
            lo = int(start.get(t, {}).get(p, hi))
            lags[(t, p)] = (lo, max(0, hi - lo))
    total = sum(lag for _, lag in lags.values())
    if total <= max_rows:
        return latest
    out: dict[str, dict[str, int]] = {}
    for (t, p), (lo, lag) in lags.items():
        out.setdefault(t, {})[p] = lo + (lag * max_rows) // total
    return out
