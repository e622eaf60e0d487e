"""A :class:`~kbatch.RecordTable` as Arrow: one table (:func:`to_arrow`), capped record batches
(:func:`to_record_batches`), an Arrow C stream (:class:`ArrowStream`), pandas and Polars frames.

What each binary layout copies, and the schema, are :mod:`kbatch.arrow`'s documentation (the
public face of these functions); the arrays themselves are built by :mod:`._arrow_columns`.

>>> import kbatch
>>> at = to_arrow(kbatch.decode(kbatch.encode([b"v0", None])), topic="events", partition=3)
>>> at.column("value").to_pylist(), at.column("partition").to_pylist()
([b'v0', None], [3, 3])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ._arrow_columns import batch_bounds, kafka_schema, record_columns
from ._columns import BINARY_KINDS, BinaryKind, RecordColumns
from ._fromarrow import require_pyarrow

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]
    import polars as pl
    import pyarrow as pa

#: Default caps of one Arrow record batch (rows, and key + value + header bytes).
DEFAULT_BATCH_ROWS = 65_536
DEFAULT_BATCH_BYTES = 64 << 20


def _check(binary: str, partition: int | None) -> None:
    if binary not in BINARY_KINDS:
        raise ValueError(f"binary must be one of {list(BINARY_KINDS)}, got {binary!r}")
    if partition is not None and not -(2**31) <= int(partition) < 2**31:
        raise ValueError(f"partition must fit an int32, got {partition}")


def to_arrow(
    table: RecordColumns,
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
    binary: BinaryKind = "binary",
) -> pa.Table:
    """Convert a :class:`~kbatch.RecordTable` into a :class:`pyarrow.Table` (Spark's Kafka schema).

    Parameters
    ----------
    table : RecordColumns
        Decoded records (``kbatch.decode``, ``LogDir.read``).
    topic : str, optional
        Filled into every row's ``topic``; default the table's own
        (``table.topic``: known for tables read from a partition directory),
        else null.
    partition : int, optional
        Filled into every row's ``partition``; default ``table.partition``, else null.
    include_headers : bool, default True
        Add the ``headers`` column (null for records without headers).
    extra_columns : bool, default False
        Add ``leaderEpoch``, ``producerId``, ``producerEpoch``, ``sequence``,
        ``isTransactional``.
    binary : {"binary", "large_binary", "binary_view"}, default "binary"
        Layout of the byte columns: ``binary_view`` copies no bytes (views into
        ``table.data``); ``binary`` (Spark's) and ``large_binary`` copy them once.

    Returns
    -------
    pyarrow.Table
        Schema :func:`kafka_schema` with the same options; one chunk.

    Examples
    --------
    >>> import kbatch
    >>> t = kbatch.decode(kbatch.encode([b"a", b"b"], base_offset=7))
    >>> to_arrow(t, extra_columns=True).select(["offset", "sequence"]).to_pylist()
    [{'offset': 7, 'sequence': -1}, {'offset': 8, 'sequence': -1}]
    """
    _check(binary, partition)
    pa = require_pyarrow()
    schema = kafka_schema(include_headers=include_headers, extra_columns=extra_columns, binary=binary)
    cols = record_columns(
        table,
        table.records,
        topic=topic,
        partition=partition,
        include_headers=include_headers,
        extra_columns=extra_columns,
        binary=binary,
    )
    return pa.Table.from_arrays(cols, schema=schema)


def to_record_batches(
    table: RecordColumns,
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
    binary: BinaryKind = "binary",
    max_rows: int = DEFAULT_BATCH_ROWS,
    max_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Yield :func:`to_arrow`'s rows as :class:`pyarrow.RecordBatch` es, each capped in size.

    Each batch holds at most ``max_rows`` records and, unless one record alone is larger,
    at most ``max_bytes`` of key, value and header bytes (plus 32 bytes per record and 16
    per header for offsets and fixed-width columns). Batches are converted one at a
    time, so a consumer that drops them holds one batch's copy at a time.

    Examples
    --------
    >>> import kbatch
    >>> t = kbatch.decode(kbatch.encode([b"x" * 100] * 10))
    >>> [b.num_rows for b in to_record_batches(t, max_rows=4)]
    [4, 4, 2]
    >>> [b.num_rows for b in to_record_batches(t, max_bytes=300)]
    [2, 2, 2, 2, 2]
    """
    _check(binary, partition)
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be >= 1")
    pa = require_pyarrow()
    schema = kafka_schema(include_headers=include_headers, extra_columns=extra_columns, binary=binary)
    records = table.records
    if len(records) <= max_rows and max_bytes >= DEFAULT_BATCH_BYTES and len(table.data) <= max_bytes:
        bounds = [(0, len(records))] if len(records) else []
    else:
        bounds = batch_bounds(table, records, include_headers, max_rows, max_bytes)
    for start, end in bounds:
        cols = record_columns(
            table,
            records[start:end],
            topic=topic,
            partition=partition,
            include_headers=include_headers,
            extra_columns=extra_columns,
            binary=binary,
        )
        yield pa.RecordBatch.from_arrays(cols, schema=schema)


class ArrowStream:
    """An Arrow C stream (PyCapsule interface) over one or many RecordTables.

    Anything that reads ``__arrow_c_stream__`` takes it directly: ``polars.DataFrame(s)``,
    ``duckdb.sql("select ... from s")``, ``pyarrow.table(s)``,
    ``pyarrow.RecordBatchReader.from_stream(s)``. Tables are converted lazily, one capped
    record batch at a time (see :func:`to_record_batches`), so an iterator of tables (e.g.
    ``LogDir.iter_tables(...)``) streams with bounded memory. An iterator can be consumed
    once; a single table or a list any number of times.

    Parameters
    ----------
    tables : RecordTable or iterable of RecordTable
    topic, partition, include_headers, extra_columns, binary
        As for :func:`to_arrow`.
    max_rows, max_bytes : int
        Caps of each record batch.

    Examples
    --------
    >>> import kbatch, pyarrow as pa
    >>> t = kbatch.decode(kbatch.encode([b"a", b"b", b"c"]))
    >>> s = ArrowStream(t, topic="t", max_rows=2)
    >>> pa.table(s).num_rows, [b.num_rows for b in pa.RecordBatchReader.from_stream(s)]
    (3, [2, 1])
    """

    def __init__(
        self,
        tables: RecordColumns | Iterable[RecordColumns],
        *,
        topic: str | None = None,
        partition: int | None = None,
        include_headers: bool = True,
        extra_columns: bool = False,
        binary: BinaryKind = "binary",
        max_rows: int = DEFAULT_BATCH_ROWS,
        max_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> None:
        _check(binary, partition)
        # one table (anything with a RecordTable's columns) or an iterable of them
        self._tables: Iterable[RecordColumns] = [tables] if isinstance(tables, RecordColumns) else tables
        self.options: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "include_headers": include_headers,
            "extra_columns": extra_columns,
            "binary": binary,
            "max_rows": max_rows,
            "max_bytes": max_bytes,
        }

    @property
    def schema(self) -> pa.Schema:
        """The stream's Arrow schema (:func:`kafka_schema`)."""
        o = self.options
        return kafka_schema(include_headers=o["include_headers"], extra_columns=o["extra_columns"], binary=o["binary"])

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for table in self._tables:
            yield from to_record_batches(table, **self.options)

    def to_reader(self) -> pa.RecordBatchReader:
        """Return a :class:`pyarrow.RecordBatchReader` over the stream."""
        return require_pyarrow().RecordBatchReader.from_batches(self.schema, iter(self))

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Export the stream as an ``ArrowArrayStream`` PyCapsule (Arrow PyCapsule interface)."""
        return self.to_reader().__arrow_c_stream__(requested_schema)



def arrow_c_stream(table: RecordColumns, requested_schema: object | None = None, **options: Any) -> object:
    """``RecordTable.__arrow_c_stream__``: the table as an ``ArrowArrayStream`` PyCapsule.

    ``options`` are :class:`ArrowStream`'s (default: Spark's schema, headers included,
    topic and partition the table's own, null when unknown).
    """
    return ArrowStream(table, **options).__arrow_c_stream__(requested_schema)


def to_pandas(
    table: RecordColumns,
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
    arrow_dtypes: bool = True,
) -> pd.DataFrame:
    """Convert a :class:`~kbatch.RecordTable` into a :class:`pandas.DataFrame`.

    With ``arrow_dtypes`` (the default) every column is a ``pandas.ArrowDtype`` over
    :func:`to_arrow`'s arrays (bytes stay in Arrow buffers, no Python object per record);
    otherwise pandas' NumPy dtypes (``object`` columns of bytes, ``datetime64[us, UTC]``).

    Examples
    --------
    >>> import kbatch
    >>> df = to_pandas(kbatch.decode(kbatch.encode([b"a", None])), topic="t")
    >>> str(df.dtypes["value"]), df["value"].isna().tolist()
    ('binary[pyarrow]', [False, True])
    """
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover
        raise ImportError("to_pandas needs pandas: pip install 'kbatch[pandas]'") from exc
    at = to_arrow(table, topic=topic, partition=partition, include_headers=include_headers, extra_columns=extra_columns)
    df: pd.DataFrame = at.to_pandas(types_mapper=pd.ArrowDtype) if arrow_dtypes else at.to_pandas()
    return df


def to_polars(
    table: RecordColumns,
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
) -> pl.DataFrame:
    """Convert a :class:`~kbatch.RecordTable` into a :class:`polars.DataFrame`.

    Built from ``binary_view`` arrays, Polars' own layout, so key, value and header bytes
    are not copied: the frame references ``table.data``. Columns are Spark's Kafka schema
    (``Binary``, ``String``, ``Int32``, ``Int64``, ``Datetime("us", "UTC")``,
    ``List(Struct)``).

    Examples
    --------
    >>> import kbatch
    >>> df = to_polars(kbatch.decode(kbatch.encode([b"a", None])), partition=0)
    >>> df["value"].to_list(), df["partition"].to_list()
    ([b'a', None], [0, 0])
    """
    try:
        import polars as pl
    except ImportError as exc:  # pragma: no cover
        raise ImportError("to_polars needs polars: pip install polars") from exc
    at = to_arrow(
        table,
        topic=topic,
        partition=partition,
        include_headers=include_headers,
        extra_columns=extra_columns,
        binary="binary_view",
    )
    out = pl.from_arrow(at)
    assert isinstance(out, pl.DataFrame)
    return out
