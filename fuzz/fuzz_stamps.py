"""Fuzz ``kbatch.codec._core.stamps``, the walk of record offsets and timestamps behind lazy scans.

Input layout (``fuzz/make_seeds.py`` writes seeds in it: the decode seeds)::

    flags   uint8   bit 0: verify_crc; bit 1: a small max_decompressed_size
    limit   uint8   max_decompressed_size = limit * 256 bytes when bit 1 is set
    data    bytes   the buffer handed to stamps

Oracle (``fuzz/oracle.py``): stamps never raises on any bytes; its arrays agree in length
(one status, count and least timestamp per complete entry, one offset and timestamp per
record counted); every batch it vouches for (``STAMPS_OK``) decodes alone with
``kbatch.decode`` under the same options, to the same offsets and timestamps and least
timestamp; a batch it does not vouch for has no records in its arrays.

Run ``python fuzz/fuzz_stamps.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    import numpy as np

    import kbatch
    from kbatch.codec._core import STAMPS_OK, scan, stamps
    from kbatch.errors import KBatchError

import oracle

_INT64_MAX = np.iinfo(np.int64).max


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 2:
        return
    flags, limit, data = raw[0], raw[1], raw[2:]
    options: dict[str, Any] = {"verify_crc": bool(flags & 1)}
    if flags & 2:
        options["max_decompressed_size"] = limit * 256
    offsets, timestamps, counts, least, status = stamps(data, **options)
    oracle.check(len(counts) == len(least) == len(status), "per-batch arrays differ in length")
    oracle.check(len(offsets) == len(timestamps) == int(counts.sum()), "records disagree with counts")
    bad = status != STAMPS_OK
    oracle.check(bool((counts[bad] == 0).all() and (least[bad] == _INT64_MAX).all()),
                 "a batch not vouched for has records")
    if not (~bad).any():
        return
    heads, _, _ = scan(data)
    starts = np.concatenate(([0], np.cumsum(counts)))
    for k in np.flatnonzero(~bad).tolist():
        oracle.check(k < len(heads), f"batch {k} vouched for past a bad frame")
        p = int(heads["position"][k])
        one = data[p : p + 12 + struct.unpack_from(">i", data, p + 8)[0]]
        try:
            t = kbatch.decode(one, **options)
        except KBatchError as exc:
            raise oracle.Finding(f"batch {k} vouched for, but decode rejects it: {exc!r}") from exc
        got = t.records
        oracle.check(offsets[starts[k] : starts[k + 1]].tolist() == got["offset"].tolist(), f"batch {k}: offsets")
        oracle.check(timestamps[starts[k] : starts[k + 1]].tolist() == got["timestamp"].tolist(),
                     f"batch {k}: timestamps")
        oracle.check(int(least[k]) == (int(got["timestamp"].min()) if len(got) else _INT64_MAX),
                     f"batch {k}: least timestamp")


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
