"""``LogDir.scan_records``, ``scan_logs`` and the Polars scan: filters pushed down to segments and batch headers give
exactly the eager read filtered afterwards, whatever the indexes say; skipped batches are never
decoded."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.scan_roots import TERMS, eager, holds, scan_roots, term

import kbatch
from kbatch.log import LogWriter, ScanStats, open_log, open_logs, scan_logs


def scanned(table) -> list[tuple]:
    ts = [None if v is None else v // 1000 for v in table.column("timestamp").cast("int64").to_pylist()]
    return list(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                    table.column("offset").to_pylist(), ts, table.column("value").to_pylist(), strict=True))


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return scan_roots(tmp_path_factory.mktemp("scan"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["with", "bare", "lying"]), terms=TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]), limit=st.none() | st.integers(0, 30),
       chunk=st.sampled_from([1, 300, 1 << 20]))
def test_scan_equals_the_eager_read_filtered(roots: dict[str, Path], which: str, terms: list, iso: str,
                                             limit: int | None, chunk: int) -> None:
    logs = open_logs(roots[which])
    want = eager(logs, terms, iso)
    got = scanned(scan_logs(logs, ["topic", "partition", "offset", "timestamp", "value"], terms, limit,
                            isolation_level=iso, chunk_bytes=chunk).read_all())
    assert got == (want if limit is None else want[:limit])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["with", "bare", "lying"]), terms=TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]), limit=st.none() | st.integers(0, 30),
       chunk=st.sampled_from([1, 300, 1 << 20]))
def test_a_walked_scan_equals_the_eager_read_filtered(roots: dict[str, Path], which: str, terms: list, iso: str,
                                                      limit: int | None, chunk: int) -> None:
    # no key, value or headers: the batches the walk vouches for give their rows from it
    logs = open_logs(roots[which])
    want = [r[:4] for r in eager(logs, terms, iso)]
    got = scan_logs(logs, ["topic", "partition", "offset", "timestamp"], terms, limit, isolation_level=iso,
                    chunk_bytes=chunk).read_all()
    ts = [v // 1000 for v in got.column("timestamp").cast("int64").to_pylist()]
    assert list(zip(got.column("topic").to_pylist(), got.column("partition").to_pylist(),
                    got.column("offset").to_pylist(), ts, strict=True)) == (want if limit is None else want[:limit])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=TERMS, columns=st.permutations(["key", "value", "offset", "timestamp", "timestampType", "headers",
                                               "topic", "partition"]).map(lambda c: c[:3]))
def test_projection_equals_the_eager_columns(roots: dict[str, Path], terms: list, columns: list[str]) -> None:
    logs = open_logs(roots["with"])
    full = scan_logs(logs, None, terms).read_all()
    part = scan_logs(logs, columns, terms).read_all()
    assert part.column_names == columns
    assert part.equals(full.select(columns))
    whole = kbatch.log.open_logs(roots["bare"])[0].to_arrow()
    assert scan_logs(logs[:1]).read_all().equals(whole)


def test_batches_outside_the_filter_are_never_decoded(tmp_path: Path) -> None:
    # 40 segments of 5 batches of 10 records, timestamps 0..1999 (one per record)
    with LogWriter(tmp_path, "t", 0, segment_bytes=5 * 200) as w:
        for b in range(200):
            stamps = list(range(10 * b, 10 * b + 10))
            w.append(kbatch.encode([b"x" * 50] * 10, base_offset=10 * b, timestamps=stamps[::-1],
                                   compression="zstd"))
    log = open_log(tmp_path / "t-0")
    assert len(log.segments) >= 20
    stats = ScanStats()
    # (index=False: what headers and walks alone skip; a time index learned here would skip more)
    got = log.scan_records(["offset"], [("timestamp", ">=", 1000), ("offset", "<", 1100)], stats=stats,
                           index=False).read_all()
    assert got.column("offset").to_pylist() == list(range(1000, 1100))
    # offsets alone: the batches read are walked, none decoded
    assert stats.batches_walked == 10 and stats.batches_decoded == 0 and stats.rows == 100
    assert stats.segments_skipped >= len(log.segments) - 3
    assert stats.bytes_walked < sum(s.size for s in log.segments) / 10
    # a timestamp upper bound alone cannot skip batches of several records (out of order) by
    # their headers: each is walked, and skipped once its records' timestamps are all above it
    stats = ScanStats()
    assert log.scan_records(["offset"], [("timestamp", "<", 10)], stats=stats, index=False).read_all().num_rows == 10
    assert stats.batches_walked == 200 and stats.batches_dropped_by_stamps == 199
    assert stats.batches_decoded == 0
    # ... nor can a one-record batch be skipped by an upper bound unless it is CreateTime
    stats = ScanStats()
    assert log.scan_records(["offset"], [("offset", "in", [5, 1995])], stats=stats).read_all().num_rows == 2
    assert stats.batches_walked == 200  # offsets bound [5, 1995]: every batch may hold one
    stats = ScanStats()
    log.scan_records(["offset", "value"], [("offset", "=", 1995)], stats=stats).read_all()
    assert stats.batches_decoded == 1 and stats.batches_walked == 0, stats


def test_log_append_time_batches_are_skipped_on_either_timestamp_bound(tmp_path: Path) -> None:
    # 20 LogAppendTime batches of 5 records written out of order: batch b's records all read as 100 b + 4
    with LogWriter(tmp_path, "t", 0) as w:
        for b in range(20):
            w.append(kbatch.encode([b"x%d" % i for i in range(5)], base_offset=5 * b, compression="lz4",
                                   timestamps=[100 * b + d for d in (3, 1, 4, 0, 2)], timestamp_type="log_append"))
    log = open_log(tmp_path / "t-0")
    cases = [([("timestamp", "<", 500)], range(5)), ([("timestamp", "between", (700, 1000))], range(7, 10)),
             ([("timestamp", ">", 1850)], range(19, 20))]
    for terms, batches in cases:
        stats = ScanStats()
        got = log.scan_records(["offset", "timestamp"], terms, stats=stats).read_all()
        offsets = [5 * b + i for b in batches for i in range(5)]
        stamps = [100 * b + 4 for b in batches for _ in range(5)]
        assert got.column("offset").to_pylist() == offsets
        assert got.column("timestamp").cast("int64").to_pylist() == [t * 1000 for t in stamps]
        assert [r[2:4] for r in eager([log], terms, "read_uncommitted")] == list(zip(offsets, stamps, strict=True))
        assert stats.batches_walked == len(batches) and stats.batches_decoded == 0, (terms, stats)


def test_datetime_bounds_and_empty_filters(tmp_path: Path) -> None:
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode([b"a", b"b", b"c"], timestamps=[1000, 2000, 3000]))
    log = open_log(tmp_path / "t-0")
    at = dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc)
    assert log.scan_records(["offset"], [("timestamp", ">=", at)]).read_all().column(0).to_pylist() == [1, 2]
    assert log.scan_records(["offset"], [("offset", "in", [])]).read_all().num_rows == 0
    assert log.scan_records(["offset"], [("offset", ">", 5), ("offset", "<", 3)]).read_all().num_rows == 0
    assert log.scan_records(["offset"], [("topic", "=", "u")]).read_all().num_rows == 0
    with pytest.raises(kbatch.log.FilterError, match="column must be one of"):
        log.scan_records(filter=[("value", "=", 1)])
    with pytest.raises(kbatch.log.FilterError, match="timestamp bound"):
        log.scan_records(filter=[("timestamp", "=", 1.5)])


# ---------------------------------------------------------------------------------------------
# Polars: the predicate Polars hands the plug-in, translated where it can be, applied whole after

pl = pytest.importorskip("polars")


def polars_expr(column: str, op: str, value: object):
    def lit(v: object) -> object:
        if column == "timestamp":
            return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=v)  # type: ignore[arg-type]
        return v

    c = pl.col(column)
    if op == "between":
        return c.is_between(lit(value[0]), lit(value[1]))  # type: ignore[index]
    if op == "in":
        return c.is_in([lit(v) for v in value])  # type: ignore[attr-defined]
    return {"=": c.__eq__, "<": c.__lt__, "<=": c.__le__, ">": c.__gt__, ">=": c.__ge__}[op](lit(value))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["with", "lying"]), terms=TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]), extra=st.sampled_from([None, "value", "or"]),
       limit=st.none() | st.integers(0, 20))
def test_polars_scan_equals_the_eager_read_filtered(roots: dict[str, Path], which: str, terms: list, iso: str,
                                                    extra: str | None, limit: int | None) -> None:
    from kbatch.polars import scan_kafka_log

    logs = open_logs(roots[which])
    want = eager(logs, terms, iso)
    lf = scan_kafka_log(roots[which], isolation_level=iso)
    for t in terms:
        lf = lf.filter(polars_expr(*t))
    if extra == "value":  # not pushed down: applied by the scan after
        lf = lf.filter(pl.col("value").bin.starts_with(b"v1"))
        want = [r for r in want if r[4].startswith(b"v1")]
    elif extra == "or":
        lf = lf.filter((pl.col("offset") < 10) | (pl.col("offset") > 40))
        want = [r for r in want if r[2] < 10 or r[2] > 40]
    lf = lf.select("topic", "partition", "offset", pl.col("timestamp").dt.epoch("ms"), "value")
    if limit is not None:
        lf = lf.head(limit)
        want = want[:limit]
    assert lf.collect().rows() == want


def test_polars_pushes_the_filter_down(tmp_path: Path) -> None:
    from kbatch.polars import scan_kafka_log

    with LogWriter(tmp_path, "t", 0, segment_bytes=1000) as w:
        for b in range(100):
            w.append(kbatch.encode([b"x" * 50] * 10, base_offset=10 * b, timestamps=list(range(10 * b, 10 * b + 10)),
                                   compression="zstd"))
    stats = ScanStats()
    start = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=500)
    got = (scan_kafka_log(tmp_path, stats=stats)
           .filter((pl.col("timestamp") >= start) & (pl.col("offset") < 520))
           .select("offset").collect())
    assert got["offset"].to_list() == list(range(500, 520))
    assert stats.batches_walked == 2 and stats.batches_decoded == 0, stats
    stats = ScanStats()
    assert scan_kafka_log(tmp_path, stats=stats).head(3).select("offset").collect()["offset"].to_list() == [0, 1, 2]
    assert stats.batches_walked == 1, stats


def test_a_polars_filter_folded_to_false_reads_nothing(tmp_path: Path, typed_root: Path, registry) -> None:
    # Polars folds is_in([]) into the constant false before the scan sees it: that keeps no row,
    # so no batch is read and, with typed values, no bad value raises (it read and decoded all)
    from kbatch.polars import scan_kafka_log

    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode([b"x"] * 10))
    for empty in (pl.col("offset").is_in([]), pl.lit(False), pl.lit(None, pl.Boolean)):
        stats = ScanStats()
        assert scan_kafka_log(tmp_path, stats=stats).filter(empty).collect().height == 0
        assert stats.batches_framed == stats.rows == 0, stats
        lf = scan_kafka_log(typed_root, topic="avro", values=registry).filter(empty)  # offset 5 does not decode
        assert lf.select("offset", "value").collect().height == 0


def test_duckdb_pushes_sql_filters_into_the_scan(tmp_path: Path) -> None:
    """DuckDB 2.0 on: the filters reach the scan (two batches decoded). Before 2.0 (whose pushdown
    into a LazyFrame drops a timestamp filter: every row came back) the rows are still exactly
    the query's, from a stream DuckDB filters itself (.ci/run runs this with both DuckDBs)."""
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import PUSHDOWN, register

    with LogWriter(tmp_path, "t", 0, segment_bytes=1000) as w:
        for b in range(100):
            w.append(kbatch.encode([b"x%d" % b] * 10, base_offset=10 * b, timestamps=list(range(10 * b, 10 * b + 10)),
                                   compression="zstd"))
    stats = ScanStats()
    con = duckdb.connect()
    register(con, "logs", tmp_path, stats=stats)
    got = con.sql("""SELECT "offset", value FROM logs WHERE timestamp >= TIMESTAMPTZ '1970-01-01 00:00:00.5+00'
                     AND "offset" < 520 ORDER BY "offset" """).fetchall()
    assert got == [(o, b"x%d" % (o // 10)) for o in range(500, 520)]
    assert (int(duckdb.__version__.split(".")[0]) >= 2) == PUSHDOWN
    if PUSHDOWN:
        assert stats.batches_decoded == 2, stats
    else:  # every batch read, DuckDB filtering; a second query reads the view afresh
        assert stats.batches_decoded >= 100, stats  # (DuckDB may scan a stream more than once)
        assert con.sql('SELECT count(*) FROM logs WHERE "offset" >= 990').fetchall() == [(10,)]


def test_duckdb_stream_reads_the_log_once_per_query(tmp_path: Path) -> None:
    """Before DuckDB 2.0 (no pushdown): DuckDB asks for the view's stream several times per query
    and reads one; the others start no scan, so a query reads each record once."""
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import PUSHDOWN, register

    if PUSHDOWN:
        pytest.skip("DuckDB 2.0 on reads the LazyFrame itself")
    with LogWriter(tmp_path, "t", 0, segment_bytes=1000) as w:
        for b in range(20):
            w.append(kbatch.encode([b"x%d" % b] * 10, base_offset=10 * b))
    stats = ScanStats()
    con = duckdb.connect()
    register(con, "logs", tmp_path, stats=stats)
    assert stats.rows == 0  # registered: nothing read
    rel = con.sql("SELECT count(*) FROM logs")
    assert stats.rows == 0  # bound: nothing read
    assert rel.fetchall() == [(200,)]
    assert (stats.rows, stats.batches_decoded) == (200, 20), stats
    assert con.sql('SELECT count(*) FROM logs WHERE "offset" >= 190').fetchall() == [(10,)]
    assert stats.rows == 400, stats  # a second query reads the log afresh, once
    assert con.sql("SELECT value FROM logs LIMIT 3").fetchall() == [(b"x0",)] * 3
    # a query that stops early reads the log at most once (how far DuckDB reads ahead before the
    # LIMIT stops it depends on its threads' timing: not asserted)
    assert stats.rows <= 600, stats


def test_a_script_ending_after_a_query_that_stopped_early_exits(tmp_path: Path) -> None:
    """Before DuckDB 2.0, pyarrow reads a view's stream ahead in its own threads, also after a
    ``LIMIT`` query is done; a read still in Python at the interpreter's exit hung it (or
    aborted it). The streams end at exit, and the exit waits for the reads under way."""
    import os
    import subprocess
    import sys

    pytest.importorskip("duckdb")
    with LogWriter(tmp_path, "t", 0, segment_bytes=1 << 20) as w:
        for b in range(200):
            w.append(kbatch.encode([b"x%d" % b * 50] * 500, base_offset=500 * b, compression="zstd"))
    script = ("import duckdb, sys; from kbatch.duckdb import register; con = duckdb.connect(); "
              "register(con, 't', sys.argv[1]); print(con.sql('SELECT count(*) FROM (SELECT * FROM t LIMIT 3)')"
              ".fetchall())")
    repo = str(Path(__file__).resolve().parents[2])
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": repo})
        assert (done.returncode, done.stdout) == (0, "[(3,)]\n"), done.stderr[-2000:]


def test_a_timeindex_entry_that_checks_out_but_hides_a_larger_timestamp_loses_nothing(tmp_path: Path) -> None:
    # batch maxima 5000, 1000, 2000 (CreateTime: they need not rise); the broker's .timeindex
    # has one entry (5000 at offset 0). A forged one names offset 2 with 2000: the batch there
    # has that max and the batch before a smaller one, so the entry passes the seek checks,
    # yet the segment's largest timestamp is 5000.
    from kbatch.log import TIME_INDEX_DTYPE

    with LogWriter(tmp_path, "t", 0, index_interval_bytes=1) as w:
        for i, ts in enumerate([5000, 1000, 2000]):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[ts]))
    part = tmp_path / "t-0"
    np = pytest.importorskip("numpy")
    np.array([(2000, 2)], dtype=TIME_INDEX_DTYPE).tofile(next(part.glob("*.timeindex")))
    log = open_log(part)
    got = log.scan_records(["offset"], [("timestamp", ">=", 3000)]).read_all().column(0).to_pylist()
    assert got == [0] == [r[2] for r in eager([log], [("timestamp", ">=", 3000)], "read_uncommitted")]


# ---------------------------------------------------------------------------------------------
# The stamps walk: batches an upper bound cannot skip by header, and narrow projections


def out_of_order_log(root: Path, codec: str = "zstd") -> Path:
    """100 batches of 10 records, batch b's timestamps 10 b .. 10 b + 9 written in reverse (the
    header's max is the first record's), three segments."""
    with LogWriter(root, "t", 0, segment_bytes=40 * 200) as w:
        for b in range(100):
            w.append(kbatch.encode([b"v%d" % b] * 10, base_offset=10 * b, compression=codec,
                                   timestamps=list(range(10 * b + 9, 10 * b - 1, -1))))
    return root / "t-0"


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_an_upper_bound_decodes_only_the_batches_its_records_reach(tmp_path: Path, codec: str) -> None:
    log = open_log(out_of_order_log(tmp_path, codec))
    terms = [("timestamp", ">=", 195), ("timestamp", "<", 305)]
    want = [r[2:5] for r in eager([log], terms, "read_uncommitted")]
    assert sorted(r[1] for r in want) == list(range(195, 305))
    stats = ScanStats()
    got = log.scan_records(["offset", "timestamp", "value"], terms, stats=stats).read_all()
    assert list(zip(got.column("offset").to_pylist(), [t // 1000 for t in got.column("timestamp")
                    .cast("int64").to_pylist()], got.column("value").to_pylist(), strict=True)) == want
    if codec == "snappy":  # not walked (cramjam's, with the GIL: decode's path): decoded as before the walk
        assert stats.batches_decoded == 81 and stats.batches_walked == 0, stats
        return
    # the header rules keep batches 19 .. 99 (81, max_timestamp >= 195); those whose max is past
    # the bound (30 .. 99) are walked, and 31 .. 99 dropped, their records all at 310 or later:
    # 12 batches decoded instead of 81
    assert stats.batches_walked == 70 and stats.batches_dropped_by_stamps == 69, stats
    assert stats.batches_decoded == 12, stats


def test_a_batch_whose_header_max_is_past_the_bound_keeps_its_records_inside_it(tmp_path: Path) -> None:
    # batch 0: records at 5000 and 50 (max 5000); batch 1: records at 60 and 70 whose header
    # claims a max of 10**12 (rewritten, CRC made to match); batch 2: all past the bound
    import struct

    from crc32c import crc32c

    from kbatch._wire import ATTRIBUTES_OFFSET, CRC_OFFSET, MAX_TIMESTAMP_OFFSET

    one = bytearray(kbatch.encode([b"c", b"d"], base_offset=2, timestamps=[60, 70], compression="lz4"))
    struct.pack_into(">q", one, MAX_TIMESTAMP_OFFSET, 10**12)
    struct.pack_into(">I", one, CRC_OFFSET, crc32c(bytes(one[ATTRIBUTES_OFFSET:])))
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode([b"a", b"b"], timestamps=[5000, 50], compression="lz4"))
        w.append(bytes(one))
        w.append(kbatch.encode([b"e", b"f"], base_offset=4, timestamps=[900, 800], compression="lz4"))
    log = open_log(tmp_path / "t-0")
    for columns in (["offset"], ["offset", "value"]):
        stats = ScanStats()
        got = log.scan_records(columns, [("timestamp", "<", 100)], stats=stats, index=False).read_all()
        assert got.column("offset").to_pylist() == [1, 2, 3], columns
        assert stats.batches_dropped_by_stamps == 1, stats
    assert [r[2] for r in eager([log], [("timestamp", "<", 100)], "read_uncommitted")] == [1, 2, 3]


