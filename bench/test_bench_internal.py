"""``kbatch.internal.consumer_offsets`` over a large ``__consumer_offsets`` root (issue 18).

Measured: the committed offsets of every group, as a pyarrow Table (the C pass of
``kbatch/internal/_offsetkernel.pyx`` plus the deduplication and the survivors' strings),
reading the partition from disk (page cache) with ``LogDir.iter_tables(read_committed)``.
The peer, in the same run: the same records decoded one by one in Python by
``kbatch.protocol`` Messages compiled from the same definitions (``Schema``), the latest
value per key kept in a dict (what a per-record decoder must do at the least), over the
same ``RecordTable``. Target: at least 1 M records/s for ``consumer_offsets``.

Workload: offset commits of 2,000 groups x 20 topics x 8 partitions (key ~40 bytes),
values of version 3 (most) and 4 (one in eight), 1 in 50 a tombstone, 200 records per
uncompressed batch; one block tiled to ``KBATCH_BENCH_OFFSETS_MB`` (default 256; the
issue's figure is for 1024) with renumbered base offsets.

Run: ``PYTHONPATH=. python bench/test_bench_internal.py`` prints the figures; under pytest
the target is reported beside them (a miss is a ``TargetMissed`` warning). One process, one
thread, best of three interleaved rounds, on a shared machine.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from workload import best_interleaved, report

import kbatch
from kbatch.codec._core import scan
from kbatch.internal import consumer_offsets, default_registry
from kbatch.log import open_log

SIZE_MB = int(os.environ.get("KBATCH_BENCH_OFFSETS_MB", "256"))
ROUNDS = 3


def _key(group: str, topic: str, partition: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return (b"\x00\x01" + len(g).to_bytes(2, "big") + g + len(t).to_bytes(2, "big") + t
            + partition.to_bytes(4, "big"))


def _value(rng: random.Random) -> bytes | None:
    r = rng.random()
    if r < 0.02:
        return None
    off = rng.randrange(1 << 40)
    meta = b"" if rng.random() < 0.5 else b"consumer-metadata"
    ts = 1_700_000_000_000 + rng.randrange(1 << 30)
    if r < 0.14:  # version 4: compact string, empty tagged fields
        return (b"\x00\x04" + off.to_bytes(8, "big") + (5).to_bytes(4, "big") + bytes([len(meta) + 1]) + meta
                + ts.to_bytes(8, "big") + b"\x00")
    return (b"\x00\x03" + off.to_bytes(8, "big") + (5).to_bytes(4, "big") + len(meta).to_bytes(2, "big") + meta
            + ts.to_bytes(8, "big"))


def tile(block: bytes, records_per_block: int, total: int) -> np.ndarray:
    """``block`` repeated to ``total`` bytes, each copy's batches renumbered to follow on."""
    heads, _, _ = scan(block)
    copies = max(1, total // len(block))
    arr = np.tile(np.frombuffer(block, np.uint8), copies).reshape(copies, len(block))
    for pos, base in zip(heads["position"].tolist(), heads["base_offset"].tolist(), strict=True):
        offs = (base + records_per_block * np.arange(copies, dtype=np.int64)).astype(">i8")
        arr[:, pos : pos + 8] = offs.view(np.uint8).reshape(copies, 8)
    return arr.reshape(-1)


def build(directory: Path, size_mb: int) -> tuple[Path, int]:
    rng = random.Random(18)
    keys = [_key(f"group-{rng.randrange(2000):05d}", f"topic.orders.{rng.randrange(20):03d}", rng.randrange(8))
            for _ in range(20_000)]
    values = [_value(rng) for _ in keys]
    block = kbatch.encode(values, keys, max_batch_records=200)
    part = directory / "__consumer_offsets-0"
    part.mkdir(parents=True)
    arr = tile(block, len(keys), size_mb << 20)
    arr.tofile(part / "00000000000000000000.log")
    return directory, len(keys) * max(1, (size_mb << 20) // len(block))


def per_record_peer(table: kbatch.RecordTable) -> dict[Any, Any]:
    """The same records through kbatch.protocol's compiled per-message decoders."""
    reg = default_registry()
    key_msg = reg.schema["OffsetCommitKey"]
    value_msg = reg.schema["OffsetCommitValue"]
    data = memoryview(table.data).cast("B")
    latest: dict[Any, Any] = {}
    recs = table.records
    for ks, kl, vs, vl in zip(recs["key_start"].tolist(), recs["key_length"].tolist(),
                              recs["value_start"].tolist(), recs["value_length"].tolist(), strict=True):
        key = key_msg.decode(data[ks + 2:ks + kl], 0)
        k = (key["group"], key["topic"], key["partition"])
        if vl < 0:
            latest.pop(k, None)
        else:
            version = int.from_bytes(data[vs:vs + 2], "big")
            latest[k] = value_msg.decode(data[vs + 2:vs + vl], version)
    return latest


def measure(size_mb: int = SIZE_MB) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root, n = build(Path(tmp), size_mb)
        table = open_log(root / "__consumer_offsets-0").read()
        assert len(table) == n
        ours = consumer_offsets(root)
        peer = per_record_peer(table)
        assert ours.num_rows == len(peer)
        times = best_interleaved({
            "consumer_offsets": lambda: consumer_offsets(root),
            "per-record Schema peer": lambda: per_record_peer(table),
        }, ROUNDS)
    out = {"records": float(n), "MB": float(size_mb)}
    for name, t in times.items():
        out[name + " s"] = t
        out[name + " Mrec/s"] = n / t / 1e6
    return out


def test_consumer_offsets_speed() -> None:
    figures = measure()
    report(", ".join(f"{k} {v:.3g}" for k, v in figures.items()), "consumer_offsets >= 1 Mrec/s",
           figures["consumer_offsets Mrec/s"] >= 1.0)


if __name__ == "__main__":
    for k, v in measure().items():
        print(f"{k:32s} {v:12.3f}")
