"""Compressed batches: kbatch.decode / kbatch.encode per codec, beside their peers (issues 4, 20).

Workload: :func:`workload.core_workload`, the core benchmark's records (200,000 JSON-like
values of about 130 bytes, 8-16 byte keys, one header each), 500 records per batch: 400
batches, about 36 MB as uncompressed v2 batches.

Decode has a producer axis (issue 20): the same records as each producer kbatch can reach
here writes them, each with its own flavour of every codec (:mod:`producers`: kbatch,
aiokafka, kafka-python, librdkafka through its mock cluster, and Java's layouts, synthesized).
Contenders, measured in the same run on the same bytes:

``decode-<codec>-<producer>-kbatch``
    ``kbatch.decode(data)``, CRC-32C checked, into a RecordTable. With two usable cores it
    parses on a second thread while the calling thread decompresses.
``decode-<codec>-<producer>-kbatch-1t``
    The same with ``kbatch.set_threads(1)``: the calling thread only (reported beside).
``decode-<codec>-<producer>-decompress``
    Decompression alone: the codec library (zlib, python-snappy, python-lz4, zstandard)
    decompressing the same batch payloads, ``data[pos+61 : pos+12+batch_length]``, the
    fastest honest call for the producer's layout (see :func:`decompress_alone`), outputs
    kept alive to the end as a decoder's would be; the outputs' size is checked against
    cramjam's. The issue asks kbatch for at least 100% of it.
``decode-<codec>-kbatch-aiokafka``
    aiokafka's Cython ``MemoryRecords`` reading kbatch's batches, touching every record's
    offset, timestamp, key, value and headers.

Encode (kbatch's own bytes), at Kafka's producer default levels (gzip 6, snappy, lz4 9 =
the fast compressor, zstd 3):

``encode-<codec>-kbatch``
    ``kbatch.encode(values, keys, timestamps=, headers=, max_batch_records=500,
    compression=codec)``; with two usable cores it compresses half the batches on a second
    thread. ``encode-<codec>-kbatch-1t``: the calling thread only.
``encode-<codec>-compress``
    Compression alone: the codec library compressing the same (uncompressed) batch
    payloads at the same level and block size, contexts reused: kbatch's ceiling.
``encode-<codec>-aiokafka``
    aiokafka's Cython ``DefaultRecordBatchBuilder``, one per 500 records, CRC and
    compression included. aiokafka compresses gzip at level 9 and lz4 with LZ4 HC 9 by
    default; here it runs at Kafka's levels like kbatch (gzip 6, lz4 fast), which is
    faster for aiokafka than its own defaults. Compressed sizes are reported beside.

Records/s and MB/s count the workload's records and its uncompressed batch bytes
(the same for every contender), from the best round.

Run under pytest-benchmark (``pytest bench/test_bench_codecs.py``), or print the markdown
tables with machine and versions in one command from the repository root:
``OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python bench/test_bench_codecs.py`` (plain
``python bench/...`` once kbatch is installed); add ``--cpu`` to time with CPU time instead
of wall time on a shared machine, ``--decode-only``, ``--codecs lz4,zstd``,
``--producers aiokafka,java`` or ``--rounds 3`` to narrow it.
``KBATCH_BENCH_RECORDS=20000`` shrinks the workload for a smoke run.

Caveat: one process, on whatever else the machine is running; rounds are interleaved
(table mode) so drifting load hits every contender alike, and the best round is kept.
kbatch's second thread only pays when a second core is free: on a busy machine compare
the 1-thread columns. ``--cpu`` (or pytest-benchmark's
``--benchmark-timer=time.process_time``) keeps scheduling delays out of the numbers but
adds up both of kbatch's threads.
"""

from __future__ import annotations

import functools
import os
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

import cramjam
import lz4.block
import lz4.frame
import producers
import pytest
import snappy
import zstandard
from aiokafka import codec as aiokafka_codec
from aiokafka.record._crecords import DefaultRecordBatchBuilder, MemoryRecords
from aiokafka.record._crecords import default_records as aiokafka_default_records
from workload import BATCH_RECORDS, core_workload, machine, one_thread

