"""kbatch.values.split, dead_letter_schema and decoded_schema: good rows typed, bad rows kept raw
with why, every record in exactly one of them."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest
from support.avro_root import KEY, V2, avro, framed, write_avro_root

import kbatch
from kbatch import values
from kbatch.arrow import kafka_schema
from kbatch.log import open_logs
from kbatch.values import Registry, ValueDecodeError

pytest.importorskip("fastavro")


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    r = write_avro_root(tmp_path_factory.mktemp("avro") / "root")
    reg = Registry.from_log_dirs(r.root)
    raw = next(d for d in open_logs(r.root) if d.topic == "orders").read().to_arrow()
    return r, reg, raw


def test_split_keeps_the_good_rows_typed_and_the_bad_ones_raw(orders) -> None:
    r, reg, raw = orders
    good, dead = values.split(raw, reg, values=reg.latest("orders-value"), keys=reg.latest("orders-key"))
    assert good.num_rows + dead.num_rows == raw.num_rows == len(r.good) + len(r.bad)
    offsets = good.column("offset").to_pylist()
    assert offsets == sorted(r.good)
    assert good.column("value").to_pylist() == [r.good[o] for o in offsets]  # fastavro's reading, by V2
    assert good.column("value_schema_id").to_pylist() == [r.ids[o] for o in offsets]
    assert good.column("key").to_pylist() == [r.keys[o] for o in offsets]
    assert good.column("key_schema_id").to_pylist() == [3] * len(offsets)
    assert good.schema == values.decoded_schema(raw.schema, values=reg.latest("orders-value"),
                                                keys=reg.latest("orders-key"))
    assert dead.schema == values.dead_letter_schema(raw.schema)
    got = {row["offset"]: row for row in dead.to_pylist()}
    assert sorted(got) == sorted(r.bad)
    for offset, (reason, path, byte) in r.bad.items():
        row = got[offset]
        assert row["reason"].startswith(reason), row
        assert (row["column"], row["path"], row["byte"]) == ("value", path, byte)
        assert row["value"] == r.raw[offset] and row["key"] == r.raw_keys[offset]  # raw, as read
        assert row["error"].startswith(row["reason"]) and f"offset {offset}" in row["error"]
        assert row["topic"] == "orders" and row["partition"] == 0
    assert got[7]["schema_id"] == 99 and got[21]["schema_id"] == 1 and got[35]["schema_id"] is None


def test_a_column_left_out_stays_binary_and_an_empty_table_gives_empty_tables(orders) -> None:
    r, reg, raw = orders
    good, dead = values.split(raw, reg, keys=reg.latest("orders-key"))
    assert good.column("value").to_pylist() == [r.raw[o] for o in range(raw.num_rows)]
    assert dead.num_rows == 0 and good.num_rows == raw.num_rows
    good, dead = values.split(raw.slice(0, 0), reg, values=reg.latest("orders-value"))
    assert (good.num_rows, dead.num_rows) == (0, 0)
    assert good.schema == values.decoded_schema(raw.schema, values=reg.latest("orders-value"))
    assert dead.schema == values.dead_letter_schema(raw.schema)


def test_a_batch_splits_like_a_table_and_the_functions_pickle(orders) -> None:
    _r, reg, raw = orders
    reader = reg.latest("orders-value")
    good, dead = values.split(raw.to_batches()[0], reg, values=reader)
    assert good.num_rows + dead.num_rows == raw.to_batches()[0].num_rows and dead.num_rows >= 1
    split = pickle.loads(pickle.dumps(values.split))
    again = split(raw, pickle.loads(pickle.dumps(reg)), values=pickle.loads(pickle.dumps(reader)))
    assert again[1].column("offset").to_pylist() == [7, 21, 35]


def test_on_error_raise_raises_the_first_bad_record(orders) -> None:
    _r, reg, raw = orders
    with pytest.raises(ValueDecodeError) as info:
        values.split(raw, reg, values=reg.latest("orders-value"), on_error="raise")
    assert (info.value.offset, info.value.schema_id, info.value.path) == (7, 99, "value")


def test_one_dead_letter_per_record_the_value_first_then_the_key() -> None:
    reg = Registry({1: json.dumps(V2), 3: json.dumps(KEY)})
    row = {"id": 1, "customer": "c", "items": [], "status": "NEW", "note": None}
    vals = [framed(1, avro(V2, row)), b"bad value", framed(1, avro(V2, row))]
    keys = [framed(3, avro(KEY, "a")), b"bad key", b"\x00\x00\x00\x00\x03\x07"]  # the last: a string cut short
    raw = kbatch.decode(kbatch.encode(vals, keys=keys)).to_arrow()
    good, dead = values.split(raw, reg, values=1, keys=3)
    assert good.column("key").to_pylist() == ["a"]
    assert dead.column("offset").to_pylist() == [1, 2]
    assert dead.column("column").to_pylist() == ["value", "key"]
    assert dead.column("path").to_pylist() == ["value", "key"]
    assert dead.column("schema_id").to_pylist() == [None, 3]
    assert dead.column("partition").to_pylist() == [None, None]  # a table of no partition: no NaN trouble


def test_decoded_schema_is_known_before_any_record() -> None:
    source = kafka_schema(include_headers=True, extra_columns=True)
    s = values.decoded_schema(source, values=json.dumps(V2), registry=None)
    assert s.names[:3] == ["key", "value", "value_schema_id"] and s.names[3:] == source.names[2:]
    assert s.field("value").type.field("status").type == pa.string()  # Spark's mapping: enum as string
    assert s.field("value").type.field("note").nullable
    assert values.decoded_schema(source, values=7, registry=Registry({7: '"long"'})).field("value").type == pa.int64()
    assert values.decoded_schema(source) == source
    with pytest.raises(ValueError, match="dead-letter column"):
        values.dead_letter_schema(source.append(pa.field("error", pa.string())))
