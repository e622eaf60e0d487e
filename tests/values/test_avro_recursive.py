"""Recursive Avro schemas: refused by default with the option named, cut at ``max_depth`` as
Spark's ``recursiveFieldMaxDepth`` cuts them, the deeper levels' bytes skipped (data written by
fastavro)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from support.avro_values import framed, registry_of, table_of, write

from kbatch import values
from kbatch.values import AvroSchemaError

pytest.importorskip("fastavro")

NODE = {"type": "record", "name": "Node", "fields": [
    {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}  # fmt: skip
TREE = {"type": "record", "name": "Tree", "fields": [
    {"name": "v", "type": "int"}, {"name": "kids", "type": {"type": "array", "items": "Tree"}},
    {"name": "tail", "type": "string"}]}  # fmt: skip


def chain(k: int) -> dict | None:
    node = None
    for i in reversed(range(k)):
        node = {"v": i, "next": node}
    return node


def cut(node: dict | None, depth: int) -> dict | None:
    """What Spark's recursiveFieldMaxDepth keeps of a linked list: ``depth`` nodes, the last
    without its ``next``."""
    if node is None:
        return None
    if depth == 1:
        return {"v": node["v"]}
    return {"v": node["v"], "next": cut(node["next"], depth - 1)}


def test_without_max_depth_a_recursive_schema_is_refused_naming_the_option() -> None:
    with pytest.raises(AvroSchemaError, match=r"recursive type 'Node'.*max_depth="):
        values.decode(table_of([framed(1, write(NODE, chain(2)))]), registry_of(NODE))


@pytest.mark.parametrize("depth", [1, 2, 3, 15])
def test_a_linked_list_is_cut_at_the_depth(depth: int) -> None:
    lists = [chain(k) for k in (1, 2, 3, 40)]
    table = table_of([framed(1, write(NODE, x)) for x in lists])
    out = values.decode(table, registry_of(NODE), max_depth=depth)
    assert out.column("value").to_pylist() == [cut(x, depth) for x in lists]
    t = out.schema.field("value").type
    for _ in range(depth - 1):
        t = t.field("next").type
    assert t == pa.struct([pa.field("v", pa.int32(), nullable=False)])  # the deepest level has no next


def test_a_tree_keeps_the_fields_after_the_skipped_levels() -> None:
    tree = {"v": 1, "tail": "a", "kids": [
        {"v": 2, "tail": "b", "kids": [{"v": 3, "tail": "c", "kids": [{"v": 5, "tail": "e", "kids": []}]}]},
        {"v": 4, "tail": "d", "kids": []}]}  # fmt: skip
    table = table_of([framed(1, write(TREE, tree)), framed(1, write(TREE, {"v": 0, "tail": "z", "kids": []}))])
    one = values.decode(table, registry_of(TREE), max_depth=1).column("value").to_pylist()
    assert one == [{"v": 1, "tail": "a"}, {"v": 0, "tail": "z"}]
    two = values.decode(table, registry_of(TREE), max_depth=2).column("value").to_pylist()
    assert two[0] == {"v": 1, "tail": "a", "kids": [{"v": 2, "tail": "b"}, {"v": 4, "tail": "d"}]}


def test_a_writer_recursive_where_the_reader_is_not_is_skipped_without_max_depth() -> None:
    reader = {"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"}]}
    table = table_of([framed(1, write(NODE, chain(5)))])
    out = values.decode(table, registry_of(NODE), reader_schema=json.dumps(reader))
    assert out.column("value").to_pylist() == [{"v": 0}]


def test_data_nested_deeper_than_the_kernel_goes_is_an_error_for_its_record_only() -> None:
    table = table_of([framed(1, write(NODE, chain(200))), framed(1, write(NODE, chain(2)))])
    out = values.decode(table, registry_of(NODE), max_depth=1, errors="null")
    assert out.column("value").to_pylist() == [None, {"v": 0}]
    assert "nested deeper than 64" in out.column("value_error")[0].as_py()


@pytest.mark.parametrize("bad", [0, 16, -1, True])
def test_max_depth_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="max_depth must be 1 to 15"):
        values.decode(table_of([framed(1, write(NODE, chain(1)))]), registry_of(NODE), max_depth=bad)


def test_a_union_member_cut_at_the_depth_leaves_the_others_their_names() -> None:
    """As Spark's SchemaConverters: members are named by their place among the union's branches,
    and a member cut at the depth is left out without renaming the ones after it."""
    schema = {"type": "record", "name": "U", "fields": [
        {"name": "v", "type": ["int", "U", "string"]}]}  # fmt: skip
    values_ = [{"v": 5}, {"v": {"v": "deep"}}, {"v": "s"}]
    out = values.decode(table_of([framed(1, write(schema, x)) for x in values_]), registry_of(schema), max_depth=1)
    assert out.schema.field("value").type.field("v").type == pa.struct([("member0", pa.int32()),
                                                                         ("member2", pa.string())])
    assert out.column("value").to_pylist() == [{"v": {"member0": 5, "member2": None}},
                                               {"v": {"member0": None, "member2": None}},
                                               {"v": {"member0": None, "member2": "s"}}]
