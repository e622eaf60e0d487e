"""Lazy scans with pushdown (issue 30): a time window of a day of log, and a narrow projection.

Two measurements, each against the issue's target:

``window``
    1% of a simulated day by time (``timestamp`` in a 14.4-minute window in the middle),
    ``offset`` and ``value`` selected, through :func:`kbatch.polars.scan_kafka_log`: with
    Polars' predicate and projection pushdown (segments and batches skipped by kbatch) vs
    the same query with both turned off (every batch decoded, every column built, Polars
    filters). Target: at least 20x. Bytes of batches decoded and walked are reported for
    both. The same window is also measured at the start and at the end of the day (with
    pushdown: the cost of a window lies in the batches after it, walked), and in the
    middle of the same log written uncompressed.
``projection``
    ``LogDir.scan_records(["offset", "timestamp"])`` of the whole log vs
    ``scan_records()`` (every column). Target: at least 3x.
``spark`` (:func:`test_spark_scan_bench`, skipped without PySpark or Java)
    The same window through the ``kafka-log`` source in a warm local session (``local[2]``):
    option ``filterPushdown=true`` with ``spark.sql.python.filterPushdown.enabled`` vs without,
    counting the rows and summing the value lengths. Target: at least 5x. Tasks planned and
    bytes of log planned (the tasks' slices) are reported for both. Spark 4.1+ hands the
    filters over; the source narrows each partition's range by the timestamp lower bound
    (an upper bound skips no batch of several out-of-order records by its header, see
    above), and each task reads its slice with the scan: the batches past the window are
    walked, not decoded, and only the window's rows are built. Also with the time index
    (options ``timeIndex``, ``timeIndexDir``): the first query keeps it, the next ones read only
    the batches it does not rule out (reported: the next query against no pushdown, target 5x).

Workload: :func:`workload.core_workload` records (JSON-like values of ~130 bytes, keys, one
header) in batches of 500, lz4, segments of 64 MiB; ``KBATCH_BENCH_SCAN_RECORDS`` records
(default 5,000,000) over one day: timestamps rise evenly with +-50 ms of jitter, so
records are out of order inside batches. A timestamp upper bound cannot skip such a batch
by its header (its records may be older than its first), so every batch from the window's
end to the end of the log is walked (``kbatch.codec._core.stamps``: decompressed into a scratch
buffer, its records' timestamps read, no row built) and skipped when all its records are
past the window; only the window's batches are decoded.

Run: ``PYTHONPATH=. python bench/test_bench_scan.py`` prints the table; under pytest
(``pytest bench/test_bench_scan.py``) each target is reported beside its figure (a miss is
a ``TargetMissed`` warning, not a failure).

Caveat: one process, best of three rounds, on a shared machine; the log is in the page cache.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from workload import core_workload, report

import kbatch
from kbatch.log import LogWriter, ScanStats, open_log

RECORDS = int(os.environ.get("KBATCH_BENCH_SCAN_RECORDS", "5000000"))
DAY_MS = 86_400_000
BLOCK = 10_000
ROUNDS = 3
#: Alternate rounds of the first query with the time index and the same query without it.
PAIRED = 7
REPO = str(Path(__file__).resolve().parents[1])


#: Where the 1% windows start, in the day.
WINDOWS = (("start", 0), ("middle", DAY_MS // 2), ("end", DAY_MS - DAY_MS // 100))


def build(root: Path, n: int = RECORDS, compression: str = "lz4") -> Path:
    """A partition of ``n`` records over one day (see the module docstring)."""
    values, keys, _, headers = core_workload(BLOCK)
    rng = np.random.default_rng(7)
    with LogWriter(root, "events", 0, segment_bytes=64 << 20) as w:
        for start in range(0, n, BLOCK):
            k = min(BLOCK, n - start)
            ts = (np.arange(start, start + k, dtype=np.int64) * DAY_MS) // n + rng.integers(-50, 51, k)
            stamps = np.maximum(ts, 0).tolist()
            w.append(kbatch.encode(values[:k], keys=keys[:k], headers=headers[:k], timestamps=stamps,
                                   base_offset=start, max_batch_records=500, compression=compression))
    return root / "events-0"


def best_of_one(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def best(fn: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(ROUNDS):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def measure(part: Path, windows: tuple[tuple[str, int], ...] = WINDOWS, projection: bool = True,
            index: bool = True) -> dict[str, Any]:
    """Seconds (best of ``ROUNDS``), rows, bytes decoded and walked of the 1% window at each of
    ``windows`` with pushdown (``pushdown_<where>``, no time index) and in the middle without
    (``no_pushdown``); with ``index``, the middle window with the time index, the first query
    (``index_first``, writing it) and the next (``index_next``); with ``projection``, the two
    projections of the whole log."""
    import polars as pl

    from kbatch.polars import scan_kafka_log

    log = open_log(part)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    out: dict[str, Any] = {"records": RECORDS, "segments": len(log.segments),
                           "log_bytes": sum(s.size for s in log.segments)}

    def query(push: bool, at: int, stats: ScanStats, index_dir: str | None = None) -> int:
        lo = epoch + dt.timedelta(milliseconds=at)
        hi = lo + dt.timedelta(milliseconds=DAY_MS // 100)
        window = (pl.col("timestamp") >= lo) & (pl.col("timestamp") < hi)
        flags = pl.QueryOptFlags(predicate_pushdown=push, projection_pushdown=push)
        df = (scan_kafka_log(log, stats=stats, index=index_dir is not None, index_dir=index_dir).filter(window)
              .select("offset", "value").collect(optimizations=flags))
        return df.height

    runs = [("pushdown_" + where, True, at) for where, at in windows] + [("no_pushdown", False, DAY_MS // 2)]
    for name, push, at in runs:
        stats = ScanStats()
        out[name], rows = best(lambda push=push, at=at, stats=stats: query(push, at, stats))  # type: ignore[misc]
        out[name + "_rows"] = rows
        out[name + "_bytes"] = stats.bytes_decoded // ROUNDS
        out[name + "_walked"] = getattr(stats, "bytes_walked", 0) // ROUNDS  # (0 before the walk)
    if index:
        # the first query with the index (it writes it, each round into a new folder) and the
        # same query without it, in alternate rounds (the same state of the machine for both)
        with tempfile.TemporaryDirectory() as tmp:
            stats, off_stats = ScanStats(), ScanStats()
            first, off = [], []
            for _ in range(PAIRED):
                off.append(best_of_one(lambda: query(True, DAY_MS // 2, off_stats)))
                first.append(best_of_one(lambda: query(True, DAY_MS // 2, stats, tempfile.mkdtemp(dir=tmp))))
            for name, runs in (("index_off", off), ("index_first", first)):
                times = sorted(t for t, _ in runs)
                out[name], out[name + "_median"], out[name + "_rows"] = times[0], times[len(times) // 2], runs[0][1]
            out["index_first_bytes"] = stats.bytes_decoded // PAIRED
            out["index_first_walked"] = stats.bytes_walked // PAIRED
            out["index_first_written"] = stats.indexes_written // PAIRED
            # the next ones: the index there (the last round's folder)
            built = sorted(Path(tmp).iterdir())[-1]
            stats = ScanStats()
            out["index_next"], out["index_next_rows"] = best(lambda: query(True, DAY_MS // 2, stats, str(built)))
            out["index_next_bytes"] = stats.bytes_decoded // ROUNDS
            out["index_next_walked"] = stats.bytes_walked // ROUNDS
            out["index_next_skipped"] = stats.batches_skipped_by_index // ROUNDS
            out["index_next_framed"] = stats.batches_framed // ROUNDS
    if projection:
        for name, cols in (("two_columns", ["offset", "timestamp"]), ("all_columns", None)):
            out[name], _ = best(lambda cols=cols: log.scan_records(cols).read_all().num_rows)  # type: ignore[misc]
    return out


def _window() -> tuple[dt.datetime, dt.datetime]:
    lo = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=DAY_MS // 2)
    return lo, lo + dt.timedelta(milliseconds=DAY_MS // 100)


def spark_session() -> Any:
    """A local[2] session with kbatch's sources registered (skips without Java)."""
    import shutil
    import sys

    if shutil.which("java") is None:
        pytest.skip("no Java for Spark")
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kbatch.spark

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kbatch.spark.register(spark)
    return spark


