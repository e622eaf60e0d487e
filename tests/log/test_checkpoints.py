"""The broker's offset checkpoints at a log.dirs root: read as hints, verified, written (issue 16)."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogWriter, open_log, open_logs
from kbatch.log._checkpoint import LOG_START, read_checkpoint, root_checkpoints, update_checkpoint


def _write(root, topic="orders", partition=0, n=10, segment_bytes=1 << 30):
    with LogWriter(root, topic, partition, segment_bytes=segment_bytes) as w:
        for i in range(n):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
    return w


def test_writer_writes_the_broker_files(tmp_path):
    _write(tmp_path, "a", 0, 3)
    _write(tmp_path, "b", 1, 5)
    assert read_checkpoint(tmp_path / LOG_START) == {("a", 0): 0, ("b", 1): 0}
    assert read_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {("a", 0): 3, ("b", 1): 5}
    assert read_checkpoint(tmp_path / "replication-offset-checkpoint") == {("a", 0): 3, ("b", 1): 5}
    assert (tmp_path / LOG_START).read_text().splitlines()[:2] == ["0", "2"]
    assert not list(tmp_path.glob("*.tmp"))


def test_delete_records_moves_the_start_as_the_broker_does(tmp_path):
    w = LogWriter(tmp_path, "orders", 0, segment_bytes=200)
    for i in range(10):
        w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
    w.delete_records(5)
    w.close()
    log = open_log(tmp_path / "orders-0")
    assert log.segments[0].base_offset == 0  # the records are still on disk
    assert log.log_start_offset == 5
    assert log.read().records["offset"].tolist() == [5, 6, 7, 8, 9]
    assert log.to_arrow().column("offset").to_pylist()[0] == 5
    # a timestamp seek finds only offsets from the log start on (Kafka's ListOffsets)
    assert log.offset_for_timestamp(0) == 5
    assert log.read(start_timestamp=1002).records["offset"].tolist()[0] == 5
    assert log.checkpoints == {"log_start_offset": 5, "recovery_point": 10, "high_watermark": 10}
    with pytest.raises(ValueError, match="outside"):
        LogWriter(tmp_path, "x", 0).delete_records(3)


def test_checkpoint_before_the_first_segment_is_the_first_segment(tmp_path):
    _write(tmp_path, n=10, segment_bytes=200)  # log start checkpoint 0
    log = open_log(tmp_path / "orders-0")
    first, second = log.segments[0], log.segments[1]
    for f in (tmp_path / "orders-0").glob(f"{first.base_offset:020d}.*"):  # retention deleted it
        f.unlink()
    log = open_log(tmp_path / "orders-0")
    assert log.checkpoints["log_start_offset"] == 0
    assert log.log_start_offset == second.base_offset > 0
    assert log.read().records["offset"].tolist()[0] == second.base_offset


def test_checkpoint_past_the_end_is_noted_not_trusted(tmp_path):
    _write(tmp_path, n=4)
    update_checkpoint(tmp_path / LOG_START, {("orders", 0): 99})
    update_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {("orders", 0): 50})
    log = open_log(tmp_path / "orders-0")
    assert log.log_start_offset == 0
    assert len(log.read()) == 4
    assert any("past the log end 4" in n and "ignored" in n for n in log.notes)
    found = log.verify_checkpoints()
    assert len(found) == 1 and "recovery_point 50" in found[0] and "flushed more" in found[0]


@pytest.mark.parametrize(
    "text",
    ["1\n1\norders 0 2\n", "0\n2\norders 0 2\n", "0\n1\norders zero 2\n", "0\nx\n", "0\n1\norders 0\n"],
)
def test_malformed_checkpoint_is_ignored_with_a_note(tmp_path, text):
    _write(tmp_path, n=4)
    (tmp_path / LOG_START).write_text(text)
    with pytest.raises(ValueError):
        read_checkpoint(tmp_path / LOG_START)
    log = open_log(tmp_path / "orders-0")
    assert log.log_start_offset == 0 and "log_start_offset" not in log.checkpoints
    assert any(LOG_START in n and "ignored" in n for n in log.notes)


def test_empty_and_missing_files_are_empty(tmp_path):
    assert read_checkpoint(tmp_path / LOG_START) == {}
    (tmp_path / LOG_START).write_text("")
    assert read_checkpoint(tmp_path / LOG_START) == {}
    assert root_checkpoints(tmp_path) == ({LOG_START: {}}, [])


def test_cache_sees_a_rewritten_file(tmp_path):
    _write(tmp_path, n=6)
    update_checkpoint(tmp_path / LOG_START, {("orders", 0): 2})
    assert open_log(tmp_path / "orders-0").log_start_offset == 2
    update_checkpoint(tmp_path / LOG_START, {("orders", 0): 3})  # same size, new file
    assert open_log(tmp_path / "orders-0").log_start_offset == 3


def test_sample_root_has_every_checkpoint(tmp_path):
    from kbatch.cli._sample import write_sample

    write_sample(tmp_path)
    logs = {f"{d.topic}-{d.partition}": d for d in open_logs(tmp_path)}
    assert logs["users-0"].checkpoints["cleaner_offset"] == logs["users-0"].next_offset
    assert all(d.checkpoints["recovery_point"] == d.next_offset for d in logs.values())
    assert all(not d.verify_checkpoints() for d in logs.values())