def test_a_corrupt_batch_fails_a_walked_scan_as_it_fails_the_eager_read(tmp_path: Path) -> None:
    part = out_of_order_log(tmp_path, "lz4")
    seg = sorted(part.glob("*.log"))[0]
    raw = bytearray(seg.read_bytes())
    at = int(kbatch.codec._core.scan(bytes(raw))[0]["position"][5])
    raw[at + 70] ^= 0x40  # inside batch 5's records: its CRC no longer matches
    seg.write_bytes(bytes(raw))
    log = open_log(part)
    with pytest.raises(kbatch.CorruptRecordError) as eager_error:
        log.read()
    for columns, terms in ((["offset"], []), (["offset", "value"], [("timestamp", "<", 5)])):
        with pytest.raises(kbatch.CorruptRecordError) as error:
            log.scan_records(columns, terms).read_all()
        assert error.value.batch_position == eager_error.value.batch_position
    skipped = log.read(on_corruption="skip").records["offset"].tolist()
    assert len(skipped) == 990
    got = open_log(part).scan_records(["offset"], on_corruption="skip").read_all()
    assert got.column("offset").to_pylist() == skipped


# ---------------------------------------------------------------------------------------------
# Typed values: every lazy scan gives what the eager read decoded by kbatch.values.decode gives


