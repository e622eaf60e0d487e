"""DuckDB over Kafka logs with projection and filter pushdown: :func:`register`.

DuckDB reads a registered Polars ``LazyFrame`` by handing it the query's projection and the
filters it can translate into Polars expressions (DuckDB 1.4+/2.x Python sources), and
:func:`kbatch.polars.scan_kafka_log` pushes those into the log scan
(:meth:`kbatch.log.LogDir.scan_records`): segments and batches outside the filter are not
decompressed, columns not selected are not built. Every filter DuckDB keeps is applied by
DuckDB, so the rows are exact. Without Polars, ``con.register(name, log.scan_records(...))``
gives DuckDB an Arrow stream with the filter and columns named up front (no pushdown from
the SQL). Needs ``polars`` and ``duckdb`` (``pip install kbatch[polars] duckdb``).

>>> import duckdb, kbatch, tempfile
>>> from kbatch.log import LogWriter
>>> root = tempfile.mkdtemp()
>>> with LogWriter(root, "t", 0) as w:
...     _ = w.append(kbatch.encode([b"a", b"b", b"c"]))
>>> con = duckdb.connect()
>>> _ = register(con, "orders", root)
>>> con.sql('SELECT "offset", value FROM orders WHERE "offset" >= 1').fetchall()
[(1, b'b'), (2, b'c')]
"""

from __future__ import annotations

from typing import Any

from kbatch.polars import scan_kafka_log

__all__ = ["register"]


def register(con: Any, name: str, source: Any, **options: Any) -> Any:
    """Register Kafka logs as the view ``name`` of DuckDB connection ``con``, with pushdown.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    name : str
    source : str, PathLike, LogDir or sequence of LogDir
        As :func:`kbatch.polars.scan_kafka_log`.
    **options
        :func:`kbatch.polars.scan_kafka_log`'s (``isolation_level``, ``stats``, ...).

    Returns
    -------
    duckdb.DuckDBPyConnection
        ``con``.
    """
    return con.register(name, scan_kafka_log(source, **options))
