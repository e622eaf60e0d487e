"""The kafka-log source's planner and tasks (no Spark needed) over s3:// with ``storage.*`` options."""

from __future__ import annotations

import pickle

import pytest

from kbatch.plan import Options, plan_slices, plan_tasks, range_key, read_task, resolve_range, select_logs

pa = pytest.importorskip("pyarrow")


def _run(options: dict[str, str]) -> pa.Table:
    opts = Options.parse(options)
    logs = select_logs(opts)
    ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
    tasks = plan_tasks(plan_slices(logs, ranges, opts), opts)
    opts = pickle.loads(pickle.dumps(opts))  # as a task receives them
    batches = [b for t in pickle.loads(pickle.dumps(tasks)) for b in read_task(t, opts)]
    table = pa.Table.from_batches(batches)
    return table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])


def _storage(s3_options):
    return {f"storage.{k}": str(v) for k, v in s3_options.items()}


def test_tasks_read_a_bucket_as_the_local_copy(backup, backup_local, s3_options):
    common = {"maxPartitionBytes": "3000", "subscribePattern": ".*"}
    remote = _run({"path": f"{backup}/broker-1/kafka-logs", **common, **_storage(s3_options)})
    local = _run({"path": str(backup_local / "broker-1" / "kafka-logs"), **common})
    assert remote.num_rows == local.num_rows > 0 and remote.equals(local)


def test_recursive_file_lookup_reads_one_replica_per_partition(backup, backup_local, s3_options):
    with pytest.raises(ValueError, match="events-0: replicas disagree from offset 60"):
        _run({"path": backup, "recursiveFileLookup": "true", **_storage(s3_options)})
    lenient = {"recursiveFileLookup": "true", "failOnDataLoss": "false"}  # the longest copy of events-0
    remote = _run({"path": backup, **lenient, **_storage(s3_options)})
    local = _run({"path": str(backup_local), **lenient})
    assert set(remote.column("clusterId").to_pylist()) == {"3Db5QLSqSZieL3rJBUUegA"}  # from the bucket
    roots = sorted(set(remote.column("root").to_pylist()))
    assert roots == [f"{backup}/broker-1/kafka-logs", f"{backup}/broker-2/disk-b/kafka-logs"]
    assert remote.drop_columns(["root"]).equals(local.drop_columns(["root"]))
    counts = remote.group_by(["topic", "partition"]).aggregate([("offset", "count")]).to_pylist()
    assert {(c["topic"], c["partition"]): c["offset_count"] for c in counts} == {
        ("clicks", 0): 20, ("events", 0): 100, ("orders", 0): 300, ("orders", 1): 35}


def test_unknown_storage_option_is_the_filesystems_error(backup):
    opts = Options.parse({"path": backup, "storage.no_such_option": "1"})
    with pytest.raises(ValueError, match=r"storage_options for s3://.*no_such_option"):
        select_logs(opts)


def test_object_gone_after_planning(backup, backup_local, s3_client, s3_options, caplog):
    import kbatch

    part = backup_local / "broker-1" / "kafka-logs" / "events-0"
    for f in part.iterdir():
        s3_client.upload_file(str(f), "kbatch", f"scratch/lost/events-0/{f.name}")
    base = {"path": "s3://kbatch/scratch/lost/events-0", "maxPartitionBytes": "1500", **_storage(s3_options)}
    plans = {}
    for fail in ("true", "false"):
        opts = Options.parse({**base, "failOnDataLoss": fail})
        logs = select_logs(opts)
        ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
        plans[fail] = (opts, plan_tasks(plan_slices(logs, ranges, opts), opts))
    s3_client.delete_object(Bucket="kbatch", Key="scratch/lost/events-0/00000000000000000000.log")
    opts, tasks = plans["true"]
    with pytest.raises(kbatch.StorageError, match=r"00000000000000000000\.log"):
        [b for t in tasks for b in read_task(t, opts)]
    opts, tasks = plans["false"]
    rows = sum(b.num_rows for t in tasks for b in read_task(t, opts))
    assert 0 < rows == 100 - rows_in_first_segment(part)  # the other segment's, and the loss said
    assert "not read (failOnDataLoss=false)" in caplog.text and "00000000000000000000.log" in caplog.text


def rows_in_first_segment(part) -> int:
    from kbatch.log import LogDir

    seg = LogDir(part).segments[0]
    b = seg.scan()
    return int(b["record_count"].sum())


def test_replicas_all_reads_every_copy_with_its_root(backup, backup_local, s3_options):
    from kbatch.log import open_logs

    table = _run({"path": backup, "recursiveFileLookup": "true", "replicas": "all", **_storage(s3_options)})
    got: dict[tuple, list] = {}
    for r in table.select(["root", "topic", "partition", "offset", "value"]).to_pylist():
        got.setdefault((r["root"][len(backup):], r["topic"], r["partition"]), []).append((r["offset"], r["value"]))
    want = {}
    for d in open_logs(backup_local, recursive=True, replicas="all", verify_replicas=False):
        t = d.read()
        want[(d.root[len(str(backup_local)):], d.topic, d.partition)] = list(
            zip(t.records["offset"].tolist(), t.values(), strict=True))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}
    assert sum(k[1:] == ("orders", 0) for k in got) == 3  # broker-1, broker-2/disk-a, tiered


def test_object_cut_after_planning(backup, backup_local, s3_client, s3_options, caplog):
    """A task of two segments; the second is cut after planning. The task must not take the cut
    object for the whole segment (its end would look like a crash-truncated tail and the records
    past it would be lost silently): StorageError naming it, or with failOnDataLoss=false the
    slice is skipped and said so."""
    import kbatch
    from kbatch.log import LogDir

    part = backup_local / "broker-1" / "kafka-logs" / "events-0"
    for f in part.iterdir():
        s3_client.upload_file(str(f), "kbatch", f"scratch/cut2/events-0/{f.name}")
    second = LogDir(part).segments[1]
    base = {"path": "s3://kbatch/scratch/cut2/events-0", **_storage(s3_options)}
    plans = {}
    for fail in ("true", "false"):
        opts = Options.parse({**base, "failOnDataLoss": fail})
        logs = select_logs(opts)
        ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
        plans[fail] = (opts, plan_tasks(plan_slices(logs, ranges, opts), opts))
        assert len(plans[fail][1]) == 1 and len(plans[fail][1][0][0].segments) == 2  # one task, both segments
    key = f"scratch/cut2/events-0/{second.path.name}"
    s3_client.put_object(Bucket="kbatch", Key=key, Body=second.path.read_bytes()[: second.size // 2])
    opts, tasks = plans["true"]
    with pytest.raises(kbatch.StorageError, match=f"{second.path.name}.*when the query was planned"):
        [b for t in tasks for b in read_task(t, opts)]
    opts, tasks = plans["false"]
    assert sum(b.num_rows for t in tasks for b in read_task(t, opts)) == 0
    assert "not read (failOnDataLoss=false)" in caplog.text and second.path.name in caplog.text
