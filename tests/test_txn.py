"""read_committed: kbatch._txn and LogDir.read against Kafka's rules, on scripted transactions.

The expected result of each script is computed from the script itself (which transaction was
committed, aborted or left open), not from the code under test: a record is visible to a
read_committed consumer when it is not transactional or its transaction committed, and its
offset is below the last stable offset (the first offset of the earliest transaction still open).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import kbatch
from kbatch._txn import (
    aborted_from_markers,
    concat,
    filter_committed,
    open_transactions,
    select,
)
from kbatch.log import TXN_INDEX_DTYPE, LogWriter, open_log


@dataclass
class Script:
    """A partition's batches plus what Kafka says about them."""

    data: bytes = b""
    next_offset: int = 0
    visible: list[int] = field(default_factory=list)  # committed or plain record offsets
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, marker offset)
    txn_records: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of the open txn
    open_first: dict[int, int] = field(default_factory=dict)  # pid -> first offset of the open txn
    committed_later: list[int] = field(default_factory=list)

    def lso(self) -> int | None:
        return min(self.open_first.values()) if self.open_first else None

    def expected(self, start: int = 0) -> list[int]:
        lso = self.lso()
        return [o for o in sorted(self.visible) if o >= start and (lso is None or o < lso)]


def make_script(seed: int, steps: int = 60, producers: int = 3) -> Script:
    rng = random.Random(seed)
    s = Script()
    pids = [1000 + i for i in range(producers)]
    for _ in range(steps):
        pid = rng.choice(pids)
        r = rng.random()
        if r < 0.5:
            n = rng.randint(1, 4)
            values = [b"p%d-%d" % (pid, s.next_offset + i) for i in range(n)]
            headers = [[("txn", b"%d" % pid)] if i % 2 else [] for i in range(n)]
            s.data += kbatch.encode(values, timestamps=[1000 + s.next_offset + i for i in range(n)],
                                    headers=headers, base_offset=s.next_offset, producer_id=pid,
                                    producer_epoch=0, transactional=True)
            offsets = list(range(s.next_offset, s.next_offset + n))
            s.open_first.setdefault(pid, s.next_offset)
            s.txn_records.setdefault(pid, []).extend(offsets)
            s.next_offset += n
        elif r < 0.65:
            n = rng.randint(1, 3)
            idempotent = rng.random() < 0.5  # a non-transactional producer id that is also aborted-listed
            s.data += kbatch.encode([b"plain"] * n, base_offset=s.next_offset,
                                    producer_id=pid if idempotent else -1, producer_epoch=0 if idempotent else -1)
            s.visible.extend(range(s.next_offset, s.next_offset + n))
            s.next_offset += n
        elif pid in s.open_first or r > 0.95:
            kind = "abort" if rng.random() < 0.5 else "commit"
            s.data += kbatch.encode_control(kind, pid, 0, base_offset=s.next_offset, coordinator_epoch=2)
            first = s.open_first.pop(pid, s.next_offset)
            records = s.txn_records.pop(pid, [])
            if kind == "abort":
                s.aborted.append((pid, first, s.next_offset))
            else:
                s.visible.extend(records)
            s.next_offset += 1
    return s


SEEDS = list(range(40))


