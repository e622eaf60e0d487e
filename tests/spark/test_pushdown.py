"""Filters pushed into the kafka-log source narrow what each task reads; rows stay exact."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.scan_roots import TERMS, eager, scan_roots

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyspark.sql.datasource as datasource

import kbatch
from kbatch.log import LogWriter, ScanStats, open_log, open_logs
from kbatch.spark._pushdown import narrow, translate
from kbatch.spark._pushdown import reader as task_tables

UTC = dt.timezone.utc
#: PySpark 4.1+ hands a Python source its filters (pyspark.sql.datasource.EqualTo, ...); on 4.0 the
#: filterPushdown option reads everything, rows still exact
HAS_FILTERS = hasattr(datasource, "GreaterThanOrEqual")
needs_filters = pytest.mark.skipif(not HAS_FILTERS, reason="PySpark 4.0 has no data source filters")


def _log(root: Path) -> Path:
    """100 batches of 10 records, offsets 0..999, timestamps 10 * offset ms, out of order in a batch."""
    with LogWriter(root, "t", 0, segment_bytes=2000) as w:
        for b in range(100):
            stamps = [10 * (10 * b + i) for i in range(10)][::-1]
            w.append(kbatch.encode([b"v%d" % (10 * b + i) for i in range(10)], base_offset=10 * b, timestamps=stamps))
    return root


@needs_filters
def test_translate_and_narrow(tmp_path: Path) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan, StringContains

    log = open_log(_log(tmp_path) / "t-0")
    at = dt.datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)  # 5000 ms: offset 500
    filters = [GreaterThanOrEqual(("timestamp",), at), LessThan(("offset",), 700), StringContains(("topic",), "t"),
               EqualTo(("offset",), "x")]
    terms = translate(filters)
    assert terms == [("timestamp", ">=", 5_000_000), ("offset", "<", 700)]
    assert narrow(log, 0, 1000, terms) == (500, 700)
    assert narrow(log, 0, 1000, translate([In(("partition",), (1, 2))])) == (0, 0)
    assert narrow(log, 0, 1000, []) == (0, 1000)


@pytest.mark.slow
def test_spark_pushes_filters_into_the_plan(spark, tmp_path: Path) -> None:
    root = _log(tmp_path)
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        at = dt.datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)

        def query(push: str):
            df = (spark.read.format("kafka-log").option("filterPushdown", push).option("maxPartitionBytes", 2000)
                  .load(str(root)))
            return df.filter((F.col("timestamp") >= F.lit(at)) & (F.col("offset") < 700)).select("offset", "value")

        pushed, full = query("true"), query("false")
        want = [(o, b"v%d" % o) for o in range(500, 700)]
        assert sorted((r.offset, bytes(r.value)) for r in pushed.collect()) == want
        assert sorted((r.offset, bytes(r.value)) for r in full.collect()) == want
        if HAS_FILTERS:  # the pushed query plans only the tasks of offsets [500, 700)
            assert pushed.rdd.getNumPartitions() < full.rdd.getNumPartitions() / 2
        else:  # 4.0: pushFilters is never called, every task planned
            assert pushed.rdd.getNumPartitions() == full.rdd.getNumPartitions()
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


@needs_filters
def test_narrow_by_time_trusts_headers_not_a_forged_timeindex(tmp_path: Path) -> None:
    import numpy as np
    from pyspark.sql.datasource import GreaterThanOrEqual

    from kbatch.log import TIME_INDEX_DTYPE

    with LogWriter(tmp_path, "t", 0, index_interval_bytes=1) as w:
        for i, ts in enumerate([5000, 1000, 2000]):  # CreateTime maxima need not rise
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[ts]))
    # an entry that passes the seek checks (its batch has max 2000, the one before a smaller max)
    np.array([(2000, 2)], dtype=TIME_INDEX_DTYPE).tofile(next((tmp_path / "t-0").glob("*.timeindex")))
    log = open_log(tmp_path / "t-0")
    at = dt.datetime(1970, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert narrow(log, 0, 3, translate([GreaterThanOrEqual(("timestamp",), at)])) == (0, 3)


@needs_filters
def test_tasks_return_only_the_rows_of_the_pushed_terms(tmp_path: Path) -> None:
    # a time window: the range is narrowed to its start only (an upper bound skips no batch of
    # out-of-order records by its header), and each task builds and returns only the window's rows
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan, StringStartsWith

    from kbatch.spark._source import KafkaLogDataSource

    root = _log(tmp_path)
    source = KafkaLogDataSource({"path": str(root), "filterPushdown": "true", "maxPartitionBytes": "2000"})
    reader = source.reader(source.schema())
    lo, hi = (dt.datetime(1970, 1, 1, 0, 0, s, tzinfo=UTC) for s in (3, 4))  # 3000 .. 4000 ms: offsets 300..399
    filters = [GreaterThanOrEqual(("timestamp",), lo), LessThan(("timestamp",), hi), StringStartsWith(("topic",), "t")]
    assert list(reader.pushFilters(filters)) == filters  # Spark still applies every one
    tasks = reader.partitions()
    assert min(p.start for t in tasks for p in t.pieces) == 300
    assert max(p.end for t in tasks for p in t.pieces) == 1000
    got = [(o, v) for t in tasks for b in reader.read(t)
           for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)]
    assert sorted(got) == [(o, b"v%d" % o) for o in range(300, 400)]
    # without pushed terms every row of the range comes back
    plain = KafkaLogDataSource({"path": str(root), "filterPushdown": "true"}).reader(source.schema())
    assert sum(b.num_rows for t in plain.partitions() for b in plain.read(t)) == 1000


def test_a_task_walks_the_batches_past_the_window_and_decodes_only_its_own(tmp_path: Path) -> None:
    """The records of each batch are out of order (its first timestamp is its largest): past the
    window's end, no header can tell that a batch holds nothing of it; the task's scan walks them
    (every record's timestamp read, no row built) and decodes only the window's batches."""
    from kbatch.log._scan import ScanStats
    from kbatch.spark._pushdown import reader

    log = open_log(_log(tmp_path) / "t-0")
    terms = [("timestamp", ">=", 3_000_000), ("timestamp", "<", 4_000_000)]  # offsets 300..399
    stats = ScanStats()
    tables = reader(terms, stats)
    assert tables is not None
    got = list(tables(log, 250, 1000))
    assert [int(o) for t in got for o in t.records["offset"]] == list(range(300, 400))
    assert [v for t in got for v in t.values()] == [b"v%d" % o for o in range(300, 400)]
    assert stats.batches_decoded == 10  # 300..399; 250..299 dropped by their max timestamps
    assert stats.batches_dropped_by_stamps == 60  # 400..999: every record at 4000 ms or later
    assert stats.rows == 100
    # read_committed and an offset cut give what the eager read gives, filtered
    cut = [int(o) for t in tables(log, 350, 360, isolation_level="read_committed") for o in t.records["offset"]]
    assert cut == list(range(350, 360))
    assert reader([("topic", "=", "t")]) is None  # no row term: the slices say it all


def _spark_filters(terms: list) -> list:
    """The Spark ``Filter`` s of scan terms (timestamps in ms as UTC datetimes, as Spark hands them)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    kinds = {"=": EqualTo, "<": LessThan, "<=": LessThanOrEqual, ">": GreaterThan, ">=": GreaterThanOrEqual}
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)

    def value(column: str, v: int):
        return epoch + dt.timedelta(milliseconds=v) if column == "timestamp" else v

    out = []
    for column, op, v in terms:
        if op in kinds:
            out.append(kinds[op]((column,), value(column, v)))
        elif op == "between":
            out += [GreaterThanOrEqual((column,), value(column, v[0])), LessThanOrEqual((column,), value(column, v[1]))]
        else:
            out.append(In((column,), tuple(value(column, x) for x in v)))
    return out


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return scan_roots(tmp_path_factory.mktemp("pushdown"))