def planned(root: Path, push: bool, index: str | None = None) -> tuple[int, int]:
    """(tasks, bytes of log) the kafka-log source plans for the window (``push``: as Spark 4.1+
    calls ``pushFilters`` with the window's filters; without them on 4.0; ``index``: the time
    index folder, else none used)."""
    from pyspark.sql import datasource

    from kbatch.spark._source import KafkaLogDataSource

    options = {"path": str(root), "filterPushdown": str(push).lower(),
               **({"timeIndexDir": index} if index else {"timeIndex": "false"})}
    source = KafkaLogDataSource(options)
    reader = source.reader(source.schema())
    if push and hasattr(datasource, "GreaterThanOrEqual"):
        lo, hi = _window()
        list(reader.pushFilters([datasource.GreaterThanOrEqual(("timestamp",), lo),
                                 datasource.LessThan(("timestamp",), hi)]))
    tasks = reader.partitions()
    return len(tasks), sum(p.size for t in tasks for p in getattr(t, "pieces", ()))


def measure_spark(root: Path) -> dict[str, Any]:
    """Seconds (best of ``ROUNDS`` after a warm-up), rows, tasks and planned bytes, with and without pushdown."""
    from pyspark.sql import functions as F

    spark = spark_session()
    lo, hi = _window()
    out: dict[str, Any] = {}

    index = tempfile.mkdtemp(prefix="kbatch-bench-spark-index-")
    fresh: list[str] = []

    def query(push: bool, use_index: bool = False, folder: str | None = None) -> tuple[int, int]:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", str(push).lower())
        df = (spark.read.format("kafka-log").option("filterPushdown", str(push).lower())
              .option("timeIndex", str(use_index).lower()).option("timeIndexDir", folder or index).load(str(root))
              .filter((F.col("timestamp") >= F.lit(lo)) & (F.col("timestamp") < F.lit(hi))))
        row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("v")).collect()[0]
        return int(row["n"]), int(row["v"])

    try:
        query(False)  # warm: the session, the Python workers
        for name, push in (("spark_pushdown", True), ("spark_no_pushdown", False)):
            out[name], (out[name + "_rows"], out[name + "_value_bytes"]) = best(lambda push=push: query(push))
            out[name + "_tasks"], out[name + "_bytes"] = planned(root, push)
        # the time index: the first query keeps it (best of ROUNDS, each into an empty folder), the
        # next ones use it

        def first() -> tuple[int, int]:
            fresh.append(tempfile.mkdtemp(prefix="kbatch-bench-spark-index-"))
            return query(True, True, fresh[-1])

        out["spark_index_first"], _ = best(first)
        query(True, True)  # (keeps the index the next queries use)
        out["spark_index_next"], (out["spark_index_next_rows"], out["spark_index_next_value_bytes"]) = best(
            lambda: query(True, True))
        out["spark_index_next_tasks"], out["spark_index_next_bytes"] = planned(root, True, index)
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
        for folder in (index, *fresh):
            shutil.rmtree(folder, ignore_errors=True)
    return out


