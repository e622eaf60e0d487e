"""The legacy (magic 0/1) message set encoder, checked against independent readers.

kafka-python's pure-Python and aiokafka's Cython legacy readers must read back what
:func:`kbatch.codec._legacy.encode_legacy` writes (with their CRC checks) for both magics and
every legacy codec; for input their own builders can express, the bytes must be the
same as theirs. The same buffers round-trip through ``kbatch.decode``, and the peers'
legacy builders' output decodes with it.
"""

from __future__ import annotations

import inspect
import random
import struct
import zlib

import pytest

import kbatch
from kbatch.codec._legacy import encode_legacy
from kbatch.errors import UnsupportedError

aiokafka_records = pytest.importorskip("aiokafka.record._crecords")
kafka_legacy = pytest.importorskip("kafka.record.legacy_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")
kafka_codec = pytest.importorskip("kafka.codec")

LEGACY_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
LIBS = ["aiokafka", "kafka-python"]
BASE_TS = 1_700_000_000_000


def _text(rng: random.Random, n: int) -> bytes:
    # Text-like, so every codec really compresses.
    words = [b'"user":', b'"event":', b'"click"', b"1700000", b", ", b"{", b"}", b"value", b"\x00\xff"]
    return b"".join(rng.choices(words, k=n // 4 + 1))[:n]


def random_records(seed: int, n: int) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, timestamp): null and empty keys/values, unordered timestamps, a few large values."""
    rng = random.Random(seed)
    recs = []
    for _ in range(n):
        shape = rng.random()
        value = None if shape < 0.1 else b"" if shape < 0.2 else _text(rng, rng.choice([1, 50, 130, 3000]))
        if shape > 0.97:
            value = _text(rng, 150_000)  # several 64 KiB lz4 blocks, several xerial chunks
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 16))
        recs.append((key, value, BASE_TS + rng.randint(-5000, 5000)))
    return recs


def _encode(recs, **kwargs) -> bytes:
    return encode_legacy([r[1] for r in recs], [r[0] for r in recs], timestamps=[r[2] for r in recs], **kwargs)


def _skip_unreadable(lib: str, codec: str, magic: int) -> None:
    if codec == "lz4" and magic == 0:
        if lib == "aiokafka":
            pytest.skip("aiokafka refuses lz4 with magic 0 (UnsupportedCodecError); kafka-python reads it")
        _need_old_kafka_lz4()


def _need_old_kafka_lz4() -> None:
    # kafka-python's magic 0 lz4 reader (lz4_decode_old_kafka) recomputes the header
    # checksum with the xxhash package.
    pytest.importorskip("xxhash", reason="kafka-python reads magic 0 lz4 only with xxhash installed")


def _peer_read(lib: str, data: bytes):
    """(offset, timestamp, timestamp_type, key, value) per record and the outer entry count.

    Every outer entry's CRC is checked, and with kafka-python every inner one as well.
    """
    records = aiokafka_records.MemoryRecords(data) if lib == "aiokafka" else kafka_memory.MemoryRecords(data)
    out, entries = [], 0
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc()
        entries += 1
        for r in batch:
            if lib == "kafka-python":
                assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
    return out, entries


def _expected(recs, magic: int, base_offset: int = 0, *, log_append: bool = False, compressed: bool = False):
    if magic == 0:
        return [(base_offset + i, None, None, k, v) for i, (k, v, _) in enumerate(recs)]
    wrapper_ts = max(ts for _, _, ts in recs)
    return [
        (base_offset + i, wrapper_ts if log_append and compressed else ts, int(log_append), k, v)
        for i, (k, v, ts) in enumerate(recs)
    ]


def _entries(data: bytes):
    """Walk the outer entries by hand: (offset, magic, attributes, timestamp or None, key, value)."""
    pos, out = 0, []
    while pos < len(data):
        offset, size, crc, magic, attributes = struct.unpack_from(">qiIbb", data, pos)
        body = data[pos + 16 : pos + 12 + size]
        assert zlib.crc32(body) == crc
        at = 2
        ts = None
        if magic == 1:
            (ts,) = struct.unpack_from(">q", body, at)
            at += 8
        fields = []
        for _ in range(2):
            (n,) = struct.unpack_from(">i", body, at)
            at += 4
            fields.append(None if n < 0 else body[at : at + n])
            at += max(n, 0)
        assert at == len(body)
        out.append((offset, magic, attributes, ts, *fields))
        pos += 12 + size
    assert pos == len(data)
    return out


def _inflate(codec: str, magic: int, payload: bytes) -> bytes:
    """kafka-python's own codec functions, independent of kbatch.codec._compression."""
    if codec == "gzip":
        return kafka_codec.gzip_decode(payload)
    if codec == "snappy":
        return kafka_codec.snappy_decode(payload)
    if magic == 0:
        _need_old_kafka_lz4()
    return (kafka_codec.lz4_decode_old_kafka if magic == 0 else kafka_codec.lz4_decode)(payload)


# --------------------------------------------------------------------------- peers read it


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("seed", [1, 2])
def test_peers_read_legacy(lib, codec, magic, seed):
    _skip_unreadable(lib, codec, magic)
    recs = random_records(seed, 70)
    base = 1000 * seed
    data = _encode(recs, magic=magic, compression=LEGACY_CODECS[codec], base_offset=base)
    got, entries = _peer_read(lib, data)
    assert entries == (len(recs) if codec == "none" else 1)
    assert got == _expected(recs, magic, base)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
def test_peers_read_log_append_time(lib, codec):
    recs = random_records(5, 20)
    data = _encode(recs, magic=1, compression=LEGACY_CODECS[codec], base_offset=7, timestamp_type=1)
    got, _ = _peer_read(lib, data)
    assert got == _expected(recs, 1, 7, log_append=True, compressed=codec != "none")


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_peers_read_single_record(lib, codec, magic):
    _skip_unreadable(lib, codec, magic)
    data = encode_legacy([b"only"], [b"k"], timestamps=[123], magic=magic, compression=LEGACY_CODECS[codec])
    got, _ = _peer_read(lib, data)
    assert got == [(0, None if magic == 0 else 123, None if magic == 0 else 0, b"k", b"only")]


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("level", [1, 9])
def test_peers_read_gzip_levels(lib, level):
    recs = random_records(9, 30)
    data = _encode(recs, magic=1, compression=1, compression_level=level)
    assert _peer_read(lib, data)[0] == _expected(recs, 1)


# --------------------------------------------------------------------------- wire layout


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != "none"])
@pytest.mark.parametrize("magic", [0, 1])
def test_wrapper_layout(codec, magic):
    """One wrapper at the last absolute offset; inner offsets absolute (v0) or 0..n-1 (v1)."""
    recs = random_records(3, 12)
    data = _encode(recs, magic=magic, compression=LEGACY_CODECS[codec], base_offset=500)
    [(offset, m, attributes, ts, key, value)] = _entries(data)
    assert (offset, m, attributes, key) == (511, magic, LEGACY_CODECS[codec], None)
    assert ts == (None if magic == 0 else max(r[2] for r in recs))
    inner = _entries(_inflate(codec, magic, value))
    first = 500 if magic == 0 else 0
    assert [(e[0], e[1], e[2]) for e in inner] == [(first + i, magic, 0) for i in range(12)]
    assert [(e[4], e[5]) for e in inner] == [(k, v) for k, v, _ in recs]
    if magic == 1:
        assert [e[3] for e in inner] == [r[2] for r in recs]


