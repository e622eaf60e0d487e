"""The one log -> Arrow loop: record batches of one or many partition directories.

``LogDir.to_arrow`` / ``iter_arrow`` (by :func:`iter_log_arrow`), the Spark source's tasks and
``kbatch convert --engine arrow`` (both by :func:`kbatch.plan.read_logs`) all read a log through
:func:`log_batches`, so that they give the same rows for the same options.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kbatch.codec import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_ROWS,
    BinaryKind,
    kafka_schema,
    require_pyarrow,
    to_record_batches,
)
from kbatch.errors import StorageError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa


def iter_log_arrow(
    logs: Any,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    include_headers: bool = True,
    extra_columns: bool = False,
    binary: BinaryKind = "binary",
    **read: Any,
) -> Iterator[pa.RecordBatch]:
    """``LogDir.iter_arrow``: record batches of one or many partition directories, topic filled in.

    Parameters
    ----------
    logs : LogDir or iterable of LogDir
        E.g. ``open_log(path)`` or ``open_logs(root)``.
    batch_rows, batch_bytes : int
        Caps of each record batch (see :func:`to_record_batches`).
    include_headers, extra_columns, binary
        As for :func:`to_arrow`.
    **read
        ``LogDir.iter_tables`` arguments: ``start_offset``, ``end_offset``,
        ``start_timestamp``, ``end_timestamp``, ``isolation_level``, ``max_records``,
        ``on_corruption``, ``verify_crc``, ``chunk_bytes``.

    Yields
    ------
    pyarrow.RecordBatch
        :func:`kafka_schema` batches, partition after partition, bounded memory.
    """
    return log_batches(
        logs,
        batch_rows=batch_rows,
        batch_bytes=batch_bytes,
        include_headers=include_headers,
        extra_columns=extra_columns,
        binary=binary,
        read=read,
    )


# ---------------------------------------------------------------------------------------------
# The one log -> Arrow batches loop
#
# LogDir.to_arrow / iter_arrow (by iter_log_arrow), the Spark source's tasks (read_slice) and
# ``kbatch convert --engine arrow`` (both by kbatch.plan.read_logs) all read a log through
# log_batches, so that they give the same rows for the same options:
#
#   for each log:    its offsets [start, end) (``ranges``, else ``start_offset``/``end_offset``)
#                    -> LogDir.iter_tables(isolation, on_corruption, verify_crc, chunk_bytes):
#                       read_committed drops aborted batches and stops at the last stable
#                       offset; control batches give no row; a corrupt batch raises or is
#                       skipped and recorded in LogDir.skipped (and logged)
#                    -> to_record_batches(topic, partition, caps)    one capped batch at a time;
#                       batches under 1/JOIN_FRACTION of the caps are joined with the next ones
#                       of the same log (many small segments: few batches, not one each)
#   a StorageError   (an object gone or cut since the log was opened) raises, or with ``lost``
#                    is handed to it and the rest of that log is not read
#   ``progress``     is told of each table once its batches are out, and of the log's end
#
# The loop lives here, below kbatch.log, and knows a LogDir only by its methods: LogDir.to_arrow
# reaches it without importing upward, and kbatch.plan._read imports it down.


#: Batches smaller than 1/JOIN_FRACTION of the caps are joined with the next ones of the same log
#: (a log of many small segments gives one small table per segment; a consumer such as Spark pays
#: per batch).
JOIN_FRACTION = 8


class _Joiner:
    """Holds small record batches of one log until they reach ``rows`` or ``nbytes`` together."""

    def __init__(self, rows: int, nbytes: int) -> None:
        self.rows, self.nbytes = rows, nbytes
        self.held: list[pa.RecordBatch] = []
        self.held_rows = self.held_bytes = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if batch.num_rows >= self.rows or batch.nbytes >= self.nbytes:
            yield from self.flush()
            yield batch  # big enough alone: no copy
            return
        self.held.append(batch)
        self.held_rows += batch.num_rows
        self.held_bytes += batch.nbytes
        if self.held_rows >= self.rows or self.held_bytes >= self.nbytes:
            yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        if len(self.held) == 1:
            yield self.held[0]
        elif self.held:
            yield require_pyarrow().concat_batches(self.held)
        self.held = []
        self.held_rows = self.held_bytes = 0


def log_batches(
    logs: Any,
    *,
    ranges: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    include_headers: bool = True,
    extra_columns: bool = False,
    binary: BinaryKind = "binary",
    lost: Callable[[Any, StorageError], None] | None = None,
    progress: Callable[[Any, Any], None] | None = None,
    read: Mapping[str, Any] | None = None,
    tables: Callable[..., Iterator[Any]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of one or many partition directories: the one loop behind every log -> Arrow read.

    Parameters
    ----------
    logs : LogDir or iterable of LogDir
    ranges : mapping of (topic, partition) to (start, end), optional
        Offsets ``[start, end)`` of each log (instead of ``start_offset`` / ``end_offset``);
        a log whose range is empty is not read.
    batch_rows, batch_bytes, include_headers, extra_columns, binary
        As for :func:`iter_log_arrow`.
    lost : callable, optional
        ``lost(log, error)`` for a :class:`~kbatch.errors.StorageError` met while reading
        ``log``: it may raise; if it returns, the rest of that log is not read. Without it
        the error is raised.
    progress : callable, optional
        ``progress(log, table)`` once each ``RecordTable`` is converted (its rows are yielded
        then, or held to be joined with the next table's until the log ends), and
        ``progress(log, None)`` when a log is done (read, empty, or cut short by ``lost``)
        and all its rows are yielded.
    read : mapping, optional
        ``LogDir.iter_tables`` arguments (``**read`` of :func:`iter_log_arrow`).
    tables : callable, optional
        ``tables(log, **read)``: the ``RecordTable`` s of a log to convert, instead of
        ``log.iter_tables(**read)`` (``read`` with the log's range as ``start_offset`` /
        ``end_offset``): a filtered scan, say, whose tables hold only the records that pass.

    Examples
    --------
    >>> import kbatch, tempfile
    >>> from kbatch.log import LogWriter, open_log
    >>> root = tempfile.mkdtemp()
    >>> with LogWriter(root, "t", 0) as w:
    ...     _ = w.append(kbatch.encode([b"%d" % i for i in range(10)]))
    >>> log = open_log(f"{root}/t-0")
    >>> [b.num_rows for b in log_batches(log, ranges={("t", 0): (2, 9)}, batch_rows=4)]
    [4, 3]
    """
    small = _Joiner(max(batch_rows // JOIN_FRACTION, 1), max(batch_bytes // JOIN_FRACTION, 1))
    for log in [logs] if hasattr(logs, "iter_tables") else logs:
        bounds = None if ranges is None else ranges[(log.topic, log.partition)]
        if bounds is None or bounds[1] > bounds[0]:
            where = dict(read or {})
            if bounds is not None:
                where["start_offset"], where["end_offset"] = bounds
            found = log.iter_tables(**where) if tables is None else tables(log, **where)
            while True:
                try:
                    table = next(found)
                except StopIteration:
                    break
                except StorageError as exc:
                    if lost is None:
                        raise
                    lost(log, exc)
                    break
                for batch in to_record_batches(
                    table,
                    topic=log.topic,
                    partition=log.partition,
                    include_headers=include_headers,
                    extra_columns=extra_columns,
                    binary=binary,
                    max_rows=batch_rows,
                    max_bytes=batch_bytes,
                ):
                    yield from small.add(batch)
                if progress is not None:
                    progress(log, table)
                del table
            yield from small.flush()
        if progress is not None:
            progress(log, None)


def log_to_arrow(
    logs: Any,
    *,
    include_headers: bool = True,
    extra_columns: bool = False,
    binary: BinaryKind = "binary",
    **read: Any,
) -> pa.Table:
    """``LogDir.to_arrow``: one table of one or many partition directories (see :func:`iter_log_arrow`).

    Examples
    --------
    >>> import kbatch, tempfile
    >>> from kbatch.log import LogWriter, open_logs
    >>> root = tempfile.mkdtemp()
    >>> for p in (0, 1):
    ...     with LogWriter(root, "clicks", p) as w:
    ...         _ = w.append(kbatch.encode([b"p%d" % p]))
    >>> log_to_arrow(open_logs(root)).select(["topic", "partition", "value"]).to_pylist()
    [{'topic': 'clicks', 'partition': 0, 'value': b'p0'}, {'topic': 'clicks', 'partition': 1, 'value': b'p1'}]
    """
    pa = require_pyarrow()
    schema = kafka_schema(include_headers=include_headers, extra_columns=extra_columns, binary=binary)
    batches = iter_log_arrow(logs, include_headers=include_headers, extra_columns=extra_columns, binary=binary, **read)
    return pa.Table.from_batches(list(batches), schema=schema)
