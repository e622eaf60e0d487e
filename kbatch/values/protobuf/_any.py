"""``google.protobuf.Any`` values as JSON strings (Spark's ``convert.any.fields.to.json``).

The kernel decodes an Any as its struct ``<type_url, value>``; here, after the kernel, each
non-null one is rendered by protobuf's ``json_format`` with the schema's descriptor pool (the
packed message's fields and its ``@type``, compact as Java's ``JsonFormat.printer()
.omittingInsignificantWhitespace()`` which Spark uses). Any fields are rare: a Python loop over
them is the slow path. A type URL naming no message of the pool, or a value that does not parse
as that message, is the record's error.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow_build import build_array
from ._compile import ProtoProgram
from ._protokernel import KINDS

__all__ = ["render_any_columns"]

_LIST = KINDS["LIST"]


def _records(program: ProtoProgram, columns: list[tuple[Any, ...]], col: int,
             items: np.ndarray) -> np.ndarray:
    """The record (row of the root column) of each item ``items`` of column ``col``."""
    layout = program.layout
    while col != 0:
        parent = layout.columns[col].parent
        if layout.columns[parent].kind == _LIST:
            offsets = np.frombuffer(columns[parent][3], dtype=np.int32)
            items = np.searchsorted(offsets, items, side="right") - 1
        col = parent
    return items


def _path(program: ProtoProgram, col: int, column: str) -> str:
    names = []
    layout = program.layout
    while col != 0:
        parent = layout.columns[col].parent
        if layout.columns[parent].kind != _LIST:  # a list's item has no name of its own
            names.append(layout.columns[col].name)
        col = parent
    return ".".join([column, *reversed(names)])


def _null_records(columns: list[tuple[Any, ...]], records: np.ndarray) -> None:
    """Clear the root column's validity bits of ``records`` (a record in error is a null value)."""
    n, valid, *rest = columns[0]
    bits = (np.full((n + 7) // 8, 0xFF, np.uint8) if valid is None else
            np.frombuffer(valid, dtype=np.uint8)[:(n + 7) // 8].copy())
    for r in records.tolist():
        bits[r >> 3] &= np.uint8(0xFF ^ (1 << (r & 7)))
    columns[0] = (n, bits.tobytes(), *rest)


def render_any_columns(program: ProtoProgram, columns: list[tuple[Any, ...]], column: str,
                       errors: dict[int, tuple[str, str, int]]) -> None:
    """Replace, in ``columns``, each Any struct column of ``program`` by the string buffers of its
    JSON (null where the struct is null or cannot be rendered); the records whose Any cannot be
    rendered get an error in ``errors`` (unless they have one already)."""
    from google.protobuf import any_pb2, json_format  # type: ignore[import-untyped,unused-ignore]

    pool = program.schema.pool
    layout = program.layout
    for col in program.any_columns:
        c = layout.columns[col]
        n, valid = columns[col][0], columns[col][1]
        type_urls = build_array(layout, columns, c.children[0]).to_pylist()
        values = build_array(layout, columns, c.children[1]).to_pylist()
        present = (np.ones(n, bool) if valid is None or not c.nullable else
                   np.asarray(pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(valid)]), dtype=bool))
        out: list[str | None] = [None] * n
        bad: list[tuple[int, str]] = []
        for i in np.flatnonzero(present).tolist():
            packed = any_pb2.Any(type_url=type_urls[i] or "", value=values[i] or b"")
            try:
                out[i] = json.dumps(json_format.MessageToDict(packed, descriptor_pool=pool), separators=(",", ":"),
                                    ensure_ascii=False)
            except Exception as exc:  # noqa: BLE001 - json_format's TypeError, upb's DecodeError
                bad.append((i, f"the google.protobuf.Any of type {type_urls[i]!r} cannot be rendered as JSON: {exc}"))
        if bad:
            records = _records(program, columns, col, np.array([i for i, _ in bad], dtype=np.int64))
            for record, (_, reason) in zip(records.tolist(), bad, strict=True):
                errors.setdefault(int(record), (reason, _path(program, col, column), -1))
            _null_records(columns, records)
        strings = pa.array(out, pa.string())
        validity, offsets, data = strings.buffers()
        columns[col] = (n, validity, None, offsets, data)