def test_uncompressed_log_append_time_marks_each_entry():
    data = encode_legacy([b"a", b"b"], timestamps=[3, 2], magic=1, timestamp_type=1)
    assert [(e[0], e[2], e[3]) for e in _entries(data)] == [(0, 0x08, 3), (1, 0x08, 2)]


def test_compressed_log_append_time_marks_the_wrapper():
    data = encode_legacy([b"a", b"b"], timestamps=[3, 2], magic=1, compression=2, timestamp_type=1)
    [(offset, _, attributes, ts, _, _)] = _entries(data)
    assert (offset, attributes, ts) == (1, 0x08 | 2, 3)


def test_lz4_magic0_writes_the_kafka_3160_header_checksum():
    """magic 0: HC hashes the magic number too (Kafka < 0.10, KAFKA-3160); magic 1: the spec's HC."""
    xxhash = pytest.importorskip("xxhash")
    v0 = _entries(encode_legacy([b"x" * 100], magic=0, compression=3))[0][5]
    v1 = _entries(encode_legacy([b"x" * 100], magic=1, compression=3, timestamps=[0]))[0][5]
    assert v0[:6] == v1[:6]
    assert v0[6] == (xxhash.xxh32(v0[0:6]).intdigest() >> 8) & 0xFF
    assert v1[6] == (xxhash.xxh32(v1[4:6]).intdigest() >> 8) & 0xFF
    assert _entries(kafka_codec.lz4_decode_old_kafka(v0))[0][5] == b"x" * 100


