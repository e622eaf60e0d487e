"""Files another writer (Spark's executors) splits by partition value, registered into Iceberg
partitions (issue 28): Iceberg's bucket hash as pyiceberg computes it, bucket values taken from
the folders, the other fields from the files' statistics, and a file split wrongly refused."""

from __future__ import annotations

import pytest
from support.tables import kafka_batch

from kbatch.errors import TableError
from kbatch.tables import IcebergSink, Ledger, OffsetRange, default_catalog
from kbatch.tables._bucket import iceberg_bucket

pytest.importorskip("pyiceberg")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HOUR_US = 3_600_000_000


@pytest.fixture(params=["pyiceberg-core", "mmh3"])
def kernel(request, monkeypatch):
    """pyiceberg's Rust kernel, or (as without pyiceberg-core installed) its Python hash per value."""
    if request.param == "mmh3":
        from pyiceberg.transforms import BucketTransform

        def missing(self, source):
            raise ModuleNotFoundError("pyiceberg_core (test)")

        monkeypatch.setattr(BucketTransform, "pyarrow_transform", missing)
    return request.param


def test_bucket_is_pyicebergs_murmur3_for_each_type(kernel):
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import BinaryType, LongType, StringType

    keys = [b"user-%d" % i for i in range(500)] + [b"", None, bytes(range(256))]
    cases = [
        (pa.array(keys, pa.binary()), BinaryType(), keys),
        (pa.array(keys, pa.binary_view()), BinaryType(), keys),
        (pa.array([f"k{i}" for i in range(300)]), StringType(), [f"k{i}" for i in range(300)]),
        (pa.array(range(-50, 300), pa.int32()), LongType(), list(range(-50, 300))),
        (pa.array([1_700_000_000_000_000 + 7919 * i for i in range(300)], pa.timestamp("us", "UTC")), LongType(),
         [1_700_000_000_000_000 + 7919 * i for i in range(300)]),
        (pa.array([1_700_000_000_000 + 13 * i for i in range(300)], pa.timestamp("ms")), LongType(),
         [(1_700_000_000_000 + 13 * i) * 1000 for i in range(300)]),
    ]
    for width in (1, 16, 1000):
        for values, kind, py in cases:
            one = BucketTransform(width).transform(kind)  # pyiceberg's Python hash (mmh3), per value
            got = iceberg_bucket(values, width)
            assert got.type == pa.int32()
            assert got.to_pylist() == [one(v) for v in py], (values.type, width)
    assert len(set(iceberg_bucket(pa.array(keys[:500]), 16).to_pylist())) == 16
    with pytest.raises(ValueError, match="bucket of a double column"):
        iceberg_bucket(pa.array([1.5]), 16)


def _stage(sink: IcebergSink, folder: str, batch) -> None:
    path = sink.staging() / "kbatch_topic=t" / folder / "part-0.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_batches([batch]), path)


def _hours(batch, hours: list[int]):
    return batch.set_column(batch.schema.get_field_index("timestamp"), "timestamp",
                            pa.array([h * HOUR_US for h in hours], pa.timestamp("us", "UTC")))


def test_staged_files_land_in_their_bucket_and_hour_partitions(tmp_path):
    out = tmp_path / "out"
    keys = [b"user-%d" % i for i in range(40)] + [None]
    buckets = iceberg_bucket(pa.array(keys, pa.binary()), 4).to_pylist()
    sink = IcebergSink(out, "errorifexists", topics=["t"], partition_by=["hour(timestamp)", "bucket(4, key)"])
    batch = kafka_batch(range(len(keys)))
    batch = _hours(batch.set_column(0, "key", pa.array(keys, pa.binary())), [473_000 + i % 2 for i in range(len(keys))])
    assert [n for n, _ in sink.file_partitions()] == ["kbatch_timestamp_hour", "kbatch_key_bucket"]
    with sink:
        sink.open(batch.schema)
        for hour in (473_000, 473_001):
            for b in sorted(set(buckets), key=str):
                rows = [i for i in range(len(keys)) if buckets[i] == b and i % 2 == hour - 473_000]
                folder = f"kbatch_timestamp_hour={hour}/kbatch_key_bucket=" + \
                    ("__HIVE_DEFAULT_PARTITION__" if b is None else str(b))
                if rows:
                    _stage(sink, folder, batch.take(pa.array(rows)))
        converted = Ledger([OffsetRange("t", 0, 0, len(keys))])
        [commit] = sink.commit(converted, converted)
    assert commit.records == len(keys)
    table = default_catalog(out).load_table("kafka.t")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("timestamp_hour", "hour"),
                                                                        ("key_bucket", "bucket[4]")]
    tasks = list(table.scan().plan_files())
    assert len(tasks) == 2 * len(set(buckets)) - 1  # the null key is in one hour only
    for task in tasks:
        rows = pq.read_table(task.file.file_path.removeprefix("file://")).to_pylist()
        hour, bucket = task.file.partition[0], task.file.partition[1]
        assert {r["timestamp"].timestamp() * 1e6 // HOUR_US for r in rows} == {hour}
        assert {buckets[keys.index(r["key"])] for r in rows} == {bucket}
    assert sorted(table.scan().to_arrow().column("offset").to_pylist()) == list(range(len(keys)))
    # a reader prunes by the bucket pyiceberg computes: one key, the files of its bucket only
    from pyiceberg.expressions import EqualTo

    pruned = list(table.scan(row_filter=EqualTo("key", b"user-7")).plan_files())
    assert pruned and {t.file.partition[1] for t in pruned} == {buckets[7]}
    assert table.scan(row_filter=EqualTo("key", b"user-7")).to_arrow().column("offset").to_pylist() == [7]


def test_a_file_split_wrongly_is_refused(tmp_path):
    out = tmp_path / "out"
    sink = IcebergSink(out, "errorifexists", topics=["t"], partition_by=["hour(timestamp)"])
    batch = _hours(kafka_batch(range(4)), [10, 10, 11, 11])  # two hours in one folder
    converted = Ledger([OffsetRange("t", 0, 0, 4)])
    with sink:
        sink.open(batch.schema)
        _stage(sink, "kbatch_timestamp_hour=10", batch)
        with pytest.raises(TableError, match="more than one timestamp_hour partition"):
            sink.commit(converted, converted)
        sink.abort()
    assert not out.exists() or default_catalog(out).load_table("kafka.t").current_snapshot() is None


def test_what_spark_executors_split_by_per_format():
    from kbatch.spark._staged import check_transform
    from kbatch.tables import Transform

    for fmt, name in [("iceberg", "day"), ("iceberg", "hour"), ("iceberg", "identity"), ("delta", "hour")]:
        check_transform(Transform(name, "timestamp"), fmt)
    check_transform(Transform("bucket", "key", 16), "iceberg")
    with pytest.raises(ValueError, match=r"truncate\(\.\.\.\) is written by --engine arrow only.*bucket"):
        check_transform(Transform("truncate", "key", 4), "iceberg")
    with pytest.raises(ValueError, match="--format delta use a column, day"):
        check_transform(Transform("month", "timestamp"), "delta")
