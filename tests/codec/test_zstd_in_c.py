"""zstd decompressed in C equals (and fails as) zstd through kbatch.codec._compression."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator

import pytest
import zstandard
from support.twocores import batch_at, compressed_batches, outcome, same_table

import kbatch
from kbatch.codec import _core as core

# A chunk whose every batch is one zstd frame (with a content size, as kbatch and
# aiokafka write them, or without, as Java and librdkafka stream them) is decompressed
# by libzstd's one-shot decoder in C (on two threads from both ends, for frames without
# a content size; sized ones go to the pieces of _inflate_chunk first); _compression (one
# batch at a time) is the reference it must equal, and what it falls back on.


@contextlib.contextmanager
def _python_zstd_only() -> Iterator[None]:
    core._zstd_in_c(False)
    try:
        yield
    finally:
        core._zstd_in_c(True)


def _zstd_c_chunks() -> int:
    return int(core._zstd_in_c()[1])


def _three_ways(monkeypatch: pytest.MonkeyPatch, data: bytes, **kwargs):  # type: ignore[no-untyped-def]
    with _python_zstd_only():
        reference = outcome(monkeypatch, 1, data, **kwargs)
    before = _zstd_c_chunks()
    one, two = (outcome(monkeypatch, c, data, **kwargs) for c in (1, 2))
    return reference, one, two, _zstd_c_chunks() - before


def test_zstd_is_decompressed_in_c() -> None:
    assert core._zstd_in_c()[0]


@pytest.mark.parametrize("kinds", [[b"sized"], [b"stream"], [b"sized", b"stream"]])
def test_zstd_in_c_equals_python(monkeypatch: pytest.MonkeyPatch, kinds: list[bytes]) -> None:
    data = compressed_batches(kinds * (120 // len(kinds)))
    (t0, e0), (t1, e1), (t2, e2), chunks = _three_ways(monkeypatch, data)
    assert e0 is None and e1 is None and e2 is None
    same_table(t0, t1)
    same_table(t0, t2)
    assert len(t0.records) == 120 * 20
    # on one thread every chunk; on two those of frames without a content size (sized ones
    # go to _inflate_chunk's pieces first, tests/codec/test_chunk_decompression.py)
    assert chunks >= (2 * 3 if kinds == [b"stream"] else 3)


def _with_payload(data: bytes, k: int, payload: bytes) -> bytes:
    """``data`` with batch ``k``'s records replaced by ``payload`` (length and CRC left: verify_crc=False)."""
    pos, length = batch_at(data, k)
    head = bytearray(data[pos : pos + 61])
    struct.pack_into(">i", head, 8, 49 + len(payload))
    return data[:pos] + bytes(head) + payload + data[pos + 12 + length :]


def _records_of(data: bytes, k: int) -> bytes:
    pos, length = batch_at(data, k)
    return zstandard.ZstdDecompressor().decompressobj().decompress(data[pos + 61 : pos + 12 + length])


@pytest.mark.parametrize(
    "damage",
    ["flipped block byte", "content size too large", "content size too small", "cut", "checksum", "two frames"],
)
def test_zstd_in_c_fails_or_decodes_as_python(monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    data = compressed_batches([b"sized"] * 30)
    k = 17
    raw = _records_of(data, k)
    if damage == "flipped block byte":
        payload = bytearray(zstandard.ZstdCompressor(level=3).compress(raw))
        payload[len(payload) // 2] ^= 0x5A
    elif damage.startswith("content size"):
        payload = bytearray(zstandard.ZstdCompressor(level=3).compress(raw))
        fhd = payload[4]
        assert fhd >> 6 == 1  # a 2-byte content size (+256) for these ~2.5 KiB batches
        fcs = struct.unpack_from("<H", payload, 5 if fhd & 0x20 else 6)[0]
        struct.pack_into("<H", payload, 5 if fhd & 0x20 else 6, fcs + (7 if damage.endswith("large") else -7))
    elif damage == "cut":
        payload = bytearray(zstandard.ZstdCompressor(level=3).compress(raw)[:-5])
    elif damage == "checksum":
        payload = bytearray(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw))
        payload[-1] ^= 1
    else:  # several frames: _compression's path, decoded
        half = len(raw) // 2
        c = zstandard.ZstdCompressor(level=3)
        payload = bytearray(c.compress(raw[:half]) + c.compress(raw[half:]))
    bad = _with_payload(data, k, bytes(payload))
    (t0, e0), (t1, e1), (t2, e2), _ = _three_ways(monkeypatch, bad, verify_crc=False)
    if damage in ("two frames", "content size too large", "cut", "checksum"):
        assert (e0 is None) == (damage == "two frames"), e0  # (the others libzstd refuses)
    if e0 is None:  # (a flipped byte may still decode, to other bytes: alike)
        assert e1 is None and e2 is None
        same_table(t0, t1)
        same_table(t0, t2)
        return
    for e in (e1, e2):
        assert isinstance(e, kbatch.CorruptRecordError) and e.batch_index == k, e
        assert (str(e), e.position, e.field) == (str(e0), e0.position, e0.field)
        same_table(e0.partial, e.partial)


def test_zstd_in_c_limit_between_the_bound_and_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # frames without a content size are bounded by their blocks (128 KiB a compressed
    # block): a limit above the output but below that bound leaves the chunk to
    # _compression, which decodes it
    data = compressed_batches([b"stream"] * 12)
    full = kbatch.decode(data)
    limit = len(full.data) + 1024
    (t0, e0), (t1, e1), (t2, e2), _ = _three_ways(monkeypatch, data, max_decompressed_size=limit)
    assert e0 is None and e1 is None and e2 is None
    same_table(t0, t1)
    same_table(t0, t2)
