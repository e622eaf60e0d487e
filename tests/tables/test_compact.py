"""``kbatch compact`` (issue 38.3): N appends of small batches, then one compaction: the file
count drops, every record is there once, the ledger is unchanged, and a later append continues
exactly once; killed at each stage and run again, the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.tables import REPO, convert_cli, rows_of_root, rows_of_table, write_log

from kbatch.cli import main


def _files(out: Path, fmt: str) -> int:
    if fmt == "parquet":
        return sum(1 for p in out.rglob("*.parquet") if not any(s.startswith(("_", ".")) for s in
                                                                 p.relative_to(out).parts))
    from deltalake import DeltaTable

    return len(DeltaTable(out / "events").file_uris())


def _rows(out: Path, fmt: str) -> list[tuple]:
    if fmt == "parquet":
        import pyarrow.dataset as pads

        return rows_of_table(pads.dataset(out, format="parquet", partitioning="hive").to_table())
    from deltalake import DeltaTable

    return rows_of_table(DeltaTable(out / "events").to_pyarrow_table())


def _duckdb_rows(out: Path) -> list[tuple]:
    import duckdb

    got = duckdb.sql(f"select topic, partition, \"offset\", key, value from read_parquet('{out}/*/*.parquet', "
                     "hive_partitioning=true)").fetchall()
    return sorted(got, key=lambda r: r[:3])


def _ledger(out: Path, fmt: str):
    if fmt == "parquet":
        from kbatch.tables import read_ledger

        return read_ledger(out)[0]
    from deltalake import DeltaTable

    from kbatch.tables._delta import read_ledger

    return read_ledger(DeltaTable(out / "events"))[0]


def _grow(root: Path, out: Path, fmt: str, runs: int, start: int = 50) -> int:
    n = start
    for _ in range(runs):
        n += 10
        write_log(root, "events", 0, n)
        proc = convert_cli(str(root), str(out), "--format", fmt, "--mode", "append", "--subscribe", "events")
        assert proc.returncode == 0, proc.stderr
    return n


def _compact(out: Path, *argv: str, stage: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if stage:
        env["KBATCH_TEST_KILL_AT"] = stage
    return subprocess.run([sys.executable, "-m", "kbatch", "compact", str(out), *argv], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_compact_after_appends(root, tmp_path, fmt):
    out = tmp_path / "out"
    n = _grow(root, out, fmt, 6, start=0)
    before_files, ledger = _files(out, fmt), _ledger(out, fmt)
    assert before_files >= 6
    proc = _compact(out)
    assert proc.returncode == 0, proc.stderr
    assert "compacted" in proc.stdout
    assert _files(out, fmt) == 1
    assert _ledger(out, fmt) == ledger
    expect = rows_of_root(root, ["events"])
    assert len(expect) == n
    assert _rows(out, fmt) == expect
    if fmt == "parquet":
        assert _duckdb_rows(out) == expect
        assert not (out / "_kbatch_staging").exists()
    # a further append continues exactly once
    n = _grow(root, out, fmt, 1, start=n)
    assert _rows(out, fmt) == rows_of_root(root, ["events"])
    assert len(_rows(out, fmt)) == n
    again = _compact(out, "--dry-run")
    assert again.returncode == 0 and "would compact 2 data files into 1" in again.stdout, again.stdout


@pytest.mark.slow  # a dozen runs, some killed on purpose
@pytest.mark.parametrize("fmt", ["parquet", "delta"])
@pytest.mark.parametrize("stage", ["before-commit", "mid-commit"])
def test_compact_killed_then_rerun(root, tmp_path, fmt, stage):
    out = tmp_path / "out"
    n = _grow(root, out, fmt, 4, start=0)
    ledger = _ledger(out, fmt)
    proc = _compact(out, stage=stage)
    assert proc.returncode == -9, proc.stderr
    expect = rows_of_root(root, ["events"])
    if fmt == "parquet" and stage == "mid-commit":  # committed, folders not swapped: readers see the old files
        assert _ledger(out, fmt) == ledger
    else:
        assert _rows(out, fmt) == expect
        assert _ledger(out, fmt) == ledger
    proc = _compact(out)
    assert proc.returncode == 0, proc.stderr
    assert _rows(out, fmt) == expect and _ledger(out, fmt) == ledger
    assert _files(out, fmt) == 1
    if fmt == "parquet":
        assert not (out / "_kbatch_staging").exists()
    n = _grow(root, out, fmt, 1, start=n)
    assert _rows(out, fmt) == rows_of_root(root, ["events"]) and len(_rows(out, fmt)) == n


def test_killed_after_commit_rolls_forward_on_append(root, tmp_path):
    out = tmp_path / "out"
    n = _grow(root, out, "parquet", 3, start=0)
    assert _compact(out, stage="mid-commit").returncode == -9
    n = _grow(root, out, "parquet", 1, start=n)  # the append's sink rolls the compaction forward first
    assert _rows(out, "parquet") == rows_of_root(root, ["events"]) and len(_rows(out, "parquet")) == n
    assert _files(out, "parquet") == 2


def test_user_mistakes_are_one_line(tmp_path, capsys):
    assert main(["compact", str(tmp_path / "nope")]) == 2
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("x")
    assert main(["compact", str(tmp_path / "plain")]) == 2
    assert main(["compact", str(tmp_path), "--target-size", "big"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and err.count("kbatch compact: error:") == 3, err


def test_ledger_file_of_the_compaction(root, tmp_path):
    out = tmp_path / "out"
    _grow(root, out, "parquet", 3, start=0)
    assert _compact(out).returncode == 0
    last = sorted((out / "_kbatch_ledger").glob("*.json"))[-1]
    entry = json.loads(last.read_text())
    assert entry["compacted"] == ["topic=events"] and len(entry["removed"]) == 3 and entry["records"] == 0


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_convert_compact_after_keeps_the_file_count_bounded(root, tmp_path, fmt):
    from support.tables import summary_of

    out = tmp_path / "out"
    n, counts, compactions = 0, [], []
    for _ in range(7):
        n += 10
        write_log(root, "events", 0, n)
        summary = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--mode", "append",
                                         "--subscribe", "events", "--compact-after", "3"))
        counts.append(_files(out, fmt))
        compactions.append(summary["compacted"])
        assert _rows(out, fmt) == rows_of_root(root, ["events"])  # every record once, after every run
    # a run reaching 3 files compacts them into 1: 1, 2, 1, 2, 1, ...
    assert counts == [1, 2, 1, 2, 1, 2, 1], counts
    assert [bool(c) for c in compactions] == [False, False, True, False, True, False, True]
    assert "compacted 3 data files into 1" in compactions[2][0]
    assert len(_rows(out, fmt)) == n
    held = _ledger(out, fmt).get("events", 0)
    assert held is not None and held.held() == [(0, n)]  # the compactions kept the ledger whole


def test_convert_compact_after_is_checked_before_any_work(root, tmp_path):
    for argv, said in ((["--compact-after", "1"], "--compact-after must be >= 2"),
                       (["--format", "orc", "--compact-after", "3"], "--compact-after compacts a Parquet folder")):
        proc = convert_cli(str(root), str(tmp_path / "out"), *argv, json_summary=False)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert not (tmp_path / "out").exists()
