"""A real S3-compatible server (moto's standalone server) on loopback, and a backup uploaded to it.

The backup (``s3://kbatch/backup/``, also kept as a local copy to compare with)::

    broker-1/kafka-logs/orders-0, orders-1, events-0     log.dirs of broker 1 (each root's
                                                         meta.properties: one cluster id)
    broker-2/disk-a/kafka-logs/orders-0                  a shorter replica of orders-0
    broker-2/disk-b/kafka-logs/clicks-0
    broker-3/kafka-logs/events-0                         a replica of events-0 that disagrees
    tiered/orders-<topic id>/0/<offset>-<segment id>.*   orders-0 as tiered storage uploads it
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import kbatch
from kbatch.log import LogWriter

pytest.importorskip("pyarrow")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")  # moto[server]

BUCKET = "kbatch"
TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"
CLUSTER_ID = "3Db5QLSqSZieL3rJBUUegA"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server(**env: str):
    """A moto server on 127.0.0.1 (``env``: moto's settings), its URL; stopped on exit."""
    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def s3_server():
    """``http://127.0.0.1:PORT`` of a moto server started for the session (stopped at teardown)."""
    with moto_server() as url:
        yield url


@pytest.fixture
def locked_s3():
    """A moto server enforcing IAM after its first 5 requests: a bucket ``locked`` holding one
    segment, and the keys of a user allowed to list it but not to read it. (url, access key, secret)."""
    import json

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="5") as url:
        kw = {"endpoint_url": url, "aws_access_key_id": "test", "aws_secret_access_key": "test",
              "region_name": "us-east-1"}
        s3 = boto3.client("s3", **kw)
        s3.create_bucket(Bucket="locked")
        s3.put_object(Bucket="locked", Key="root/t-0/00000000000000000000.log", Body=b"x" * 100)
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="reader")
        policy = {"Version": "2012-10-17",
                  "Statement": [{"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "*"}]}
        iam.put_user_policy(UserName="reader", PolicyName="list-only", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        yield url, key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture(scope="session")
def s3_options(s3_server):
    """``storage_options`` of pyarrow's S3FileSystem for the server."""
    return {"endpoint_override": s3_server, "scheme": "http", "access_key": "test", "secret_key": "test",
            "region": "us-east-1"}


@pytest.fixture(scope="session")
def s3_client(s3_server):
    return boto3.client("s3", endpoint_url=s3_server, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1")


def _batches(n: int, seed: int = 0) -> list[bytes]:
    out = []
    for i in range(n):
        values = [b"v%d-%d-%d" % (seed, i, k) * (1 + k % 3) for k in range(5)]
        out.append(kbatch.encode(values, keys=[b"k%d" % (k % 4) for k in range(5)], base_offset=5 * i,
                                 timestamps=[1_000 + 5 * i + k for k in range(5)],
                                 compression="gzip" if i % 3 == 0 else None))
    return out


def _write(root: Path, topic: str, partition: int, batches: list[bytes], epoch: int = 0) -> Path:
    with LogWriter(root, topic, partition, segment_bytes=2000, index_interval_bytes=300, topic_id=TOPIC_ID) as w:
        for b in batches:
            w.append(b, leader_epoch=epoch)
    return w.path


def _tiered(src: Path, dest: Path) -> None:
    """``src`` (a partition directory) laid out as tiered storage uploads it."""
    part = dest / f"orders-{TOPIC_ID}" / "0"
    part.mkdir(parents=True)
    for log in sorted(src.glob("*.log")):
        seg_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        stem = f"{log.stem}-{seg_id}"
        for suffix in (".log", ".index", ".timeindex"):
            f = log.with_suffix(suffix)
            if f.exists():
                (part / (stem + suffix)).write_bytes(f.read_bytes())
        (part / f"{stem}.rsm-manifest").write_text('{"version":"1","chunkIndex":{},"compression":false}')


@pytest.fixture(scope="session")
def backup_local(tmp_path_factory) -> Path:
    top = tmp_path_factory.mktemp("backup")
    orders = _batches(60)
    _write(top / "broker-1" / "kafka-logs", "orders", 0, orders, epoch=3)
    _write(top / "broker-1" / "kafka-logs", "orders", 1, _batches(7, seed=1))
    _write(top / "broker-1" / "kafka-logs", "events", 0, _batches(20, seed=2), epoch=1)
    _write(top / "broker-2" / "disk-a" / "kafka-logs", "orders", 0, orders[:45], epoch=3)
    _write(top / "broker-2" / "disk-b" / "kafka-logs", "clicks", 0, _batches(4, seed=3))
    events = _batches(20, seed=2)
    events[12] = _batches(13, seed=9)[12]  # same offsets, other records
    _write(top / "broker-3" / "kafka-logs", "events", 0, events[:16], epoch=1)
    _tiered(top / "broker-1" / "kafka-logs" / "orders-0", top / "tiered")
    for meta in ("broker-1/kafka-logs", "broker-2/disk-a/kafka-logs", "broker-2/disk-b/kafka-logs",
                 "broker-3/kafka-logs"):
        (top / meta / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={CLUSTER_ID}\n")
    return top


@pytest.fixture(scope="session")
def backup(backup_local, s3_client) -> str:
    """``s3://kbatch/backup``: the local backup uploaded."""
    s3_client.create_bucket(Bucket=BUCKET)
    for f in sorted(backup_local.rglob("*")):
        if f.is_file():
            s3_client.upload_file(str(f), BUCKET, f"backup/{f.relative_to(backup_local).as_posix()}")
    return f"s3://{BUCKET}/backup"


@pytest.fixture(scope="session")
def expected_rows(backup_local) -> list[tuple]:
    """(topic, partition, offset, key, value) of every record LogDir.read gives from the local copies
    (one replica per partition, as open_logs(recursive=True) chooses), sorted."""
    from kbatch.log import open_logs

    want = []
    for log in open_logs(backup_local, recursive=True, on_disagreement="note"):  # events-0: see test_s3
        t = log.read()
        want += [(log.topic, log.partition, o, k, v)
                 for o, k, v in zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)]
    return sorted(want)


def dataset_rows(dataset) -> list[tuple]:
    """The same tuples from a written dataset (hive-partitioned by topic)."""
    t = dataset.to_table(columns=["topic", "partition", "offset", "key", "value"])
    return sorted(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")),
                      strict=True))


@pytest.fixture(scope="session")
def read_rows():
    return dataset_rows