#: Random filters over the root of support.typed_scan_root (timestamps in ms)
TYPED_TERMS = st.lists(
    st.one_of(term("offset", -1, 50), term("timestamp", 1_700_000_000_000, 1_700_000_000_250),
              term("partition", 0, 2)),
    max_size=3,
)
#: Topics with a key subject (proto's keys are plain bytes)
KEYED = {"avro": True, "proto": False, "json": True}


def kept(table, terms: list):
    """The rows of ``table`` (kbatch's Arrow columns) that pass ``terms``, filtered in Python."""
    import pyarrow as pa

    rows = {"partition": table.column("partition").to_pylist(), "offset": table.column("offset").to_pylist(),
            "timestamp": [v // 1000 for v in table.column("timestamp").cast("int64").to_pylist()]}
    keep = [all(holds(op, rows[c][i], v) for c, op, v in terms) for i in range(table.num_rows)]
    return table.filter(pa.array(keep, pa.bool_()))


def eager_typed(root: Path, registry, topic: str, terms: list, iso: str, errors: str, keys: bool):
    """The eager reads of ``topic`` (each partition, topic and partition filled in) decoded by
    ``kbatch.values.decode`` with each subject's latest schema, then filtered, as one table."""
    import pyarrow as pa

    from kbatch.values import decode

    parts = []
    for log in open_logs(root, [topic]):
        out = log.to_arrow(isolation_level=iso)
        if keys:
            out = decode(out, registry, "key", registry.latest(f"{topic}-key"), errors)
        out = decode(out, registry, "value", registry.latest(f"{topic}-value"), errors)
        parts.append(kept(out, terms))
    return pa.concat_tables(parts)


def first_error(root: Path, registry, topic: str, terms: list, iso: str, keys: bool) -> str | None:
    """The error a decode with errors="raise" of the eager reads' rows that pass ``terms`` gives:
    the first record whose key or value does not decode (the value's error when both fail)."""
    import pyarrow as pa

    from kbatch.values import ValueDecodeError, decode

    rows = eager_typed(root, registry, topic, terms, iso, "null", keys)
    key_errors = rows.column("key_error").to_pylist() if keys else [None] * rows.num_rows
    found = next((v or k for v, k in zip(rows.column("value_error").to_pylist(), key_errors, strict=True) if v or k),
                 None)
    if not keys:  # the same as the eager decode of those rows raises
        raw = pa.concat_tables(kept(log.to_arrow(isolation_level=iso), terms) for log in open_logs(root, [topic]))
        try:
            decode(raw, registry, "value", registry.latest(f"{topic}-value"), "raise")
        except ValueDecodeError as exc:
            assert str(exc) == found
        else:
            assert found is None
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["avro", "proto", "json"]), terms=TYPED_TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]), limit=st.none() | st.integers(0, 30),
       columns=st.none() | st.permutations(["key", "key_schema_id", "key_error", "value", "value_schema_id",
                                             "value_error", "offset", "partition", "headers"]).map(lambda c: c[:4]))
