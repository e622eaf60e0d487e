"""Partition directories named alike under a backup folder: copies of one log (which is read,
and what is said) or different logs (every one read, told apart by root and cluster id)."""

from __future__ import annotations

import json

import pytest
from support.roots import TOPIC_ID, values, write_root

from kbatch.errors import ReplicasDisagreeError
from kbatch.log import open_logs


def _copy(root, epoch: int, n: int, seed: bytes = b"v") -> None:
    """A replica of ``t-0`` of one cluster (same cluster id, same topic id)."""
    write_root(root, values(n, seed), epoch=epoch)


def _disagreeing(tmp_path) -> None:
    """Two replicas of one log; from offset 5 on, the shorter holds other records."""
    _copy(tmp_path / "a" / "logs", epoch=1, n=10)
    write_root(tmp_path / "b" / "logs", [b"v%d" % i if i < 5 else b"other%d" % i for i in range(8)], epoch=1)


def test_tie_on_log_end_goes_to_the_newest_leader_epoch(tmp_path):
    _copy(tmp_path / "a" / "logs", epoch=4, n=10)
    _copy(tmp_path / "b" / "logs", epoch=7, n=10)
    notes: list[str] = []
    (log,) = open_logs(tmp_path, recursive=True, notes=notes)
    assert log.root == str(tmp_path / "b" / "logs")
    assert any("2 replicas; read" in n and "leader epoch 7" in n for n in notes)
    assert not any("replicas disagree" in n for n in notes)


def test_longest_copy_wins_and_all_keeps_every_copy(tmp_path):
    _copy(tmp_path / "a" / "logs", epoch=9, n=6)
    _copy(tmp_path / "b" / "logs", epoch=1, n=10)
    (log,) = open_logs(tmp_path, recursive=True)
    assert log.root == str(tmp_path / "b" / "logs") and log.next_offset == 10
    both = open_logs(tmp_path, recursive=True, replicas="all")
    assert sorted(d.root for d in both) == [str(tmp_path / "a" / "logs"), str(tmp_path / "b" / "logs")]
    with pytest.raises(ValueError, match="replicas"):
        open_logs(tmp_path, recursive=True, replicas="some")


def test_disagreeing_replicas_raise_naming_partition_offset_and_both_copies(tmp_path, caplog):
    _disagreeing(tmp_path)
    a, b = f"{tmp_path}/a/logs/t-0", f"{tmp_path}/b/logs/t-0"
    with pytest.raises(ReplicasDisagreeError, match=r"^t-0: replicas disagree from offset 5: ") as e:
        open_logs(tmp_path, recursive=True)
    assert (e.value.topic, e.value.partition, e.value.offset, e.value.urls) == ("t", 0, 5, (a, b))
    assert a in str(e.value) and b in str(e.value) and "cluster cluster-one" in str(e.value)
    assert isinstance(e.value, ValueError)
    # "note": the longest copy, the disagreement said once (a warning, as no notes are collected)
    (log,) = open_logs(tmp_path, recursive=True, on_disagreement="note")
    assert log.url == a
    assert caplog.text.count("replicas disagree from offset 5") == 1
    caplog.clear()
    notes: list[str] = []
    open_logs(tmp_path, recursive=True, notes=notes, on_disagreement="note")
    want = (f"t-0: replicas disagree from offset 5: {a} and {b} hold different batches there (base offset or CRC); "
            f"read {a} (the longest)")
    assert [n for n in notes if "replicas disagree" in n] == [want]
    assert "disagree" not in caplog.text  # in notes, not logged as well
    # every copy read: nothing lost, a note
    notes.clear()
    assert len(open_logs(tmp_path, recursive=True, notes=notes, replicas="all")) == 2
    assert sum("replicas disagree from offset 5" in n for n in notes) == 1
    notes.clear()
    open_logs(tmp_path, recursive=True, notes=notes, verify_replicas=False)
    assert not any("replicas disagree" in n for n in notes)
    with pytest.raises(ValueError, match="on_disagreement"):
        open_logs(tmp_path, recursive=True, on_disagreement="ignore")


