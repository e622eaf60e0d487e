"""``kbatch convert --engine spark --cdc debezium`` and ``--upsert`` (issue 38: "on both formats and both
engines"): Spark's executors stage the changes, the driver merges them. Fixed histories (the hypothesis
ones run on the arrow engine, tests/convert/test_cdc.py), written a few records per batch and read
with more Spark tasks than partitions, so that a partition's slices are staged by several tasks;
each table equals the plain-dictionary replay (pyiceberg/deltalake and DuckDB) and the arrow
engine's, through an ``--as-of`` cut and a later ``--mode append``; a rerun applies nothing twice,
a failed Spark job leaves the table as it was."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # a JVM and Python workers

pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")
pytest.importorskip("deltalake")
pa = pytest.importorskip("pyarrow")

from support import debezium as dbz  # noqa: E402

FORMATS = ("delta", "iceberg")
SPARK = ("--engine", "spark", "--master", "local[2]", "--min-partitions", "6")


@pytest.fixture(autouse=True)
def _zone(spark):
    """The module's session in a zone other than UTC, as a machine's may be: Spark hands its
    executors timestamps in the session's zone, which the tables must not take from it."""
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def _run(capsys, *argv: str) -> tuple[int, dict | str]:
    """``kbatch convert`` in this process (the module's Spark session reused): (status, summary or error)."""
    from kbatch.convert._arguments import add_arguments
    from kbatch.convert._run import run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    status = run(parser.parse_args([*argv, "--json-summary", "--progress", "never"]))
    captured = capsys.readouterr()
    if status:
        return status, captured.err
    return status, json.loads(captured.out.strip().splitlines()[-1])


def _ok(capsys, *argv: str) -> dict:
    status, out = _run(capsys, *argv)
    assert status == 0, out
    assert isinstance(out, dict)
    return out


def _cdc(root: Path, out: Path, fmt: str, *more: str) -> tuple[str, ...]:
    return (str(root), str(out), "--format", fmt, "--values", "json", "--cdc", "debezium", *more)


def _table(fmt: str, out: Path, reader: str = "native") -> dict[int, dict]:
    rows = dbz.read_table(fmt, out, "customers", reader)
    assert len({r["id"] for r in rows}) == len(rows), "one row per primary key"
    return {int(r["id"]): {c: (int(r[c]) if c == "id" else r[c]) for c in dbz.COLUMNS} for r in rows}


def _history() -> dbz.History:
    """Creates, snapshot reads, updates, deletes with and without tombstones, a primary key change
    (delete + tombstone + create), a truncate, and changes after it, over two partitions."""
    h = dbz.History("postgres", partitions=2)
    for key in (1, 2, 3, 4):
        h.insert(key, snapshot=True)
    h.update(1)
    h.delete(2)
    h.rekey(3, 13)
    h.insert(5)
    h.update(13)
    h.truncate()
    h.insert(6)
    h.insert(7)
    h.update(6)
    h.delete(7, tombstone=False)
    h.insert(2)
    h.rekey(6, 16)
    h.update(2)
    return h


def _write(root: Path, events: list[dbz.Event], written: dict[int, int], extra: list = ()) -> None:
    """``events`` three to a batch (a partition's slices can then go to several Spark tasks)."""
    for i in range(0, len(events), 3):
        dbz.write(root, "customers", events[i:i + 3], "json", "postgres", written=written)
    if extra:
        dbz.write(root, "customers", [], "json", "postgres", written=written, extra=list(extra))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("by", ["source.ts_ms", "offsets"])