def test_a_typed_scan_equals_the_eager_read_decoded_and_filtered(typed_root: Path, registry, topic: str,
                                                                 terms: list, iso: str, limit: int | None,
                                                                 columns: list[str] | None) -> None:
    keyed = KEYED[topic]
    want = eager_typed(typed_root, registry, topic, terms, iso, "null", keyed)
    if columns is not None and not keyed:
        columns = [c for c in columns if not c.startswith("key_")]
    cols = want.column_names if columns is None else columns
    got = scan_logs(open_logs(typed_root, [topic]), columns, terms, limit, isolation_level=iso,
                    values=registry, keys=registry if keyed else None, errors="null").read_all()
    assert got.column_names == cols
    want = want.select(cols)
    assert got.to_pylist() == (want if limit is None else want.slice(0, limit)).to_pylist()
    for name in cols:  # the decoded columns typed as the eager decode types them
        assert got.schema.field(name).type == want.schema.field(name).type, name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["avro", "proto", "json"]), terms=TYPED_TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]))
def test_a_typed_scan_raises_what_the_eager_decode_of_its_rows_raises(typed_root: Path, registry, topic: str,
                                                                      terms: list, iso: str) -> None:
    from kbatch.values import ValueDecodeError

    keyed = KEYED[topic]
    want = first_error(typed_root, registry, topic, terms, iso, keyed)
    scan = scan_logs(open_logs(typed_root, [topic]), ["offset", "key", "value"], terms, isolation_level=iso,
                     values=registry, keys=registry if keyed else None)
    if want is None:
        got = scan.read_all()
        rows = eager_typed(typed_root, registry, topic, terms, iso, "null", keyed)
        assert got.to_pylist() == rows.select(["offset", "key", "value"]).to_pylist()
    else:
        with pytest.raises(ValueDecodeError) as error:
            scan.read_all()
        assert str(error.value) == want
        assert f"topic {topic}, partition " in want and "offset " in want


