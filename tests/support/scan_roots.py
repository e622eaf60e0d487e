"""Partition directories for scan tests: several segments, out-of-order timestamps inside
batches, LogAppendTime batches, transactions (committed and aborted), compaction gaps, indexes
kept, deleted or lying."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

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


OPS = ["=", "<", "<=", ">", ">=", "between", "in"]


def holds(op: str, left: object, value: object) -> bool:
    """Whether ``left op value`` holds (a term of :mod:`kbatch.log._predicate`; None never does)."""
    if left is None:
        return False
    if op == "=":
        return left == value
    if op == "<":
        return left < value  # type: ignore[operator]
    if op == "<=":
        return left <= value  # type: ignore[operator]
    if op == ">":
        return left > value  # type: ignore[operator]
    if op == ">=":
        return left >= value  # type: ignore[operator]
    if op == "between":
        return value[0] <= left <= value[1]  # type: ignore[index,operator]
    return left in value  # type: ignore[operator]


def eager(logs: list, terms: list, iso: str) -> list[tuple]:
    """(topic, partition, offset, timestamp ms, value) of the eager reads, filtered in Python."""
    out = []
    for log in logs:
        t = log.read(isolation_level=iso)
        for off, ts, value in zip(t.records["offset"].tolist(), t.records["timestamp"].tolist(), t.values(),
                                  strict=True):
            row = {"topic": log.topic, "partition": log.partition, "offset": off, "timestamp": ts}
            if all(holds(op, row[c], v) for c, op, v in terms):
                out.append((log.topic, log.partition, off, ts, value))
    return out


def term(column: str, lo: int, hi: int) -> st.SearchStrategy:
    """A random filter term on ``column`` with values in ``[lo, hi]`` (every operator)."""
    value = st.integers(lo, hi)
    return st.one_of(
        st.tuples(st.just(column), st.sampled_from(OPS[:5]), value),
        st.tuples(st.just(column), st.just("between"), st.tuples(value, value).map(sorted).map(tuple)),
        st.tuples(st.just(column), st.just("in"), st.lists(value, max_size=4)),
    )


#: Random filters (up to 3 terms) over the roots of :func:`scan_roots`.
TERMS = st.lists(
    st.one_of(term("offset", -2, 200), term("timestamp", 950, 1900),
              st.tuples(st.just("topic"), st.sampled_from(["=", "in"]), st.sampled_from(["p", "q"]))
              .map(lambda t: t if t[1] == "=" else (t[0], "in", [t[2]])),
              term("partition", 0, 2)),
    max_size=3,
)


def scan_roots(base: Path) -> dict[str, Path]:
    """Roots of three partitions (topics p and q): ``with`` indexes, ``bare`` (none) and ``lying``."""
    for seed, (topic, partition) in enumerate([("p", 0), ("p", 1), ("q", 0)]):
        random_log(base / "with", seed, topic=topic, partition=partition)
    out = {"with": base / "with"}
    for part in sorted(p for p in (base / "with").iterdir() if p.is_dir()):
        without_indexes(part, base / "bare" / part.name)
        lying_indexes(part, base / "lying" / part.name, seed=len(part.name))
    out["bare"], out["lying"] = base / "bare", base / "lying"
    assert all(len(list(p.glob("*.log"))) >= 3 for p in (base / "with").iterdir() if p.is_dir())
    return out


def window(lo: int, width: int, which: str) -> list[tuple[str, str, int]]:
    """The terms of a time window ``[lo, lo + width)`` (ms): its lower bound, upper bound or both."""
    terms = []
    if which in ("both", "lo"):
        terms.append(("timestamp", ">=", lo))
    if which in ("both", "hi"):
        terms.append(("timestamp", "<", lo + width))
    return terms
