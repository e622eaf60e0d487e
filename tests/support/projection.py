"""Projection (``values.decode(..., fields=...)``) in tests: the field paths a reader offers, drawn
at random, and a whole decode's column cut to them (what a projected decode must equal, type and
values, nulls and empties included)."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

from kbatch.values._fields import FieldTree, field_tree

from .avro_random import resolve


def avro_paths(schema: Any, names: dict[str, Any], prefix: str = "", depth: int = 3) -> list[str]:
    """Every field path of an Avro record schema (JSON; named types by ``names``), into nested
    records (also through a union of null and one record) ``depth`` levels deep."""
    t = resolve(schema, names)
    if isinstance(t, list):
        others = [resolve(b, names) for b in t if b != "null"]
        if len(others) != 1:
            return []
        t = others[0]
    if not isinstance(t, dict) or t.get("type") not in ("record", "error"):
        return []
    out = []
    for f in t["fields"]:
        path = prefix + f["name"]
        out.append(path)
        if depth > 1:
            out += avro_paths(f["type"], names, path + ".", depth - 1)
    return out


def struct_paths(t: pa.DataType, prefix: str = "", depth: int = 3) -> list[str]:
    """Every field path of an Arrow struct type, into nested structs ``depth`` levels deep (JSON
    and Protobuf readers: their records are the structs)."""
    out = []
    for f in t:
        path = prefix + f.name
        out.append(path)
        if depth > 1 and pa.types.is_struct(f.type):
            out += struct_paths(f.type, path + ".", depth - 1)
    return out


def draw_fields(rng: random.Random, paths: list[str]) -> list[str]:
    """One to four of ``paths`` in random order, now and then with a path's ancestor or a
    repeat (the ancestor keeps the whole field)."""
    fields = rng.sample(paths, rng.randint(1, min(4, len(paths))))
    if rng.random() < 0.2 and "." in fields[0]:
        fields.append(fields[0].rsplit(".", 1)[0])
    if rng.random() < 0.1:
        fields.append(fields[0])
    return fields


def select(column: pa.Array | pa.ChunkedArray, fields: list[str]) -> pa.Array:
    """A whole decode's struct column with only ``fields`` (nested structs likewise)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return _select(arr, field_tree(fields))


def _select(arr: pa.Array, tree: FieldTree | None) -> pa.Array:
    if tree is None:
        return arr
    keep = dict(tree)
    children, fields = [], []
    for i, f in enumerate(arr.type):
        if f.name in keep:
            child = _select(arr.field(i), keep[f.name])
            children.append(child)
            fields.append(pa.field(f.name, child.type, f.nullable))
    if not children:  # (from_arrays of no children has no rows: a field max_depth cut is all that was kept)
        return pa.array([{} if v else None for v in arr.is_valid().to_pylist()], pa.struct([]))
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null() if arr.null_count else None)


def same(a: pa.Array, b: pa.Array) -> bool:
    """Equal type and values, a NaN equal to a NaN (a corrupt float may be one), no value made a
    Python object (a corrupt date may be one Python cannot hold). The slots below a null struct
    hold no value (Arrow leaves them unspecified: a field taken by another decoding path, as a
    projection may do, fills them otherwise) and are compared as nulls."""
    return a.type == b.type and _hidden_null(a).to_string(window=1 << 30, container_window=1 << 30) == \
        _hidden_null(b).to_string(window=1 << 30, container_window=1 << 30)


def _hidden_null(arr: pa.Array) -> pa.Array:
    """``arr`` with the slots of a struct's fields below a null struct null (recursively)."""
    # (pyarrow's flatten aborts the process on a struct of no fields, itself or a child, and on a
    # union child below a null: such a struct is left as it is)
    if pa.types.is_struct(arr.type) and arr.type.num_fields and not any(
            (pa.types.is_struct(f.type) and not f.type.num_fields) or pa.types.is_union(f.type) for f in arr.type):
        children = [_hidden_null(c) for c in arr.flatten()]
        return pa.StructArray.from_arrays(children, fields=list(arr.type),
                                          mask=arr.is_null() if arr.null_count else None)
    return arr


def assert_projected(whole: pa.Table, part: pa.Table, fields: list[str], column: str = "value") -> None:
    """``part`` (decoded with ``fields``) against ``whole`` (decoded with every field), both with
    ``errors="null"``: a record the projection cannot decode the whole decode cannot either; where
    the whole decode has a value, the projection has that value's fields, of the same types."""
    got = part.column(column).combine_chunks()
    got.validate(full=True)
    want = select(whole.column(column), fields)
    assert got.type == want.type, (got.type, want.type)
    whole_errors = whole.column(f"{column}_error").to_pylist()
    part_errors = part.column(f"{column}_error").to_pylist()
    for i, (w, p) in enumerate(zip(whole_errors, part_errors, strict=True)):
        assert p is None or w is not None, (i, p)
    ok = pa.array([e is None for e in whole_errors])
    assert same(got.filter(ok), want.filter(ok))
    assert part.column(f"{column}_schema_id").equals(whole.column(f"{column}_schema_id"))
