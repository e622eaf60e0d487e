"""Decompression and compression speed: kbatch.codec._compression beside the codec libraries.

The issue asks to measure cramjam beside the design card's libraries (zlib, python-snappy,
python-lz4, python-zstandard) and to take whichever is faster *where it reads and writes
the same bytes*. Every contender below reads the same payloads (what ``compress`` writes,
i.e. what a Java producer writes) and produces the same bytes.

Workloads (records-like JSON, about 4 MiB per round):

* ``16KiB``: 256 payloads of 16 KiB, Kafka's default ``batch.size``;
* ``1MiB``: 4 payloads of 1 MiB, a large-batch producer.

Contenders, per codec:

* ``kbatch``: :func:`kbatch.codec._compression.decompress_into`, all payloads appended to one
  arena (bounds, framing checks and all);
* ``card``: the design card's library alone, doing the least that yields the bytes
  (gzip: ``zlib.decompress``; snappy: ``snappy.decompress`` per xerial chunk; lz4:
  ``lz4.frame.decompress``; zstd: ``zstandard.ZstdDecompressor().decompress``);
* ``cramjam``: cramjam alone (``*.decompress_into`` one arena where it has it).

Run as pytest-benchmark (``pytest bench/test_bench_compression.py``), or print the table
in one command from the repository root: ``PYTHONPATH=. python bench/test_bench_compression.py``
(plain ``python bench/...`` once kbatch is installed).

Caveat: python-snappy >= 0.7 is itself a thin wrapper over cramjam, so "card" and
"cramjam" are the same snappy implementation; the difference is the Python around it.
"""

from __future__ import annotations

import gzip
import platform
import random
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import cramjam
import lz4.block
import lz4.frame
import numpy as np
import pytest
import snappy
import zstandard

from kbatch.codec import _compression as C
from kbatch.errors import CorruptRecordError

CODECS = {"gzip": C.GZIP, "snappy": C.SNAPPY, "lz4": C.LZ4, "zstd": C.ZSTD}
TOTAL = 4 << 20
BATCH_SIZES = {"16KiB": 16 << 10, "1MiB": 1 << 20}


def _records_like(n: int, seed: int) -> bytes:
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


