"""``kbatch convert --engine spark --format iceberg|delta`` (issue 28): Spark's executors write the
Parquet files, the driver commits them to the tables with the offsets ledger; read back with the
format's own library and Polars equal to ``LogDir.read``, appends once, reruns commit nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from support.tables import rows_of_root, rows_of_table, write_log

pytestmark = pytest.mark.slow  # a JVM and Python workers

pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.convert._arguments import add_arguments  # noqa: E402
from kbatch.convert._run import run  # noqa: E402


def _run(capsys, *argv: str) -> dict:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args([*argv, "--engine", "spark", "--json-summary"])) == 0, capsys.readouterr()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _rows(out: Path, fmt: str, topic: str) -> list[tuple]:
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table(f"kafka.{topic}")
        assert rows_of_table(pl.scan_iceberg(table).collect()) == rows_of_table(table.scan().to_arrow())
        return rows_of_table(table.scan().to_arrow())
    import deltalake

    frame = pl.scan_delta(str(out / topic)).collect()
    assert rows_of_table(frame) == rows_of_table(deltalake.DeltaTable(str(out / topic)).to_pyarrow_table())
    return rows_of_table(frame)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_spark_executors_write_the_driver_commits(spark, tmp_path, capsys, fmt):
    pytest.importorskip("pyiceberg" if fmt == "iceberg" else "deltalake")
    root, out = tmp_path / "root", tmp_path / "out"
    write_sample(root)
    write_log(root, "events", 0, 50)
    parts = ["--partition-by", "partition", "--partition-by", "day(timestamp)"]
    first = _run(capsys, str(root), str(out), "--format", fmt, "--subscribe", "orders,events", *parts)
    assert first["records"] == 950 and first["engine"] == "spark"
    assert [t["records"] for t in first["tables"]] == [50, 900]
    for topic in ("orders", "events"):
        assert _rows(out, fmt, topic) == rows_of_root(root, [topic])
    write_log(root, "events", 0, 120)
    second = _run(capsys, str(root), str(out), "--format", fmt, "--subscribe", "orders,events", "--mode", "append",
                  *parts)
    assert second["records"] == 70
    assert second["tables"][0]["ranges"] == [{"topic": "events", "partition": 0, "start": 50, "end": 120}]
    assert _rows(out, fmt, "events") == rows_of_root(root, ["events"])
    third = _run(capsys, str(root), str(out), "--format", fmt, "--subscribe", "orders,events", "--mode", "append",
                 *parts)
    assert third["records"] == 0 and len(third["since"]) == 2
    assert not (out / "_kbatch_staging").exists()


def test_one_task_writing_several_partitions_loses_no_file(spark, tmp_path, capsys):
    """A Spark task names its files alike in each partition folder it writes: all are committed."""
    pytest.importorskip("pyiceberg")
    import kbatch
    from kbatch.log import LogWriter

    root, out = tmp_path / "root", tmp_path / "out"
    with LogWriter(root, "days", 0) as w:  # one segment: one task; a record a day for 20 days
        w.append(kbatch.encode([b"v%d" % i for i in range(20)],
                               timestamps=[1_700_000_000_000 + 86_400_000 * i for i in range(20)]))
    s = _run(capsys, str(root), str(out), "--format", "iceberg", "--min-partitions", "1")
    assert s["records"] == 20 and s["tables"][0]["records"] == 20
    assert _rows(out, "iceberg", "days") == rows_of_root(root)


def _spread_root(root: Path) -> Path:
    """Topic ``spread``: 60 records 20 minutes apart (20 hours), keys ``user-<i>`` and two null keys."""
    import kbatch
    from kbatch.log import LogWriter

    with LogWriter(root, "spread", 0, segment_bytes=800) as w:
        for i in range(0, 60, 6):
            w.append(kbatch.encode([b"v%d" % j for j in range(i, i + 6)],
                                   keys=[None if j in (7, 44) else b"user-%d" % j for j in range(i, i + 6)],
                                   timestamps=[1_700_000_000_000 + 1_200_000 * j for j in range(i, i + 6)]),
                     assign_offsets=True)
    return root


def _files(table) -> list[tuple[tuple, list[dict]]]:
    """``(partition values, the rows of the file)`` of every data file of ``table``."""
    import pyarrow.parquet as pq

    return [(tuple(task.file.partition), pq.read_table(task.file.file_path.removeprefix("file://")).to_pylist())
            for task in table.scan().plan_files()]


def test_spark_hour_partitions_are_icebergs(spark, tmp_path, capsys):
    pytest.importorskip("pyiceberg")
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    from kbatch.tables import default_catalog

    root, out = _spread_root(tmp_path / "root"), tmp_path / "out"
    s = _run(capsys, str(root), str(out), "--format", "iceberg", "--partition-by", "hour(timestamp)")
    assert s["records"] == 60
    table = default_catalog(out).load_table("kafka.spread")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("timestamp_hour", "hour")]
    assert _rows(out, "iceberg", "spread") == rows_of_root(root)
    files = _files(table)
    hours = {(1_700_000_000_000 + 1_200_000 * j) // 3_600_000 for j in range(60)}
    assert {p for p, _ in files} == {(h,) for h in hours}  # one partition per hour, no other
    for (hour,), rows in files:
        assert {int(r["timestamp"].timestamp()) // 3600 for r in rows} == {hour}
    # a reader's time filter prunes to the files of the hours it covers
    h = min(hours) + 5
    where = And(GreaterThanOrEqual("timestamp", h * 3_600_000_000), LessThan("timestamp", (h + 1) * 3_600_000_000))
    assert {tuple(t.file.partition) for t in table.scan(row_filter=where).plan_files()} == {(h,)}
    got = sorted(table.scan(row_filter=where).to_arrow().column("offset").to_pylist())
    assert got == [j for j in range(60) if (1_700_000_000_000 + 1_200_000 * j) // 3_600_000 == h] and got


def test_spark_bucket_partitions_are_icebergs_murmur3(spark, tmp_path, capsys):
    pytest.importorskip("pyiceberg")
    from pyiceberg.expressions import EqualTo, IsNull
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import BinaryType

    from kbatch.tables import default_catalog

    bucket = BucketTransform(16).transform(BinaryType())  # pyiceberg's own (mmh3), per value
    root, out = _spread_root(tmp_path / "root"), tmp_path / "out"
    s = _run(capsys, str(root), str(out), "--format", "iceberg", "--partition-by", "bucket(16, key)")
    assert s["records"] == 60
    table = default_catalog(out).load_table("kafka.spread")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("key_bucket", "bucket[16]")]
    assert _rows(out, "iceberg", "spread") == rows_of_root(root)
    files = _files(table)
    for (b,), rows in files:  # every row's file sits in the bucket pyiceberg computes for its key
        assert {bucket(r["key"]) for r in rows} == {b}
    assert {p for p, _ in files} == {(bucket(b"user-%d" % j if j not in (7, 44) else None),) for j in range(60)}
    for key in (b"user-3", b"user-59"):
        scan = table.scan(row_filter=EqualTo("key", key))
        assert {tuple(t.file.partition) for t in scan.plan_files()} == {(bucket(key),)}
        assert [bytes(k) for k in scan.to_arrow().column("key").to_pylist()] == [key]
    assert sorted(table.scan(row_filter=IsNull("key")).to_arrow().column("offset").to_pylist()) == [7, 44]


def test_spark_delta_hour_partitions(spark, tmp_path, capsys):
    pytest.importorskip("deltalake")
    import deltalake

    root, out = _spread_root(tmp_path / "root"), tmp_path / "out"
    _run(capsys, str(root), str(out), "--format", "delta", "--partition-by", "hour(timestamp)")
    assert _rows(out, "delta", "spread") == rows_of_root(root)
    from datetime import timezone

    rows = deltalake.DeltaTable(str(out / "spread")).to_pyarrow_table().to_pylist()
    assert len({r["timestamp_hour"] for r in rows}) == 20  # the arrow engine's values: UTC YYYY-MM-DD-HH
    assert all(r["timestamp_hour"] == r["timestamp"].astimezone(timezone.utc).strftime("%Y-%m-%d-%H") for r in rows)
