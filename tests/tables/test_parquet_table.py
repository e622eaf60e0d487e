"""A Parquet folder with its offsets ledger (issue 28): ``--mode append`` converts each record once,
run after run, after kills at each stage, with a concurrent run, and says so when retention
deleted offsets nobody converted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.tables import (
    convert_cli,
    kafka_batch,
    retention_deleted,
    rows_of_root,
    rows_of_table,
    summary_of,
    write_log,
)

from kbatch.errors import CommitConflictError
from kbatch.tables import FolderSink, Ledger, OffsetRange, read_ledger

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402


def table_rows(out: Path) -> list[tuple]:
    return rows_of_table(ds.dataset(str(out), format="parquet", partitioning="hive").to_table())


def test_append_twice_writes_each_record_once(sample, tmp_path):
    out = tmp_path / "out"
    first = summary_of(convert_cli(str(sample), str(out)))
    again = convert_cli(str(sample), str(out), "--mode", "append")
    second = summary_of(again)
    assert first["records"] == 1602 and second["records"] == 0
    assert table_rows(out) == rows_of_root(sample)
    assert second["since"] == [f"commit 1 of {out}"] and second["input_bytes"] == 0 and second["tables"] == []
    assert read_ledger(out)[1] == 1  # nothing committed
    text = convert_cli(str(sample), str(out), "--mode", "append", json_summary=False).stdout
    assert text == f"nothing new since commit 1 of {out}: no record read, nothing committed\n"
    held, _ = read_ledger(out)
    assert held.get("orders", 1) == OffsetRange("orders", 1, 0, 300)
    assert held.get("payments", 0) == OffsetRange("payments", 0, 0, 155)  # past the last marker


def test_new_segments_are_appended_once(root, tmp_path):
    out = tmp_path / "out"
    assert summary_of(convert_cli(str(root), str(out)))["records"] == 1652
    write_log(root, "events", 0, 120)  # the log grew by 70 records, in new segments
    s = summary_of(convert_cli(str(root), str(out), "--mode", "append"))
    assert s["records"] == 70
    assert [(p["topic"], p["start"], p["end"]) for p in s["per_partition"] if p["records"]] == [("events", 50, 120)]
    assert s["tables"][0]["commit"] == "2" and s["tables"][0]["records"] == 70
    assert s["tables"][0]["ranges"] == [{"topic": "events", "partition": 0, "start": 50, "end": 120}]
    assert 0 < s["input_bytes"] < sum(f.stat().st_size for f in (root / "events-0").glob("*.log"))
    assert table_rows(out) == rows_of_root(root)
    assert read_ledger(out)[0].get("events", 0) == OffsetRange("events", 0, 0, 120)


def test_gap_after_retention_stops_before_committing(root, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--subscribe", "events"))
    write_log(root, "events", 0, 120)
    retention_deleted(root, "events", 0, 80)
    before = sorted(p.name for p in out.rglob("*"))
    proc = convert_cli(str(root), str(out), "--subscribe", "events", "--mode", "append")
    assert proc.returncode == 1
    assert "events-0: offsets 50..79 were deleted (the log starts at 80) before they were converted" in proc.stderr
    assert sorted(p.name for p in out.rglob("*")) == before and read_ledger(out)[1] == 1
    s = summary_of(convert_cli(str(root), str(out), "--subscribe", "events", "--mode", "append",
                               "--no-fail-on-data-loss"))
    assert s["gaps"] == [{"topic": "events", "partition": 0, "start": 50, "end": 80, "root": None}]
    assert s["records"] == 40
    assert [r[2] for r in table_rows(out)] == list(range(50)) + list(range(80, 120))


@pytest.mark.parametrize("stage", ["mid-write", "before-commit", "mid-commit"])
def test_killed_append_then_rerun_is_exactly_once(root, tmp_path, stage):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--subscribe", "orders"))
    write_log(root, "events", 0, 120)
    killed = convert_cli(str(root), str(out), "--mode", "append", env={"KBATCH_TEST_KILL_AT": stage})
    assert killed.returncode == -9, killed.stderr
    committed = read_ledger(out)[1]
    assert committed == (2 if stage == "mid-commit" else 1)
    s = summary_of(convert_cli(str(root), str(out), "--mode", "append"))
    assert table_rows(out) == rows_of_root(root)
    assert s["records"] == (0 if stage == "mid-commit" else 1602 - 900 + 120)
    assert not (out / "_kbatch_staging").exists()  # the dead run's files are gone or moved


@pytest.mark.parametrize("stage", ["mid-write", "before-commit"])
def test_killed_first_run_leaves_nothing(root, tmp_path, stage):
    out = tmp_path / "out"
    assert convert_cli(str(root), str(out), env={"KBATCH_TEST_KILL_AT": stage}).returncode == -9
    assert not out.exists()
    summary_of(convert_cli(str(root), str(out), "--mode", "append"))
    assert table_rows(out) == rows_of_root(root)


def test_concurrent_append_second_commit_fails_cleanly(tmp_path):
    out = tmp_path / "out"
    first = FolderSink(out, "append")
    first.open(kafka_batch(range(0)).schema)
    first.write([kafka_batch(range(10))])
    first.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    a, b = FolderSink(out, "append"), FolderSink(out, "append")  # both read commit 1
    assert a.committed() == b.committed() == Ledger([OffsetRange("t", 0, 0, 10)])
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10, 20))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    with pytest.raises(CommitConflictError, match="another run committed"):
        b.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    offsets = sorted(ds.dataset(str(out), partitioning="hive").to_table()["offset"].to_pylist())
    assert offsets == list(range(20))
    assert read_ledger(out) == (Ledger([OffsetRange("t", 0, 0, 20)]), 2)
    assert not (out / "_kbatch_staging").exists()


def test_append_to_a_folder_without_ledger_says_so(sample, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--subscribe", "orders"))
    shutil.rmtree(out / "_kbatch_ledger")  # as the Spark engine or an earlier kbatch wrote it
    s = summary_of(convert_cli(str(sample), str(out), "--subscribe", "orders", "--mode", "append"))
    assert s["records"] == 900 and any("holds files but no offsets ledger" in n for n in s["notes"])
    assert summary_of(convert_cli(str(sample), str(out), "--subscribe", "orders", "--mode", "append"))["records"] == 0


def test_only_dead_runs_of_this_host_lose_their_staging(sample, tmp_path):
    import socket
    import subprocess
    import sys

    out = tmp_path / "out"
    summary_of(convert_cli(str(sample), str(out), "--subscribe", "orders"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    staging = out / "_kbatch_staging"
    mine = staging / f"{dead.stdout.strip()}-aaaaaaaa@{socket.gethostname()}"
    other = staging / "1-bbbbbbbb@another-host"
    for d in (mine, other):
        d.mkdir(parents=True)
    run = convert_cli(str(sample), str(out), "--subscribe", "orders", "--mode", "append", json_summary=False)
    assert run.returncode == 0, run.stderr
    assert not mine.exists() and other.exists()  # another host's run may be alive: its files stay
    said = [ln for ln in run.stderr.splitlines() if "runs no longer alive" in ln]
    assert len(said) == 1 and mine.name in said[0]  # in one line


def test_orc_appends_once_too(root, tmp_path):
    out = tmp_path / "out"
    assert summary_of(convert_cli(str(root), str(out), "--format", "orc", "--subscribe", "events"))["records"] == 50
    write_log(root, "events", 0, 120)
    assert summary_of(convert_cli(str(root), str(out), "--format", "orc", "--subscribe", "events",
                                  "--mode", "append"))["records"] == 70
    again = summary_of(convert_cli(str(root), str(out), "--format", "orc", "--subscribe", "events", "--mode", "append"))
    assert again["records"] == 0 and again["since"] == [f"commit 2 of {out}"]
    got = rows_of_table(ds.dataset(str(out), format="orc", partitioning="hive").to_table())
    assert got == rows_of_root(root, ["events"])


def test_recursive_backup_ledger_keyed_by_root(tmp_path):
    """Two clusters' logs named alike under one backup: the ledger holds a range per root, and an
    append converts only what one root gained."""
    from support.roots import TOPIC_ID, values, write_root

    backup, out = tmp_path / "backup", tmp_path / "out"
    write_root(backup / "a" / "logs", values(5, b"a"), cluster_id="cluster-A")
    write_root(backup / "b" / "logs", values(8, b"b"), cluster_id="cluster-B", topic_id=TOPIC_ID[::-1])
    first = summary_of(convert_cli(str(backup), str(out), "--recursive"))
    assert first["records"] == 13
    held, _ = read_ledger(out)
    assert [(r.root, r.cluster_id, r.end) for r in held] == [
        (str(backup / "a" / "logs"), "cluster-A", 5), (str(backup / "b" / "logs"), "cluster-B", 8)]
    assert summary_of(convert_cli(str(backup), str(out), "--recursive", "--mode", "append"))["records"] == 0
    write_root(backup / "b" / "logs", values(11, b"b"), cluster_id="cluster-B", topic_id=TOPIC_ID[::-1])
    s = summary_of(convert_cli(str(backup), str(out), "--recursive", "--mode", "append"))
    assert s["records"] == 3 and [(r["root"], r["start"], r["end"]) for r in s["tables"][0]["ranges"]] == [
        (str(backup / "b" / "logs"), 8, 11)]
    assert ds.dataset(str(out), partitioning="hive").count_rows() == 16
