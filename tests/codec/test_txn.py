"""read_committed: kbatch.codec._txn and LogDir.read against Kafka's rules, on scripted transactions.

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
from kbatch.codec import _core
from kbatch.codec._table import concat, select
from kbatch.codec._txn import (
    aborted_batch_mask,
    aborted_from_markers,
    filter_committed,
    open_transactions,
)
from kbatch.errors import CRCError
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


# ---------------------------------------------------------------------------------------------
# decode(..., skip_batches=...): the aborted batches never parsed, same records as decode-then-filter


def _rows(table: kbatch.RecordTable) -> list[tuple]:
    r = table.records
    return [
        (int(r["offset"][i]), int(r["timestamp"][i]), table.key(i), table.value(i), table.headers(i),
         int(table.batches["base_offset"][r["batch"][i]]))
        for i in range(len(table))
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_skip_batches_equals_decode_then_filter(seed: int) -> None:
    s = make_script(seed)
    full = kbatch.decode(s.data)
    aborted = [(pid, first) for pid, first, _ in s.aborted]
    drop = aborted_batch_mask(full.batches, aborted)
    skipped = _core.decode(s.data, skip_batches=drop)
    # every batch keeps its row; the skipped ones have no records
    assert len(skipped.batches) == len(full.batches)
    assert not np.isin(np.flatnonzero(drop), skipped.records["batch"]).any()
    keep = ~drop[full.records["batch"]]
    assert _rows(skipped) == [row for row, k in zip(_rows(full), keep, strict=True) if k]
    assert skipped.next_offset == full.next_offset and skipped.consumed_bytes == full.consumed_bytes
    # without the skipped rows: what filter_committed leaves (before the last stable offset)
    dropped = _core.decode(s.data, skip_batches=drop, keep_skipped_rows=False)
    filtered = filter_committed(full, aborted)
    assert _rows(dropped) == _rows(filtered)
    assert dropped.batches["base_offset"].tolist() == filtered.batches["base_offset"].tolist()
    assert dropped.next_offset == full.next_offset


def test_skip_batches_neither_checks_nor_decompresses() -> None:
    parts = [
        kbatch.encode([b"a", b"b"]),
        kbatch.encode([b"c" * 100] * 3, base_offset=2, compression="gzip"),
        kbatch.encode([b"d"], base_offset=5, compression="zstd"),
        kbatch.encode([b"e"], base_offset=6),
    ]
    raw = bytearray(b"".join(parts))
    at = len(parts[0]) + 61 + 5  # inside the gzip payload
    raw[at] ^= 0xFF
    with pytest.raises(CRCError):
        kbatch.decode(bytes(raw))
    skip = np.array([False, True, False, False])
    t = _core.decode(bytes(raw), skip_batches=skip)
    assert t.values() == [b"a", b"b", b"d", b"e"]
    assert t.records["batch"].tolist() == [0, 0, 2, 3]
    assert t.batches["first_record"].tolist() == [0, 2, 2, 3]
    t = _core.decode(bytes(raw), skip_batches=skip, keep_skipped_rows=False)
    assert t.records["batch"].tolist() == [0, 0, 1, 2] and len(t.batches) == 3 and t.next_offset == 7
    # a CRC error in a batch that is not skipped is still reported, at its index in the input
    with pytest.raises(CRCError) as info:
        _core.decode(bytes(raw), skip_batches=np.array([False, False, True, False]), keep_skipped_rows=False)
    assert info.value.batch_index == 1 and info.value.partial.values() == [b"a", b"b"]
    # one flag per complete batch
    with pytest.raises(ValueError, match="skip_batches"):
        _core.decode(bytes(raw), skip_batches=[True])
    assert len(_core.decode(b"", skip_batches=np.zeros(0, bool)).batches) == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_log_read_committed_rows_equal_filter(seed: int, tmp_path: Path) -> None:
    """LogDir's one-call-per-chunk read_committed gives the rows filter_committed gives."""
    s = make_script(seed)
    path = _write(s, tmp_path, segment_bytes=1 << 20)
    full = kbatch.decode(s.data)
    want = filter_committed(full, [(pid, first) for pid, first, _ in s.aborted], s.lso())
    for chunk in (1, 300, 1 << 20):
        log = open_log(path)
        tables = list(log.iter_tables(isolation_level="read_committed", chunk_bytes=chunk))
        assert [row for t in tables for row in _rows(t)] == _rows(want)
        for t in tables:  # record rows point at their batches
            b = t.batches[t.records["batch"]]
            assert np.all((t.records["offset"] >= b["base_offset"])
                          & (t.records["offset"] <= b["base_offset"] + b["last_offset_delta"]))
            assert not (t.batches["is_transactional"] & ~t.batches["is_control"]
                        & np.isin(t.batches["base_offset"], [f for _, f, _ in s.aborted])).any()
    assert _rows(open_log(path).read(isolation_level="read_committed")) == _rows(want)


