"""A remote root's broker checkpoint files are read as a local root's: a log on S3 starts at
its log start offset (after DeleteRecords), ``earliest`` included."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogWriter, open_log, open_logs
from kbatch.plan import Options, resolve_range, select_logs

pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def deleted(tmp_path_factory, s3_client):
    """A root whose orders-0 had DeleteRecords(7) (records 0-6 still in its segments), uploaded
    to ``s3://kbatch/deleted/kafka-logs``: (local root, URL)."""
    root = tmp_path_factory.mktemp("deleted") / "kafka-logs"
    w = LogWriter(root, "orders", 0, segment_bytes=300)
    for i in range(12):
        w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
    w.delete_records(7)
    w.close()
    LogWriter(root, "orders", 1).close()
    s3_client.create_bucket(Bucket="kbatch")
    for f in sorted(root.rglob("*")):
        if f.is_file():
            s3_client.upload_file(str(f), "kbatch", f"deleted/kafka-logs/{f.relative_to(root).as_posix()}")
    return root, "s3://kbatch/deleted/kafka-logs"


@pytest.mark.parametrize("how", ["open_log", "open_logs"])
def test_remote_log_starts_at_the_checkpointed_log_start(deleted, s3_options, how):
    root, url = deleted
    local = open_log(root / "orders-0")
    if how == "open_log":
        remote = open_log(f"{url}/orders-0", storage_options=s3_options)
    else:
        remote = open_logs(url, storage_options=s3_options)[0]
    assert remote.segments[0].base_offset == 0  # the deleted records are still in the object
    assert remote.checkpoints == local.checkpoints == {"log_start_offset": 7, "recovery_point": 12,
                                                       "high_watermark": 12}
    assert remote.log_start_offset == local.log_start_offset == 7
    assert remote.read().records["offset"].tolist() == list(range(7, 12))
    assert remote.offset_for_timestamp(0) == 7


def test_earliest_on_s3_is_the_log_start(deleted, s3_options):
    root, url = deleted
    storage = {f"storage.{k}": str(v) for k, v in s3_options.items()}
    ranges = {}
    for path, extra in ((url, storage), (str(root), {})):
        opts = Options.parse({"path": path, "subscribe": "orders", "startingOffsets": "earliest", **extra})
        ranges[path] = {(d.topic, d.partition): resolve_range(d, opts) for d in select_logs(opts)}
    assert ranges[url] == ranges[str(root)]
    assert ranges[url][("orders", 0)] == (7, 12)


def test_a_root_s_checkpoints_are_read_once(deleted, s3_options, monkeypatch):
    from kbatch.log import _checkpoint

    _, url = deleted
    monkeypatch.setattr(_checkpoint, "_remote", {})
    reads = []
    real = _checkpoint.read_small
    monkeypatch.setattr(_checkpoint, "read_small", lambda loc, *a: reads.append(loc.url) or real(loc, *a))
    logs = [open_log(f"{url}/orders-{p}", storage_options=s3_options) for p in (0, 1, 0)]
    assert [d.log_start_offset for d in logs] == [7, 0, 7]
    assert sorted(reads) == sorted(f"{url}/{n}" for n in _checkpoint.CHECKPOINT_FILES)  # once per file
    reads.clear()
    assert open_logs(url, storage_options=s3_options)[0].log_start_offset == 7
    assert reads == []  # open_logs fetched them with its listing
