"""The kafka-log source's views: kbatch.internal's tables as DataFrames, in a real local Spark."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import kbatch  # noqa: E402
from kbatch.internal import cluster_metadata, consumer_offsets, encode_key_value  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("views")
    for part in range(3):
        recs = [encode_key_value("group", "OffsetCommitKey", {"group": f"g{part}", "topic": "t", "partition": p},
                                 {"offset": 10 * part + p, "leader_epoch": 1, "metadata": "m",
                                  "commit_timestamp": 5}, version=3) for p in range(4)]
        recs.append(encode_key_value("group", "OffsetCommitKey", {"group": f"g{part}", "topic": "t", "partition": 0},
                                     None))
        with kbatch.LogWriter(root, "__consumer_offsets", part) as w:
            w.append(kbatch.encode([v for _, v in recs], keys=[k for k, _ in recs]))
    _, topic = encode_key_value("metadata", "TopicRecord", None, {"name": "orders", "topic_id": uuid.UUID(int=3)})
    with kbatch.LogWriter(root, "__cluster_metadata", 0) as w:
        w.append(kbatch.encode([topic]))
    return root


def test_consumer_offsets_view_equals_the_table(spark, root: Path) -> None:
    df = spark.read.format("kafka-log").option("view", "consumer_offsets").load(str(root))
    assert df.rdd.getNumPartitions() == 3
    got = sorted((r["group"], r["topic"], r["partition"], r["offset"]) for r in df.collect())
    want = sorted((r["group"], r["topic"], r["partition"], r["offset"]) for r in consumer_offsets(root).to_pylist())
    assert got == want and len(got) == 9
    assert dict(df.dtypes)["offset"] == "bigint" and dict(df.dtypes)["commit_timestamp"] == "timestamp"
    hist = spark.read.format("kafka-log").option("view", "consumer_offsets").option("history", "true").load(str(root))
    assert hist.filter("tombstone").count() == 3


def test_cluster_metadata_view(spark, root: Path) -> None:
    df = spark.read.format("kafka-log").option("view", "cluster_metadata.topics").load(str(root))
    assert [tuple(r) for r in df.collect()] == [tuple(cluster_metadata(root)["topics"].to_pylist()[0].values())]


def test_unknown_view_is_a_clear_error(spark, root: Path) -> None:
    with pytest.raises(Exception, match="unknown kafka-log view 'nope'"):
        spark.read.format("kafka-log").option("view", "nope").load(str(root)).collect()
