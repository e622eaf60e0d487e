"""``kbatch convert --format parquet|iceberg|delta`` to ``s3://`` (issue 28), against the moto server:
appends are exactly once (rerun: nothing new; new segments: appended once), after kills too,
and the tables read back with pyarrow, pyiceberg and deltalake over S3 equal ``LogDir.read``."""

from __future__ import annotations

import shutil

import pytest
from support.s3 import fresh_prefix, keys_under, storage_args
from support.tables import convert_cli, kafka_batch, rows_of_root, rows_of_table, summary_of, write_log

from kbatch.cli._sample import write_sample
from kbatch.errors import CommitConflictError
from kbatch.tables import Ledger, OffsetRange, RemoteFolderSink

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")

BUCKET = "kbatch-tables"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


@pytest.fixture
def root(sample, tmp_path):
    """A copy of the sample root with a topic 'events' of 50 records that the tests grow."""
    r = tmp_path / "root"
    shutil.copytree(sample, r)
    return write_log(r, "events", 0, 50)


@pytest.fixture
def out(s3_client) -> str:
    """A new ``s3://kbatch-tables/<prefix>`` for each test."""
    return fresh_prefix(s3_client, BUCKET)


def parquet_rows(url: str, s3_options) -> list[tuple]:
    fs = pa.fs.S3FileSystem(**s3_options)
    return rows_of_table(pads.dataset(url[len("s3://"):], filesystem=fs, format="parquet",
                                      partitioning="hive").to_table())


# -- Parquet


def test_parquet_appends_once(root, out, s3_options, s3_client):
    first = summary_of(convert_cli(str(root), out, *storage_args(s3_options)))
    assert first["records"] == 1652 and first["tables"][0]["commit"] == "1"
    again = convert_cli(str(root), out, "--mode", "append", *storage_args(s3_options), json_summary=False)
    assert again.stdout == f"nothing new since commit 1 of {out}: no record read, nothing committed\n"
    write_log(root, "events", 0, 120)  # new segments
    s = summary_of(convert_cli(str(root), out, "--mode", "append", *storage_args(s3_options)))
    assert s["records"] == 70 and s["tables"][0]["commit"] == "2"
    assert s["tables"][0]["ranges"] == [{"topic": "events", "partition": 0, "start": 50, "end": 120}]
    assert parquet_rows(out, s3_options) == rows_of_root(root)
    objects = keys_under(s3_client, out)
    assert [k for k in objects if k.startswith("_")] == [f"_kbatch_ledger/{n:020d}.json" for n in (1, 2)]
    assert all(k.startswith("topic=") and k.endswith((".parquet", "/_common_metadata"))
               for k in objects if not k.startswith("_"))
    sink = RemoteFolderSink(out, "append", storage_options=s3_options)
    assert sink.committed().get("events", 0) == OffsetRange("events", 0, 0, 120)
    # errorifexists (the default) refuses a prefix that holds files: one line, status 2
    refused = convert_cli(str(root), out, *storage_args(s3_options))
    assert refused.returncode == 2 and "exists and holds files" in refused.stderr


def test_parquet_overwrite_replaces(root, out, s3_options):
    summary_of(convert_cli(str(root), out, *storage_args(s3_options)))
    s = summary_of(convert_cli(str(root), out, "--mode", "overwrite", "--subscribe", "events",
                               *storage_args(s3_options)))
    assert s["records"] == 50 and s["tables"][0]["commit"] == "2"
    assert parquet_rows(out, s3_options) == rows_of_root(root, ["events"])
    write_log(root, "events", 0, 60)
    s = summary_of(convert_cli(str(root), out, "--mode", "append", "--subscribe", "events", *storage_args(s3_options)))
    assert s["records"] == 10 and parquet_rows(out, s3_options) == rows_of_root(root, ["events"])


def test_parquet_append_to_a_prefix_without_ledger_says_so(root, out, s3_options, s3_client):
    summary_of(convert_cli(str(root), out, "--subscribe", "events", *storage_args(s3_options)))
    for key in keys_under(s3_client, out):
        if key.startswith("_kbatch_ledger/"):  # as an earlier kbatch wrote it
            s3_client.delete_object(Bucket=BUCKET, Key=f"{out.split('/', 3)[3]}/{key}")
    s = summary_of(convert_cli(str(root), out, "--subscribe", "events", "--mode", "append", *storage_args(s3_options)))
    assert s["records"] == 50 and any("holds files but no offsets ledger" in n for n in s["notes"])
    again = summary_of(convert_cli(str(root), out, "--subscribe", "events", "--mode", "append",
                                   *storage_args(s3_options)))
    assert again["records"] == 0 and again["notes"] == []


