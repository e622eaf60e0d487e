"""Indexes are hints: a lying ``.index`` or ``.timeindex`` entry never changes what a read returns.

Every read through a segment's indexes is compared with the same read after every index file is
deleted (a linear scan of the ``.log``), for indexes damaged the ways a disk, a partial copy or
a bug damages them: bit flips, positions shifted into a batch, entries past the end, entries out
of order.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL_LOGS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kbatch
from kbatch.errors import CorruptRecordError
from kbatch.log import OFFSET_INDEX_DTYPE, TIME_INDEX_DTYPE, LogWriter, open_log


def ten_batches(root: Path, interval: int = 1) -> Path:
    """10 one-record batches (offsets 0..9, timestamps 1000..1009), by default an index entry per batch."""
    with LogWriter(root, "t", 0, index_interval_bytes=interval) as w:
        for i in range(10):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[1000 + i]))
    return root / "t-0"


def stem(part: Path) -> Path:
    return next(part.glob("*.log")).with_suffix("")


def patch(path: Path, dtype: np.dtype, k: int, field: str, value: int) -> None:
    entries = np.fromfile(path, dtype=dtype)
    entries[field][k] = value
    entries.tofile(path)


# ---------------------------------------------------------------------------------------------
# The examples


def test_flipped_bit_in_a_middle_index_position_loses_nothing(tmp_path: Path) -> None:
    part = ten_batches(tmp_path)
    index = stem(part).with_suffix(".index")
    entries = np.fromfile(index, dtype=OFFSET_INDEX_DTYPE)
    assert int(entries["relative_offset"][3]) == 4
    patch(index, OFFSET_INDEX_DTYPE, 3, "position", int(entries["position"][3]) ^ 4)
    log = open_log(part)
    assert log.read(start_offset=4).records["offset"].tolist() == list(range(4, 10))
    assert any(".index" in n and "entry 3" in n for n in log.notes), log.notes
    # the same in raise mode (the default) and skip mode, and nothing skipped: the log is intact
    assert log.read(start_offset=4, on_corruption="skip").records["offset"].tolist() == list(range(4, 10))
    assert not log.skipped
    assert [t.records["offset"].tolist() for t in log.iter_tables(start_offset=4, chunk_bytes=1)] == [
        [k] for k in range(4, 10)
    ]


@pytest.mark.parametrize("shift", range(1, 9))
def test_position_shifted_into_its_batch_loses_nothing(tmp_path: Path, shift: int) -> None:
    part = ten_batches(tmp_path)
    index = stem(part).with_suffix(".index")
    entries = np.fromfile(index, dtype=OFFSET_INDEX_DTYPE)
    patch(index, OFFSET_INDEX_DTYPE, 4, "position", int(entries["position"][4]) + shift)
    log = open_log(part)
    for start in range(10):
        assert log.read(start_offset=start).records["offset"].tolist() == list(range(start, 10)), (shift, start)
    assert log.read(start_timestamp=1005).records["offset"].tolist() == list(range(5, 10))
    assert any("entry 4" in n for n in log.notes), log.notes
    assert not log.skipped


def test_flipped_bit_in_the_last_timeindex_offset_loses_nothing(tmp_path: Path) -> None:
    part = ten_batches(tmp_path)
    timeindex = stem(part).with_suffix(".timeindex")
    entries = np.fromfile(timeindex, dtype=TIME_INDEX_DTYPE)
    assert entries[-1].tolist() == (1009, 9)
    patch(timeindex, TIME_INDEX_DTYPE, len(entries) - 1, "relative_offset", 0x01000009)
    log = open_log(part)
    assert log.read(start_timestamp=1009).records["offset"].tolist() == [9]
    assert log.offset_for_timestamp(1009) == 9
    assert log.offset_for_timestamp(1008) == 8
    assert log.read(start_timestamp=1003, end_timestamp=1009).records["offset"].tolist() == list(range(3, 9))
    # a local log's reads seek by batch headers; the segment's own timestamp seek reads the
    # .timeindex (as a remote segment's reads do) and notes the entry that lies
    assert log.segments[0].timestamp_position(1009) <= log.segments[0].position_for(9)
    assert any(".timeindex" in n for n in log.notes), log.notes


def test_lowered_timeindex_timestamp_is_caught(tmp_path: Path) -> None:
    """An entry whose timestamp lies low would start a timestamp seek after the records asked for."""
    part = ten_batches(tmp_path, interval=150)
    timeindex = stem(part).with_suffix(".timeindex")
    entries = np.fromfile(timeindex, dtype=TIME_INDEX_DTYPE)
    assert entries.tolist()[:3] == [(1003, 3), (1006, 6), (1009, 9)]
    patch(timeindex, TIME_INDEX_DTYPE, 1, "timestamp", 1004)  # still increasing: 1003 < 1004 < 1009
    log = open_log(part)
    assert log.offset_for_timestamp(1005) == 5
    assert log.read(start_timestamp=1004).records["offset"].tolist() == list(range(4, 10))


def test_timeindex_offset_moved_to_a_later_batch_of_the_same_timestamp_is_caught(tmp_path: Path) -> None:
    """The batch named has the entry's timestamp, but so has the one before: the entry lies."""
    stamps = [1000, 1003, 1003, 1003, 1003, 1007, 1008, 1009, 1009, 1009]
    with LogWriter(tmp_path, "t", 0, index_interval_bytes=1) as w:
        for i, ts in enumerate(stamps):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[ts]))
    part = tmp_path / "t-0"
    timeindex = stem(part).with_suffix(".timeindex")
    entries = np.fromfile(timeindex, dtype=TIME_INDEX_DTYPE)
    assert entries[0].tolist() == (1003, 1)
    patch(timeindex, TIME_INDEX_DTYPE, 0, "relative_offset", 1 ^ 2)  # batch 3: also 1003
    log = open_log(part)
    assert log.offset_for_timestamp(1003) == 1
    assert log.read(start_timestamp=1001).records["offset"].tolist() == list(range(1, 10))
    assert log.segments[0].timestamp_position(1003) <= log.segments[0].position_for(1)
    assert any(".timeindex entry 0" in n for n in log.notes), log.notes


