"""``kbatch convert --format iceberg`` (issue 28): a table per topic in a pyiceberg catalog, read back
with pyiceberg and Polars equal to ``LogDir.read``; the ledger in the snapshot summary makes
appends exactly once, after kills, and a concurrent run fail cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.tables import convert_cli, kafka_batch, rows_of_root, rows_of_table, summary_of, write_log

import kbatch
from kbatch.errors import CommitConflictError
from kbatch.tables import LEDGER_KEY, IcebergSink, Ledger, OffsetRange, default_catalog

pytest.importorskip("pyiceberg")
pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

TOPICS = ["legacy", "orders", "payments", "users"]


def scan(out: Path, topic: str) -> list[tuple]:
    return rows_of_table(default_catalog(out).load_table(f"kafka.{topic}").scan().to_arrow())


def all_rows(out: Path, topics=TOPICS) -> list[tuple]:
    return sorted((r for t in topics for r in scan(out, t)), key=lambda r: r[:3])


def test_tables_read_back_equal_the_log(sample, tmp_path):
    out = tmp_path / "out"
    s = summary_of(convert_cli(str(sample), str(out), "--format", "iceberg"))
    assert s["records"] == 1602 and s["format"] == "iceberg"
    assert [t["table"] for t in s["tables"]] == [f"kafka.{t}" for t in TOPICS]
    assert all_rows(out) == rows_of_root(sample)
    catalog = default_catalog(out)
    for topic in TOPICS:
        table = catalog.load_table(f"kafka.{topic}")
        frame = pl.scan_iceberg(table).collect()
        assert rows_of_table(frame) == rows_of_root(sample, [topic])  # Polars reads the same rows
        assert table.properties["kbatch.version"] == kbatch.__version__
        assert table.properties["kbatch.source-root"] == str(sample)
        assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("timestamp_day", "day")]
        snap = table.current_snapshot()
        t = next(t for t in s["tables"] if t["table"] == f"kafka.{topic}")
        assert t["snapshot"] == str(snap.snapshot_id) and t["records"] == int(snap.summary["added-records"])
        ledger = Ledger.from_json(snap.summary[LEDGER_KEY])
        assert [r.as_dict() for r in ledger] == t["ranges"]
    orders = Ledger.from_json(catalog.load_table("kafka.orders").current_snapshot().summary[LEDGER_KEY])
    assert list(orders) == [OffsetRange("orders", p, 0, 300) for p in range(3)]


def test_rerun_commits_nothing_and_says_since_which_snapshot(sample, tmp_path):
    out = tmp_path / "out"
    first = summary_of(convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders"))
    again = convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders", "--mode", "append",
                        json_summary=False)
    snap = first["tables"][0]["snapshot"]
    assert again.returncode == 0
    assert again.stdout == f"nothing new since snapshot {snap} of kafka.orders: no record read, nothing committed\n"
    table = default_catalog(out).load_table("kafka.orders")
    assert len(table.snapshots()) == 1 and str(table.current_snapshot().snapshot_id) == snap
    assert scan(out, "orders") == rows_of_root(sample, ["orders"])


def test_new_segments_appended_once(root, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", "iceberg", "--subscribe", "events"))
    write_log(root, "events", 0, 120)
    s = summary_of(convert_cli(str(root), str(out), "--format", "iceberg", "--subscribe", "events", "--mode", "append"))
    assert s["records"] == 70 and s["tables"][0]["ranges"] == [
        {"topic": "events", "partition": 0, "start": 50, "end": 120}]
    assert scan(out, "events") == rows_of_root(root, ["events"])
    summary = default_catalog(out).load_table("kafka.events").current_snapshot().summary
    assert list(Ledger.from_json(summary[LEDGER_KEY])) == [OffsetRange("events", 0, 0, 120)]


@pytest.mark.parametrize("stage", ["mid-write", "before-commit"])
def test_killed_append_then_rerun_is_exactly_once(root, tmp_path, stage):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", "iceberg", "--subscribe", "events,orders"))
    write_log(root, "events", 0, 120)
    killed = convert_cli(str(root), str(out), "--format", "iceberg", "--mode", "append",
                         env={"KBATCH_TEST_KILL_AT": stage})
    assert killed.returncode == -9, killed.stderr
    assert scan(out, "events") == rows_of_root(root, ["events"])[:50]  # at its last commit
    s = summary_of(convert_cli(str(root), str(out), "--format", "iceberg", "--mode", "append"))
    assert s["records"] == 70 + 1602 - 900
    assert all_rows(out, [*TOPICS, "events"]) == rows_of_root(root)


def test_partition_by_transforms(sample, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders",
                           "--partition-by", "partition", "--partition-by", "bucket(16, key)", "--namespace", "raw",
                           "--compression", "snappy"))
    table = default_catalog(out).load_table("raw.orders")
    assert table.properties["write.parquet.compression-codec"] == "snappy"
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("partition", "identity"),
                                                                         ("key_bucket", "bucket[16]")]
    assert rows_of_table(table.scan().to_arrow()) == rows_of_root(sample, ["orders"])
    bad = convert_cli(str(sample), str(tmp_path / "o2"), "--format", "iceberg", "--partition-by", "day(nope)")
    assert bad.returncode == 2 and "no column 'nope'" in bad.stderr and bad.stderr.count("\n") == 1


def test_overwrite_replaces_in_one_commit(sample, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders"))
    s = summary_of(convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders",
                               "--mode", "overwrite", "--ending-offsets", json.dumps({"orders": {"0": 10, "1": 10,
                                                                                                  "2": 10}})))
    assert s["records"] == 30
    assert [r[2] for r in scan(out, "orders")] == list(range(10)) * 3
    again = convert_cli(str(sample), str(out), "--format", "iceberg", "--subscribe", "orders")
    assert again.returncode == 2 and "exists" in again.stderr


def test_concurrent_runs_second_fails_cleanly(tmp_path):
    out = tmp_path / "out"
    first = IcebergSink(out, "append", topics=["t"])
    first.open(kafka_batch(range(0)).schema)
    first.write([kafka_batch(range(10))])
    first.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    a, b = IcebergSink(out, "append", topics=["t"]), IcebergSink(out, "append", topics=["t"])
    assert a.committed() == b.committed() == Ledger([OffsetRange("t", 0, 0, 10)])
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10, 20))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    with pytest.raises(CommitConflictError) as conflict:
        b.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    table = default_catalog(out).load_table("kafka.t")
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(20))
    # one line naming the other run's snapshot and what to do, no library text (issue 40, item 5)
    assert str(conflict.value) == (f"another run committed snapshot {table.current_snapshot().snapshot_id} of table "
                                   "kafka.t after this one read it: nothing of this run was committed to it; run "
                                   "again to append what is left")


def test_a_first_run_that_loses_a_table_keeps_the_other_runs_commit(tmp_path):
    """Two first runs into a new OUT: the one that loses the race for table t2 fails cleanly and
    leaves OUT (its catalog, the other run's commit) in place, not removed as its own."""
    def rows(topic: str, offsets: range) -> pa.RecordBatch:
        b = kafka_batch(offsets)
        return b.set_column(b.schema.get_field_index("topic"), "topic", pa.array([topic] * len(offsets)))

    out = tmp_path / "out"
    a = IcebergSink(out, "append", topics=["t1", "t2"])
    a.open(kafka_batch(range(0)).schema)
    a.write([rows("t1", range(5)), rows("t2", range(5))])
    b = IcebergSink(out, "append", topics=["t2"])
    b.open(kafka_batch(range(0)).schema)
    b.write([rows("t2", range(5))])
    b.commit(Ledger([OffsetRange("t2", 0, 0, 5)]), Ledger([OffsetRange("t2", 0, 0, 5)]))
    both = Ledger([OffsetRange("t1", 0, 0, 5), OffsetRange("t2", 0, 0, 5)])
    with pytest.raises(CommitConflictError, match=r"kafka\.t2"):
        a.commit(both, both)
    assert default_catalog(out).load_table("kafka.t2").scan().to_arrow().num_rows == 5
    again = IcebergSink(out, "append", topics=["t1", "t2"])
    assert again.committed() == Ledger([OffsetRange("t2", 0, 0, 5)])