@pytest.mark.parametrize("seed", SEEDS[:10])
def test_log_read_committed_with_corrupt_batches(seed: int, tmp_path: Path) -> None:
    """An aborted batch is never checked; a corrupt kept batch is skipped with the mask still aligned."""
    s = make_script(seed)
    if not s.aborted:
        pytest.skip("no aborted transaction in this script")
    path = _write(s, tmp_path, segment_bytes=1 << 20)
    seg = path / "00000000000000000000.log"
    full = kbatch.decode(s.data)
    drop = aborted_batch_mask(full.batches, [(pid, first) for pid, first, _ in s.aborted])
    b = full.batches
    data_batches = ~b["is_control"]
    victim = int(np.flatnonzero(drop)[0])
    kept = np.flatnonzero(~drop & data_batches & (b["base_offset"] < (s.lso() or 1 << 62)))
    raw = bytearray(seg.read_bytes())
    raw[int(b["position"][victim]) + 70] ^= 0xFF  # a record byte of an aborted batch
    seg.write_bytes(raw)
    expect = s.expected()
    assert open_log(path).read(isolation_level="read_committed").records["offset"].tolist() == expect
    with pytest.raises(CRCError):
        open_log(path).read()
    if len(kept) == 0:
        return
    hit = int(kept[len(kept) // 2])
    raw[int(b["position"][hit]) + 70] ^= 0xFF  # and one of a batch a consumer keeps
    seg.write_bytes(raw)
    lost = set(range(int(b["base_offset"][hit]), int(b["base_offset"][hit] + b["last_offset_delta"][hit]) + 1))
    for chunk in (250, 1 << 20):
        log = open_log(path)
        tables = list(log.iter_tables(isolation_level="read_committed", on_corruption="skip", chunk_bytes=chunk))
        assert [o for t in tables for o in t.records["offset"].tolist()] == [o for o in expect if o not in lost]
        assert [s_.position for s_ in log.skipped] == [int(b["position"][hit])]
    with pytest.raises(CRCError):
        open_log(path).read(isolation_level="read_committed")


def test_an_honest_txnindex_is_checked_without_a_note_across_segments(tmp_path: Path) -> None:
    # producer 5 commits a transaction, then aborts one whose data lies in two segments before
    # the segment holding its ABORT marker (the only .txnindex entry: first offset 4)
    with LogWriter(tmp_path, "t", 0, segment_bytes=200) as w:
        w.append(kbatch.encode([b"t1"], producer_id=5, producer_epoch=0, transactional=True, base_offset=0))
        w.append(kbatch.encode([b"p" * 150], base_offset=1))
        w.append(kbatch.encode([b"t2"], producer_id=5, producer_epoch=0, transactional=True, base_offset=2))
        w.append(kbatch.encode_control("commit", 5, 0, base_offset=3))
        w.append(kbatch.encode([b"t3"], producer_id=5, producer_epoch=0, transactional=True, base_offset=4))
        w.append(kbatch.encode([b"q" * 150], base_offset=5))
        w.append(kbatch.encode([b"t4"], producer_id=5, producer_epoch=0, transactional=True, base_offset=6))
        w.append(kbatch.encode_control("abort", 5, 0, base_offset=7))
        w.append(kbatch.encode([b"end"], base_offset=8))
    part = tmp_path / "t-0"
    assert [p.name for p in part.glob("*.txnindex")] == ["00000000000000000006.txnindex"]
    want = [b"t1", b"p" * 150, b"t2", b"q" * 150, b"end"]
    log = open_log(part)
    assert log.read(isolation_level="read_committed").values() == want
    assert log.transactions() == ([(5, 4, 7)], None)
    assert log.notes == []
    # the transaction's first batch deleted (retention): the entry starts before the data left,
    # which is no lie, and the rest of the transaction is still left out
    for p in part.glob("00000000000000000004.*"):
        p.unlink()
    log = open_log(part)
    assert log.read(isolation_level="read_committed").values() == want
    assert log.transactions() == ([(5, 6, 7)], None)
    assert log.notes == []


def test_last_stable_offset_masks_each_record_by_its_offset_headers_and_batch_rows_follow() -> None:
    data = (kbatch.encode([b"a", b"b", b"c"], base_offset=10, headers=[[("h", b"a")], [("h", b"b")], []])
            + kbatch.encode([b"d", b"e"], base_offset=0, headers=[[], [("h", b"e")]])
            + kbatch.encode([b"f"], base_offset=20))
    t = kbatch.decode(data, isolation_level="read_committed", last_stable_offset=11)
    assert t.records["offset"].tolist() == [10, 0, 1]
    assert [t.headers(i) for i in range(3)] == [[("h", b"a")], [], [("h", b"e")]]
    assert t.records["batch"].tolist() == [0, 1, 1]
    assert t.batches["base_offset"].tolist() == [10, 0]  # the batch at 20 starts past it
    assert t.batches["first_record"].tolist() == [0, 1]
