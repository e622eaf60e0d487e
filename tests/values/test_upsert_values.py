"""``kbatch convert --values avro --upsert`` (issues 27, 28): one row per key (its raw bytes, what
log compaction compares), the latest decodable value; a tombstone deletes the key; a value that
does not decode is a dead letter and neither deletes nor replaces the key's row. Checked against
kbatch's own reading of the log (``LogDir.to_arrow(values=...)``) with the last value per key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from support import schemas_topic
from support.avro_root import V1, V2, avro, framed, order
from support.tables import convert_cli, summary_of

import kbatch
from kbatch.values import Registry

pytest.importorskip("fastavro")

#: (key, value) of orders-0 by offset: the first run's records; None: a tombstone
FIRST = [
    (b"a", framed(1, avro(V1, order(0, 1)))),
    (b"b", framed(2, avro(V2, order(1, 2)))),
    (b"c", framed(2, avro(V2, order(2, 2)))),
    (b"a", framed(2, avro(V2, order(3, 2)))),   # a replaced
    (b"b", None),                               # b deleted
    (b"c", framed(99, avro(V2, order(5, 2)))),  # c: unknown id, a dead letter; c keeps order 2
    (b"d", framed(2, avro(V2, order(6, 2)))),
    (b"d", framed(2, avro(V2, order(7, 2))[:-4])),  # d: truncated, a dead letter; d keeps order 6
]
#: the second run's
MORE = [
    (b"b", framed(1, avro(V1, order(8, 1)))),   # b back
    (b"a", None),                               # a deleted
    (b"d", b"not avro"),                        # d: no frame, a dead letter; d keeps order 6
    (b"e", framed(98, avro(V2, order(11, 2)))),  # e: only a dead letter: no row
]


def write_root(root: Path, records: list[tuple[bytes, bytes | None]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "_schemas-0").exists():
        schemas_topic.write_topic(root, [schemas_topic.schema("orders-value", 1, 1, json.dumps(V1)),
                                         schemas_topic.schema("orders-value", 2, 2, json.dumps(V2))])
    shutil.rmtree(root / "orders-0", ignore_errors=True)  # written anew: a LogWriter continues a partition
    with kbatch.LogWriter(root, "orders", 0) as w:
        w.append(kbatch.encode([v for _, v in records], keys=[k for k, _ in records],
                               timestamps=[1_700_000_000_000 + i for i in range(len(records))]))


def compacted(root: Path) -> dict[bytes, tuple[int, dict]]:
    """kbatch's own reading of orders-0, the last decodable record per key (a tombstone: none)."""
    registry = Registry.from_log_dirs(root)
    table = kbatch.LogDir(root / "orders-0").to_arrow(values=registry, reader_schema=registry.latest("orders-value"),
                                                      errors="null")
    out: dict[bytes, tuple[int, dict]] = {}
    for row in table.to_pylist():
        if row["value_error"] is not None:  # a dead letter: the key's row stays
            continue
        if row["value"] is None:
            out.pop(row["key"], None)
        else:
            out[row["key"]] = (row["offset"], row["value"])
    return out


def read(kind: str, out: Path) -> tuple[pa.Table, pa.Table]:
    if kind == "iceberg":
        from kbatch.tables import default_catalog

        catalog = default_catalog(out)
        return (catalog.load_table("kafka.orders").scan().to_arrow(),
                catalog.load_table("kafka.orders__dead_letter").scan().to_arrow())
    from deltalake import DeltaTable

    return (DeltaTable(str(out / "orders")).to_pyarrow_table(),
            DeltaTable(str(out / "orders__dead_letter")).to_pyarrow_table())


