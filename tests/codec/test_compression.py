"""Tests for kbatch.codec._compression: the four Kafka codecs, the arena and the size limit.

Layers: round trips; interop with kafka-python's and aiokafka's codec helpers; the
compressed payloads inside the shared conformance vectors; each codec's framing quirks
(multi-member gzip, raw vs xerial snappy, KAFKA-3160 lz4, streaming/multi-frame zstd);
decompression bombs; corruption, targeted and fuzzed.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import cramjam
import lz4.block
import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbatch.codec import _compression as C
from kbatch.codec import _gzip, _zstd
from kbatch.errors import CorruptRecordError, UnsupportedError

kafka_codec = pytest.importorskip("kafka.codec")
aiokafka_codec = pytest.importorskip("aiokafka.codec")

CODECS = {"gzip": C.GZIP, "snappy": C.SNAPPY, "lz4": C.LZ4, "zstd": C.ZSTD}
BIG = 1 << 30
VECTORS = Path(__file__).resolve().parents[3] / "shared" / "vectors"


def _records_like(n: int, seed: int = 0) -> bytes:
    """Compressible, Kafka-ish bytes: JSON-ish records with varying fields."""
    rnd = random.Random(seed)
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b'{"user":%d,"event":"%s","ts":%d,"pad":"%s"}' % (
            rnd.randrange(10**6),
            rnd.choice([b"click", b"view", b"buy"]),
            1_700_000_000_000 + i,
            b"x" * rnd.randrange(0, 40),
        )
        i += 1
    return bytes(out[:n])


SIZES = {
    "0B": b"",
    "1B": b"\x00",
    "100KiB": _records_like(100 * 1024),
    "random-100KiB": random.Random(1).randbytes(100 * 1024),
    "multiblock-1MiB": _records_like(1 << 20, seed=2),
}


def decompress(codec: int, src: Any, limit: int = BIG, magic: int = 2) -> bytes:
    arena = C.Arena()
    n = C.decompress_into(codec, src, arena, limit, magic=magic)
    assert n == arena.size
    return bytes(arena.view())


def assert_corrupt(
    codec: int, src: Any, *, magic: int = 2, limit: int = BIG, match: str | None = None
) -> None:
    with pytest.raises(CorruptRecordError, match=match) as info:
        decompress(codec, src, limit=limit, magic=magic)
    assert info.value.field == "records"


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_round_trip(codec: int, size: str) -> None:
    data = SIZES[size]
    blob = C.compress(codec, data)
    assert isinstance(blob, bytes)
    assert decompress(codec, blob) == data


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec", [C.GZIP, C.SNAPPY, C.LZ4], ids=["gzip", "snappy", "lz4"]
)
def test_round_trip_legacy_magic(codec: int, magic: int) -> None:
    data = SIZES["multiblock-1MiB"]
    assert decompress(codec, C.compress(codec, data, magic=magic), magic=magic) == data


def test_none_codec_copies() -> None:
    assert C.compress(C.NONE, b"abc") == b"abc"
    assert decompress(C.NONE, b"abc") == b"abc"
    assert_corrupt(C.NONE, b"abcd", limit=3, match="max_decompressed_size=3")


def test_input_buffers_are_read_in_place() -> None:
    data = SIZES["100KiB"]
    blob = C.compress(C.LZ4, data)
    framed = b"junk" + blob + b"more"
    assert decompress(C.LZ4, memoryview(framed)[4 : 4 + len(blob)]) == data
    assert decompress(C.LZ4, np.frombuffer(blob, dtype=np.uint8)) == data
    assert decompress(C.LZ4, bytearray(blob)) == data
    with pytest.raises(TypeError):
        decompress(C.LZ4, "not bytes")


# --------------------------------------------------------------------------- arena


def test_arena_appends_batches_in_order_and_grows() -> None:
    arena = C.Arena(16)
    parts = [SIZES["100KiB"], b"", b"x", SIZES["multiblock-1MiB"]]
    codecs = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
    for codec, part in zip(codecs, parts, strict=True):
        assert C.decompress_into(codec, C.compress(codec, part), arena, BIG) == len(
            part
        )
    joined = b"".join(parts)
    assert arena.size == len(joined)
    assert arena.capacity >= arena.size
    assert bytes(arena.view()) == joined
    res = arena.result()
    assert isinstance(res, np.ndarray)
    assert res.dtype == np.uint8
    assert res.tobytes() == joined
    assert not res.flags.writeable
    assert arena.view().readonly


def test_arena_result_is_not_a_copy() -> None:
    arena = C.Arena()
    C.decompress_into(C.SNAPPY, C.compress(C.SNAPPY, b"hello world"), arena, BIG)
    res = arena.result()
    assert res.base is not None  # a view over the arena's buffer
    assert np.shares_memory(res, np.frombuffer(arena.view(), dtype=np.uint8))


def test_arena_result_survives_later_growth() -> None:
    arena = C.Arena()
    C.decompress_into(C.NONE, b"first", arena, BIG)
    first = arena.result()
    C.decompress_into(C.LZ4, C.compress(C.LZ4, SIZES["multiblock-1MiB"]), arena, BIG)
    assert first.tobytes() == b"first"
    assert arena.result().tobytes() == b"first" + SIZES["multiblock-1MiB"]


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_failed_call_leaves_the_arena_as_it_was(codec: int) -> None:
    arena = C.Arena()
    C.decompress_into(C.NONE, b"kept", arena, BIG)
    blob = C.compress(codec, SIZES["multiblock-1MiB"])
    for bad, limit in ((blob[: len(blob) // 2], BIG), (blob, 1000)):
        with pytest.raises(CorruptRecordError):
            C.decompress_into(codec, bad, arena, limit)
        assert arena.size == 4
        assert bytes(arena.view()) == b"kept"


def test_arena_rejects_negative_initial() -> None:
    with pytest.raises(ValueError):
        C.Arena(-1)


def test_limit_counts_the_whole_arena() -> None:
    arena = C.Arena()
    C.decompress_into(C.NONE, b"x" * 60, arena, 100)
    with pytest.raises(CorruptRecordError, match="exceeds max_decompressed_size=100"):
        C.decompress_into(C.GZIP, C.compress(C.GZIP, b"y" * 41), arena, 100)
    arena2 = C.Arena()
    C.decompress_into(C.NONE, b"x" * 60, arena2, 100)
    assert C.decompress_into(C.GZIP, C.compress(C.GZIP, b"y" * 40), arena2, 100) == 40


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_limit_is_inclusive(codec: int) -> None:
    data = SIZES["100KiB"]
    blob = C.compress(codec, data)
    assert decompress(codec, blob, limit=len(data)) == data
    assert_corrupt(
        codec, blob, limit=len(data) - 1, match=f"max_decompressed_size={len(data) - 1}"
    )


# --------------------------------------------------------------------------- what we write


def test_gzip_writes_one_member_at_kafkas_default_level() -> None:
    data = SIZES["100KiB"]
    blob = C.compress(C.GZIP, data)
    assert blob[:3] == b"\x1f\x8b\x08"
    assert blob == C.compress(C.GZIP, data, 6) == C.compress(C.GZIP, data, -1)
    assert len(C.compress(C.GZIP, data, 1)) > len(C.compress(C.GZIP, data, 9))
    assert gzip.decompress(blob) == data
    for bad in (0, 10, -2):
        with pytest.raises(ValueError):
            C.compress(C.GZIP, data, bad)


def test_snappy_writes_xerial_with_32k_blocks() -> None:
    data = SIZES["100KiB"]
    blob = C.compress(C.SNAPPY, data)
    assert blob[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    while pos < len(blob):
        (n,) = struct.unpack_from(">i", blob, pos)
        sizes.append(cramjam.snappy.decompress_raw_len(blob[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    assert sizes == [32768, 32768, 32768, 4096]
    with pytest.raises(ValueError):
        C.compress(C.SNAPPY, data, 1)


def test_lz4_writes_kafkas_frame() -> None:
    data = SIZES["multiblock-1MiB"]
    blob = C.compress(C.LZ4, data)
    # magic, FLG=0x60 (v1, independent blocks, no checksums, no size), BD=0x40 (64 KiB), HC
    assert blob[:7] == bytes.fromhex("04224d18604082")
    assert blob[-4:] == b"\x00\x00\x00\x00"
    assert lz4.frame.decompress(blob) == data  # liblz4 agrees it is a valid frame
    assert C.compress(C.LZ4, data, 9) == blob  # level 9 is Java's fast compressor
    hc = C.compress(C.LZ4, data, 12)
    assert hc != blob
    assert decompress(C.LZ4, hc) == data
    incompressible = SIZES["random-100KiB"]
    stored = C.compress(C.LZ4, incompressible)
    (word,) = struct.unpack_from("<I", stored, 7)
    # stored uncompressed, as Lz4BlockOutputStream does with incompressible blocks
    assert word == 0x80000000 | 65536
    for bad in (0, 18):
        with pytest.raises(ValueError):
            C.compress(C.LZ4, data, bad)


def _lz4_blocks(frame: bytes, block_checksums: bool) -> list[bytes]:
    """The data blocks of a 7-byte-header LZ4 frame, with their size words."""
    blocks, pos = [], 7
    while (word := struct.unpack_from("<I", frame, pos)[0]) != 0:
        end = pos + 4 + (word & 0x7FFFFFFF)
        blocks.append(frame[pos:end])
        pos = end + (4 if block_checksums else 0)
    return blocks


def test_lz4_fast_blocks_are_aiokafkas_and_stand_alone() -> None:
    # At Kafka's default level the blocks are byte for byte those of aiokafka's
    # compressor (cramjam, level 0, independent blocks; it adds block checksums), so
    # the compressed size is the same; each block decodes with no other block before it.
    data = SIZES["multiblock-1MiB"] + SIZES["random-100KiB"]
    ours = C.compress(C.LZ4, data)
    theirs = cramjam.lz4.Compressor(level=0, content_checksum=False, block_linked=False)
    theirs.compress(data)
    frame = bytes(theirs.finish())
    assert frame[4] == 0x70  # (block checksums)
    assert _lz4_blocks(ours, False) == _lz4_blocks(frame, True)
    for i, block in enumerate(_lz4_blocks(ours, False)):
        raw = data[i * 65536 : (i + 1) * 65536]
        (word,) = struct.unpack_from("<I", block)
        alone = block[4:] if word >> 31 else lz4.block.decompress(block[4:], uncompressed_size=65536)
        assert alone == raw


def test_lz4_magic0_writes_the_kafka_3160_checksum() -> None:
    # Java's MessageCompressionTest feeds KafkaLZ4BlockInputStream 04 22 4D 18 60 40 1A
    # for magic 0: 0x1A is xxh32 over magic + descriptor, the broken checksum.
    assert C.compress(C.LZ4, b"", magic=0)[:7] == bytes.fromhex("04224d1860401a")
    assert C.compress(C.LZ4, b"", magic=1)[:7] == bytes.fromhex("04224d18604082")


def test_zstd_compressors_are_kept_per_thread_and_level() -> None:
    # made once per thread and level (their tables cost ~15% of a batch), never shared by
    # two threads; a kept one writes the same bytes as a new one
    import concurrent.futures

    one, again = _zstd._zstd_compressor(3), _zstd._zstd_compressor(3)
    assert one is again and _zstd._zstd_compressor(7) is not one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(_zstd._zstd_compressor, 3).result() is not one
    data = bytes(range(256)) * 400
    for level in (3, 7):
        made = zstandard.ZstdCompressor(level=level).compress(data)
        assert C.compress(C.ZSTD, data, level) == made
        assert C.compress(C.ZSTD, data, level) == made


def test_zstd_writes_one_frame_with_content_size() -> None:
    data = SIZES["100KiB"]
    blob = C.compress(C.ZSTD, data)
    assert zstandard.frame_content_size(blob) == len(data)
    assert blob == C.compress(C.ZSTD, data, 3)
    assert len(C.compress(C.ZSTD, data, 19)) < len(C.compress(C.ZSTD, data, 1))
    with pytest.raises(ValueError):
        C.compress(C.ZSTD, data, 23)


def test_codec_checks() -> None:
    with pytest.raises(UnsupportedError, match="unknown compression codec id 5"):
        decompress(5, b"x")
    with pytest.raises(UnsupportedError, match="unknown compression codec id 7"):
        C.compress(7, b"x")
    for magic in (0, 1):
        with pytest.raises(UnsupportedError, match="zstd not allowed"):
            decompress(C.ZSTD, C.compress(C.ZSTD, b"x"), magic=magic)
        with pytest.raises(UnsupportedError, match="zstd not allowed"):
            C.compress(C.ZSTD, b"x", magic=magic)


# --------------------------------------------------------------------------- interop

INTEROP_SIZES = ["0B", "1B", "100KiB", "multiblock-1MiB"]

THEIR_ENCODERS = {
    ("kafka-python", "gzip"): kafka_codec.gzip_encode,
    ("kafka-python", "snappy"): kafka_codec.snappy_encode,
    ("kafka-python", "snappy-raw"): lambda d: kafka_codec.snappy_encode(
        d, xerial_compatible=False
    ),
    ("kafka-python", "lz4"): kafka_codec.lz4_encode,
    ("kafka-python", "zstd"): kafka_codec.zstd_encode,
    ("aiokafka", "gzip"): aiokafka_codec.gzip_encode,
    ("aiokafka", "snappy"): aiokafka_codec.snappy_encode,
    ("aiokafka", "snappy-raw"): lambda d: aiokafka_codec.snappy_encode(
        d, xerial_compatible=False
    ),
    ("aiokafka", "lz4"): aiokafka_codec.lz4_encode,
    ("aiokafka", "zstd"): aiokafka_codec.zstd_encode,
}
THEIR_DECODERS = {
    ("kafka-python", "gzip"): kafka_codec.gzip_decode,
    ("kafka-python", "snappy"): kafka_codec.snappy_decode,
    ("kafka-python", "lz4"): kafka_codec.lz4_decode,
    ("kafka-python", "zstd"): kafka_codec.zstd_decode,
    ("aiokafka", "gzip"): aiokafka_codec.gzip_decode,
    ("aiokafka", "snappy"): aiokafka_codec.snappy_decode,
    ("aiokafka", "lz4"): aiokafka_codec.lz4_decode,
    ("aiokafka", "zstd"): aiokafka_codec.zstd_decode,
}


@pytest.mark.parametrize("size", INTEROP_SIZES)
@pytest.mark.parametrize("lib_codec", THEIR_ENCODERS, ids=lambda k: f"{k[0]}-{k[1]}")
def test_theirs_decode_with_ours(lib_codec: tuple[str, str], size: str) -> None:
    data = SIZES[size]
    blob = THEIR_ENCODERS[lib_codec](data)
    codec = CODECS[lib_codec[1].split("-")[0]]
    assert decompress(codec, blob) == data


@pytest.mark.parametrize("size", INTEROP_SIZES)
@pytest.mark.parametrize("lib_codec", THEIR_DECODERS, ids=lambda k: f"{k[0]}-{k[1]}")
def test_ours_decode_with_theirs(lib_codec: tuple[str, str], size: str) -> None:
    data = SIZES[size]
    blob = C.compress(CODECS[lib_codec[1]], data)
    if lib_codec[1] == "snappy" and not data:
        # Like Java's SnappyOutputStream we write a bare 16-byte xerial header for empty
        # input; both helpers only detect xerial framing when len(payload) > 16.
        pytest.skip("kafka-python/aiokafka do not read a header-only xerial stream")
    assert bytes(THEIR_DECODERS[lib_codec](blob)) == data


# --------------------------------------------------------------------------- vectors


def _payloads(buf: bytes) -> list[tuple[int, int, bytes | None]]:
    """(codec, magic, compressed payload) of each complete outer entry of a buffer.

    v2: the records start at byte 61 of the batch and end at 12 + batch_length; v0/v1
    (offset, size, crc, magic, attributes, [timestamp], key, value): the value.
    """
    out: list[tuple[int, int, bytes | None]] = []
    pos = 0
    while pos + 17 <= len(buf):
        _, size = struct.unpack_from(">qi", buf, pos)
        if size < 0 or pos + 12 + size > len(buf):
            break
        magic = buf[pos + 16]
        if magic == 2:
            (attr,) = struct.unpack_from(">h", buf, pos + 21)
            out.append((attr & 7, 2, buf[pos + 61 : pos + 12 + size]))
        else:
            attr = buf[pos + 17]
            p = pos + 18 + (8 if magic == 1 else 0)
            (klen,) = struct.unpack_from(">i", buf, p)
            p += 4 + max(klen, 0)
            (vlen,) = struct.unpack_from(">i", buf, p)
            out.append(
                (attr & 7, magic, buf[p + 4 : p + 4 + vlen] if vlen >= 0 else None)
            )
        pos += 12 + size
    return out


def _compressed_vectors() -> list[Any]:
    if not VECTORS.is_dir():
        return [
            pytest.param(None, marks=pytest.mark.skip(reason=f"{VECTORS} not present"))
        ]
    found = []
    for path in sorted(VECTORS.glob("*.json")):
        vec = json.loads(path.read_text())
        if set(vec.get("covers", ())) & set(CODECS):
            found.append(pytest.param(vec, id=vec["id"]))
    return found


@pytest.mark.parametrize("vec", _compressed_vectors())
def test_vector_payloads_decompress(vec: dict[str, Any]) -> None:
    entries = [e for e in _payloads(bytes.fromhex(vec["hex"])) if e[0] != C.NONE]
    assert entries, "vector has no compressed entry"
    for codec, magic, payload in entries:
        assert payload is not None
        if codec == C.ZSTD and magic < 2:
            # Java rejects zstd in legacy message sets; the bytes are still valid zstd.
            with pytest.raises(UnsupportedError, match="zstd not allowed"):
                decompress(codec, payload, magic=magic)
            magic = 2
        out = decompress(codec, payload, magic=magic)
        if vec["expect"].get("ok") and magic == 2:
            n = sum(b["record_count"] for b in vec["expect"]["batches"])
            assert (len(out) > 0) == (n > 0)
        if magic < 2 and "empty_wrapper" not in vec["covers"]:
            assert len(out) >= 26  # at least one inner message set entry
        if "empty_wrapper" in vec["covers"]:
            assert out == b""


# --------------------------------------------------------------------------- gzip


def test_gzip_several_members() -> None:
    a, b = SIZES["100KiB"], SIZES["multiblock-1MiB"]
    blob = gzip.compress(a) + gzip.compress(b"") + gzip.compress(b, 1)
    assert decompress(C.GZIP, blob) == a + b
    assert decompress(C.GZIP, blob, limit=len(a) + len(b)) == a + b
    assert_corrupt(
        C.GZIP, blob, limit=len(a) + len(b) - 1, match="max_decompressed_size"
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.binary(max_size=3000).map(lambda b: b * 7), min_size=1, max_size=4),
    tail=st.sampled_from([b"", b"junk", b"\x1f\x8b\x08", b"\x1f\x8b\x08" + bytes(20)]),
    flip=st.one_of(st.none(), st.integers(min_value=0)),
    limit=st.sampled_from([C.DEFAULT_MAX_DECOMPRESSED_SIZE, 9000]),
)
def test_gzip_members_decode_as_the_member_loop_does(
    parts: list[bytes], tail: bytes, flip: int | None, limit: int
) -> None:
    # Several members take cramjam's whole-payload inflate; whatever it accepts must be
    # what the zlib member loop (GZIPInputStream's rules) gives, and whatever either
    # refuses ends in the loop's own error.
    blob = bytearray(b"".join(gzip.compress(p, 6) for p in parts) + tail)
    if flip is not None:
        blob[flip % len(blob)] ^= 1 << (flip % 8)

    def run(decode: Any) -> object:
        arena = C.Arena()
        try:
            decode(memoryview(bytes(blob)), arena, limit)
        except CorruptRecordError as e:
            return str(e)
        return bytes(arena.view())

    assert run(_gzip.gunzip) == run(_gzip._gunzip_stream)


def test_gzip_trailing_bytes_are_ignored_like_gzipinputstream() -> None:
    data = SIZES["100KiB"]
    assert decompress(C.GZIP, gzip.compress(data) + b"\x00" * 8) == data
    assert decompress(C.GZIP, gzip.compress(data) + b"not a gzip member") == data


def test_gzip_zero_mtime_and_fname_headers() -> None:
    data = b"payload" * 100
    buf = __import__("io").BytesIO()
    with gzip.GzipFile(filename="name.txt", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(data)
    assert decompress(C.GZIP, buf.getvalue()) == data


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:-1], "truncated|corrupt"),
        (lambda b: b[:-8], "truncated|corrupt"),
        (lambda b: b[:20], "truncated"),
        (
            lambda b: b[:-8] + (zlib.crc32(b"x") ^ 1).to_bytes(4, "little") + b[-4:],
            "corrupt",
        ),
        (lambda b: b[:-4] + (123).to_bytes(4, "little"), "corrupt"),  # wrong ISIZE
        (lambda b: b"\x1f\x8b\x07" + b[3:], "corrupt"),
        (lambda b: b"", "empty"),
        (lambda b: b + gzip.compress(b"more")[:15], "truncated"),
    ],
    ids=[
        "cut-1",
        "cut-trailer",
        "cut-20",
        "bad-crc",
        "bad-isize",
        "bad-method",
        "empty",
        "cut-second-member",
    ],
)
def test_gzip_corrupt(mutate: Any, match: str) -> None:
    assert_corrupt(C.GZIP, mutate(gzip.compress(SIZES["100KiB"])), match=match)


# --------------------------------------------------------------------------- snappy


def test_snappy_raw_and_xerial() -> None:
    data = SIZES["multiblock-1MiB"]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert not raw.startswith(b"\x82SNAPPY")
    assert decompress(C.SNAPPY, raw) == data
    assert decompress(C.SNAPPY, C.compress(C.SNAPPY, data)) == data
    # xerial with a header only (no chunks) is an empty payload
    assert decompress(C.SNAPPY, C.compress(C.SNAPPY, b"")) == b""
    assert C.compress(C.SNAPPY, b"") == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def test_snappy_xerial_variants_java_reads() -> None:
    a, b = b"first " * 1000, b"second " * 1000
    # concatenated xerial streams (SnappyInputStream reads on past a second header)
    assert (
        decompress(C.SNAPPY, C.compress(C.SNAPPY, a) + C.compress(C.SNAPPY, b)) == a + b
    )
    # version/compat written little-endian (redpanda) is still version >= 1
    le = bytearray(C.compress(C.SNAPPY, a))
    le[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(C.SNAPPY, bytes(le)) == a
    # xerial block sizes other than 32 KiB
    assert (
        decompress(C.SNAPPY, kafka_codec.snappy_encode(a + b, xerial_blocksize=1000))
        == a + b
    )


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:16] + struct.pack(">i", 10**6) + b[20:], "does not fit"),
        (lambda b: b[:16] + struct.pack(">i", -1) + b[20:], "does not fit"),
        (lambda b: b[:16] + struct.pack(">i", 5) + b[20:], "corrupt|snappy"),
        (lambda b: b[:-3], "does not fit"),
        (lambda b: b + b"\x00\x00", "length is truncated"),
        (lambda b: b[:8] + struct.pack(">ii", 0, 1) + b[16:], "version 0"),
        (lambda b: b[:20] + b"\xff" * 12 + b[32:], "corrupt|snappy|claims"),
    ],
    ids=[
        "len-too-big",
        "len-negative",
        "len-too-small",
        "cut",
        "short-length",
        "version-0",
        "garbage",
    ],
)
def test_snappy_xerial_corrupt(mutate: Any, match: str) -> None:
    assert_corrupt(C.SNAPPY, mutate(C.compress(C.SNAPPY, SIZES["100KiB"])), match=match)


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x80", b"\x05ab", b"\xff\xff\xff\xff\xff\x01", b"\x10\x00\x01\x02"],
    ids=["empty", "unterminated-varint", "short", "varint-too-long", "bad-literal"],
)
def test_snappy_raw_corrupt(blob: bytes) -> None:
    assert_corrupt(C.SNAPPY, blob)


# --------------------------------------------------------------------------- lz4


def _lz4_frame(data: bytes, **kw: Any) -> bytes:
    kw.setdefault("block_linked", False)
    return bytes(lz4.frame.compress(data, **kw))


@pytest.mark.parametrize(
    "kw",
    [
        {"store_size": True},
        {"store_size": False},
        {"content_checksum": True},
        {"block_checksum": True},
        {"block_checksum": True, "content_checksum": True, "store_size": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX256KB, "compression_level": 9},
    ],
    ids=[
        "content-size",
        "no-size",
        "content-checksum",
        "block-checksum",
        "all-flags",
        "4MiB-blocks",
        "hc",
    ],
)
def test_lz4_frames_liblz4_writes(kw: dict[str, Any]) -> None:
    data = SIZES["multiblock-1MiB"]
    assert decompress(C.LZ4, _lz4_frame(data, **kw)) == data
    assert decompress(C.LZ4, _lz4_frame(b"", **kw)) == b""


def test_lz4_kafka_3160_broken_header_checksum() -> None:
    data = SIZES["100KiB"]
    broken = C.compress(C.LZ4, data, magic=0)
    assert broken[6] == 0x1A
    assert decompress(C.LZ4, broken, magic=0) == data
    # magic 1 and 2 readers check HC, as KafkaLZ4BlockInputStream does
    for magic in (1, 2):
        assert_corrupt(C.LZ4, broken, magic=magic, match="descriptor checksum")
    # Java ignores HC for magic 0, so a correct one is read too (0.10+ writers)
    assert decompress(C.LZ4, C.compress(C.LZ4, data), magic=0) == data
    # and frames with checksums, which go through liblz4, still read with the broken HC
    framed = bytearray(_lz4_frame(data, block_checksum=True, store_size=False))
    framed[6] = C.lz4_hc(bytes(framed[:6]))
    assert decompress(C.LZ4, bytes(framed), magic=0) == data
    assert_corrupt(C.LZ4, bytes(framed), magic=1, match="descriptor checksum")


def _flip(blob: bytes, i: int) -> bytes:
    b = bytearray(blob)
    b[i] ^= 0x01
    return bytes(b)


def test_lz4_bad_checksums() -> None:
    data = SIZES["100KiB"]
    blk = _lz4_frame(data, block_checksum=True, store_size=False)
    (size,) = struct.unpack_from("<I", blk, 7)
    # the block checksum itself, then the block data
    assert_corrupt(C.LZ4, _flip(blk, 7 + 4 + size), match="lz4")
    assert_corrupt(C.LZ4, _flip(blk, 7 + 4 + 10), match="lz4")
    cc = _lz4_frame(data, content_checksum=True, store_size=False)
    assert_corrupt(C.LZ4, _flip(cc, len(cc) - 1), match="lz4")


def test_lz4_rejects_what_java_rejects() -> None:
    data = SIZES["multiblock-1MiB"]
    linked = bytes(lz4.frame.compress(data, block_linked=True))
    assert_corrupt(C.LZ4, linked, match="dependent")
    good = C.compress(C.LZ4, data)

    def with_descriptor(flg: int, bd: int) -> bytes:
        return good[:4] + bytes((flg, bd, C.lz4_hc(bytes((flg, bd))))) + good[7:]

    assert_corrupt(C.LZ4, with_descriptor(0x61, 0x40), match="reserved")
    assert_corrupt(C.LZ4, with_descriptor(0xA0, 0x40), match="version")
    assert_corrupt(C.LZ4, with_descriptor(0x60, 0x30), match="block size value")
    assert_corrupt(C.LZ4, with_descriptor(0x60, 0x41), match="reserved")
    assert_corrupt(C.LZ4, b"\x05" + good[1:], match="magic")
    # a block larger than BD allows (64 KiB)
    big = bytearray(good)
    struct.pack_into("<I", big, 7, 65537)
    assert_corrupt(C.LZ4, bytes(big), match="exceeds the frame's maximum")


@pytest.mark.parametrize(
    "cut", [0, 3, 6, 7, 9, 100, -5, -4, -1], ids=lambda c: f"cut{c}"
)
def test_lz4_truncated(cut: int) -> None:
    good = C.compress(C.LZ4, SIZES["100KiB"])
    assert_corrupt(C.LZ4, good[:cut], match="lz4")


def test_lz4_uncompressed_size_zero_block_is_the_end_mark() -> None:
    # Java masks the "uncompressed" bit before comparing with 0
    # (bytes after it: tests/codec/test_lz4_frames.py)
    good = C.compress(C.LZ4, b"abc" * 100)
    assert decompress(C.LZ4, good[:-4] + b"\x00\x00\x00\x80") == b"abc" * 100


# --------------------------------------------------------------------------- zstd


def test_zstd_streaming_frames_without_content_size() -> None:
    data = SIZES["multiblock-1MiB"]
    cobj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    blob = b"".join(
        [cobj.compress(data[i : i + 16384]) for i in range(0, len(data), 16384)]
    )
    blob += cobj.flush()
    assert zstandard.frame_content_size(blob) == -1
    assert decompress(C.ZSTD, blob) == data
    assert decompress(C.ZSTD, blob, limit=len(data)) == data
    assert_corrupt(C.ZSTD, blob, limit=len(data) - 1, match="max_decompressed_size")


def test_zstd_several_frames_and_skippable_frames() -> None:
    a, b = SIZES["100KiB"], SIZES["multiblock-1MiB"]
    skippable = struct.pack("<II", 0x184D2A53, 5) + b"hello"
    nosize = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True)
    blob = (
        C.compress(C.ZSTD, a) + skippable + nosize.compress(b) + C.compress(C.ZSTD, b"")
    )
    assert decompress(C.ZSTD, blob) == a + b


def test_zstd_as_librdkafka_and_aiokafka_write() -> None:
    data = SIZES["100KiB"]
    assert decompress(C.ZSTD, bytes(cramjam.zstd.compress(data, level=3))) == data


def test_zstd_bad_content_size_is_not_trusted() -> None:
    data = b"z" * 1000
    blob = bytearray(zstandard.ZstdCompressor(write_checksum=False).compress(data))
    fhd = blob[4]
    assert fhd >> 6 == 1  # 2-byte content size: value - 256
    struct.pack_into("<H", blob, 5, 2000)  # claims 2256 bytes
    assert_corrupt(C.ZSTD, bytes(blob), match="zstd")
    struct.pack_into(
        "<H", blob, 5, 0
    )  # claims 256 bytes: the arena gets only that much
    assert_corrupt(C.ZSTD, bytes(blob), match="zstd")
    big = bytearray(zstandard.ZstdCompressor().compress(SIZES["multiblock-1MiB"]))
    assert big[4] >> 6 == 2  # 4-byte content size
    struct.pack_into("<I", big, 5 if big[4] & 0x20 else 6, 100)  # after [window]
    assert_corrupt(C.ZSTD, bytes(big), match="zstd")


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b[:3], "truncated"),
        (lambda b: b + b[:7], "truncated"),  # a second frame cut short
        (lambda b: b + b"garbage!", "bad magic"),
        (lambda b: b"\x29" + b[1:], "bad magic"),
        (lambda b: b"", "empty"),
        (lambda b: _flip(b, len(b) - 1), "corrupt"),  # checksum
        (lambda b: _flip(b, len(b) // 2), "corrupt|truncated|reserved"),
    ],
    ids=[
        "cut-1",
        "cut-half",
        "cut-3",
        "second-frame-cut",
        "trailing-garbage",
        "bad-magic",
        "empty",
        "bad-checksum",
        "flip-middle",
    ],
)
def test_zstd_corrupt(mutate: Any, match: str) -> None:
    blob = zstandard.ZstdCompressor(write_checksum=True).compress(SIZES["100KiB"])
    assert_corrupt(C.ZSTD, mutate(blob), match=match)


def test_zstd_frame_cut_at_a_block_boundary() -> None:
    # libzstd's stream reader reports such a cut as a clean end; the frame walk does not.
    data = random.Random(3).randbytes(300_000)  # incompressible: several raw blocks
    blob = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    first = int.from_bytes(blob[6:9], "little") >> 3
    assert_corrupt(C.ZSTD, blob[: 6 + 3 + first], match="truncated")


# --------------------------------------------------------------------------- bombs

BOMB_LIMIT = 1 << 20


def _bomb(codec: int) -> bytes:
    zeros = bytes(64 << 20)
    if codec == C.GZIP:
        return gzip.compress(zeros, 9)
    if codec == C.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(zeros))
    if codec == C.LZ4:
        return C.compress(C.LZ4, zeros)
    return zstandard.ZstdCompressor(write_content_size=False).compress(zeros)


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_real_bomb_stops_at_the_limit(codec: int) -> None:
    blob = _bomb(codec)
    arena = C.Arena()
    # How fast it stops is a figure of bench/test_bench_compression.py (reported, not asserted).
    with pytest.raises(CorruptRecordError, match=f"max_decompressed_size={BOMB_LIMIT}"):
        C.decompress_into(codec, blob, arena, BOMB_LIMIT)
    assert arena.capacity <= 2 * BOMB_LIMIT + (4 << 20)


def _claims_4gib(codec: int) -> bytes:
    if codec == C.GZIP:  # a member whose trailer claims 4 GiB - 1
        return gzip.compress(b"tiny")[:-4] + b"\xff\xff\xff\xff"
    if codec == C.SNAPPY:
        return b"\xff\xff\xff\xff\x0f" + b"\x00" * 5
    if codec == C.LZ4:
        # content size field 4 GiB (Java skips the field), one small block
        hdr = bytes((0x68, 0x40)) + (1 << 32).to_bytes(8, "little")
        return (
            b"\x04\x22\x4d\x18"
            + hdr
            + bytes((C.lz4_hc(hdr),))
            + C.compress(C.LZ4, b"tiny")[7:]
        )
    # single-segment frame whose content size field says 4 GiB
    frame = bytearray(zstandard.ZstdCompressor().compress(b"tiny"))
    return (
        b"\x28\xb5\x2f\xfd"
        + bytes((0xE0,))
        + (1 << 32).to_bytes(8, "little")
        + bytes(frame[6:])
    )


@pytest.mark.parametrize("limit", [BOMB_LIMIT, 8 << 30])
@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_small_payload_claiming_4gib_fails_fast_without_allocating(
    codec: int, limit: int
) -> None:
    arena = C.Arena()
    tracemalloc.start()
    try:
        if codec == C.LZ4:
            # Lz4BlockInputStream skips the content size without reading it; so do we.
            assert C.decompress_into(codec, _claims_4gib(codec), arena, limit) == 4
        else:
            with pytest.raises(CorruptRecordError):
                C.decompress_into(codec, _claims_4gib(codec), arena, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # nothing sized by the claim was allocated (NumPy and bytes are traced)
    assert arena.capacity < 1 << 20


# --------------------------------------------------------------------------- fuzzing


def _samples() -> dict[int, list[bytes]]:
    data = _records_like(5000, seed=7)
    return {
        C.GZIP: [
            C.compress(C.GZIP, data),
            gzip.compress(data[:100]) + gzip.compress(data),
        ],
        C.SNAPPY: [
            C.compress(C.SNAPPY, data),
            bytes(cramjam.snappy.compress_raw(data)),
        ],
        C.LZ4: [
            C.compress(C.LZ4, data),
            _lz4_frame(
                data, block_checksum=True, content_checksum=True, store_size=True
            ),
        ],
        C.ZSTD: [
            zstandard.ZstdCompressor(write_checksum=True).compress(data),
            zstandard.ZstdCompressor(write_content_size=False).compress(data) * 2,
        ],
    }


SAMPLES = _samples()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("drop"), st.integers(0, 1 << 16), st.integers(1, 16)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.integers(0, 255)),
)


def _mutate(blob: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    b = bytearray(blob)
    for kind, where, arg in ops:
        if not b:
            break
        i = where % len(b)
        if kind == "flip":
            b[i] ^= arg
        elif kind == "cut":
            del b[i:]
        elif kind == "drop":
            del b[i : i + arg]
        else:
            b.insert(i, arg)
    return bytes(b)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(list(CODECS.values())),
    which=st.integers(0, 1),
    ops=st.lists(mutation, min_size=1, max_size=4),
    magic=st.sampled_from([0, 2]),
)
def test_fuzz_mutations_raise_corrupt_or_decode(
    codec: int, which: int, ops: list[tuple[str, int, int]], magic: int
) -> None:
    if codec == C.ZSTD:
        magic = 2
    blob = _mutate(SAMPLES[codec][which], ops)
    arena = C.Arena()
    try:
        n = C.decompress_into(codec, blob, arena, 1 << 20, magic=magic)
    except CorruptRecordError as e:
        assert e.field == "records"
        assert e.reason
    else:
        assert n == arena.size <= 1 << 20


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(list(CODECS.values())), blob=st.binary(max_size=200))
def test_fuzz_random_bytes(codec: int, blob: bytes) -> None:
    arena = C.Arena()
    try:
        C.decompress_into(codec, blob, arena, 1 << 20)
    except CorruptRecordError:
        pass


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(list(CODECS.values())), data=st.binary(max_size=70000))
def test_fuzz_round_trip(codec: int, data: bytes) -> None:
    assert decompress(codec, C.compress(codec, data)) == data


# --------------------------------------------------------------------------- threads


def test_threads_decode_concurrently_and_correctly() -> None:
    from concurrent.futures import ThreadPoolExecutor

    data = {c: SIZES["multiblock-1MiB"][: 300_000 + 1000 * c] for c in CODECS.values()}
    blobs = {c: C.compress(c, d) for c, d in data.items()}
    jobs = [c for c in CODECS.values() for _ in range(6)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda c: (c, decompress(c, blobs[c])), jobs))
    for c, out in outs:
        assert out == data[c]


@pytest.mark.parametrize("codec", CODECS.values(), ids=list(CODECS))
def test_decompression_beside_a_python_thread(codec: int) -> None:
    """A decompression and a spinning Python thread both finish, the output whole.

    How freely the other thread runs meanwhile (the GIL released around the codec) is a figure
    of bench/test_bench_compression.py, reported there beside a call that holds the GIL.
    """
    import threading

    data = _records_like(4 << 20, seed=9) * 8  # 32 MiB: tens of ms in C
    blob = C.compress(codec, data)
    spins = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal spins
        while not stop.is_set():
            spins += 1

    th = threading.Thread(target=spin)
    th.start()
    try:
        arena = C.Arena()
        C.decompress_into(codec, blob, arena, BIG)
    finally:
        stop.set()
        th.join()
    assert not th.is_alive() and spins > 0
    assert arena.size == len(data) and bytes(arena.view()) == data
