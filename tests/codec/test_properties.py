"""Tier 3: hypothesis properties and fuzzing of the decoder."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.refcodec import Rec, batch, legacy_entry, legacy_message, legacy_wrapper, varlong, zigzag_varint

import kbatch
from kbatch.codec import _core

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(INT32)
def test_varint_matches_reference_and_round_trips(v):
    encoded = _core._encode_varint(v)
    assert encoded == zigzag_varint(v)
    assert _core._decode_varint(encoded + b"\xff") == (v, len(encoded))


@given(INT64)
def test_varlong_matches_reference_and_round_trips(v):
    encoded = _core._encode_varlong(v)
    assert encoded == varlong(v)
    assert _core._decode_varlong(encoded) == (v, len(encoded))


@given(st.binary(min_size=1, max_size=12))
def test_varint_decoder_never_reads_past_the_end(data):
    for decoder, limit in ((_core._decode_varint, 5), (_core._decode_varlong, 10)):
        try:
            _value, end = decoder(data)
        except kbatch.CorruptRecordError as exc:
            assert exc.field in ("varint", "varlong")
        else:
            assert 1 <= end <= min(len(data), limit)


headers_st = st.lists(
    st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=4
)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),  # key
    st.one_of(st.none(), st.binary(max_size=300)),  # value
    st.integers(-(2**45), 2**45),  # timestamp
    headers_st,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(record_st, max_size=30),
    st.integers(0, 2**40),
    st.integers(1, 10),
    st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
)
def test_encode_decode_round_trip(records, base_offset, per_batch, codec):
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    ts = [r[2] for r in records]
    headers = [r[3] for r in records]
    raw = kbatch.encode(values, keys, timestamps=ts, headers=headers, base_offset=base_offset,
                        max_batch_records=per_batch, compression=codec)
    t = kbatch.decode(raw)
    assert t.keys() == keys and t.values() == values
    assert t.records["timestamp"].tolist() == ts
    assert t.records["offset"].tolist() == list(range(base_offset, base_offset + len(records)))
    assert [t.headers(i) for i in range(len(t))] == headers
    assert t.consumed_bytes == len(raw) and not t.truncated


def _valid_buffer() -> bytes:
    return (
        batch([Rec(b"value", key=b"k", headers=[(b"h", b"v")]), Rec(None, timestamp_delta=-3)])
        + batch([Rec(b"x" * 200)], base_offset=2, producer_id=1, base_sequence=0)
        + kbatch.encode_control("commit", 1, 0, base_offset=3)
        + kbatch.encode([b"z"], compression="lz4", base_offset=4)
        + legacy_entry(5, legacy_message(b"old", b"k", magic=0))
        + legacy_wrapper(7, b"".join(legacy_entry(i, legacy_message(b"in%d" % i)) for i in range(2)), 1)
    )


VALID = _valid_buffer()


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.booleans())
def test_fuzz_mutations_raise_kbatch_errors_only(mutations, verify):
    data = bytearray(VALID)
    for pos, byte in mutations:
        data[pos] = byte
    try:
        t = kbatch.decode(bytes(data), verify_crc=verify)
    except kbatch.KBatchError as exc:
        assert isinstance(exc, ValueError)
        assert 0 <= exc.position <= len(data)
        assert exc.partial is not None and exc.partial.consumed_bytes <= exc.position
        return
    # Whatever decodes is self-consistent: every slice lies inside data.
    size = len(memoryview(t.data).cast("B"))
    for start, length in ((t.records["key_start"], t.records["key_length"]),
                          (t.records["value_start"], t.records["value_length"]),
                          (t.headers["key_start"], t.headers["key_length"]),
                          (t.headers["value_start"], t.headers["value_length"])):
        ok = length < 0
        assert ((start >= 0) & (start + length.clip(0) <= size) | ok).all()


@given(st.integers(0, len(VALID)))
def test_every_truncation_is_a_clean_prefix(cut):
    t = kbatch.decode(VALID[:cut])
    assert t.consumed_bytes <= cut and t.truncated == (t.consumed_bytes < cut)
    full = kbatch.decode(VALID)
    assert t.values() == full.values()[: len(t)] and t.keys() == full.keys()[: len(t)]
    for col in ("offset", "timestamp", "sequence", "batch", "headers_count"):
        assert t.records[col].tolist() == full.records[col][: len(t)].tolist()


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash(data):
    # Either a table that read no further than the input, or a kbatch error placed inside it.
    prefix = struct.pack(">qi", 0, len(data) + 49) + struct.pack(">ib", 0, 2)
    for buf, verify in ((data, True), (prefix + data, False)):
        try:
            t = kbatch.decode(buf, verify_crc=verify)
        except kbatch.KBatchError as exc:
            assert isinstance(exc, ValueError) and 0 <= exc.position <= len(buf)
        else:
            assert 0 <= t.consumed_bytes <= len(buf)
            assert t.truncated == (t.consumed_bytes < len(buf))
