"""Arrow, pandas, Polars and NumPy columns -> the flat columns of kbatch's columnar encoder.

The way back from :mod:`kbatch.arrow` (which re-exports every public name here):
:func:`binary_arrays` turns a column of byte strings into offsets into one data buffer and a
validity byte per row, without copying the bytes of Arrow ``binary``/``string`` arrays;
:func:`from_arrow` does it for a table with Spark's Kafka columns (``value``, ``key``,
``timestamp``, ``headers``), and :func:`encode_arrow` hands the result to
``kbatch.codec._core.encode_arrays``. pyarrow is imported on first use (:func:`require_pyarrow`).

>>> import pyarrow as pa
>>> binary_arrays(pa.array(["x", None])).valid.tolist()
[1, 0]
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from ._core import encode_arrays
from ._options import check_out, codec_id, timestamp_type_id

__all__ = [
    "BinaryColumn",
    "binary_arrays",
    "encode_arrow",
    "from_arrow",
    "require_pyarrow",
]


def require_pyarrow() -> Any:
    """The pyarrow module, or an ImportError saying how to install it (pyarrow is optional)."""
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - exercised only without pyarrow
        raise ImportError("kbatch.arrow needs pyarrow: pip install 'kbatch[arrow]'") from exc
    return pyarrow


class BinaryColumn(NamedTuple):
    """A column of byte strings as the columnar encoder takes it.

    Row ``i`` is ``data[offsets[i] : offsets[i + 1]]``, null where ``valid[i] == 0``
    (``valid`` is None when no row is null).
    """

    offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64]
    data: Any
    valid: npt.NDArray[np.uint8] | None


def _arrowish(column: Any, pa: Any) -> Any:
    """Any supported column -> a pyarrow Array or ChunkedArray."""
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        return column
    if hasattr(column, "__arrow_c_array__") or hasattr(column, "__arrow_c_stream__"):
        try:
            return pa.array(column)
        except (TypeError, pa.ArrowInvalid):
            return pa.chunked_array(column)
    mod = type(column).__module__
    if mod.startswith("pandas"):
        return pa.Array.from_pandas(column)
    if mod.startswith("polars"):
        return column.to_arrow()
    if isinstance(column, np.ndarray) and column.dtype.kind == "S":
        # fixed-width bytes: NumPy pads with NUL; items are taken as NumPy returns them
        return pa.array(column.tolist(), type=pa.large_binary())
    return pa.array(column if isinstance(column, np.ndarray) else list(column))


def _unpack_validity(pa: Any, arr: Any) -> npt.NDArray[np.uint8] | None:
    if arr.null_count == 0:
        return None
    bitmap = arr.buffers()[0]
    bits = np.frombuffer(bitmap, dtype=np.uint8)
    start = int(arr.offset)
    out: npt.NDArray[np.uint8] = np.unpackbits(bits, bitorder="little", count=start + len(arr))
    valid: npt.NDArray[np.uint8] = out[start:].copy()
    return valid


def binary_arrays(column: Any) -> BinaryColumn:
    """Turn a column of byte strings into ``(offsets int32/int64[n+1], data, valid uint8[n] or None)``.

    Parameters
    ----------
    column : pyarrow Array/ChunkedArray, pandas Series, polars Series, NumPy array, sequence
        Binary or string values (strings are taken as their UTF-8 bytes). Arrow
        ``binary``/``large_binary``/``string`` arrays are not copied: ``offsets`` and
        ``data`` are views of the array's own buffers (int32 offsets for ``binary`` and
        ``string``, int64 for the large types; several chunks are concatenated, views
        cast).

    Returns
    -------
    BinaryColumn

    Examples
    --------
    >>> import pyarrow as pa
    >>> c = binary_arrays(pa.array([b"ab", None, b"c"]))
    >>> c.offsets.tolist(), bytes(c.data), c.valid.tolist()
    ([0, 2, 2, 3], b'abc', [1, 0, 1])
    """
    pa = require_pyarrow()
    arr = _arrowish(column, pa)
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            arr = arr.chunk(0)
        else:
            arr = (
                pa.concat_arrays([c.cast(_large(pa, c.type)) for c in arr.chunks])
                if arr.num_chunks
                else pa.array([], type=pa.large_binary())
            )
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_null(t):
        n = len(arr)
        return BinaryColumn(np.zeros(n + 1, dtype=np.int64), b"", np.zeros(n, dtype=np.uint8))
    if t in (pa.binary_view(), pa.string_view()) or pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    if t in (pa.binary(), pa.string()):
        width = np.int32
    elif t in (pa.large_binary(), pa.large_string()):
        width = np.int64
    else:
        raise TypeError(f"expected a column of bytes or strings, got Arrow type {t}")
    n = len(arr)
    _, obuf, dbuf = arr.buffers()
    offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64]
    if obuf is None:
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        offsets = np.frombuffer(obuf, dtype=width)[arr.offset : arr.offset + n + 1]
    data = dbuf if dbuf is not None else b""
    return BinaryColumn(offsets, data, _unpack_validity(pa, arr))


def _large(pa: Any, t: Any) -> Any:
    return pa.large_string() if t in (pa.string(), pa.large_string(), pa.string_view()) else pa.large_binary()


def _one_array(arr: Any, pa: Any) -> Any:
    """A ChunkedArray as one Array: its only chunk as it is (``combine_chunks`` copies even that)."""
    if not isinstance(arr, pa.ChunkedArray):
        return arr
    return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()


#: Arrow timestamp unit -> milliseconds: multiply by the first, floor-divide by the second.
_MS_SCALE: Final = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


def _timestamps_ms(column: Any) -> npt.NDArray[np.int64]:
    pa = require_pyarrow()
    if isinstance(column, np.ndarray) and column.dtype.kind in "iu":
        return np.ascontiguousarray(column, dtype=np.int64)
    if isinstance(column, np.ndarray) and column.dtype.kind == "M":
        return np.ascontiguousarray(column.astype("datetime64[ms]").view(np.int64))
    arr = _one_array(_arrowish(column, pa), pa)
    if pa.types.is_timestamp(arr.type):
        # Straight from the int64 buffer (Arrow's own cast is about 10x slower); floor
        # division, as Spark turns microseconds into milliseconds.
        raw = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr)]
        mul, div = _MS_SCALE[arr.type.unit]
        ms: npt.NDArray[np.int64] = np.floor_divide(raw, div) if div > 1 else raw * mul
        valid = _unpack_validity(pa, arr)
        if valid is not None:
            ms[valid == 0] = int(time.time() * 1000)
        return ms
    if pa.types.is_date(arr.type):
        arr = arr.cast(pa.timestamp("ms")).cast(pa.int64())
    elif pa.types.is_integer(arr.type):
        arr = arr.cast(pa.int64())
    else:
        raise TypeError(f"timestamps must be integers (ms) or timestamps, got Arrow type {arr.type}")
    if arr.null_count:
        arr = arr.fill_null(int(time.time() * 1000))
    return np.ascontiguousarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _header_arrays(column: Any) -> dict[str, Any]:
    pa = require_pyarrow()
    arr = _one_array(_arrowish(column, pa), pa)
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        raise TypeError(f"headers must be list<struct<key: string, value: binary>>, got {t}")
    n = len(arr)
    width = np.int32 if pa.types.is_list(t) else np.int64
    obuf = arr.buffers()[1]
    offsets = np.frombuffer(obuf, dtype=width)[arr.offset : arr.offset + n + 1]
    if arr.null_count:  # a null list has no headers; its offsets may still span child rows
        valid = _unpack_validity(pa, arr)
        assert valid is not None
        counts = np.diff(offsets) * valid
        base = offsets[0]
        rows = np.repeat(offsets[:-1], counts) + (
            np.arange(int(counts.sum())) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        )
        child = arr.values.take(pa.array(rows - 0))
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        del base
    else:
        child = arr.values
    if child.null_count:
        raise ValueError("a header is null (headers must be (key, value) structs)")
    names = [child.type.field(i).name for i in range(child.type.num_fields)]
    if "key" not in names or "value" not in names:
        raise TypeError(f"header structs need 'key' and 'value' fields, got {names}")
    flat = dict(zip(names, child.flatten(), strict=True))
    hkey = binary_arrays(flat["key"])
    if hkey.valid is not None:
        raise ValueError("a header key is null (Kafka header keys are non-null strings)")
    hval = binary_arrays(flat["value"])
    return {
        "header_offsets": offsets,
        "hkey_offsets": hkey.offsets,
        "hkey_data": hkey.data,
        "hval_offsets": hval.offsets,
        "hval_data": hval.data,
        "hval_valid": hval.valid,
    }


def from_arrow(
    source: Any,
    *,
    values: Any = None,
    keys: Any = None,
    timestamps: Any = None,
    headers: Any = None,
) -> dict[str, Any]:
    """Turn Arrow/pandas/NumPy columns into the keyword arguments of the columnar encoder.

    Parameters
    ----------
    source : pyarrow.Table or RecordBatch, pandas or polars DataFrame, mapping, or None
        A table with Spark's Kafka columns: ``value`` (required), ``key``, ``timestamp``
        (Arrow timestamps of any unit, or integers in milliseconds) and ``headers``;
        other columns (``topic``, ``offset``, ...) are ignored. None to pass columns
        separately.
    values, keys, timestamps, headers : column, optional
        Columns given one by one (they override ``source``'s): anything
        :func:`binary_arrays` takes for ``values``/``keys``; integers (ms), NumPy
        ``datetime64`` or Arrow timestamps for ``timestamps``;
        ``list<struct<key, value>>`` for ``headers``.

    Returns
    -------
    dict
        ``value_offsets, value_data, value_valid, key_offsets, key_data, key_valid,
        timestamps`` (positional order of ``kbatch.codec._core.encode_arrays``) and, with
        headers, ``header_offsets, hkey_offsets, hkey_data, hval_offsets, hval_data,
        hval_valid``. Null timestamps become the current time, as a producer stamps them.

    Examples
    --------
    >>> import pyarrow as pa
    >>> cols = from_arrow(pa.table({"value": [b"a", b"bc"], "key": pa.nulls(2, pa.binary())}))
    >>> cols["value_offsets"].tolist(), cols["key_data"], cols["timestamps"]
    ([0, 1, 3], None, None)
    """
    pa = require_pyarrow()
    table: Mapping[str, Any] = {}
    if source is not None:
        if type(source).__module__.startswith("pandas"):
            table = {c: source[c] for c in source.columns}
        elif type(source).__module__.startswith("polars"):
            source = source.to_arrow()
        if isinstance(source, (pa.Table, pa.RecordBatch)):
            table = {name: source.column(name) for name in source.column_names}
        elif isinstance(source, Mapping):
            table = source
        elif not table:
            raise TypeError(f"source must be a table or a mapping of columns, got {type(source).__name__}")
    values = values if values is not None else table.get("value")
    if values is None:
        raise ValueError("a 'value' column is required")
    keys = keys if keys is not None else table.get("key")
    timestamps = timestamps if timestamps is not None else table.get("timestamp")
    headers = headers if headers is not None else table.get("headers")
    v = binary_arrays(values)
    n = len(v.offsets) - 1
    out: dict[str, Any] = {"value_offsets": v.offsets, "value_data": v.data, "value_valid": v.valid}
    k = None if keys is None else binary_arrays(keys)
    if k is not None and len(k.offsets) - 1 != n:
        raise ValueError(f"{len(k.offsets) - 1} keys for {n} values")
    if k is None or (k.valid is not None and not k.valid.any()):
        out.update(key_offsets=None, key_data=None, key_valid=None)
    else:
        out.update(key_offsets=k.offsets, key_data=k.data, key_valid=k.valid)
    out["timestamps"] = None if timestamps is None else _timestamps_ms(timestamps)
    if out["timestamps"] is not None and len(out["timestamps"]) != n:
        raise ValueError(f"{len(out['timestamps'])} timestamps for {n} values")
    if headers is not None:
        h = _header_arrays(headers)
        if len(h["header_offsets"]) - 1 != n:
            raise ValueError(f"{len(h['header_offsets']) - 1} header lists for {n} values")
        if h["header_offsets"][-1] > h["header_offsets"][0]:
            out.update(h)
    return out


_ARRAY_ARGS = ("value_offsets", "value_data", "value_valid", "key_offsets", "key_data", "key_valid", "timestamps")


@overload
def encode_arrow(
    source: Any, *, compression: str | None = ..., timestamp_type: str = ..., out: None = ..., **options: Any
) -> bytes: ...
@overload
def encode_arrow(
    source: Any, *, compression: str | None = ..., timestamp_type: str = ..., out: Any, **options: Any
) -> int: ...
def encode_arrow(
    source: Any, *, compression: str | None = None, timestamp_type: str = "create", out: Any = None, **options: Any
) -> bytes | int:
    """Encode an Arrow/pandas/Polars table (or columns) as record batches, at column speed.

    Parameters
    ----------
    source : table or mapping of columns
        As for :func:`from_arrow`.
    compression : {"none", "gzip", "snappy", "lz4", "zstd"}, optional
    timestamp_type : {"create", "log_append"}
    out : writable buffer, optional
        Write the batches into this buffer instead of a new ``bytes``. A
        ``bytearray`` is resized to hold exactly the batches; any other
        writable C-contiguous buffer (``mmap.mmap``, a NumPy array, a
        ``memoryview``) must be large enough, and the batches go at its
        start. One buffer reused across calls keeps its memory mapped: a
        large new ``bytes`` costs the kernel a page fault and a zeroed page
        per 4 KiB every call (more than half of a 36 MB encode here). It must
        not overlap the columns being encoded, and cannot be resized or
        closed while the call writes into it.
    **options
        ``base_offset``, ``producer_id``, ``producer_epoch``, ``base_sequence``,
        ``transactional``, ``partition_leader_epoch``, ``max_batch_records``,
        ``max_batch_bytes``, ``compression_level``: as for :func:`kbatch.encode`.

    Returns
    -------
    bytes or int
        The batches, as :func:`kbatch.encode` would build them from the same
        records; with ``out``, the number of bytes written into it.

    Raises
    ------
    TypeError
        ``out`` is not a writable buffer.
    ValueError
        ``out`` is too small (the message says how much is needed), not
        C-contiguous, or overlaps the columns.
    BufferError
        ``out`` is a ``bytearray`` that must be resized while something
        (a ``memoryview``, a NumPy array) still exports it.

    Examples
    --------
    >>> import pyarrow as pa
    >>> table = pa.table({"value": [b"a", b"bc"], "timestamp": [1, 2]})
    >>> buf = bytearray()
    >>> n = encode_arrow(table, out=buf)
    >>> n == len(buf) and bytes(buf) == encode_arrow(table)
    True
    """
    encoder: Any = encode_arrays  # arguments are assembled dynamically below
    if out is not None:
        check_out(out)
    cols = from_arrow(source)
    args = [cols.pop(name) for name in _ARRAY_ARGS]
    for name in ("max_batch_records", "max_batch_bytes"):
        if options.get(name) is None:
            options[name] = 0
    return encoder(  # type: ignore[no-any-return]
        *args,
        **cols,
        **options,
        compression=codec_id(compression),
        timestamp_type=timestamp_type_id(timestamp_type),
        out=out,
    )

