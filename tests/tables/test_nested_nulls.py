"""Null, empty and filled nested values (issue 35, item 1): every nullable nested type (list,
map, struct, list of structs) in the key, the value and ``headers`` reaches every format's files
as it was, null kept apart from empty, from both engines; read back by pyiceberg (its plan),
deltalake, Polars, and DuckDB's own Iceberg and Delta readers.

pyiceberg's ``append`` wrote a null list of structs as ``[]`` (apache/iceberg-python#3833); kbatch
writes the Iceberg data files itself. pyiceberg's own ``scan().to_arrow()`` still reads a null list
of structs as ``[]`` (the same bug, read side), so its rows are taken from the files it plans.

DuckDB's readers are the ``duckdb-extension-iceberg``/``-delta``/``-avro`` packages (the ``test``
extra), each built for one DuckDB version (the folder ``extensions/v<version>``): when the
installed DuckDB is another version, those readers are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import schemas_topic
from support.avro_root import avro, framed
from support.tables import REPO, convert_cli, summary_of

import kbatch

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pl = pytest.importorskip("polars")
pytest.importorskip("pyiceberg")
pytest.importorskip("deltalake")
pytest.importorskip("fastavro")

N = 9  # row i: null (i % 3 == 0), empty (1) or filled (2); headers none or two


def _fields(prefix: str) -> list[dict[str, Any]]:
    item = {"type": "record", "name": f"{prefix}Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "n", "type": ["null", "int"], "default": None}]}
    ref = {"type": "record", "name": f"{prefix}Ref", "fields": [
        {"name": "a", "type": "string"}, {"name": "b", "type": ["null", "int"], "default": None}]}
    return [
        {"name": "id", "type": "long"},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        {"name": "attrs", "type": ["null", {"type": "map", "values": "long"}], "default": None},
        {"name": "ref", "type": ["null", ref], "default": None},
        {"name": "items", "type": ["null", {"type": "array", "items": item}], "default": None},
    ]  # fmt: skip


KEY = {"type": "record", "name": "K", "namespace": "nn", "fields": _fields("K")}
VALUE = {"type": "record", "name": "V", "namespace": "nn", "fields": _fields("V")}
NESTED = ("tags", "attrs", "ref", "items")


def _row(i: int) -> dict[str, Any]:
    s = i % 3
    return {"id": i, "tags": [None, [], ["a", "b"]][s], "attrs": [None, {}, {"x": i}][s],
            "ref": None if s == 0 else {"a": f"r{i}", "b": None if s == 1 else i},
            "items": [None, [], [{"sku": "s", "n": None}, {"sku": "t", "n": i}]][s]}


def _headers(i: int) -> list[tuple[str, bytes | None]]:
    return [("h", b"v"), ("g", None)] if i % 2 else []


def _state(v: Any) -> str:
    """What a reader must keep apart: null, empty, filled."""
    if v is None:
        return "null"
    return "filled" if (len(v) if not isinstance(v, dict) or "a" not in v else 1) else "empty"


#: per offset: the states of key.*, value.* and headers the files must hold
EXPECTED = {i: {**{f"{side}.{c}": _state(_row(i)[c]) for side in ("key", "value") for c in NESTED},
                "headers": "filled" if i % 2 else "null"} for i in range(N)}


def _write_nested(root: Path, rows: list[int], keys: list[int]) -> Path:
    """Topic ``nested`` of records ``_row(rows[o])`` keyed by ``_row(keys[o])`` at offset ``o``
    (written again from offset 0, as a log grows)."""
    import shutil

    for written in ("_schemas-0", "nested-0"):  # (a LogWriter continues a partition that is there)
        shutil.rmtree(root / written, ignore_errors=True)
    schemas_topic.write_topic(root, [schemas_topic.schema("nested-value", 1, 1, json.dumps(VALUE)),
                                     schemas_topic.schema("nested-key", 1, 2, json.dumps(KEY))])
    with kbatch.LogWriter(root, "nested", 0) as w:
        w.append(kbatch.encode([framed(1, avro(VALUE, _row(i))) for i in rows],
                               [framed(2, avro(KEY, _row(i))) for i in keys],
                               timestamps=[1_700_000_000_000 + o for o in range(len(rows))],
                               headers=[_headers(i) for i in rows]))
    return root


@pytest.fixture(scope="module")
def nested_root(tmp_path_factory) -> Path:
    return _write_nested(tmp_path_factory.mktemp("nested"), list(range(N)), list(range(N)))


def _convert(root: Path, out: Path, fmt: str, engine: str) -> None:
    args = [str(root), str(out), "--values", "avro", "--keys", "avro", "--format", fmt, "--subscribe", "nested"]
    if engine == "arrow":
        summary_of(convert_cli(*args))
        return
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "kbatch", "convert", *args, "--engine", "spark", "--master", "local[1]",
            "--json-summary"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    summary_of(proc)


def _states(rows: list[dict[str, Any]], sides: tuple[str, ...] = ("key", "value")) -> dict[int, dict[str, str]]:
    return {r["offset"]: {**{f"{side}.{c}": _state(r[side][c]) for side in sides for c in NESTED},
                          "headers": _state(r["headers"])} for r in rows}


def _duckdb(*extensions: str) -> Any:
    """A DuckDB connection with the extension files of the ``duckdb-extension-*`` packages loaded."""
    from support.duckdb_readers import duckdb_with

    return duckdb_with(*extensions)


def _duck_rows(con: Any, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _read(fmt: str, out: Path, reader: str) -> list[dict[str, Any]]:
    """The rows of topic ``nested`` as ``reader`` reads them."""
    columns = "key, value, headers, \"offset\""
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table("kafka.nested")
        if reader == "pyiceberg":
            files = [task.file.file_path for task in table.scan().plan_files()]
            return pa.concat_tables([pq.read_table(f.removeprefix("file://")) for f in files]).to_pylist()
        if reader == "polars":
            return pl.scan_iceberg(table).collect().to_dicts()
        con = _duckdb("avro", "iceberg")
        return _duck_rows(con, f"SELECT {columns} FROM iceberg_scan('{table.metadata_location}')")
    if fmt == "delta":
        if reader == "deltalake":
            from deltalake import DeltaTable

            return DeltaTable(str(out / "nested")).to_pyarrow_table().to_pylist()
        if reader == "polars":
            return pl.read_delta(str(out / "nested")).to_dicts()
        con = _duckdb("delta")
        return _duck_rows(con, f"SELECT {columns} FROM delta_scan('{out / 'nested'}')")
    files = sorted(str(p) for p in out.rglob("*.parquet") if "nested" in str(p) and "/_" not in str(p))
    if reader == "pyarrow":
        return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    if reader == "polars":
        return pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed").to_dicts()
    con = _duckdb()
    return _duck_rows(con, f"SELECT {columns} FROM read_parquet({files!r})")


READERS = {"parquet": ("pyarrow", "polars", "duckdb"), "iceberg": ("pyiceberg", "polars", "duckdb"),
           "delta": ("deltalake", "polars", "duckdb")}
CASES = [(fmt, "arrow") for fmt in READERS] + [pytest.param(fmt, "spark", marks=pytest.mark.slow)
                                                for fmt in ("iceberg", "delta")]


@pytest.mark.parametrize(("fmt", "engine"), CASES)
def test_null_empty_and_filled_nested_values_are_kept_by_every_reader(nested_root, tmp_path_factory, fmt, engine):
    if engine == "spark":
        pytest.importorskip("pyspark")
    out = tmp_path_factory.mktemp(f"{fmt}-{engine}") / "out"
    _convert(nested_root, out, fmt, engine)
    for reader in READERS[fmt]:
        if reader == "duckdb":
            try:
                rows = _read(fmt, out, reader)
            except pytest.skip.Exception:
                continue
        else:
            rows = _read(fmt, out, reader)
        assert _states(rows) == EXPECTED, f"{fmt} written by {engine}, read by {reader}"


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_upsert_keeps_the_nulls_of_the_rows_it_writes_again(tmp_path, fmt):
    """``--upsert`` replaces a key's row in a file holding others: the others, written again, keep
    their nulls (pyiceberg's own upsert wrote them back with ``[]``)."""
    root, out = tmp_path / "root", tmp_path / "out"
    _write_nested(root, list(range(N)), list(range(N)))
    args = [str(root), str(out), "--values", "avro", "--format", fmt, "--subscribe", "nested", "--upsert"]
    summary_of(convert_cli(*args))
    _write_nested(root, [*range(N), N], [*range(N), 2])  # offset N replaces the row of key 2
    second = summary_of(convert_cli(*args, "--mode", "append"))
    assert second["tables"][0]["upsert"] == {"inserted": 0, "updated": 1, "deleted": 0, "rows": N}
    expected = {o: {k: v for k, v in EXPECTED[o].items() if not k.startswith("key.")} for o in range(N) if o != 2}
    expected[N] = {**{f"value.{c}": _state(_row(N)[c]) for c in NESTED}, "headers": "filled" if N % 2 else "null"}
    for reader in READERS[fmt]:
        try:
            rows = _read(fmt, out, reader)
        except pytest.skip.Exception:
            continue
        assert _states(rows, ("value",)) == expected, f"{fmt} upsert, read by {reader}"
