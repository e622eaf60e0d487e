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

from kbatch import _convert  # noqa: E402
from kbatch._sample import write_sample  # noqa: E402


def _run(capsys, *argv: str) -> dict:
    parser = argparse.ArgumentParser()
    _convert.add_arguments(parser)
    assert _convert.run(parser.parse_args([*argv, "--engine", "spark", "--json-summary"])) == 0, capsys.readouterr()
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
