"""kbatch convert --engine arrow from s3:// (and to s3://) equals LogDir.read of the local copies."""

from __future__ import annotations

import pytest
from support.s3 import storage_args

from kbatch.__main__ import main

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")


#: events-0's replicas in the backup disagree: the longest copy is read, and that is reported
RECURSIVE = ("--engine", "arrow", "--recursive", "--no-fail-on-data-loss", "-q")


def test_convert_arrow_from_s3_to_a_local_folder(backup, expected_rows, read_rows, s3_options, tmp_path):
    out = tmp_path / "out"
    rc = main(["convert", backup, str(out), *RECURSIVE, *storage_args(s3_options)])
    assert rc == 0
    assert read_rows(pads.dataset(out, format="parquet", partitioning="hive")) == expected_rows


def test_convert_arrow_from_s3_to_s3(backup, expected_rows, read_rows, s3_options, s3_client):
    out = "s3://kbatch/converted"
    rc = main(["convert", backup, out, *RECURSIVE, *storage_args(s3_options)])
    assert rc == 0
    fs = pa.fs.S3FileSystem(**s3_options)
    listed = s3_client.list_objects_v2(Bucket="kbatch", Prefix="converted/")["Contents"]
    keys = [o["Key"] for o in listed if not o["Key"].endswith("/")]  # (pyarrow's directory markers)
    data = [k for k in keys if not k.startswith("converted/_kbatch_ledger/")]  # the offsets ledger: hidden
    # no staging left: each topic folder holds its files and their merged schema (_common_metadata)
    assert data and all(k.startswith("converted/topic=") and k.endswith((".parquet", "/_common_metadata"))
                        for k in data)
    assert {k.rsplit("/", 1)[0] for k in data if k.endswith("/_common_metadata")} == \
        {k.rsplit("/", 1)[0] for k in data}
    assert "converted/_kbatch_ledger/00000000000000000001.json" in keys
    written = pads.dataset("kbatch/converted", filesystem=fs, format="parquet", partitioning="hive")
    assert read_rows(written) == expected_rows
    # errorifexists (the default) refuses, one line, status 2
    assert main(["convert", backup, out, *RECURSIVE, *storage_args(s3_options)]) == 2


def test_convert_bad_storage_option_is_one_line(backup, s3_options, tmp_path, capsys):
    rc = main(["convert", backup, str(tmp_path / "o"), "--engine", "arrow", "--storage-option", "nonsense",
               *storage_args(s3_options)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "storage" in err[0]


def test_convert_replicas_all_has_a_root_column(backup, backup_local, s3_options, tmp_path):
    out = tmp_path / "all"
    assert main(["convert", backup, str(out), "--engine", "arrow", "--recursive", "--replicas", "all", "-q",
                 *storage_args(s3_options)]) == 0
    t = pads.dataset(out, format="parquet", partitioning="hive").to_table()
    counts = {(r["root"], r["topic"], r["partition"]): r["offset_count"]
              for r in t.group_by(["root", "topic", "partition"]).aggregate([("offset", "count")]).to_pylist()}
    assert counts[(f"{backup}/broker-1/kafka-logs", "orders", 0)] == 300
    assert counts[(f"{backup}/broker-2/disk-a/kafka-logs", "orders", 0)] == 225
    assert counts[(f"{backup}/tiered", "orders", 0)] == 300
