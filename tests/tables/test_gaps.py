"""Offsets retention deleted before any run converted them (issue 28), for the table formats: the run
stops before committing, naming the offsets; with ``--no-fail-on-data-loss`` it goes on from the
log start and the summary lists the gap. (The Parquet folder: tests/tables/test_parquet_table.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tables import convert_cli, retention_deleted, summary_of, write_log

pytest.importorskip("pyarrow")


def offsets(out: Path, fmt: str) -> list[int]:
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table("kafka.events").scan().to_arrow()
    else:
        import deltalake

        table = deltalake.DeltaTable(str(out / "events")).to_pyarrow_table()
    return sorted(table["offset"].to_pylist())


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_gap_after_retention(tmp_path, fmt):
    pytest.importorskip("pyiceberg" if fmt == "iceberg" else "deltalake")
    root, out = write_log(tmp_path / "root", "events", 0, 50), tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", fmt))
    write_log(root, "events", 0, 120)
    retention_deleted(root, "events", 0, 80)
    proc = convert_cli(str(root), str(out), "--format", fmt, "--mode", "append")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr  # one line
    assert "events-0: offsets 50..79 were deleted (the log starts at 80) before they were converted" in proc.stderr
    assert offsets(out, fmt) == list(range(50))
    s = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--mode", "append", "--no-fail-on-data-loss"))
    assert s["gaps"] == [{"topic": "events", "partition": 0, "start": 50, "end": 80, "root": None}]
    assert offsets(out, fmt) == list(range(50)) + list(range(80, 120))
