"""Peak memory of one ``decode`` stays within ``max_decompressed_size`` + input + a constant.

Measured as resident memory in a child process (``/proc/self/status``: the peak, VmHWM, is
reset through ``/proc/self/clear_refs`` just before the call), not with tracemalloc, which
sees neither the arena's blocks nor what the codec libraries allocate. The payloads carry
one record each, so the output rows are negligible (see docs/DESIGN.md "Memory bound").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lz4.frame
import pytest
import zstandard
from support.refcodec import batch, varlong, zigzag_varint

from kbatch.codec import _compression, _zstd

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not os.path.exists("/proc/self/clear_refs"),
        reason="peak RSS is read from Linux's /proc/self/status",
    ),
    # tools/asan.sh: ASan's allocator holds freed blocks in quarantine and adds shadow memory,
    # so the resident growth measured is no longer the decoder's
    pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""), reason="peak RSS is not meaningful under ASan"),
]

MIB = 1 << 20
LIMIT = _compression.DEFAULT_MAX_DECOMPRESSED_SIZE
#: What a decode may hold beyond the limit and its input (docs/DESIGN.md "Memory bound").
SLACK = 16 * MIB

_CHILD = r"""
import json, sys
import kbatch

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise LookupError(key)

path, limit = sys.argv[1], json.loads(sys.argv[2])
if sys.argv[3:] == ["python-lz4"]:
    kbatch.codec._core._lz4_in_c(False)
with open(path, "rb") as f:
    data = f.read()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current resident size
before = status("VmRSS:")
try:
    table = kbatch.decode(data, max_decompressed_size=limit)
    result = {"records": len(table.records), "data": table.data.nbytes}
except kbatch.KBatchError as e:
    result = {"error": str(e)}
