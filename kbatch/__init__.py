"""kbatch: Kafka record batches straight into NumPy columns.

>>> import kbatch
>>> data = kbatch.encode([b"v0", None], keys=[b"k0", b"k1"], timestamps=[1000, 1005])
>>> table = kbatch.decode(data)
>>> table.records["offset"].tolist(), table.records["timestamp"].tolist()
([0, 1], [1000, 1005])
>>> table.key(1), table.value(0), table.value(1)
(b'k1', b'v0', None)
>>> kbatch.decode(data[:-1] + b"x")
Traceback (most recent call last):
  ...
kbatch.errors.CRCError: crc32c mismatch: stored 0x..., computed 0x... (byte 17, batch 0, field crc)
"""

from __future__ import annotations

from kbatch._version import __version__
from kbatch._wire import CODEC_IDS as COMPRESSION_CODECS  # noqa: F401  (what compression= accepts)
from kbatch._wire import TIMESTAMP_TYPES as TIMESTAMP_TYPES
from kbatch.codec import (
    BATCH_DTYPE,
    HEADER_DTYPE,
    RECORD_DTYPE,
    BatchBuilder,
    HeaderColumns,
    Record,
    RecordTable,
    decode,
    encode,
    encode_control,
    get_threads,
    set_threads,
)
from kbatch.errors import (
    CorruptRecordError,
    CRCError,
    KBatchError,
    LayoutError,
    ReplicasDisagreeError,
    StorageError,
    UnsupportedError,
)
from kbatch.log import LogDir, LogWriter, Segment, open_log, open_logs

__all__ = [
    "BATCH_DTYPE",
    "HEADER_DTYPE",
    "RECORD_DTYPE",
    "BatchBuilder",
    "CRCError",
    "CorruptRecordError",
    "HeaderColumns",
    "KBatchError",
    "LayoutError",
    "LogDir",
    "LogWriter",
    "Record",
    "RecordTable",
    "ReplicasDisagreeError",
    "Segment",
    "StorageError",
    "UnsupportedError",
    "__version__",
    "decode",
    "encode",
    "encode_control",
    "get_threads",
    "open_log",
    "open_logs",
    "set_threads",
]
