"""``--upsert`` (issue 28): one row per key, the latest by offset, tombstones deleting the key, as log
compaction would eventually keep; checked against kbatch's own reading of the same log, across
two runs; a Parquet folder refuses it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.tables import REPO, convert_cli, summary_of

import kbatch
from kbatch.log import LogWriter, open_logs

pa = pytest.importorskip("pyarrow")

#: (key, value) in offset order; None is a tombstone. The first run sees RUN1, the second all.
RUN1 = [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"a", b"2"), (b"e", b"1"), (b"e", None)]
RUN2 = [(b"b", None), (b"c", b"3"), (b"d", b"1"), (b"a", b"4"), (b"e", b"2"), (b"c", None), (b"c", b"5")]


def write_kv(root: Path, records: list[tuple[bytes, bytes | None]]) -> Path:
    """``kv-0`` holding ``records`` at offsets 0, 1, ... (written anew: a LogWriter continues a partition)."""
    shutil.rmtree(root / "kv-0", ignore_errors=True)
    with LogWriter(root, "kv", 0, segment_bytes=300) as w:
        for i, (k, v) in enumerate(records):
            w.append(kbatch.encode([v], keys=[k], base_offset=i, timestamps=[1_700_000_000_000 + i]))
    return root


def compacted(root: Path) -> dict[bytes, tuple[int, bytes]]:
    """What compaction keeps, from kbatch's reading of the log: key -> (offset, value), tombstones dropped."""
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for d in open_logs(root):
        t = d.read()
        for o, k, v in zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True):
            last[k] = (o, v)
    return {k: (o, v) for k, (o, v) in last.items() if v is not None}


def table_rows(out: Path, fmt: str) -> dict[bytes, tuple[int, bytes]]:
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        t = default_catalog(out).load_table("kafka.kv").scan().to_arrow()
    else:
        import deltalake

        t = deltalake.DeltaTable(str(out / "kv")).to_pyarrow_table()
    rows = t.select(["key", "offset", "value"]).to_pylist()
    assert len({r["key"] for r in rows}) == len(rows)  # one row per key
    return {r["key"]: (r["offset"], r["value"]) for r in rows}


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_upsert_keeps_the_latest_per_key_across_runs(tmp_path, fmt):
    pytest.importorskip("pyiceberg" if fmt == "iceberg" else "deltalake")
    root, out = write_kv(tmp_path / "root", RUN1), tmp_path / "out"
    first = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--upsert"))
    # records read; rows inserted (a, b, c), updated, deleted (e was never in the table); rows after
    assert first["records"] == 6 and first["tables"][0]["records"] == 6
    assert first["tables"][0]["upsert"] == {"inserted": 3, "updated": 0, "deleted": 0, "rows": 3}
    assert first["tables"][0]["bytes"] > 0 and first["output_bytes"] == first["tables"][0]["bytes"]
    assert table_rows(out, fmt) == compacted(root) == {b"a": (3, b"2"), b"b": (1, b"1"), b"c": (2, b"1")}
    write_kv(root, RUN1 + RUN2)
    second = convert_cli(str(root), str(out), "--format", fmt, "--upsert", "--mode", "append", json_summary=False)
    assert second.returncode == 0, second.stderr
    # d, e inserted; a, c updated; b deleted; a, c, d, e in the table (issue 40, item 1)
    line = next(x for x in second.stdout.splitlines() if x.startswith("table "))
    assert line.endswith("7 records read from 1 partition: 2 rows inserted, 2 updated, 1 deleted; 4 rows in the "
                         f"table ({line.rsplit('(', 1)[1]}") and "(0 B written)" not in line
    assert second.stdout.splitlines()[0].startswith("read 7 records from 1 topic, 1 partition")
    assert f"upserted into {fmt} in {out}" in second.stdout.splitlines()[0]
    assert table_rows(out, fmt) == compacted(root)
    assert set(compacted(root)) == {b"a", b"c", b"d", b"e"}


def test_parquet_refuses_upsert(tmp_path):
    root = write_kv(tmp_path / "root", RUN1)
    proc = convert_cli(str(root), str(tmp_path / "out"), "--upsert")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--upsert needs --format iceberg or delta" in proc.stderr


def test_upsert_with_where_is_refused_before_spark_starts(tmp_path):
    """Spark runs --upsert too (tests/spark/test_changes.py), but not a filtered change stream."""
    root = write_kv(tmp_path / "root", RUN1)
    argv = [sys.executable, "-m", "kbatch", "convert", str(root), str(tmp_path / "out"), "--format", "delta",
            "--upsert", "--engine", "spark", "--where", "offset > 2"]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1  # one line, before any Spark starts
    assert "--upsert and --cdc apply every change" in proc.stderr and "leave out --where" in proc.stderr
    assert "needs --format" not in proc.stderr  # the format is right (issue 40, item 4)


def test_upsert_with_overwrite_is_refused(tmp_path):
    root = write_kv(tmp_path / "root", RUN1)
    proc = convert_cli(str(root), str(tmp_path / "out"), "--format", "delta", "--upsert", "--mode", "overwrite")
    assert proc.returncode == 2 and "use --mode append" in proc.stderr


def _compacted_prefix(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes]]:
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for o, (k, v) in enumerate(records):
        last[k] = (o, v)
    return {k: (o, v) for k, (o, v) in last.items() if v is not None}


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
@pytest.mark.parametrize("by", ["offsets", "timestamp"])
def test_upsert_as_of_then_append(tmp_path, fmt, by):
    """``--as-of`` (issue 38): the table as of each cut (offsets, or a record time: the records at or
    before it), then a plain append carries it to the end, each record once."""
    pytest.importorskip("pyiceberg" if fmt == "iceberg" else "deltalake")
    records = RUN1 + RUN2
    root, out = write_kv(tmp_path / "root", records), tmp_path / "out"
    for i, cut in enumerate((4, 9)):
        at = json.dumps({"kv": {"0": cut}}) if by == "offsets" else str(1_700_000_000_000 + cut - 1)
        summary_of(convert_cli(str(root), str(out), "--format", fmt, "--upsert", "--as-of", at,
                               *(["--mode", "append"] if i else [])))
        assert table_rows(out, fmt) == _compacted_prefix(records[:cut])
    summary_of(convert_cli(str(root), str(out), "--format", fmt, "--upsert", "--mode", "append"))
    assert table_rows(out, fmt) == compacted(root) == _compacted_prefix(records)
