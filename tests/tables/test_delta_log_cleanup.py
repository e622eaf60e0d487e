"""A Delta table's ledger after checkpoint and log cleanup (issue 28): the commit infos that held
``kbatch.ledger`` are deleted, the app transactions (kept in the checkpoint) still say where each
partition ends, so the next append continues exactly: no duplicate, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tables import convert_cli, kafka_batch, rows_of_root, rows_of_table, summary_of, write_log

from kbatch.tables import LEDGER_KEY, DeltaSink, Ledger, OffsetRange

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyarrow")


def clean_up_log(uri: str) -> None:
    """What a table's maintenance does: a commit of its own (not kbatch's), a checkpoint, and the
    log files before it deleted (retention 0, so that they are expired now)."""
    deltalake.DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table = deltalake.DeltaTable(uri)
    table.create_checkpoint()
    table.cleanup_metadata()
    assert not any(LEDGER_KEY in info for info in deltalake.DeltaTable(uri).history())  # the commit infos gone


def test_append_after_checkpoint_and_cleanup_is_exactly_once(root, tmp_path):
    out = tmp_path / "out"
    summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events"))
    write_log(root, "events", 0, 120)
    summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events", "--mode", "append"))
    clean_up_log(str(out / "events"))
    assert not (out / "events" / "_delta_log" / f"{0:020d}.json").exists()
    again = convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events", "--mode", "append",
                        json_summary=False)
    assert again.returncode == 0 and again.stdout.startswith("nothing new since version 2 of ")
    write_log(root, "events", 0, 200)  # new segments
    s = summary_of(convert_cli(str(root), str(out), "--format", "delta", "--subscribe", "events", "--mode", "append"))
    assert s["records"] == 80 and s["tables"][0]["ranges"] == [
        {"topic": "events", "partition": 0, "start": 120, "end": 200}]
    got = rows_of_table(deltalake.DeltaTable(str(out / "events")).to_pyarrow_table())
    assert got == rows_of_root(root, ["events"])  # each record once


def test_ledger_read_back_from_app_transactions(tmp_path):
    out = tmp_path / "out"
    sink = DeltaSink(out, "append", topics=["t"])
    sink.open(kafka_batch(range(0)).schema)
    sink.write([kafka_batch(range(10))])
    sink.commit(Ledger([OffsetRange("t", 0, 0, 10)]), Ledger([OffsetRange("t", 0, 0, 10)]))
    clean_up_log(str(out / "t"))
    # the partitions a run converts are looked up: the one held ends at 10, another has nothing
    again = DeltaSink(out, "append", topics=["t"], partitions=[("t", 0, None), ("t", 1, None)])
    assert again.committed() == Ledger([OffsetRange("t", 0, 10, 10)])  # where it began is not kept
    assert again.last_commits() == [f"version 1 of {Path(out, 't')}"]


def test_overwrite_drops_the_partitions_it_does_not_convert(tmp_path):
    out = tmp_path / "out"
    sink = DeltaSink(out, "append", topics=["t"])
    sink.open(kafka_batch(range(0)).schema)
    sink.write([kafka_batch(range(10))])
    both = Ledger([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 4)])
    sink.commit(both, both)
    over = DeltaSink(out, "overwrite", topics=["t"])
    over.open(kafka_batch(range(0)).schema)
    over.write([kafka_batch(range(3))])
    only = Ledger([OffsetRange("t", 0, 0, 3)])
    over.commit(only, only)
    clean_up_log(str(out / "t"))
    keys = [("t", 0, None), ("t", 1, None)]
    assert DeltaSink(out, "append", topics=["t"], partitions=keys).committed() == Ledger([OffsetRange("t", 0, 3, 3)])
