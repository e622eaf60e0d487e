"""Which partitions a read takes and which offsets of each: the partition directories the options
select under a ``log.dirs`` root (:func:`select_logs`; a URL, a partition directory, or at any depth
with ``recursiveFileLookup``), and each one's ``[start, end)`` offsets by Spark's rules
(:func:`resolve_range`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Mapping
from pathlib import Path

from kbatch.errors import LayoutError
from kbatch.log import LogDir, OnCorruption, logs_deeper, open_log, open_logs
from kbatch.storage import is_remote

from ._options import EARLIEST, LATEST, Options

__all__ = [
    "INTERNAL_TOPICS",
    "Wanted",
    "latest_offset",
    "offsets_json",
    "resolve_range",
    "select_logs",
]

logger = logging.getLogger("kbatch.spark")

#: Topics a pattern subscription leaves out, as Kafka's consumer does (exclude.internal.topics).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"})


# ---------------------------------------------------------------------------------------------
# Which partition directories


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
