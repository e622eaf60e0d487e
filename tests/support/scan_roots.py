"""Partition directories for scan tests: several segments, out-of-order timestamps inside
batches, LogAppendTime batches, transactions (committed and aborted), compaction gaps, indexes
kept, deleted or lying."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

import kbatch
from kbatch.log import OFFSET_INDEX_DTYPE, TIME_INDEX_DTYPE, LogWriter

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def random_log(root: Path, seed: int, *, batches: int = 40, topic: str = "p", partition: int = 0) -> Path:
    """A partition of 1-6 record batches in every codec (some legacy magic 1 message sets, some
    LogAppendTime):
    timestamps rising with jitter and out of order inside a batch, offset gaps (compaction),
    transactions of producer 7 ended by COMMIT or ABORT markers (some left open at the end),
    index entries every ~100 bytes."""
    rng = np.random.default_rng(seed)
    ts = 1_000
    offset = 0
    open_txn = False
    with LogWriter(root, topic, partition, segment_bytes=int(rng.integers(400, 1500)),
                   index_interval_bytes=100) as w:
        for _ in range(batches):
            if open_txn and rng.random() < 0.4:
                kind = str(rng.choice(["commit", "abort"]))
                offset = w.append(kbatch.encode_control(kind, 7, 0, base_offset=offset, timestamp=ts))
                open_txn = False
                continue
            n = int(rng.integers(1, 7))
            ts += int(rng.choice([0, 1, 5, 20]))
            stamps = (ts - rng.integers(0, 30, n)).tolist()
            stamps[int(rng.integers(n))] = ts
            values = [b"v%d-" % (offset + i) + bytes(int(rng.integers(0, 20))) for i in range(n)]
            offset += int(rng.choice([0, 0, 0, 3]))  # a gap left by compaction
            txn = {}
            if rng.random() < 0.25:
                txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
                open_txn = True
            if not txn and rng.random() < 0.1:  # a legacy message set (magic 1), plain or wrapped
                raw = kbatch.encode(values, timestamps=stamps, base_offset=offset, magic=1,
                                    compression=str(rng.choice(["none", "gzip"])))
            else:  # some LogAppendTime batches: every record reads as the batch's max_timestamp
                stamp = "log_append" if not txn and rng.random() < 0.15 else "create"
                raw = kbatch.encode(values, timestamps=stamps, base_offset=offset, timestamp_type=stamp,
                                    compression=str(rng.choice(CODECS)), **txn)
            offset = w.append(raw)
    return root / f"{topic}-{partition}"


def without_indexes(part: Path, dest: Path) -> Path:
    """A copy of ``part`` with every index file deleted."""
    shutil.copytree(part, dest)
    for p in dest.glob("*index"):
        p.unlink()
    return dest


def lying_indexes(part: Path, dest: Path, seed: int) -> Path:
    """A copy of ``part`` whose ``.index`` and ``.timeindex`` entries are shifted, bit-flipped or
    moved to other batches (entries that still look valid in structure)."""
    shutil.copytree(part, dest)
    rng = np.random.default_rng(seed)
    for suffix, dtype in ((".index", OFFSET_INDEX_DTYPE), (".timeindex", TIME_INDEX_DTYPE)):
        for path in sorted(dest.glob("*" + suffix)):
            e = np.fromfile(path, dtype=dtype)
            if len(e) == 0:
                continue
            k = int(rng.integers(len(e)))
            field = str(rng.choice(list(dtype.names or ())))
            e[field][k] = int(e[field][k]) + int(rng.integers(1, 9))
            e.tofile(path)
    return dest
