"""A typed Parquet OUT (a typed topic whose reader schema gained fields, beside a raw topic) read by
pyarrow, Polars and DuckDB with docs/GUIDE.md's commands: every row and field of every topic, nulls
and empties as written (issue 35, item 2; Spark: tests/spark/test_folder_readers.py); a run whose
columns no reader could merge refused; the summary prints the GUIDE's commands."""

from __future__ import annotations

import pytest
from support.avro_root import grow, write_avro_root
from support.folder_readers import by_offset, expected_values, guide_reads, same_rows, truth, typed_out
from support.tables import convert_cli, summary_of
from support.tree import source_file

from kbatch.errors import TableError
from kbatch.tables import READERS

pytest.importorskip("fastavro")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("polars")
pytest.importorskip("duckdb")


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    return typed_out(tmp_path_factory.mktemp("typed"))


@pytest.mark.parametrize("topic", ["orders", "plain"])
def test_the_guides_commands_read_every_row_and_field(typed, topic) -> None:
    g = guide_reads(typed.out, topic)
    want = truth(typed.out, topic)
    got = {
        "pyarrow": by_offset(g["table"].to_pylist()),
        "polars": by_offset(g["frame"].to_dicts()),
        "duckdb": by_offset([dict(zip(g["rows"].columns, r, strict=True)) for r in g["rows"].fetchall()]),
    }
    for reader, rows in got.items():
        same_rows(rows, want)
        assert rows == got["pyarrow"], reader  # every reader the same rows, fields and nulls
    if topic == "orders":  # the newer fields there, null where the older reader schema had none
        values = {o: r["value"] for o, r in got["pyarrow"].items() if r["value"] is not None}
        assert values == expected_values(typed)
        assert {"status", "note"} <= set(next(iter(values.values())))
        nulls = [v["note"] is None for v in values.values()]
        empties = [v["items"] == [] for v in values.values()]
        assert any(nulls) and not all(nulls) and any(empties) and not all(empties)
    else:
        assert all(isinstance(r["value"], bytes) for r in got["pyarrow"].values())


def test_without_the_folder_schema_the_new_fields_would_be_lost(typed) -> None:
    """What the GUIDE's commands prevent: pyarrow left to the first file's schema drops the fields
    the later reader schema added."""
    import pyarrow.dataset as ds

    first_only = ds.dataset(typed.out / "topic=orders", partitioning="hive").schema
    merged = guide_reads(typed.out, "orders")["table"].schema
    assert "status" not in first_only.field("value").type.names
    assert "status" in merged.field("value").type.names


def test_a_column_no_reader_merges_is_refused(tmp_path) -> None:
    r, out = write_avro_root(tmp_path / "root"), tmp_path / "out"
    summary_of(convert_cli(str(r.root), str(out), "--subscribe", "orders", "--mode", "append"))  # raw: binary
    grow(r)
    before = sorted((p.relative_to(out), p.stat().st_size) for p in out.rglob("*"))
    # the new records' values as Avro: a struct where the files there have binary
    run = convert_cli(str(r.root), str(out), "--values", "avro", "--subscribe", "orders", "--mode", "append",
                      json_summary=False)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [ln for ln in run.stderr.strip().splitlines() if not ln.startswith("kbatch convert (arrow): ")]
    assert len(lines) == 1 and lines[0].startswith("kbatch convert: error: "), run.stderr  # progress aside
    assert "topic=orders: column value is binary in the files there and struct<" in lines[0], lines[0]
    assert "--format iceberg or delta" in lines[0]
    assert sorted((p.relative_to(out), p.stat().st_size) for p in out.rglob("*")) == before  # nothing committed


def test_merge_keeps_fields_by_name_and_refuses_two_types() -> None:
    from kbatch.tables._folderschema import merge

    old = pa.schema([pa.field("value", pa.struct([pa.field("a", pa.int64(), nullable=False)]), nullable=False)])
    new = pa.schema([pa.field("value", pa.struct([pa.field("a", pa.int64(), nullable=False),
                                                  pa.field("b", pa.list_(pa.string()), nullable=False)]))])
    merged = merge(old, new, "here")
    value = merged.field("value")
    assert value.nullable and not value.type.field("a").nullable
    assert value.type.field("b").nullable and value.type.field("b").type == pa.list_(pa.string())
    with pytest.raises(TableError, match=r"here: column value\.a is int64 in the files there and double"):
        merge(merged, pa.schema([pa.field("value", pa.struct([pa.field("a", pa.float64())]))]), "here")


def test_the_summary_prints_the_guides_commands(typed, tmp_path) -> None:
    guide = source_file("docs/GUIDE.md").read_text()
    for reader, text in READERS.items():
        assert text in guide, reader
    run = convert_cli(str(typed.root.root), str(tmp_path / "o"), "--subscribe", "plain", json_summary=False)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    at = next(i for i, line in enumerate(printed) if line.startswith("read each topic as one dataset"))
    assert f"out = {str(tmp_path / 'o')!r}" in printed[at]
    assert printed[at + 1:at + 1 + len(READERS)] == [f"  {r}: {t}" for r, t in READERS.items()]
    jsum = summary_of(convert_cli(str(typed.root.root), str(tmp_path / "j"), "--subscribe", "plain"))
    assert jsum["read"][1:] == printed[at + 1:at + 1 + len(READERS)]