def test_default_timestamp_is_now():
    import time

    before = time.time_ns() // 1_000_000
    data = encode_legacy([b"a", b"b"], timestamps=[None, 5], magic=1)
    after = time.time_ns() // 1_000_000
    [first, second] = _entries(data)
    assert before <= first[3] <= after and second[3] == 5
    [only] = _entries(encode_legacy([b"a"], magic=1))
    assert before <= only[3]


def test_numpy_timestamps_and_bytes_like_values():
    np = pytest.importorskip("numpy")
    data = encode_legacy(
        [bytearray(b"ab"), memoryview(b"cd")], [memoryview(b"k"), None], timestamps=np.array([1, 2]), magic=1
    )
    assert [(e[3], e[4], e[5]) for e in _entries(data)] == [(1, b"k", b"ab"), (2, None, b"cd")]


def test_iterables_are_accepted():
    data = encode_legacy((v for v in [b"a", b"b"]), iter([b"k", None]), timestamps=[1, 2], magic=1)
    assert data == encode_legacy([b"a", b"b"], [b"k", None], timestamps=[1, 2], magic=1)


@pytest.mark.skipif(
    "magic" not in inspect.signature(kbatch.encode).parameters, reason="kbatch.encode has no magic= yet"
)
@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_kbatch_encode_magic_is_encode_legacy(codec, magic):
    recs = random_records(31, 25)
    kwargs = {"timestamps": [r[2] for r in recs], "base_offset": 9}
    got = kbatch.encode([r[1] for r in recs], [r[0] for r in recs], magic=magic, compression=codec, **kwargs)
    assert got == _encode(recs, magic=magic, compression=LEGACY_CODECS[codec], base_offset=9)


# --------------------------------------------------------------------------- same bytes as the peers


