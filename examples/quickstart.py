"""End-to-end kbatch in one screen: encode records, decode them, query the columns.

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import time

import numpy as np

import kbatch


def main() -> None:
    n = 100_000
    values = [b'{"user": %d, "event": "click", "amount": %d.%02d}' % (i % 977, i % 500, i % 100) for i in range(n)]
    keys = [b"user-%d" % (i % 977) for i in range(n)]
    headers = [[("trace-id", b"%016x" % i)] for i in range(n)]
    timestamps = np.arange(1_700_000_000_000, 1_700_000_000_000 + n, dtype=np.int64)

    t0 = time.perf_counter()
    plain = kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500)
    packed = kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500,
                           compression="zstd")
    t1 = time.perf_counter()
    table = kbatch.decode(plain)
    t2 = time.perf_counter()
    same = kbatch.decode(packed)
    t3 = time.perf_counter()

    r = table.records
    print(f"encoded {n:,} records into {len(table.batches)} batches: {len(plain):,} bytes, "
          f"{len(packed):,} with zstd ({(t1 - t0) * 1e3:.0f} ms for both)")
    print(f"decoded uncompressed in {(t2 - t1) * 1e3:.1f} ms, zstd in {(t3 - t2) * 1e3:.1f} ms; "
          f"columns agree: {np.array_equal(r['offset'], same.records['offset'])}")
    print(f"offsets {r['offset'][0]}..{r['offset'][-1]}, next offset {table.next_offset}, "
          f"mean value size {r['value_length'].mean():.1f} B, headers {len(table.headers):,}")
    print(f"record 7: key={table.key(7)!r} value={table.value(7)!r} headers={table.headers(7)}")

    broken = bytearray(plain)
    broken[len(broken) // 2] ^= 0xFF
    try:
        kbatch.decode(bytes(broken))
    except kbatch.CorruptRecordError as exc:
        print(f"corrupt input: {exc}")
        print(f"  kept {len(exc.partial):,} records from the {len(exc.partial.batches)} batches before it")


if __name__ == "__main__":
    main()
