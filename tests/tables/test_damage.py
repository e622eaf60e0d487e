"""A damaged copy (issue 35 item 0, issue 40 item 2): a segment cut inside a batch before the last
one, or a corrupt ``batchLength`` in the last, is damage, never compaction and never the log's end.
By default the run fails with one line naming the file; with ``--no-fail-on-data-loss`` it converts
the records around it, the summary lists the damaged ranges, and the committed ledger holds only
the offsets read, so that an append after the copy is repaired converts the rest, once. Every
format, with and without the root's checkpoint files (the Spark engine: tests/spark/)."""

from __future__ import annotations

import pytest
from support.damage import N, damage, held_offsets
from support.tables import convert_cli, summary_of, write_log

pytest.importorskip("pyarrow")

CASES = [(fmt, kind, cp) for fmt in ("parquet", "iceberg", "delta") for kind in ("cut", "length")
         for cp in (True, False)] + [("parquet", "crc", True), ("delta", "crc", False)]


@pytest.mark.parametrize(("fmt", "kind", "checkpoints"), CASES,
                         ids=[f"{f}-{k}-{'checkpoints' if c else 'no-checkpoints'}" for f, k, c in CASES])
def test_damaged_copy_fails_or_is_left_out_of_the_ledger_until_repaired(tmp_path, fmt, kind, checkpoints):
    pytest.importorskip({"iceberg": "pyiceberg", "delta": "deltalake"}.get(fmt, "pyarrow"))
    root, out = write_log(tmp_path / "root", "events", 0, N), tmp_path / "out"
    if not checkpoints:
        for f in root.glob("*-checkpoint"):
            f.unlink()
    seg, raw, lost = damage(root, kind)
    proc = convert_cli(str(root), str(out), "--format", fmt)
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("kbatch convert: error: ") and "Traceback" not in proc.stderr
    assert str(seg) in last and ("crc32c" if kind == "crc" else "batchLength") in last
    assert "compaction" not in proc.stderr
    assert not out.exists() or not any(out.rglob("*.parquet"))  # (an Iceberg catalog may be made first)

    # (--mode append: the failed run may have left an Iceberg catalog with no table in OUT)
    s = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--no-fail-on-data-loss", "--mode", "append"))
    (rep,) = s["per_partition"]
    framed = kind == "crc"  # a batch whose CRC fails is framed: its records are unread, no offset is lost
    assert rep["compacted_offsets"] == 0 and (rep["lost_offsets"], rep["unread"]) == (
        (0, len(lost)) if framed else (len(lost), 0)), rep
    assert "compaction" not in rep["why"]
    assert ("(corrupt batches skipped)" if framed else "in damaged bytes (not converted)") in rep["why"]
    (d,) = rep["damaged"]
    assert d["file"] == str(seg) and d["offsets"] == [lost.start, lost.stop]
    assert held_offsets(out, fmt) == [o for o in range(N) if o not in lost]

    seg.write_bytes(raw)  # the copy repaired
    s = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--mode", "append"))
    assert s["records"] == len(lost) and s["per_partition"][0]["held"] == N - lost.start - len(lost)
    assert held_offsets(out, fmt) == list(range(N))  # every record, once
    s = summary_of(convert_cli(str(root), str(out), "--format", fmt, "--mode", "append"))
    assert s["records"] == 0 and held_offsets(out, fmt) == list(range(N))