def _stamped(root: Path, stamps: list[int]) -> Path:
    """One one-record batch per timestamp (offsets 0, 1, ...), an index entry per batch."""
    with LogWriter(root, "t", 0, index_interval_bytes=1) as w:
        for i, ts in enumerate(stamps):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i, timestamps=[ts]))
    return root / "t-0"


def test_timeindex_naming_real_batches_but_out_of_order_loses_nothing(tmp_path: Path) -> None:
    """Each entry names a real batch of its timestamp, so each passes its own check; yet the
    entries skip an earlier batch stamped later (timestamps out of order): a local seek by
    timestamp uses the batch headers, so no row is lost."""
    part = _stamped(tmp_path, [1000, 1030, 1005, 1020])
    timeindex = stem(part).with_suffix(".timeindex")
    np.array([(1005, 2), (1020, 3)], dtype=TIME_INDEX_DTYPE).tofile(timeindex)
    log = open_log(part)
    assert log.offset_for_timestamp(1006) == 1  # batch 1 (1030) is the first to reach 1006
    assert log.offset_for_timestamp(1025) == 1  # the entries' max (1020) is below batch 1's
    assert log.offset_for_timestamp(1031) is None
    assert log.read(start_timestamp=1006).records["offset"].tolist() == [1, 2, 3]
    assert log.read(start_timestamp=1021).records["offset"].tolist() == [1, 2, 3]
    assert [t.records["offset"].tolist() for t in log.iter_tables(start_timestamp=1025)] == [[1, 2, 3]]


def test_raise_mode_seek_never_skips(tmp_path: Path) -> None:
    """A seek in raise mode frames in raise mode: corruption on its way is an error, not a skip."""
    part = ten_batches(tmp_path)
    for p in part.glob("*index"):
        p.unlink()
    log_path = next(part.glob("*.log"))
    raw = bytearray(log_path.read_bytes())
    heads = kbatch.decode(bytes(raw)).batches
    raw[int(heads["position"][2]) + 16] = 7  # batch 2's magic: no batch can be framed there
    log_path.write_bytes(bytes(raw))
    log = open_log(part)
    with pytest.raises(CorruptRecordError) as exc:
        log.read(start_offset=5)
    assert exc.value.batch_position == int(heads["position"][2])
    assert not log.skipped
    with pytest.raises(CorruptRecordError):
        log.offset_for_timestamp(1005)
    assert not log.skipped
    got = log.read(start_offset=5, on_corruption="skip")
    assert got.records["offset"].tolist() == list(range(5, 10))
    assert log.skipped and log.skipped[0].position == int(heads["position"][2])
    assert log.offset_for_timestamp(1005, on_corruption="skip") == 5
    # what skip mode cached is not reused by raise mode behind its back
    with pytest.raises(CorruptRecordError):
        log.offset_for_timestamp(1005)
    with pytest.raises(CorruptRecordError):
        log.scan()
    assert len(log.scan(on_corruption="skip")) == 9
    # read_committed finds its transactions in the caller's mode too
    fresh = open_log(part)
    with pytest.raises(CorruptRecordError):
        fresh.read(start_offset=5, isolation_level="read_committed")
    assert not fresh.skipped
    got = fresh.read(start_offset=5, isolation_level="read_committed", on_corruption="skip")
    assert got.records["offset"].tolist() == list(range(5, 10)) and len(fresh.skipped) == 1


