"""Compressed chunks decoded on two threads equal the same chunks decoded inline."""

from __future__ import annotations

import pytest
from support.twocores import (
    batch_at,
    compressed_batches,
    encode_records,
    make_records,
    outcome,
    same_outcome,
    same_table,
)

import kbatch
from kbatch.codec import _core as core


@pytest.fixture(scope="module")
def encoded() -> dict[str, bytes]:
    return encode_records(make_records())


# Compressed chunks on two threads: when every batch of a chunk tells the exact size of
# what it decompresses to (a zstd frame declaring its content size; xerial or raw snappy
# blocks), its pieces are decompressed by the calling thread and a helper thread into
# places reserved in the arena. Anything else goes one batch at a time, as inline.


def _count_piece_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    run = core._Pieces.run

    def counted(self) -> None:  # type: ignore[no-untyped-def]
        calls.append(len(self.items))
        run(self)

    monkeypatch.setattr(core._Pieces, "run", counted)
    return calls


@pytest.mark.parametrize("codec", ["gzip", "zstd", "snappy"])
def test_chunks_decompress_on_two_threads(
    monkeypatch: pytest.MonkeyPatch, encoded: dict[str, bytes], codec: str
) -> None:
    calls = _count_piece_runs(monkeypatch)
    (t1, e1), (t2, e2) = (outcome(monkeypatch, c, encoded[codec]) for c in (1, 2))
    assert e1 is None and e2 is None
    same_table(t1, t2)
    # every chunk of several batches (16 KiB chunks) took the path; the helper thread runs
    # too unless the calling thread took every piece before it started (then it is cancelled)
    assert len(calls) >= 3


@pytest.mark.parametrize(
    ("plain", "other"),
    [
        (b"sized", b"stream"),
        (b"xerial", b"raw"),
        (b"raw", b"sized"),
        (b"gzip", b"gzip2"),
        (b"sized", b"lz4"),  # lz4: a path of its own (below)
        (b"lz4-hc", b"lz4-checksums"),
    ],
)
def test_chunks_mixing_payloads_decode_as_inline(monkeypatch: pytest.MonkeyPatch, plain: bytes, other: bytes) -> None:
    # zstd frames without a size go one batch at a time; raw and xerial snappy and sized
    # zstd all take the two-thread path, alone or mixed in one chunk
    data = compressed_batches([plain] * 40 + [other] * 40 + [plain, other] * 20)
    calls = _count_piece_runs(monkeypatch)
    (t1, _), (t2, _) = (outcome(monkeypatch, c, data) for c in (1, 2))
    same_table(t1, t2)
    assert len(t2.records) == 120 * 20
    if plain.startswith(b"lz4"):
        assert not calls  # lz4 has a path of its own (below)
    else:
        assert calls


@pytest.mark.parametrize("kind", [b"sized", b"xerial", b"gzip", b"lz4"])  # (lz4: its own path, below)
@pytest.mark.parametrize("damage", ["data", "size_claim", "limit"])
def test_chunk_failures_fall_back_to_inline_errors(monkeypatch: pytest.MonkeyPatch, kind: bytes, damage: str) -> None:
    data = bytearray(compressed_batches([kind] * 120))
    k = 77
    pos, length = batch_at(data, k)
    payload = pos + 61
    kwargs: dict = {"verify_crc": False}  # type: ignore[type-arg]
    if damage == "data" and kind != b"xerial":  # the framing checks out, the codec fails it
        data[pos + 12 + length - 12] ^= 0x5A
    elif damage == "data":  # (snappy has no checksum) a copy reaching before the block's start
        data[pos + 12 + length - 5 : pos + 12 + length] = b"\x03\xff\xff\xff\x7f"
    elif damage == "size_claim" and kind == b"sized":  # content size one larger than the data
        assert data[payload + 4] & 0x20  # single segment: the size follows the descriptor
        data[payload + 5] += 1
    elif damage == "size_claim" and kind == b"xerial":  # the first block's declared length, one larger
        data[payload + 20] += 1
    elif damage == "size_claim" and kind == b"lz4":  # the first block's size, one smaller
        data[payload + 7] -= 1
    elif damage == "size_claim":  # gzip's ISIZE, one larger
        data[pos + 12 + length - 4] ^= 1
    else:  # the arena limit falls inside batch k
        kwargs["max_decompressed_size"] = len(memoryview(kbatch.decode(bytes(data)).data)) * k // 120 + 100
    e = same_outcome(monkeypatch, bytes(data), **kwargs)
    assert isinstance(e, kbatch.CorruptRecordError)
    assert e.batch_index == k
    assert len(e.partial.records) == k * 20  # every batch before the bad one
