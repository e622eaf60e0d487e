"""The value kernel's column buffers as Arrow arrays (no copy: Arrow takes the kernel's buffers).

Every column comes back from the kernel as ``(length, validity, values, offsets, data)``; a
:class:`~kbatch.values.avro._layout.Layout` says what each is. Nested arrays are built from the
leaves up with ``pyarrow.Array.from_buffers``. Under the ``"arrow"`` mapping two kinds of
column are then reshaped: an enum's strings become a dictionary of the reader's symbols, and a
union's struct of members (one slot per member per value, the branch taken valid) becomes a
dense union (the taken member's values only).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .avro import BIN, BOOL, FIXEDW, LIST, NULLT, STRUCT, Layout

__all__ = ["build_array"]

_EMPTY = pa.py_buffer(b"\0" * 8)


def _buf(obj: Any) -> pa.Buffer | None:
    return None if obj is None else pa.py_buffer(obj)


def build_array(layout: Layout, columns: list[tuple[Any, ...]], col: int = 0) -> pa.Array:
    """Column ``col`` (the root by default) as an Arrow array of ``layout.arrow_type(col)``."""
    c = layout.columns[col]
    n, valid, vals, offs, data = columns[col]
    validity = _buf(valid) if c.nullable else None
    if c.kind == NULLT:
        return pa.nulls(n)
    if c.kind in (BOOL, FIXEDW):
        return pa.Array.from_buffers(layout.arrow_type(col), n, [validity, _buf(vals) or _EMPTY])
    if c.kind == BIN:
        strings = pa.Array.from_buffers(c.arrow, n, [validity, _buf(offs), _buf(data) or _EMPTY])
        return _dictionary(strings, c.symbols) if c.convert == "dictionary" else strings
    if c.convert == "any_json":  # a Protobuf Any rendered as JSON: its string buffers replace the struct's
        return pa.Array.from_buffers(pa.string(), n, [validity, _buf(offs), _buf(data) or _EMPTY])
    children = [build_array(layout, columns, child) for child in c.children if not layout.columns[child].hidden]
    if c.convert == "dense_union":
        return _dense_union(layout, col, n, children)
    atype = layout.arrow_type(col)
    if c.kind == STRUCT:
        return pa.Array.from_buffers(atype, n, [validity], children=children)
    assert c.kind == LIST
    return pa.Array.from_buffers(atype, n, [validity, _buf(offs)], children=children)


def _dictionary(strings: pa.Array, symbols: tuple[str, ...]) -> pa.DictionaryArray:
    """An enum's symbol strings as int32 indexes into the reader's symbols (in their order)."""
    dictionary = pa.array(symbols, pa.string())
    indices = pc.index_in(strings, value_set=dictionary).cast(pa.int32())
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def _dense_union(layout: Layout, col: int, n: int, members: list[pa.Array]) -> pa.UnionArray:
    """A struct of ``members`` (the branch taken valid, the others null) as a dense union; a
    value with no member (the null branch, or a parent that is null) points at the null child,
    or, when the union has no null branch, at a null item of the first member."""
    c = layout.columns[col]
    spare = c.null_code if c.null_code >= 0 else 0
    types = np.full(n, spare, dtype=np.int8)
    for k in range(len(members) - 1, -1, -1):
        mask = np.asarray(members[k].is_valid(), dtype=bool) if members[k].null_count else np.ones(n, bool)
        types[mask] = k
    offsets = np.zeros(n, dtype=np.int32)
    children = []
    names = [layout.columns[child].name for child in c.children]
    for k in range(len(members) + (1 if c.null_code >= 0 else 0)):
        where = types == k
        count = int(where.sum())
        offsets[where] = np.arange(count, dtype=np.int32)
        children.append(pa.nulls(count) if k == c.null_code else members[k].filter(pa.array(where)))
    if c.null_code >= 0:
        names.append("null")
    return pa.UnionArray.from_dense(pa.array(types, pa.int8()), pa.array(offsets, pa.int32()), children, names)
