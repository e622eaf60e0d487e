"""`RecordTable`, the columnar result of :func:`kbatch.decode`, and `Record`."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from ._columns import BinaryKind

if TYPE_CHECKING:  # optional dependencies, imported on use
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]
    import polars as pl
    import pyarrow as pa

__all__ = ["HeaderColumns", "Record", "RecordTable", "ValueDecoder", "concat", "select"]


def _late() -> tuple[Any, Any]:
    """``(_core, _arrow)``: the decoder and byte slices, the Arrow conversions. Both import this
    module (a RecordTable is what the decoder returns), so they are reached at call time."""
    from . import _arrow, _core

    return _core, _arrow


class ValueDecoder(Protocol):
    """What ``to_arrow(values=..., keys=...)`` takes: a :class:`kbatch.values.Registry` (the
    record layers reach the value decoder through it and never import ``kbatch.values``)."""

    def records_to_arrow(self, table: Any, values: Any = None, keys: Any = None, **options: Any) -> Any: ...


def _utf8(raw: bytes) -> str:
    # Kafka's Java client decodes header keys with replacement of bad bytes.
    return raw.decode("utf-8", "replace")


class HeaderColumns(np.ndarray):
    """The header rows of a :class:`RecordTable`, callable per record.

    An ordinary structured array of :data:`kbatch.HEADER_DTYPE` rows, plus
    ``table.headers(i)``: record ``i``'s headers as ``(key, value)`` pairs,
    keys decoded as UTF-8 with invalid bytes replaced (as Kafka's Java client
    does; the raw key bytes stay reachable through the ``key_start`` /
    ``key_length`` columns). Slices and copies are plain columns.
    """

    _owner: tuple[np.ndarray, Any] | None

    def __array_finalize__(self, obj: object) -> None:
        self._owner = None

    def __call__(self, i: int) -> list[tuple[str, bytes | None]]:
        if self._owner is None:
            raise TypeError("only RecordTable.headers itself can be called, not a slice or copy of it")
        records, data = self._owner
        n = len(records)
        if not -n <= i < n:
            raise IndexError(f"record index {i} out of range for {n} records")
        row = records[i]
        first = int(row["headers_start"])
        buf = memoryview(data).cast("B")
        out = []
        for h in self.view(np.ndarray)[first : first + int(row["headers_count"])]:
            ks, kl = int(h["key_start"]), int(h["key_length"])
            vs, vl = int(h["value_start"]), int(h["value_length"])
            out.append((_utf8(bytes(buf[ks : ks + kl])), None if vl < 0 else bytes(buf[vs : vs + vl])))
        return out


class Record(NamedTuple):
    """One data record, as iteration over a :class:`RecordTable` yields it.

    Building these is slow by design (a Python object per record); use the
    columns of :class:`RecordTable` for bulk work.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    sequence: int
    leader_epoch: int


