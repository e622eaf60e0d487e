"""``task_frame``, what ``kbatch convert`` runs: the same rows as the ``kafka-log`` source for the
same options, one Spark partition per planned task, and an empty plan an empty DataFrame."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import kbatch  # noqa: E402
from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.log import LogWriter  # noqa: E402
from kbatch.plan import Options, plan_slices, plan_tasks, range_key, resolve_range, select_logs  # noqa: E402
from kbatch.spark._frame import task_frame  # noqa: E402


def _planned(spark, options: dict[str, str]):
    opts = Options.parse(options)
    logs = select_logs(opts)
    try:
        ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
        tasks = plan_tasks(plan_slices(logs, ranges, opts), opts)
    finally:
        for d in logs:
            d.close()
    return tasks, task_frame(spark, tasks, opts)


def _rows(df) -> list[tuple]:
    """Every column of every row, in (topic, partition, offset) order."""
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: (r.topic, r.partition, r.offset))]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"includeHeaders": "true", "extraColumns": "true"},
        {"isolationLevel": "read_committed", "startingOffsets": '{"payments": {"0": 40}}', "subscribe": "payments"},
    ],
    ids=["default", "headers-extra", "read-committed-from-40"],
)
def test_same_rows_and_schema_as_the_source(spark, tmp_path, extra):
    write_sample(tmp_path)
    options = {"path": str(tmp_path), **extra}
    tasks, frame = _planned(spark, options)
    source = spark.read.format("kafka-log").options(**{k: v for k, v in options.items() if k != "path"})
    source = source.load(str(tmp_path))
    assert frame.schema == source.schema
    got = _rows(frame)
    assert got == _rows(source) and len(got) > 0
    assert frame.rdd.getNumPartitions() == len(tasks)


def test_one_spark_partition_per_task_and_empty_plan(spark, tmp_path):
    with LogWriter(tmp_path, "tiny", 0, segment_bytes=100) as w:  # a batch per segment
        for i in range(400):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i))
    tasks, frame = _planned(spark, {"path": str(tmp_path), "maxPartitionBytes": "2m"})
    assert 6 <= len(tasks) == frame.rdd.getNumPartitions() <= 8
    assert sorted(r.offset for r in frame.select("offset").collect()) == list(range(400))
    # the rows of task i come from task i's slices only
    per_task = frame.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, sorted(r.offset for r in rows))]).collect()
    for i, offsets in per_task:
        assert offsets == [o for s in tasks[i] for o in range(s.start, s.end)]
    opts = Options.parse({"path": str(tmp_path)})
    empty = task_frame(spark, [], opts)
    assert empty.count() == 0 and empty.columns == frame.columns


def test_replicas_all_has_the_root_column(spark, tmp_path: Path):
    for root, n in (("a", 6), ("b", 10)):
        with LogWriter(tmp_path / root / "logs", "t", 0) as w:
            w.append(kbatch.encode([b"%d" % i for i in range(n)]))
    _, frame = _planned(spark, {"path": str(tmp_path), "recursiveFileLookup": "true", "replicas": "all"})
    assert frame.columns[-2:] == ["root", "clusterId"]
    got = {r["root"]: r["count"] for r in frame.groupBy("root").count().collect()}
    assert got == {str(tmp_path / "a" / "logs"): 6, str(tmp_path / "b" / "logs"): 10}
