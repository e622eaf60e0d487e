"""Spark filters pushed into the ``kafka-log`` source: :func:`translate` and :func:`narrow`.

PySpark 4.1+ hands a Python data source the filters of a query (``DataSourceReader.pushFilters``,
when ``spark.sql.python.filterPushdown.enabled`` is true). Those on ``topic``, ``partition``,
``offset`` and ``timestamp`` (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``) become
:mod:`kbatch.log._predicate` terms, and the planner narrows each partition's offset range with them
before cutting it into tasks: a partition whose topic or partition fails a term is not read;
offset bounds cut the range; a timestamp lower bound ``T`` starts it at the first offset whose
record timestamp is >= ``T`` (found by a one-row :func:`kbatch.log._scan.scan_logs`, which skips
segments and batches by their headers' max timestamps), which no row with a timestamp >= ``T``
precedes; and where the segments' time indexes (kept by earlier queries' tasks, or ``kbatch
index``) rule out the batches after the window, the range ends with the last batch they do not
rule out (:func:`kbatch.log._scan.window_end`), so a repeated question plans only the window's
tasks. Every task then reads its narrowed slice with the same scan (:func:`reader`,
:func:`kbatch.log._scan.scan_tables`): batches skipped by their headers, those past an upper time
bound walked (every record's timestamp read, no row built) and dropped, and only the records
that pass the offset and timestamp terms built (no key, value or header copied for the
others). Spark still evaluates every filter on the rows returned, so the answer is exact.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kbatch.log import (
    COLUMNS,
    FilterError,
    ScanStats,
    Term,
    bounds,
    constant_holds,
    empty,
    normalize,
    scan_logs,
    scan_tables,
    window_end,
)

__all__ = ["narrow", "reader", "translate"]

_OPS = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<", "LessThanOrEqual": "<="}


def _value(column: str, value: Any) -> Any:
    # PySpark gives a TimestampType value as a naive datetime in the process's local time
    if column == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.astimezone(dt.timezone.utc)
    return value


def translate(filters: Sequence[Any]) -> list[Term]:
    """The terms of the Spark ``Filter`` s kbatch can use (the others are ignored here)."""
    terms: list[Term] = []
    for f in filters:
        attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
        if len(attribute) != 1 or attribute[0] not in COLUMNS:
            continue
        column = attribute[0]
        kind = type(f).__name__
        if kind in _OPS:
            term: Any = (column, _OPS[kind], _value(column, f.value))
        elif kind == "In":
            term = (column, "in", [_value(column, v) for v in f.value])
        else:
            continue
        try:
            terms.extend(normalize([term]))
        except FilterError:  # a value of another type (a string compared to offset): Spark's to judge
            continue
    return terms


def narrow(log: Any, start: int, end: int, terms: Sequence[Term], on_corruption: str = "raise",
           index: bool = True, index_dir: str | None = None) -> tuple[int, int]:
    """The part of ``log``'s offsets ``[start, end)`` where rows passing ``terms`` can be (empty:
    start, start); ``index``, ``index_dir``: the time index (:mod:`kbatch.log._timeindex`)."""
    if not terms:
        return start, end
    partition = None if log.partition < 0 else log.partition
    b = bounds(terms)
    if (not constant_holds(terms, "topic", log.topic) or not constant_holds(terms, "partition", partition)
            or any(empty(v) for v in b.values())):
        return start, start
    lo, hi = b["offset"]
    if lo is not None:
        start = max(start, lo)
    if hi is not None:
        end = min(end, hi + 1)
    ts_lo = b["timestamp"][0]
    if ts_lo is not None and start < end:
        # the first offset in the range whose record reaches the bound, by the scan's own rules
        # (segment and batch max timestamps from headers): no row before it can pass
        first = scan_logs([log], ["offset"], [("timestamp", ">=", _from_micros(ts_lo)), ("offset", ">=", start),
                                              ("offset", "<", end)], 1, on_corruption=on_corruption,
                           index=index, index_dir=index_dir).read_all()
        start = int(first.column(0)[0].as_py()) if first.num_rows else end
    if index and start < end and (ts_lo is not None or b["timestamp"][1] is not None):
        # the end: past the last batch the segments' time indexes (kept by earlier queries' tasks)
        # do not rule out (a batch header cannot bound an upper end: its records are out of order)
        end = window_end(log, ts_lo, b["timestamp"][1], start, end, index_dir)
    return start, max(start, end)


def reader(terms: Sequence[Term], stats: ScanStats | None = None, index: bool = True,
           index_dir: str | None = None) -> Callable[..., Iterator[Any]] | None:
    """``tables(log, start_offset=, end_offset=, ...)``: a task's slice of ``log`` read by the scan
    with ``terms`` (:func:`kbatch.log._scan.scan_tables`: batches skipped by their headers or the
    time index, walked past an upper time bound, only the records that pass built), the keyword
    arguments of ``LogDir.iter_tables`` otherwise; None: no ``offset`` or ``timestamp`` term, the
    slice's range already says it all. ``stats`` counts what the scans read and skipped;
    ``index``, ``index_dir``: the time index each task uses and keeps (in its own machine's
    cache folder unless ``index_dir`` names one)."""
    if not any(t[0] in ("offset", "timestamp") for t in terms):
        return None

    def tables(log: Any, start_offset: int | None = None, end_offset: int | None = None, *,
               isolation_level: str = "read_uncommitted", on_corruption: str = "raise", verify_crc: bool = True,
               chunk_bytes: int = 16 << 20) -> Iterator[Any]:
        return scan_tables(log, terms, start_offset, end_offset, isolation_level=isolation_level,
                           on_corruption=on_corruption, verify_crc=verify_crc, chunk_bytes=chunk_bytes,
                           stats=stats, index=index, index_dir=index_dir)

    return tables


def _from_micros(micros: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
