"""A later run with more columns than the table (issue 28): the schema evolves by name, old files
untouched; a column whose type changed stops the run, naming it."""

from __future__ import annotations

import json

import pytest
from support.tables import convert_cli, rows_of_root, rows_of_table, summary_of

from kbatch.cli._sample import write_sample

pa = pytest.importorskip("pyarrow")
FIRST = json.dumps({"orders": {"0": 10, "1": 10, "2": 10}})


def read(out, fmt):
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        return default_catalog(out).load_table("kafka.orders").scan().to_arrow()
    import deltalake

    return deltalake.DeltaTable(str(out / "orders")).to_pyarrow_table()


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_column_added_by_a_later_run(tmp_path, fmt):
    pytest.importorskip("pyiceberg" if fmt == "iceberg" else "deltalake")
    root, out = tmp_path / "root", tmp_path / "out"
    write_sample(root)
    summary_of(convert_cli(str(root), str(out), "--format", fmt, "--subscribe", "orders", "--no-headers",
                           "--ending-offsets", FIRST))
    assert "headers" not in read(out, fmt).schema.names
    s = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--subscribe", "orders", "--mode", "append"))
    assert s["records"] == 870
    table = read(out, fmt)
    assert rows_of_table(table) == rows_of_root(root, ["orders"])
    headers = {(r["partition"], r["offset"]): r["headers"] for r in table.select(["partition", "offset", "headers"])
               .to_pylist()}
    assert all(headers[(p, o)] is None for p in range(3) for o in range(10))  # the first run's rows: no headers
    assert all(headers[(p, o)] is not None for p in range(3) for o in range(10, 300))


def test_a_changed_column_type_stops_the_run(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    root, out = tmp_path / "root", tmp_path / "out"
    write_sample(root)
    deltalake.write_deltalake(str(out / "orders"), pa.table({"offset": pa.array(["0"]), "key": pa.array([b"k"])}))
    proc = convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "orders", "--mode", "append")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("kbatch convert: error: table ") and last.count("kbatch convert: error") == 1
    assert last.endswith("column offset is string in the table, int64 in this run")
    assert not list((out / "orders").glob("timestamp_day=*/*.parquet"))  # the run's files deleted


def test_iceberg_changed_column_type_stops_the_run(tmp_path):
    pytest.importorskip("pyiceberg")
    from kbatch.tables import default_catalog

    root, out = tmp_path / "root", tmp_path / "out"
    write_sample(root)
    out.mkdir()
    catalog = default_catalog(out)
    catalog.create_namespace("kafka")
    catalog.create_table("kafka.orders", schema=pa.schema([("offset", pa.string())])).append(
        pa.table({"offset": ["0"]}))
    proc = convert_cli(str(root), str(out), "--format", "iceberg", "--subscribe", "orders", "--mode", "append")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("kbatch convert: error: table kafka.orders: this run's columns do not fit the table's "
                           "schema 0: Cannot change column type: offset: string -> long"), last
    assert catalog.load_table("kafka.orders").scan().to_arrow().num_rows == 1
