"""``kbatch convert`` end to end: the sample root to Parquet with Spark (local) and with Arrow,
read back and compared with LogDir.read record for record."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers: tens of seconds

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from kbatch import _convert  # noqa: E402
from kbatch._sample import write_sample  # noqa: E402
from kbatch.log import open_logs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _convert.add_arguments(parser)
    return parser.parse_args(list(argv))


def _expected(root: Path, **read) -> list[tuple]:
    out = []
    for d in open_logs(root):
        if d.topic.startswith("__"):
            continue
        t = d.read(**read)
        hs = [t.headers(i) for i in range(len(t))]
        out += [
            (d.topic, d.partition, o, k, v, ts * 1000, h or None)
            for o, k, v, ts, h in zip(
                t.records["offset"].tolist(), t.keys(), t.values(), t.records["timestamp"].tolist(), hs, strict=True
            )
        ]
    return sorted(out, key=lambda r: r[:3])


def _read_back(out: Path) -> list[tuple]:
    t = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    ts = t.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    rows = []
    for r, stamp in zip(t.to_pylist(), ts, strict=True):
        h = None if r["headers"] is None else [(x["key"], x["value"]) for x in r["headers"]]
        rows.append((r["topic"], r["partition"], r["offset"], r["key"], r["value"], stamp, h))
    return sorted(rows, key=lambda r: r[:3])


def test_convert_with_spark_parquet_read_back(spark, sample, tmp_path, capsys):
    out = tmp_path / "out"
    status = _convert.run(_args(str(sample), str(out), "--master", "local[2]", "--json-summary"))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    want = _expected(sample)
    assert summary["records"] == len(want) and summary["topics"] == 4 and summary["partitions"] == 6
    assert summary["engine"] == "spark" and summary["records_per_second"] > 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "topic=legacy",
        "topic=orders",
        "topic=payments",
        "topic=users",
    ]
    assert _read_back(out) == want
    # filters and read_committed go through too; an existing OUT is refused
    out2 = tmp_path / "committed"
    status = _convert.run(
        _args(
            str(sample),
            str(out2),
            "--subscribe",
            "payments",
            "--isolation-level",
            "read_committed",
            "--where",
            "offset >= 10",
            "-q",
        )
    )
    assert status == 0
    want = [r for r in _expected(sample, isolation_level="read_committed") if r[0] == "payments" and r[2] >= 10]
    assert _read_back(out2) == want
    assert _convert.run(_args(str(sample), str(out2), "-q")) == 1
    assert "already exists" in capsys.readouterr().err


def test_convert_arrow_engine_cli_subprocess(sample, tmp_path):
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "kbatch._convert", str(sample), str(out), "--engine", "arrow"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "converted 1,602 records from 4 topics, 6 partitions" in proc.stdout
    assert "records/s" in proc.stdout and "orders-2: 300 records" in proc.stderr
    assert _read_back(out) == _expected(sample)
    again = subprocess.run(
        [sys.executable, "-m", "kbatch._convert", str(sample), str(out), "--engine", "arrow"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 1 and again.stderr.startswith("kbatch convert: error:")
    assert "Traceback" not in again.stderr


def test_convert_missing_root_is_one_line(tmp_path, capsys):
    assert _convert.run(_args(str(tmp_path / "nope"), str(tmp_path / "out"), "--engine", "arrow")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such log directory" in err
