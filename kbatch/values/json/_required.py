"""Required properties of optional objects: checked after the parse, where the object is present.

``pyarrow.json`` checks a non-nullable field in every slot of its parent, present or not: an
optional object left out (or null) then fails its own ``required`` properties ("a required field
was null"). :func:`relaxed` is the type to parse with instead: every non-nullable field below a
nullable object made nullable (the parser's checks of the others kept); :func:`missing_required`
then names a field that is null where its object is present, on the parsed array, and
:func:`conformed` gives that array the type wanted (Arrow refuses a null in a non-nullable field
even below a null parent: such slots get the type's zero value, as the Avro kernel leaves them).

The maps' paths (DuckDB's JSON functions, ``orjson``) check no nullability at all: there
``everywhere=True`` checks every non-nullable field.

>>> t = pa.struct([pa.field("o", pa.struct([pa.field("r", pa.int64(), nullable=False)]))])
>>> relaxed(t)
StructType(struct<o: struct<r: int64>>)
>>> arr = pa.array([{"o": None}, {"o": {"r": 1}}, {"o": {}}], type=relaxed(t))
>>> missing_required(arr.slice(0, 2), t, "value"), missing_required(arr, t, "value")
(None, 'value.o.r')
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["conformed", "missing_required", "relaxed"]


def relaxed(t: pa.DataType) -> pa.DataType:
    """``t`` with every non-nullable field below a nullable struct field (or nullable list or map
    item) made nullable; the same ``t`` (the same object) where there is none."""
    out = _relax(t, False)
    return t if out == t else out


def _relax(t: pa.DataType, under_null: bool) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_relax(f.type, under_null or f.nullable)).with_nullable(f.nullable or under_null)
                          for f in t])
    # a null list or map has no items: below it, only the items' own nullability counts
    if pa.types.is_map(t):
        item = t.item_field
        return pa.map_(t.key_field, item.with_type(_relax(item.type, item.nullable)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        value = t.value_field
        make = pa.list_ if pa.types.is_list(t) else pa.large_list
        return make(value.with_type(_relax(value.type, value.nullable)))
    return t


def missing_required(arr: pa.Array | pa.ChunkedArray, want: pa.DataType, path: str, *,
                     everywhere: bool = False) -> str | None:
    """The path of a non-nullable field of ``want`` that is null in ``arr`` (of ``want``'s shape,
    any nullability) where its parent is present, or None.

    Parameters
    ----------
    arr : pyarrow.Array or ChunkedArray
        Values parsed with :func:`relaxed` of ``want`` (or built with no check at all).
    want : pyarrow.DataType
        The type whose non-nullable fields are checked.
    path : str
        The path of ``arr`` (``value`` or ``value.field``), the first part of the answer.
    everywhere : bool
        Check every non-nullable field, not only those :func:`relaxed` relaxes; the top-level
        slots of ``arr`` count as present where they are valid.
    """
    if not everywhere and relaxed(want) is want:
        return None
    for chunk in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]):
        found = _missing(chunk, want, path, chunk.is_valid(), False, everywhere)
        if found is not None:
            return found
    return None


def _missing(arr: pa.Array, want: pa.DataType, path: str, present: pa.Array, under_null: bool,
             everywhere: bool) -> str | None:
    """``present``: the slots of ``arr`` (a value of ``want``) that are there, parents included."""
    if not everywhere and _relax(want, under_null) == want:
        return None  # nothing relaxed below: the parser checked it
    if pa.types.is_struct(want):
        for k, f in enumerate(want):
            child = arr.field(k)
            if not f.nullable and (everywhere or under_null) and pc.any(pc.and_(present, child.is_null())).as_py():
                return f"{path}.{f.name}"
            found = _missing(child, f.type, f"{path}.{f.name}", pc.and_(present, child.is_valid()),
                             under_null or f.nullable, everywhere)
            if found is not None:
                return found
        return None
    if pa.types.is_map(want) or pa.types.is_list(want) or pa.types.is_large_list(want):
        item = want.item_field if pa.types.is_map(want) else want.value_field
        there = arr.filter(present)  # the lists (maps) that are there, their items back to back
        offsets = there.offsets
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        items = (there.items if pa.types.is_map(want) else there.values).slice(first, last - first)
        if not item.nullable and everywhere and items.null_count:
            return path
        return _missing(items, item.type, path, items.is_valid(), item.nullable, everywhere)
    return None


def conformed(arr: pa.Array, want: pa.DataType) -> pa.Array:
    """``arr`` (of type :func:`relaxed` of ``want``, checked by :func:`missing_required`) as type
    ``want``: a null left in a non-nullable field (below an absent parent) becomes the zero value."""
    if arr.type == want:
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(want):
        children = []
        for k, f in enumerate(want):
            child = conformed(arr.field(k), f.type)
            if not f.nullable and child.null_count:
                child = pc.coalesce(child, pa.scalar(_zero(f.type), f.type))
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(want), mask=mask)
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        make = pa.ListArray if pa.types.is_list(want) else pa.LargeListArray
        return make.from_arrays(arr.offsets, conformed(arr.values, want.value_type), type=want, mask=mask)
    return arr.view(want)  # (a map is never relaxed: maps are not parsed by pyarrow.json)


def _zero(t: pa.DataType) -> object:
    """The zero value of ``t`` as Python (null where a field may be null)."""
    if pa.types.is_struct(t):
        return {f.name: None if f.nullable else _zero(f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return []
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_floating(t):
        return 0.0
    return 0  # integers, dates, timestamps
