"""The scans' time index (``kbatch.log._timeindex``): each batch's least and greatest record timestamp,
kept per segment in a cache folder. A scan with it gives exactly the eager read filtered, whatever the
logs (producer clocks out of step: records out of order inside and across batches) and whatever
became of the index files (stale, truncated, another segment's, damaged): those are noted and
never used."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.scan_roots import eager, random_log, window

import kbatch
from kbatch._wire import BASE_TIMESTAMP_OFFSET, BATCH_OVERHEAD
from kbatch.log import LogWriter, ScanStats, open_log
from kbatch.log._timeindex import ENTRY_DTYPE, HEADER, TimeIndexes, decode, default_index_dir

CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]


def jittered_log(root: Path, seed: int, batches: int) -> Path:
    """A partition written by producers whose clocks are out of step (up to 2 s apart) and jitter
    (up to 300 ms per record), so records are out of order inside and across batches; codecs
    mixed, some LogAppendTime batches, small segments."""
    rng = np.random.default_rng(seed)
    skews = rng.integers(-2000, 2001, 4)
    offset = 0
    with LogWriter(root, "j", 0, segment_bytes=int(rng.integers(500, 3000)), index_interval_bytes=200) as w:
        for b in range(batches):
            n = int(rng.integers(1, 12))
            producer = int(rng.integers(len(skews)))
            now = 100_000 + 250 * b + int(skews[producer])
            stamps = (now + rng.integers(-300, 301, n)).clip(0).tolist()
            stamp = "log_append" if rng.random() < 0.1 else "create"
            raw = kbatch.encode([b"r%d" % (offset + i) for i in range(n)], timestamps=stamps, base_offset=offset,
                                timestamp_type=stamp, compression=str(rng.choice(CODECS)))
            offset = w.append(raw)
    return root / "j-0"


def rows(table) -> list[tuple]:
    ts = [v // 1000 for v in table.column("timestamp").cast("int64").to_pylist()]
    return list(zip(table.column("offset").to_pylist(), ts, table.column("value").to_pylist(), strict=True))


def expected(log, terms, iso: str = "read_uncommitted") -> list[tuple]:
    return [(r[2], r[3], r[4]) for r in eager([log], terms, iso)]


def scan(part: Path, terms, index_dir: Path, columns=("offset", "timestamp", "value"), **kw):
    """(rows, stats, the log) of a scan of ``part`` freshly opened."""
    log = open_log(part)
    stats = ScanStats()
    table = log.scan_records([*columns], terms, stats=stats, index_dir=index_dir, **kw).read_all()
    got = [r[: len(columns)] for r in rows(table.append_column("value", table.column("offset")) if
                                             "value" not in columns else table)]
    return got, stats, log


def index_files(log, index_dir: Path) -> list[Path]:
    ix = TimeIndexes(index_dir)
    return [ix.file_for(seg, seg.identity().key) for seg in log.segments]


def tamper(files: list[Path], how: str, rng: np.random.Generator) -> list[Path]:
    """Damage one index file ``how``; the files changed."""
    present = [f for f in files if f.exists()]
    if not present:
        return []
    f = present[int(rng.integers(len(present)))]
    raw = bytearray(f.read_bytes())
    if how == "truncated":
        f.write_bytes(bytes(raw[: int(rng.integers(0, len(raw)))]))
    elif how == "flipped":
        at = int(rng.integers(len(raw)))
        raw[at] ^= 1 << int(rng.integers(8))
        f.write_bytes(bytes(raw))
    elif how == "crc":
        struct.pack_into("<I", raw, HEADER.size - 12, struct.unpack_from("<I", raw, HEADER.size - 12)[0] ^ 0x5A5A)
        f.write_bytes(bytes(raw))
    elif how == "another":
        other = [g for g in present if g != f]
        if not other:
            return []
        shutil.copyfile(other[int(rng.integers(len(other)))], f)
    return [f]


def shift_timestamps(part: Path, rng: np.random.Generator) -> Path | None:
    """Rewrite one v2 batch (not a segment's first) in place, its records' timestamps moved by
    hours (baseTimestamp and maxTimestamp, CRC made to match): same size, same first batch; the
    file's modification time moves on. The segment changed (None when no such batch)."""
    from crc32c import crc32c

    from kbatch._wire import ATTRIBUTES_OFFSET, CRC_OFFSET, MAX_TIMESTAMP_OFFSET

    segs = sorted(part.glob("*.log"))
    picks = []
    for seg in segs:
        heads = kbatch.codec._core.scan(seg.read_bytes())[0]
        picks += [(seg, int(h["position"])) for h in heads[1:] if h["magic"] == 2]
    if not picks:
        return None
    seg, at = picks[int(rng.integers(len(picks)))]
    raw = bytearray(seg.read_bytes())
    delta = int(rng.choice([-1, 1])) * 3_600_000
    for off in (BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET):
        struct.pack_into(">q", raw, at + off, struct.unpack_from(">q", raw, at + off)[0] + delta)
    length = struct.unpack_from(">i", raw, at + 8)[0]
    struct.pack_into(">I", raw, at + CRC_OFFSET, crc32c(bytes(raw[at + ATTRIBUTES_OFFSET : at + 12 + length])))
    st = seg.stat()
    seg.write_bytes(bytes(raw))
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    return seg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), family=st.sampled_from(["jittered", "random"]),
       batches=st.integers(1, 60), lo=st.integers(95_000, 120_000), width=st.integers(0, 4000),
       which=st.sampled_from(["both", "lo", "hi"]), lo2=st.integers(95_000, 120_000),
       walked=st.booleans(), how=st.sampled_from(["truncated", "flipped", "crc", "another", "changed"]),
       iso=st.sampled_from(["read_uncommitted", "read_committed"]))