def _batches(size: int) -> list[bytes]:
    return [_records_like(size, seed=i) for i in range(TOTAL // size)]


RAW = {name: _batches(size) for name, size in BATCH_SIZES.items()}
PAYLOADS = {
    (codec, bs): [C.compress(CODECS[codec], b) for b in RAW[bs]]
    for codec in CODECS
    for bs in BATCH_SIZES
}


# --------------------------------------------------------------------------- contenders


def _kbatch(codec: str) -> Callable[[list[bytes]], int]:
    cid = CODECS[codec]

    def run(payloads: list[bytes]) -> int:
        # sized as kbatch.decode sizes it: twice the input
        arena = C.Arena(2 * sum(len(p) for p in payloads))
        for p in payloads:
            C.decompress_into(cid, p, arena, 1 << 40)
        return arena.size

    return run


def _xerial_chunks(p: bytes) -> list[memoryview]:
    mv, pos, out = memoryview(p), 16, []
    while pos < len(p):
        (n,) = struct.unpack_from(">i", p, pos)
        out.append(mv[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def _kept(outs: list[Any]) -> int:
    # Outputs stay alive until the round ends, as a decoder's would: no contender may
    # recycle the previous batch's memory.
    return sum(len(o) for o in outs)


def _card(codec: str) -> Callable[[list[bytes]], int]:
    if codec == "gzip":
        return lambda ps: _kept([zlib.decompress(p, 31) for p in ps])
    if codec == "snappy":
        return lambda ps: _kept(
            [snappy.decompress(c) for p in ps for c in _xerial_chunks(p)]
        )
    if codec == "lz4":
        return lambda ps: _kept([lz4.frame.decompress(p) for p in ps])
    dctx = zstandard.ZstdDecompressor()
    return lambda ps: _kept([dctx.decompress(p) for p in ps])


def _cramjam(codec: str, bs: str) -> Callable[[list[bytes]], int]:
    if codec == "snappy":

        def run_snappy(ps: list[bytes]) -> int:
            out = np.empty(TOTAL, dtype=np.uint8)
            pos = 0
            for p in ps:
                for c in _xerial_chunks(p):
                    pos += int(cramjam.snappy.decompress_raw_into(c, out[pos:]))
            return pos

        return run_snappy
    if codec == "lz4":
        return lambda ps: _kept([cramjam.lz4.decompress(p) for p in ps])
    # gzip, zstd: into one output buffer, sizes known in advance (cramjam needs them)
    sizes = [len(b) for b in RAW[bs]]
    fn = (
        cramjam.gzip.decompress_into
        if codec == "gzip"
        else cramjam.zstd.decompress_into
    )

    def run(ps: list[bytes]) -> int:
        out = np.empty(sum(sizes), dtype=np.uint8)
        pos = 0
        for p, n in zip(ps, sizes, strict=True):
            pos += int(fn(p, out[pos : pos + n]))
        return pos

    return run


DECOMPRESSORS: dict[str, Callable[[str, str], Callable[[list[bytes]], int]]] = {
    "kbatch": lambda codec, bs: _kbatch(codec),
    "card": lambda codec, bs: _card(codec),
    "cramjam": _cramjam,
}


def _lz4_blocks_python_lz4(data: bytes) -> int:
    mv = memoryview(data)
    return sum(
        len(lz4.block.compress(mv[i : i + 65536], store_size=False))
        for i in range(0, len(data), 65536)
    )


def _lz4_blocks_cramjam(data: bytes) -> int:
    mv = memoryview(data)
    return sum(
        len(cramjam.lz4.compress_block(mv[i : i + 65536], store_size=False))
        for i in range(0, len(data), 65536)
    )


def _xerial_snappy(fn: Callable[[Any], Any]) -> Callable[[bytes], int]:
    def run(data: bytes) -> int:
        mv = memoryview(data)
        return sum(len(fn(mv[i : i + 32768])) for i in range(0, len(data), 32768))

    return run


COMPRESSORS: dict[tuple[str, str], Callable[[bytes], int]] = {
    ("gzip", "kbatch"): lambda d: len(C.compress(C.GZIP, d)),
    ("gzip", "card"): lambda d: len(gzip.compress(d, 6, mtime=0)),
    ("gzip", "cramjam"): lambda d: len(cramjam.gzip.compress(d, level=6)),
    ("snappy", "kbatch"): lambda d: len(C.compress(C.SNAPPY, d)),
    ("snappy", "card"): _xerial_snappy(snappy.compress),
    ("snappy", "cramjam"): _xerial_snappy(cramjam.snappy.compress_raw),
    ("lz4", "kbatch"): lambda d: len(C.compress(C.LZ4, d)),
    ("lz4", "card"): _lz4_blocks_python_lz4,
    ("lz4", "cramjam"): _lz4_blocks_cramjam,
    ("zstd", "kbatch"): lambda d: len(C.compress(C.ZSTD, d)),
    ("zstd", "card"): lambda d: len(zstandard.ZstdCompressor(level=3).compress(d)),
    ("zstd", "cramjam"): lambda d: len(cramjam.zstd.compress(d, level=3)),
}


# --------------------------------------------------------------------------- pytest-benchmark


@pytest.mark.parametrize("who", list(DECOMPRESSORS))
@pytest.mark.parametrize("bs", list(BATCH_SIZES))
@pytest.mark.parametrize("codec", list(CODECS))
def test_decompress(benchmark: Any, codec: str, bs: str, who: str) -> None:
    payloads = PAYLOADS[(codec, bs)]
    fn = DECOMPRESSORS[who](codec, bs)
    benchmark.group = f"decompress {codec} {bs}"
    benchmark.extra_info["MB"] = TOTAL / 1e6
    n = benchmark.pedantic(
        fn, args=(payloads,), rounds=5, iterations=1, warmup_rounds=1
    )
    assert n == TOTAL


@pytest.mark.parametrize("who", ["kbatch", "card", "cramjam"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_compress(benchmark: Any, codec: str, who: str) -> None:
    data = b"".join(RAW["1MiB"])
    fn = COMPRESSORS[(codec, who)]
    benchmark.group = f"compress {codec} 1MiB"
    n = benchmark.pedantic(fn, args=(data,), rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info["ratio"] = round(TOTAL / n, 2)
    assert 0 < n < TOTAL


# --------------------------------------------------------------------------- limits and the GIL
# Figures tests/test_compression.py checks only for correctness: how soon a decompression bomb
# is refused, and how freely another Python thread runs while the codec works (the GIL released
# around it), beside a call of the same length that holds the GIL. Reported, never asserted.

BOMB_LIMIT = 1 << 20


def _bomb(codec: str) -> bytes:
    """64 MiB of zeros, compressed."""
    zeros = bytes(64 << 20)
    if codec == "gzip":
        return gzip.compress(zeros, 9)
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(zeros))
    if codec == "lz4":
        return C.compress(C.LZ4, zeros)
    return zstandard.ZstdCompressor(write_content_size=False).compress(zeros)


def measure_bomb_stop(codec: str, rounds: int = 3) -> float:
    """Best seconds to refuse 64 MiB of zeros at ``max_decompressed_size`` = 1 MiB."""
    blob = _bomb(codec)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        try:
            C.decompress_into(CODECS[codec], blob, C.Arena(), BOMB_LIMIT)
        except CorruptRecordError:
            best = min(best, time.perf_counter() - t0)
        else:
            raise AssertionError(f"{codec}: 64 MiB decompressed under a 1 MiB limit")
    return best


def _spins_per_second(work: Callable[[], Any]) -> float:
    """How many loop turns another Python thread makes per second while ``work`` runs."""
    spins = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal spins
        while not stop.is_set():
            spins += 1

    th = threading.Thread(target=spin)
    th.start()
    try:
        time.sleep(0.01)
        before = spins
        t0 = time.perf_counter()
        work()
        elapsed = time.perf_counter() - t0
        during = spins - before
    finally:
        stop.set()
        th.join()
    return during / elapsed


def measure_gil(codec: str) -> dict[str, float]:
    """Another thread's loop turns/s during a 32 MiB decompression, and during ``bytes.count``.

    A call holding the GIL lets the spinner count only at its edges (about 10k/s); with the
    GIL released it counts millions a second.
    """
    part = _records_like(4 << 20, seed=9)
    data = part * 8
    blob = C.compress(CODECS[codec], data)
    arena = C.Arena()
    free = _spins_per_second(lambda: C.decompress_into(CODECS[codec], blob, arena, 1 << 30))
    assert arena.size == len(data)
    held = _spins_per_second(lambda: (data * 4).count(b"\x00\x01\x02"))  # one C call, GIL held
    return {"decompress": free, "holding the GIL": held}


def test_limits_and_gil(capsys: Any) -> None:
    """Print the bomb and GIL figures (targets: refused in < 2 s; > 100k turns/s beside)."""
    lines = []
    for codec in CODECS:
        stop = measure_bomb_stop(codec, rounds=1)
        gil = measure_gil(codec)
        lines.append(f"{codec}: bomb refused in {stop * 1e3:.0f} ms (target < 2 s); other thread "
                     f"{gil['decompress']:,.0f} turns/s during decompression, "
                     f"{gil['holding the GIL']:,.0f} during bytes.count (target > 100,000)")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


# --------------------------------------------------------------------------- table


def _best(
    fns: dict[str, Callable[[Any], Any]], arg: Any, rounds: int
) -> dict[str, float]:
    """Best time of each contender, rounds interleaved so drifting load hits all alike."""
    best = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        fn(arg)
    for _ in range(rounds):
        for who, fn in fns.items():
            t0 = time.perf_counter()
            fn(arg)
            best[who] = min(best[who], time.perf_counter() - t0)
    return best


def main() -> None:
    """Print the decompress and compress tables (MB/s of uncompressed bytes, best round)."""
    print(
        f"# {platform.processor() or platform.machine()}, Python {sys.version.split()[0]}"
    )
    versions = {
        "cramjam": cramjam.__version__,
        "lz4": lz4.VERSION,
        "zstandard": zstandard.__version__,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }
    print("# " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print()
    print(
        "| decompress | batch | kbatch MB/s | card MB/s | cramjam MB/s | kbatch vs. card |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for codec in CODECS:
        for bs in BATCH_SIZES:
            ps = PAYLOADS[(codec, bs)]
            t = _best({who: f(codec, bs) for who, f in DECOMPRESSORS.items()}, ps, 15)
            mbs = {who: TOTAL / v / 1e6 for who, v in t.items()}
            print(
                f"| {codec} | {bs} | {mbs['kbatch']:.0f} | {mbs['card']:.0f} | "
                f"{mbs['cramjam']:.0f} | {t['card'] / t['kbatch']:.2f}x |"
            )
    print()
    print("| compress 1MiB | kbatch MB/s | card MB/s | cramjam MB/s | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    data = b"".join(RAW["1MiB"])
    for codec in CODECS:
        t = _best(
            {who: COMPRESSORS[(codec, who)] for who in ("kbatch", "card", "cramjam")},
            data,
            5,
        )
        ratio = TOTAL / COMPRESSORS[(codec, "kbatch")](data)
        print(
            f"| {codec} | {TOTAL / t['kbatch'] / 1e6:.0f} | {TOTAL / t['card'] / 1e6:.0f} | "
            f"{TOTAL / t['cramjam'] / 1e6:.0f} | {ratio:.1f} |"
        )


    print()
    print("| codec | 64 MiB bomb refused at 1 MiB | other thread during decompression "
          "| during bytes.count (GIL held) |")
    print("| --- | ---: | ---: | ---: |")
    for codec in CODECS:
        gil = measure_gil(codec)
        print(f"| {codec} | {measure_bomb_stop(codec) * 1e3:.0f} ms | {gil['decompress'] / 1e6:.1f} M turns/s | "
              f"{gil['holding the GIL'] / 1e6:.2f} M turns/s |")


if __name__ == "__main__":
    main()