def test_typed_values_decode_only_what_is_asked_for_and_push_filters_down(typed_root: Path, registry) -> None:
    import pyarrow as pa

    from kbatch.values import ValueDecodeError

    log = open_log(typed_root / "avro-0")
    # columns that are not decoded: no error raised (nothing decoded), batches walked as before
    stats, plain = ScanStats(), ScanStats()
    got = log.scan_records(["offset", "timestamp"], values=registry, stats=stats).read_all()
    assert got.equals(log.scan_records(["offset", "timestamp"], stats=plain).read_all())
    assert stats == plain and stats.batches_walked > 0
    assert log.scan_records(["offset", "key"], values=registry).read_all().column("key").type == pa.binary()
    # a decoded column, even the schema id alone, decodes: the bad value at offset 5 raises ...
    for columns in (["value"], ["value_schema_id"], None):
        with pytest.raises(ValueDecodeError, match=r"unknown schema id 99: .*partition 0, offset 5, schema id 99"):
            log.scan_records(columns, values=registry).read_all()
    # ... unless the filter skips it: the same batches read as without values, only their rows decoded
    for terms in ([("offset", "<", 5)], [("offset", ">", 5), ("offset", "<", 16)]):
        stats, plain = ScanStats(), ScanStats()
        got = log.scan_records(["offset", "value"], terms, values=registry, stats=stats).read_all()
        assert got.column("offset").to_pylist() == log.scan_records(["offset"], terms).read_all()[0].to_pylist()
        log.scan_records(["offset", "value"], terms, stats=plain).read_all()
        assert stats == plain
    # errors="null": the value_error column, a null value; the other columns as without values
    got = log.scan_records(["offset", "value", "value_error"], [("offset", "=", 5)], values=registry,
                           errors="null").read_all().to_pylist()
    assert got[0]["value"] is None and got[0]["value_error"].startswith("unknown schema id 99")