def test_a_scan_with_the_index_equals_the_eager_read_filtered(
        tmp_path_factory: pytest.TempPathFactory, seed: int, family: str, batches: int, lo: int, width: int,
        which: str, lo2: int, walked: bool, how: str, iso: str) -> None:
    top = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    if family == "jittered":  # times ~97,700 .. 117,300
        part = jittered_log(top, seed, batches)
    else:  # legacy message sets, transactions, compaction gaps, every codec; times ~970 .. 2,200
        part = random_log(top, seed, batches=batches)
        lo, lo2, width = 900 + (lo - 95_000) % 1500, 900 + (lo2 - 95_000) % 1500, width // 8
    index_dir = top / "index"
    columns = ("offset", "timestamp") if walked else ("offset", "timestamp", "value")
    terms = window(lo, width, which)
    log = open_log(part)
    want = [r[: len(columns)] for r in expected(log, terms, iso)]
    # the first scan builds the index, the next ones use it; without it: the same rows
    first, _, _ = scan(part, terms, index_dir, columns, isolation_level=iso)
    again, stats, _ = scan(part, terms, index_dir, columns, isolation_level=iso)
    plain, plain_stats, _ = scan(part, terms, index_dir, columns, index=False, isolation_level=iso)
    assert first == again == plain == want
    assert plain_stats.indexes_used == plain_stats.indexes_written == 0
    assert stats.indexes_written == 0  # (nothing new learned)
    # another window on the same index
    terms2 = window(lo2, width, which)
    want2 = [r[: len(columns)] for r in expected(log, terms2, iso)]
    assert scan(part, terms2, index_dir, columns, isolation_level=iso)[0] == want2
    # a lying or stale index file is noted and never used
    rng = np.random.default_rng(seed)
    nothing = which == "both" and width == 0  # (an empty window reads no segment: nothing to note)
    if how == "changed":
        files = dict(zip([s.path for s in log.segments], index_files(log, index_dir), strict=True))
        changed = shift_timestamps(part, rng)
        if changed is None:
            return
        had = files[changed].exists()  # (a segment every scan skipped whole by its headers has none)
        log = open_log(part)
        want = [r[: len(columns)] for r in expected(log, terms, iso)]
        got, stats, log = scan(part, terms, index_dir, columns, isolation_level=iso)
        assert got == want
        assert nothing or not had or any("stale" in n for n in log.notes), log.notes
    else:
        files = tamper(index_files(log, index_dir), how, rng)
        if not files:
            return
        got, stats, log = scan(part, terms, index_dir, columns, isolation_level=iso)
        assert got == want
        assert nothing or any("not used" in n for n in log.notes), log.notes
    # written anew, and right again
    assert scan(part, terms, index_dir, columns, isolation_level=iso)[0] == want
    want2 = [r[: len(columns)] for r in expected(open_log(part), terms2, iso)]
    assert scan(part, terms2, index_dir, columns, isolation_level=iso)[0] == want2


