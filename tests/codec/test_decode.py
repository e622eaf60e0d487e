"""RecordBatch v2 decoding: semantics as Kafka's Java client applies them, and bad input."""

from __future__ import annotations

import mmap
import struct
import threading

import numpy as np
import pytest
from support.refcodec import Rec, batch, control_record, legacy_entry, legacy_message, legacy_wrapper, zigzag_varint

import kbatch
from kbatch import CorruptRecordError, CRCError


def test_compiled_core_is_loaded():
    # Fails if kbatch silently ran from something other than the built extension.
    assert kbatch.codec._core.__file__.endswith((".so", ".pyd")), kbatch.codec._core.__file__


# ---------------------------------------------------------------- semantics


def test_offsets_with_gaps_and_empty_batches():
    data = (
        batch([Rec(b"a", offset_delta=0), Rec(b"b", offset_delta=5)], base_offset=100)
        + batch([], base_offset=106, last_offset_delta=3)  # compacted away: legal and empty
        + batch([Rec(b"c")], base_offset=110)
    )
    t = kbatch.decode(data)
    assert t.records["offset"].tolist() == [100, 105, 110]
    assert t.batches["record_count"].tolist() == [2, 0, 1]
    assert t.batches["first_record"].tolist() == [0, 2, 2]
    assert t.records["batch"].tolist() == [0, 0, 2]
    assert t.next_offset == 111
    assert t.consumed_bytes == len(data) and not t.truncated


def test_create_time_deltas_may_be_negative_and_64_bit():
    big = 1 << 40
    t = kbatch.decode(batch([Rec(timestamp_delta=-5), Rec(timestamp_delta=big)], base_timestamp=1000))
    assert t.records["timestamp"].tolist() == [995, 1000 + big]


def test_log_append_time_uses_max_timestamp():
    t = kbatch.decode(
        batch([Rec(timestamp_delta=1), Rec(timestamp_delta=2)], attributes=0x08, base_timestamp=10, max_timestamp=77)
    )
    assert t.records["timestamp"].tolist() == [77, 77]
    assert t.batches["timestamp_type"].tolist() == [1]


def test_delete_horizon_is_base_timestamp():
    t = kbatch.decode(batch([Rec(timestamp_delta=3)], attributes=0x40, base_timestamp=5000))
    assert bool(t.batches["has_delete_horizon"][0]) is True
    assert t.batches["base_timestamp"][0] == 5000
    assert t.records["timestamp"][0] == 5003


@pytest.mark.parametrize(
    ("base_sequence", "deltas", "expected"),
    [
        (-1, [0, 1], [-1, -1]),
        (0, [0, 1, 2], [0, 1, 2]),
        (2**31 - 2, [0, 1, 2, 3], [2**31 - 2, 2**31 - 1, 0, 1]),  # wraps to 0, as Kafka
    ],
)
def test_sequences(base_sequence, deltas, expected):
    recs = [Rec(offset_delta=d) for d in deltas]
    t = kbatch.decode(batch(recs, producer_id=9, producer_epoch=1, base_sequence=base_sequence))
    assert t.records["sequence"].tolist() == expected


@pytest.mark.parametrize(("kind", "name"), [(0, "abort"), (1, "commit")])
def test_control_batches_are_not_data(kind, name):
    data = (
        batch([Rec(b"x")], attributes=0x10, producer_id=5, producer_epoch=2)
        + batch([control_record(kind, coordinator_epoch=17)], base_offset=1, attributes=0x30, producer_id=5)
        + kbatch.encode_control(name, 5, 2, base_offset=2, coordinator_epoch=18)
    )
    t = kbatch.decode(data)
    assert len(t) == 1 and t.records["offset"].tolist() == [0]
    assert t.batches["is_control"].tolist() == [False, True, True]
    assert t.batches["control_type"].tolist() == [-1, kind, kind]
    assert t.batches["coordinator_epoch"].tolist() == [-1, 17, 18]
    assert t.batches["is_transactional"].tolist() == [True, True, True]
    assert t.next_offset == 3


def test_other_control_types_are_reported_raw():
    t = kbatch.decode(batch([control_record(3)], attributes=0x20))  # KRaft SNAPSHOT_HEADER
    assert t.batches["control_type"].tolist() == [3]
    assert t.batches["coordinator_epoch"].tolist() == [0]


def test_crc_excludes_leader_epoch():
    data = bytearray(batch([Rec(b"v")], leader_epoch=1))
    data[12:16] = struct.pack(">i", 99)  # brokers rewrite this without touching the CRC
    assert kbatch.decode(bytes(data)).batches["partition_leader_epoch"].tolist() == [99]