def spark_table(r: dict[str, Any]) -> str:
    mb = 1 << 20
    import pyspark

    rows = [f"PySpark {pyspark.__version__}, local[2], warm session",
            "| query | seconds | tasks | MiB of log planned | rows |", "| --- | --- | --- | --- | --- |"]
    for name, label in (("spark_pushdown", "1% window, filterPushdown, no time index"),
                        ("spark_index_next", "1% window, filterPushdown, next query with the time index"),
                        ("spark_no_pushdown", "1% window, no pushdown")):
        rows.append(f"| {label} | {r[name]:.2f} | {r[name + '_tasks']} | {r[name + '_bytes'] / mb:.0f} | "
                    f"{r[name + '_rows']:,} |")
    rows.append(f"first query with the time index (keeps it; best of {ROUNDS}, each into an empty folder): "
                f"{r['spark_index_first']:.2f} s")
    return "\n".join(rows)


def table(r: dict[str, Any], plain: dict[str, Any]) -> str:
    mb = 1 << 20

    def row(label: str, d: dict[str, Any], name: str) -> str:
        return (f"| {label} | {d[name]:.2f} | {d[name + '_bytes'] / mb:.0f} | {d[name + '_walked'] / mb:.0f} | "
                f"{d[name + '_rows']:,} |")

    return "\n".join([
        (f"{r['records']:,} records, {r['segments']} segments, {r['log_bytes'] / mb:.0f} MiB of log (lz4), "
         f"{plain['log_bytes'] / mb:.0f} MiB uncompressed; {platform.processor() or platform.machine()}"),
        "| query | seconds | MiB of batches decoded | MiB walked | rows |",
        "| --- | --- | --- | --- | --- |",
        row("1% window at the start, pushdown", r, "pushdown_start"),
        row("1% window in the middle, pushdown", r, "pushdown_middle"),
        row("1% window at the end, pushdown", r, "pushdown_end"),
        row("1% window in the middle, no pushdown", r, "no_pushdown"),
        row("1% window in the middle, pushdown, first query with the time index (writes it)", r, "index_first"),
        row("1% window in the middle, pushdown, next query with the time index", r, "index_next"),
        row("uncompressed: 1% window in the middle, pushdown", plain, "pushdown_middle"),
        row("uncompressed: 1% window in the middle, no pushdown", plain, "no_pushdown"),
        f"| offset+timestamp, whole log | {r['two_columns']:.2f} | | | |",
        f"| every column, whole log | {r['all_columns']:.2f} | | | |",
    ])


