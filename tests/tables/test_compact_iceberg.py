"""``kbatch compact`` of Iceberg tables (issue 38): N appends of small batches, then one
compaction: the file count drops, every record is there once (read by pyiceberg and by DuckDB's
``iceberg_scan``), the ledger is unchanged, and a later append continues exactly once; killed at
each stage and run again, the same; ``--retain`` expires old snapshots, ``--dry-run`` changes
nothing, and a run that loses to another's commit changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.tables import REPO, convert_cli, rows_of_root, rows_of_table, write_log

from kbatch.errors import CommitConflictError
from kbatch.tables import LEDGER_KEY, default_catalog

TABLE = "kafka.events"


def _table(out: Path) -> Any:
    return default_catalog(out).load_table(TABLE)


def _files(out: Path) -> int:
    return sum(1 for _ in _table(out).scan().plan_files())


def _rows(out: Path) -> list[tuple]:
    return rows_of_table(_table(out).scan().to_arrow())


def _duckdb_rows(out: Path) -> list[tuple]:
    from support.duckdb_readers import duckdb_with

    con = duckdb_with("avro", "iceberg")
    got = con.execute(f"select topic, partition, \"offset\", key, value from "
                      f"iceberg_scan('{_table(out).metadata_location}')").fetchall()
    return sorted(got, key=lambda r: r[:3])


def _ledger(out: Path):
    from kbatch.tables._iceberg import read_ledger

    return read_ledger(_table(out))[0]


def _grow(root: Path, out: Path, runs: int, start: int = 50, *extra: str) -> int:
    n = start
    for _ in range(runs):
        n += 10
        write_log(root, "events", 0, n)
        proc = convert_cli(str(root), str(out), "--format", "iceberg", "--mode", "append", "--subscribe", "events",
                           *extra)
        assert proc.returncode == 0, proc.stderr
    return n


def _kbatch(*argv: str, stage: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if stage:
        env["KBATCH_TEST_KILL_AT"] = stage
    return subprocess.run([sys.executable, "-m", "kbatch", *argv], capture_output=True, text=True, env=env,
                          timeout=300)


def _on_disk(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in (out / "kafka").rglob("*") if p.is_file()}


@pytest.mark.parametrize("upsert", [False, True], ids=["append", "upsert"])
def test_compact_after_appends(root, tmp_path, upsert):
    out = tmp_path / "out"
    extra = ("--upsert",) if upsert else ()
    n = _grow(root, out, 6, 0, *extra)
    before, ledger = _files(out), _ledger(out)
    assert before >= 6 and len(ledger)
    proc = _kbatch("compact", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"table {TABLE}: compacted {before} data files into 1 (commit " in proc.stdout, proc.stdout
    assert _files(out) == 1
    snap = _table(out).metadata.current_snapshot()
    assert snap.summary.get(LEDGER_KEY)  # the compaction's own snapshot carries the ledger
    assert _ledger(out) == ledger
    expect = rows_of_root(root, ["events"])
    assert len(expect) == n
    assert _rows(out) == expect
    assert _duckdb_rows(out) == expect
    # a further append continues exactly once
    n = _grow(root, out, 1, n, *extra)
    assert _rows(out) == rows_of_root(root, ["events"]) and len(_rows(out)) == n
    assert _duckdb_rows(out) == _rows(out)
    again = _kbatch("compact", str(out), "--dry-run")
    assert again.returncode == 0 and "would compact 2 data files into 1" in again.stdout, again.stdout


def test_dry_run_changes_nothing(root, tmp_path):
    out = tmp_path / "out"
    _grow(root, out, 3, 0)
    files, location = _on_disk(out), _table(out).metadata_location
    proc = _kbatch("compact", str(out), "--dry-run", "--retain", "0s")
    assert proc.returncode == 0, proc.stderr
    assert f"table {TABLE}: would compact 3 data files into 1" in proc.stdout
    assert "would expire snapshot" in proc.stdout  # the two older appends' snapshots
    assert _on_disk(out) == files and _table(out).metadata_location == location


def test_retain_expires_old_snapshots(root, tmp_path):
    out = tmp_path / "out"
    _grow(root, out, 4, 0)
    assert _kbatch("compact", str(out)).returncode == 0
    ledger, expect = _ledger(out), rows_of_root(root, ["events"])
    assert len(_table(out).metadata.snapshots) == 5
    kept = _kbatch("compact", str(out), "--retain", "7d")  # all younger than that: nothing expired
    assert kept.returncode == 0 and "expired" not in kept.stdout, kept.stdout
    assert len(_table(out).metadata.snapshots) == 5
    old_files = {p for p in _on_disk(out) if p.endswith(".parquet")}
    proc = _kbatch("compact", str(out), "--retain", "0s")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("expired snapshot") == 4, proc.stdout
    table = _table(out)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [table.metadata.current_snapshot().snapshot_id]
    live = {p for p in _on_disk(out) if p.endswith(".parquet")}
    assert len(live) == 1 and len(old_files - live) == 4  # the four small files deleted
    assert all(f"removed {p}" in proc.stdout for p in old_files - live)
    assert _ledger(out) == ledger and _rows(out) == expect and _duckdb_rows(out) == expect
    # nothing unreferenced is left for kbatch clean
    clean = _kbatch("clean", str(out), "--older-than", "0s", "--dry-run")
    assert clean.returncode == 0 and "would remove" not in clean.stdout, clean.stdout


def test_a_commit_meanwhile_wins(root, tmp_path):
    """A compaction planned on a snapshot that another run's append replaced before its commit
    fails, the table as that run left it, its own files deleted."""
    from kbatch.tables._compact_iceberg import compact_table
    from kbatch.tables._iceberg import no_retries

    out = tmp_path / "out"
    n = _grow(root, out, 3, 0)
    stale = no_retries(_table(out))
    n = _grow(root, out, 1, n)
    files = _on_disk(out)
    with pytest.raises(CommitConflictError, match="another run committed"):
        compact_table(stale, TABLE)
    assert _on_disk(out) == files
    assert _rows(out) == rows_of_root(root, ["events"]) and len(_rows(out)) == n


@pytest.mark.slow  # a dozen runs, some killed on purpose
@pytest.mark.parametrize("stage", ["before-commit", "mid-commit"])
def test_compact_killed_then_rerun(root, tmp_path, stage):
    out = tmp_path / "out"
    n = _grow(root, out, 4, 0)
    ledger, expect = _ledger(out), rows_of_root(root, ["events"])
    proc = _kbatch("compact", str(out), stage=stage)
    assert proc.returncode == -9, proc.stderr
    assert _rows(out) == expect and _ledger(out) == ledger
    assert _duckdb_rows(out) == expect
    assert _files(out) == (4 if stage == "before-commit" else 1)
    proc = _kbatch("compact", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _rows(out) == expect and _ledger(out) == ledger
    assert _files(out) == 1
    # a run killed before its commit left a file no snapshot references: kbatch clean's
    clean = _kbatch("clean", str(out), "--older-than", "0s")
    assert clean.returncode == 0, clean.stderr
    assert ("compact-" in clean.stdout) == (stage == "before-commit"), clean.stdout
    n = _grow(root, out, 1, n)
    assert _rows(out) == rows_of_root(root, ["events"]) and len(_rows(out)) == n
    assert _duckdb_rows(out) == _rows(out)


@pytest.mark.parametrize("partition_by", ["bucket(3, key)", "none"])
def test_compact_keeps_each_file_in_its_partition(root, tmp_path, partition_by):
    """Files are compacted per partition: with ``bucket(3, key)`` one file per bucket, each under
    the bucket its rows hash to (a lookup by key prunes by it and still finds the row)."""
    from pyiceberg.expressions import EqualTo

    out = tmp_path / "out"
    n = _grow(root, out, 4, 0, "--partition-by", partition_by)
    buckets = 3 if partition_by != "none" else 1
    assert _files(out) > buckets
    proc = _kbatch("compact", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _files(out) == buckets
    table = _table(out)
    assert len({str(t.file.partition) for t in table.scan().plan_files()}) == buckets
    expect = rows_of_root(root, ["events"])
    assert len(expect) == n and _rows(out) == expect and _duckdb_rows(out) == expect
    for i in range(n):
        got = table.scan(row_filter=EqualTo("key", b"k%d" % i)).to_arrow()
        assert got.column("offset").to_pylist() == [i]
