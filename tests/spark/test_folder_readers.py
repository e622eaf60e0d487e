"""Spark reads a typed Parquet OUT after a schema evolution with docs/GUIDE.md's command: every row
and field of each topic, the later reader schema's fields null in the older files (issue 35, item
2; pyarrow, Polars, DuckDB: tests/values/test_folder_readers.py)."""

from __future__ import annotations

import pytest
from support.folder_readers import by_offset, expected_values, guide_reads, same_rows, truth, typed_out

pytest.importorskip("fastavro")


def test_spark_reads_every_row_and_field_with_the_guides_command(spark, tmp_path) -> None:
    typed = typed_out(tmp_path)
    for topic in ("orders", "plain"):
        df = guide_reads(typed.out, topic, {"spark": spark}, spark=True)["df"]
        rows = by_offset([r.asDict(recursive=True) for r in df.collect()])
        same_rows(rows, truth(typed.out, topic))
        if topic == "orders":
            assert {o: r["value"] for o, r in rows.items() if r["value"] is not None} == expected_values(typed)
