"""``kbatch compact`` of a Parquet folder on S3 (issue 38.3), against the moto server: appends of
small batches, then one compaction: the file count drops, every record is there once, the ledger
is unchanged, a later append continues exactly once; killed at each stage and run again (or
followed by an append, which rolls the compaction forward), the same."""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest
from support.s3 import fresh_prefix, keys_under, storage_args
from support.tables import REPO, convert_cli, rows_of_root, rows_of_table, summary_of, write_log

from kbatch.errors import CommitConflictError
from kbatch.tables import RemoteFolderSink

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")

BUCKET = "kbatch-compact"


@pytest.fixture
def out(s3_client) -> str:
    """A new ``s3://kbatch-compact/<prefix>`` for each test."""
    return fresh_prefix(s3_client, BUCKET)


def data_files(s3_client, url: str) -> list[str]:
    return [k for k in keys_under(s3_client, url) if k.startswith("topic=") and k.endswith(".parquet")]


def rows(url: str, s3_options) -> list[tuple]:
    fs = pa.fs.S3FileSystem(**s3_options)
    return rows_of_table(pads.dataset(url[len("s3://"):], filesystem=fs, format="parquet",
                                      partitioning="hive").to_table())


def ledger(url: str, s3_options):
    return RemoteFolderSink(url, "append", storage_options=s3_options).committed()


def grow(root: Path, out: str, s3_options, runs: int, n: int) -> int:
    for _ in range(runs):
        n += 10
        write_log(root, "events", 0, n)
        summary_of(convert_cli(str(root), out, "--mode", "append", "--subscribe", "events", *storage_args(s3_options)))
    return n


def compact(out: str, s3_options, *argv: str, stage: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if stage:
        env["KBATCH_TEST_KILL_AT"] = stage
    return subprocess.run([sys.executable, "-m", "kbatch", "compact", out, *storage_args(s3_options), *argv],
                          capture_output=True, text=True, env=env, timeout=300)


def test_compact_after_appends(tmp_path, out, s3_options, s3_client):
    root = tmp_path / "root"
    n = grow(root, out, s3_options, 5, 0)
    assert len(data_files(s3_client, out)) == 5
    held = ledger(out, s3_options)
    dry = compact(out, s3_options, "--dry-run")
    assert dry.returncode == 0 and "would compact 5 data files into 1" in dry.stdout, dry.stdout + dry.stderr
    assert len(data_files(s3_client, out)) == 5  # a dry run changes nothing
    done = compact(out, s3_options)
    assert done.returncode == 0, done.stderr
    assert f"table {out}: compacted 5 data files into 1 (commit 6)" in done.stdout
    assert len(data_files(s3_client, out)) == 1
    assert ledger(out, s3_options) == held
    expect = rows_of_root(root, ["events"])
    assert len(expect) == n and rows(out, s3_options) == expect
    objects = keys_under(s3_client, out)
    assert not [k for k in objects if k.startswith("_kbatch_staging/")]
    assert "topic=events/_common_metadata" in objects
    body = s3_client.get_object(Bucket=BUCKET, Key=f"{out.split('/', 3)[3]}/_kbatch_ledger/{6:020d}.json")["Body"]
    entry = json.loads(body.read())
    assert entry["compacted"] == ["topic=events"] and len(entry["removed"]) == 5 and entry["records"] == 0
    # a further append continues exactly once
    n = grow(root, out, s3_options, 1, n)
    assert rows(out, s3_options) == rows_of_root(root, ["events"]) and len(rows(out, s3_options)) == n
    again = compact(out, s3_options, "--dry-run")
    assert again.returncode == 0 and "would compact 2 data files into 1" in again.stdout, again.stdout


def test_retain_and_a_prefix_without_a_table_are_one_line(tmp_path, out, s3_options, s3_client):
    grow(tmp_path / "root", out, s3_options, 2, 0)
    refused = compact(out, s3_options, "--retain", "1d")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--retain: a Parquet folder keeps no replaced files" in refused.stderr
    empty = compact(f"{out}-nothing", s3_options)
    assert empty.returncode == 2 and "holds no table kbatch wrote" in empty.stderr, empty.stderr


@pytest.mark.parametrize("stage", ["mid-write", "before-commit", "mid-commit"])
def test_compact_killed_then_rerun(tmp_path, out, s3_options, s3_client, stage):
    root = tmp_path / "root"
    grow(root, out, s3_options, 4, 0)
    held, expect = ledger(out, s3_options), rows_of_root(root, ["events"])
    killed = compact(out, s3_options, stage=stage)
    assert killed.returncode == -9, killed.stderr
    assert [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]  # the dead run's files, hidden
    ledgers = [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_ledger/")]
    assert len(ledgers) == (5 if stage == "mid-commit" else 4)
    seen = rows(out, s3_options)
    if stage == "mid-commit":  # committed, the replaced files deleted, the new one not yet moved in
        assert set(seen) < set(expect) and len(set(seen)) == len(seen)
    else:
        assert seen == expect  # readers: the last commit
    assert ledger(out, s3_options) == held  # (opening a sink rolls a committed compaction forward)
    done = compact(out, s3_options)
    assert done.returncode == 0, done.stderr
    assert rows(out, s3_options) == expect and ledger(out, s3_options) == held
    assert len(data_files(s3_client, out)) == 1
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]  # moved in or deleted


def test_killed_after_commit_rolls_forward_on_append(tmp_path, out, s3_options, s3_client):
    root = tmp_path / "root"
    n = grow(root, out, s3_options, 3, 0)
    assert compact(out, s3_options, stage="mid-commit").returncode == -9
    n = grow(root, out, s3_options, 1, n)  # the append's sink rolls the compaction forward first
    assert rows(out, s3_options) == rows_of_root(root, ["events"]) and len(rows(out, s3_options)) == n
    assert len(data_files(s3_client, out)) == 2
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]


