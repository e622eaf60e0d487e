"""``decode_batches``: explode a DataFrame column of raw record batches into Kafka rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kbatch.arrow import kafka_schema, to_arrow
from kbatch.codec import concat, decode
from kbatch.errors import KBatchError

__all__ = ["decode_arrow_batch", "decode_batches"]


def _column_buffer(arr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data buffer (uint8) and each row's [start, end) of a binary Arrow array (nulls empty)."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type in (pa.binary_view(), pa.string_view()) or pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    if arr.type not in (pa.binary(), pa.large_binary(), pa.string(), pa.large_string()):
        raise TypeError(f"the batches column must be binary, got {arr.type}")
    width = np.int64 if arr.type in (pa.large_binary(), pa.large_string()) else np.int32
    _, obuf, dbuf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(obuf, dtype=width)[arr.offset : arr.offset + n + 1].astype(np.int64)
    starts, ends = offsets[:-1].copy(), offsets[1:].copy()
    if arr.null_count:
        null = ~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        ends[null] = starts[null]
    u8 = np.frombuffer(dbuf, dtype=np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
    return u8, starts, ends


def _decode_rows(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, verify_crc: bool) -> tuple[Any, np.ndarray]:
    """Decode every row's batches; returns the RecordTable and each record's row index."""
    n = len(starts)
    if n and np.array_equal(starts[1:], ends[:-1]):
        # Fast path: rows are back to back in the Arrow buffer and batches delimit themselves,
        # so one decode reads them all; right only if every row holds whole batches (checked).
        lo, hi = int(starts[0]), int(ends[-1])
        try:
            table = decode(u8[lo:hi], verify_crc=verify_crc)
        except KBatchError:
            table = None
        if table is not None and table.consumed_bytes == hi - lo:
            pos = table.batches["position"].astype(np.int64)
            size = 12 + table.batches["batch_length"].astype(np.int64)
            row = np.searchsorted(starts - lo, pos, side="right") - 1
            nonempty = ends > starts
            if np.all(pos + size <= ends[row] - lo) and np.all(np.isin(starts[nonempty] - lo, pos)):
                return table, row[table.records["batch"]]
    # Slow path (a row with a partial batch, or garbage): row by row, same errors as decode.
    tables = []
    rows = []
    for i in range(n):
        a, b = int(starts[i]), int(ends[i])
        if b > a:
            t = decode(u8[a:b], verify_crc=verify_crc)
            tables.append(t)
            rows.append(np.full(len(t), i, dtype=np.int64))
    if not tables:
        return decode(b""), np.zeros(0, np.int64)
    return concat(tables), np.concatenate(rows)


def decode_arrow_batch(
    batch: Any,
    column: str = "value",
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
    verify_crc: bool = True,
) -> Any:
    """Explode one ``pyarrow.RecordBatch`` whose ``column`` holds raw record batches.

    Returns a RecordBatch with Spark's Kafka columns followed by the input's other columns,
    repeated for every record of their row. ``topic``/``partition`` columns of the input,
    when present, fill the Kafka ``topic``/``partition`` columns (else the arguments do).
    """
    import pyarrow as pa

    u8, starts, ends = _column_buffer(batch.column(column))
    table, row = _decode_rows(u8, starts, ends, verify_crc)
    kafka = to_arrow(
        table, topic=topic, partition=partition, include_headers=include_headers, extra_columns=extra_columns
    )
    take = pa.array(row, type=pa.int64())
    cols = {name: kafka.column(name).combine_chunks() for name in kafka.column_names}
    names = batch.schema.names
    if "topic" in names:
        cols["topic"] = batch.column("topic").take(take).cast(pa.string())
    if "partition" in names:
        cols["partition"] = batch.column("partition").take(take).cast(pa.int32())
    fields = list(kafka_schema(include_headers=include_headers, extra_columns=extra_columns))
    arrays = [cols[f.name] for f in fields]
    for f in batch.schema:
        if f.name in (column, "topic", "partition"):
            continue
        arrays.append(batch.column(f.name).take(take))
        fields.append(f)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def decode_batches(
    df: Any,
    column: str = "value",
    *,
    topic: str | None = None,
    partition: int | None = None,
    include_headers: bool = True,
    extra_columns: bool = False,
    verify_crc: bool = True,
) -> Any:
    """Explode a DataFrame whose ``column`` holds raw Kafka record batches, with ``mapInArrow``.

    For tables of captured Fetch data or batches stored as Parquet: each row's bytes (one
    or more whole batches, any magic, any codec) become one row per record with Spark's
    Kafka source columns (``key, value, topic, partition, offset, timestamp,
    timestampType[, headers][, extras]``), followed by the DataFrame's other columns carried
    through. Input ``topic``/``partition`` columns fill those Kafka columns.

    Each Arrow batch that Spark hands over is decoded with one :func:`decode` call
    over its whole data buffer when its rows hold whole batches (the usual case), row by
    row otherwise. Spark cuts input batches at ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows (10,000 by default): rows here are record *batches*, so each input Arrow batch
    explodes into up to 10,000 x records-per-batch output rows. Lower that setting (e.g.
    to 100-1000) when batches are large, to keep Python worker memory in check.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    column : str
        The binary column of raw batches.
    topic, partition : optional
        Fill the Kafka columns when the DataFrame has no such columns.
    include_headers, extra_columns : bool
        As for the data source (headers are included by default here).
    verify_crc : bool

    Returns
    -------
    pyspark.sql.DataFrame
    """
    from pyspark.sql.types import IntegerType, StringType, StructType

    from ._schema import kafka_struct  # defers pyspark

    kafka = kafka_struct(include_headers=include_headers, extra_columns=extra_columns)
    if column not in df.columns:
        raise ValueError(f"no column {column!r} in {df.columns}")
    out = StructType(list(kafka.fields))
    taken = set(kafka.fieldNames())
    for f in df.schema.fields:
        if f.name in (column, "topic", "partition"):
            if f.name == "topic" and not isinstance(f.dataType, StringType):
                raise ValueError("a topic column must be a string")
            if (
                f.name == "partition"
                and not isinstance(f.dataType, IntegerType)
                and f.dataType.typeName()
                not in (
                    "long",
                    "short",
                    "byte",
                )
            ):
                raise ValueError("a partition column must be an integer")
            continue
        if f.name in taken:
            raise ValueError(f"column {f.name!r} would clash with the Kafka column of that name: rename it first")
        out.add(f)

    def explode(batches: Iterator[Any]) -> Iterator[Any]:
        for b in batches:
            yield decode_arrow_batch(
                b,
                column,
                topic=topic,
                partition=partition,
                include_headers=include_headers,
                extra_columns=extra_columns,
                verify_crc=verify_crc,
            )

    return df.mapInArrow(explode, out)
