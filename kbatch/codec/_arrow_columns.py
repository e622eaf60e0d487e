"""Arrow arrays of a :class:`~kbatch.RecordTable`'s columns: the schema (Spark's Kafka source
columns), binary columns from (start, length) pairs, and the fixed-width, constant and header
columns, built by the compiled kernel (``_arrowkernels``) or by vectorised NumPy when it is not
compiled.

:func:`record_columns` is what :func:`kbatch.codec.to_arrow` calls; :func:`binary_column` is public
(``kbatch.arrow.binary_column``).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._columns import BINARY_KINDS, HEADERS_COLUMN, BinaryKind, RecordColumns, columns, ddl
from ._core import HEADER_DTYPE, RECORD_DTYPE, get_threads
from ._fromarrow import require_pyarrow

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: Views address ``table.data`` through windows starting every 1 GiB (a view's offset is int32).
_WINDOW_STEP = 1 << 30
_WINDOW_SIZE = (1 << 31) - 1
_INLINE = 12  # binary_view: values of up to 12 bytes live in the view itself

#: Records per chunk of :func:`to_arrow`'s kernel: a table of more than one chunk is
#: converted by this thread and a helper thread, each taking the next chunk (0: one thread).
_THREAD_CHUNK = 8_192

#: Default caps of one Arrow record batch (rows, and key + value + header bytes).
DEFAULT_BATCH_ROWS = 65_536
DEFAULT_BATCH_BYTES = 64 << 20


_kernels: ModuleType | None
try:
    import kbatch.codec._arrowkernels as _compiled

    _kernels = _compiled
except ImportError:  # not compiled: the NumPy fallbacks below are used (several times slower)
    _kernels = None


# ---------------------------------------------------------------------------------------------
# Schema


def kafka_schema(
    *, include_headers: bool = True, extra_columns: bool = False, binary: BinaryKind = "binary"
) -> pa.Schema:
    """Return the Arrow schema of :func:`to_arrow`: Spark's Kafka source columns.

    Parameters
    ----------
    include_headers : bool
        Add the ``headers`` column (``list<element: struct<key: string, value: binary>>``).
    extra_columns : bool
        Add ``leaderEpoch``, ``producerId``, ``producerEpoch``, ``sequence`` and
        ``isTransactional``.
    binary : {"binary", "large_binary", "binary_view"}
        Arrow type of ``key``, ``value`` and header values (header keys get the matching
        string type). Spark accepts only ``"binary"``.

    Returns
    -------
    pyarrow.Schema
        Every field nullable; the list element is named ``element`` as Spark names it.

    Examples
    --------
    >>> kafka_schema(include_headers=False).names
    ['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType']
    >>> str(kafka_schema().field("headers").type)
    'list<element: struct<key: string, value: binary>>'
    """
    pa = require_pyarrow()
    btype, stype = _types(binary)
    types = {
        "binary": btype,
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "smallint": pa.int16(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        HEADERS_COLUMN[1]: _headers_type(btype, stype),
    }
    cols = columns(include_headers=include_headers, extra_columns=extra_columns)
    return pa.schema([pa.field(name, types[kind]) for name, kind in cols])


def spark_ddl(*, include_headers: bool = True, extra_columns: bool = False) -> str:
    """Return the Spark DDL of :func:`kafka_schema` (``binary="binary"``).

    >>> spark_ddl(include_headers=False)
    'key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int'
    """
    return ddl(include_headers=include_headers, extra_columns=extra_columns)


def _types(binary: str) -> tuple[Any, Any]:
    pa = require_pyarrow()
    if binary == "binary":
        return pa.binary(), pa.string()
    if binary == "large_binary":
        return pa.large_binary(), pa.large_string()
    if binary == "binary_view":
        return pa.binary_view(), pa.string_view()
    raise ValueError(f"binary must be one of {list(BINARY_KINDS)}, got {binary!r}")


def _headers_type(btype: Any, stype: Any) -> Any:
    pa = require_pyarrow()
    return pa.list_(pa.field("element", pa.struct([pa.field("key", stype), pa.field("value", btype)])))


# ---------------------------------------------------------------------------------------------
# Binary columns from (start, length) pairs


def _as_u8(data: Any) -> npt.NDArray[np.uint8]:
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1:
        return data
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def binary_column(
    data: Any,
    starts: npt.ArrayLike,
    lengths: npt.ArrayLike,
    *,
    binary: BinaryKind = "binary",
    string: bool = False,
) -> pa.Array:
    """Build an Arrow binary (or string) array of ``data[starts[i] : starts[i] + lengths[i]]``.

    Parameters
    ----------
    data : buffer
        The bytes the slices point into (``RecordTable.data``); not copied for
        ``binary_view``, which keeps a reference to it.
    starts : array of int64
        Start of each slice.
    lengths : array of int32
        Length of each slice; negative means null.
    binary : {"binary", "large_binary", "binary_view"}
        Output layout (see the module docs for which ones copy).
    string : bool
        Return the matching string type instead (``string``, ``large_string``,
        ``string_view``), validating UTF-8; invalid sequences are replaced with U+FFFD as
        Kafka's Java client does for header keys.

    Returns
    -------
    pyarrow.Array

    Examples
    --------
    >>> a = binary_column(b"xxhelloyy", [2, 0, 0], [5, -1, 0], binary="binary_view")
    >>> a.type, a.to_pylist()
    (DataType(binary_view), [b'hello', None, b''])
    """
    pa = require_pyarrow()
    btype, stype = _types(binary)
    starts = np.asarray(starts)
    lengths = np.asarray(lengths)
    if starts.dtype != np.int64:
        starts = starts.astype(np.int64)
    if lengths.dtype != np.int32:
        lengths = lengths.astype(np.int32)
    if starts.shape != lengths.shape or starts.ndim != 1:
        raise ValueError("starts and lengths must be 1-d arrays of the same length")
    u8 = _as_u8(data)
    arr = _contiguous(pa, u8, starts, lengths, binary)
    if arr is not None:
        pass
    elif _kernels is not None and binary != "binary_view":
        offsets, values = _kernels.gather(u8, starts, lengths, binary == "large_binary")
        validity, nulls = _validity(pa, lengths)
        arr = pa.Array.from_buffers(btype, len(lengths), [validity, pa.py_buffer(offsets), pa.py_buffer(values)], nulls)
    else:
        views = _views(pa, data, u8, starts, lengths)
        arr = views if binary == "binary_view" else views.cast(btype)
    if string:
        arr = _to_string(pa, arr, stype)
    return arr


def _validity(pa: Any, lengths: npt.NDArray[np.int32]) -> tuple[Any, int]:
    valid = lengths >= 0
    nulls = len(lengths) - int(np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _contiguous(
    pa: Any, u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32], binary: str
) -> Any:
    """Zero-copy offsets layout when the non-null slices are back to back in ``u8``."""
    if binary == "binary_view":
        return None
    if len(lengths) >= 2 and lengths[0] >= 0 and lengths[1] >= 0 and starts[1] != starts[0] + lengths[0]:
        return None  # the usual case, rejected without a pass over the columns
    nonnull = lengths >= 0
    s = starts[nonnull]
    ln = lengths[nonnull].astype(np.int64)
    if len(s) == 0 or not np.array_equal(s[1:], s[:-1] + ln[:-1]):
        return None
    first = int(s[0])
    total = int(s[-1] + ln[-1]) - first
    if total > _WINDOW_SIZE and binary == "binary":
        return None
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.maximum(lengths, 0), out=offsets[1:])
    # The rows are read again above: they must still say what was checked (another thread may
    # be rewriting them), and the window must lie inside the data.
    if first < 0 or first + total > len(u8) or int(offsets[-1]) != total:
        return None
    validity, nulls = _validity(pa, lengths)
    window = pa.py_buffer(u8)[first : first + total]
    if binary == "binary":
        return pa.Array.from_buffers(
            pa.binary(), len(lengths), [validity, pa.py_buffer(offsets.astype(np.int32)), window], nulls
        )
    return pa.Array.from_buffers(pa.large_binary(), len(lengths), [validity, pa.py_buffer(offsets), window], nulls)


def _views(
    pa: Any, data: Any, u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32]
) -> Any:
    """A zero-copy ``binary_view`` array over ``u8`` (16 new bytes per row, no data copied)."""
    n = len(lengths)
    size = len(u8)
    if _kernels is not None:
        views = _kernels.views(u8, starts, lengths, _WINDOW_STEP, _WINDOW_SIZE)
        return _view_array(pa, data, u8, views, lengths)
    lens = np.maximum(lengths, 0)
    if n and size:
        nonempty = lens > 0
        if int(starts[nonempty].min(initial=0)) < 0 or int((starts + lens)[nonempty].max(initial=0)) > size:
            raise ValueError("a slice reaches outside the data buffer")
    views = np.zeros((n, 4), dtype="<i4")
    views[:, 0] = lens
    as_bytes = views.view(np.uint8).reshape(n, 16)
    if n and size:
        # The first 12 bytes at every start, in one gather through an unaligned
        # stride-1 view of the buffer (starts past size - 12 are clipped, fixed below).
        if size >= _INLINE:
            window = np.ndarray(shape=(size - _INLINE + 1,), dtype="V12", buffer=u8, strides=(1,))
            clipped = np.minimum(starts, size - _INLINE)
            np.maximum(clipped, 0, out=clipped)
            head = window[clipped].view(np.uint8).reshape(n, _INLINE)
        else:
            head = np.zeros((n, _INLINE), dtype=np.uint8)
        late = np.flatnonzero((starts > size - _INLINE) & (lens > 0))
        if len(late):  # at most 12 slices start in the last 12 bytes: fix them one by one
            padded = np.zeros(2 * _INLINE, dtype=np.uint8)
            tail0 = max(size - _INLINE, 0)
            padded[: size - tail0] = u8[tail0:]
            for i in late.tolist():
                at = int(starts[i]) - tail0
                head[i] = padded[at : at + _INLINE]
        # Short values: inline, zero-padded. Long ones: 4-byte prefix, buffer index, offset.
        keep = np.arange(_INLINE, dtype=np.int32) < np.where(lens > _INLINE, 4, lens)[:, None]
        np.multiply(head, keep, out=as_bytes[:, 4:])
        long_ = lens > _INLINE
        if long_.any():
            w = starts[long_] // _WINDOW_STEP
            rel = starts[long_] - w * _WINDOW_STEP
            if int((rel + lens[long_]).max()) > _WINDOW_SIZE:
                raise ValueError("a value longer than 1 GiB cannot be addressed by a binary_view")
            views[long_, 2] = w
            views[long_, 3] = rel
    return _view_array(pa, data, u8, views, lengths)


def _view_array(pa: Any, data: Any, u8: npt.NDArray[np.uint8], views: np.ndarray, lengths: np.ndarray) -> Any:
    size = len(u8)
    if size > _WINDOW_SIZE:
        whole = pa.py_buffer(u8)
        buffers = [whole[k : min(size, k + _WINDOW_SIZE)] for k in range(0, size, _WINDOW_STEP)]
    else:
        buffers = [pa.py_buffer(data if not isinstance(data, np.ndarray) else u8)]
    validity, nulls = _validity(pa, lengths)
    return pa.Array.from_buffers(pa.binary_view(), len(lengths), [validity, pa.py_buffer(views), *buffers], nulls)


def _pair(
    data: Any, s1: np.ndarray, l1: np.ndarray, s2: np.ndarray, l2: np.ndarray, binary: str, first_string: bool
) -> tuple[Any, Any]:
    """Two binary columns over the same rows (key and value; header key and value) in one pass."""
    pa = require_pyarrow()
    if _kernels is None or s1.dtype != np.int64 or s2.dtype != np.int64 or l1.dtype != np.int32 or l2.dtype != np.int32:
        return (
            binary_column(data, s1, l1, binary=binary, string=first_string),  # type: ignore[arg-type]
            binary_column(data, s2, l2, binary=binary),  # type: ignore[arg-type]
        )
    u8 = _as_u8(data)
    a1 = _contiguous(pa, u8, s1, l1, binary)
    a2 = _contiguous(pa, u8, s2, l2, binary)
    btype, stype = _types(binary)
    if a1 is not None or a2 is not None:
        if a1 is None:
            a1 = binary_column(data, s1, l1, binary=binary)  # type: ignore[arg-type]
        if a2 is None:
            a2 = binary_column(data, s2, l2, binary=binary)  # type: ignore[arg-type]
    elif binary == "binary_view":
        v1, v2 = _kernels.views2(u8, s1, l1, s2, l2, _WINDOW_STEP, _WINDOW_SIZE)
        a1 = _view_array(pa, data, u8, v1, l1)
        a2 = _view_array(pa, data, u8, v2, l2)
    else:
        o1, d1, o2, d2 = _kernels.gather2(u8, s1, l1, s2, l2, binary == "large_binary")
        val1, n1 = _validity(pa, l1)
        val2, n2 = _validity(pa, l2)
        a1 = pa.Array.from_buffers(btype, len(l1), [val1, pa.py_buffer(o1), pa.py_buffer(d1)], n1)
        a2 = pa.Array.from_buffers(btype, len(l2), [val2, pa.py_buffer(o2), pa.py_buffer(d2)], n2)
    if first_string:
        a1 = _to_string(pa, a1, stype)
    return a1, a2


def _to_string(pa: Any, arr: Any, stype: Any) -> Any:
    try:
        return arr.cast(stype)
    except pa.ArrowInvalid:  # invalid UTF-8: replace bad sequences (rare, so per item is fine)
        items = [None if b is None else b.decode("utf-8", "replace") for b in arr.to_pylist()]
        return pa.array(items, type=stype)


# ---------------------------------------------------------------------------------------------
# RecordTable -> Arrow


def _field(records: np.ndarray, name: str, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(records[name], dtype=dtype)


def _constant_string(pa: Any, value: str | None, n: int) -> Any:
    if value is None:
        return pa.nulls(n, pa.string())
    raw = value.encode()
    if n * len(raw) > _WINDOW_SIZE:
        return pa.array([value] * n, type=pa.string())
    step = len(raw)
    offsets = np.arange(0, (n + 1) * step, step, dtype=np.int32) if step else np.zeros(n + 1, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _fixed_width(pa: Any, type_: Any, values: np.ndarray) -> Any:
    """A fixed-width Arrow array over ``values`` (not copied), nothing null."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _constant(pa: Any, type_: Any, n: int, value: int | None) -> Any:
    """A fixed-width column holding ``value`` (null when None) in every row."""
    if value is None:
        return pa.nulls(n, type_)
    dtype = np.dtype(type_.to_pandas_dtype())
    # np.zeros is calloc: fresh, untouched pages for a large column
    return _fixed_width(pa, type_, np.zeros(n, dtype=dtype) if value == 0 else np.full(n, value, dtype=dtype))


