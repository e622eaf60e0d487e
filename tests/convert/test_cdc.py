"""``kbatch convert --cdc debezium`` (issue 38): the table a Debezium change stream describes, checked
against a plain-dictionary replay of the same envelopes (:func:`support.debezium.replay`): for the
connectors' documented examples (Postgres and MySQL, JSON with schemas and Avro via the registry),
read back by pyiceberg, deltalake and DuckDB; and for random change histories over several
partitions and two runs (hypothesis); records that are not changes are dead letters with why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import debezium as dbz

from kbatch.cli import main

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

FORMATS = ("delta", "iceberg")
ENCODINGS = ("json", "avro")


def convert(root: Path, out: Path, fmt: str, encoding: str, *more: str) -> int:
    return main(["convert", str(root), str(out), "--format", fmt, "--values", encoding, "--cdc", "debezium",
                 "--engine", "arrow", "--progress", "never", "-q", *more])


def table_of(fmt: str, out: Path, reader: str = "native", topic: str = "customers") -> dict[int, dict[str, Any]]:
    rows = dbz.read_table(fmt, out, topic, reader)
    assert len({r["id"] for r in rows}) == len(rows), "one row per primary key"
    return {int(r["id"]): {c: (int(r[c]) if c == "id" else r[c]) for c in dbz.COLUMNS} for r in rows}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("connector", ["postgres", "mysql"])
def test_documented_examples_give_the_database_table(tmp_path, fmt, encoding, connector, capsys):
    h = dbz.documented(connector, partitions=2)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, encoding, connector)
    position = "source.lsn" if connector == "postgres" else "source.pos"
    assert convert(root, out, fmt, encoding, "--cdc-columns", f"op,ts_ms,source.ts_ms,{position}") == 0
    want = dbz.replay(h.events)
    assert want == h.rows  # the oracle agrees with the database the history was made from
    assert table_of(fmt, out) == want
    assert table_of(fmt, out, "duckdb") == want
    rows = {r["id"]: r for r in dbz.read_table(fmt, out, "customers", "native")}
    last = [e.value for e in h.events if e.value is not None and e.key == {"id": 1013}][-1]
    name = f"__source_{position.split('.')[1]}"
    assert (rows[1013]["__op"], rows[1013]["__ts_ms"], rows[1013]["__source_ts_ms"], rows[1013][name]) == \
        ("u", last["ts_ms"], last["source"]["ts_ms"], last["source"][position.split(".")[1]])
    assert "kbatch_delete" not in rows[1013] and "topic" not in rows[1013] and "_kbatch_op" not in rows[1013]


@pytest.mark.parametrize("fmt", FORMATS)
def test_not_envelopes_are_dead_letters_with_the_reason(tmp_path, fmt):
    h = dbz.History("postgres")
    h.insert(1)
    h.insert(2)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    schema = dbz.envelope_schema("postgres")
    key = json.dumps({"schema": dbz.KEY_SCHEMA, "payload": {"id": 2}}).encode()
    source = h.events[0].value["source"]

    def value(**payload: Any) -> bytes:
        return json.dumps({"schema": schema, "payload": {"before": None, "after": None, "source": source,
                                                         "op": None, "ts_ms": 1, **payload}}).encode()

    bad = [
        (0, key, json.dumps({"schema": schema, "payload": {"id": 2}}).encode()),  # a row, not an envelope
        (0, key, value(op="m")),                                                # a logical decoding message
        (0, key, value(op="u")),                                                # an update without after
        (0, None, value(op="c", after={"id": 9, "first_name": "x", "last_name": "y", "email": None})),
    ]
    dbz.write(root, "customers", h.events, "json", "postgres", extra=bad)
    assert convert(root, out, fmt, "json") == 0
    assert table_of(fmt, out) == dbz.replay(h.events)  # row 2 neither replaced nor deleted
    dead = dbz.read_table(fmt, out, "customers__dead_letter", "native")
    assert sorted((r["offset"], r["reason"]) for r in dead) == [
        (2, "not a Debezium envelope: no op"),
        (3, "not a row change: op 'm'"),
        (4, "op 'u' without an after image"),
        (5, "no key (a table without a primary key cannot be applied by key)"),
    ]
    assert all(r["value"] is not None and r["column"] == "value" for r in dead)  # the raw record kept


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncate_empties_the_table_as_of_its_offset(tmp_path, fmt):
    h = dbz.History("postgres", partitions=3)
    for key in range(6):
        h.insert(key)
    cut = len(h.events)
    h.update(4)
    h.truncate()
    h.insert(7)
    h.insert(3)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    written: dict[int, int] = {}
    dbz.write(root, "customers", h.events[:cut], "json", "postgres", written=written)
    assert convert(root, out, fmt, "json") == 0
    assert set(table_of(fmt, out)) == set(range(6))
    dbz.write(root, "customers", h.events[cut:], "json", "postgres", written=written)
    assert convert(root, out, fmt, "json", "--mode", "append") == 0
    assert table_of(fmt, out) == dbz.replay(h.events) == h.rows
    assert set(h.rows) == {3, 7}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_tombstone_left_alone_by_compaction_deletes(tmp_path, fmt):
    h = dbz.History("postgres")
    h.insert(1)
    h.insert(2)
    h.delete(2)
    events = [e for e in h.events if not (e.value is not None and e.value["op"] == "d")]  # compacted away
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    dbz.write(root, "customers", events, "json", "postgres")
    assert convert(root, out, fmt, "json") == 0
    assert table_of(fmt, out) == dbz.replay(events) == h.rows


@pytest.mark.parametrize(("more", "says"), [
    (["--format", "parquet"], "--cdc debezium writes --format iceberg or delta"),
    (["--format", "delta", "--upsert"], "leave out --upsert"),
    (["--format", "delta", "--engine", "spark", "--where", "offset > 1"], "leave out --where"),
    (["--format", "delta", "--flatten-values"], "leave out --flatten-values"),
    (["--format", "delta", "--mode", "overwrite"], "not overwrite"),
    (["--format", "delta", "--cdc-columns", "source.nope"], "source block has no nope"),
    (["--format", "delta", "--cdc-columns", "weather"], "--cdc-columns weather: one of"),
])
def test_refused_combinations_say_why_in_one_line(tmp_path, capsys, more, says):
    h = dbz.documented("postgres")
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, "json", "postgres")
    args = ["convert", str(root), str(tmp_path / "out"), "--cdc", "debezium", "--values", "json", "-q", *more]
    if "--engine" not in more:
        args += ["--engine", "arrow"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_cdc_needs_values_and_cdc_columns_needs_cdc(tmp_path, capsys):
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", dbz.documented("postgres").events, "json", "postgres")
    assert main(["convert", str(root), str(tmp_path / "o"), "--format", "delta", "--cdc", "debezium", "-q"]) == 2
    assert "give --values" in capsys.readouterr().err
    assert main(["convert", str(root), str(tmp_path / "o"), "--format", "delta", "--cdc-columns", "op", "-q"]) == 2
    assert "--cdc-columns needs --cdc" in capsys.readouterr().err


# --------------------------------------------------------------------------- random histories

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(actions=dbz.ACTIONS, partitions=st.integers(1, 3), connector=st.sampled_from(["postgres", "mysql"]),
       split=st.floats(0, 1))
def test_random_histories_equal_the_replay_across_two_runs(tmp_path_factory, fmt, encoding, actions, partitions,
                                                           connector, split):
    h = dbz.history(actions, connector, partitions)
    cut = max(1, int(len(h.events) * split))  # the first run sees the log up to a point in time
    base = tmp_path_factory.mktemp("cdc")
    root, out = base / "root", base / "out"
    dbz.fresh(root)
    written: dict[int, int] = {}
    dbz.write(root, "customers", h.events[:cut], encoding, connector, written=written)
    assert convert(root, out, fmt, encoding) == 0
    assert table_of(fmt, out) == dbz.replay(h.events[:cut])
    if cut < len(h.events):
        dbz.write(root, "customers", h.events[cut:], encoding, connector, written=written)
        assert convert(root, out, fmt, encoding, "--mode", "append") == 0
    assert table_of(fmt, out) == dbz.replay(h.events) == h.rows


# --------------------------------------------------------------------------- --as-of


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("by", ["timestamp", "source.ts_ms", "ts_ms", "offsets"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(actions=dbz.ACTIONS, partitions=st.integers(1, 3), split=st.floats(0, 1))
def test_as_of_every_cut_then_append_carries_it_forward(tmp_path_factory, fmt, by, actions, partitions, split):
    h = dbz.history(actions, "postgres", partitions)
    cut = max(1, int(len(h.events) * split))
    base = tmp_path_factory.mktemp("asof")
    root, out = base / "root", base / "out"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, "json", "postgres")
    args, held = dbz.as_of_value(h, cut, by)
    assert convert(root, out, fmt, "json", *args) == 0
    assert table_of(fmt, out) == dbz.replay(held)
    assert convert(root, out, fmt, "json", "--mode", "append") == 0
    assert table_of(fmt, out) == dbz.replay(h.events) == h.rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_as_of_on_avro_and_a_later_as_of(tmp_path, fmt):
    h = dbz.documented("mysql", partitions=2)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, "avro", "mysql")
    times = [e.timestamp for e in h.events]
    for t in (times[3], times[8], times[-1]):  # each run later than the one before
        more = ["--mode", "append"] if t != times[3] else []
        assert convert(root, out, fmt, "avro", "--as-of", str(t), "--as-of-by", "source.ts_ms", *more) == 0
        assert table_of(fmt, out) == dbz.replay([e for e in h.events if e.timestamp <= t])


@pytest.mark.parametrize(("more", "says"), [
    (["--as-of", "yesterday"], "give milliseconds since the epoch"),
    (["--as-of", "5", "--ending-timestamp", "9"], "leave out --ending-offsets and --ending-timestamp"),
    (["--as-of-by", "ts_ms"], "--as-of-by needs --as-of"),
    (["--as-of", '{"customers": {"0": 1}}', "--as-of-by", "ts_ms"], "--as-of-by is for a time"),
])
def test_as_of_refusals(tmp_path, capsys, more, says):
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", dbz.documented("postgres").events, "json", "postgres")
    assert convert(root, tmp_path / "out", "delta", "json", *more) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_as_of_needs_upsert_or_cdc_and_ts_ms_needs_cdc(tmp_path, capsys):
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", dbz.documented("postgres").events, "json", "postgres")
    base = ["convert", str(root), str(tmp_path / "o"), "--format", "delta", "-q", "--as-of", "5"]
    assert main(base) == 2
    assert "needs --upsert or --cdc" in capsys.readouterr().err
    assert main([*base, "--upsert", "--as-of-by", "ts_ms"]) == 2
    assert "needs --cdc debezium" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_column_the_database_added_is_added_to_the_table(tmp_path, fmt, monkeypatch):
    h = dbz.History("postgres")
    h.insert(1)
    h.insert(2)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    written: dict[int, int] = {}
    dbz.write(root, "customers", h.events, "json", "postgres", written=written)
    assert convert(root, out, fmt, "json") == 0
    wider = {**dbz.ROW_SCHEMA, "fields": [*dbz.ROW_SCHEMA["fields"], dbz._connect_field("phone", "string", True)]}
    monkeypatch.setattr(dbz, "ROW_SCHEMA", wider)  # ALTER TABLE customers ADD COLUMN phone
    n = len(h.events)
    h.update(1)
    h.events[-1].value["after"]["phone"] = "555-0100"
    dbz.write(root, "customers", h.events[n:], "json", "postgres", written=written)
    assert convert(root, out, fmt, "json", "--mode", "append") == 0
    rows = {r["id"]: r for r in dbz.read_table(fmt, out, "customers", "native")}
    assert (rows[1]["phone"], rows[2]["phone"]) == ("555-0100", None)
    assert rows[1]["last_name"] == "Kretchmar-Updated"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_database_column_named_topic_is_the_tables_own(tmp_path, fmt, monkeypatch):
    """Two change streams in one run, their rows with a column ``topic`` of the database's: each
    table gets its own rows (the changes are routed by kbatch's hidden column), the column its values."""
    wider = {**dbz.ROW_SCHEMA, "fields": [*dbz.ROW_SCHEMA["fields"], dbz._connect_field("topic", "string", True)]}
    monkeypatch.setattr(dbz, "ROW_SCHEMA", wider)
    root, out = tmp_path / "root", tmp_path / "out"
    dbz.fresh(root)
    for name in ("customers", "vendors"):
        h = dbz.History("postgres")
        for key in (1, 2, 3):
            h.insert(key)
        h.update(1)
        h.delete(2)
        for e in h.events:
            if e.value is not None and e.value["after"] is not None:
                e.value["after"]["topic"] = None if e.key == {"id": 3} else f"news of {name}"
        dbz.write(root, name, h.events, "json", "postgres")
    assert convert(root, out, fmt, "json") == 0
    for name in ("customers", "vendors"):
        for reader in ("native", "duckdb"):
            rows = sorted((int(r["id"]), r["topic"]) for r in dbz.read_table(fmt, out, name, reader))
            assert rows == [(1, f"news of {name}"), (3, None)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_whole_backup_with_replicas_gives_the_database_table(tmp_path, fmt):
    h = dbz.mixed_history()
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, "json", "postgres")
    backup, out = dbz.backup_of(root, tmp_path / "backup"), tmp_path / "out"
    assert convert(backup, out, fmt, "json", "--recursive") == 0
    assert table_of(fmt, out) == dbz.replay(h.events) == h.rows
