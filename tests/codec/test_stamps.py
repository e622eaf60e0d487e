"""``kbatch.codec._core.stamps``, the walk of a buffer's record offsets and timestamps: what it
vouches for is exactly what ``decode`` gives; what it cannot vouch for (legacy, gzip, snappy,
corrupt bytes) it says so by status, never crashes and never reads out of bounds."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REAL_LOGS
from hypothesis import given, settings
from hypothesis import strategies as st
from support.stamps_batches import batches, decoded_alone, fix_crcs
from support.twocores import make_records, with_cpus

import kbatch
from kbatch.codec._core import (
    STAMPS_CODEC,
    STAMPS_CORRUPT,
    STAMPS_LEGACY,
    STAMPS_OK,
    STAMPS_SKIPPED,
    STAMPS_TOO_LARGE,
    _lz4_in_c,
    _zstd_in_c,
    decode,
    scan,
    stamps,
)

INT64_MAX = np.iinfo(np.int64).max


def check_vouched(data: bytes, verify_crc: bool) -> np.ndarray:
    """Every batch the walk vouches for decodes alone, to the walk's offsets, timestamps and least
    timestamp; returns the statuses."""
    offsets, timestamps, counts, least, status = stamps(data, verify_crc=verify_crc)
    assert len(offsets) == len(timestamps) == int(counts.sum())
    assert len(counts) == len(least) == len(status)
    alone = decoded_alone(data, verify_crc)
    starts = np.concatenate(([0], np.cumsum(counts)))
    for k in np.flatnonzero(status == STAMPS_OK).tolist():
        assert k < len(alone), "vouched for a batch past a bad frame"
        got = alone[k]
        assert got is not None, f"vouched for batch {k}, which decode rejects"
        assert offsets[starts[k] : starts[k + 1]].tolist() == got[0].tolist()
        assert timestamps[starts[k] : starts[k + 1]].tolist() == got[1].tolist()
        assert least[k] == (int(got[1].min()) if len(got[1]) else INT64_MAX)
    assert (counts[status != STAMPS_OK] == 0).all() and (least[status != STAMPS_OK] == INT64_MAX).all()
    return status


@settings(max_examples=300, deadline=None)
@given(data=batches())
def test_the_walk_equals_decode(data: bytes) -> None:
    assert _lz4_in_c()[0] and _zstd_in_c()[0]
    status = check_vouched(data, True)
    heads, _, _ = scan(data)
    assert len(heads) == len(status)
    for k, h in enumerate(heads):
        if h["magic"] < 2:
            assert status[k] == STAMPS_LEGACY
        elif h["compression"] == 2:
            assert status[k] == STAMPS_CODEC
        else:  # none, gzip (one member, as kbatch writes it), lz4, zstd: the walk does them alone
            assert status[k] == STAMPS_OK
    # the walk's records and decode's for the rest, batch by batch: decode's records in order
    offsets, timestamps, _, _, _ = stamps(data)
    table = decode(data)
    walked = np.repeat(status == STAMPS_OK, [int(h["record_count"]) if not h["is_control"] else 0
                                            for h in table.batches])
    assert table.records["offset"][walked].tolist() == offsets.tolist()
    assert table.records["timestamp"][walked].tolist() == timestamps.tolist()


@settings(max_examples=400, deadline=None)
@given(data=batches(), flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=4),
       cut=st.none() | st.integers(0, 1 << 16), fix=st.booleans(), verify_crc=st.booleans())
def test_corrupt_bytes_are_never_vouched_for(data: bytes, flips: list[tuple[int, int]], cut: int | None,
                                              fix: bool, verify_crc: bool) -> None:
    buf = bytearray(data)
    for at, x in flips:
        buf[at % len(buf)] ^= x
    if cut is not None:
        del buf[cut % (len(buf) + 1):]
    raw = fix_crcs(bytes(buf)) if fix else bytes(buf)
    check_vouched(raw, verify_crc)


def test_statuses_say_why_not() -> None:
    plain = kbatch.encode([b"a" * 100, b"b"], timestamps=[9, 4], compression="lz4")
    gz = kbatch.encode([b"c"], timestamps=[7], compression="snappy", base_offset=2)
    flipped = bytearray(kbatch.encode([b"d", b"e"], timestamps=[8, 3], base_offset=3))
    flipped[-2] ^= 1  # the last value ("e", before its headers count): the CRC no longer matches
    data = plain + gz + bytes(flipped) + plain
    offsets, timestamps, counts, least, status = stamps(data, skip_batches=[False, False, False, True])
    assert status.tolist() == [STAMPS_OK, STAMPS_CODEC, STAMPS_CORRUPT, STAMPS_SKIPPED]
    assert offsets.tolist() == [0, 1] and timestamps.tolist() == [9, 4]
    assert counts.tolist() == [2, 0, 0, 0] and least.tolist() == [4] + [INT64_MAX] * 3
    # without the CRC check the flipped value is still a well-formed record
    assert stamps(data, verify_crc=False)[4].tolist()[2] == STAMPS_OK
    assert stamps(plain, max_decompressed_size=50)[4].tolist() == [STAMPS_TOO_LARGE]
    with pytest.raises(ValueError, match="skip_batches"):
        stamps(data, skip_batches=[True])


def test_log_append_time_and_control_batches() -> None:
    data = (kbatch.encode([b"a", b"b"], timestamps=[50, 10], timestamp_type="log_append")
            + kbatch.encode_control("commit", 7, 0, base_offset=2, timestamp=99))
    offsets, timestamps, counts, least, status = stamps(data)
    assert offsets.tolist() == [0, 1]
    assert status.tolist() == [STAMPS_OK, STAMPS_OK]
    assert timestamps.tolist() == decode(data).records["timestamp"].tolist() == [50, 50]
    assert counts.tolist() == [2, 0] and least.tolist() == [50, INT64_MAX]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("flip", [None, 0.3, 0.7])
def test_one_core_and_two_walk_alike(monkeypatch: pytest.MonkeyPatch, codec: str, flip: float | None) -> None:
    # 16 KiB chunks (with_cpus): each chunk's batches are walked from both ends on two cores
    values, keys, timestamps, headers = make_records()
    data = bytearray(kbatch.encode(values, keys, timestamps=timestamps[::-1], headers=headers, max_batch_records=40,
                                   compression=codec))  # 150 batches, several a chunk
    if flip is not None:
        data[int(len(data) * flip)] ^= 0x20  # one batch's CRC no longer matches
    one, two = (with_cpus(monkeypatch, n, stamps, bytes(data)) for n in (1, 2))
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)
    status = check_vouched(bytes(data), True)
    if codec == "snappy":  # (cramjam's, with the GIL: decode's path)
        assert (status == STAMPS_CODEC).all()
    else:
        assert (status == STAMPS_OK).sum() == len(status) - (flip is not None)


def test_gzip_of_several_members_is_left_to_decode() -> None:
    import gzip
    import struct

    from crc32c import crc32c

    from kbatch._wire import ATTRIBUTES_OFFSET, BATCH_OVERHEAD, CRC_OFFSET, LENGTH_OFFSET

    one = bytearray(kbatch.encode([b"a", b"b"], timestamps=[3, 2], compression="gzip"))
    records = gzip.decompress(bytes(one[BATCH_OVERHEAD:]))
    two = one[:BATCH_OVERHEAD] + gzip.compress(records[:3]) + gzip.compress(records[3:])  # Java reads both
    struct.pack_into(">i", two, LENGTH_OFFSET, len(two) - 12)
    struct.pack_into(">I", two, CRC_OFFSET, crc32c(bytes(two[ATTRIBUTES_OFFSET:])))
    assert decode(bytes(two)).records["timestamp"].tolist() == [3, 2]
    assert stamps(bytes(one))[4].tolist() == [STAMPS_OK]
    assert stamps(bytes(two))[4].tolist() == [STAMPS_CODEC]


# ---------------------------------------------------------------------------------------------
# Real broker segments (../shared/real-logs: magic 2, uncompressed, CRC-valid)

REAL = sorted(p for p in REAL_LOGS.glob("*/*/*.log") if p.stat().st_size) if REAL_LOGS.is_dir() else []


@pytest.mark.skipif(not REAL, reason=f"no real logs at {REAL_LOGS}")
@pytest.mark.parametrize("segment", REAL, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in REAL])
def test_real_segments_walk_as_they_decode(segment) -> None:
    data = segment.read_bytes()
    status = check_vouched(data, verify_crc=True)
    assert (status == STAMPS_OK).all(), status  # every batch of these is v2, uncompressed, intact
    offsets, timestamps, *_ = stamps(data)
    table = decode(data)
    assert offsets.tolist() == table.records["offset"].tolist()
    assert timestamps.tolist() == table.records["timestamp"].tolist()


@pytest.mark.skipif(not REAL, reason=f"no real logs at {REAL_LOGS}")
@pytest.mark.parametrize("part", sorted({p.parent for p in REAL}), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_partitions_scan_a_window_as_the_eager_read_filtered(part) -> None:
    from kbatch.log import open_log

    log = open_log(part)
    t = log.read()
    stamps_ms = sorted(set(t.records["timestamp"].tolist()))
    lo, hi = stamps_ms[len(stamps_ms) // 3], stamps_ms[2 * len(stamps_ms) // 3]
    keep = (t.records["timestamp"] >= lo) & (t.records["timestamp"] < hi)
    want = t.records["offset"][keep].tolist()
    for columns in (["offset", "timestamp"], ["offset", "value"]):
        got = log.scan_records(columns, [("timestamp", ">=", lo), ("timestamp", "<", hi)]).read_all()
        assert got.column("offset").to_pylist() == want, columns
