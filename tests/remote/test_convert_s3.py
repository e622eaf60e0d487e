"""kbatch convert --engine arrow from s3:// (and to s3://) equals LogDir.read of the local copies."""

from __future__ import annotations

import pytest

from kbatch.__main__ import main
from kbatch.log import open_logs

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")


def expected(backup_local) -> list[tuple]:
    want = []
    for log in open_logs(backup_local, recursive=True):
        t = log.read()
        want += [(log.topic, log.partition, o, k, v)
                 for o, k, v in zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)]
    return sorted(want)


def rows(dataset) -> list[tuple]:
    t = dataset.to_table(columns=["topic", "partition", "offset", "key", "value"])
    return sorted(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")),
                      strict=True))


def opts(s3_options) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in s3_options.items()]


def test_convert_arrow_from_s3_to_a_local_folder(backup, backup_local, s3_options, tmp_path):
    out = tmp_path / "out"
    rc = main(["convert", backup, str(out), "--engine", "arrow", "--recursive", "-q", *opts(s3_options)])
    assert rc == 0
    assert rows(pads.dataset(out, format="parquet", partitioning="hive")) == expected(backup_local)


def test_convert_arrow_from_s3_to_s3(backup, backup_local, s3_options, s3_client):
    out = "s3://kbatch/converted"
    rc = main(["convert", backup, out, "--engine", "arrow", "--recursive", "-q", *opts(s3_options)])
    assert rc == 0
    fs = pa.fs.S3FileSystem(**s3_options)
    listed = s3_client.list_objects_v2(Bucket="kbatch", Prefix="converted/")["Contents"]
    keys = [o["Key"] for o in listed if not o["Key"].endswith("/")]  # (pyarrow's directory markers)
    assert keys and all(k.startswith("converted/topic=") and k.endswith(".parquet") for k in keys)  # no staging left
    assert rows(pads.dataset("kbatch/converted", filesystem=fs, format="parquet", partitioning="hive")) == \
        expected(backup_local)
    # errorifexists (the default) refuses, one line, status 2
    assert main(["convert", backup, out, "--engine", "arrow", "--recursive", "-q", *opts(s3_options)]) == 2


def test_convert_bad_storage_option_is_one_line(backup, s3_options, tmp_path, capsys):
    rc = main(["convert", backup, str(tmp_path / "o"), "--engine", "arrow", "--storage-option", "nonsense",
               *opts(s3_options)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "storage" in err[0]
