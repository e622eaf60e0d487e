"""``kbatch sql ROOT "SELECT ..."`` (issue 37): DuckDB over a root's lazy scans, one view per topic.

The answers are checked against the eager read (``open_logs`` / ``LogDir.read``) and against
:mod:`kbatch.internal`'s tables; the output files are read back with pyarrow and DuckDB.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.damage import damage
from support.tables import write_log
from support.typed_scan_root import write_typed_scan_root

import kbatch
from kbatch.cli import _main as cli
from kbatch.cli._sample import write_sample
from kbatch.log import open_log, open_logs

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("polars")

from kbatch.duckdb import PUSHDOWN  # noqa: E402  (needs duckdb)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample") / "root"
    write_sample(root)
    return root


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_typed_scan_root(tmp_path_factory.mktemp("typed") / "root")


def sql(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of ``kbatch sql ARGS``."""
    capsys.readouterr()
    status = cli.main(["sql", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err


def rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """The rows ``kbatch sql ARGS --json`` prints (status 0 asserted)."""
    status, out, err = sql(capsys, *args, "--json")
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_counts_per_topic_equal_the_eager_read(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = open_logs(sample)
    for level in ("read_uncommitted", "read_committed"):
        want: dict[tuple[str, int], tuple[int, int | None, int | None]] = {}
        for log in logs:
            offsets = log.read(isolation_level=level).records["offset"]
            want[(log.topic, log.partition)] = (len(offsets), int(offsets.min()) if len(offsets) else None,
                                                int(offsets.max()) if len(offsets) else None)
        got = {}
        for topic in sorted({log.topic for log in logs}):
            for r in rows(capsys, sample, f'SELECT partition, count(*) AS n, min("offset") AS lo, '
                                          f'max("offset") AS hi FROM {topic} GROUP BY partition',
                          "--isolation-level", level):
                got[(topic, r["partition"])] = (r["n"], r["lo"], r["hi"])
        assert got == want, level
    assert want[("payments", 0)][0] < len(open_log(sample / "payments-0").read().records)  # aborted ones left out


def test_where_on_offset_timestamp_partition(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = open_log(sample / "orders-1").read()
    since = 1_700_000_000_000 + 1500
    want = [(int(o), int(ts), k.decode()) for o, ts, k in zip(t.records["offset"], t.records["timestamp"],
                                                                        t.keys(), strict=True)
            if 100 <= o <= 250 and ts >= since]
    assert 0 < len(want) < 150
    query = ('SELECT "offset", epoch_ms(timestamp) AS ts, decode(key) AS key FROM orders WHERE partition = 1 '
             'AND "offset" BETWEEN 100 AND 250 AND timestamp >= TIMESTAMPTZ \'2023-11-14 22:13:21.5+00\' '
             'ORDER BY "offset"')
    status, out, err = sql(capsys, sample, query, "--json", "--stats")
    assert status == 0, err
    assert [(r["offset"], r["ts"], r["key"]) for r in map(json.loads, out.splitlines())] == want
    stats = err.strip().splitlines()[-1]
    assert stats.startswith("kbatch sql: stats: scans read ")
    if PUSHDOWN:  # the filters reached the scan: one partition of three, few batches
        assert "read 1 of 3 partitions" in stats, stats
    else:  # DuckDB filters a stream of every record, read once
        assert stats.endswith("; 900 rows"), stats


def test_output_files_read_back_with_pyarrow_and_duckdb(sample: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet as pq

    query = ('SELECT partition, "offset", decode(key) AS key, octet_length(value) AS size FROM orders '
             'WHERE "offset" % 50 = 7 ORDER BY partition, "offset"')
    want = rows(capsys, sample, query)
    assert len(want) == 18
    for suffix, read in ((".parquet", pq.read_table), (".csv", pyarrow.csv.read_csv),
                         (".json", pyarrow.json.read_json)):
        out = tmp_path / f"out{suffix}"
        status, printed, err = sql(capsys, sample, query, "--output", out)
        assert (status, printed) == (0, ""), err
        assert err == f"kbatch sql: note: 18 rows written to {out}\n"
        assert read(out).to_pylist() == want, suffix
        back = duckdb.sql(f"SELECT * FROM '{out}'")
        assert [dict(zip(back.columns, r, strict=True)) for r in back.fetchall()] == want, suffix
    assert pq.read_table(tmp_path / "out.parquet").schema.field("offset").type == pa.int64()


def test_the_terminal_table(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = sql(capsys, sample, 'SELECT partition, count(*) AS n FROM orders GROUP BY ALL ORDER BY ALL')
    assert (status, err) == (0, "")
    assert "│ partition │   n   │" in out and "│         2 │   300 │" in out
    status, out, _ = sql(capsys, sample, 'SELECT "offset" FROM orders', "--max-rows", "4")
    assert status == 0 and "900 rows" in out and out.count("│") < 40


def test_list_names_every_view(sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = sql(capsys, sample, "--list")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["VIEW", "READS", "TYPED"]
    assert [line.split()[0] for line in lines[1:]] == ["legacy", "orders", "payments", "users", "producer_snapshots"]
    assert "topic orders, 3 partitions" in lines[2]
    doc = json.loads(sql(capsys, sample, "--list", "--json")[1])
    assert [v["name"] for v in doc["views"]] == ["legacy", "orders", "payments", "users", "producer_snapshots"]
    # names that SQL must quote: a dot, a dash, a reserved word; a name of two cases
    root = tmp_path / "names"
    for topic in ("orders.eu", "orders-eu", "order", "Users", "users"):
        write_log(root, topic, 0, 5 + len(topic))
    status, out, err = sql(capsys, root, "--list")
    assert status == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == [  # by topic
        "Users", '"order"', '"orders-eu"', '"orders.eu"', "producer_snapshots"]
    assert err == ("kbatch sql: note: topics Users and users differ only in case, which DuckDB's names do not "
                   "tell apart: users has no view\n")
    for topic in ('"order"', '"orders-eu"', '"orders.eu"'):
        assert rows(capsys, root, f"SELECT count(*) AS n, min(topic) AS t FROM {topic}") == [
            {"n": 5 + len(topic) - 2, "t": topic.strip('"')}]


def _internal_root(root: Path) -> Path:
    """A root with Kafka's state: offsets and a group in ``__consumer_offsets``, a transaction,
    a KRaft image, beside a topic of data."""
    from kbatch.internal import encode_key_value

    write_log(root, "events", 0, 20)
    commits = [encode_key_value("group", "OffsetCommitKey", {"group": g, "topic": "events", "partition": 0},
                                {"offset": off, "metadata": "", "commit_timestamp": 1_700_000_000_000 + off,
                                 "leader_epoch": -1}, version=3)
               for g, off in (("a", 5), ("b", 7), ("a", 9))]
    group = encode_key_value("group", "GroupMetadataKey", {"group": "a"},
                             {"protocol_type": "consumer", "generation": 2, "protocol": "range", "leader": "m",
                              "current_state_timestamp": 0, "members": []}, version=3)
    for partition, recs in ((0, commits[:2]), (3, [commits[2], group])):
        with kbatch.LogWriter(root, "__consumer_offsets", partition) as w:
            w.append(kbatch.encode([v for _, v in recs], keys=[k for k, _ in recs]))
    txn = encode_key_value("transaction", "TransactionLogKey", {"transactional_id": "tx"},
                           {"producer_id": 4, "producer_epoch": 0, "transaction_timeout_ms": 60000,
                            "transaction_status": 4, "transaction_partitions": [],
                            "transaction_last_update_timestamp_ms": 2, "transaction_start_timestamp_ms": 1})
    with kbatch.LogWriter(root, "__transaction_state", 0) as w:
        w.append(kbatch.encode([txn[1]], keys=[txn[0]]))
    tid = uuid.UUID(int=9)
    meta = [encode_key_value("metadata", "TopicRecord", None, {"name": "events", "topic_id": tid})[1],
            encode_key_value("metadata", "PartitionRecord", None,
                             {"partition_id": 0, "topic_id": tid, "replicas": [1], "isr": [1], "leader": 1})[1]]
    with kbatch.LogWriter(root, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode(meta))
    return root


def test_kafkas_state_as_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kbatch import internal

    root = _internal_root(tmp_path / "root")
    status, out, err = sql(capsys, root, "--list")
    assert (status, err) == (0, "")
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert names[:4] == ["__cluster_metadata", "__consumer_offsets", "__transaction_state", "events"]
    assert names[4:8] == ["consumer_offsets", "consumer_groups", "transactions", "producer_snapshots"]
    assert names[8:] == [f"cluster_metadata.{t}" for t in internal.IMAGE_TABLES]

    def same(query: str, table: Any, columns: list[str]) -> None:
        got = rows(capsys, root, query)
        want = table.select(columns).to_pylist()
        assert [{c: r[c] for c in columns} for r in got] == json.loads(json.dumps(want, default=str)), query

    same('SELECT * FROM consumer_offsets ORDER BY "group"', internal.consumer_offsets(root),
         ["group", "topic", "partition", "offset", "coordinator_partition"])
    assert [r["offset"] for r in rows(capsys, root, 'SELECT "offset" FROM consumer_offsets ORDER BY 1')] == [7, 9]
    same("SELECT * FROM consumer_groups", internal.consumer_groups(root), ["group", "type", "protocol", "generation"])
    same("SELECT * FROM transactions", internal.transactions(root), ["transactional_id", "producer_id", "state"])
    same("SELECT * FROM cluster_metadata.topics", internal.cluster_metadata(root)["topics"], ["name", "topic_id"])
    same("SELECT * FROM cluster_metadata.partitions", internal.cluster_metadata(root)["partitions"],
         ["topic", "partition_id", "leader", "isr"])
    # joined with the data: the lag of each group
    assert rows(capsys, root, 'SELECT c."group", (SELECT max("offset") + 1 FROM events e WHERE e.partition = '
                              'c.partition) - c."offset" AS lag FROM consumer_offsets c ORDER BY 1') == [
        {"group": "a", "lag": 11}, {"group": "b", "lag": 13}]
    # raw records of an internal topic are a view too
    assert rows(capsys, root, "SELECT count(*) AS n FROM __consumer_offsets") == [{"n": 4}]


def test_a_table_of_kafkas_state_is_computed_only_when_read(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = _internal_root(tmp_path / "root")
    seg = next((root / "__transaction_state-0").glob("*.log"))
    raw = bytearray(seg.read_bytes())
    raw[-3] ^= 0xFF  # a byte of the last record: its batch's CRC fails, transactions cannot be read
    seg.write_bytes(bytes(raw))
    assert rows(capsys, root, "SELECT count(*) AS n FROM consumer_offsets") == [{"n": 2}]
    status, out, err = sql(capsys, root, "SELECT * FROM transactions")
    assert (status, out) == (1, "") and err.count("\n") == 1 and err.startswith("kbatch sql: error: "), err


def test_a_topic_keeps_the_name_of_a_table_of_kafkas_state(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = _internal_root(tmp_path / "root")
    write_log(root, "transactions", 0, 3)
    status, out, err = sql(capsys, root, "--list")
    assert status == 0 and "kbatch.internal.transactions" not in out
    assert "topic transactions has the name of the table transactions of Kafka's state" in err
    assert rows(capsys, root, "SELECT count(*) AS n FROM transactions") == [{"n": 3}]


def test_typed_values_from_the_roots_registry(typed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import polars as pl

    from kbatch.polars import scan_kafka_log

    status, out, err = sql(capsys, typed, "--list")
    assert status == 0 and err == ""
    listed = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "value: avro-value v2 (AVRO), key: avro-key v1 (AVRO)" in listed["avro"]
    assert "value: proto-value v1 (PROTOBUF)" in listed["proto"] and listed["_schemas"].endswith(" -")
    got = rows(capsys, typed, 'SELECT partition, "offset", value.id AS id, value.customer AS customer, '
                              'value_schema_id, value_error IS NOT NULL AS bad, key FROM avro '
                              'WHERE "offset" BETWEEN 2 AND 30 ORDER BY partition, "offset"', "--errors", "null")
    want = (scan_kafka_log(typed, topic="avro", values="auto", keys="auto", errors="null")
            .filter(pl.col("offset").is_between(2, 30)).sort("partition", "offset")
            .select("partition", "offset", pl.col("value").struct.field("id"),
                    pl.col("value").struct.field("customer"), "value_schema_id",
                    pl.col("value_error").is_not_null().alias("bad"), "key").collect())
    assert [tuple(r.values()) for r in got] == want.rows()
    assert any(r["bad"] for r in got) and any(r["customer"] for r in got)
    # --raw: every topic binary
    types = {r["column_name"]: r["column_type"] for r in rows(capsys, typed, "DESCRIBE avro", "--raw")}
    assert types["value"] == types["key"] == "BLOB" and "value_schema_id" not in types
    # errors="raise": the first value that does not decode fails the query, in one line, status 1
    status, out, err = sql(capsys, typed, 'SELECT value.id FROM proto ORDER BY "offset"')
    assert (status, out) == (1, "")
    assert err.startswith("kbatch sql: error: unknown schema id 98") and err.count("\n") == 1, err


def test_typed_values_from_registry_and_topics_without_subject(typed: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(typed / "json-0", root / "json-0")
    write_log(root, "plain", 0, 10)
    types = {r["column_name"]: r["column_type"] for r in rows(capsys, root, "DESCRIBE json")}
    assert types["value"] == "BLOB"  # no _schemas in the root, no --registry: binary, nothing said
    status, out, err = sql(capsys, root, "SELECT count(value.id) AS n FROM json", "--registry", typed,
                           "--errors", "null", "--json")
    assert status == 0 and json.loads(out)["n"] > 0
    assert err == ("kbatch sql: note: no subject <topic>-value or <topic>-key in the registry for plain: "
                   "its records stay binary\n")
    status, _, err = sql(capsys, root, "SELECT 1", "--registry", tmp_path / "nowhere")
    assert status == 2 and err.startswith("kbatch sql: error: --registry ") and err.count("\n") == 1


@pytest.mark.parametrize(("args", "said"), [
    (["SELEC 1"], 'Parser Error: syntax error at or near "SELEC"'),
    (["SELECT * FROM nope"], "Catalog Error: Table with name nope does not exist!"),
    (["SELECT nope FROM orders"], 'Binder Error: Referenced column "nope" not found'),
    (["SELECT value + 1 FROM orders"], "Binder Error: "),
    ([], "give a QUERY, or --list to list the views"),
    (["SELECT 1", "--output", "out.txt"], "--output out.txt: its suffix says the format"),
    (["SELECT 1", "--raw", "--registry", "x"], "--raw keeps the values binary"),
])
def test_a_users_mistake_is_one_line_and_status_2(sample: Path, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], said: str) -> None:
    status, out, err = sql(capsys, sample, *args)
    assert (status, out) == (2, "")
    assert err.startswith(f"kbatch sql: error: {said}") and err.count("\n") == 1, err
    assert "Traceback" not in err and "LINE 1" not in err


def test_no_such_root_or_not_a_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = sql(capsys, tmp_path / "missing", "SELECT 1")
    assert status == 2 and err == f"kbatch sql: error: not a directory: {tmp_path / 'missing'}\n"
    write_log(tmp_path / "backup" / "broker-1", "t", 0, 5)
    status, _, err = sql(capsys, tmp_path / "backup", "SELECT 1")
    assert status == 2 and err.count("\n") == 1 and "--recursive to read every log below" in err
    assert rows(capsys, tmp_path / "backup", "SELECT count(*) AS n FROM t", "--recursive") == [{"n": 5}]


def test_corrupt_data_is_one_line_and_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, "events", 0, 300)
    damage(tmp_path, "crc")
    status, out, err = sql(capsys, tmp_path, "SELECT count(*) FROM events")
    assert (status, out) == (1, "")
    assert err.startswith("kbatch sql: error: ") and "crc" in err.lower() and err.count("\n") == 1, err


def test_a_statement_without_rows_and_several_statements(sample: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = sql(capsys, sample, "SET threads = 1")
    assert (status, err) == (0, "")
    assert rows(capsys, sample, 'CREATE VIEW late AS SELECT * FROM orders WHERE "offset" >= 298; '
                                "SELECT count(*) AS n FROM late") == [{"n": 6}]
    if duckdb.connect().sql("SET threads = 1") is None:  # DuckDB 2 answers a table of no rows instead
        status, _, err = sql(capsys, sample, "SET threads = 1", "--output", tmp_path / "x.csv")
        assert status == 2 and err == "kbatch sql: error: the query gives no rows to write to --output\n"


def test_the_command_exits_after_a_query_that_stopped_early(sample: Path) -> None:
    """``LIMIT``: the views' reads still under way end at exit (before DuckDB 2.0 pyarrow reads ahead)."""
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "kbatch", "sql", str(sample), "SELECT * FROM orders LIMIT 2",
                               "--json"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0 and len(done.stdout.splitlines()) == 2, done.stderr[-2000:]


def test_json_lines_are_what_the_json_file_holds(sample: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    query = 'SELECT * FROM payments WHERE "offset" < 5'
    status, out, _ = sql(capsys, sample, query, "--json")
    assert status == 0
    sql(capsys, sample, query, "--output", tmp_path / "p.json")
    assert out == (tmp_path / "p.json").read_text()
    first = json.loads(out.splitlines()[0])
    assert first["topic"] == "payments" and dt.datetime.fromisoformat(first["timestamp"]).year == 2023


def _bad_utf8_root(root: Path) -> Path:
    """Topic ``t`` of Avro records {a: long, b: string} (subject ``t-value`` in the root's
    ``_schemas``): offset 3's ``b`` is not UTF-8, so only a decode that reads ``b`` fails on it."""
    import io
    import struct

    import fastavro
    from support import schemas_topic

    from kbatch.log import LogWriter

    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"},
                                                         {"name": "b", "type": "string"}]}
    schemas_topic.write_topic(root, [schemas_topic.schema("t-value", 1, 1, json.dumps(schema))])
    values = []
    for i in range(6):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), {"a": i, "b": f"b{i}"})
        values.append(b"\x00" + struct.pack(">i", 1) + out.getvalue())
    values[3] = b"\x00" + struct.pack(">i", 1) + b"\x06\x04\xff\xfe"
    with LogWriter(root, "t", 0) as w:
        w.append(kbatch.encode(values))
    return root


def test_a_view_decodes_only_the_value_fields_the_query_reads(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = _bad_utf8_root(tmp_path / "root")
    # reading `a` alone: `b` is skipped (not decoded, not checked), so offset 3 reads
    assert rows(capsys, root, 'SELECT value.a AS a FROM t ORDER BY "offset"') == [{"a": i} for i in range(6)]
    assert rows(capsys, root, "SELECT sum(t.value.a) AS n FROM t WHERE value.a > 1") == [{"n": 14}]
    # a query reading `b`, or the value whole, decodes it and fails on offset 3, in one line
    for query in ("SELECT value.b FROM t", "SELECT value FROM t", "SELECT * FROM t", "SELECT value['a'] FROM t"):
        status, out, err = sql(capsys, root, query)
        assert (status, out) == (1, ""), query
        assert "offset 3" in err and err.count("\n") == 1, err
    # --errors null: the same rows as the whole decode's for the fields read
    got = rows(capsys, root, 'SELECT "offset", value.b AS b, value_error IS NULL AS ok FROM t ORDER BY 1',
               "--errors", "null")
    assert [(r["b"], r["ok"]) for r in got] == [("b0", True), ("b1", True), ("b2", True), (None, False),
                                                ("b4", True), ("b5", True)]


def test_a_query_the_fields_cannot_bind_runs_with_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kbatch.cli import _sql

    root = _bad_utf8_root(tmp_path / "root")
    # the fields found are a superset of what DuckDB's binder resolves into the views; were one
    # missed, the narrow view would not bind it: the query runs again over the whole value
    monkeypatch.setattr(_sql, "value_fields", lambda con, query: frozenset({"b"}))
    got = rows(capsys, root, 'SELECT value.a AS a FROM t ORDER BY "offset"', "--errors", "null")
    assert got == [{"a": a} for a in (0, 1, 2, None, 4, 5)]  # (3: the whole decode's null)
    status, out, err = sql(capsys, root, "SELECT value.nope FROM t")  # a real mistake stays one
    assert (status, out) == (2, "") and "Binder Error" in err and err.count("\n") == 1, err