def test_typed_values_say_what_they_cannot_do(typed_root: Path, registry) -> None:
    from kbatch.values import SchemaNotFoundError

    with pytest.raises(ValueError, match=r"one topic per scan.*avro, json"):
        scan_logs(open_logs(typed_root, ["avro", "json"]), values=registry)
    with pytest.raises(TypeError, match=r"Registry\.from_log_dirs"):
        open_log(typed_root / "avro-0").scan_records(values="auto")
    with pytest.raises(TypeError, match=r"kbatch\.values\.Registry"):
        open_log(typed_root / "avro-0").scan_records(keys=object())
    with pytest.raises(ValueError, match="errors='null' is for"):
        open_log(typed_root / "avro-0").scan_records(errors="null")
    with pytest.raises(ValueError, match="errors must be"):
        open_log(typed_root / "avro-0").scan_records(values=registry, errors="skip")  # type: ignore[arg-type]
    with pytest.raises(SchemaNotFoundError):  # no subject proto-key: nothing to lay the keys out by
        open_log(typed_root / "proto-0").scan_records(keys=registry)
    with pytest.raises(kbatch.log.FilterError, match="value_error"):  # errors="raise" has no error column
        open_log(typed_root / "avro-0").scan_records(["value_error"], values=registry)


def polars_typed(root: Path, registry, topic: str, iso: str):
    """The eager decode of ``topic`` (errors="null") as a Polars frame: every row, to filter as a query does."""
    return pl.from_arrow(eager_typed(root, registry, topic, [], iso, "null", KEYED[topic]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["avro", "proto", "json"]), terms=TYPED_TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]),
       extra=st.sampled_from([None, "field", "good", "or"]), limit=st.none() | st.integers(0, 20))
