"""A damaged copy under ``--engine spark`` (issue 35 item 0, issue 40 item 2): the driver's header
scan finds the damage before the job (by default one line and exit 1); with
``--no-fail-on-data-loss`` the executors convert the records around it, the ledger holds only the
offsets read (a batch whose CRC fails, skipped by an executor, is found again by the driver), and
an append after the repair reads the rest once (planned as slices of the missing offsets only).
Few and small: a JVM on a shared machine."""

from __future__ import annotations

import argparse
import json

import pytest
from support.damage import N, damage, held_offsets
from support.tables import write_log

pytestmark = pytest.mark.slow  # a JVM and Python workers

pytest.importorskip("pyarrow")

from kbatch.convert._arguments import add_arguments  # noqa: E402
from kbatch.convert._run import run  # noqa: E402


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return run(parser.parse_args([*argv, "--engine", "spark", "--json-summary"]))


@pytest.mark.parametrize(("fmt", "kind"),
                         [("parquet", "cut"), ("iceberg", "cut"), ("delta", "length"), ("parquet", "crc")])
def test_spark_damaged_copy_then_repaired(spark, tmp_path, capsys, fmt, kind):
    pytest.importorskip({"iceberg": "pyiceberg", "delta": "deltalake"}.get(fmt, "pyarrow"))
    root, out = write_log(tmp_path / "root", "events", 0, N), tmp_path / "out"
    if kind == "length":
        for f in root.glob("*-checkpoint"):
            f.unlink()
    seg, raw, lost = damage(root, kind)
    assert _run(str(root), str(out), "--format", fmt) == 1
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # (after the line that says what the run reads)
    assert "Traceback" not in err and last.startswith("kbatch convert: error: ") and str(seg) in last
    assert ("crc32c" if kind == "crc" else "batchLength") in last

    assert _run(str(root), str(out), "--format", fmt, "--no-fail-on-data-loss", "--mode", "append") == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (rep,) = s["per_partition"]
    framed = kind == "crc"  # skipped by the executors (its CRC), found again by the driver for the ledger
    assert (rep["lost_offsets"], rep["unread"]) == ((0, len(lost)) if framed else (len(lost), 0))
    assert rep["compacted_offsets"] == 0 and rep["records"] == N - len(lost)
    assert [d["offsets"] for d in rep["damaged"]] == [[lost.start, lost.stop]]
    assert held_offsets(out, fmt) == [o for o in range(N) if o not in lost]

    seg.write_bytes(raw)
    assert _run(str(root), str(out), "--format", fmt, "--mode", "append") == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["records"] == len(lost)
    assert held_offsets(out, fmt) == list(range(N))