def _header_rows(table: RecordColumns, records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Header rows in record order, each record's header count and the list offsets."""
    n = len(records)
    counts = _field(records, "headers_count", np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise ValueError("more than 2**31-1 headers in one table: convert it in chunks")
    hstart = _field(records, "headers_start", np.int64)
    rows = table.headers.view(np.ndarray)
    nz = counts > 0
    shift = hstart[nz] - offsets[:-1][nz]
    if total == 0:
        rows = rows[:0]
    elif np.all(shift == shift[0]):  # decode's own layout: each record's headers follow on
        rows = rows[int(shift[0]) : int(shift[0]) + total]
    else:  # headers of a filtered or reordered table: gather the header rows
        rows = rows[np.repeat(hstart - offsets[:-1], counts) + np.arange(total)]
    return rows, counts, offsets


def _headers_list(pa: Any, binary: str, validity: Any, nulls: int, offsets: np.ndarray, keys: Any, vals: Any) -> Any:
    btype, stype = _types(binary)
    htype = _headers_type(btype, stype)
    struct = pa.StructArray.from_arrays([keys, vals], fields=list(htype.value_type))
    n = len(offsets) - 1
    return pa.Array.from_buffers(htype, n, [validity, pa.py_buffer(offsets)], nulls, children=[struct])


def _headers_column(pa: Any, table: RecordColumns, records: np.ndarray, binary: str) -> Any:
    rows, counts, offsets = _header_rows(table, records)
    keys, vals = _pair(
        table.data, rows["key_start"], rows["key_length"], rows["value_start"], rows["value_length"], binary, True
    )
    validity, nulls = _validity(pa, (counts - 1).astype(np.int32))  # no headers: null, as Spark's source
    return _headers_list(pa, binary, validity, nulls, offsets.astype(np.int32), keys, vals)


def _kernel_columns(
    pa: Any, table: RecordColumns, records: np.ndarray, binary: str, include_headers: bool
) -> dict[str, Any] | None:
    """The record columns from :func:`kbatch.codec._arrowkernels.spark_columns`, in one pass.

    None when the kernels are not compiled or the general path is needed (key or value
    bytes contiguous, so kept zero-copy; views into more than one window). A
    ``timestampType`` shared by every batch is returned as that int.
    """
    kernels = _kernels
    data = table.data
    u8 = _as_u8(data)
    headers = table.headers.view(np.ndarray)
    if (
        kernels is None
        or records.dtype != RECORD_DTYPE
        or headers.dtype != HEADER_DTYPE
        or (binary == "binary_view" and len(u8) > _WINDOW_SIZE)
    ):
        return None
    ks, kl, vs, vl = records["key_start"], records["key_length"], records["value_start"], records["value_length"]
    if _contiguous(pa, u8, ks, kl, binary) is not None or _contiguous(pa, u8, vs, vl, binary) is not None:
        return None
    n = len(records)
    ts_types = table.batches["timestamp_type"]
    constant_type = len(ts_types) > 0 and bool((ts_types == ts_types[0]).all())
    out = kernels.spark_columns(
        u8,
        _row_bytes(records),
        _row_bytes(headers),
        None if constant_type else ts_types.astype(np.int32),
        include_headers,
        binary == "binary_view",
        binary == "large_binary",
        _THREAD_CHUNK if get_threads() > 1 else 0,
    )
    btype, stype = _types(binary)
    data_buffer = pa.py_buffer(data if not isinstance(data, np.ndarray) else u8)
    list_validity, list_nulls, list_offsets = out["headers"]
    header_rows = int(list_offsets[-1])

    def array(name: str, type_: Any, length: int) -> Any:
        validity, nulls, buffers = out[name]
        buffers = [pa.py_buffer(b) for b in buffers]
        if binary == "binary_view":
            buffers.append(data_buffer)
        return pa.Array.from_buffers(type_, length, [_py_buffer(pa, validity), *buffers], nulls)

    header_list = None
    if include_headers:
        hkey = array("hkey", btype if out["non_ascii"] else stype, header_rows)
        if out["non_ascii"]:  # checked (and bad UTF-8 replaced) only when a key is not ASCII
            hkey = _to_string(pa, hkey, stype)
        hvalue = array("hvalue", btype, header_rows)
        header_list = _headers_list(pa, binary, _py_buffer(pa, list_validity), list_nulls, list_offsets, hkey, hvalue)
    return {
        "key": array("key", btype, n),
        "value": array("value", btype, n),
        "offset": _fixed_width(pa, pa.int64(), out["offset"]),
        "timestamp": _fixed_width(pa, pa.timestamp("us", tz="UTC"), out["timestamp"]),
        "timestampType": (
            int(ts_types[0])  # every batch's: a constant column
            if constant_type
            else _fixed_width(pa, pa.int32(), out["timestampType"])
        ),
        "headers": header_list,
    }


def _py_buffer(pa: Any, array: np.ndarray | None) -> Any:
    return None if array is None else pa.py_buffer(array)


def _row_bytes(rows: np.ndarray) -> npt.NDArray[np.uint8]:
    """The bytes of structured rows, C-contiguous (a copy only for a strided view)."""
    return np.ascontiguousarray(rows).view(np.uint8).reshape(-1)


def _numpy_columns(
    pa: Any, table: RecordColumns, records: np.ndarray, binary: str, include_headers: bool
) -> dict[str, Any]:
    """The record columns from NumPy columns (and the byte kernels when compiled)."""
    key, value = _pair(
        table.data,
        records["key_start"],
        records["key_length"],
        records["value_start"],
        records["value_length"],
        binary,
        False,
    )
    ts = _field(records, "timestamp", np.int64)
    np.multiply(ts, 1000, out=ts)
    ts_type = table.batches["timestamp_type"].astype(np.int32)[_field(records, "batch", np.intp)]
    return {
        "key": key,
        "value": value,
        "offset": pa.array(_field(records, "offset", np.int64)),
        "timestamp": _fixed_width(pa, pa.timestamp("us", tz="UTC"), ts),
        "timestampType": pa.array(ts_type),
        "headers": _headers_column(pa, table, records, binary) if include_headers else None,
    }


def record_columns(
    table: RecordColumns,
    records: np.ndarray,
    *,
    topic: str | None,
    partition: int | None,
    include_headers: bool,
    extra_columns: bool,
    binary: str,
) -> list[Any]:
    pa = require_pyarrow()
    n = len(records)
    # a table read from a partition directory knows where it came from
    topic = table.topic if topic is None else topic
    partition = table.partition if partition is None else partition
    partition = None if partition is None else int(partition)
    built = _kernel_columns(pa, table, records, binary, include_headers)
    if built is None:
        built = _numpy_columns(pa, table, records, binary, include_headers)
    constants: dict[int | None, Any] = {}

    def int32_column(value: Any) -> Any:
        # an array as it is; a constant (None: null) as one array per value, which
        # partition and timestampType share when equal (both 0, often)
        if value is not None and not isinstance(value, int):
            return value
        if value not in constants:
            constants[value] = _constant(pa, pa.int32(), n, value)
        return constants[value]

    cols = [
        built["key"],
        built["value"],
        _constant_string(pa, topic, n),
        int32_column(partition),
        built["offset"],
        built["timestamp"],
        int32_column(built["timestampType"]),
    ]
    if include_headers:
        cols.append(built["headers"])
    if extra_columns:
        batch = _field(records, "batch", np.intp)
        batches = table.batches

        def per_batch(name: str, dtype: Any) -> Any:
            return pa.array(batches[name].astype(dtype)[batch])

        cols += [
            per_batch("partition_leader_epoch", np.int32),
            per_batch("producer_id", np.int64),
            per_batch("producer_epoch", np.int16),
            pa.array(_field(records, "sequence", np.int32)),
            per_batch("is_transactional", np.bool_),
        ]
    return cols


def _payload_bytes(table: RecordColumns, records: np.ndarray, include_headers: bool) -> npt.NDArray[np.int64]:
    """Bytes each record contributes to Arrow buffers (key + value [+ header bytes]) + 32."""
    size = np.maximum(_field(records, "key_length", np.int64), 0) + np.maximum(
        _field(records, "value_length", np.int64), 0
    )
    size += 32
    if include_headers and len(table.headers):
        h = table.headers.view(np.ndarray)
        per_header = np.maximum(h["key_length"].astype(np.int64), 0) + np.maximum(h["value_length"], 0) + 16
        cum = np.zeros(len(h) + 1, dtype=np.int64)
        np.cumsum(per_header, out=cum[1:])
        hs = _field(records, "headers_start", np.int64)
        hc = _field(records, "headers_count", np.int64)
        size += cum[hs + hc] - cum[hs]
    return np.asarray(size, dtype=np.int64)


def batch_bounds(
    table: RecordColumns, records: np.ndarray, include_headers: bool, max_rows: int, max_bytes: int
) -> list[tuple[int, int]]:
    """``(start, end)`` of each record batch of :func:`to_record_batches`."""
    headers = table.headers.view(np.ndarray)
    if _kernels is None or records.dtype != RECORD_DTYPE or headers.dtype != HEADER_DTYPE:
        return _chunk_bounds(_payload_bytes(table, records, include_headers), max_rows, max_bytes)
    ends = _kernels.chunk_ends(_row_bytes(records), _row_bytes(headers), include_headers, max_rows, max_bytes).tolist()
    return list(zip([0, *ends], ends, strict=False))  # each chunk starts where the one before ends


def _chunk_bounds(sizes: npt.NDArray[np.int64], max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    n = len(sizes)
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    out = []
    start = 0
    while start < n:
        # the largest end with end - start <= max_rows and bytes <= max_bytes (at least one row)
        end = int(np.searchsorted(cum, cum[start] + max_bytes, side="right")) - 1
        end = max(start + 1, min(end, start + max_rows, n))
        out.append((start, end))
        start = end
    return out
