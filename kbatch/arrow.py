"""Kafka records as Arrow, pandas and Polars tables, with Spark's Kafka source columns.

:func:`to_arrow` turns a :class:`~kbatch.RecordTable` into a :class:`pyarrow.Table` with exactly
the schema of Spark's Kafka source (``spark.read.format("kafka")``), so code written against
Kafka DataFrames works unchanged::

    key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32,
    headers list<element: struct<key: string, value: binary>>   (include_headers)
    leaderEpoch int32, producerId int64, producerEpoch int16,
    sequence int32, isTransactional bool                          (extra_columns)

Every field is nullable. ``key``/``value`` are null for null keys/values, ``headers`` is null
for a record without headers (as Spark's source does), ``timestampType`` is Kafka's id (0
CreateTime, 1 LogAppendTime, -1 none: magic 0), the extras are the raw batch fields (-1 =
none, as in the batch header).

Columns are built in one pass over the table's rows by a C kernel (``kbatch.codec._arrowkernels``;
large tables are split into chunks that a helper thread shares when the second core is free),
or with vectorised NumPy when it is not compiled, never with a Python object per record. Which
layouts copy the key/value/header bytes:

``binary="binary_view"``
    **No copy.** Each value is a 16-byte view (length, 4-byte prefix, buffer index, offset)
    into ``table.data`` itself (the caller's buffer or mmap for uncompressed input, kbatch's
    decompression arena otherwise); values of up to 12 bytes are inlined in their view, as
    the format requires. The Arrow arrays keep ``table.data`` alive. Polars' native layout.
``binary="binary"`` (the default: what Spark requires) and ``"large_binary"``
    **One copy** of the bytes, gathered by the kernel: in a Kafka batch every value is
    followed by the next record's framing, so values are never back to back in
    ``table.data``. The one exception is detected and kept zero-copy: when the values
    happen to be contiguous (a single record, or all keys null), the offsets array points
    straight into ``table.data``.

Offsets, timestamps and the other fixed-width columns are always new arrays (RecordTable
stores them row-wise, Arrow column-wise): 4-8 bytes per record each. Constant columns
(``topic``, ``partition``, a ``timestampType`` shared by every batch) are filled without
reading the rows.

The other direction, :func:`from_arrow`, :func:`binary_arrays` and :func:`encode_arrow`
(defined in :mod:`kbatch.codec._fromarrow`, re-exported here), turns Arrow tables, arrays, pandas
Series and NumPy columns back into the flat columns of kbatch's columnar encoder (offsets
into one data buffer, a validity byte per row), without copying the bytes of Arrow
binary/string arrays.

>>> import kbatch
>>> from kbatch.arrow import to_arrow
>>> t = kbatch.decode(kbatch.encode([b"v0", None], keys=[b"k0", b"k1"], timestamps=[1000, 2000],
...                                 headers=[[("h", b"x")], []]))
>>> at = to_arrow(t, topic="events", partition=3)
>>> at.column_names
['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType', 'headers']
>>> at.column("value").to_pylist(), at.column("headers").to_pylist()
([b'v0', None], [[{'key': 'h', 'value': b'x'}], None])
>>> str(at.schema.field("timestamp").type), at.column("timestamp")[1].value
('timestamp[us, tz=UTC]', 2000000)
"""

from kbatch.codec import (
    ArrowStream,
    BinaryColumn,
    BinaryKind,
    arrow_c_stream,
    binary_arrays,
    binary_column,
    encode_arrow,
    from_arrow,
    kafka_schema,
    spark_ddl,
    to_arrow,
    to_pandas,
    to_polars,
    to_record_batches,
)
from kbatch.log import iter_log_arrow, log_to_arrow

__all__ = [
    "ArrowStream",
    "BinaryColumn",
    "BinaryKind",
    "arrow_c_stream",
    "binary_arrays",
    "binary_column",
    "encode_arrow",
    "from_arrow",
    "iter_log_arrow",
    "kafka_schema",
    "log_to_arrow",
    "spark_ddl",
    "to_arrow",
    "to_pandas",
    "to_polars",
    "to_record_batches",
]