def day_log(root: Path, batches: int = 200) -> Path:
    """Batches of 20 records, 10 s apart, jittered by up to 3 s: out of order inside each batch."""
    rng = np.random.default_rng(3)
    with LogWriter(root, "d", 0, segment_bytes=20_000) as w:
        for b in range(batches):
            stamps = (10_000 * b + rng.integers(-3000, 3001, 20)).clip(0).tolist()
            w.append(kbatch.encode([b"x" * 40] * 20, base_offset=20 * b, timestamps=stamps, compression="lz4"))
    return root / "d-0"


def test_the_second_scan_reads_only_the_window(tmp_path: Path) -> None:
    part = day_log(tmp_path)
    index_dir = tmp_path / "index"
    terms = [("timestamp", ">=", 1_000_000), ("timestamp", "<", 1_050_000)]  # batches ~100..105
    log = open_log(part)
    want = expected(log, terms)
    got, first, _ = scan(part, terms, index_dir)
    # (a local segment skipped whole by its headers gets none: its header scan is as cheap)
    assert got == want and first.indexes_written == len(log.segments) - first.segments_skipped > 0
    assert first.batches_skipped_by_index == 0 and first.indexes_used == 0
    got, second, _ = scan(part, terms, index_dir)
    assert got == want
    assert second.indexes_used > 0 and second.indexes_written == 0
    # only the batches the window reaches are framed: every other one the index rules out
    assert second.batches_framed <= 10 < second.batches_skipped_by_index
    assert second.batches_framed + second.batches_skipped_by_index <= 200
    assert second.bytes_decoded + second.bytes_walked < first.bytes_decoded + first.bytes_walked
    # index=False: neither read nor written
    got, off, _ = scan(part, terms, tmp_path / "elsewhere", index=False)
    assert got == want and off.indexes_used == off.indexes_written == 0
    assert not (tmp_path / "elsewhere").exists()


def test_a_timestamp_bound_alone_is_needed(tmp_path: Path) -> None:
    part = day_log(tmp_path, batches=20)
    index_dir = tmp_path / "index"
    log = open_log(part)
    stats = ScanStats()
    log.scan_records(["offset"], [("offset", ">=", 100)], stats=stats, index_dir=index_dir).read_all()
    assert stats.indexes_used == stats.indexes_written == 0 and not index_dir.exists()


def test_an_unwritable_folder_means_no_index(tmp_path: Path) -> None:
    part = day_log(tmp_path, batches=30)
    (tmp_path / "file").write_text("x")
    index_dir = tmp_path / "file" / "below"  # (a folder under a file: never writable, even as root)
    terms = [("timestamp", ">=", 100_000), ("timestamp", "<", 150_000)]
    log = open_log(part)
    stats = ScanStats()
    got = log.scan_records(["offset", "timestamp", "value"], terms, stats=stats, index_dir=index_dir).read_all()
    assert rows(got) == expected(log, terms)
    assert stats.indexes_written == 0
    assert sum("cannot be written" in n for n in log.notes) == 1  # once per scan