@pytest.mark.parametrize("stage", ["mid-write", "before-commit", "mid-commit"])
def test_parquet_killed_append_then_rerun_is_exactly_once(root, out, s3_options, s3_client, stage):
    summary_of(convert_cli(str(root), out, "--subscribe", "orders", *storage_args(s3_options)))
    write_log(root, "events", 0, 120)
    killed = convert_cli(str(root), out, "--mode", "append",
                         *storage_args(s3_options), env={"KBATCH_TEST_KILL_AT": stage})
    assert killed.returncode == -9, killed.stderr
    staged = [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]
    assert staged or stage == "mid-write"  # the dead run's files, hidden (mid-write: perhaps none complete yet)
    assert parquet_rows(out, s3_options) == rows_of_root(root, ["orders"])  # readers: the last commit
    ledgers = [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_ledger/")]
    assert len(ledgers) == (2 if stage == "mid-commit" else 1)
    s = summary_of(convert_cli(str(root), out, "--mode", "append", *storage_args(s3_options)))
    assert s["records"] == (0 if stage == "mid-commit" else 1652 - 900 + 70)
    assert parquet_rows(out, s3_options) == rows_of_root(root)
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]  # moved in or deleted


def test_parquet_killed_first_run_leaves_no_visible_file(root, out, s3_options, s3_client):
    killed = convert_cli(str(root), out, *storage_args(s3_options), env={"KBATCH_TEST_KILL_AT": "before-commit"})
    assert killed.returncode == -9
    assert all(k.startswith("_kbatch_staging/") for k in keys_under(s3_client, out))
    assert summary_of(convert_cli(str(root), out,
                                  *storage_args(s3_options)))["records"] == 1652  # no table yet: not refused
    assert parquet_rows(out, s3_options) == rows_of_root(root)
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]  # the dead run's, deleted


def test_parquet_concurrent_second_commit_fails_cleanly(out, s3_options, s3_client):
    first = RemoteFolderSink(out, "append", storage_options=s3_options)
    first.open(kafka_batch(range(0)).schema)
    first.write([kafka_batch(range(10))])
    first.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    a, b = (RemoteFolderSink(out, "append", storage_options=s3_options) for _ in range(2))  # both read commit 1
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10, 20))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    with pytest.raises(CommitConflictError, match="another run committed"):
        b.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    assert sorted(r[2] for r in parquet_rows(out, s3_options)) == list(range(20))
    assert not [k for k in keys_under(s3_client, out) if k.startswith("_kbatch_staging/")]


def test_parquet_files_of_another_writer_are_committed(out, s3_options):
    """What Spark's executors do: files put in the sink's staging folder, counted, committed."""
    import pyarrow.parquet as pq

    sink = RemoteFolderSink(out, "append", storage_options=s3_options)
    sink.open(kafka_batch(range(0)).schema)
    fs = pa.fs.S3FileSystem(**s3_options)
    folder = sink.folder[len("s3://"):]
    pq.write_table(pa.Table.from_batches([kafka_batch(range(7))]).drop_columns(["topic"]),
                   f"{folder}/topic=t/part-0.parquet", filesystem=fs)
    with fs.open_output_stream(f"{folder}/_SUCCESS") as f:
        f.write(b"")
    sink.adopt(7)
    (commit,) = sink.commit(Ledger([OffsetRange("t", 0, 0, 7)]), Ledger([OffsetRange("t", 0, 0, 7)]))
    assert commit.records == 7 and sorted(r[2] for r in parquet_rows(out, s3_options)) == list(range(7))


# -- Delta


def test_delta_appends_once_and_reads_back(root, out, s3_options):
    deltalake = pytest.importorskip("deltalake")
    from kbatch.tables._remote import delta_options

    args = ("--format", "delta", "--subscribe", "events,orders", *storage_args(s3_options))
    first = summary_of(convert_cli(str(root), out, *args))
    assert [t["table"] for t in first["tables"]] == [f"{out}/events", f"{out}/orders"]
    again = convert_cli(str(root), out, *args, "--mode", "append", json_summary=False)
    assert again.stdout.startswith(f"nothing new since version 0 of {out}/events")
    write_log(root, "events", 0, 120)
    s = summary_of(convert_cli(str(root), out, *args, "--mode", "append"))
    assert s["records"] == 70 and [t["version"] for t in s["tables"]] == ["1"]
    storage = delta_options(out, s3_options)
    for topic in ("events", "orders"):
        table = deltalake.DeltaTable(f"{out}/{topic}", storage_options=storage)
        assert rows_of_table(table.to_pyarrow_table()) == rows_of_root(root, [topic])
    assert deltalake.DeltaTable(f"{out}/events", storage_options=storage).transaction_version("kbatch:events-0") == 120
    pl = pytest.importorskip("polars")
    assert rows_of_table(pl.scan_delta(f"{out}/events", storage_options=storage).collect()) == rows_of_root(
        root, ["events"])