# ---------------------------------------------------------------------------------------------
# The invariant: any read through damaged indexes equals the same read without indexes


def build_log(root: Path, seed: int) -> Path:
    """A partition of several segments: batches of 1-6 records in every codec, some legacy
    (magic 1 plain and wrapped, magic 0 without timestamps), index entries every ~100 bytes.
    Batch max timestamps never go back (some repeat); records inside a batch are out of order."""
    rng = np.random.default_rng(seed)
    ts = 1_000
    offset = 0
    with LogWriter(root, "p", 0, segment_bytes=1500, index_interval_bytes=100) as w:
        for k in range(70):
            n = int(rng.integers(1, 7))
            ts += int(rng.choice([0, 1, 5, 20]))
            stamps = (ts - rng.integers(0, 30, n)).tolist()
            stamps[int(rng.integers(n))] = ts
            values = [b"v%d-" % (offset + i) + bytes(int(rng.integers(0, 40))) for i in range(n)]
            kind = k % 10
            if kind == 7:
                raw = kbatch.encode(values, timestamps=stamps, base_offset=offset, magic=1,
                                    compression=str(rng.choice(["none", "gzip"])))
            elif kind == 9 and k < 30:
                raw = kbatch.encode(values, base_offset=offset, magic=0)
            else:
                raw = kbatch.encode(values, timestamps=stamps, base_offset=offset,
                                    compression=str(rng.choice(["none", "gzip", "snappy", "lz4", "zstd"])))
            offset = w.append(raw)
    return root / "p-0"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Path]]:
    """(partition with indexes, the same without any index file) for two seeds."""
    out = []
    for seed in (1, 2):
        root = tmp_path_factory.mktemp(f"log{seed}")
        part = build_log(root / "with", seed)
        bare = root / "bare" / part.name
        shutil.copytree(part, bare)
        for p in bare.glob("*index"):
            p.unlink()
        assert len(list(part.glob("*.log"))) >= 4
        out.append((part, bare))
    return out


def reads(path: Path, starts: list[int], stamps: list[int]) -> list[object]:
    """Everything a reader can ask, as plain values."""
    log = open_log(path)
    got: list[object] = []
    for s in starts:
        t = log.read(start_offset=s)
        got.append((t.records["offset"].tolist(), t.values()))
        got.append(log.read(start_offset=s, end_offset=s + 7).records["offset"].tolist())
        got.append([t.records["offset"].tolist() for t in log.iter_tables(start_offset=s, chunk_bytes=300)])
    for ts in stamps:
        got.append(log.offset_for_timestamp(ts))
        t = log.read(start_timestamp=ts, end_timestamp=ts + 40)
        got.append((t.records["offset"].tolist(), t.records["timestamp"].tolist()))
        got.append(log.read(start_timestamp=ts, max_records=3).records["offset"].tolist())
    got.append(log.next_offset)
    got.append([s.max_timestamp() for s in log.segments])
    got.append(log.scan().tolist())
    assert not log.skipped
    return got


def test_intact_indexes_are_used_without_notes(logs: list[tuple[Path, Path]]) -> None:
    for part, bare in logs:
        log = open_log(part)
        assert all(s.index is not None and len(s.index) for s in log.segments)
        assert reads(part, list(range(0, log.next_offset + 2, 3)), list(range(990, 1500, 7))) == reads(
            bare, list(range(0, log.next_offset + 2, 3)), list(range(990, 1500, 7)))
        for s in log.segments:
            for offset in range(s.base_offset, s.next_offset):
                s.position_for(offset)
            for ts in range(990, 1500, 3):
                s.timestamp_position(ts)
        assert not log.notes
        assert all(s.index is not None and s.timeindex is not None for s in log.segments)


