"""kbatch.arrow: Spark's Kafka schema exactly, values equal to decode, zero-copy claims, peers."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

import kbatch
from kbatch.codec._legacy import encode_legacy
from kbatch.codec._table import RecordTable

pa = pytest.importorskip("pyarrow")
arrow = pytest.importorskip("kbatch.arrow")
from kbatch.codec import _arrow_columns as columns  # noqa: E402  (the kernels, their chunk size)

KINDS = ["binary", "large_binary", "binary_view"]


@pytest.fixture(params=["kernels", "threads", "numpy"])
def impl(request, monkeypatch):
    """Run a test with the compiled kernels (one thread, then two threads over chunks of 8
    records, the smallest) and again with the NumPy fallback."""
    if request.param == "numpy":
        monkeypatch.setattr(columns, "_kernels", None)
    elif columns._kernels is None:
        pytest.skip("kbatch.codec._arrowkernels is not compiled")
    else:
        monkeypatch.setattr(columns, "_THREAD_CHUNK", 8 if request.param == "threads" else 0)
    return request.param


def _mixed(seed: int = 0, n: int = 300) -> tuple[list, list, list, list]:
    rng = random.Random(seed)
    values, keys, ts, headers = [], [], [], []
    for i in range(n):
        size = rng.choice([0, 1, 5, 11, 12, 13, 40, 300])
        values.append(None if i % 17 == 3 else rng.randbytes(size))
        keys.append(None if i % 5 == 1 else rng.randbytes(rng.choice([0, 3, 12, 13, 20])))
        ts.append(1_700_000_000_000 + i * 3 - (i % 7))
        h = [(f"h{j}-ü", None if j == 1 else rng.randbytes(rng.choice([0, 4, 13]))) for j in range(i % 4)]
        headers.append(h)
    return values, keys, ts, headers


def _expected(table: RecordTable, topic=None, partition=None) -> list[dict]:
    out = []
    for i, r in enumerate(table):
        hs = table.headers(i)
        out.append(
            {
                "key": r.key,
                "value": r.value,
                "topic": topic,
                "partition": partition,
                "offset": r.offset,
                "timestamp_us": r.timestamp * 1000,
                "timestampType": r.timestamp_type,
                "headers": [{"key": k, "value": v} for k, v in hs] if hs else None,
            }
        )
    return out


def _actual(at) -> list[dict]:
    rows = at.to_pylist()
    ts = at.column("timestamp").cast(pa.int64()).to_pylist()
    for row, t in zip(rows, ts, strict=True):
        row["timestamp_us"] = t
        del row["timestamp"]
        for extra in ("leaderEpoch", "producerId", "producerEpoch", "sequence", "isTransactional"):
            row.pop(extra, None)
    return rows


TABLES = {
    "plain": lambda: kbatch.decode(kbatch.encode(*_mixed()[:2], timestamps=_mixed()[2], headers=_mixed()[3])),
    "batches-zstd": lambda: kbatch.decode(
        kbatch.encode(
            *_mixed(1)[:2], timestamps=_mixed(1)[2], headers=_mixed(1)[3], compression="zstd", max_batch_records=37
        )
    ),
    "log-append-txn": lambda: kbatch.decode(
        kbatch.encode(
            [b"a", b"bb"],
            timestamp_type="log_append",
            producer_id=7,
            producer_epoch=2,
            base_sequence=5,
            transactional=True,
            partition_leader_epoch=9,
            timestamps=[5, 9],
        )
        + kbatch.encode([b"c"], base_offset=2, timestamps=[11])
    ),
    "legacy-v0-v1": lambda: kbatch.decode(
        encode_legacy([b"old", None], [None, b"k"], magic=0)
        + encode_legacy([b"x" * 30], magic=1, base_offset=2, timestamps=[1234], compression=1)
    ),
    "empty": lambda: kbatch.decode(b""),
}


@pytest.mark.parametrize("name", sorted(TABLES))
@pytest.mark.parametrize("kind", KINDS)
def test_values_equal_decode(name, kind, impl):
    table = TABLES[name]()
    at = arrow.to_arrow(table, topic="orders", partition=4, binary=kind)
    at.validate(full=True)
    assert at.schema == arrow.kafka_schema(binary=kind)
    assert at.num_rows == len(table)
    assert _actual(at) == _expected(table, "orders", 4)


def test_schema_is_sparks_exactly():
    at = arrow.to_arrow(TABLES["plain"]())
    expected = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
            ("headers", pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))),
        ]
    )
    assert at.schema.equals(expected, check_metadata=True)
    assert all(f.nullable for f in at.schema)
    assert all(f.nullable for f in at.schema.field("headers").type.value_type)
    no_headers = arrow.to_arrow(TABLES["plain"](), include_headers=False)
    assert no_headers.schema.equals(pa.schema(list(expected)[:7]))


def test_extra_columns():
    t = TABLES["log-append-txn"]()
    at = arrow.to_arrow(t, extra_columns=True)
    assert at.schema.names[-5:] == ["leaderEpoch", "producerId", "producerEpoch", "sequence", "isTransactional"]
    assert [str(f.type) for f in at.schema][-5:] == ["int32", "int64", "int16", "int32", "bool"]
    assert at.column("leaderEpoch").to_pylist() == [9, 9, -1]
    assert at.column("producerId").to_pylist() == [7, 7, -1]
    assert at.column("producerEpoch").to_pylist() == [2, 2, -1]
    assert at.column("sequence").to_pylist() == [5, 6, -1]
    assert at.column("isTransactional").to_pylist() == [True, True, False]
    # LogAppendTime: every record gets the batch's max timestamp; type 1
    assert at.column("timestampType").to_pylist() == [1, 1, 0]
    assert at.column("timestamp").cast(pa.int64()).to_pylist() == [9000, 9000, 11000]


def test_spark_pyspark_schema_agrees():
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from kbatch.spark._schema import kafka_struct

    for h in (False, True):
        for e in (False, True):
            want = to_arrow_schema(kafka_struct(include_headers=h, extra_columns=e), timezone="UTC")
            assert want.equals(arrow.kafka_schema(include_headers=h, extra_columns=e))


def test_null_topic_and_partition_and_invalid_utf8_header_key():
    raw = kbatch.encode([b"v"], headers=[[(b"\xff\xfek", b"x")]])
    at = arrow.to_arrow(kbatch.decode(raw))
    assert at.column("topic").null_count == 1 and at.column("partition").null_count == 1
    assert at.column("headers").to_pylist() == [[{"key": "\ufffd\ufffdk", "value": b"x"}]]


# ---------------------------------------------------------------- zero copy


def _addr_range(buf) -> tuple[int, int]:
    a = np.frombuffer(buf, dtype=np.uint8)
    return a.ctypes.data, a.ctypes.data + a.nbytes


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_binary_view_points_into_table_data(compression, impl):
    vals, keys, ts, hs = _mixed(3)
    raw = kbatch.encode(vals, keys, timestamps=ts, headers=hs, compression=compression)
    t = kbatch.decode(raw)
    if compression is None:
        assert t.data is raw
    lo, hi = _addr_range(t.data)
    at = arrow.to_arrow(t, binary="binary_view")
    for name in ("key", "value"):
        col = at.column(name).chunk(0)
        data_buffers = col.buffers()[2:]
        assert len(data_buffers) == 1
        assert data_buffers[0].address == lo and data_buffers[0].size == hi - lo  # the very same bytes
    struct = at.column("headers").chunk(0).values
    for child in (struct.field("key"), struct.field("value")):
        # header keys: the string cast of a view array keeps the view's data buffers
        assert all(lo <= b.address < hi for b in child.buffers()[2:])
    del t  # the arrays keep the buffer alive
    assert at.column("value").to_pylist() == vals


def test_binary_layout_copies_once():
    vals, keys, ts, hs = _mixed(4)
    raw = kbatch.encode(vals, keys, timestamps=ts, headers=hs)
    t = kbatch.decode(raw)
    lo, hi = _addr_range(t.data)
    col = arrow.to_arrow(t).column("value").chunk(0)
    data = col.buffers()[2]
    assert not lo <= data.address < hi  # gathered into a new buffer...
    assert data.size == sum(len(v) for v in vals if v is not None)  # ...holding exactly the values


@pytest.mark.parametrize("kind", ["binary", "large_binary"])
def test_contiguous_values_stay_zero_copy(kind, impl):
    raw = kbatch.encode([b"0123456789abcdefXYZ"])  # one record: its value is "contiguous"
    t = kbatch.decode(raw)
    lo, hi = _addr_range(raw)
    col = arrow.binary_column(t.data, t.records["value_start"], t.records["value_length"], binary=kind)
    assert lo <= col.buffers()[2].address < hi
    assert col.to_pylist() == [b"0123456789abcdefXYZ"]
    # and a hand-made back-to-back layout with a null in the middle
    buf = b"..abcdefg.."
    col = arrow.binary_column(buf, [2, 0, 5], [3, -1, 4], binary=kind)
    assert col.to_pylist() == [b"abc", None, b"defg"]
    assert col.buffers()[2].address == _addr_range(buf)[0] + 2


def test_binary_column_edges(impl):
    buf = b"abcdefghijklmnopqrstuvwxyz"
    starts = [0, 20, 25, 14, 13, 0]
    lengths = [13, 6, 1, 12, 13, 0]
    for kind in KINDS:
        col = arrow.binary_column(buf, starts, lengths, binary=kind)
        col.validate(full=True)
        assert col.to_pylist() == [buf[s : s + n] for s, n in zip(starts, lengths, strict=True)]
    with pytest.raises(ValueError, match="outside"):
        arrow.binary_column(buf, [20], [7], binary="binary_view")
    with pytest.raises(ValueError):
        arrow.binary_column(buf, [0, 1], [1], binary="binary")


def _with_records(t: RecordTable, records: np.ndarray) -> RecordTable:
    return RecordTable(
        records=records,
        batches=t.batches,
        headers=t.headers.view(np.ndarray),
        data=t.data,
        consumed_bytes=t.consumed_bytes,
        truncated=False,
        next_offset=t.next_offset,
    )


def test_filtered_table_gathers_headers(impl):
    vals, keys, ts, hs = _mixed(5, 120)
    t = kbatch.decode(kbatch.encode(vals, keys, timestamps=ts, headers=hs, max_batch_records=10))
    keep = np.arange(len(t)) % 3 != 0
    sub = _with_records(t, t.records[keep])
    for kind in KINDS:
        at = arrow.to_arrow(sub, binary=kind)
        at.validate(full=True)
        assert _actual(at) == _expected(sub)


def test_repeated_records_repeat_their_headers(impl):
    vals, keys, ts, hs = _mixed(6, 40)
    t = kbatch.decode(kbatch.encode(vals, keys, timestamps=ts, headers=hs))
    # more header rows than the table has (each record three times), in another order
    sub = _with_records(t, t.records[np.repeat(np.arange(len(t))[::-1], 3)])
    for kind in KINDS:
        at = arrow.to_arrow(sub, binary=kind)
        at.validate(full=True)
        assert _actual(at) == _expected(sub)


def test_threads_agree_with_one_thread(monkeypatch):
    if columns._kernels is None:
        pytest.skip("kbatch.codec._arrowkernels is not compiled")
    vals, keys, ts, hs = _mixed(7, 20_000)
    t = kbatch.decode(kbatch.encode(vals, keys, timestamps=ts, headers=hs, max_batch_records=500))
    for kind in KINDS:
        monkeypatch.setattr(columns, "_THREAD_CHUNK", 0)
        one = arrow.to_arrow(t, topic="t", partition=1, binary=kind)
        monkeypatch.setattr(columns, "_THREAD_CHUNK", 1000)  # 20 chunks, each thread taking the next
        for _ in range(3):
            assert arrow.to_arrow(t, topic="t", partition=1, binary=kind).equals(one)


@pytest.mark.parametrize("chunk", [0, 8])
def test_kernel_rejects_rows_outside_the_data(chunk, monkeypatch):
    if columns._kernels is None:
        pytest.skip("kbatch.codec._arrowkernels is not compiled")
    monkeypatch.setattr(columns, "_THREAD_CHUNK", chunk)
    vals, keys, ts, hs = _mixed(8, 64)
    t = kbatch.decode(kbatch.encode(vals, keys, timestamps=ts, headers=hs))
    bad_value, bad_headers = t.records.copy(), t.records.copy()
    bad_value["value_length"][40] = len(t.data)
    bad_headers["headers_start"][41] = len(t.headers)
    bad_headers["headers_count"][41] = 1
    for records, match in ((bad_value, "record 40: .* outside the data"), (bad_headers, "record 41's headers")):
        for kind in KINDS:
            with pytest.raises(ValueError, match=match):
                arrow.to_arrow(_with_records(t, records), binary=kind)
    mixed_types = TABLES["log-append-txn"]()  # two timestamp types: a per-batch column
    records = mixed_types.records.copy()
    records["batch"][1] = 7
    with pytest.raises(ValueError, match="batch 7 is outside"):
        arrow.to_arrow(_with_records(mixed_types, records))


# ---------------------------------------------------------------- batches, streams, peers


def test_record_batches_are_capped(impl):
    vals = [bytes([i % 251]) * 1000 for i in range(50)]
    t = kbatch.decode(kbatch.encode(vals))
    batches = list(arrow.to_record_batches(t, max_rows=8, max_bytes=5000))
    assert [b.num_rows for b in batches] == [4] * 12 + [2]
    assert pa.Table.from_batches(batches).column("value").to_pylist() == vals
    assert [b.num_rows for b in arrow.to_record_batches(t, max_rows=8)] == [8] * 6 + [2]
    # one record larger than the cap still comes out, alone
    assert [b.num_rows for b in arrow.to_record_batches(t, max_bytes=10)] == [1] * 50


def test_batch_bounds_agree_with_numpy_sizing():
    """The C pass that cuts tables into record batches, against the NumPy sizing it replaced:
    headers on and off, nulls, reordered and repeated records, every cap from one row/byte up."""
    if columns._kernels is None:
        pytest.skip("kbatch.codec._arrowkernels is not compiled")
    values, keys, ts, headers = _mixed(3, 400)
    t = kbatch.decode(kbatch.encode(values, keys, timestamps=ts, headers=headers, max_batch_records=37))
    rows = t.records.view(np.ndarray)
    tables = [t, _with_records(t, rows[::-1]), _with_records(t, rows[[5, 5, 9, 0, 9, 5] * 40])]
    caps = [(1, 1), (7, 10**9), (10**6, 1), (64, 2000), (13, 777), (10**6, 10**9)]
    for table in tables:
        for include_headers in (False, True):
            sizes = columns._payload_bytes(table, table.records, include_headers)
            for max_rows, max_bytes in caps:
                got = columns.batch_bounds(table, table.records, include_headers, max_rows, max_bytes)
                assert got == columns._chunk_bounds(sizes, max_rows, max_bytes)
    # a header range outside the header rows weighs nothing when cutting (converting reports it)
    bad = rows.copy()
    bad["headers_start"][3] = len(t.headers)
    cut = columns.batch_bounds(_with_records(t, bad), bad, True, 10**6, 3000)
    none = rows.copy()
    none["headers_count"][3] = 0
    assert cut == columns.batch_bounds(_with_records(t, none), none, True, 10**6, 3000)
    assert columns.batch_bounds(t, rows[:0], True, 5, 5) == []


def test_c_stream_into_pyarrow_and_iterators():
    tables = [kbatch.decode(kbatch.encode([b"a%d" % i for i in range(5)], base_offset=5 * k)) for k in range(3)]
    s = arrow.ArrowStream(iter(tables), topic="t", partition=1, max_rows=2)
    reader = pa.RecordBatchReader.from_stream(s)
    assert reader.schema.equals(arrow.kafka_schema())
    got = reader.read_all()
    assert got.column("offset").to_pylist() == list(range(15))
    assert got.column("topic").unique().to_pylist() == ["t"]
    capsule = arrow.arrow_c_stream(tables[0])
    assert type(capsule).__name__ == "PyCapsule"
    assert pa.RecordBatchReader._import_from_c_capsule(capsule).read_all().num_rows == 5


def test_pandas_arrow_dtypes():
    pd = pytest.importorskip("pandas")
    t = TABLES["plain"]()
    df = arrow.to_pandas(t, topic="x", partition=2)
    assert all(isinstance(dt, pd.ArrowDtype) for dt in df.dtypes)
    assert [None if v is pd.NA else v for v in df["value"].tolist()] == t.values()
    assert str(df.dtypes["timestamp"]) == "timestamp[us, tz=UTC][pyarrow]"
    plain = arrow.to_pandas(t, arrow_dtypes=False)
    assert str(plain.dtypes["timestamp"]).startswith("datetime64[us")
    assert plain["key"].tolist()[:5] == t.keys()[:5]


def test_polars_zero_copy_and_c_stream():
    pl = pytest.importorskip("polars")
    t = TABLES["plain"]()
    df = arrow.to_polars(t, topic="x")
    assert df.schema["value"] == pl.Binary and df.schema["timestamp"] == pl.Datetime("us", "UTC")
    assert df["value"].to_list() == t.values()
    assert df["offset"].to_list() == t.records["offset"].tolist()
    via_stream = pl.DataFrame(arrow.ArrowStream(t, topic="x"))
    assert via_stream["key"].to_list() == t.keys()
    assert via_stream["headers"].to_list() == df["headers"].to_list()


def test_duckdb_reads_the_stream():
    duckdb = pytest.importorskip("duckdb")
    t = TABLES["plain"]()
    stream = arrow.ArrowStream(t, topic="orders", partition=0)  # noqa: F841 - scanned by name
    con = duckdb.connect()
    ((n, size, first),) = con.execute('select count(*), sum(octet_length(value)), min("offset") from stream').fetchall()
    assert n == len(t) and first == 0
    assert size == sum(len(v) for v in t.values() if v is not None)


# ---------------------------------------------------------------- back into the encoder


def test_binary_arrays_from_many_sources():
    expect = [b"ab", None, b"", b"xyz"]
    sources = [
        pa.array(expect),
        pa.array(expect, type=pa.large_binary()),
        pa.array(expect, type=pa.binary_view()),
        pa.chunked_array([pa.array(expect[:2]), pa.array(expect[2:])]),
        pa.array([None, None, *expect, None])[2:6],  # a slice: offsets into the parent buffer
        np.array(expect, dtype=object),
        expect,
    ]
    for src in sources:
        c = arrow.binary_arrays(src)
        data = bytes(memoryview(c.data)) if len(c.offsets) else b""
        got = [
            None if c.valid is not None and not c.valid[i] else data[c.offsets[i] : c.offsets[i + 1]]
            for i in range(len(expect))
        ]
        assert got == expect, src
    arr = pa.array([b"hello", b"world"])
    c = arrow.binary_arrays(arr)
    assert c.data.address == arr.buffers()[2].address  # the Arrow data buffer itself, not a copy
    strings = arrow.binary_arrays(pa.array(["é", "b"]))
    assert bytes(strings.data) == "éb".encode()


def test_from_arrow_columns():
    at = arrow.to_arrow(TABLES["plain"]())
    cols = arrow.from_arrow(at)
    vals, _, ts, hs = _mixed()
    n = len(vals)
    assert cols["value_offsets"].shape == (n + 1,)
    # binary -> its own int32 offsets, not a copy
    value_chunk = at.column("value").chunk(0)
    assert cols["value_offsets"].dtype == np.int32
    assert cols["value_offsets"].ctypes.data == value_chunk.buffers()[1].address + 4 * value_chunk.offset
    assert cols["value_valid"].tolist() == [v is not None for v in vals]
    assert cols["timestamps"].tolist() == ts
    assert cols["header_offsets"].tolist() == np.concatenate([[0], np.cumsum([len(h) for h in hs])]).tolist()
    assert cols["hval_valid"].sum() == sum(v is not None for h in hs for _, v in h)
    with pytest.raises(ValueError, match="value"):
        arrow.from_arrow(pa.table({"key": [b"a"]}))
    pd = pytest.importorskip("pandas")
    df = at.to_pandas(types_mapper=pd.ArrowDtype)
    again = arrow.from_arrow(df)
    assert again["value_offsets"].tolist() == cols["value_offsets"].tolist()
    large = arrow.from_arrow(at.set_column(1, "value", at.column("value").cast(pa.large_binary())))
    assert large["value_offsets"].dtype == np.int64
    assert large["value_offsets"].tolist() == cols["value_offsets"].tolist()
    assert again["timestamps"].tolist() == ts


@pytest.mark.parametrize(("unit", "mul", "div"), [("s", 1000, 1), ("ms", 1, 1), ("us", 1, 1000), ("ns", 1, 10**6)])
def test_from_arrow_timestamps_in_every_unit(unit: str, mul: int, div: int) -> None:
    raw = [1_700_000_000, -7, None, 0, 12_345]  # in ``unit``; -7 is before the epoch
    column = pa.array(raw, type=pa.timestamp(unit, tz="UTC")).slice(0)
    before = int(time.time() * 1000)
    ms = arrow.from_arrow(pa.table({"value": [b"v"] * 5, "timestamp": column}))["timestamps"]
    after = int(time.time() * 1000)
    assert ms.dtype == np.int64
    for got, want in zip(ms.tolist(), raw, strict=True):
        if want is None:
            assert before <= got <= after  # a null timestamp is stamped now, as a producer does
        else:
            assert got == want * mul // div  # floor, as Spark turns micros into millis
    sliced = arrow.from_arrow({"value": [b"v"] * 2, "timestamp": column.slice(3, 2)})["timestamps"]
    assert sliced.tolist() == [0, 12_345 * mul // div]


needs_encoder = pytest.mark.skipif(
    not hasattr(kbatch.codec._core, "encode_arrays"), reason="kbatch.codec._core.encode_arrays is not built yet"
)


@needs_encoder
@pytest.mark.parametrize("name", ["plain", "batches-zstd", "log-append-txn"])
def test_encode_arrow_round_trip(name):
    t = TABLES[name]()
    at = arrow.to_arrow(t)
    raw = arrow.encode_arrow(at, max_batch_records=50, compression="lz4")
    back = kbatch.decode(raw)
    expect = _expected(t)
    got = _expected(back)
    for e, g in zip(expect, got, strict=True):
        e.pop("timestampType"), g.pop("timestampType")
    assert got == expect


@needs_encoder
def test_encode_arrow_from_numpy_and_pandas_columns():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "value": [b"a", None, b"ccc"],
            "key": [b"k", b"l", None],
            "timestamp": pd.to_datetime([1, 2, 3], unit="ms", utc=True),
        }
    )
    t = kbatch.decode(arrow.encode_arrow(df, base_offset=10))
    assert t.values() == [b"a", None, b"ccc"] and t.keys() == [b"k", b"l", None]
    assert t.records["timestamp"].tolist() == [1, 2, 3]
    assert t.records["offset"].tolist() == [10, 11, 12]
    t = kbatch.decode(
        arrow.encode_arrow({"value": np.array([b"x", b"yy"], dtype=object), "timestamp": np.array([5, 6])})
    )
    assert t.values() == [b"x", b"yy"] and t.keys() == [None, None]


def test_to_arrow_on_one_thread_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # kbatch.set_threads(1) (as in Spark tasks) keeps the kernel on the calling thread.

    monkeypatch.setattr(columns, "_THREAD_CHUNK", 8)
    t = kbatch.decode(kbatch.encode([b"v%d" % i for i in range(100)], headers=[[("h", b"x")]] * 100))
    two = t.to_arrow(binary="binary_view")
    previous = kbatch.set_threads(1)
    try:
        one = t.to_arrow(binary="binary_view")
    finally:
        kbatch.set_threads(previous)
    assert one.equals(two)
