"""A reader schema that gains fields (issue 35, item 6): the rows written before read null in the
new fields, Iceberg and Delta alike (pyiceberg writes format v2, which has no ``initial-default``;
Delta has none either), and the summary says so once, naming the table and the fields."""

from __future__ import annotations

import pytest
from support.avro_root import grow, write_avro_root
from support.tables import convert_cli, summary_of

pytest.importorskip("fastavro")


def _values(out, kind: str) -> dict[int, dict]:
    if kind == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table("kafka.orders").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        table = DeltaTable(str(out / "orders")).to_pyarrow_table()
    return {r["offset"]: r["value"] for r in table.select(["offset", "value"]).to_pylist()}


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_fields_a_reader_schema_adds_read_null_in_older_rows_and_the_summary_says_so(tmp_path, kind) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    r, out = write_avro_root(tmp_path / "root"), tmp_path / "out"
    args = [str(r.root), str(out), "--values", "avro", "--format", kind, "--subscribe", "orders", "--mode", "append"]
    first = summary_of(convert_cli(*args, "--reader-schema", "1"))  # V1: no status, no note
    assert not any("read null" in n for n in first["notes"])
    older = set(_values(out, kind))
    grow(r)
    second = summary_of(convert_cli(*args))  # the latest, V2: status (default "NEW") and note added
    said = [n for n in second["notes"] if "read null" in n]
    name = "kafka.orders" if kind == "iceberg" else str(out / "orders")
    assert said == [(f"table {name}: the rows written before this run read null in value.status, value.note (added "
                     "now): the table keeps no value for older rows, a reader schema's default included")]
    values = _values(out, kind)
    assert {values[o]["status"] for o in older} == {None}  # what the note says
    assert {v["status"] for o, v in values.items() if o not in older and v is not None} <= {"NEW", "PAID"}
    grow(r)
    third = summary_of(convert_cli(*args))  # the same columns: nothing to say
    assert not any("read null" in n for n in third["notes"])