import kbatch

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
N_RECORDS = int(os.environ.get("KBATCH_BENCH_RECORDS", "200000"))
DECODE_ROUNDS = 3  # pytest mode; about 45 s for the whole file on a loaded 2-core box
ENCODE_ROUNDS = 2


@functools.cache
def workload() -> tuple[list[bytes], list[bytes], list[int], list[list[tuple[str, bytes]]]]:
    return core_workload(N_RECORDS)


def _kbatch_encode(codec: str | None) -> bytes:
    values, keys, timestamps, headers = workload()
    return kbatch.encode(
        values, keys, timestamps=timestamps, headers=headers, max_batch_records=BATCH_RECORDS, compression=codec
    )


@functools.cache
def uncompressed_size() -> int:
    """Bytes of the workload as uncompressed v2 batches: the MB in MB/s."""
    return len(_kbatch_encode(None))


@functools.cache
def uncompressed_payloads() -> list[memoryview]:
    """Each batch's records, uncompressed: what the encoders compress."""
    return _payloads(_kbatch_encode(None))


def _payloads(data: bytes) -> list[memoryview]:
    batches = kbatch.decode(data).batches
    mv = memoryview(data)
    return [
        mv[pos + 61 : pos + 12 + length]
        for pos, length in zip(batches["position"].tolist(), batches["batch_length"].tolist(), strict=True)
    ]


# --------------------------------------------------------------------------- decode


def producer_payloads(producer: str, codec: str) -> tuple[bytes, list[memoryview]]:
    """A producer's batches (:mod:`producers`) and each batch's compressed records."""
    data = producers.batches(producer, codec, N_RECORDS)
    return data, _payloads(data)


def _xerial_chunks(payload: memoryview) -> Iterator[memoryview]:
    pos = 16  # magic 0x82 "SNAPPY" 0, version, compatible version
    while pos < len(payload):
        (n,) = struct.unpack_from(">i", payload, pos)
        yield payload[pos + 4 : pos + 4 + n]
        pos += 4 + n


def _gunzip_members(payload: memoryview) -> bytes:
    """Every member of a gzip stream (zlib.decompress stops after the first)."""
    d = zlib.decompressobj(31)
    out = [d.decompress(payload)]
    while d.unused_data:
        rest = d.unused_data
        d = zlib.decompressobj(31)
        out.append(d.decompress(rest))
    return b"".join(out)


def _is_xerial(payload: memoryview) -> bool:
    return bytes(payload[:8]) == b"\x82SNAPPY\x00"


def decompress_alone(codec: str, producer: str = "kbatch") -> Callable[[], int]:
    """The codec library alone on the same payloads; returns the bytes it produced.

    The fastest honest call for each layout: one ``zlib.decompress`` per single-member
    gzip payload (a loop over the members otherwise), python-snappy per xerial chunk or
    raw block, ``lz4.frame.decompress`` (liblz4's frame decoder, block and content
    checksums verified as the frame asks), zstandard's one-shot decoder (bounded at 1 MiB
    for frames that do not declare their size, as Java's streamed frames).
    """
    payloads = producer_payloads(producer, codec)[1]
    if codec == "gzip":
        if all(len(_gunzip_members(p)) == int.from_bytes(p[-4:], "little") for p in payloads[:3]):
            return lambda: sum(map(len, [zlib.decompress(p, 31) for p in payloads]))
        return lambda: sum(map(len, [_gunzip_members(p) for p in payloads]))
    if codec == "snappy":
        if all(map(_is_xerial, payloads)):
            return lambda: sum(map(len, [snappy.decompress(c) for p in payloads for c in _xerial_chunks(p)]))
        return lambda: sum(map(len, [snappy.decompress(p) for p in payloads]))
    if codec == "lz4":
        return lambda: sum(map(len, [lz4.frame.decompress(p) for p in payloads]))
    dctx = zstandard.ZstdDecompressor()
    return lambda: sum(map(len, [dctx.decompress(p, max_output_size=1 << 20) for p in payloads]))


