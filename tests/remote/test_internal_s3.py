"""kbatch.internal tables and kbatch dump of KRaft snapshots from an S3 root, as from the local copy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import kbatch
from kbatch.internal import cluster_metadata, consumer_offsets, encode_key_value, producer_snapshots
from kbatch.log import open_log, open_logs

pytest.importorskip("pyarrow")


def _md(record_type: str, **fields: Any) -> bytes:
    _, v = encode_key_value("metadata", record_type, None, fields, version=0)
    assert v is not None
    return v


@pytest.fixture(scope="module")
def internal_root(tmp_path_factory, s3_client):
    """A root with __consumer_offsets-0 and __cluster_metadata-0 (a snapshot at 10, then the log),
    uploaded to ``s3://kbatch/internal/logs``: (local root, URL)."""
    root = tmp_path_factory.mktemp("internal") / "logs"
    commit = {"metadata": "", "commit_timestamp": 7, "leader_epoch": -1}
    recs = [encode_key_value("group", "OffsetCommitKey", {"group": "g", "topic": "t", "partition": p},
                             {**commit, "offset": 42 + p}, version=3) for p in range(3)]
    with kbatch.LogWriter(root, "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([v for _, v in recs], keys=[k for k, _ in recs]))
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    part = root / "__cluster_metadata-0"
    part.mkdir(parents=True)
    (part / "00000000000000000010-0000000001.checkpoint").write_bytes(
        kbatch.encode([_md("TopicRecord", name="a", topic_id=t1)]))
    with kbatch.LogWriter(root, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode([_md("TopicRecord", name="b", topic_id=t2)], base_offset=10))
    s3_client.create_bucket(Bucket="kbatch")
    for f in sorted(root.rglob("*")):
        if f.is_file():
            s3_client.upload_file(str(f), "kbatch", f"internal/logs/{f.relative_to(root).as_posix()}")
    return root, "s3://kbatch/internal/logs"


def test_internal_tables_from_logdirs_on_s3(internal_root, s3_options):
    root, url = internal_root
    logs = open_logs(url, storage_options=s3_options)
    assert consumer_offsets(logs).equals(consumer_offsets(root))
    assert consumer_offsets(logs).num_rows == 3
    meta = open_log(f"{url}/__cluster_metadata-0", storage_options=s3_options)
    got, want = cluster_metadata(meta), cluster_metadata(root)
    assert sorted(got["topics"]["name"].to_pylist()) == sorted(want["topics"]["name"].to_pylist()) == ["a", "b"]


def test_internal_table_from_a_url_uses_the_environment(internal_root, s3_server, monkeypatch):
    _, url = internal_root
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    assert consumer_offsets(url).num_rows == 3
    assert consumer_offsets(f"{url}/__consumer_offsets-0").num_rows == 3


def test_producer_snapshots_of_a_remote_root_is_one_clear_error(internal_root, s3_options):
    _, url = internal_root
    with pytest.raises(kbatch.UnsupportedError, match="remote roots are not supported by producer_snapshots yet"):
        producer_snapshots(url)
    with pytest.raises(kbatch.UnsupportedError, match="not supported"):
        producer_snapshots(open_log(f"{url}/__consumer_offsets-0", storage_options=s3_options))


def test_dump_a_remote_kraft_snapshot(internal_root, s3_options, capsys):
    from kbatch.__main__ import main

    root, url = internal_root
    name = "__cluster_metadata-0/00000000000000000010-0000000001.checkpoint"
    opts = [f"--storage-option={k}={v}" for k, v in s3_options.items()]
    assert main(["dump", "--cluster-metadata-decoder", "--files", f"{url}/{name}", *opts]) == 0
    remote = capsys.readouterr().out
    assert main(["dump", "--cluster-metadata-decoder", "--files", str(root / name)]) == 0
    local = capsys.readouterr().out
    assert remote.replace(f"{url}/", "") == local.replace(f"{root}/", "")
    assert "Snapshot end offset: 10" in remote and "TOPIC_RECORD" in remote