def test_convert_compact_after_keeps_the_file_count_bounded(tmp_path, out, s3_options, s3_client):
    root = tmp_path / "root"
    n, counts = 0, []
    for _ in range(5):
        n += 10
        write_log(root, "events", 0, n)
        summary_of(convert_cli(str(root), out, "--mode", "append", "--subscribe", "events", "--compact-after", "3",
                               *storage_args(s3_options)))
        counts.append(len(data_files(s3_client, out)))
        assert rows(out, s3_options) == rows_of_root(root, ["events"])  # every record once, after every run
    assert counts == [1, 2, 1, 2, 1], counts
    held = ledger(out, s3_options).get("events", 0)
    assert held is not None and held.held() == [(0, n)]


def test_a_compaction_losing_to_an_append_changes_nothing(tmp_path, out, s3_options, s3_client):
    """A compaction that read commit n commits after an append made n+1: CommitConflictError, its
    staged file deleted, the table as the append left it (the sink's own commit point, not a lock)."""
    root = tmp_path / "root"
    n = grow(root, out, s3_options, 2, 0)
    sink = RemoteFolderSink(out, "append", storage_options=s3_options)  # reads commit 2
    sink.open(None)
    files = [rel for rel, _ in sink.data_files()]
    staged = f"{posixpath.dirname(files[0])}/part-x-compact-0.parquet"
    import pyarrow.parquet as pq

    whole = pa.concat_tables(pq.read_table(f"{sink.root}/{f}", filesystem=sink.fs) for f in files)
    pq.write_table(whole, f"{sink.staging_path}/{staged}", filesystem=sink.fs)
    n = grow(root, out, s3_options, 1, n)  # commit 3
    with pytest.raises(CommitConflictError, match=r"another run committed .* nothing compacted"):
        sink.commit_rewrite([staged], files, ["topic=events"])
    assert rows(out, s3_options) == rows_of_root(root, ["events"]) and len(rows(out, s3_options)) == n
    assert len(data_files(s3_client, out)) == 3
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]