def test_spark_cdc_as_of_then_append_equals_the_replay_and_the_arrow_engine(spark, tmp_path, capsys, fmt, by):
    h = _history()
    root = tmp_path / "root"
    dbz.fresh(root)
    written: dict[int, int] = {}
    bad = [(1, json.dumps({"id": 99}).encode(), b'{"schema": null, "payload": {"nope": 1}}')]  # not an envelope
    _write(root, h.events, written, extra=bad)
    cut = 13  # after the rekey's create and before the truncate
    if by == "offsets":
        held: dict[int, int] = {}
        for e in h.events[:cut]:
            held[e.partition] = held.get(e.partition, 0) + 1
        as_of = ["--as-of", json.dumps({"customers": {str(p): held.get(p, 0) for p in (0, 1)}})]
        kept = h.events[:cut]
    else:
        last = h.events[cut - 1].timestamp
        as_of = ["--as-of", str(last), "--as-of-by", "source.ts_ms"]
        kept = [e for e in h.events if e.timestamp <= last]
    out, arrow = tmp_path / "spark", tmp_path / "arrow"
    first = _ok(capsys, *_cdc(root, out, fmt, *as_of), *SPARK)
    a = _ok(capsys, *_cdc(root, arrow, fmt, *as_of), "--engine", "arrow")
    assert first["engine"] == "spark" and a["engine"] == "arrow"
    assert _table(fmt, out) == _table(fmt, out, "duckdb") == dbz.replay(kept) == _table(fmt, arrow)
    assert [t["ranges"] for t in first["tables"]] == [t["ranges"] for t in a["tables"]]  # the same ledger
    assert first["records"] == a["records"] and first["dead_letters"] == a["dead_letters"] == 0
    # the rest: carried forward from the cut, the dead letter after it counted once
    second = _ok(capsys, *_cdc(root, out, fmt, "--mode", "append"), *SPARK)
    b = _ok(capsys, *_cdc(root, arrow, fmt, "--mode", "append"), "--engine", "arrow")
    assert _table(fmt, out) == _table(fmt, out, "duckdb") == dbz.replay(h.events) == h.rows == _table(fmt, arrow)
    assert second["dead_letters"] == b["dead_letters"] == 1
    assert second["records"] == b["records"]
    # a rerun: nothing new, nothing applied twice
    third = _ok(capsys, *_cdc(root, out, fmt, "--mode", "append"), *SPARK)
    assert third["tables"] == [] and _table(fmt, out) == h.rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_spark_job_leaves_the_table_as_it_was(spark, tmp_path, capsys, fmt):
    h = _history()
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    written: dict[int, int] = {}
    _write(root, h.events[:10], written)
    _ok(capsys, *_cdc(root, out, fmt), *SPARK)
    before = _table(fmt, out)
    assert before == dbz.replay(h.events[:10])
    bad = [(0, json.dumps({"schema": dbz.KEY_SCHEMA, "payload": {"id": 99}}).encode(), b'{"schema": null}')]
    _write(root, h.events[10:], written, extra=bad)
    status, err = _run(capsys, *_cdc(root, out, fmt, "--mode", "append", "--on-value-error", "fail"), *SPARK)
    assert status == 1 and "not a Debezium envelope" in str(err), err
    assert _table(fmt, out) == before
    assert not list((out / "_kbatch_staging").glob("*/*")), "staged changes left behind"
    # the run again, dead letters allowed: every change once
    _ok(capsys, *_cdc(root, out, fmt, "--mode", "append"), *SPARK)
    assert _table(fmt, out) == dbz.replay(h.events) == h.rows


#: (key, value) in offset order; None is a tombstone (tests/tables/test_upsert.py's)
RECORDS = [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"a", b"2"), (b"e", b"1"), (b"e", None), (b"b", None),
           (b"c", b"3"), (b"d", b"1"), (b"a", b"4"), (b"e", b"2"), (b"c", None), (b"c", b"5")]


def _upserted(fmt: str, out: Path) -> dict[bytes, tuple[int, bytes]]:
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        t = default_catalog(out).load_table("kafka.kv").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        t = DeltaTable(str(out / "kv")).to_pyarrow_table()
    rows = t.select(["key", "offset", "value"]).to_pylist()
    assert len({r["key"] for r in rows}) == len(rows)
    return {r["key"]: (r["offset"], r["value"]) for r in rows}


def _latest(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes]]:
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for o, (k, v) in enumerate(records):
        last[k] = (o, v)
    return {k: (o, v) for k, (o, v) in last.items() if v is not None}