def test_a_typed_polars_scan_equals_the_eager_read_decoded_and_filtered(typed_root: Path, registry, topic: str,
                                                                        terms: list, iso: str, extra: str | None,
                                                                        limit: int | None) -> None:
    from kbatch.polars import scan_kafka_log

    keys = "auto" if KEYED[topic] else None
    lf = scan_kafka_log(typed_root, topic=topic, values="auto", keys=keys, errors="null", isolation_level=iso)
    want = polars_typed(typed_root, registry, topic, iso)
    for t in terms:  # pushed down to the scan; applied to the eager frame
        lf = lf.filter(polars_expr(*t))
        want = want.filter(polars_expr(*t))
    if extra == "field":  # on a field of the value: applied by the scan after the decode
        lf = lf.filter(pl.col("value").struct.field("id") % 3 == 0)
        want = want.filter(pl.col("value").struct.field("id") % 3 == 0)
    elif extra == "good":
        lf = lf.filter(pl.col("value_error").is_null())
        want = want.filter(pl.col("value_error").is_null())
    elif extra == "or":
        lf = lf.filter((pl.col("offset") < 10) | pl.col("value").is_null())
        want = want.filter((pl.col("offset") < 10) | pl.col("value").is_null())
    cols = ["partition", "offset", "value", "value_schema_id", "value_error"] + (["key"] if keys else [])
    lf, want = lf.select(cols), want.select(cols)
    if limit is not None:
        lf, want = lf.head(limit), want.head(limit)
    got = lf.collect()
    assert got.rows() == want.rows()
    assert got.schema == want.schema


