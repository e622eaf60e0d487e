"""kbatch convert --values avro (arrow engine): typed values in Parquet, Iceberg and Delta tables equal to
fastavro's reading, dead letters holding exactly the bad records, reruns and kills that neither lose nor
duplicate a dead letter, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from support.avro_root import V1, V2, AvroRoot, grow, write_avro_root
from support.registry_server import RegistryServer
from support.tables import convert_cli, summary_of

import kbatch

pytest.importorskip("fastavro")


@pytest.fixture
def avro_root(tmp_path) -> AvroRoot:
    return write_avro_root(tmp_path / "root")


def values_cli(r: AvroRoot | Path, out: Path, *extra: str, env: dict[str, str] | None = None):
    root = r.root if isinstance(r, AvroRoot) else r
    return convert_cli(str(root), str(out), "--values", "avro", *extra, env=env)


def by_offset(table: pa.Table) -> dict[int, dict]:
    rows = {row["offset"]: row for row in table.to_pylist()}
    assert len(rows) == table.num_rows, "an offset written twice"
    return rows


def check_good(r: AvroRoot, table: pa.Table, *, keys: bool = False) -> None:
    rows = by_offset(table)
    assert sorted(rows) == sorted(r.good)
    assert {o: row["value"] for o, row in rows.items()} == r.good  # fastavro's reading, laid out by V2
    assert {o: row["value_schema_id"] for o, row in rows.items()} == r.ids
    if keys:
        assert {o: row["key"] for o, row in rows.items()} == {o: r.keys[o] for o in r.good}


def check_dead(r: AvroRoot, table: pa.Table) -> None:
    rows = by_offset(table)
    assert sorted(rows) == sorted(r.bad)
    for offset, (reason, path, byte) in r.bad.items():
        row = rows[offset]
        assert row["reason"].startswith(reason) and (row["path"], row["byte"]) == (path, byte), row
        assert (row["column"], row["topic"], row["partition"]) == ("value", "orders", 0)
        assert row["value"] == r.raw[offset] and row["key"] == r.raw_keys[offset]  # the raw record
        assert row["error"].startswith(row["reason"]) and f"offset {offset}" in row["error"]


def parquet_table(folder: Path) -> pa.Table:
    return pads.dataset(str(folder), format="parquet", partitioning="hive").to_table()


# ---------------------------------------------------------------- parquet


def test_parquet_typed_values_dead_letters_and_reruns(avro_root, tmp_path) -> None:
    r, out = avro_root, tmp_path / "out"
    s = summary_of(values_cli(r, out, "--keys", "avro"))
    check_good(r, pq.read_table(out / "topic=orders"), keys=True)
    check_dead(r, parquet_table(out / "_dead_letter"))
    plain = pq.read_table(out / "topic=plain")
    assert plain.schema.field("value").type == pa.binary() and "value_schema_id" not in plain.schema.names
    assert pq.read_table(out / "topic=_schemas").schema.field("value").type == pa.binary()  # never decoded
    # the summary: dead letters per partition, the commonest errors, the topics left binary
    orders = next(p for p in s["per_partition"] if p["topic"] == "orders")
    assert (orders["records"], orders["dead_letters"], s["dead_letters"]) == (len(r.good) + 3, 3, 3)
    assert s["dead_letter_path"] == str(out / "_dead_letter")
    assert sorted(e["reason"].split(":")[0] for e in s["value_errors"]) == [
        "no schema registry frame", "truncated value", "unknown schema id 99"]
    assert all(e["count"] == 1 and e["example"].startswith("orders-0 offset ") for e in s["value_errors"])
    notes = "\n".join(s["notes"])
    assert "values left binary" in notes and ": plain" in notes and "never decoded: _schemas" in notes
    assert "orders: values decoded with orders-value version 2 (id 2)" in notes
    # readers of OUT do not see the dead letters (nor the ledger)
    assert not [f for f in pads.dataset(str(out), format="parquet", partitioning="hive").files if "/_" in f]
    # a rerun with nothing new commits nothing
    again = summary_of(values_cli(r, out, "--keys", "avro", "--mode", "append"))
    assert again["since"] and not again["tables"]
    # new records, a run killed after its commit point (files not moved yet), then a rerun
    grow(r)
    killed = values_cli(r, out, "--keys", "avro", "--mode", "append", env={"KBATCH_TEST_KILL_AT": "mid-commit"})
    assert killed.returncode == -9, killed.stderr
    summary_of(values_cli(r, out, "--keys", "avro", "--mode", "append"))
    check_good(r, pq.read_table(out / "topic=orders"), keys=True)
    check_dead(r, parquet_table(out / "_dead_letter"))  # the new one once, the old ones not again


def test_on_value_error_fail_stops_at_the_first_with_one_line(avro_root, tmp_path) -> None:
    out = tmp_path / "out"
    run = values_cli(avro_root, out, "--on-value-error", "fail")
    assert run.returncode == 1 and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith("kbatch convert: error: unknown schema id 99") and "offset 7" in lines[-1]
    assert not out.exists()  # nothing committed


def test_no_registry_is_a_one_line_usage_error(tmp_path) -> None:
    r = write_avro_root(tmp_path / "root", with_schemas=False)
    run = values_cli(r, tmp_path / "out")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "--values needs schemas: no _schemas topic found under" in run.stderr and "--registry" in run.stderr
    run = values_cli(r, tmp_path / "out", "--registry", str(tmp_path / "nowhere"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--registry" in run.stderr
    run = convert_cli(str(r.root), str(tmp_path / "out"), "--dead-letter", str(tmp_path / "d"))
    assert run.returncode == 2 and "need --values avro" in run.stderr and not (tmp_path / "out").exists()


def test_schema_files_a_reader_schema_file_and_flattened_values(tmp_path) -> None:
    r = write_avro_root(tmp_path / "root", with_schemas=False)
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "1.avsc").write_text(json.dumps(V1))
    (schemas / "2.avsc").write_text(json.dumps(V2))
    (tmp_path / "reader.avsc").write_text(json.dumps(V2))
    out = tmp_path / "out"
    s = summary_of(values_cli(r, out, "--registry", str(schemas), "--reader-schema", str(tmp_path / "reader.avsc"),
                              "--flatten-values", "--subscribe", "orders"))
    table = pq.read_table(out / "topic=orders")
    fields = [f["name"] for f in V2["fields"]]
    assert table.schema.names[:len(fields) + 2] == ["key", *[f"value_{f}" for f in fields], "value_schema_id"]
    rows = by_offset(table)
    assert {o: {f: row[f"value_{f}"] for f in fields} for o, row in rows.items()} == r.good
    check_dead(r, parquet_table(out / "_dead_letter"))
    assert s["dead_letters"] == 3


def test_values_written_by_confluent_kafkas_avro_serializer(tmp_path) -> None:
    sr = pytest.importorskip("confluent_kafka.schema_registry")
    avro = pytest.importorskip("confluent_kafka.schema_registry.avro")
    serialization = pytest.importorskip("confluent_kafka.serialization")
    rows = [{"id": i, "customer": f"c{i}", "items": [{"sku": "s", "price": i / 2}] * (i % 3), "status": "PAID",
             "note": None if i % 2 else "n"} for i in range(20)]
    with RegistryServer() as server:
        client = sr.SchemaRegistryClient({"url": server.url})
        ctx = serialization.SerializationContext("orders", serialization.MessageField.VALUE)
        ser = avro.AvroSerializer(client, json.dumps(V2))
        with kbatch.LogWriter(tmp_path / "root", "orders", 0) as w:
            w.append(kbatch.encode([ser(row, ctx) for row in rows], timestamps=[0] * len(rows)))
        out = tmp_path / "out"
        s = summary_of(values_cli(tmp_path / "root", out, "--registry", server.url))
    assert s["dead_letters"] == 0 and not (out / "_dead_letter").exists()
    assert pq.read_table(out / "topic=orders").column("value").to_pylist() == rows


# ---------------------------------------------------------------- iceberg, delta, a dead-letter folder apart


def read_tables(kind: str, out: Path) -> tuple[pa.Table, pa.Table]:
    """(orders, its dead letters) as written by ``kind``."""
    if kind == "iceberg":
        from kbatch.tables import default_catalog

        catalog = default_catalog(out)
        return (catalog.load_table("kafka.orders").scan().to_arrow(),
                catalog.load_table("kafka.orders__dead_letter").scan().to_arrow())
    if kind == "delta":
        from deltalake import DeltaTable

        return (DeltaTable(str(out / "orders")).to_pyarrow_table(),
                DeltaTable(str(out / "orders__dead_letter")).to_pyarrow_table())
    return pq.read_table(out / "topic=orders"), parquet_table(out.parent / "dead")


@pytest.mark.parametrize("kind", ["iceberg", "delta", "parquet-apart"])
def test_tables_with_dead_letters_beside_and_a_kill_between_the_commits(avro_root, tmp_path, kind) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake" if kind == "delta" else "pyarrow")
    r, out = avro_root, tmp_path / "out"
    extra = ["--format", kind] if kind != "parquet-apart" else ["--dead-letter", str(tmp_path / "dead")]
    extra += ["--subscribe", "orders,plain"]
    s = summary_of(values_cli(r, out, *extra))
    good, dead = read_tables(kind, out)
    check_good(r, good)
    check_dead(r, dead)
    # the dead letters' table first, then orders' and plain's (one Parquet folder holds both)
    assert s["dead_letters"] == 3 and len(s["tables"]) == (3 if kind != "parquet-apart" else 2)
    assert s["dead_letter_path"] == (s["tables"][0]["table"] if kind != "parquet-apart" else str(tmp_path / "dead"))
    # new records; the dead letters committed, then killed before the data's commit
    grow(r)
    killed = values_cli(r, out, *extra, "--mode", "append", env={"KBATCH_TEST_KILL_AT": "between-commits"})
    assert killed.returncode == -9, killed.stderr
    good, dead = read_tables(kind, out)
    assert len(dead) == 4 and good.num_rows == len(r.good) - 6  # the data at its last commit
    again = summary_of(values_cli(r, out, *extra, "--mode", "append"))
    good, dead = read_tables(kind, out)
    check_good(r, good)
    check_dead(r, dead)  # the new dead letter once: the rerun finds it committed already
    assert again["dead_letters"] == 0
    assert any(n.startswith("1 dead letter of this run's records committed already") for n in again["notes"])
    assert summary_of(values_cli(r, out, *extra, "--mode", "append"))["since"]  # nothing new: nothing committed


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_later_reader_version_evolves_the_table_by_name(avro_root, tmp_path, kind) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    r, out = avro_root, tmp_path / "out"
    (tmp_path / "v1.avsc").write_text(json.dumps(V1))
    first = ["--format", kind, "--subscribe", "orders"]
    summary_of(values_cli(r, out, *first, "--reader-schema", str(tmp_path / "v1.avsc")))
    before = set(r.good)
    grow(r)
    summary_of(values_cli(r, out, *first, "--mode", "append"))  # the reader now: orders-value's latest, V2
    good, _dead = read_tables(kind, out)
    rows = by_offset(good)
    assert sorted(rows) == sorted(r.good)
    v1_fields = [f["name"] for f in V1["fields"]]
    for offset, row in rows.items():
        if offset in before:  # written by the first run: V2's added fields are null
            assert row["value"] == {**{f: r.good[offset][f] for f in v1_fields}, "status": None, "note": None}
        else:
            assert row["value"] == r.good[offset]


@pytest.mark.parametrize(("extra", "says"), [
    (["--format", "orc"], "--values writes --format parquet, iceberg or delta"),
    (["--format", "iceberg", "--upsert", "--keys", "avro", "--mode", "append"], "--upsert keeps one row per key"),
    (["--no-partition-by-topic"], "--no-partition-by-topic with --values"),
    (["--dead-letter", "{out}/dead"], "--dead-letter inside OUT is a hidden folder of a parquet OUT"),
    (["--dead-letter", "{root}/dead"], "and the log root"),
    (["--reader-schema", "77"], "--reader-schema 77: no schema with id 77"),
    (["--reader-schema", '{"type": "nope"}'], "--reader-schema"),
])
def test_usage_errors_are_one_line_before_any_work(avro_root, tmp_path, capsys, extra, says) -> None:
    from kbatch.convert.__main__ import main

    out = tmp_path / "out"
    argv = [str(avro_root.root), str(out), "--values", "avro", "--engine", "arrow", "-q",
            *[e.replace("{out}", str(out)).replace("{root}", str(avro_root.root)) for e in extra]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not out.exists()
