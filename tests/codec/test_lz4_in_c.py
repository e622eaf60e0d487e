"""LZ4 decompressed in C equals (and fails as) LZ4 through kbatch.codec._compression."""

from __future__ import annotations

import contextlib
import struct
import sys

import numpy as np
import pytest
from support.twocores import (
    batch_at,
    compressed_batches,
    outcome,
    same_table,
)

import kbatch
from kbatch.codec import _core as core

# LZ4 frames of independent blocks (FLG 0x60: Java's and librdkafka's; 0x68 kafka-python's,
# 0x70 aiokafka's, 0x7c python-lz4's) are decompressed in C, a chunk's batches from both ends
# on two threads with the gap between them closed afterwards; _compression (one block at a
# time through cramjam, or liblz4's frame decoder for frames with checksums) is the reference
# they must equal, and what they fall back on.


@contextlib.contextmanager
def _python_lz4_only():  # type: ignore[no-untyped-def]
    """Decompress LZ4 through _compression only, inside the block."""
    core._lz4_in_c(False)
    try:
        yield
    finally:
        core._lz4_in_c(True)


@pytest.fixture
def python_lz4():  # type: ignore[no-untyped-def]
    """Decompress LZ4 through _compression only, for the duration of the test."""
    with _python_lz4_only():
        yield


def _lz4_c_chunks() -> int:
    return int(core._lz4_in_c()[1])


def _decoded_three_ways(monkeypatch: pytest.MonkeyPatch, data: bytes, **kwargs):  # type: ignore[no-untyped-def]
    """(table or error) through _compression, then in C on one thread, then on two."""
    with _python_lz4_only():
        reference = outcome(monkeypatch, 1, data, **kwargs)
    before = _lz4_c_chunks()
    one, two = (outcome(monkeypatch, c, data, **kwargs) for c in (1, 2))
    return reference, one, two, _lz4_c_chunks() - before


def _fail_alike(results: list, k: int) -> None:  # type: ignore[type-arg]
    """Every ``(table, error)`` of _decoded_three_ways failed at batch ``k``, with the same error."""
    errors = [e for _, e in results]
    for e in errors:
        assert isinstance(e, kbatch.CorruptRecordError) and e.batch_index == k, e
        assert (str(e), e.position, e.field) == (str(errors[0]), errors[0].position, errors[0].field)
        assert len(e.partial.records) == k * 20


def test_lz4_is_decompressed_in_c() -> None:
    # the lz4 package (a dependency) exports liblz4's LZ4_decompress_safe from its extension
    # module on Linux, where kbatch ships wheels: finding it keeps lz4 decodes at codec speed
    if sys.platform != "linux":
        pytest.skip("kbatch ships Linux wheels only; elsewhere lz4 may go through cramjam")
    assert core._lz4_in_c()[0]


@pytest.mark.parametrize(
    "kinds",
    [
        [b"lz4"],
        [b"lz4-hc"],  # HC blocks and stored (uncompressed) ones
        [b"lz4-64k", b"lz4-256k", b"lz4-1m", b"lz4-4m"],  # every block size python-lz4 writes
        # FLG 0x68 (kafka-python), 0x70 (aiokafka), 0x7c (every checksum and a content size)
        [b"lz4-size", b"lz4-bc", b"lz4-checksums", b"lz4"],
        [b"lz4-size"],  # every frame declares its size: exact slots, nothing moved
    ],
)
def test_lz4_in_c_equals_python(monkeypatch: pytest.MonkeyPatch, kinds: list[bytes]) -> None:
    data = compressed_batches(kinds * (120 // len(kinds)))
    (t0, e0), (t1, e1), (t2, e2), chunks = _decoded_three_ways(monkeypatch, data)
    assert e0 is None and e1 is None and e2 is None
    same_table(t0, t1)
    same_table(t0, t2)
    assert len(t0.records) == 120 * 20
    assert chunks >= 2 * 3  # every 16 KiB chunk, twice


def _lz4_frame_fields(payload: bytes) -> tuple[int, int]:
    """(where its first block's size is, where the content size is or -1) in an LZ4 frame."""
    return (15, 6) if payload[4] & 0x08 else (7, -1)


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        (b"lz4-bc", "block checksum"),
        (b"lz4-checksums", "block checksum"),
        (b"lz4-checksums", "content checksum"),
        (b"lz4-checksums", "content size"),  # liblz4's frame decoder holds the output to it
        (b"lz4-size", "content size"),  # without checksums it is skipped, as Java does: decodes
        # ... also when it is less than the content (C takes it for the batch's exact slot:
        # the block overflows it, safely, and the chunk goes to _compression)
        (b"lz4-size", "content size short"),
        (b"lz4-size", "descriptor checksum"),
    ],
)
def test_lz4_in_c_checks_what_python_checks(monkeypatch: pytest.MonkeyPatch, kind: bytes, damage: str) -> None:
    from kbatch.codec import _compression

    data = bytearray(compressed_batches([kind] * 120))
    k = 43
    pos, length = batch_at(data, k)
    payload = pos + 61
    end = pos + 12 + length
    first_block, content_size = _lz4_frame_fields(bytes(data[payload : payload + 16]))
    if damage == "block checksum":  # the last 4 bytes of the first (only) block
        size = struct.unpack_from("<I", data, payload + first_block)[0] & 0x7FFFFFFF
        data[payload + first_block + 4 + size] ^= 0x01
    elif damage == "content checksum":
        data[end - 1] ^= 0x01
    elif damage == "descriptor checksum":
        data[payload + first_block - 1] ^= 0x01
    else:  # one more (or less) than the content, with a good descriptor checksum
        claimed = struct.unpack_from("<Q", data, payload + content_size)[0]
        struct.pack_into("<Q", data, payload + content_size, claimed + (-1 if damage.endswith("short") else 1))
        data[payload + first_block - 1] = _compression.lz4_hc(bytes(data[payload + 4 : payload + first_block - 1]))
    results = _decoded_three_ways(monkeypatch, bytes(data), verify_crc=False)[:3]
    if kind == b"lz4-size" and damage.startswith("content size"):
        for table, e in results:
            assert e is None
            same_table(results[0][0], table)
        return
    _fail_alike(results, k)