def test_partition_named_folders_are_searched_only_when_they_hold_no_partition_files(tmp_path):
    _copy(tmp_path / "broker-1" / "kafka-logs", epoch=0, n=3)  # "broker-1" is named like a partition
    (log,) = open_logs(tmp_path, recursive=True)
    assert (log.topic, log.partition) == ("t", 0)
    (tmp_path / "x" / "orders-0-delete").mkdir(parents=True)
    notes: list[str] = []
    open_logs(tmp_path, recursive=True, notes=notes)
    assert any("orders-0-delete" in n and "being deleted" in n for n in notes)


def _rows_by_root(table) -> dict[str, list[tuple[int, bytes]]]:
    out: dict[str, list[tuple[int, bytes]]] = {}
    for r, o, v in zip(*(table.column(c).to_pylist() for c in ("root", "offset", "value")), strict=True):
        out.setdefault(r, []).append((o, v))
    return {k: sorted(v) for k, v in out.items()}


def _copy_rows(log) -> list[tuple[int, bytes]]:
    t = log.read()
    return sorted(zip(t.records["offset"].tolist(), t.values(), strict=True))


def test_replicas_all_gives_each_copy_with_its_root_as_a_column(tmp_path):
    """The planner (Spark source) and kbatch convert: every copy, over its own range, its root a column."""
    pa = pytest.importorskip("pyarrow")
    pads = pytest.importorskip("pyarrow.dataset")
    from kbatch.__main__ import main
    from kbatch.plan import Options, plan_slices, plan_tasks, range_key, read_task, resolve_range, select_logs

    out = tmp_path / "out"
    tmp_path = tmp_path / "backup"
    _copy(tmp_path / "a" / "logs", epoch=9, n=6)
    _copy(tmp_path / "b" / "logs", epoch=1, n=10, seed=b"w")
    want = {d.root: _copy_rows(d) for d in open_logs(tmp_path, recursive=True, replicas="all")}
    assert len(want) == 2 and len(want[str(tmp_path / "b" / "logs")]) == 10

    opts = Options.parse({"path": str(tmp_path), "recursiveFileLookup": "true", "replicas": "all",
                          "maxPartitionBytes": "500"})
    logs = select_logs(opts)
    ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
    tasks = plan_tasks(plan_slices(logs, ranges, opts), opts)
    table = pa.Table.from_batches([b for t in tasks for b in read_task(t, opts)])
    assert table.schema.names[-2:] == ["root", "clusterId"]
    assert set(table.column("clusterId").to_pylist()) == {"cluster-one"}
    assert _rows_by_root(table) == want

    assert main(["convert", str(tmp_path), str(out), "--engine", "arrow", "--recursive", "--replicas", "all",
                 "-q"]) == 0
    assert _rows_by_root(pads.dataset(out, format="parquet", partitioning="hive").to_table()) == want
    # best (the default): one copy, its root and cluster said (every --recursive read has the columns)
    best = Options.parse({"path": str(tmp_path), "recursiveFileLookup": "true", "failOnDataLoss": "false"})
    (log,) = select_logs(best)
    (task,) = plan_tasks(plan_slices([log], {range_key(log, best): resolve_range(log, best)}, best), best)
    got = pa.Table.from_batches(list(read_task(task, best)))
    assert set(got.column("root").to_pylist()) == {str(tmp_path / "b" / "logs")} and got.num_rows == 10
    # one root read: the Kafka source's columns only
    one = Options.parse({"path": str(tmp_path / "b" / "logs")})
    (log,) = select_logs(one)
    (task,) = plan_tasks(plan_slices([log], {range_key(log, one): resolve_range(log, one)}, one), one)
    names = pa.Table.from_batches(list(read_task(task, one))).schema.names
    assert "root" not in names and "clusterId" not in names
    with pytest.raises(ValueError, match="replicas=all is for batch reads"):
        Options.parse({"path": str(tmp_path), "replicas": "all"}, streaming=True)


# ---------------------------------------------------------------------------------------------
# Different logs under one name: other clusters, a topic created again


