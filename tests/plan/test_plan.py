"""The kafka-log source's planner and reader without Spark: option semantics, splitting, reading.

These run without pyspark (kbatch.plan does not import it); the Spark suites next to
this file check the same paths through real SparkSessions.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import kbatch
import kbatch.arrow
import kbatch.plan as plan
from kbatch.cli._sample import write_sample
from kbatch.log import LogWriter, open_log, open_logs
from kbatch.plan._read import read_slice

pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


def _read_all(opts, logs=None) -> pa.Table:
    logs = plan.select_logs(opts) if logs is None else logs
    ranges = {(d.topic, d.partition): plan.resolve_range(d, opts) for d in logs}
    pieces = plan.plan_slices(logs, ranges, opts)
    batches = [b for p in pieces for b in read_slice(p, opts)]
    schema = kbatch.arrow.kafka_schema(include_headers=opts.include_headers, extra_columns=opts.extra_columns)
    t = pa.Table.from_batches(batches, schema=schema)
    return t.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])


def _opts(root, **kw) -> plan.Options:
    return plan.Options.parse({"path": str(root), **{k: str(v) for k, v in kw.items()}})


def _expected(root, topics=None, **read) -> list[tuple]:
    out = []
    for d in open_logs(root):
        if topics is not None and d.topic not in topics:
            continue
        if topics is None and d.topic in plan.INTERNAL_TOPICS:
            continue
        t = d.read(**read)
        out += [(d.topic, d.partition, o, v) for o, v in zip(t.records["offset"].tolist(), t.values(), strict=True)]
    return sorted(out)


def _got(table) -> list[tuple]:
    return sorted(
        zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def test_whole_sample_equals_logdir_read(sample):
    t = _read_all(_opts(sample, includeHeaders="true"))
    assert _got(t) == _expected(sample)
    # headers and timestamps too, for one partition
    d = open_log(sample / "orders-1")
    want = kbatch.arrow.to_arrow(d.read(), topic="orders", partition=1)
    mask = pa.compute.and_(
        pa.compute.equal(t.column("topic"), "orders"), pa.compute.equal(t.column("partition"), pa.scalar(1, pa.int32()))
    )
    got = t.filter(mask)
    assert got.num_rows == len(want) == 300
    assert got.column("headers").to_pylist() == want.column("headers").to_pylist()
    assert got.column("timestamp").to_pylist() == want.column("timestamp").to_pylist()


def test_subscribe_assign_pattern(sample):
    assert {d.topic for d in plan.select_logs(_opts(sample, subscribe="orders,users"))} == {"orders", "users"}
    assert [(d.topic, d.partition) for d in plan.select_logs(_opts(sample, assign='{"orders": [2, 0]}'))] == [
        ("orders", 0),
        ("orders", 2),
    ]
    assert {d.topic for d in plan.select_logs(_opts(sample, subscribePattern="o.*|pay.*"))} == {"orders", "payments"}
    assert {d.topic for d in plan.select_logs(_opts(sample, subscribePattern="rders"))} == set()  # whole names
    with pytest.raises(ValueError, match="not under"):
        plan.select_logs(_opts(sample, assign='{"orders": [7]}'))
    with pytest.raises(ValueError, match="only one of"):
        _opts(sample, subscribe="a", assign='{"a": [0]}')


def test_offsets_json_with_special_values(sample):
    opts = _opts(
        sample,
        subscribe="orders",
        startingOffsets='{"orders": {"0": 10, "1": -2, "2": 250}}',
        endingOffsets='{"orders": {"0": 20, "1": 5, "2": -1}}',
    )
    got = _got(_read_all(opts))
    want = sorted(
        [x for x in _expected(sample, ["orders"]) if x[1] == 0 and 10 <= x[2] < 20]
        + [x for x in _expected(sample, ["orders"]) if x[1] == 1 and x[2] < 5]
        + [x for x in _expected(sample, ["orders"]) if x[1] == 2 and x[2] >= 250]
    )
    assert got == want and len(got) == 10 + 5 + 50
    with pytest.raises(ValueError, match="latest"):
        _opts(sample, startingOffsets="latest")
    with pytest.raises(ValueError, match="earliest"):
        _opts(sample, endingOffsets='{"orders": {"0": -2}}')
    with pytest.raises(ValueError, match="every partition"):
        _read_all(_opts(sample, subscribe="orders", startingOffsets='{"orders": {"0": 1}}'))


def test_timestamps(sample):
    d = open_log(sample / "orders-0")
    ts = d.read().records["timestamp"]
    lo, hi = int(ts[40]), int(ts[200])
    got = _got(_read_all(_opts(sample, subscribe="orders", startingTimestamp=lo, endingTimestamp=hi)))
    want = sorted(
        (dd.topic, dd.partition, o, v)
        for dd in open_logs(sample, topics=["orders"])
        for t in [dd.read(start_timestamp=lo, end_timestamp=hi)]
        for o, v in zip(t.records["offset"].tolist(), t.values(), strict=True)
    )
    assert got == want and got
    with pytest.raises(ValueError, match="no record"):
        _read_all(_opts(sample, subscribe="orders", startingTimestamp=2**62))
    late = _opts(sample, subscribe="orders", startingTimestamp=2**62, startingOffsetsByTimestampStrategy="latest")
    assert _read_all(late).num_rows == 0


def test_read_committed_equals_logdir(sample):
    opts = _opts(sample, subscribe="payments", isolationLevel="read_committed", extraColumns="true")
    t = _read_all(opts)
    assert _got(t) == _expected(sample, ["payments"], isolation_level="read_committed")
    assert t.num_rows < _read_all(_opts(sample, subscribe="payments")).num_rows
    d = open_log(sample / "payments-0")
    _, lso = d.transactions()
    assert lso is not None and max(t.column("offset").to_pylist()) < lso


def test_splitting_keeps_every_record(sample):
    base = _got(_read_all(_opts(sample)))
    for kw in ({"minPartitions": 40}, {"maxRecordsPerPartition": 7}, {"maxBytesPerPartition": 1000}):
        opts = _opts(sample, **kw)
        logs = plan.select_logs(opts)
        pieces = plan.plan_slices(logs, {(d.topic, d.partition): plan.resolve_range(d, opts) for d in logs}, opts)
        assert len(pieces) >= 40 if "minPartitions" in kw else len(pieces) > 22
        if "maxRecordsPerPartition" in kw:
            assert max(p.end - p.start for p in pieces) <= 7
        assert _got(_read_all(opts)) == base, kw


def test_segments_split_at_batch_boundaries(tmp_path):
    with LogWriter(tmp_path, "big", 0) as w:  # one segment of 100 batches
        for i in range(100):
            w.append(kbatch.encode([b"x" * 200] * 5, base_offset=5 * i))
    opts = _opts(tmp_path, maxBytesPerPartition=10_000)
    logs = plan.select_logs(opts)
    pieces = plan.plan_slices(logs, {("big", 0): (0, 500)}, opts)
    assert len(pieces) >= 9
    assert all(p.start % 5 == 0 for p in pieces)  # every cut is a batch's base offset
    assert sorted((p.start, p.end) for p in pieces)[0][0] == 0
    assert sum(p.end - p.start for p in pieces) == 500


def test_fail_on_data_loss(tmp_path):
    with LogWriter(tmp_path, "t", 0, segment_bytes=300) as w:
        for i in range(0, 40, 4):
            w.append(kbatch.encode([b"v%d" % j for j in range(i, i + 4)], base_offset=i))
    first = sorted((tmp_path / "t-0").glob("*.log"))[0]
    for f in (tmp_path / "t-0").glob(first.stem + ".*"):
        f.unlink()  # retention deleted the oldest segment
    start = open_log(tmp_path / "t-0").log_start_offset
    assert start > 0
    spec = '{"t": {"0": 0}}'
    with pytest.raises(ValueError, match="before the log start"):
        _read_all(_opts(tmp_path, startingOffsets=spec))
    t = _read_all(_opts(tmp_path, startingOffsets=spec, failOnDataLoss="false"))
    assert t.column("offset").to_pylist() == list(range(start, 40))


def test_arrow_batches_are_capped(sample):
    opts = _opts(sample, subscribe="orders", maxRecordsPerBatch=16)
    logs = plan.select_logs(opts)
    pieces = plan.plan_slices(logs, {(d.topic, d.partition): plan.resolve_range(d, opts) for d in logs}, opts)
    sizes = [b.num_rows for p in pieces for b in read_slice(p, opts)]
    assert max(sizes) <= 16 and sum(sizes) == 900


def test_partition_dir_as_path(sample):
    t = _read_all(_opts(sample / "users-0"))
    assert _got(t) == _expected(sample, ["users"])


def test_real_logs_equal_logdir():
    from conftest import REAL_LOGS

    if not REAL_LOGS.is_dir():
        pytest.skip(f"no real logs at {REAL_LOGS}")
    for root in sorted(p for p in REAL_LOGS.iterdir() if p.is_dir()):
        topics = sorted({d.topic for d in open_logs(root)})
        t = _read_all(_opts(root, subscribe=",".join(topics), includeHeaders="true"))
        assert _got(t) == _expected(root, topics), root
        assert np.all(np.diff(t.column("offset").to_numpy()) != 0)


def test_decode_arrow_batch_fast_and_row_by_row_paths():
    from kbatch.spark._decode import _decode_rows, decode_arrow_batch

    raws = [
        kbatch.encode([b"a", b"b"], timestamps=[1, 2]) + kbatch.encode([b"c"], base_offset=2, timestamps=[3]),
        None,
        kbatch.encode([b"d" * 40] * 3, base_offset=7, compression="snappy", timestamps=[4] * 3),
        b"",
        kbatch.encode([b"e"], base_offset=10, timestamps=[5]),
    ]
    batch = pa.RecordBatch.from_pydict({"value": pa.array(raws, pa.binary()), "tag": ["x", "y", "z", "w", "v"]})
    col = batch.column("value")
    from kbatch.spark._decode import _column_buffer

    u8, starts, ends = _column_buffer(col)
    table, rows = _decode_rows(u8, starts, ends, True)
    assert rows.tolist() == [0, 0, 0, 2, 2, 2, 4]
    assert len(table.batches) == 4  # one decode over the whole buffer: the fast path
    out = decode_arrow_batch(batch, topic="t", partition=3)
    assert out.column("tag").to_pylist() == ["x", "x", "x", "z", "z", "z", "v"]
    assert out.column("offset").to_pylist() == [0, 1, 2, 7, 8, 9, 10]
    assert out.column("topic").to_pylist() == ["t"] * 7
    assert out.schema.names[:8] == kbatch.arrow.kafka_schema().names
    # a row ending in half a batch: row by row, and the partial batch is dropped (as decode does)
    cut = pa.RecordBatch.from_pydict({"value": pa.array([raws[0][:-5], raws[4]], pa.binary())})
    out = decode_arrow_batch(cut)
    assert out.column("offset").to_pylist() == [0, 1, 10]
    # garbage that is not a batch raises, with decode's error
    with pytest.raises(kbatch.CorruptRecordError):
        decode_arrow_batch(pa.RecordBatch.from_pydict({"value": pa.array([b"\x00" * 70], pa.binary())}))


# ---------------------------------------------------------------------------------------------
# Packing and splitting: a task opens only its segments and yields exactly its range


def _tasks(opts):
    logs = plan.select_logs(opts)
    ranges = {(d.topic, d.partition): plan.resolve_range(d, opts) for d in logs}
    slices = plan.plan_slices(logs, ranges, opts)
    return slices, plan.plan_tasks(slices, opts)


def _check_cover(slices, ranges):
    """Slices of each partition are disjoint and cover its range exactly, in segment order."""
    by_part = {}
    for s in slices:
        by_part.setdefault((s.topic, s.partition), []).append((s.start, s.end))
    for key, (a, b) in ranges.items():
        got = sorted(by_part.get(key, []))
        if b <= a:
            assert not got
            continue
        assert got[0][0] == a and got[-1][1] == b, key
        assert all(x[1] == y[0] for x, y in itertools.pairwise(got)), key


def _read_tasks(tasks, opts) -> pa.Table:
    schema = kbatch.arrow.kafka_schema(include_headers=opts.include_headers, extra_columns=opts.extra_columns)
    return pa.Table.from_batches([b for t in tasks for b in plan.read_task(t, opts)], schema=schema)


def _many_segments(root, partitions=2, batches=300, segment_bytes=400):
    for p in range(partitions):
        with LogWriter(root, "tiny", p, segment_bytes=segment_bytes) as w:
            for i in range(batches):
                w.append(kbatch.encode([b"p%d-%d" % (p, i)] * 2, base_offset=2 * i))
    return root


def test_many_tiny_segments_are_packed(tmp_path):
    root = _many_segments(tmp_path)
    n_segments = sum(len(list((root / f"tiny-{p}").glob("*.log"))) for p in range(2))
    assert n_segments >= 100
    opts = _opts(root)
    slices, tasks = _tasks(opts)
    assert len(slices) == 2 and len(tasks) == 1  # one slice per partition, both in one task
    assert sum(len(s.segments) for s in slices) == n_segments
    assert _got(_read_tasks(tasks, opts)) == _expected(root)
    # a target of ~10 segments' cost: several tasks, each a run of consecutive segments
    target = 10 * (plan.SEGMENT_OPEN_COST + 400)
    opts = _opts(root, maxPartitionBytes=target)
    slices, tasks = _tasks(opts)
    _check_cover(slices, {("tiny", 0): (0, 600), ("tiny", 1): (0, 600)})
    assert all(len(s.segments) <= 10 for s in slices) and len(tasks) >= n_segments // 10
    assert all(sum(s.cost for s in t) <= target for t in tasks)
    assert _got(_read_tasks(tasks, opts)) == _expected(root)


def test_task_opens_only_its_segments(tmp_path, monkeypatch):
    root = _many_segments(tmp_path, partitions=1)
    opts = _opts(root, maxPartitionBytes=5 * (plan.SEGMENT_OPEN_COST + 400))
    slices, _ = _tasks(opts)
    opened = []
    real = kbatch.log.Segment.__init__

    def spy(self, path):
        opened.append(Path(path).name)
        real(self, path)

    def no_listing(self):
        raise AssertionError(f"a task listed {self}")

    monkeypatch.setattr(kbatch.log.Segment, "__init__", spy)
    monkeypatch.setattr(Path, "iterdir", no_listing)
    piece = slices[len(slices) // 2]
    got = list(read_slice(piece, opts))
    assert sorted(opened) == sorted(piece.segments) and 0 < len(opened) <= 5
    monkeypatch.undo()
    offsets = [o for b in got for o in b.column("offset").to_pylist()]
    assert offsets == list(range(piece.start, piece.end))


def test_one_huge_segment_is_split_at_batches(tmp_path):
    with LogWriter(tmp_path, "big", 0) as w:
        for i in range(2000):
            w.append(kbatch.encode([b"x" * 300] * 4, base_offset=4 * i))
    size = (tmp_path / "big-0" / "00000000000000000000.log").stat().st_size
    opts = _opts(tmp_path, maxPartitionBytes="64k")
    slices, tasks = _tasks(opts)
    assert len(slices) >= size // (64 << 10) and len(tasks) == len(slices)
    assert all(s.segments == ("00000000000000000000.log",) for s in slices)
    assert all(s.start % 4 == 0 for s in slices)
    _check_cover(slices, {("big", 0): (0, 8000)})
    assert all(s.size <= (64 << 10) + 2000 for s in slices)
    assert _got(_read_tasks(tasks, opts)) == _expected(tmp_path)
    # a range starting and ending inside the segment
    opts = _opts(tmp_path, maxPartitionBytes="64k", startingOffsets='{"big": {"0": 1001}}',
                 endingOffsets='{"big": {"0": 6999}}')
    slices, tasks = _tasks(opts)
    _check_cover(slices, {("big", 0): (1001, 6999)})
    t = _read_tasks(tasks, opts)
    assert sorted(t.column("offset").to_pylist()) == list(range(1001, 6999))


def test_mixed_sizes_and_record_limit(tmp_path):
    with LogWriter(tmp_path, "mixed", 0, segment_bytes=64 << 10) as w:
        offset = 0
        for i in range(400):  # small batches, then large ones: small and big segments
            n = 3 if i < 300 else 40
            w.append(kbatch.encode([b"y" * 200] * n, base_offset=offset))
            offset += n
        w.roll()
        w.append(kbatch.encode([b"z" * 200] * 2000, base_offset=offset, max_batch_records=50))
    _many_segments(tmp_path, partitions=1)
    ranges = None
    for kw in ({}, {"maxPartitionBytes": "100k"}, {"minPartitions": 7}, {"maxRecordsPerPartition": 500},
               {"maxPartitionBytes": "30k", "maxRecordsPerPartition": 333}):
        opts = _opts(tmp_path, **kw)
        slices, tasks = _tasks(opts)
        logs = plan.select_logs(opts)
        ranges = {(d.topic, d.partition): plan.resolve_range(d, opts) for d in logs}
        _check_cover(slices, ranges)
        if "minPartitions" in kw:
            assert len(tasks) >= 7
        if "maxRecordsPerPartition" in kw:
            limit = int(kw["maxRecordsPerPartition"])
            assert all(sum(s.end - s.start for s in t) <= limit for t in tasks)
        assert _got(_read_tasks(tasks, opts)) == _expected(tmp_path), kw


def test_read_committed_slices_carry_the_aborted_transactions(sample):
    # small slices of payments-0 (2 KiB segments): a transaction's ABORT marker is often in a
    # later segment than its records, which the slice does not open
    for kw in ({"maxPartitionBytes": 1}, {"maxPartitionBytes": "3k"}, {"maxRecordsPerPartition": 5}):
        opts = _opts(sample, subscribe="payments", isolationLevel="read_committed", **kw)
        slices, tasks = _tasks(opts)
        assert len(slices) > 3
        assert any(s.aborted for s in slices)
        assert _got(_read_tasks(tasks, opts)) == _expected(sample, ["payments"], isolation_level="read_committed")


def test_planning_reads_each_segment_once(tmp_path, monkeypatch):
    root = _many_segments(tmp_path, partitions=1, batches=200)
    opts = _opts(root)
    scans = []
    real = kbatch.log.Segment.scan
    monkeypatch.setattr(kbatch.log.Segment, "scan", lambda self, *a: scans.append(self) or real(self, *a))
    _tasks(opts)
    assert scans == []  # small segments are packed by size alone: no header scan


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match=r"subscribePatern \(did you mean subscribePattern\?\).*valid options: path"):
        plan.Options.parse({"path": "/x", "subscribePatern": "a.*"})
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers \(a Kafka client setting"):
        plan.Options.parse({"path": "/x", "kafka.bootstrap.servers": "h:9092"})
    # case-insensitive as Spark's options, both names of the task size, sizes and durations
    o = plan.Options.parse({"PATH": "/x", "SubscribePattern": "a", "MAXPARTITIONBYTES": "1m", "maxTriggerDelay": "30s",
                            "minOffsetsPerTrigger": "5"})
    assert (o.subscribe_pattern, o.max_bytes_per_partition, o.max_trigger_delay_ms) == ("a", 1 << 20, 30_000)
    assert plan.Options.parse({"path": "/x", "maxBytesPerPartition": "4096"}).max_bytes_per_partition == 4096
    assert plan.Options.parse({"path": "/x"}).max_trigger_delay_ms == 15 * 60 * 1000
    with pytest.raises(ValueError, match="higher than maxOffsetsPerTrigger"):
        plan.Options.parse({"path": "/x", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"})
    with pytest.raises(ValueError, match="maxTriggerDelay must be a duration"):
        plan.Options.parse({"path": "/x", "maxTriggerDelay": "soon"})
    with pytest.raises(ValueError, match="maxPartitionBytes must be a size"):
        plan.Options.parse({"path": "/x", "maxPartitionBytes": "big"})


def test_segment_deleted_after_planning(tmp_path, caplog):
    root = _many_segments(tmp_path, partitions=1)
    opts = _opts(root, maxPartitionBytes=5 * (plan.SEGMENT_OPEN_COST + 400))
    slices, _ = _tasks(opts)
    piece = sorted(slices, key=lambda s: s.start)[1]
    victim = root / "tiny-0" / piece.segments[0]
    for f in victim.parent.glob(victim.stem + ".*"):
        f.unlink()  # retention ran between planning and the task
    with pytest.raises(ValueError, match=f"{piece.segments[0]} of offsets .* deleted after the query was planned"):
        list(read_slice(piece, opts))
    lenient = _opts(root, maxPartitionBytes=5 * (plan.SEGMENT_OPEN_COST + 400), failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="kbatch.spark"):
        got = [o for b in read_slice(piece, lenient) for o in b.column("offset").to_pylist()]
    assert "records are skipped" in caplog.text
    assert got and got[0] > piece.start and got[-1] == piece.end - 1


def test_a_backup_folder_is_an_error_naming_recursive_file_lookup(tmp_path):
    """Logs only deeper than the path: the source's words and option, not 0 rows."""
    from support.layouts import backup_with_deeper_roots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(kbatch.LayoutError) as err:
        plan.select_logs(plan.Options.parse({"path": str(backup)}))
    assert str(err.value) == (f"no partition directories in {backup}; found Kafka logs under {roots[0]}, {roots[1]}: "
                              f"pass one of them, or the option recursiveFileLookup=true to read every log below "
                              f"{backup}")
    logs = plan.select_logs(plan.Options.parse({"path": str(backup), "recursiveFileLookup": "true",
                                                "replicas": "all"}))
    assert len(logs) == 2


def test_spark_workers_are_given_the_folder_that_holds_kbatch() -> None:
    from kbatch.plan import env_pythonpath

    assert (Path(env_pythonpath()) / "kbatch" / "__init__.py").is_file(), env_pythonpath()