@functools.cache
def decompressed_size(codec: str, producer: str) -> int:
    """What the payloads decompress to, by cramjam (a second library): the check on decompress_alone."""
    total = 0
    for p in producer_payloads(producer, codec)[1]:
        if codec == "gzip":
            total += len(cramjam.gzip.decompress(p))
        elif codec == "snappy":
            chunks = list(_xerial_chunks(p)) if _is_xerial(p) else [p]
            total += sum(len(cramjam.snappy.decompress_raw(c)) for c in chunks)
        elif codec == "lz4":
            total += len(cramjam.lz4.decompress(p))
        else:
            total += len(cramjam.zstd.decompress(p))
    return total


def kbatch_decode(codec: str, producer: str = "kbatch") -> Callable[[], int]:
    data = producer_payloads(producer, codec)[0]
    return lambda: len(kbatch.decode(data))


def on_one_thread(make: Callable[..., Callable[[], int]]) -> Callable[..., Callable[[], int]]:
    """The same contender with ``kbatch.set_threads(1)``: the calling thread only."""
    return lambda *args: one_thread(make(*args))


def aiokafka_decode(codec: str, producer: str = "kbatch") -> Callable[[], int]:
    data = producer_payloads(producer, codec)[0]

    def run() -> int:
        records = MemoryRecords(data)
        n = 0
        while (batch := records.next_batch()) is not None:
            for r in batch:
                r.offset, r.timestamp, r.key, r.value, r.headers
                n += 1
        return n

    return run


DECODERS: dict[str, Callable[..., Callable[[], int]]] = {
    "kbatch": kbatch_decode,
    "kbatch-1t": on_one_thread(kbatch_decode),
    "decompress": decompress_alone,
    "aiokafka": aiokafka_decode,
}
#: The producers whose batches the decoders read (``aiokafka`` reads kbatch's only).
PRODUCERS = [p for p in producers.PRODUCERS if producers.available(p)]


# --------------------------------------------------------------------------- encode


@contextmanager
def aiokafka_at_kafka_levels() -> Iterator[None]:
    """aiokafka's builder at Kafka's producer default levels (gzip 6, lz4 fast) for a while.

    Its builder calls its module's ``gzip_encode`` / ``lz4_encode``, at gzip 9 and LZ4 HC
    9; snappy and zstd 3 already match Kafka.
    """
    mod = aiokafka_default_records
    saved = mod.gzip_encode, mod.lz4_encode
    mod.gzip_encode = lambda payload: aiokafka_codec.gzip_encode(payload, compresslevel=6)
    mod.lz4_encode = lambda payload: aiokafka_codec.lz4_encode(payload, level=0)  # LZ4F level 0: fast
    try:
        yield
    finally:
        mod.gzip_encode, mod.lz4_encode = saved


def compress_alone(codec: str) -> Callable[[], int]:
    """The codec library alone compressing the same payloads at the same level and framing.

    Contexts are reused where the library allows it; returns the compressed bytes (the
    xerial and LZ4 frame headers aside).
    """
    payloads = uncompressed_payloads()
    if codec == "gzip":

        def gzip_all() -> int:
            outs = []
            for p in payloads:
                c = zlib.compressobj(6, zlib.DEFLATED, 31)
                outs.append(c.compress(p) + c.flush())
            return sum(map(len, outs))

        return gzip_all
    if codec == "snappy":
        return lambda: sum(len(snappy.compress(p[i : i + 32768])) for p in payloads for i in range(0, len(p), 32768))
    if codec == "lz4":
        return lambda: sum(
            len(lz4.block.compress(p[i : i + 65536], store_size=False))
            for p in payloads
            for i in range(0, len(p), 65536)
        )
    cctx = zstandard.ZstdCompressor(level=3)
    return lambda: sum(len(cctx.compress(p)) for p in payloads)


def kbatch_encode(codec: str) -> Callable[[], int]:
    return lambda: len(_kbatch_encode(codec))