@pytest.mark.parametrize("seed", SEEDS)
def test_filter_committed_matches_kafka_rules(seed: int) -> None:
    s = make_script(seed)
    table = kbatch.decode(s.data)
    aborted = [(pid, first) for pid, first, _ in s.aborted]
    assert aborted_from_markers(table) == sorted(aborted)
    assert open_transactions(table) == s.open_first
    got = filter_committed(table, aborted, s.lso())
    assert got.records["offset"].tolist() == s.expected()
    assert got.data is table.data
    # headers follow their records
    for i in range(len(got)):
        value = got.value(i)
        assert value is not None
        if value.startswith(b"p"):
            pid = value.split(b"-")[0][1:]
            off = int(got.records["offset"][i])
            j = int(np.flatnonzero(table.records["offset"] == off)[0])
            assert got.headers(i) == table.headers(j)
            assert all(v == pid for _, v in got.headers(i))
    # record rows point at kept batch rows
    b = got.batches[got.records["batch"]]
    assert np.all(got.records["offset"] >= b["base_offset"])
    assert np.all(got.records["offset"] <= b["base_offset"] + b["last_offset_delta"])


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_fetch_from_the_middle(seed: int) -> None:
    """A fetch starting mid-log gets the aborted transactions overlapping it, as a broker sends."""
    s = make_script(seed)
    table = kbatch.decode(s.data)
    starts = sorted(set(table.batches["base_offset"].tolist()))
    for start in starts[:: max(1, len(starts) // 6)]:
        part = kbatch.decode(bytes(memoryview(s.data)[int(table.batches["position"][starts.index(start)]):]))
        overlapping = [(pid, first) for pid, first, last in s.aborted if last >= start]
        got = filter_committed(part, overlapping, s.lso())
        assert got.records["offset"].tolist() == s.expected(start)


def test_plain_buffers_without_transactions_are_untouched() -> None:
    table = kbatch.decode(kbatch.encode([b"a", b"b"], producer_id=4, producer_epoch=0))
    assert filter_committed(table, [(4, 0)]) is table
    assert filter_committed(table, [], last_stable_offset=1).values() == [b"a"]


def test_abort_marker_without_data_and_reused_producer() -> None:
    """A marker with no data in the partition, then the same producer commits: nothing lost."""
    data = (kbatch.encode_control("abort", 9, 0, base_offset=0)
            + kbatch.encode([b"x"], base_offset=1, producer_id=9, producer_epoch=1, transactional=True)
            + kbatch.encode_control("commit", 9, 1, base_offset=2))
    table = kbatch.decode(data)
    assert aborted_from_markers(table) == [(9, 0)]
    assert filter_committed(table, aborted_from_markers(table)).values() == [b"x"]


def test_select_and_concat_keep_columns_consistent() -> None:
    a = kbatch.decode(kbatch.encode([b"a", b"b"], headers=[[("k", b"1")], [("k", b"2")]], compression="gzip"))
    b = kbatch.decode(kbatch.encode([b"c"], base_offset=2, headers=[[("k", b"3")]]))
    both = concat([a, b])
    assert both.values() == [b"a", b"b", b"c"]
    assert [both.headers(i) for i in range(3)] == [[("k", b"1")], [("k", b"2")], [("k", b"3")]]
    assert both.next_offset == 3 and both.records["batch"].tolist() == [0, 0, 1]
    one = select(both, both.records["offset"] == 2, np.array([False, True]))
    assert one.values() == [b"c"] and one.headers(0) == [("k", b"3")] and one.records["batch"].tolist() == [0]


def _write(s: Script, root: Path, segment_bytes: int) -> Path:
    with LogWriter(root, "txn", 0, segment_bytes=segment_bytes, index_interval_bytes=256) as w:
        w.append(s.data)
    return w.path


@pytest.mark.parametrize("seed", SEEDS[:15])
def test_log_read_committed(seed: int, tmp_path: Path) -> None:
    s = make_script(seed)
    path = _write(s, tmp_path, segment_bytes=600)
    log = open_log(path)
    assert len(log.segments) > 1
    # the writer's .txnindex entries are the script's aborted transactions
    entries = [np.fromfile(p, dtype=TXN_INDEX_DTYPE) for p in sorted(path.glob("*.txnindex"))]
    found = [(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]))
             for arr in entries for e in arr]
    assert found == s.aborted
    assert all(int(e["version"]) == 0 for arr in entries for e in arr)
    expect = s.expected()
    assert log.read(isolation_level="read_committed").records["offset"].tolist() == expect
    tables = list(log.iter_tables(isolation_level="read_committed", chunk_bytes=200))
    assert [o for t in tables for o in t.records["offset"].tolist()] == expect
    start = s.next_offset // 2
    assert log.read(start_offset=start, isolation_level="read_committed").records["offset"].tolist() == [
        o for o in expect if o >= start
    ]
    # without .txnindex files (copies often drop them) the control markers give the same answer
    for p in path.glob("*.txnindex"):
        p.unlink()
    assert open_log(path).read(isolation_level="read_committed").records["offset"].tolist() == expect
    # read_uncommitted returns every data record
    assert len(open_log(path).read()) == len(kbatch.decode(s.data))


def test_last_stable_offset_stops_read(tmp_path: Path) -> None:
    data = (kbatch.encode([b"open"], producer_id=1, producer_epoch=0, transactional=True)
            + kbatch.encode([b"after"], base_offset=1))
    with LogWriter(tmp_path, "t", 0) as w:
        w.append(data)
    log = open_log(w.path)
    assert log.transactions() == ([], 0)
    assert len(log.read(isolation_level="read_committed")) == 0
    assert log.read().values() == [b"open", b"after"]
    shutil.rmtree(w.path)