result["growth"] = status("VmHWM:") - before
print(json.dumps(result))
"""


def _peak(tmp_path: Path, data: bytes, limit: int | None = None, *options: str) -> dict:
    path = tmp_path / "input.bin"
    path.write_bytes(data)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), json.dumps(limit), *options],
        capture_output=True, text=True, timeout=300, check=True,
    )
    return json.loads(out.stdout)


def _one_record_payload(total: int) -> tuple[bytes, int]:
    """The head of a records payload of ``total`` bytes: one record whose value is zeros."""
    value = total - 16
    for _ in range(4):
        body = bytes(1) + varlong(0) + zigzag_varint(0) + zigzag_varint(-1) + zigzag_varint(value)
        head = zigzag_varint(len(body) + value + 1) + body
        value += total - (len(head) + value + 1)
    assert len(head) + value + 1 == total
    return head, value


def _zstd_zero_batch(total: int) -> bytes:
    """A zstd batch whose one record takes ``total`` bytes, compressed as it streams."""
    head, value = _one_record_payload(total)
    co = zstandard.ZstdCompressor(level=3).compressobj(size=total)
    parts = [co.compress(head)]
    zeros = bytes(MIB)
    while value:
        step = min(value, MIB)
        parts.append(co.compress(zeros[:step]))
        value -= step
    parts += [co.compress(b"\x00"), co.flush()]  # no headers
    return batch(b"".join(parts), record_count=1, attributes=4)


def test_zstd_batches_up_to_the_limit(tmp_path: Path) -> None:
    # Three small batches that inflate to the limit between them: the arena grew by
    # doubling into a new block and copying, the old one kept as a spare (856 MiB).
    data = _zstd_zero_batch((LIMIT - 4096) // 3) * 3
    assert len(data) < 64 * 1024
    got = _peak(tmp_path, data)
    assert got.get("records") == 3, got
    assert got["growth"] <= LIMIT + len(data) + SLACK, got


def test_zstd_rle_frames_stop_at_the_limit(tmp_path: Path) -> None:
    # 4 MiB of zstd frames of RLE blocks (no content size): 128 KiB of output per 4
    # bytes, streamed into the arena until the limit (738 MiB before).
    frame = b"\x28\xb5\x2f\xfd\x00\x50"  # magic, descriptor (no content size), 1 MiB window
    for i in range(16):
        frame += ((131072 << 3) | (1 << 1) | (i == 15)).to_bytes(3, "little") + b"\x00"
    data = batch(frame * ((4 * MIB) // len(frame)), record_count=1, attributes=4)
    got = _peak(tmp_path, data)
    assert "max_decompressed_size" in got.get("error", ""), got
    assert got["growth"] <= LIMIT + len(data) + SLACK, got


@pytest.mark.skipif(_zstd._oneshot() is None, reason="no libzstd one-shot decoder (zstandard._cffi)")
def test_zstd_long_window_frame(tmp_path: Path) -> None:
    # A frame written with a 128 MiB window (window log 27, which Java's reader accepts):
    # a streaming decoder keeps its own copy of the window besides the output (329 MiB
    # for 200 MiB; 200 MiB with a 100 MiB limit).
    total = 200 * MIB
    head, value = _one_record_payload(total)
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    co = zstandard.ZstdCompressor(compression_params=params).compressobj()
    noise = os.urandom(MIB)  # incompressible but for its repeats: the window is used
    parts = [co.compress(head)]
    while value:
        step = min(value, MIB)
        parts.append(co.compress(noise[:step]))
        value -= step
    parts += [co.compress(b"\x00"), co.flush()]
    data = batch(b"".join(parts), record_count=1, attributes=4)
    got = _peak(tmp_path, data)
    assert got.get("data") == total, got
    assert got["growth"] <= total + len(data) + SLACK, got
    got = _peak(tmp_path, data, limit=100 * MIB)  # stopped at the limit
    assert "max_decompressed_size" in got.get("error", ""), got
    assert got["growth"] <= 100 * MIB + len(data) + SLACK, got


def test_zstd_without_the_one_shot_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where zstandard._cffi is missing, cramjam's streaming decoder does the same work.
    import kbatch

    values = [os.urandom(3000) * 20 for _ in range(40)]
    data = b"".join(kbatch.encode(values[i:i + 4], compression="zstd", base_offset=i) for i in range(0, 40, 4))
    data += kbatch.encode(values[:1], compression="zstd", base_offset=40)[:-5] + b"\x00" * 5  # corrupt
    results = []
    for oneshot in (True, False):
        if not oneshot:
            monkeypatch.setattr(_zstd, "_oneshot", lambda: None)
        with pytest.raises(kbatch.CorruptRecordError) as e:
            kbatch.decode(data, verify_crc=False)
        results.append((e.value.batch_index, e.value.partial.values()))
    assert results[0] == results[1]
    assert results[0][0] == 10 and results[0][1] == values


@pytest.mark.parametrize("codec", ["gzip", "gzip-members", "snappy", "lz4", "lz4-checksums", "lz4-checksums-python"])
def test_other_codecs(tmp_path: Path, codec: str) -> None:
    total = 128 * MIB
    head, value = _one_record_payload(total)
    noise = os.urandom(4096)
    payload = head + (noise * (value // len(noise) + 1))[:value] + b"\x00"
    if codec.startswith("lz4-checksums"):
        blob = bytes(lz4.frame.compress(payload, block_checksum=True, content_checksum=True, block_linked=False))
    elif codec == "gzip-members":  # Java's GZIPInputStream layout: inflated whole, into the arena
        step = 16 * MIB
        members = (payload[i : i + step] for i in range(0, len(payload), step))
        blob = b"".join(_compression.compress(_compression.GZIP, m, 1) for m in members)
    else:
        blob = _compression.compress(_CODECS[codec], payload, 1 if codec == "gzip" else None)
    del payload
    data = batch(blob, record_count=1, attributes=_CODECS[codec.split("-")[0]])
    got = _peak(tmp_path, data, None, *(["python-lz4"] if codec.endswith("python") else []))
    assert got.get("data") == total, got
    assert got["growth"] <= total + len(data) + SLACK, got


_CODECS = {"gzip": _compression.GZIP, "snappy": _compression.SNAPPY, "lz4": _compression.LZ4}


def test_blocks_grow_in_place_keeping_their_bytes() -> None:
    from kbatch.codec import _core as core

    core._release_spare()  # (else a spare, already large, is taken)
    block = core._arena_block(1000)  # malloc'd, then a mapping, then a larger mapping
    assert len(block) == 1000
    memoryview(block)[:1000] = bytes(range(250)) * 4
    for size in (4000, 3 * MIB, 40 * MIB):
        block.resize(size)
        assert len(block) == size
        assert bytes(memoryview(block)[:1000]) == bytes(range(250)) * 4
        memoryview(block)[size - 1] = 7
    view = memoryview(block)
    with pytest.raises(BufferError):
        block.resize(80 * MIB)  # it cannot move under a view
    assert view[40 * MIB - 1] == 7
    view.release()
    block.resize(80 * MIB)
    assert memoryview(block)[40 * MIB - 1] == 7


def test_arena_copies_when_a_view_is_alive() -> None:
    from kbatch.codec import _core as core

    arena = _compression.Arena(4096, allocate=core._arena_block)
    arena.append(b"a" * 4000)
    kept = arena.result()  # the table's data: the arena must not move it
    arena.append(b"b" * (2 * MIB))  # so it grows into a new block, copying
    assert bytes(kept) == b"a" * 4000
    assert bytes(arena.view()[:4000]) == b"a" * 4000 and arena.size == 4000 + 2 * MIB