@pytest.mark.parametrize("skipped", ["some", "all"])
def test_lz4_in_c_with_skipped_batches(monkeypatch: pytest.MonkeyPatch, python_lz4: None, skipped: str) -> None:
    data = compressed_batches([b"lz4", b"lz4-hc"] * 60)
    skip = np.zeros(120, dtype=bool)
    skip[::3] = True
    skip[40:56] = True  # (whole chunks)
    if skipped == "all":  # nothing to decompress: no chunk takes the C path
        skip[:] = True
    want = outcome(monkeypatch, 1, data, decode=core.decode, skip_batches=skip)[0]
    core._lz4_in_c(True)
    before = _lz4_c_chunks()
    for cpus in (1, 2):
        got = outcome(monkeypatch, cpus, data, decode=core.decode, skip_batches=skip)[0]
        same_table(want, got)
    assert (_lz4_c_chunks() - before >= 2 * 3) == (skipped == "some")
    assert len(want.records) == (120 - int(skip.sum())) * 20


def test_lz4_in_c_limit_between_the_bound_and_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # The room reserved is each block's maximum: a limit that the data fits but the bound
    # does not sends the chunk to _compression, which decodes it (and it fails only when
    # the data itself is over the limit)
    data = compressed_batches([b"lz4"] * 120)
    size = len(memoryview(kbatch.decode(data).data))
    (t0, e0), (t1, e1), (t2, e2), _ = _decoded_three_ways(monkeypatch, data, max_decompressed_size=size)
    assert e0 is None and e1 is None and e2 is None
    same_table(t0, t1)
    same_table(t0, t2)
    for _, e in _decoded_three_ways(monkeypatch, data, max_decompressed_size=size - 1)[:3]:
        assert isinstance(e, kbatch.CorruptRecordError) and e.batch_index == 119
        assert "max_decompressed_size" in str(e)


@pytest.mark.parametrize("byte", [4, 5, 6])  # FLG, BD, HC
def test_lz4_in_c_every_descriptor_byte_as_python(monkeypatch: pytest.MonkeyPatch, byte: int) -> None:
    # Any descriptor (reserved bits, block size values 0-3 and 8-15, checksum and content size
    # flags, dependent blocks, a wrong HC) decodes or fails in C as _compression says
    data = compressed_batches([b"lz4"] * 3)
    at = batch_at(data, 0)[0] + 61 + byte
    for value in range(256):
        damaged = bytearray(data)
        damaged[at] = value
        (t0, e0), (t1, e1), (t2, e2), _ = _decoded_three_ways(monkeypatch, bytes(damaged), verify_crc=False)
        if e0 is None:
            assert e1 is None and e2 is None
            same_table(t0, t1)
            same_table(t0, t2)
        else:
            for e in (e1, e2):
                assert e is not None and (str(e), e.batch_index) == (str(e0), e0.batch_index)


@pytest.mark.parametrize("k", range(40, 48))  # every place in a 16 KiB chunk: front, back, between
def test_lz4_in_c_corrupt_block_gives_the_python_error(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    data = bytearray(compressed_batches([b"lz4"] * 120))
    pos, _ = batch_at(data, k)
    data[pos + 61 + 11] ^= 0xFF  # the first block's first token
    _fail_alike(_decoded_three_ways(monkeypatch, bytes(data), verify_crc=False)[:3], k)


def test_lz4_chunks_without_the_helper_after_an_idle_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a chunk in which the helper thread took no batch (no free core), the next
    # _LZ4_SOLO_CHUNKS chunks go without it, on the calling thread: the same table, one
    # count down per chunk (of two or more batches) that would have used it.
    data = compressed_batches([b"lz4-bc", b"lz4"] * 60)
    with _python_lz4_only():
        reference = outcome(monkeypatch, 1, data)[0]
    chunks_before = _lz4_c_chunks()
    monkeypatch.setattr(core, "_LZ4_SOLO_CHUNKS", 1000)
    monkeypatch.setattr(core, "_lz4_solo_left", 1000)
    table, error = outcome(monkeypatch, 2, data)
    assert error is None
    same_table(reference, table)
    used = _lz4_c_chunks() - chunks_before
    assert 0 < 1000 - core._lz4_solo_left <= used


def test_a_large_input_is_about_sixteen_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks are a sixteenth of the input between 256 KiB and 1 MiB (_core.pyx): an 8 MiB
    # input is ~16 chunks, not the 32 of fixed 256 KiB ones, and decodes as one thread does
    rng = np.random.default_rng(7)
    values = [bytes(v) for v in rng.integers(0, 256, size=(80_000, 100), dtype=np.uint8)]
    data = kbatch.encode(values, compression="lz4", max_batch_records=200)
    assert 8 << 20 <= len(data) < 9 << 20
    want = outcome(monkeypatch, 1, data)[0]
    with monkeypatch.context() as m:
        m.setattr(core, "_CPUS", 2)
        before = _lz4_c_chunks()
        got = kbatch.decode(data)
        chunks = _lz4_c_chunks() - before
    same_table(want, got)
    assert 15 <= chunks <= 17, chunks
