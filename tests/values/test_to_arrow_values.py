"""``RecordTable.to_arrow(values=..., keys=...)`` and ``LogDir.to_arrow(values=...)``: typed
columns in one step, the same as ``values.decode``."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from support.avro_values import framed, read, registry_of, table_of, write

import kbatch
from kbatch import values
from kbatch.log import LogWriter, open_log
from kbatch.values import ValueDecodeError

pytest.importorskip("fastavro")

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"]}]}  # fmt: skip
KEY = {"type": "record", "name": "Key", "fields": [{"name": "k", "type": "int"}]}


def orders(n: int) -> list[bytes]:
    return [framed(1, write(ORDER, {"id": i, "tag": None if i % 3 else f"t{i}"})) for i in range(n)]


def test_to_arrow_with_values_is_decode() -> None:
    table = table_of([*orders(5), None, b"junk"])
    reg = registry_of(ORDER)
    got = table.to_arrow(values=reg, errors="null")
    assert got.equals(values.decode(table, reg, errors="null"))
    assert got.column("value").to_pylist()[:2] == [read(ORDER, write(ORDER, {"id": 0, "tag": "t0"})),
                                                   {"id": 1, "tag": None}]
    at = got.column_names.index("value")
    assert got.column_names[at : at + 3] == ["value", "value_schema_id", "value_error"]
    assert got.column("value_error").to_pylist()[5:] == [None, got.column("value_error")[6].as_py()]
    assert got.column("value_error")[6].as_py().startswith("no schema registry frame")


def test_keys_and_values_with_their_own_registries_and_reader_schemas() -> None:
    keys = [framed(9, write(KEY, {"k": i})) for i in range(3)]
    table = table_of(orders(3), keys=keys)
    reader = {**ORDER, "fields": [ORDER["fields"][0], {"name": "extra", "type": "int", "default": 7}]}
    out = table.to_arrow(values=registry_of(ORDER), keys=registry_of(KEY, 9), reader_schema=json.dumps(reader),
                         topic="orders", partition=3)
    assert out.column("key").to_pylist() == [{"k": 0}, {"k": 1}, {"k": 2}]
    assert out.column("key_schema_id").to_pylist() == [9, 9, 9]
    assert out.column("value").to_pylist() == [{"id": i, "extra": 7} for i in range(3)]
    assert out.column("topic").to_pylist() == ["orders"] * 3 and out.column("partition").to_pylist() == [3] * 3
    names = out.column_names
    assert names.index("key_schema_id") == names.index("key") + 1
    assert names.index("value_schema_id") == names.index("value") + 1


def test_the_other_options_of_to_arrow_still_apply() -> None:
    table = table_of(orders(2), keys=[b"a", b"b"], headers=[[("h", b"1")], []])
    out = table.to_arrow(values=registry_of(ORDER), include_headers=False)
    assert "headers" not in out.column_names
    assert out.schema.field("key").type == pa.binary()  # not decoded: to_arrow's type
    view = table.to_arrow(values=registry_of(ORDER), binary="binary_view")
    assert view.schema.field("key").type == pa.binary_view()


def test_errors_raise_by_default_naming_the_record() -> None:
    table = table_of([*orders(2), b"\x00\x00\x00\x00\x01\xff"])
    with pytest.raises(ValueDecodeError, match=r"offset 2"):
        table.to_arrow(values=registry_of(ORDER))


def test_something_other_than_a_registry_is_refused() -> None:
    with pytest.raises(TypeError, match=r"kbatch\.values\.Registry"):
        table_of(orders(1)).to_arrow(values={1: json.dumps(ORDER)})  # type: ignore[arg-type]


def test_logdir_to_arrow_decodes_values_with_its_topic_and_partition(tmp_path) -> None:
    with LogWriter(tmp_path, "orders", 2) as w:
        w.append(kbatch.encode(orders(4)))
        w.append(kbatch.encode(orders(2)), assign_offsets=True)
    log = open_log(tmp_path / "orders-2")
    out = log.to_arrow(values=registry_of(ORDER), mapping="arrow", start_offset=3)
    assert out.column("offset").to_pylist() == [3, 4, 5]
    assert out.column("value").to_pylist() == [{"id": 3, "tag": "t3"}, {"id": 0, "tag": "t0"}, {"id": 1, "tag": None}]
    assert set(out.column("topic").to_pylist()) == {"orders"} and set(out.column("partition").to_pylist()) == {2}
    plain = log.to_arrow(start_offset=3)
    assert plain.schema.field("value").type == pa.binary()
