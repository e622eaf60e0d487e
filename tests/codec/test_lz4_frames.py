"""Bytes after the first LZ4 frame of a payload: an error, on every path, never dropped.

Kafka's Java reader (``Lz4BlockInputStream``) stops at the frame's end mark, and the
record iterator's last check (``ensureNoneRemaining``: one more ``read()``, -1 after the
end mark) never sees what follows, so a second frame's records or trailing garbage are
dropped without a word. kbatch raises ``CorruptRecordError`` naming the first byte
after the frame instead, in ``kbatch.codec._compression`` and in the C path of ``kbatch.codec._core``
alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import lz4.frame
import pytest
from support.refcodec import Rec, batch

import kbatch
from kbatch.codec import _compression as C
from kbatch.codec import _core as core
from kbatch.errors import CorruptRecordError

RECORDS = [Rec(value=b"v%d" % i * 20, key=b"k%d" % i) for i in range(50)]
PAYLOAD = b"".join(r.encode(i) for i, r in enumerate(RECORDS))


def _frames() -> dict[str, bytes]:
    kafka = C.compress(C.LZ4, PAYLOAD)  # as Java writes it (FLG 0x60)
    checked = bytes(lz4.frame.compress(PAYLOAD, block_checksum=True, content_checksum=True))
    sized = bytes(lz4.frame.compress(PAYLOAD, store_size=True))  # FLG 0x68, as kafka-python
    return {"kafka": kafka, "checksums": checked, "content-size": sized}


FRAMES = _frames()
TAILS = {
    "second-frame": C.compress(C.LZ4, b"more records"),
    "garbage": b"\x01\x02\x03",
    "one-zero-byte": b"\x00",
}


@contextmanager
def _lz4_in_c(use: bool) -> Iterator[None]:
    was = core._lz4_in_c()[0]
    core._lz4_in_c(use)
    try:
        yield
    finally:
        core._lz4_in_c(was)


@pytest.mark.parametrize("tail", TAILS.values(), ids=list(TAILS))
@pytest.mark.parametrize("frame", FRAMES.values(), ids=list(FRAMES))
def test_decompress_into_raises_at_the_first_byte_after_the_frame(frame: bytes, tail: bytes) -> None:
    arena = C.Arena()
    assert C.decompress_into(C.LZ4, frame, arena, 1 << 20) == len(PAYLOAD)
    arena = C.Arena()
    with pytest.raises(CorruptRecordError, match=rf"lz4 payload has {len(tail)} bytes after its frame's end mark") as e:
        C.decompress_into(C.LZ4, frame + tail, arena, 1 << 20)
    assert e.value.position == len(frame)
    assert arena.size == 0


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("frame", FRAMES.values(), ids=list(FRAMES))
def test_decode_raises_with_the_position_and_keeps_the_batches_before(frame: bytes, in_c: bool) -> None:
    good = batch(frame, record_count=len(RECORDS), attributes=3)
    bad = batch(frame + TAILS["second-frame"], record_count=len(RECORDS), attributes=3, base_offset=50)
    with _lz4_in_c(in_c):
        chunks = core._lz4_in_c()[1]
        assert kbatch.decode(good + good).values() == [r.value for r in RECORDS] * 2
        assert core._lz4_in_c()[1] == chunks + in_c  # (the path under test was taken)
        with pytest.raises(CorruptRecordError, match="bytes after its frame's end mark") as e:
            kbatch.decode(good + bad + good)
    assert e.value.batch_index == 1
    assert e.value.position == len(good) + 61 + len(frame)  # the batch, its header, the frame
    assert e.value.partial.values() == [r.value for r in RECORDS]


def test_c_and_python_paths_agree_on_a_chunk() -> None:
    # Many batches in one chunk, one of them with a second frame: the C path gives the
    # whole chunk to _compression, which finds the same error as without C.
    kafka = FRAMES["kafka"]
    batches = [batch(kafka, record_count=len(RECORDS), attributes=3, base_offset=50 * i) for i in range(20)]
    batches[13] = batch(kafka + TAILS["garbage"], record_count=len(RECORDS), attributes=3, base_offset=650)
    data = b"".join(batches)
    errors = []
    for in_c in (True, False):
        with _lz4_in_c(in_c), pytest.raises(CorruptRecordError) as e:
            kbatch.decode(data)
        errors.append((str(e.value), e.value.position, e.value.batch_index, len(e.value.partial.records)))
    assert errors[0] == errors[1]
    assert errors[0][2] == 13 and errors[0][3] == 13 * len(RECORDS)