def test_the_index_folder_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KBATCH_INDEX_DIR", str(tmp_path / "mine"))
    assert default_index_dir() == tmp_path / "mine"
    monkeypatch.delenv("KBATCH_INDEX_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert default_index_dir() == tmp_path / "cache" / "kbatch"
    # the env variable is where scans write by default
    part = day_log(tmp_path / "logs", batches=10)
    monkeypatch.setenv("KBATCH_INDEX_DIR", str(tmp_path / "env"))
    open_log(part).scan_records(["offset"], [("timestamp", "<", 50_000)]).read_all()
    assert list((tmp_path / "env").glob("*.tix"))
    assert not list(part.glob("*.tix"))  # never beside the segments


def test_an_index_file_names_its_segment(tmp_path: Path) -> None:
    part = day_log(tmp_path, batches=20)
    index_dir = tmp_path / "index"
    scan(part, [("timestamp", "<", 60_000)], index_dir)
    log = open_log(part)
    (f,) = index_files(log, index_dir)[:1]
    seg = log.segments[0]
    ident = seg.identity()
    entries, full = decode(f.read_bytes(), ident)
    assert entries.dtype == ENTRY_DTYPE and not full
    heads = seg.scan()
    assert entries["position"].tolist() == heads["position"].tolist()
    # the identity: the real path, size, time and the first batch's header
    assert ident.key == os.path.realpath(seg.path) and ident.size == seg.size
    assert ident.head == seg.path.read_bytes()[:BATCH_OVERHEAD]
    # the file is written atomically: no temporary file left
    assert sorted(p.suffix for p in index_dir.iterdir()) == [".tix"] * len(list(index_dir.iterdir()))


def test_a_segment_grown_since_opened_is_not_trusted(tmp_path: Path) -> None:
    part = day_log(tmp_path, batches=10)
    index_dir = tmp_path / "index"
    terms = [("timestamp", ">=", 40_000)]
    log = open_log(part)
    with LogWriter(tmp_path, "d", 0, segment_bytes=20_000) as w:
        w.append(kbatch.encode([b"late"], base_offset=200, timestamps=[45_000]))
    # the LogDir opened before the append still reads what it saw; its segment's identity has changed
    stats = ScanStats()
    got = log.scan_records(["offset"], terms, stats=stats, index_dir=index_dir).read_all()
    assert 200 not in got.column("offset").to_pylist()
    assert any("changed since it was opened" in n for n in log.notes)
    got = open_log(part).scan_records(["offset"], terms, index_dir=index_dir).read_all()
    assert 200 in got.column("offset").to_pylist()


def test_an_index_that_disagrees_with_the_batches_it_reads_is_dropped(tmp_path: Path) -> None:
    from kbatch.log._timeindex import encode

    part = day_log(tmp_path, batches=40)
    index_dir = tmp_path / "index"
    terms = [("timestamp", ">=", 100_000), ("timestamp", "<", 130_000)]  # batches ~10..13
    want = expected(open_log(part), terms)
    scan(part, terms, index_dir)
    log = open_log(part)
    seg = log.segments[0]
    f = index_files(log, index_dir)[0]
    entries, full = decode(f.read_bytes(), seg.identity())
    inside = np.flatnonzero((entries["least"] < 130_000) & (entries["greatest"] >= 100_000))
    assert len(inside)
    entries["base_offset"][inside[0]] += 1  # a well-formed, checksummed file that lies about a batch read
    f.write_bytes(encode(seg.identity(), entries, full))
    got, stats, log = scan(part, terms, index_dir)
    assert got == want
    assert any("does not match the batches" in n for n in log.notes), log.notes
    assert stats.indexes_written >= 1  # written anew from what the scan framed
    got, stats, log = scan(part, terms, index_dir)
    assert got == want and not any("time index" in n for n in log.notes)


def test_the_polars_and_duckdb_scans_take_the_index(tmp_path: Path) -> None:
    import datetime as dt

    pl = pytest.importorskip("polars")
    from kbatch.polars import scan_kafka_log

    part = day_log(tmp_path, batches=60)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    lo, hi = epoch + dt.timedelta(milliseconds=200_000), epoch + dt.timedelta(milliseconds=260_000)
    want = [r[0] for r in expected(open_log(part), [("timestamp", ">=", 200_000), ("timestamp", "<", 260_000)])]

    def offsets(index_dir: Path, **kw) -> tuple[list[int], ScanStats]:
        stats = ScanStats()
        frame = scan_kafka_log(open_log(part), stats=stats, index_dir=index_dir, **kw)
        got = frame.filter((pl.col("timestamp") >= lo) & (pl.col("timestamp") < hi)).select("offset").collect()
        return got["offset"].to_list(), stats

    got, off = offsets(tmp_path / "off", index=False)
    assert got == want and off.indexes_used == off.indexes_written == 0 and not (tmp_path / "off").exists()
    got, first = offsets(tmp_path / "pl")
    got2, second = offsets(tmp_path / "pl")
    assert got == got2 == want and first.indexes_written > 0 and second.batches_skipped_by_index > 0
    duckdb = pytest.importorskip("duckdb")
    from kbatch.duckdb import PUSHDOWN, register

    con = duckdb.connect()
    stats = ScanStats()
    register(con, "d", open_log(part), index_dir=tmp_path / "pl", stats=stats)
    rows = con.sql(f"SELECT \"offset\" FROM d WHERE timestamp >= TIMESTAMPTZ '{lo.isoformat()}' "
                   f"AND timestamp < TIMESTAMPTZ '{hi.isoformat()}' ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == want
    assert stats.batches_skipped_by_index > 0 or not PUSHDOWN
