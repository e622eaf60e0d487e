"""Encoding: kbatch.encode, encode_control and BatchBuilder."""

from __future__ import annotations

import time

import numpy as np
import pytest

import kbatch


def test_round_trip_all_field_shapes():
    values = [b"v", None, b"", b"x" * 100_000, bytearray(b"ba"), memoryview(b"mv")]
    keys = [None, b"k", b"", b"key", b"\x00", None]
    headers = [[], [("a", b"1"), ("a", None)], [(b"raw", b"")], {"d": b"4"}, None, [("x" * 300, b"y" * 300)]]
    ts = [1000, 999, -5, 2**40, 0, 1000]
    t = kbatch.decode(kbatch.encode(values, keys, timestamps=ts, headers=headers))
    assert t.values() == [None if v is None else bytes(v) for v in values]
    assert t.keys() == keys
    assert t.records["timestamp"].tolist() == ts
    assert [t.headers(i) for i in range(len(t))] == [
        [], [("a", b"1"), ("a", None)], [("raw", b"")], [("d", b"4")], [], [("x" * 300, b"y" * 300)],
    ]
    b = t.batches[0]
    assert b["base_timestamp"] == 1000 and b["max_timestamp"] == 2**40
    assert b["last_offset_delta"] == 5 and b["record_count"] == 6


def test_batches_split_and_offsets_and_sequences_continue():
    raw = kbatch.encode(
        [b"%d" % i for i in range(10)], base_offset=50, max_batch_records=4,
        producer_id=3, producer_epoch=1, base_sequence=2**31 - 6,
    )
    t = kbatch.decode(raw)
    assert t.batches["base_offset"].tolist() == [50, 54, 58]
    assert t.batches["base_sequence"].tolist() == [2**31 - 6, 2**31 - 2, 2]
    assert t.records["offset"].tolist() == list(range(50, 60))
    assert t.records["sequence"].tolist() == [2**31 - 6 + i for i in range(6)] + [0, 1, 2, 3]
    assert t.next_offset == 60


def test_max_batch_bytes():
    values = [b"x" * 1000] * 10
    raw = kbatch.encode(values, max_batch_bytes=3500)
    t = kbatch.decode(raw)
    sizes = (t.batches["batch_length"] + 12).tolist()
    assert all(s <= 3500 for s in sizes) and sum(t.batches["record_count"]) == 10
    # A record bigger than the limit still gets a batch of its own.
    t = kbatch.decode(kbatch.encode([b"y" * 5000, b"z"], max_batch_bytes=100))
    assert t.batches["record_count"].tolist() == [1, 1]


def test_attributes_and_producer_fields():
    t = kbatch.decode(kbatch.encode([b"a"], transactional=True, producer_id=77, producer_epoch=5,
                                    base_sequence=0, partition_leader_epoch=9, timestamp_type="log_append",
                                    timestamps=[123]))
    b = t.batches[0]
    assert bool(b["is_transactional"]) and b["timestamp_type"] == 1 and b["attributes"] == 0x18
    assert (b["producer_id"], b["producer_epoch"], b["base_sequence"]) == (77, 5, 0)
    assert b["partition_leader_epoch"] == 9 and b["max_timestamp"] == 123


def test_default_timestamp_is_now_and_numpy_timestamps():
    before = time.time_ns() // 1_000_000
    t = kbatch.decode(kbatch.encode([b"a", b"b"], timestamps=[None, 5]))
    after = time.time_ns() // 1_000_000
    assert before <= t.records["timestamp"][0] <= after and t.records["timestamp"][1] == 5
    ts = np.array([3, 1, 2], dtype=np.int32)
    t = kbatch.decode(kbatch.encode([b"a", b"b", b"c"], timestamps=ts))
    assert t.records["timestamp"].tolist() == [3, 1, 2]