@pytest.mark.parametrize("fmt", FORMATS)
def test_spark_upsert_as_of_then_append(spark, tmp_path, capsys, fmt):
    import kbatch
    from kbatch.log import LogWriter

    root = tmp_path / "root"
    with LogWriter(root, "kv", 0) as w:
        for i in range(0, len(RECORDS), 2):  # two records a batch
            part = RECORDS[i:i + 2]
            w.append(kbatch.encode([v for _, v in part], keys=[k for k, _ in part], base_offset=i,
                                   timestamps=[1_700_000_000_000 + i + j for j in range(len(part))]))
    out, arrow = tmp_path / "spark", tmp_path / "arrow"
    common = ("--format", fmt, "--upsert")
    first = _ok(capsys, str(root), str(out), *common, "--as-of", str(1_700_000_000_000 + 8), *SPARK)
    a = _ok(capsys, str(root), str(arrow), *common, "--as-of", str(1_700_000_000_000 + 8), "--engine", "arrow")
    assert _upserted(fmt, out) == _upserted(fmt, arrow) == _latest(RECORDS[:9])
    assert first["tables"][0]["upsert"] == a["tables"][0]["upsert"] and first["records"] == a["records"] == 9
    _ok(capsys, str(root), str(out), *common, "--mode", "append", *SPARK)
    assert _upserted(fmt, out) == _latest(RECORDS)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_spark_run_leaves_the_table_as_it_was_and_a_rerun_applies_each_change_once(spark, tmp_path, capsys,
                                                                                            fmt):
    """The driver killed (SIGKILL) with the executors' changes staged and handed to the sink, and
    again with the dead letters committed but not the data: the table as it was, then a rerun
    carries it to the end, each change once, nothing staged left."""
    import os
    import subprocess
    import sys

    from support.tables import REPO

    h = _history()
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    written: dict[int, int] = {}
    _write(root, h.events[:10], written)

    def killed(stage: str) -> subprocess.CompletedProcess:  # a process of its own (this one's session kept)
        env = {**os.environ, "PYTHONPATH": str(REPO), "KBATCH_TEST_KILL_AT": stage}
        argv = [sys.executable, "-m", "kbatch", "convert", *_cdc(root, out, fmt, "--mode", "append"), *SPARK, "-q"]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)

    _ok(capsys, *_cdc(root, out, fmt), *SPARK)
    before = _table(fmt, out)
    assert before == dbz.replay(h.events[:10])
    bad = [(0, json.dumps({"schema": dbz.KEY_SCHEMA, "payload": {"id": 99}}).encode(), b'{"schema": null}')]
    _write(root, h.events[10:], written, extra=bad)
    for stage in ("mid-write", "between-commits"):
        proc = killed(stage)
        assert proc.returncode == -9, proc.stderr
        assert _table(fmt, out) == before
    last = _ok(capsys, *_cdc(root, out, fmt, "--mode", "append"), *SPARK)
    assert last["dead_letters"] == 0 and any("committed already" in n for n in last["notes"])  # the killed run's
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        dead = default_catalog(out).load_table("kafka.customers__dead_letter").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        dead = DeltaTable(str(out / "customers__dead_letter")).to_pyarrow_table()
    assert dead.column("reason").to_pylist() == ["not a Debezium envelope: no op"]  # once
    assert _table(fmt, out) == _table(fmt, out, "duckdb") == dbz.replay(h.events) == h.rows
    assert not list(out.glob("_kbatch_staging/*")) and not list(out.glob("**/_kbatch_staging/*"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_spark_upsert_with_avro_values_equals_the_arrow_engines(spark, tmp_path, capsys, fmt):
    from support.avro_root import write_avro_root

    r = write_avro_root(tmp_path / "root")
    common = ("--format", fmt, "--upsert", "--values", "avro", "--subscribe", "orders")
    s = _ok(capsys, str(r.root), str(tmp_path / "spark"), *common, *SPARK)
    a = _ok(capsys, str(r.root), str(tmp_path / "arrow"), *common, "--engine", "arrow")
    assert s["dead_letters"] == a["dead_letters"] and s["records"] == a["records"]
    assert [t.get("upsert") for t in s["tables"]] == [t.get("upsert") for t in a["tables"]]  # dead letters' too
    assert any(t.get("upsert") for t in s["tables"])

    def rows(out: Path) -> list[dict]:
        if fmt == "iceberg":
            from kbatch.tables import default_catalog

            t = default_catalog(out).load_table("kafka.orders").scan().to_arrow()
        else:
            from deltalake import DeltaTable

            t = DeltaTable(str(out / "orders")).to_pyarrow_table()
        return sorted(t.to_pylist(), key=lambda row: row["key"])

    assert rows(tmp_path / "spark") == rows(tmp_path / "arrow") and rows(tmp_path / "arrow")


def test_spark_cdc_reads_protobuf_envelopes_as_the_converter_does(spark, tmp_path, capsys):
    """The executors decode Protobuf as the driver's plan says (``--cdc``: an absent proto3 field is
    its default): the change of primary key 0, written as a frame without a body, is a row, not a
    dead letter, and the table equals the arrow engine's and the replay."""
    pytest.importorskip("grpc_tools")
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from support import debezium_protobuf as dpb
    from support.registry_server import RegistryServer

    h = dbz.History("postgres", partitions=2)
    for key in (0, 1, 2):
        h.insert(key)
    h.update(0)
    h.delete(2)
    root = tmp_path / "root"
    dbz.fresh(root)
    with RegistryServer() as server:
        coder = dpb.coder(tmp_path / "proto", server.url, "customers", "postgres", "plain")
        dbz.write(root, "customers", h.events, "protobuf", "postgres", coder=coder)
        common = ("--format", "delta", "--values", "protobuf", "--cdc", "debezium", "--registry", server.url)
        s = _ok(capsys, str(root), str(tmp_path / "spark"), *common, *SPARK)
        a = _ok(capsys, str(root), str(tmp_path / "arrow"), *common, "--engine", "arrow")
    assert s["dead_letters"] == a["dead_letters"] == 0
    want = {k: dpb.as_read(row, "plain", dpb.row_fields()) for k, row in dbz.replay(h.events).items()}
    assert set(want) == {0, 1}
    assert _table("delta", tmp_path / "spark") == _table("delta", tmp_path / "arrow") == want


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow])
@given(actions=dbz.ACTIONS, partitions=st.integers(1, 3), split=st.floats(0, 1), fmt=st.sampled_from(FORMATS),
       by=st.sampled_from(["timestamp", "source.ts_ms", "ts_ms", "offsets"]))