def test_header_keys_decode_with_replacement_and_raw_bytes_stay():
    t = kbatch.decode(batch([Rec(b"v", headers=[(b"\xffk", b"1"), (b"n", None)])]))
    assert t.headers(0) == [("\ufffdk", b"1"), ("n", None)]
    h = t.headers[0]
    assert bytes(t.data[h["key_start"] : h["key_start"] + h["key_length"]]) == b"\xffk"
    assert t.headers["value_length"].tolist() == [1, -1]


def test_record_iteration_and_conveniences():
    data = kbatch.encode([b"a", None, b""], keys=[None, b"k", b""], timestamps=[1, 2, 3], base_offset=7)
    t = kbatch.decode(data)
    recs = list(t)
    assert [r.offset for r in recs] == [7, 8, 9]
    assert [(r.key, r.value) for r in recs] == [(None, b"a"), (b"k", None), (b"", b"")]
    assert t.keys() == [None, b"k", b""] and t.values() == [b"a", None, b""]
    assert isinstance(recs[0], kbatch.Record) and recs[0].timestamp_type == 0
    with pytest.raises(IndexError):
        t.value(3)
    assert "3 records in 1 batches" in repr(t)


# ---------------------------------------------------------- buffers and copies


def test_uncompressed_input_is_not_copied():
    data = kbatch.encode([b"x" * 100] * 10)
    t = kbatch.decode(data)
    assert t.data is data
    arr = np.frombuffer(bytearray(data), dtype=np.uint8)
    t2 = kbatch.decode(arr)
    assert t2.data is arr
    assert t2.records["value_start"][3] + 100 <= len(arr)


def test_mmap_and_readonly_buffers(tmp_path):
    data = kbatch.encode([b"m%d" % i for i in range(50)], max_batch_records=7)
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        t = kbatch.decode(mm)
        assert t.values() == [b"m%d" % i for i in range(50)]
        del t  # no buffer export is held by the table: the mmap can close


def test_non_byte_buffers_are_viewed_as_bytes():
    data = kbatch.encode([b"abcd"])
    padded = data + b"\0" * (-len(data) % 4)
    t = kbatch.decode(np.frombuffer(padded, dtype=np.uint32))
    assert t.values() == [b"abcd"] and t.truncated == (len(padded) != len(data))


def test_non_contiguous_and_non_buffers_are_rejected():
    with pytest.raises(TypeError, match="bytes-like"):
        kbatch.decode("not bytes")
    with pytest.raises(ValueError, match="contiguous"):
        kbatch.decode(np.zeros(200, dtype=np.uint8)[::2])


def test_empty_and_short_input():
    for data in (b"", b"\0" * 16):
        t = kbatch.decode(data)
        assert len(t) == 0 and len(t.batches) == 0 and t.next_offset is None
        assert t.truncated == bool(data)


