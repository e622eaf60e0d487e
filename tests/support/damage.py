"""Damaged copies of a log for the tests of damage (tests/tables/test_damage.py, tests/spark/):
a segment cut inside a batch before the last one, a corrupt ``batchLength`` in the last."""

from __future__ import annotations

import struct
from pathlib import Path

#: Records of ``events-0`` the tests write (``support.tables.write_log``: 5 per batch, segments of 600 bytes).
N = 300


def held_offsets(out: Path, fmt: str) -> list[int]:
    """Every offset in the table, repeats kept."""
    if fmt == "iceberg":
        from kbatch.tables import default_catalog

        table = default_catalog(out).load_table("kafka.events").scan().to_arrow()
    elif fmt == "delta":
        import deltalake

        table = deltalake.DeltaTable(str(out / "events")).to_pyarrow_table()
    else:
        import pyarrow.dataset as ds

        table = ds.dataset(out, partitioning="hive").to_table()
    return sorted(table["offset"].to_pylist())


def damage(root: Path, kind: str) -> tuple[Path, bytes, range]:
    """Damage a copy of ``events-0``: (the file, its bytes before, the offsets it lost)."""
    segs = sorted((root / "events-0").glob("*.log"))
    assert len(segs) >= 4
    if kind == "cut":  # the second segment cut inside its last batch
        seg = segs[1]
        raw = seg.read_bytes()
        seg.write_bytes(raw[:-20])
    else:  # the first batch of the last segment with a batchLength past the end of the file
        seg = segs[-1]
        raw = seg.read_bytes()
        bad = bytearray(raw)
        bad[8:12] = struct.pack(">i", 1 << 20)
        seg.write_bytes(bytes(bad))
    lost_from = int(seg.stem) if kind == "length" else int(segs[2].stem) - 5
    return seg, raw, range(lost_from, lost_from + 5)