def test_scan_bench() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(build(Path(tmp) / "lz4"))
        plain = measure(build(Path(tmp) / "none", compression="none"), WINDOWS[1:2], projection=False, index=False)
    print("\n" + table(r, plain))
    for d in (r, plain):
        assert d["pushdown_middle_rows"] == d["no_pushdown_rows"] > 0
    assert r["index_first_rows"] == r["index_next_rows"] == r["index_off_rows"] == r["no_pushdown_rows"]
    for where, _ in WINDOWS:
        print(f"window at {where}: {r['no_pushdown'] / r['pushdown_' + where]:.1f}x faster with pushdown")
    print(f"uncompressed, window in the middle: {plain['no_pushdown'] / plain['pushdown_middle']:.1f}x faster")
    speed = r["no_pushdown"] / r["pushdown_middle"]
    report(f"window with pushdown {speed:.1f}x faster", "20x", speed >= 20)
    print(f"time index: the next query skipped {r['index_next_skipped']:,} batches unread, framed "
          f"{r['index_next_framed']:,}; the first wrote {r['index_first_written']} index files")
    speed = r["no_pushdown"] / r["index_next"]
    report(f"window with pushdown and the time index {speed:.1f}x faster than without pushdown", "20x", speed >= 20)
    ratio = r["index_first_median"] / r["index_off_median"]
    print(f"first query with the time index (writing it), {PAIRED} rounds alternating with the same query without "
          f"it: best {r['index_first']:.3f} s against {r['index_off']:.3f} s, median {r['index_first_median']:.3f} s "
          f"against {r['index_off_median']:.3f} s")
    report(f"first query with the time index (writing it) {ratio:.2f}x the time of the same query without it "
           "(medians)", "at most 1x", ratio <= 1.0)
    narrow = r["all_columns"] / r["two_columns"]
    report(f"offset+timestamp projection {narrow:.1f}x faster than every column", "3x", narrow >= 3)


def test_spark_scan_bench() -> None:
    pytest.importorskip("pyspark")
    with tempfile.TemporaryDirectory() as tmp:
        part = build(Path(tmp))
        r = measure_spark(Path(tmp))
        lo, hi = _window()
        want = open_log(part).scan_records(["offset"], [("timestamp", ">=", lo), ("timestamp", "<", hi)], index=False)
        r["rows"] = want.read_all().num_rows
    print("\n" + spark_table(r))
    assert r["spark_pushdown_rows"] == r["spark_no_pushdown_rows"] == r["rows"] > 0
    assert r["spark_pushdown_value_bytes"] == r["spark_no_pushdown_value_bytes"] == r["spark_index_next_value_bytes"]
    assert r["spark_index_next_rows"] == r["rows"]
    speed = r["spark_no_pushdown"] / r["spark_pushdown"]
    report(f"Spark window with filterPushdown (no time index) {speed:.1f}x faster", "5x", speed >= 5)
    speed = r["spark_no_pushdown"] / r["spark_index_next"]
    report(f"Spark window with filterPushdown, next query with the time index, {speed:.1f}x faster than no "
           f"pushdown", "5x", speed >= 5)


if __name__ == "__main__":
    import sys

    test_scan_bench() if "spark" not in sys.argv[1:] else test_spark_scan_bench()
