"""The kafka-log data source through a real SparkSession: schema, values, options, streaming,
decode_batches. Option semantics are covered in depth without Spark in test_plan.py; these
tests check that each family reaches Spark intact."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a JVM and Python workers: tens of seconds

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import kbatch  # noqa: E402
import kbatch.arrow  # noqa: E402
from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.log import LogWriter, open_log, open_logs  # noqa: E402

INTERNAL = {"__consumer_offsets", "__transaction_state"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


def _rows(df) -> list[tuple]:
    return sorted((r.topic, r.partition, r.offset, r.key, r.value) for r in df.collect())


def _expected(root, topics=None, **read) -> list[tuple]:
    out = []
    for d in open_logs(root):
        if (topics is None and d.topic in INTERNAL) or (topics is not None and d.topic not in topics):
            continue
        t = d.read(**read)
        out += [
            (d.topic, d.partition, o, k, v)
            for o, k, v in zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)
        ]
    return sorted(out)


def test_schema_is_the_kafka_sources(spark, sample):
    df = spark.read.format("kafka-log").load(str(sample))
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    with_headers = spark.read.format("kafka-log").option("includeHeaders", "true").load(str(sample))
    assert with_headers.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")
    extras = spark.read.format("kafka-log").option("extraColumns", "true").load(str(sample))
    assert extras.columns[-5:] == ["leaderEpoch", "producerId", "producerEpoch", "sequence", "isTransactional"]
    assert all(f.nullable for f in with_headers.schema.fields)


def test_sample_agrees_with_logdir_record_for_record(spark, sample):
    whole = spark.read.format("kafka-log").option("includeHeaders", "true").load(str(sample))
    assert whole.rdd.getNumPartitions() == 1  # 92 KiB of log: one task (maxPartitionBytes 128 MiB)
    assert sorted(r.offset for r in whole.select("offset").collect()) == sorted(e[2] for e in _expected(sample))
    df = spark.read.format("kafka-log").option("includeHeaders", "true").option("minPartitions", 6).load(str(sample))
    assert df.rdd.getNumPartitions() >= 6  # slices of several partitions, several tasks
    rows = df.collect()
    got = sorted((r.topic, r.partition, r.offset, r.key, r.value) for r in rows)
    assert got == _expected(sample)
    # timestamps (UTC, microseconds), types and headers of one partition, as LogDir reads them
    d = open_log(sample / "orders-0")
    want = kbatch.arrow.to_arrow(d.read(), topic="orders", partition=0).to_pylist()
    mine = sorted((r for r in rows if r.topic == "orders" and r.partition == 0), key=lambda r: r.offset)
    for r, w in zip(mine, want, strict=True):
        assert r.timestamp.replace(tzinfo=dt.timezone.utc) == w["timestamp"]
        assert r.timestampType == w["timestampType"]
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == (
            None if w["headers"] is None else [(h["key"], h["value"]) for h in w["headers"]]
        )


def test_real_logs(spark):
    from conftest import REAL_LOGS

    if not REAL_LOGS.is_dir():
        pytest.skip(f"no real logs at {REAL_LOGS}")
    for root in sorted(p for p in REAL_LOGS.iterdir() if p.is_dir()):
        df = spark.read.format("kafka-log").load(str(root))
        assert _rows(df) == _expected(root), root
    # internal topics only when named
    root = REAL_LOGS / "kafkafun"
    df = spark.read.format("kafka-log").option("subscribe", "__consumer_offsets").load(str(root))
    assert _rows(df) == _expected(root, ["__consumer_offsets"])


def test_options_reach_the_reader(spark, sample):
    def read():
        return spark.read.format("kafka-log")

    df = (
        read()
        .option("subscribePattern", "orders")
        .option("startingOffsets", '{"orders": {"0": 10, "1": -2, "2": 295}}')
        .option("endingOffsets", '{"orders": {"0": 20, "1": 3, "2": -1}}')
        .option("minPartitions", "5")
        .load(str(sample))
    )
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == (
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(3)] + [(2, o) for o in range(295, 300)]
    )
    committed = (
        read().option("assign", '{"payments": [0]}').option("isolationLevel", "read_committed").load(str(sample))
    )
    assert _rows(committed) == _expected(sample, ["payments"], isolation_level="read_committed")
    ts = open_log(sample / "users-0").read().records["timestamp"]
    by_time = read().option("subscribe", "users").option("startingTimestamp", str(int(ts[20]))).load(str(sample))
    assert _rows(by_time) == _expected(sample, ["users"], start_timestamp=int(ts[20]))
    with pytest.raises(Exception, match="latest"):
        read().option("startingOffsets", "latest").load(str(sample)).collect()


def test_spark_is_the_expected_version(spark):
    import pyspark

    # KBATCH_EXPECT_SPARK: set by test_oldest_spark.py for its run on the oldest supported Spark
    expected = os.environ.get("KBATCH_EXPECT_SPARK") or pyspark.__version__
    assert spark.version == expected == pyspark.__version__
    assert spark.version.split(".")[0] == "4"


def test_auto_registration_module():
    import pyspark_kbatch
    from kbatch.spark import KafkaLogDataSource

    assert pyspark_kbatch.DefaultSource is KafkaLogDataSource
    assert pyspark_kbatch.DefaultSource.name() == "kafka-log"


def test_decode_batches(spark):
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    import kbatch.spark

    raws = [
        kbatch.encode([b"a", b"b"], keys=[b"k", None], timestamps=[1000, 2000], headers=[[("h", b"1")], []])
        + kbatch.encode([b"c"], base_offset=2, timestamps=[3000]),
        None,
        kbatch.encode([b"d" * 50] * 3, base_offset=7, compression="gzip", timestamps=[4000] * 3),
        kbatch.encode([b"e"], base_offset=10, timestamps=[5000])[:-3],  # a truncated fetch tail
    ]
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("value", BinaryType()),
        ]
    )
    df = spark.createDataFrame([(i, "captured", i % 2, r) for i, r in enumerate(raws)], schema)
    out = kbatch.spark.decode_batches(df)
    assert out.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "id",
    ]
    rows = sorted(out.collect(), key=lambda r: r.offset)
    assert [(r.id, r.offset, r.key, r.value) for r in rows] == [
        (0, 0, b"k", b"a"),
        (0, 1, None, b"b"),
        (0, 2, None, b"c"),
        (2, 7, None, b"d" * 50),
        (2, 8, None, b"d" * 50),
        (2, 9, None, b"d" * 50),
    ]
    assert {r.topic for r in rows} == {"captured"} and [r.partition for r in rows] == [0, 0, 0, 0, 0, 0]
    assert [None if r.headers is None else [(h.key, h.value) for h in r.headers] for r in rows[:2]] == [
        [("h", b"1")],
        None,
    ]
    assert rows[0].timestamp.replace(tzinfo=dt.timezone.utc) == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError, match="clash"):
        kbatch.spark.decode_batches(df.withColumnRenamed("id", "offset"))


def test_streaming_follows_a_live_log(spark, tmp_path):
    root = tmp_path / "logs"
    w = LogWriter(root, "live", 0, segment_bytes=400)
    offset = 0

    def append(n: int) -> None:
        nonlocal offset
        w.append(kbatch.encode([b"m%d" % i for i in range(offset, offset + n)], base_offset=offset))
        w.flush()
        offset += n

    append(5)
    append(5)
    out, chk = tmp_path / "out", tmp_path / "chk"

    def run_once() -> list[int]:
        q = (
            spark.readStream.format("kafka-log")
            .option("startingOffsets", "earliest")
            .load(str(root))
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(chk))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())

    assert run_once() == list(range(10))
    for _ in range(6):  # more batches, rolling into new segments
        append(4)
    w.close()
    assert len(list((root / "live-0").glob("*.log"))) > 1
    time.sleep(0.1)
    assert run_once() == list(range(34))  # only the new records were added


def test_stream_trigger_limits(tmp_path):
    """minOffsetsPerTrigger / maxTriggerDelay / maxOffsetsPerTrigger as Spark's Kafka source
    (no session needed: the reader's offsets logic alone)."""
    datasource = pytest.importorskip(
        "pyspark.sql.streaming.datasource", reason="read limits of Python stream sources: Spark 4.2+"
    )
    ReadAllAvailable, ReadMaxRows, ReadMinRows = (
        datasource.ReadAllAvailable, datasource.ReadMaxRows, datasource.ReadMinRows
    )

    from kbatch.plan import Options
    from kbatch.spark._schema import kafka_struct
    from kbatch.spark._source import KafkaLogStreamReader

    with LogWriter(tmp_path, "t", 0) as w:
        w.append(kbatch.encode([b"a"] * 90))
    with LogWriter(tmp_path, "t", 1) as w:
        w.append(kbatch.encode([b"b"]))

    def reader(**kw):
        opts = Options.parse({"path": str(tmp_path), **{k: str(v) for k, v in kw.items()}}, streaming=True)
        return KafkaLogStreamReader(opts, kafka_struct())

    latest = {"t": {"0": 90, "1": 1}}
    r = reader(minOffsetsPerTrigger=50, maxTriggerDelay="1h")
    assert r.getDefaultReadLimit() == ReadMinRows(50)
    limit = r.getDefaultReadLimit()
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, limit) == latest  # the first trigger is never delayed
    few = {"t": {"0": 70, "1": 0}}  # 21 waiting < 50: no batch (the start comes back)
    assert r.latestOffset(few, limit) == few
    assert r.latestOffset({"t": {"0": 30, "1": 1}}, limit) == latest  # 60 waiting
    assert r.latestOffset(few, ReadAllAvailable()) == latest
    # the delay passed: a batch however few are waiting
    r = reader(minOffsetsPerTrigger=50, maxTriggerDelay="0")
    r.latestOffset(few, r.getDefaultReadLimit())
    assert r.latestOffset(few, r.getDefaultReadLimit()) == latest
    # maxOffsetsPerTrigger: prorated by backlog, a small backlog rounded up (never starved)
    r = reader(maxOffsetsPerTrigger=10, minOffsetsPerTrigger=5)
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, r.getDefaultReadLimit()) == {"t": {"0": 9, "1": 1}}
    # a partition new since the start begins at its log start offset
    assert r.latestOffset({"t": {"0": 85}}, ReadMaxRows(4)) == {"t": {"0": 88, "1": 1}}
    with pytest.raises(ValueError, match="unknown option subscribePatern"):
        reader(subscribePatern="t")


