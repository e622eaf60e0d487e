"""Log directories: real broker logs, segments built from other clients' batches, seeks, damage.

Indexes are checked against an independent re-implementation of Kafka's segment recovery
(``LogSegment.recover``) written here with ``struct`` over the file bytes.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from conftest import REAL_LOGS, load_vectors, vector_params
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

import kbatch
from kbatch.codec._core import scan
from kbatch.errors import CorruptRecordError, CRCError, KBatchError
from kbatch.log import (
    LogWriter,
    Segment,
    open_log,
    open_logs,
)

# ---------------------------------------------------------------------------------------------
# An independent model of what a broker writes: Kafka's LogSegment.recover, in plain Python.


def frames(raw: bytes) -> list[tuple[int, int, int, int, int]]:
    """(position, size, base offset, last offset, max timestamp) of each complete batch."""
    out, pos = [], 0
    while len(raw) - pos >= 17:
        base, length = struct.unpack_from(">qi", raw, pos)
        if len(raw) - pos - 12 < length:
            break
        magic = raw[pos + 16]
        if magic == 2:
            (delta,) = struct.unpack_from(">i", raw, pos + 23)
            (max_ts,) = struct.unpack_from(">q", raw, pos + 35)
            last = base + delta
        else:
            last = base
            max_ts = struct.unpack_from(">q", raw, pos + 18)[0] if magic == 1 else -1
        out.append((pos, 12 + length, base, last, max_ts))
        pos += 12 + length
    return out


def kafka_indexes(raw: bytes, base_offset: int, interval: int = 4096) -> tuple[bytes, bytes]:
    """The .index and .timeindex bytes Kafka's recovery builds for a segment."""
    index, time = b"", []
    valid = last_entry = 0
    max_ts, max_ts_offset = -1, -1
    for _pos, size, _base, last, ts in frames(raw):
        if ts > max_ts:
            max_ts, max_ts_offset = ts, last
        if valid - last_entry > interval:
            index += struct.pack(">ii", last - base_offset, valid)
            if max_ts > (time[-1][0] if time else -1):
                time.append((max_ts, max_ts_offset - base_offset))
            last_entry = valid
        valid += size
    if max_ts > (time[-1][0] if time else -1):
        time.append((max_ts, max_ts_offset - base_offset))
    return index, b"".join(struct.pack(">qi", t, o) for t, o in time)


# ---------------------------------------------------------------------------------------------
# Batches from other implementations


def client_batches(seed: int = 1, n_batches: int = 60) -> list[tuple[bytes, int, int]]:
    """Batches built by aiokafka and kafka-python (v2, all their codecs) and aiokafka legacy v1."""
    rng = random.Random(seed)
    out: list[tuple[bytes, int, int]] = []
    ts = 1_600_000_000_000
    for k in range(n_batches):
        kind = k % 4
        n = rng.randint(1, 30)
        stamps = [ts + rng.randint(-50, 50) for _ in range(n)]  # producer clocks are not monotonic
        ts += 40
        if kind == 3:
            builder = AioLegacyBuilder(1, rng.choice([0, 1, 2, 3]), 1 << 20)
            for i in range(n):
                builder.append(i, stamps[i], b"key%d" % i, b"legacy value %d" % i)
        else:
            cls = AioBuilder if kind < 2 else KafkaPythonBuilder
            codec = rng.choice([0, 1, 2, 3, 4])
            builder = cls(2, codec, 0, 42 if kind == 1 else -1, 0 if kind == 1 else -1,
                          k * 100 if kind == 1 else -1, 1 << 20)
            for i in range(n):
                value = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
                builder.append(i, stamps[i], None if i % 5 == 0 else b"k%d" % i, value,
                               [(f"h{j}", b"v") for j in range(i % 3)])
        out.append((bytes(builder.build()), n, max(stamps)))
    return out


