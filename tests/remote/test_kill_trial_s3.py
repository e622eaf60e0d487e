"""Kill trials on an ``s3://`` OUT against the moto server (issue 39.2): conversions killed at each
sink stage and at a random moment, then a rerun: OUT holds exactly the table (no staging object,
no directory marker, no lease, no file no commit references), every record once. The arrow
engine: Spark writes tables to a local OUT only. And a lease: a dead run on another host is
judged by its lease's expiry, a live one's staging is kept."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest
from support.kills import STAGES, convert, random_kill
from support.s3 import fresh_prefix, keys_under, storage_args
from support.tables import REPO, rows_of_root, rows_of_table, write_log

from kbatch.cli._sample import write_sample

pa = pytest.importorskip("pyarrow")
pads = pytest.importorskip("pyarrow.dataset")

BUCKET = "kbatch-kills"
TOPICS = ["events", "orders"]


@pytest.fixture
def out(s3_client) -> str:
    return fresh_prefix(s3_client, BUCKET)


def not_the_table(keys: list[str], fmt: str, out: str, s3_options, catalog_uri: str) -> list[str]:
    """The objects under OUT that are not the table's: a directory marker (pyarrow's, ``""`` for
    OUT itself) counts as the table's when a table object lies under it."""
    left = _not_the_tables_objects(keys, fmt, out, s3_options, catalog_uri)
    table = [k for k in keys if k not in left and not k.endswith("/")]
    return [k for k in left if not ((k == "" or k.endswith("/")) and any(t.startswith(k) for t in table))]


def _not_the_tables_objects(keys: list[str], fmt: str, out: str, s3_options, catalog_uri: str) -> list[str]:
    if fmt == "parquet":
        return [k for k in keys if not re.fullmatch(
            r"topic=[^/]+/part-[^/]+\.parquet|topic=[^/]+/_common_metadata|_kbatch_ledger/\d{20}\.json", k)]
    if fmt == "delta":
        from deltalake import DeltaTable

        from kbatch.tables._remote import delta_options

        named = set()
        for t in TOPICS:
            table = DeltaTable(f"{out}/{t}", storage_options=delta_options(out, s3_options))
            named |= {f"{t}/{u.rsplit(f'/{t}/', 1)[-1]}" for u in table.file_uris()}
        return [k for k in keys if k not in named and not re.fullmatch(r"[^/]+/_delta_log/\d{20}\.json", k)]
    from pyiceberg.catalog import load_catalog

    from kbatch.tables._remote import iceberg_properties

    catalog = load_catalog("kbatch", type="sql", uri=catalog_uri, **iceberg_properties(out, s3_options))
    named = set()
    for t in TOPICS:
        table = catalog.load_table(f"kafka.{t}")
        named |= {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log),
                  *(s.manifest_list for s in table.metadata.snapshots),
                  *table.inspect.all_manifests().column("path").to_pylist(),
                  *table.inspect.all_files().column("file_path").to_pylist()}
    return [k for k in keys if f"{out}/{k}" not in named]


def rows(fmt: str, out: str, s3_options, catalog_uri: str) -> list[tuple]:
    if fmt == "parquet":
        fs = pa.fs.S3FileSystem(**s3_options)
        return rows_of_table(pads.dataset(out[len("s3://"):], filesystem=fs, format="parquet",
                                          partitioning="hive").to_table())
    if fmt == "delta":
        from deltalake import DeltaTable

        from kbatch.tables._remote import delta_options

        tables = [DeltaTable(f"{out}/{t}", storage_options=delta_options(out, s3_options)) for t in TOPICS]
        return sorted((r for t in tables for r in rows_of_table(t.to_pyarrow_table())), key=lambda r: r[:3])
    from pyiceberg.catalog import load_catalog

    from kbatch.tables._remote import iceberg_properties

    catalog = load_catalog("kbatch", type="sql", uri=catalog_uri, **iceberg_properties(out, s3_options))
    return sorted((r for t in TOPICS for r in rows_of_table(catalog.load_table(f"kafka.{t}").scan().to_arrow())),
                  key=lambda r: r[:3])


