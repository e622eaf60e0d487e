"""The record-batch codec: Kafka's record formats (RecordBatch v2, legacy message sets v0/v1,
every compression codec, transactions, control batches) to and from NumPy columns and Arrow.

The lowest layer: it imports only the standard library, NumPy, the codec libraries and
``kbatch.errors``/``kbatch._wire``. Its modules, one concern each:

- ``_core`` (Cython, with its ``_core_*.pxi`` parts): framing, CRC-32C, varints, decoding into
  NumPy structured arrays, decompression into a reused arena, the encoder, helper threads;
- ``_arrowkernels`` (Cython): the Arrow arrays of a decoded table in one pass;
- ``_table``: :class:`RecordTable`, the decoded columns and their accessors;
- ``_txn``: transactions (aborted batches, ``read_committed``) and :func:`decode`;
- ``_encode`` (:func:`encode`), ``_legacy`` (magic 0/1 message sets), ``_options`` (argument
  checks);
- ``_compression`` (the codecs in Python, where C does not decompress: picks the codec), one
  module per codec (``_gzip``, ``_snappy``, ``_lz4``, ``_zstd``) and ``_arena`` (the arena they
  decompress into, the errors they share);
- ``_columns`` (the Kafka source's column names and types), ``_arrow_columns`` (arrays of those
  columns), ``_arrow`` (tables, record batches, streams, pandas, Polars), ``_fromarrow`` (Arrow,
  pandas and Polars columns to the encoder's flat columns).

Users import these names from :mod:`kbatch` and :mod:`kbatch.arrow`; this face is for kbatch's
own packages.
"""

from ._arrow import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_ROWS,
    ArrowStream,
    arrow_c_stream,
    to_arrow,
    to_pandas,
    to_polars,
    to_record_batches,
)
from ._arrow_columns import binary_column, kafka_schema, spark_ddl
from ._columns import BINARY_KINDS, HEADERS_COLUMN, BinaryKind, RecordColumns, columns, ddl
from ._core import (
    BATCH_DTYPE,
    HEADER_DTYPE,
    RECORD_DTYPE,
    STAMPS_CORRUPT,
    STAMPS_OK,
    BatchBuilder,
    encode_control,
    get_threads,
    scan,
    set_threads,
    stamps,
)
from ._core import decode as decode_batches  # the compiled decoder: no transaction handling
from ._encode import encode
from ._fromarrow import BinaryColumn, binary_arrays, encode_arrow, from_arrow, require_pyarrow
from ._legacy import encode_legacy
from ._options import check_out, codec_id, timestamp_type_id
from ._table import HeaderColumns, Record, RecordTable, ValueDecoder, concat, select
from ._txn import ABORT, COMMIT, aborted_batch_mask, check_aborted_index, decode, txn_state

__all__ = [
    "ABORT",
    "BATCH_DTYPE",
    "BINARY_KINDS",
    "COMMIT",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "HEADERS_COLUMN",
    "HEADER_DTYPE",
    "RECORD_DTYPE",
    "STAMPS_CORRUPT",
    "STAMPS_OK",
    "ArrowStream",
    "BatchBuilder",
    "BinaryColumn",
    "BinaryKind",
    "HeaderColumns",
    "Record",
    "RecordColumns",
    "RecordTable",
    "ValueDecoder",
    "aborted_batch_mask",
    "arrow_c_stream",
    "binary_arrays",
    "binary_column",
    "check_aborted_index",
    "check_out",
    "codec_id",
    "columns",
    "concat",
    "ddl",
    "decode",
    "decode_batches",
    "encode",
    "encode_arrow",
    "encode_control",
    "encode_legacy",
    "from_arrow",
    "get_threads",
    "kafka_schema",
    "require_pyarrow",
    "scan",
    "select",
    "set_threads",
    "spark_ddl",
    "stamps",
    "timestamp_type_id",
    "to_arrow",
    "to_pandas",
    "to_polars",
    "to_record_batches",
    "txn_state",
]
