"""Queries over typed roots in tests: a filter term as a Polars expression, and the eager oracle
(each partition read whole, decoded by :func:`kbatch.values.decode`, as one Polars frame) that a
lazy query's result is compared with after the same filters."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def polars_expr(column: str, op: str, value: Any) -> Any:
    """The term ``(column, op, value)`` of :func:`support.scan_roots.term` as a Polars expression
    (a timestamp in ms compared as the frame's ``Datetime``)."""
    import polars as pl

    def lit(v: Any) -> Any:
        return EPOCH + dt.timedelta(milliseconds=v) if column == "timestamp" else v

    c = pl.col(column)
    if op == "between":
        return c.is_between(lit(value[0]), lit(value[1]))
    if op == "in":
        return c.is_in([lit(v) for v in value])
    return {"=": c.__eq__, "<": c.__lt__, "<=": c.__le__, ">": c.__gt__, ">=": c.__ge__}[op](lit(value))


def sql_term(column: str, op: str, value: Any) -> str:
    """The term ``(column, op, value)`` of :func:`support.scan_roots.term` as DuckDB SQL (a
    timestamp in ms compared as a ``TIMESTAMPTZ``)."""

    def lit(v: Any) -> str:
        if column == "timestamp":
            return f"TIMESTAMPTZ '{(EPOCH + dt.timedelta(milliseconds=v)).isoformat(sep=' ')}'"
        return repr(v)

    name = f'"{column}"'
    if op == "between":
        return f"{name} BETWEEN {lit(value[0])} AND {lit(value[1])}"
    if op == "in":
        return f"{name} IN ({', '.join(lit(v) for v in value)})" if value else "FALSE"
    return f"{name} {op} {lit(value)}"


def eager_frame(root: Path, registry: Any, topic: str, iso: str = "read_uncommitted") -> Any:
    """Every record of ``topic`` under ``root`` read eagerly (``LogDir.to_arrow``), its values
    decoded by ``kbatch.values.decode`` with the latest version of ``<topic>-value`` and
    ``errors="null"``, partitions in order, as a ``polars.DataFrame``."""
    import polars as pl
    import pyarrow as pa

    from kbatch.log import open_logs
    from kbatch.values import decode

    reader = registry.latest(f"{topic}-value")
    parts = [decode(log.to_arrow(isolation_level=iso), registry, "value", reader, "null")
             for log in open_logs(root, [topic])]
    return pl.from_arrow(pa.concat_tables(parts))
