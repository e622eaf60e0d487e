"""``kbatch convert --format delta`` (issue 28): a Delta table per topic at ``OUT/<topic>``, read back
with deltalake and Polars equal to ``LogDir.read``; the ledger in the commit info and the app
transactions make appends exactly once, after kills, and a concurrent run fail cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tables import convert_cli, kafka_batch, rows_of_root, rows_of_table, summary_of, write_log

import kbatch
from kbatch.errors import CommitConflictError
from kbatch.tables import LEDGER_KEY, DeltaSink, Ledger, OffsetRange

deltalake = pytest.importorskip("deltalake")
pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

TOPICS = ["legacy", "orders", "payments", "users"]


def scan(out: Path, topic: str) -> list[tuple]:
    return rows_of_table(deltalake.DeltaTable(str(out / topic)).to_pyarrow_table())


def all_rows(out: Path, topics=TOPICS) -> list[tuple]:
    return sorted((r for t in topics for r in scan(out, t)), key=lambda r: r[:3])


def test_tables_read_back_equal_the_log(sample, tmp_path):
    out = tmp_path / "out"
    s = summary_of(convert_cli(str(sample), str(out), "--format", "delta"))
    assert s["records"] == 1602 and [t["table"] for t in s["tables"]] == [str(out / t) for t in TOPICS]
    assert all_rows(out) == rows_of_root(sample)
    for topic in TOPICS:
        table = deltalake.DeltaTable(str(out / topic))
        assert rows_of_table(pl.scan_delta(str(out / topic)).collect()) == rows_of_root(sample, [topic])
        assert table.metadata().partition_columns == ["timestamp_day"]
        assert kbatch.__version__ in table.metadata().description
        info = table.history(1)[0]
        t = next(t for t in s["tables"] if t["table"] == str(out / topic))
        assert t["version"] == str(table.version()) == "0"
        assert [r.as_dict() for r in Ledger.from_json(info[LEDGER_KEY])] == t["ranges"]
        assert info["kbatch.source-root"] == str(sample)
    orders = deltalake.DeltaTable(str(out / "orders"))
    assert [orders.transaction_version(f"kbatch:orders-{p}") for p in range(3)] == [300, 300, 300]


def test_rerun_commits_nothing_and_says_since_which_version(sample, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--format", "delta", "--subscribe", "orders"))
    again = convert_cli(str(sample), str(out), "--format", "delta", "--subscribe", "orders", "--mode", "append",
                        json_summary=False)
    assert again.stdout == f"nothing new since version 0 of {out / 'orders'}: no record read, nothing committed\n"
    assert deltalake.DeltaTable(str(out / "orders")).version() == 0


def test_new_segments_appended_once(root, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events"))
    write_log(root, "events", 0, 120)
    s = summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events", "--mode", "append"))
    assert s["records"] == 70 and s["tables"][0]["version"] == "1"
    assert s["tables"][0]["ranges"] == [{"topic": "events", "partition": 0, "start": 50, "end": 120}]
    assert scan(out, "events") == rows_of_root(root, ["events"])
    assert deltalake.DeltaTable(str(out / "events")).transaction_version("kbatch:events-0") == 120


@pytest.mark.parametrize("stage", ["mid-write", "before-commit"])
def test_killed_append_then_rerun_is_exactly_once(root, tmp_path, stage):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events,orders"))
    write_log(root, "events", 0, 120)
    killed = convert_cli(str(root), str(out), "--format", "delta", "--mode", "append",
                         env={"KBATCH_TEST_KILL_AT": stage})
    assert killed.returncode == -9, killed.stderr
    assert scan(out, "events") == rows_of_root(root, ["events"])[:50]  # at its last commit
    s = summary_of(convert_cli(str(root), str(out), "--format", "delta", "--mode", "append"))
    assert s["records"] == 70 + 1602 - 900
    assert all_rows(out, [*TOPICS, "events"]) == rows_of_root(root)


def test_partition_by_columns_and_derived_time(sample, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--format", "delta", "--subscribe", "orders",
                           "--partition-by", "partition", "--partition-by", "hour(timestamp)", "--compression", "zstd"))
    table = deltalake.DeltaTable(str(out / "orders"))
    import pyarrow.parquet as pq

    assert {pq.ParquetFile(f).metadata.row_group(0).column(0).compression
            for f in (out / "orders").rglob("*.parquet")} == {"ZSTD"}
    assert table.metadata().partition_columns == ["partition", "timestamp_hour"]
    assert scan(out, "orders") == rows_of_root(sample, ["orders"])
    hours = table.to_pyarrow_table(columns=["timestamp", "timestamp_hour"]).to_pylist()
    assert all(r["timestamp_hour"] == r["timestamp"].strftime("%Y-%m-%d-%H") for r in hours)
    bad = convert_cli(str(sample), str(tmp_path / "o2"), "--format", "delta", "--partition-by", "bucket(16, key)")
    assert bad.returncode == 2 and "Delta partitions by columns" in bad.stderr


def test_concurrent_runs_second_fails_cleanly(tmp_path):
    out = tmp_path / "out"
    first = DeltaSink(out, "append", topics=["t"])
    first.open(kafka_batch(range(0)).schema)
    first.write([kafka_batch(range(10))])
    first.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    a, b = DeltaSink(out, "append", topics=["t"]), DeltaSink(out, "append", topics=["t"])
    assert a.committed() == b.committed() == Ledger([OffsetRange("t", 0, 0, 10)])
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10, 20))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    with pytest.raises(CommitConflictError) as conflict:
        b.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    # one line naming the other run's version and what to do, no library text (issue 40, item 5)
    assert str(conflict.value) == (f"another run committed version 1 of table {out / 't'} after this one read it: "
                                   "nothing of this run was committed to it; run again to append what is left")
    table = deltalake.DeltaTable(str(out / "t"))
    assert sorted(table.to_pyarrow_table()["offset"].to_pylist()) == list(range(20))
    assert len(list((out / "t").rglob("*.parquet"))) == 2  # the loser's files deleted


def test_two_first_runs_the_second_fails_cleanly(tmp_path):
    out = tmp_path / "out"
    a, b = DeltaSink(out, "append", topics=["t"]), DeltaSink(out, "append", topics=["t"])  # no table yet
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    with pytest.raises(CommitConflictError, match="another run"):
        b.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    assert sorted(deltalake.DeltaTable(str(out / "t")).to_pyarrow_table()["offset"].to_pylist()) == list(range(10))
