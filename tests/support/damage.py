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
    """Damage a copy of ``events-0``: (the file, its bytes before, the offsets it lost). ``kind``:
    ``cut`` (the second segment cut inside its last batch), ``length`` (the first batch of the
    last segment with a batchLength past the end of the file) or ``crc`` (a value byte of the
    first batch of the third segment changed: its CRC fails)."""
    segs = sorted((root / "events-0").glob("*.log"))
    assert len(segs) >= 4
    seg = {"cut": segs[1], "length": segs[-1], "crc": segs[2]}[kind]
    raw = seg.read_bytes()
    bad = bytearray(raw[:-20] if kind == "cut" else raw)
    if kind == "length":
        bad[8:12] = struct.pack(">i", 1 << 20)
    elif kind == "crc":
        bad[struct.unpack_from(">i", bad, 8)[0] + 12 - 3] ^= 0xFF  # in the batch's last record
    seg.write_bytes(bytes(bad))
    lost_from = int(segs[2].stem) - 5 if kind == "cut" else int(seg.stem)
    return seg, raw, range(lost_from, lost_from + 5)
