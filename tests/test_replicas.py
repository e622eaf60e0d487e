"""Several copies of one partition under a backup folder: which is read, and what is said."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogWriter, open_logs


def _copy(root, epoch: int, n: int, seed: bytes = b"v") -> None:
    with LogWriter(root, "t", 0, segment_bytes=400) as w:
        for i in range(n):
            w.append(kbatch.encode([seed + b"%d" % i], base_offset=i, timestamps=[i]), leader_epoch=epoch)


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


def test_disagreeing_copies_are_reported_with_the_offset(tmp_path, caplog):
    _copy(tmp_path / "a" / "logs", epoch=1, n=10)
    with LogWriter(tmp_path / "b" / "logs", "t", 0, segment_bytes=400) as w:
        for i in range(8):
            value = b"v%d" % i if i < 5 else b"other%d" % i
            w.append(kbatch.encode([value], base_offset=i, timestamps=[i]), leader_epoch=1)
    notes: list[str] = []
    open_logs(tmp_path, recursive=True, notes=notes)
    want = (f"t-0: replicas disagree from offset 5: {tmp_path}/a/logs/t-0 and {tmp_path}/b/logs/t-0 hold "
            "different batches there (base offset or CRC)")
    assert [n for n in notes if "replicas disagree" in n] == [want]
    assert "replicas disagree from offset 5" in caplog.text
    notes.clear()
    open_logs(tmp_path, recursive=True, notes=notes, verify_replicas=False)
    assert not any("replicas disagree" in n for n in notes)


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
    from kbatch._plan import Options, plan_slices, plan_tasks, range_key, read_task, resolve_range, select_logs

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
    assert table.schema.names[-1] == "root"
    assert _rows_by_root(table) == want

    assert main(["convert", str(tmp_path), str(out), "--engine", "arrow", "--recursive", "--replicas", "all",
                 "-q"]) == 0
    assert _rows_by_root(pads.dataset(out, format="parquet", partitioning="hive").to_table()) == want
    # best (the default): one copy, no root column
    best = Options.parse({"path": str(tmp_path), "recursiveFileLookup": "true"})
    (log,) = select_logs(best)
    (task,) = plan_tasks(plan_slices([log], {range_key(log, best): resolve_range(log, best)}, best), best)
    assert "root" not in pa.Table.from_batches(list(read_task(task, best))).schema.names
    with pytest.raises(ValueError, match="replicas=all is for batch reads"):
        Options.parse({"path": str(tmp_path), "replicas": "all"}, streaming=True)