def test_a_typed_polars_scan_raises_names_and_refuses(typed_root: Path, registry, tmp_path: Path) -> None:
    from kbatch.polars import scan_kafka_log
    from kbatch.values import RegistryError, SchemaNotFoundError, ValueDecodeError

    lf = scan_kafka_log(typed_root, topic="json", values=registry)
    assert lf.filter(pl.col("offset") < 5).select("offset").collect().height == 10
    assert lf.filter(pl.col("offset") < 4).select(pl.col("value").struct.field("id")).collect()["id"].to_list() \
        == [0, 1, 2, 3, 100, 101, 102, 103]
    with pytest.raises(ValueDecodeError, match=r"unknown schema id 97: .*topic json, partition 0, offset 5"):
        lf.select("value").collect()
    # "auto": the _schemas of the root a partition directory (or the logs given) is in
    want = eager_typed(typed_root, registry, "proto", [("partition", "=", 1)], "read_uncommitted", "null", False)
    one = scan_kafka_log(typed_root / "proto-1", values="auto", errors="null").collect()
    assert one.rows() == pl.from_arrow(want).rows()
    logs = scan_kafka_log(open_logs(typed_root, ["proto"]), values="auto", errors="null").select("value").collect()
    assert logs.height == sum(len(log.read()) for log in open_logs(typed_root, ["proto"]))
    with pytest.raises(ValueError, match=r"one topic per scan.*_schemas, avro, json, proto"):
        scan_kafka_log(typed_root, values="auto")
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode([b"x"]))
    with pytest.raises(RegistryError, match="_schemas"):
        scan_kafka_log(tmp_path, values="auto")
    with pytest.raises(SchemaNotFoundError):  # a topic= with no partitions: still its subject's schema
        scan_kafka_log(typed_root, topic="elsewhere", values=registry)
    assert scan_kafka_log(typed_root, topic="elsewhere").collect().height == 0


def test_duckdb_typed_values_equal_the_eager_decode(typed_root: Path, registry) -> None:
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import PUSHDOWN, register

    con = duckdb.connect()
    for topic in ("avro", "proto", "json"):
        stats = ScanStats()
        keys = "auto" if KEYED[topic] else None
        # index=False: the first query would keep a time index that the second then uses (a fair
        # comparison of what the filters prune needs both scans to read the same way)
        register(con, topic, typed_root, topic=topic, values="auto", keys=keys, errors="null", stats=stats,
                 index=False)
        sql = (f'SELECT partition, "offset", value, value_schema_id, value_error{", key" if keys else ""} FROM {topic} '
               f'WHERE "offset" BETWEEN 3 AND 20 AND timestamp >= TIMESTAMPTZ \'2023-11-14 22:13:20.010+00\' '
               f'ORDER BY partition, "offset"')
        got = con.sql(sql).pl()
        since = dt.datetime(2023, 11, 14, 22, 13, 20, 10_000, tzinfo=dt.timezone.utc)  # 1_700_000_000_010 ms
        want = (polars_typed(typed_root, registry, topic, "read_uncommitted")
                .filter(pl.col("offset").is_between(3, 20) & (pl.col("timestamp") >= since))
                .sort("partition", "offset").select(got.columns))
        assert got.rows() == want.rows(), topic
        assert want.height and want["value_error"].null_count() < want.height  # bad records among them
        if PUSHDOWN:  # the filters reach the scan as they do without values (before 2.0, none does)
            plain = ScanStats()
            register(con, f"{topic}_raw", typed_root, topic=topic, stats=plain, index=False)
            con.sql(sql.replace(f"FROM {topic} ", f"FROM {topic}_raw ")
                    .replace("value_schema_id, value_error", "1, 2").replace(", key", "")).fetchall()
            assert stats == plain and stats.segments_skipped > 0, stats


def test_duckdb_typed_values_raise_the_first_bad_record(typed_root: Path, registry) -> None:
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import PUSHDOWN, register

    con = duckdb.connect()
    register(con, "orders", typed_root, topic="avro", values=registry)
    with pytest.raises(duckdb.Error, match=r"unknown schema id 99: .*topic avro, partition 0, offset 5"):
        con.sql('SELECT value.id FROM orders WHERE partition = 0').fetchall()
    query = 'SELECT "offset", value.id FROM orders WHERE partition = 0 AND "offset" < 5 ORDER BY "offset"'
    if PUSHDOWN:  # the filter reaches the scan: the bad record at offset 5 is never decoded
        assert con.sql(query).fetchall() == [(o, o) for o in range(5)]
    else:  # DuckDB < 2 reads (and decodes) every record of the view, then filters
        with pytest.raises(duckdb.Error, match="offset 5"):
            con.sql(query).fetchall()