def aiokafka_encode(codec: str) -> Callable[[], int]:
    values, keys, timestamps, headers = workload()
    cid = CODECS[codec]

    def run() -> int:
        size = 0
        with aiokafka_at_kafka_levels():
            for first in range(0, len(values), BATCH_RECORDS):
                b = DefaultRecordBatchBuilder(
                    magic=2, compression_type=cid, is_transactional=0, producer_id=-1,
                    producer_epoch=-1, base_sequence=-1, batch_size=2**30,
                )  # fmt: skip
                for i in range(first, min(first + BATCH_RECORDS, len(values))):
                    b.append(i - first, timestamp=timestamps[i], key=keys[i], value=values[i], headers=headers[i])
                size += len(b.build())
        return size

    return run


ENCODERS: dict[str, Callable[[str], Callable[[], int]]] = {
    "kbatch": kbatch_encode,
    "kbatch-1t": on_one_thread(kbatch_encode),
    "compress": compress_alone,
    "aiokafka": aiokafka_encode,
}


def _check(op: str, codec: str, who: str, result: int, producer: str = "kbatch") -> None:
    if op == "decode":
        expected = decompressed_size(codec, producer) if who == "decompress" else N_RECORDS
        assert result == expected, f"{op}-{codec}-{producer}-{who}: {result} != {expected}"
    else:
        assert 0 < result < uncompressed_size(), f"{op}-{codec}-{who}: {result} bytes"


# --------------------------------------------------------------------------- pytest-benchmark


def _extra(benchmark: Any, best: float | None) -> None:
    benchmark.extra_info["records"] = N_RECORDS
    benchmark.extra_info["uncompressed_MB"] = round(uncompressed_size() / 1e6, 2)
    if best:
        benchmark.extra_info["records_per_s"] = round(N_RECORDS / best)
        benchmark.extra_info["MB_per_s"] = round(uncompressed_size() / best / 1e6, 1)


def _best(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)  # None under --benchmark-disable
    return None if stats is None else float(stats.stats.min)


def _decode_cases() -> Iterator[Any]:
    for c in CODECS:
        for p in PRODUCERS:
            for w in DECODERS:
                if w != "aiokafka" or p == "kbatch":
                    yield pytest.param(c, p, w, id=f"decode-{c}-{p}-{w}")


@pytest.mark.parametrize(("codec", "producer", "who"), list(_decode_cases()))
def test_decode(benchmark: Any, codec: str, producer: str, who: str) -> None:
    fn = DECODERS[who](codec, producer)
    benchmark.group = f"decode {codec} {producer}"
    result = benchmark.pedantic(fn, rounds=DECODE_ROUNDS, iterations=1, warmup_rounds=0)
    _check("decode", codec, who, result, producer)
    _extra(benchmark, _best(benchmark))


@pytest.mark.parametrize(("codec", "who"), [pytest.param(c, w, id=f"encode-{c}-{w}") for c in CODECS for w in ENCODERS])
def test_encode(benchmark: Any, codec: str, who: str) -> None:
    fn = ENCODERS[who](codec)
    benchmark.group = f"encode {codec}"
    size = benchmark.pedantic(fn, rounds=ENCODE_ROUNDS, iterations=1, warmup_rounds=0)
    _check("encode", codec, who, size)
    _extra(benchmark, _best(benchmark))
    benchmark.extra_info["compressed_MB"] = round(size / 1e6, 2)


# --------------------------------------------------------------------------- table


def best_of(
    fns: dict[str, Callable[[], int]], rounds: int, timer: Callable[[], float] = time.perf_counter
) -> tuple[dict[str, float], dict[str, int]]:
    """Best time and the result of each contender, rounds interleaved."""
    best = dict.fromkeys(fns, float("inf"))
    results: dict[str, int] = {who: fn() for who, fn in fns.items()}  # once untimed: first touch
    for _ in range(rounds):
        for who, fn in fns.items():
            t0 = timer()
            results[who] = fn()
            best[who] = min(best[who], timer() - t0)
    return best, results


def _versions() -> str:
    names = ["kbatch", "aiokafka", "numpy", "cramjam", "lz4", "zstandard", "python-snappy"]
    out = [f"Python {sys.version.split()[0]}"]
    for name in names:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            if name == "kbatch":
                out.append(f"kbatch {kbatch.__version__} (source tree)")
    out.append(f"zlib {zlib.ZLIB_RUNTIME_VERSION}")
    return ", ".join(out)