def test_empty_input_encodes_nothing():
    assert kbatch.encode([]) == b""
    assert kbatch.BatchBuilder().build() == b""


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"values": ["str"]}, TypeError, "value 0 must be bytes-like"),
        ({"values": [b"a"], "keys": [1]}, TypeError, "key 0 must be bytes-like"),
        ({"values": [b"a"], "keys": [b"a", b"b"]}, ValueError, "keys has 2 items"),
        ({"values": [b"a"], "headers": [[(1, b"v")]]}, TypeError, "header key"),
        ({"values": [b"a"], "headers": [[("k", "v")]]}, TypeError, "header value"),
        ({"values": [b"a"], "timestamp_type": "bogus"}, ValueError, "timestamp_type"),
        ({"values": [b"a"], "compression": "brotli"}, ValueError, "compression"),
        ({"values": [b"a"], "max_batch_records": 0}, ValueError, "max_batch_records"),
        ({"values": [b"a"], "timestamps": np.array([1.5])}, TypeError, "timestamps"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    values = kwargs.pop("values")
    with pytest.raises(error, match=match):
        kbatch.encode(values, **kwargs)


@pytest.mark.parametrize("kind", ["commit", "abort", "COMMIT"])
def test_encode_control(kind):
    raw = kbatch.encode_control(kind, 42, 3, coordinator_epoch=8, base_offset=10, timestamp=555)
    t = kbatch.decode(raw)
    b = t.batches[0]
    assert len(t) == 0 and bool(b["is_control"]) and bool(b["is_transactional"])
    assert b["control_type"] == (1 if kind.lower() == "commit" else 0)
    assert (b["coordinator_epoch"], b["producer_id"], b["producer_epoch"]) == (8, 42, 3)
    assert (b["base_offset"], b["base_timestamp"], b["base_sequence"]) == (10, 555, -1)
    with pytest.raises(ValueError):
        kbatch.encode_control("rollback", 1, 1)


def test_batch_builder_matches_encode():
    b = kbatch.BatchBuilder(base_offset=5, producer_id=1, producer_epoch=0, base_sequence=0)
    vals = [b"one", None, b"three"]
    for i, v in enumerate(vals):
        assert b.append(v, key=b"k%d" % i, timestamp=100 + i, headers=[("h", b"%d" % i)]) == 5 + i
    assert len(b) == 3 and b.size_in_bytes > 61
    built = b.build()
    same = kbatch.encode(vals, [b"k0", b"k1", b"k2"], timestamps=[100, 101, 102],
                         headers=[[("h", b"0")], [("h", b"1")], [("h", b"2")]],
                         base_offset=5, producer_id=1, producer_epoch=0, base_sequence=0)
    assert built == same
    with pytest.raises(RuntimeError):
        b.append(b"late")


def _column(items):
    """Arrow-style (offsets, data, valid) of a list of bytes-or-None."""
    lengths = [0 if b is None else len(b) for b in items]
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(b or b"" for b in items)
    valid = np.array([b is not None for b in items], dtype=np.uint8)
    return offsets, data, valid


def test_encode_arrays_matches_encode():
    values = [b"a", None, b"", b"xyz" * 50]
    keys = [None, b"k1", b"", b"k3"]
    headers = [[("h", b"1")], [], [("x", None), ("y", b"2")], []]
    ts = np.array([5, 6, 4, 9], dtype=np.int64)
    hk = [k.encode() for hs in headers for k, _ in hs]
    hv = [v for hs in headers for _, v in hs]
    header_offsets = np.cumsum([0] + [len(h) for h in headers]).astype(np.int64)
    vo, vd, vv = _column(values)
    ko, kd, kv = _column(keys)
    hko, hkd, _ = _column(hk)
    hvo, hvd, hvv = _column(hv)
    raw = kbatch.codec._core.encode_arrays(
        vo, vd, vv, ko, kd, kv, ts, header_offsets=header_offsets, hkey_offsets=hko, hkey_data=hkd,
        hval_offsets=hvo, hval_data=hvd, hval_valid=hvv, base_offset=3, max_batch_records=3)
    assert raw == kbatch.encode(values, keys, timestamps=ts.tolist(), headers=headers, base_offset=3,
                                max_batch_records=3)
    with pytest.raises(ValueError, match="value_valid"):
        kbatch.codec._core.encode_arrays(vo, vd, vv[:-1])
    with pytest.raises(ValueError, match="decrease"):
        kbatch.codec._core.encode_arrays(np.array([0, 3, 1, 4], dtype=np.int64), vd)
    with pytest.raises(ValueError, match="key_offsets"):
        kbatch.codec._core.encode_arrays(vo, vd, None, ko[:-1], kd)
    with pytest.raises(ValueError, match="outside"):
        kbatch.codec._core.encode_arrays(vo, vd[:-1])
