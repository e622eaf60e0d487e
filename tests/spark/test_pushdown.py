"""Filters pushed into the kafka-log source narrow what each task reads; rows stay exact."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyspark.sql.datasource as datasource

import kbatch
from kbatch.log import LogWriter, open_log
from kbatch.spark._pushdown import narrow, translate

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
    # out-of-order records), but each task builds and returns only the window's rows
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