class RecordTable:
    """Decoded record batches as NumPy columns.

    Attributes
    ----------
    records : numpy.ndarray
        One row per data record, dtype :data:`kbatch.RECORD_DTYPE`. Control
        records are not data records: they are described by their batch's row.
    batches : numpy.ndarray
        One row per batch, dtype :data:`kbatch.BATCH_DTYPE`.
    headers : HeaderColumns
        One row per record header, dtype :data:`kbatch.HEADER_DTYPE`; record
        ``i`` owns rows ``headers_start .. headers_start + headers_count``.
        Also callable: ``headers(i)`` lists record ``i``'s headers.
    data : buffer
        The bytes every ``*_start`` column points into: the caller's buffer
        itself when no batch is compressed (nothing is copied), otherwise one
        new buffer with every batch's records, decompressed, in batch order.
    consumed_bytes : int
        Bytes of the input taken by complete batches.
    truncated : bool
        Whether an incomplete batch followed them (not an error: a fetch or
        a log being written can end mid-batch).
    next_offset : int or None
        ``base_offset + last_offset_delta + 1`` of the last batch, the offset
        to fetch next; None when there was no complete batch.
    topic : str or None
        The topic the records came from, when known (tables read from a
        partition directory know it; :func:`kbatch.decode` of bare bytes does
        not). The Arrow, pandas and Polars conversions fill it in.
    partition : int or None
        Likewise the partition.
    """

    __slots__ = (
        "records",
        "batches",
        "headers",
        "data",
        "consumed_bytes",
        "truncated",
        "next_offset",
        "topic",
        "partition",
    )

    def __init__(
        self,
        *,
        records: np.ndarray,
        batches: np.ndarray,
        headers: np.ndarray,
        data: Any,
        consumed_bytes: int,
        truncated: bool,
        next_offset: int | None,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        self.records = records
        self.batches = batches
        self.headers = headers.view(HeaderColumns)
        self.headers._owner = (records, data)
        self.data = data
        self.consumed_bytes = consumed_bytes
        self.truncated = truncated
        self.next_offset = next_offset
        self.topic = topic
        self.partition = partition

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        tail = ", truncated" if self.truncated else ""
        return (
            f"<RecordTable {len(self.records)} records in {len(self.batches)} batches, "
            f"{self.consumed_bytes} bytes{tail}>"
        )

    def _slice(self, start: int, length: int) -> bytes | None:
        if length < 0:
            return None
        return bytes(memoryview(self.data).cast("B")[start : start + length])

    def _row(self, i: int) -> np.void:
        n = len(self.records)
        if not -n <= i < n:
            raise IndexError(f"record index {i} out of range for {n} records")
        row: np.void = self.records[i]
        return row

    def key(self, i: int) -> bytes | None:
        """Key of record ``i`` as bytes (None for a null key)."""
        row = self._row(i)
        return self._slice(int(row["key_start"]), int(row["key_length"]))

    def value(self, i: int) -> bytes | None:
        """Value of record ``i`` as bytes (None for a null value)."""
        row = self._row(i)
        return self._slice(int(row["value_start"]), int(row["value_length"]))

    def record(self, i: int) -> Record:
        """Record ``i`` as a :class:`Record` (slow: one Python object)."""
        row = self._row(i)
        batch = self.batches[int(row["batch"])]
        return Record(
            offset=int(row["offset"]),
            timestamp=int(row["timestamp"]),
            timestamp_type=int(batch["timestamp_type"]),
            key=self._slice(int(row["key_start"]), int(row["key_length"])),
            value=self._slice(int(row["value_start"]), int(row["value_length"])),
            headers=self.headers(i),
            sequence=int(row["sequence"]),
            leader_epoch=int(batch["partition_leader_epoch"]),
        )

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self.records)):
            yield self.record(i)

    def keys(self) -> list[bytes | None]:
        """Every key as bytes or None (one Python object per record)."""
        return self._column_bytes("key")

    def values(self) -> list[bytes | None]:
        """Every value as bytes or None (one Python object per record)."""
        return self._column_bytes("value")

    def to_arrow(
        self,
        *,
        topic: str | None = None,
        partition: int | None = None,
        include_headers: bool = True,
        extra_columns: bool = False,
        binary: BinaryKind = "binary",
        values: ValueDecoder | None = None,
        keys: ValueDecoder | None = None,
        reader_schema: Any = None,
        key_reader_schema: Any = None,
        errors: Literal["raise", "null"] = "raise",
        mapping: Literal["spark", "arrow"] = "spark",
        max_depth: int | None = None,
        threads: int = 1,
    ) -> pa.Table:
        """The records as a :class:`pyarrow.Table` with Spark's Kafka source schema.

        See :func:`kbatch.arrow.to_arrow`; ``binary="binary_view"`` copies no bytes.
        ``topic`` and ``partition`` default to the table's own (:attr:`topic`).

        ``values`` (and ``keys``): a :class:`kbatch.values.Registry` to decode the values (keys)
        with, in the same step: the column becomes the typed struct of the reader schema,
        followed by ``value_schema_id`` (and ``value_error`` with ``errors="null"``). The other
        arguments are :func:`kbatch.values.decode`'s (``reader_schema`` for the values,
        ``key_reader_schema`` for the keys); the decoded columns' bytes are never copied.

        Examples
        --------
        >>> import kbatch
        >>> from kbatch.values import Registry
        >>> reg = Registry({7: '{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}'})
        >>> table = kbatch.decode(kbatch.encode([b"\\x00\\x00\\x00\\x00\\x07\\x54", b"?"], keys=[b"k", None]))
        >>> out = table.to_arrow(values=reg, errors="null")
        >>> out.column("value").to_pylist(), out.column("value_schema_id").to_pylist()
        ([{'n': 42}, None], [7, None])
        >>> out.column("value_error").to_pylist()[1][:24]
        'no schema registry frame'
        >>> out.column("key").to_pylist()
        [b'k', None]
        """
        if values is not None or keys is not None:
            decoder = values if values is not None else keys
            assert decoder is not None
            if not callable(getattr(decoder, "records_to_arrow", None)):
                raise TypeError(f"values and keys must be kbatch.values.Registry objects, got {type(decoder).__name__}")
            return decoder.records_to_arrow(
                self, values, keys, reader_schema=reader_schema, key_reader_schema=key_reader_schema,
                errors=errors, mapping=mapping, max_depth=max_depth, threads=threads, topic=topic,
                partition=partition, include_headers=include_headers, extra_columns=extra_columns, binary=binary)
        return _late()[1].to_arrow(
            self,
            topic=topic,
            partition=partition,
            include_headers=include_headers,
            extra_columns=extra_columns,
            binary=binary,
        )

    def to_pandas(
        self,
        *,
        topic: str | None = None,
        partition: int | None = None,
        include_headers: bool = True,
        extra_columns: bool = False,
        arrow_dtypes: bool = True,
    ) -> pd.DataFrame:
        """The records as a :class:`pandas.DataFrame` (see :func:`kbatch.arrow.to_pandas`)."""
        frame: pd.DataFrame = _late()[1].to_pandas(
            self,
            topic=topic,
            partition=partition,
            include_headers=include_headers,
            extra_columns=extra_columns,
            arrow_dtypes=arrow_dtypes,
        )
        return frame

    def to_polars(
        self,
        *,
        topic: str | None = None,
        partition: int | None = None,
        include_headers: bool = True,
        extra_columns: bool = False,
    ) -> pl.DataFrame:
        """The records as a :class:`polars.DataFrame`, bytes not copied (see :func:`kbatch.arrow.to_polars`)."""
        polars_frame: pl.DataFrame = _late()[1].to_polars(
            self, topic=topic, partition=partition, include_headers=include_headers, extra_columns=extra_columns
        )
        return polars_frame

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream interface: ``polars.DataFrame(t)``, ``pyarrow.table(t)``,
        ``duckdb.sql("select ... from t")`` take a RecordTable directly (Spark's Kafka schema,
        headers included, topic and partition the table's own)."""
        return _late()[1].arrow_c_stream(self, requested_schema)

    def _column_bytes(self, name: str) -> list[bytes | None]:
        r = self.records
        values: list[bytes | None] = _late()[0].slices(
            self.data,
            np.ascontiguousarray(r[f"{name}_start"]),
            np.ascontiguousarray(r[f"{name}_length"]),
        )
        return values


# ---------------------------------------------------------------------------------------------
# Table operations


def _runs(mask: npt.NDArray[np.bool_]) -> tuple[list[int], list[int]]:
    edges = np.diff(np.concatenate(([0], mask.view(np.int8), [0])))
    return np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()


def _take(rows: npt.NDArray[Any], mask: npt.NDArray[np.bool_], inplace: bool) -> npt.NDArray[Any]:
    """``rows[mask]``, fast for runs of kept rows (whole batches): memmove in place, or slices joined."""
    starts, ends = _runs(mask)
    if len(starts) == 1 and starts[0] == 0 and ends[0] == len(rows):
        return rows if inplace else rows.copy()
    if not rows.flags.c_contiguous or len(starts) * 16 > len(rows):
        return rows[mask]
    size = rows.dtype.itemsize
    if inplace:
        base = rows.ctypes.data
        dst = 0
        for a, b in zip(starts, ends, strict=True):
            if dst != a:
                ctypes.memmove(base + dst * size, base + a * size, (b - a) * size)
            dst += b - a
        return rows[:dst]
    void = rows.view(np.dtype((np.void, size)))
    if not starts:
        empty: npt.NDArray[Any] = rows[:0].copy()
        return empty
    return np.concatenate([void[a:b] for a, b in zip(starts, ends, strict=True)]).view(rows.dtype)


def select(
    table: RecordTable,
    record_mask: npt.NDArray[np.bool_] | None,
    batch_mask: npt.NDArray[np.bool_] | None = None,
    *,
    inplace: bool = False,
) -> RecordTable:
    """A new RecordTable with only the chosen rows, sharing ``table.data``.

    ``records["batch"]`` and ``headers_start`` are re-indexed to the kept
    batch and header rows. Batches keep their row when ``batch_mask`` (default:
    every batch) says so; a kept record's batch must be kept. With
    ``inplace=True`` the rows are compacted inside ``table``'s own arrays
    (which must then not be used any more): no new allocation.

    >>> import kbatch
    >>> t = kbatch.decode(kbatch.encode([b"a", b"b", b"c"], headers=[[("h", b"1")], [], [("h", b"3")]]))
    >>> s = select(t, t.records["offset"] != 0)
    >>> s.records["offset"].tolist(), s.headers(1), s.records["headers_start"].tolist()
    ([1, 2], [('h', b'3')], [0, 0])
    """
    records = table.records
    batches = table.batches
    if record_mask is None:
        record_mask = np.ones(len(records), dtype=bool)
    if record_mask.all() and batch_mask is None:
        return table
    raw_headers = np.asarray(table.headers).view(np.ndarray)
    if len(raw_headers):
        counts = records["headers_count"]
        header_mask = np.repeat(record_mask, counts.astype(np.int64))
        kept = _take(records, record_mask, inplace)
        headers = _take(raw_headers, header_mask, inplace)
        kept_counts = kept["headers_count"].astype(np.int64)
        new_starts = np.cumsum(kept_counts)
        new_starts -= kept_counts
        kept["headers_start"] = new_starts
    else:
        kept = _take(records, record_mask, inplace)
        headers = raw_headers
    new_batches = batches
    if batch_mask is not None:
        new_batches = batches[batch_mask]
        remap = np.cumsum(batch_mask, dtype=np.int64) - 1
        kept["batch"] = remap[kept["batch"]]
        new_batches["first_record"] = np.searchsorted(kept["batch"], np.arange(len(new_batches)))
    return RecordTable(
        records=kept,
        batches=new_batches,
        headers=headers,
        data=table.data,
        consumed_bytes=table.consumed_bytes,
        truncated=table.truncated,
        next_offset=table.next_offset,
        topic=table.topic,
        partition=table.partition,
    )


def concat(tables: Sequence[RecordTable]) -> RecordTable:
    """One RecordTable from several (a copy of their data, unless there is one).

    Batch positions and record/header starts are shifted so that they point
    into the joined ``data``; ``consumed_bytes`` is the sum and ``truncated``
    the last table's.

    >>> import kbatch
    >>> a, b = kbatch.decode(kbatch.encode([b"a"])), kbatch.decode(kbatch.encode([b"b"], base_offset=1))
    >>> t = concat([a, b])
    >>> t.records["offset"].tolist(), t.values(), t.records["batch"].tolist()
    ([0, 1], [b'a', b'b'], [0, 1])
    """
    tables = list(tables)
    if not tables:
        empty: RecordTable = _late()[0].decode(b"", verify_crc=True, max_decompressed_size=None)
        return empty
    if len(tables) == 1:
        return tables[0]
    parts: list[npt.NDArray[Any]] = []
    recs: list[npt.NDArray[Any]] = []
    heads: list[npt.NDArray[Any]] = []
    bats: list[npt.NDArray[Any]] = []
    shift = nb = nh = 0
    for t in tables:
        data = np.frombuffer(t.data, dtype=np.uint8) if len(memoryview(t.data).cast("B")) else np.empty(0, np.uint8)
        r = t.records.copy()
        h = np.asarray(t.headers).view(np.ndarray).copy()
        b = t.batches.copy()
        r["key_start"] += shift
        r["value_start"] += shift
        r["headers_start"] += nh
        r["batch"] += nb
        h["key_start"] += shift
        h["value_start"] += shift
        b["position"] += shift
        b["first_record"] += sum(len(x) for x in recs)
        parts.append(data)
        recs.append(r)
        heads.append(h)
        bats.append(b)
        shift += len(data)
        nb += len(b)
        nh += len(h)
    joined = np.concatenate(parts).tobytes()
    return RecordTable(
        records=np.concatenate(recs),
        batches=np.concatenate(bats),
        headers=np.concatenate(heads),
        data=joined,
        consumed_bytes=sum(t.consumed_bytes for t in tables),
        truncated=tables[-1].truncated,
        next_offset=next((t.next_offset for t in reversed(tables) if t.next_offset is not None), None),
        topic=tables[0].topic if len({t.topic for t in tables}) == 1 else None,
        partition=tables[0].partition if len({(t.topic, t.partition) for t in tables}) == 1 else None,
    )