def rows(table: pa.Table) -> dict[bytes, tuple[int, dict]]:
    keys = table.column("key").to_pylist()
    assert len(set(keys)) == len(keys), "a key twice"
    return {row["key"]: (row["offset"], row["value"]) for row in table.to_pylist()}


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_upsert_keeps_the_last_decodable_value_per_key(tmp_path, kind) -> None:
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    root, out = tmp_path / "root", tmp_path / "out"
    write_root(root, FIRST)
    args = [str(root), str(out), "--values", "avro", "--format", kind, "--subscribe", "orders", "--upsert",
            "--mode", "append"]
    s = summary_of(convert_cli(*args))
    assert s["dead_letters"] == 2
    good, dead = read(kind, out)
    want = compacted(root)
    assert sorted(want) == [b"a", b"c", b"d"] and {k: o for k, (o, _) in want.items()} == {b"a": 3, b"c": 2, b"d": 6}
    assert rows(good) == want
    assert sorted(dead.column("offset").to_pylist()) == [5, 7]
    assert summary_of(convert_cli(*args))["since"]  # nothing new: nothing committed
    write_root(root, FIRST + MORE)
    s = summary_of(convert_cli(*args))
    assert s["dead_letters"] == 2
    good, dead = read(kind, out)
    want = compacted(root)
    assert {k: o for k, (o, _) in want.items()} == {b"b": 8, b"c": 2, b"d": 6}
    assert rows(good) == want
    assert sorted(dead.column("offset").to_pylist()) == [5, 7, 10, 11]  # each dead letter once


def test_upsert_refuses_decoded_keys_and_flattened_values(tmp_path) -> None:
    root = tmp_path / "root"
    write_root(root, FIRST)
    for extra, says in ((["--keys", "avro"], "--upsert keeps one row per key by its raw bytes"),
                        (["--flatten-values"], "--upsert tells a tombstone by its null value column")):
        run = convert_cli(str(root), str(tmp_path / "out"), "--values", "avro", "--format", "delta", "--upsert",
                          *extra)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and says in run.stderr, run.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_upsert_keeps_a_field_the_reader_schema_gained(tmp_path, kind) -> None:
    # the first run reads orders-value v1; by the second, v2 added two fields: the table gains
    # them (older rows null), and the rows merged then carry them (none dropped)
    pytest.importorskip("pyiceberg" if kind == "iceberg" else "deltalake")
    root, out = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    schemas_topic.write_topic(root, [schemas_topic.schema("orders-value", 1, 1, json.dumps(V1))])
    first = [(b"a", framed(1, avro(V1, order(0, 1)))), (b"b", framed(1, avro(V1, order(1, 1))))]
    with kbatch.LogWriter(root, "orders", 0) as w:
        w.append(kbatch.encode([v for _, v in first], keys=[k for k, _ in first]))
    args = [str(root), str(out), "--values", "avro", "--format", kind, "--subscribe", "orders", "--upsert",
            "--mode", "append"]
    summary_of(convert_cli(*args))
    shutil.rmtree(root / "_schemas-0")
    schemas_topic.write_topic(root, [schemas_topic.schema("orders-value", 1, 1, json.dumps(V1)),
                                     schemas_topic.schema("orders-value", 2, 2, json.dumps(V2))])
    more = [(b"b", framed(2, avro(V2, {**order(2, 2), "status": "PAID", "note": "gift"})))]
    with kbatch.LogWriter(root, "orders", 0) as w:
        w.append(kbatch.encode([v for _, v in more], keys=[k for k, _ in more], base_offset=2))
    summary_of(convert_cli(*args))
    if kind == "iceberg":
        from kbatch.tables import default_catalog

        good = default_catalog(out).load_table("kafka.orders").scan().to_arrow()
    else:
        from deltalake import DeltaTable

        good = DeltaTable(str(out / "orders")).to_pyarrow_table()
    got = rows(good)
    assert sorted(got) == [b"a", b"b"]
    assert got[b"b"][1]["status"] == "PAID" and got[b"b"][1]["note"] == "gift", got[b"b"]
    assert got[b"a"][1].get("status") is None and got[b"a"][0] == 0
