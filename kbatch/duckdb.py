"""DuckDB over Kafka logs with projection and filter pushdown: :func:`register`.

DuckDB reads a registered Polars ``LazyFrame`` by handing it the query's projection and the
filters it can translate into Polars expressions (DuckDB 1.4+/2.x Python sources), and
:func:`kbatch.polars.scan_kafka_log` pushes those into the log scan
(:meth:`kbatch.log.LogDir.scan_records`): segments and batches outside the filter are not
decompressed, columns not selected are not built. Every filter DuckDB keeps is applied by
DuckDB, so the rows are exact. Without Polars, ``con.register(name, log.scan_records(...))``
gives DuckDB an Arrow stream with the filter and columns named up front (no pushdown from
the SQL). Needs ``polars`` and ``duckdb`` (``pip install kbatch[polars] duckdb``).

DuckDB before 2.0 drops a filter on a timestamp column that it means to push into a ``LazyFrame``
(it is neither handed to the scan nor applied afterwards: the query returns every row). There the
view is registered as an Arrow stream instead (read afresh by each query, every filter applied by
DuckDB): exact, without pushdown. :data:`PUSHDOWN` says which this DuckDB gets.

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

import atexit
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from kbatch.polars import scan_batches, scan_kafka_log

if TYPE_CHECKING:  # kbatch.values needs pyarrow
    from kbatch.values import Registry

__all__ = ["PUSHDOWN", "register"]


def _pushdown() -> bool:
    """Whether the installed DuckDB pushes filters into a registered ``LazyFrame`` exactly (2.0 on)."""
    try:
        import duckdb
    except ImportError:
        return False
    major = duckdb.__version__.split(".", 1)[0]
    return major.isdigit() and int(major) >= 2


#: Whether :func:`register` gives this DuckDB the pushdown (DuckDB 2.0 and later), or an Arrow
#: stream that DuckDB filters itself (before 2.0, whose pushdown into a ``LazyFrame`` loses
#: filters on timestamps).
PUSHDOWN = _pushdown()


class _Reads:
    """The reads of every view's stream under way, and their end at the interpreter's exit.

    DuckDB before 2.0 scans a stream through pyarrow's ``Scanner``, which reads ahead in
    pyarrow's threads, also after a query that stopped early (``LIMIT``) is done. A thread still
    inside the stream's Python code when the interpreter finalizes can never take the GIL again,
    and pyarrow's exit waits for it: the process hangs. At exit (:mod:`atexit`, before the
    interpreter finalizes) every stream ends (the next batch asked for is the end) and the exit
    waits for the reads under way.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0
        self.started = False
        self.stopped = False

    def batches(self, read: Iterator[Any]) -> Iterator[Any]:
        """The batches of ``read``, counted while one is read; none once stopped."""
        try:
            while True:
                with self.lock:
                    if self.stopped:
                        return
                    self.busy += 1
                    self.started = True
                try:
                    batch = next(read, None)
                finally:
                    with self.lock:
                        self.busy -= 1
                if batch is None:
                    return
                yield batch
        finally:
            close = getattr(read, "close", None)
            if close is not None:
                close()

    def stop(self, timeout: float = 60.0) -> None:
        """End every stream and wait (up to ``timeout`` seconds) until no read is under way for a while."""
        with self.lock:
            self.stopped = True
            if not self.started:  # no stream was ever read: nothing to wait for
                return
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 3 and time.monotonic() < deadline:
            with self.lock:
                quiet = 0 if self.busy else quiet + 1
            time.sleep(0.01)


_READS = _Reads()
atexit.register(_READS.stop)


class _Stream:
    """The rows of a view as an Arrow stream (the PyCapsule interface), read afresh, in batches,
    each time DuckDB scans the view (:func:`kbatch.polars.scan_batches`, in the thread that asks
    for a batch, no engine of Polars'): DuckDB pushes nothing into it and applies every filter
    itself. DuckDB asks for the stream several times per view and query and reads one; reading
    starts with the first batch. See :class:`_Reads` for how the reads end at exit."""

    def __init__(self, schema: Any, batches: Callable[[], Iterator[Any]]) -> None:
        self.schema = schema
        self.batches = batches

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        import pyarrow as pa

        reader = pa.RecordBatchReader.from_batches(self.schema, _READS.batches(self.batches()))
        return reader.__arrow_c_stream__(requested_schema)


def register(con: Any, name: str, source: Any, *, topic: str | None = None,
             values: Registry | Literal["auto"] | None = None, keys: Registry | Literal["auto"] | None = None,
             errors: Literal["raise", "null"] = "raise", index: bool = True,
             index_dir: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """Register Kafka logs as the view ``name`` of DuckDB connection ``con``, with pushdown.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    name : str
    source : str, PathLike, LogDir or sequence of LogDir
        As :func:`kbatch.polars.scan_kafka_log`.
    topic, values, keys, errors
        Typed values of one topic, as :func:`kbatch.polars.scan_kafka_log`'s: ``value`` the
        struct of subject ``<topic>-value``'s latest schema (``values="auto"``: the root's own
        ``_schemas``), then ``value_schema_id`` and, with ``errors="null"``, ``value_error``.
        Before DuckDB 2.0 (no pushdown) every record of the view is read and decoded by each
        query, whatever its ``WHERE``: with ``errors="raise"`` a bad record anywhere fails the
        query; ``errors="null"`` and ``WHERE value_error IS NULL`` keep the good ones.
    index, index_dir
        The time index of a timestamp filter, as :meth:`kbatch.log.LogDir.scan_records`
        (``index=False``: neither used nor kept).
    **options
        :func:`kbatch.polars.scan_kafka_log`'s others (``isolation_level``, ``stats``, ``fields``:
        only those value fields decoded, the others skipped, ...).

    Returns
    -------
    duckdb.DuckDBPyConnection
        ``con``.
    """
    if PUSHDOWN:
        return con.register(name, scan_kafka_log(source, topic=topic, values=values, keys=keys, errors=errors,
                                                 index=index, index_dir=index_dir, **options))
    # before DuckDB 2.0 nothing is pushed into the scan: every record is read, no time index serves
    return con.register(name, _Stream(*scan_batches(source, topic=topic, values=values, keys=keys, errors=errors,
                                                    **options)))