def test_truncated_tail_keeps_complete_batches():
    data = kbatch.encode([b"a", b"b", b"c"], max_batch_records=1)
    for cut in range(1, len(data) // 3):
        t = kbatch.decode(data[: len(data) - cut])
        assert len(t.batches) == 2 and t.truncated
        assert t.consumed_bytes == 2 * len(data) // 3


def test_decode_runs_in_threads():
    data = kbatch.encode([b"v" * 50] * 5000, max_batch_records=500)
    results = []

    def work():
        results.append(len(kbatch.decode(data)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [5000] * 4


# ------------------------------------------------------------- bad input


def _corrupt(data: bytes, **match):
    with pytest.raises(CorruptRecordError) as info:
        kbatch.decode(data)
    err = info.value
    for k, v in match.items():
        assert getattr(err, k) == v, (k, getattr(err, k), str(err))
    assert f"byte {err.position}" in str(err)
    return err


GOOD = batch([Rec(b"first")])


def test_batch_shorter_than_61_bytes():
    short = struct.pack(">qi", 0, 30) + struct.pack(">ib", 0, 2) + b"\0" * 25
    err = _corrupt(GOOD + short, batch_index=1, field="batchLength", position=len(GOOD) + 8)
    assert "61" in err.reason
    assert len(err.partial) == 1 and err.partial.consumed_bytes == len(GOOD)


def test_entry_shorter_than_14_bytes():
    err = _corrupt(struct.pack(">qi", 0, 13) + b"\0" * 13, field="batchLength", batch_index=0)
    assert "14" in err.reason


@pytest.mark.parametrize("magic", [3, 7, -1])
def test_unknown_magic(magic):
    _corrupt(batch([Rec()], magic=magic, crc=0), field="magic", position=16)


def test_negative_record_count():
    _corrupt(batch(b"", record_count=-1), field="recordCount", position=57)


def test_record_count_larger_than_bytes_allow():
    err = _corrupt(batch(b"\0" * 14, record_count=3), field="recordCount")
    assert "3" in err.reason


def test_fewer_records_than_count():
    payload = Rec(b"v").encode(0)
    err = _corrupt(batch(payload + b"\0" * 6, record_count=2), batch_index=0)
    assert err.record_index == 1


def test_more_records_than_count():
    payload = Rec(b"a").encode(0) + Rec(b"b").encode(1)
    err = _corrupt(batch(payload, record_count=1), field="records")
    assert "bytes left" in err.reason


@pytest.mark.parametrize("delta", [-1, 1])
def test_record_bytes_do_not_match_length(delta):
    body = Rec(b"value").body(0)
    payload = zigzag_varint(len(body) + delta) + body + (b"\0" if delta > 0 else b"")
    _corrupt(batch(payload, record_count=1), record_index=0)


def test_record_length_past_batch_end():
    body = Rec(b"value").body(0)
    _corrupt(batch(zigzag_varint(len(body) + 50) + body, record_count=1), field="length")


def test_negative_header_count():
    body = b"\0" + b"\0" + b"\0" + zigzag_varint(-1) + zigzag_varint(-1) + zigzag_varint(-3)
    _corrupt(batch(zigzag_varint(len(body)) + body, record_count=1), field="headersCount")


def test_header_count_larger_than_bytes_left():
    body = b"\0\0\0" + zigzag_varint(-1) + zigzag_varint(-1) + zigzag_varint(1000) + b"\0" * 4
    err = _corrupt(batch(zigzag_varint(len(body)) + body, record_count=1), field="headersCount")
    assert "1000" in err.reason


def test_negative_header_key_length():
    body = b"\0\0\0" + zigzag_varint(-1) + zigzag_varint(-1) + zigzag_varint(1) + zigzag_varint(-2) + zigzag_varint(-1)
    _corrupt(batch(zigzag_varint(len(body)) + body, record_count=1), field="headerKeyLength")


def test_varint_longer_than_5_bytes():
    body = b"\0\0" + b"\x80\x80\x80\x80\x80\x01" + b"\0\0\0"
    err = _corrupt(batch(zigzag_varint(len(body)) + body, record_count=1), field="offsetDelta")
    assert "varint" in err.reason


def test_varlong_longer_than_10_bytes():
    body = b"\0" + b"\x80" * 10 + b"\x01" + b"\0\0\0\0"
    _corrupt(batch(zigzag_varint(len(body)) + body, record_count=1), field="timestampDelta")


def test_crc_mismatch_and_verify_crc_false():
    data = bytearray(GOOD + batch([Rec(b"second")], base_offset=1))
    data[data.rindex(b"second")] ^= 0x20  # "Second": same length, wrong checksum
    with pytest.raises(CRCError) as info:
        kbatch.decode(bytes(data))
    err = info.value
    assert (err.batch_index, err.field, err.position) == (1, "crc", len(GOOD) + 17)
    assert err.stored != err.computed and "crc32c mismatch" in str(err)
    assert err.partial.values() == [b"first"] and err.partial.next_offset == 1
    assert kbatch.decode(bytes(data), verify_crc=False).values() == [b"first", b"Second"]


def test_earliest_error_wins_and_partial_keeps_what_came_before():
    bad_record = batch(Rec(b"x").encode(0), record_count=2)  # CRC-valid but short of records
    bad_crc = bytearray(batch([Rec(b"y")], base_offset=9))
    bad_crc[-1] ^= 1
    data = GOOD + batch([Rec(b"ok", headers=[(b"h", b"v")])], base_offset=1) + bad_record + bytes(bad_crc)
    err = _corrupt(data, batch_index=2)
    assert not isinstance(err, CRCError)
    p = err.partial
    assert p.values() == [b"first", b"ok"] and p.headers(1) == [("h", b"v")]
    assert len(p.batches) == 2 and len(p.headers) == 1


def test_errors_are_value_errors_and_pickle():
    import pickle

    with pytest.raises(ValueError) as info:
        kbatch.decode(batch(b"", record_count=-1))
    err = pickle.loads(pickle.dumps(info.value))
    assert type(err) is CorruptRecordError
    assert (err.position, err.batch_index, err.field) == (57, 0, "recordCount")
    assert str(err) == str(info.value)


# ------------------------------------------------------- legacy message sets


def test_legacy_v0_v1_and_v2_mixed_in_one_buffer():
    data = (
        legacy_entry(0, legacy_message(b"v0", b"k", magic=0))
        + legacy_entry(1, legacy_message(None, magic=1, timestamp=111))
        + legacy_entry(2, legacy_message(b"", magic=1, attributes=0x08, timestamp=222))
        + batch([Rec(b"v2")], base_offset=3)
    )
    t = kbatch.decode(data)
    assert t.records["offset"].tolist() == [0, 1, 2, 3]
    assert t.records["timestamp"].tolist() == [-1, 111, 222, 1_600_000_000_000]
    assert t.values() == [b"v0", None, b"", b"v2"] and t.keys() == [b"k", None, None, None]
    assert t.batches["magic"].tolist() == [0, 1, 1, 2]
    assert t.batches["timestamp_type"].tolist() == [-1, 0, 1, 0]
    assert t.batches["partition_leader_epoch"].tolist()[:3] == [-1, -1, -1]
    assert t.data is data and t.next_offset == 4


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_legacy_v1_wrapper_relative_offsets(codec):
    inner = b"".join(legacy_entry(i, legacy_message(b"m%d" % i, timestamp=10 + i)) for i in range(3))
    t = kbatch.decode(legacy_wrapper(102, inner, codec))
    assert t.records["offset"].tolist() == [100, 101, 102]
    assert t.records["timestamp"].tolist() == [10, 11, 12]
    assert t.values() == [b"m0", b"m1", b"m2"]
    b = t.batches[0]
    assert (b["base_offset"], b["record_count"], b["compression"], b["magic"]) == (102, 3, codec, 1)
    assert t.next_offset == 103


def test_legacy_v1_wrapper_offset_zero_keeps_inner_offsets_and_v0_is_absolute():
    inner = b"".join(legacy_entry(i, legacy_message(b"x", timestamp=1)) for i in (5, 6))
    assert kbatch.decode(legacy_wrapper(0, inner, 1)).records["offset"].tolist() == [5, 6]
    inner0 = b"".join(legacy_entry(i, legacy_message(b"x", magic=0)) for i in (7, 8))
    t = kbatch.decode(legacy_wrapper(8, inner0, 2, magic=0))
    assert t.records["offset"].tolist() == [7, 8] and t.records["timestamp"].tolist() == [-1, -1]


def test_legacy_log_append_time_wrapper_overrides_inner_timestamps():
    inner = b"".join(legacy_entry(i, legacy_message(b"x", timestamp=5)) for i in range(2))
    t = kbatch.decode(legacy_wrapper(1, inner, 1, attributes=0x08, timestamp=999))
    assert t.records["timestamp"].tolist() == [999, 999]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (legacy_wrapper(0, b"", 1), "no inner records"),
        (legacy_entry(0, legacy_message(None, attributes=1)), "no inner records"),
        (legacy_wrapper(0, legacy_entry(0, legacy_message(b"x")), 4), "zstd not allowed"),
        (legacy_wrapper(1, legacy_entry(0, legacy_message(b"x", attributes=1)), 1), "nested compression"),
        (legacy_wrapper(1, legacy_entry(5, legacy_message(b"x")), 1), "below its last inner offset"),
        (legacy_wrapper(1, legacy_entry(0, legacy_message(b"x", crc=7)), 1), "crc32 mismatch"),
        (legacy_wrapper(1, legacy_entry(0, legacy_message(b"x"))[:-2], 1), "runs past"),
        (legacy_entry(0, legacy_message(b"x", crc=1)), "crc32 mismatch"),
        (struct.pack(">qi", 0, 16) + b"\0" * 4 + b"\x01" + b"\0" * 11, "shorter than its fixed fields"),
    ],
    ids=["empty-wrapper", "null-wrapper", "zstd", "nested", "wrapper-offset", "inner-crc", "inner-truncated",
         "outer-crc", "v1-too-short"],
)
def test_legacy_rejects_what_java_rejects(data, match):
    with pytest.raises(CorruptRecordError, match=match) as info:
        kbatch.decode(data)
    assert info.value.batch_index == 0 and info.value.position >= 0


def test_legacy_crc_not_checked_when_disabled():
    t = kbatch.decode(legacy_entry(0, legacy_message(b"x", crc=1)), verify_crc=False)
    assert t.values() == [b"x"] and t.batches["crc"].tolist() == [1]


def test_record_rows_are_fully_initialised():
    # The rows' padding is zeroed: tobytes() is deterministic and exposes no heap bytes.
    data = kbatch.encode([b"x%d" % i for i in range(300)], max_batch_records=50)
    first = kbatch.decode(data).records.tobytes()
    junk = [np.full(64 * 300, 0xAB, dtype=np.uint8) for _ in range(20)]  # dirty freed memory
    del junk
    assert kbatch.decode(data).records.tobytes() == first
