"""Tables read from a partition directory know their topic and partition (issue 16)."""

from __future__ import annotations

import pytest

import kbatch
from kbatch.log import LogWriter, open_log

pa = pytest.importorskip("pyarrow")


@pytest.fixture
def log(tmp_path):
    with LogWriter(tmp_path, "_orders", 3, segment_bytes=200) as w:
        for i in range(4):
            w.append(kbatch.encode([b"v%d" % i], base_offset=i))
    with open_log(tmp_path / "_orders-3") as d:
        yield d


def test_read_carries_topic_and_partition(log):
    t = log.read()
    assert (t.topic, t.partition) == ("_orders", 3)
    at = t.to_arrow()
    assert set(at.column("topic").to_pylist()) == {"_orders"}
    assert set(at.column("partition").to_pylist()) == {3}
    assert pa.table(t).column("topic").to_pylist() == ["_orders"] * 4  # the PyCapsule stream


def test_iter_tables_and_selections_carry_them(log):
    tables = list(log.iter_tables(chunk_bytes=1))
    assert len(tables) > 1
    assert all((t.topic, t.partition) == ("_orders", 3) for t in tables)
    assert (log.read(max_records=1).topic, log.read(isolation_level="read_committed").partition) == ("_orders", 3)


def test_explicit_arguments_win_and_bare_decode_stays_null(log):
    assert log.read().to_arrow(topic="x", partition=9).column("partition").to_pylist() == [9] * 4
    bare = kbatch.decode(kbatch.encode([b"a"]))
    assert bare.topic is None and bare.partition is None
    assert bare.to_arrow().column("topic").to_pylist() == [None]


def test_pandas_polars_duckdb(log):
    t = log.read()
    assert t.to_pandas()["topic"].tolist() == ["_orders"] * 4
    pl = pytest.importorskip("polars")
    assert pl.DataFrame(t)["partition"].to_list() == [3] * 4
    duckdb = pytest.importorskip("duckdb")
    assert duckdb.sql("select distinct topic, partition from t").fetchall() == [("_orders", 3)]
