"""Iceberg's ``bucket(N, column)`` partition value of Arrow columns: :func:`iceberg_bucket`.

The value Iceberg readers prune by: ``(murmur3_x86_32(v) & Integer.MAX_VALUE) % N`` of the
value's bytes (strings as UTF-8, binary as is, integers and timestamps as 8 little-endian
bytes of the long: the Iceberg spec's "Bucket transform details"). Computed by pyiceberg's own
``BucketTransform``: its Rust kernel (``pyiceberg-core``) when installed, as pyiceberg writes a
bucketed table, else its Python one per value (``mmh3``). Spark's executors use it to split
the files they write for ``--engine spark --format iceberg --partition-by bucket(N, col)``.

The spec's hashes, seen through the widest bucket (``N = 2**31 - 1`` leaves ``hash & MAX``):

>>> import pyarrow as pa
>>> iceberg_bucket(pa.array(["iceberg", None]), 2**31 - 1).to_pylist()
[1210000089, None]
>>> iceberg_bucket(pa.array([34]), 2**31 - 1).to_pylist()
[2017239379]
>>> iceberg_bucket(pa.array([bytes([0, 1, 2, 3])]), 2**31 - 1).to_pylist() == [-188683207 & 0x7FFFFFFF]
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["iceberg_bucket"]


def _iceberg_type(arrow_type: Any) -> Any:
    """The Iceberg type whose bucket hash ``arrow_type``'s values take (integers as longs: the spec
    hashes ints and longs alike; timestamps as their microseconds)."""
    import pyarrow as pa
    from pyiceberg import types as T

    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
        return T.BinaryType()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return T.StringType()
    if pa.types.is_integer(arrow_type) or pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return T.LongType()
    raise ValueError(f"bucket of a {arrow_type} column is not supported: binary, string, integer or timestamp")


def iceberg_bucket(values: Any, width: int) -> Any:
    """Iceberg's ``bucket(width)`` of ``values`` (a ``pyarrow.Array`` or ``ChunkedArray``): an
    ``int32`` array, null where a value is null."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.transforms import BucketTransform

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = _iceberg_type(values.type)  # refuses a type the spec hashes otherwise
    if pa.types.is_timestamp(values.type):
        values = pc.cast(values, pa.timestamp("us", values.type.tz))
    if pa.types.is_binary_view(values.type) or pa.types.is_string_view(values.type):
        values = pc.cast(values, pa.binary() if pa.types.is_binary_view(values.type) else pa.string())
    transform: Any = BucketTransform(width)
    try:
        out = transform.pyarrow_transform(kind)(values)
        return pc.cast(out, pa.int32())
    except ModuleNotFoundError:  # no pyiceberg-core: the same hash in Python, per value
        if pa.types.is_timestamp(values.type) or pa.types.is_date(values.type):
            values = pc.cast(values, pa.int64())
        one = transform.transform(kind)
        return pa.array([one(v) for v in values.to_pylist()], pa.int32())