def test_unknown_option_fails_the_query(spark, sample):
    with pytest.raises(Exception, match=r"(?i)unknown option subscribePatern \(did you mean subscribePattern"):
        spark.read.format("kafka-log").option("subscribePatern", "orders").load(str(sample)).collect()


def test_many_segments_few_tasks(spark, tmp_path):
    """A partition of hundreds of segments is read by one task per core, not one per segment."""
    with LogWriter(tmp_path, "tiny", 0, segment_bytes=100) as w:  # a batch per segment
        for i in range(400):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i))
    assert len(list((tmp_path / "tiny-0").glob("*.log"))) >= 300
    df = spark.read.format("kafka-log").load(str(tmp_path))
    assert df.rdd.getNumPartitions() == 1
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(400))
    # tasks of ~2 MiB, a segment counting as its bytes plus SEGMENT_OPEN_COST (32 KiB)
    df = spark.read.format("kafka-log").option("maxPartitionBytes", "2m").load(str(tmp_path))
    assert 6 <= df.rdd.getNumPartitions() <= 8
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(400))


def test_replicas_all_has_a_root_column(spark, tmp_path):
    from support.roots import values, write_root

    for root, n in (("a", 6), ("b", 10)):  # replicas of one log: same cluster, same topic id
        write_root(tmp_path / "one" / root / "logs", values(n))
    df = (spark.read.format("kafka-log").option("recursiveFileLookup", "true").option("replicas", "all")
          .load(str(tmp_path / "one")))
    assert df.columns[-2:] == ["root", "clusterId"]
    got = {r["root"]: r["count"] for r in df.groupBy("root").count().collect()}
    assert got == {d.root: len(d.read()) for d in open_logs(tmp_path / "one", recursive=True, replicas="all")}
    assert got == {str(tmp_path / "one" / "a" / "logs"): 6, str(tmp_path / "one" / "b" / "logs"): 10}
    best = spark.read.format("kafka-log").option("recursiveFileLookup", "true").load(str(tmp_path / "one"))
    assert best.columns[-2:] == ["root", "clusterId"] and best.count() == 10
    # two clusters' t-0: two logs, both read, told apart by root and cluster id
    write_root(tmp_path / "two" / "a" / "logs", values(5, b"a"), cluster_id="cluster-A", topic_id="A" * 22)
    write_root(tmp_path / "two" / "b" / "logs", values(8, b"b"), cluster_id="cluster-B", topic_id="B" * 22)
    both = spark.read.format("kafka-log").option("recursiveFileLookup", "true").load(str(tmp_path / "two"))
    got = {(r["root"], r["clusterId"]): r["count"] for r in both.groupBy("root", "clusterId").count().collect()}
    assert got == {(str(tmp_path / "two" / "a" / "logs"), "cluster-A"): 5,
                   (str(tmp_path / "two" / "b" / "logs"), "cluster-B"): 8}


def test_a_backup_folder_fails_the_query_naming_recursive_file_lookup(spark, tmp_path):
    """Not 0 rows: the logs found below, and the option that reads them."""
    from support.layouts import backup_with_deeper_roots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(Exception, match=f"no partition directories in {backup}; found Kafka logs under {roots[0]}"):
        spark.read.format("kafka-log").load(str(backup)).collect()
    df = spark.read.format("kafka-log").options(recursiveFileLookup="true", replicas="all").load(str(backup))
    assert df.count() == 6
