"""The Iceberg and Delta sinks applying changes by a primary key of several columns (``Keyed``, what
``--cdc`` hands them): inserts, replacements, deletes and a truncate, over two commits, against a
dictionary replay; column names in mixed case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbatch.tables import Keyed, Ledger, OffsetRange, open_sink

pa = pytest.importorskip("pyarrow")

KEYED = Keyed(keys=("Region", "id"), op="_kbatch_op", order=("_kbatch_partition", "_kbatch_offset", "_kbatch_ts"),
              route="topic")
SCHEMA = pa.schema([("Region", pa.string()), ("id", pa.int64()), ("Name", pa.string())])

#: (op, region, id, name) in offset order, two runs
RUN1 = [("u", "eu", 1, "a"), ("u", "us", 1, "b"), ("u", "eu", 2, "c"), ("u", "eu", 1, "a2"), ("d", "us", 1, None),
        ("u", "us", 3, "d")]
RUN2 = [("u", "eu", 2, "c2"), ("d", "eu", 1, None), ("u", "us", 1, "b2"), ("t", None, None, None),
        ("u", "eu", 5, "e"), ("u", "eu", 5, "e2"), ("d", "eu", 5, None), ("u", "us", 6, "f")]


def batch(changes: list[tuple[Any, ...]], start: int) -> Any:
    rows = [{"Region": r, "id": i, "Name": n, "topic": "t", "_kbatch_op": op, "_kbatch_partition": 0,
             "_kbatch_offset": start + k, "_kbatch_ts": start + k} for k, (op, r, i, n) in enumerate(changes)]
    schema = SCHEMA.append(pa.field("topic", pa.string())).append(pa.field("_kbatch_op", pa.string())) \
        .append(pa.field("_kbatch_partition", pa.int32())).append(pa.field("_kbatch_offset", pa.int64())) \
        .append(pa.field("_kbatch_ts", pa.int64()))
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def replay(changes: list[tuple[Any, ...]]) -> dict[tuple[str, int], str]:
    table: dict[tuple[str, int], str] = {}
    for op, r, i, n in changes:
        if op == "u":
            table[(r, i)] = n
        elif op == "d":
            table.pop((r, i), None)
        else:
            table.clear()
    return table


def rows(fmt: str, out: Path) -> dict[tuple[str, int], str]:
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        t = default_catalog(out).load_table("kafka.t").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        t = DeltaTable(str(out / "t")).to_pyarrow_table()
    assert t.column_names[:3] == ["Region", "id", "Name"] and "_kbatch_op" not in t.column_names
    got = {(r["Region"], r["id"]): r["Name"] for r in t.to_pylist()}
    assert len(got) == t.num_rows
    return got


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_changes_by_a_key_of_two_columns(tmp_path, fmt):
    pytest.importorskip("deltalake" if fmt == "delta" else "pyiceberg")
    out = tmp_path / "out"
    end = 0
    for i, run in enumerate((RUN1, RUN2)):
        sink = open_sink(fmt, out, "errorifexists" if i == 0 else "append", topics=["t"], partition_by=["none"],
                         upsert={"t": KEYED}, **({"partitions": [("t", 0, None)]} if fmt == "delta" else {}))
        with sink:
            sink.open({"t": SCHEMA})
            sink.write([batch(run, end)])
            ledger = Ledger([OffsetRange("t", 0, 0, end + len(run))])
            commits = sink.commit(ledger, Ledger([OffsetRange("t", 0, end, end + len(run))]))
        end += len(run)
        assert rows(fmt, out) == replay(RUN1 + RUN2 if i else RUN1)
        assert commits[0].upsert is not None and commits[0].upsert["rows"] == len(replay(RUN1 + RUN2 if i else RUN1))
    assert rows(fmt, out) == {("us", 6): "f"}