def test_delta_concurrent_second_commit_fails_cleanly(out, s3_options, s3_client):
    pytest.importorskip("deltalake")
    from kbatch.tables import DeltaSink

    first = DeltaSink(out, "append", topics=["t"], storage_options=s3_options)
    first.open(kafka_batch(range(0)).schema)
    first.write([kafka_batch(range(10))])
    first.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    a, b = (DeltaSink(out, "append", topics=["t"], storage_options=s3_options) for _ in range(2))
    for s in (a, b):
        s.open(kafka_batch(range(0)).schema)
        s.write([kafka_batch(range(10, 20))])
    a.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    with pytest.raises(CommitConflictError, match="another run committed"):
        b.commit(Ledger([OffsetRange("t", 0, 0, 20)]), Ledger([OffsetRange("t", 0, 10, 20)]))
    assert len([k for k in keys_under(s3_client, out) if k.endswith(".parquet")]) == 2  # the loser's file deleted


def test_storage_option_without_an_equivalent_is_one_line(root, out, s3_options, capsys):
    from kbatch.__main__ import main

    assert main(["convert", str(root), out, "--format", "delta", *storage_args(s3_options),
                 "--storage-option", "role_arn=arn:aws:iam::1:role/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--storage-option role_arn has no deltalake equivalent" in err[0]


@pytest.mark.parametrize("stage", ["mid-write", "before-commit"])
def test_delta_killed_append_then_rerun_is_exactly_once(root, out, s3_options, stage):
    deltalake = pytest.importorskip("deltalake")
    from kbatch.tables._remote import delta_options

    args = ("--format", "delta", "--subscribe", "events", *storage_args(s3_options))
    summary_of(convert_cli(str(root), out, *args))
    write_log(root, "events", 0, 120)
    assert convert_cli(str(root), out, *args, "--mode", "append", env={"KBATCH_TEST_KILL_AT": stage}).returncode == -9
    assert summary_of(convert_cli(str(root), out, *args, "--mode", "append"))["records"] == 70
    table = deltalake.DeltaTable(f"{out}/events", storage_options=delta_options(out, s3_options))
    assert rows_of_table(table.to_pyarrow_table()) == rows_of_root(root, ["events"])


# -- Iceberg


def test_iceberg_appends_once_and_reads_back(root, out, s3_options, tmp_path):
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog

    from kbatch.tables._remote import iceberg_properties

    missing = convert_cli(str(root), out, "--format", "iceberg", *storage_args(s3_options))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "--catalog-option uri=sqlite:///" in missing.stderr
    uri = f"sqlite:///{tmp_path / 'catalog' / 'catalog.db'}"
    args = ("--format", "iceberg", "--subscribe", "events,orders", "--catalog-option", f"uri={uri}",
            *storage_args(s3_options))
    first = summary_of(convert_cli(str(root), out, *args))
    assert first["records"] == 950
    again = convert_cli(str(root), out, *args, "--mode", "append", json_summary=False)
    assert again.stdout.startswith("nothing new since snapshot ")
    write_log(root, "events", 0, 120)
    s = summary_of(convert_cli(str(root), out, *args, "--mode", "append"))
    assert s["records"] == 70 and s["tables"][0]["ranges"] == [
        {"topic": "events", "partition": 0, "start": 50, "end": 120}]
    catalog = load_catalog("kbatch", type="sql", uri=uri, **iceberg_properties(out, s3_options))
    for topic in ("events", "orders"):
        table = catalog.load_table(f"kafka.{topic}")
        assert table.metadata.location.startswith(f"{out}/")
        assert rows_of_table(table.scan().to_arrow()) == rows_of_root(root, [topic])
    pl = pytest.importorskip("polars")
    from kbatch.tables._remote import delta_options

    scan = pl.scan_iceberg(catalog.load_table("kafka.events"), storage_options=delta_options(out, s3_options))
    assert rows_of_table(scan.collect()) == rows_of_root(root, ["events"])  # object_store's option names


@pytest.mark.parametrize("stage", ["mid-write", "before-commit"])
def test_iceberg_killed_append_then_rerun_is_exactly_once(root, out, s3_options, tmp_path, stage):
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog

    from kbatch.tables._remote import iceberg_properties

    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    args = ("--format", "iceberg", "--subscribe", "events", "--catalog-option", f"uri={uri}", *storage_args(s3_options))
    summary_of(convert_cli(str(root), out, *args))
    write_log(root, "events", 0, 120)
    assert convert_cli(str(root), out, *args, "--mode", "append", env={"KBATCH_TEST_KILL_AT": stage}).returncode == -9
    assert summary_of(convert_cli(str(root), out, *args, "--mode", "append"))["records"] == 70
    catalog = load_catalog("kbatch", type="sql", uri=uri, **iceberg_properties(out, s3_options))
    table = catalog.load_table("kafka.events")
    assert rows_of_table(table.scan().to_arrow()) == rows_of_root(root, ["events"])


def test_spark_engine_refuses_an_s3_table(root, out, s3_options, capsys):
    from kbatch.__main__ import main

    assert main(["convert", str(root), out, "--format", "delta", "--engine", "spark", *storage_args(s3_options)]) == 2
    assert "use --engine arrow" in capsys.readouterr().err
