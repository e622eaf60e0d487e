"""``kbatch convert --values avro`` to ``s3://`` (issues 27, 28), against the moto server: Parquet,
Iceberg and Delta hold the same rows and dead letters as a local run's, the dead letters committed
with the data's ledger (Parquet: ``OUT/_dead_letter``; Iceberg, Delta: ``<topic>__dead_letter``
tables beside), and a rerun commits nothing and duplicates no dead letter."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.avro_root import AvroRoot, grow, write_avro_root
from support.s3 import fresh_prefix, keys_under, storage_args
from support.tables import convert_cli, summary_of

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")
pytest.importorskip("fastavro")

BUCKET = "kbatch-values"


@pytest.fixture
def avro_root(tmp_path) -> AvroRoot:
    return write_avro_root(tmp_path / "root")


@pytest.fixture
def out(s3_client) -> str:
    return fresh_prefix(s3_client, BUCKET)


def rows(table: pa.Table, drop: tuple[str, ...] = ()) -> list[dict]:
    """The rows by (topic, partition, offset), without the columns ``drop`` (a table's own)."""
    names = [n for n in table.column_names if n not in drop]
    out = table.select(names).to_pylist()
    return sorted(out, key=lambda r: (str(r.get("topic")), r.get("partition"), r["offset"]))


def folder(url: str | Path, s3_options) -> pa.Table:
    if isinstance(url, Path):
        return pads.dataset(str(url), format="parquet", partitioning="hive").to_table()
    fs = pa.fs.S3FileSystem(**s3_options)
    return pads.dataset(url[len("s3://"):], filesystem=fs, format="parquet", partitioning="hive").to_table()


def read(kind: str, out: str | Path, s3_options, uri: str | None = None) -> tuple[pa.Table, pa.Table]:
    """(orders, its dead letters) as ``kind`` wrote them at ``out`` (local or s3)."""
    remote = isinstance(out, str)
    if kind == "parquet":
        if remote:
            return folder(f"{out}/topic=orders", s3_options), folder(f"{out}/_dead_letter", s3_options)
        return folder(Path(out) / "topic=orders", s3_options), folder(Path(out) / "_dead_letter", s3_options)
    if kind == "iceberg":
        from pyiceberg.catalog import load_catalog

        from kbatch.tables import default_catalog
        from kbatch.tables._remote import iceberg_properties

        catalog = (load_catalog("kbatch", type="sql", uri=uri, **iceberg_properties(out, s3_options)) if remote
                   else default_catalog(out))
        return (catalog.load_table("kafka.orders").scan().to_arrow(),
                catalog.load_table("kafka.orders__dead_letter").scan().to_arrow())
    from deltalake import DeltaTable

    from kbatch.tables._remote import delta_options

    storage = delta_options(out, s3_options) if remote else None
    return (DeltaTable(f"{out}/orders", storage_options=storage).to_pyarrow_table(),
            DeltaTable(f"{out}/orders__dead_letter", storage_options=storage).to_pyarrow_table())


@pytest.mark.parametrize("kind", ["parquet", "iceberg", "delta"])
def test_values_to_s3_equal_a_local_run_and_reruns_add_nothing(avro_root, out, s3_options, s3_client, tmp_path,
                                                               kind) -> None:
    pytest.importorskip({"parquet": "pyarrow", "iceberg": "pyiceberg", "delta": "deltalake"}[kind])
    r = avro_root
    extra = ["--values", "avro", "--subscribe", "orders"]
    if kind != "parquet":
        extra += ["--format", kind]
    remote = list(extra)
    uri = None
    if kind == "iceberg":
        uri = f"sqlite:///{tmp_path / 'catalog.db'}"
        remote += ["--catalog-option", f"uri={uri}"]
    remote += storage_args(s3_options)
    local = tmp_path / "local"
    summary_of(convert_cli(str(r.root), str(local), *extra))
    s = summary_of(convert_cli(str(r.root), out, *remote))
    assert s["dead_letters"] == 3
    drop = ("topic",) if kind == "parquet" else ("timestamp_day",)  # a folder's topic: its hive folder name
    good, dead = read(kind, out, s3_options, uri)
    want_good, want_dead = read(kind, local, s3_options)
    assert len(good) == len(r.good) and rows(good, drop) == rows(want_good, drop)
    assert len(dead) == 3 and rows(dead) == rows(want_dead)
    if kind == "parquet":  # the dead letters committed with the data: named by the one ledger commit
        objects = keys_under(s3_client, out)
        assert [k for k in objects if k.startswith("_kbatch")] == ["_kbatch_ledger/00000000000000000001.json"]
        assert len([k for k in objects if k.startswith("_dead_letter/topic=orders/")]) == 1
        assert s["dead_letter_path"] == f"{out}/_dead_letter"
    else:
        assert s["dead_letter_path"] == s["tables"][0]["table"] and "__dead_letter" in s["dead_letter_path"]
    # a rerun with nothing new commits nothing
    again = summary_of(convert_cli(str(r.root), out, *remote, "--mode", "append"))
    assert again["since"] and not again["tables"]
    # new records (one more dead letter): appended once, the old dead letters not again
    grow(r)
    summary_of(convert_cli(str(r.root), str(local), *extra, "--mode", "append"))
    s = summary_of(convert_cli(str(r.root), out, *remote, "--mode", "append"))
    assert s["dead_letters"] == 1
    good, dead = read(kind, out, s3_options, uri)
    want_good, want_dead = read(kind, local, s3_options)
    assert len(good) == len(r.good) and rows(good, drop) == rows(want_good, drop)
    assert len(dead) == 4 and rows(dead) == rows(want_dead)
    assert summary_of(convert_cli(str(r.root), out, *remote, "--mode", "append"))["since"]


def test_values_parquet_overwrite_replaces_the_dead_letters(avro_root, out, s3_options, s3_client) -> None:
    args = [str(avro_root.root), out, "--values", "avro", "--subscribe", "orders", *storage_args(s3_options)]
    summary_of(convert_cli(*args))
    s = summary_of(convert_cli(*args, "--mode", "overwrite"))
    assert s["dead_letters"] == 3
    assert len(folder(f"{out}/_dead_letter", s3_options)) == 3  # the first run's files gone
    assert len([k for k in keys_under(s3_client, out) if k.startswith("_dead_letter/")]) == 1


@pytest.mark.parametrize("stage", ["before-commit", "mid-commit"])
def test_values_parquet_killed_then_rerun_has_each_dead_letter_once(avro_root, out, s3_options, stage) -> None:
    r = avro_root
    args = [str(r.root), out, "--values", "avro", "--subscribe", "orders", "--mode", "append",
            *storage_args(s3_options)]
    summary_of(convert_cli(*args))
    grow(r)
    assert convert_cli(*args, env={"KBATCH_TEST_KILL_AT": stage}).returncode == -9
    summary_of(convert_cli(*args))  # rolls a commit whose files were not all moved forward, or converts again
    good = folder(f"{out}/topic=orders", s3_options)
    dead = folder(f"{out}/_dead_letter", s3_options)
    assert sorted(good.column("offset").to_pylist()) == sorted(r.good)
    assert sorted(dead.column("offset").to_pylist()) == sorted(r.bad)


def test_parquet_on_s3_keeps_each_folders_schema_in_common_metadata(avro_root, out, s3_options, tmp_path) -> None:
    """Issue 35 item 2 on S3: after a run that added columns (``--extra-columns``),
    ``topic=orders/_common_metadata`` is the local run's (the merged schema) and reads every file
    with them (null in the older files)."""
    import pyarrow.parquet as pq

    r = avro_root
    runs = {"local": [str(tmp_path / "local")], "s3": [out, *storage_args(s3_options)]}
    for where in runs.values():
        summary_of(convert_cli(str(r.root), where[0], "--subscribe", "orders", "--mode", "append", *where[1:]))
    grow(r)
    for where in runs.values():
        summary_of(convert_cli(str(r.root), where[0], "--subscribe", "orders", "--mode", "append", "--extra-columns",
                               *where[1:]))
    fs = pa.fs.S3FileSystem(**s3_options)
    remote = out[len("s3://"):] + "/topic=orders"
    schema = pq.read_schema(f"{remote}/_common_metadata", filesystem=fs)
    assert schema.equals(pq.read_schema(tmp_path / "local" / "topic=orders" / "_common_metadata"))
    assert "producerId" in schema.names and schema.field("producerId").nullable and schema.names[-1] == "topic"
    table = pads.dataset(remote, filesystem=fs, schema=schema, format="parquet").to_table()
    ids = table.column("producerId").to_pylist()
    assert len(ids) == len(r.raw) and ids.count(None) == len(r.raw) - 7
