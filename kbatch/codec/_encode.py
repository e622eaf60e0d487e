"""``kbatch.encode``: records into RecordBatches (magic 2) or a legacy message set (magic 0, 1),
from Python sequences (the compiled encoder) or Arrow, pandas and Polars columns (the columnar
encoder, no object per record)."""

from __future__ import annotations

from typing import Any, overload

from kbatch.codec import _core

from ._fromarrow import encode_arrow
from ._legacy import encode_legacy
from ._options import check_out, codec_id, timestamp_type_id

__all__ = ["encode"]


def _columnar(obj: Any) -> bool:
    """Whether ``obj`` is an Arrow, pandas or Polars column or table (for :func:`encode`)."""
    return type(obj).__module__.partition(".")[0] in ("pyarrow", "pandas", "polars")


@overload
def encode(
    values: Any,
    keys: Any = ...,
    *,
    timestamps: Any = ...,
    headers: Any = ...,
    base_offset: int = ...,
    producer_id: int = ...,
    producer_epoch: int = ...,
    base_sequence: int = ...,
    transactional: bool = ...,
    partition_leader_epoch: int = ...,
    timestamp_type: str = ...,
    max_batch_records: int | None = ...,
    max_batch_bytes: int | None = ...,
    compression: str | None = ...,
    compression_level: int | None = ...,
    magic: int = ...,
    out: None = ...,
) -> bytes: ...
@overload
def encode(
    values: Any,
    keys: Any = ...,
    *,
    timestamps: Any = ...,
    headers: Any = ...,
    base_offset: int = ...,
    producer_id: int = ...,
    producer_epoch: int = ...,
    base_sequence: int = ...,
    transactional: bool = ...,
    partition_leader_epoch: int = ...,
    timestamp_type: str = ...,
    max_batch_records: int | None = ...,
    max_batch_bytes: int | None = ...,
    compression: str | None = ...,
    compression_level: int | None = ...,
    magic: int = ...,
    out: Any,
) -> int: ...
def encode(
    values: Any,
    keys: Any = None,
    *,
    timestamps: Any = None,
    headers: Any = None,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: str = "create",
    max_batch_records: int | None = None,
    max_batch_bytes: int | None = None,
    compression: str | None = None,
    compression_level: int | None = None,
    magic: int = 2,
    out: Any = None,
) -> bytes | int:
    """Encode records as RecordBatch (magic 2) batches, or a legacy message set.

    Parameters
    ----------
    values : sequence of bytes-like or None
        One value per record (None is a null value).
    keys : sequence of bytes-like or None, optional
        One key per record; None means every key is null.
    timestamps : sequence of int or None, or int64 array, optional
        Milliseconds since the epoch per record; None (or a None item) means
        now, as a producer stamps records.
    headers : sequence of sequences of (str or bytes, bytes or None), optional
        Each record's headers.
    base_offset : int
        Offset of the first record; later records and batches follow on.
    producer_id, producer_epoch, base_sequence : int
        Idempotent producer fields (-1 = none); the sequence continues across
        batches and wraps past 2**31-1 to 0, as in Kafka.
    transactional : bool
        Set the transactional attribute.
    partition_leader_epoch : int
        Written into every batch.
    timestamp_type : {"create", "log_append"}
        LogAppendTime batches carry the largest timestamp as maxTimestamp.
    max_batch_records, max_batch_bytes : int, optional
        Start a new batch before one would pass either limit (a single record
        larger than ``max_batch_bytes`` still gets a batch of its own).
    compression : {"none", "gzip", "snappy", "lz4", "zstd"}, optional
        Codec for the records of each batch.
    compression_level : int, optional
        Codec level (the codec's Kafka default when None).
    magic : {2, 1, 0}
        2 writes RecordBatches. 0 and 1 write a legacy message set for old
        consumers: one entry per record, or with ``compression`` one wrapper
        entry around them (v1 inner offsets relative, as Kafka writes them);
        headers, producer fields and batch limits do not exist there and must
        be left at their defaults; zstd needs magic 2.
    out : writable buffer, optional
        Write the batches into this buffer instead of a new ``bytes`` (magic
        2): a ``bytearray`` is resized to hold exactly them, any other
        writable C-contiguous buffer (``mmap.mmap``, a NumPy array) must be
        large enough and gets them at its start. Reusing one buffer keeps its
        memory mapped between calls; see :func:`kbatch.arrow.encode_arrow`.

    Returns
    -------
    bytes or int
        The batches, back to back, each with its CRC-32C; with ``out``, the
        number of bytes written into it.

    Examples
    --------
    >>> import kbatch
    >>> raw = kbatch.encode([b"a", b"b", b"c"], base_offset=100, max_batch_records=2)
    >>> kbatch.decode(raw).batches[["base_offset", "record_count"]].tolist()
    [(100, 2), (102, 1)]
    """
    ts_type = timestamp_type_id(timestamp_type)
    codec = codec_id(compression)
    if magic in (0, 1):
        unused = {
            "headers": headers is not None, "producer_id": producer_id != -1, "producer_epoch": producer_epoch != -1,
            "base_sequence": base_sequence != -1, "transactional": transactional,
            "partition_leader_epoch": partition_leader_epoch != -1, "max_batch_records": max_batch_records is not None,
            "max_batch_bytes": max_batch_bytes is not None, "out": out is not None,
        }
        given = [name for name, set_ in unused.items() if set_]
        if given:
            raise ValueError(f"magic {magic} message sets have no {', '.join(given)}")
        return encode_legacy(values, keys, timestamps=timestamps, magic=magic, compression=codec,
                             compression_level=compression_level, base_offset=base_offset, timestamp_type=ts_type)
    if magic != 2:
        raise ValueError(f"magic must be 0, 1 or 2, got {magic!r}")
    for name, limit in (("max_batch_records", max_batch_records), ("max_batch_bytes", max_batch_bytes)):
        if limit is not None and int(limit) < 1:
            raise ValueError(f"{name} must be >= 1, got {limit}")
    if _columnar(values):
        # Arrow / pandas / Polars columns or tables: the columnar encoder, no object per record
        tabular = hasattr(values, "column_names") or hasattr(values, "columns")
        source = values if tabular else {"value": values, "key": keys, "timestamp": timestamps, "headers": headers}
        written: bytes | int = encode_arrow(  # (out: Any matches both overloads)
            source,
            compression=compression,
            timestamp_type=timestamp_type,
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=bool(transactional),
            partition_leader_epoch=partition_leader_epoch,
            max_batch_records=max_batch_records,
            max_batch_bytes=max_batch_bytes,
            compression_level=compression_level,
            out=out,
        )
        return written
    if out is not None:  # (encode_arrow checks its own)
        check_out(out)
    return _core.encode(
        values,
        keys,
        timestamps,
        headers,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=bool(transactional),
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=ts_type,
        max_batch_records=0 if max_batch_records is None else int(max_batch_records),
        max_batch_bytes=0 if max_batch_bytes is None else int(max_batch_bytes),
        compression=codec,
        compression_level=compression_level,
        out=out,
    )
