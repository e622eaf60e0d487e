"""Shared by the tests that run one input on one core and on two and compare (test_threads,
test_gather, test_spare_blocks, test_chunk_decompression, test_lz4_in_c).

``with_cpus`` sets the cores usable (``_CPUS``) and lowers the chunk and split sizes so
the threaded paths are taken on small inputs; ``same_outcome`` runs an input both ways and
asks for identical results: tables column by column, errors field by field (their
``partial`` tables included).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import kbatch
from kbatch import KBatchError
from kbatch.codec import _core as core

N = 6000  # records: ~0.8 MB uncompressed, 12 batches of 500
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Over PARALLEL_RECORDS_MIN (32,768): planning and gathering run on two threads.
PLAN_RECORDS = 40_001

Records = tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]


def make_records(n: int = N) -> Records:
    values = [b'{"i": %d, "pad": "%s"}' % (i, b"x" * (i % 170)) for i in range(n)]
    keys = [b"key-%d" % (i * 7919 % 1000) for i in range(n)]
    timestamps = [1_700_000_000_000 + i for i in range(n)]
    headers = [[("h", b"%d" % i)] if i % 3 else [] for i in range(n)]
    return values, keys, timestamps, headers


def encode_records(records: Records) -> dict[str, bytes]:
    """``records`` encoded with each of CODECS, 500 records a batch."""
    values, keys, timestamps, headers = records
    return {
        c: kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500, compression=c)
        for c in CODECS
    }


def with_cpus(monkeypatch: pytest.MonkeyPatch, n: int, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(core, "_CPUS", n)
        # 16 KiB chunks: every compressed input here is several chunks, so the parse
        # thread has work to overlap and errors to order (the same chunks inline).
        m.setattr(core, "_CHUNK_BYTES", 16384)
        m.setattr(core, "_CHUNK_BYTES_MAX", 16384)
        # and every uncompressed input is parsed from both ends at once
        m.setattr(core, "_SPLIT_BYTES", 16384)
        return fn(*args, **kwargs)


def same_table(a: kbatch.RecordTable, b: kbatch.RecordTable) -> None:
    assert np.array_equal(a.records, b.records)
    assert np.array_equal(a.batches, b.batches)
    assert np.array_equal(a.headers, b.headers)
    assert bytes(memoryview(a.data)) == bytes(memoryview(b.data))
    assert (a.consumed_bytes, a.truncated, a.next_offset) == (b.consumed_bytes, b.truncated, b.next_offset)


def outcome(monkeypatch: pytest.MonkeyPatch, n_cpus: int, data: bytes, decode=kbatch.decode, **kwargs):  # type: ignore[no-untyped-def]
    try:
        return with_cpus(monkeypatch, n_cpus, decode, data, **kwargs), None
    except KBatchError as e:
        return None, e


def same_outcome(monkeypatch: pytest.MonkeyPatch, data: bytes, **kwargs) -> KBatchError | None:
    (t1, e1), (t2, e2) = (outcome(monkeypatch, c, data, **kwargs) for c in (1, 2))
    if e1 is None:
        assert e2 is None, e2
        same_table(t1, t2)
        return None
    assert e2 is not None and type(e1) is type(e2), (e1, e2)
    assert str(e1) == str(e2)
    assert (e1.position, e1.batch_index, e1.field) == (e2.position, e2.batch_index, e2.field)
    same_table(e1.partial, e2.partial)
    return e1


def batch_starts(data: bytes) -> list[int]:
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return starts


def compressed_batches(frames: list[bytes]) -> bytes:
    """Batches of 20 records each, their payloads compressed as ``frames`` says:
    zstd "sized" or "stream" (no content size, as Java writes it), snappy "xerial" or "raw",
    gzip "gzip" (one member) or "gzip2" (two members)."""
    import cramjam
    import zstandard

    from kbatch.codec import _compression
    from support.refcodec import Rec, batch

    out = []
    rng = np.random.default_rng(7)
    for i, kind in enumerate(frames):
        # half random bytes: ~2 KiB per compressed batch, several batches per 16 KiB chunk
        # (gzip: 8 KiB or more uncompressed, below that inflate goes one batch at a time)
        repeat = 8 if kind.startswith(b"gzip") else 2
        raw = b"".join(
            Rec(value=rng.integers(0, 256, 60, dtype=np.uint8).tobytes() * repeat, key=b"k%d" % j).encode(j)
            for j in range(20)
        )
        codec = 4
        if kind == b"sized":
            payload = zstandard.ZstdCompressor(level=3).compress(raw)
        elif kind == b"stream":
            cobj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
            payload = cobj.compress(raw) + cobj.flush()
        elif kind == b"xerial":
            payload, codec = _compression.compress(_compression.SNAPPY, raw), 2
        elif kind == b"gzip":
            payload, codec = _compression.compress(_compression.GZIP, raw), 1
        elif kind == b"lz4":  # Kafka's frame, 64 KiB blocks
            payload, codec = _compression.compress(_compression.LZ4, raw), 3
        elif kind == b"lz4-hc":  # LZ4 HC blocks, and a stored one where it does not pay
            payload, codec = _compression.compress(_compression.LZ4, raw, 12), 3
        elif kind == b"lz4-checksums":  # block and content checksums, a content size (FLG 0x7c)
            import lz4.frame

            payload, codec = lz4.frame.compress(raw, block_checksum=True, content_checksum=True), 3
        elif kind in (b"lz4-size", b"lz4-bc"):  # as kafka-python (a content size), aiokafka (block checksums)
            import lz4.frame

            payload = lz4.frame.compress(
                raw, block_linked=False, store_size=kind == b"lz4-size", block_checksum=kind == b"lz4-bc"
            )
            codec = 3
        elif kind.startswith(b"lz4-") and kind[4:] in LZ4_BLOCK_SIZES:  # python-lz4's frame, plain
            import lz4.frame

            payload = lz4.frame.compress(
                raw,
                block_size=LZ4_BLOCK_SIZES[kind[4:]],
                block_linked=False,
                store_size=False,
                content_checksum=False,
            )
            codec = 3
        elif kind == b"gzip2":  # two members: the trailer of the second does not tell the size
            half = len(raw) // 2
            payload = _compression.compress(_compression.GZIP, raw[:half])
            payload, codec = payload + _compression.compress(_compression.GZIP, raw[half:]), 1
        else:  # raw snappy, as librdkafka writes it
            payload, codec = bytes(cramjam.snappy.compress_raw(raw)), 2
        out.append(batch(payload, base_offset=20 * i, record_count=20, last_offset_delta=19, attributes=codec))
    return b"".join(out)


def _lz4_block_sizes() -> dict[bytes, int]:
    import lz4.frame

    return {
        b"64k": lz4.frame.BLOCKSIZE_MAX64KB,
        b"256k": lz4.frame.BLOCKSIZE_MAX256KB,
        b"1m": lz4.frame.BLOCKSIZE_MAX1MB,
        b"4m": lz4.frame.BLOCKSIZE_MAX4MB,
    }


LZ4_BLOCK_SIZES = _lz4_block_sizes()


def batch_at(data: bytes | bytearray, k: int) -> tuple[int, int]:
    """(position, batch_length) of batch ``k`` of ``data``; its payload starts at position + 61."""
    batches = kbatch.decode(bytes(data)).batches
    return int(batches["position"][k]), int(batches["batch_length"][k])
