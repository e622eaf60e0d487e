"""An Iceberg run larger than one chunk (issue 28's speed): the chunks are appended in a writer
thread while the next one is read, the last one with the ledger at the commit; every row lands
once, and an error in the writer thread stops the run before anything commits."""

from __future__ import annotations

import threading

import pytest
from support.tables import kafka_batch

from kbatch.tables import IcebergSink, Ledger, OffsetRange, default_catalog

pytest.importorskip("pyiceberg")
pa = pytest.importorskip("pyarrow")


@pytest.fixture
def appends(monkeypatch):
    """The thread of every ``Transaction.append`` (and one to fail, by its number)."""
    from pyiceberg.table import Transaction

    seen: list[str] = []
    fail_at: list[int] = []
    real = Transaction.append

    def append(self, df, *args, **kwargs):
        seen.append(threading.current_thread().name)
        if len(seen) in fail_at:
            raise OSError("disk full (test)")
        return real(self, df, *args, **kwargs)

    monkeypatch.setattr(Transaction, "append", append)
    monkeypatch.setattr("kbatch.tables._iceberg.CHUNK_BYTES", 3000)
    return seen, fail_at


def _batches():
    for start in range(0, 400, 40):
        for topic in ("a", "b"):
            yield kafka_batch(range(start, start + 40), topic)


def test_chunks_are_appended_in_a_writer_thread(tmp_path, appends):
    seen, _ = appends
    out = tmp_path / "out"
    sink = IcebergSink(out, "errorifexists", topics=["a", "b"])
    converted = Ledger([OffsetRange("a", 0, 0, 400), OffsetRange("b", 0, 0, 400)])
    with sink:
        sink.open(kafka_batch(range(1)).schema)
        sink.write(_batches())
        commits = sink.commit(converted, converted)
    assert [c.records for c in commits] == [400, 400]
    assert len(seen) > 4 and set(seen[:-2]) == {"kbatch-iceberg_0"}  # the chunks: the writer thread
    assert set(seen[-2:]) == {threading.current_thread().name}  # the last of each table, with its ledger
    catalog = default_catalog(out)
    for topic in ("a", "b"):
        table = catalog.load_table(f"kafka.{topic}")
        assert sorted(table.scan().to_arrow().column("offset").to_pylist()) == list(range(400))
    assert not [t for t in threading.enumerate() if t.name.startswith("kbatch-iceberg")]


def test_an_error_in_the_writer_thread_commits_nothing(tmp_path, appends):
    seen, fail_at = appends
    fail_at.append(2)
    out = tmp_path / "out"
    sink = IcebergSink(out, "errorifexists", topics=["a", "b"])
    converted = Ledger([OffsetRange("a", 0, 0, 400), OffsetRange("b", 0, 0, 400)])

    def run() -> None:
        with sink:
            sink.open(kafka_batch(range(1)).schema)
            sink.write(_batches())
            sink.commit(converted, converted)

    with pytest.raises(OSError, match="disk full"):
        run()
    assert seen[1] == "kbatch-iceberg_0"
    assert not out.exists()  # a first run that failed: OUT as it was
    assert not [t for t in threading.enumerate() if t.name.startswith("kbatch-iceberg")]