def main(
    decode_rounds: int = 5,
    encode_rounds: int = 5,
    *,
    cpu_time: bool = False,
    codecs: list[str] | None = None,
    producer_names: list[str] | None = None,
    encode: bool = True,
) -> None:
    """Print the decode and encode tables (markdown) with machine and versions.

    ``cpu_time`` times with ``time.process_time`` instead of wall time: steadier on a
    machine shared with other work, but it adds up both of kbatch's threads (compare the
    1-thread column then). ``codecs`` and ``producer_names`` narrow the decode table.
    """
    timer = time.process_time if cpu_time else time.perf_counter
    codecs = codecs or list(CODECS)
    producer_names = producer_names or PRODUCERS
    print(f"Machine: {machine()}")
    print(f"Versions: {_versions()}")
    mb = uncompressed_size() / 1e6
    print(
        f"Workload: {N_RECORDS:,} records, {BATCH_RECORDS} per batch, {mb:.1f} MB as uncompressed v2 batches; "
        f"best of {decode_rounds} (decode) / {encode_rounds} (encode) interleaved rounds, "
        f"{'CPU' if cpu_time else 'wall'} time."
    )
    print()

    def rate(t: float) -> str:
        return f"{N_RECORDS / t / 1e6:.2f} M"

    print(
        "| decode | producer | kbatch rec/s | kbatch MB/s | decompression alone rec/s | 1 thread rec/s "
        "| vs. decompression alone | 1 thread vs. decompression alone | vs. aiokafka |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for codec in codecs:
        for producer in producer_names:
            whos = [w for w in DECODERS if w != "aiokafka" or producer == "kbatch"]
            t, res = best_of({w: DECODERS[w](codec, producer) for w in whos}, decode_rounds, timer)
            for who, r in res.items():
                _check("decode", codec, who, r, producer)
            vs_aiokafka = f"{t['aiokafka'] / t['kbatch']:.1f}x" if "aiokafka" in t else "-"
            print(
                f"| {codec} | {producer} | {rate(t['kbatch'])} | {mb / t['kbatch']:.0f} | {rate(t['decompress'])} | "
                f"{rate(t['kbatch-1t'])} | {t['decompress'] / t['kbatch']:.0%} | "
                f"{t['decompress'] / t['kbatch-1t']:.0%} | {vs_aiokafka} |",
                flush=True,
            )
    print(f"Load average after decode: {os.getloadavg()[0]:.2f}")
    if not encode:
        return
    print()
    print(
        "| encode | kbatch rec/s | kbatch MB/s | compression alone rec/s | aiokafka rec/s "
        "| vs. compression alone | vs. aiokafka | kbatch size | aiokafka size | 1 thread vs. aiokafka |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for codec in CODECS:
        t, res = best_of({who: make(codec) for who, make in ENCODERS.items()}, encode_rounds, timer)
        for who, r in res.items():
            _check("encode", codec, who, r)
        print(
            f"| {codec} | {rate(t['kbatch'])} | {mb / t['kbatch']:.0f} | {rate(t['compress'])} | "
            f"{rate(t['aiokafka'])} | {t['compress'] / t['kbatch']:.0%} | {t['aiokafka'] / t['kbatch']:.1f}x | "
            f"{res['kbatch'] / 1e6:.2f} MB | {res['aiokafka'] / 1e6:.2f} MB | {t['aiokafka'] / t['kbatch-1t']:.1f}x |"
        )


def _cli() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="kbatch codec bench: markdown tables")
    parser.add_argument("--cpu", action="store_true", help="CPU time instead of wall time")
    parser.add_argument("--codecs", help="comma-separated subset of " + ",".join(CODECS))
    parser.add_argument("--producers", help="comma-separated subset of " + ",".join(PRODUCERS))
    parser.add_argument("--decode-only", action="store_true", help="skip the encode table")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args()
    main(
        args.rounds, args.rounds, cpu_time=args.cpu,
        codecs=args.codecs.split(",") if args.codecs else None,
        producer_names=args.producers.split(",") if args.producers else None,
        encode=not args.decode_only,
    )  # fmt: skip


if __name__ == "__main__":
    _cli()
