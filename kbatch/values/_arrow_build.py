"""The value kernel's column buffers as Arrow arrays (no copy: Arrow takes the kernel's buffers).

Every column comes back from the kernel as ``(length, validity, values, offsets, data)``; a
:class:`~kbatch.values._avro_layout.Layout` says what each is. Nested arrays are built from the
leaves up with ``pyarrow.Array.from_buffers``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ._avro_layout import BIN, BOOL, FIXEDW, LIST, NULLT, STRUCT, Layout

__all__ = ["build_array"]

_EMPTY = pa.py_buffer(b"\0" * 8)


def _buf(obj: Any) -> pa.Buffer | None:
    return None if obj is None else pa.py_buffer(obj)


def build_array(layout: Layout, columns: list[tuple[Any, ...]], col: int = 0) -> pa.Array:
    """Column ``col`` (the root by default) as an Arrow array of ``layout.arrow_type(col)``."""
    c = layout.columns[col]
    n, valid, vals, offs, data = columns[col]
    atype = layout.arrow_type(col)
    validity = _buf(valid) if c.nullable else None
    if c.kind == NULLT:
        return pa.nulls(n)
    if c.kind in (BOOL, FIXEDW):
        return pa.Array.from_buffers(atype, n, [validity, _buf(vals) or _EMPTY])
    if c.kind == BIN:
        return pa.Array.from_buffers(atype, n, [validity, _buf(offs), _buf(data) or _EMPTY])
    children = [build_array(layout, columns, child) for child in c.children]
    if c.kind == STRUCT:
        return pa.Array.from_buffers(atype, n, [validity], children=children)
    assert c.kind == LIST
    return pa.Array.from_buffers(atype, n, [validity, _buf(offs)], children=children)