DAMAGE = st.tuples(
    st.sampled_from([".index", ".timeindex"]),
    st.integers(0, 99),  # segment
    st.integers(0, 99),  # entry
    st.sampled_from(["flip", "shift", "eof", "swap", "copy"]),
    st.integers(0, 63),  # bit / shift / field chooser
)


def damage(part: Path, item: tuple[str, int, int, str, int]) -> None:
    suffix, seg, entry, how, n = item
    files = sorted(p for p in part.glob("*" + suffix) if p.stat().st_size)
    path = files[seg % len(files)]
    dtype = OFFSET_INDEX_DTYPE if suffix == ".index" else TIME_INDEX_DTYPE
    e = np.fromfile(path, dtype=dtype)
    k = entry % len(e)
    fields = list(dtype.names or ())
    if how == "flip":  # one bit of one field
        field = fields[n % len(fields)]
        width = dtype[field].itemsize * 8
        bit = (n * 7) % (width - 1)  # never the sign bit: negative entries are refused whole
        e[field][k] = int(e[field][k]) ^ (1 << bit)
    elif how == "shift":  # the position 1-8 bytes into its batch, or the timestamp/offset off by a bit
        field = "position" if suffix == ".index" else fields[n % 2]
        e[field][k] = int(e[field][k]) + 1 + n % 8
    elif how == "eof":  # past the end of the .log
        size = path.with_suffix(".log").stat().st_size
        field = "position" if suffix == ".index" else "relative_offset"
        e[field][k] = size + n if suffix == ".index" else int(e[field][k]) + 1000 + n
    elif how == "swap" and len(e) > 1:  # out of order
        j = (k + 1) % len(e)
        e[[k, j]] = e[[j, k]]
    elif how == "copy" and len(e) > 1:  # an entry repeated from its neighbour
        e[k] = e[(k + 1) % len(e)]
    e.tofile(path)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.integers(0, 1),
    items=st.lists(DAMAGE, min_size=1, max_size=6),
    starts=st.lists(st.integers(0, 360), min_size=1, max_size=4),
    stamps=st.lists(st.integers(990, 1500), min_size=1, max_size=4),
)
def test_any_read_equals_the_read_without_indexes(
    logs: list[tuple[Path, Path]], tmp_path_factory: pytest.TempPathFactory, which: int,
    items: list[tuple[str, int, int, str, int]], starts: list[int], stamps: list[int],
) -> None:
    part, bare = logs[which]
    copy = tmp_path_factory.mktemp("damaged") / part.name
    shutil.copytree(part, copy)
    for item in items:
        damage(copy, item)
    try:
        assert reads(copy, starts, stamps) == reads(bare, starts, stamps)
    finally:
        shutil.rmtree(copy.parent)


# ---------------------------------------------------------------------------------------------
# Real broker segments (their index files were not kept: built here by LogWriter, which writes
# the entries Kafka's recovery writes)

REAL = sorted(p for p in REAL_LOGS.glob("*/*/*.log") if p.stat().st_size) if REAL_LOGS.is_dir() else []


@pytest.mark.skipif(not REAL, reason=f"no real logs at {REAL_LOGS}")
@pytest.mark.parametrize("segment", REAL, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in REAL])
def test_real_segment_with_a_shifted_middle_entry(segment: Path, tmp_path: Path) -> None:
    with LogWriter(tmp_path / "with", "r", 0, index_interval_bytes=64, segment_bytes=1 << 30) as w:
        w.append(segment.read_bytes())
    part = tmp_path / "with" / "r-0"
    log_file = next(part.glob("*.log"))
    assert log_file.read_bytes() == segment.read_bytes()
    bare = tmp_path / "bare" / "r-0"
    shutil.copytree(part, bare)
    for p in bare.glob("*index"):
        p.unlink()
    log = open_log(bare)
    offsets = log.read().records["offset"].tolist()
    stamps = sorted(set(log.read().records["timestamp"].tolist()))
    starts = [*offsets[:: max(1, len(offsets) // 8)], offsets[-1] + 1]
    probes = [*stamps[:: max(1, len(stamps) // 8)], stamps[-1] + 1]
    want = reads(bare, starts, probes)
    assert reads(part, starts, probes) == want
    assert not open_log(part).notes
    index = log_file.with_suffix(".index")
    entries = np.fromfile(index, dtype=OFFSET_INDEX_DTYPE)
    k = len(entries) // 2
    for shift in range(1, 9):
        shifted = entries.copy()
        shifted["position"][k] += shift
        shifted.tofile(index)
        assert reads(part, starts, probes) == want, shift
