"""``kbatch clean OUT --older-than D`` (issue 39.2): the table files no commit references and older
than the retention are removed, younger ones and the table's own are kept; ``--dry-run`` only
lists. And the recovery step's own leftovers: a Parquet ledger ``.tmp`` of a dead run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.kills import only_the_table, table_rows
from support.tables import REPO, convert_cli, rows_of_root, rows_of_table, summary_of

from kbatch.tables._leftovers import recover

TOPICS = ["events", "orders"]


def clean(out: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbatch", "clean", str(out), *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)


def _orphan(out: Path, fmt: str, name: str, age: float) -> Path:
    """A data file no commit names, last written ``age`` seconds ago."""
    folder = {"parquet": out / "topic=orders", "delta": out / "orders",
              "iceberg": out / "kafka" / "orders" / "data"}[fmt]
    path = folder / name
    path.write_bytes(b"PAR1 not referenced PAR1")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_clean_removes_old_unreferenced_files_only(root, tmp_path, fmt):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", fmt, "--subscribe", ",".join(TOPICS)))
    old = _orphan(out, fmt, "part-orphan-old.parquet", 3 * 86400)
    young = _orphan(out, fmt, "part-orphan-young.parquet", 60)
    listed = clean(out, "--older-than", "1d", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert [ln.split("/")[-1] for ln in listed.stdout.splitlines()] == [old.name] and old.exists()
    done = clean(out, "--older-than", "1d")
    assert done.returncode == 0, done.stderr
    assert not old.exists() and young.exists()
    assert clean(out, "--older-than", "0s").returncode == 0
    assert not young.exists() and only_the_table(out, fmt) == []
    assert table_rows(out, fmt) == rows_of_root(root, TOPICS)


def test_clean_user_mistakes_are_one_line(tmp_path):
    for argv, said in (([str(tmp_path / "none")], "no such folder"),
                       ([str(tmp_path), "--older-than", "soon"], "a number and a unit")):
        done = clean(Path(argv[0]), *argv[1:])
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and said in done.stderr


def test_dead_runs_ledger_tmp_is_removed_a_live_runs_kept(root, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--subscribe", "orders"))
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout.strip()
    import socket

    dead = out / "_kbatch_ledger" / f".00000000000000000002.json.{dead_pid}-aaaaaaaa.1@{socket.gethostname()}.tmp"
    live = out / "_kbatch_ledger" / f".00000000000000000002.json.{os.getppid()}-bbbbbbbb.1@{socket.gethostname()}.tmp"
    for p in (dead, live):
        p.write_text("{}")
    removed = recover(out)
    assert removed == [f"_kbatch_ledger/{dead.name}"] and not dead.exists() and live.exists()


def test_recovery_keeps_delta_files_an_overwrite_removed(root, tmp_path):
    """A finished run is no longer alive, but its files that a later overwrite removed are the
    table's history (time travel), not a dead run's leftovers."""
    from deltalake import DeltaTable

    out = tmp_path / "out"
    args = ("--format", "delta", "--subscribe", "orders")
    summary_of(convert_cli(str(root), str(out), *args))
    summary_of(convert_cli(str(root), str(out), *args, "--mode", "overwrite"))
    again = convert_cli(str(root), str(out), *args, "--mode", "append", json_summary=False)
    assert again.returncode == 0 and "no longer alive" not in again.stderr
    assert rows_of_table(DeltaTable(out / "orders", version=0).to_pyarrow_table()) == rows_of_root(root, ["orders"])