def test_spark_random_histories_as_of_then_append_equal_the_replay(spark, tmp_path_factory, capsys, actions,
                                                                   partitions, split, fmt, by):
    """Random change histories (creates, updates, deletes with and without tombstones, re-keys,
    truncates, snapshot reads; 1 to 3 partitions, three records a batch so Spark's tasks split a
    partition) cut by any ``--as-of`` kind, then carried forward by ``--mode append``: the Spark
    engine's table is the replay's each time."""
    h = dbz.history(actions, "postgres", partitions)
    cut = max(1, int(len(h.events) * split))
    base = tmp_path_factory.mktemp("spark-cdc")
    root, out = base / "root", base / "out"
    dbz.fresh(root)
    _write(root, h.events, {})
    args, held = dbz.as_of_value(h, cut, by)
    _ok(capsys, *_cdc(root, out, fmt, *args), *SPARK)
    assert _table(fmt, out) == dbz.replay(held)
    _ok(capsys, *_cdc(root, out, fmt, "--mode", "append"), *SPARK)
    assert _table(fmt, out) == dbz.replay(h.events) == h.rows


def test_spark_cdc_of_a_whole_backup_with_replicas_equals_the_arrow_engines(spark, tmp_path, capsys):
    """``--recursive`` over two brokers' log dirs, each ``customers`` partition held by both."""
    h = dbz.mixed_history()
    root = tmp_path / "root"
    dbz.fresh(root)
    _write(root, h.events, {})
    backup = dbz.backup_of(root, tmp_path / "backup")
    s = _ok(capsys, *_cdc(backup, tmp_path / "spark", "iceberg", "--recursive"), *SPARK)
    a = _ok(capsys, *_cdc(backup, tmp_path / "arrow", "iceberg", "--recursive"), "--engine", "arrow")
    assert s["records"] == a["records"] and s["dead_letters"] == a["dead_letters"] == 0
    assert _table("iceberg", tmp_path / "spark") == _table("iceberg", tmp_path / "arrow") == dbz.replay(h.events)