@pytest.mark.slow  # many runs killed or failed on purpose: once, not again in the wheel run
@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_s3_kill_trial(tmp_path, out, s3_options, s3_client, fmt):
    root = tmp_path / "root"
    root.mkdir()
    write_sample(root)
    write_log(root, "events", 0, 50)
    catalog_uri = f"sqlite:///{tmp_path / 'catalog' / 'catalog.db'}"
    args = ["--format", fmt, "--subscribe", ",".join(TOPICS), "--mode", "append", *storage_args(s3_options)]
    if fmt == "iceberg":
        args += ["--catalog-option", f"uri={catalog_uri}"]
    kills: list[str | float] = ["before-commit", random_kill(len(fmt), 3.0), *STAGES, random_kill(11, 4.0)]
    for k, kill in enumerate(kills):
        if isinstance(kill, str):
            convert(str(root), out, *args, stage=kill)
        else:
            convert(str(root), out, *args, kill_after=kill)
        if k == len(kills) // 2:
            write_log(root, "events", 0, 120)
    assert convert(str(root), out, *args) == 0
    if fmt == "iceberg":  # pyiceberg's own file names: kbatch clean's
        clean = [sys.executable, "-m", "kbatch", "clean", out, "--older-than", "0s", *storage_args(s3_options),
                 "--catalog-option", f"uri={catalog_uri}"]
        done = subprocess.run(clean, capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, check=False)
        assert done.returncode == 0, done.stderr
    assert not_the_table(keys_under(s3_client, out, markers=True), fmt, out, s3_options, catalog_uri) == []
    assert rows(fmt, out, s3_options, catalog_uri) == rows_of_root(root, TOPICS)


def test_s3_leases_judge_other_hosts_runs(tmp_path, out, s3_options, s3_client):
    """A staging folder of another host's run: kept while its lease is unexpired, removed (with
    its markers and lease) once the lease expired; a leaseless one of another host: kept."""
    from kbatch.tables._leftovers import recover

    prefix = out.split("/", 3)[3]
    live, dead, unknown = "4242-aaaaaaaa.1@elsewhere", "4343-bbbbbbbb.1@elsewhere", "4444-cccccccc.1@elsewhere"
    for run in (live, dead, unknown):
        s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/_kbatch_staging/{run}/", Body=b"")
        s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/_kbatch_staging/{run}/topic=t/part-0.parquet", Body=b"x")
    now = time.time()
    for run, expires in ((live, now + 3600), (dead, now - 1)):
        rid = run.split(".")[0]
        lease = {"run": rid, "host": "elsewhere", "pid": int(rid.split("-")[0]), "started": now - 7200,
                 "expires": expires}
        s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/_kbatch_staging/{rid}@elsewhere.lease",
                             Body=json.dumps(lease).encode())
    removed = recover(out, s3_options)
    left = keys_under(s3_client, out, markers=True)
    assert not [k for k in left if dead.split(".")[0] in k]
    assert f"_kbatch_staging/{dead}/" in removed
    assert f"_kbatch_staging/{live}/topic=t/part-0.parquet" in left
    assert f"_kbatch_staging/{unknown}/topic=t/part-0.parquet" in left
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_live_runs_lease_keeps_its_staging(out, s3_options, s3_client):
    """This process's lease (renewed, with its host and pid) keeps its staging folder from a
    recovery; released, the lease object is gone."""
    from kbatch.tables._leftovers import Store, recover
    from kbatch.tables._runs import Lease, run_name

    prefix = out.split("/", 3)[3]
    lease = Lease(Store(out, s3_options), "_kbatch_staging", seconds=3600).take()
    mine = run_name()
    s3_client.put_object(Bucket=BUCKET, Key=f"{prefix}/_kbatch_staging/{mine}/topic=t/part-0.parquet", Body=b"x")
    info = json.loads(s3_client.get_object(Bucket=BUCKET, Key=f"{prefix}/{lease.key}")["Body"].read())
    assert info["run"] == mine.split(".")[0] and info["expires"] > time.time() + 3000
    assert recover(out, s3_options) == []
    assert f"_kbatch_staging/{mine}/topic=t/part-0.parquet" in keys_under(s3_client, out, markers=True)
    lease.release()
    assert lease.key not in keys_under(s3_client, out, markers=True)