def _peer_builder(lib: str, magic: int, codec: int):
    mod = aiokafka_records if lib == "aiokafka" else kafka_legacy
    return mod.LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=2**30)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_bytes_equal_peer_builder(lib, magic):
    recs = random_records(11, 50)
    b = _peer_builder(lib, magic, 0)
    for i, (key, value, ts) in enumerate(recs):
        assert b.append(i, timestamp=ts, key=key, value=value) is not None
    assert _encode(recs, magic=magic) == bytes(b.build())


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != "none"])
@pytest.mark.parametrize("magic", [0, 1])
def test_inner_message_set_equals_peer_builder(lib, codec, magic):
    """Compressed: the inner message set is byte for byte what the peers' builders compress.

    (Their wrapper differs on purpose: a client writes offset 0 and timestamp 0 and lets
    the broker assign them; kbatch writes what the broker's log holds.)
    """
    recs = random_records(12, 40)
    plain = _peer_builder(lib, magic, 0)
    for i, (key, value, ts) in enumerate(recs):
        plain.append(i, timestamp=ts, key=key, value=value)
    [wrapper] = _entries(_encode(recs, magic=magic, compression=LEGACY_CODECS[codec]))
    assert _inflate(codec, magic, wrapper[5]) == bytes(plain.build())


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_refused(magic):
    with pytest.raises(UnsupportedError, match="zstd"):
        encode_legacy([b"a"], magic=magic, compression=4)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"magic": 2}, ValueError, "magic must be 0 or 1"),
        ({"compression": 5}, UnsupportedError, "unknown compression codec"),
        ({"compression": -1}, UnsupportedError, "unknown compression codec"),
        ({"magic": 0, "timestamp_type": 1}, ValueError, "LogAppendTime"),
        ({"timestamp_type": 2}, ValueError, "timestamp_type"),
        ({"compression_level": 3}, ValueError, "no compression level"),
        ({"compression": 3, "compression_level": 99}, ValueError, "level"),
        ({"keys": [b"k"]}, ValueError, "keys has 1 items"),
        ({"timestamps": [1, 2, 3]}, ValueError, "timestamps has 3 items"),
        ({"timestamps": [1.5, 2]}, TypeError, "timestamp 0"),
        ({"base_offset": 2**63 - 1}, ValueError, "int64"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        encode_legacy([b"a", b"b"], **kwargs)


def test_bad_value_type():
    with pytest.raises(TypeError, match="value of record 1"):
        encode_legacy([b"a", "text"], magic=1)


@pytest.mark.parametrize("codec", list(LEGACY_CODECS.values()))
def test_no_records_no_bytes(codec):
    # Java rejects an empty compressed wrapper, so nothing is written at all.
    assert encode_legacy([], magic=1, compression=codec) == b""


# --------------------------------------------------------------------------- kbatch.decode


@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
@pytest.mark.parametrize(
    ("magic", "timestamp_type"), [(0, 0), (1, 0), (1, 1)], ids=["v0", "v1-create", "v1-log-append"]
)
def test_round_trip_through_kbatch_decode(codec, magic, timestamp_type):
    recs = random_records(21, 60)
    data = _encode(recs, magic=magic, compression=LEGACY_CODECS[codec], base_offset=40, timestamp_type=timestamp_type)
    t = kbatch.decode(data)
    assert len(t) == len(recs)
    assert t.records["offset"].tolist() == list(range(40, 40 + len(recs)))
    expected_ts = [
        -1 if ts is None else ts
        for _, ts, _, _, _ in _expected(recs, magic, log_append=timestamp_type == 1, compressed=codec != "none")
    ]
    assert t.records["timestamp"].tolist() == expected_ts
    assert [t.key(i) for i in range(len(t))] == [r[0] for r in recs]
    assert [t.value(i) for i in range(len(t))] == [r[1] for r in recs]
    assert len(t.batches) == (len(recs) if codec == "none" else 1)
    assert set(t.batches["magic"].tolist()) == {magic}
    assert set(t.batches["compression"].tolist()) == {LEGACY_CODECS[codec]}
    assert set(t.batches["timestamp_type"].tolist()) == {-1 if magic == 0 else timestamp_type}
    assert t.next_offset == 40 + len(recs) and not t.truncated and t.consumed_bytes == len(data)


def test_mixed_formats_decode_in_order():
    """A log upgraded from v0 to v1 to v2: legacy entries written here, then kbatch.encode's v2."""
    data = (
        encode_legacy([b"a", b"b"], magic=0, compression=1, base_offset=0)
        + encode_legacy([b"c"], [b"k"], timestamps=[5], magic=1, base_offset=2)
        + encode_legacy([b"d", b"e"], timestamps=[6, 7], magic=1, compression=3, base_offset=3)
        + kbatch.encode([b"f"], timestamps=[8], base_offset=5)
    )
    t = kbatch.decode(data)
    assert [t.value(i) for i in range(len(t))] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert t.records["offset"].tolist() == [0, 1, 2, 3, 4, 5]
    assert t.records["timestamp"].tolist() == [-1, -1, 5, 6, 7, 8]
    assert t.batches["magic"].tolist() == [0, 1, 1, 2]
    assert t.key(2) == b"k"


def test_docstring_examples():
    import doctest

    import kbatch.codec._legacy

    result = doctest.testmod(kbatch.codec._legacy, optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", list(LEGACY_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_peer_built_legacy_decodes(lib, codec, magic):
    """The other direction: the peers' legacy builders, read by kbatch.decode.

    A client's compressed wrapper has offset 0 (the broker assigns offsets), which Java
    reads as "use the inner offsets as they are".
    """
    if codec == "lz4" and magic == 0:
        if lib == "aiokafka":
            pytest.skip("aiokafka does not write lz4 with magic 0")
        _need_old_kafka_lz4()
    recs = random_records(41, 50)
    b = _peer_builder(lib, magic, LEGACY_CODECS[codec])
    for i, (key, value, ts) in enumerate(recs):
        b.append(i, timestamp=ts, key=key, value=value)
    t = kbatch.decode(bytes(b.build()))
    assert t.records["offset"].tolist() == list(range(len(recs)))
    assert t.records["timestamp"].tolist() == [-1 if magic == 0 else r[2] for r in recs]
    assert [(t.key(i), t.value(i)) for i in range(len(t))] == [(k, v) for k, v, _ in recs]
    assert set(t.batches["magic"].tolist()) == {magic}