@needs_filters
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["with", "bare", "lying"]), terms=TERMS,
       iso=st.sampled_from(["read_uncommitted", "read_committed"]), task_bytes=st.sampled_from([300, 1 << 20]))
def test_pushed_tasks_return_the_eager_read_filtered(roots: dict[str, Path], which: str, terms: list, iso: str,
                                                     task_bytes: int) -> None:
    """Every term is on topic, partition, offset or timestamp: the planned tasks together return
    exactly the eager read's rows that pass, before Spark filters them again."""
    from kbatch.spark._source import KafkaLogDataSource

    source = KafkaLogDataSource({"path": str(roots[which]), "filterPushdown": "true", "isolationLevel": iso,
                                 "maxPartitionBytes": str(task_bytes)})
    reader = source.reader(source.schema())
    filters = _spark_filters(terms)
    assert list(reader.pushFilters(filters)) == filters
    got = []
    for task in reader.partitions():
        for b in reader.read(task):
            stamps = [v // 1000 for v in b.column("timestamp").cast("int64").to_pylist()]
            got += zip(b.column("topic").to_pylist(), b.column("partition").to_pylist(),
                       b.column("offset").to_pylist(), stamps, b.column("value").to_pylist(), strict=True)
    assert sorted(got) == sorted(eager(open_logs(roots[which]), terms, iso))


@needs_filters
def test_tasks_keep_and_use_the_time_index(tmp_path: Path) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from kbatch.spark._source import KafkaLogDataSource

    root = _log(tmp_path / "root")
    lo, hi = (dt.datetime(1970, 1, 1, 0, 0, s, tzinfo=UTC) for s in (3, 4))  # offsets 300..399
    filters = [GreaterThanOrEqual(("timestamp",), lo), LessThan(("timestamp",), hi)]

    def rows(**options: str) -> list[int]:
        source = KafkaLogDataSource({"path": str(root), "filterPushdown": "true", "maxPartitionBytes": "2000",
                                     **options})
        reader = source.reader(source.schema())
        list(reader.pushFilters(filters))
        return sorted(o for t in reader.partitions() for b in reader.read(t) for o in b.column("offset").to_pylist())

    want = list(range(300, 400))
    index = tmp_path / "index"
    assert rows(timeIndexDir=str(index)) == want
    assert any(index.glob("*.tix"))  # the tasks kept their segments' index ...
    # ... which the tasks' reads of the next query use: the batches outside the window unread
    stats = ScanStats()
    tables = task_tables(translate(filters), stats, index_dir=str(index))
    assert tables is not None
    log = open_log(root / "t-0")
    got = [int(o) for t in tables(log, 300, 1000) for o in t.records["offset"]]
    assert sorted(got) == want
    assert stats.indexes_used > 0 and stats.batches_skipped_by_index > 0, stats
    assert rows(timeIndexDir=str(index)) == want
    off = tmp_path / "off"
    assert rows(timeIndex="false", timeIndexDir=str(off)) == want
    assert not off.exists() or not any(off.rglob("*.*"))  # neither kept nor used


@needs_filters
def test_narrow_ends_a_time_window_by_the_time_index(tmp_path: Path) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from kbatch.log import build_time_index

    root = _log(tmp_path / "root")
    lo, hi = (dt.datetime(1970, 1, 1, 0, 0, s, tzinfo=UTC) for s in (3, 4))  # offsets 300..399
    terms = translate([GreaterThanOrEqual(("timestamp",), lo), LessThan(("timestamp",), hi)])
    index = tmp_path / "index"
    log = open_log(root / "t-0")
    # without an index the upper bound cannot end the range (a batch's records are out of order)
    assert narrow(log, 0, 1000, terms, index=False) == (300, 1000)
    assert narrow(log, 0, 1000, terms, index_dir=str(index)) == (300, 1000)  # (none kept yet)
    build_time_index([log], index)
    assert narrow(log, 0, 1000, terms, index_dir=str(index)) == (300, 400)
    assert narrow(log, 0, 1000, terms, index=False) == (300, 1000)
    # a segment changed since (a batch appended to the last): its index is not used, its end kept
    with LogWriter(root, "t", 0, segment_bytes=2000) as w:
        w.append(kbatch.encode([b"late"], base_offset=1000, timestamps=[3500]))
    log = open_log(root / "t-0")
    lo_end = narrow(log, 0, 1001, terms, index_dir=str(index))
    assert lo_end[0] == 300 and lo_end[1] == 1001  # the late record (offset 1000, 3.5 s) may be in the window
    got = sorted(int(o) for t in task_tables(terms, index_dir=str(index))(log, *lo_end)
                 for o in t.records["offset"])
    assert got == [*range(300, 400), 1000]