def _two_clusters(top) -> dict[str, list[tuple[int, bytes]]]:
    """Two clusters' roots under ``top``, each with its own ``t-0`` (5 and 8 records): rows by root."""
    a = write_root(top / "a" / "logs", values(5, b"a"), cluster_id="cluster-A", topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    b = write_root(top / "b" / "logs", values(8, b"b"), cluster_id="cluster-B", topic_id="BBBBBBBBBBBBBBBBBBBBBB")
    return {str(a): list(enumerate(values(5, b"a"))), str(b): list(enumerate(values(8, b"b")))}


def test_two_clusters_are_two_logs_both_opened(tmp_path):
    want = _two_clusters(tmp_path)
    notes: list[str] = []
    logs = open_logs(tmp_path, recursive=True, notes=notes)  # not replicas: no disagreement raised
    assert [(d.root, d.cluster_id, d.topic_id) for d in logs] == [
        (str(tmp_path / "a" / "logs"), "cluster-A", "AAAAAAAAAAAAAAAAAAAAAA"),
        (str(tmp_path / "b" / "logs"), "cluster-B", "BBBBBBBBBBBBBBBBBBBBBB"),
    ]
    assert {d.root: _copy_rows(d) for d in logs} == want
    (note,) = notes
    assert note.startswith("t-0: 2 different logs under one name, not replicas (cluster ids differ, topic ids differ)")
    assert f"{tmp_path}/a/logs (cluster cluster-A, topic id AAAAAAAAAAAAAAAAAAAAAA)" in note
    assert f"{tmp_path}/b/logs (cluster cluster-B, topic id BBBBBBBBBBBBBBBBBBBBBB)" in note


def test_same_topic_id_in_two_clusters_is_still_two_logs(tmp_path):
    write_root(tmp_path / "a" / "logs", values(5, b"a"), cluster_id="cluster-A")
    write_root(tmp_path / "b" / "logs", values(8, b"b"), cluster_id="cluster-B")
    notes: list[str] = []
    assert len(open_logs(tmp_path, recursive=True, notes=notes)) == 2
    assert "(cluster ids differ)" in notes[0]


def test_a_topic_deleted_and_created_again_is_another_log(tmp_path):
    write_root(tmp_path / "before" / "logs", values(5, b"old"), topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    write_root(tmp_path / "after" / "logs", values(3, b"new"), topic_id="BBBBBBBBBBBBBBBBBBBBBB")
    notes: list[str] = []
    logs = open_logs(tmp_path, recursive=True, notes=notes)
    assert sorted(len(d.read()) for d in logs) == [3, 5]
    assert "(topic ids differ: the topic was deleted and created again)" in notes[0]


def test_an_id_missing_on_one_side_reads_both_and_on_both_sides_one(tmp_path):
    """A root without meta.properties (or a copy without partition.metadata) next to one with it
    cannot be told to be the same log: both are read (rows twice rather than rows lost)."""
    write_root(tmp_path / "a" / "logs", values(5))
    write_root(tmp_path / "b" / "logs", values(8), cluster_id=None)
    notes: list[str] = []
    logs = open_logs(tmp_path, recursive=True, notes=notes)
    assert [d.cluster_id for d in logs] == ["cluster-one", None]
    assert "(a root has no meta.properties)" in notes[0] and "cluster unknown: no meta.properties" in notes[0]
    (tmp_path / "b" / "logs" / "t-0" / "partition.metadata").unlink()
    (tmp_path / "a" / "logs" / "meta.properties").unlink()
    notes.clear()
    assert len(open_logs(tmp_path, recursive=True, notes=notes)) == 2
    assert "(a copy has no partition.metadata)" in notes[0]
    (tmp_path / "a" / "logs" / "t-0" / "partition.metadata").unlink()
    (log,) = open_logs(tmp_path, recursive=True)  # neither says: copies of one log, as before
    assert log.next_offset == 8


def test_meta_properties_is_read_as_java_properties(tmp_path):
    from kbatch.log._metaproperties import parse_meta_properties

    assert parse_meta_properties(b"# c\n! c\n\nversion = 0\nbroker.id:2\ncluster.id=x=y\nodd\n") == {
        "version": "0", "broker.id": "2", "cluster.id": "x=y"}
    root = write_root(tmp_path / "logs", values(1), cluster_id="first")
    (log,) = open_logs(root)
    assert log.cluster_id == "first"
    (root / "meta.properties").write_text("version=1\ncluster.id=second-and-longer\n")  # replaced: read again
    assert open_logs(root)[0].cluster_id == "second-and-longer"
    (root / "meta.properties").write_text("version=0\nbroker.id=1\n")  # ZooKeeper version 0: optional
    assert open_logs(root)[0].cluster_id is None


def test_kafka_log_source_reads_every_log_with_root_and_cluster_columns(tmp_path):
    """The source's planner and tasks (what Spark runs) with recursiveFileLookup; a stream refuses."""
    pa = pytest.importorskip("pyarrow")
    from kbatch.plan import Options, plan_slices, plan_tasks, range_key, read_task, resolve_range, select_logs

    want = _two_clusters(tmp_path)
    opts = Options.parse({"path": str(tmp_path), "recursiveFileLookup": "true", "maxPartitionBytes": "300"})
    notes: list[str] = []
    logs = select_logs(opts, notes)
    assert len(notes) == 1 and "2 different logs" in notes[0]
    ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
    tasks = plan_tasks(plan_slices(logs, ranges, opts), opts)
    table = pa.Table.from_batches([b for t in tasks for b in read_task(t, opts)])
    assert table.schema.names[-2:] == ["root", "clusterId"]
    assert _rows_by_root(table) == want
    clusters = dict(zip(table.column("root").to_pylist(), table.column("clusterId").to_pylist(), strict=True))
    assert clusters == {str(tmp_path / "a" / "logs"): "cluster-A", str(tmp_path / "b" / "logs"): "cluster-B"}
    stream = Options.parse({"path": str(tmp_path), "recursiveFileLookup": "true"}, streaming=True)
    with pytest.raises(ValueError, match=r"t-0: different logs under one name in .*a/logs, .*b/logs.*own stream"):
        select_logs(stream)


def _convert(main, root, out, *extra):
    return main(["convert", str(root), str(out), "--engine", "arrow", "--recursive", *extra])


def test_convert_recursive_two_clusters_writes_every_record(tmp_path, capsys):
    pads = pytest.importorskip("pyarrow.dataset")
    from kbatch.__main__ import main

    want = _two_clusters(tmp_path / "backup")
    assert _convert(main, tmp_path / "backup", tmp_path / "out") == 0
    text = capsys.readouterr().out
    table = pads.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 13 and _rows_by_root(table) == want
    by_root = dict(zip(table.column("root").to_pylist(), table.column("clusterId").to_pylist(), strict=True))
    assert by_root == {str(tmp_path / "backup" / "a" / "logs"): "cluster-A",
                       str(tmp_path / "backup" / "b" / "logs"): "cluster-B"}
    assert "converted 13 records from 1 topic, 2 partitions" in text
    assert f"  t-0 in {tmp_path}/backup/a/logs (cluster cluster-A): 5 records, offsets 0..4" in text
    assert f"  t-0 in {tmp_path}/backup/b/logs (cluster cluster-B): 8 records, offsets 0..7" in text
    assert "note: t-0: 2 different logs under one name" in text
    assert _convert(main, tmp_path / "backup", tmp_path / "out2", "--json-summary") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 13
    assert [(p["root"], p["cluster_id"], p["records"]) for p in summary["per_partition"]] == [
        (str(tmp_path / "backup" / "a" / "logs"), "cluster-A", 5),
        (str(tmp_path / "backup" / "b" / "logs"), "cluster-B", 8)]
    assert sum("2 different logs" in n for n in summary["notes"]) == 1
    # one root, not recursive: the output and the summary as they were
    assert main(["convert", str(tmp_path / "backup" / "a" / "logs"), str(tmp_path / "one"), "--engine", "arrow",
                 "--json-summary"]) == 0
    (part,) = json.loads(capsys.readouterr().out)["per_partition"]
    assert "root" not in part and "cluster_id" not in part
    names = pads.dataset(tmp_path / "one", format="parquet", partitioning="hive").schema.names
    assert "root" not in names and "clusterId" not in names


def test_convert_fails_when_replicas_disagree_or_reports_it_once(tmp_path, capsys):
    pads = pytest.importorskip("pyarrow.dataset")
    from kbatch.__main__ import main

    _disagreeing(tmp_path / "backup")
    a, b = f"{tmp_path}/backup/a/logs/t-0", f"{tmp_path}/backup/b/logs/t-0"
    assert _convert(main, tmp_path / "backup", tmp_path / "out", "-q") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kbatch convert: error: t-0: replicas disagree from offset 5: ")
    assert a in err[0] and b in err[0] and "--no-fail-on-data-loss" in err[0]
    assert not (tmp_path / "out").exists()
    assert _convert(main, tmp_path / "backup", tmp_path / "out", "--no-fail-on-data-loss", "--json-summary") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert sum("replicas disagree from offset 5" in n for n in summary["notes"]) == 1
    assert "disagree" not in captured.err
    assert summary["records"] == 10
    assert pads.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table().num_rows == 10
    assert _convert(main, tmp_path / "backup", tmp_path / "out2", "--no-fail-on-data-loss") == 0
    captured = capsys.readouterr()
    assert captured.out.count("replicas disagree from offset 5") == 1 and "disagree" not in captured.err


def test_convert_replicas_all_says_each_copys_root(tmp_path, capsys):
    from kbatch.__main__ import main

    _copy(tmp_path / "backup" / "a" / "logs", epoch=9, n=6)
    _copy(tmp_path / "backup" / "b" / "logs", epoch=1, n=10)
    assert _convert(main, tmp_path / "backup", tmp_path / "out", "--replicas", "all") == 0
    lines = [n for n in capsys.readouterr().out.splitlines() if n.startswith("  t-0")]
    assert lines == [f"  t-0 in {tmp_path}/backup/a/logs (cluster cluster-one): 6 records, offsets 0..5",
                     f"  t-0 in {tmp_path}/backup/b/logs (cluster cluster-one): 10 records, offsets 0..9"]
    assert _convert(main, tmp_path / "backup", tmp_path / "out2", "--replicas", "all", "--json-summary") == 0
    parts = json.loads(capsys.readouterr().out)["per_partition"]
    assert [(p["topic"], p["partition"], p["root"], p["records"]) for p in parts] == [
        ("t", 0, f"{tmp_path}/backup/a/logs", 6), ("t", 0, f"{tmp_path}/backup/b/logs", 10)]


def test_a_tiered_storage_copy_joins_the_log_of_its_topic_id(tmp_path):
    """Tiered storage's layout has no root files (no cluster id): its topic id decides."""
    broker = write_root(tmp_path / "broker" / "logs", values(6))
    tiered = tmp_path / "bucket" / f"t-{TOPIC_ID}" / "0"
    tiered.mkdir(parents=True)
    for seg in (broker / "t-0").glob("*.log"):
        (tiered / f"{seg.stem}-AAAAAAAAAAAAAAAAAAAAAA.log").write_bytes(seg.read_bytes())
    notes: list[str] = []
    logs = open_logs(tmp_path, recursive=True, replicas="all", notes=notes)
    assert sorted((d.tiered, d.cluster_id) for d in logs) == [(False, "cluster-one"), (True, None)]
    assert notes == [f"t-0: 2 replicas, all read (roots {broker}, {tmp_path}/bucket)"]
    # another cluster's log with the same topic id: the tiered copy cannot be placed, read on its own
    write_root(tmp_path / "other" / "logs", values(2, b"o"), cluster_id="cluster-two")
    notes.clear()
    assert len(open_logs(tmp_path, recursive=True, notes=notes)) == 3
    assert notes[0].startswith("t-0: 3 different logs under one name, not replicas (cluster ids differ)")
    assert f"{tmp_path}/bucket (cluster none: tiered storage, topic id {TOPIC_ID})" in notes[0]


def test_convert_recursive_notes_only_what_is_read_and_lists_the_internal_topics_left_out(tmp_path, capsys):
    """Issue 35 item 7: internal topics left out of a recursive run are neither noted as read nor
    compared as replicas (two copies of __consumer_offsets-0 that disagree stop nothing), and the
    summary lists them as a run on one root does."""
    from kbatch.__main__ import main

    top = tmp_path / "backup"
    for broker, seed in (("a", b"x"), ("b", b"y")):  # one cluster: replicas, disagreeing in __consumer_offsets
        write_root(top / broker / "logs", values(4))
        for p in (0, 1):
            write_root(top / broker / "logs", values(3, seed), topic="__consumer_offsets", partition=p)
    assert _convert(main, top, tmp_path / "out", "--json-summary") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 4
    assert summary["left_out"] == {"__consumer_offsets": 2}
    assert [n for n in summary["notes"] if "__consumer_offsets" in n] == []
    assert _convert(main, top, tmp_path / "out2") == 0
    text = capsys.readouterr().out
    assert "left out internal topics: __consumer_offsets (2 partitions); pass --include-internal" in text
    assert "__consumer_offsets-" not in text
    assert _convert(main, top, tmp_path / "out3", "--include-internal", "-q") == 1  # read, they are compared
    assert "__consumer_offsets-0: replicas disagree" in capsys.readouterr().err
