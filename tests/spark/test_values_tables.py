"""``kbatch convert --engine spark --values avro --format iceberg|delta`` (issues 27, 28): Spark's
executors decode and write plain Parquet, the driver commits the data files and the dead letters
(``<topic>__dead_letter`` tables) with the ledger; the tables equal the arrow engine's, a rerun
commits nothing, new records (one more dead letter) are appended once."""

from __future__ import annotations

import argparse
import json

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers

pytest.importorskip("pyspark")
pytest.importorskip("fastavro")
pytest.importorskip("pyiceberg")
pytest.importorskip("deltalake")
pa = pytest.importorskip("pyarrow")

from support.avro_root import grow, write_avro_root  # noqa: E402


def _run(capsys, *argv: str) -> dict:
    from kbatch.convert._arguments import add_arguments
    from kbatch.convert._run import run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    status = run(parser.parse_args([*argv, "--json-summary"]))
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def _tables(fmt: str, out) -> tuple[list[dict], list[dict]]:
    """(orders, its dead letters) by offset, read with the format's own library."""
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        catalog = default_catalog(out)
        good = catalog.load_table("kafka.orders").scan().to_arrow()
        dead = catalog.load_table("kafka.orders__dead_letter").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        good = DeltaTable(str(out / "orders")).to_pyarrow_table()
        dead = DeltaTable(str(out / "orders__dead_letter")).to_pyarrow_table()
    assert len(set(good.column("offset").to_pylist())) == good.num_rows, "an offset written twice"
    return (sorted(good.to_pylist(), key=lambda r: r["offset"]), sorted(dead.to_pylist(), key=lambda r: r["offset"]))


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_spark_values_into_tables_equal_the_arrow_engines(spark, tmp_path, capsys, fmt):
    r = write_avro_root(tmp_path / "root")
    args = ["--values", "avro", "--keys", "avro", "--format", fmt, "--subscribe", "orders"]
    arrow, sparked = tmp_path / "arrow", tmp_path / "spark"
    sa = _run(capsys, str(r.root), str(arrow), "--engine", "arrow", *args)
    ss = _run(capsys, str(r.root), str(sparked), "--engine", "spark", "--master", "local[2]", *args)
    assert ss["engine"] == "spark" and ss["dead_letters"] == sa["dead_letters"] == 3
    assert ss["value_errors"] == sa["value_errors"] and ss["records"] == sa["records"]
    assert [t["table"].rsplit("/", 1)[-1].rsplit(".", 1)[-1] for t in ss["tables"]] == ["orders__dead_letter", "orders"]
    assert _tables(fmt, sparked) == _tables(fmt, arrow)
    good, dead = _tables(fmt, sparked)
    assert {row["offset"]: row["value"] for row in good} == r.good
    assert sorted(row["offset"] for row in dead) == sorted(r.bad)
    # nothing new: nothing committed (no JVM work); new records: appended once, the new dead letter once
    append = [str(r.root), str(sparked), "--engine", "spark", "--master", "local[2]", *args, "--mode", "append"]
    assert _run(capsys, *append)["since"]
    grow(r)
    more = _run(capsys, *append)
    assert more["dead_letters"] == 1 and more["records"] == 7, more
    good, dead = _tables(fmt, sparked)
    assert {row["offset"]: row["value"] for row in good} == r.good
    assert sorted(row["offset"] for row in dead) == sorted(r.bad)


def test_spark_plain_json_values_equal_the_arrow_engines(spark, tmp_path, capsys):
    """``--values json`` without a registry: the plan infers each topic's schema (here Kafka Connect's
    embedded one) from its first records, and Spark's executors decode plain JSON with it."""
    from support import debezium as dbz

    h = dbz.History("postgres", partitions=2)
    for key in range(6):
        h.insert(key)
    h.update(3)
    root = tmp_path / "root"
    dbz.fresh(root)
    dbz.write(root, "customers", h.events, "json", "postgres")
    tables = {}
    for engine in ("arrow", "spark"):
        _run(capsys, str(root), str(tmp_path / engine), "--format", "delta", "--values", "json", "--engine", engine)
        from deltalake import DeltaTable

        t = DeltaTable(str(tmp_path / engine / "customers")).to_pyarrow_table()
        tables[engine] = t.sort_by([("partition", "ascending"), ("offset", "ascending")]).select(["offset", "value"])
    assert pa.types.is_struct(tables["spark"].schema.field("value").type)
    assert tables["spark"].equals(tables["arrow"]) and tables["spark"].num_rows == len(h.events)