@pytest.fixture(scope="module")
def client_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A partition written by LogWriter from the client batches; returns (dir, all bytes renumbered)."""
    root = tmp_path_factory.mktemp("clients")
    joined = bytearray()
    with LogWriter(root, "clients", 0, segment_bytes=32 << 10, index_interval_bytes=1024) as w:
        for raw, n, largest in client_batches():
            before = w.next_offset
            epoch = 3 if before > 500 else 1
            w.append(raw, assign_offsets=True, leader_epoch=epoch)
            # what a broker writes: the same bytes at the assigned offsets (outside the CRCs)
            if raw[16] == 2:
                joined += struct.pack(">q", before) + raw[8:12] + struct.pack(">i", epoch) + raw[16:]
                continue
            for pos, size, *_ in frames(raw):
                compressed = raw[pos + 17] & 7
                last = before + (n - 1 if compressed else 0)
                entry = bytearray(raw[pos : pos + size])
                struct.pack_into(">q", entry, 0, last)
                if compressed:  # the broker stamps the wrapper with the largest inner timestamp
                    struct.pack_into(">q", entry, 18, largest)
                    struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))
                joined += entry
                before = last + 1
    return w.path, bytes(joined)


def linear(path: Path) -> kbatch.RecordTable:
    """Every record, decoding the .log files back to back with kbatch.decode alone."""
    return kbatch.decode(b"".join(p.read_bytes() for p in sorted(path.glob("*.log"))))


# ---------------------------------------------------------------------------------------------
# Real broker logs


def real_dirs() -> list[Path]:
    if not REAL_LOGS.is_dir():
        return []
    return sorted(p for p in REAL_LOGS.glob("*/*") if p.is_dir())


@pytest.mark.skipif(not real_dirs(), reason=f"no real broker logs at {REAL_LOGS}")
@pytest.mark.parametrize("path", real_dirs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_broker_logs(path: Path) -> None:
    log = open_log(path)
    assert log.segments, "a partition directory has at least one segment"
    heads = log.scan()
    table = log.read(verify_crc=True)
    assert len(heads) == len(table.batches) > 0
    assert np.array_equal(heads["base_offset"], table.batches["base_offset"])
    assert np.array_equal(heads["crc"], table.batches["crc"])
    for seg in log.segments:
        assert seg.tail is None and seg.valid_bytes == seg.size
    last = heads["base_offset"] + heads["last_offset_delta"]
    assert np.array_equal(heads["base_offset"][1:], last[:-1] + 1), "batches follow on"
    # where a batch holds as many records as its offset range, its offsets are contiguous
    dense = heads["record_count"] == heads["last_offset_delta"] + 1
    for k in np.flatnonzero(dense & ~heads["is_control"]).tolist():
        offs = table.records["offset"][table.records["batch"] == k]
        assert offs.tolist() == list(range(int(heads["base_offset"][k]), int(last[k]) + 1))
    assert log.next_offset == int(last[-1]) + 1
    if (path / "leader-epoch-checkpoint").exists():
        assert log.leader_epochs and log.leader_epochs[0][1] == 0
    # seeking into the middle equals slicing the linear read
    mid = int(table.records["offset"][len(table) // 2])
    assert log.read(start_offset=mid).records["offset"].tolist() == [
        o for o in table.records["offset"].tolist() if o >= mid
    ]


# ---------------------------------------------------------------------------------------------
# Segments from other clients, written by LogWriter


def test_writer_layout_matches_kafka_recovery(client_log: tuple[Path, bytes]) -> None:
    path, joined = client_log
    logs = sorted(path.glob("*.log"))
    assert len(logs) > 3
    assert b"".join(p.read_bytes() for p in logs) == joined
    for p in logs:
        base = int(p.name[:20])
        raw = p.read_bytes()
        assert frames(raw)[0][2] <= base
        index, time = kafka_indexes(raw, base, interval=1024)
        assert p.with_suffix(".index").read_bytes() == index
        assert p.with_suffix(".timeindex").read_bytes() == time
        assert not p.with_suffix(".txnindex").exists()
    assert (path / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    epochs = (path / "leader-epoch-checkpoint").read_text().split("\n")
    assert epochs[:2] == ["0", "2"] and epochs[2] == "1 0" and epochs[3].startswith("3 ")
    log = open_log(path)
    assert log.leader_epochs == [(1, 0), (3, int(epochs[3].split()[1]))]
    assert log.topic == "clients" and log.partition == 0 and log.topic_id and len(log.topic_id) == 22
    assert not log.notes


def test_read_back_equals_decode(client_log: tuple[Path, bytes]) -> None:
    path, joined = client_log
    log = open_log(path)
    expect = kbatch.decode(joined)
    got = log.read()
    assert got.records["offset"].tolist() == expect.records["offset"].tolist()
    assert got.records["offset"].tolist() == list(range(log.next_offset))
    assert got.values() == expect.values() and got.keys() == expect.keys()
    assert got.records["timestamp"].tolist() == expect.records["timestamp"].tolist()
    assert [got.headers(i) for i in range(0, len(got), 7)] == [expect.headers(i) for i in range(0, len(got), 7)]
    heads = log.scan()
    assert heads[["base_offset", "last_offset_delta", "magic", "crc", "max_timestamp"]].tolist() == \
        expect.batches[["base_offset", "last_offset_delta", "magic", "crc", "max_timestamp"]].tolist()
    v2 = heads["magic"] == 2
    assert heads["record_count"][v2].tolist() == expect.batches["record_count"][v2].tolist()


def _variants(path: Path, tmp_path: Path) -> list[Path]:
    """The same partition with its indexes, without them, and with garbage in them."""
    import shutil

    bare = tmp_path / "bare" / path.name
    shutil.copytree(path, bare)
    for p in bare.glob("*index"):
        p.unlink()
    bad = tmp_path / "bad" / path.name
    shutil.copytree(path, bad)
    for p in bad.glob("*.index"):
        if p.stat().st_size:
            p.write_bytes(struct.pack(">ii", 5, 3) * 4)
    for p in bad.glob("*.timeindex"):
        if p.stat().st_size:
            p.write_bytes(struct.pack(">qi", 9, 1) + struct.pack(">qi", 3, 0))
    return [path, bare, bad]


def test_seeks_equal_linear_scans(client_log: tuple[Path, bytes], tmp_path: Path) -> None:
    path, _ = client_log
    everything = linear(path)
    offsets = everything.records["offset"]
    stamps = everything.records["timestamp"]
    rng = random.Random(7)
    for variant in _variants(path, tmp_path):
        log = open_log(variant)
        assert not log.notes  # indexes are read (and checked) on a segment's first seek
        for start in rng.sample(range(int(offsets[-1]) + 2), 25):
            end = start + rng.randint(0, 400)
            got = log.read(start_offset=start, end_offset=end)
            want = (offsets >= start) & (offsets < end)
            assert got.records["offset"].tolist() == offsets[want].tolist(), (variant, start, end)
            assert got.values() == [v for v, k in zip(everything.values(), want, strict=True) if k]
        lo_ts, hi_ts = int(stamps.min()), int(stamps.max())
        for target in [lo_ts - 1, hi_ts + 1, *rng.sample(range(lo_ts, hi_ts), 25)]:
            hits = np.flatnonzero(stamps >= target)
            expect = int(offsets[hits[0]]) if len(hits) else None
            assert log.offset_for_timestamp(target) == expect, (variant, target)
            got = log.read(start_timestamp=target, max_records=5)
            assert got.records["offset"].tolist() == ([] if expect is None else offsets[hits[0] : hits[0] + 5].tolist())
        lo, hi = int(stamps.min()) + 500, int(stamps.min()) + 1500
        a, b = np.flatnonzero(stamps >= lo)[0], np.flatnonzero(stamps >= hi)[0]
        assert log.read(start_timestamp=lo, end_timestamp=hi).records["offset"].tolist() == offsets[a:b].tolist()
        if variant.parent.name == "bad":
            assert any("inconsistent" in n for n in log.notes)


def test_iter_tables_is_chunked_and_zero_copy(client_log: tuple[Path, bytes]) -> None:
    path, _ = client_log
    log = open_log(path)
    tables = list(log.iter_tables(chunk_bytes=4096))
    assert len(tables) > 10
    largest = max(int(b) for b in log.scan()["batch_length"]) + 12
    assert all(t.consumed_bytes < 4096 + largest for t in tables)
    assert [o for t in tables for o in t.records["offset"].tolist()] == list(range(log.next_offset))
    plain = [t for t in tables if not t.batches["compression"].any()]
    assert plain and all(isinstance(t.data, memoryview) for t in plain)
    assert sum(len(t) for t in log.iter_tables(max_records=123, chunk_bytes=2048)) == 123


# ---------------------------------------------------------------------------------------------
# Damage


def small_log(tmp_path: Path, batches: int = 20) -> Path:
    with LogWriter(tmp_path, "dmg", 0, segment_bytes=1 << 20) as w:
        for i in range(batches):
            w.append(kbatch.encode([b"value-%03d-%s" % (i, b"x" * 40)] * 3, timestamps=[1000 + i] * 3,
                                   base_offset=3 * i))
    return w.path


def test_truncated_tail_reads_complete_batches(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    seg_path = path / "00000000000000000000.log"
    raw = seg_path.read_bytes()
    last_pos = frames(raw)[-1][0]
    seg_path.write_bytes(raw[: last_pos + 30])
    log = open_log(path)
    table = log.read()
    assert len(table) == 19 * 3 and table.truncated
    assert log.segments[0].tail == (last_pos, 30)
    assert log.next_offset == 57
    assert len(log.scan()) == 19 and log.segments[0].valid_bytes == last_pos


def test_corrupt_batch_raises_with_file_and_position_or_is_skipped(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    seg_path = path / "00000000000000000000.log"
    raw = bytearray(seg_path.read_bytes())
    pos, size = frames(bytes(raw))[7][:2]
    raw[pos + 70] ^= 0xFF  # a value byte: the CRC no longer matches
    seg_path.write_bytes(raw)
    log = open_log(path)
    with pytest.raises(CRCError) as info:
        log.read()
    assert str(seg_path) in str(info.value) and info.value.batch_position == pos
    assert info.value.position == pos + 17
    assert len(info.value.partial) == 7 * 3
    table = log.read(on_corruption="skip")
    assert table.records["offset"].tolist() == [o for o in range(60) if not 21 <= o < 24]
    assert [(s.position, s.length) for s in log.skipped] == [(pos, size)]
    assert "crc" in log.skipped[0].reason.lower()


def test_broken_frame_is_resynchronised(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    seg_path = path / "00000000000000000000.log"
    raw = bytearray(seg_path.read_bytes())
    pos, size = frames(bytes(raw))[4][:2]
    raw[pos + 8 : pos + 12] = struct.pack(">i", 3)  # batchLength below any batch
    seg_path.write_bytes(raw)
    log = open_log(path)
    with pytest.raises(CorruptRecordError) as info:
        log.read()
    assert info.value.field == "batchLength" and info.value.position == pos + 8
    assert str(seg_path) in str(info.value)
    table = log.read(on_corruption="skip")
    assert table.records["offset"].tolist() == [o for o in range(60) if not 12 <= o < 15]
    assert [(s.position, s.length) for s in log.skipped] == [(pos, size)]
    with pytest.raises(CorruptRecordError):
        Segment(seg_path).scan()
    assert len(Segment(seg_path).scan("skip")) == 19


def test_skipped_files_and_directories(tmp_path: Path) -> None:
    path = small_log(tmp_path, batches=3)
    (path / "00000000000000000100.log.deleted").write_bytes(b"old")
    (path / "00000000000000000000.log.swap").write_bytes(b"")
    (tmp_path / "dmg-1.3f2a-delete").mkdir()
    (tmp_path / "dmg-2-future").mkdir()
    notes: list[str] = []
    logs = open_logs(tmp_path, notes=notes)
    assert [(d.topic, d.partition) for d in logs] == [("dmg", 0)]
    assert len(notes) == 2 and all("skipped" in n for n in notes)
    assert sum("skipped" in n for n in logs[0].notes) == 2
    assert len(logs[0].read()) == 9


def test_writer_rolls_and_keeps_offsets(tmp_path: Path) -> None:
    size = len(kbatch.encode([b"a", b"b"]))
    with LogWriter(tmp_path, "gap", 2, segment_bytes=2 * size) as w:
        for base in (0, 10, 12, 50):  # offset gaps, as after compaction
            w.append(kbatch.encode([b"a", b"b"], base_offset=base))
        with pytest.raises(ValueError, match="backwards"):
            w.append(kbatch.encode([b"late"], base_offset=3))
    log = open_log(w.path)
    assert [s.base_offset for s in log.segments] == [0, 12]
    assert log.read().records["offset"].tolist() == [0, 1, 10, 11, 12, 13, 50, 51]
    assert log.read(start_offset=5).records["offset"].tolist() == [10, 11, 12, 13, 50, 51]
    assert log.read(start_offset=14, end_offset=51).records["offset"].tolist() == [50]
    assert log.read(start_offset=52).records["offset"].tolist() == []
    assert log.next_offset == 52


def test_sample_root(tmp_path: Path) -> None:
    from kbatch.cli._sample import write_sample

    logs = write_sample(tmp_path)
    opened = {f"{d.topic}-{d.partition}": d for d in open_logs(tmp_path)}
    assert set(opened) == set(logs)
    for name, log in opened.items():
        table = log.read()
        assert len(table) > 0, name
        assert log.segments, name
    codecs = set(opened["orders-0"].scan()["compression"].tolist())
    assert codecs == {0, 1, 2, 3, 4}
    legacy = opened["legacy-0"]
    assert legacy.segments[0].scan()["magic"].tolist()[:2] == [0, 0]
    assert set(legacy.segments[-1].scan()["magic"].tolist()) == {2}
    assert legacy.read().records["offset"].tolist() == list(range(legacy.next_offset))
    users = opened["users-0"].scan()
    assert (users["record_count"] == 0).any() and users["has_delete_horizon"].any()
    offs = opened["users-0"].read().records["offset"]
    assert np.any(np.diff(offs) > 1)
    pay = opened["payments-0"]
    aborted, lso = pay.transactions()
    assert aborted and lso is not None
    committed = pay.read(isolation_level="read_committed")
    assert 0 < len(committed) < len(pay.read())
    assert committed.records["offset"].max() < lso
    assert list(pay.path.glob("*.txnindex"))
    assert (tmp_path / "meta.properties").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text().startswith("0\n6\n")


def test_legacy_crc_in_scan_matches_zlib(tmp_path: Path) -> None:
    from kbatch.codec._legacy import encode_legacy

    raw = encode_legacy([b"a", b"b"], magic=1, timestamps=[5, 6]) + encode_legacy([b"c"], magic=0, base_offset=2)
    with LogWriter(tmp_path, "old", 0) as w:
        w.append(raw)
    heads = open_log(w.path).scan()
    assert heads["magic"].tolist() == [1, 1, 0]
    for h, (pos, size, *_rest) in zip(heads, frames(raw), strict=True):
        assert int(h["crc"]) == zlib.crc32(raw[pos + 16 : pos + size])
    assert heads["max_timestamp"].tolist() == [5, 6, -1]
    buf = io.StringIO()
    assert buf.getvalue() == ""


def test_librdkafka_batches_through_a_written_log(tmp_path: Path) -> None:
    """Batches librdkafka built (through its in-process mock cluster) make a log like any other."""
    pytest.importorskip("confluent_kafka")
    kafka_mock = pytest.importorskip("support.kafka_mock")
    rng = random.Random(3)
    with kafka_mock.mock_cluster() as cluster:
        cluster.create_topic("rd")
        for codec in kafka_mock.CODECS:
            n = 40
            cluster.produce(
                "rd", [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))) for _ in range(n)],
                [b"key%d" % i for i in range(n)], compression=codec,
                headers=[[("codec", codec.encode())] for _ in range(n)],
                timestamps=[1_700_000_000_000 + rng.randint(0, 10_000) for _ in range(n)],
            )
        raw = kafka_mock.fetch_all(cluster.bootstrap, "rd")
    expect = kbatch.decode(raw)
    assert set(expect.batches["compression"].tolist()) == {0, 1, 2, 3, 4}
    with LogWriter(tmp_path, "rd", 0, segment_bytes=4 << 10, index_interval_bytes=512) as w:
        w.append(raw, assign_offsets=True)
    for p in sorted(w.path.glob("*.log")):
        index, time = kafka_indexes(p.read_bytes(), int(p.name[:20]), interval=512)
        assert p.with_suffix(".index").read_bytes() == index
        assert p.with_suffix(".timeindex").read_bytes() == time
    log = open_log(w.path)
    assert len(log.segments) > 2
    got = log.read()
    assert got.records["offset"].tolist() == list(range(len(expect)))
    assert got.values() == expect.values() and got.keys() == expect.keys()
    assert got.records["timestamp"].tolist() == expect.records["timestamp"].tolist()
    stamps, offsets = expect.records["timestamp"], got.records["offset"]
    for target in rng.sample(range(int(stamps.min()), int(stamps.max())), 10):
        assert log.offset_for_timestamp(target) == int(offsets[np.flatnonzero(stamps >= target)[0]])


# ---------------------------------------------------------------------------------------------
# kbatch.codec._core.scan: the batch headers Segment.scan and LogDir.transactions are built on

SCAN_FIELDS = [f for f in kbatch.BATCH_DTYPE.names if f != "first_record"]


def same_headers(rows: np.ndarray, batches: np.ndarray) -> None:
    """``scan`` rows equal decoded batch rows, in the fields scan fills."""
    assert len(rows) == len(batches)
    assert (rows["first_record"] == -1).all()
    for name in SCAN_FIELDS:
        want = batches[name].copy()
        if name == "record_count":  # unknown without decompressing a legacy wrapper
            want[(batches["magic"] < 2) & (batches["compression"] != 0)] = -1
        if name in ("control_type", "coordinator_epoch"):  # a compressed control batch is not read
            want[batches["compression"] != 0] = -1
        assert rows[name].tolist() == want.tolist(), name


@pytest.mark.parametrize("vector", vector_params())
def test_scan_matches_decode_on_vectors(vector: dict) -> None:
    data = bytes.fromhex(vector["hex"])
    rows, consumed, err = scan(data)
    try:
        table = kbatch.decode(data, verify_crc=vector.get("decode_options", {}).get("check_crc", True))
    except KBatchError as exc:
        assert not vector["expect"]["ok"] or not vector.get("decode_options", {}).get("check_crc", True)
        partial = getattr(exc, "partial", None)
        if partial is not None:
            same_headers(rows[: len(partial.batches)], partial.batches)
        return
    assert err is None and consumed == table.consumed_bytes
    same_headers(rows, table.batches)
    if vector["expect"]["ok"]:  # control types as the vector states them
        for row, b in zip(rows, vector["expect"]["batches"], strict=True):
            control = [r["control"] for r in b.get("records", [])[:1] if r.get("control")]
            if b.get("is_control") and b.get("compression") == 0 and control:
                assert (int(row["control_type"]), int(row["coordinator_epoch"])) == (
                    control[0]["type"], control[0]["coordinator_epoch"])
            else:
                assert int(row["control_type"]) == -1
    # from the second batch on: positions stay those of the whole buffer
    if len(rows) > 1:
        p = int(rows["position"][1])
        rest, c, e = scan(data, p)
        assert e is None and c == consumed - p
        assert rest.tobytes() == rows[1:].tobytes()
        few, c, e = scan(memoryview(data), p, p + int(rows["batch_length"][1]) + 12)
        assert e is None and few.tobytes() == rows[1:2].tobytes()


def scan_samples() -> list[bytes]:
    txn = kbatch.encode([b"t"], producer_id=4, producer_epoch=1, transactional=True)
    out = [
        txn
        + kbatch.encode_control("abort", 4, 1, base_offset=1, coordinator_epoch=77)
        + kbatch.encode([b"x" * 40] * 3, base_offset=2, compression="gzip", headers=[[("h", b"v")]] * 3)
        + kbatch.encode_control("commit", 9, 0, base_offset=5, coordinator_epoch=-3)
        + kbatch.encode([b"y"], base_offset=6, compression="lz4"),
    ]
    out += [bytes.fromhex(v["hex"]) for v in load_vectors()]
    return out


def test_scan_control_markers() -> None:
    data = scan_samples()[0]
    rows, consumed, err = scan(data)
    assert err is None and consumed == len(data)
    assert rows[["is_control", "control_type", "coordinator_epoch"]].tolist() == [
        (False, -1, -1), (True, 0, 77), (False, -1, -1), (True, 1, -3), (False, -1, -1)
    ]
    same_headers(rows, kbatch.decode(data).batches)
    # a compressed control batch: the header is read, the record is not
    packed = kbatch.codec._core.encode([b"\x00\x00\x00\x00\x00\x05"], [b"\x00\x00\x00\x01"], control=True,
                                 transactional=True, producer_id=3, producer_epoch=0, compression=1)
    rows, _, err = scan(packed)
    assert err is None and rows[["is_control", "control_type", "coordinator_epoch"]].tolist() == [(True, -1, -1)]
    assert kbatch.decode(packed).batches[["control_type", "coordinator_epoch"]].tolist() == [(1, 5)]
    with pytest.raises(ValueError):
        scan(data, len(data) + 1)
    with pytest.raises(ValueError):
        scan(data, -1)
    with pytest.raises(ValueError):
        scan(data, 5, 3)


def test_scan_truncated_corrupt_and_garbage_input() -> None:
    rng = random.Random(11)
    for data in scan_samples():
        full, _, err = scan(data)
        ends = (full["position"] + 12 + full["batch_length"]).tolist()
        for cut in range(len(data) + 1):
            rows, c, e = scan(data[:cut])
            assert c <= cut and (e is None or isinstance(e, CorruptRecordError))
            if err is None:  # an incomplete tail is no error: the complete batches before the cut
                assert e is None and rows["position"].tolist() == [p for p, end in zip(
                    full["position"].tolist(), ends, strict=True) if end <= cut]
        for _ in range(150):
            bad = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            rows, c, e = scan(bytes(bad))
            assert e is None or isinstance(e, CorruptRecordError)
            assert 0 <= c <= len(bad) and (rows["position"] + 12 + rows["batch_length"] <= len(bad)).all()
            if e is not None:
                assert c == e.batch_position <= e.position <= len(bad)
            try:
                table = kbatch.decode(bytes(bad), verify_crc=False)
            except (KBatchError, ValueError):
                continue
            assert e is None  # whatever decode accepts, scan accepts with the same headers
            same_headers(rows, table.batches)
    for n in list(range(80)) + [rng.randrange(100, 5000) for _ in range(200)]:
        junk = bytes(rng.randrange(256) for _ in range(n))
        start = rng.randrange(n + 1)
        rows, c, e = scan(junk, start, rng.choice([-1, rng.randrange(start, n + 1)]))
        assert e is None or isinstance(e, CorruptRecordError)
        assert (rows["position"] >= start).all() and (rows["position"] + 12 + rows["batch_length"] <= n).all()


# ---------------------------------------------------------------------------------------------
# No silent empties: a wrong folder is an error saying what is there, a real empty log is not


def test_open_log_of_a_root_says_use_open_logs(tmp_path):
    from support.layouts import backup_with_deeper_roots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(kbatch.LayoutError, match=r"is a log.dirs root \(holding orders: 1 partition\), not a "
                                                 r"partition directory: open its partitions with open_logs"):
        open_log(roots[0])
    with pytest.raises(kbatch.LayoutError, match="found Kafka logs under") as err:
        open_log(backup)
    assert err.value.deeper == [str(r) for r in roots] and "recursive=True" in str(err.value)
    (tmp_path / "notes").mkdir()
    with pytest.raises(kbatch.LayoutError, match="is not a partition directory"):
        open_log(tmp_path / "notes")


def test_open_logs_of_a_backup_names_the_roots_below(tmp_path):
    from support.layouts import backup_with_deeper_roots

    backup, roots = backup_with_deeper_roots(tmp_path)
    with pytest.raises(kbatch.LayoutError) as err:
        open_logs(backup)
    assert str(err.value) == (f"no partition directories in {backup}; found Kafka logs under {roots[0]}, {roots[1]}: "
                              f"pass one of them, or open_logs(..., recursive=True) to read every log below {backup}")
    assert isinstance(err.value, ValueError) and err.value.url == str(backup)
    assert len(open_logs(backup, recursive=True, replicas="all")) == 2  # what the message offers works
    pafs = pytest.importorskip("pyarrow.fs")
    with pytest.raises(kbatch.LayoutError, match="found Kafka logs under") as remote:
        open_logs(str(backup), filesystem=pafs.LocalFileSystem())
    assert len(remote.value.deeper) == 2
    with pytest.raises(kbatch.LayoutError, match=r"is a partition directory, not a log.dirs root: open it with"):
        open_logs(roots[0] / "orders-0")
    (tmp_path / "empty").mkdir()
    assert open_logs(tmp_path / "empty") == []  # nothing anywhere: an honest empty
    assert open_logs(roots[0], topics=["nope"]) == []


def test_misnamed_log_files_are_named(tmp_path):
    from support.layouts import partition_with_misnamed_logs

    part = partition_with_misnamed_logs(tmp_path / "a", with_segment=False)
    with pytest.raises(kbatch.LayoutError, match=r"holds no segment: its .log files \(0.log, server.log\) are not "
                                                 r"named as segments \(<20-digit base offset>.log, or tiered"):
        open_log(part)
    part = partition_with_misnamed_logs(tmp_path / "b", with_segment=True)
    log = open_log(part)
    assert log.read().values() == [b"x", b"y"]
    assert any(n.startswith("skipped 0.log, server.log: not named as a segment") for n in log.notes)


def test_an_empty_partition_is_an_honest_empty(tmp_path):
    LogWriter(tmp_path, "t", 0).close()  # one empty segment, as a new partition has
    log = open_log(tmp_path / "t-0")
    assert len(log.segments) == 1 and len(log.read()) == 0 and log.notes == []
    meta = tmp_path / "u-0"
    meta.mkdir()
    (meta / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAABw\n")
    log = open_log(meta)
    assert len(log.read()) == 0 and log.topic_id == "AAAAAAAAAAAAAAAAAAAABw"
    assert log.notes == ["no segment (.log): an empty log"]


def four_segments(tmp_path: Path) -> Path:
    """``t-0`` with 20,000 records, 80 batches of 250, in 4 segments (20 batches each)."""
    with LogWriter(tmp_path, "t", 0, segment_bytes=20 * 6000) as w:
        for i in range(0, 20000, 250):
            w.append(kbatch.encode([b"v%06d-%s" % (j, b"x" * 8) for j in range(i, i + 250)], base_offset=i))
    assert len(list(w.path.glob("*.log"))) == 4
    return w.path


def test_a_segment_cut_inside_a_batch_before_the_last_is_damage(tmp_path: Path) -> None:
    # not the end of the log (a torn write only ends the active segment): an error, or a skip
    path = four_segments(tmp_path)
    seg_path = sorted(path.glob("*.log"))[1]
    raw = seg_path.read_bytes()
    pos = frames(raw)[-1][0]
    seg_path.write_bytes(raw[:-100])
    log = open_log(path)
    with pytest.raises(CorruptRecordError) as info:
        log.read()
    err = info.value
    assert str(seg_path) in str(err) and err.batch_position == pos and err.position == pos + 8
    assert err.field == "batchLength" and "baseOffset 9750" in str(err) and "segment is cut" in str(err)
    table = open_log(path).read(start_offset=10000)  # a read that does not cross it is fine
    assert len(table) == 10000
    log = open_log(path)
    table = log.read(on_corruption="skip")
    assert table.records["offset"].tolist() == [o for o in range(20000) if not 9750 <= o < 10000]
    assert [(s.path, s.position, s.length) for s in log.skipped] == [(str(seg_path), pos, len(raw) - 100 - pos)]


def test_a_corrupt_batch_length_in_the_last_segment_is_damage(tmp_path: Path) -> None:
    # a length that runs past the end while the file goes on (a valid batch follows, or the
    # bytes to the end are one whole batch) is no torn write: the log does not end there
    path = four_segments(tmp_path)
    seg_path = sorted(path.glob("*.log"))[-1]
    raw = seg_path.read_bytes()
    batches = frames(raw)
    for k, lost in ((3, range(15750, 16000)), (len(batches) - 1, range(19750, 20000))):
        bad = bytearray(raw)
        pos = batches[k][0]
        bad[pos + 8 : pos + 12] = struct.pack(">i", 1 << 20)
        seg_path.write_bytes(bad)
        log = open_log(path)
        with pytest.raises(CorruptRecordError) as info:
            log.read()
        assert info.value.batch_position == pos and "corrupt batchLength" in str(info.value)
        log = open_log(path)
        table = log.read(on_corruption="skip")
        assert table.records["offset"].tolist() == [o for o in range(20000) if o not in lost]
        assert [s.position for s in log.skipped] == [pos]
    # a torn write (the bytes after the cut are the end of the file) still ends the log quietly
    seg_path.write_bytes(raw[: batches[-1][0] + 500])
    table = open_log(path).read()
    assert len(table) == 19750 and table.truncated


@pytest.mark.parametrize("bad", [1 << 40, 0], ids=["up", "down"])
def test_a_base_offset_that_goes_back_is_damage_not_a_gap(tmp_path: Path, bad: int) -> None:
    # the CRC does not cover baseOffset: offsets that do not rise (compaction keeps their order)
    # are a corrupt one, blamed on the batch that is out of line, never a gap of compaction
    path = small_log(tmp_path)
    seg_path = path / "00000000000000000000.log"
    raw = bytearray(seg_path.read_bytes())
    pos, size = frames(bytes(raw))[7][:2]
    raw[pos : pos + 8] = struct.pack(">q", bad)
    seg_path.write_bytes(raw)
    log = open_log(path)
    with pytest.raises(CorruptRecordError) as info:
        log.read()
    assert info.value.field == "baseOffset" and info.value.batch_position == pos and str(seg_path) in str(info.value)
    log = open_log(path)
    table = log.read(on_corruption="skip")
    assert table.records["offset"].tolist() == [o for o in range(60) if not 21 <= o < 24]
    assert [(s.position, s.length) for s in log.skipped] == [(pos, size)]
    assert [(u.first, u.end) for u in log.unread()] == [(21, 24)]
