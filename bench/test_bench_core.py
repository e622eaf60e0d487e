"""Core codec speed (issue #2): uncompressed RecordBatch v2, kbatch vs aiokafka's Cython records.

Workload: 200,000 records of ~130 B JSON-like values, 8-16 B keys, one header
each, 500 records per batch (``workload.core_workload``). Peers run in the
same process and session.

Run the table: ``python bench/test_bench_core.py`` (or through pytest-benchmark:
``python -m pytest bench/test_bench_core.py --benchmark-only``).

| id                     | what is timed                                                     |
|------------------------|-------------------------------------------------------------------|
| decode-kbatch          | ``kbatch.decode`` with CRC-32C verification, all columns (large   |
|                        | inputs parsed from both ends on two threads)                      |
| decode-kbatch-1t       | the same, ``kbatch.set_threads(1)``: the calling thread only      |
| memcpy-input           | a NumPy copy of the same input bytes (``np.frombuffer(...).copy() |
|                        | ``): the physical limit the decode is measured against            |
| decode-aiokafka        | aiokafka's reader iterating every record, touching offset,        |
|                        | timestamp, key, value and headers (no CRC check)                  |
| decode-aiokafka-crc    | the same plus ``validate_crc()`` per batch, as its consumer does  |
| values-kbatch          | ``kbatch.decode(...).values()``: every value as Python bytes      |
| encode-kbatch          | ``kbatch.encode`` from Python lists (second half of the batches   |
|                        | written on a second thread)                                       |
| encode-kbatch-1t       | the same, ``kbatch.set_threads(1)``: the calling thread only      |
| encode-kbatch-into     | ``encode-kbatch`` with ``out=`` one ``bytearray`` reused across   |
|                        | calls: no fresh 36 MB of pages from the kernel each call          |
| encode-aiokafka        | aiokafka's ``DefaultRecordBatchBuilder``, one ``append`` a record |
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from workload import BATCH_RECORDS, best_interleaved, core_workload, machine, one_thread

import kbatch

aiokafka_records = pytest.importorskip("aiokafka.record._crecords")

N = int(os.environ.get("KBATCH_BENCH_RECORDS", "200000"))


@functools.cache
def workload():
    return core_workload(N)


@functools.cache
def encoded() -> bytes:
    values, keys, timestamps, headers = workload()
    return kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=BATCH_RECORDS)


def kbatch_decode() -> int:
    return len(kbatch.decode(encoded()))


def memcpy_input() -> int:
    # (a fresh array each round, as a decode's columns are fresh)
    return len(np.frombuffer(encoded(), dtype=np.uint8).copy()) and N


def kbatch_values() -> int:
    return len(kbatch.decode(encoded()).values())


def _aiokafka_iterate(check_crc: bool) -> int:
    records = aiokafka_records.MemoryRecords(encoded())
    n = 0
    while (batch := records.next_batch()) is not None:
        if check_crc:
            assert batch.validate_crc()
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers
            n += 1
    return n


def aiokafka_decode() -> int:
    return _aiokafka_iterate(False)


def aiokafka_decode_crc() -> int:
    return _aiokafka_iterate(True)


def kbatch_encode() -> int:
    values, keys, timestamps, headers = workload()
    kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=BATCH_RECORDS)
    return len(values)


_OUT = bytearray()


def kbatch_encode_into() -> int:
    values, keys, timestamps, headers = workload()
    kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=BATCH_RECORDS, out=_OUT)
    return len(values)


def aiokafka_encode() -> int:
    values, keys, timestamps, headers = workload()
    out = []
    for start in range(0, len(values), BATCH_RECORDS):
        b = aiokafka_records.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=2**30,
        )
        for i in range(start, min(start + BATCH_RECORDS, len(values))):
            b.append(i - start, timestamp=timestamps[i], key=keys[i], value=values[i], headers=headers[i])
        out.append(bytes(b.build()))
    return len(values)


CASES: dict[str, Callable[[], int]] = {
    "decode-kbatch": kbatch_decode,
    "decode-kbatch-1t": one_thread(kbatch_decode),
    "memcpy-input": memcpy_input,
    "decode-aiokafka": aiokafka_decode,
    "decode-aiokafka-crc": aiokafka_decode_crc,
    "values-kbatch": kbatch_values,
    "encode-kbatch": kbatch_encode,
    "encode-kbatch-1t": one_thread(kbatch_encode),
    "encode-kbatch-into": kbatch_encode_into,
    "encode-aiokafka": aiokafka_encode,
}
PEER = {
    "decode": "decode-aiokafka",
    "memcpy": "decode-aiokafka",
    "values": "decode-aiokafka",
    "encode": "encode-aiokafka",
}


@pytest.mark.parametrize("case", list(CASES))
def test_core(benchmark: Any, case: str) -> None:
    fn = CASES[case]
    assert fn() == N  # every side really processed every record
    benchmark.extra_info["records"] = N
    benchmark.extra_info["bytes"] = len(encoded())
    benchmark.pedantic(fn, rounds=5 if "kbatch" in case else 3, iterations=1, warmup_rounds=1)


def best_of(rounds: int = 7) -> dict[str, float]:
    """Best wall time of each case, the cases interleaved round by round."""
    return best_interleaved(CASES, rounds)


def table(best: dict[str, float]) -> str:
    size = len(encoded())
    rows = ["| case | records/s | MB/s | vs. aiokafka | vs. memcpy of the input |", "|---|--:|--:|--:|--:|"]
    for name, t in best.items():
        peer = PEER[name.split("-")[0]]
        ratio = best[peer] / t
        memcpy = f"{best['memcpy-input'] / t:.0%}" if name.startswith(("decode-kbatch", "memcpy")) else ""
        rows.append(f"| {name} | {N / t / 1e6:.2f} M | {size / t / 1e6:.0f} | {ratio:.1f}x | {memcpy} |")
    return "\n".join(rows)


def versions() -> str:
    import aiokafka
    import numpy

    return (
        f"Python {platform.python_version()}, kbatch {kbatch.__version__}, aiokafka {aiokafka.__version__}, "
        f"numpy {numpy.__version__}; {N} records, {len(encoded())} bytes"
    )


if __name__ == "__main__":
    print(f"{machine()}; {versions()}")
    print(table(best_of()))
